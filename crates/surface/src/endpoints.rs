//! HTTPS endpoints (`Service.endpoint.kind = HTTPS`): TLS terminated by the emulator, as the
//! platform terminates it, and each request proxied into the sandbox's port.
//!
//! - **The certificate** is the emulator's: a CA made at start (ECDSA P-256, in memory only; a
//!   restart makes a new one) signs one server certificate for the loopback names and the bound
//!   address, which every HTTPS endpoint serves. The CA's certificate is in the ready file
//!   (`endpoint_ca_pem`) and, with `serve --endpoint-ca-file`, in a file of its own, so clients can
//!   trust it (`SSL_CERT_FILE`, `httpx.get(verify=…)`, `curl --cacert`).
//! - **Share-token auth** (`auth = SHARE_TOKEN`): a request carries the sandbox's token in the
//!   `X-Sandbox-Share-Token` header or the `share_token` query parameter (the published client's
//!   `EndpointShareToken.as_headers()` and its documented query fallback); without it, or with
//!   another, the answer is 401 and nothing reaches the sandbox. The token is taken out of the
//!   request before it is forwarded: the workload never sees the credential.
//! - **The request timeout** (`request_timeout_seconds`, 15 s when unset) bounds the wait for the
//!   sandbox's answer to a request's headers; past it the answer is 504, as the published
//!   client's `Endpoint` documents ("504 while the sandbox stays alive").
//! - A sandbox that does not run answers 503, a port nothing listens on 502.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::PrivateKeyDer;
use tokio::net::TcpStream;

use crate::app::App;
use crate::direct::{LocalAuthority, TlsError};
use cwsandbox_sim::sandbox::SandboxState;

/// The header a share-token request carries its token in.
pub const SHARE_TOKEN_HEADER: &str = "x-sandbox-share-token";
/// The query parameter a share-token request may carry its token in instead.
pub const SHARE_TOKEN_PARAMETER: &str = "share_token";
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The CA of the HTTPS endpoints and the TLS configuration they serve.
pub struct EndpointTls {
    ca_pem: String,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for EndpointTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("EndpointTls").finish_non_exhaustive()
    }
}

impl EndpointTls {
    /// A fresh CA and the endpoints' server certificate for `localhost`, the loopback addresses
    /// and `bound`.
    pub fn new(bound: IpAddr) -> Result<EndpointTls, TlsError> {
        let LocalAuthority { ca_certificate, ca_pem, server_certificate, server_key, .. } =
            LocalAuthority::new("cwsandbox-emulator HTTPS endpoint", bound)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![server_certificate.der().clone(), ca_certificate.der().clone()],
                PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )?;
        // The proxy speaks HTTP/1.1 to both sides.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(EndpointTls { ca_pem, acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) })
    }

    /// The CA's certificate, PEM: what clients trust the endpoints with.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

/// One HTTPS endpoint of a sandbox: where its requests go and what they must carry.
#[derive(Debug, Clone)]
pub struct HttpsEndpoint {
    /// The sandbox.
    pub sandbox_id: String,
    /// The port inside the sandbox.
    pub port: u16,
    /// Whether requests must carry the sandbox's share token.
    pub share_token: bool,
    /// How long the sandbox has to answer a request's headers.
    pub request_timeout: Duration,
}

/// Serves one accepted connection: the TLS handshake, then HTTP/1.1 requests until the client
/// closes it.
pub async fn serve_connection(app: App, endpoint: Arc<HttpsEndpoint>, client: TcpStream, peer: SocketAddr) {
    let acceptor = app.endpoints().acceptor.clone();
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(client)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(sandbox_id = %endpoint.sandbox_id, %peer, %error, "HTTPS endpoint: TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(sandbox_id = %endpoint.sandbox_id, %peer, "HTTPS endpoint: TLS handshake timed out");
            return;
        }
    };
    let service = hyper::service::service_fn(move |request| {
        let (app, endpoint) = (app.clone(), Arc::clone(&endpoint));
        async move { Ok::<_, Infallible>(answer(&app, &endpoint, peer, request).await) }
    });
    if let Err(error) = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!(%peer, %error, "HTTPS endpoint: connection ended with an error");
    }
}

/// One request: checked, then forwarded to the sandbox's port, its answer relayed back.
async fn answer(app: &App, endpoint: &HttpsEndpoint, peer: SocketAddr, request: Request<Incoming>) -> Response<Body> {
    let Some(view) = app.driver().sandbox_view(&endpoint.sandbox_id) else {
        return plain(StatusCode::NOT_FOUND, "no such sandbox");
    };
    let mut request = request;
    if endpoint.share_token {
        let expected = view.endpoint_share_token.as_deref().unwrap_or_default();
        if !take_share_token(&mut request).is_some_and(|given| !expected.is_empty() && same(&given, expected)) {
            return plain(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs the sandbox's share token: the X-Sandbox-Share-Token header or the share_token query parameter",
            );
        }
    }
    if view.state != SandboxState::Running || view.pod_uid.is_empty() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "the sandbox is not running");
    }
    let Ok(runtime) = app.runtime("HTTPS endpoint") else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "no sandbox runtime");
    };
    let upstream = match runtime.connect(view.pod_uid.to_string(), endpoint.port).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::debug!(sandbox_id = %endpoint.sandbox_id, port = endpoint.port, %error, "HTTPS endpoint: nothing to forward to");
            return plain(StatusCode::BAD_GATEWAY, "nothing answers on the sandbox's port");
        }
    };
    let upstream = match upstream.set_nonblocking(true).and_then(|()| TcpStream::from_std(upstream)) {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(sandbox_id = %endpoint.sandbox_id, %error, "HTTPS endpoint: the sandbox's connection cannot be used");
            return plain(StatusCode::BAD_GATEWAY, "the sandbox's port cannot be reached");
        }
    };
    let headers = request.headers_mut();
    headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    if let Ok(value) = HeaderValue::from_str(&peer.ip().to_string()) {
        headers.insert("x-forwarded-for", value);
    }
    let forwarded = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await?;
        tokio::spawn(async move {
            let _ = connection.with_upgrades().await;
        });
        sender.send_request(request).await
    };
    match tokio::time::timeout(endpoint.request_timeout, forwarded).await {
        Ok(Ok(response)) => response.map(Body::new),
        Ok(Err(error)) => {
            tracing::debug!(sandbox_id = %endpoint.sandbox_id, %error, "HTTPS endpoint: the sandbox's answer failed");
            plain(StatusCode::BAD_GATEWAY, "the sandbox's port closed the request without an answer")
        }
        Err(_) => plain(
            StatusCode::GATEWAY_TIMEOUT,
            &format!("the sandbox did not answer within {} s", endpoint.request_timeout.as_secs()),
        ),
    }
}

/// Takes the share token out of a request (the header first, then the query parameter) and
/// returns it; the request keeps everything else as it came.
fn take_share_token<B>(request: &mut Request<B>) -> Option<String> {
    let from_header =
        request.headers_mut().remove(SHARE_TOKEN_HEADER).and_then(|value| value.to_str().ok().map(str::to_owned));
    let uri = request.uri().clone();
    let mut from_query = None;
    if let Some(query) = uri.query() {
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded_key: String = form_urlencoded::parse(key.as_bytes()).map(|(key, _)| key.into_owned()).collect();
            if decoded_key == SHARE_TOKEN_PARAMETER {
                let decoded: String =
                    form_urlencoded::parse(pair.as_bytes()).map(|(_, value)| value.into_owned()).collect();
                from_query.get_or_insert(if value.is_empty() { String::new() } else { decoded });
            } else {
                kept.push(pair);
            }
        }
        let path_and_query =
            if kept.is_empty() { uri.path().to_owned() } else { format!("{}?{}", uri.path(), kept.join("&")) };
        let mut parts = uri.into_parts();
        if let Ok(rewritten) = path_and_query.parse() {
            parts.path_and_query = Some(rewritten);
            if let Ok(rewritten) = http::Uri::from_parts(parts) {
                *request.uri_mut() = rewritten;
            }
        }
    }
    from_header.or(from_query)
}

/// Compares two tokens in time that depends on their lengths only.
fn same(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given.bytes().zip(expected.bytes()).fold(0u8, |differs, (a, b)| differs | (a ^ b)) == 0
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// A new share token: 32 random bytes, base64url without padding.
pub fn new_share_token() -> Option<String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, header: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().uri(uri);
        if let Some(token) = header {
            builder = builder.header("X-Sandbox-Share-Token", token);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn the_share_token_is_taken_from_the_header_or_the_query_and_removed() {
        let mut by_header = request("/a?x=1", Some("t0k"));
        assert_eq!(take_share_token(&mut by_header).as_deref(), Some("t0k"));
        assert!(by_header.headers().get(SHARE_TOKEN_HEADER).is_none());
        assert_eq!(by_header.uri().to_string(), "/a?x=1");

        let mut by_query = request("/a?x=1&share_token=ab%2Bc&y=a%20b", None);
        assert_eq!(take_share_token(&mut by_query).as_deref(), Some("ab+c"));
        assert_eq!(by_query.uri().to_string(), "/a?x=1&y=a%20b", "the others are kept as they came");

        let mut only = request("/?share_token=t", None);
        assert_eq!(take_share_token(&mut only).as_deref(), Some("t"));
        assert_eq!(only.uri().to_string(), "/");

        let mut none = request("/?share_tokens=t", None);
        assert_eq!(take_share_token(&mut none), None);
        assert_eq!(none.uri().to_string(), "/?share_tokens=t");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
        assert!(!same("", "abc"));
    }

    #[test]
    fn share_tokens_are_fresh_and_url_safe() {
        let (one, two) = (new_share_token().unwrap(), new_share_token().unwrap());
        assert_ne!(one, two);
        assert_eq!(one.len(), 43);
        assert!(one.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
    }
}
