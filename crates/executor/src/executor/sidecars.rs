//! A sandbox's other containers (a Pod's sidecars). Each is a process tree of its own, forked by
//! the sandbox's init on the executor's order (as an exec'd command is), in the sandbox's
//! namespaces, with its own environment, working directory, user and log. What a Pod's
//! containers share in Kubernetes (network, IPC, here also the PID namespace and, with no image
//! pulled, the root) they share here.
//!
//! The main command decides the sandbox's life, as before: when it ends, init ends every other
//! process, sidecars included; a stop's SIGTERM reaches them all. A sidecar that ends by itself
//! leaves its container in place (exec still reaches it) and its exit code
//! ([`super::Executor::sidecar_exit_code`]).
//!
//! In an image sandbox each sidecar is a container of the OCI runtime of its own instead
//! ([`ImageSidecar`], started by `image.rs`): its image's root, its own mount and PID namespaces,
//! the main container's network, IPC and UTS. A stop signals it with the main container, and
//! the main command's end ends it; one that ended by itself is gone, as a Kubernetes container
//! that exited is (exec and files answer that it does not run).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cwsandbox_sync::MutexUnpoisoned;

use tokio::net::unix::pipe;
use tracing::debug;

use super::keeper::{LogPipe, pump_logs};
use super::oci::OciContainer;
use super::validate::c_string;
use super::{Running, Sandbox, Target, command_for};
use crate::error::ExecutorError;
use crate::init_channel::SendError;
use crate::logs::LogBuffer;
use crate::sys;

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
    /// Whether it runs in an image of its own (an image sandbox's sidecar).
    pub(super) in_image: bool,
    /// An image sidecar's container while it runs.
    pub(super) image: Mutex<Option<Arc<ImageSidecar>>>,
    /// An image sidecar's watcher, which ends once its container is gone and deleted.
    pub(super) watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Its sandbox, once registered (an image sidecar starts before it is).
    pub(super) sandbox: OnceLock<Weak<Sandbox>>,
    /// Whether its end was reported.
    pub(super) reported: AtomicBool,
}

/// An image sidecar's running container: what exec and files reach.
#[derive(Debug)]
pub(super) struct ImageSidecar {
    /// Its init (the keeper), root and namespaces.
    pub(super) running: Arc<Running>,
    pub(super) container: Arc<OciContainer>,
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

/// Has the sandbox's init start `sidecar`'s command, its output (stdout and stderr together)
/// going to the sidecar's log. A container without a command runs nothing: its log stays
/// empty and closed. A program that cannot be found exits 127 with the reason in the log, as
/// an exec'd command's does.
pub(super) async fn start(
    sandbox_id: &str,
    running: &Running,
    sidecar: &SidecarContainer,
    command: &[String],
    exits: tokio::sync::mpsc::UnboundedSender<crate::MainExit>,
) -> Result<(), ExecutorError> {
    let Target::Namespaces { channel } = &running.target else {
        return Err(ExecutorError::InvalidRequest("a Pod's other containers need the namespaces isolation".to_owned()));
    };
    let Some(command) = command_for(command, &sidecar.env)? else {
        sidecar.logs.close();
        return Ok(());
    };
    let stdin: OwnedFd = std::fs::File::open("/dev/null")?.into();
    let (output_read, output_write) = std::io::pipe()?;
    let output_write: OwnedFd = output_write.into();
    let cwd = c_string(sidecar.working_dir.clone())?;
    let ordered = channel
        .exec(
            false,
            sidecar.command_ids,
            cwd,
            command,
            [stdin.as_raw_fd(), output_write.as_raw_fd(), output_write.as_raw_fd()],
        )
        .await;
    // Init holds its own copies now: the log ends when the sidecar's last process closes them.
    drop((stdin, output_write));
    let (_, exit) = match ordered {
        Ok(ordered) => ordered,
        Err(SendError::Closed) => return Err(ExecutorError::NotRunning(sandbox_id.to_owned())),
        Err(SendError::TooLarge(size)) => {
            return Err(ExecutorError::InvalidRequest(format!(
                "container {:?}: its arguments and environment take {size} bytes, more than a sandbox's channel carries",
                sidecar.name
            )));
        }
        Err(SendError::Io(error)) => return Err(error.into()),
    };
    let logs = sidecar.logs.clone();
    let output = LogPipe::Pipe(pipe::Receiver::from_owned_fd(output_read.into())?);
    let (id, name, exit_code) = (sandbox_id.to_owned(), sidecar.name.clone(), sidecar.exit_code.clone());
    tokio::spawn(async move {
        let reported = async {
            match exit.await {
                Ok(status) => {
                    let code = sys::exit_code_of(status);
                    let _ = exit_code.set(code);
                    debug!(sandbox = %id, container = %name, exit_code = code, "sidecar container exited");
                    let _ = exits.send(crate::MainExit {
                        id: id.clone(),
                        container: Some(name.clone()),
                        exit_code: code,
                        oom_killed: false,
                    });
                }
                // Init ended first: the sandbox is gone, and the sidecar with it.
                Err(_) => debug!(sandbox = %id, container = %name, "sidecar container ended with its sandbox"),
            }
        };
        // The log closes once both are known, so a reader that saw its end finds the exit code.
        tokio::join!(pump_logs(output, &logs), reported);
        logs.close();
    });
    Ok(())
}
