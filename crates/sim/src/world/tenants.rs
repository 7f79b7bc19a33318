//! Tenants: organizations that join a running world (EmulatorService CreateTenant), each for one
//! test on a shared emulator. A tenant brings a Slurm user and gets its own copy of every runner
//! the values share with tenants, so runner ids from the values work for it and its policy edits
//! stay its own.

use crate::error::{SimError, SimResult};
use crate::slurm::User;
use crate::world::World;
use cwsandbox_api::Reason;

/// Who a tenant is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    /// Its organization.
    pub org: String,
    /// Its user (also its Slurm user).
    pub user: String,
    /// The user's uid.
    pub uid: u32,
}

impl World {
    /// The tenant joins: its Slurm user (account: the organization) and its runners. Returns
    /// the ids of the runners created for it. A uid Slurm knows under another name is refused.
    pub fn admit_tenant(&mut self, tenant: &TenantSpec) -> SimResult<Vec<String>> {
        if let Some(known) = self.slurm.users.get(&tenant.uid)
            && *known.name != *tenant.user
        {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("uid {} is Slurm user {:?}, not {:?}", tenant.uid, known.name, tenant.user),
            });
        }
        if self.runners.iter(&tenant.org).next().is_some() {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("organization {:?} already has runners", tenant.org),
            });
        }
        self.slurm.users.entry(tenant.uid).or_insert_with(|| User {
            name: tenant.user.as_str().into(),
            uid: tenant.uid,
            group: tenant.user.as_str().into(),
            gid: tenant.uid,
            default_account: tenant.org.as_str().into(),
        });
        let mut runner_ids: Vec<String> = Vec::new();
        for (index, runner) in self.values.runners.clone().iter().enumerate() {
            if !runner.tenants || runner_ids.contains(&runner.runner_id) {
                continue;
            }
            self.create_configured_runner(&tenant.org, index, runner)?;
            runner_ids.push(runner.runner_id.clone());
        }
        self.runners.advance(self.now);
        self.settle();
        Ok(runner_ids)
    }

    /// Whether a uid is free for a new tenant (no Slurm user has it).
    pub fn uid_is_free(&self, uid: u32) -> bool {
        !self.slurm.users.contains_key(&uid)
    }

    /// The tenant leaves: its part of the world is reset ([`World::reset_organization`]) and its
    /// runners are forgotten. Its Slurm user stays, so accounting still names it. Returns the
    /// Pods whose processes were stopped.
    pub fn dismiss_tenant(&mut self, org: &str) -> usize {
        let stopped = self.reset_organization(org);
        self.runners.forget_organization(org);
        self.sandboxes.forget_policies(org);
        self.settle();
        stopped
    }
}
