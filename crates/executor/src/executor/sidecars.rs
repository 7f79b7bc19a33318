//! A sandbox's other containers (a Pod's sidecars), each with a root and processes of its own,
//! as in Kubernetes: in namespaces mode a keeper of its own joined to the Pod's namespaces
//! (`own_roots.rs`), in an image sandbox a container of the OCI runtime of its own in its image
//! (`image.rs`). Both share the Pod's network, IPC and UTS (and user) namespaces and the volumes
//! they mount; each has its own mount and PID namespace, environment, working directory, user
//! and log.
//!
//! The main command decides the sandbox's life: when it ends, every sidecar is ended; a stop's
//! SIGTERM reaches them all. A sidecar whose command ends by itself is gone, as a Kubernetes
//! container that exited is (exec and files answer that it does not run), and its exit code is
//! kept ([`super::Executor::sidecar_exit_code`]) and reported.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cwsandbox_sync::MutexUnpoisoned;

use super::oci::OciContainer;
use super::{Running, Sandbox};
use crate::logs::LogBuffer;

/// One sidecar of a started sandbox: what exec and logs need of it.
#[derive(Debug)]
pub(super) struct SidecarContainer {
    pub(super) name: String,
    /// The environment its command started with, which its execs start from.
    pub(super) env: BTreeMap<String, String>,
    /// As the sandbox sees it.
    pub(super) working_dir: String,
    /// The (uid, gid) its commands switch to, where they switch.
    pub(super) command_ids: Option<(u32, u32)>,
    pub(super) logs: Arc<LogBuffer>,
    /// How its command ended (128 + N after signal N), once it has.
    pub(super) exit_code: Arc<OnceLock<i32>>,
    /// Whether it has a root of its own (every sidecar of a namespaces or image sandbox):
    /// what reaches it is its own ([`ImageSidecar`]), not the main container's.
    pub(super) own_root: bool,
    /// Its own container while it runs.
    pub(super) image: Mutex<Option<Arc<ImageSidecar>>>,
    /// An image sidecar's watcher, which ends once its container is gone and deleted.
    pub(super) watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Its sandbox, once registered (an image sidecar starts before it is).
    pub(super) sandbox: OnceLock<Weak<Sandbox>>,
    /// Whether its end was reported.
    pub(super) reported: AtomicBool,
}

/// A sidecar's running container: what exec and files reach.
#[derive(Debug)]
pub(super) struct ImageSidecar {
    /// Its keeper (an image sidecar's: its init), root and namespaces.
    pub(super) running: Arc<Running>,
    /// An image sidecar's runtime container.
    pub(super) container: Option<Arc<OciContainer>>,
}

impl SidecarContainer {
    /// An image sidecar's container, while it runs.
    pub(super) fn image_container(&self) -> Option<Arc<ImageSidecar>> {
        self.image.lock_unpoisoned().clone()
    }

    /// Signals an image sidecar's init (SIGKILL ends its PID namespace); a sidecar without an
    /// image is signalled with the sandbox's processes by its init.
    pub(super) fn signal(&self, signal: libc::c_int) {
        if let Some(image) = self.image_container() {
            image.running.keeper.signal(signal);
        }
    }

    /// Kills an image sidecar and waits until its container is gone and deleted.
    pub(super) async fn end(&self) {
        self.signal(libc::SIGKILL);
        let watcher = self.watcher.lock_unpoisoned().take();
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
    }
}
