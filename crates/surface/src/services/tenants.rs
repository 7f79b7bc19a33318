//! EmulatorService CreateTenant, DeleteTenant, ListTenants: organizations made at run time, one
//! per test on a shared emulator (see `crate::tenants`). All three are the operator's.

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::Reason;
use cwsandbox_sim::world::TenantSpec;
use tonic::Code;

use super::emulator::operator;
use crate::app::App;
use crate::auth::{Caller, Role};
use crate::convert::timestamp;
use crate::errors::ApiError;
use crate::tenants::{FIRST_TENANT_UID, Tenant};

/// Why `name` is not a DNS label (what Kubernetes allows in a namespace name), if it is not.
fn dns_label_problem(name: &str) -> Option<String> {
    let allowed = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let edges =
        name.starts_with(|c: char| c.is_ascii_alphanumeric()) && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.len() > 63 || !allowed || !edges {
        Some(format!(
            "{name:?} is not a DNS label (1-63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
        ))
    } else {
        None
    }
}

/// The roles of a tenant's user token: `sandbox_user` when none are named.
fn tenant_roles(names: &[String]) -> Result<Vec<Role>, ApiError> {
    if names.is_empty() {
        return Ok(vec![Role::SandboxUser]);
    }
    let mut roles = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let field = format!("roles[{index}]");
        let role = match name.trim() {
            "sandbox_user" => Role::SandboxUser,
            "sandbox_admin" => Role::SandboxAdmin,
            "cluster_admin" => {
                return Err(ApiError::invalid_field(
                    &field,
                    "cluster_admin is the operator's; a tenant is one organization",
                ));
            }
            other => {
                return Err(ApiError::invalid_field(
                    &field,
                    format!("{other:?} is not a role (sandbox_user, sandbox_admin)"),
                ));
            }
        };
        if !roles.contains(&role) {
            roles.push(role);
        }
    }
    Ok(roles)
}

fn to_proto(tenant: &Tenant) -> pb::Tenant {
    pb::Tenant {
        organization: tenant.spec.org.clone(),
        user: tenant.spec.user.clone(),
        uid: tenant.spec.uid,
        roles: tenant.roles.iter().map(|role| role.as_str().to_owned()).collect(),
        user_token: tenant.user_token.clone(),
        admin_token: tenant.admin_token.clone(),
        runner_ids: tenant.runner_ids.clone(),
        create_time: Some(timestamp(tenant.created)),
    }
}

/// Whether an organization belongs to the configuration (its tokens or its runners).
fn configured(app: &App, org: &str) -> bool {
    app.tokens().has_org(org)
        || app.driver().with_world(|world| world.values().runners.iter().any(|runner| runner.org == org))
}

/// CreateTenant: a fresh organization with a user token and an admin token.
pub async fn create_tenant(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateTenantRequest>,
) -> Result<ConnectResponse<pb::CreateTenantResponse>, ConnectError> {
    operator(&caller, || {
        let roles = tenant_roles(&request.roles)?;
        let user = request.user.trim();
        if !user.is_empty()
            && let Some(problem) = dns_label_problem(user)
        {
            return Err(ApiError::invalid_field("user", problem));
        }
        if request.uid == Some(0) {
            return Err(ApiError::invalid_field("uid", "0 is root; a tenant's user needs a uid of its own"));
        }
        // Held across the world's part so two creates cannot take the same name or uid.
        let mut tenants = app.tenants_mut();
        let org = match request.organization.trim() {
            "" => tenants.draw_org(|name| configured(&app, name)),
            named => {
                if let Some(problem) = dns_label_problem(named) {
                    return Err(ApiError::invalid_field("organization", problem));
                }
                if tenants.get(named).is_some() || configured(&app, named) {
                    return Err(ApiError::new(
                        Code::AlreadyExists,
                        Reason::AlreadyExists,
                        format!("organization {named:?} exists already"),
                    )
                    .with_metadata("organization", named));
                }
                named.to_owned()
            }
        };
        let user = if user.is_empty() { org.clone() } else { user.to_owned() };
        let uid = match request.uid {
            Some(uid) => uid,
            None => (FIRST_TENANT_UID..=u32::MAX)
                .find(|uid| !tenants.uid_taken(*uid) && app.driver().with_world(|world| world.uid_is_free(*uid)))
                .ok_or_else(|| ApiError::invalid_field("uid", "no free uid is left"))?,
        };
        if request.uid.is_some() && tenants.uid_taken(uid) {
            return Err(ApiError::new(
                Code::AlreadyExists,
                Reason::AlreadyExists,
                format!("uid {uid} is another tenant's"),
            )
            .with_metadata("uid", uid.to_string()));
        }
        let spec = TenantSpec { org: org.clone(), user, uid };
        let (runner_ids, now) =
            app.driver().with_world(|world| world.admit_tenant(&spec).map(|ids| (ids, world.now())))?;
        let mut tenant = Tenant::new(spec, roles, now);
        tenant.runner_ids = runner_ids;
        let answer = to_proto(&tenant);
        tenants.insert(tenant);
        tracing::info!(org, "tenant created");
        Ok(pb::CreateTenantResponse { tenant: Some(answer) })
    })
}

/// DeleteTenant: the tenant's tokens stop working, its part of the world is reset and its
/// runners forgotten.
pub async fn delete_tenant(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteTenantRequest>,
) -> Result<ConnectResponse<pb::DeleteTenantResponse>, ConnectError> {
    operator(&caller, || {
        let org = crate::convert::required("organization", &request.organization)?.trim();
        let Some(tenant) = app.tenants_mut().remove(org) else {
            let why = if configured(&app, org) {
                format!("organization {org:?} is configured, not a tenant: it ends with the emulator")
            } else {
                format!("no tenant {org:?}")
            };
            return Err(ApiError::new(Code::NotFound, Reason::TenantNotFound, why).with_metadata("organization", org));
        };
        let stopped = app.driver().with_world(|world| world.dismiss_tenant(&tenant.spec.org));
        app.faults().forget_organization(org);
        tracing::info!(org, stopped, "tenant deleted");
        Ok(pb::DeleteTenantResponse { stopped_pods: i32::try_from(stopped).unwrap_or(i32::MAX) })
    })
}

/// ListTenants, in creation order.
pub async fn list_tenants(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ListTenantsRequest>,
) -> Result<ConnectResponse<pb::ListTenantsResponse>, ConnectError> {
    operator(&caller, || Ok(pb::ListTenantsResponse { tenants: app.tenants().iter().map(to_proto).collect() }))
}
