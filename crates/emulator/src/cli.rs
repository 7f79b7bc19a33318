//! The `cwsandbox-emulator` command line: `serve` and `exec`. In the library so that the binary
//! (`src/bin/cwsandbox-emulator.rs`) and the Python wheel's copy of it (crates/wheel) are one command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use cwsandbox_emulator::app::Limits;
use cwsandbox_emulator::config::{ContainerRuntimeConfig, EmulatorConfig, RuntimeKind};
use cwsandbox_emulator::executor_runtime::ExecutorRuntime;
use cwsandbox_emulator::fidelity::Strictness;
use cwsandbox_emulator::image_puller::ImagePuller;
use cwsandbox_emulator::runtime::SandboxRuntime;
use cwsandbox_emulator::sandbox_network::HostNetworks;
use cwsandbox_emulator::state_dir::{self, SandboxRoot};
use cwsandbox_emulator::transport::Transport;
use cwsandbox_emulator::{Emulator, Options};
use cwsandbox_executor::{ExecutorConfig, Isolation, OciSupport};
use cwsandbox_sim::config::{Scenario, Timing};

/// A local emulator of the CoreWeave Sandbox API (gRPC, Connect and gRPC-Web on one port) on a
/// simulated CKS cluster with the SUNK Pod Scheduler and Slurm.
#[derive(Debug, Parser)]
#[command(name = "cwsandbox-emulator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve until SIGINT or SIGTERM. Prints `export` lines for a shell once ready (logs go to
    /// stderr). With --background, returns as soon as the emulator is ready (or has failed).
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Start an emulator on a free port, run CMD with CWSANDBOX_BASE_URL, CWSANDBOX_API_KEY (the
    /// admin token), CWSANDBOX_USER_TOKEN, CWSANDBOX_RUNNER_ID and KUBECONFIG (a kubeconfig
    /// written for the run) set, stop the emulator and exit with CMD's exit code (128+N when CMD
    /// dies of signal N).
    #[command(after_help = EXEC_EXAMPLES)]
    Exec {
        #[command(flatten)]
        world: WorldArgs,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:
  cwsandbox-emulator completion bash > ~/.local/share/bash-completion/completions/cwsandbox-emulator
  cwsandbox-emulator completion fish > ~/.config/fish/completions/cwsandbox-emulator.fish")]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

const SERVE_EXAMPLES: &str = "Examples:
  cwsandbox-emulator serve                                  # 127.0.0.1:8080, until Ctrl-C
  cwsandbox-emulator serve --background --listen 127.0.0.1:0 > /tmp/cwsandbox.env && . /tmp/cwsandbox.env
  kill $CWSANDBOX_EMULATOR_PID                              # stops the background emulator
  cwsandbox-emulator serve --listen localhost:0 --kubeconfig /tmp/cwsandbox.kubeconfig -f values.yaml";

const EXEC_EXAMPLES: &str = "Examples:
  cwsandbox-emulator exec -- pytest -x tests/
  cwsandbox-emulator exec --timing instant -- python my_script.py
  cwsandbox-emulator exec -- sh -c 'kubectl get pods -A'";

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on, `HOST:PORT` (a name such as `localhost` or an IP address); port 0
    /// picks a free port (the printed CWSANDBOX_BASE_URL has the real one).
    #[arg(long, default_value = "127.0.0.1:8080", env = "CWSANDBOX_EMULATOR_LISTEN", value_name = "HOST:PORT")]
    listen: String,
    /// Write the connection details as JSON here once ready (atomically): base_url, listen,
    /// admin_token, user_token, runner_id, org, pid, isolation, kubeconfig, container_runtime,
    /// cgroup_limits, endpoint_ca_pem, endpoint_ca_file, unavailable (what sandboxes may ask
    /// for that this machine cannot give, with why) and runtime_classes (the named RuntimeClasses
    /// that run here, `gvisor` where runsc works). Removed on exit. A file a killed emulator
    /// left is removed at start; one whose emulator still runs stops the start.
    #[arg(long, value_name = "PATH")]
    ready_file: Option<PathBuf>,
    /// Start the emulator as a process of its own and return once it is ready, printing the
    /// `export` lines (with CWSANDBOX_EMULATOR_PID, the pid to `kill` to stop it), or once it
    /// failed, printing why and exiting with its code. Its log goes to --log-file.
    #[arg(long)]
    background: bool,
    /// With --background: the file the emulator logs to (default: `cwsandbox-emulator-PID.log`
    /// in the temporary directory, PID being this command's).
    #[arg(long, value_name = "PATH", requires = "background")]
    log_file: Option<PathBuf>,
    /// Write a kubeconfig for the Kubernetes API the emulator serves on its port (with the admin
    /// token) to PATH, so `kubectl --kubeconfig PATH get pods -A` shows the simulated cluster.
    /// Its path is also in the ready file (`kubeconfig`) and in the printed `export KUBECONFIG=`.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Write the certificate of the CA behind the HTTPS endpoints of sandbox services (made at
    /// start) to PATH, so clients can trust them: `SSL_CERT_FILE=PATH`, `curl --cacert PATH`. It
    /// is also in the ready file (`endpoint_ca_pem`).
    #[arg(long, value_name = "PATH")]
    endpoint_ca_file: Option<PathBuf>,
    #[command(flatten)]
    world: WorldArgs,
}

#[derive(Debug, Args)]
struct WorldArgs {
    /// YAML values overlaid on the scenario, in order, like `helm -f` (repeatable). A top-level
    /// `auth:` section configures tokens.
    #[arg(short = 'f', long = "values", value_name = "FILE")]
    values: Vec<PathBuf>,
    /// Built-in starting point: `ready` (set up as the guide recommends) or `fresh` (the guide's
    /// starting point).
    #[arg(long, value_enum, default_value_t = ScenarioArg::Ready)]
    scenario: ScenarioArg,
    /// Seed of generated identifiers (same seed and requests, same ids).
    #[arg(long)]
    seed: Option<u64>,
    /// Timing profile: `realistic` (the guide's simulated prolog and epilog) or `instant` (no
    /// artificial delay, for test suites). Overrides the values' `timing`; delays the values set
    /// explicitly still apply. Default: the values' `timing`, else realistic.
    #[arg(long, value_enum, env = "CWSANDBOX_EMULATOR_TIMING")]
    timing: Option<TimingArg>,
    /// What a request gets that sets a field the emulator does not emulate (the README's fidelity
    /// table): `strict` refuses it with UNIMPLEMENTED naming the fields, `loose` accepts it and
    /// logs a warning naming them. Overrides the values' `strictness`. Default: the values'
    /// `strictness`, else strict.
    #[arg(long, value_enum, env = "CWSANDBOX_EMULATOR_STRICTNESS")]
    strictness: Option<StrictnessArg>,
    /// Accept the fixed development tokens `cwsbx-dev-admin` (the operator) and `cwsbx-dev-user`
    /// instead of random ones, so a shell or `.env` file survives restarts. Only on a loopback
    /// address, and not with `auth.tokens` in the values.
    #[arg(long, env = "CWSANDBOX_EMULATOR_DEV_TOKENS")]
    dev_tokens: bool,
    /// Largest message accepted or sent on any transport, in bytes.
    #[arg(long, default_value_t = Limits::default().max_message_bytes)]
    max_message_bytes: usize,
    /// A StreamExec's buffer between its command and the client, in bytes: while it is full the
    /// command's output waits.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().stream_backpressure_bytes)]
    stream_backpressure_bytes: usize,
    /// Seconds a full StreamExec buffer waits for the client to take something before the
    /// stream ends with `STREAM_BACKPRESSURE` (the Python client's
    /// `SandboxStreamBackpressureError`), as the cloud ends a stream whose reader falls behind.
    #[arg(long, value_name = "SECONDS", value_parser = seconds, default_value = "10")]
    stream_stall_timeout: Duration,
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    sandboxes: SandboxArgs,
}

/// Connections and requests: timeouts, caps, the memory budget.
#[derive(Debug, Args)]
struct TransportArgs {
    /// Seconds a connection may take to send its first byte (and finish a TLS handshake), and an
    /// HTTP/1.1 request its headers.
    #[arg(long, value_name = "SECONDS", value_parser = seconds, default_value = "30")]
    header_read_timeout: Duration,
    /// Seconds a unary request's body may pause between two pieces before it is refused.
    #[arg(long, value_name = "SECONDS", value_parser = seconds, default_value = "30")]
    body_read_timeout: Duration,
    /// Seconds a connection with no request in flight stays open.
    #[arg(long, value_name = "SECONDS", value_parser = seconds, default_value = "300")]
    idle_timeout: Duration,
    /// Connections served at once (a `kubectl exec` socket counts while it is open); more are
    /// closed as they arrive.
    #[arg(long, value_name = "N", default_value_t = Transport::default().max_connections as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Largest request message, in bytes, of an RPC that carries no file content (WriteFile and
    /// StreamExec messages may reach --max-message-bytes).
    #[arg(long, value_name = "BYTES", default_value_t = Transport::default().max_request_bytes)]
    max_request_bytes: usize,
    /// Largest memory, in bytes, one request may take once decoded (estimated from its bytes
    /// before decoding; WriteFile may always reach --max-message-bytes).
    #[arg(long, value_name = "BYTES", default_value_t = Transport::default().max_decoded_request_bytes)]
    max_decoded_request_bytes: usize,
    /// Memory, in bytes, that the requests in flight may reserve together; beyond it requests get
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "BYTES", default_value_t = Transport::default().request_memory_bytes)]
    request_memory_bytes: usize,
}

impl TransportArgs {
    fn transport(&self) -> Transport {
        Transport {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            max_request_bytes: self.max_request_bytes,
            max_decoded_request_bytes: self.max_decoded_request_bytes,
            request_memory_bytes: self.request_memory_bytes,
            // The keep-alive has no flag: only tests move it.
            ..Transport::default()
        }
    }
}

/// A positive number of seconds (fractions allowed).
fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(value.is_finite() && value > 0.0) {
        return Err(format!("{text:?}: the number of seconds must be positive"));
    }
    Duration::try_from_secs_f64(value).map_err(|error| format!("{text:?}: {error}"))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ScenarioArg {
    Ready,
    Fresh,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TimingArg {
    Realistic,
    Instant,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StrictnessArg {
    Strict,
    Loose,
}

/// Where and how sandbox processes run.
#[derive(Debug, Args)]
struct SandboxArgs {
    /// How sandbox processes are isolated: `auto` uses Linux namespaces where this machine allows
    /// them and otherwise falls back to plain processes with a warning; `namespaces` refuses to
    /// start without them; `plain` never uses them.
    #[arg(long, value_enum, default_value_t = IsolationArg::Auto, env = "CWSANDBOX_EMULATOR_ISOLATION")]
    isolation: IsolationArg,
    /// Directory holding each sandbox's root directory (created if missing); no sandbox sees it.
    /// Locked while the emulator runs: a second emulator on it is refused, and the next start
    /// removes the sandbox directories a killed emulator left. Default: `cwsandbox-emulator-PID`
    /// under /dev/shm where it is a memory file system we may write and execute in (what
    /// sandboxes write is then held in memory), else under the system's temporary directory;
    /// removed on exit (and, if the emulator was killed, by a later start).
    #[arg(long, value_name = "DIR", env = "CWSANDBOX_EMULATOR_SANDBOX_ROOT")]
    sandbox_root: Option<PathBuf>,
    /// What runs a sandbox's containers: `oci` runs each in its image through runc (pulled from
    /// its registry; a pull that fails is the sandbox's ErrImagePull), `process` runs the host's
    /// programs (images recorded, never pulled), `auto` is `oci` where runc works here, with the
    /// process runtime for images whose registry cannot be reached (said in the Pod's Events).
    /// Replaces the values' `containerRuntime.kind` (default auto) and acts exactly as it does.
    /// The kind in force is in the ready file's container_runtime and the printed `# container
    /// runtime:` line; docs/runtimes.md tells them apart.
    #[arg(long, value_enum, env = "CWSANDBOX_EMULATOR_RUNTIME")]
    runtime: Option<RuntimeArg>,
    /// A host directory to bind read-only into every namespaced sandbox, beside the defaults
    /// (/usr, /bin, /sbin, /lib*, /etc, /opt): for programs installed elsewhere. Repeatable.
    #[arg(long = "sandbox-host-path", value_name = "DIR")]
    sandbox_host_paths: Vec<PathBuf>,
    /// The most one image may unpack to, in bytes (the sum of its entries' declared sizes; 0: no
    /// limit): a pull over it fails with ErrImagePull. Overrides the values'
    /// `containerRuntime.maxImageBytes` (default 8589934592, 8 GiB).
    #[arg(long, value_name = "BYTES")]
    max_image_bytes: Option<u64>,
    /// The most entries one image's layers may hold (0: no limit). Overrides the values'
    /// `containerRuntime.maxImageEntries` (default 1000000).
    #[arg(long, value_name = "N")]
    max_image_entries: Option<u64>,
    /// The image cache's bound, in bytes (0: none): past it, the least recently used images no
    /// sandbox runs on are removed after a pull. Overrides the values'
    /// `containerRuntime.imageCacheMaxBytes` (default 34359738368, 32 GiB).
    #[arg(long, value_name = "BYTES")]
    image_cache_max_bytes: Option<u64>,
    /// A registry mirror, `HOST=URL` (`docker.io=http://127.0.0.1:5000`): pulls of HOST's images
    /// ask URL first (the same repository and tag), then the next mirror, the registry last, as
    /// containerd's hosts.toml. Repeatable, in order; the flags given for a host replace the
    /// values' `containerRuntime.registryMirrors` list of that host. `http://` only for loopback
    /// mirrors and `containerRuntime.insecureRegistries`.
    #[arg(long = "registry-mirror", value_name = "HOST=URL", value_parser = parse_mirror)]
    registry_mirrors: Vec<(String, String)>,
}

/// `HOST=URL` of `--registry-mirror`.
fn parse_mirror(text: &str) -> Result<(String, String), String> {
    let (host, url) =
        text.split_once('=').ok_or_else(|| format!("{text:?} is not HOST=URL (docker.io=http://127.0.0.1:5000)"))?;
    if host.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("{text:?} is not HOST=URL with an http:// or https:// URL"));
    }
    Ok((host.to_owned(), url.to_owned()))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RuntimeArg {
    Auto,
    Oci,
    Process,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum IsolationArg {
    Auto,
    Namespaces,
    Plain,
}

impl SandboxArgs {
    /// The process executor, probed and ready, in a sandbox root this emulator holds (the lock
    /// lasts as long as the returned [`SandboxRoot`]).
    fn runtime(
        &self,
        retention: Duration,
        max_file_bytes: u64,
        containers: &ContainerRuntimeConfig,
    ) -> Result<(ExecutorRuntime, SandboxRoot)> {
        let (claimed, temporary) = match &self.sandbox_root {
            Some(root) => (SandboxRoot::claim(root)?, false),
            None => {
                // Memory where it can be had: making a sandbox's root there is milliseconds faster.
                let parent = cwsandbox_executor::memory_backed_dir().unwrap_or_else(std::env::temp_dir);
                (SandboxRoot::claim_default(&parent, &std::env::temp_dir())?, true)
            }
        };
        for stale in claimed.removed() {
            tracing::info!("removed {}, left by an emulator that was stopped without cleaning up", stale.display());
        }
        let root = claimed.path().to_owned();
        let mut config = ExecutorConfig::new(&root);
        config.isolation = match self.isolation {
            IsolationArg::Auto => Isolation::Auto,
            IsolationArg::Namespaces => Isolation::Namespaces,
            IsolationArg::Plain => Isolation::Plain,
        };
        config.max_file_bytes = max_file_bytes;
        config.host_paths.extend(self.sandbox_host_paths.iter().cloned());
        // `--runtime` has already replaced the values' kind (`WorldArgs::options`), so the image
        // puller, which reads the same configuration, decides its fallback by the same kind.
        let kind = containers.kind;
        if kind != RuntimeKind::Process {
            config.oci_runtime = Some(containers.runc.clone());
        }
        // `runsc: ""` turns gVisor off (no probe at start).
        config.gvisor_runtime = Some(containers.runsc.clone()).filter(|runsc| !runsc.as_os_str().is_empty());
        let id_shift = config.sandbox_id_range.0;
        let runtime = ExecutorRuntime::new(config, retention)
            .with_context(|| format!("starting the sandbox executor in {}", root.display()))?;
        let mut runtime = if temporary { runtime.remove_root_on_shutdown() } else { runtime };
        match (kind, runtime.oci_state().clone()) {
            (RuntimeKind::Process, _) => {}
            (_, OciSupport::Ready(_)) => {
                // The OCI runtime works only for a root emulator, which maps its sandboxes' root
                // to the id range: an image's files are shifted to match.
                let cache = containers.image_cache_dir();
                let mut containers = containers.clone();
                containers.max_image_bytes = self.max_image_bytes.unwrap_or(containers.max_image_bytes);
                containers.max_image_entries = self.max_image_entries.unwrap_or(containers.max_image_entries);
                containers.image_cache_max_bytes =
                    self.image_cache_max_bytes.unwrap_or(containers.image_cache_max_bytes);
                let flagged: std::collections::BTreeSet<&String> =
                    self.registry_mirrors.iter().map(|(host, _)| host).collect();
                for host in flagged {
                    containers.registry_mirrors.insert(host.clone(), Vec::new());
                }
                for (host, url) in &self.registry_mirrors {
                    containers.registry_mirrors.entry(host.clone()).or_default().push(url.clone());
                }
                let puller = ImagePuller::new(&containers, cache.clone(), id_shift)
                    .with_context(|| format!("opening the image cache {}", cache.display()))?;
                runtime = runtime.with_images(kind, puller);
                if let OciSupport::Ready(_) = runtime.gvisor_state() {
                    // gVisor has no user namespace: its trees keep the images' own ids.
                    let puller = ImagePuller::new(&containers, cache.clone(), 0)
                        .with_context(|| format!("opening the image cache {}", cache.display()))?;
                    runtime = runtime.with_gvisor_images(puller);
                }
            }
            (RuntimeKind::Oci, OciSupport::Unavailable(why)) => {
                anyhow::bail!("--runtime oci: the OCI runtime {} does not work here: {why}", containers.runc.display())
            }
            (RuntimeKind::Oci, OciSupport::NotConfigured) => anyhow::bail!("--runtime oci: no OCI runtime configured"),
            // Auto asks for images only where they can run: not a problem, but said.
            (RuntimeKind::Auto, OciSupport::Unavailable(why)) => tracing::info!(
                "containerRuntime auto: the OCI runtime {} does not work here ({why}); sandboxes run the host's programs",
                containers.runc.display()
            ),
            (RuntimeKind::Auto, OciSupport::NotConfigured) => {}
        }
        let namespaces = runtime.isolation() == "namespaces";
        let runtime = runtime.with_networks(HostNetworks::new(&containers.network, namespaces));
        tracing::info!(isolation = %runtime.isolation(), "sandboxes run as {}", runtime.describe());
        tracing::info!(runtime = %runtime.container_runtime(), "{}", runtime.describe_containers());
        Ok((runtime, claimed))
    }
}

impl WorldArgs {
    /// The emulator's options, and the sandbox root it holds while it runs.
    fn options(&self, listen: SocketAddr) -> Result<(Options, SandboxRoot)> {
        let scenario = match self.scenario {
            ScenarioArg::Ready => Scenario::Ready,
            ScenarioArg::Fresh => Scenario::Fresh,
        };
        let timing = self.timing.map(|timing| match timing {
            TimingArg::Realistic => Timing::Realistic,
            TimingArg::Instant => Timing::Instant,
        });
        let mut config = EmulatorConfig::load(scenario, &self.values, timing)?;
        if let Some(strictness) = self.strictness {
            config.strictness = match strictness {
                StrictnessArg::Strict => Strictness::Strict,
                StrictnessArg::Loose => Strictness::Loose,
            };
        }
        if let Some(runtime) = self.sandboxes.runtime {
            // As the values' `containerRuntime.kind` would: one kind for everything that reads it.
            config.container_runtime.kind = match runtime {
                RuntimeArg::Auto => RuntimeKind::Auto,
                RuntimeArg::Oci => RuntimeKind::Oci,
                RuntimeArg::Process => RuntimeKind::Process,
            };
        }
        let retention = Duration::from_secs(u64::from(config.values.sandboxes.retention_seconds));
        let mut options = Options::new(config);
        options.listen = listen;
        options.seed = self.seed;
        options.dev_tokens = self.dev_tokens;
        options.limits.max_message_bytes = self.max_message_bytes;
        options.limits.stream_backpressure_bytes = self.stream_backpressure_bytes;
        options.limits.stream_stall = self.stream_stall_timeout;
        options.transport = self.transport.transport();
        let (runtime, root) =
            self.sandboxes.runtime(retention, options.limits.max_file_bytes, &options.config.container_runtime)?;
        options.runtime = Some(Arc::new(runtime) as Arc<dyn SandboxRuntime>);
        Ok((options, root))
    }
}

/// The whole command, arguments from the process's own.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cwsandbox-emulator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    // Dropping a runtime waits for every blocking thread, however stuck; the emulator's exit
    // must not (its own stop is bounded, and the sandboxes are gone by then).
    runtime.shutdown_timeout(EXIT_BOUND);
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("cwsandbox-emulator: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// The longest a stop may wait for work still in flight (streams, file operations) before the
/// process exits anyway.
const STOP_BOUND: Duration = Duration::from_secs(10);
/// For a command that only prints (`completion`, the parent of `serve --background` once its
/// emulator is ready): a reader that is gone (`… | head`) ends the process with SIGPIPE, silently,
/// as it ends every Unix tool, where Rust's default (SIGPIPE ignored) makes `println!` panic.
/// Never for a process that serves: the executor writes to the pipes of sandboxes' processes,
/// and one that closes its stdin must be an error of that write, not the emulator's death.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; the disposition is process-wide and
    // this process runs no sandbox (the cases above), so no write of another thread relies on
    // SIGPIPE being ignored.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// How long the exit waits for blocking threads after the stop.
const EXIT_BOUND: Duration = Duration::from_secs(2);

/// Stops the emulator within [`STOP_BOUND`], whatever is in flight.
async fn stop_bounded(emulator: Emulator) {
    if tokio::time::timeout(STOP_BOUND, emulator.stop()).await.is_err() {
        tracing::warn!(bound = ?STOP_BOUND, "the stop did not finish in time; exiting anyway");
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Exec { world, command } => exec(world, command).await,
        Command::Completion { shell } => {
            use clap::CommandFactory;
            die_quietly_on_a_closed_pipe();
            clap_complete::generate(shell, &mut Cli::command(), "cwsandbox-emulator", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment this is made: made before anyone can know the
/// emulator's pid (the ready file, the child of `exec`), so that a signal sent as soon as they
/// do stops it cleanly instead of killing it with its sandbox root left behind.
struct Termination {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Termination {
    fn catch() -> Result<Termination> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Termination {
            interrupt: signal(SignalKind::interrupt()).context("catching SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("catching SIGTERM")?,
        })
    }

    /// Resolves on SIGINT or SIGTERM with the signal's number.
    async fn received(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => 2,
            _ = self.terminate.recv() => 15,
        }
    }
}

/// `HOST:PORT` to the address to bind: an IP address as given, a name through the system's
/// resolver (IPv4 first, the address most clients try first for `localhost`).
fn listen_address(text: &str) -> Result<SocketAddr> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    use std::net::ToSocketAddrs;
    if !text.contains(':') {
        anyhow::bail!("--listen {text:?}: expected HOST:PORT, e.g. 127.0.0.1:8080 or localhost:0");
    }
    let addresses: Vec<SocketAddr> = text
        .to_socket_addrs()
        .with_context(|| format!("--listen {text:?}: cannot resolve the host (expected HOST:PORT)"))?
        .collect();
    addresses
        .iter()
        .find(|address| address.is_ipv4())
        .or_else(|| addresses.first())
        .copied()
        .with_context(|| format!("--listen {text:?}: the host has no address"))
}

async fn serve(args: ServeArgs) -> Result<ExitCode> {
    let listen = listen_address(&args.listen)?;
    if args.background {
        return serve_in_background(&args).await;
    }
    // First of all: a reader polling for the ready file must not find a dead emulator's.
    if let Some(path) = &args.ready_file
        && let Some(pid) = state_dir::clear_stale_ready_file(path)?
    {
        tracing::info!("removed the ready file {} of emulator pid {pid}, which is gone", path.display());
    }
    let mut termination = Termination::catch()?;
    let (mut options, _root) = args.world.options(listen)?;
    options.kubeconfig = args.kubeconfig.clone();
    options.endpoint_ca_file = args.endpoint_ca_file.clone();
    let emulator = start(options).await?;
    if let Some(path) = &args.ready_file {
        emulator.info().write(path).with_context(|| format!("writing the ready file {}", path.display()))?;
    }
    // A reader that is gone (`serve | head -1`) does not stop the emulator: its port is what
    // it serves, and its stdout has nothing more to say (the log is on stderr).
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_all(emulator.info().shell_lines().as_bytes()).and_then(|()| stdout.flush()) {
        tracing::warn!(%error, "could not print the export lines on stdout; serving anyway");
    }
    drop(stdout);
    let signal = termination.received().await;
    tracing::info!(signal, "stopping");
    stop_bounded(emulator).await;
    if let Some(path) = &args.ready_file {
        let _ = std::fs::remove_file(path);
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the emulator; a start that fails (a port in use, …) shuts its sandbox runtime down, so
/// the sandbox directory it made is not left behind for the next start to clean up.
async fn start(options: Options) -> Result<Emulator> {
    let runtime = options.runtime.clone();
    match Emulator::start(options).await {
        Ok(emulator) => Ok(emulator),
        Err(error) => {
            if let Some(runtime) = runtime {
                runtime.shutdown().await;
            }
            Err(error.into())
        }
    }
}

/// How long `serve --background` waits for the emulator to be ready. A start takes tens of
/// milliseconds; opening a large image cache or a slow disk may take longer.
const BACKGROUND_READY_BOUND: Duration = Duration::from_secs(120);

/// `serve --background`: the same command line without `--background`, as a process of its own
/// (its own process group, so the terminal's Ctrl-C and hang-up do not reach it), logging to a
/// file; returns once it wrote its ready file (printing the `export` lines) or exited (printing
/// its log and exiting with its code).
async fn serve_in_background(args: &ServeArgs) -> Result<ExitCode> {
    let pid = std::process::id();
    let temp = std::env::temp_dir();
    let log_path = args.log_file.clone().unwrap_or_else(|| temp.join(format!("cwsandbox-emulator-{pid}.log")));
    let log =
        std::fs::File::create(&log_path).with_context(|| format!("creating the log file {}", log_path.display()))?;
    let mut child_args: Vec<std::ffi::OsString> =
        std::env::args_os().skip(1).filter(|arg| arg != "--background").collect();
    // --log-file is ours: the child's stderr is that file.
    if let Some(position) = child_args.iter().position(|arg| arg == "--log-file") {
        child_args.drain(position..(position + 2).min(child_args.len()));
    }
    child_args.retain(|arg| !arg.to_string_lossy().starts_with("--log-file="));
    let ready_path = match &args.ready_file {
        Some(path) => path.clone(),
        None => {
            let path = temp.join(format!("cwsandbox-emulator-{pid}.ready.json"));
            child_args.push("--ready-file".into());
            child_args.push(path.clone().into());
            path
        }
    };
    let program = std::env::current_exe().context("the path of this program")?;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(&program)
        .args(&child_args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let child_pid = child.id();
    let deadline = tokio::time::Instant::now() + BACKGROUND_READY_BOUND;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the emulator")? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            eprint!("{log}");
            eprintln!(
                "cwsandbox-emulator: the emulator exited before it was ready ({status}); its log: {}",
                log_path.display()
            );
            return Ok(ExitCode::from(status.code().and_then(|code| u8::try_from(code).ok()).unwrap_or(2)));
        }
        let ready = std::fs::read_to_string(&ready_path)
            .ok()
            .and_then(|text| serde_json::from_str::<cwsandbox_emulator::ReadyInfo>(&text).ok())
            .filter(|info| info.pid == child_pid);
        if let Some(info) = ready {
            // The emulator is a process of its own now; this one only prints and exits.
            die_quietly_on_a_closed_pipe();
            print!("{}", info.shell_lines());
            println!("export CWSANDBOX_EMULATOR_PID={child_pid}");
            println!("# log: {}; stop it with: kill $CWSANDBOX_EMULATOR_PID", log_path.display());
            return Ok(ExitCode::SUCCESS);
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!(
                "the emulator was not ready after {}s; stopped it (its log: {})",
                BACKGROUND_READY_BOUND.as_secs(),
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn exec(world: WorldArgs, command: Vec<String>) -> Result<ExitCode> {
    let mut termination = Termination::catch()?;
    let (mut options, _root) = world.options(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    // kubectl in the command sees the throwaway cluster too.
    let kubeconfig = std::env::temp_dir().join(format!("cwsandbox-emulator-{}.kubeconfig", std::process::id()));
    options.kubeconfig = Some(kubeconfig.clone());
    let emulator = start(options).await?;
    let info = emulator.info().clone();
    let (program, args) = command.split_first().context("no command given")?;
    let code = run_child(program, args, &info, &mut termination).await;
    stop_bounded(emulator).await;
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(ExitCode::from(u8::try_from(code?).unwrap_or(1)))
}

async fn run_child(
    program: &str,
    args: &[String],
    info: &cwsandbox_emulator::ReadyInfo,
    termination: &mut Termination,
) -> Result<i32> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("KUBECONFIG", &info.kubeconfig)
        .env("CWSANDBOX_BASE_URL", &info.base_url)
        .env("CWSANDBOX_API_KEY", info.api_key())
        .env("CWSANDBOX_USER_TOKEN", &info.user_token)
        .env("CWSANDBOX_RUNNER_ID", &info.runner_id)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let code = tokio::select! {
        status = child.wait() => {
            let status = status.context("waiting for the command")?;
            use std::os::unix::process::ExitStatusExt;
            status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(1)
        }
        signal = termination.received() => {
            let _ = child.kill().await;
            128 + signal
        }
    };
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::parse_mirror;

    #[test]
    fn registry_mirror_flags_are_host_equals_url() {
        assert_eq!(
            parse_mirror("docker.io=http://127.0.0.1:5000"),
            Ok(("docker.io".to_owned(), "http://127.0.0.1:5000".to_owned()))
        );
        assert!(parse_mirror("docker.io").unwrap_err().contains("HOST=URL"));
        assert!(parse_mirror("docker.io=127.0.0.1:5000").unwrap_err().contains("http://"));
        assert!(parse_mirror("=http://m").is_err());
    }
}
