//! Watches: a stream of `{"type": ADDED|MODIFIED|DELETED, "object": …}` lines.
//!
//! The world tells the driver when anything kubectl can see changed; each watch then reads its
//! selection again and compares it with what it sent last (by uid, or namespace/name), so a Pod
//! that stops matching a selector is reported DELETED, as the API server's watch cache does.
//! A watch from a resource version first reports what changed since: objects whose resource
//! version is newer (Pods as MODIFIED, Events as ADDED).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde_json::json;
use tokio::time::Instant;

use super::table::{self, IncludeObject};
use super::{DEFAULT_WATCH_TIMEOUT, Item, Params, Resource, Selection, snapshot};
use crate::app::App;

struct WatchState {
    app: App,
    selection: Selection,
    as_table: bool,
    include: IncludeObject,
    known: HashMap<String, Item>,
    pending: VecDeque<Bytes>,
    changes: tokio::sync::watch::Receiver<u64>,
    deadline: Instant,
}

impl WatchState {
    fn encode(&self, kind: &str, item: &Item, resource_version: &str) -> Bytes {
        let object = if self.as_table {
            table::table(self.selection.resource.columns(), vec![item.row()], self.include, resource_version)
        } else {
            item.object.clone()
        };
        let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    /// Reads the selection again and queues what changed since the last read.
    fn refresh(&mut self) {
        let current = snapshot(&self.app, &self.selection);
        let mut seen = HashMap::with_capacity(current.items.len());
        for item in current.items {
            let kind = match self.known.get(&item.key) {
                None => Some("ADDED"),
                Some(previous) if previous.object != item.object => Some("MODIFIED"),
                Some(_) => None,
            };
            if let Some(kind) = kind {
                let line = self.encode(kind, &item, &current.resource_version);
                self.pending.push_back(line);
            }
            seen.insert(item.key.clone(), item);
        }
        let mut gone: Vec<&Item> = self.known.values().filter(|item| !seen.contains_key(&item.key)).collect();
        gone.sort_by(|left, right| left.key.cmp(&right.key));
        let lines: Vec<Bytes> =
            gone.iter().map(|item| self.encode("DELETED", item, &current.resource_version)).collect();
        self.pending.extend(lines);
        self.known = seen;
    }
}

/// Starts a watch on `selection`.
pub fn serve(app: App, selection: Selection, params: &Params, as_table: bool) -> Response {
    let timeout = params.timeout_seconds.map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let since: Option<u64> = match params.resource_version.as_str() {
        "" | "0" => None,
        version => version.parse().ok(),
    };
    // Subscribed first: see below.
    let changes = app.driver().changes();
    let mut state = WatchState {
        app,
        selection,
        as_table,
        include: params.include,
        known: HashMap::new(),
        pending: VecDeque::new(),
        changes,
        deadline: Instant::now() + timeout,
    };
    let current = snapshot(&state.app, &state.selection);
    for item in &current.items {
        let kind = match since {
            None => Some("ADDED"),
            Some(since) => match item.resource_version() {
                Some(version) if version > since => {
                    Some(if state.selection.resource == Resource::Events { "ADDED" } else { "MODIFIED" })
                }
                _ => None,
            },
        };
        if let Some(kind) = kind {
            let line = state.encode(kind, item, &current.resource_version);
            state.pending.push_back(line);
        }
    }
    state.known = current.items.into_iter().map(|item| (item.key.clone(), item)).collect();
    // `changes` was subscribed before the snapshot was read, so a change made while it was being
    // read still wakes the watch (at worst for nothing: `refresh` compares). Marking it seen here
    // would lose such a change until the next one, as a watch once did for a Pod's Running step.

    let lines = stream::unfold(state, |mut state| async move {
        loop {
            if let Some(line) = state.pending.pop_front() {
                return Some((Ok::<Bytes, std::io::Error>(line), state));
            }
            tokio::select! {
                changed = state.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    state.refresh();
                }
                () = tokio::time::sleep_until(state.deadline) => return None,
            }
        }
    });
    (
        [(http::header::CONTENT_TYPE, "application/json"), (http::header::CACHE_CONTROL, "no-cache, private")],
        Body::from_stream(lines),
    )
        .into_response()
}
