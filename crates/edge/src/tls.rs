//! TLS beside plain HTTP on the one port.
//!
//! kubectl (client-go) never sends a bearer token over plain HTTP, so the kube facade needs TLS to
//! authenticate it; gRPC and Connect clients keep speaking h2c/HTTP/1.1 in the clear. Each accepted
//! connection is told apart by its first byte: a TLS record starts with 0x16 (handshake), which
//! no HTTP/1.1 request line or HTTP/2 preface does. The certificate is self-signed, made at
//! start for the loopback names, and handed to kubectl as `certificate-authority-data`.
//!
//! The direct data plane's endpoint is another listener, mutual TLS only ([`Tls::ClientCertificate`],
//! `cwsandbox_surface::direct`).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Why no TLS identity could be made (for this port's or the direct data plane's).
pub use cwsandbox_surface::direct::TlsError;

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

    /// The rustls configuration the accept loop serves TLS with.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.config)
    }
}

/// How a listener's connections are secured.
#[derive(Clone)]
pub enum Tls {
    /// TLS beside plain HTTP, told apart by the first byte (the API's port).
    Optional(tokio_rustls::TlsAcceptor),
    /// Mutual TLS only (the direct data plane's endpoint): the configuration requires a client
    /// certificate, which every request of the connection carries as a [`PeerCertificate`].
    ClientCertificate(tokio_rustls::TlsAcceptor),
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tls::Optional(_) => "Tls::Optional",
            Tls::ClientCertificate(_) => "Tls::ClientCertificate",
        })
    }
}

/// The certificate a mutual-TLS client presented, in the extensions of each of its requests. Only
/// the accept loop puts it there (nothing from the network can), after the handshake verified it.
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<rustls::pki_types::CertificateDer<'static>>);

/// Accepts a connection as `tls` says: the connection, and the client's certificate if it sent one.
pub async fn accept(stream: TcpStream, tls: &Tls) -> std::io::Result<(Box<dyn Connection>, Option<PeerCertificate>)> {
    match tls {
        Tls::Optional(acceptor) => Ok((classify(stream, acceptor.clone()).await?, None)),
        Tls::ClientCertificate(acceptor) => {
            let _ = stream.set_nodelay(true);
            let connection = acceptor.accept(stream).await?;
            let certificate = connection
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|certificate| PeerCertificate(Arc::new(certificate.clone().into_owned())));
            if certificate.is_none() {
                return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no client certificate"));
            }
            Ok((Box::new(connection), certificate))
        }
    }
}

/// A TLS connection or a plain one, told apart by the first byte (read without consuming it).
async fn classify(stream: TcpStream, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<Box<dyn Connection>> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    let read = stream.peek(&mut first).await?;
    if read == 1 && first[0] == 0x16 { Ok(Box::new(acceptor.accept(stream).await?)) } else { Ok(Box::new(stream)) }
}
