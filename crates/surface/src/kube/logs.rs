//! `GET …/pods/<name>/log`: what `kubectl logs [-f] [--tail N] [--since D] [--timestamps]` reads.
//! A sandbox Pod's log is its main process's output, from the process runtime, as StreamLogs
//! serves it. Other Pods (slurmd, the SUNK scheduler) run no process here, so their log is empty.

use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use cwsandbox_sim::data_target::{PodDataRefusal, PodNeeds};
use cwsandbox_sim::query::Scope;
use futures::StreamExt;
use http::Uri;

use super::status::Status;
use super::{number, pod_refused};
use crate::app::App;
use cwsandbox_host::runtime::{LogEvent, LogRequest};

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

pub(super) async fn serve(
    app: &App,
    scope: &Scope,
    namespace: &str,
    name: &str,
    uri: &Uri,
) -> Result<Response, Status> {
    let params = parse(uri)?;
    let found = app
        .driver()
        .data_target(|| {
            app.driver()
                .read_world(|world| world.pod_data_target(scope, namespace, name, &params.container, PodNeeds::Logs))
        })
        .await;
    let target = match found {
        Ok(target) => target,
        // A Pod with no process here (slurmd, the scheduler) has logs; they are empty.
        Err(PodDataRefusal::NoProcess) => return Ok(empty()),
        Err(PodDataRefusal::Pod(refusal)) => return Err(pod_refused(refusal, name)),
        Err(PodDataRefusal::NotStarted { container, .. } | PodDataRefusal::SandboxNotReady { container }) => {
            return Err(Status::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
        Err(PodDataRefusal::PodCompleted { .. }) => return Ok(empty()),
    };
    let Ok(runtime) = app.runtime("pods/log") else { return Ok(empty()) };
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

/// The answer for a Pod whose logs are empty here.
fn empty() -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain")], Body::empty()).into_response()
}
