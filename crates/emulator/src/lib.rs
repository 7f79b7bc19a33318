//! `cwsandbox-emulator`: the CoreWeave Sandbox API (`coreweave.sandbox.v1`) served locally on one
//! port over gRPC, Connect and gRPC-Web, on top of the simulated CKS cluster, SUNK Pod Scheduler
//! and Slurm of `cwsandbox-sim`.
//!
//! The top of a one-way stack: `cwsandbox-host` (the world on a clock, the runtime seam and the
//! executor behind it), `cwsandbox-surface` (the API: tokens, handlers, the kube facade, the one
//! error mapping), `cwsandbox-edge` (the port: transport, TLS, the request guard, the router).
//! This crate holds what puts them together: [`Emulator::start`], the ready file and the command
//! line ([`cli`]). Each layer uses only the ones below it, and Cargo enforces it.

// Handlers must return connectrpc-axum's `ConnectError` (160 bytes), a foreign type we cannot box.
#![allow(clippy::result_large_err)]

// `cli` (the binary's command line, moved here whole) names this crate as the binary did.
extern crate self as cwsandbox_emulator;

pub mod cli;

// The layers below, under the paths they had when this crate held them all (the binary's wiring,
// the tests, the testkit and the wheel name them so).
pub use cwsandbox_edge::{decoded_size, fault_stream, guard, server, tls, transport};
pub use cwsandbox_host::{clock, driver, executor_runtime, image_puller, runtime, sandbox_network, state_dir};
pub use cwsandbox_surface::{
    app, auth, catalogue, config, convert, direct, endpoints, errors, faults, fidelity, json_path, kube, ports,
    services, tenants,
};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::app::{App, Limits};
use crate::auth::Tokens;
use crate::clock::EmulatorClock;
use crate::config::EmulatorConfig;
use crate::driver::{Driver, HostRuntime};
use crate::endpoints::EndpointTls;
use crate::runtime::SandboxRuntime;

/// The organization of generated tokens when no runner names one.
pub const DEFAULT_ORG: &str = "default-org";
/// How long a stop waits for open streams before closing them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How to start an emulator.
pub struct Options {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Values and tokens.
    pub config: EmulatorConfig,
    /// Seed of the identifiers (sandbox ids, Pod uids); `None` draws one from the clock.
    pub seed: Option<u64>,
    /// Message and file size limits.
    pub limits: Limits,
    /// The process runtime, if one is attached.
    pub runtime: Option<Arc<dyn SandboxRuntime>>,
    /// The clock (a test may freeze it before start).
    pub clock: EmulatorClock,
    /// Where to write a kubeconfig for the kube facade (admin token), if anywhere.
    pub kubeconfig: Option<PathBuf>,
    /// Where to write the HTTPS endpoints' CA certificate (PEM), if anywhere.
    pub endpoint_ca_file: Option<PathBuf>,
    /// Timeouts, the connection cap, request size and memory limits.
    pub transport: transport::Transport,
    /// Accept the fixed development tokens ([`auth::DEV_ADMIN_TOKEN`], [`auth::DEV_USER_TOKEN`])
    /// instead of random ones (loopback only, not with configured tokens).
    pub dev_tokens: bool,
}

impl Options {
    /// Defaults around a configuration: 127.0.0.1 on a free port, no runtime.
    pub fn new(config: EmulatorConfig) -> Options {
        Options {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            config,
            seed: None,
            limits: Limits::default(),
            runtime: None,
            clock: EmulatorClock::new(),
            kubeconfig: None,
            endpoint_ca_file: None,
            transport: transport::Transport::default(),
            dev_tokens: false,
        }
    }
}

/// What to do about a bind that failed, where there is something to do.
fn bind_hint(error: &std::io::Error) -> &'static str {
    match error.kind() {
        std::io::ErrorKind::AddrInUse => {
            "; another process (another emulator?) listens there: pick a free port with `--listen 127.0.0.1:0` \
             (the printed CWSANDBOX_BASE_URL and the ready file have the port it got)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "; that address is not one of this machine's: try `--listen 127.0.0.1:0`"
        }
        std::io::ErrorKind::PermissionDenied => "; ports below 1024 need privileges: pick another, or 0 for a free one",
        _ => "",
    }
}

/// What a client needs to talk to a running emulator; also the ready file's JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReadyInfo {
    /// `http://127.0.0.1:PORT`: the value of `CWSANDBOX_BASE_URL`.
    pub base_url: String,
    /// The address actually bound.
    pub listen: String,
    /// The operator's token (`cluster_admin`; the generated one also holds `sandbox_admin` and
    /// `sandbox_user`), else the first with `sandbox_admin`; empty when none is configured.
    pub admin_token: String,
    /// A token with only `sandbox_user`; empty when none is configured.
    pub user_token: String,
    /// The default runner: the first runner of the admin's organization.
    pub runner_id: String,
    /// The organization of the admin token.
    pub org: String,
    /// The emulator's process id.
    pub pid: u32,
    /// How sandbox processes are isolated: `namespaces`, `plain`, or `none` without a process
    /// runtime.
    #[serde(default)]
    pub isolation: String,
    /// The kubeconfig written for kubectl (`serve --kubeconfig`); empty when none.
    #[serde(default)]
    pub kubeconfig: String,
    /// What runs containers: `process` (the host's programs), or `oci` or `auto` with how (the
    /// OCI runtime, its writable layer, whether cgroup limits are enforced).
    #[serde(default)]
    pub container_runtime: String,
    /// Whether sandboxes' CPU and memory limits are enforced (cgroups through the OCI runtime).
    #[serde(default)]
    pub cgroup_limits: bool,
    /// The CA certificate (PEM) of the HTTPS endpoints' TLS: what a client trusts them with
    /// (`SSL_CERT_FILE`, `curl --cacert`). Made at start, in memory only.
    #[serde(default)]
    pub endpoint_ca_pem: String,
    /// Where that certificate was written (`serve --endpoint-ca-file`); empty when nowhere.
    #[serde(default)]
    pub endpoint_ca_file: String,
    /// What sandboxes could ask for that this machine cannot give, each with why (for example
    /// `memory-backed scratch volumes: …`): such requests are refused by name. Empty: nothing.
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// The named RuntimeClasses sandboxes may run with here besides the node's default
    /// (`gvisor`, where gVisor's runsc works); any other is refused as no runner can host it.
    #[serde(default)]
    pub runtime_classes: Vec<String>,
}

impl ReadyInfo {
    /// The token exported as `CWSANDBOX_API_KEY`: the admin token, else the user token.
    pub fn api_key(&self) -> &str {
        if self.admin_token.is_empty() { &self.user_token } else { &self.admin_token }
    }

    /// The lines a shell can `eval` (the isolation, the container runtime in force and the web
    /// dashboard's address as comments); the last one says the emulator is ready.
    pub fn shell_lines(&self) -> String {
        let kubeconfig =
            if self.kubeconfig.is_empty() { String::new() } else { format!("export KUBECONFIG={}\n", self.kubeconfig) };
        format!(
            "export CWSANDBOX_BASE_URL={}\nexport CWSANDBOX_API_KEY={}\nexport CWSANDBOX_USER_TOKEN={}\nexport \
             CWSANDBOX_RUNNER_ID={}\n{kubeconfig}# sandbox isolation: {}\n# container runtime: {}\n# dashboard: \
             {}/ui/\n# cwsandbox-emulator ready\n",
            self.base_url,
            self.api_key(),
            self.user_token,
            self.runner_id,
            self.isolation,
            self.container_runtime,
            self.base_url
        )
    }

    /// Writes the ready file atomically (a reader never sees half of it), through a temporary
    /// file of this process's own, so two emulators given one path cannot mix their writes.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        let temporary = state_dir::temporary_for(path);
        std::fs::write(&temporary, json + "\n")?;
        std::fs::rename(&temporary, path)
    }
}

/// Writes a file only its owner can read (it holds a token), replacing it atomically.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = state_dir::temporary_for(path);
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&temporary, path)
}

/// Why an emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No TLS identity could be made.
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    /// The HTTPS endpoints' CA certificate could not be written.
    #[error("cannot write the HTTPS endpoints' CA certificate {path}: {source}")]
    EndpointCa {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--dev-tokens` cannot be honoured.
    #[error("{0}")]
    DevTokens(String),
    /// A fault of the values' `faults:` is not a valid rule.
    #[error("invalid values: faults: {0}")]
    Fault(String),
    /// The values do not describe a world.
    #[error("invalid values: {0}")]
    Values(#[from] cwsandbox_sim::SimError),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {error}{hint}", hint = bind_hint(error))]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why. Not a `source`: the message already says it, and a report of the chain would
        /// say it twice.
        error: std::io::Error,
    },
}

/// A running emulator.
pub struct Emulator {
    info: ReadyInfo,
    app: App,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    runtime: Option<Arc<dyn SandboxRuntime>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("info", &self.info).finish_non_exhaustive()
    }
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32))
        .unwrap_or(0x5eed)
}

impl Emulator {
    /// Builds the world, binds the port and starts serving; returns once connections are accepted.
    pub async fn start(options: Options) -> Result<Emulator, StartError> {
        let Options {
            listen,
            config,
            seed,
            limits,
            runtime,
            clock,
            kubeconfig,
            endpoint_ca_file,
            transport,
            dev_tokens,
        } = options;
        let default_org =
            config.values.runners.first().map(|runner| runner.org.clone()).unwrap_or_else(|| DEFAULT_ORG.to_owned());
        let tokens = match (config.auth.tokens.is_empty(), dev_tokens) {
            (true, false) => Tokens::generate(&default_org).0,
            (true, true) if listen.ip().is_loopback() => Tokens::dev(&default_org),
            (true, true) => {
                return Err(StartError::DevTokens(format!(
                    "the development tokens are public; they are refused on {listen}, which is not a loopback address"
                )));
            }
            (false, false) => config.auth.tokens(),
            (false, true) => {
                return Err(StartError::DevTokens(
                    "--dev-tokens and auth.tokens in the values both name the tokens; use one".to_owned(),
                ));
            }
        };
        let mut tokens = tokens;
        tokens.set_wandb_keys(config.auth.wandb_keys());
        let admin = tokens.first_admin().map(|(token, principal)| (token.to_owned(), principal.org.clone()));
        let user = tokens.first_user().map(|(token, principal)| (token.to_owned(), principal.org.clone()));
        let org = admin.as_ref().or(user.as_ref()).map(|(_, org)| org.clone()).unwrap_or(default_org);
        let runner_id = config
            .values
            .runners
            .iter()
            .find(|runner| runner.org == org)
            .map(|runner| runner.runner_id.clone())
            .unwrap_or_default();

        let listener =
            tokio::net::TcpListener::bind(listen).await.map_err(|error| StartError::Bind { address: listen, error })?;
        let bound = listener.local_addr().map_err(|error| StartError::Bind { address: listen, error })?;
        let host = match bound.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        // The direct data plane's endpoint: the API's address, a port of its own.
        let direct_address = SocketAddr::new(bound.ip(), 0);
        let direct_listener = tokio::net::TcpListener::bind(direct_address)
            .await
            .map_err(|error| StartError::Bind { address: direct_address, error })?;
        let direct_bound =
            direct_listener.local_addr().map_err(|error| StartError::Bind { address: direct_address, error })?;
        let direct_uri = format!("https://{}", SocketAddr::new(host, direct_bound.port()));
        let direct = direct::DirectPlane::new(clock.clone(), bound.ip(), direct_uri)?;

        let (driver, pump) = Driver::new(config.values, clock, seed.unwrap_or_else(seed_from_clock))?;
        // A runtime confirms each Pod's start; one that runs images makes admitted Pods wait for
        // their pulls, and says whether their limits hold.
        let pulls_images = runtime.as_ref().is_some_and(|runtime| runtime.pulls_images());
        let limits_enforced = !pulls_images || runtime.as_ref().is_some_and(|runtime| runtime.cgroup_limits());
        let memory_volumes_refused = runtime.as_ref().and_then(|runtime| runtime.memory_volumes().err());
        let mut unavailable = Vec::new();
        if let Some(why) = &memory_volumes_refused {
            tracing::info!("memory-backed scratch volumes will be refused: {why}");
            unavailable.push(format!("memory-backed scratch volumes: {why}"));
        }
        // The named RuntimeClasses the runtime runs (gVisor's where runsc works here); any
        // other named class is refused as one no runner can host.
        let runtime_classes = runtime.as_ref().map(|runtime| {
            let mut classes = Vec::new();
            for (class, works) in runtime.runtime_classes() {
                match works {
                    Ok(()) => classes.push(class),
                    Err(why) => {
                        tracing::info!("RuntimeClass {class} will be refused: {why}");
                        unavailable.push(format!("RuntimeClass {class}: {why}"));
                    }
                }
            }
            classes
        });
        let pod_network = runtime.as_ref().map_or_else(
            || {
                cwsandbox_sim::world::PodNetworkOffer::Unavailable(
                    "no runtime runs this emulator's sandboxes".to_owned(),
                )
            },
            |runtime| runtime.pod_network(),
        );
        if let cwsandbox_sim::world::PodNetworkOffer::Unavailable(why) = &pod_network
            && runtime.is_some()
        {
            tracing::info!("sandboxes asking for network rules will be refused: {why}");
            unavailable.push(format!("sandbox networks: {why}"));
        }
        driver.set_host_runtime(HostRuntime {
            pod_network,
            confirms_starts: runtime.is_some(),
            pulls_images,
            limits_enforced,
            memory_volumes_refused,
            runtime_classes: runtime_classes.clone(),
            one_container_runtime_classes: runtime
                .as_ref()
                .map(|runtime| runtime.one_container_runtime_classes())
                .unwrap_or_default(),
        });
        let endpoints = Arc::new(EndpointTls::new(bound.ip())?);
        let app = App::new(
            Arc::clone(&driver),
            tokens,
            runtime.clone(),
            limits,
            config.strictness,
            Arc::new(direct),
            Arc::clone(&endpoints),
        );
        app.install_configured_faults(config.faults).map_err(|error| StartError::Fault(error.to_string()))?;
        let router = server::router(app.clone(), &transport).await;
        let direct_router = server::direct_router(app.clone(), &transport);

        let identity = tls::ServerIdentity::self_signed(bound.ip())?;
        let (shutdown, shutdown_signal) = watch::channel(false);
        let tasks = driver.spawn_tasks(pump, runtime.clone(), shutdown.subscribe());
        let server = {
            let api_tls = tls::Tls::Optional(tokio_rustls::TlsAcceptor::from(identity.config()));
            let direct_tls = tls::Tls::ClientCertificate(tokio_rustls::TlsAcceptor::from(app.direct().server_config()));
            let direct_shutdown = shutdown_signal.clone();
            tokio::spawn(async move {
                tokio::join!(
                    transport::serve(listener, api_tls, router, transport, shutdown_signal),
                    transport::serve(direct_listener, direct_tls, direct_router, transport, direct_shutdown),
                );
            })
        };

        let info = ReadyInfo {
            base_url: format!("http://{}", SocketAddr::new(host, bound.port())),
            listen: bound.to_string(),
            admin_token: admin.map(|(token, _)| token).unwrap_or_default(),
            user_token: user.map(|(token, _)| token).unwrap_or_default(),
            runner_id,
            org,
            pid: std::process::id(),
            isolation: runtime.as_ref().map_or_else(|| "none".to_owned(), |runtime| runtime.isolation()),
            container_runtime: runtime
                .as_ref()
                .map_or_else(|| "none".to_owned(), |runtime| runtime.container_runtime()),
            cgroup_limits: runtime.as_ref().is_some_and(|runtime| runtime.cgroup_limits()),
            kubeconfig: kubeconfig.as_ref().map(|path| path.display().to_string()).unwrap_or_default(),
            endpoint_ca_pem: endpoints.ca_pem().to_owned(),
            endpoint_ca_file: endpoint_ca_file.as_ref().map(|path| path.display().to_string()).unwrap_or_default(),
            unavailable,
            runtime_classes: runtime_classes.unwrap_or_default(),
        };
        if let Some(path) = &endpoint_ca_file {
            std::fs::write(path, endpoints.ca_pem())
                .map_err(|source| StartError::EndpointCa { path: path.clone(), source })?;
        }
        if let Some(path) = &kubeconfig {
            let server = format!("https://{}", SocketAddr::new(host, bound.port()));
            let text = kube::kubeconfig(&server, &identity.certificate_pem, info.api_key());
            write_private(path, &text).map_err(|source| StartError::Kubeconfig { path: path.clone(), source })?;
        }
        tracing::info!(base_url = %info.base_url, direct_data_plane = %app.direct().endpoint_uri(), "cwsandbox-emulator listening");
        Ok(Emulator { info, app, shutdown, server, tasks, runtime })
    }

    /// Connection details.
    pub fn info(&self) -> &ReadyInfo {
        &self.info
    }

    /// The shared state (the world, the clock).
    pub fn app(&self) -> &App {
        &self.app
    }

    /// Stops serving, ends every sandbox process through the runtime (which also ends the
    /// streams attached to them: exec output, followed logs), gives other open streams a short
    /// grace and stops the driver.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        if let Some(runtime) = &self.runtime {
            runtime.shutdown().await;
        }
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.is_err() {
            server.abort();
        }
        for task in self.tasks {
            task.abort();
        }
        tracing::info!("cwsandbox-emulator stopped");
    }
}
