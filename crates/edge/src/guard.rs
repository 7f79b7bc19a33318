//! What every RPC goes through before a decoder sees its body, on every protocol.
//!
//! 1. **Authentication from the headers**, the request's only one. A request without a valid
//!    bearer token is answered UNAUTHENTICATED without reading its body (so nobody can make the
//!    server decode up to the message limit unauthenticated); an admitted one carries its
//!    [`Caller`] in its extensions, where the handlers' extractor takes it. `grpc.health.v1` and
//!    reflection need no token. On the direct data plane's endpoint the connection's client
//!    certificate stands in for the token (`cwsandbox_surface::direct`): unknown or expired is
//!    UNAUTHENTICATED, an RPC it does not grant PERMISSION_DENIED. The RPCs' shapes come from
//!    the one [`Catalogue`] of the API.
//! 2. **A bounded body.** A unary request (and the one request of a server-streaming RPC) is read
//!    here, before decoding: at most `max_request_bytes` (`max_message_bytes` for the RPCs that
//!    carry file content), with no more than `body_read_timeout` between two pieces of it. Then
//!    its decoded size is estimated from its bytes ([`crate::decoded_size`]: decoding amplifies,
//!    an empty element of a repeated message is 2 bytes on the wire and its whole struct in
//!    memory) and must stay within `max_decoded_request_bytes`. The wire bytes as they arrive,
//!    then the estimate, are reserved from a memory budget shared by every request in flight
//!    (`request_memory_bytes`), until the request's answer has begun. Beyond any of these:
//!    RESOURCE_EXHAUSTED, before anything is decoded.
//! 3. **Cardinality.** A gRPC unary or server-streaming call must carry exactly one request
//!    message; tonic would decode the first and silently drop the rest.
//!
//! Client-streaming RPCs (StreamExec) are not buffered: each of their messages is bounded by
//! `max_message_bytes` (over gRPC checked here from its prefix, so the code is RESOURCE_EXHAUSTED
//! as for every other oversized request) and handed on one at a time.
//!
//! Errors are answered in the protocol of the request: a trailers-only gRPC response (which
//! tonic-web turns into gRPC-Web), a Connect unary error, or a Connect end-of-stream message.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use connectrpc_axum::ConnectError;
use cwsandbox_sim::Reason;
use futures::future::BoxFuture;
use http::Request;
use http_body_util::BodyExt;
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Code;

use crate::call_record::CallNote;
use crate::fault_stream::{CutBody, Tail, string_field};
use crate::tls::PeerCertificate;
use cwsandbox_surface::app::App;
use cwsandbox_surface::auth::{Caller, Role, WandbCredentials};
use cwsandbox_surface::catalogue::{Catalogue, Method, names};
use cwsandbox_surface::direct::Permission;
use cwsandbox_surface::errors::ApiError;
use cwsandbox_surface::faults::{Call, FAULT_HEADER, InjectedFaults, Verdict, header_verdict};

/// The path prefix of the direct data plane's RPCs, the only ones a client certificate is for.
const DATA_PLANE_PREFIX: &str = "/coreweave.sandbox.v1.SandboxDataPlaneService/";
/// Paths answered without a token.
const OPEN_PREFIXES: &[&str] =
    &["/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];
/// The 5-byte prefix of every gRPC and Connect streaming message: flags, then a big-endian length.
const ENVELOPE: usize = 5;

/// The request limits of [`Guard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest request message of an RPC that carries no file content.
    pub max_request_bytes: usize,
    /// Largest request message of WriteFile (and each StreamExec message, and any response).
    pub max_message_bytes: usize,
    /// Largest estimated decoded size of one request (for WriteFile: at least
    /// `max_message_bytes`).
    pub max_decoded_request_bytes: usize,
    /// Memory all requests in flight may reserve together.
    pub request_memory_bytes: usize,
    /// The longest wait for the next piece of a request body.
    pub body_read_timeout: Duration,
}

/// The protocol of a request, from its `content-type` (gRPC-Web arrives here as gRPC, translated
/// by tonic-web, which translates the answer back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Grpc,
    ConnectUnary { json: bool },
    ConnectStream { json: bool },
}

impl Protocol {
    fn of(request: &Request<Body>) -> Protocol {
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if content_type.starts_with("application/grpc") {
            Protocol::Grpc
        } else if let Some(codec) = content_type.strip_prefix("application/connect+") {
            Protocol::ConnectStream { json: codec.starts_with("json") }
        } else {
            Protocol::ConnectUnary { json: !content_type.starts_with("application/proto") }
        }
    }

    fn enveloped(self) -> bool {
        !matches!(self, Protocol::ConnectUnary { .. })
    }

    /// The error answer in this protocol.
    fn reject(self, error: &ApiError) -> Response {
        self.reject_status(error.to_status())
    }

    /// A status (an injected fault's, or an [`ApiError`]'s) as the answer in this protocol.
    fn reject_status(self, status: tonic::Status) -> Response {
        match self {
            Protocol::Grpc => status.into_http::<Body>(),
            Protocol::ConnectUnary { .. } => ConnectError::from(status).into_response(),
            Protocol::ConnectStream { json } => ConnectError::from(status).into_streaming_response(!json),
        }
    }

    /// How a stream cut by a fault ends in this protocol.
    async fn tail(self, status: tonic::Status) -> Tail {
        match self {
            Protocol::Grpc => {
                // tonic keeps its trailer encoder private; its trailers-only answer carries the
                // same headers.
                let mut trailers = http::HeaderMap::new();
                for (name, value) in status.into_http::<Body>().headers() {
                    if name.as_str().starts_with("grpc-") {
                        trailers.insert(name.clone(), value.clone());
                    }
                }
                Tail::Grpc(trailers)
            }
            Protocol::ConnectUnary { json } | Protocol::ConnectStream { json } => {
                let response = ConnectError::from(status).into_streaming_response(!json);
                Tail::Connect(response.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default())
            }
        }
    }
}

struct Shared {
    app: App,
    limits: RequestLimits,
    budget: Arc<Semaphore>,
    catalogue: &'static Catalogue,
    estimator: crate::decoded_size::Estimator,
}

/// The guard around the RPC services (see the module documentation).
#[derive(Clone)]
pub struct Guard<S> {
    shared: Arc<Shared>,
    inner: S,
}

impl<S> Guard<S> {
    /// Guards `inner` with the tokens of `app`.
    pub fn new(app: App, limits: RequestLimits, inner: S) -> Guard<S> {
        // tokio's semaphore counts at most usize::MAX >> 3 permits.
        let budget = Arc::new(Semaphore::new(limits.request_memory_bytes.min(Semaphore::MAX_PERMITS)));
        let estimator = crate::decoded_size::Estimator::new();
        Guard { shared: Arc::new(Shared { app, limits, budget, catalogue: Catalogue::get(), estimator }), inner }
    }
}

impl<S> tower::Service<Request<Body>> for Guard<S>
where
    S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let inner = self.inner.clone();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let at = std::time::SystemTime::now();
            let method = request.uri().path().to_owned();
            let mut note = CallNote::default();
            let response = shared.handle(request, inner, &mut note).await;
            Ok(crate::call_record::recorded(&shared.app, response, note, method, started, at))
        })
    }
}

/// A response whose stream a fault ends after some messages (an error answer passes unchanged).
async fn cut_stream(response: Response, cut: Option<(u32, Tail)>) -> Response {
    let Some((after, tail)) = cut else { return response };
    response.map(|body| Body::new(CutBody::new(body, after, tail)))
}

/// The deadline a gRPC call carries in `grpc-timeout` (an integer of at most 8 digits and a
/// unit: H, M, S, m, u, n); `None` without one or for a malformed value, which gRPC says to
/// treat as no deadline.
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Why a request body was not accepted.
enum BodyFault {
    TooLarge {
        limit: usize,
    },
    DecodesTooLarge {
        estimate: usize,
        limit: usize,
    },
    OutOfMemory,
    TooSlow(Duration),
    Broken(String),
    /// A unary gRPC call with other than one message.
    Cardinality(usize),
}

impl BodyFault {
    fn into_error(self) -> ApiError {
        match self {
            BodyFault::TooLarge { limit } => ApiError::new(
                Code::ResourceExhausted,
                Reason::RequestTooLarge,
                format!("the request message is larger than the limit of {limit} bytes"),
            )
            .with_metadata("max_size_bytes", limit.to_string()),
            BodyFault::DecodesTooLarge { estimate, limit } => ApiError::new(
                Code::ResourceExhausted,
                Reason::RequestTooLarge,
                format!(
                    "the request would take about {estimate} bytes of memory once decoded, above the limit of {limit} \
                     bytes (many small repeated elements decode to far more than their wire size)"
                ),
            )
            .with_metadata("decoded_size_bytes", estimate.to_string())
            .with_metadata("max_decoded_size_bytes", limit.to_string()),
            BodyFault::OutOfMemory => {
                let mut error = ApiError::new(
                    Code::ResourceExhausted,
                    Reason::Overloaded,
                    "the requests in flight hold the emulator's whole request memory budget; retry shortly",
                );
                error.retry_after = Some(Duration::from_secs(1));
                error
            }
            BodyFault::TooSlow(timeout) => ApiError::new(
                Code::DeadlineExceeded,
                Reason::InvalidRequest,
                format!("the request body stalled: nothing arrived for {timeout:?}"),
            ),
            BodyFault::Broken(why) => ApiError::new(
                Code::InvalidArgument,
                Reason::InvalidRequest,
                format!("the request body could not be read: {why}"),
            ),
            // grpc/doc/statuscodes.md: "Request cardinality violation (method requires exactly one
            // request but client sent some other number of requests): UNIMPLEMENTED".
            BodyFault::Cardinality(count) => ApiError::new(
                Code::Unimplemented,
                Reason::InvalidRequest,
                format!(
                    "this method takes exactly one request message, and the call carried {}",
                    if count == 0 { "none".to_owned() } else { "more than one".to_owned() }
                ),
            ),
        }
    }
}

impl Shared {
    async fn handle<S>(&self, request: Request<Body>, inner: S, note: &mut CallNote) -> Response
    where
        S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        use tower::ServiceExt;
        let protocol = Protocol::of(&request);
        let path = request.uri().path().to_owned();
        if OPEN_PREFIXES.iter().any(|prefix| path.starts_with(prefix)) {
            note.unlogged = true;
            let response = inner.oneshot(request).await.unwrap_or_else(|never| match never {});
            return undecodable_is_invalid_argument(response);
        }
        // The RPC the path names, looked up once: authentication, access, bounds and faults read it.
        let rpc = self.catalogue.method(&path);
        // The one authentication of the request: the handlers take the caller from here.
        let caller = match request.extensions().get::<PeerCertificate>() {
            // The direct data plane's endpoint: the certificate is the credential, never a token.
            Some(certificate) => self.direct_caller(certificate, &path),
            None => self.token_caller(request.headers()),
        };
        let caller = match caller {
            Ok(caller) => {
                note.org = caller.org.clone();
                note.user = caller.user.clone();
                caller
            }
            Err(error) => {
                tracing::debug!(%path, "{error}");
                if rpc.is_some_and(|method| method.client_streaming) {
                    refuse_stream(request.into_body()).await;
                }
                return protocol.reject(&error);
            }
        };
        let caller = match rpc {
            Some(rpc) => caller.calling(rpc),
            None => caller,
        };
        let mut request = request;
        request.extensions_mut().insert(caller.clone());
        let Some(rpc) = rpc else {
            // Not an RPC of the API: the services answer (UNIMPLEMENTED, 404).
            return inner.oneshot(request).await.unwrap_or_else(|never| match never {});
        };
        self.admitted(request, caller, rpc, protocol, inner, note).await
    }

    /// The caller of a bearer token (a configured token or a tenant's), or of the W&B credentials
    /// the published client's W&B auth sends instead (`x-wandb-api-key`, with `x-entity-id` and
    /// `x-wandb-host` when it has them). A request with both is the bearer token's.
    fn token_caller(&self, headers: &http::HeaderMap) -> Result<Caller, ApiError> {
        let header = headers.get(http::header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        match (header, text(WANDB_API_KEY_HEADER)) {
            (None, Some(api_key)) => {
                let credentials =
                    WandbCredentials { api_key, entity: text(WANDB_ENTITY_HEADER), host: text(WANDB_HOST_HEADER) };
                let principal = self.app.authenticate_wandb(credentials)?;
                if let Some(project) = text(WANDB_PROJECT_HEADER) {
                    // The project only files W&B's own records (runs, reports), which the
                    // emulator does not keep: it is logged with the call and changes nothing.
                    tracing::debug!(project, user = %principal.user, "W&B project of the call");
                }
                Ok(Caller::new(principal))
            }
            _ => self.app.authenticate(header).map(Caller::new),
        }
    }

    /// The grant of a direct call's client certificate, if it is valid now and grants the RPC's
    /// operation (the sandbox is checked by the handler, which decodes the request).
    fn direct_caller(&self, certificate: &PeerCertificate, path: &str) -> Result<Caller, ApiError> {
        let grant = self.app.direct().grant_of(&certificate.0)?;
        let method = path.strip_prefix(DATA_PLANE_PREFIX).unwrap_or_default();
        let Some(permission) = Permission::of_method(method) else {
            return Err(ApiError::new(
                Code::PermissionDenied,
                Reason::PermissionDenied,
                format!("{path}: a direct data-plane certificate is only for the RPCs of SandboxDataPlaneService"),
            ));
        };
        grant.permits(permission)?;
        Ok(Caller::direct(grant))
    }

    /// A request whose caller is known: bounds, faults, the deadline, then the services.
    async fn admitted<S>(
        &self,
        request: Request<Body>,
        caller: Caller,
        rpc: &'static Method,
        protocol: Protocol,
        inner: S,
        note: &mut CallNote,
    ) -> Response
    where
        S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        use tower::ServiceExt;
        let path = request.uri().path().to_owned();
        // Who may call it, from the catalogue: refused before a byte of the body is read.
        if let Err(error) = caller.may_call(rpc) {
            tracing::debug!(%path, "{error}");
            if rpc.client_streaming {
                refuse_stream(request.into_body()).await;
            }
            return protocol.reject(&error);
        }
        if rpc.client_streaming {
            // The request streams on: faults match it by method, organization and headers.
            let verdict = match self.faults(rpc, &caller, request.headers(), &|| None) {
                Ok(verdict) => {
                    note.faults.clone_from(&verdict.hit);
                    verdict
                }
                Err(error) => {
                    refuse_stream(request.into_body()).await;
                    return protocol.reject(&error);
                }
            };
            let cut = match self.inflict(verdict, protocol).await {
                Ok(cut) => cut,
                Err(response) => {
                    refuse_stream(request.into_body()).await;
                    return response;
                }
            };
            // Streamed on as it comes; over gRPC each message is held to the limit here, so an
            // oversized one is RESOURCE_EXHAUSTED as everywhere else (tonic says OUT_OF_RANGE).
            let request = if protocol == Protocol::Grpc {
                let limit = self.limits.max_message_bytes;
                request.map(|body| Body::new(StreamLimit { body, limit, header: [0; ENVELOPE], have: 0, remaining: 0 }))
            } else {
                request
            };
            let response = inner.oneshot(request).await.unwrap_or_else(|never| match never {});
            return cut_stream(response, cut).await;
        }
        let (limit, decoded_limit) = if rpc.payload {
            let limit = self.limits.max_message_bytes;
            (limit, self.limits.max_decoded_request_bytes.max(limit))
        } else {
            (self.limits.max_request_bytes.min(self.limits.max_message_bytes), self.limits.max_decoded_request_bytes)
        };
        let (parts, body) = request.into_parts();
        let compressed = parts.headers.contains_key("grpc-encoding");
        let announced = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<usize>().ok());
        let mut reservation: Option<OwnedSemaphorePermit> = None;
        let read = self.read(body, protocol, compressed, announced, limit, &mut reservation).await;
        let bytes = match read.and_then(|bytes| {
            self.admit(&bytes, protocol, compressed, &rpc.input, decoded_limit, &mut reservation).map(|()| bytes)
        }) {
            Ok(bytes) => bytes,
            Err(fault) => {
                let error = fault.into_error();
                tracing::debug!(%path, "{error}");
                return protocol.reject(&error);
            }
        };
        let tags = || self.tags_of(rpc, &caller.org, protocol, compressed, &bytes);
        let mut verdict = match self.faults(rpc, &caller, &parts.headers, &tags) {
            Ok(verdict) => {
                note.faults.clone_from(&verdict.hit);
                verdict
            }
            Err(error) => return protocol.reject(&error),
        };
        let injected = std::mem::take(&mut verdict.domain);
        let mut parts = parts;
        if !injected.is_empty() {
            parts.extensions.insert(InjectedFaults(injected));
        }
        let cut = match self.inflict(verdict, protocol).await {
            Ok(cut) => cut,
            Err(response) => return response,
        };
        let json = matches!(protocol, Protocol::ConnectUnary { json: true }).then(|| bytes.clone());
        // The caller's own deadline: Connect's `connect-timeout-ms` is enforced by
        // connectrpc-axum; gRPC's `grpc-timeout` here, since the services are not behind tonic's
        // server (which would). Dropping the handler's future cancels its work.
        let deadline = (protocol == Protocol::Grpc).then(|| grpc_timeout(&parts.headers)).flatten();
        let call = inner.oneshot(Request::from_parts(parts, Body::from(bytes)));
        let response = match deadline {
            None => call.await.unwrap_or_else(|never| match never {}),
            Some(deadline) => match tokio::time::timeout(deadline, call).await {
                Ok(response) => response.unwrap_or_else(|never| match never {}),
                Err(_) => {
                    let error = ApiError::new(
                        Code::DeadlineExceeded,
                        Reason::DeadlineExceeded,
                        format!("the call's deadline ({deadline:?}, grpc-timeout) passed before it finished"),
                    );
                    tracing::debug!(%path, "{error}");
                    return protocol.reject(&error);
                }
            },
        };
        let response = match json {
            Some(json) => cwsandbox_surface::errors::enrich_connect_error(response, Some(&json)).await,
            None => response,
        };
        drop(reservation);
        cut_stream(response, cut).await
    }

    /// What the faults in force, and the call's own fault header, do to this call.
    fn faults(
        &self,
        rpc: &Method,
        caller: &Caller,
        headers: &http::HeaderMap,
        tags: &dyn Fn() -> Option<Vec<String>>,
    ) -> Result<Verdict, ApiError> {
        let (service, method) = rpc.qualified_name().split_once('/').unwrap_or((rpc.qualified_name(), ""));
        let call = Call { service, method, org: &caller.org, headers, server_streaming: rpc.server_streaming, tags };
        let mut verdict = self.app.faults().evaluate(&call);
        if let Some(value) = headers.get(FAULT_HEADER) {
            caller.require_any(&[Role::SandboxAdmin, Role::ClusterAdmin], "the fault header is for administrators")?;
            let value = value.to_str().map_err(|_| ApiError::invalid_field(FAULT_HEADER, "not ASCII text"))?;
            let one = header_verdict(value, rpc.server_streaming)?;
            verdict.hit.push(FAULT_HEADER.to_owned());
            verdict.latency += one.latency;
            verdict.failure = verdict.failure.or(one.failure);
            verdict.cut = verdict.cut.or(one.cut);
        }
        Ok(verdict)
    }

    /// Waits the verdict's latency; then its failure is the answer (`Err`), or its cut is to be
    /// applied to the answer (`Ok`).
    async fn inflict(&self, verdict: Verdict, protocol: Protocol) -> Result<Option<(u32, Tail)>, Response> {
        if !verdict.latency.is_zero() {
            tokio::time::sleep(verdict.latency).await;
        }
        if let Some(status) = verdict.failure {
            tracing::debug!(code = ?status.code(), "call failed by a fault");
            return Err(protocol.reject_status(status));
        }
        match verdict.cut {
            Some(cut) => Ok(Some((cut.after, protocol.tail(cut.status).await))),
            None => Ok(None),
        }
    }

    /// The tags of the sandbox a unary request concerns: CreateSandbox's own, else those of the
    /// sandbox its `sandbox_id` names (in the caller's organization).
    fn tags_of(
        &self,
        rpc: &Method,
        org: &str,
        protocol: Protocol,
        compressed: bool,
        bytes: &Bytes,
    ) -> Option<Vec<String>> {
        if compressed {
            return None;
        }
        let message: &[u8] = if protocol.enveloped() { bytes.get(ENVELOPE..)? } else { bytes };
        let json = matches!(protocol, Protocol::ConnectUnary { json: true } | Protocol::ConnectStream { json: true });
        if rpc.is(names::SANDBOX_SERVICE, names::CREATE_SANDBOX) {
            let request: cwsandbox_api::sandbox_v1::CreateSandboxRequest =
                if json { serde_json::from_slice(message).ok()? } else { Message::decode(message).ok()? };
            return Some(request.sandbox.and_then(|sandbox| sandbox.spec).map(|spec| spec.tags).unwrap_or_default());
        }
        let sandbox_id = if json {
            let tree: serde_json::Value = serde_json::from_slice(message).ok()?;
            tree.get("sandboxId").or_else(|| tree.get("sandbox_id"))?.as_str()?.to_owned()
        } else {
            string_field(message, rpc.sandbox_id_field?)?
        };
        self.app
            .driver()
            .read_world(|world| world.get_sandbox(org, &sandbox_id).ok().map(|sandbox| sandbox.tags.clone()))
    }

    /// Reads the whole body of a single-message request, reserving memory as it arrives.
    async fn read(
        &self,
        mut body: Body,
        protocol: Protocol,
        compressed: bool,
        announced: Option<usize>,
        limit: usize,
        reservation: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Bytes, BodyFault> {
        let enveloped = protocol.enveloped();
        // A gRPC body is one envelope: its header, then the message.
        let wire_limit = if enveloped { limit + ENVELOPE } else { limit };
        if announced.is_some_and(|length| length > wire_limit) {
            return Err(BodyFault::TooLarge { limit });
        }
        let mut buffer = BytesMut::new();
        loop {
            let frame = match tokio::time::timeout(self.limits.body_read_timeout, body.frame()).await {
                Err(_) => return Err(BodyFault::TooSlow(self.limits.body_read_timeout)),
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(BodyFault::Broken(error.to_string())),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else { continue };
            if buffer.len() + data.len() > wire_limit {
                if protocol == Protocol::Grpc && buffer.len() >= ENVELOPE && declared(&buffer) <= limit {
                    // The first message fits and something follows it.
                    return Err(BodyFault::Cardinality(2));
                }
                return Err(BodyFault::TooLarge { limit });
            }
            self.reserve(data.len(), reservation)?;
            buffer.extend_from_slice(&data);
            if enveloped && buffer.len() >= ENVELOPE {
                let length = declared(&buffer);
                if length > limit {
                    return Err(BodyFault::TooLarge { limit });
                }
                if protocol == Protocol::Grpc && buffer.len() > ENVELOPE + length {
                    return Err(BodyFault::Cardinality(2));
                }
            }
        }
        if protocol == Protocol::Grpc {
            if buffer.is_empty() {
                return Err(BodyFault::Cardinality(0));
            }
            if buffer.len() < ENVELOPE {
                return Err(BodyFault::Broken("the body ends inside a message's 5-byte prefix".to_owned()));
            }
            if buffer.len() < ENVELOPE + declared(&buffer) {
                return Err(BodyFault::Broken(format!(
                    "the message announces {} bytes and the body ends after {}",
                    declared(&buffer),
                    buffer.len() - ENVELOPE
                )));
            }
            // Flags: bit 0 is "compressed" (with the grpc-encoding header), no other bit is
            // defined; tonic answers INTERNAL to either fault.
            if buffer[0] & !1 != 0 || (buffer[0] == 1 && !compressed) {
                return Err(BodyFault::Broken(format!(
                    "invalid message flags {:#04x}{}",
                    buffer[0],
                    if buffer[0] == 1 { " (compressed, without a grpc-encoding header)" } else { "" }
                )));
            }
        }
        Ok(buffer.freeze())
    }

    /// Estimates the decoded size of a complete body and reserves it.
    fn admit(
        &self,
        body: &[u8],
        protocol: Protocol,
        compressed: bool,
        input: &str,
        limit: usize,
        reservation: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<(), BodyFault> {
        let message = if protocol.enveloped() && body.len() >= ENVELOPE { &body[ENVELOPE..] } else { body };
        let estimate = match protocol {
            // A compressed message is refused by the services (no compression is enabled) before
            // it is decoded.
            Protocol::Grpc if compressed => 0,
            Protocol::ConnectUnary { json: true } | Protocol::ConnectStream { json: true } => {
                self.estimator.json(message)
            }
            _ => self.estimator.protobuf(input, message),
        };
        if estimate > limit {
            return Err(BodyFault::DecodesTooLarge { estimate, limit });
        }
        self.reserve(estimate, reservation)
    }

    fn reserve(&self, bytes: usize, reservation: &mut Option<OwnedSemaphorePermit>) -> Result<(), BodyFault> {
        if bytes == 0 {
            return Ok(());
        }
        let permits = u32::try_from(bytes).map_err(|_| BodyFault::OutOfMemory)?;
        let permit = Arc::clone(&self.budget).try_acquire_many_owned(permits).map_err(|_| BodyFault::OutOfMemory)?;
        match reservation {
            Some(held) => held.merge(permit),
            None => *reservation = Some(permit),
        }
        Ok(())
    }
}

/// A streamed gRPC request body whose messages are checked against `limit` as their 5-byte
/// prefixes pass; a larger one ends the body with RESOURCE_EXHAUSTED, which tonic finds in the
/// error and answers with.
struct StreamLimit {
    body: Body,
    limit: usize,
    header: [u8; ENVELOPE],
    /// Prefix bytes of the next message seen so far.
    have: usize,
    /// Bytes of the current message still to come.
    remaining: usize,
}

impl StreamLimit {
    fn scan(&mut self, mut data: &[u8]) -> Result<(), tonic::Status> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let take = self.remaining.min(data.len());
                self.remaining -= take;
                data = &data[take..];
                continue;
            }
            self.header[self.have] = data[0];
            self.have += 1;
            data = &data[1..];
            if self.have == ENVELOPE {
                self.have = 0;
                self.remaining = declared(&self.header);
                if self.remaining > self.limit {
                    return Err(BodyFault::TooLarge { limit: self.limit }.into_error().to_status());
                }
            }
        }
        Ok(())
    }
}

impl http_body::Body for StreamLimit {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let frame = match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(tonic::Status::from_error(Box::new(error))))),
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref()
            && let Err(status) = self.scan(data)
        {
            return Poll::Ready(Some(Err(status)));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// tonic-health and tonic-reflection decode with tonic's own codec, which answers INTERNAL to a
/// request that is not protobuf; the API's servers answer INVALID_ARGUMENT (`cwsandbox_api::codec`),
/// and so do these (their decode failures come before any message, as a trailers-only answer).
fn undecodable_is_invalid_argument(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let internal = headers.get("grpc-status").is_some_and(|status| status == "13");
    let undecodable = headers
        .get("grpc-message")
        .is_some_and(|message| message.as_bytes().starts_with(b"failed%20to%20decode%20Protobuf%20message"));
    if internal && undecodable {
        headers.insert("grpc-status", http::HeaderValue::from_static("3"));
    }
    response
}

/// The length an envelope header declares (`buffer` holds at least the 5-byte header).
fn declared(buffer: &[u8]) -> usize {
    u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize
}

/// The headers of the published client's W&B auth mode (`AuthStrategy.WANDB`, `WandbAuth`): the
/// API key, the entity and project the call is for, and the W&B server when it is not W&B's cloud.
const WANDB_API_KEY_HEADER: &str = "x-wandb-api-key";
const WANDB_ENTITY_HEADER: &str = "x-entity-id";
const WANDB_PROJECT_HEADER: &str = "x-project-name";
const WANDB_HOST_HEADER: &str = "x-wandb-host";

/// How long a refused streaming call's first request message is waited for.
const FIRST_MESSAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the rest of a refused call's request is read and discarded.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Before a client-streaming call is refused (a fault, a bad token): waits for its first
/// request message (at most [`FIRST_MESSAGE_WAIT`]), then reads and discards the rest in the
/// background. grpc-core (the published Python client's StreamExec) reports a status that
/// arrives before its first message went out as "Internal error from Core" about half the
/// time, instead of the status; measured with StreamExec faults (PERMISSION_DENIED and
/// RESOURCE_EXHAUSTED, 40 calls): 26 such errors before, none after. Dropped unread, the
/// request would also make h2 reset the stream once the answer is sent. A client that neither
/// ends nor resets its stream is let go after [`DRAIN_LIMIT`].
async fn refuse_stream(mut body: Body) {
    let _ = tokio::time::timeout(FIRST_MESSAGE_WAIT, body.frame()).await;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(DRAIN_LIMIT, async { while let Some(Ok(_)) = body.frame().await {} }).await;
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn grpc_timeouts_parse_as_the_spec_writes_them() {
        let parse = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("grpc-timeout", value.parse().unwrap());
            super::grpc_timeout(&headers)
        };
        use std::time::Duration;
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("99999999S"), Some(Duration::from_secs(99_999_999)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn protocols_follow_the_content_type() {
        let request = |content_type: &str| {
            Request::post("/x").header(http::header::CONTENT_TYPE, content_type).body(Body::empty()).unwrap()
        };
        assert_eq!(Protocol::of(&request("application/grpc+proto")), Protocol::Grpc);
        assert_eq!(Protocol::of(&request("application/json; charset=utf-8")), Protocol::ConnectUnary { json: true });
        assert_eq!(Protocol::of(&request("application/proto")), Protocol::ConnectUnary { json: false });
        assert_eq!(Protocol::of(&request("application/connect+proto")), Protocol::ConnectStream { json: false });
    }
}
