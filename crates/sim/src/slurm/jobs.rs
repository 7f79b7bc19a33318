//! The job lifecycle as a machine: its phases, its named transitions and their table, and the
//! operations that move a job (submit, start_script, cancel, finish, release).

use std::cmp::Reverse;
use std::sync::Arc;

use super::*;
use crate::machine::{phases, transitions};
use crate::time::SimTime;

phases! {
    /// Where a job stands: the one reading of its base state, its COMPLETING flag and whether its
    /// prolog still runs, on which the job machine's transitions are defined.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum JobPhase {
        /// Queued, waiting for a node.
        Pending => "PENDING",
        /// Holding its node while the prolog runs (RUNNING, reason `Prolog`).
        Prolog => "PROLOG",
        /// The script runs.
        Running => "RUNNING",
        /// Ended (cancelled, finished, preempted, timed out) and COMPLETING: the epilog, or the
        /// placeholder's Pod, is not done yet. The node is still held.
        Completing => "COMPLETING",
        /// Out of the queue: on record only.
        Ended => "ENDED",
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

transitions! {
    machine "job";
    /// One named step of a job's lifecycle. Every change of a queued job's state goes through one
    /// of these; [`JobTransition::allowed_from`] is the machine's table.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum JobTransition {
        /// Queued.
        Submit => "submit" from [],
        /// Node allocated (PENDING → PROLOG, or RUNNING for a job without a prolog).
        Allocate => "allocate" from [Pending],
        /// Prolog finished; the script started.
        StartScript => "start_script" from [Prolog],
        /// Ended by itself (COMPLETED, FAILED).
        Finish => "finish" from [Prolog, Running],
        /// `scancel` of an allocated job: CANCELLED|COMPLETING.
        Cancel => "cancel" from [Prolog, Running],
        /// Cancelled before it started: out of the queue at once.
        CancelPending => "cancel_pending" from [Pending],
        /// Preempted (CANCEL).
        Preempt => "preempt" from [Prolog, Running],
        /// Preempted (REQUEUE).
        Requeue => "requeue" from [Prolog, Running],
        /// Time limit hit.
        Timeout => "timeout" from [Prolog, Running],
        /// Left COMPLETING; leaves the queue (or, requeued, waits again).
        Release => "release" from [Completing],
    }
    /// The phases this transition may start from (`Submit` starts from no job at all).
    pub fn allowed_from(self) -> &'static [JobPhase];
}

/// A job transition refused: the job is in a phase that does not allow it, or not queued.
pub type IllegalJobTransition = crate::machine::IllegalTransition<JobTransition>;

impl Slurm {
    /// Checks that `transition` may run on job `id` now and counts it; the caller then applies it.
    pub(super) fn begin(&mut self, id: JobId, transition: JobTransition) -> Result<(), IllegalJobTransition> {
        let job = self.queue.get(&id);
        let phase = job.map_or(JobPhase::Ended, |job| job.phase());
        transition.check_from(phase)?;
        if let Some(JobKind::Placeholder { pod_uid }) = job.map(|job| &job.kind) {
            self.touched_placeholders.note(pod_uid.clone());
        }
        self.transitions.add(transition);
        Ok(())
    }

    /// The Pods of placeholder jobs whose state or reason changed since the last call.
    pub(crate) fn take_touched_placeholders(&mut self, into: &mut Vec<SharedStr>) {
        self.touched_placeholders.take_into(into);
    }

    /// Forgets which were touched (nobody keeps copies).
    pub(crate) fn forget_touched_placeholders(&mut self) {
        self.touched_placeholders.forget();
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
            gres_type_required: request.gres_type_required,
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
        // Slurm records the signal on the batch step (`0:15`), not on the job line (`0:0`).
        job.exit_code = (0, 0);
        if was_running {
            job.completing = true;
        } else {
            // slurmctld's job_signal leaves a pending job's reason as it was (squeue -t all
            // shows a job cancelled while waiting on Priority with Reason Priority).
            job.start = Some(now);
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
        self.free(id, now);
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
}
