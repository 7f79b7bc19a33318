//! The request log's entries (`cwsandbox_surface::requests`): each answer's body is watched to
//! its end, so the entry has the code the client got and the time the whole answer took, on
//! every protocol: gRPC's status (in the headers of a trailers-only answer, else in the
//! trailers), Connect unary's HTTP status and error body, Connect streaming's end-of-stream
//! message.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Body;
use bytes::Bytes;
use connectrpc_axum::message::error::{code_from_status, code_to_tonic};
use cwsandbox_surface::app::App;
use cwsandbox_surface::faults::code_name;
use cwsandbox_surface::requests::{CallRecord, method_name};
use http::{HeaderMap, StatusCode};
use http_body::Frame;

/// The 5-byte prefix of every gRPC and Connect streaming message.
const ENVELOPE: usize = 5;
/// Connect's end-of-stream flag.
const END_STREAM: u8 = 0x02;
/// The most of an error body or end-of-stream message read for its code.
const ERROR_BODY_LIMIT: usize = 16 << 10;

/// What the guard learned of a call before it answered.
#[derive(Debug, Default)]
pub struct CallNote {
    /// The caller's organization and user, once authenticated.
    pub org: String,
    /// The caller's user name.
    pub user: String,
    /// The fault rules that hit the call.
    pub faults: Vec<String>,
    /// Not an RPC of the API's own (health, reflection): not logged.
    pub unlogged: bool,
}

/// How the answer's code is to be read.
enum Reading {
    /// Known already.
    Known(String),
    /// gRPC: from the trailers.
    GrpcTrailers,
    /// Connect unary error: from the JSON body's `code`.
    ConnectError { fallback: String, body: Vec<u8> },
    /// Connect streaming: from the end-of-stream message, `OK` when it carries no error.
    ConnectStream { header: [u8; ENVELOPE], have: usize, remaining: usize, ending: bool, message: Vec<u8> },
}

/// Wraps `response` so its call is logged in `app`'s request log when its body ends (or is
/// dropped: a client that went away).
pub fn recorded(
    app: &App,
    response: http::Response<Body>,
    note: CallNote,
    method: String,
    started: Instant,
    at: SystemTime,
) -> http::Response<Body> {
    if note.unlogged {
        return response;
    }
    let reading = reading_of(response.status(), response.headers());
    let record = CallRecord {
        sequence: 0,
        at,
        method: method_name(&method),
        org: note.org,
        user: note.user,
        code: String::new(),
        duration: Default::default(),
        faults: note.faults,
        from_dashboard: false,
    };
    let app = app.clone();
    response.map(|body| Body::new(RecordedBody { body, reading, pending: Some((app, record, started)) }))
}

fn reading_of(status: StatusCode, headers: &HeaderMap) -> Reading {
    if let Some(code) = headers.get("grpc-status").and_then(|value| value.to_str().ok()) {
        return Reading::Known(grpc_code_name(code));
    }
    let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or("");
    if content_type.starts_with("application/grpc") {
        return Reading::GrpcTrailers;
    }
    if content_type.starts_with("application/connect+") {
        return Reading::ConnectStream {
            header: [0; ENVELOPE],
            have: 0,
            remaining: 0,
            ending: false,
            message: Vec::new(),
        };
    }
    if status.is_success() {
        return Reading::Known("OK".to_owned());
    }
    let fallback = code_name(code_to_tonic(code_from_status(status))).to_owned();
    Reading::ConnectError { fallback, body: Vec::new() }
}

/// A gRPC status number as its code name.
fn grpc_code_name(number: &str) -> String {
    match number.trim().parse::<i32>() {
        Ok(number) => code_name(tonic::Code::from_i32(number)).to_owned(),
        Err(_) => "UNKNOWN".to_owned(),
    }
}

/// The `code` of a Connect error object (`{"code": "not_found", …}`, or an end-of-stream
/// message's `{"error": {"code": …}}`).
fn connect_code(json: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    let error = value.get("error").unwrap_or(&value);
    error.get("code").and_then(|code| code.as_str()).map(str::to_uppercase)
}

struct RecordedBody {
    body: Body,
    reading: Reading,
    pending: Option<(App, CallRecord, Instant)>,
}

impl RecordedBody {
    fn observe_data(&mut self, data: &Bytes) {
        match &mut self.reading {
            Reading::ConnectError { body, .. } => {
                let room = ERROR_BODY_LIMIT.saturating_sub(body.len());
                body.extend_from_slice(&data[..room.min(data.len())]);
            }
            Reading::ConnectStream { header, have, remaining, ending, message } => {
                let mut at = 0;
                while at < data.len() {
                    if *remaining > 0 {
                        let take = (*remaining).min(data.len() - at);
                        if *ending && message.len() < ERROR_BODY_LIMIT {
                            let room = ERROR_BODY_LIMIT - message.len();
                            message.extend_from_slice(&data[at..at + take.min(room)]);
                        }
                        *remaining -= take;
                        at += take;
                        continue;
                    }
                    header[*have] = data[at];
                    *have += 1;
                    at += 1;
                    if *have == ENVELOPE {
                        *have = 0;
                        *ending = header[0] & END_STREAM != 0;
                        *remaining = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                    }
                }
            }
            Reading::Known(_) | Reading::GrpcTrailers => {}
        }
    }

    fn observe_trailers(&mut self, trailers: &HeaderMap) {
        if let Reading::GrpcTrailers = self.reading {
            let code = trailers.get("grpc-status").and_then(|value| value.to_str().ok()).map(grpc_code_name);
            self.reading = Reading::Known(code.unwrap_or_else(|| "UNKNOWN".to_owned()));
        }
    }

    /// Logs the call with what was read of its answer; `complete`: the body ended (else the
    /// client went away first).
    fn finish(&mut self, complete: bool) {
        let Some((app, mut record, started)) = self.pending.take() else { return };
        record.duration = started.elapsed();
        record.code = match &self.reading {
            Reading::Known(code) => code.clone(),
            Reading::ConnectError { fallback, body } => connect_code(body).unwrap_or_else(|| fallback.clone()),
            Reading::ConnectStream { message, .. } => connect_code(message).unwrap_or_else(|| "OK".to_owned()),
            // A gRPC answer that ends without trailers did not finish.
            Reading::GrpcTrailers => "UNKNOWN".to_owned(),
        };
        if !complete {
            record.code = "CANCELLED".to_owned();
        }
        app.requests().record(record);
    }
}

impl http_body::Body for RecordedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.observe_data(data);
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.observe_trailers(trailers);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                this.reading = Reading::Known("INTERNAL".to_owned());
                this.finish(true);
            }
            Poll::Ready(None) => this.finish(true),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for RecordedBody {
    fn drop(&mut self) {
        // A body hyper saw was at its end is dropped without a last poll.
        let complete = http_body::Body::is_end_stream(&self.body);
        self.finish(complete);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_read_as_grpc_spells_them() {
        assert_eq!(grpc_code_name("0"), "OK");
        assert_eq!(grpc_code_name("5"), "NOT_FOUND");
        assert_eq!(grpc_code_name("9"), "FAILED_PRECONDITION");
        assert_eq!(grpc_code_name("x"), "UNKNOWN");
        assert_eq!(
            connect_code(br#"{"code":"permission_denied","message":"no"}"#).as_deref(),
            Some("PERMISSION_DENIED")
        );
        assert_eq!(connect_code(br#"{"error":{"code":"unavailable"}}"#).as_deref(), Some("UNAVAILABLE"));
        assert_eq!(connect_code(b"{}"), None);
        assert_eq!(code_name(code_to_tonic(connectrpc_axum::message::error::Code::NotFound)), "NOT_FOUND");
    }
}
