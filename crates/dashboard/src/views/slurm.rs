//! Slurm: the queue with squeue's columns (COMPLETING marked) and accounting with sacct's,
//! filtered by partition, user and state. The rows are ListJobs' own answer for the viewer, so
//! slurm.conf's `PrivateData=jobs` and the organization scope hold as in `squeue`.

use std::collections::HashMap;

use axum::extract::State;
use connectrpc_axum::ConnectRequest;
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_surface::app::App;
use cwsandbox_surface::services::emulator::list_jobs;
use maud::{Markup, html};

use crate::format;
use crate::viewer::{Refusal, Viewer, rpc};

/// The states the filter offers: (query value, proto state).
const STATES: &[(&str, pb::JobState)] = &[
    ("PENDING", pb::JobState::Pending),
    ("RUNNING", pb::JobState::Running),
    ("COMPLETED", pb::JobState::Completed),
    ("CANCELLED", pb::JobState::Cancelled),
    ("FAILED", pb::JobState::Failed),
    ("TIMEOUT", pb::JobState::Timeout),
    ("PREEMPTED", pb::JobState::Preempted),
    ("REQUEUED", pb::JobState::Requeued),
    ("NODE_FAIL", pb::JobState::NodeFail),
];

fn state_name(state: i32) -> &'static str {
    STATES.iter().find(|(_, value)| *value as i32 == state).map_or("UNKNOWN", |(name, _)| name)
}

/// squeue's compact state.
fn compact(job: &pb::Job) -> &'static str {
    if job.completing {
        return "CG";
    }
    match pb::JobState::try_from(job.state).unwrap_or(pb::JobState::Unspecified) {
        pb::JobState::Pending => "PD",
        pb::JobState::Running => "R",
        pb::JobState::Completed => "CD",
        pb::JobState::Cancelled => "CA",
        pb::JobState::Failed => "F",
        pb::JobState::Timeout => "TO",
        pb::JobState::Preempted => "PR",
        pb::JobState::Requeued => "RQ",
        pb::JobState::NodeFail => "NF",
        pb::JobState::Unspecified => "?",
    }
}

/// The view; `params`: `partition`, `user`, `state` (any may be empty).
pub async fn render(app: &App, viewer: &Viewer, params: &HashMap<String, String>) -> Result<Markup, Refusal> {
    let caller = viewer.caller_for(rpc::LIST_JOBS)?;
    let filter = |key: &str| params.get(key).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
    let partition = filter("partition");
    let user = filter("user");
    let state = filter("state");
    let states = match &state {
        None => Vec::new(),
        Some(name) => match STATES.iter().find(|(known, _)| known.eq_ignore_ascii_case(name)) {
            Some((_, state)) => vec![*state as i32],
            None => return Err(Refusal::BadRequest(format!("state: {name:?} is not a Slurm job state"))),
        },
    };
    let request = |source: pb::JobSource| pb::ListJobsRequest {
        source: source as i32,
        partitions: partition.iter().cloned().collect(),
        users: user.iter().cloned().collect(),
        states: states.clone(),
        ..Default::default()
    };
    let queue = list_jobs(State(app.clone()), caller.clone(), ConnectRequest(request(pb::JobSource::Queue)))
        .await
        .map_err(|error| Refusal::BadRequest(error.message().unwrap_or("ListJobs failed").to_owned()))?
        .into_inner();
    let accounting = list_jobs(State(app.clone()), caller, ConnectRequest(request(pb::JobSource::Accounting)))
        .await
        .map_err(|error| Refusal::BadRequest(error.message().unwrap_or("ListJobs failed").to_owned()))?
        .into_inner();
    let (partitions, now) = app.driver().with_world(|world| {
        let names: Vec<String> =
            world.values().slurm.partitions.iter().map(|partition| partition.name.clone()).collect();
        (names, world.now())
    });
    Ok(html! {
        (super::heading("Slurm", now))
        form.filters method="get" data-filter {
            label { "Partition "
                select name="partition" {
                    option value="" { "any" }
                    @for name in &partitions {
                        option value=(name) selected[partition.as_deref() == Some(name.as_str())] { (name) }
                    }
                }
            }
            label { "User " input name="user" value=(user.clone().unwrap_or_default()) placeholder="any"; }
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for (name, _) in STATES {
                        option value=(name) selected[state.as_deref() == Some(*name)] { (name) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        h2 { "Queue " small { "(squeue)" } }
        table.jobs #queue {
            thead { tr { th { "JOBID" } th { "PARTITION" } th { "NAME" } th { "USER" } th { "ST" } th { "TIME" } th { "NODES" } th { "NODELIST(REASON)" } } }
            tbody {
                @for job in &queue.jobs {
                    tr data-job=(job.job_id) data-state=(compact(job)) class=(if job.completing { "completing" } else { "" }) {
                        td { (job.job_id) } td { (job.partition) } td { (job.name) } td { (job.user) }
                        td.st { (compact(job)) } td { (format::elapsed(job.elapsed_seconds)) }
                        td { (job.alloc_nodes.max(1)) }
                        td { @if job.node_list.is_empty() { "(" (job.reason) ")" } @else { (job.node_list) } }
                    }
                }
                @if queue.jobs.is_empty() { tr { td colspan="8" .empty { "No jobs in the queue." } } }
            }
        }
        h2 { "Accounting " small { "(sacct)" } }
        table.jobs #accounting {
            thead { tr { th { "JobID" } th { "JobName" } th { "Partition" } th { "Account" } th { "User" } th { "AllocCPUS" } th { "State" } th { "ExitCode" } th { "Elapsed" } } }
            tbody {
                @for job in &accounting.jobs {
                    tr data-job=(job.job_id) data-state=(state_name(job.state)) {
                        td { (job.job_id) } td { (job.name) } td { (job.partition) } td { (job.account) } td { (job.user) }
                        td { (job.alloc_cpus) } td { (state_name(job.state)) }
                        td { (job.exit_code) ":" (job.exit_signal) } td { (format::elapsed(job.elapsed_seconds)) }
                    }
                }
                @if accounting.jobs.is_empty() { tr { td colspan="9" .empty { "No accounting records." } } }
            }
        }
    })
}
