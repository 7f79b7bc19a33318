//! Who is looking: the bearer token's principal, and what the API would let it read.
//!
//! The dashboard decides nothing of its own about access. A view is shown to a caller when the
//! catalogue lets that caller call the RPC that reads the same objects (`Caller::may_call`), and
//! it is read in the caller's `Scope` (`Principal::scope`): an operator sees every
//! organization, an organization's admin and user only their organization's part.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use cwsandbox_sim::query::Scope;
use cwsandbox_surface::app::App;
use cwsandbox_surface::auth::Caller;
use cwsandbox_surface::catalogue::{Catalogue, Method};
use cwsandbox_surface::errors::ApiError;
use cwsandbox_surface::identity::{Principal, Role};
use http::{HeaderMap, StatusCode};
use maud::html;

/// The RPCs whose access admits each part of the dashboard.
pub mod rpc {
    pub const LIST_NODES: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/ListNodes";
    pub const LIST_PODS: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/ListPods";
    pub const LIST_JOBS: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/ListJobs";
    pub const GET_CLOCK: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/GetClock";
    pub const FREEZE_CLOCK: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/FreezeClock";
    pub const ADVANCE_CLOCK: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/AdvanceClock";
    pub const RESUME_CLOCK: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/ResumeClock";
    pub const LIST_FAULTS: &str = "/coreweave.sandbox.emulator.v1.EmulatorService/ListFaults";
    pub const LIST_SANDBOXES: &str = "/coreweave.sandbox.v1.SandboxService/ListSandboxes";
    pub const GET_SANDBOX: &str = "/coreweave.sandbox.v1.SandboxService/GetSandbox";
    pub const DELETE_SANDBOX: &str = "/coreweave.sandbox.v1.SandboxService/DeleteSandbox";
    pub const EXEC: &str = "/coreweave.sandbox.v1.SandboxService/Exec";
    pub const STREAM_LOGS: &str = "/coreweave.sandbox.v1.SandboxService/StreamLogs";
    pub const LIST_RUNNERS: &str = "/coreweave.sandbox.v1.RunnerManagementService/ListManagedRunners";
}

/// A caller the dashboard knows.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub principal: Principal,
}

/// Why a request is not answered.
#[derive(Debug)]
pub enum Refusal {
    /// No token, or one the emulator does not know.
    Unauthenticated,
    /// The token's roles do not reach this (the API's words).
    Forbidden(String),
    /// Anything else the API said no to: its code and words.
    Api(ApiError),
    /// A request the dashboard itself cannot take (a missing part, a bad value).
    BadRequest(String),
    /// Nothing by that name in the viewer's scope.
    NotFound(String),
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Refusal {
        match error.code {
            tonic::Code::Unauthenticated => Refusal::Unauthenticated,
            tonic::Code::PermissionDenied => Refusal::Forbidden(error.message),
            _ => Refusal::Api(error),
        }
    }
}

/// What a handler of the API answered, as the dashboard answers it: the same refusal a view
/// and a button give for the same code.
impl From<connectrpc_axum::ConnectError> for Refusal {
    fn from(error: connectrpc_axum::ConnectError) -> Refusal {
        use connectrpc_axum::message::error::Code;
        let message = error.message().unwrap_or("").to_owned();
        match error.code() {
            Code::Unauthenticated => Refusal::Unauthenticated,
            Code::PermissionDenied => Refusal::Forbidden(message),
            Code::NotFound => Refusal::NotFound(message),
            code => Refusal::BadRequest(format!("{code:?}: {message}")),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, title, text) = match self {
            Refusal::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "The emulator does not accept this token. Sign in again.".to_owned(),
            ),
            Refusal::Forbidden(message) => (StatusCode::FORBIDDEN, "Not for this token", message),
            Refusal::Api(error) => {
                (status_of(error.code), "The API refused", format!("{:?}: {}", error.code, error.message))
            }
            Refusal::BadRequest(message) => (StatusCode::BAD_REQUEST, "Bad request", message),
            Refusal::NotFound(message) => (StatusCode::NOT_FOUND, "Not found", message),
        };
        let body = html! {
            section.refusal data-status=(status.as_u16()) {
                h2 { (title) }
                p.refusal-message { (text) }
            }
        };
        (status, [(http::header::CACHE_CONTROL, "no-store")], axum::response::Html(body.into_string())).into_response()
    }
}

fn status_of(code: tonic::Code) -> StatusCode {
    match code {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument | tonic::Code::OutOfRange => StatusCode::BAD_REQUEST,
        tonic::Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        tonic::Code::AlreadyExists | tonic::Code::Aborted => StatusCode::CONFLICT,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        tonic::Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        tonic::Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl Viewer {
    /// The caller of the request's bearer token.
    pub fn of(app: &App, headers: &HeaderMap) -> Result<Viewer, Refusal> {
        let header = headers.get(http::header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        let principal = app.authenticate(header).map_err(|_| Refusal::Unauthenticated)?;
        Ok(Viewer { principal })
    }

    /// Whose objects this viewer sees.
    pub fn scope(&self) -> Scope {
        self.principal.scope()
    }

    /// Whether the principal holds `role`.
    pub fn has(&self, role: Role) -> bool {
        self.principal.has(role)
    }

    /// The caller the API would see for `rpc`, once the catalogue admits it.
    pub fn caller_for(&self, rpc: &str) -> Result<Caller, Refusal> {
        let method = method(rpc)?;
        let caller = Caller::new(self.principal.clone()).calling(method);
        caller.may_call(method)?;
        Ok(caller)
    }

    /// Whether the catalogue admits this viewer to `rpc` (for showing a button, a link).
    pub fn may(&self, rpc: &str) -> bool {
        self.caller_for(rpc).is_ok()
    }
}

fn method(rpc: &str) -> Result<&'static Method, Refusal> {
    Catalogue::get().method(rpc).ok_or_else(|| Refusal::NotFound(format!("the catalogue has no RPC {rpc}")))
}

/// GET /ui/api/whoami: the token's principal, for the page's header (and the login form's check).
pub async fn whoami(State(app): State<App>, headers: HeaderMap) -> Response {
    match Viewer::of(&app, &headers) {
        Ok(viewer) => {
            let principal = &viewer.principal;
            let roles: Vec<&str> = principal.roles.iter().map(|role| role.as_str()).collect();
            axum::Json(serde_json::json!({
                "org": principal.org,
                "user": principal.user,
                "roles": roles,
                "operator": principal.has(Role::ClusterAdmin),
            }))
            .into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// Any other path under /ui/api/.
pub async fn no_such_api() -> Response {
    (StatusCode::NOT_FOUND, "no such dashboard endpoint\n").into_response()
}
