//! `…/pods/<name>/exec`: what `kubectl exec [-i] [-t] POD -- COMMAND` opens, for a sandbox's Pod.
//! The command runs in the sandbox through the process runtime, as StreamExec's commands do.
//!
//! kubectl 1.30 and later speak the WebSocket stream protocol (`v5.channel.k8s.io`; `v4` is
//! accepted too): every binary message starts with a channel byte — 0 stdin, 1 stdout, 2 stderr,
//! 3 the final `Status`, 4 terminal resizes (`{"Width":…,"Height":…}`) — and v5 adds
//! `[255, channel]`, the client's end of a channel (its stdin reached EOF). The server ends with
//! the `Status` on channel 3 and a normal close, which is what ends kubectl's readers: a
//! non-zero exit is `reason: NonZeroExitCode` with the code as the `ExitCode` cause, and kubectl
//! exits with it. Older kubectl's SPDY/3.1 upgrade is refused by name (the fidelity table says so).
//!
//! The socket keeps its connection's slot of `--max-connections` while it lasts, and a client
//! silent for the connection's keep-alive interval is pinged (kubectl pings every 5 s itself); one
//! that then sends nothing for the keep-alive timeout is taken for gone, and its command is
//! killed as when it closes the socket.
//!
//! Errors that can be known before the command starts (no such Pod, container, a Pod that is not
//! running, a Pod that runs no process here) are HTTP answers with a `Status` body, as the API
//! server gives them, so kubectl prints `Error from server (…)`.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use cwsandbox_sim::data_target::{PodDataRefusal, PodNeeds};
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, Method, Uri};
use serde_json::json;
use tokio::sync::mpsc;

use super::status::Status;
use super::{authorize, pod_refused};
use crate::app::App;
use crate::connection::ConnectionLease;
use cwsandbox_host::runtime::{ExecEvent, ExecInput, ExecSession, ExecSpec, TtySize};

/// The stream protocols served, in the order preferred.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5: `[CLOSE, channel]` half-closes a channel.
const CLOSE: u8 = 255;

/// A terminal's size before the client's first resize message (kubectl sends one at once).
const DEFAULT_TTY: TtySize = TtySize { width: 80, height: 24 };

/// `PodExecOptions` as the query carries them.
#[derive(Debug, Default, PartialEq, Eq)]
struct ExecParams {
    command: Vec<String>,
    container: String,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn flag(value: &str) -> bool {
    matches!(value, "true" | "1")
}

impl ExecParams {
    fn parse(uri: &Uri) -> Result<ExecParams, Status> {
        let mut params = ExecParams::default();
        for (key, value) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "command" => params.command.push(value.into_owned()),
                "container" => params.container = value.into_owned(),
                "stdin" => params.stdin = flag(&value),
                "stdout" => params.stdout = flag(&value),
                "stderr" => params.stderr = flag(&value),
                "tty" => params.tty = flag(&value),
                _ => {}
            }
        }
        if params.command.is_empty() {
            return Err(Status::bad_request("you must specify at least one command for the container"));
        }
        if !(params.stdin || params.stdout || params.stderr) {
            return Err(Status::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        if params.tty && params.stderr {
            // A terminal has one output: kubectl sends stderr=false with tty=true.
            return Err(Status::bad_request("stderr cannot be requested with tty: a terminal merges it into stdout"));
        }
        Ok(params)
    }
}

/// The route's handler: GET with a WebSocket upgrade (kubectl), or a refusal the client prints.
pub(super) async fn handler(
    State(app): State<App>,
    Path((namespace, name)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    axum::Extension(lease): axum::Extension<ConnectionLease>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    match serve(&app, &namespace, &name, &method, &uri, &headers, upgrade.ok()).await {
        Ok((upgrade, session, params)) => upgrade.on_upgrade(move |socket| relay(socket, session, params, lease)),
        Err(status) => status.into_response(),
    }
}

/// Checks the request, starts the command and gives back what the upgraded socket relays.
async fn serve(
    app: &App,
    namespace: &str,
    name: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    upgrade: Option<WebSocketUpgrade>,
) -> Result<(WebSocketUpgrade, ExecSession, ExecParams), Status> {
    let scope = authorize(app, headers, "create", "pods/exec", Some(namespace))?;
    if method != Method::GET && method != Method::POST {
        return Err(Status::method_not_allowed("pods", name));
    }
    let params = ExecParams::parse(uri)?;
    let target = app
        .driver()
        .data_target(|| {
            app.driver()
                .read_world(|world| world.pod_data_target(&scope, namespace, name, &params.container, PodNeeds::Exec))
        })
        .await
        .map_err(|refusal| refused(refusal, name))?;
    let Some(upgrade) = upgrade else {
        let offered = headers
            .get(http::header::UPGRADE)
            .and_then(|value| value.to_str().ok())
            .map(|value| format!(" (this request asked for {value:?})"))
            .unwrap_or_default();
        return Err(Status::bad_request(format!(
            "pods/exec is served over a WebSocket upgrade with protocol {} (kubectl 1.30 and later){offered}; SPDY/3.1 is not emulated",
            PROTOCOLS.join(" or ")
        )));
    };
    let upgrade = upgrade.protocols(PROTOCOLS);
    if upgrade.selected_protocol().is_none() {
        return Err(Status::bad_request(format!(
            "pods/exec needs the WebSocket subprotocol {}; the request offered none of them",
            PROTOCOLS.join(" or ")
        )));
    }
    let runtime = Arc::clone(app.runtime("pods/exec").map_err(|error| Status::from_api(&error, "pods", name))?);
    let sandbox_id = target.sandbox_id.clone();
    let spec =
        ExecSpec { command: params.command.clone(), env: Default::default(), tty: params.tty.then_some(DEFAULT_TTY) };
    let session = runtime.exec(target, spec).await.map_err(|error| Status::from_api(&error.into(), "pods", name))?;
    tracing::info!(sandbox_id, pod = name, command = ?params.command, tty = params.tty, "kubectl exec");
    Ok((upgrade, session, params))
}

/// One binary message on `channel`.
fn framed(channel: u8, data: &[u8]) -> Message {
    let mut message = BytesMut::with_capacity(data.len() + 1);
    message.put_u8(channel);
    message.put_slice(data);
    Message::Binary(message.freeze())
}

/// The `Status` kubectl reads from channel 3 once the command ended.
fn final_status(command: &[String], event: &ExecEvent) -> serde_json::Value {
    match event {
        ExecEvent::Exited(0) => json!({"metadata": {}, "status": "Success"}),
        ExecEvent::Exited(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        ExecEvent::Failed { code, message } => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("{code}: {message}"),
            "reason": "InternalError",
            "code": 500,
        }),
        ExecEvent::Stdout(_) | ExecEvent::Stderr(_) => json!({"metadata": {}, "status": "Success"}),
    }
}

/// What the client's messages ask of the command.
fn input_of(message: &[u8], streams: Streams) -> Option<ExecInput> {
    let (&channel, data) = message.split_first()?;
    match channel {
        STDIN if streams.stdin && !data.is_empty() => Some(ExecInput::Stdin(Bytes::copy_from_slice(data))),
        RESIZE if streams.tty => {
            let size: serde_json::Value = serde_json::from_slice(data).ok()?;
            let dimension = |key: &str| size.get(key).and_then(serde_json::Value::as_u64).map(|value| value as u32);
            Some(ExecInput::Resize(TtySize { width: dimension("Width")?, height: dimension("Height")? }))
        }
        CLOSE if data.first() == Some(&STDIN) => Some(ExecInput::Close),
        _ => None,
    }
}

/// Which streams the client asked for.
#[derive(Debug, Clone, Copy, Default)]
struct Streams {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

/// What the socket's reader tells the relay about the client.
enum FromClient {
    /// Nothing came for the keep-alive interval: ping it.
    Quiet,
    /// It closed the socket, broke it, or answered no ping.
    Gone,
}

/// Relays the socket and the command until the command ends (then the status and a normal close)
/// or the client goes away (then the session is dropped, which kills the command). `lease` is the
/// connection's slot, held until the socket is done, and the keep-alive the client is held to.
async fn relay(socket: WebSocket, session: ExecSession, params: ExecParams, lease: ConnectionLease) {
    let keep_alive = (lease.keep_alive_interval, lease.keep_alive_timeout);
    let ExecParams { command, stdin, stdout, stderr, tty, .. } = params;
    let streams = Streams { stdin, stdout, stderr, tty };
    let ExecSession { input, mut output } = session;
    let (mut sink, mut incoming) = socket.split();
    if !streams.stdin {
        let _ = input.send(ExecInput::Close).await;
    }
    // The client's messages are read on their own task, so a command that reads stdin and one
    // that writes output both make progress; the reader ends with the socket.
    let (to_relay, mut from_client) = mpsc::channel::<FromClient>(1);
    let reader = tokio::spawn(async move {
        let mut stdin_open = streams.stdin;
        let mut pinged = false;
        loop {
            let wait = if pinged { keep_alive.1 } else { keep_alive.0 };
            let message = match tokio::time::timeout(wait, incoming.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(_) => break,
                Err(_) if pinged => {
                    tracing::debug!("an exec socket answered no ping for {wait:?}: taken for gone");
                    break;
                }
                Err(_) => {
                    pinged = true;
                    if to_relay.send(FromClient::Quiet).await.is_err() {
                        break;
                    }
                    continue;
                }
            };
            // Any frame (a pong, kubectl's own pings) shows the client is there.
            pinged = false;
            match message {
                Message::Binary(data) => {
                    let Some(request) = input_of(&data, streams) else { continue };
                    let closing = request == ExecInput::Close;
                    if closing && !stdin_open {
                        continue;
                    }
                    if input.send(request).await.is_err() {
                        break;
                    }
                    stdin_open &= !closing;
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = to_relay.send(FromClient::Gone).await;
        // Holding `input` until here keeps the command's stdin open while the client is there.
        drop(input);
    });
    loop {
        let event = tokio::select! {
            event = output.next() => event,
            client = from_client.recv() => {
                if matches!(client, Some(FromClient::Quiet))
                    && sink.send(Message::Ping(Bytes::new())).await.is_ok()
                {
                    continue;
                }
                reader.abort();
                return;
            }
        };
        let message = match event {
            Some(ExecEvent::Stdout(data)) if streams.stdout => framed(STDOUT, &data),
            Some(ExecEvent::Stderr(data)) if streams.stderr => framed(STDERR, &data),
            Some(ExecEvent::Stdout(_) | ExecEvent::Stderr(_)) => continue,
            Some(end @ (ExecEvent::Exited(_) | ExecEvent::Failed { .. })) => {
                let _ = sink.send(framed(ERROR, final_status(&command, &end).to_string().as_bytes())).await;
                break;
            }
            None => {
                let end = ExecEvent::Failed {
                    code: "STREAM_ENDED".to_owned(),
                    message: "the command's output ended without an exit status".to_owned(),
                };
                let _ = sink.send(framed(ERROR, final_status(&command, &end).to_string().as_bytes())).await;
                break;
            }
        };
        if sink.send(message).await.is_err() {
            reader.abort();
            return;
        }
    }
    let _ = sink.send(Message::Close(Some(CloseFrame { code: close_code::NORMAL, reason: "".into() }))).await;
    // The client answers the close; the reader sees it (or the socket's end) and stops. With the
    // relay no longer listening, its first keep-alive turn ends it too, so a client that never
    // answers holds the slot for one interval at most.
    drop(from_client);
    let _ = reader.await;
    drop(lease);
}

/// What the API server answers when `pods/exec` has no running container to act in.
fn refused(refusal: PodDataRefusal, name: &str) -> Status {
    match refusal {
        PodDataRefusal::Pod(refusal) => pod_refused(refusal, name),
        PodDataRefusal::NotStarted { container, .. } | PodDataRefusal::SandboxNotReady { container } => {
            Status::bad_request(format!("unable to upgrade connection: container not found (\"{container}\")"))
        }
        PodDataRefusal::PodCompleted { phase } => Status::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {}",
            phase.as_str()
        )),
        PodDataRefusal::NoProcess => Status::bad_request(format!(
            "pod {name} runs no process in the emulator: kubectl exec reaches sandbox Pods only (the fidelity table lists it)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<ExecParams, Status> {
        ExecParams::parse(&format!("/api/v1/namespaces/n/pods/p/exec?{query}").parse::<Uri>().expect("uri"))
    }

    #[test]
    fn kubectl_queries_parse() {
        let params = parse("command=sh&command=-c&command=echo+hi&container=main&stdin=true&stdout=true&tty=true")
            .expect("valid");
        assert_eq!(
            params,
            ExecParams {
                command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                container: "main".into(),
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true,
            }
        );
    }

    #[test]
    fn refusals_name_what_is_missing() {
        assert!(parse("stdout=true").is_err(), "no command");
        assert!(parse("command=true").is_err(), "no stream");
        assert!(parse("command=sh&stdout=true&stderr=true&tty=true").is_err(), "stderr with a tty");
    }

    #[test]
    fn exit_codes_read_as_kubelet_writes_them() {
        let command = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        assert_eq!(final_status(&command, &ExecEvent::Exited(0)), json!({"metadata": {}, "status": "Success"}));
        let failure = final_status(&command, &ExecEvent::Exited(3));
        assert_eq!(failure["reason"], "NonZeroExitCode");
        assert_eq!(failure["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert_eq!(
            failure["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
    }

    #[test]
    fn client_messages_map_to_inputs() {
        let streams = Streams { stdin: true, tty: true, ..Default::default() };
        assert_eq!(input_of(b"\x00abc", streams), Some(ExecInput::Stdin(Bytes::from_static(b"abc"))));
        assert_eq!(input_of(br#"{"Width":120,"Height":40}"#, streams), None, "no channel byte, no resize");
        assert_eq!(
            input_of(b"\x04{\"Width\":120,\"Height\":40}", streams),
            Some(ExecInput::Resize(TtySize { width: 120, height: 40 }))
        );
        assert_eq!(input_of(b"\xff\x00", streams), Some(ExecInput::Close));
        assert_eq!(input_of(b"\xff\x01", streams), None, "only stdin can be half-closed by the client");
        let no_stdin = Streams { stdout: true, ..Default::default() };
        assert_eq!(input_of(b"\x00abc", no_stdin), None, "stdin was not asked for");
    }
}
