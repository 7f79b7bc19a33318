//! A Pod's other containers in namespaces mode, each with a root of its own, as in Kubernetes:
//! a keeper forked by the zygote per sidecar joins the Pod's user, network, IPC and UTS
//! namespaces (those of the main keeper, which made them) and makes only a mount and a pid
//! namespace of its own, around a root of its own (`<dir>/containers/<n>/rootfs`: the host's
//! directories read-only, its own `/`, `/tmp`, `/root`, devpts and `/proc`, the volumes it
//! mounts and the files placed in it). Its init runs its command and its exec orders over a
//! channel of its own, as the main init does; files are opened in its root. Localhost, IPC,
//! the hostname and the volumes are the Pod's; nothing else is shared.

use std::path::Path;
use std::sync::Arc;

use cwsandbox_sync::MutexUnpoisoned;
use tracing::debug;

use super::keeper::pump_logs;
use super::layout::{RootPlan, prepare_layout};
use super::mode::{IdMode, Mode, ns_plan};
use super::sidecars::{ImageSidecar, SidecarContainer};
use super::validate::path_c_string;
use super::{CLAIMS_DIR, Executor, Running, Sandbox, command_for, setup_error, start_command};
use crate::ExecutorError;
use crate::main_command::Program;

/// Under a sandbox's directory: one directory per sidecar with a root of its own.
pub(super) const CONTAINERS_DIR: &str = "containers";

impl Executor {
    /// Starts sidecar `sidecar` (the `index`th of the spec's) of a running namespaces sandbox
    /// whose main keeper `main` holds the Pod's namespaces: its root made, its keeper forked, its
    /// command run, its output going to its log. A command that cannot be found exits 127 with
    /// the reason in its log, as the main command's does; the sandbox goes on.
    pub(super) async fn start_root_sidecar(
        &self,
        sandbox: &Arc<Sandbox>,
        main: &Running,
        index: usize,
        sidecar: &Arc<SidecarContainer>,
        launch: &crate::Sidecar,
    ) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let id = sandbox.id.as_str();
        let Mode::Namespaces { ids } = inner.mode else {
            return Err(ExecutorError::InvalidRequest("a Pod's other containers need the namespaces isolation".into()));
        };
        let dir = sandbox.dir.join(CONTAINERS_DIR).join((index + 1).to_string());
        let layout = {
            let (dir, volumes) = (dir.clone(), sandbox.dir.clone());
            let plan = RootPlan {
                main: launch.working_dir.clone(),
                sidecars: Vec::new(),
                volume_mounts: launch.volume_mounts.clone(),
                restores: Vec::new(),
                claims_dir: inner.config.root_dir.join(CLAIMS_DIR),
                // Mounted already, with the main container's root.
                memory_volumes: Vec::new(),
            };
            let files = launch.files.clone();
            let host_paths = inner.config.host_paths.clone();
            let mode = inner.mode;
            tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(dir.parent().unwrap_or(&dir))
                    .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
                // (The network is the Pod's, joined: nothing of it is made here.)
                prepare_layout(&dir, &volumes, mode, &host_paths, &plan, &files, crate::Network::Host, None)
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, format!("container {:?}: {message}", sidecar.name)))?
        };
        let Some(rootfs) = &layout.rootfs else {
            return Err(setup_error(id, "a sidecar's root was not made".to_owned()));
        };
        let hostname = String::new();
        let mut ns = ns_plan(ids, &hostname, rootfs, crate::Network::Host, launch.user)?;
        // Only a mount and a pid namespace of its own: the Pod's others are joined.
        ns.flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        ns.id_map = None;
        ns.join = Some((main.keeper.pid(), matches!(ids, IdMode::Range { .. })));
        if matches!(ids, IdMode::Range { .. } | IdMode::HostRoot) {
            // The Pod's network first, while the host's root: a namespace made for the sandbox
            // (`Network::Attached`) is the host's user namespace's, which the Pod's cannot join.
            ns.network_namespace = Some(path_c_string(Path::new(&format!("/proc/{}/ns/net", main.keeper.pid())))?);
        }
        let program = command_for(&launch.command, &sidecar.env)?
            .map(|command| Program::new(command.candidates, command.argv, command.envp, &command.display));
        let keeper_id = format!("{id}.{}", index + 1);
        let (mut child, running, _) =
            start_command(&inner, &keeper_id, Some(ns), &layout.working_dir, program)
                .await
                .map_err(|error| setup_error(id, format!("container {:?}: {error}", sidecar.name)))?;
        let output = child.take_stdout();
        *sidecar.image.lock_unpoisoned() = Some(Arc::new(ImageSidecar { running: Arc::new(running), container: None }));
        let watcher = {
            let (executor, sidecar) = (self.clone(), sidecar.clone());
            tokio::spawn(async move {
                let logs = sidecar.logs.clone();
                let pump = output.map(|output| tokio::spawn(async move { pump_logs(output, &logs).await }));
                let code = child.wait().await.unwrap_or(137);
                if let Some(pump) = pump {
                    // Every process of its pid namespace is gone: the pipe closes at once.
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), pump).await;
                }
                sidecar.image.lock_unpoisoned().take();
                debug!(container = %sidecar.name, exit_code = code, "sidecar container ended");
                executor.sidecar_ended(&sidecar, code);
            })
        };
        *sidecar.watcher.lock_unpoisoned() = Some(watcher);
        Ok(())
    }
}
