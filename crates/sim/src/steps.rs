//! Job steps as the accounting database records them, derived from a job: the `batch` step of
//! the job's script and, with `PrologFlags=Contain`, the `extern` step that holds the job's
//! container from allocation to the end. `sacct` prints them under the job unless `-X`.
//!
//! Derived, not stored: a step's times and state follow from the job's, so nothing here can
//! drift from the job record.

use crate::slurm::{Job, JobBaseState};
use crate::time::SimTime;

/// Which step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `<id>.batch`: the batch script (for a placeholder, SUNK's placeholder script).
    Batch,
    /// `<id>.extern`: the job container (`PrologFlags=Contain`).
    Extern,
}

impl StepKind {
    /// The step id after the dot, which is also the step's name in `sacct` JobName.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Batch => "batch",
            StepKind::Extern => "extern",
        }
    }
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStep {
    /// Which step.
    pub kind: StepKind,
    /// Base state.
    pub state: JobBaseState,
    /// When it started (the job's start).
    pub start: SimTime,
    /// When it ended (the job's end), if it did.
    pub end: Option<SimTime>,
    /// The job's node.
    pub node: String,
    /// CPUs of the step (the job's allocation: one node).
    pub alloc_cpus: u32,
    /// Exit status and signal.
    pub exit_code: (i32, i32),
}

impl JobStep {
    /// Elapsed run time at `now`.
    pub fn elapsed_seconds(&self, now: SimTime) -> i64 {
        (self.end.unwrap_or(now).secs() - self.start.secs()).max(0)
    }
}

/// The steps of `job` in the order `sacct` lists them (`batch`, then `extern`). A job that never
/// got a node has none; the batch step exists once the script started (a job still in its
/// prolog has only the extern step); `contain` is `PrologFlags` holding `Contain`.
pub fn job_steps(job: &Job, contain: bool) -> Vec<JobStep> {
    let (Some(start), Some(node)) = (job.start, job.node.as_ref()) else { return Vec::new() };
    let mut steps = Vec::new();
    let step = |kind, state, exit_code| JobStep {
        kind,
        state,
        start,
        end: job.end,
        node: node.clone(),
        alloc_cpus: job.alloc_cpus,
        exit_code,
    };
    if !job.in_prolog {
        // The script is what Slurm signals: a cancelled, preempted or timed-out job's batch step
        // ends CANCELLED by SIGTERM (Slurm records no requester on the step), a finished one
        // carries the job's own exit.
        let (state, exit_code) = match job.state {
            JobBaseState::Cancelled | JobBaseState::Preempted | JobBaseState::Timeout => {
                (JobBaseState::Cancelled, (0, 15))
            }
            JobBaseState::Requeued => (JobBaseState::Cancelled, (0, 15)),
            state => (state, job.exit_code),
        };
        steps.push(step(StepKind::Batch, state, exit_code));
    }
    if contain {
        // The extern step only holds the container: it ends COMPLETED whenever the job ends.
        let state =
            if job.end.is_some() || job.state.is_finished() { JobBaseState::Completed } else { JobBaseState::Running };
        steps.push(step(StepKind::Extern, state, (0, 0)));
    }
    steps
}

/// `ExitCode` as the controller shows it (`scontrol show job`, squeue's `exit_code`): the job's
/// own until its batch script reports, then the script's when the job's was 0 (`_job_complete`
/// of slurmctld's job_mgr.c: a finished job's `exit_code`, if 0, takes the script's return
/// code). So a job cancelled while running, preempted or timed out shows the script's SIGTERM
/// (`0:15`) while its accounting job line keeps `0:0`.
pub fn controller_exit_code(job: &Job) -> (i32, i32) {
    if job.exit_code != (0, 0) {
        return job.exit_code;
    }
    job_steps(job, false)
        .into_iter()
        .find(|step| step.kind == StepKind::Batch && step.end.is_some())
        .map_or(job.exit_code, |step| step.exit_code)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::slurm::{JobKind, Sharing};

    fn job(state: JobBaseState, start: Option<i64>, end: Option<i64>) -> Job {
        let name: Arc<str> = Arc::from("root");
        Job {
            id: 1000,
            name: "ns/pod".to_owned(),
            user: name.clone(),
            uid: 0,
            group: name.clone(),
            gid: 0,
            account: name.clone(),
            partition: Arc::from("cpu"),
            qos: Arc::from("normal"),
            comment: String::new(),
            reservation: String::new(),
            req_cpus: 2,
            req_mem_mb: 512,
            req_gpus: 0,
            gres_type: None,
            gres_type_required: false,
            sharing: Sharing::Default,
            time_limit_seconds: None,
            priority: 100,
            state,
            completing: false,
            reason: "None".to_owned(),
            submit: SimTime::from_secs(100),
            start: start.map(SimTime::from_secs),
            end: end.map(SimTime::from_secs),
            node: start.map(|_| "slurm-cpu-0".to_owned()),
            gpu_indices: Vec::new(),
            alloc_cpus: if start.is_some() { 2 } else { 0 },
            exit_code: if state == JobBaseState::Cancelled { (0, 15) } else { (0, 0) },
            cancelled_by: (state == JobBaseState::Cancelled).then_some(0),
            extra: String::new(),
            kind: JobKind::Batch { run_seconds: None, exit_code: 0, command: None },
            in_prolog: false,
            waiting_for_preempted: Vec::new(),
        }
    }

    #[test]
    fn a_pending_job_has_no_steps() {
        assert!(job_steps(&job(JobBaseState::Pending, None, None), true).is_empty());
        // Cancelled while pending: start = end in accounting, but no node, so no step ran.
        let mut cancelled = job(JobBaseState::Cancelled, None, Some(200));
        cancelled.start = Some(SimTime::from_secs(200));
        assert!(job_steps(&cancelled, true).is_empty());
    }

    #[test]
    fn a_running_job_has_batch_and_extern_with_contain_only() {
        let running = job(JobBaseState::Running, Some(150), None);
        let steps = job_steps(&running, true);
        assert_eq!(steps.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(), ["batch", "extern"]);
        assert!(steps.iter().all(|s| s.state == JobBaseState::Running && s.end.is_none() && s.alloc_cpus == 2));
        assert_eq!(steps[0].elapsed_seconds(SimTime::from_secs(160)), 10);
        let steps = job_steps(&running, false);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].kind, StepKind::Batch);
    }

    #[test]
    fn a_job_in_its_prolog_has_only_the_extern_step() {
        let mut prolog = job(JobBaseState::Running, Some(150), None);
        prolog.in_prolog = true;
        let steps = job_steps(&prolog, true);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].kind, StepKind::Extern);
    }

    #[test]
    fn a_cancelled_job_has_a_signalled_batch_step_and_a_completed_extern_step() {
        let steps = job_steps(&job(JobBaseState::Cancelled, Some(150), Some(170)), true);
        assert_eq!((steps[0].state, steps[0].exit_code), (JobBaseState::Cancelled, (0, 15)));
        assert_eq!((steps[1].state, steps[1].exit_code), (JobBaseState::Completed, (0, 0)));
        assert_eq!(steps[1].elapsed_seconds(SimTime::from_secs(999)), 20);
    }

    #[test]
    fn a_failed_job_keeps_its_exit_on_the_batch_step() {
        let mut failed = job(JobBaseState::Failed, Some(150), Some(170));
        failed.exit_code = (3, 0);
        let steps = job_steps(&failed, true);
        assert_eq!((steps[0].state, steps[0].exit_code), (JobBaseState::Failed, (3, 0)));
    }

    #[test]
    fn the_controller_shows_the_signal_of_a_script_it_killed_and_the_reason_it_ended() {
        // As the sim ends them: the job line 0:0 for a cancelled or timed-out job.
        let ended = |state, start: Option<i64>| Job { exit_code: (0, 0), ..job(state, start, Some(170)) };
        let cancelled = ended(JobBaseState::Cancelled, Some(150));
        let timed_out = ended(JobBaseState::Timeout, Some(150));
        assert_eq!(controller_exit_code(&cancelled), (0, 15));
        assert_eq!(controller_exit_code(&timed_out), (0, 15));
        assert_eq!(controller_exit_code(&ended(JobBaseState::Completed, Some(150))), (0, 0));
        // Cancelled while pending: no script ran.
        assert_eq!(controller_exit_code(&ended(JobBaseState::Cancelled, None)), (0, 0));
        // Still running: its script has reported nothing.
        assert_eq!(controller_exit_code(&job(JobBaseState::Running, Some(150), None)), (0, 0));
        let failed = Job { exit_code: (3, 0), ..ended(JobBaseState::Failed, Some(150)) };
        assert_eq!(controller_exit_code(&failed), (3, 0));

        assert_eq!(failed.controller_reason(), "NonZeroExitCode");
        assert_eq!(timed_out.controller_reason(), "TimeLimit");
        assert_eq!(cancelled.controller_reason(), "None");
        let waited = Job { reason: "Priority".to_owned(), ..ended(JobBaseState::Cancelled, None) };
        assert_eq!(waited.controller_reason(), "Priority");
    }
}
