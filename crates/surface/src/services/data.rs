//! The data operations (Exec, StreamExec, StreamLogs, WriteFile, ReadFile), served both by
//! SandboxService (the gateway path the Python client uses) and SandboxDataPlaneService. They find
//! the caller's RUNNING sandbox in the world and hand the work to the [`SandboxRuntime`]; with no
//! runtime attached they answer UNAVAILABLE (`CWSANDBOX_BACKEND_UNAVAILABLE`). On the direct data
//! plane's endpoint the same handlers serve a caller whose client certificate binds it to one
//! sandbox and its granted operations (`crate::direct`), checked first.
//!
//! [`SandboxRuntime`]: cwsandbox_host::runtime::SandboxRuntime

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use bytes::Bytes;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse, StreamBody, Streaming};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::exec_stream_request::Message as Frame;
use cwsandbox_api::sandbox_v1::exec_stream_response::Message as Reply;
use cwsandbox_sim::Reason;
use cwsandbox_sim::data_target::{SandboxDataRefusal, SandboxNeeds};
use cwsandbox_sim::sandbox::SandboxView;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use tokio::sync::mpsc;

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::catalogue::names;
use crate::convert;
use crate::direct::Permission;
use crate::errors::ApiError;
use cwsandbox_host::clock::EmulatorClock;
use cwsandbox_host::runtime::{ExecEvent, ExecInput, ExecSpec, LogEvent, LogRequest, SandboxRuntime, Target, TtySize};

/// A boxed stream of response frames.
pub type Frames<T> = StreamBody<BoxStream<'static, Result<T, ConnectError>>>;

/// Finds the caller's sandbox, the runtime and the container for a data operation (the world's
/// data-target query, waiting for a sandbox whose containers the host is starting). A RUNNING
/// sandbox's containers are started: the world calls it RUNNING only once the runtime said so.
async fn resolve(
    app: &App,
    caller: &Caller,
    sandbox_id: &str,
    container: &str,
    needs: SandboxNeeds,
) -> Result<(Arc<dyn SandboxRuntime>, Target), ApiError> {
    let operation = caller.method();
    let id = convert::required("sandbox_id", sandbox_id)?;
    // A direct data-plane caller acts on its certificate's sandbox, with its permissions only.
    if let Some(grant) = caller.grant() {
        let permission = Permission::of_method(operation).ok_or_else(|| {
            ApiError::new(
                tonic::Code::PermissionDenied,
                Reason::PermissionDenied,
                format!("{operation} is not a data operation"),
            )
        })?;
        grant.allows(permission, id)?;
    }
    let found = app.driver().sandbox_data_target(&caller.org, id, container, needs).await;
    let not_found = |error| super::sandbox::not_found(error, id);
    // A missing sandbox is answered before a missing runtime; its state and container after.
    let found = match found {
        Err(SandboxDataRefusal::NoSandbox(error)) => return Err(not_found(error)),
        found => found,
    };
    let runtime = Arc::clone(app.runtime(operation)?);
    let target = found.map_err(|refusal| match refusal {
        SandboxDataRefusal::NoSandbox(error) => not_found(error),
        SandboxDataRefusal::NotRunning(view) => not_running(&view),
        SandboxDataRefusal::NoSuchContainer => {
            let field = if operation == names::STREAM_EXEC { "init.container" } else { "container" };
            ApiError::container_not_found(
                field,
                format!("sandbox {id} has no container named {container:?}"),
                container,
            )
        }
    })?;
    Ok((runtime, target))
}

/// FAILED_PRECONDITION (`CWSANDBOX_SANDBOX_NOT_RUNNING`) naming the sandbox's state.
pub(super) fn not_running(view: &SandboxView) -> ApiError {
    let id = view.id.as_str();
    let state = convert::state(view.state).as_str_name();
    let why = if view.state_reason.is_empty() { String::new() } else { format!(" ({})", view.state_reason) };
    ApiError::new(
        tonic::Code::FailedPrecondition,
        Reason::SandboxNotRunning,
        format!("sandbox {id} is {state}{why}, not STATE_RUNNING"),
    )
    .with_metadata("sandbox_id", id)
    .with_metadata("state", state)
}

fn now(app: &App) -> cwsandbox_api::wkt::Timestamp {
    convert::timestamp(cwsandbox_sim::time::Clock::now(app.driver().clock()))
}

/// StreamExec: `init` first; then `ready`, output, and exactly one `exit` or `error` frame. The
/// end of the request stream is the end of stdin (the client half-closes right after `init` when
/// it sends no stdin).
pub async fn stream_exec(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(mut requests): ConnectRequest<Streaming<pb::ExecStreamRequest>>,
) -> Result<ConnectResponse<Frames<pb::ExecStreamResponse>>, ConnectError> {
    let init = match requests.next().await {
        Some(Ok(pb::ExecStreamRequest { message: Some(Frame::Init(init)) })) => init,
        Some(Ok(_)) | None => {
            return respond(
                caller.method(),
                Err(ApiError::invalid_field("init", "the first frame of StreamExec must be init")),
            );
        }
        Some(Err(error)) => return Err(error),
    };
    if init.command.is_empty() {
        return respond(caller.method(), Err(ApiError::missing_field("init.command")));
    }
    let (runtime, target) = match resolve(&app, &caller, &init.sandbox_id, &init.container, SandboxNeeds::Running).await
    {
        Ok(found) => found,
        Err(error) => return respond(caller.method(), Err(error)),
    };
    let tty = init.tty.then_some(TtySize { width: init.tty_width, height: init.tty_height });
    let spec = ExecSpec { command: init.command, env: init.env.into_iter().collect(), tty };
    let session = match runtime.exec(target, spec).await {
        Ok(session) => session,
        Err(error) => return respond(caller.method(), Err(error.into())),
    };
    tokio::spawn(forward_input(requests, session.input));
    let ready =
        pb::ExecStreamResponse { message: Some(Reply::Ready(pb::ExecStreamReady { ready_time: Some(now(&app)) })) };
    let limits = app.limits();
    let output = bounded_output(session.output, limits.stream_backpressure_bytes, limits.stream_stall);
    let frames = stream::once(async move { Ok(ready) }).chain(exec_frames(app, output));
    Ok(ConnectResponse::new(StreamBody::new(frames.boxed())))
}

/// Client frames after `init` become runtime input; the end of the stream is the end of stdin.
async fn forward_input(mut requests: Streaming<pb::ExecStreamRequest>, input: mpsc::Sender<ExecInput>) {
    while let Some(frame) = requests.next().await {
        let item = match frame {
            Ok(pb::ExecStreamRequest { message: Some(Frame::Stdin(data)) }) => ExecInput::Stdin(Bytes::from(data)),
            Ok(pb::ExecStreamRequest { message: Some(Frame::Resize(size)) }) => {
                ExecInput::Resize(TtySize { width: size.width, height: size.height })
            }
            Ok(pb::ExecStreamRequest { message: Some(Frame::Close(_)) }) => break,
            Ok(pb::ExecStreamRequest { message: Some(Frame::Init(_)) | None }) => {
                tracing::debug!("StreamExec: ignoring a second init or an empty frame");
                continue;
            }
            // The client cancelled (it does so after the terminal frame): nothing more to send.
            Err(_) => return,
        };
        if input.send(item).await.is_err() {
            return;
        }
    }
    let _ = input.send(ExecInput::Close).await;
}

/// The in-band code of a stream ended because its reader fell behind (the client's
/// `SandboxStreamBackpressureError`).
pub const STREAM_BACKPRESSURE: &str = "STREAM_BACKPRESSURE";

/// A command's output handed to the client's stream through a buffer of `limit` bytes: while
/// the buffer is full the command's output waits (the pipe holds the command back, and a reader
/// that keeps up, however slowly, gets every byte); a reader that takes nothing for `stall`
/// while the buffer is full has fallen behind, and the stream ends after what waits with
/// `STREAM_BACKPRESSURE` (the command is ended: its output has nowhere to go), as the cloud ends
/// such a stream rather than hold the command forever or drop output silently.
fn bounded_output(
    mut output: BoxStream<'static, ExecEvent>,
    limit: usize,
    stall: std::time::Duration,
) -> BoxStream<'static, ExecEvent> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let waiting = Arc::new(AtomicUsize::new(0));
    let taken = Arc::new(tokio::sync::Notify::new());
    let (sender, receiver) = mpsc::unbounded_channel::<(ExecEvent, usize)>();
    let (counted, room) = (Arc::clone(&waiting), Arc::clone(&taken));
    tokio::spawn(async move {
        loop {
            // A client that went away (a cancelled stream) ends the command at once, even one
            // that writes nothing.
            let event = tokio::select! {
                event = output.next() => event,
                () = sender.closed() => return,
            };
            let Some(event) = event else { return };
            let size = match &event {
                ExecEvent::Stdout(data) | ExecEvent::Stderr(data) => data.len(),
                ExecEvent::Exited(_) | ExecEvent::Failed { .. } => 0,
            };
            counted.fetch_add(size, Ordering::SeqCst);
            if sender.send((event, size)).is_err() {
                return;
            }
            // Full: wait for the reader to take something, for `stall` at most each time.
            while counted.load(Ordering::SeqCst) > limit {
                let freed = room.notified();
                if counted.load(Ordering::SeqCst) <= limit {
                    break;
                }
                let took = tokio::select! {
                    took = tokio::time::timeout(stall, freed) => took.is_ok(),
                    () = sender.closed() => return,
                };
                if !took {
                    let ended = ExecEvent::Failed {
                        code: STREAM_BACKPRESSURE.to_owned(),
                        message: format!(
                            "the output stream ended early: its reader took none of the {limit} bytes waiting for it in {} s; some output was lost",
                            stall.as_secs()
                        ),
                    };
                    let _ = sender.send((ended, 0));
                    return;
                }
            }
        }
    });
    stream::unfold((receiver, waiting, taken), |(mut receiver, waiting, taken)| async move {
        let (event, size) = receiver.recv().await?;
        waiting.fetch_sub(size, Ordering::SeqCst);
        taken.notify_one();
        Some((event, (receiver, waiting, taken)))
    })
    .boxed()
}

/// Runtime events as response frames, ending with exactly one `exit` or `error` (G5).
fn exec_frames(
    app: App,
    output: BoxStream<'static, ExecEvent>,
) -> impl futures::Stream<Item = Result<pb::ExecStreamResponse, ConnectError>> + Send + 'static {
    stream::unfold((output, false, app), |(mut output, done, app)| async move {
        if done {
            return None;
        }
        let (reply, done) = match output.next().await {
            Some(ExecEvent::Stdout(data)) => (output_frame(pb::exec_stream_output::Stream::Stdout, data), false),
            Some(ExecEvent::Stderr(data)) => (output_frame(pb::exec_stream_output::Stream::Stderr, data), false),
            Some(ExecEvent::Exited(exit_code)) => {
                (Reply::Exit(pb::ExecStreamExit { exit_code, completed_time: Some(now(&app)) }), true)
            }
            Some(ExecEvent::Failed { code, message }) => (Reply::Error(pb::ExecStreamError { message, code }), true),
            None => (
                Reply::Error(pb::ExecStreamError {
                    message: "the command's output ended without an exit status".to_owned(),
                    code: "STREAM_INTERRUPTED".to_owned(),
                }),
                true,
            ),
        };
        Some((Ok(pb::ExecStreamResponse { message: Some(reply) }), (output, done, app)))
    })
}

fn output_frame(stream: pb::exec_stream_output::Stream, data: Bytes) -> Reply {
    Reply::Output(pb::ExecStreamOutput { stream: stream as i32, data: data.to_vec() })
}

/// Exec: runs a command with empty stdin and returns its output at once. `max_output_bytes`
/// caps each stream (0: half the room the message limit leaves, so both fit); the rest is counted
/// and dropped. Output kept under a larger cap that does not fit in one message is
/// RESOURCE_EXHAUSTED on every protocol, pointing at StreamExec.
pub async fn exec(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ExecRequest>,
) -> Result<ConnectResponse<pb::ExecResponse>, ConnectError> {
    respond(caller.method(), exec_unary(&app, &caller, request).await)
}

async fn exec_unary(app: &App, caller: &Caller, request: pb::ExecRequest) -> Result<pb::ExecResponse, ApiError> {
    if request.command.is_empty() {
        return Err(ApiError::missing_field("command"));
    }
    if request.max_output_bytes < 0 {
        return Err(ApiError::invalid_field("max_output_bytes", "must not be negative"));
    }
    let (runtime, target) =
        resolve(app, caller, &request.sandbox_id, &request.container, SandboxNeeds::Running).await?;
    let spec = ExecSpec { command: request.command, env: request.env.into_iter().collect(), tty: None };
    let mut session = runtime.exec(target, spec).await?;
    let _ = session.input.send(ExecInput::Close).await;
    let max_message_bytes = app.limits().max_message_bytes;
    let cap = match usize::try_from(request.max_output_bytes) {
        Ok(0) | Err(_) => max_message_bytes.saturating_sub(EXEC_RESPONSE_OVERHEAD) / 2,
        Ok(cap) => cap,
    };
    let mut response = pb::ExecResponse::default();
    let keep = |buffer: &mut Vec<u8>, produced: &mut i64, truncated: &mut bool, data: &[u8]| {
        *produced += data.len() as i64;
        let room = cap.saturating_sub(buffer.len());
        buffer.extend_from_slice(&data[..data.len().min(room)]);
        *truncated |= data.len() > room;
    };
    while let Some(event) = session.output.next().await {
        match event {
            ExecEvent::Stdout(data) => {
                keep(&mut response.stdout, &mut response.stdout_bytes_produced, &mut response.stdout_truncated, &data)
            }
            ExecEvent::Stderr(data) => {
                keep(&mut response.stderr, &mut response.stderr_bytes_produced, &mut response.stderr_truncated, &data)
            }
            ExecEvent::Exited(code) => {
                response.exit_code = code;
                return fits(response, max_message_bytes);
            }
            ExecEvent::Failed { code, message } => {
                return Err(ApiError::new(
                    tonic::Code::Internal,
                    Reason::BackendUnavailable,
                    format!("{code}: {message}"),
                ));
            }
        }
    }
    Err(ApiError::new(
        tonic::Code::Unavailable,
        Reason::BackendUnavailable,
        "the command's output ended without an exit status",
    ))
}

/// Room an ExecResponse needs besides its output: tags, lengths, the counters and the exit code.
const EXEC_RESPONSE_OVERHEAD: usize = 64;

/// The response, unless it is larger than one message may be: without this check the transports
/// fail it while encoding, each with its own code (gRPC OUT_OF_RANGE, Connect resource_exhausted).
fn fits(response: pb::ExecResponse, max_message_bytes: usize) -> Result<pb::ExecResponse, ApiError> {
    use prost::Message;
    let size = response.encoded_len();
    if size <= max_message_bytes {
        return Ok(response);
    }
    Err(ApiError::new(
        tonic::Code::ResourceExhausted,
        Reason::ResponseTooLarge,
        format!(
            "the command's output ({} bytes of stdout, {} of stderr kept) makes a {size}-byte Exec response, above the \
             message limit of {max_message_bytes} bytes: use StreamExec for large output, or a smaller max_output_bytes",
            response.stdout.len(),
            response.stderr.len()
        ),
    )
    .with_metadata("size_bytes", size.to_string())
    .with_metadata("max_size_bytes", max_message_bytes.to_string()))
}

/// StreamLogs: the main container's output; `follow` keeps the stream open.
pub async fn stream_logs(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::StreamLogsRequest>,
) -> Result<ConnectResponse<Frames<pb::LogEntry>>, ConnectError> {
    let needs = if request.follow { SandboxNeeds::Running } else { SandboxNeeds::RunningOrEnded };
    let (runtime, target) = match resolve(&app, &caller, &request.sandbox_id, &request.container, needs).await {
        Ok(found) => found,
        Err(error) => return respond(caller.method(), Err(error)),
    };
    if request.tail_lines < 0 {
        return respond(caller.method(), Err(ApiError::invalid_field("tail_lines", "must not be negative")));
    }
    let log_request = LogRequest {
        follow: request.follow,
        tail_lines: u32::try_from(request.tail_lines).ok().filter(|lines| *lines > 0),
        since: request.since_time.as_ref().map(|since| EmulatorClock::to_system_time(convert::sim_time(since))),
        timestamps: request.timestamps,
        resume: (!request.resume_log_session_id.is_empty())
            .then(|| (request.resume_log_session_id.clone(), request.resume_log_offset)),
    };
    let events = match runtime.logs(target, log_request).await {
        Ok(events) => events,
        Err(error) => return respond(caller.method(), Err(error.into())),
    };
    let entries = events.map(|event| {
        Ok(match event {
            LogEvent::Chunk { data, time, session_id, next_offset } => pb::LogEntry {
                data: data.to_vec(),
                timestamp: Some(cwsandbox_api::wkt::Timestamp::from(time)),
                log_session_id: session_id,
                next_log_offset: next_offset,
                error: None,
            },
            LogEvent::Failed { code, message } => pb::LogEntry {
                timestamp: Some(cwsandbox_api::wkt::Timestamp::from(SystemTime::now())),
                error: Some(pb::LogStreamError { message, code }),
                ..Default::default()
            },
        })
    });
    Ok(ConnectResponse::new(StreamBody::new(entries.boxed())))
}

/// WriteFile: the whole content in one message.
pub async fn write_file(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::WriteFileRequest>,
) -> Result<ConnectResponse<pb::WriteFileResponse>, ConnectError> {
    respond(caller.method(), write(&app, &caller, request).await)
}

async fn write(app: &App, caller: &Caller, request: pb::WriteFileRequest) -> Result<pb::WriteFileResponse, ApiError> {
    let (runtime, target) =
        resolve(app, caller, &request.sandbox_id, &request.container, SandboxNeeds::Running).await?;
    let path = convert::required("path", &request.path)?.to_owned();
    let max = app.limits().max_file_bytes;
    let size = request.content.len() as u64;
    if size > max {
        return Err(cwsandbox_host::runtime::RuntimeError::FileTooLarge {
            path,
            size_bytes: size,
            max_size_bytes: max,
        }
        .into());
    }
    runtime.write_file(target, path, Bytes::from(request.content)).await?;
    Ok(pb::WriteFileResponse::default())
}

/// ReadFile: the whole content in one message, up to the file limit.
pub async fn read_file(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ReadFileRequest>,
) -> Result<ConnectResponse<pb::ReadFileResponse>, ConnectError> {
    respond(caller.method(), read(&app, &caller, request).await)
}

async fn read(app: &App, caller: &Caller, request: pb::ReadFileRequest) -> Result<pb::ReadFileResponse, ApiError> {
    let (runtime, target) =
        resolve(app, caller, &request.sandbox_id, &request.container, SandboxNeeds::Running).await?;
    let path = convert::required("path", &request.path)?.to_owned();
    let content = runtime.read_file(target, path, app.limits().max_file_bytes).await?;
    Ok(pb::ReadFileResponse { content: content.to_vec() })
}
