//! Slurm: the queue with squeue's columns (COMPLETING marked) and accounting with sacct's,
//! filtered by partition, user and state. The rows are ListJobs' own answer for the viewer, so
//! slurm.conf's `PrivateData=jobs` and the organization scope hold as in `squeue`.

use std::collections::HashMap;

use axum::extract::State;
use connectrpc_axum::ConnectRequest;
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::slurm::JobBaseState;
use cwsandbox_surface::app::App;
use cwsandbox_surface::convert::emulator::{base_state, job_state};
use cwsandbox_surface::services::emulator::list_jobs;
use maud::{Markup, html};

use crate::format;
use crate::viewer::{Refusal, Viewer, rpc};

/// The states the filter offers, in sacct's order.
const STATES: [JobBaseState; 9] = [
    JobBaseState::Pending,
    JobBaseState::Running,
    JobBaseState::Completed,
    JobBaseState::Cancelled,
    JobBaseState::Failed,
    JobBaseState::Timeout,
    JobBaseState::Preempted,
    JobBaseState::Requeued,
    JobBaseState::NodeFail,
];

/// sacct's State of a row.
fn state_name(job: &pb::Job) -> &'static str {
    base_state(job.state, "state").map_or("UNKNOWN", JobBaseState::as_str)
}

/// squeue's compact state (`CG` while COMPLETING).
fn compact(job: &pb::Job) -> &'static str {
    if job.completing {
        return "CG";
    }
    base_state(job.state, "state").map_or("?", JobBaseState::compact)
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
        Some(name) => match STATES.iter().find(|known| known.as_str().eq_ignore_ascii_case(name)) {
            Some(state) => vec![job_state(*state) as i32],
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
        .map_err(Refusal::from)?
        .into_inner();
    let accounting = list_jobs(State(app.clone()), caller, ConnectRequest(request(pb::JobSource::Accounting)))
        .await
        .map_err(Refusal::from)?
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
                    @for known in STATES {
                        option value=(known.as_str()) selected[state.as_deref() == Some(known.as_str())] { (known.as_str()) }
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
                    tr data-job=(job.job_id) data-state=(state_name(job)) {
                        td { (job.job_id) } td { (job.name) } td { (job.partition) } td { (job.account) } td { (job.user) }
                        td { (job.alloc_cpus) } td { (state_name(job)) }
                        td { (job.exit_code) ":" (job.exit_signal) } td { (format::elapsed(job.elapsed_seconds)) }
                    }
                }
                @if accounting.jobs.is_empty() { tr { td colspan="9" .empty { "No accounting records." } } }
            }
        }
    })
}
