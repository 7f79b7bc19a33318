//! A sandbox's services (`SandboxSpec.services`) served on the host: each TCP port gets a
//! listener on a free loopback port of the host, made when the sandbox is created so the client
//! sees its URL while the sandbox is still CREATING (as the real service assigns one early:
//! assigned is not the same as listening). Each connection accepted there is relayed to the port
//! inside the sandbox, connected in the sandbox's own network by the runtime; while the sandbox
//! does not run, or nothing listens on the port, the connection is closed at once. An HTTPS
//! endpoint's listener terminates TLS and proxies each request instead (`crate::endpoints`). The
//! listeners close when the sandbox ends or is forgotten.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cwsandbox_api::sandbox_v1::{EndpointAuth, EndpointKind, Service};
use cwsandbox_sim::sandbox::{DEFAULT_ENDPOINT_REQUEST_TIMEOUT_SECONDS, SandboxState, SandboxView};
use tokio::net::{TcpListener, TcpStream};

use crate::app::App;
use crate::endpoints::{self, HttpsEndpoint};

/// What a service's listener does with a connection.
#[derive(Clone)]
enum Forward {
    /// Relays its bytes as they are (a plain service, a TLS_PASSTHROUGH endpoint).
    Tcp,
    /// Terminates TLS and proxies its requests (an HTTPS endpoint).
    Https(Arc<HttpsEndpoint>),
}

/// Opens a listener for each of a new sandbox's services, tells the world where they are (and
/// the share token its share-token endpoints ask for), and relays their connections until the
/// sandbox ends. A sandbox without services, or whose services are published already (a
/// replayed create), is left as it is.
pub async fn publish(app: &App, view: &SandboxView, services: &[Service]) {
    if services.is_empty() || !view.published.is_empty() || view.state.is_terminal() {
        return;
    }
    let mut published = Vec::with_capacity(services.len());
    let mut share_token = None;
    for service in services {
        let Ok(port) = u16::try_from(service.port) else { continue };
        let forward = match &service.endpoint {
            Some(endpoint) if endpoint.kind == EndpointKind::Https as i32 => {
                let wants_token = endpoint.auth == EndpointAuth::ShareToken as i32;
                if wants_token && share_token.is_none() {
                    share_token = endpoints::new_share_token();
                    if share_token.is_none() {
                        tracing::warn!(sandbox_id = %view.id, port, "no randomness for a share token: the endpoint is not served");
                        continue;
                    }
                }
                let seconds = if endpoint.request_timeout_seconds > 0 {
                    endpoint.request_timeout_seconds
                } else {
                    DEFAULT_ENDPOINT_REQUEST_TIMEOUT_SECONDS
                };
                Forward::Https(Arc::new(HttpsEndpoint {
                    sandbox_id: view.id.to_string(),
                    port,
                    share_token: wants_token,
                    request_timeout: Duration::from_secs(u64::from(seconds.unsigned_abs())),
                }))
            }
            _ => Forward::Tcp,
        };
        let listener = match TcpListener::bind(("127.0.0.1", 0)).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(sandbox_id = %view.id, port, %error, "no loopback port to serve a sandbox's service at");
                continue;
            }
        };
        let Ok(address) = listener.local_addr() else { continue };
        published.push((service.port, address.to_string()));
        tokio::spawn(serve(app.clone(), view.id.to_string(), port, listener, forward));
    }
    let id = view.id.to_string();
    let share_token = share_token.map(Arc::from);
    app.driver().with_world(|world| world.publish_services(&id, published, share_token));
}

/// Accepts connections for one service until the sandbox has ended (or is gone).
async fn serve(app: App, sandbox_id: String, port: u16, listener: TcpListener, forward: Forward) {
    let mut changes = app.driver().changes();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => match &forward {
                    Forward::Tcp => {
                        tokio::spawn(relay(app.clone(), sandbox_id.clone(), port, client, peer));
                    }
                    Forward::Https(endpoint) => {
                        tokio::spawn(endpoints::serve_connection(app.clone(), Arc::clone(endpoint), client, peer));
                    }
                },
                Err(error) => tracing::debug!(sandbox_id, port, %error, "accept failed"),
            },
            changed = changes.changed() => {
                // The emulator is stopping (the sender is gone), or the world moved on.
                if changed.is_err() || ended(&app, &sandbox_id) {
                    return;
                }
            }
        }
    }
}

fn ended(app: &App, sandbox_id: &str) -> bool {
    app.driver().sandbox_view(sandbox_id).is_none_or(|view| view.state.is_terminal())
}

/// Relays one connection to the port inside the sandbox.
async fn relay(app: App, sandbox_id: String, port: u16, mut client: TcpStream, peer: SocketAddr) {
    let Some(view) = app.driver().sandbox_view(&sandbox_id) else { return };
    if view.state != SandboxState::Running || view.pod_uid.is_empty() {
        tracing::debug!(sandbox_id, port, %peer, state = ?view.state, "connection to a sandbox that does not run: closed");
        return;
    }
    let Ok(runtime) = app.runtime("service port") else { return };
    let inside = match runtime.connect(view.pod_uid.to_string(), port).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::debug!(sandbox_id, port, %peer, %error, "nothing to relay to in the sandbox: closed");
            return;
        }
    };
    let mut inside = match inside.set_nonblocking(true).and_then(|()| TcpStream::from_std(inside)) {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(sandbox_id, port, %error, "the sandbox's connection cannot be relayed");
            return;
        }
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut inside).await;
}
