//! Starting an image sandbox (`LaunchSpec::image`): its container made and run by the OCI
//! runtime (`oci.rs`), then registered as any sandbox is.

use std::io::Write;

use tokio::net::unix::pipe;
use tracing::debug;

use super::keeper::Keeper;
use super::layout::sandbox_env;
use super::oci::{self, ContainerPlan, OciRuntime};
use super::{CLAIMS_DIR, Directories, Executor, Running, Started, Target, restores_of, setup_error};
use crate::sys::{self, ProcessHandle};
use crate::{ExecutorError, LaunchSpec, OciSupport, files};

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
        if let Some(sidecar) = spec.sidecars.first() {
            return Err(ExecutorError::InvalidRequest(format!(
                "container {:?}: a sandbox that runs in an image has one container here (other containers need images of their own, not supported yet)",
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
        let dirs = Directories { dir, working_dir: cwd, sidecar_dirs: Vec::new() };
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
}
