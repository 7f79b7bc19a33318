//! The operator's views: runners and their policies, the request log, the clock and the faults.

use axum::extract::State;
use connectrpc_axum::ConnectRequest;
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_surface::app::App;
use cwsandbox_surface::identity::Role;
use cwsandbox_surface::services::{emulator, faults as fault_service};
use maud::{Markup, html};

use super::heading;
use crate::format;
use crate::viewer::{Refusal, Viewer, rpc};

/// How many calls the Requests view shows.
const REQUESTS_SHOWN: usize = 200;

/// Runners and policies: each policy as YAML, the `base` fields (enforced on every sandbox)
/// marked, with its etag and revisions.
pub fn runners(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    viewer.caller_for(rpc::LIST_RUNNERS)?;
    let scope = viewer.scope();
    let (runners, now) = app.driver().with_world(|world| {
        let mut runners = Vec::new();
        for org in world.runners.organizations().filter(|org| scope.sees(Some(org))) {
            for runner in world.runners.iter(org) {
                runners.push((org.to_owned(), runner.clone()));
            }
        }
        (runners, world.now())
    });
    Ok(html! {
        (heading("Runners and policies", now))
        @if runners.is_empty() { p.empty { "No runners." } }
        @for (org, runner) in &runners {
            @let id = runner.identity.as_ref().map(|identity| identity.runner_id.clone()).unwrap_or_default();
            article.runner data-runner=(id) {
                header {
                    h2 { (id) }
                    span.badge { (org) }
                    @if !runner.display_name.is_empty() { span.badge { (runner.display_name) } }
                    @if runner.rollout_in_progress { span.badge.lock { "rollout in progress" } }
                }
                dl.facts {
                    dt { "etag" } dd { code.etag { (runner.etag) } }
                    dt { "Revisions" } dd { "active " (runner.active_revision) ", target " (runner.target_revision) }
                    dt { "Config version" } dd { (runner.active_config_version) }
                }
                h3 { "Policy" }
                (policy_yaml(runner.policy.as_ref()))
            }
        }
    })
}

/// The policy as YAML, each line under `base:` marked enforced: base is merged under every
/// sandbox's spec, which cannot override it.
fn policy_yaml(policy: Option<&cwsandbox_api::sandbox_v1::Policy>) -> Markup {
    let yaml = policy
        .and_then(|policy| serde_json::to_value(policy).ok())
        .and_then(|value| serde_saphyr::to_string(&value).ok())
        .unwrap_or_default();
    let yaml = if yaml.trim().is_empty() || yaml.trim() == "{}" { "{}\n".to_owned() } else { yaml };
    let mut in_base = false;
    html! {
        pre.policy {
            @for line in yaml.lines() {
                @let top_level = !line.starts_with(' ') && !line.is_empty();
                @if top_level { (set(&mut in_base, line.starts_with("base:"))) }
                @if in_base {
                    span.line.enforced title="enforced: base is merged under every sandbox" { (line) "\n" }
                } @else {
                    span.line { (line) "\n" }
                }
            }
        }
    }
}

/// Sets `flag` inside a template (maud has no statements), rendering nothing.
fn set(flag: &mut bool, value: bool) -> &'static str {
    *flag = value;
    ""
}

/// The request log: the last calls the viewer's scope covers (an operator's: all).
pub fn requests(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    let operator = viewer.has(Role::ClusterAdmin);
    let org = viewer.principal.org.clone();
    let calls = app.requests().newest(REQUESTS_SHOWN, |call| operator || call.org == org);
    let now = app.driver().with_world(|world| world.now());
    Ok(html! {
        (heading("Requests", now))
        p.count { "The last " (calls.len()) " API calls" @if !operator { " of " (org) } ", newest first." }
        table.requests {
            thead { tr { th { "#" } th { "When" } th { "Method" } th { "Caller" } th { "Code" } th { "ms" } th { "Faults" } } }
            tbody {
                @for call in &calls {
                    tr data-method=(call.method) data-code=(call.code) class=(if call.code == "OK" { "" } else { "failed" }) {
                        td { (call.sequence) }
                        td { (wall_time(call.at)) }
                        td { code { (call.method) } @if call.from_dashboard { " " span.badge title="made with this dashboard's buttons" { "dashboard" } } }
                        td { @if call.user.is_empty() { "—" } @else { (call.user) " (" (call.org) ")" } }
                        td { (call.code) }
                        td.number { (format!("{:.1}", call.duration.as_secs_f64() * 1000.0)) }
                        td { (call.faults.join(", ")) }
                    }
                }
                @if calls.is_empty() { tr { td colspan="7" .empty { "No calls yet." } } }
            }
        }
    })
}

fn wall_time(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    chrono::DateTime::from_timestamp_millis(since.as_millis() as i64)
        .map(|time| time.format("%H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// The simulated clock, with freeze, resume and advance for those who may.
pub async fn clock(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    let caller = viewer.caller_for(rpc::GET_CLOCK)?;
    let clock = emulator::get_clock(State(app.clone()), caller, ConnectRequest(pb::GetClockRequest {}))
        .await
        .map_err(Refusal::from)?
        .into_inner()
        .clock
        .unwrap_or_default();
    let now = app.driver().with_world(|world| world.now());
    let may_change = viewer.may(rpc::FREEZE_CLOCK);
    Ok(html! {
        (heading("Clock", now))
        p.clock data-frozen=(clock.frozen) {
            "Simulated time " strong #clock-now { (format::time(now)) } " — "
            @if clock.frozen { strong.frozen { "frozen" } } @else { "running with the wall clock" }
        }
        @if may_change {
            div.actions {
                @if clock.frozen {
                    form #resume data-action="/ui/api/clock/resume" { button type="submit" { "Resume" } }
                } @else {
                    form #freeze data-action="/ui/api/clock/freeze" { button type="submit" { "Freeze" } }
                }
                form #advance data-action="/ui/api/clock/advance" {
                    label { "Advance by " input name="seconds" type="number" min="1" value="30" required; " s" }
                    button type="submit" { "Advance" }
                }
                span data-result {}
            }
        } @else {
            p.note { "Changing the clock needs the cluster_admin role." }
        }
    })
}

/// The fault rules in force, with how often each matched and hit.
pub async fn faults(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    let caller = viewer.caller_for(rpc::LIST_FAULTS)?;
    let listed = fault_service::list_faults(State(app.clone()), caller, ConnectRequest(pb::ListFaultsRequest {}))
        .await
        .map_err(Refusal::from)?
        .into_inner();
    let now = app.driver().with_world(|world| world.now());
    let compact = |value: Option<serde_json::Value>| value.map(|value| value.to_string()).unwrap_or_default();
    Ok(html! {
        (heading("Faults", now))
        table.faults {
            thead { tr { th { "ID" } th { "Match" } th { "Action" } th { "Domain" } th { "Matched" } th { "Hits" } } }
            tbody {
                @for fault in &listed.faults {
                    tr data-fault=(fault.id) {
                        td { code { (fault.id) } }
                        td { code { (compact(fault.r#match.as_ref().and_then(|value| serde_json::to_value(value).ok()))) } }
                        td { code { (compact(fault.action.as_ref().and_then(|value| serde_json::to_value(value).ok()))) } }
                        td { code { (compact(fault.domain.as_ref().and_then(|value| serde_json::to_value(value).ok()))) } }
                        td.number { (fault.matched) }
                        td.number data-hits=(fault.hits) { (fault.hits) }
                    }
                }
                @if listed.faults.is_empty() { tr { td colspan="6" .empty { "No faults in force." } } }
            }
        }
    })
}
