//! Starting an image sandbox (`LaunchSpec::image`): its container made and run by the OCI
//! runtime (`oci.rs`), then registered as any sandbox is.

use std::io::Write;

use tokio::net::unix::pipe;
use tracing::debug;

use std::sync::Arc;

use cwsandbox_sync::MutexUnpoisoned;

use super::keeper::{Keeper, LogPipe, pump_logs};
use super::layout::sandbox_env;
use super::oci::{self, ContainerPlan, OciRuntime};
use super::sidecars::{ImageSidecar, SidecarContainer};
use super::{CLAIMS_DIR, Directories, Executor, Running, Sandbox, Started, Target, restores_of, setup_error};
use crate::sys::{self, ProcessHandle};
use crate::{ExecutorError, LaunchSpec, OciSupport, Sidecar, files};

/// Under a sandbox's directory: one directory per image sidecar (`1`, `2`, … in the spec's
/// order), its bundle, layers, mounted files and execs' process files.
const CONTAINERS_DIR: &str = "containers";

impl Executor {
    /// Starts a sandbox in its image's root through the OCI runtime. The start is claimed.
    pub(super) async fn start_image(&self, id: &str, spec: LaunchSpec) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let Some(oci) = &inner.oci else {
            let why = match &inner.oci_support {
                OciSupport::Unavailable(why) => why.clone(),
                _ => "no OCI runtime is configured".to_owned(),
            };
            return Err(setup_error(id, format!("the sandbox cannot run in its image: {why}")));
        };
        if let Some(sidecar) = spec.sidecars.iter().find(|sidecar| sidecar.image.is_none()) {
            return Err(ExecutorError::InvalidRequest(format!(
                "container {:?}: in a sandbox that runs in images every container needs an image of its own",
                sidecar.name
            )));
        }
        let Some(program) = spec.command.first().cloned() else {
            return Err(ExecutorError::InvalidRequest(
                "a sandbox that runs in an image needs a command: neither the image (ENTRYPOINT, CMD) nor the spec gives one"
                    .into(),
            ));
        };
        let image = spec.image.clone().unwrap_or_default();
        let mode = inner.mode;
        let env = sandbox_env(&spec, mode);
        let cwd = files::resolve(spec.working_dir.as_deref().unwrap_or("/"), "/")
            .map_err(|error| ExecutorError::InvalidRequest(format!("working directory: {error}")))?;
        let dir = inner.config.root_dir.join(id);
        let restores = restores_of(&inner.config.root_dir, &spec.volume_mounts)?;
        let plan = ContainerPlan {
            id: id.to_owned(),
            dir: dir.clone(),
            image: image.rootfs,
            hostname: spec.hostname.clone(),
            argv: spec.command.clone(),
            env: env.clone(),
            cwd: cwd.clone(),
            user: mode.command_ids(spec.user).unwrap_or((0, 0)),
            network: spec.network,
            binds: Vec::new(),
            memory: spec.memory_limit_bytes,
            cpu_millis: spec.cpu_limit_millis,
            join: None,
        };
        let made = {
            let inner = inner.clone();
            let (mounts, files) = (spec.volume_mounts.clone(), spec.files.clone());
            let claims_dir = inner.config.root_dir.join(CLAIMS_DIR);
            tokio::task::spawn_blocking(move || match &inner.oci {
                Some(oci) => oci::prepare_sandbox(oci, plan, &mounts, &files, &restores, &claims_dir),
                None => Err("the OCI runtime is gone".to_owned()),
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, message))?
        };
        let (log_read, log_write) = std::io::pipe()?;
        let output = Some(pipe::Receiver::from_owned_fd(log_read.into())?);
        let sidecar_dirs = spec
            .sidecars
            .iter()
            .map(|sidecar| {
                files::resolve(sidecar.working_dir.as_deref().unwrap_or("/"), "/").map_err(|error| {
                    ExecutorError::InvalidRequest(format!("container {:?}: working directory: {error}", sidecar.name))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let dirs = Directories { dir, working_dir: cwd, sidecar_dirs };
        let (plan, Some(prepared)) = made else {
            // As a kubelet's StartError: the command never ran, exit code 127, the reason in
            // the container's log.
            let _ =
                (&log_write).write_all(format!("cwsandbox: {program}: command not found in the image\n").as_bytes());
            drop(log_write);
            let started =
                Started { keeper: Keeper::Ended { code: 127, output }, running: None, command_runs: false, oci: None };
            return self.register(id, dirs, env, &spec, started).await;
        };
        let command = oci.run_command(id, &prepared, log_write)?;
        let mut child = inner
            .spawner
            .spawn(command)
            .await
            .map_err(|error| setup_error(id, format!("cannot start {}: {error}", oci.info.runtime.display())))?;
        let init = match OciRuntime::wait_created(&prepared, &mut child).await {
            Ok(Some(init)) => init,
            Ok(None) => {
                // runc could not create the container from this spec (the command not
                // executable, a working directory or mount it refuses…): as a kubelet's
                // StartError, the sandbox ends at once, 127, runc's reason in its log.
                let _ = child.wait().await;
                oci.container(&plan, &prepared).finish().await;
                debug!(sandbox = id, "the OCI runtime could not create the container");
                let started = Started {
                    keeper: Keeper::Ended { code: 127, output },
                    running: None,
                    command_runs: false,
                    oci: None,
                };
                return self.register(id, dirs, env, &spec, started).await;
            }
            Err(message) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                oci.container(&plan, &prepared).finish().await;
                return Err(setup_error(id, message));
            }
        };
        let container = oci.container(&plan, &prepared);
        let running = ProcessHandle::open(init);
        let root = match sys::open_path(&std::ffi::CString::new(format!("/proc/{init}/root")).unwrap_or_default()) {
            Ok(root) => Some(root),
            // A command that ends at once can end before this: nothing left to reach.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                debug!(sandbox = id, %error, "the container ended as it started");
                running.signal(libc::SIGKILL);
                let _ = child.wait().await;
                container.finish().await;
                return Err(setup_error(id, format!("cannot open the container's root: {error}")));
            }
        };
        let namespaces = match root {
            Some(_) => match crate::file_helper::SandboxNamespaces::open(init, true) {
                Ok(namespaces) => Some(namespaces),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => {
                    running.signal(libc::SIGKILL);
                    let _ = child.wait().await;
                    container.finish().await;
                    return Err(setup_error(id, format!("cannot open the container's namespaces: {error}")));
                }
            },
            None => None,
        };
        let running = root.zip(namespaces).map(|(root, namespaces)| Running {
            keeper: running,
            root,
            namespaces: Some(namespaces),
            target: Target::Oci { network: spec.network },
        });
        let started =
            Started { keeper: Keeper::Runc { child, output }, running, command_runs: true, oci: Some(container) };
        self.register(id, dirs, env, &spec, started).await
    }

    /// Starts image sidecar `sidecar` (the `index`th of the spec's) of a running image sandbox:
    /// a container of the OCI runtime of its own, in its image's root, joined to the main
    /// container's network, IPC and UTS namespaces (`main`), its output going to its log. A
    /// command its image does not have ends it at once, 127, the reason in its log (a kubelet's
    /// StartError); the sandbox goes on.
    pub(super) async fn start_image_sidecar(
        &self,
        sandbox: &Arc<Sandbox>,
        main: &Running,
        index: usize,
        sidecar: &SidecarContainer,
        launch: &Sidecar,
    ) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let id = sandbox.id.as_str();
        let Some(oci) = &inner.oci else {
            return Err(setup_error(id, "the OCI runtime is gone".to_owned()));
        };
        let Target::Oci { network } = main.target else {
            return Err(ExecutorError::InvalidRequest("an image sidecar needs an image sandbox".to_owned()));
        };
        let image = launch.image.clone().unwrap_or_default();
        let plan = ContainerPlan {
            // Unique among the runtime's containers, and the name of its cgroup's.
            id: format!("{id}.{}", index + 1),
            dir: sandbox.dir.join(CONTAINERS_DIR).join((index + 1).to_string()),
            image: image.rootfs,
            hostname: String::new(),
            argv: launch.command.clone(),
            env: sidecar.env.clone(),
            cwd: sidecar.working_dir.clone(),
            user: sidecar.command_ids.unwrap_or((0, 0)),
            network,
            binds: Vec::new(),
            memory: launch.memory_limit_bytes,
            cpu_millis: launch.cpu_limit_millis,
            join: Some(main.keeper.pid()),
        };
        let program = plan.argv.first().cloned().unwrap_or_default();
        let made = {
            let inner = inner.clone();
            let (mounts, files) = (launch.volume_mounts.clone(), launch.files.clone());
            let claims_dir = inner.config.root_dir.join(CLAIMS_DIR);
            let sandbox_dir = sandbox.dir.clone();
            tokio::task::spawn_blocking(move || {
                let containers = sandbox_dir.join(CONTAINERS_DIR);
                std::fs::create_dir_all(&containers)
                    .and_then(|()| {
                        // Each container's init (the sandbox's root, a stranger here) gets through.
                        std::fs::set_permissions(&containers, std::os::unix::fs::PermissionsExt::from_mode(0o711))
                    })
                    .map_err(|error| format!("cannot create {}: {error}", containers.display()))?;
                match &inner.oci {
                    Some(oci) => oci::prepare_sidecar(oci, plan, &sandbox_dir, &mounts, &files, &claims_dir),
                    None => Err("the OCI runtime is gone".to_owned()),
                }
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, format!("container {:?}: {message}", sidecar.name)))?
        };
        let (plan, Some(prepared)) = made else {
            sidecar.logs.push(
                bytes::Bytes::from(format!("cwsandbox: {program}: command not found in the image\n")),
                std::time::SystemTime::now(),
            );
            self.sidecar_ended(sandbox, sidecar, 127);
            return Ok(());
        };
        let (log_read, log_write) = std::io::pipe()?;
        let output = pipe::Receiver::from_owned_fd(log_read.into())?;
        let command = oci.run_command(&plan.id, &prepared, log_write)?;
        let mut child = inner
            .spawner
            .spawn(command)
            .await
            .map_err(|error| setup_error(id, format!("cannot start {}: {error}", oci.info.runtime.display())))?;
        let container = Arc::new(oci.container(&plan, &prepared));
        let created = OciRuntime::wait_created(&prepared, &mut child).await;
        let opened = match created {
            Ok(Some(init)) => match open_container(init) {
                Ok(opened) => Ok(Some((init, opened))),
                // A command that ends at once can end before this: its end is all there is.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(format!("cannot open the container: {error}")),
            },
            Ok(None) => Err("the OCI runtime could not create the container".to_owned()),
            Err(message) => Err(message),
        };
        let logs = sidecar.logs.clone();
        let pump = tokio::spawn(async move { pump_logs(LogPipe::Pipe(output), &logs).await });
        let opened = match opened {
            Ok(opened) => opened,
            Err(message) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let _ = pump.await;
                container.finish().await;
                debug!(sandbox = id, container = %sidecar.name, %message, "an image sidecar could not start");
                sidecar.logs.push(bytes::Bytes::from(format!("cwsandbox: {message}\n")), std::time::SystemTime::now());
                self.sidecar_ended(sandbox, sidecar, 127);
                return Ok(());
            }
        };
        if let Some((init, (root, namespaces))) = opened {
            let running = Arc::new(Running {
                keeper: ProcessHandle::open(init),
                root,
                namespaces: Some(namespaces),
                target: Target::Oci { network },
            });
            *sidecar.image.lock_unpoisoned() = Some(Arc::new(ImageSidecar { running, container: container.clone() }));
        }
        let watcher = {
            let (executor, sandbox, name) = (self.clone(), sandbox.clone(), sidecar.name.clone());
            tokio::spawn(async move {
                let code = match child.wait().await {
                    Ok(status) => crate::exec::exit_code(&status),
                    Err(_) => 137,
                };
                let _ = pump.await;
                container.finish().await;
                if let Some(sidecar) = sandbox.sidecars.iter().find(|sidecar| sidecar.name == name) {
                    sidecar.image.lock_unpoisoned().take();
                    executor.sidecar_ended(&sandbox, sidecar, code);
                }
            })
        };
        *sidecar.watcher.lock_unpoisoned() = Some(watcher);
        Ok(())
    }

    /// An image sidecar's command ended with `code` (or never ran: 127): its log closes, and
    /// while its sandbox goes on, the end is reported as a container's.
    fn sidecar_ended(&self, sandbox: &Sandbox, sidecar: &SidecarContainer, code: i32) {
        let _ = sidecar.exit_code.set(code);
        sidecar.logs.close();
        if sandbox.running().is_some() && !sandbox.stop_requested.load(std::sync::atomic::Ordering::SeqCst) {
            debug!(sandbox = %sandbox.id, container = %sidecar.name, exit_code = code, "image sidecar exited");
            let _ = self.inner.exits_sender.send(crate::MainExit {
                id: sandbox.id.clone(),
                container: Some(sidecar.name.clone()),
                exit_code: code,
                oom_killed: false,
            });
        }
    }
}

/// A created container's root and namespaces, opened through its init's `/proc` entry
/// (NotFound: it has ended already).
fn open_container(init: libc::pid_t) -> std::io::Result<(std::os::fd::OwnedFd, crate::file_helper::SandboxNamespaces)> {
    let root = sys::open_path(&std::ffi::CString::new(format!("/proc/{init}/root")).unwrap_or_default())?;
    let namespaces = crate::file_helper::SandboxNamespaces::open(init, true)?;
    Ok((root, namespaces))
}
