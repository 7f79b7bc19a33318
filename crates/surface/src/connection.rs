//! What a handler that takes its connection over (a WebSocket upgrade: `kubectl exec`) must keep
//! of it. The accept loop (the edge's transport) makes one per connection and puts it in every
//! request's extensions; the type lives here, below the edge, so the kube facade can hold it.

use std::sync::Arc;
use std::time::Duration;

/// A connection's slot of `max_connections` and the keep-alive it is held to: a handler that
/// takes the connection over keeps a clone for as long as it uses the socket, so the slot is given
/// back only when both the HTTP side and the socket are done.
#[derive(Clone)]
pub struct ConnectionLease {
    _slot: Arc<tokio::sync::OwnedSemaphorePermit>,
    /// After how long without a frame from the peer it is pinged.
    pub keep_alive_interval: Duration,
    /// How long the ping may go unanswered before the socket is dropped.
    pub keep_alive_timeout: Duration,
}

impl ConnectionLease {
    /// The lease of a connection holding `slot`.
    pub fn new(
        slot: tokio::sync::OwnedSemaphorePermit,
        keep_alive_interval: Duration,
        keep_alive_timeout: Duration,
    ) -> ConnectionLease {
        ConnectionLease { _slot: Arc::new(slot), keep_alive_interval, keep_alive_timeout }
    }
}
