//! SUNK readiness: the guide's step 1 as a live checklist (`cwsandbox_sim::readiness`), each red
//! item with the guide's fix.

use cwsandbox_sim::readiness::sunk_readiness;
use cwsandbox_surface::app::App;
use maud::{Markup, html};

use super::heading;
use crate::viewer::{Refusal, Viewer, rpc};

/// The view.
pub fn render(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    // The checklist reads Pods, runners' policies and the Slurm settings: what ListPods admits.
    viewer.caller_for(rpc::LIST_PODS)?;
    let scope = viewer.scope();
    let (checks, now) = app.driver().with_world(|world| (sunk_readiness(world, &scope), world.now()));
    let red = checks.iter().filter(|check| !check.ok).count();
    Ok(html! {
        (heading("SUNK readiness", now))
        p.summary data-red=(red) {
            @if red == 0 { "Every item holds: sandbox Pods can go through the SUNK Pod Scheduler." }
            @else { (red) " of " (checks.len()) " items need a change before sandbox Pods go through SUNK." }
        }
        ol.checklist {
            @for check in &checks {
                li class={ "check " (if check.ok { "ok" } else { "red" }) } data-check=(check.kind.key())
                    data-ok=(check.ok) {
                    span.mark aria-label=(if check.ok { "holds" } else { "does not hold" }) {
                        (if check.ok { "✓" } else { "✗" })
                    }
                    div {
                        strong { (check.title) }
                        p.detail { (check.detail) }
                        @if !check.fix.is_empty() { p.fix { "Fix: " (check.fix) } }
                    }
                }
            }
        }
    })
}
