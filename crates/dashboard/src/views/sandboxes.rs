//! Sandboxes: the list (state, reason, runner, placement, owner) and one sandbox's page with its
//! annotations after policy, Events, a timeline of its life, logs, an exec box and delete.

use std::collections::HashMap;

use cwsandbox_sim::query::{JobQuery, ObjectQuery};
use cwsandbox_sim::sandbox::{SandboxState, SandboxView};
use cwsandbox_sim::slurm::JobBaseState;
use cwsandbox_sim::time::SimTime;
use cwsandbox_surface::app::App;
use maud::{Markup, html};

use super::heading;
use crate::format;
use crate::viewer::{Refusal, Viewer, rpc};

fn state_name(state: SandboxState) -> &'static str {
    match state {
        SandboxState::Creating => "CREATING",
        SandboxState::Pending => "PENDING",
        SandboxState::Running => "RUNNING",
        SandboxState::Terminating => "TERMINATING",
        SandboxState::Completed => "COMPLETED",
        SandboxState::Failed => "FAILED",
        SandboxState::Terminated => "TERMINATED",
    }
}

/// Every state, in life order.
const STATES: [SandboxState; 7] = [
    SandboxState::Creating,
    SandboxState::Pending,
    SandboxState::Running,
    SandboxState::Terminating,
    SandboxState::Completed,
    SandboxState::Failed,
    SandboxState::Terminated,
];

/// The list; `params`: `state` to show one state, `ended=1` to include ended sandboxes.
pub fn list(app: &App, viewer: &Viewer, params: &HashMap<String, String>) -> Result<Markup, Refusal> {
    viewer.caller_for(rpc::LIST_SANDBOXES)?;
    let scope = viewer.scope();
    let show_ended = params.get("ended").is_some_and(|value| value == "1");
    let wanted = match params.get("state").map(|value| value.trim()).filter(|value| !value.is_empty()) {
        None => None,
        Some(name) => match STATES.into_iter().find(|state| state_name(*state).eq_ignore_ascii_case(name)) {
            Some(state) => Some(state),
            None => return Err(Refusal::BadRequest(format!("state: {name:?} is not a sandbox state"))),
        },
    };
    let (mut sandboxes, now) = app.driver().with_world(|world| {
        let views: Vec<SandboxView> = world
            .every_sandbox()
            .filter(|view| scope.sees(Some(view.owner.org.as_str())))
            .filter(|view| show_ended || wanted.is_some() || !view.state.is_terminal())
            .filter(|view| wanted.is_none_or(|state| view.state == state))
            .collect();
        (views, world.now())
    });
    sandboxes.sort_by(|left, right| (right.created, &right.id).cmp(&(left.created, &left.id)));
    Ok(html! {
        (heading("Sandboxes", now))
        form.filters method="get" data-filter {
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for state in STATES {
                        option value=(state_name(state)) selected[wanted == Some(state)] { (state_name(state)) }
                    }
                }
            }
            label { input type="checkbox" name="ended" value="1" checked[show_ended]; " include ended sandboxes" }
            button type="submit" { "Show" }
        }
        p.count { (sandboxes.len()) " sandboxes" }
        table.sandboxes {
            thead { tr { th { "ID" } th { "State" } th { "Reason" } th { "Runner" } th { "Node" } th { "Slurm job" } th { "Annotations (after policy)" } th { "Owner" } th { "Created" } } }
            tbody {
                @for sandbox in &sandboxes {
                    tr data-sandbox=(sandbox.id) data-state=(state_name(sandbox.state)) {
                        td { a href={ "/ui/sandboxes/" (sandbox.id) } { (sandbox.id) } }
                        td.state { span class={ "state " (state_name(sandbox.state)) } { (state_name(sandbox.state)) } }
                        td { (sandbox.state_reason) }
                        td { (sandbox.runner_id) }
                        td { (sandbox.node_name.as_deref().unwrap_or("")) }
                        td { @if let Some(job) = sandbox.job_id { (job) } }
                        td.annotations {
                            @for (key, value) in &sandbox.resolved.annotations { code { (key) "=" (value) } " " }
                        }
                        td { (sandbox.owner.user) " (" (sandbox.owner.org) ")" }
                        td { (format::time(sandbox.created)) }
                    }
                }
                @if sandboxes.is_empty() { tr { td colspan="9" .empty { "No sandboxes." } } }
            }
        }
    })
}

/// What the timeline needs of a queue or accounting row of the sandbox's placeholder job.
struct JobReading {
    queue: bool,
    state: JobBaseState,
    completing: bool,
    submit: SimTime,
    start: Option<SimTime>,
    end: Option<SimTime>,
    node: String,
}

/// One entry of a sandbox's timeline.
struct Moment {
    at: SimTime,
    what: String,
    detail: String,
    class: &'static str,
}

/// One sandbox's page.
pub fn page(app: &App, viewer: &Viewer, id: &str) -> Result<Markup, Refusal> {
    viewer.caller_for(rpc::GET_SANDBOX)?;
    let scope = viewer.scope();
    let read = app.driver().with_world(|world| {
        let view = world.sandbox(id).filter(|view| scope.sees(Some(view.owner.org.as_str())))?;
        let pod = world.cluster.pod(&view.pod_uid).cloned();
        let events: Vec<(SimTime, String, String, bool)> = world
            .query_events(&ObjectQuery { scope: scope.clone(), ..ObjectQuery::default() })
            .into_iter()
            .filter(|event| *event.involved.uid == *view.pod_uid)
            .map(|event| {
                let warning = matches!(event.event_type, cwsandbox_sim::k8s::EventType::Warning);
                (event.time, event.reason.to_string(), event.message.to_string(), warning)
            })
            .collect();
        let jobs: Vec<JobReading> = match view.job_id {
            None => Vec::new(),
            Some(job) => world
                .query_jobs(&JobQuery {
                    scope: scope.clone(),
                    queue: true,
                    accounting: true,
                    job_ids: vec![job],
                    ..JobQuery::default()
                })
                .into_iter()
                .map(|row| JobReading {
                    queue: row.source == cwsandbox_sim::query::JobSource::Queue,
                    state: row.job.state,
                    completing: row.completing(),
                    submit: row.job.submit,
                    start: row.job.start,
                    end: row.job.end,
                    node: row.job.node.clone().unwrap_or_default(),
                })
                .collect(),
        };
        Some((view, pod, events, jobs, world.now()))
    });
    let Some((view, pod, events, jobs, now)) = read else {
        return Err(Refusal::NotFound(format!("sandbox {id:?} not found")));
    };
    let mine = view.owner.org == viewer.principal.org;
    let annotations: Vec<(String, String)> = match &pod {
        Some(pod) => pod.annotations.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect(),
        None => view.resolved.annotations.iter().map(|(key, value)| (key.clone(), value.clone())).collect(),
    };

    let mut moments = vec![Moment {
        at: view.created,
        what: "Created".to_owned(),
        detail: format!("runner {}", view.runner_id),
        class: "created",
    }];
    if matches!(view.state, SandboxState::Pending | SandboxState::Creating) {
        moments.push(Moment {
            at: view.created,
            what: format!("{} (now)", state_name(view.state)),
            detail: view.state_reason.clone(),
            class: "pending",
        });
    }
    for (at, reason, message, warning) in &events {
        moments.push(Moment {
            at: *at,
            what: reason.clone(),
            detail: message.clone(),
            class: if *warning { "warning" } else { "event" },
        });
    }
    if let Some(queue) = jobs.iter().find(|job| job.queue).or_else(|| jobs.first()) {
        let job = view.job_id.unwrap_or_default();
        moments.push(Moment {
            at: queue.submit,
            what: "Job submitted".to_owned(),
            detail: format!("Slurm job {job}"),
            class: "job",
        });
        if let Some(start) = queue.start {
            moments.push(Moment {
                at: start,
                what: "Allocated".to_owned(),
                detail: format!("on {}", queue.node),
                class: "job",
            });
            moments.push(Moment {
                at: start,
                what: "Prolog".to_owned(),
                detail: "SUNK's prolog locks the Node for the Pod".to_owned(),
                class: "job",
            });
        }
        if let Some(end) = queue.end {
            moments.push(Moment {
                at: end,
                what: "Job ended".to_owned(),
                detail: queue.state.as_str().to_owned(),
                class: "job",
            });
        }
        if queue.completing {
            moments.push(Moment {
                at: queue.end.unwrap_or(now),
                what: "COMPLETING".to_owned(),
                detail: "the job waits for its Pod to go (now)".to_owned(),
                class: "completing",
            });
        }
    }
    if let Some(started) = view.started {
        moments.push(Moment { at: started, what: "Running".to_owned(), detail: String::new(), class: "running" });
    }
    let deleted_at = pod.as_ref().and_then(|pod| pod.deletion_timestamp);
    if view.state == SandboxState::Terminating || deleted_at.is_some() {
        moments.push(Moment {
            at: deleted_at.unwrap_or(now),
            what: "Terminating".to_owned(),
            detail: "the Pod was asked to stop".to_owned(),
            class: "terminating",
        });
    }
    if let Some(ended) = view.ended {
        moments.push(Moment {
            at: ended,
            what: state_name(view.state).to_owned(),
            detail: view.state_reason.clone(),
            class: "ended",
        });
    }
    if let Some(record) = jobs.iter().find(|job| !job.queue && job.end.is_some()) {
        moments.push(Moment {
            at: record.end.unwrap_or(now),
            what: "Accounted".to_owned(),
            detail: format!("sacct: {}", record.state.as_str()),
            class: "accounted",
        });
    }
    moments.sort_by_key(|moment| moment.at);

    let sandbox_id = view.id.to_string();
    Ok(html! {
        (heading(&format!("Sandbox {sandbox_id}"), now))
        p { a href="/ui/sandboxes" { "← all sandboxes" } }
        dl.facts data-sandbox=(sandbox_id) {
            dt { "State" } dd #sandbox-state data-state=(state_name(view.state)) { span class={ "state " (state_name(view.state)) } { (state_name(view.state)) } }
            dt { "Reason" } dd { (view.state_reason) }
            dt { "Owner" } dd { (view.owner.user) " (" (view.owner.org) ")" }
            dt { "Runner" } dd { (view.runner_id) }
            dt { "Pod" } dd { code { (view.namespace) "/" (view.pod_name) } }
            dt { "Node" } dd { (view.node_name.as_deref().unwrap_or("—")) }
            dt { "Slurm job" } dd { @if let Some(job) = view.job_id { (job) } @else { "—" } }
            @if let Some(code) = view.exit_code { dt { "Exit code" } dd { (code) } }
        }
        h2 { "Annotations " small { "(after policy)" } }
        @if annotations.is_empty() { p.empty { "None." } }
        @else {
            table.annotations { tbody { @for (key, value) in &annotations { tr { td { code { (key) } } td { code { (value) } } } } } }
        }
        h2 { "Timeline" }
        ol.timeline {
            @for moment in &moments {
                li class=(moment.class) {
                    time { (format::time(moment.at)) }
                    strong { (moment.what) }
                    @if !moment.detail.is_empty() { span.detail { (moment.detail) } }
                }
            }
        }
        h2 { "Events" }
        table.events {
            thead { tr { th { "Time" } th { "Type" } th { "Reason" } th { "Message" } } }
            tbody {
                @for (at, reason, message, warning) in &events {
                    tr class=(if *warning { "warning" } else { "" }) {
                        td { (format::time(*at)) } td { (if *warning { "Warning" } else { "Normal" }) } td { (reason) } td { (message) }
                    }
                }
                @if events.is_empty() { tr { td colspan="4" .empty { "No Events." } } }
            }
        }
        @if mine && viewer.may(rpc::STREAM_LOGS) {
            section #logs-panel data-keep {
                h2 { "Logs" }
                label { input #follow type="checkbox" checked; " follow" }
                pre #logs data-logs={ "/ui/api/logs/" (sandbox_id) } {}
            }
        }
        @if mine && viewer.may(rpc::EXEC) && view.state == SandboxState::Running {
            section #exec-panel data-keep {
                h2 { "Exec" }
                form #exec data-action={ "/ui/api/sandboxes/" (sandbox_id) "/exec" } {
                    input name="command" placeholder="a shell command, run with sh -c" required;
                    button type="submit" { "Run" }
                }
                pre #exec-output data-result {}
            }
        }
        @if mine && viewer.may(rpc::DELETE_SANDBOX) && !view.state.is_terminal() {
            form #delete data-action={ "/ui/api/sandboxes/" (sandbox_id) "/delete" } {
                button.danger type="submit" data-confirm="Click again to delete" { "Delete sandbox" }
                span data-result {}
            }
        }
    })
}
