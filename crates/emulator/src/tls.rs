//! TLS beside plain HTTP on the one port.
//!
//! kubectl (client-go) never sends a bearer token over plain HTTP, so the kube facade needs TLS to
//! authenticate it; gRPC and Connect clients keep speaking h2c/HTTP/1.1 in the clear. Each accepted
//! connection is told apart by its first byte: a TLS record starts with 0x16 (handshake), which
//! no HTTP/1.1 request line or HTTP/2 preface does. The certificate is self-signed, made at
//! start for the loopback names, and handed to kubectl as `certificate-authority-data`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a new connection may take to send its first byte and finish a TLS handshake.
const FIRST_BYTES_LIMIT: Duration = Duration::from_secs(10);

/// A connection of either kind.
pub trait Connection: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Connection for T {}

/// The server's certificate and key.
pub struct ServerIdentity {
    /// The certificate in PEM, which clients trust as their CA.
    pub certificate_pem: String,
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerIdentity").finish_non_exhaustive()
    }
}

/// Why no TLS identity could be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Making the certificate failed.
    #[error("making the self-signed certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

impl ServerIdentity {
    /// A fresh self-signed certificate for `localhost`, the loopback addresses and `bound`.
    pub fn self_signed(bound: std::net::IpAddr) -> Result<ServerIdentity, TlsError> {
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
        let bound = bound.to_string();
        if !names.contains(&bound) {
            names.push(bound);
        }
        let certified = rcgen::generate_simple_self_signed(names)?;
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ServerIdentity { certificate_pem: certified.cert.pem(), config: Arc::new(config) })
    }
}

/// A listener handing out plain and TLS connections alike.
pub struct DualListener {
    incoming: mpsc::Receiver<(Box<dyn Connection>, SocketAddr)>,
    local: SocketAddr,
}

impl DualListener {
    /// Starts accepting on `listener`; the accept task ends when the returned listener is dropped.
    pub fn new(listener: TcpListener, identity: &ServerIdentity) -> std::io::Result<DualListener> {
        let local = listener.local_addr()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&identity.config));
        let (sender, incoming) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = sender.closed() => return,
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
                let sender = sender.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(FIRST_BYTES_LIMIT, classify(stream, acceptor)).await {
                        Ok(Ok(connection)) => {
                            let _ = sender.send((connection, peer)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%peer, "connection dropped before HTTP: {error}"),
                        Err(_) => tracing::debug!(%peer, "connection sent nothing in time"),
                    }
                });
            }
        });
        Ok(DualListener { incoming, local })
    }
}

async fn classify(stream: TcpStream, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<Box<dyn Connection>> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    let read = stream.peek(&mut first).await?;
    if read == 1 && first[0] == 0x16 {
        Ok(Box::new(acceptor.accept(stream).await?))
    } else {
        Ok(Box::new(stream))
    }
}

impl axum::serve::Listener for DualListener {
    type Io = Box<dyn Connection>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The accept task ends only when this listener is dropped, so this is unreachable
            // while serving; never resolving keeps axum's loop from spinning regardless.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
