//! Who calls: the IAM roles of the Sandbox API and the principal a token or a certificate stands
//! for. Plain data, below everything that authenticates or authorizes (`crate::auth`) and the
//! direct data plane's grants (`crate::direct`).

use cwsandbox_sim::query::Scope;
use cwsandbox_sim::sandbox::Owner;
use serde::Deserialize;

/// An IAM role of the Sandbox API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, schemars::JsonSchema)]
pub enum Role {
    /// The cluster operator: the emulator's own API over every organization, and the calls that
    /// change the whole cluster.
    #[serde(rename = "cluster_admin")]
    ClusterAdmin,
    /// Administers its organization's runners and policies (and its part of the emulator's own
    /// API); includes `sandbox_user`.
    #[serde(rename = "sandbox_admin")]
    SandboxAdmin,
    /// Creates and uses sandboxes.
    #[serde(rename = "sandbox_user")]
    SandboxUser,
}

impl Role {
    /// The role's name as IAM spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ClusterAdmin => "cluster_admin",
            Role::SandboxAdmin => "sandbox_admin",
            Role::SandboxUser => "sandbox_user",
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Organization.
    pub org: String,
    /// User name.
    pub user: String,
    /// Numeric uid.
    pub uid: u32,
    /// Roles.
    pub roles: Vec<Role>,
}

impl Principal {
    /// Whether the principal holds `role` (admins hold `sandbox_user` too).
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role) || (role == Role::SandboxUser && self.roles.contains(&Role::SandboxAdmin))
    }

    /// Whose objects the caller sees in the emulator's own API: everything for `cluster_admin`,
    /// else its organization's part.
    pub fn scope(&self) -> Scope {
        if self.has(Role::ClusterAdmin) { Scope::Cluster } else { Scope::Organization(self.org.clone()) }
    }

    /// The simulation's view of the caller.
    pub fn owner(&self) -> Owner {
        Owner { org: self.org.clone(), user: self.user.clone() }
    }
}
