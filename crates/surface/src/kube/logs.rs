//! `GET …/pods/<name>/log`: what `kubectl logs [-f] [--tail N] [--since D] [--timestamps]` reads.
//! A sandbox Pod's log is its main process's output, from the process runtime, as StreamLogs
//! serves it. Other Pods (slurmd, the SUNK scheduler) run no process here, so their log is empty.

use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use cwsandbox_sim::k8s::{PodOwner, PodPhase};
use cwsandbox_sim::query::Scope;
use futures::StreamExt;
use http::Uri;

use super::number;
use super::status::Status;
use crate::app::App;
use crate::convert;
use cwsandbox_host::runtime::{LogEvent, LogRequest, Target};

/// The query of a log request.
#[derive(Debug, Default)]
struct LogParams {
    container: String,
    follow: bool,
    tail_lines: Option<u32>,
    since_seconds: Option<u64>,
    timestamps: bool,
}

fn parse(uri: &Uri) -> Result<LogParams, Status> {
    let mut params = LogParams::default();
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "container" => params.container = value.into_owned(),
            "follow" => params.follow = matches!(value.as_ref(), "true" | "1"),
            "timestamps" => params.timestamps = matches!(value.as_ref(), "true" | "1"),
            "tailLines" => params.tail_lines = Some(u32::try_from(number::<u64>(&key, &value)?).unwrap_or(u32::MAX)),
            "sinceSeconds" => params.since_seconds = Some(number(&key, &value)?),
            _ => {}
        }
    }
    Ok(params)
}

enum Source {
    /// A sandbox's main process: read it from the runtime.
    Runtime(Target),
    /// A Pod with no process here.
    Empty,
}

pub(super) async fn serve(
    app: &App,
    scope: &Scope,
    namespace: &str,
    name: &str,
    uri: &Uri,
) -> Result<Response, Status> {
    let params = parse(uri)?;
    let source = app.driver().with_world(|world| -> Result<Source, Status> {
        let (pod, container) = super::pod_and_container(world, scope, namespace, name, &params.container)?;
        if pod.shown_phase() == PodPhase::Pending {
            return Err(Status::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
        let PodOwner::Sandbox(sandbox_id) = &pod.owner else { return Ok(Source::Empty) };
        let Some(view) = world.sandbox(sandbox_id) else { return Ok(Source::Empty) };
        let Some(container) = convert::container_name(&view, &container) else { return Ok(Source::Empty) };
        Ok(Source::Runtime(Target { sandbox_id: sandbox_id.to_string(), pod_uid: pod.uid.to_string(), container }))
    })?;
    let Source::Runtime(target) = source else {
        return Ok(([(http::header::CONTENT_TYPE, "text/plain")], Body::empty()).into_response());
    };
    let Ok(runtime) = app.runtime("pods/log") else {
        return Ok(([(http::header::CONTENT_TYPE, "text/plain")], Body::empty()).into_response());
    };
    let request = LogRequest {
        follow: params.follow,
        tail_lines: params.tail_lines,
        since: params.since_seconds.map(|seconds| SystemTime::now() - Duration::from_secs(seconds)),
        timestamps: params.timestamps,
        resume: None,
    };
    let events = runtime.logs(target, request).await.map_err(|error| Status::from_api(&error.into(), "pods", name))?;
    let chunks = events.filter_map(|event| async move {
        match event {
            LogEvent::Chunk { data, .. } => Some(Ok::<Bytes, std::io::Error>(data)),
            _ => None,
        }
    });
    Ok(([(http::header::CONTENT_TYPE, "text/plain")], Body::from_stream(chunks)).into_response())
}
