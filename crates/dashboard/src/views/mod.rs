//! The views: each reads the world (or the API's handlers) for one viewer and renders an HTML
//! fragment that the page swaps into `<main>`.

mod admin;
mod cluster;
mod readiness;
mod sandboxes;
mod slurm;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use cwsandbox_surface::app::App;
use http::HeaderMap;
use maud::{Markup, html};

use crate::viewer::{Refusal, Viewer};

/// GET /ui/api/view/{view}: one view as an HTML fragment.
pub async fn view(
    State(app): State<App>,
    Path(view): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let viewer = match Viewer::of(&app, &headers) {
        Ok(viewer) => viewer,
        Err(refusal) => return refusal.into_response(),
    };
    let parts: Vec<&str> = view.trim_matches('/').split('/').collect();
    let rendered = match parts.as_slice() {
        [""] | ["cluster"] => cluster::render(&app, &viewer),
        ["readiness"] => readiness::render(&app, &viewer),
        ["slurm"] => slurm::render(&app, &viewer, &params).await,
        ["sandboxes"] => sandboxes::list(&app, &viewer, &params),
        ["sandboxes", id] => sandboxes::page(&app, &viewer, id),
        ["runners"] => admin::runners(&app, &viewer),
        ["requests"] => admin::requests(&app, &viewer),
        ["clock"] => admin::clock(&app, &viewer).await,
        ["faults"] => admin::faults(&app, &viewer).await,
        _ => Err(Refusal::NotFound(format!("there is no view {view:?}"))),
    };
    match rendered {
        Ok(markup) => {
            ([(http::header::CACHE_CONTROL, "no-store")], axum::response::Html(markup.into_string())).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// A view's heading with the simulated time it was read at.
fn heading(title: &str, now: cwsandbox_sim::time::SimTime) -> Markup {
    html! {
        div.view-head {
            h1 { (title) }
            span.read-at title="simulated time of this reading" { (crate::format::time(now)) }
        }
    }
}
