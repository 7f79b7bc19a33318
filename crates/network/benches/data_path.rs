//! The data path of sandbox networks: connection setup (connect to first byte) and throughput to
//! a test host of the bench's own (a network namespace at 198.51.100.10, routed from this
//! machine), from the host's own network (a sandbox without a policy shares it), from a sandbox
//! network through an allowed CIDR, and through the SNI proxy (TLS, with the same TLS straight
//! from the host to tell the proxy's cost from TLS's). Run as root with
//! `cargo bench -p cwsandbox-network --bench data_path`; `BENCH_ROUNDS` connections (default
//! 200) and `BENCH_MIB` MiB per transfer (default 512), three transfers each, medians printed.
//! Nothing leaves the machine.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cwsandbox_network::{
    Attachment, Cidr, Direction, HostnameGrant, Ipv4Cidr, NetworkConfig, Peer, PeerIdentity, Rule, SandboxNetworks,
};
use cwsandbox_testkit::test_host::TestHost;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const HOST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const NAME: &str = "bench.test";
const CHUNK: usize = 64 * 1024;

/// Runs `work` on a thread in the network namespace at `path` (the bench's own with `None`).
fn within<T: Send + 'static>(path: Option<&Path>, work: impl FnOnce() -> T + Send + 'static) -> T {
    let namespace = path.map(|path| std::fs::File::open(path).expect("namespace"));
    std::thread::spawn(move || {
        if let Some(namespace) = namespace {
            // SAFETY: setns moves this thread only, into a namespace file we opened.
            assert_eq!(unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        }
        work()
    })
    .join()
    .expect("bench thread")
}

/// Answers each connection with one byte, then counts what it sends until EOF and answers
/// with the count.
fn serve_plain(listener: TcpListener) {
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.set_nodelay(true);
            std::thread::spawn(move || {
                let _ = stream.write_all(b"x");
                let mut buffer = vec![0u8; CHUNK];
                let mut total = 0u64;
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    total += read as u64;
                }
                let _ = stream.write_all(total.to_string().as_bytes());
            });
        }
    });
}

/// The same over TLS.
fn serve_tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = stream.set_nodelay(true);
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(connection) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                if tls.write_all(b"x").and_then(|()| tls.flush()).is_err() {
                    return;
                }
                let mut buffer = vec![0u8; CHUNK];
                let mut total = 0u64;
                while let Ok(read) = tls.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    total += read as u64;
                }
                let _ = tls.write_all(total.to_string().as_bytes());
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
}

/// A connection's stream: plain, or TLS for `NAME`.
enum Client {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Client {
    fn open(port: u16, tls: Option<&Arc<rustls::ClientConfig>>) -> Client {
        let stream =
            TcpStream::connect_timeout(&SocketAddr::from((HOST, port)), Duration::from_secs(10)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let mut client = match tls {
            None => Client::Plain(stream),
            Some(config) => {
                let name = ServerName::try_from(NAME.to_owned()).expect("name");
                let connection = rustls::ClientConnection::new(config.clone(), name).expect("client");
                Client::Tls(Box::new(rustls::StreamOwned::new(connection, stream)))
            }
        };
        let mut first = [0u8; 1];
        client.read_exact(&mut first).expect("first byte");
        client
    }

    fn finish(&mut self) {
        match self {
            Client::Plain(stream) => stream.shutdown(std::net::Shutdown::Write).expect("shutdown"),
            Client::Tls(tls) => {
                tls.conn.send_close_notify();
                tls.flush().expect("close notify");
            }
        }
    }
}

impl Read for Client {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Client::Plain(stream) => stream.read(buffer),
            Client::Tls(tls) => tls.read(buffer),
        }
    }
}

impl Write for Client {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        match self {
            Client::Plain(stream) => stream.write(buffer),
            Client::Tls(tls) => tls.write(buffer),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Client::Plain(stream) => stream.flush(),
            Client::Tls(tls) => tls.flush(),
        }
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median connection setup (ms) and median throughput (MiB/s) from the namespace at `path`.
fn measure(
    path: Option<PathBuf>,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    rounds: usize,
    mib: usize,
) -> (f64, f64) {
    within(path.as_deref(), move || {
        let mut setups = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let began = Instant::now();
            let mut client = Client::open(port, tls.as_ref());
            setups.push(began.elapsed().as_secs_f64() * 1000.0);
            client.finish();
            let mut rest = Vec::new();
            let _ = client.read_to_end(&mut rest);
        }
        let chunk = vec![7u8; CHUNK];
        let mut rates = Vec::new();
        for _ in 0..3 {
            let mut client = Client::open(port, tls.as_ref());
            let began = Instant::now();
            for _ in 0..mib * 1024 * 1024 / CHUNK {
                client.write_all(&chunk).expect("send");
            }
            client.finish();
            let mut count = String::new();
            client.read_to_string(&mut count).expect("count");
            let seconds = began.elapsed().as_secs_f64();
            assert_eq!(count.parse::<usize>().ok(), Some(mib * 1024 * 1024), "the server got it all");
            rates.push(mib as f64 / seconds);
        }
        (median(&mut setups), median(&mut rates))
    })
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("nft").arg("--version").output().is_err() {
        println!("sandbox networks need root and nftables: nothing measured");
        return;
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|value| value.parse().ok()).unwrap_or(200);
    let mib: usize = std::env::var("BENCH_MIB").ok().and_then(|value| value.parse().ok()).unwrap_or(512);

    let test_host = TestHost::start("cwnbh", [198, 51, 100]);
    let host_path = test_host.path();

    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca: CertificateDer<'static> = ca_params.self_signed(&ca_key).expect("ca").der().clone();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let certificate =
        CertificateParams::new(vec![NAME.to_owned()]).expect("params").signed_by(&key, &issuer).expect("cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![certificate.der().clone()], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).expect("root");
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let (plain, tls) = within(Some(&host_path), || {
        (TcpListener::bind((HOST, 8080)).expect("8080"), TcpListener::bind((HOST, 443)).expect("443"))
    });
    serve_plain(plain);
    serve_tls(tls, Arc::new(server));

    let pod_cidr: Ipv4Cidr = "10.249.0.0/24".parse().expect("range");
    let mut config = NetworkConfig::new("cwnbr", pod_cidr);
    config.static_hosts.insert(NAME.to_owned(), HOST);
    let networks = SandboxNetworks::open(config).expect("sandbox networks");
    let sandbox = |n: usize, egress: Vec<Rule>, https_grants: Vec<HostnameGrant>| {
        let id = format!("bench-{n}");
        networks
            .attach(Attachment {
                id: id.clone(),
                address: pod_cidr.pod_addresses().nth(n).expect("address"),
                identity: PeerIdentity::default(),
                egress: Direction { isolated: true, rules: egress },
                ingress: Direction::default(),
                https_grants,
                dns_allow_all: false,
            })
            .expect("attach");
        networks.make_namespace(&id).expect("namespace")
    };
    let cidr = Rule {
        peer: Peer::Cidr { cidr: "198.51.100.10/32".parse::<Cidr>().expect("cidr"), except: Vec::new() },
        ports: Vec::new(),
    };
    let allowed = sandbox(0, vec![cidr], Vec::new());
    let proxied = sandbox(1, Vec::new(), vec![HostnameGrant { pattern: NAME.to_owned(), except: Vec::new() }]);

    println!("| path | connection setup, median (ms) | throughput, median of 3 × {mib} MiB (MiB/s) |");
    println!("|---|---|---|");
    for (label, path, port, tls) in [
        ("host network (a sandbox without a policy), plain TCP", None, 8080, None),
        ("sandbox network, allowed CIDR, plain TCP", Some(allowed.clone()), 8080, None),
        ("host network, TLS", None, 443, Some(client.clone())),
        ("sandbox network, HTTPS name through the SNI proxy, TLS", Some(proxied.clone()), 443, Some(client.clone())),
    ] {
        let (setup, rate) = measure(path, port, tls, rounds, mib);
        println!("| {label} | {setup:.3} | {rate:.0} |");
    }

    // A sandbox's network made (rules, namespace, link, address) and removed, with 2 others on
    // the bridge and one CIDR rule and one group rule each.
    let (mut made, mut removed) = (Vec::new(), Vec::new());
    for n in 0..30 {
        let id = format!("cost-{n}");
        let began = Instant::now();
        networks
            .attach(Attachment {
                id: id.clone(),
                address: pod_cidr.pod_addresses().nth(10 + n).expect("address"),
                identity: PeerIdentity::default(),
                egress: Direction {
                    isolated: true,
                    rules: vec![
                        Rule {
                            peer: Peer::Cidr { cidr: "198.51.100.0/24".parse().expect("cidr"), except: Vec::new() },
                            ports: Vec::new(),
                        },
                        Rule { peer: Peer::SameOrganization, ports: Vec::new() },
                    ],
                },
                ingress: Direction::default(),
                https_grants: Vec::new(),
                dns_allow_all: true,
            })
            .expect("attach");
        networks.make_namespace(&id).expect("namespace");
        made.push(began.elapsed().as_secs_f64() * 1000.0);
        let began = Instant::now();
        networks.detach(&id);
        removed.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    println!();
    println!(
        "a sandbox network made (nft batch, netns, veth, address): median {:.1} ms; removed: median {:.1} ms (30 each)",
        median(&mut made),
        median(&mut removed)
    );
    drop(networks);
    drop(test_host);
}
