//! SandboxTemplateService: an organization's stored partial specs. Writes need `sandbox_admin`;
//! sandbox users read and list the live ones, and only admins see deleted ones (`show_deleted`).

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;

use super::respond;
use crate::app::App;
use crate::auth::{Caller, Role};
use crate::convert;
use crate::errors::ApiError;

/// The role a read needs: deleted templates are the admins'.
fn read_role(show_deleted: bool) -> Role {
    if show_deleted { Role::SandboxAdmin } else { Role::SandboxUser }
}

/// CreateSandboxTemplate: idempotent by `request_id`; the server assigns the id.
pub async fn create_sandbox_template(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CreateSandboxTemplateRequest>,
) -> Result<ConnectResponse<pb::SandboxTemplate>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            app.check_fields(caller.method(), &request)?;
            let input = convert::template_input(request.sandbox_template)?;
            let created = app
                .driver()
                .with_world(|world| world.create_template(&caller.org, &caller.user, input, &request.request_id))?;
            tracing::info!(template_id = %created.id, user = %caller.user, "sandbox template created");
            Ok(convert::template(&created))
        })(),
    )
}

/// GetSandboxTemplate: a deleted template only with `show_deleted`.
pub async fn get_sandbox_template(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetSandboxTemplateRequest>,
) -> Result<ConnectResponse<pb::SandboxTemplate>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            caller.require(read_role(request.show_deleted))?;
            let id = convert::required("sandbox_template_id", &request.sandbox_template_id)?;
            let template =
                app.driver().with_world(|world| world.get_template(&caller.org, id, request.show_deleted))?;
            Ok(convert::template(&template))
        })(),
    )
}

/// ListSandboxTemplates: oldest first, a page at a time.
pub async fn list_sandbox_templates(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListSandboxTemplatesRequest>,
) -> Result<ConnectResponse<pb::ListSandboxTemplatesResponse>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            caller.require(read_role(request.show_deleted))?;
            let (templates, next_page_token) = app.driver().with_world(|world| {
                world.list_templates(&caller.org, request.show_deleted, request.page_size, &request.page_token)
            })?;
            Ok(pb::ListSandboxTemplatesResponse {
                sandbox_templates: templates.iter().map(convert::template).collect(),
                next_page_token,
            })
        })(),
    )
}

/// UpdateSandboxTemplate: the masked fields, and one more revision.
pub async fn update_sandbox_template(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::UpdateSandboxTemplateRequest>,
) -> Result<ConnectResponse<pb::SandboxTemplate>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            app.check_fields(caller.method(), &request)?;
            let id = convert::required("sandbox_template_id", &request.sandbox_template_id)?;
            let patch = convert::template_input(request.sandbox_template.clone())?;
            let mask = request.update_mask.clone().unwrap_or_default();
            let updated = app.driver().with_world(|world| world.update_template(&caller.org, id, patch, &mask))?;
            tracing::info!(template_id = id, revision = updated.revision, mask = ?mask.paths, "sandbox template updated");
            Ok(convert::template(&updated))
        })(),
    )
}

/// DeleteSandboxTemplate: a soft delete.
pub async fn delete_sandbox_template(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteSandboxTemplateRequest>,
) -> Result<ConnectResponse<pbjson_types::Empty>, ConnectError> {
    respond(
        caller.method(),
        (|| -> Result<_, ApiError> {
            let id = convert::required("sandbox_template_id", &request.sandbox_template_id)?;
            app.driver().with_world(|world| world.delete_template(&caller.org, id))?;
            tracing::info!(template_id = id, "sandbox template deleted");
            Ok(pbjson_types::Empty {})
        })(),
    )
}
