//! The driver: the simulated world behind a sharded reader-writer lock, moved forward by the
//! clock.
//!
//! - Every command goes through [`Driver::with_world`], which first lets the world catch up with
//!   the clock (`tick`), then runs the command, then hands the world's effects to the pump.
//! - Reads of sandboxes, Pods and jobs go through [`Driver::read_world`]: while no timer is due,
//!   catching up would change none of them, so they share the lock and run side by side.
//! - A ticker task sleeps until the world's next timer (`next_wakeup`) and ticks it, so timers
//!   fire even when nobody asks (a frozen clock only moves when advanced).
//! - The effects pump hands `StartPod`/`StopPod`/`KillPod`, in order, to the attached
//!   [`SandboxRuntime`]; without one it only logs them.
//! - Main-process exits reported by the runtime go back into the world.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use cwsandbox_sim::SimResult;
use cwsandbox_sim::config::Values;
use cwsandbox_sim::data_target::{AwaitsHostStart, DataTarget, SandboxDataRefusal, SandboxNeeds};
use cwsandbox_sim::ids::{SeededIds, SharedStr};
use cwsandbox_sim::k8s::{PodOwner, PodPhase};
use cwsandbox_sim::sandbox::{HostWait, SandboxView, sandbox_not_found};
use cwsandbox_sim::time::Clock;
use cwsandbox_sim::world::{Effect, ImageToPull, World};
use cwsandbox_sync::MutexUnpoisoned;
use futures::StreamExt;
use tokio::sync::{Notify, mpsc, watch};

use crate::clock::EmulatorClock;
use crate::runtime::{RuntimeError, SandboxRuntime};

/// How long a reader of a sandbox waits for the host to start its containers (the world shows
/// the sandbox CREATING until the runtime reports the start) before answering anyway.
pub const RUNTIME_CATCH_UP: Duration = Duration::from_secs(30);
/// How long a reader waits for a Pod's image pull in progress: a cached image, or a registry
/// `auto` finds unreachable, settles within it; a long pull answers CREATING meanwhile
/// (`ContainerCreating`), as the cloud does while its kubelet pulls.
pub const PULL_CATCH_UP: Duration = Duration::from_secs(5);

/// How long a reader of a TERMINATING sandbox waits for the host to end its processes (SIGTERM
/// honoured, or the kill after the grace) before answering anyway: long enough for a client that
/// polls right after the delete (the published client's first Get follows it at once) to find
/// the end instead of sleeping a polling round, short enough that a process ignoring SIGTERM for
/// its whole grace does not hold each poll long.
pub const STOP_CATCH_UP: Duration = Duration::from_secs(1);

/// Longest the ticker sleeps without looking at the world again.
const MAX_IDLE: Duration = Duration::from_secs(60);

/// What the host's runtime does, as the world needs to know it.
#[derive(Debug, Clone)]
pub struct HostRuntime {
    /// A runtime runs Pods' commands: a started Pod shows Running only once the runtime reports
    /// its containers started.
    pub confirms_starts: bool,
    /// It runs images: admitted Pods wait for it to pull theirs.
    pub pulls_images: bool,
    /// It enforces the containers' CPU and memory limits; when not, each started Pod with
    /// limits gets a Warning Event.
    pub limits_enforced: bool,
    /// Why it cannot make a memory-backed scratch volume (a tmpfs), where it cannot: such
    /// volumes are then refused by name at create.
    pub memory_volumes_refused: Option<String>,
    /// The named RuntimeClasses its Nodes have (`None`: no runtime runs Pods; empty: only the
    /// node's default runtime): a sandbox asking for another is refused at create.
    pub runtime_classes: Option<Vec<String>>,
    /// The RuntimeClasses whose Pods it runs with one container only: a sandbox of several is
    /// refused by name at create.
    pub one_container_runtime_classes: Vec<String>,
    /// What it offers for sandbox networks.
    pub pod_network: cwsandbox_sim::world::PodNetworkOffer,
}

impl Default for HostRuntime {
    /// No runtime: nothing runs, so nothing is refused for want of one.
    fn default() -> HostRuntime {
        HostRuntime {
            confirms_starts: false,
            pulls_images: false,
            limits_enforced: true,
            memory_volumes_refused: None,
            runtime_classes: None,
            one_container_runtime_classes: Vec::new(),
            pod_network: cwsandbox_sim::world::PodNetworkOffer::Unavailable(
                "no runtime runs this emulator's sandboxes".to_owned(),
            ),
        }
    }
}

/// The world, its clock and the channels around it.
pub struct Driver {
    /// Changed only by simulation commands, which either finish or leave it unchanged: a panic in
    /// a handler holding the lock leaves a usable world (so a poisoned lock is taken as it is, the
    /// rule of `cwsandbox-sync`). Commands take it for writing, reads ([`Driver::read_world`]) for
    /// reading. Sharded (crossbeam's `ShardedLock`): a reader takes only its own shard, so reads on
    /// different cores share no cache line and do not slow each other down, as they did on one
    /// lock word (measured: `benches/world_reads.rs`); a command takes every shard.
    world: ShardedLock<World>,
    clock: EmulatorClock,
    wake: Notify,
    /// The world's effects, in the order it produced them, on their way to the runtime.
    pump: mpsc::UnboundedSender<Effect>,
    /// The values the emulator started with (what a reset goes back to).
    initial_values: Values,
    /// The seed of the first world's identifiers.
    seed: u64,
    /// How many resets happened; each fresh world draws identifiers from its own seed.
    generation: AtomicU64,
    /// Effects handed to the pump so far.
    pumped: AtomicU64,
    /// Effects the pump has applied so far (the runtime's call returned).
    applied: watch::Sender<u64>,
    /// Counts changes of what the kube facade and the dashboard show; watches wait on it.
    changes: watch::Sender<u64>,
    /// The fingerprint of the visible objects at the last change.
    visible: AtomicU64,
    /// What the runtime does (kept across resets).
    host_runtime: std::sync::Mutex<HostRuntime>,
    /// Every sandbox's view as the last command left it, read by id without the world's lock
    /// ([`Driver::sandbox_view`]). Each command refreshes only the sandboxes it touched, while it
    /// still holds the lock, so a reader never sees a view older than an answer already given.
    views: papaya::HashMap<SharedStr, Arc<SandboxView>>,
    /// When the world's next timer is due (milliseconds of the clock; `i64::MAX`: none), as the
    /// last command left it: a reader of `views` past it runs a tick first, as
    /// [`Driver::read_world`] does.
    next_timer: AtomicI64,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("clock", &self.clock).finish_non_exhaustive()
    }
}

/// The receiving end of the effects pump, consumed by [`Driver::spawn_tasks`].
#[derive(Debug)]
pub struct PumpReceiver(mpsc::UnboundedReceiver<Effect>);

impl Driver {
    /// A world built from `values` on `clock`, with identifiers from `seed`.
    pub fn new(values: Values, clock: EmulatorClock, seed: u64) -> SimResult<(Arc<Driver>, PumpReceiver)> {
        let mut world = World::new(values.clone(), Box::new(clock.clone()), Box::new(SeededIds::new(seed)))?;
        // Every sandbox counts as touched until the first views are published (below).
        world.keep_touched_sandboxes();
        let (pump, receiver) = mpsc::unbounded_channel();
        let driver = Arc::new(Driver {
            world: ShardedLock::new(world),
            clock,
            wake: Notify::new(),
            pump,
            initial_values: values,
            seed,
            generation: AtomicU64::new(0),
            pumped: AtomicU64::new(0),
            applied: watch::Sender::new(0),
            changes: watch::Sender::new(0),
            visible: AtomicU64::new(0),
            host_runtime: std::sync::Mutex::new(HostRuntime::default()),
            views: papaya::HashMap::new(),
            next_timer: AtomicI64::new(i64::MAX),
        });
        // Effects of building the world (none today) go out like any others, and every sandbox's
        // view is published.
        driver.with_world(|_| ());
        Ok((driver, PumpReceiver(receiver)))
    }

    /// Tells the world what the runtime does, now and in every world a reset makes.
    pub fn set_host_runtime(&self, runtime: HostRuntime) {
        *self.host_runtime.lock_unpoisoned() = runtime;
        self.with_world(|world| self.configure_images(world));
    }

    /// Applies [`Driver::set_host_runtime`]'s settings to `world`.
    fn configure_images(&self, world: &mut World) {
        let runtime = self.host_runtime.lock_unpoisoned().clone();
        world.set_host_confirms_starts(runtime.confirms_starts);
        world.set_pulls_images(runtime.pulls_images);
        world.set_limits_enforced(runtime.limits_enforced);
        world.set_memory_volumes_refused(runtime.memory_volumes_refused);
        world.set_runtime_classes(runtime.runtime_classes);
        world.set_one_container_runtime_classes(runtime.one_container_runtime_classes);
        world.set_pod_network(runtime.pod_network);
    }

    /// The clock.
    pub fn clock(&self) -> &EmulatorClock {
        &self.clock
    }

    /// Runs `command` on the world after catching it up with the clock, then pumps its effects
    /// and lets the ticker recompute its next wake-up.
    pub fn with_world<R>(&self, command: impl FnOnce(&mut World) -> R) -> R {
        let result = {
            let mut world = self.world_for_command();
            world.tick();
            let result = command(&mut world);
            self.after_change(&mut world);
            result
        };
        self.wake.notify_one();
        result
    }

    fn world_for_command(&self) -> ShardedLockWriteGuard<'_, World> {
        self.world.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn world_for_reading(&self) -> ShardedLockReadGuard<'_, World> {
        self.world.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `query` on the world as [`Driver::with_world`] would, without the write lock when it
    /// can: while no timer is due, catching the world up with the clock would fire nothing, and
    /// every command settles the world before it returns, so sandboxes, Pods, jobs and their
    /// Events read now are what a command would read. Such reads share the lock, so they neither
    /// wait for each other nor tick the world. Once a timer is due the query runs as a command
    /// (the tick fires the timer first), exactly as before.
    ///
    /// Not for answers that depend on the world's own reading of the clock or on runners'
    /// heartbeats, which only a tick moves.
    pub fn read_world<R>(&self, query: impl FnOnce(&World) -> R) -> R {
        {
            let world = self.world_for_reading();
            let now = self.clock.now();
            if world.next_wakeup().is_none_or(|at| at > now) {
                return query(&world);
            }
        }
        self.with_world(|world| query(world))
    }

    /// Catches the world up with the clock (the ticker's step; it does not wake the ticker).
    fn tick(&self) {
        let mut world = self.world_for_command();
        world.tick();
        self.after_change(&mut world);
    }

    /// What follows every change of the world, under its lock: its effects go to the pump,
    /// watchers and the log hear of it, and the views of the sandboxes it touched are published.
    fn after_change(&self, world: &mut World) {
        self.pump_effects(world);
        self.note_changes(world);
        log_sandbox_changes(world);
        self.publish_views(world);
    }

    /// Refreshes the published views of the sandboxes the world touched since the last call, and
    /// when its next timer is due.
    fn publish_views(&self, world: &mut World) {
        let touched = world.take_touched_sandboxes();
        self.next_timer.store(world.next_wakeup().map_or(i64::MAX, |at| at.millis()), Ordering::SeqCst);
        if touched.is_empty() && !cfg!(debug_assertions) {
            return;
        }
        let views = self.views.pin();
        for id in touched {
            match world.sandbox(&id) {
                Some(view) => {
                    views.insert(id, Arc::new(view));
                }
                None => {
                    views.remove(&id);
                }
            }
        }
        if cfg!(debug_assertions) {
            check_published_views(world, &views);
        }
    }

    /// A sandbox by id as a command would read it (no organization check), without taking the
    /// world's lock or waiting for a command in progress: the view the last command published.
    /// Once a timer is due a tick runs first, so time-driven changes (a lifetime's end, a
    /// retention) are read as [`Driver::read_world`] reads them.
    pub fn sandbox_view(&self, id: &str) -> Option<Arc<SandboxView>> {
        if self.next_timer.load(Ordering::SeqCst) <= self.clock.now().millis() {
            self.with_world(|_| ());
        }
        self.views.pin().get(id).cloned()
    }

    /// [`Driver::sandbox_view`] for a caller of organization `org`: another organization's
    /// sandbox is not found, as `World::get_sandbox` says.
    pub fn organization_sandbox(&self, org: &str, id: &str) -> SimResult<Arc<SandboxView>> {
        self.sandbox_view(id).filter(|view| view.owner.org == org).ok_or_else(|| sandbox_not_found(id))
    }

    /// A receiver that sees a new value whenever an object the kube facade shows may have changed
    /// (never for reads alone, so a watch re-reading the world does not wake itself).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn note_changes(&self, world: &World) {
        use std::hash::{Hash, Hasher};
        let cluster = &world.cluster;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (cluster.resource_version, cluster.event_sequence, cluster.namespaces.len(), cluster.config_maps.len())
            .hash(&mut hasher);
        for map in cluster.config_maps.values() {
            map.data.len().hash(&mut hasher);
        }
        // What the dashboard shows beside the Kubernetes objects: Slurm's jobs and nodes, and
        // the runners' policies (a policy edit changes no Pod until a sandbox is made).
        let job_steps: u64 = world.slurm.transitions.iter().map(|(_, count)| count).sum();
        job_steps.hash(&mut hasher);
        for node in &world.slurm.nodes {
            (node.alloc_cpus, node.drain.is_some()).hash(&mut hasher);
        }
        for org in world.runners.organizations() {
            for runner in world.runners.iter(org) {
                runner.etag.hash(&mut hasher);
                runner.install_status.hash(&mut hasher);
            }
        }
        let fingerprint = hasher.finish();
        if self.visible.swap(fingerprint, Ordering::SeqCst) != fingerprint {
            self.changes.send_modify(|count| *count += 1);
        }
    }

    /// Tells the ticker the clock moved (freeze, advance).
    pub fn clock_changed(&self) {
        self.wake.notify_one();
    }

    /// Replaces the world with a fresh one built from the values the emulator started with, and
    /// kills (through the pump, in order) the processes of every Pod of the old world that runs.
    /// The clock is kept. The fresh world's identifiers come from a seed derived from the first
    /// one and the number of resets, so a replay is still deterministic while a late exit report of
    /// an old Pod can never name a new one. Returns how many Pods were stopped.
    pub fn reset(&self) -> SimResult<usize> {
        self.reset_with(|_| Ok(()))
    }

    /// [`Driver::reset`], with `rebuild` run on the fresh world before it replaces the old one
    /// (tenants admitted again).
    pub fn reset_with(&self, rebuild: impl FnOnce(&mut World) -> SimResult<()>) -> SimResult<usize> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let seed = self.seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut fresh =
            World::new(self.initial_values.clone(), Box::new(self.clock.clone()), Box::new(SeededIds::new(seed)))?;
        self.configure_images(&mut fresh);
        rebuild(&mut fresh)?;
        let stopped = {
            let mut world = self.world_for_command();
            let old = std::mem::replace(&mut *world, fresh);
            let running = old
                .cluster
                .pods_iter()
                .filter(|pod| pod.phase == PodPhase::Running)
                .filter(|pod| !matches!(pod.owner, PodOwner::Slurmd { .. } | PodOwner::Scheduler));
            let mut stopped = 0;
            for pod in running {
                let _ = self.pump.send(Effect::KillPod { pod_uid: pod.uid.clone() });
                stopped += 1;
            }
            // Every sandbox of the fresh world counts as touched, so publishing the views puts
            // each one out; the old world's views go first.
            world.keep_touched_sandboxes();
            self.pump_effects(&mut world);
            self.note_changes(&world);
            self.views.pin().clear();
            self.publish_views(&mut world);
            stopped
        };
        tracing::info!(stopped, generation, "world reset to the configured values");
        self.wake.notify_one();
        Ok(stopped)
    }

    fn pump_effects(&self, world: &mut World) {
        for effect in world.take_effects() {
            // The receiver lives as long as the emulator; after shutdown effects have nowhere to go.
            if self.pump.send(effect).is_ok() {
                self.pumped.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Waits while the world says the Pod waits on its host ([`World::awaits_host`]): for the
    /// pull of its images at most [`PULL_CATCH_UP`] (a long pull answers CREATING meanwhile, as
    /// the cloud does while its kubelet pulls), for the start of its containers at most
    /// [`RUNTIME_CATCH_UP`], for the end of its processes at most [`STOP_CATCH_UP`], each from
    /// when it began; a reader then finds the sandbox RUNNING, or FAILED for a command that cannot
    /// run, or ended after a delete, rather than sleeping a polling round. Says whether it had to
    /// wait.
    pub async fn host_settled(&self, pod_uid: &str) -> bool {
        let mut changes = self.changes();
        let mut waiting = None;
        let mut deadline = tokio::time::Instant::now();
        loop {
            let now_waiting = self.read_world(|world| world.awaits_host(pod_uid));
            let Some(stage) = now_waiting else { return waiting.is_some() };
            if waiting != Some(stage) {
                let allowance = match stage {
                    HostWait::Pull => PULL_CATCH_UP,
                    HostWait::Start => RUNTIME_CATCH_UP,
                    HostWait::Stop => STOP_CATCH_UP,
                };
                deadline = tokio::time::Instant::now() + allowance;
                waiting = Some(stage);
            }
            // Out of time, or the emulator is stopping (the sender is gone).
            if !matches!(tokio::time::timeout_at(deadline, changes.changed()).await, Ok(Ok(()))) {
                return true;
            }
        }
    }

    /// The answer of a data-target query (the published view's [`SandboxView::data_target`],
    /// the world's `pod_data_target`), asked again once the host has started a Pod the first
    /// answer was waiting for, as GetSandbox waits: an exec right after a create finds its
    /// sandbox running.
    pub async fn data_target<R: AwaitsHostStart>(
        &self,
        query: impl Fn() -> Result<DataTarget, R>,
    ) -> Result<DataTarget, R> {
        let found = query();
        let starting = found.as_ref().err().and_then(AwaitsHostStart::awaits_start_of).map(str::to_owned);
        match starting {
            Some(pod_uid) if self.host_settled(&pod_uid).await => query(),
            _ => found,
        }
    }

    /// The sandbox API's data target (the sandbox of `org`, the container named `asked`), from
    /// the published view: [`Driver::data_target`] without the world's lock.
    pub async fn sandbox_data_target(
        &self,
        org: &str,
        id: &str,
        asked: &str,
        needs: SandboxNeeds,
    ) -> Result<DataTarget, SandboxDataRefusal> {
        self.data_target(|| {
            self.organization_sandbox(org, id).map_err(SandboxDataRefusal::NoSandbox)?.data_target(asked, needs)
        })
        .await
    }

    /// Waits until the runtime has applied every effect the world produced so far, or `limit`
    /// passes; says which. For tests that check what the host did (a process killed, a
    /// directory removed) after the world decided it; readers of the API wait through the world
    /// instead ([`Driver::host_settled`]).
    pub async fn effects_applied(&self, limit: Duration) -> bool {
        let produced = self.pumped.load(Ordering::SeqCst);
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(limit, applied.wait_for(|applied| *applied >= produced))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    /// Starts the ticker, the effects pump and (with a runtime) the exit listener. They stop when
    /// `shutdown` turns true.
    pub fn spawn_tasks(
        self: &Arc<Self>,
        pump: PumpReceiver,
        runtime: Option<Arc<dyn SandboxRuntime>>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(Arc::clone(self).run_ticker(shutdown.clone())));
        tasks.push(tokio::spawn(run_pump(Arc::clone(self), pump.0, runtime.clone())));
        if let Some(runtime) = runtime {
            let driver = Arc::clone(self);
            let mut shutdown = shutdown;
            tasks.push(tokio::spawn(async move {
                let mut exits = runtime.exits();
                loop {
                    tokio::select! {
                        exit = exits.next() => match exit {
                            Some(exit) => {
                                if exit.container.is_none() {
                                    let sandbox = sandbox_or_pod(&driver, &exit.pod_uid);
                                    let exit_code = exit.exit_code;
                                    if exit.oom_killed {
                                        tracing::info!(sandbox_id = %sandbox, exit_code, "main process OOM-killed (its memory limit)");
                                    } else {
                                        tracing::info!(sandbox_id = %sandbox, exit_code, "main process exited");
                                    }
                                }
                                driver.with_world(|world| world.host_reported_exit(&exit));
                            }
                            None => break,
                        },
                        _ = shutdown.changed() => break,
                    }
                }
            }));
        }
        tasks
    }

    async fn run_ticker(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let next = self.world_for_reading().next_wakeup();
            let sleep_for = next.and_then(|at| self.clock.real_time_until(at)).unwrap_or(MAX_IDLE).min(MAX_IDLE);
            tokio::select! {
                _ = tokio::time::sleep(sleep_for) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => return,
            }
            self.tick();
        }
    }
}

/// In debug builds (every test) after every change: the published views are exactly what reading
/// each sandbox afresh gives, so a change the world forgot to report as a touch fails the test
/// that made it. Skipped past a thousand sandboxes, where it would make load tests quadratic.
fn check_published_views(
    world: &World,
    views: &papaya::HashMapRef<'_, SharedStr, Arc<SandboxView>, std::hash::RandomState, impl papaya::Guard>,
) {
    const MOST_CHECKED: usize = 1_000;
    if views.len() > MOST_CHECKED {
        return;
    }
    let mut on_record = 0;
    for view in world.every_sandbox() {
        on_record += 1;
        let published = views.get(view.id.as_str());
        assert!(
            published.is_some_and(|published| **published == view),
            "sandbox {}'s published view is stale: {published:?} against {view:?}",
            view.id
        );
    }
    assert_eq!(views.len(), on_record, "the published views hold a sandbox no longer on record");
}

/// Logs each sandbox whose state or reason changed, keyed by its id: the log then tells a
/// sandbox's story (Pending because …, Running, Failed with OutOfcpu, …) without the API.
fn log_sandbox_changes(world: &mut World) {
    for change in world.take_sandbox_changes() {
        let state = format!("{:?}", change.state).to_uppercase();
        if change.reason.is_empty() {
            tracing::info!(sandbox_id = %change.sandbox_id, state = %state, "sandbox {state}");
        } else {
            tracing::info!(sandbox_id = %change.sandbox_id, state = %state, "sandbox {state}: {}", change.reason);
        }
    }
}

/// The sandbox a Pod runs, for log lines a user reads by sandbox id; the Pod's uid otherwise.
fn sandbox_or_pod(driver: &Driver, pod_uid: &str) -> String {
    // A read: under the lock, without catching the world up or pumping its effects.
    match driver.world_for_reading().cluster.pod(pod_uid).map(|pod| &pod.owner) {
        Some(PodOwner::Sandbox(id)) => id.to_string(),
        _ => format!("pod {pod_uid}"),
    }
}

/// The launch description of a Pod, main container first.
async fn run_pump(
    driver: Arc<Driver>,
    mut items: mpsc::UnboundedReceiver<Effect>,
    runtime: Option<Arc<dyn SandboxRuntime>>,
) {
    while let Some(item) = items.recv().await {
        let item = match item {
            Effect::PullImages { pod_uid, images } => {
                // Without a runtime the world never asks for a pull.
                if let Some(runtime) = &runtime {
                    tokio::spawn(pull_images(Arc::clone(&driver), Arc::clone(runtime), pod_uid.to_string(), images));
                }
                driver.applied.send_modify(|applied| *applied += 1);
                continue;
            }
            Effect::MeasureVolumes { pod_uid, volumes } => {
                if let Some(runtime) = &runtime {
                    tokio::spawn(measure_volumes(
                        Arc::clone(&driver),
                        Arc::clone(runtime),
                        pod_uid.to_string(),
                        volumes,
                    ));
                }
                driver.applied.send_modify(|applied| *applied += 1);
                continue;
            }
            item => item,
        };
        let starting = match &item {
            Effect::StartPod(launch) => Some(launch.pod_uid.clone()),
            _ => None,
        };
        let killing = match &item {
            Effect::KillPod { pod_uid } if runtime.is_some() => Some(pod_uid.clone()),
            _ => None,
        };
        let failed_start = apply(item, runtime.as_ref()).await;
        if let Some(pod_uid) = killing {
            // Whatever was left of the Pod's processes is gone: its sandbox may end now.
            driver.with_world(|world| world.pod_host_killed(&pod_uid));
        }
        if let Some(pod_uid) = starting {
            // A command that could not start has exited already, and a container that could not
            // be started has its reason: the world hears either before the start counts as done,
            // so nobody reads the sandbox as RUNNING in between.
            match failed_start {
                Some(message) => driver.with_world(|world| world.pod_start_failed(&pod_uid, &message)),
                None => {
                    let exited = runtime.as_ref().and_then(|runtime| runtime.exited(&pod_uid));
                    driver.with_world(|world| {
                        world.pod_host_started(&pod_uid);
                        if let Some(exit_code) = exited {
                            world.pod_exited(&pod_uid, exit_code);
                        }
                    });
                }
            }
        }
        driver.applied.send_modify(|applied| *applied += 1);
    }
}

/// Applies one effect; returns why a start failed, where the runtime could not start the Pod's
/// main container for a reason of its spec.
async fn apply(item: Effect, runtime: Option<&Arc<dyn SandboxRuntime>>) -> Option<String> {
    let Some(runtime) = runtime else {
        match &item {
            Effect::StartPod(launch) => tracing::info!(
                pod = %format!("{}/{}", launch.namespace, launch.pod_name),
                sandbox_id = launch.sandbox_id.as_deref().unwrap_or("-"),
                "Pod running; no process executor attached, so its main process does not run"
            ),
            Effect::StopPod { pod_uid, grace } => tracing::debug!(%pod_uid, ?grace, "StopPod (no executor)"),
            Effect::KillPod { pod_uid } => tracing::debug!(%pod_uid, "KillPod (no executor)"),
            Effect::PullImages { pod_uid, .. } => tracing::debug!(%pod_uid, "PullImages (no executor)"),
            Effect::MeasureVolumes { pod_uid, .. } => tracing::debug!(%pod_uid, "MeasureVolumes (no executor)"),
        }
        return None;
    };
    let outcome = match item {
        Effect::StartPod(launch) => {
            let pod_uid = launch.pod_uid.clone();
            runtime.start(launch).await.map_err(|error| (pod_uid, "start", error))
        }
        Effect::StopPod { pod_uid, grace } => {
            runtime.stop(pod_uid.to_string(), grace).await.map_err(|error| (pod_uid, "stop", error))
        }
        Effect::KillPod { pod_uid } => {
            runtime.kill(pod_uid.to_string()).await.map_err(|error| (pod_uid, "kill", error))
        }
        // Pulls and measures never reach here: the pump hands them to tasks of their own.
        Effect::PullImages { .. } | Effect::MeasureVolumes { .. } => Ok(()),
    };
    match outcome {
        Err((pod_uid, _, RuntimeError::StartFailed(message))) => {
            tracing::info!(%pod_uid, "the Pod's main container cannot start: {message}");
            Some(message)
        }
        Err((pod_uid, what, error)) => {
            tracing::warn!(%pod_uid, "runtime could not {what} the Pod: {error}");
            None
        }
        Ok(()) => None,
    }
}

/// Measures a Pod's scratch volumes through the runtime and tells the world what they hold; a
/// Pod that ended meanwhile has nothing left to measure, which is no failure.
async fn measure_volumes(driver: Arc<Driver>, runtime: Arc<dyn SandboxRuntime>, pod_uid: String, volumes: Vec<String>) {
    match runtime.volume_usage(pod_uid.clone(), volumes).await {
        Ok(usage) => driver.with_world(|world| world.volumes_measured(&pod_uid, &usage)),
        Err(error) => tracing::debug!(%pod_uid, "scratch volumes not measured: {error}"),
    }
}

/// Pulls a Pod's images through the runtime and tells the world how it went.
async fn pull_images(driver: Arc<Driver>, runtime: Arc<dyn SandboxRuntime>, pod_uid: String, images: Vec<ImageToPull>) {
    match runtime.pull_images(pod_uid.clone(), images).await {
        Ok(pulled) => driver.with_world(|world| world.images_pulled(&pod_uid, &pulled)),
        Err(failure) => {
            tracing::info!(%pod_uid, image = %failure.image, "image pull failed: {}", failure.message);
            driver.with_world(|world| world.image_pull_failed(&pod_uid, failure));
        }
    }
}
