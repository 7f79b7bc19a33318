//! Where a data operation (exec, file transfer, logs) runs: the lookup behind the sandbox API's
//! data plane and kubectl's `exec` and `logs`. Each front door keeps its own checks, in the order
//! its real counterpart makes them (the sandbox service asks for the sandbox's state, the
//! Kubernetes API server for the Pod's phase), and its own refusals; both end at the same
//! [`DataTarget`], and both refusals say when waiting for the host to start the Pod may help
//! ([`AwaitsHostStart`]), so every reader waits by the same rule.

use crate::error::SimError;
use crate::ids::SharedStr;
use crate::k8s::{Pod, PodOwner, PodPhase};
use crate::query::Scope;
use crate::sandbox::{SandboxState, SandboxView};
use crate::world::World;

/// Which running container an operation acts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTarget {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its Pod's uid (the key the host started its containers under).
    pub pod_uid: String,
    /// The container, already resolved: never empty.
    pub container: String,
}

/// The sandbox states a data operation of the sandbox API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxNeeds {
    /// Exec and file transfers act on live processes.
    Running,
    /// Logs can still be read once the sandbox has ended.
    RunningOrEnded,
}

/// What a Kubernetes subresource needs of its Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodNeeds {
    /// `pods/exec`: a running container of a running sandbox.
    Exec,
    /// `pods/log`: a started container; a Pod with no process here has empty logs.
    Logs,
}

/// A refusal that waiting for the host to start a Pod may turn into a target.
pub trait AwaitsHostStart {
    /// The Pod whose start the host may still report, when waiting for it could change the
    /// answer (what readers wait for, as GetSandbox does).
    fn awaits_start_of(&self) -> Option<&str>;
}

/// Why the sandbox API's data operation has no target.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxDataRefusal {
    /// No such sandbox for the caller (the world's NOT_FOUND).
    NoSandbox(SimError),
    /// The sandbox is in a state the operation does not accept.
    NotRunning(Box<SandboxView>),
    /// The sandbox has no container of the name asked for.
    NoSuchContainer,
}

impl AwaitsHostStart for SandboxDataRefusal {
    fn awaits_start_of(&self) -> Option<&str> {
        match self {
            SandboxDataRefusal::NotRunning(view) if view.may_await_host() => Some(&view.pod_uid),
            _ => None,
        }
    }
}

/// Why the API server's checks on the Pod itself fail, the same for every subresource (`exec`,
/// `log`), with what it words its answer from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodRefusal {
    /// No Pod of that name inside the caller's scope.
    NotFound,
    /// The Pod has no container of the name asked for.
    ContainerNotValid {
        /// The container named (or the first, when none was).
        container: String,
    },
    /// The Pod is not bound to a Node yet.
    NoHostAssigned,
}

/// Why a Kubernetes subresource (`exec`, `log`) has no process to act on, with what the API
/// server words its answer from: the Pod checks every subresource makes, or a refusal each
/// subresource words (or waives) its own way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodDataRefusal {
    /// The Pod checks common to every subresource.
    Pod(PodRefusal),
    /// The Pod's containers have not started.
    NotStarted {
        /// The container named (or the first).
        container: String,
        /// The Pod, which the host may still be starting.
        pod_uid: SharedStr,
    },
    /// `exec`: the Pod has ended.
    PodCompleted {
        /// Its phase.
        phase: PodPhase,
    },
    /// The Pod runs no process in the emulator (slurmd, the scheduler), or (`logs`) its sandbox
    /// or container is no longer on record.
    NoProcess,
    /// `exec`: the Pod's sandbox is not RUNNING.
    SandboxNotReady {
        /// The container named (or the first).
        container: String,
    },
}

impl From<PodRefusal> for PodDataRefusal {
    fn from(refusal: PodRefusal) -> PodDataRefusal {
        PodDataRefusal::Pod(refusal)
    }
}

impl AwaitsHostStart for PodDataRefusal {
    fn awaits_start_of(&self) -> Option<&str> {
        match self {
            PodDataRefusal::NotStarted { pod_uid, .. } => Some(pod_uid),
            _ => None,
        }
    }
}

impl SandboxView {
    /// The sandbox API's data target in this sandbox: the container named `asked` (the main one
    /// when unnamed), while the sandbox is in a state `needs` accepts.
    pub fn data_target(&self, asked: &str, needs: SandboxNeeds) -> Result<DataTarget, SandboxDataRefusal> {
        let accepted = match needs {
            SandboxNeeds::Running => self.state == SandboxState::Running,
            SandboxNeeds::RunningOrEnded => self.state == SandboxState::Running || self.state.is_terminal(),
        };
        if !accepted {
            return Err(SandboxDataRefusal::NotRunning(Box::new(self.clone())));
        }
        let container = self.data_container(asked).ok_or(SandboxDataRefusal::NoSuchContainer)?;
        Ok(DataTarget { sandbox_id: self.id.to_string(), pod_uid: self.pod_uid.to_string(), container })
    }

    /// The container a data operation acts in: the one named, or the main one when unnamed.
    pub fn data_container(&self, asked: &str) -> Option<String> {
        let containers = &self.resolved.containers;
        let found = if asked.is_empty() {
            self.main_container_index().and_then(|index| containers.get(index))
        } else {
            containers.iter().find(|container| container.name == asked)
        };
        found.map(|container| container.name.clone())
    }
}

impl World {
    /// A Kubernetes subresource's data target: the API server's checks (the Pod in the caller's
    /// scope, its container, its Node, its phase) before it asks the kubelet, then the sandbox
    /// behind the Pod.
    pub fn pod_data_target(
        &self,
        scope: &Scope,
        namespace: &str,
        name: &str,
        asked: &str,
        needs: PodNeeds,
    ) -> Result<DataTarget, PodDataRefusal> {
        let (pod, container) = self.pod_and_container(scope, namespace, name, asked)?;
        match (pod.shown_phase(), needs) {
            (PodPhase::Pending, _) => return Err(PodDataRefusal::NotStarted { container, pod_uid: pod.uid.clone() }),
            (PodPhase::Running, _) | (_, PodNeeds::Logs) => {}
            (phase, PodNeeds::Exec) => return Err(PodDataRefusal::PodCompleted { phase }),
        }
        let PodOwner::Sandbox(sandbox_id) = &pod.owner else { return Err(PodDataRefusal::NoProcess) };
        let view = self.sandbox(sandbox_id).ok_or(match needs {
            PodNeeds::Exec => PodRefusal::NotFound.into(),
            PodNeeds::Logs => PodDataRefusal::NoProcess,
        })?;
        if needs == PodNeeds::Exec && view.state != SandboxState::Running {
            return Err(PodDataRefusal::SandboxNotReady { container });
        }
        let resolved = view.data_container(&container).ok_or(match needs {
            PodNeeds::Exec => PodRefusal::ContainerNotValid { container }.into(),
            PodNeeds::Logs => PodDataRefusal::NoProcess,
        })?;
        Ok(DataTarget { sandbox_id: sandbox_id.to_string(), pod_uid: pod.uid.to_string(), container: resolved })
    }

    /// The Pod `namespace/name` as the caller sees it and the container a subresource names,
    /// the first when none is.
    fn pod_and_container(
        &self,
        scope: &Scope,
        namespace: &str,
        name: &str,
        asked: &str,
    ) -> Result<(&Pod, String), PodRefusal> {
        let pod = self.scoped_pod_by_name(scope, namespace, name).ok_or(PodRefusal::NotFound)?;
        let container = if asked.is_empty() {
            pod.containers.first().map(|container| container.name.clone()).unwrap_or_default()
        } else {
            asked.to_owned()
        };
        if !pod.containers.iter().any(|candidate| candidate.name == container) {
            return Err(PodRefusal::ContainerNotValid { container });
        }
        if pod.node_name.is_none() {
            return Err(PodRefusal::NoHostAssigned);
        }
        Ok((pod, container))
    }
}
