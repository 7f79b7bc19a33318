//! Sandbox networks against the kernel: namespaces made here, a test host in a network
//! namespace of the test's own (198.51.100.10, TCP servers on two ports), real connections.
//! Nothing leaves this machine: every address is on links this test makes.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cwsandbox_testkit::test_host::{TestHost, in_namespace};

use cwsandbox_network::{
    Attachment, Cidr, Direction, HostnameGrant, Ipv4Cidr, NetworkConfig, NetworkError, Peer, PeerIdentity, PortRange,
    Protocol, Rule, SandboxNetworks,
};

const TEST_HOST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// Long enough for any connection here to be answered; a refused one is reset at once.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn runnable(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let nft = Command::new("nft").arg("--version").output().is_ok_and(|output| output.status.success());
    if !(root && nft) {
        cwsandbox_testkit::skip(test, "sandbox networks need root and Debian's nftables");
        return false;
    }
    true
}

/// A listener in the namespace at `path` that answers each connection with `reply` and
/// closes it; its thread ends with the process.
fn serve(path: &Path, address: SocketAddr, reply: &'static [u8]) {
    let listener = in_namespace(path, move || TcpListener::bind(address).expect("listener binds"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(reply);
        }
    });
}

/// Connects from the namespace at `path` (the host's with `None`) and reads the reply.
fn reach(path: Option<&Path>, address: SocketAddr) -> std::io::Result<Vec<u8>> {
    let attempt = move || {
        let mut stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)?;
        stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply)?;
        Ok(reply)
    };
    match path {
        Some(path) => in_namespace(path, attempt),
        None => attempt(),
    }
}

fn refused(result: std::io::Result<Vec<u8>>) -> bool {
    matches!(result, Err(error) if matches!(error.kind(), ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable | ErrorKind::PermissionDenied))
}

/// A host of the test's own at 198.51.100.10 (testkit's `TestHost`) with TCP servers on 8080
/// and 9090.
fn test_host(name: &str) -> TestHost {
    let host = TestHost::start(name, [198, 51, 100]);
    assert_eq!(host.address(), TEST_HOST);
    for (port, reply) in [(8080, &b"eighty-eighty"[..]), (9090, &b"ninety-ninety"[..])] {
        serve(&host.path(), SocketAddr::from((TEST_HOST, port)), reply);
    }
    host
}

/// A bridge and range of this test's own (tests of this binary run at once).
fn networks(tag: u8) -> SandboxNetworks {
    let pod_cidr: Ipv4Cidr = format!("10.{}.{tag}.0/24", 200 + std::process::id() % 50).parse().expect("range");
    SandboxNetworks::open(NetworkConfig::new(&format!("cwnt{tag}"), pod_cidr)).expect("sandbox networks open")
}

fn identity(organization: &str, user: &str, labels: &[(&str, &str)]) -> PeerIdentity {
    PeerIdentity {
        organization: organization.to_owned(),
        user: user.to_owned(),
        namespace: format!("{organization}-sandboxes"),
        pod_labels: labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect(),
        namespace_labels: BTreeMap::new(),
    }
}

/// Attaches and makes a namespace for it, as a namespaced sandbox gets one.
fn attach(networks: &SandboxNetworks, attachment: Attachment) -> PathBuf {
    let id = attachment.id.clone();
    networks.attach(attachment).expect("attach");
    networks.make_namespace(&id).expect("a namespace")
}

/// Sandbox `id` at the range's `n`th Pod address, open both ways, no names, any DNS answer.
fn open(networks: &SandboxNetworks, id: &str, n: usize, identity: PeerIdentity) -> Attachment {
    Attachment {
        id: id.to_owned(),
        address: address(networks, n),
        identity,
        egress: Direction::default(),
        ingress: Direction::default(),
        https_grants: Vec::new(),
        dns_allow_all: true,
    }
}

fn address(networks: &SandboxNetworks, n: usize) -> Ipv4Addr {
    networks.config().pod_cidr.pod_addresses().nth(n).expect("an address")
}

fn tcp(first: u16, last: u16) -> PortRange {
    PortRange { protocol: Protocol::Tcp, first, last }
}

fn cidr(text: &str, except: &[&str]) -> Peer {
    Peer::Cidr {
        cidr: text.parse::<Cidr>().expect("cidr"),
        except: except.iter().map(|block| block.parse().expect("except")).collect(),
    }
}

fn isolated(rules: Vec<Rule>) -> Direction {
    Direction { isolated: true, rules }
}

#[test]
fn cidr_and_port_rules_decide_what_a_sandbox_reaches() {
    if !runnable("cidr_and_port_rules_decide_what_a_sandbox_reaches") {
        return;
    }
    let test_host = test_host("cwnth1");
    let networks = networks(1);
    let sandbox = |n: usize, egress: Direction| {
        attach(&networks, Attachment { egress, ..open(&networks, &format!("s{n}"), n, identity("org", "alice", &[])) })
    };
    let one_port =
        sandbox(0, isolated(vec![Rule { peer: cidr("198.51.100.10/32", &[]), ports: vec![tcp(8080, 8080)] }]));
    let excepted =
        sandbox(1, isolated(vec![Rule { peer: cidr("198.51.100.0/24", &["198.51.100.8/29"]), ports: Vec::new() }]));
    let port_range = sandbox(2, isolated(vec![Rule { peer: cidr("0.0.0.0/0", &[]), ports: vec![tcp(9000, 9999)] }]));
    let unrestricted = sandbox(3, Direction::default());
    let nothing = sandbox(4, isolated(Vec::new()));
    let anything = sandbox(5, isolated(vec![Rule { peer: Peer::Any, ports: Vec::new() }]));
    let (web, other) = (SocketAddr::from((TEST_HOST, 8080)), SocketAddr::from((TEST_HOST, 9090)));

    assert_eq!(reach(Some(&one_port), web).expect("the granted port"), b"eighty-eighty");
    assert!(refused(reach(Some(&one_port), other)), "a port the rule does not grant");
    assert!(refused(reach(Some(&excepted), web)), "an excepted address");
    assert!(refused(reach(Some(&port_range), web)), "a port below the range");
    assert_eq!(reach(Some(&port_range), other).expect("a port in the range"), b"ninety-ninety");
    assert_eq!(reach(Some(&unrestricted), other).expect("no egress policy"), b"ninety-ninety");
    assert!(refused(reach(Some(&nothing), web)), "an isolated sandbox without rules");
    assert_eq!(reach(Some(&anything), web).expect("any"), b"eighty-eighty");
    // The host's own address beyond the bridge is a destination like any other.
    assert!(refused(reach(Some(&one_port), SocketAddr::from((Ipv4Addr::new(198, 51, 100, 1), 8080)))));
    drop(networks);
    drop(test_host);
}

#[test]
fn groups_and_ingress_rules_decide_who_reaches_a_sandbox() {
    if !runnable("groups_and_ingress_rules_decide_who_reaches_a_sandbox") {
        return;
    }
    let networks = networks(2);
    let with_ingress = |n: usize, identity: PeerIdentity, ingress: Direction| {
        attach(&networks, Attachment { ingress, ..open(&networks, &format!("s{n}"), n, identity) })
    };
    let listen = |path: &Path, n: usize| {
        let at = SocketAddr::from((address(&networks, n), 7000));
        serve(path, at, b"hello");
        at
    };
    let same_org = with_ingress(
        0,
        identity("org-a", "alice", &[("app", "server")]),
        isolated(vec![Rule { peer: Peer::SameOrganization, ports: vec![tcp(7000, 7000)] }]),
    );
    let selected = with_ingress(
        1,
        identity("org-a", "alice", &[]),
        isolated(vec![Rule {
            peer: Peer::Selector {
                pod_labels: BTreeMap::from([("role".to_owned(), "client".to_owned())]),
                namespace_labels: None,
            },
            ports: Vec::new(),
        }]),
    );
    let closed = with_ingress(2, identity("org-a", "alice", &[]), isolated(Vec::new()));
    let colleague = with_ingress(3, identity("org-a", "bob", &[("role", "client")]), Direction::default());
    let teammate = with_ingress(4, identity("org-a", "alice", &[("role", "other")]), Direction::default());
    let stranger = with_ingress(5, identity("org-b", "mallory", &[("role", "client")]), Direction::default());
    let (same_org_at, selected_at, closed_at) = (listen(&same_org, 0), listen(&selected, 1), listen(&closed, 2));

    assert_eq!(reach(Some(&colleague), same_org_at).expect("same organization"), b"hello");
    assert!(refused(reach(Some(&stranger), same_org_at)), "another organization");
    assert!(refused(reach(None, same_org_at)), "the host is not of the organization");
    assert_eq!(reach(Some(&colleague), selected_at).expect("a selected Pod"), b"hello");
    assert!(refused(reach(Some(&teammate), selected_at)), "a Pod the selector does not match");
    assert!(refused(reach(Some(&stranger), selected_at)), "matching labels in another organization");
    for from in [Some(colleague.as_path()), Some(teammate.as_path()), None] {
        assert!(refused(reach(from, closed_at)), "deny ingress, from {from:?}");
    }

    // Egress to the same user's sandboxes only: alice's teammate, not bob.
    let alone = with_ingress(7, identity("org-a", "alice", &[]), Direction::default());
    let mut mine = open(&networks, "s8", 8, identity("org-a", "alice", &[]));
    mine.egress = isolated(vec![Rule { peer: Peer::SameUser, ports: Vec::new() }]);
    let mine = attach(&networks, mine);
    let mut bobs = open(&networks, "s9", 9, identity("org-a", "bob", &[]));
    bobs.egress = isolated(vec![Rule { peer: Peer::SameUser, ports: Vec::new() }]);
    let bobs = attach(&networks, bobs);
    let alone_at = listen(&alone, 7);
    assert_eq!(reach(Some(&mine), alone_at).expect("the same user"), b"hello");
    assert!(refused(reach(Some(&bobs), alone_at)), "another user of the organization");

    // A group follows sandboxes as they come and go.
    networks.detach("s3");
    let newcomer = with_ingress(6, identity("org-a", "carol", &[("role", "client")]), Direction::default());
    assert_eq!(reach(Some(&newcomer), selected_at).expect("a newcomer the selector matches"), b"hello");
    assert_eq!(reach(Some(&newcomer), same_org_at).expect("a newcomer of the organization"), b"hello");
}

#[test]
fn a_sandbox_network_is_gone_with_it_and_a_bridge_has_one_owner() {
    if !runnable("a_sandbox_network_is_gone_with_it_and_a_bridge_has_one_owner") {
        return;
    }
    let networks = networks(3);
    let bridge = networks.config().bridge.clone();
    let path = attach(
        &networks,
        Attachment { egress: isolated(Vec::new()), ..open(&networks, "s", 0, identity("org", "alice", &[])) },
    );
    assert!(path.exists());
    let again = networks.attach(open(&networks, "s", 1, identity("org", "alice", &[])));
    assert!(matches!(again, Err(NetworkError::AlreadyAttached(_))), "{again:?}");
    assert!(matches!(networks.make_namespace("s"), Err(NetworkError::AlreadyAttached(_))));
    assert!(matches!(networks.make_namespace("unknown"), Err(NetworkError::NotAttached(_))));
    let second = SandboxNetworks::open(networks.config().clone());
    assert!(matches!(second, Err(NetworkError::InUse { pid, .. }) if pid == std::process::id()), "{second:?}");

    networks.detach("s");
    assert!(!path.exists(), "the namespace is removed");
    assert!(!Path::new("/sys/class/net").join(format!("{bridge}-0")).exists(), "the link is removed");
    let chains =
        Command::new("nft").args(["list", "table", "inet", &format!("cwsandbox_{bridge}")]).output().expect("nft");
    let listing = String::from_utf8_lossy(&chains.stdout);
    assert!(!listing.contains("eg_0") && !listing.contains("in_0"), "{listing}");

    drop(networks);
    assert!(!Path::new("/sys/class/net").join(&bridge).exists(), "the bridge is removed");
    let tables = Command::new("nft").args(["list", "tables"]).output().expect("nft");
    assert!(!String::from_utf8_lossy(&tables.stdout).contains(&format!("cwsandbox_{bridge}")));
}

/// A runtime's own namespace (runc's, which the container's user namespace owns) gets the
/// network put into it; it is reached, and what it may reach is decided, as for one made here.
#[test]
fn a_network_is_put_into_the_namespace_a_process_made() {
    if !runnable("a_network_is_put_into_the_namespace_a_process_made") {
        return;
    }
    let networks = networks(4);
    let server = attach(&networks, open(&networks, "server", 0, identity("org", "alice", &[])));
    let at = SocketAddr::from((address(&networks, 0), 7000));
    serve(&server, at, b"hello");
    // A process in a network namespace of its own (and a user namespace owning it, as runc's).
    let mut process = Command::new("unshare")
        .args(["--net", "--user", "--map-root-user", "sleep", "1000"])
        .spawn()
        .expect("unshare runs");
    let pid = process.id();
    let own = format!("/proc/{pid}/ns/net");
    // unshare has made the namespace once /proc shows a different one.
    let mine = std::fs::read_link("/proc/self/ns/net").expect("own namespace");
    for _ in 0..10_000 {
        if std::fs::read_link(&own).is_ok_and(|theirs| theirs != mine) {
            break;
        }
        std::thread::yield_now();
    }
    let client = Attachment {
        egress: isolated(vec![Rule { peer: Peer::SameOrganization, ports: vec![tcp(7000, 7000)] }]),
        ..open(&networks, "client", 1, identity("org", "alice", &[]))
    };
    networks.attach(client).expect("attach");
    networks.plumb_process("client", pid).expect("plumbed into the process's namespace");
    let path = PathBuf::from(&own);
    assert_eq!(reach(Some(&path), at).expect("the granted peer"), b"hello");
    assert!(refused(reach(Some(&path), SocketAddr::from((address(&networks, 0), 7001)))));
    networks.detach("client");
    let _ = process.kill();
    let _ = process.wait();
}

/// The test host's HTTPS server: a CA of the test's own and one certificate for the test names,
/// answering each handshake with `hello <server name>`.
mod https {
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    pub struct Authority {
        pub ca: CertificateDer<'static>,
        pub server: Arc<rustls::ServerConfig>,
    }

    pub fn authority(names: &[&str]) -> Authority {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>()).unwrap();
        let certificate = params.signed_by(&key, &issuer).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certificate.der().clone()], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
            .unwrap();
        Authority { ca: ca.der().clone(), server: Arc::new(server) }
    }

    /// Serves TLS on `listener` until the process ends.
    pub fn serve(listener: std::net::TcpListener, config: Arc<rustls::ServerConfig>) {
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let config = config.clone();
                std::thread::spawn(move || {
                    let Ok(connection) = rustls::ServerConnection::new(config) else { return };
                    let mut tls = rustls::StreamOwned::new(connection, stream);
                    if tls.conn.complete_io(&mut tls.sock).is_err() {
                        return;
                    }
                    let name = tls.conn.server_name().unwrap_or_default().to_owned();
                    let _ = std::io::Write::write_all(&mut tls, format!("hello {name}").as_bytes());
                    tls.conn.send_close_notify();
                    let _ = tls.conn.complete_io(&mut tls.sock);
                });
            }
        });
    }

    /// A TLS client's reply from `address`:443 for `name`, trusting only `ca`.
    pub fn fetch(address: std::net::Ipv4Addr, name: &str, ca: &CertificateDer<'static>) -> std::io::Result<String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).map_err(std::io::Error::other)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name = ServerName::try_from(name.to_owned()).map_err(std::io::Error::other)?;
        let connection = rustls::ClientConnection::new(Arc::new(config), server_name).map_err(std::io::Error::other)?;
        let stream = std::net::TcpStream::connect_timeout(&(address, 443).into(), super::CONNECT_TIMEOUT)?;
        stream.set_read_timeout(Some(super::CONNECT_TIMEOUT))?;
        let mut tls = rustls::StreamOwned::new(connection, stream);
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut tls, &mut reply)?;
        Ok(reply)
    }
}

/// Asks the resolver at `server` for `name`'s A record from the namespace at `path`: the
/// addresses, or the answer's code.
fn resolve(path: &Path, server: Ipv4Addr, name: &str) -> Result<Vec<Ipv4Addr>, String> {
    let name = name.to_owned();
    in_namespace(path, move || {
        // A query by hand: id 7, recursion desired, one question, class IN.
        let mut query = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            query.push(label.len() as u8);
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|error| error.to_string())?;
        socket.set_read_timeout(Some(CONNECT_TIMEOUT)).map_err(|error| error.to_string())?;
        socket.send_to(&query, (server, 53)).map_err(|error| error.to_string())?;
        let mut reply = [0u8; 512];
        let length = socket.recv(&mut reply).map_err(|error| error.to_string())?;
        let reply = &reply[..length];
        let code = reply[3] & 0x0f;
        if code != 0 {
            return Err(format!("rcode {code}"));
        }
        // Each answer of ours ends with a 4-byte A record.
        let answers = u16::from_be_bytes([reply[6], reply[7]]) as usize;
        Ok((0..answers)
            .map(|n| {
                let end = length - (answers - 1 - n) * 16;
                Ipv4Addr::new(reply[end - 4], reply[end - 3], reply[end - 2], reply[end - 1])
            })
            .collect())
    })
}

/// HTTPS names through the SNI proxy: a granted name (exact, wildcard) reaches the test host's
/// server, whose certificate the client verifies end to end (TLS is not terminated); a name not
/// granted is closed; the resolver answers granted names only under DNS deny, any name under
/// allow. Plain ports stay refused.
#[test]
fn https_names_are_granted_through_the_sni_proxy_and_dns_follows_the_mode() {
    if !runnable("https_names_are_granted_through_the_sni_proxy_and_dns_follows_the_mode") {
        return;
    }
    let test_host = test_host("cwnth5");
    let names = ["granted.test", "a.wild.test", "other.test"];
    let authority = https::authority(&names);
    let listener = in_namespace(&test_host.path(), || TcpListener::bind((TEST_HOST, 443)).expect("443 binds"));
    https::serve(listener, authority.server.clone());
    let pod_cidr: Ipv4Cidr = format!("10.{}.5.0/24", 200 + std::process::id() % 50).parse().expect("range");
    let mut config = NetworkConfig::new("cwnt5", pod_cidr);
    config.static_hosts = names.iter().map(|name| ((*name).to_owned(), TEST_HOST)).collect();
    let networks = SandboxNetworks::open(config).expect("sandbox networks open");
    let grants = vec![
        HostnameGrant { pattern: "granted.test".to_owned(), except: Vec::new() },
        HostnameGrant { pattern: "*.wild.test".to_owned(), except: vec!["b.wild.test".to_owned()] },
    ];
    let sandbox = |n: usize, dns_allow_all: bool| {
        attach(
            &networks,
            Attachment {
                egress: isolated(Vec::new()),
                https_grants: grants.clone(),
                dns_allow_all,
                ..open(&networks, &format!("s{n}"), n, identity("org", "alice", &[]))
            },
        )
    };
    let (denying, allowing) = (sandbox(0, false), sandbox(1, true));
    let nameserver = networks.nameserver();

    for name in ["granted.test", "a.wild.test"] {
        let path = denying.clone();
        let ca = authority.ca.clone();
        let reply = in_namespace(&path, move || https::fetch(TEST_HOST, name, &ca)).expect(name);
        assert_eq!(reply, format!("hello {name}"));
    }
    let ca = authority.ca.clone();
    let refused_name = in_namespace(&denying, move || https::fetch(TEST_HOST, "other.test", &ca));
    assert!(refused_name.is_err(), "a name not granted: {refused_name:?}");
    assert!(refused(reach(Some(&denying), SocketAddr::from((TEST_HOST, 8080)))), "no address rule, no plain port");

    assert_eq!(resolve(&denying, nameserver, "granted.test"), Ok(vec![TEST_HOST]));
    assert_eq!(resolve(&denying, nameserver, "a.wild.test"), Ok(vec![TEST_HOST]));
    assert_eq!(resolve(&denying, nameserver, "other.test"), Err("rcode 5".to_owned()), "REFUSED under deny");
    assert_eq!(resolve(&allowing, nameserver, "other.test"), Ok(vec![TEST_HOST]), "any name under allow");
    drop(networks);
    drop(test_host);
}
