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

mod accounting;
mod jobs;
mod placement;
mod preemption;

pub use jobs::{IllegalJobTransition, JobPhase, JobTransition};

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
        /// The script's exit status when it ends after `run_seconds` (non-zero: FAILED).
        exit_code: u8,
        /// The script's path (`Command=`); `None` records none, as `sbatch --wrap` does
        /// (slurmctld packs `argv[0]`, which --wrap leaves unset).
        command: Option<String>,
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
    /// Whether only Nodes of `gres_type` qualify (`--gres=gpu:h100:2`, or a Pod that asks for a
    /// GPU model), rather than any GPU (`--gres=gpu:2`; the type then only names what is shown).
    pub gres_type_required: bool,
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
    /// Whether only Nodes of `gres_type` qualify.
    pub gres_type_required: bool,
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
    /// `Reason` as the controller shows it (`scontrol show job`, squeue): why the job waits or
    /// runs, or for an ended one why it ended. slurmctld's `_job_complete` sets FAIL_EXIT_CODE
    /// (`NonZeroExitCode`) with FAILED for a non-zero exit, and its time-limit check
    /// FAIL_TIMEOUT (`TimeLimit`) with TIMEOUT; a cancelled job keeps the reason it had (a
    /// pending one the reason it waited for). The accounting record keeps [`Job::reason`].
    pub fn controller_reason(&self) -> &str {
        match self.state {
            JobBaseState::Failed => "NonZeroExitCode",
            JobBaseState::Timeout => "TimeLimit",
            _ => &self.reason,
        }
    }

    /// Elapsed run time at `now`.
    pub fn elapsed_seconds(&self, now: SimTime) -> i64 {
        match (self.start, self.end) {
            (Some(start), Some(end)) => (end.secs() - start.secs()).max(0),
            (Some(start), None) => (now.secs() - start.secs()).max(0),
            _ => 0,
        }
    }
}

/// The uid of slurm.conf's `SlurmUser`: Slurm's default, root. The drains slurmctld makes
/// itself (and SUNK's scripts, which run as root) carry it.
pub const SLURM_USER_UID: u32 = 0;

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
    /// Why, by whom and since when it is drained; none while it takes jobs.
    pub drain: Option<NodeDrain>,
    /// When its slurmd registered (`BootTime`, `SlurmdStartTime`): the node was built with the
    /// world.
    pub boot_time: SimTime,
    /// When it last became idle (`LastBusyTime`), as slurmctld records it: at registration and
    /// each time its last job leaves, not while it is busy.
    pub last_busy: SimTime,
}

/// A drain as slurmctld records it: the reason with the uid that set it and when (`sinfo -R`'s
/// USER and TIMESTAMP, `scontrol show node`'s `Reason=… [user@time]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDrain {
    /// The reason given.
    pub reason: String,
    /// Who drained it: the uid running `scontrol update`, or SlurmUser (root) for drains the
    /// controller and SUNK's scripts make.
    pub uid: u32,
    /// When.
    pub at: SimTime,
}

impl SlurmNode {
    /// Free CPUs.
    pub fn free_cpus(&self) -> u32 {
        self.cpus.saturating_sub(self.alloc_cpus)
    }

    /// Current state.
    pub fn state(&self) -> NodeState {
        match (&self.drain, self.jobs.is_empty()) {
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
    /// The Pods of placeholder jobs that changed state or reason since the world last took them.
    touched_placeholders: crate::touched::Touched<SharedStr>,
}

/// What the jobs on one node demand of newcomers.
#[derive(Debug, Clone, Copy, Default)]
struct NodeSharing {
    /// Jobs that hold the node exclusively.
    exclusive: u32,
    /// Jobs that share only with jobs of the same user.
    user: u32,
}

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

    /// The default partition's name.
    pub fn default_partition(&self) -> Option<&str> {
        self.partitions.values().find(|partition| partition.default).map(|partition| &*partition.name)
    }

    /// A job in the queue.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.queue.get(&id).map(|job| &**job)
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&SlurmNode> {
        self.node_index.get(name).map(|&index| &self.nodes[index])
    }
}

/// Rewrites a job's reason in place: it changes several times per job, always to a short word.
fn set_reason(current: &mut String, reason: &str) {
    current.clear();
    current.push_str(reason);
}
