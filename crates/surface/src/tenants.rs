//! Tenants created at run time (EmulatorService CreateTenant): an organization per test on a
//! shared emulator, with a user token and an admin token that work until DeleteTenant.
//!
//! The registry is the emulator's (tokens are not the simulation's business); the world learns of
//! a tenant through `World::admit_tenant` (its Slurm user and runners) and forgets its part
//! through `World::dismiss_tenant`. A full Reset keeps the tenants: the fresh world admits them
//! again.

use std::collections::{BTreeMap, HashMap};

use cwsandbox_sim::time::SimTime;
use cwsandbox_sim::world::TenantSpec;

use crate::auth::{Principal, Role, random_token};

/// Where automatically chosen tenant uids start (above the scenarios' Slurm users).
pub const FIRST_TENANT_UID: u32 = 20_000;

/// One tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// Organization, user and uid.
    pub spec: TenantSpec,
    /// Roles of the user token.
    pub roles: Vec<Role>,
    /// The user's token.
    pub user_token: String,
    /// The same user with `sandbox_admin`.
    pub admin_token: String,
    /// Runners created for it.
    pub runner_ids: Vec<String>,
    /// When it was created.
    pub created: SimTime,
}

impl Tenant {
    /// A new tenant with fresh random tokens.
    pub fn new(spec: TenantSpec, roles: Vec<Role>, created: SimTime) -> Tenant {
        Tenant {
            spec,
            roles,
            user_token: random_token("cwsbx-tenant-user-"),
            admin_token: random_token("cwsbx-tenant-admin-"),
            runner_ids: Vec::new(),
            created,
        }
    }

    fn principals(&self) -> [(String, Principal); 2] {
        let principal = |roles: Vec<Role>| Principal {
            org: self.spec.org.clone(),
            user: self.spec.user.clone(),
            uid: self.spec.uid,
            roles,
        };
        [
            (self.user_token.clone(), principal(self.roles.clone())),
            (self.admin_token.clone(), principal(vec![Role::SandboxAdmin, Role::SandboxUser])),
        ]
    }
}

/// The tenants, by organization, and their tokens.
#[derive(Debug, Default)]
pub struct Tenants {
    by_org: BTreeMap<String, Tenant>,
    /// Creation order, for listings.
    order: Vec<String>,
    by_token: HashMap<String, Principal>,
    /// How many organization names were drawn (`tenant-<n>`).
    drawn: u64,
}

impl Tenants {
    /// The principal of a tenant's token.
    pub fn principal(&self, token: &str) -> Option<&Principal> {
        self.by_token.get(token)
    }

    /// A tenant by organization.
    pub fn get(&self, org: &str) -> Option<&Tenant> {
        self.by_org.get(org)
    }

    /// Tenants in creation order.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.order.iter().filter_map(|org| self.by_org.get(org))
    }

    /// Whether a uid is some tenant's.
    pub fn uid_taken(&self, uid: u32) -> bool {
        self.by_org.values().any(|tenant| tenant.spec.uid == uid)
    }

    /// The next `tenant-<n>` no one uses (`taken` says which names the configuration holds).
    pub fn draw_org(&mut self, taken: impl Fn(&str) -> bool) -> String {
        loop {
            self.drawn += 1;
            let name = format!("tenant-{}", self.drawn);
            if !taken(&name) && !self.by_org.contains_key(&name) {
                return name;
            }
        }
    }

    /// Records a tenant; its tokens work from now on.
    pub fn insert(&mut self, tenant: Tenant) {
        for (token, principal) in tenant.principals() {
            self.by_token.insert(token, principal);
        }
        self.order.push(tenant.spec.org.clone());
        self.by_org.insert(tenant.spec.org.clone(), tenant);
    }

    /// Removes a tenant; its tokens stop working at once.
    pub fn remove(&mut self, org: &str) -> Option<Tenant> {
        let tenant = self.by_org.remove(org)?;
        self.order.retain(|other| other != org);
        self.by_token.remove(&tenant.user_token);
        self.by_token.remove(&tenant.admin_token);
        Some(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(org: &str) -> TenantSpec {
        TenantSpec { org: org.to_owned(), user: "u".to_owned(), uid: FIRST_TENANT_UID }
    }

    #[test]
    fn tokens_work_from_insert_until_remove() {
        let mut tenants = Tenants::default();
        let tenant = Tenant::new(spec("t1"), vec![Role::SandboxUser], SimTime(0));
        let (user, admin) = (tenant.user_token.clone(), tenant.admin_token.clone());
        tenants.insert(tenant);
        assert_eq!(tenants.principal(&user).map(|principal| principal.roles.clone()), Some(vec![Role::SandboxUser]));
        assert!(tenants.principal(&admin).is_some_and(|principal| principal.has(Role::SandboxAdmin)));
        assert!(tenants.uid_taken(FIRST_TENANT_UID));
        assert!(tenants.remove("t1").is_some());
        assert!(tenants.principal(&user).is_none() && tenants.principal(&admin).is_none());
        assert!(tenants.remove("t1").is_none());
    }

    #[test]
    fn drawn_names_skip_taken_ones() {
        let mut tenants = Tenants::default();
        assert_eq!(tenants.draw_org(|name| name == "tenant-1"), "tenant-2");
        tenants.insert(Tenant::new(spec("tenant-3"), vec![Role::SandboxUser], SimTime(0)));
        assert_eq!(tenants.draw_org(|_| false), "tenant-4");
    }
}
