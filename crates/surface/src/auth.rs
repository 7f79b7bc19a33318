//! Identity: bearer tokens map to principals (organization, user, uid, roles).
//!
//! Every RPC (streams included) carries `authorization: Bearer <token>`. No header, another
//! scheme or an unknown token is UNAUTHENTICATED. Three roles:
//!
//! - `sandbox_user`: sandboxes, the data plane and discovery, in the caller's organization.
//! - `sandbox_admin` (includes `sandbox_user`): RunnerManagementService, and the emulator's own
//!   API (EmulatorService, the kube facade) scoped to the caller's organization
//!   ([`Scope::Organization`]): its sandboxes' Pods, Events and Slurm jobs, Nodes and Slurm
//!   nodes as cluster information; a Reset resets only that organization.
//! - `cluster_admin`: the cluster operator. The emulator's own API over every organization, and
//!   the calls that change the whole cluster (ApplyValues, the clock, ResumeNode, DrainNode, a full Reset).
//!   It does not include the other two; the generated admin token holds all three.
//!
//! A principal sees only its organization's sandboxes and runners.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use connectrpc_axum::ConnectError;
use http::request::Parts;

use crate::catalogue::{Access, Method};
use crate::direct::Grant;
use crate::errors::ApiError;
pub use crate::identity::{Principal, Role};

/// The accepted tokens, and the accepted W&B API keys.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_token: HashMap<String, Principal>,
    /// Tokens in configuration order, for the ready file.
    ordered: Vec<(String, Principal)>,
    wandb: WandbKeys,
}

/// The W&B credentials of a request, as the published client's W&B auth sends them.
#[derive(Debug, Clone, Copy, Default)]
pub struct WandbCredentials<'a> {
    /// `x-wandb-api-key`.
    pub api_key: &'a str,
    /// `x-entity-id`, if sent: the entity the call acts for.
    pub entity: Option<&'a str>,
    /// `x-wandb-host`, if sent: the W&B server the key is of (none: W&B's cloud).
    pub host: Option<&'a str>,
}

/// One W&B API key's access to one entity.
#[derive(Debug, Clone)]
struct WandbGrant {
    entity: String,
    principal: Principal,
}

/// The accepted W&B API keys: each key's server and its entities in configuration order (the
/// first is the key's default entity).
#[derive(Debug, Clone, Default)]
pub struct WandbKeys {
    by_key: HashMap<String, (String, Vec<WandbGrant>)>,
}

impl WandbKeys {
    /// Accepts `api_key` of W&B server `host` ("" for W&B's cloud) for `entity`, as `principal`.
    pub fn insert(&mut self, api_key: String, entity: String, host: String, principal: Principal) {
        let (_, grants) = self.by_key.entry(api_key).or_insert_with(|| (host, Vec::new()));
        grants.push(WandbGrant { entity, principal });
    }

    /// The principal of W&B credentials: an unknown key, or a key of another W&B server, is
    /// UNAUTHENTICATED; an entity the key has no access to is PERMISSION_DENIED.
    pub fn authenticate(&self, credentials: WandbCredentials<'_>) -> Result<Principal, ApiError> {
        let unknown = || {
            ApiError::unauthenticated(
                "unknown W&B API key (x-wandb-api-key): the values' auth.wandbKeys list the accepted keys",
            )
            .with_metadata("credentials", "wandb")
        };
        let (host, grants) = self.by_key.get(credentials.api_key.trim()).ok_or_else(unknown)?;
        let asked_host = credentials.host.map(str::trim).unwrap_or_default();
        if !asked_host.eq_ignore_ascii_case(host) {
            let server = |name: &str| if name.is_empty() { "W&B's cloud".to_owned() } else { format!("{name:?}") };
            return Err(ApiError::unauthenticated(format!(
                "the W&B API key is of {}, not of {} (x-wandb-host)",
                server(host),
                server(asked_host)
            ))
            .with_metadata("credentials", "wandb"));
        }
        let grant = match credentials.entity.map(str::trim) {
            None | Some("") => grants.first(),
            Some(entity) => grants.iter().find(|grant| grant.entity == entity),
        };
        match grant {
            Some(grant) => Ok(grant.principal.clone()),
            None => Err(ApiError::new(
                tonic::Code::PermissionDenied,
                cwsandbox_sim::Reason::PermissionDenied,
                format!(
                    "the W&B API key has no access to entity {:?} (x-entity-id); it has {}",
                    credentials.entity.unwrap_or_default(),
                    grants.iter().map(|grant| format!("{:?}", grant.entity)).collect::<Vec<_>>().join(", ")
                ),
            )
            .with_metadata("credentials", "wandb")),
        }
    }
}

/// The operator's token under `serve --dev-tokens`.
pub const DEV_ADMIN_TOKEN: &str = "cwsbx-dev-admin";
/// The user's token under `serve --dev-tokens`.
pub const DEV_USER_TOKEN: &str = "cwsbx-dev-user";

/// The tokens generated when none are configured.
#[derive(Debug, Clone)]
pub struct GeneratedTokens {
    /// Holds `cluster_admin`, `sandbox_admin` and `sandbox_user`.
    pub admin: String,
    /// Holds `sandbox_user`.
    pub user: String,
}

/// A random token with a readable prefix.
pub(crate) fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 24];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to time and address entropy (local emulator tokens only).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0)
            ^ (&bytes as *const _ as usize as u128);
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = (seed >> ((index % 16) * 8)) as u8 ^ index as u8;
        }
    }
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{prefix}{hex}")
}

impl Tokens {
    /// Two fresh random tokens in `org`: an admin (`admin`, uid 0; the cluster operator and the
    /// organization's admin, so everything the guide shows works with it) and a user (`alice`,
    /// uid 1001, a Slurm user of both built-in scenarios).
    pub fn generate(org: &str) -> (Tokens, GeneratedTokens) {
        let generated = GeneratedTokens { admin: random_token("cwsbx-admin-"), user: random_token("cwsbx-user-") };
        let mut tokens = Tokens::default();
        tokens.insert(
            generated.admin.clone(),
            Principal {
                org: org.to_owned(),
                user: "admin".to_owned(),
                uid: 0,
                roles: vec![Role::ClusterAdmin, Role::SandboxAdmin, Role::SandboxUser],
            },
        );
        tokens.insert(
            generated.user.clone(),
            Principal { org: org.to_owned(), user: "alice".to_owned(), uid: 1001, roles: vec![Role::SandboxUser] },
        );
        (tokens, generated)
    }

    /// The fixed development tokens (`serve --dev-tokens`): the same principals as
    /// [`Tokens::generate`], under tokens that survive restarts ([`DEV_ADMIN_TOKEN`],
    /// [`DEV_USER_TOKEN`]), for a shell or `.env` file. Local use only.
    pub fn dev(org: &str) -> Tokens {
        let (generated, _) = Tokens::generate(org);
        let mut tokens = Tokens::default();
        for ((_, principal), token) in generated.ordered.into_iter().zip([DEV_ADMIN_TOKEN, DEV_USER_TOKEN]) {
            tokens.insert(token.to_owned(), principal);
        }
        tokens
    }

    /// The organizations the tokens belong to.
    pub fn has_org(&self, org: &str) -> bool {
        self.ordered.iter().any(|(_, principal)| principal.org == org)
    }

    /// Accepts `token` as `principal` (a later insert of the same token replaces it).
    pub fn insert(&mut self, token: String, principal: Principal) {
        self.by_token.insert(token.clone(), principal.clone());
        self.ordered.push((token, principal));
    }

    /// The principal of a token.
    pub fn principal(&self, token: &str) -> Option<&Principal> {
        self.by_token.get(token)
    }

    /// The admin token for the ready file: the first holding `cluster_admin` (the operator's,
    /// which harnesses use to drive the clock and reset), else the first holding `sandbox_admin`.
    pub fn first_admin(&self) -> Option<(&str, &Principal)> {
        [Role::ClusterAdmin, Role::SandboxAdmin].into_iter().find_map(|role| {
            self.ordered
                .iter()
                .find(|(_, principal)| principal.has(role))
                .map(|(token, principal)| (token.as_str(), principal))
        })
    }

    /// The first token holding `sandbox_user` but not `sandbox_admin`.
    pub fn first_user(&self) -> Option<(&str, &Principal)> {
        self.ordered
            .iter()
            .find(|(_, principal)| principal.has(Role::SandboxUser) && !principal.has(Role::SandboxAdmin))
            .map(|(token, principal)| (token.as_str(), principal))
    }

    /// Accepts these W&B API keys besides the tokens.
    pub fn set_wandb_keys(&mut self, keys: WandbKeys) {
        self.wandb = keys;
    }

    /// The principal of a request's W&B credentials.
    pub fn authenticate_wandb(&self, credentials: WandbCredentials<'_>) -> Result<Principal, ApiError> {
        self.wandb.authenticate(credentials)
    }

    /// Resolves an `authorization` header value.
    pub fn authenticate(&self, header: Option<&str>) -> Result<Principal, ApiError> {
        let token = bearer(header)?;
        self.principal(token).cloned().ok_or_else(|| ApiError::unauthenticated("unknown bearer token"))
    }
}

/// The token of an `authorization` header value, or UNAUTHENTICATED saying what is wrong.
pub fn bearer(header: Option<&str>) -> Result<&str, ApiError> {
    let Some(header) = header else {
        return Err(ApiError::unauthenticated(
            "missing credentials: send `authorization: Bearer <token>` (set CWSANDBOX_API_KEY for the Python client)",
        ));
    };
    header
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| ApiError::unauthenticated("the authorization header must be `Bearer <token>`"))
}

/// The authenticated caller of an RPC, as the handlers take it (an axum extractor that works on
/// both transports: the gRPC path sees the request's extensions through connectrpc-axum's
/// captured request parts).
///
/// A request is authenticated once, by the request guard (the edge's `guard`), which puts the
/// `Caller` in the request's extensions: from the bearer token on the API's port, from the
/// connection's client certificate on the direct data plane's endpoint, where the caller is the
/// one the certificate was issued to, bound to its sandbox and permissions ([`Caller::grant`]).
/// The extractor only takes it from there; a request that did not pass the guard has no caller.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Arc<Principal>,
    grant: Option<Arc<Grant>>,
    /// The RPC the guard admitted the call for.
    rpc: Option<&'static Method>,
}

impl Caller {
    /// PERMISSION_DENIED unless the caller holds `role`.
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.has(role) {
            Ok(())
        } else {
            Err(ApiError::permission_denied(
                role.as_str(),
                format!("user {:?} of organization {:?} lacks the {} role", self.user, self.org, role.as_str()),
            ))
        }
    }

    /// PERMISSION_DENIED unless the caller holds one of `roles` (named in the answer).
    pub fn require_any(&self, roles: &[Role], what: &str) -> Result<(), ApiError> {
        if roles.iter().any(|role| self.has(*role)) {
            return Ok(());
        }
        let names: Vec<&str> = roles.iter().map(|role| role.as_str()).collect();
        Err(ApiError::permission_denied(
            &names.join(","),
            format!(
                "user {:?} of organization {:?} lacks the {} role: {what}",
                self.user,
                self.org,
                names.join(" or ")
            ),
        ))
    }

    /// PERMISSION_DENIED unless the caller may call `rpc` (its [`Access`]); the request guard
    /// asks this of every RPC before reading its body.
    pub fn may_call(&self, rpc: &Method) -> Result<(), ApiError> {
        match rpc.access {
            Access::SandboxUser => self.require(Role::SandboxUser),
            Access::SandboxAdmin => self.require(Role::SandboxAdmin),
            Access::Administrators => {
                self.require_any(&[Role::SandboxAdmin, Role::ClusterAdmin], "EmulatorService is for administrators")
            }
            Access::Readers => self.require_any(
                &[Role::SandboxUser, Role::SandboxAdmin, Role::ClusterAdmin],
                "the Slurm views need a token of the organization",
            ),
            Access::Operator => self.require_any(
                &[Role::ClusterAdmin],
                &format!("{} concerns the whole cluster, not one organization's part of it", rpc.name),
            ),
        }
    }

    /// A caller authenticated by a bearer token.
    pub fn new(principal: Principal) -> Caller {
        Caller { principal: Arc::new(principal), grant: None, rpc: None }
    }

    /// A direct data-plane caller, acting under a certificate's grant.
    pub fn direct(grant: Arc<Grant>) -> Caller {
        Caller { principal: Arc::new(grant.principal.clone()), grant: Some(grant), rpc: None }
    }

    /// The caller admitted for `rpc` (the request guard's doing).
    pub fn calling(self, rpc: &'static Method) -> Caller {
        Caller { rpc: Some(rpc), ..self }
    }

    /// The name of the RPC being called (`CreateSandbox`), from the catalogue: what handlers log,
    /// check fields for and name in errors. Empty for a caller the guard did not admit for an RPC.
    pub fn method(&self) -> &'static str {
        self.rpc.map_or("", |rpc| rpc.name.as_str())
    }

    /// The short name of the called RPC's service (`SandboxService`), from the catalogue.
    pub fn service(&self) -> &'static str {
        self.rpc.map_or("", |rpc| rpc.service.as_str())
    }

    /// The certificate grant a direct data-plane caller acts under; `None` on the API's port.
    pub fn grant(&self) -> Option<&Grant> {
        self.grant.as_deref()
    }
}

impl std::ops::Deref for Caller {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.principal
    }
}

impl<S: Sync> FromRequestParts<S> for Caller {
    type Rejection = ConnectError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ConnectError> {
        match parts.extensions.get::<Caller>() {
            Some(caller) => Ok(caller.clone()),
            None => {
                // Every RPC route is behind the guard: this is a wiring mistake, never a way in.
                tracing::error!(path = %parts.uri.path(), "an RPC reached its handler without passing the request guard");
                Err(ApiError::unauthenticated("the request was not authenticated").into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cwsandbox_sim::query::Scope;
    use cwsandbox_sim::sandbox::Owner;

    use super::*;

    #[test]
    fn bearer_tokens_resolve_and_roles_nest() {
        let (tokens, generated) = Tokens::generate("org");
        let admin = tokens.authenticate(Some(&format!("Bearer {}", generated.admin))).unwrap();
        assert!(admin.has(Role::ClusterAdmin) && admin.has(Role::SandboxAdmin) && admin.has(Role::SandboxUser));
        assert_eq!(admin.scope(), Scope::Cluster);
        let user = Caller::new(tokens.authenticate(Some(&format!("bearer {}", generated.user))).unwrap());
        assert!(user.require(Role::SandboxAdmin).is_err());
        assert_eq!(user.scope(), Scope::Organization("org".to_owned()));
        let error = user.require_any(&[Role::SandboxAdmin, Role::ClusterAdmin], "the emulator's API").unwrap_err();
        assert!(error.message.contains("lacks the sandbox_admin or cluster_admin role"), "{}", error.message);
        assert_eq!(user.owner(), Owner { org: "org".to_owned(), user: "alice".to_owned() });
        assert_eq!(tokens.authenticate(None).unwrap_err().code, tonic::Code::Unauthenticated);
        assert_eq!(tokens.authenticate(Some("Basic abc")).unwrap_err().code, tonic::Code::Unauthenticated);
        assert_eq!(tokens.authenticate(Some("Bearer nope")).unwrap_err().code, tonic::Code::Unauthenticated);
        assert_ne!(generated.admin, Tokens::generate("org").1.admin, "tokens are random");
        assert_eq!(tokens.first_admin().unwrap().0, generated.admin);
        assert_eq!(tokens.first_user().unwrap().0, generated.user);
    }

    #[tokio::test]
    async fn handlers_take_the_caller_the_guard_authenticated_and_nothing_else() {
        let (tokens, generated) = Tokens::generate("org");
        let principal = tokens.authenticate(Some(&format!("Bearer {}", generated.user))).unwrap();
        // A token in the headers is not read here: without the guard's caller there is none.
        let request = http::Request::get("/coreweave.sandbox.v1.SandboxService/GetSandbox")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", generated.admin))
            .body(())
            .unwrap();
        let (mut parts, ()) = request.into_parts();
        assert!(Caller::from_request_parts(&mut parts, &()).await.is_err());
        parts.extensions.insert(Caller::new(principal.clone()));
        let caller = Caller::from_request_parts(&mut parts, &()).await.unwrap();
        assert_eq!(*caller, principal);
        assert!(caller.grant().is_none());
    }
}
