//! Starting an image sandbox (`LaunchSpec::image`): its containers made and run by the OCI
//! runtime (`oci.rs`), then registered as any sandbox is.
//!
//! A Pod of one container is `runc run` of it. A Pod of several starts as Kubernetes starts a Pod
//! whose sidecars come first: the main container is created up to its gate (its namespaces made,
//! its command not started: `oci::GATE_SCRIPT`), then each sidecar in the spec's order, joined to
//! those namespaces, each once what it waits for holds (`StartAfter`: another started, healthy by
//! its startup probe, or ended with 0), and last the main command, once what it waits for holds.
//! A condition that cannot hold (a probe that keeps failing, a dependency that ended otherwise)
//! fails the start, as Compose's `dependency failed to start`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cwsandbox_sync::MutexUnpoisoned;
use tokio::net::unix::pipe;
use tracing::debug;

use super::keeper::{Keeper, LogPipe, pump_logs};
use super::layout::{container_env, sandbox_env};
use super::oci::{self, ContainerPlan, OciRuntime};
use super::sidecars::{ImageSidecar, SidecarContainer};
use super::{
    CLAIMS_DIR, Directories, Executor, Running, Started, Target, every_volume_mount, restores_of, setup_error,
};
use crate::logs::LogBuffer;
use crate::sys::{self, ProcessHandle};
use crate::{ExecutorError, LaunchSpec, OciSupport, StartAfter, StartCondition, StartupProbe, files};

/// Under a sandbox's directory: one directory per image sidecar (`1`, `2`, … in the spec's
/// order), its bundle, layers, mounted files and execs' process files.
const CONTAINERS_DIR: &str = "containers";

/// Where the main container's creation waits for its sidecars (`oci::GATE_SCRIPT`).
const GATE_DIR: &str = "gate";

/// The `/etc/hosts` of a Pod whose containers resolve names to their loopback.
const HOSTS_FILE: &str = "hosts";

impl Executor {
    /// Starts a sandbox in its image's root through the OCI runtime. The start is claimed.
    pub(super) async fn start_image(&self, id: &str, mut spec: LaunchSpec) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let handler = spec.handler;
        let gvisor = handler == crate::RuntimeHandler::Runsc;
        let Some(oci) = inner.runtime(handler) else {
            let why = match inner.runtime_support(handler) {
                OciSupport::Unavailable(why) => why.clone(),
                _ if gvisor => "gVisor's runsc is not configured".to_owned(),
                _ => "no OCI runtime is configured".to_owned(),
            };
            let place = if gvisor { "under gVisor" } else { "in its image" };
            return Err(setup_error(id, format!("the sandbox cannot run {place}: {why}")));
        };
        if gvisor && !spec.sidecars.is_empty() {
            return Err(ExecutorError::InvalidRequest(format!(
                "a sandbox under gVisor runs one container here (runsc cannot join another container's namespaces by path); this one has {} more",
                spec.sidecars.len()
            )));
        }
        // Without an image, gVisor runs the host's programs, as the process runtime does: an
        // empty root with the host's directories bound read-only, and a sandbox without a command
        // idles.
        let hostless = spec.image.is_none();
        let mut hostless_binds = Vec::new();
        if hostless {
            gvisor_mount_points_exist(&spec, &inner.config.host_paths)?;
            let host_paths = inner.config.host_paths.clone();
            let runtime = inner.clone();
            hostless_binds = tokio::task::spawn_blocking(move || match runtime.runtime(handler) {
                Some(oci) => oci.hostless_binds(&host_paths).map_err(|error| error.to_string()),
                None => Err("gVisor's runsc is gone".to_owned()),
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, format!("cannot bind the host's directories: {message}")))?;
            spec.image = Some(crate::ImageRoot { rootfs: oci.hostless_root_dir() });
            if spec.command.is_empty() {
                spec.command = vec!["sleep".to_owned(), "infinity".to_owned()];
            }
        }
        if let Some(sidecar) = spec.sidecars.iter().find(|sidecar| sidecar.image.is_none()) {
            return Err(ExecutorError::InvalidRequest(format!(
                "container {:?}: in a sandbox that runs in images every container needs an image of its own",
                sidecar.name
            )));
        }
        check_order(&spec)?;
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
        let restores = restores_of(&inner.config.root_dir, &every_volume_mount(&spec))?;
        // runc's container gets a network namespace of its own, its user namespace's, into which
        // the host puts the sandbox's network at the gate (`Network::Attached`).
        let plumbed = match &spec.network {
            crate::Network::Attached(attach) if !inner.runtime(handler).is_some_and(OciRuntime::is_gvisor) => {
                Some(attach.clone())
            }
            _ => None,
        };
        let gated = !spec.sidecars.is_empty() || plumbed.is_some();
        let hosts = (!spec.host_aliases.is_empty()).then(|| dir.join(HOSTS_FILE));
        let mut binds = hostless_binds;
        if let Some(hosts) = &hosts {
            binds.push((hosts.clone(), "/etc/hosts".to_owned(), false));
        }
        let plan = ContainerPlan {
            id: id.to_owned(),
            dir: dir.clone(),
            image: image.rootfs,
            hostname: spec.hostname.clone(),
            argv: spec.command.clone(),
            env: env.clone(),
            cwd: cwd.clone(),
            user: mode.command_ids(spec.user).unwrap_or((0, 0)),
            network: spec.network.clone(),
            binds,
            memory: spec.memory_limit_bytes,
            cpu_millis: spec.cpu_limit_millis,
            join: None,
            gate: gated.then(|| dir.join(GATE_DIR)),
            command_from_image: !hostless,
        };
        let made = {
            let inner = inner.clone();
            let (mounts, files) = (spec.volume_mounts.clone(), spec.files.clone());
            let memory_volumes = spec.memory_volumes.clone();
            let claims_dir = inner.config.root_dir.join(CLAIMS_DIR);
            let aliases = spec.host_aliases.clone();
            let hostname = spec.hostname.clone();
            tokio::task::spawn_blocking(move || {
                let prepared = match inner.runtime(handler) {
                    Some(oci) => {
                        oci::prepare_sandbox(oci, plan, &mounts, &files, &restores, &memory_volumes, &claims_dir)?
                    }
                    None => return Err("the OCI runtime is gone".to_owned()),
                };
                if prepared.1.is_some() {
                    prepare_shared(&prepared.0, &hostname, &aliases)?;
                }
                Ok(prepared)
            })
            .await
            .map_err(|error| setup_error(id, error.to_string()))?
            .map_err(|message| setup_error(id, message))?
        };
        let (log_read, log_write) = std::io::pipe()?;
        let output = Some(pipe::Receiver::from_owned_fd(log_read.into())?);
        let mut sidecar_dirs = Vec::with_capacity(spec.sidecars.len());
        let mut sidecars = Vec::with_capacity(spec.sidecars.len());
        for launch in &spec.sidecars {
            let working_dir = files::resolve(launch.working_dir.as_deref().unwrap_or("/"), "/").map_err(|error| {
                ExecutorError::InvalidRequest(format!("container {:?}: working directory: {error}", launch.name))
            })?;
            sidecars.push(Arc::new(SidecarContainer {
                name: launch.name.clone(),
                env: container_env(&spec.hostname, &launch.env, launch.user, mode),
                working_dir: working_dir.clone(),
                command_ids: mode.command_ids(launch.user),
                logs: Arc::new(LogBuffer::new(inner.config.log_buffer_bytes)),
                exit_code: Arc::default(),
                own_root: true,
                image: Mutex::default(),
                watcher: Mutex::default(),
                sandbox: OnceLock::new(),
                reported: Default::default(),
            }));
            sidecar_dirs.push(working_dir);
        }
        let dirs = Directories { dir: dir.clone(), working_dir: cwd, sidecar_dirs };
        let (plan, Some(prepared)) = made else {
            // As a kubelet's StartError: the command never ran, exit code 127, the reason in
            // the container's log.
            let _ =
                (&log_write).write_all(format!("cwsandbox: {program}: command not found in the image\n").as_bytes());
            drop(log_write);
            let started = Started {
                keeper: Keeper::Ended { code: 127, output },
                running: None,
                command_runs: false,
                oci: None,
                sidecars: None,
                held: None,
            };
            return self.register(id, dirs, env, &spec, started).await;
        };
        let command = oci.run_command(id, &prepared, log_write)?;
        let mut child = inner
            .spawner
            .spawn(command)
            .await
            .map_err(|error| setup_error(id, format!("cannot start {}: {error}", oci.info.runtime.display())))?;
        let container = oci.container(&plan, &prepared);
        if let Some(gate) = &plan.gate {
            let failed = match OciRuntime::wait_gated(gate, &mut child).await {
                Ok(Some(namespaces_of)) => {
                    let plumbing = match plumbed {
                        Some(attach) => {
                            let pid = namespaces_of as u32;
                            match tokio::task::spawn_blocking(move || attach.plumb_into(pid)).await {
                                Ok(Ok(())) => Ok(()),
                                Ok(Err(error)) => Err(format!("cannot make the sandbox's network: {error}")),
                                Err(error) => Err(error.to_string()),
                            }
                        }
                        None => Ok(()),
                    };
                    let started = match plumbing {
                        Ok(()) => {
                            self.start_sidecars(
                                id,
                                &dir,
                                namespaces_of,
                                &spec.network,
                                hosts.as_deref(),
                                &spec,
                                &sidecars,
                            )
                            .await
                        }
                        Err(message) => Err(message),
                    };
                    let opened = OciRuntime::open_gate(gate, started.is_ok())
                        .map_err(|error| format!("cannot open the main container's gate: {error}"));
                    started.and(opened).err()
                }
                // runc ended first: `wait_created` tells how.
                Ok(None) => None,
                Err(message) => Some(message),
            };
            if let Some(message) = failed {
                abandon_pod(&mut child, &sidecars, &container).await;
                return Err(setup_error(id, message));
            }
        }
        let init = match OciRuntime::wait_created(&prepared, &mut child).await {
            Ok(Some(init)) => init,
            Ok(None) => {
                // runc could not create the container from this spec (the command not
                // executable, a working directory or mount it refuses…): as a kubelet's
                // StartError, the sandbox ends at once, 127, runc's reason in its log.
                let _ = child.wait().await;
                for sidecar in &sidecars {
                    sidecar.end().await;
                }
                container.finish().await;
                debug!(sandbox = id, "the OCI runtime could not create the container");
                let started = Started {
                    keeper: Keeper::Ended { code: 127, output },
                    running: None,
                    command_runs: false,
                    oci: None,
                    sidecars: Some(sidecars),
                    held: None,
                };
                return self.register(id, dirs, env, &spec, started).await;
            }
            Err(message) => {
                abandon_pod(&mut child, &sidecars, &container).await;
                return Err(setup_error(id, message));
            }
        };
        let running = ProcessHandle::open(init);
        let opened = match open_container(init) {
            Ok(opened) => Some(opened),
            // A command that ends at once can end before this: nothing left to reach.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                debug!(sandbox = id, %error, "the container ended as it started");
                running.signal(libc::SIGKILL);
                let _ = child.wait().await;
                for sidecar in &sidecars {
                    sidecar.end().await;
                }
                container.finish().await;
                return Err(setup_error(id, format!("cannot open the container: {error}")));
            }
        };
        let running = opened.map(|(root, namespaces)| Running {
            keeper: running,
            root,
            namespaces: Some(namespaces),
            target: Target::Oci { network: spec.network.clone() },
        });
        let started = Started {
            keeper: Keeper::Runc { child, output },
            running,
            command_runs: true,
            oci: Some(container),
            sidecars: Some(sidecars),
            held: None,
        };
        self.register(id, dirs, env, &spec, started).await
    }

    /// Starts an image sandbox's sidecars in the spec's order, each joined to the namespaces of
    /// the main container's init `namespaces_of` once what it waits for holds, then waits for
    /// what the main command waits for. Why the Pod cannot start, otherwise.
    #[allow(clippy::too_many_arguments)]
    async fn start_sidecars(
        &self,
        id: &str,
        sandbox_dir: &Path,
        namespaces_of: libc::pid_t,
        network: &crate::Network,
        hosts: Option<&Path>,
        spec: &LaunchSpec,
        sidecars: &[Arc<SidecarContainer>],
    ) -> Result<(), String> {
        let mut probed = Vec::new();
        for (index, (sidecar, launch)) in sidecars.iter().zip(&spec.sidecars).enumerate() {
            self.wait_for(id, &launch.after, sidecars, spec, &mut probed).await?;
            let started =
                self.start_image_sidecar(id, sandbox_dir, namespaces_of, network, hosts, index, sidecar, launch).await;
            if let Err(error) = started {
                return Err(format!("container {:?} cannot start: {error}", sidecar.name));
            }
        }
        self.wait_for(id, &spec.after, sidecars, spec, &mut probed).await
    }

    /// Waits until every condition of `after` holds of the sidecars it names; a startup probe
    /// passed once is not run again (`probed`).
    pub(super) async fn wait_for(
        &self,
        id: &str,
        after: &[StartAfter],
        sidecars: &[Arc<SidecarContainer>],
        spec: &LaunchSpec,
        probed: &mut Vec<String>,
    ) -> Result<(), String> {
        for wanted in after {
            let Some((sidecar, launch)) =
                sidecars.iter().zip(&spec.sidecars).find(|(sidecar, _)| sidecar.name == wanted.container)
            else {
                return Err(format!("it waits for container {:?}, which the sandbox does not have", wanted.container));
            };
            match wanted.condition {
                StartCondition::Started => {}
                StartCondition::Healthy => {
                    if probed.contains(&sidecar.name) {
                        continue;
                    }
                    let Some(probe) = &launch.startup_probe else {
                        return Err(format!(
                            "dependency failed to start: container {:?} has no healthcheck configured",
                            sidecar.name
                        ));
                    };
                    self.probe_until_healthy(id, sidecar, probe).await?;
                    probed.push(sidecar.name.clone());
                }
                StartCondition::CompletedSuccessfully => match wait_exit(sidecar).await {
                    Some(0) => {}
                    Some(code) => {
                        return Err(format!(
                            "dependency failed to start: container {:?} exited with {code}, not 0",
                            sidecar.name
                        ));
                    }
                    None => {
                        return Err(format!(
                            "dependency failed to start: container {:?} did not complete within {COMPLETION_TIMEOUT:?}",
                            sidecar.name
                        ));
                    }
                },
            }
        }
        Ok(())
    }

    /// Runs `probe` in `sidecar` until it succeeds; fails once it failed `failure_threshold`
    /// times in a row, or the container ended.
    async fn probe_until_healthy(
        &self,
        id: &str,
        sidecar: &SidecarContainer,
        probe: &StartupProbe,
    ) -> Result<(), String> {
        let unhealthy =
            |why: String| format!("dependency failed to start: container {:?} is unhealthy: {why}", sidecar.name);
        tokio::time::sleep(probe.initial_delay).await;
        let mut failures = 0u32;
        loop {
            let Some(running) = sidecar.image_container() else {
                let ended = sidecar
                    .exit_code
                    .get()
                    .map_or_else(|| "it ended".to_owned(), |code| format!("it exited with {code}"));
                return Err(unhealthy(ended));
            };
            let started = Instant::now();
            let outcome = self.run_probe(id, &running, sidecar, probe).await;
            match outcome {
                Ok(0) => {
                    debug!(sandbox = id, container = %sidecar.name, "startup probe passed");
                    return Ok(());
                }
                Ok(code) => debug!(sandbox = id, container = %sidecar.name, code, "startup probe failed"),
                Err(why) => debug!(sandbox = id, container = %sidecar.name, %why, "startup probe failed"),
            }
            failures += 1;
            if failures >= probe.failure_threshold.max(1) {
                return Err(unhealthy(format!("its healthcheck failed {failures} times in a row")));
            }
            tokio::time::sleep(probe.period.saturating_sub(started.elapsed())).await;
        }
    }

    /// One run of a probe in a sidecar, within its timeout: its exit code. An image sidecar's
    /// runs through `runc exec`; one with a root of its own on the host's programs (the process
    /// runtime) as any exec in it does.
    async fn run_probe(
        &self,
        id: &str,
        image: &ImageSidecar,
        sidecar: &SidecarContainer,
        probe: &StartupProbe,
    ) -> Result<i32, String> {
        let Some(container) = &image.container else {
            let request = crate::ExecRequest {
                argv: probe.exec.clone(),
                container: Some(sidecar.name.clone()),
                ..crate::ExecRequest::default()
            };
            let session = self.exec(id, request).await.map_err(|error| error.to_string())?;
            // Dropping the session on a timeout ends the probe's processes.
            return match tokio::time::timeout(probe.timeout.max(Duration::from_secs(1)), session.collect()).await {
                Ok((_, _, code)) => Ok(code),
                Err(_) => Err(format!("it took longer than {:?}", probe.timeout)),
            };
        };
        let Some(oci) = &self.inner.oci else { return Err("the OCI runtime is gone".to_owned()) };
        let user = sidecar.command_ids.unwrap_or(container.user);
        let files = oci
            .exec_files(container, &probe.exec, &sidecar.env, &sidecar.working_dir, user, None)
            .map_err(|error| error.to_string())?;
        let mut command = container.exec_command(&files, None).map_err(|error| error.to_string())?;
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = self.inner.spawner.spawn(command).await.map_err(|error| error.to_string())?;
        let waited = tokio::time::timeout(probe.timeout.max(Duration::from_secs(1)), child.wait()).await;
        let _ = std::fs::remove_file(&files.process);
        let _ = std::fs::remove_file(&files.pid_file);
        match waited {
            Ok(Ok(status)) => Ok(crate::exec::exit_code(&status)),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => {
                // runc exec's own kill ends the probe's process too (kill_on_drop).
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(format!("it took longer than {:?}", probe.timeout))
            }
        }
    }

    /// Starts image sidecar `sidecar` (the `index`th of the spec's) of an image sandbox whose
    /// main container's init is `namespaces_of`: a container of the OCI runtime of its own, in its
    /// image's root, joined to that init's user, network, IPC and UTS namespaces, its output going
    /// to its log. A command its image does not have ends it at once, 127, the reason in its log
    /// (a kubelet's StartError); the sandbox goes on.
    #[allow(clippy::too_many_arguments)]
    async fn start_image_sidecar(
        &self,
        id: &str,
        sandbox_dir: &Path,
        namespaces_of: libc::pid_t,
        network: &crate::Network,
        hosts: Option<&Path>,
        index: usize,
        sidecar: &Arc<SidecarContainer>,
        launch: &crate::Sidecar,
    ) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let Some(oci) = &inner.oci else {
            return Err(setup_error(id, "the OCI runtime is gone".to_owned()));
        };
        let image = launch.image.clone().unwrap_or_default();
        let mut binds = Vec::new();
        if let Some(hosts) = hosts {
            binds.push((hosts.to_path_buf(), "/etc/hosts".to_owned(), false));
        }
        let plan = ContainerPlan {
            // Unique among the runtime's containers, and the name of its cgroup's.
            id: format!("{id}.{}", index + 1),
            dir: sandbox_dir.join(CONTAINERS_DIR).join((index + 1).to_string()),
            image: image.rootfs,
            hostname: String::new(),
            argv: launch.command.clone(),
            env: sidecar.env.clone(),
            cwd: sidecar.working_dir.clone(),
            user: sidecar.command_ids.unwrap_or((0, 0)),
            network: network.clone(),
            binds,
            memory: launch.memory_limit_bytes,
            cpu_millis: launch.cpu_limit_millis,
            join: Some(namespaces_of),
            gate: None,
            command_from_image: true,
        };
        let program = plan.argv.first().cloned().unwrap_or_default();
        let made = {
            let inner = inner.clone();
            let (mounts, files) = (launch.volume_mounts.clone(), launch.files.clone());
            let claims_dir = inner.config.root_dir.join(CLAIMS_DIR);
            let sandbox_dir = sandbox_dir.to_path_buf();
            tokio::task::spawn_blocking(move || match &inner.oci {
                Some(oci) => oci::prepare_sidecar(oci, plan, &sandbox_dir, &mounts, &files, &claims_dir),
                None => Err("the OCI runtime is gone".to_owned()),
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
            self.sidecar_ended(sidecar, 127);
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
                self.sidecar_ended(sidecar, 127);
                return Ok(());
            }
        };
        if let Some((init, (root, namespaces))) = opened {
            let running = Arc::new(Running {
                keeper: ProcessHandle::open(init),
                root,
                namespaces: Some(namespaces),
                target: Target::Oci { network: network.clone() },
            });
            *sidecar.image.lock_unpoisoned() =
                Some(Arc::new(ImageSidecar { running, container: Some(container.clone()) }));
        }
        let watcher = {
            let (executor, sidecar) = (self.clone(), sidecar.clone());
            tokio::spawn(async move {
                let code = match child.wait().await {
                    Ok(status) => crate::exec::exit_code(&status),
                    Err(_) => 137,
                };
                let _ = pump.await;
                container.finish().await;
                sidecar.image.lock_unpoisoned().take();
                executor.sidecar_ended(&sidecar, code);
            })
        };
        *sidecar.watcher.lock_unpoisoned() = Some(watcher);
        Ok(())
    }

    /// An image sidecar's command ended with `code` (or never ran: 127): its log closes, and
    /// while its sandbox runs, the end is reported as a container's (once its sandbox is
    /// registered: one that ended while the Pod started is reported then).
    pub(super) fn sidecar_ended(&self, sidecar: &SidecarContainer, code: i32) {
        let _ = sidecar.exit_code.set(code);
        sidecar.logs.close();
        self.report_sidecar_exit(sidecar);
    }

    /// Reports an ended image sidecar's exit, once, while its sandbox runs.
    pub(super) fn report_sidecar_exit(&self, sidecar: &SidecarContainer) {
        let Some(code) = sidecar.exit_code.get().copied() else { return };
        let Some(sandbox) = sidecar.sandbox.get().and_then(std::sync::Weak::upgrade) else { return };
        if sandbox.running().is_none() || sandbox.stop_requested.load(Ordering::SeqCst) {
            return;
        }
        if sidecar.reported.swap(true, Ordering::SeqCst) {
            return;
        }
        debug!(sandbox = %sandbox.id, container = %sidecar.name, exit_code = code, "image sidecar exited");
        let _ = self.inner.exits_sender.send(crate::MainExit {
            id: sandbox.id.clone(),
            container: Some(sidecar.name.clone()),
            exit_code: code,
            oom_killed: false,
        });
    }
}

/// Ends a Pod whose start failed: its main container's runc, its sidecars, and the main
/// container's runtime state.
async fn abandon_pod(
    child: &mut tokio::process::Child,
    sidecars: &[Arc<SidecarContainer>],
    container: &oci::OciContainer,
) {
    let _ = child.start_kill();
    let _ = child.wait().await;
    for sidecar in sidecars {
        sidecar.end().await;
    }
    container.finish().await;
}

/// A gVisor sandbox on the host's directories: runsc's file server (the host's root) makes a
/// mount point that is missing in a bound directory of the host's *in the host's directory*, so
/// a mounted file or volume whose place the host does not have already (a file where a file is,
/// a directory where a directory is) is refused by name rather than written into the host.
/// (Without gVisor, mounted files are laid over the host's directory instead.)
fn gvisor_mount_points_exist(spec: &LaunchSpec, host_paths: &[PathBuf]) -> Result<(), ExecutorError> {
    let wanted = spec
        .files
        .iter()
        .map(|file| (file.path.as_str(), false, "mounted file"))
        .chain(spec.volume_mounts.iter().map(|mount| (mount.path.as_str(), true, "volume mount")));
    for (path, directory, what) in wanted {
        if crate::rootfs::host_dir_of(path, host_paths).is_none() {
            continue;
        }
        let there = std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir() == directory);
        if !there {
            return Err(ExecutorError::InvalidRequest(format!(
                "{what} {path}: under gVisor its place must already be in the host's directory it lies in (gVisor's file server would make it in the host's), and it is not: use another path, or no RuntimeClass"
            )));
        }
    }
    Ok(())
}

/// Refuses start conditions that name no sidecar, or that could never hold: a sidecar that
/// waits for one that starts after it (the order is the spec's), or for itself.
pub(super) fn check_order(spec: &LaunchSpec) -> Result<(), ExecutorError> {
    for (index, sidecar) in spec.sidecars.iter().enumerate() {
        for wanted in &sidecar.after {
            if !spec.sidecars[..index].iter().any(|earlier| earlier.name == wanted.container) {
                return Err(ExecutorError::InvalidRequest(format!(
                    "container {:?} waits for {:?}, which does not start before it",
                    sidecar.name, wanted.container
                )));
            }
        }
    }
    if let Some(wanted) = spec.after.iter().find(|wanted| !spec.sidecars.iter().any(|s| s.name == wanted.container)) {
        return Err(ExecutorError::InvalidRequest(format!(
            "the main container waits for {:?}, which is none of the sandbox's other containers",
            wanted.container
        )));
    }
    Ok(())
}

/// What every container of a Pod shares in its directory: the `/etc/hosts` naming `aliases` on
/// the loopback (beside `localhost` and the Pod's hostname), where there are any. Blocking.
fn prepare_shared(plan: &ContainerPlan, hostname: &str, aliases: &[String]) -> Result<(), String> {
    if aliases.is_empty() {
        return Ok(());
    }
    let path: PathBuf = plan.dir.join(HOSTS_FILE);
    std::fs::write(&path, pod_hosts_file(hostname, aliases))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    // Readable by the containers' users; written by no one in them (a bind of the emulator's).
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|error| format!("cannot open {}: {error}", path.display()))
}

/// A Pod's `/etc/hosts`, as the kubelet writes it: the loopback names, and the Pod's hostname
/// with `aliases` (a Compose file's service names) on 127.0.0.1.
pub(super) fn pod_hosts_file(hostname: &str, aliases: &[String]) -> String {
    let mut text = String::from("# Written by cwsandbox-emulator, as the kubelet writes a Pod's /etc/hosts.\n");
    text.push_str("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    text.push_str(&format!("127.0.0.1\t{hostname}"));
    for alias in aliases {
        text.push(' ');
        text.push_str(alias);
    }
    text.push('\n');
    text
}

/// How long a container waits for another to run to completion before the Pod's start fails.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(600);

/// Waits until a sidecar's command ended; its exit code (`None`: not within
/// [`COMPLETION_TIMEOUT`]).
async fn wait_exit(sidecar: &SidecarContainer) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(code) = sidecar.exit_code.get() {
            return Some(*code);
        }
        if started.elapsed() > COMPLETION_TIMEOUT {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A created container's root and namespaces, opened through its init's `/proc` entry
/// (NotFound: it has ended already).
fn open_container(init: libc::pid_t) -> std::io::Result<(std::os::fd::OwnedFd, crate::file_helper::SandboxNamespaces)> {
    let root = sys::open_path(&std::ffi::CString::new(format!("/proc/{init}/root")).unwrap_or_default())?;
    let namespaces = crate::file_helper::SandboxNamespaces::open(init, true)?;
    Ok((root, namespaces))
}
