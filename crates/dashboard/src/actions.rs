//! What the page's buttons do, each through the API's own handler for the caller the token
//! names: DeleteSandbox, Exec, and the clock's Freeze, Resume and Advance. Each answers an HTML
//! fragment for the form's result area; the change stream then refreshes the view.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use connectrpc_axum::message::error::code_to_tonic;
use connectrpc_axum::{ConnectError, ConnectRequest};
use cwsandbox_api::emulator_v1 as emulator_pb;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_surface::app::App;
use cwsandbox_surface::auth::Caller;
use cwsandbox_surface::faults::code_name;
use cwsandbox_surface::requests::{CallRecord, method_name};
use cwsandbox_surface::services::{data, emulator, sandbox};
use http::HeaderMap;
use maud::{Markup, html};

use crate::viewer::{Refusal, Viewer, rpc};

/// Longest exec output the page shows, per stream.
const EXEC_OUTPUT_BYTES: i32 = 256 << 10;

/// The form's fields, as the script sends them (a JSON object of strings).
fn fields(body: &Bytes) -> Result<HashMap<String, String>, Refusal> {
    if body.is_empty() {
        return Ok(HashMap::new());
    }
    serde_json::from_slice(body)
        .map_err(|error| Refusal::BadRequest(format!("the form's fields must be a JSON object of strings: {error}")))
}

/// Logs a button's call in the request log, as the guard logs a call over the wire.
fn log_call(
    app: &App,
    viewer: &Viewer,
    rpc: &str,
    started: Instant,
    at: SystemTime,
    outcome: Result<(), &ConnectError>,
) {
    let code = match outcome {
        Ok(()) => "OK",
        Err(error) => code_name(code_to_tonic(error.code())),
    };
    app.requests().record(CallRecord {
        sequence: 0,
        at,
        method: method_name(rpc),
        org: viewer.principal.org.clone(),
        user: viewer.principal.user.clone(),
        code: code.to_owned(),
        duration: started.elapsed(),
        faults: Vec::new(),
        from_dashboard: true,
    });
}

/// Calls `handler` for the viewer as `rpc` and logs the call.
async fn call<T, F>(
    app: &App,
    viewer: &Viewer,
    rpc: &str,
    handler: impl FnOnce(State<App>, Caller) -> F,
) -> Result<T, Refusal>
where
    F: std::future::Future<Output = Result<connectrpc_axum::ConnectResponse<T>, ConnectError>>,
{
    let caller = viewer.caller_for(rpc)?;
    let (started, at) = (Instant::now(), SystemTime::now());
    let result = handler(State(app.clone()), caller).await;
    log_call(app, viewer, rpc, started, at, result.as_ref().map(|_| ()));
    result.map(connectrpc_axum::ConnectResponse::into_inner).map_err(Refusal::from)
}

fn answer(result: Result<Markup, Refusal>) -> Response {
    match result {
        Ok(markup) => {
            ([(http::header::CACHE_CONTROL, "no-store")], axum::response::Html(markup.into_string())).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// POST /ui/api/sandboxes/{sandbox}/delete.
pub async fn delete_sandbox(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    answer(
        async {
            let viewer = Viewer::of(&app, &headers)?;
            let request = pb::DeleteSandboxRequest { sandbox_id: id.clone(), ..Default::default() };
            call(&app, &viewer, rpc::DELETE_SANDBOX, |state, caller| {
                sandbox::delete_sandbox(state, caller, ConnectRequest(request))
            })
            .await?;
            Ok(html! { span.done data-deleted=(id) { "Deleting " (id) "…" } })
        }
        .await,
    )
}

/// POST /ui/api/sandboxes/{sandbox}/exec with `{"command": "…"}`: run by `sh -c` in the
/// sandbox's main container, as `cwsandbox`'s `exec` with a shell string does.
pub async fn exec(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    answer(
        async {
            let viewer = Viewer::of(&app, &headers)?;
            let fields = fields(&body)?;
            let command = fields.get("command").map(|command| command.trim()).unwrap_or_default();
            if command.is_empty() {
                return Err(Refusal::BadRequest("command: give a command to run".to_owned()));
            }
            let request = pb::ExecRequest {
                sandbox_id: id,
                command: vec!["sh".to_owned(), "-c".to_owned(), command.to_owned()],
                max_output_bytes: EXEC_OUTPUT_BYTES,
                ..Default::default()
            };
            let response =
                call(&app, &viewer, rpc::EXEC, |state, caller| data::exec(state, caller, ConnectRequest(request)))
                    .await?;
            Ok(html! {
                span.exit data-exit-code=(response.exit_code) { "exit code " (response.exit_code) }
                @if !response.stdout.is_empty() { samp.stdout { (String::from_utf8_lossy(&response.stdout)) } }
                @if !response.stderr.is_empty() { samp.stderr { (String::from_utf8_lossy(&response.stderr)) } }
                @if response.stdout_truncated || response.stderr_truncated { em { " (output truncated)" } }
            })
        }
        .await,
    )
}

/// POST /ui/api/clock/{freeze|resume|advance}; advance takes `{"seconds": "30"}`.
pub async fn clock(State(app): State<App>, Path(action): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    answer(
        async {
            let viewer = Viewer::of(&app, &headers)?;
            let clock = match action.as_str() {
                "freeze" => {
                    call(&app, &viewer, rpc::FREEZE_CLOCK, |state, caller| {
                        emulator::freeze_clock(state, caller, ConnectRequest(emulator_pb::FreezeClockRequest {}))
                    })
                    .await?
                    .clock
                }
                "resume" => {
                    call(&app, &viewer, rpc::RESUME_CLOCK, |state, caller| {
                        emulator::resume_clock(state, caller, ConnectRequest(emulator_pb::ResumeClockRequest {}))
                    })
                    .await?
                    .clock
                }
                "advance" => {
                    let fields = fields(&body)?;
                    let text = fields.get("seconds").map(|text| text.trim()).unwrap_or_default();
                    let seconds: i64 = text.parse().ok().filter(|seconds| *seconds > 0).ok_or_else(|| {
                        Refusal::BadRequest(format!("seconds: {text:?} is not a whole number above 0"))
                    })?;
                    let request = emulator_pb::AdvanceClockRequest {
                        duration: Some(pbjson_types::Duration { seconds, nanos: 0 }),
                    };
                    call(&app, &viewer, rpc::ADVANCE_CLOCK, |state, caller| {
                        emulator::advance_clock(state, caller, ConnectRequest(request))
                    })
                    .await?
                    .clock
                }
                other => return Err(Refusal::NotFound(format!("no clock action {other:?}"))),
            };
            let frozen = clock.is_some_and(|clock| clock.frozen);
            Ok(html! { span.done { "Done: the clock is " (if frozen { "frozen" } else { "running" }) "." } })
        }
        .await,
    )
}
