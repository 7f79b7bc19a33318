//! A real OCI registry on 127.0.0.1 for tests: Debian's `docker-registry` (the CNCF
//! distribution registry) on a free port, storage in a scratch directory, optionally with
//! htpasswd authentication. Started ready (polled until `GET /v2/` answers), killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a registry may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Starts retried when another process took the port between our probe and the registry's bind.
const PORT_RACE_RETRIES: usize = 5;

/// The registry binary: `$CWSANDBOX_REGISTRY_BIN`, else `docker-registry` (Debian's package of
/// the distribution registry, `apt-get install docker-registry`).
pub fn registry_binary() -> PathBuf {
    std::env::var_os("CWSANDBOX_REGISTRY_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("docker-registry"))
}

/// A running registry.
#[derive(Debug)]
pub struct LocalRegistry {
    child: Option<Child>,
    dir: PathBuf,
    addr: SocketAddr,
    credentials: Option<(String, String)>,
}

impl LocalRegistry {
    /// A registry anyone may pull from and push to.
    pub fn start() -> Result<Self> {
        Self::start_inner(None)
    }

    /// A registry that answers 401 to requests without `user`/`password` (HTTP basic, checked
    /// against a bcrypt htpasswd file).
    pub fn start_with_auth(user: &str, password: &str) -> Result<Self> {
        Self::start_inner(Some((user.to_string(), password.to_string())))
    }

    fn start_inner(credentials: Option<(String, String)>) -> Result<Self> {
        let dir = scratch_dir()?;
        let htpasswd = match &credentials {
            Some((user, password)) => {
                // Cost 4, the least bcrypt allows: the registry checks it on every request.
                let hash = bcrypt::hash(password, 4).context("hashing the registry password")?;
                let path = dir.join("htpasswd");
                std::fs::write(&path, format!("{user}:{hash}\n"))?;
                Some(path)
            }
            None => None,
        };
        let mut last_log = String::new();
        for _ in 0..PORT_RACE_RETRIES {
            let port = free_port()?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let config = dir.join("config.yml");
            std::fs::write(&config, config_yaml(&dir.join("storage"), addr, htpasswd.as_deref()))?;
            let log = std::fs::File::create(dir.join("registry.log"))?;
            let mut child = Command::new(registry_binary())
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| {
                    format!("starting {} (apt-get install docker-registry)", registry_binary().display())
                })?;
            match wait_ready(&mut child, addr) {
                Ok(()) => return Ok(Self { child: Some(child), dir, addr, credentials }),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default();
                    if !last_log.contains("address already in use") {
                        let _ = std::fs::remove_dir_all(&dir);
                        bail!("the registry did not start: {e:#}\n{last_log}");
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        bail!("the registry found no free port in {PORT_RACE_RETRIES} tries:\n{last_log}")
    }

    /// `127.0.0.1:PORT`, the registry part of image names.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The registry's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The user and password, for a registry started with authentication.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Writes a Docker `config.json` holding this registry's credentials (as `docker login`
    /// writes it: `auths."127.0.0.1:PORT".auth` = base64 of `user:password`) into `dir`, and
    /// returns its path.
    pub fn write_docker_config(&self, dir: &Path) -> Result<PathBuf> {
        use base64::Engine;
        let (user, password) = self.credentials().context("this registry has no credentials")?;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let config = serde_json::json!({ "auths": { self.host(): { "auth": auth } } });
        std::fs::create_dir_all(dir)?;
        let path = dir.join("config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        Ok(path)
    }

    /// The registry's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `GET /v2/` until it answers (200, or 401 with authentication) or the process ends.
fn wait_ready(child: &mut Child, addr: SocketAddr) -> Result<()> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the registry exited with {status}");
        }
        match probe(addr) {
            Ok(200 | 401) => return Ok(()),
            Ok(status) => bail!("GET /v2/ answered {status}"),
            Err(_) if started.elapsed() < START_TIMEOUT => {}
            Err(e) => return Err(e).context(format!("no answer from the registry after {START_TIMEOUT:?}")),
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// The status code of `GET /v2/`.
fn probe(addr: SocketAddr) -> Result<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    // "HTTP/1.1 200"
    let text = std::str::from_utf8(&head)?;
    text.get(9..12).and_then(|code| code.parse().ok()).with_context(|| format!("not an HTTP answer: {text:?}"))
}

/// A port nothing listens on right now (the kernel's pick for port 0).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn scratch_dir() -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "cwsandbox-registry-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn config_yaml(storage: &Path, addr: SocketAddr, htpasswd: Option<&Path>) -> String {
    let mut yaml = format!(
        "version: 0.1\n\
         log:\n  level: info\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
         http:\n  addr: {addr}\n",
        storage = storage.display()
    );
    if let Some(path) = htpasswd {
        yaml.push_str(&format!("auth:\n  htpasswd:\n    realm: cwsandbox-test\n    path: {}\n", path.display()));
    }
    yaml
}
