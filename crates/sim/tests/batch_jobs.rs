//! Batch jobs submitted through the emulator's API (`SubmitBatchJob`): one that ends by itself
//! with a non-zero status is FAILED with `ExitCode N:0` on its job line and its batch step, as
//! Slurm records a script that exits non-zero; the request's status is checked.

mod common;

use common::*;
use cwsandbox_api::emulator_v1::SubmitBatchJobRequest;
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::query::Scope;
use cwsandbox_sim::slurm::JobBaseState;
use cwsandbox_sim::steps::{StepKind, job_steps};

fn request(run_seconds: Option<u32>, exit_code: Option<i32>) -> SubmitBatchJobRequest {
    SubmitBatchJobRequest { name: "train".to_owned(), cpus: 1, run_seconds, exit_code, ..Default::default() }
}

#[test]
fn a_script_that_exits_non_zero_fails_with_its_status() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let failing = h.world.submit_batch(&Scope::Cluster, 0, &request(Some(30), Some(3))).unwrap();
    let passing = h.world.submit_batch(&Scope::Cluster, 0, &request(Some(30), None)).unwrap();
    h.advance(29);
    assert_eq!(h.queued(failing).unwrap().state, JobBaseState::Running);
    h.advance(1);
    let failed = h.world.slurm.accounting_record(failing).unwrap();
    assert_eq!((failed.state, failed.exit_code), (JobBaseState::Failed, (3, 0)));
    let steps = job_steps(&failed, true);
    let batch = steps.iter().find(|step| step.kind == StepKind::Batch).unwrap();
    assert_eq!((batch.state, batch.exit_code), (JobBaseState::Failed, (3, 0)));
    let completed = h.world.slurm.accounting_record(passing).unwrap();
    assert_eq!((completed.state, completed.exit_code), (JobBaseState::Completed, (0, 0)));
}

#[test]
fn an_exit_status_needs_a_run_time_and_a_status_range() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let never_ends = h.world.submit_batch(&Scope::Cluster, 0, &request(None, Some(1))).unwrap_err();
    assert_eq!(never_ends.violations()[0].field, "exit_code");
    assert!(never_ends.to_string().contains("run_seconds"), "{never_ends}");
    for code in [-1, 256] {
        let out_of_range = h.world.submit_batch(&Scope::Cluster, 0, &request(Some(5), Some(code))).unwrap_err();
        assert_eq!(out_of_range.violations()[0].field, "exit_code");
        assert!(out_of_range.to_string().contains("0 to 255"), "{out_of_range}");
    }
    assert!(h.world.submit_batch(&Scope::Cluster, 0, &request(None, Some(0))).is_ok(), "0 is the default");
}

/// MinJobAge: a finished job stays a queue row (squeue -t all, scontrol show job) for that long
/// after its end, then only the accounting has it.
#[test]
fn a_finished_job_stays_in_the_controller_for_min_job_age() {
    use cwsandbox_sim::query::{JobQuery, JobSource};
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let job = h.world.submit_batch(&Scope::Cluster, 0, &request(Some(10), Some(2))).unwrap();
    h.advance(10);
    let queue_rows = |h: &Harness| {
        let query = JobQuery { queue: true, accounting: false, job_ids: vec![job], ..JobQuery::default() };
        h.world.query_jobs(&query).iter().filter(|row| row.source == JobSource::Queue).count()
    };
    h.advance(10);
    assert_eq!(h.world.slurm.accounting_record(job).unwrap().state, JobBaseState::Failed);
    assert_eq!(queue_rows(&h), 1, "kept by the controller after its end");
    h.advance(300);
    assert_eq!(queue_rows(&h), 0, "gone from the controller once MinJobAge (300 s) passed");
}

/// `scontrol update … state=drain` records who drained the node and when (`sinfo -R`); a node
/// remembers when its last job left (`LastBusyTime`).
#[test]
fn a_drain_records_its_user_and_time_and_a_node_its_last_busy_time() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let booted = h.world.now();
    let job = h.world.submit_batch(&Scope::Cluster, 0, &request(Some(10), None)).unwrap();
    let node = h.queued(job).unwrap().node.clone().unwrap();
    h.advance(3);
    h.world.drain_node_by_operator(&node, "disk is full", 1001).unwrap();
    let drain = h.world.slurm.node(&node).unwrap().drain.clone().unwrap();
    assert_eq!((drain.reason.as_str(), drain.uid, drain.at), ("disk is full", 1001, h.world.now()));
    let slurm_node = h.world.slurm.node(&node).unwrap();
    assert_eq!((slurm_node.boot_time, slurm_node.last_busy), (booted, booted), "busy since registration");
    h.advance(7);
    let left = h.world.now();
    assert!(h.queued(job).is_none() || h.queued(job).is_some_and(|job| job.completing));
    h.advance(1);
    assert_eq!(h.world.slurm.node(&node).unwrap().last_busy, left, "its last job left at its end");
}

/// While a job waits for resources, the backfill estimate is when a node that can hold it frees
/// enough: running jobs end at their time limit, a year after their start without one.
#[test]
fn a_pending_job_is_expected_to_start_when_a_running_job_reaches_its_limit() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let whole_node = |limit: Option<u32>| SubmitBatchJobRequest {
        name: "wide".to_owned(),
        cpus: 16,
        time_limit_seconds: limit,
        partition: "hpc-prod".to_owned(),
        ..Default::default()
    };
    let start = h.world.now();
    let nodes = h.world.slurm.partitions["hpc-prod"].nodes.len();
    // Fill every node: the first with a 10-minute limit, the rest without one.
    h.world.submit_batch(&Scope::Cluster, 0, &whole_node(Some(600))).unwrap();
    for _ in 1..nodes {
        h.world.submit_batch(&Scope::Cluster, 0, &whole_node(None)).unwrap();
    }
    let waiting = h.world.submit_batch(&Scope::Cluster, 0, &whole_node(Some(60))).unwrap();
    h.advance(1);
    let job = h.queued(waiting).unwrap().clone();
    assert_eq!((job.state, job.reason.as_str()), (JobBaseState::Pending, "Resources"));
    let estimate = h.world.estimated_start(&job).expect("an estimate");
    assert_eq!(estimate.secs() - start.secs(), 600, "when the limited job's 10 minutes run out");
    let running = h.world.slurm.job(h.world.slurm.nodes.iter().find_map(|node| node.jobs.first().copied()).unwrap());
    assert!(h.world.estimated_start(running.unwrap()).is_none(), "a running job has no estimate");
    assert_eq!(h.world.submit_host(&job), "slurm-login-0", "batch jobs come from the login node");
    let controller = h.world.slurm_controller();
    assert_eq!((controller.cluster_name.as_str(), controller.host.as_str()), ("slurm", "slurm-controller-0"));
}
