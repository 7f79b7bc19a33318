//! What keeps the page live: the change stream and a sandbox's log stream.
//!
//! Both are read by the script with `fetch` and a body reader rather than `EventSource`, because
//! `EventSource` cannot send the `Authorization` header and the token must not go in a URL.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use connectrpc_axum::ConnectRequest;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_surface::app::App;
use cwsandbox_surface::services::data::stream_logs;
use futures::StreamExt;
use http::HeaderMap;
use tokio::time::Instant;

use crate::viewer::{Refusal, Viewer, rpc};

/// The least time between two `world` events: a burst of changes (a thousand sandboxes made in
/// a loop) costs the page one fetch per interval, not one per change.
const MIN_EVENT_INTERVAL: Duration = Duration::from_millis(100);
/// A comment this often keeps proxies and the browser from closing an idle stream.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Lines a log view starts with.
const LOG_TAIL_LINES: i32 = 500;

struct ChangeState {
    world: tokio::sync::watch::Receiver<u64>,
    requests: tokio::sync::watch::Receiver<u64>,
    last_world: Option<Instant>,
    started: bool,
}

/// GET /ui/api/changes: `text/event-stream` with `event: world` when anything in the world
/// changed and `event: requests` when the request log grew.
pub async fn changes(State(app): State<App>, headers: HeaderMap) -> Response {
    if let Err(refusal) = Viewer::of(&app, &headers) {
        return refusal.into_response();
    }
    let state = ChangeState {
        world: app.driver().changes(),
        requests: app.requests().changes(),
        last_world: None,
        started: false,
    };
    let events = futures::stream::unfold(state, |mut state| async move {
        if !state.started {
            state.started = true;
            // A first event tells the page the stream is open (and a reconnect that it may
            // have missed changes: it fetches its view again).
            return Some((Ok::<Bytes, std::io::Error>(Bytes::from_static(b"event: ready\ndata: 0\n\n")), state));
        }
        if let Some(last) = state.last_world {
            tokio::time::sleep_until(last + MIN_EVENT_INTERVAL).await;
        }
        tokio::select! {
            changed = state.world.changed() => {
                changed.ok()?;
                state.last_world = Some(Instant::now());
                let version = *state.world.borrow_and_update();
                Some((Ok(Bytes::from(format!("event: world\ndata: {version}\n\n"))), state))
            }
            changed = state.requests.changed() => {
                changed.ok()?;
                let sequence = *state.requests.borrow_and_update();
                Some((Ok(Bytes::from(format!("event: requests\ndata: {sequence}\n\n"))), state))
            }
            () = tokio::time::sleep(KEEPALIVE) => Some((Ok(Bytes::from_static(b": keepalive\n\n")), state)),
        }
    });
    (
        [
            (http::header::CONTENT_TYPE, "text/event-stream"),
            (http::header::CACHE_CONTROL, "no-store"),
            (http::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

/// GET /ui/api/logs/{sandbox}?follow=true: the main process's output as plain text, the last
/// lines first, then (following) as it comes; read through StreamLogs' own handler.
pub async fn logs(
    State(app): State<App>,
    Path(sandbox): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let caller = match Viewer::of(&app, &headers).and_then(|viewer| viewer.caller_for(rpc::STREAM_LOGS)) {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_response(),
    };
    let follow = params.get("follow").is_some_and(|value| value == "true" || value == "1");
    let request =
        pb::StreamLogsRequest { sandbox_id: sandbox, follow, tail_lines: LOG_TAIL_LINES, ..Default::default() };
    let frames = match stream_logs(State(app), caller, ConnectRequest(request)).await {
        Ok(frames) => frames.into_inner().into_inner(),
        Err(error) => return Refusal::from(error).into_response(),
    };
    let text = frames.map(|entry| match entry {
        Ok(entry) => match entry.error {
            Some(error) => Ok::<Bytes, std::io::Error>(Bytes::from(format!("\n[log stream: {}]\n", error.message))),
            None => Ok(Bytes::from(entry.data)),
        },
        Err(error) => Ok(Bytes::from(format!("\n[log stream ended: {}]\n", error.message().unwrap_or("error")))),
    });
    (
        [
            (http::header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (http::header::CACHE_CONTROL, "no-store"),
            (http::HeaderName::from_static("x-content-type-options"), "nosniff"),
        ],
        Body::from_stream(text),
    )
        .into_response()
}
