//! The executor: starts sandboxes, runs commands in them, stops them.

mod image;
mod keeper;
mod layout;
mod mode;
mod oci;
mod own_roots;
mod sidecars;
mod snapshots;
pub use self::oci::GVISOR_ATTACHED_NETWORK;
pub use self::snapshots::SNAPSHOTS_DIR;

/// The directory of the root that holds the claims' data (`<organization>/<cluster>/<namespace>/<name>`
/// for the emulator: [`crate::VolumeMount::claim`]).
pub const CLAIMS_DIR: &str = ".volumes";
mod spares;
mod validate;
mod warm;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// The data behind this module's locks stays consistent across a panic in another holder (each
// update is a single insert, remove or count), so poisoning is not a reason to fail.
use cwsandbox_sync::MutexUnpoisoned;
use libc::pid_t;
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use self::keeper::{Keeper, SETUP_TIMEOUT, StartedKeeper, pump_logs, start_keeper, wait_for_exec, watch_keeper};
use self::layout::{
    RootPlan, container_env, move_warm_root, prepare_layout, program_candidates, remove_dir, sandbox_env,
};
use self::mode::{IdMode, Mode, choose_mode, ns_plan, sidecar_user_problem, user_problem};
use self::oci::{OciContainer, OciRuntime};
use self::sidecars::SidecarContainer;
use self::spares::SpareRoots;
use self::validate::{c_string, validate_exec, validate_id, validate_spec};
use self::warm::{WarmPool, WarmSandbox, can_use_warm, end_keeper};
use crate::activation::{Activation, MainCommand};
use crate::child;
use crate::exec::{self, ExecRequest, ExecSession, ExecTracker};
use crate::file_helper::{self, FileAccess, FileRequest};
use crate::files;
use crate::init_channel::{InitChannel, MAX_ORDER_BYTES, SendError};
use crate::logs::{LogBuffer, LogReader};
use crate::main_command::{self, Program};
use crate::sandbox_plan::InitPlan;
use crate::spawner::Spawner;
use crate::sys::{self, ProcessHandle};
use crate::{ExecutorConfig, ExecutorError, FileError, Isolation, LaunchSpec, MainExit, OciSupport};

/// Runs sandboxes. Cheap to clone; every clone drives the same sandboxes. When
/// the last clone is dropped, every sandbox is killed.
#[derive(Clone, Debug)]
pub struct Executor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ExecutorConfig,
    mode: Mode,
    /// Our pid, for children to check that we are still their parent.
    pid: pid_t,
    spawner: Spawner,
    /// The running program, executed as the zygote (and as the probe's re-executed init).
    self_exe: OwnedFd,
    /// Forks the keepers of namespaced sandboxes; started on first use, and again if it died
    /// (`crate::zygote`).
    zygote: tokio::sync::Mutex<Option<Arc<crate::zygote::Zygote>>>,
    /// File operations in flight: each holds a blocking thread, so they are counted.
    file_operations: Arc<tokio::sync::Semaphore>,
    /// Namespaces mode: roots made ahead of need.
    spares: Option<Arc<SpareRoots>>,
    /// Namespaces mode: sandboxes started ahead of need.
    warm: Option<WarmPool>,
    registry: Mutex<Registry>,
    exits_sender: mpsc::UnboundedSender<MainExit>,
    exits_receiver: Mutex<Option<mpsc::UnboundedReceiver<MainExit>>>,
    /// Whether image sandboxes can run, and the runtime that runs them where they can.
    oci_support: OciSupport,
    oci: Option<OciRuntime>,
    /// Whether gVisor sandboxes can run, and runsc where they can.
    gvisor_support: OciSupport,
    gvisor: Option<OciRuntime>,
    /// Whether memory-backed volumes can be made here: why not, where they cannot.
    memory_volumes: Result<(), String>,
}

#[derive(Debug, Default)]
struct Registry {
    sandboxes: HashMap<String, Arc<Sandbox>>,
    starting: HashSet<String>,
    shut_down: bool,
}

/// One start of a sandbox (a restart makes a new one).
#[derive(Debug)]
struct Sandbox {
    id: String,
    dir: PathBuf,
    /// The working directory as the sandbox's processes see it.
    working_dir: String,
    /// The environment exec'd commands start from.
    env: BTreeMap<String, String>,
    logs: Arc<LogBuffer>,
    /// The main container's name (may be empty: then only `None` names it).
    main_name: String,
    /// The Pod's other containers.
    sidecars: Vec<Arc<SidecarContainer>>,
    /// `None` once the keeper has ended.
    running: Mutex<Option<Arc<Running>>>,
    done: watch::Receiver<bool>,
    stop_requested: AtomicBool,
    execs: Mutex<Vec<ExecTracker>>,
    /// The main command's exit code (128+N after signal N), once every process is gone.
    exit_code: std::sync::OnceLock<i32>,
    /// The (uid, gid) exec'd commands switch to in the user namespace, where they switch.
    command_ids: Option<(u32, u32)>,
    /// An image sandbox's (main) container.
    oci: Option<Arc<OciContainer>>,
    /// Whether the OOM killer ran in an image sandbox's container, once it ended.
    oom_killed: std::sync::OnceLock<bool>,
}

/// What reaches one container of a running sandbox: its running handles, and its runtime
/// container in an image sandbox.
type Reached = (Arc<Running>, Option<Arc<OciContainer>>);

/// Where a command exec'd in one of a sandbox's containers starts.
struct ExecContext<'a> {
    env: &'a BTreeMap<String, String>,
    working_dir: &'a str,
    command_ids: Option<(u32, u32)>,
}

/// What is needed to reach a running sandbox.
#[derive(Debug)]
struct Running {
    keeper: ProcessHandle,
    /// The sandbox's root directory, for file operations.
    root: OwnedFd,
    /// Its user and mount namespaces, which file helpers join (`None` in plain mode: its files
    /// are the host's).
    namespaces: Option<crate::file_helper::SandboxNamespaces>,
    target: Target,
}

#[derive(Debug)]
enum Target {
    /// Commands are exec'd by the sandbox's init, over its channel.
    Namespaces { channel: Arc<InitChannel> },
    /// The main command's process group, which exec'd commands join.
    Plain { group: pid_t },
    /// An image sandbox: commands are exec'd by the OCI runtime; `keeper` is the container's
    /// init.
    Oci { network: crate::Network },
}

impl Sandbox {
    fn running(&self) -> Option<Arc<Running>> {
        self.running.lock_unpoisoned().clone()
    }

    /// The container `container` names: `None` for the main one (unnamed, or named by its
    /// name), else the sidecar of that name.
    fn sidecar(&self, container: Option<&str>) -> Result<Option<&SidecarContainer>, ExecutorError> {
        match container {
            None => Ok(None),
            Some(name) if name == self.main_name => Ok(None),
            Some(name) => {
                self.sidecars.iter().find(|sidecar| sidecar.name == name).map(|sidecar| Some(&**sidecar)).ok_or_else(
                    || ExecutorError::UnknownContainer { sandbox: self.id.clone(), container: name.to_owned() },
                )
            }
        }
    }

    /// What reaches container `container` while the sandbox runs: the running handles (root,
    /// namespaces, how commands are exec'd) and, in an image sandbox, the runtime's container:
    /// the main container's, or an image sidecar's own. A sidecar without an image shares the
    /// sandbox's.
    fn reach(&self, container: Option<&str>) -> Result<Reached, ExecutorError> {
        let main = self.running().ok_or_else(|| ExecutorError::NotRunning(self.id.clone()))?;
        match self.sidecar(container)? {
            Some(sidecar) if sidecar.own_root => match sidecar.image_container() {
                Some(image) => Ok((image.running.clone(), image.container.clone())),
                None => {
                    Err(ExecutorError::ContainerEnded { sandbox: self.id.clone(), container: sidecar.name.clone() })
                }
            },
            _ => Ok((main, self.oci.clone())),
        }
    }

    /// Where an exec in `container` starts: its environment, working directory and ids.
    fn context(&self, container: Option<&str>) -> Result<ExecContext<'_>, ExecutorError> {
        Ok(match self.sidecar(container)? {
            None => ExecContext { env: &self.env, working_dir: &self.working_dir, command_ids: self.command_ids },
            Some(sidecar) => {
                ExecContext { env: &sidecar.env, working_dir: &sidecar.working_dir, command_ids: sidecar.command_ids }
            }
        })
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(running) = self.running() {
            // A container's init is signalled directly (what `runc kill` does, without a
            // process of its own): the pidfd cannot reach another process. SIGKILL ends its pid
            // namespace.
            let signal = match running.target {
                Target::Oci { .. } if signal == libc::SIGUSR1 => libc::SIGKILL,
                _ => signal,
            };
            match &self.oci {
                // gVisor's processes are its kernel's: runsc delivers the signal. Its sandbox
                // process (the keeper) killed ends them all at once.
                Some(container) if container.handler == crate::RuntimeHandler::Runsc && signal != libc::SIGKILL => {
                    container.signal_through_runtime(signal);
                }
                _ => running.keeper.signal(signal),
            }
            // An image sandbox's sidecars are containers of their own, outside the main one's
            // PID namespace: each is signalled too.
            for sidecar in &self.sidecars {
                sidecar.signal(signal);
            }
        }
    }

    async fn wait_done(&self) {
        let mut done = self.done.clone();
        // An error means the watcher task is gone, which only happens once done.
        let _ = done.wait_for(|done| *done).await;
    }
}

impl Inner {
    /// The OCI runtime that runs sandboxes of `handler`, where it works.
    fn runtime(&self, handler: crate::RuntimeHandler) -> Option<&OciRuntime> {
        match handler {
            crate::RuntimeHandler::Default => self.oci.as_ref(),
            crate::RuntimeHandler::Runsc => self.gvisor.as_ref(),
        }
    }

    /// Whether the runtime of `handler` works here.
    fn runtime_support(&self, handler: crate::RuntimeHandler) -> &OciSupport {
        match handler {
            crate::RuntimeHandler::Default => &self.oci_support,
            crate::RuntimeHandler::Runsc => &self.gvisor_support,
        }
    }
}

impl Executor {
    /// Creates an executor. With [`Isolation::Auto`] it probes whether namespaces
    /// work here and falls back to plain processes, with a warning, when they do not.
    pub fn new(mut config: ExecutorConfig) -> Result<Executor, ExecutorError> {
        crate::process_entry::keep_linked();
        std::fs::create_dir_all(&config.root_dir)?;
        config.root_dir = config.root_dir.canonicalize()?;
        let self_exe = sys::open_own_executable()?;
        let mode = choose_mode(&config, &self_exe)?;
        let id_range = match mode {
            Mode::Namespaces { ids: IdMode::Range { base, count } } => Some((base, count)),
            _ => None,
        };
        let (oci_support, oci) = OciRuntime::probe(&config, id_range);
        let (gvisor_support, gvisor) = OciRuntime::probe_gvisor(&config);
        let memory_volumes = probe_memory_volumes(mode, &config.root_dir);
        if let Err(why) = &memory_volumes {
            info!("memory-backed scratch volumes are refused: {why}");
        }
        if sys::current_uid() == 0 {
            let consequence = match mode {
                Mode::Namespaces { ids: IdMode::Range { base, .. } } => format!(
                    "sandboxes run as the root of a user namespace (host uid {base} and up) without CAP_SYS_ADMIN"
                ),
                Mode::Namespaces { .. } => {
                    "no user namespace can be made here, so sandboxes run as the host's root (without CAP_SYS_ADMIN)"
                        .to_owned()
                }
                Mode::Plain => "sandboxes run as plain root processes, not isolated at all".to_owned(),
            };
            warn!("the emulator runs as root: {consequence}; run it as an unprivileged user where you can");
        }
        info!(?mode, root_dir = %config.root_dir.display(), "sandbox executor ready");
        let (exits_sender, exits_receiver) = mpsc::unbounded_channel();
        let file_operations = Arc::new(tokio::sync::Semaphore::new(config.max_file_operations.max(1)));
        let spares = match mode {
            Mode::Namespaces { .. } => {
                let spares = SpareRoots::new(config.root_dir.clone(), config.host_paths.clone(), mode.sandbox_owner());
                spares.refill();
                Some(spares)
            }
            Mode::Plain => None,
        };
        let warm = match mode {
            Mode::Namespaces { .. } if config.warm_sandboxes > 0 => {
                Some(WarmPool::new(&config.root_dir, config.warm_sandboxes))
            }
            _ => None,
        };
        let executor = Executor {
            inner: Arc::new(Inner {
                config,
                mode,
                pid: std::process::id() as pid_t,
                spawner: Spawner::new()?,
                self_exe,
                zygote: tokio::sync::Mutex::new(None),
                file_operations,
                spares,
                registry: Mutex::new(Registry::default()),
                exits_sender,
                exits_receiver: Mutex::new(Some(exits_receiver)),
                warm,
                oci_support,
                oci,
                gvisor_support,
                gvisor,
                memory_volumes,
            }),
        };
        WarmPool::refill(&executor.inner);
        Ok(executor)
    }

    /// Whether memory-backed scratch volumes ([`LaunchSpec::memory_volumes`]) can be made here:
    /// why not, where they cannot (plain processes; an emulator that may not mount a tmpfs).
    pub fn memory_volumes(&self) -> Result<(), String> {
        self.inner.memory_volumes.clone()
    }

    /// The isolation in force: `Namespaces` or `Plain`, never `Auto`.
    pub fn isolation(&self) -> Isolation {
        match self.inner.mode {
            Mode::Namespaces { .. } => Isolation::Namespaces,
            Mode::Plain => Isolation::Plain,
        }
    }

    /// Whether sandboxes can run in their images ([`LaunchSpec::image`]) here, and how.
    pub fn oci(&self) -> &OciSupport {
        &self.inner.oci_support
    }

    /// Whether sandboxes can run under gVisor ([`crate::RuntimeHandler::Runsc`]) here, and how.
    pub fn gvisor(&self) -> &OciSupport {
        &self.inner.gvisor_support
    }

    /// Whether the main command of the sandbox's latest start was killed by the OOM killer for
    /// going over its memory limit (image sandboxes), once it ended.
    pub fn oom_killed(&self, id: &str) -> bool {
        self.sandbox(id).and_then(|sandbox| sandbox.oom_killed.get().copied()).unwrap_or(false)
    }

    /// Whether sandboxes get a user namespace (always, unless root cannot create one).
    pub fn uses_user_namespace(&self) -> bool {
        matches!(self.inner.mode, Mode::Namespaces { ids } if ids != IdMode::HostRoot)
    }

    /// The configuration in force (with `root_dir` made absolute).
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// The reports of main commands that ended by themselves. Only the first call
    /// gets them; later calls get a receiver that yields nothing.
    pub fn exits(&self) -> mpsc::UnboundedReceiver<MainExit> {
        match self.inner.exits_receiver.lock_unpoisoned().take() {
            Some(receiver) => receiver,
            None => {
                warn!("Executor::exits was called more than once; only the first receiver gets exits");
                mpsc::unbounded_channel().1
            }
        }
    }

    /// How the main command of the sandbox's latest start ended (its code, or
    /// 128+N after signal N), once every process of it is gone; `None` while it
    /// runs or for an unknown sandbox. Set for stopped and killed sandboxes too.
    pub fn exit_code(&self, id: &str) -> Option<i32> {
        self.sandbox(id).and_then(|sandbox| sandbox.exit_code.get().copied())
    }

    /// Whether the sandbox's processes are running.
    pub fn is_running(&self, id: &str) -> bool {
        self.sandbox(id).is_some_and(|sandbox| sandbox.running().is_some())
    }

    fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.inner.registry.lock_unpoisoned().sandboxes.get(id).cloned()
    }

    /// Starts a sandbox's main command. Returns once the sandbox is set up (its
    /// namespaces, directories and hostname) and the command was exec'd; a command
    /// that cannot be exec'd has exited (127) by then, and [`Executor::exit_code`]
    /// says so. Every exit is also reported on [`Executor::exits`].
    pub async fn start(&self, id: &str, spec: LaunchSpec) -> Result<(), ExecutorError> {
        let started = self.start_sandbox(id, spec).await;
        // Made after the start, not during it: the making would compete with it for the CPU.
        if let Some(spares) = &self.inner.spares {
            spares.refill();
        }
        WarmPool::refill(&self.inner);
        started
    }

    /// Returns once the sandboxes started ahead of need are ready (or could not be made): a
    /// start after it takes one, when it can ([`ExecutorConfig::warm_sandboxes`]).
    pub async fn ready_ahead(&self) {
        if let Some(warm) = &self.inner.warm {
            warm.settled().await;
        }
    }

    async fn start_sandbox(&self, id: &str, mut spec: LaunchSpec) -> Result<(), ExecutorError> {
        validate_id(id)?;
        validate_spec(&spec)?;
        if let Some(problem) = user_problem(self.inner.mode, spec.user) {
            return Err(ExecutorError::InvalidRequest(problem));
        }
        if let Some(problem) = spec
            .sidecars
            .iter()
            .find_map(|sidecar| sidecar_user_problem(self.inner.mode, spec.user, &sidecar.name, sidecar.user))
        {
            return Err(ExecutorError::InvalidRequest(problem));
        }
        let _claim = self.claim(id)?;
        if spec.image.is_some() || spec.handler == crate::RuntimeHandler::Runsc {
            return self.start_image(id, spec).await;
        }
        let dir = self.inner.config.root_dir.join(id);
        let mode = self.inner.mode;
        if let Mode::Namespaces { .. } = mode {
            add_pod_hosts_file(&mut spec);
        }
        let env = sandbox_env(&spec, mode);
        let main = command_for(&spec.command, &env)?;
        let hostname = c_string(spec.hostname.clone())?;
        let mut warm = self
            .inner
            .warm
            .as_ref()
            .filter(|_| can_use_warm(&spec, &self.inner.config.host_paths))
            .and_then(WarmPool::take);
        while let Some(taken) = warm {
            match self.activate(id, &dir, &mut spec, &main, &hostname, taken).await {
                Activated::Started(activated) => {
                    let ActivatedSandbox { working_dir, sidecar_dirs, keeper, running, started } = *activated;
                    let command_runs = wait_for_exec(started).await;
                    let dirs = Directories { dir, working_dir, sidecar_dirs };
                    let started =
                        Started { keeper, running: Some(running), command_runs, oci: None, sidecars: None, held: None };
                    return self.register(id, dirs, env, &spec, started).await;
                }
                Activated::Failed(error) => return Err(error),
                // Its init is gone (nothing of the request ran in it): try the next, or start cold.
                Activated::Unusable => warm = self.inner.warm.as_ref().and_then(WarmPool::take),
            }
        }
        let layout = {
            let dir = dir.clone();
            let mut plan = RootPlan::of(&spec);
            plan.restores = restores_of(&self.inner.config.root_dir, &every_volume_mount(&spec))?;
            plan.claims_dir = self.inner.config.root_dir.join(CLAIMS_DIR);
            let files = std::mem::take(&mut spec.files);
            let network = spec.network.clone();
            let host_paths = self.inner.config.host_paths.clone();
            let spare = self.inner.spares.as_ref().and_then(|spares| spares.take());
            tokio::task::spawn_blocking(move || {
                prepare_layout(&dir, &dir, mode, &host_paths, &plan, &files, network, spare)
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, message))?
        };
        let program = main.map(|main| Program::new(main.candidates, main.argv, main.envp, &main.display));
        let ns = match (mode, &layout.rootfs) {
            (Mode::Namespaces { ids }, Some(rootfs)) => {
                let mut plan = ns_plan(ids, &spec.hostname, rootfs, spec.network.clone(), spec.user)?;
                if let crate::Network::Attached(attach) = &spec.network {
                    let attach = attach.clone();
                    let namespace = tokio::task::spawn_blocking(move || attach.make_namespace())
                        .await
                        .map_err(|error| setup_error(id, error.to_string()))?
                        .map_err(|error| setup_error(id, format!("cannot make the sandbox's network: {error}")))?;
                    plan.network_namespace = Some(validate::path_c_string(&namespace)?);
                }
                Some(plan)
            }
            _ => None,
        };
        let dirs = Directories { dir, working_dir: layout.working_dir.clone(), sidecar_dirs: layout.sidecar_dirs };
        let started = if has_start_conditions(&spec) {
            image::check_order(&spec)?;
            let (keeper, running, go, started) =
                spawn_command(&self.inner, id, ns, &layout.working_dir, program).await?;
            let held = Some(HeldCommand { go, started });
            Started { keeper, running: Some(running), command_runs: true, oci: None, sidecars: None, held }
        } else {
            let (keeper, running, command_runs) =
                start_command(&self.inner, id, ns, &layout.working_dir, program).await?;
            Started { keeper, running: Some(running), command_runs, oci: None, sidecars: None, held: None }
        };
        self.register(id, dirs, env, &spec, started).await
    }

    /// Makes a warm sandbox `id`'s: moves its directory into place, adds the working directory
    /// and mounted files, and sends init the activation.
    async fn activate(
        &self,
        id: &str,
        dir: &Path,
        spec: &mut LaunchSpec,
        main: &Option<MainCommand>,
        hostname: &CString,
        mut warm: WarmSandbox,
    ) -> Activated {
        // A keeper known to be gone (with the zygote that forked it, say) is not even tried.
        if warm.keeper.has_ended() {
            debug!(sandbox = id, "a sandbox started ahead of need has ended; using another");
            warm.discard().await;
            return Activated::Unusable;
        }
        if let Err(error) = warm.raise_priority() {
            debug!(sandbox = id, %error, "a sandbox started ahead of need cannot be used; using another");
            warm.discard().await;
            return Activated::Unusable;
        }
        let owner = self.inner.mode.sandbox_owner();
        let host_paths = &self.inner.config.host_paths;
        // Usually one rename and nothing to clear: done here, where a blocking thread's hop would
        // cost more than the work. Removing an earlier start's directory, or writing files,
        // can take long, so it goes to a blocking thread.
        let quick = spec.files.is_empty() && spec.sidecars.is_empty() && std::fs::symlink_metadata(dir).is_err();
        let placed = if quick {
            move_warm_root(&warm.dir, dir, host_paths, &RootPlan::of(spec), &[], owner)
        } else {
            let (from, to, host_paths) = (warm.dir.clone(), dir.to_owned(), host_paths.clone());
            let plan = RootPlan::of(spec);
            let files = std::mem::take(&mut spec.files);
            tokio::task::spawn_blocking(move || move_warm_root(&from, &to, &host_paths, &plan, &files, owner))
                .await
                .unwrap_or_else(|error| Err(error.to_string()))
        };
        let ((working_dir, sidecar_dirs), warm) = match placed {
            Ok(placed) => (placed, WarmSandbox { dir: dir.to_owned(), ..warm }),
            Err(message) => {
                // The directory may be where it was, or at `dir` already.
                let moved = dir.to_owned();
                warm.discard().await;
                let _ = tokio::task::spawn_blocking(move || remove_dir(&moved)).await;
                return Activated::Failed(setup_error(id, message));
            }
        };
        let activation = Activation {
            hostname: hostname.clone(),
            main_ids: self.inner.mode.command_ids(None),
            cwd: match c_string(working_dir.clone()) {
                Ok(cwd) => cwd,
                Err(error) => {
                    warm.discard().await;
                    return Activated::Failed(error);
                }
            },
            main: main.clone(),
        };
        let WarmSandbox { dir: warm_dir, keeper, running, activation: mut pipe, started, .. } = warm;
        let bytes = activation.encode();
        // A pipe holds at least a page: an activation that fits is written without blocking.
        let written = if bytes.len() <= 4096 {
            use std::io::Write;
            pipe.write_all(&bytes).map(|()| pipe)
        } else {
            tokio::task::spawn_blocking(move || {
                use std::io::Write;
                pipe.write_all(&bytes).map(|()| pipe)
            })
            .await
            .unwrap_or_else(|error| Err(std::io::Error::other(error)))
        };
        match written {
            // Closing it tells init the activation is whole.
            Ok(pipe) => drop(pipe),
            Err(error) => {
                debug!(sandbox = id, %error, "a sandbox started ahead of need is gone; using another");
                drop((running, started));
                end_keeper(keeper, warm_dir).await;
                return Activated::Unusable;
            }
        }
        Activated::Started(Box::new(ActivatedSandbox { working_dir, sidecar_dirs, keeper, running, started }))
    }

    /// Records a started sandbox and has its keeper watched. A command that could not start has
    /// ended by the time this returns.
    async fn register(
        &self,
        id: &str,
        dirs: Directories,
        env: BTreeMap<String, String>,
        spec: &LaunchSpec,
        started: Started,
    ) -> Result<(), ExecutorError> {
        let Started { keeper: mut child, running, command_runs, oci, sidecars: started_sidecars, held } = started;
        let oci = oci.map(Arc::new);
        let mode = self.inner.mode;
        let logs = Arc::new(LogBuffer::new(self.inner.config.log_buffer_bytes));
        let (eof_sender, eof) = oneshot::channel();
        let pump = child.take_stdout().map(|stdout| {
            let logs = logs.clone();
            tokio::spawn(async move {
                pump_logs(stdout, &logs).await;
                let _ = eof_sender.send(());
            })
        });
        let (done_sender, done) = watch::channel(false);
        let Directories { dir, working_dir, sidecar_dirs } = dirs;
        let sidecars = started_sidecars.unwrap_or_else(|| {
            spec.sidecars
                .iter()
                .zip(sidecar_dirs)
                .map(|(sidecar, working_dir)| {
                    Arc::new(SidecarContainer {
                        name: sidecar.name.clone(),
                        env: container_env(&spec.hostname, &sidecar.env, sidecar.user, mode),
                        working_dir,
                        command_ids: mode.command_ids(sidecar.user),
                        logs: Arc::new(LogBuffer::new(self.inner.config.log_buffer_bytes)),
                        exit_code: Arc::default(),
                        own_root: true,
                        image: Mutex::default(),
                        watcher: Mutex::default(),
                        sandbox: std::sync::OnceLock::new(),
                        reported: Default::default(),
                    })
                })
                .collect()
        });
        let sandbox = Arc::new(Sandbox {
            id: id.to_owned(),
            dir,
            working_dir,
            env,
            logs,
            main_name: spec.name.clone(),
            sidecars,
            running: Mutex::new(running.map(Arc::new)),
            done,
            stop_requested: AtomicBool::new(false),
            execs: Mutex::new(Vec::new()),
            exit_code: std::sync::OnceLock::new(),
            command_ids: mode.command_ids(spec.user),
            oci,
            oom_killed: std::sync::OnceLock::new(),
        });
        self.inner.registry.lock_unpoisoned().sandboxes.insert(id.to_owned(), sandbox.clone());
        for sidecar in &sandbox.sidecars {
            let _ = sidecar.sandbox.set(Arc::downgrade(&sandbox));
            // An image sidecar that ended while the Pod started is reported now.
            self.report_sidecar_exit(sidecar);
        }
        debug!(sandbox = id, hostname = %spec.hostname, isolation = ?mode, "sandbox started");
        tokio::spawn(watch_keeper(sandbox.clone(), child, eof, pump, done_sender, self.inner.exits_sender.clone()));
        if command_runs && let Some(running) = sandbox.running() {
            // Next to the main command, as a kubelet starts a Pod's containers; a sidecar that
            // cannot be ordered (the sandbox ended meanwhile) leaves the main command's end to
            // tell the story. Where containers wait for others (`held`), each starts once what
            // it waits for holds, and the main command last.
            // (An image sandbox's sidecars started before its main command.)
            let mut probed = Vec::new();
            for (index, (sidecar, launch)) in sandbox.sidecars.iter().zip(&spec.sidecars).enumerate() {
                if sandbox.oci.is_some() {
                    break;
                }
                if held.is_some()
                    && let Err(why) = self.wait_for(id, &launch.after, &sandbox.sidecars, spec, &mut probed).await
                {
                    return Err(self
                        .abandon_held(id, held, format!("container {:?} cannot start: {why}", sidecar.name))
                        .await);
                }
                if let Err(error) = self.start_root_sidecar(&sandbox, &running, index, sidecar, launch).await {
                    warn!(sandbox = id, container = %sidecar.name, %error, "a sidecar container could not start");
                    sidecar.logs.close();
                }
            }
            if let Some(HeldCommand { go, started }) = held {
                if let Err(why) = self.wait_for(id, &spec.after, &sandbox.sidecars, spec, &mut probed).await {
                    let held = Some(HeldCommand { go, started });
                    return Err(self
                        .abandon_held(id, held, format!("container {:?} cannot start: {why}", spec.name))
                        .await);
                }
                if !(HeldCommand { go, started }).release().await {
                    let _ = tokio::time::timeout(SETUP_TIMEOUT, sandbox.wait_done()).await;
                }
            }
        }
        if !command_runs {
            // A command that cannot start never ran: its exit (127) is known before `start`
            // returns, so the caller can report the sandbox failed rather than running.
            let _ = tokio::time::timeout(SETUP_TIMEOUT, sandbox.wait_done()).await;
        }
        Ok(())
    }

    /// Ends a sandbox whose main command never got its go (what it waited for did not hold):
    /// the command is not run, every process of the sandbox is killed, and the start fails with
    /// `why`, as an image sandbox's does.
    async fn abandon_held(&self, id: &str, held: Option<HeldCommand>, why: String) -> ExecutorError {
        // Closed without a go, the main command gives up (127): the sandbox ends.
        drop(held);
        self.kill(id).await;
        if let Some(sandbox) = self.sandbox(id) {
            let _ = tokio::time::timeout(SETUP_TIMEOUT, sandbox.wait_done()).await;
        }
        setup_error(id, why)
    }

    /// Marks `id` as starting, so a concurrent start of the same id fails.
    fn claim(&self, id: &str) -> Result<Claim, ExecutorError> {
        let mut registry = self.inner.registry.lock_unpoisoned();
        if registry.shut_down {
            return Err(ExecutorError::ShutDown);
        }
        let running = registry.sandboxes.get(id).is_some_and(|sandbox| sandbox.running().is_some());
        if running || !registry.starting.insert(id.to_owned()) {
            return Err(ExecutorError::AlreadyRunning(id.to_owned()));
        }
        Ok(Claim { inner: self.inner.clone(), id: id.to_owned() })
    }

    /// Stops a sandbox: SIGTERM to every one of its processes, SIGKILL to those
    /// left after `grace`. Returns when all are gone. Unknown or stopped
    /// sandboxes are left as they are.
    pub async fn stop(&self, id: &str, grace: Duration) {
        let Some(sandbox) = self.sandbox(id) else {
            return;
        };
        sandbox.stop_requested.store(true, Ordering::SeqCst);
        // The keeper relays it: init sends it to the whole pid namespace, or the
        // plain keeper to the whole process group.
        sandbox.signal(libc::SIGTERM);
        if tokio::time::timeout(grace, sandbox.wait_done()).await.is_err() {
            debug!(sandbox = id, ?grace, "grace period over; killing");
            sandbox.signal(libc::SIGUSR1);
            sandbox.wait_done().await;
        }
    }

    /// Kills every process of a sandbox at once (SIGKILL) and returns when all are gone.
    pub async fn kill(&self, id: &str) {
        let Some(sandbox) = self.sandbox(id) else {
            return;
        };
        sandbox.stop_requested.store(true, Ordering::SeqCst);
        sandbox.signal(libc::SIGUSR1);
        sandbox.wait_done().await;
    }

    /// Kills every sandbox and deletes their directories: for the emulator's exit.
    /// Later starts fail with [`ExecutorError::ShutDown`].
    pub async fn shutdown(&self) {
        let sandboxes: Vec<Arc<Sandbox>> = {
            let mut registry = self.inner.registry.lock_unpoisoned();
            registry.shut_down = true;
            registry.sandboxes.drain().map(|(_, sandbox)| sandbox).collect()
        };
        // Signal all first, then wait, so sandboxes die in parallel.
        for sandbox in &sandboxes {
            sandbox.stop_requested.store(true, Ordering::SeqCst);
            sandbox.signal(libc::SIGUSR1);
        }
        if let Some(warm) = &self.inner.warm {
            warm.close().await;
        }
        for sandbox in &sandboxes {
            sandbox.wait_done().await;
        }
        // Every keeper it forked is gone.
        if let Some(gvisor) = &self.inner.gvisor {
            gvisor.close_watchdog().await;
        }
        if let Some(oci) = &self.inner.oci {
            oci.close_watchdog().await;
        }
        let zygote = self.inner.zygote.lock().await.take();
        if let Some(zygote) = zygote {
            zygote.stop().await;
        }
        let mut dirs: Vec<PathBuf> = sandboxes.iter().map(|sandbox| sandbox.dir.clone()).collect();
        // Snapshots live as long as the emulator that keeps their records.
        dirs.push(self.inner.config.root_dir.join(SNAPSHOTS_DIR));
        let spares = self.inner.spares.clone();
        let _ = tokio::task::spawn_blocking(move || {
            dirs.iter().for_each(|dir| remove_dir(dir));
            if let Some(spares) = spares {
                spares.clear();
            }
        })
        .await;
        info!(count = sandboxes.len(), "executor shut down");
    }

    /// Forgets a sandbox (killing it if it still runs): its logs and directory go.
    pub async fn remove(&self, id: &str) {
        self.kill(id).await;
        let removed = self.inner.registry.lock_unpoisoned().sandboxes.remove(id);
        if let Some(sandbox) = removed {
            let dir = sandbox.dir.clone();
            let _ = tokio::task::spawn_blocking(move || remove_dir(&dir)).await;
        }
    }

    /// A TCP connection to `port` on a running sandbox's loopback, made in the sandbox's own
    /// network (by its init, in namespaces mode; a network of its own reaches nothing else) or,
    /// for plain processes, on the host's. The caller relays it (the emulator's forwarded
    /// ports). Refused, unreachable or timed-out connections are I/O errors.
    pub async fn connect(&self, id: &str, port: u16) -> Result<std::net::TcpStream, ExecutorError> {
        let sandbox = self.sandbox(id).ok_or_else(|| ExecutorError::UnknownSandbox(id.to_owned()))?;
        let running = sandbox.running().ok_or_else(|| ExecutorError::NotRunning(id.to_owned()))?;
        let socket = match &running.target {
            Target::Namespaces { channel } => channel.connect(port).await?,
            Target::Oci { network } if network.is_own() => {
                let init = running.keeper.pid();
                tokio::task::spawn_blocking(move || oci::connect_in_network_of(init, port))
                    .await
                    .map_err(|error| std::io::Error::other(error.to_string()))??
            }
            Target::Plain { .. } | Target::Oci { .. } => tokio::task::spawn_blocking(move || {
                sys::connect_loopback(port, crate::init_channel::CONNECT_TIMEOUT_MS)
                    .map_err(std::io::Error::from_raw_os_error)
            })
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))??,
        };
        Ok(std::net::TcpStream::from(socket))
    }

    /// Runs a command inside a running sandbox (same namespaces, environment and
    /// working directory as its main command). A command that cannot start gives
    /// a session with a message on stderr and exit code 127, not an error.
    pub async fn exec(&self, id: &str, request: ExecRequest) -> Result<ExecSession, ExecutorError> {
        let sandbox = self.sandbox(id).ok_or_else(|| ExecutorError::UnknownSandbox(id.to_owned()))?;
        let (running, oci_container) = sandbox.reach(request.container.as_deref())?;
        validate_exec(&request)?;
        let Some(program) = request.argv.first() else {
            return Err(ExecutorError::InvalidRequest("argv is empty".into()));
        };
        let context = sandbox.context(request.container.as_deref())?;
        let cwd = match &request.working_dir {
            Some(dir) => files::resolve(dir, context.working_dir)
                .map_err(|error| ExecutorError::InvalidRequest(error.to_string()))?,
            None => context.working_dir.to_owned(),
        };
        let gvisor = oci_container.as_ref().is_some_and(|container| container.handler == crate::RuntimeHandler::Runsc);
        // (In gVisor the helper checks it, in the sandbox's own view.)
        if !gvisor && let Err(error) = files::is_directory(&running.root, &cwd) {
            return Ok(ExecSession::failed(format!(
                "cwsandbox: cannot change to the working directory {cwd}: {error}\n"
            )));
        }
        let mut env = context.env.clone();
        if request.tty {
            env.insert("TERM".into(), "xterm-256color".into());
        }
        env.extend(request.env.clone());
        let (session, tracker) = match &running.target {
            Target::Namespaces { channel } => {
                let command = command_for(&request.argv, &env)?
                    .ok_or_else(|| ExecutorError::InvalidRequest("argv is empty".into()))?;
                let io = if request.tty {
                    let (cols, rows) = request.tty_size.unwrap_or((80, 24));
                    // The terminal comes from the sandbox's own devpts.
                    let master = sys::open_in_root(
                        running.root.as_raw_fd(),
                        c"/dev/pts/ptmx",
                        libc::O_RDWR | libc::O_NOCTTY,
                        0,
                    )?;
                    let (master, slave) = sys::open_pty(Some(master), cols, rows)?;
                    exec::CommandIo::pty(master, slave)
                } else {
                    exec::CommandIo::pipes()?
                };
                let cwd = c_string(cwd)?;
                let ordered = channel.exec(request.tty, context.command_ids, cwd, command, io.command_ends()).await;
                let (exec_id, exit) = match ordered {
                    Ok(ordered) => ordered,
                    Err(SendError::Closed) => return Err(ExecutorError::NotRunning(id.to_owned())),
                    Err(SendError::TooLarge(size)) => {
                        return Err(ExecutorError::InvalidRequest(format!(
                            "the command's arguments and environment take {size} bytes, more than a sandbox's \
                             exec channel carries ({MAX_ORDER_BYTES} bytes at most)"
                        )));
                    }
                    Err(SendError::Io(error)) => return Err(error.into()),
                };
                exec::attach_to_init(io, channel.clone(), exec_id, exit)?
            }
            Target::Plain { group } => {
                let mut command = Command::new(program);
                command.args(&request.argv[1..]).env_clear().envs(&env).kill_on_drop(true);
                let pty_master = if request.tty {
                    let (cols, rows) = request.tty_size.unwrap_or((80, 24));
                    let (master, slave) = sys::open_pty(None, cols, rows)?;
                    command.stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave);
                    Some(master)
                } else {
                    command
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped());
                    None
                };
                let cwd_c = c_string(cwd)?;
                let parent = self.inner.pid;
                let group = *group;
                // SAFETY: the closure runs between fork and exec and only calls the
                // fork-safe code of `child`.
                unsafe {
                    command.pre_exec(move || child::exec_plain(parent, group, &cwd_c));
                }
                let child = match self.inner.spawner.spawn(command).await {
                    Ok(child) => child,
                    Err(error) => {
                        if sandbox.running().is_none() {
                            return Err(ExecutorError::NotRunning(id.to_owned()));
                        }
                        debug!(sandbox = id, %program, %error, "exec could not start");
                        return Ok(ExecSession::failed(start_failure_message(program, &error)));
                    }
                };
                exec::attach(child, pty_master)
            }
            Target::Oci { .. } => {
                let Some(container) = &oci_container else { return Err(ExecutorError::NotRunning(id.to_owned())) };
                let Some(oci) = self.inner.runtime(container.handler) else {
                    return Err(ExecutorError::NotRunning(id.to_owned()));
                };
                // runc's own failure would be its exit code 255 and its message: the shell's
                // 127 is what the process runtime (and a user) expects. (gVisor's helper says
                // it from inside.)
                if !gvisor && !oci::program_exists(&running.root, program, env.get("PATH").map(String::as_str)) {
                    return Ok(ExecSession::failed(format!("cwsandbox: {program}: command not found\n")));
                }
                let user = context.command_ids.unwrap_or(container.user);
                let size = request.tty.then(|| request.tty_size.unwrap_or((80, 24)));
                let files = oci.exec_files(container, &request.argv, &env, &cwd, user, size)?;
                let (command, pty_master) = if let Some((cols, rows)) = size {
                    let (master, slave) = sys::open_pty(None, cols, rows)?;
                    (container.exec_command(&files, Some(slave))?, Some(master))
                } else {
                    (container.exec_command(&files, None)?, None)
                };
                let child = self.inner.spawner.spawn(command).await?;
                exec::attach_runc(child, pty_master, files.pid_file, files.process)
            }
        };
        let mut execs = sandbox.execs.lock_unpoisoned();
        execs.retain(|tracker| !tracker.finished());
        execs.push(tracker);
        Ok(session)
    }

    /// Writes a whole file inside a running sandbox, creating missing parent
    /// directories. Relative paths resolve against the working directory.
    pub async fn write_file(&self, id: &str, path: &str, content: &[u8]) -> Result<(), FileError> {
        self.write_file_in(id, None, path, content).await
    }

    /// [`Executor::write_file`] as container `container` sees it: a relative path resolves
    /// against that container's working directory (all of a sandbox's containers share one root).
    pub async fn write_file_in(
        &self,
        id: &str,
        container: Option<&str>,
        path: &str,
        content: &[u8],
    ) -> Result<(), FileError> {
        let (sandbox, (running, oci)) = self.running_for_files(id, container)?;
        let max = self.inner.config.max_file_bytes;
        if content.len() as u64 > max {
            return Err(FileError::TooLarge { size: content.len() as u64, max });
        }
        let path = files::resolve(path, files_dir(&sandbox, container)?)?;
        if let Some(gvisor) = oci.as_ref().filter(|oci| oci.handler == crate::RuntimeHandler::Runsc) {
            let args = ["write".to_owned(), path];
            return self.gvisor_file(&sandbox, container, gvisor, &args, Some(content.to_vec()), 0).await.map(drop);
        }
        let content = content.to_vec();
        let Some(request) = self.sandbox_file_request(&sandbox, &running, oci, container, FileAccess::Write, &path)?
        else {
            // Plain mode: the host's files, with the emulator's rights (it isolates nothing).
            return self.file_operation(async { Ok(()) }, move |()| files::write(&running.root, &path, &content)).await;
        };
        let inner = self.inner.clone();
        let opened = async move { open_as_sandbox(&inner, &running, &request).await };
        self.file_operation(opened, move |file| files::write_opened(file, &content)).await
    }

    /// How a file helper of `container` opens `path`: with the ids an exec'd command of that
    /// container runs as. `None` for a sandbox without namespaces of its own (plain mode), which
    /// has no helpers.
    fn sandbox_file_request(
        &self,
        sandbox: &Sandbox,
        running: &Running,
        oci: Option<Arc<OciContainer>>,
        container: Option<&str>,
        access: FileAccess,
        path: &str,
    ) -> Result<Option<FileRequest>, FileError> {
        if running.namespaces.is_none() {
            return Ok(None);
        }
        let context = sandbox
            .context(container)
            .map_err(|_| FileError::UnknownContainer(container.unwrap_or_default().into()))?;
        let ids = match &oci {
            Some(container) => Some(context.command_ids.unwrap_or(container.user)),
            None => context.command_ids,
        };
        Ok(Some(FileRequest { access, path: path.to_owned(), ids }))
    }

    /// Runs a file operation: `open` (a file helper's, or nothing), then `operation` on what it
    /// gave, on a blocking thread; at most `max_file_operations` at once and within
    /// `file_timeout` (waiting for a turn included). A timed-out operation's thread keeps its
    /// turn until it really ends, so stuck operations cannot pile up threads; a helper still
    /// opening is killed.
    async fn file_operation<O: Send + 'static, T: Send + 'static>(
        &self,
        open: impl std::future::Future<Output = Result<O, FileError>>,
        operation: impl FnOnce(O) -> Result<T, FileError> + Send + 'static,
    ) -> Result<T, FileError> {
        let timeout = self.inner.config.file_timeout;
        let limit = self.inner.config.max_file_operations;
        let operations = self.inner.file_operations.clone();
        let work = async move {
            let permit =
                operations.acquire_owned().await.map_err(|_| FileError::Io("the executor is shut down".into()))?;
            let opened = open.await?;
            tokio::task::spawn_blocking(move || {
                let result = operation(opened);
                drop(permit);
                result
            })
            .await
            .map_err(|error| FileError::Io(error.to_string()))?
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| FileError::TimedOut { after: timeout, limit })?
    }

    /// Reads a whole file inside a running sandbox.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, FileError> {
        self.read_file_in(id, None, path).await
    }

    /// [`Executor::read_file`] as container `container` sees it (see [`Executor::write_file_in`]).
    pub async fn read_file_in(&self, id: &str, container: Option<&str>, path: &str) -> Result<Vec<u8>, FileError> {
        let (sandbox, (running, oci)) = self.running_for_files(id, container)?;
        let max = self.inner.config.max_file_bytes;
        let path = files::resolve(path, files_dir(&sandbox, container)?)?;
        if let Some(gvisor) = oci.as_ref().filter(|oci| oci.handler == crate::RuntimeHandler::Runsc) {
            let args = ["read".to_owned(), path, max.to_string()];
            return self.gvisor_file(&sandbox, container, gvisor, &args, None, max).await;
        }
        let Some(request) = self.sandbox_file_request(&sandbox, &running, oci, container, FileAccess::Read, &path)?
        else {
            // Plain mode: the host's files, with the emulator's rights (it isolates nothing).
            return self.file_operation(async { Ok(()) }, move |()| files::read(&running.root, &path, max)).await;
        };
        let inner = self.inner.clone();
        let opened = async move { open_as_sandbox(&inner, &running, &request).await };
        self.file_operation(opened, move |file| files::read_opened(file, max)).await
    }

    /// A file operation in a gVisor sandbox: the helper run (`args`) through `runsc exec` as an
    /// exec'd command of `container` runs, fed `input`; its stdout (at most `max` bytes and one),
    /// or its failure as a file error. Counted and timed as every file operation
    /// ([`Executor::file_operation`]; a timed-out run is killed as its command is dropped).
    async fn gvisor_file(
        &self,
        sandbox: &Sandbox,
        container: Option<&str>,
        oci_container: &OciContainer,
        args: &[String],
        input: Option<Vec<u8>>,
        max: u64,
    ) -> Result<Vec<u8>, FileError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Some(runtime) = self.inner.runtime(crate::RuntimeHandler::Runsc) else {
            return Err(FileError::SandboxNotRunning);
        };
        let context = sandbox
            .context(container)
            .map_err(|_| FileError::UnknownContainer(container.unwrap_or_default().into()))?;
        let user = context.command_ids.unwrap_or(oci_container.user);
        let files = runtime.helper_files(oci_container, args, user).map_err(|error| FileError::from_io(&error))?;
        let mut command = oci_container.exec_command(&files, None).map_err(|error| FileError::from_io(&error))?;
        if input.is_none() {
            command.stdin(std::process::Stdio::null());
        }
        let spawner = &self.inner.spawner;
        let run = async move {
            let mut child = spawner.spawn(command).await.map_err(|error| FileError::from_io(&error))?;
            let (mut stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
            let feed = async move {
                if let (Some(stdin), Some(input)) = (stdin.as_mut(), input) {
                    // A helper that failed early stops reading: its exit says why.
                    let _ = stdin.write_all(&input).await;
                }
                drop(stdin);
            };
            let read_out = async move {
                let mut out = Vec::new();
                if let Some(stdout) = stdout {
                    let _ = stdout.take(max.saturating_add(1)).read_to_end(&mut out).await;
                }
                out
            };
            let read_err = async move {
                let mut err = Vec::new();
                if let Some(stderr) = stderr {
                    let _ = stderr.take(64 << 10).read_to_end(&mut err).await;
                }
                err
            };
            let ((), out, err, status) = tokio::join!(feed, read_out, read_err, child.wait());
            let status = status.map_err(|error| FileError::from_io(&error))?;
            Ok((crate::exec::exit_code(&status), out, String::from_utf8_lossy(&err).into_owned()))
        };
        let outcome = self.file_operation(run, move |(code, out, err)| gvisor_file_outcome(code, out, &err, max)).await;
        let _ = std::fs::remove_file(&files.process);
        let _ = std::fs::remove_file(&files.pid_file);
        outcome
    }

    /// The sandbox, and what reaches `container`'s files ([`Sandbox::reach`]).
    fn running_for_files(&self, id: &str, container: Option<&str>) -> Result<(Arc<Sandbox>, Reached), FileError> {
        let sandbox = self.sandbox(id).ok_or(FileError::SandboxNotRunning)?;
        let reached = sandbox.reach(container).map_err(|error| match error {
            ExecutorError::UnknownContainer { container, .. } => FileError::UnknownContainer(container),
            ended @ ExecutorError::ContainerEnded { .. } => FileError::ContainerEnded(ended.to_string()),
            _ => FileError::SandboxNotRunning,
        })?;
        Ok((sandbox, reached))
    }

    /// The main command's output (stdout and stderr together) of the sandbox's
    /// latest start; still readable after it stopped, until `remove`.
    pub fn logs(&self, id: &str) -> Result<LogReader, ExecutorError> {
        self.container_logs(id, None)
    }

    /// The output of one of the sandbox's containers: a sidecar's command, or the main
    /// command's (`None`, or the main container's name).
    pub fn container_logs(&self, id: &str, container: Option<&str>) -> Result<LogReader, ExecutorError> {
        let sandbox = self.sandbox(id).ok_or_else(|| ExecutorError::UnknownSandbox(id.to_owned()))?;
        let logs = match sandbox.sidecar(container)? {
            None => &sandbox.logs,
            Some(sidecar) => &sidecar.logs,
        };
        Ok(LogReader::new(logs.clone()))
    }

    /// How a sidecar's command ended (its code, or 128+N after signal N), once it has; `None`
    /// while it runs, for a container without a command, or an unknown one.
    pub fn sidecar_exit_code(&self, id: &str, container: &str) -> Option<i32> {
        let sandbox = self.sandbox(id)?;
        let sidecar = sandbox.sidecar(Some(container)).ok().flatten()?;
        sidecar.exit_code.get().copied()
    }
}

/// What a run of the gVisor helper's `read` or `write` says (`gvisor-helper/main.rs`).
fn gvisor_file_outcome(code: i32, out: Vec<u8>, err: &str, max: u64) -> Result<Vec<u8>, FileError> {
    let said = |word: &str| {
        err.lines().find_map(|line| line.strip_prefix(word)).and_then(|value| value.trim().parse::<u64>().ok())
    };
    match code {
        0 if out.len() as u64 > max && max > 0 => Err(FileError::TooLarge { size: out.len() as u64, max }),
        0 => Ok(out),
        3 => match said("errno ").and_then(|errno| i32::try_from(errno).ok()) {
            Some(errno) => Err(FileError::from_io(&std::io::Error::from_raw_os_error(errno))),
            None => Err(FileError::Io(err.trim().to_owned())),
        },
        4 => Err(files::not_regular(said("mode ").and_then(|mode| u32::try_from(mode).ok()))),
        5 => Err(FileError::TooLarge { size: said("size ").unwrap_or(max.saturating_add(1)), max }),
        // runsc's own failure (the sandbox ending, say): its message.
        _ => Err(FileError::Io(format!("the gVisor helper failed ({code}): {}", err.trim()))),
    }
}

/// Opens a file of a running sandbox through a file helper, as its processes would.
async fn open_as_sandbox(inner: &Inner, running: &Running, request: &FileRequest) -> Result<OwnedFd, FileError> {
    let Some(namespaces) = &running.namespaces else {
        return Err(FileError::Io("the sandbox has no namespaces to open its files in".into()));
    };
    let zygote = keeper::zygote(inner)
        .await
        .map_err(|error| FileError::Io(format!("cannot start the zygote for the sandbox's file helper: {error}")))?;
    file_helper::open(&zygote, &running.root, namespaces, request).await
}

/// Releases a start claim when start ends, whatever the outcome.
struct Claim {
    inner: Arc<Inner>,
    id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.inner.registry.lock_unpoisoned().starting.remove(&self.id);
    }
}

/// Where a started sandbox's directories are.
struct Directories {
    dir: PathBuf,
    /// The main command's working directory, as the sandbox sees it.
    working_dir: String,
    /// The sidecars' working directories, in the order of the spec's sidecars.
    sidecar_dirs: Vec<String>,
}

/// A started sandbox's keeper and what reaches it, and whether its main command runs.
struct Started {
    keeper: Keeper,
    /// `None`: an image sandbox whose command could not start (nothing runs).
    running: Option<Running>,
    command_runs: bool,
    oci: Option<OciContainer>,
    /// An image sandbox's sidecars, started with it (`None`: made by the registration).
    sidecars: Option<Vec<Arc<SidecarContainer>>>,
    /// A main command that waits for its go until what it waits for holds of the sidecars
    /// (Compose `depends_on` without images): the registration starts the sidecars in order,
    /// then lets it run.
    held: Option<HeldCommand>,
}

/// A main command whose go is not sent yet.
struct HeldCommand {
    go: std::io::PipeWriter,
    started: std::io::PipeReader,
}

impl HeldCommand {
    /// Lets the command run; whether it exec'd. If it cannot be told, the sandbox's processes
    /// are gone already, which the keeper's watcher reports.
    async fn release(self) -> bool {
        let HeldCommand { mut go, started } = self;
        {
            use std::io::Write;
            let _ = go.write_all(b"g");
        }
        drop(go);
        wait_for_exec(started).await
    }
}

/// What became of an activation.
enum Activated {
    Started(Box<ActivatedSandbox>),
    Failed(ExecutorError),
    Unusable,
}

/// A warm sandbox told its command, which it is starting.
struct ActivatedSandbox {
    working_dir: String,
    sidecar_dirs: Vec<String>,
    keeper: Keeper,
    running: Running,
    /// Closes when the main command has exec'd (a byte first if it could not).
    started: std::io::PipeReader,
}

/// A command line (the main command's, or an exec'd one's), as `execve` takes it, with the PATH
/// search done against `env` (`None` for an empty one: the main command's idle process).
/// Forks a keeper that builds `ns` (none: a plain process group) and runs `program` (none: an
/// idle process) in `working_dir`, lets the command go once the handles on it are held, and
/// waits until it has exec'd: the keeper, the handles, and whether the command runs (one that
/// cannot be exec'd has exited 127 by then).
async fn start_command(
    inner: &Inner,
    id: &str,
    ns: Option<crate::sandbox_plan::NsPlan>,
    working_dir: &str,
    program: Option<Program>,
) -> Result<(Keeper, Running, bool), ExecutorError> {
    let (keeper, running, go, started) = spawn_command(inner, id, ns, working_dir, program).await?;
    let runs = HeldCommand { go, started }.release().await;
    Ok((keeper, running, runs))
}

/// Makes a sandbox's keeper whose command waits for its go: the pipe to send it on, and the one
/// that closes once the command has exec'd.
async fn spawn_command(
    inner: &Inner,
    id: &str,
    ns: Option<crate::sandbox_plan::NsPlan>,
    working_dir: &str,
    program: Option<Program>,
) -> Result<(Keeper, Running, std::io::PipeWriter, std::io::PipeReader), ExecutorError> {
    let cwd = c_string(working_dir.to_owned())?;
    let StartedKeeper { keeper, running, go, started } = start_keeper(inner, id, |pipes| InitPlan {
        parent: inner.pid,
        report_fd: pipes.report_fd,
        go_fd: pipes.go_fd,
        started_fd: pipes.started_fd,
        control_fd: pipes.control_fd,
        ns,
        self_exe: inner.self_exe.as_raw_fd(),
        probe: false,
        warm: false,
        idle: false,
        cwd,
        cwd_message: main_command::cwd_message(working_dir),
        program,
    })
    .await?;
    Ok((keeper, running, go, started))
}

/// Where a Pod's names resolve to its loopback (a Compose file's services), every container
/// gets the Pod's `/etc/hosts` as a mounted file (laid over the host's read-only `/etc`), unless
/// it mounts one of its own.
fn add_pod_hosts_file(spec: &mut LaunchSpec) {
    if spec.host_aliases.is_empty() {
        return;
    }
    let hosts = crate::MountedFile {
        path: "/etc/hosts".to_owned(),
        content: image::pod_hosts_file(&spec.hostname, &spec.host_aliases).into_bytes(),
    };
    let files = std::iter::once(&mut spec.files).chain(spec.sidecars.iter_mut().map(|sidecar| &mut sidecar.files));
    for files in files {
        if !files.iter().any(|file| file.path == hosts.path) {
            files.push(hosts.clone());
        }
    }
}

/// Whether any container of a sandbox waits for another before it starts.
pub(super) fn has_start_conditions(spec: &LaunchSpec) -> bool {
    !spec.after.is_empty() || spec.sidecars.iter().any(|sidecar| !sidecar.after.is_empty())
}

fn command_for(argv: &[String], env: &BTreeMap<String, String>) -> Result<Option<MainCommand>, ExecutorError> {
    let Some(program) = argv.first() else { return Ok(None) };
    Ok(Some(MainCommand {
        candidates: program_candidates(program, env.get("PATH").map(String::as_str))
            .into_iter()
            .map(c_string)
            .collect::<Result<_, _>>()?,
        argv: argv.iter().map(|arg| c_string(arg.clone())).collect::<Result<_, _>>()?,
        envp: env.iter().map(|(key, value)| c_string(format!("{key}={value}"))).collect::<Result<_, _>>()?,
        display: program.clone(),
    }))
}

fn start_failure_message(program: &str, error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => format!("cwsandbox: {program}: command not found\n"),
        std::io::ErrorKind::PermissionDenied => {
            format!("cwsandbox: {program}: permission denied\n")
        }
        _ => format!("cwsandbox: cannot execute {program}: {error}\n"),
    }
}

/// Whether a tmpfs can be mounted for a memory-backed volume: tried once, on a directory of the
/// executor's root (named as no sandbox can be), as the kernel alone can say.
fn probe_memory_volumes(mode: Mode, root_dir: &Path) -> Result<(), String> {
    if mode == Mode::Plain {
        return Err("plain processes have no root of their own to mount a volume in".to_owned());
    }
    let probe = root_dir.join(format!(".tmpfs-probe@{}", std::process::id()));
    std::fs::create_dir_all(&probe).map_err(|error| format!("cannot create {}: {error}", probe.display()))?;
    let mounted = sys::mount_tmpfs(&probe, 4096, None);
    if mounted.is_ok() {
        let _ = sys::unmount_detached(&probe);
    }
    let _ = std::fs::remove_dir(&probe);
    mounted.map_err(|error| {
        format!("a tmpfs cannot be mounted here ({error}); memory-backed volumes need an emulator run as root")
    })
}

fn setup_error(id: &str, message: String) -> ExecutorError {
    ExecutorError::Setup { id: id.to_owned(), message }
}

/// The working directory a file path of `container` resolves against.
fn files_dir<'a>(sandbox: &'a Sandbox, container: Option<&str>) -> Result<&'a str, FileError> {
    sandbox
        .context(container)
        .map(|context| context.working_dir)
        .map_err(|_| FileError::UnknownContainer(container.unwrap_or_default().to_owned()))
}

/// Every container's volume mounts, the main one's first: a volume only a sidecar mounts may
/// start from a snapshot too.
fn every_volume_mount(spec: &LaunchSpec) -> Vec<crate::VolumeMount> {
    spec.volume_mounts.iter().chain(spec.sidecars.iter().flat_map(|sidecar| &sidecar.volume_mounts)).cloned().collect()
}

/// The volumes that start from a snapshot, each once, with the snapshot's directory under
/// `root_dir`. Two mounts of one volume naming two snapshots cannot both be honoured.
fn restores_of(root_dir: &Path, mounts: &[crate::VolumeMount]) -> Result<Vec<(String, PathBuf)>, ExecutorError> {
    let mut restores: Vec<(String, PathBuf)> = Vec::new();
    for mount in mounts {
        let Some(snapshot) = &mount.restore_from else { continue };
        let dir = snapshots::snapshot_dir(root_dir, snapshot)?;
        match restores.iter().find(|(volume, _)| *volume == mount.volume) {
            Some((_, known)) if *known == dir => {}
            Some(_) => {
                return Err(ExecutorError::InvalidRequest(format!(
                    "volume {:?} is asked to start from two snapshots",
                    mount.volume
                )));
            }
            None => restores.push((mount.volume.clone(), dir)),
        }
    }
    Ok(restores)
}
