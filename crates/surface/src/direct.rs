//! The direct data plane: the certificate authority behind ConnectSandbox, and what a certificate
//! it issued may do on the mutual-TLS endpoint that serves SandboxDataPlaneService.
//!
//! The real service signs the client's CSR and sends it straight to the runner that hosts the
//! sandbox. Here one endpoint (a second listener, made at start on the API's address with port 0)
//! stands for every runner's: what a connection may do is decided by its certificate, never by
//! the address it reached, so one listener serves every sandbox without a socket to open and
//! close with each sandbox's life.
//!
//! - **The CA** is an ECDSA P-256 key made at start. It lives in this process's memory only: it is
//!   never written, logged or sent; a restart makes a new one, and every certificate of the old
//!   one stops working. It signs the endpoint's own server certificate (the loopback names and the
//!   bound address) and the client certificates.
//! - **A client certificate** carries only the CSR's key (its signature is checked, so the caller
//!   holds the private key): the subject, names, usages and validity are the CA's, as a CA
//!   decides them, whatever the CSR asks for. It is a client-authentication end-entity
//!   certificate, never a CA, valid for [`CERTIFICATE_LIFETIME`] by the emulator's clock.
//! - **What it grants** is kept here, keyed by the certificate's bytes ([`Grant`]): the sandbox,
//!   the caller who asked (narrowed to `sandbox_user`, so a certificate never carries an admin's
//!   powers) and the permissions granted. The certificate also names the sandbox in a URI SAN,
//!   for people reading it; the table, not the SAN, is what is trusted.
//! - **Each call** on the endpoint is checked against the grant of the connection's certificate:
//!   unknown or expired (by the emulator's clock, so advancing it expires certificates) is
//!   UNAUTHENTICATED; another sandbox, or an operation not granted, PERMISSION_DENIED. The TLS
//!   handshake itself also checks validity by the emulator's clock.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cwsandbox_sim::time::{Clock, SimTime};
use cwsandbox_sync::MutexUnpoisoned;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer, PrivateKeyDer, UnixTime};

use crate::catalogue::names;
use crate::identity::{Principal, Role};
use cwsandbox_host::clock::EmulatorClock;

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

/// How long a client certificate is valid, by the emulator's clock. Short, as the real service's
/// are: the client asks for a new one 30 s before the end.
pub const CERTIFICATE_LIFETIME: Duration = Duration::from_secs(600);
/// How far back a certificate's validity starts, so a client whose clock is a little behind the
/// emulator's can use it at once.
const BACKDATE: Duration = Duration::from_secs(60);
/// Live certificates at most. Each ConnectSandbox adds one, and expired ones are dropped as new
/// ones are issued; beyond this ConnectSandbox answers RESOURCE_EXHAUSTED (the client then uses
/// the gateway), so callers cannot grow the table without bound.
pub const MAX_LIVE_CERTIFICATES: usize = 10_000;

/// A data operation a certificate may be granted, one per RPC of SandboxDataPlaneService.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// Exec.
    Exec,
    /// StreamExec.
    StreamExec,
    /// StreamLogs.
    StreamLogs,
    /// WriteFile.
    WriteFile,
    /// ReadFile.
    ReadFile,
}

impl Permission {
    /// The permission an RPC of the data plane needs, by its method name.
    pub fn of_method(method: &str) -> Option<Permission> {
        Some(match method {
            names::EXEC => Permission::Exec,
            names::STREAM_EXEC => Permission::StreamExec,
            names::STREAM_LOGS => Permission::StreamLogs,
            names::WRITE_FILE => Permission::WriteFile,
            names::READ_FILE => Permission::ReadFile,
            _ => return None,
        })
    }

    /// The RPC's name.
    pub fn method(self) -> &'static str {
        match self {
            Permission::Exec => names::EXEC,
            Permission::StreamExec => names::STREAM_EXEC,
            Permission::StreamLogs => names::STREAM_LOGS,
            Permission::WriteFile => names::WRITE_FILE,
            Permission::ReadFile => names::READ_FILE,
        }
    }
}

/// What one issued certificate may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The one sandbox it acts on.
    pub sandbox_id: String,
    /// Who asked for it, with the `sandbox_user` role only.
    pub principal: Principal,
    /// The operations granted.
    pub permissions: BTreeSet<Permission>,
    /// When it stops working (the certificate's `notAfter`).
    pub expires_at: SimTime,
}

impl Grant {
    /// Whether this certificate grants `permission` (on its sandbox).
    pub fn permits(&self, permission: Permission) -> Result<(), DirectError> {
        if self.permissions.contains(&permission) {
            return Ok(());
        }
        Err(DirectError::NotGranted {
            permission,
            sandbox_id: self.sandbox_id.clone(),
            granted: self.permissions.iter().map(|granted| granted.method()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Whether this certificate may perform `permission` on `sandbox_id`.
    pub fn allows(&self, permission: Permission, sandbox_id: &str) -> Result<(), DirectError> {
        self.permits(permission)?;
        if sandbox_id != self.sandbox_id {
            return Err(DirectError::OtherSandbox { bound: self.sandbox_id.clone(), asked: sandbox_id.to_owned() });
        }
        Ok(())
    }
}

/// A signed certificate and how to use it: ConnectSandbox's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The endpoint, `https://HOST:PORT`.
    pub endpoint_uri: String,
    /// Names the endpoint.
    pub endpoint_id: String,
    /// The client certificate then the CA's, PEM.
    pub certificate_chain_pem: String,
    /// The CA that signed the endpoint's certificate, PEM.
    pub ca_pem: String,
    /// The certificate's `notAfter`.
    pub expires_at: SimTime,
    /// The operations granted.
    pub permissions: BTreeSet<Permission>,
}

/// Why a certificate was not issued, or a direct call not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectError {
    /// The CSR is not a DER PKCS#10 request signed by its own key.
    #[error("not a DER-encoded PKCS#10 certificate signing request signed by its key: {0}")]
    Csr(String),
    /// Signing failed.
    #[error("signing the certificate failed: {0}")]
    Signing(String),
    /// [`MAX_LIVE_CERTIFICATES`] are live.
    #[error("{MAX_LIVE_CERTIFICATES} direct data-plane certificates are live; retry when some have expired")]
    TooMany,
    /// The certificate is not one the CA issued in this process's life (or a Reset revoked it).
    #[error("the client certificate was not issued by this emulator's ConnectSandbox, or was revoked by a reset")]
    Unknown,
    /// The certificate's validity is over.
    #[error("the client certificate expired at {at}; call ConnectSandbox for a new one")]
    Expired {
        /// Its `notAfter`, RFC 3339.
        at: String,
    },
    /// The certificate was issued for another sandbox.
    #[error("the client certificate acts on sandbox {bound} only, not on {asked}")]
    OtherSandbox {
        /// The sandbox it was issued for.
        bound: String,
        /// The sandbox the call named.
        asked: String,
    },
    /// The certificate does not grant the call's operation.
    #[error("the client certificate for sandbox {sandbox_id} does not grant {}: it grants {granted}", permission.method())]
    NotGranted {
        /// The operation asked for.
        permission: Permission,
        /// The certificate's sandbox.
        sandbox_id: String,
        /// What it grants.
        granted: String,
    },
}

/// The certificate authority and the grants of its certificates.
pub struct DirectPlane {
    endpoint_uri: String,
    endpoint_id: String,
    ca_pem: String,
    /// Holds the CA's private key: in memory only, never serialized.
    issuer: Issuer<'static, KeyPair>,
    server: Arc<rustls::ServerConfig>,
    clock: EmulatorClock,
    /// Inserts and removes are single map operations: a panic cannot leave the map half-changed.
    grants: Mutex<HashMap<Vec<u8>, Arc<Grant>>>,
}

impl std::fmt::Debug for DirectPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("DirectPlane").field("endpoint_uri", &self.endpoint_uri).finish_non_exhaustive()
    }
}

/// Time for rustls's certificate checks: the emulator's clock, so the handshake and the calls
/// agree on when a certificate expires.
#[derive(Debug)]
struct ClockTime(EmulatorClock);

impl rustls::time_provider::TimeProvider for ClockTime {
    fn current_time(&self) -> Option<UnixTime> {
        u64::try_from(self.0.now().millis())
            .ok()
            .map(|millis| UnixTime::since_unix_epoch(Duration::from_millis(millis)))
    }
}

/// A random serial number (positive: the top bit clear).
fn serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: the serial needs to be unique, not secret.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0);
        bytes = nanos.to_be_bytes();
    }
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

/// A time of the emulator's clock as a certificate time (whole seconds, as X.509 keeps them).
fn certificate_time(time: SimTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(time.millis().div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// `time` rounded down to the second, as the certificate holds it.
fn whole_seconds(time: SimTime) -> SimTime {
    SimTime::from_millis(time.millis().div_euclid(1000) * 1000)
}

/// A CA made at start, held in memory only, and the server certificate it signs for the
/// loopback names and the address the emulator is bound to: the direct data plane's and the
/// HTTPS endpoints' TLS.
pub(crate) struct LocalAuthority {
    pub(crate) ca_certificate: rcgen::Certificate,
    /// The CA's certificate, PEM: what clients trust.
    pub(crate) ca_pem: String,
    pub(crate) issuer: Issuer<'static, KeyPair>,
    pub(crate) server_certificate: rcgen::Certificate,
    pub(crate) server_key: KeyPair,
}

impl LocalAuthority {
    /// A fresh CA named `<name> CA` and a server certificate named `name` for `localhost`,
    /// `127.0.0.1`, `::1` and `bound`.
    pub(crate) fn new(name: &str, bound: IpAddr) -> Result<LocalAuthority, TlsError> {
        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = DistinguishedName::new();
        ca_params.distinguished_name.push(DnType::CommonName, format!("{name} CA"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params.serial_number = Some(serial());
        let ca_certificate = ca_params.self_signed(&ca_key)?;
        let ca_pem = ca_certificate.pem();
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
        if !names.contains(&bound.to_string()) {
            names.push(bound.to_string());
        }
        let mut server_params = CertificateParams::new(names)?;
        server_params.distinguished_name = DistinguishedName::new();
        server_params.distinguished_name.push(DnType::CommonName, name);
        server_params.is_ca = IsCa::ExplicitNoCa;
        server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        server_params.use_authority_key_identifier_extension = true;
        server_params.serial_number = Some(serial());
        let server_certificate = server_params.signed_by(&server_key, &issuer)?;
        Ok(LocalAuthority { ca_certificate, ca_pem, issuer, server_certificate, server_key })
    }
}

impl DirectPlane {
    /// A fresh CA, and the endpoint's server certificate for the loopback names and `bound`,
    /// reachable at `endpoint_uri` (`https://HOST:PORT`).
    pub fn new(clock: EmulatorClock, bound: IpAddr, endpoint_uri: String) -> Result<DirectPlane, TlsError> {
        let LocalAuthority { ca_certificate, ca_pem, issuer, server_certificate, server_key } =
            LocalAuthority::new("cwsandbox-emulator direct data plane", bound)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_certificate.der().clone())?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|error| TlsError::Config(rustls::Error::General(error.to_string())))?;
        let mut config = rustls::ServerConfig::builder_with_details(provider, Arc::new(ClockTime(clock.clone())))
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![server_certificate.der().clone(), ca_certificate.der().clone()],
                PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )?;
        // gRPC and Connect over HTTP/2 only: the protocol ConnectSandbox announces.
        config.alpn_protocols = vec![b"h2".to_vec()];
        // No session could be resumed: each certificate is one sandbox's, and a new one is issued
        // for each client key. Tickets (rustls sends two per handshake by default) and a session
        // cache would only cost both ends work on every connection.
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let endpoint_id = format!("emulator-direct-{}", endpoint_uri.rsplit(':').next().unwrap_or_default());
        Ok(DirectPlane {
            endpoint_uri,
            endpoint_id,
            ca_pem,
            issuer,
            server: Arc::new(config),
            clock,
            grants: Mutex::default(),
        })
    }

    /// The endpoint, `https://HOST:PORT`.
    pub fn endpoint_uri(&self) -> &str {
        &self.endpoint_uri
    }

    /// The CA's certificate, PEM (what clients verify the endpoint with).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The endpoint's TLS configuration: a client certificate of this CA is required.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.server)
    }

    /// Signs `csr_der`'s key into a certificate for `sandbox_id` granting `permissions` to
    /// `principal` (as `sandbox_user` only). The caller has checked that the sandbox is the
    /// principal's and RUNNING.
    pub fn issue(
        &self,
        principal: &Principal,
        sandbox_id: &str,
        csr_der: &[u8],
        permissions: BTreeSet<Permission>,
    ) -> Result<Issued, DirectError> {
        let csr = CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(csr_der))
            .map_err(|error| DirectError::Csr(error.to_string()))?;
        if csr.params.is_ca != IsCa::NoCa || !csr.params.subject_alt_names.is_empty() {
            // Not granted whatever the request says; noted so a puzzled caller can find why.
            tracing::debug!(sandbox_id, "ConnectSandbox: the CSR's names and constraints are replaced by the CA's");
        }
        let now = self.clock.now();
        let expires_at = whole_seconds(now + CERTIFICATE_LIFETIME);
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, principal.org.as_str());
        params.distinguished_name.push(DnType::CommonName, format!("sandbox {sandbox_id}"));
        let uri = format!("cwsandbox://{}/sandboxes/{sandbox_id}", principal.org);
        params.subject_alt_names = match uri.try_into() {
            Ok(uri) => vec![SanType::URI(uri)],
            // Identifiers are ASCII; a name that is not only leaves the SAN out (it is informational).
            Err(_) => Vec::new(),
        };
        params.not_before = certificate_time(now - BACKDATE);
        params.not_after = certificate_time(expires_at);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(serial());
        let certificate =
            params.signed_by(&csr.public_key, &self.issuer).map_err(|error| DirectError::Signing(error.to_string()))?;
        let grant = Grant {
            sandbox_id: sandbox_id.to_owned(),
            principal: Principal { roles: vec![Role::SandboxUser], ..principal.clone() },
            permissions: permissions.clone(),
            expires_at,
        };
        {
            let mut grants = self.grants.lock_unpoisoned();
            grants.retain(|_, grant| grant.expires_at > now);
            if grants.len() >= MAX_LIVE_CERTIFICATES {
                return Err(DirectError::TooMany);
            }
            grants.insert(certificate.der().to_vec(), Arc::new(grant));
        }
        tracing::info!(sandbox_id, user = %principal.user, ?permissions, "direct data-plane certificate issued");
        Ok(Issued {
            endpoint_uri: self.endpoint_uri.clone(),
            endpoint_id: self.endpoint_id.clone(),
            certificate_chain_pem: format!("{}{}", certificate.pem(), self.ca_pem),
            ca_pem: self.ca_pem.clone(),
            expires_at,
            permissions,
        })
    }

    /// The grant of a connection's client certificate, if it is still valid now.
    pub fn grant_of(&self, certificate: &CertificateDer<'_>) -> Result<Arc<Grant>, DirectError> {
        let grant = self.grants.lock_unpoisoned().get(certificate.as_ref()).cloned().ok_or(DirectError::Unknown)?;
        if self.clock.now() >= grant.expires_at {
            let at = chrono::DateTime::from_timestamp_millis(grant.expires_at.millis())
                .map(|at| at.to_rfc3339())
                .unwrap_or_else(|| format!("{} ms after the epoch", grant.expires_at.millis()));
            return Err(DirectError::Expired { at });
        }
        Ok(grant)
    }

    /// Forgets the certificates of `org` (every organization's with `None`): a Reset forgets the
    /// sandboxes they were issued for.
    pub fn revoke(&self, org: Option<&str>) {
        let mut grants = self.grants.lock_unpoisoned();
        match org {
            None => grants.clear(),
            Some(org) => grants.retain(|_, grant| grant.principal.org != org),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal() -> Principal {
        Principal {
            org: "org".to_owned(),
            user: "admin".to_owned(),
            uid: 0,
            roles: vec![Role::ClusterAdmin, Role::SandboxAdmin, Role::SandboxUser],
        }
    }

    fn plane() -> (DirectPlane, EmulatorClock) {
        let clock = EmulatorClock::new();
        clock.freeze();
        let plane = DirectPlane::new(clock.clone(), IpAddr::from([127, 0, 0, 1]), "https://127.0.0.1:1".to_owned())
            .expect("a CA");
        (plane, clock)
    }

    fn csr() -> Vec<u8> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.serialize_request(&key).unwrap().der().to_vec()
    }

    fn leaf(issued: &Issued) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(issued.certificate_chain_pem.as_bytes()).next().unwrap().unwrap()
    }

    #[test]
    fn a_certificate_is_bound_to_its_sandbox_permissions_and_lifetime() {
        let (plane, clock) = plane();
        let issued = plane.issue(&principal(), "sb-a", &csr(), BTreeSet::from([Permission::StreamExec])).unwrap();
        assert_eq!(issued.expires_at, whole_seconds(clock.now() + CERTIFICATE_LIFETIME));
        assert_eq!(issued.certificate_chain_pem.matches("BEGIN CERTIFICATE").count(), 2, "leaf then CA");
        let grant = plane.grant_of(&leaf(&issued)).unwrap();
        assert_eq!(grant.principal.roles, vec![Role::SandboxUser], "never an admin's powers");
        assert_eq!(grant.allows(Permission::StreamExec, "sb-a"), Ok(()));
        assert!(matches!(grant.allows(Permission::StreamExec, "sb-b"), Err(DirectError::OtherSandbox { .. })));
        assert!(matches!(grant.allows(Permission::ReadFile, "sb-a"), Err(DirectError::NotGranted { .. })));
        clock.advance(CERTIFICATE_LIFETIME);
        assert!(matches!(plane.grant_of(&leaf(&issued)), Err(DirectError::Expired { .. })));
    }

    #[test]
    fn bad_csrs_are_refused_and_resets_revoke() {
        let (plane, _) = plane();
        let permissions = BTreeSet::from([Permission::Exec]);
        assert!(matches!(plane.issue(&principal(), "sb", b"not a csr", permissions.clone()), Err(DirectError::Csr(_))));
        let mut tampered = csr();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(matches!(plane.issue(&principal(), "sb", &tampered, permissions.clone()), Err(DirectError::Csr(_))));
        let issued = plane.issue(&principal(), "sb", &csr(), permissions).unwrap();
        plane.revoke(Some("other-org"));
        assert!(plane.grant_of(&leaf(&issued)).is_ok());
        plane.revoke(Some("org"));
        assert_eq!(plane.grant_of(&leaf(&issued)), Err(DirectError::Unknown));
    }
}
