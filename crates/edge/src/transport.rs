//! The accept loop: connections, their timeouts and their number.
//!
//! Every accepted connection takes a slot of `max_connections` for its lifetime; one beyond the
//! cap is closed at once, so clients that never finish a request cannot use up the process's
//! file descriptors and lock everyone else out. A connection then has `header_read_timeout` to
//! send its first byte (and finish a TLS handshake), and each HTTP/1.1 request as long to send its
//! headers. A connection with no request in flight for `idle_timeout` is closed (HTTP/2 with a
//! GOAWAY, so clients reconnect without failing a call). Request bodies are bounded by the
//! request guard (`crate::guard`): `body_read_timeout` between two pieces of a unary request.
//! An HTTP/2 connection is pinged after `keep_alive_interval` without traffic and closed if the
//! ping goes unanswered for `keep_alive_timeout`, so a peer that vanished in the middle of a stream
//! is noticed.
//!
//! A connection upgraded to a WebSocket (`kubectl exec`) leaves hyper's hands but not the cap:
//! every request carries the connection's [`ConnectionLease`], whose slot the socket's handler
//! keeps until the socket is done, and whose keep-alive it applies to the socket itself (a
//! WebSocket ping; a socket silent through both periods is dropped). The idle timeout does not
//! apply to a live socket, as it does not apply to a request in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
pub use cwsandbox_surface::connection::ConnectionLease;
use cwsandbox_sync::MutexUnpoisoned;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::tls;

/// Connection and request settings of the one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// How long a connection may take to send its first byte (and finish a TLS handshake), and an
    /// HTTP/1.1 request its headers.
    pub header_read_timeout: Duration,
    /// The longest wait for the next piece of a unary request's body.
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once (upgraded ones included, for the life of the socket); more are
    /// closed as they arrive.
    pub max_connections: usize,
    /// After how long without traffic from the peer an HTTP/2 connection or a WebSocket is pinged.
    pub keep_alive_interval: Duration,
    /// How long a ping may go unanswered before the connection (or socket) is dropped.
    pub keep_alive_timeout: Duration,
    /// Largest request message of an RPC that carries no file content (WriteFile and StreamExec
    /// messages may reach `Limits::max_message_bytes`).
    pub max_request_bytes: usize,
    /// Largest estimated decoded size of one request (see `crate::decoded_size`; WriteFile may
    /// always reach `Limits::max_message_bytes`).
    pub max_decoded_request_bytes: usize,
    /// Memory the requests in flight may reserve together (see `crate::guard`).
    pub request_memory_bytes: usize,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_connections: 512,
            keep_alive_interval: Duration::from_secs(60),
            keep_alive_timeout: Duration::from_secs(20),
            // gRPC's own default receive limit.
            max_request_bytes: 4 << 20,
            max_decoded_request_bytes: 64 << 20,
            request_memory_bytes: 1 << 30,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` turns true, then stops accepting, lets every
/// connection finish its requests (HTTP/2 gets a GOAWAY) and returns once they have. Dropping the
/// returned future (aborting its task) drops every connection.
pub async fn serve(
    listener: TcpListener,
    tls: tls::Tls,
    router: Router,
    settings: Transport,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(settings.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(settings.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.keep_alive_interval)
        .keep_alive_timeout(settings.keep_alive_timeout);
    let builder = Arc::new(builder);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
            // Reap finished connections as we go.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, "closing a new connection: {} connections are open (--max-connections)", settings.max_connections);
            drop(stream);
            continue;
        };
        let connection = Connection {
            builder: Arc::clone(&builder),
            tls: tls.clone(),
            router: router.clone(),
            settings,
            shutdown: shutdown.clone(),
            peer,
        };
        connections.spawn(connection.run(stream, slot));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    tls: tls::Tls,
    router: Router,
    settings: Transport,
    shutdown: watch::Receiver<bool>,
    peer: SocketAddr,
}

impl Connection {
    /// Serves one connection; `slot` is given back just before the socket closes (or, for an
    /// upgraded connection, once its handler is done with it), so a client that sees the close may
    /// connect again at once.
    async fn run(mut self, stream: tokio::net::TcpStream, slot: tokio::sync::OwnedSemaphorePermit) {
        let peer = self.peer;
        let lease = ConnectionLease::new(slot, self.settings.keep_alive_interval, self.settings.keep_alive_timeout);
        let (io, peer_certificate) =
            match tokio::time::timeout(self.settings.header_read_timeout, tls::accept(stream, &self.tls)).await {
                Ok(Ok(accepted)) => accepted,
                Ok(Err(error)) => return tracing::debug!(%peer, "connection dropped before HTTP: {error}"),
                Err(_) => return tracing::debug!(%peer, "connection sent nothing in time"),
            };
        let activity = Arc::new(Activity::new());
        let service = {
            let activity = Arc::clone(&activity);
            let lease = lease.clone();
            let router = self.router.clone();
            tower::service_fn(move |mut request: http::Request<Incoming>| {
                let in_flight = InFlight::enter(Arc::clone(&activity));
                let router = router.clone();
                request.extensions_mut().insert(lease.clone());
                if let Some(certificate) = &peer_certificate {
                    request.extensions_mut().insert(certificate.clone());
                }
                async move {
                    let response = router.oneshot(request.map(Body::new)).await?;
                    Ok::<_, Infallible>(response.map(|body| Body::new(Tracked { body, _in_flight: in_flight })))
                }
            })
        };
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), hyper_util::service::TowerToHyperService::new(service));
        tokio::pin!(connection);
        let mut closing = false;
        loop {
            // Registered before the deadline is read, so a request that ends in between still
            // wakes this loop.
            let changed = activity.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let idle_deadline = activity.idle_deadline(self.settings.idle_timeout);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, "connection ended: {error}");
                    }
                    drop(lease);
                    return;
                }
                _ = self.shutdown.wait_for(|stop| *stop), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
                () = &mut changed, if !closing => {}
                () = sleep_until(idle_deadline), if !closing => {
                    if activity.is_idle_for(self.settings.idle_timeout) {
                        tracing::debug!(%peer, "closing a connection idle for {:?}", self.settings.idle_timeout);
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        // A request is in flight: its end wakes the loop (`Activity::changed`).
        None => std::future::pending().await,
    }
}

/// Requests in flight on one connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    since: std::sync::Mutex<Instant>,
    changed: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            since: std::sync::Mutex::new(Instant::now()),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// When the connection will have been idle for `timeout`, if nothing is in flight now.
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = *self.since.lock_unpoisoned();
        Some(since + timeout)
    }

    fn is_idle_for(&self, timeout: Duration) -> bool {
        self.idle_deadline(timeout).is_some_and(|deadline| deadline <= Instant::now())
    }
}

/// One request in flight, from its headers to the end (or drop) of its response body.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        activity.changed.notify_waiters();
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.since.lock_unpoisoned() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A response body that holds its request's [`InFlight`] until it is done.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
