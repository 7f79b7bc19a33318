//! The Slurm side: partitions, nodes, the job queue with its state machine, allocation with
//! sharing rules and partition-tier preemption, and the accounting records `sacct` reads.
//!
//! Placement never scans every node: each partition keeps its schedulable nodes ordered by free
//! CPUs, and a job looks only at nodes with enough of them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::ids::SharedStr;
use crate::time::SimTime;

/// A Slurm job id.
pub type JobId = u32;

/// Base job states (what accounting stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobBaseState {
    /// Queued.
    Pending,
    /// Allocated (possibly still in its prolog).
    Running,
    /// Ended by itself with exit code 0.
    Completed,
    /// Cancelled (`scancel`, or a deleted Pod).
    Cancelled,
    /// Ended with a non-zero exit code.
    Failed,
    /// Hit its time limit.
    Timeout,
    /// Preempted with PreemptMode=CANCEL.
    Preempted,
    /// Preempted with PreemptMode=REQUEUE and queued again.
    Requeued,
    /// Its node failed.
    NodeFail,
}

impl JobBaseState {
    /// The long name (`sacct` State).
    pub fn as_str(self) -> &'static str {
        match self {
            JobBaseState::Pending => "PENDING",
            JobBaseState::Running => "RUNNING",
            JobBaseState::Completed => "COMPLETED",
            JobBaseState::Cancelled => "CANCELLED",
            JobBaseState::Failed => "FAILED",
            JobBaseState::Timeout => "TIMEOUT",
            JobBaseState::Preempted => "PREEMPTED",
            JobBaseState::Requeued => "REQUEUED",
            JobBaseState::NodeFail => "NODE_FAIL",
        }
    }

    /// The compact name (`squeue` ST).
    pub fn compact(self) -> &'static str {
        match self {
            JobBaseState::Pending => "PD",
            JobBaseState::Running => "R",
            JobBaseState::Completed => "CD",
            JobBaseState::Cancelled => "CA",
            JobBaseState::Failed => "F",
            JobBaseState::Timeout => "TO",
            JobBaseState::Preempted => "PR",
            JobBaseState::Requeued => "RQ",
            JobBaseState::NodeFail => "NF",
        }
    }

    /// Whether the job has ended.
    pub fn is_finished(self) -> bool {
        !matches!(self, JobBaseState::Pending | JobBaseState::Running | JobBaseState::Requeued)
    }
}

/// How a job shares its node (`--exclusive`, `OverSubscribe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// The partition default: share CPUs, memory and GPUs as consumable resources.
    Default,
    /// The whole node (`exclusive: none`, OverSubscribe=NO).
    Exclusive,
    /// Only with jobs of the same user (`exclusive: user`).
    User,
    /// Sharing allowed (`exclusive: ok`, OverSubscribe=YES).
    Ok,
}

impl Sharing {
    /// As `scontrol show job` prints `OverSubscribe=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sharing::Default | Sharing::Ok => "OK",
            Sharing::Exclusive => "NO",
            Sharing::User => "USER",
        }
    }
}

/// What runs in a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKind {
    /// A SUNK placeholder for a Pod.
    Placeholder {
        /// The Pod's uid (shared with the Pod).
        pod_uid: SharedStr,
    },
    /// An ordinary batch job that runs for a while (or until cancelled).
    Batch {
        /// Seconds it runs once started; `None` runs until cancelled.
        run_seconds: Option<u32>,
    },
}

/// What a submitter asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// Job name.
    pub name: String,
    /// Owner's uid; must be a known user.
    pub uid: u32,
    /// Group id; the user's primary group when `None`.
    pub gid: Option<u32>,
    /// Account; the user's default when `None`.
    pub account: Option<String>,
    /// Partition; the default partition when `None`.
    pub partition: Option<String>,
    /// QOS; `normal` when `None`.
    pub qos: Option<String>,
    /// Comment.
    pub comment: Option<String>,
    /// Reservation.
    pub reservation: Option<String>,
    /// CPUs.
    pub cpus: u32,
    /// Memory in MB (MiB).
    pub mem_mb: u64,
    /// GPUs.
    pub gpus: u32,
    /// GRES type of the GPUs (`h100`).
    pub gres_type: Option<String>,
    /// Node sharing.
    pub sharing: Sharing,
    /// Time limit in seconds.
    pub time_limit_seconds: Option<u32>,
    /// Priority inside the partition (higher first).
    pub priority: u32,
    /// What runs.
    pub kind: JobKind,
    /// Whether the job holds its node through a prolog before it counts as started.
    pub prolog: bool,
}

/// A job in the queue (pending, running or completing) or finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Id.
    pub id: JobId,
    /// Name.
    pub name: String,
    /// User name.
    pub user: Arc<str>,
    /// Uid.
    pub uid: u32,
    /// Group name.
    pub group: Arc<str>,
    /// Gid.
    pub gid: u32,
    /// Account.
    pub account: Arc<str>,
    /// Partition.
    pub partition: Arc<str>,
    /// QOS.
    pub qos: Arc<str>,
    /// Comment.
    pub comment: String,
    /// Reservation.
    pub reservation: String,
    /// Requested CPUs.
    pub req_cpus: u32,
    /// Requested memory, MB.
    pub req_mem_mb: u64,
    /// Requested GPUs.
    pub req_gpus: u32,
    /// GRES type.
    pub gres_type: Option<String>,
    /// Sharing.
    pub sharing: Sharing,
    /// Time limit in seconds.
    pub time_limit_seconds: Option<u32>,
    /// Priority.
    pub priority: u32,
    /// Base state.
    pub state: JobBaseState,
    /// Whether the COMPLETING flag is set (ended, epilog or Pod teardown still running).
    pub completing: bool,
    /// Why it waits or what it does (`Resources`, `Priority`, `Prolog`, `None`).
    pub reason: String,
    /// When submitted.
    pub submit: SimTime,
    /// When allocated.
    pub start: Option<SimTime>,
    /// When it ended.
    pub end: Option<SimTime>,
    /// Allocated node.
    pub node: Option<String>,
    /// Allocated GPU indices on that node.
    pub gpu_indices: Vec<u32>,
    /// Allocated CPUs (0 while pending).
    pub alloc_cpus: u32,
    /// Exit code and signal.
    pub exit_code: (i32, i32),
    /// Who cancelled it.
    pub cancelled_by: Option<u32>,
    /// `Extra` (SUNK appends `: started`).
    pub extra: String,
    /// What runs.
    pub kind: JobKind,
    /// Whether a prolog is still running.
    pub in_prolog: bool,
    /// Jobs this one preempted and waits for.
    pub waiting_for_preempted: Vec<JobId>,
}

impl Job {
    /// Elapsed run time at `now`.
    pub fn elapsed_seconds(&self, now: SimTime) -> i64 {
        match (self.start, self.end) {
            (Some(start), Some(end)) => (end.secs() - start.secs()).max(0),
            (Some(start), None) => (now.secs() - start.secs()).max(0),
            _ => 0,
        }
    }
}

/// How a node is shown by `sinfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// No jobs.
    Idle,
    /// Some resources in use.
    Mixed,
    /// Fully used.
    Allocated,
    /// Drained and empty.
    Drained,
    /// Drained with jobs still on it.
    Draining,
}

impl NodeState {
    /// `sinfo` long name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Mixed => "mixed",
            NodeState::Allocated => "allocated",
            NodeState::Drained => "drained",
            NodeState::Draining => "draining",
        }
    }

    /// `sinfo` short name.
    pub fn compact(self) -> &'static str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Mixed => "mix",
            NodeState::Allocated => "alloc",
            NodeState::Drained => "drain",
            NodeState::Draining => "drng",
        }
    }
}

/// A Slurm node (one slurmd Pod on one Kubernetes Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// Slurm node name (`slurm-<nodeset>-<i>`).
    pub name: String,
    /// The Kubernetes Node hosting the slurmd Pod.
    pub k8s_node: String,
    /// CPUs Slurm schedules against.
    pub cpus: u32,
    /// RealMemory, MB.
    pub real_memory_mb: u64,
    /// GPUs.
    pub gpus: u32,
    /// GRES type of its GPUs.
    pub gres_type: Option<String>,
    /// Partitions it belongs to.
    pub partitions: Vec<String>,
    /// Allocated CPUs.
    pub alloc_cpus: u32,
    /// Allocated memory, MB.
    pub alloc_mem_mb: u64,
    /// Bit i set: GPU i is allocated.
    pub gpus_in_use: u64,
    /// Jobs holding it.
    pub jobs: Vec<JobId>,
    /// Drain reason, when drained.
    pub drain_reason: Option<String>,
}

impl SlurmNode {
    /// Free CPUs.
    pub fn free_cpus(&self) -> u32 {
        self.cpus.saturating_sub(self.alloc_cpus)
    }

    /// Current state.
    pub fn state(&self) -> NodeState {
        match (&self.drain_reason, self.jobs.is_empty()) {
            (Some(_), true) => NodeState::Drained,
            (Some(_), false) => NodeState::Draining,
            (None, true) => NodeState::Idle,
            (None, false) if self.alloc_cpus >= self.cpus => NodeState::Allocated,
            (None, false) => NodeState::Mixed,
        }
    }
}

/// Partition preemption modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptMode {
    /// Jobs here are never preempted.
    Off,
    /// Preempted jobs end as PREEMPTED.
    Cancel,
    /// Preempted jobs are queued again.
    Requeue,
}

/// A partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Name (shared with its jobs).
    pub name: Arc<str>,
    /// Whether it is the default.
    pub default: bool,
    /// Node names.
    pub nodes: Vec<String>,
    /// `OverSubscribe`.
    pub over_subscribe: String,
    /// Priority tier.
    pub priority_tier: u32,
    /// What happens to its jobs when a higher tier needs their nodes.
    pub preempt_mode: PreemptMode,
}

/// A user Slurm knows. Names are shared with every job of the user, not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: Arc<str>,
    /// Uid.
    pub uid: u32,
    /// Group name.
    pub group: Arc<str>,
    /// Gid.
    pub gid: u32,
    /// Default account.
    pub default_account: Arc<str>,
}

/// Why Slurm refused a submission, in Slurm's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// `sbatch: error: Batch job submission failed: Invalid partition name specified`.
    #[error("Invalid partition name specified")]
    InvalidPartition,
    /// Unknown uid.
    #[error("Invalid user id")]
    InvalidUser,
    /// More than any node of the partition has.
    #[error("Requested node configuration is not available")]
    NodeConfigUnavailable,
}

/// A state change the world has to react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmOutcome {
    /// A job was allocated a node (its prolog runs if it has one).
    Allocated(JobId),
    /// A job was preempted (now PREEMPTED|COMPLETING or requeued).
    Preempted(JobId),
}

/// The whole Slurm cluster.
#[derive(Debug, Clone, Default)]
pub struct Slurm {
    /// Partitions by name.
    pub partitions: BTreeMap<String, Partition>,
    /// Nodes in configuration order.
    pub nodes: Vec<SlurmNode>,
    /// Node name → index.
    pub node_index: HashMap<String, usize, crate::ids::IdHash>,
    /// Users by uid.
    pub users: BTreeMap<u32, User>,
    /// Queue: pending, running and completing jobs. Boxed: a B-tree node then holds pointers,
    /// not 400-byte jobs, so it wastes little on free slots and moves little when it splits.
    pub queue: BTreeMap<JobId, Box<Job>>,
    /// Accounting rows of jobs that left the queue; queued jobs are read from the queue, so
    /// a job is stored once (memory stays flat per live job).
    finished: BTreeMap<JobId, Box<Job>>,
    /// Next job id.
    pub next_job_id: JobId,
    /// Pending jobs in scheduling order: (tier, priority, submit, id).
    pending: BTreeSet<(Reverse<u32>, Reverse<u32>, SimTime, JobId)>,
    /// Per partition: schedulable nodes ordered by free CPUs.
    free_index: HashMap<String, BTreeSet<(u32, usize)>, crate::ids::IdHash>,
    /// How often each named transition ran.
    pub transitions: crate::machine::Counts<JobTransition>,
    /// The default QOS name, shared by every job that names none.
    normal_qos: Arc<str>,
    /// Per node (same index as `nodes`): how many of its jobs refuse company or share only with
    /// their user, so placement can skip looking at every job on a busy node.
    sharing: Vec<NodeSharing>,
}

/// What the jobs on one node demand of newcomers.
#[derive(Debug, Clone, Copy, Default)]
struct NodeSharing {
    /// Jobs that hold the node exclusively.
    exclusive: u32,
    /// Jobs that share only with jobs of the same user.
    user: u32,
}

/// Where a job stands: the one reading of its base state, its COMPLETING flag and whether its
/// prolog still runs, on which the job machine's transitions are defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPhase {
    /// Queued, waiting for a node.
    Pending,
    /// Holding its node while the prolog runs (RUNNING, reason `Prolog`).
    Prolog,
    /// The script runs.
    Running,
    /// Ended (cancelled, finished, preempted, timed out) and COMPLETING: the epilog, or the
    /// placeholder's Pod, is not done yet. The node is still held.
    Completing,
    /// Out of the queue: on record only.
    Ended,
}

impl JobPhase {
    /// Every phase.
    pub const ALL: [JobPhase; 5] =
        [JobPhase::Pending, JobPhase::Prolog, JobPhase::Running, JobPhase::Completing, JobPhase::Ended];

    /// A stable name for messages.
    pub fn name(self) -> &'static str {
        match self {
            JobPhase::Pending => "PENDING",
            JobPhase::Prolog => "PROLOG",
            JobPhase::Running => "RUNNING",
            JobPhase::Completing => "COMPLETING",
            JobPhase::Ended => "ENDED",
        }
    }
}

impl Job {
    /// Where the job stands.
    pub fn phase(&self) -> JobPhase {
        match (self.state, self.completing, self.in_prolog) {
            (_, true, _) => JobPhase::Completing,
            (JobBaseState::Pending, false, _) => JobPhase::Pending,
            (JobBaseState::Running, false, true) => JobPhase::Prolog,
            (JobBaseState::Running, false, false) => JobPhase::Running,
            (_, false, _) => JobPhase::Ended,
        }
    }
}

/// One named step of a job's lifecycle. Every change of a queued job's state goes through one
/// of these; [`JobTransition::allowed_from`] is the machine's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobTransition {
    /// Queued.
    Submit,
    /// Node allocated (PENDING → PROLOG, or RUNNING for a job without a prolog).
    Allocate,
    /// Prolog finished; the script started.
    StartScript,
    /// Ended by itself (COMPLETED, FAILED).
    Finish,
    /// `scancel` of an allocated job: CANCELLED|COMPLETING.
    Cancel,
    /// Cancelled before it started: out of the queue at once.
    CancelPending,
    /// Preempted (CANCEL).
    Preempt,
    /// Preempted (REQUEUE).
    Requeue,
    /// Time limit hit.
    Timeout,
    /// Left COMPLETING; leaves the queue (or, requeued, waits again).
    Release,
}

impl crate::machine::Transition for JobTransition {
    const MACHINE: &'static str = "job";
    const ALL: &'static [JobTransition] = &[
        JobTransition::Submit,
        JobTransition::Allocate,
        JobTransition::StartScript,
        JobTransition::Finish,
        JobTransition::Cancel,
        JobTransition::CancelPending,
        JobTransition::Preempt,
        JobTransition::Requeue,
        JobTransition::Timeout,
        JobTransition::Release,
    ];

    fn name(self) -> &'static str {
        match self {
            JobTransition::Submit => "submit",
            JobTransition::Allocate => "allocate",
            JobTransition::StartScript => "start_script",
            JobTransition::Finish => "finish",
            JobTransition::Cancel => "cancel",
            JobTransition::CancelPending => "cancel_pending",
            JobTransition::Preempt => "preempt",
            JobTransition::Requeue => "requeue",
            JobTransition::Timeout => "timeout",
            JobTransition::Release => "release",
        }
    }
}

impl JobTransition {
    /// The phases this transition may start from (`Submit` starts from no job at all).
    pub fn allowed_from(self) -> &'static [JobPhase] {
        use JobPhase::*;
        match self {
            JobTransition::Submit => &[],
            JobTransition::Allocate | JobTransition::CancelPending => &[Pending],
            JobTransition::StartScript => &[Prolog],
            JobTransition::Finish
            | JobTransition::Cancel
            | JobTransition::Preempt
            | JobTransition::Requeue
            | JobTransition::Timeout => &[Prolog, Running],
            JobTransition::Release => &[Completing],
        }
    }
}

/// A job transition refused: the job is in a phase that does not allow it, or not queued.
pub type IllegalJobTransition = crate::machine::IllegalTransition<JobTransition>;

impl Slurm {
    /// An empty cluster whose first job id is `first_job_id`.
    pub fn new(first_job_id: JobId) -> Slurm {
        Slurm { next_job_id: first_job_id.max(1), normal_qos: Arc::from("normal"), ..Slurm::default() }
    }

    /// Adds a user.
    pub fn add_user(&mut self, user: User) {
        self.users.insert(user.uid, user);
    }

    /// Adds a node (before partitions reference it).
    pub fn add_node(&mut self, node: SlurmNode) {
        self.node_index.insert(node.name.clone(), self.nodes.len());
        self.nodes.push(node);
        self.sharing.push(NodeSharing::default());
    }

    /// Adds a partition over nodes already added.
    pub fn add_partition(&mut self, partition: Partition) {
        for node_name in &partition.nodes {
            if let Some(&index) = self.node_index.get(node_name) {
                self.nodes[index].partitions.push(partition.name.to_string());
            }
        }
        self.partitions.insert(partition.name.to_string(), partition);
        self.rebuild_index();
    }

    fn rebuild_index(&mut self) {
        self.free_index.clear();
        for index in 0..self.nodes.len() {
            self.index_insert(index);
        }
    }

    fn index_insert(&mut self, index: usize) {
        let node = &self.nodes[index];
        if node.drain_reason.is_some() {
            return;
        }
        let key = (node.free_cpus(), index);
        for partition in &node.partitions {
            match self.free_index.get_mut(partition) {
                Some(set) => {
                    set.insert(key);
                }
                None => {
                    self.free_index.insert(partition.clone(), BTreeSet::from([key]));
                }
            }
        }
    }

    fn index_remove(&mut self, index: usize) {
        let node = &self.nodes[index];
        let key = (node.free_cpus(), index);
        for partition in &node.partitions {
            if let Some(set) = self.free_index.get_mut(partition) {
                set.remove(&key);
            }
        }
    }

    /// Checks that `transition` may run on job `id` now and counts it; the caller then applies it.
    fn begin(&mut self, id: JobId, transition: JobTransition) -> Result<(), IllegalJobTransition> {
        let phase = self.queue.get(&id).map_or(JobPhase::Ended, |job| job.phase());
        if !transition.allowed_from().contains(&phase) {
            return Err(IllegalJobTransition { transition, state: phase.name() });
        }
        self.transitions.add(transition);
        Ok(())
    }

    /// The default partition's name.
    pub fn default_partition(&self) -> Option<&str> {
        self.partitions.values().find(|partition| partition.default).map(|partition| &*partition.name)
    }

    /// A job in the queue.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.queue.get(&id).map(|job| &**job)
    }

    /// A job's latest state: the queue entry if queued, else its accounting row.
    pub fn job_or_record(&self, id: JobId) -> Option<&Job> {
        self.queue.get(&id).or_else(|| self.finished.get(&id)).map(|job| &**job)
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&SlurmNode> {
        self.node_index.get(name).map(|&index| &self.nodes[index])
    }

    /// The accounting row of a job, as `sacct` reads it: the base state only, never COMPLETING.
    pub fn accounting_record(&self, id: JobId) -> Option<Job> {
        self.job_or_record(id).map(|job| Job { completing: false, ..job.clone() })
    }

    /// Every job on record, queued or finished, borrowed and in no particular order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.finished.values().chain(self.queue.values()).map(|job| &**job)
    }

    /// Every accounting row, by job id.
    pub fn accounting_records(&self) -> Vec<Job> {
        let mut ids: Vec<JobId> = self.finished.keys().chain(self.queue.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().filter_map(|id| self.accounting_record(id)).collect()
    }

    /// Every job on record, queued or finished, by id, borrowed (a queued job's COMPLETING
    /// flag is as the queue has it).
    pub fn jobs_on_record(&self) -> impl Iterator<Item = &Job> {
        let mut jobs: Vec<&Job> = self.queue.values().chain(self.finished.values()).map(|job| &**job).collect();
        jobs.sort_unstable_by_key(|job| job.id);
        jobs.into_iter()
    }

    /// How many jobs were ever submitted and are still on record.
    pub fn accounted_jobs(&self) -> usize {
        self.finished.len() + self.queue.len()
    }

    fn retire(&mut self, id: JobId) {
        if let Some(mut job) = self.queue.remove(&id) {
            job.completing = false;
            self.finished.insert(id, job);
        }
    }

    /// Queues a job; it is placed by the next [`Slurm::schedule`].
    pub fn submit(&mut self, request: JobRequest, now: SimTime) -> Result<JobId, SubmitError> {
        let user = self.users.get(&request.uid).ok_or(SubmitError::InvalidUser)?;
        let partition = match &request.partition {
            Some(name) => self.partitions.get(name.as_str()),
            None => self.partitions.values().find(|partition| partition.default),
        }
        .ok_or(SubmitError::InvalidPartition)?;
        let fits_somewhere = partition.nodes.iter().filter_map(|name| self.node(name)).any(|node| {
            node.cpus >= request.cpus && node.real_memory_mb >= request.mem_mb && node.gpus >= request.gpus
        });
        if !fits_somewhere {
            return Err(SubmitError::NodeConfigUnavailable);
        }
        let tier = partition.priority_tier;
        let partition_name = Arc::clone(&partition.name);
        let group = match request.gid {
            Some(gid) => self
                .users
                .values()
                .find(|candidate| candidate.gid == gid)
                .map_or_else(|| Arc::clone(&user.group), |owner| Arc::clone(&owner.group)),
            None => Arc::clone(&user.group),
        };
        let (user_name, uid, gid) = (Arc::clone(&user.name), user.uid, request.gid.unwrap_or(user.gid));
        let account = request.account.map_or_else(|| Arc::clone(&user.default_account), Arc::from);
        let qos = request.qos.map_or_else(|| Arc::clone(&self.normal_qos), Arc::from);
        let id = self.next_job_id;
        self.next_job_id += 1;
        let job = Job {
            id,
            name: request.name,
            user: user_name,
            uid,
            group,
            gid,
            account,
            partition: partition_name,
            qos,
            comment: request.comment.unwrap_or_default(),
            reservation: request.reservation.unwrap_or_default(),
            req_cpus: request.cpus.max(1),
            req_mem_mb: request.mem_mb,
            req_gpus: request.gpus,
            gres_type: request.gres_type,
            sharing: request.sharing,
            time_limit_seconds: request.time_limit_seconds,
            priority: request.priority,
            state: JobBaseState::Pending,
            completing: false,
            // Room for the longest reason (`Resources`, `BeginTime`): it is rewritten in place.
            reason: {
                let mut reason = String::with_capacity(9);
                reason.push_str("None");
                reason
            },
            submit: now,
            start: None,
            end: None,
            node: None,
            gpu_indices: Vec::new(),
            alloc_cpus: 0,
            exit_code: (0, 0),
            cancelled_by: None,
            extra: String::new(),
            kind: request.kind,
            in_prolog: request.prolog,
            waiting_for_preempted: Vec::new(),
        };
        self.pending.insert((Reverse(tier), Reverse(job.priority), now, id));
        self.queue.insert(id, Box::new(job));
        self.transitions.add(JobTransition::Submit);
        Ok(id)
    }

    /// Whether a job holds its node alone (`--exclusive` or an OverSubscribe=EXCLUSIVE partition).
    fn holds_exclusively(&self, job: &Job) -> bool {
        job.sharing == Sharing::Exclusive
            || self.partitions.get(&*job.partition).is_some_and(|partition| partition.over_subscribe == "EXCLUSIVE")
    }

    /// [`Self::sharing_allows`] for node `index` as it stands, answered from its counts when they
    /// settle it (the common case: nobody on the node is exclusive or user-only).
    fn sharing_allows_at(&self, index: usize, job: &Job, partition: &Partition) -> bool {
        let node = &self.nodes[index];
        if node.jobs.is_empty() {
            return true;
        }
        if job.sharing == Sharing::Exclusive || partition.over_subscribe == "EXCLUSIVE" {
            return false;
        }
        let counts = self.sharing[index];
        if counts.exclusive > 0 {
            return false;
        }
        if job.sharing != Sharing::User && counts.user == 0 {
            return true;
        }
        self.sharing_allows(node, job, partition)
    }

    fn sharing_allows(&self, node: &SlurmNode, job: &Job, partition: &Partition) -> bool {
        let job_exclusive = job.sharing == Sharing::Exclusive || partition.over_subscribe == "EXCLUSIVE";
        if job_exclusive && !node.jobs.is_empty() {
            return false;
        }
        node.jobs.iter().filter_map(|other| self.job(*other)).all(|other| {
            let other_exclusive = other.sharing == Sharing::Exclusive
                || self.partitions.get(&*other.partition).is_some_and(|p| p.over_subscribe == "EXCLUSIVE");
            if other_exclusive {
                return false;
            }
            let user_rule = other.sharing == Sharing::User || job.sharing == Sharing::User;
            !user_rule || other.uid == job.uid
        })
    }

    fn fits(&self, node: &SlurmNode, job: &Job) -> bool {
        node.free_cpus() >= job.req_cpus
            && node.real_memory_mb.saturating_sub(node.alloc_mem_mb) >= job.req_mem_mb
            && node.gpus - node.gpus_in_use.count_ones().min(node.gpus) >= job.req_gpus
    }

    fn find_node(&self, job: &Job) -> Option<usize> {
        let partition = self.partitions.get(&*job.partition)?;
        let candidates = self.free_index.get(&*job.partition)?;
        candidates.range((job.req_cpus, 0)..).map(|&(_, index)| index).find(|&index| {
            let node = &self.nodes[index];
            self.fits(node, job) && self.sharing_allows_at(index, job, partition)
        })
    }

    fn allocate(&mut self, id: JobId, index: usize, now: SimTime) {
        // Only pending jobs are in the pending set that scheduling walks.
        if self.begin(id, JobTransition::Allocate).is_err() {
            return;
        }
        self.index_remove(index);
        let Some(job) = self.queue.get(&id) else { return };
        let (cpus, mem, gpus) = (job.req_cpus, job.req_mem_mb, job.req_gpus);
        let (exclusive, user_only) = (self.holds_exclusively(job), job.sharing == Sharing::User);
        self.sharing[index].exclusive += u32::from(exclusive);
        self.sharing[index].user += u32::from(user_only);
        let node = &mut self.nodes[index];
        node.alloc_cpus += cpus;
        node.alloc_mem_mb += mem;
        let mut indices = Vec::new();
        for gpu in 0..node.gpus.min(64) {
            if indices.len() as u32 == gpus {
                break;
            }
            if node.gpus_in_use & (1 << gpu) == 0 {
                node.gpus_in_use |= 1 << gpu;
                indices.push(gpu);
            }
        }
        node.jobs.push(id);
        let node_name = node.name.clone();
        self.index_insert(index);
        if let Some(job) = self.queue.get_mut(&id) {
            job.state = JobBaseState::Running;
            set_reason(&mut job.reason, if job.in_prolog { "Prolog" } else { "None" });
            job.start = Some(now);
            job.node = Some(node_name);
            job.alloc_cpus = cpus;
            job.gpu_indices = indices;
            job.waiting_for_preempted.clear();
        }
    }

    fn free(&mut self, id: JobId) {
        let Some(job) = self.queue.get(&id) else { return };
        let Some(index) = job.node.as_ref().and_then(|name| self.node_index.get(name)).copied() else { return };
        let (cpus, mem, gpu_indices) = (job.alloc_cpus, job.req_mem_mb, job.gpu_indices.clone());
        if self.nodes[index].jobs.contains(&id) {
            let (exclusive, user_only) = (self.holds_exclusively(job), job.sharing == Sharing::User);
            self.sharing[index].exclusive -= u32::from(exclusive);
            self.sharing[index].user -= u32::from(user_only);
        }
        self.index_remove(index);
        let node = &mut self.nodes[index];
        node.alloc_cpus = node.alloc_cpus.saturating_sub(cpus);
        node.alloc_mem_mb = node.alloc_mem_mb.saturating_sub(mem);
        for gpu in gpu_indices {
            node.gpus_in_use &= !(1u64 << gpu);
        }
        node.jobs.retain(|other| *other != id);
        self.index_insert(index);
    }

    /// One scheduling pass at `now`: places what fits in priority order, preempts lower-tier
    /// jobs where a partition allows it, and sets the pending reasons.
    pub fn schedule(&mut self, now: SimTime) -> Vec<SlurmOutcome> {
        let mut outcomes = Vec::new();
        self.schedule_into(now, &mut outcomes);
        outcomes
    }

    /// [`Slurm::schedule`], appending the outcomes to a buffer the caller reuses (the world
    /// schedules after every command).
    pub fn schedule_into(&mut self, now: SimTime, outcomes: &mut Vec<SlurmOutcome>) {
        let mut blocked_partitions: BTreeSet<Arc<str>> = BTreeSet::new();
        // Walk the pending set in order without copying it: each step resumes after the last key
        // (placing a job removes its key, which the range then simply no longer holds).
        let mut last = None;
        while let Some(&key) = match last {
            None => self.pending.iter().next(),
            Some(after) => self.pending.range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)).next(),
        } {
            last = Some(key);
            let id = key.3;
            let Some(job) = self.queue.get(&id) else {
                self.pending.remove(&key);
                continue;
            };
            let partition = job.partition.clone();
            if let Some(index) = self.find_node(job) {
                self.pending.remove(&key);
                self.allocate(id, index, now);
                outcomes.push(SlurmOutcome::Allocated(id));
                continue;
            }
            let waiting = job.waiting_for_preempted.iter().any(|victim| self.queue.contains_key(victim));
            if !waiting {
                let victims = self.preemption_victims(id);
                if !victims.is_empty() {
                    for victim in &victims {
                        self.preempt(*victim, now);
                        outcomes.push(SlurmOutcome::Preempted(*victim));
                    }
                    if let Some(job) = self.queue.get_mut(&id) {
                        job.waiting_for_preempted = victims;
                    }
                }
            }
            let reason = if blocked_partitions.contains(&partition) { "Priority" } else { "Resources" };
            if let Some(job) = self.queue.get_mut(&id) {
                set_reason(&mut job.reason, reason);
            }
            blocked_partitions.insert(partition);
        }
    }

    /// Jobs on one node whose preemption would make room for `id`, or none.
    fn preemption_victims(&self, id: JobId) -> Vec<JobId> {
        let Some(job) = self.queue.get(&id) else { return Vec::new() };
        let Some(partition) = self.partitions.get(&*job.partition) else { return Vec::new() };
        for name in &partition.nodes {
            let Some(node) = self.node(name) else { continue };
            if node.drain_reason.is_some() {
                continue;
            }
            let preemptable: Vec<&Job> = node
                .jobs
                .iter()
                .filter_map(|other| self.job(*other))
                .filter(|other| {
                    !other.completing
                        && other.state == JobBaseState::Running
                        && self.partitions.get(&*other.partition).is_some_and(|their| {
                            their.priority_tier < partition.priority_tier && their.preempt_mode != PreemptMode::Off
                        })
                })
                .collect();
            if preemptable.is_empty() {
                continue;
            }
            let mut trial = node.clone();
            for other in &preemptable {
                trial.alloc_cpus -= other.alloc_cpus;
                trial.alloc_mem_mb -= other.req_mem_mb;
                for gpu in &other.gpu_indices {
                    trial.gpus_in_use &= !(1u64 << gpu);
                }
                trial.jobs.retain(|candidate| *candidate != other.id);
            }
            if self.fits(&trial, job) && self.sharing_allows(&trial, job, partition) {
                return preemptable.iter().map(|other| other.id).collect();
            }
        }
        Vec::new()
    }

    fn preempt(&mut self, id: JobId, now: SimTime) {
        let mode = self
            .queue
            .get(&id)
            .and_then(|job| self.partitions.get(&*job.partition))
            .map_or(PreemptMode::Cancel, |partition| partition.preempt_mode);
        let transition = if mode == PreemptMode::Requeue { JobTransition::Requeue } else { JobTransition::Preempt };
        // Victims are chosen among allocated jobs that are not completing.
        if self.begin(id, transition).is_err() {
            return;
        }
        if let Some(job) = self.queue.get_mut(&id) {
            job.state = if mode == PreemptMode::Requeue { JobBaseState::Requeued } else { JobBaseState::Preempted };
            job.completing = true;
            job.end = Some(now);
            job.exit_code = (0, 15);
        }
    }

    /// The prolog finished and the script started: `Extra` gets `: started`.
    pub fn start_script(&mut self, id: JobId) -> Result<(), IllegalJobTransition> {
        self.begin(id, JobTransition::StartScript)?;
        if let Some(job) = self.queue.get_mut(&id) {
            job.in_prolog = false;
            set_reason(&mut job.reason, "None");
            job.extra.push_str(": started");
        }
        Ok(())
    }

    /// `scancel` by `uid`. Pending jobs end at once (start = end); allocated ones become
    /// CANCELLED|COMPLETING until [`Slurm::release`]. Returns whether the job was allocated.
    pub fn cancel(&mut self, id: JobId, by_uid: u32, now: SimTime) -> Result<bool, IllegalJobTransition> {
        let pending = self.queue.get(&id).is_some_and(|job| job.phase() == JobPhase::Pending);
        self.begin(id, if pending { JobTransition::CancelPending } else { JobTransition::Cancel })?;
        let Some(job) = self.queue.get_mut(&id) else { return Ok(false) };
        let was_running = !pending;
        job.state = JobBaseState::Cancelled;
        job.cancelled_by = Some(by_uid);
        job.end = Some(now);
        job.exit_code = (0, if was_running { 15 } else { 0 });
        if was_running {
            job.completing = true;
        } else {
            job.start = Some(now);
            set_reason(&mut job.reason, "None");
            self.pending.retain(|key| key.3 != id);
            self.retire(id);
        }
        Ok(was_running)
    }

    /// The job ended by itself with `state` (COMPLETED, FAILED, TIMEOUT); it completes once
    /// [`Slurm::release`] is called.
    pub fn finish(
        &mut self,
        id: JobId,
        state: JobBaseState,
        exit_code: (i32, i32),
        now: SimTime,
    ) -> Result<(), IllegalJobTransition> {
        self.begin(id, if state == JobBaseState::Timeout { JobTransition::Timeout } else { JobTransition::Finish })?;
        if let Some(job) = self.queue.get_mut(&id) {
            job.state = state;
            job.exit_code = exit_code;
            job.end = Some(now);
            job.completing = true;
        }
        Ok(())
    }

    /// COMPLETING ends: the node is freed and the job leaves the queue (a requeued one goes back
    /// to pending as a fresh allocation request).
    pub fn release(&mut self, id: JobId, now: SimTime) -> Result<(), IllegalJobTransition> {
        self.begin(id, JobTransition::Release)?;
        let Some(job) = self.queue.get(&id) else { return Ok(()) };
        let requeue = job.state == JobBaseState::Requeued;
        let tier = self.partitions.get(&*job.partition).map_or(0, |partition| partition.priority_tier);
        self.free(id);
        if requeue {
            if let Some(job) = self.queue.get_mut(&id) {
                job.state = JobBaseState::Pending;
                job.completing = false;
                job.start = None;
                job.end = None;
                job.node = None;
                job.alloc_cpus = 0;
                job.gpu_indices.clear();
                set_reason(&mut job.reason, "BeginTime");
                job.submit = now;
                let priority = job.priority;
                self.pending.insert((Reverse(tier), Reverse(priority), now, id));
            }
        } else {
            self.retire(id);
        }
        Ok(())
    }

    /// Drains a node with a reason: nothing new is placed there.
    pub fn drain(&mut self, name: &str, reason: &str) {
        let Some(&index) = self.node_index.get(name) else { return };
        self.index_remove(index);
        self.nodes[index].drain_reason = Some(reason.to_owned());
    }

    /// Resumes a drained node.
    pub fn resume(&mut self, name: &str) {
        let Some(&index) = self.node_index.get(name) else { return };
        self.nodes[index].drain_reason = None;
        self.index_remove(index);
        self.index_insert(index);
    }

    /// Pending jobs in scheduling order.
    pub fn pending_jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.pending.iter().map(|key| key.3)
    }
}

/// Rewrites a job's reason in place: it changes several times per job, always to a short word.
fn set_reason(current: &mut String, reason: &str) {
    current.clear();
    current.push_str(reason);
}
