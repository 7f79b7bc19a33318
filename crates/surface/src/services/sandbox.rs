//! SandboxService's control operations: Create, Get, List, Delete. Each handler is the same three
//! steps: check the caller and the request, one simulation command, convert the answer.

use axum::extract::{FromRequestParts, State};
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_sim::compose;
use cwsandbox_sim::sandbox::{HostWait, SandboxState, SandboxView};
use cwsandbox_sim::snapshots::SnapshotTrigger;
use cwsandbox_sim::world::InjectedFault;
use cwsandbox_sim::{Reason, SimError};
use http::request::Parts;

use super::{respond, snapshots};
use crate::app::App;
use crate::auth::Caller;
use crate::convert::{self, StateFilter};
use crate::errors::ApiError;
use crate::faults::InjectedFaults;

/// The domain faults the request guard chose for this CreateSandbox (`crate::faults`).
pub struct Injected(Vec<InjectedFault>);

impl FromRequestParts<App> for Injected {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _app: &App) -> Result<Injected, Self::Rejection> {
        Ok(Injected(parts.extensions.get::<InjectedFaults>().map(|injected| injected.0.clone()).unwrap_or_default()))
    }
}

/// CreateSandbox: idempotent by `request_id`.
pub async fn create_sandbox(
    State(app): State<App>,
    caller: Caller,
    Injected(faults): Injected,
    ConnectRequest(request): ConnectRequest<pb::CreateSandboxRequest>,
) -> Result<ConnectResponse<pb::Sandbox>, ConnectError> {
    let made = create(&app, &caller, request, faults);
    respond(caller.method(), published(&app, made).await)
}

/// A new sandbox's answer, once the host started it where the world placed it at once (the
/// `instant` timing: RUNNING, as before the host's start was an input of the world, and true
/// now), and once its services have ports on the host (`crate::ports`). A pull in progress or a
/// wait for a place is not waited for: the answer is CREATING, as the cloud's
/// ([`SandboxView::as_create_answer`]).
async fn published(app: &App, made: Result<SandboxView, ApiError>) -> Result<pb::Sandbox, ApiError> {
    let mut view = made?;
    if view.may_await_host()
        && app.driver().read_world(|world| world.awaits_host(&view.pod_uid)) == Some(HostWait::Start)
        && app.driver().host_settled(&view.pod_uid).await
    {
        view = app.driver().read_world(|world| world.sandbox(&view.id)).unwrap_or(view);
    }
    let message = convert::sandbox(&view.clone().as_create_answer());
    let services = message.spec.as_ref().map(|spec| spec.services.as_slice()).unwrap_or_default();
    if services.is_empty() {
        return Ok(message);
    }
    crate::ports::publish(app, &view, services).await;
    let latest = app.driver().read_world(|world| world.sandbox(&view.id)).unwrap_or(view);
    let mut message = convert::sandbox(&latest.clone().as_create_answer());
    // Create-only: the create's answer (and a replay of that create) is the one place a
    // share-token endpoint's credential is ever shown.
    message.endpoint_share_token = latest.endpoint_share_token.as_deref().unwrap_or_default().to_owned();
    Ok(message)
}

fn create(
    app: &App,
    caller: &Caller,
    request: pb::CreateSandboxRequest,
    faults: Vec<InjectedFault>,
) -> Result<SandboxView, ApiError> {
    app.check_fields(caller.method(), &request)?;
    let (spec, display_name) = convert::sandbox_input(request.sandbox)?;
    let owner = caller.owner();
    let view = app.driver().with_world(|world| {
        world.create_sandbox_with_faults(&owner, spec, &display_name, &request.request_id, faults)
    })?;
    tracing::info!(sandbox_id = %view.id, state = ?view.state, runner = %view.runner_id, user = %owner.user, "sandbox created");
    Ok(view)
}

/// CreateSandboxFromTemplate: the template's spec with the overrides layered on, then
/// CreateSandbox's path; idempotent by `request_id`.
pub async fn create_sandbox_from_template(
    State(app): State<App>,
    caller: Caller,
    Injected(faults): Injected,
    ConnectRequest(request): ConnectRequest<pb::CreateSandboxFromTemplateRequest>,
) -> Result<ConnectResponse<pb::Sandbox>, ConnectError> {
    let made = (|| -> Result<_, ApiError> {
        app.check_fields(caller.method(), &request)?;
        convert::required("template_id", &request.template_id)?;
        let owner = caller.owner();
        let view = app.driver().with_world(|world| world.create_sandbox_from_template(&owner, &request, faults))?;
        tracing::info!(sandbox_id = %view.id, template_id = %request.template_id, state = ?view.state, user = %owner.user, "sandbox created from a template");
        Ok(view)
    })();
    respond(caller.method(), published(&app, made).await)
}

/// CreateSandboxFromFile: the Compose file's services as the sandbox's containers
/// (`cwsandbox_sim::compose`), then CreateSandbox's path; idempotent by `request_id`.
pub async fn create_sandbox_from_file(
    State(app): State<App>,
    caller: Caller,
    Injected(faults): Injected,
    ConnectRequest(request): ConnectRequest<pb::CreateSandboxFromFileRequest>,
) -> Result<ConnectResponse<pb::Sandbox>, ConnectError> {
    let made = (|| -> Result<_, ApiError> {
        app.check_fields(caller.method(), &request)?;
        let text = compose::contents(&request)?;
        let tree: serde_json::Value = serde_saphyr::from_str(text)
            .map_err(|error| ApiError::invalid_field("contents", format!("not a YAML document: {error}")))?;
        // The services' order is the file's: read from the text, whose maps keep it.
        let order: compose::FileOrder = serde_saphyr::from_str(text).unwrap_or_default();
        let made = compose::sandbox_spec(&request, &tree, &order.services)?;
        let owner = caller.owner();
        let view = app.driver().with_world(|world| world.create_sandbox_from_file(&owner, &request, made, faults))?;
        tracing::info!(sandbox_id = %view.id, primary_service = %request.primary_service, state = ?view.state, user = %owner.user, "sandbox created from a file");
        Ok(view)
    })();
    respond(caller.method(), published(&app, made).await)
}

/// GetSandbox: terminal sandboxes stay readable for the retention period.
pub async fn get_sandbox(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetSandboxRequest>,
) -> Result<ConnectResponse<pb::Sandbox>, ConnectError> {
    respond(caller.method(), get(&app, &caller, &request).await)
}

async fn get(app: &App, caller: &Caller, request: &pb::GetSandboxRequest) -> Result<pb::Sandbox, ApiError> {
    let id = convert::required("sandbox_id", &request.sandbox_id)?;
    let read = || app.driver().organization_sandbox(&caller.org, id).map_err(|error| not_found(error, id));
    let view = read()?;
    // While the host pulls the sandbox's images or starts its containers the sandbox is not
    // RUNNING yet, and after a delete it reads TERMINATING until the host has ended its
    // processes: the answer waits (a while) for the world to hear how that went, so a client
    // polling right after the create or the delete finds RUNNING (or FAILED for a command that
    // cannot run) or the end, rather than sleeping a polling round.
    if (view.may_await_host() || view.may_await_stop()) && app.driver().host_settled(&view.pod_uid).await {
        let settled = read()?;
        return Ok(convert::sandbox(&settled));
    }
    Ok(convert::sandbox(&view))
}

/// ListSandboxes: server-chosen page size, opaque tokens, filters.
pub async fn list_sandboxes(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListSandboxesRequest>,
) -> Result<ConnectResponse<pb::ListSandboxesResponse>, ConnectError> {
    respond(caller.method(), list(&app, &caller, &request))
}

fn list(app: &App, caller: &Caller, request: &pb::ListSandboxesRequest) -> Result<pb::ListSandboxesResponse, ApiError> {
    let state = match convert::state_filter(request.state)? {
        StateFilter::Any => None,
        StateFilter::Only(state) => Some(state),
        StateFilter::Never => return Ok(pb::ListSandboxesResponse::default()),
    };
    let filter = convert::sandbox_filter(request, state);
    let (views, next_page_token) = app
        .driver()
        .with_world(|world| world.list_sandboxes(&caller.org, &filter, request.page_size, &request.page_token))?;
    Ok(pb::ListSandboxesResponse { sandboxes: views.iter().map(convert::sandbox).collect(), next_page_token })
}

/// DeleteSandbox: the Pod terminates with the grace period; `allow_missing` turns NOT_FOUND into
/// an empty answer.
pub async fn delete_sandbox(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeleteSandboxRequest>,
) -> Result<ConnectResponse<pb::DeleteSandboxResponse>, ConnectError> {
    respond(caller.method(), delete(&app, &caller, &request).await)
}

async fn delete(
    app: &App,
    caller: &Caller,
    request: &pb::DeleteSandboxRequest,
) -> Result<pb::DeleteSandboxResponse, ApiError> {
    app.check_fields(caller.method(), request)?;
    let id = convert::required("sandbox_id", &request.sandbox_id)?;
    if request.grace_period_seconds < 0 {
        return Err(ApiError::invalid_field("grace_period_seconds", "must not be negative"));
    }
    // The volumes are captured first, while the sandbox still runs; then it stops.
    let file_system_snapshot_ids = if request.snapshot_volumes.is_empty() {
        Vec::new()
    } else {
        let began = app.driver().with_world(|world| {
            world.begin_snapshots(
                &caller.org,
                id,
                &request.snapshot_volumes,
                &request.request_id,
                SnapshotTrigger::OnDelete,
            )
        });
        let captures = match began {
            Ok(captures) => captures,
            Err(SimError::NotFound { .. }) if request.allow_missing => {
                return Err(ApiError::invalid_field(
                    "allow_missing",
                    format!(
                        "sandbox {id:?} not found: a missing sandbox has no volumes to snapshot, so allow_missing cannot be honoured together with snapshot_volumes"
                    ),
                ));
            }
            Err(error) => return Err(not_found(error, id)),
        };
        snapshots::capture(app, captures).await.into_iter().map(|snapshot| snapshot.id.to_string()).collect()
    };
    match app.driver().with_world(|world| world.delete_sandbox(&caller.org, id, request.grace_period_seconds)) {
        Ok(view) => {
            tracing::info!(sandbox_id = %view.id, state = ?view.state, "sandbox deletion requested");
            Ok(pb::DeleteSandboxResponse { sandbox: Some(convert::sandbox(&view)), file_system_snapshot_ids })
        }
        Err(SimError::NotFound { .. }) if request.allow_missing => Ok(pb::DeleteSandboxResponse::default()),
        Err(error) => Err(not_found(error, id)),
    }
}

/// ConnectSandbox: signs the caller's CSR into a client certificate for the direct data plane's
/// endpoint, bound to this RUNNING sandbox of the caller's organization and the permissions asked
/// for (`crate::direct`). Not RUNNING is FAILED_PRECONDITION, one of the answers the client falls
/// back to the gateway from (docs/facts/client-contract.md#g4); another organization's sandbox is
/// NOT_FOUND.
pub async fn connect_sandbox(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ConnectSandboxRequest>,
) -> Result<ConnectResponse<pb::SandboxConnection>, ConnectError> {
    respond(caller.method(), connect(&app, &caller, &request))
}

fn connect(app: &App, caller: &Caller, request: &pb::ConnectSandboxRequest) -> Result<pb::SandboxConnection, ApiError> {
    let id = convert::required("sandbox_id", &request.sandbox_id)?;
    if request.csr_der.is_empty() {
        return Err(ApiError::missing_field("csr_der"));
    }
    let permissions = convert::data_permissions(&request.requested_permissions)?;
    let view = app.driver().organization_sandbox(&caller.org, id).map_err(|error| not_found(error, id))?;
    if view.state != SandboxState::Running {
        return Err(super::data::not_running(&view));
    }
    let issued = app.direct().issue(caller, &view.id, &request.csr_der, permissions)?;
    Ok(convert::sandbox_connection(issued))
}

/// Adds the sandbox id to a NOT_FOUND.
pub(super) fn not_found(error: SimError, id: &str) -> ApiError {
    let api = ApiError::from(error);
    if api.reason == Reason::SandboxNotFound { api.with_metadata("sandbox_id", id) } else { api }
}
