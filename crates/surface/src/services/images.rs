//! EmulatorService's image cache RPCs beside PruneImages: LoadImages (an archive streamed in
//! chunks), ListImages and RemoveImage. cluster_admin: the cache is the machine's.
//!
//! Why a client-streaming RPC: the archive is on the caller's side (`cwsbx image load FILE`),
//! which need not be the emulator's machine, user or file system view, so a server-side path
//! would be a poor API; a unary message would cap images at the message limit (python:3.11 is
//! ~1 GB). The chunks are written to a file in the cache's own work directory (same file system,
//! removed if the emulator dies), held to the cache's bound as they come, then loaded by the
//! images crate, which treats the archive as the untrusted input it is.

use std::io::Write;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse, Streaming};
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_images::{ImageStore, LoadError, PullError, RemoveError};
use cwsandbox_sim::Reason;
use futures::StreamExt;
use tonic::Code;

use super::respond;
use crate::app::App;
use crate::auth::Caller;
use crate::errors::ApiError;

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The runtime's image cache, or why there is none.
fn store<'a>(app: &'a App, method: &str) -> Result<&'a ImageStore, ApiError> {
    app.runtime(method).ok().and_then(|runtime| runtime.image_store()).ok_or_else(|| {
        ApiError::new(
            Code::FailedPrecondition,
            Reason::PreconditionFailed,
            "this emulator runs no images (the process runtime, or runc does not work here): start it with \
             --runtime oci or auto where runc works",
        )
    })
}

fn load_error(error: LoadError) -> ApiError {
    let message = format!("image archive refused: {error}");
    match error {
        LoadError::Invalid(_) | LoadError::NoName(_) => ApiError::invalid_field("chunk", message),
        LoadError::TooLarge(_) | LoadError::Unpack(PullError::TooLarge { .. }) => {
            ApiError::new(Code::ResourceExhausted, Reason::RequestTooLarge, message)
        }
        LoadError::Unpack(PullError::Unpack { .. }) => ApiError::invalid_field("chunk", message),
        LoadError::Unpack(_) | LoadError::Cache { .. } => {
            ApiError::new(Code::Internal, Reason::BackendUnavailable, message)
        }
    }
}

/// LoadImages: the archive's chunks into a work file of the cache, then loaded.
pub async fn load_images(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(mut chunks): ConnectRequest<Streaming<pb::LoadImagesRequest>>,
) -> Result<ConnectResponse<pb::LoadImagesResponse>, ConnectError> {
    let method = caller.method();
    let store = match store(&app, method) {
        Ok(store) => store,
        Err(error) => return respond(method, Err(error)),
    };
    let path = store.work_path("upload");
    // A broken stream (a message over the limit, a cut connection) is answered as it came.
    let mut broken: Option<ConnectError> = None;
    let outcome = async {
        let mut file = std::fs::File::create(&path)
            .map_err(|e| ApiError::new(Code::Internal, Reason::BackendUnavailable, format!("image cache: {e}")))?;
        let bound = store.config().max_cache_bytes;
        let mut received = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => {
                    broken = Some(error);
                    return Err(ApiError::invalid_field("chunk", "the archive's stream broke"));
                }
            };
            received += chunk.chunk.len() as u64;
            if bound != 0 && received > bound {
                return Err(ApiError::new(
                    Code::ResourceExhausted,
                    Reason::RequestTooLarge,
                    format!(
                        "image archive refused: more than the image cache's bound of {bound} bytes \
                         (containerRuntime.imageCacheMaxBytes, --image-cache-max-bytes)"
                    ),
                ));
            }
            file.write_all(&chunk.chunk)
                .map_err(|e| ApiError::new(Code::Internal, Reason::BackendUnavailable, format!("image cache: {e}")))?;
        }
        drop(file);
        if received == 0 {
            return Err(ApiError::invalid_field("chunk", "the archive is empty"));
        }
        let report = store.load(&path).await.map_err(load_error)?;
        // Runtime handlers that keep images of their own (gVisor's) get the same images.
        if let Ok(runtime) = app.runtime(method) {
            for other in runtime.handler_image_stores() {
                other.load(&path).await.map_err(load_error)?;
            }
        }
        Ok(report)
    }
    .await;
    let _ = std::fs::remove_file(&path);
    if let Some(error) = broken {
        return Err(error);
    }
    respond(
        method,
        outcome.map(|report| pb::LoadImagesResponse {
            image_cache: store.config().root.display().to_string(),
            format: report.format,
            images: report
                .images
                .into_iter()
                .map(|image| pb::LoadedImage {
                    digest: image.digest,
                    references: image.references,
                    size_bytes: signed(image.size_bytes),
                })
                .collect(),
            unnamed: report.unnamed,
        }),
    )
}

/// ListImages: every image of the cache.
pub async fn list_images(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ListImagesRequest>,
) -> Result<ConnectResponse<pb::ListImagesResponse>, ConnectError> {
    let method = caller.method();
    let Ok(runtime) = app.runtime(method) else { return respond(method, Ok(pb::ListImagesResponse::default())) };
    let Some(store) = runtime.image_store() else {
        return respond(method, Ok(pb::ListImagesResponse::default()));
    };
    let cache_error =
        |e: std::io::Error| ApiError::new(Code::Internal, Reason::BackendUnavailable, format!("image cache: {e}"));
    let mut listed = store.list().await.map_err(cache_error);
    // An image kept by another runtime handler (gVisor's) is one image: listed once, in use if
    // either cache's copy is.
    for other in runtime.handler_image_stores() {
        let (Ok(images), Ok(others)) = (&mut listed, other.list().await.map_err(cache_error)) else { continue };
        for image in others {
            match images.iter_mut().find(|known| known.digest == image.digest) {
                Some(known) => known.in_use |= image.in_use,
                None => images.push(image),
            }
        }
    }
    respond(
        method,
        listed.map(|images| pb::ListImagesResponse {
            image_cache: store.config().root.display().to_string(),
            images: images
                .into_iter()
                .map(|image| {
                    let since = image.last_used.duration_since(UNIX_EPOCH).unwrap_or_default();
                    pb::CachedImage {
                        digest: image.digest,
                        references: image.references,
                        size_bytes: signed(image.size_bytes),
                        unpacked_bytes: signed(image.unpacked_bytes),
                        last_used: Some(cwsandbox_api::wkt::Timestamp {
                            seconds: signed(since.as_secs()),
                            nanos: since.subsec_nanos() as i32,
                        }),
                        in_use: image.in_use,
                    }
                })
                .collect(),
        }),
    )
}

/// RemoveImage: one name, and its image when it was the last.
pub async fn remove_image(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::RemoveImageRequest>,
) -> Result<ConnectResponse<pb::RemoveImageResponse>, ConnectError> {
    let method = caller.method();
    if request.name.is_empty() {
        return respond(method, Err(ApiError::missing_field("name")));
    }
    let store = match store(&app, method) {
        Ok(store) => store,
        Err(error) => return respond(method, Err(error)),
    };
    // Another runtime handler's copy (gVisor's) goes with it; the answer is the main cache's, or
    // that copy's where only it had the image.
    let mut removed = store.remove(&request.name).await;
    if let Ok(runtime) = app.runtime(method) {
        for other in runtime.handler_image_stores() {
            let other_removed = other.remove(&request.name).await;
            // (A copy a gVisor sandbox runs on stays until a prune finds it unused.)
            if matches!(removed, Err(RemoveError::NotFound(_))) {
                removed = other_removed;
            }
        }
    }
    let removed = removed.map_err(|error| {
        let message = error.to_string();
        match error {
            RemoveError::InvalidReference(_) => ApiError::invalid_field("name", message),
            RemoveError::NotFound(_) => ApiError::new(Code::NotFound, Reason::ImageNotFound, message),
            RemoveError::InUse { .. } => ApiError::new(Code::FailedPrecondition, Reason::PreconditionFailed, message),
            RemoveError::Cache(_) => ApiError::new(Code::Internal, Reason::BackendUnavailable, message),
        }
    });
    respond(
        method,
        removed.map(|removed| pb::RemoveImageResponse {
            reference: removed.reference,
            digest: removed.digest,
            image_removed: removed.image_removed,
            bytes_freed: signed(removed.bytes_freed),
        }),
    )
}
