//! The sandbox commands on the world: creation and admission (runner, policy, namespace, the
//! Pod), deletion, the outcomes of its Pod and placeholder job, views and listings. The sandbox
//! lifecycle ([`crate::sandbox`]) keeps the records, their machine, the queries on them alone and
//! the spec's rules; these commands also read the cluster, Slurm, the runners, templates, volumes and snapshots, so they
//! live here, above every lifecycle.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cwsandbox_api::sandbox_v1::{ManagedRunner, RunnerInstallStatus, SandboxMode, SandboxSpec};
use prost::Message;

use crate::config::SERVERLESS_POOL;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::ids::SharedStr;
use crate::k8s::{ContainerState, GPU_CLASS_LABEL, Labels, Pod, PodContainer, PodOwner, PodPhase, requested_by};
use crate::machine::{IllegalTransition, legal};
use crate::pager::Pager;
use crate::policy::MAX_LIFETIME_SECONDS;
use crate::policy::{self, PreparedPolicy};
use crate::resolved::ResolvedSpec;
use crate::sandbox::{
    CONTAINER_CREATING, HostWait, Life, LifePhase, Owner, SANDBOX_ID_LABEL, SANDBOX_MODE_LABEL, Sandbox, SandboxFilter,
    SandboxInfo, SandboxState, SandboxTransition, SandboxView, TeardownCause, check_scratch_media, check_services,
    container_inputs, normalize_spec, restore_source, validate_spec,
};
use crate::slurm::{JobBaseState, JobId};
use crate::sunk::{self, NotHandled};
use crate::volumes::RegisteredVolume;
use crate::world::World;

use super::serverless::{serverless_node_selector, serverless_toleration};

/// How a new sandbox came to be asked for, beyond its spec.
struct Origin<'a> {
    request_id: &'a str,
    source_template: Option<(String, i64)>,
    request_body: Option<Vec<u8>>,
    start_plan: crate::k8s::StartPlan,
}

const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 1000;

impl World {
    fn count_sandbox(&mut self, transition: SandboxTransition) {
        self.sandbox_transitions.add(transition);
    }

    /// Moves sandbox `id` by `transition` to `to`, counted.
    fn sandbox_step(
        &mut self,
        id: &str,
        transition: SandboxTransition,
        to: Life,
    ) -> Result<(), IllegalTransition<SandboxTransition>> {
        let Some(sandbox) = self.sandboxes.get_mut(id) else {
            return Err(IllegalTransition { transition, state: "forgotten" });
        };
        sandbox.life.transition(transition, to)?;
        self.count_sandbox(transition);
        self.touch_sandbox(id);
        Ok(())
    }

    /// Creates a sandbox. The same `request_id` with the same body returns the same sandbox;
    /// with another body it is refused.
    pub fn create_sandbox(
        &mut self,
        owner: &Owner,
        spec: SandboxSpec,
        display_name: &str,
        request_id: &str,
    ) -> SimResult<SandboxView> {
        self.create_sandbox_with_faults(owner, spec, display_name, request_id, Vec::new())
    }

    /// [`World::create_sandbox`], with faults injected into the new sandbox (none for a replay of
    /// a request id: the sandbox exists already).
    pub fn create_sandbox_with_faults(
        &mut self,
        owner: &Owner,
        spec: SandboxSpec,
        display_name: &str,
        request_id: &str,
        faults: Vec<crate::pods::InjectedFault>,
    ) -> SimResult<SandboxView> {
        self.settle();
        let spec = normalize_spec(spec)?;
        let spec_bytes = spec.encode_to_vec();
        // The sandbox keeps its encoded spec, so a replay is compared with what created it.
        let same_body = |sandbox: &SandboxInfo| {
            sandbox.request_body.is_none() && sandbox.spec_bytes == spec_bytes && sandbox.display_name == display_name
        };
        if let Some(replayed) = self.replay(owner, request_id, same_body) {
            return replayed;
        }
        let origin = Origin { request_id, source_template: None, request_body: None, start_plan: Default::default() };
        self.admit(owner, spec, display_name, origin, faults)
    }

    /// CreateSandboxFromTemplate: the template's spec with `overrides` layered on
    /// ([`crate::templates::layered`]), then CreateSandbox's path. A replay of `request_id` is
    /// compared with the request as sent, so it answers the first sandbox even once the template
    /// has changed or gone.
    pub fn create_sandbox_from_template(
        &mut self,
        owner: &Owner,
        request: &cwsandbox_api::sandbox_v1::CreateSandboxFromTemplateRequest,
        faults: Vec<crate::pods::InjectedFault>,
    ) -> SimResult<SandboxView> {
        self.settle();
        let body = cwsandbox_api::sandbox_v1::CreateSandboxFromTemplateRequest {
            request_id: String::new(),
            ..request.clone()
        }
        .encode_to_vec();
        if let Some(replayed) =
            self.replay(owner, &request.request_id, |sandbox| sandbox.request_body.as_deref() == Some(&body))
        {
            return replayed;
        }
        let template = self.get_template(&owner.org, &request.template_id, false)?;
        let spec = crate::templates::layered(&template.spec, &request.overrides.clone().unwrap_or_default())?;
        let origin = Origin {
            request_id: &request.request_id,
            source_template: Some((template.id, template.revision)),
            request_body: Some(body),
            start_plan: Default::default(),
        };
        self.admit(owner, normalize_spec(spec)?, &request.display_name, origin, faults)
    }

    /// CreateSandboxFromFile, once the file is translated into `spec` and its start plan
    /// ([`crate::compose`]): CreateSandbox's path, a replay of `request_id` compared with the
    /// request as sent (the file's bytes included).
    pub fn create_sandbox_from_file(
        &mut self,
        owner: &Owner,
        request: &cwsandbox_api::sandbox_v1::CreateSandboxFromFileRequest,
        (spec, start_plan): (SandboxSpec, crate::k8s::StartPlan),
        faults: Vec<crate::pods::InjectedFault>,
    ) -> SimResult<SandboxView> {
        self.settle();
        let body =
            cwsandbox_api::sandbox_v1::CreateSandboxFromFileRequest { request_id: String::new(), ..request.clone() }
                .encode_to_vec();
        if let Some(replayed) =
            self.replay(owner, &request.request_id, |sandbox| sandbox.request_body.as_deref() == Some(&body))
        {
            return replayed;
        }
        let origin =
            Origin { request_id: &request.request_id, source_template: None, request_body: Some(body), start_plan };
        self.admit(owner, normalize_spec(spec)?, &request.display_name, origin, faults)
    }

    /// The answer to a request whose `request_id` made a sandbox already: that sandbox when
    /// `same_body` says the request is the same, a conflict otherwise; `None` for a new id.
    fn replay(
        &mut self,
        owner: &Owner,
        request_id: &str,
        same_body: impl Fn(&SandboxInfo) -> bool,
    ) -> Option<SimResult<SandboxView>> {
        if request_id.is_empty() {
            return None;
        }
        let id = self.sandboxes.created_by_request(&owner.org, request_id).cloned()?;
        if !self.sandboxes.get(&id).is_some_and(|sandbox| same_body(&sandbox.info)) {
            return Some(Err(SimError::request_id_conflict(request_id)));
        }
        self.count_sandbox(SandboxTransition::Replay);
        Some(self.get_sandbox(&owner.org, &id))
    }

    /// Makes a sandbox of a normalized spec that is not a replay: validation, placement, policy,
    /// the Pod.
    fn admit(
        &mut self,
        owner: &Owner,
        spec: SandboxSpec,
        display_name: &str,
        origin: Origin<'_>,
        faults: Vec<crate::pods::InjectedFault>,
    ) -> SimResult<SandboxView> {
        let Origin { request_id, source_template, request_body, start_plan } = origin;
        validate_spec(&spec)?;
        check_services(&spec)?;
        check_scratch_media(&spec, self.memory_volumes_refused.as_deref())?;
        for (index, volume) in spec.volumes.iter().enumerate() {
            if let Some(snapshot) = restore_source(volume) {
                let field = format!("sandbox.spec.volumes[{index}].scratch.restoreFromSnapshotId");
                self.snapshots.check_restorable(&owner.org, snapshot, field)?;
            }
        }
        let spec_bytes = spec.encode_to_vec();
        let serverless = spec.mode == SandboxMode::Serverless as i32;
        let claims = self.registered_volumes_of(&owner.org, &spec, serverless)?;
        let attached_volume_ids: Vec<String> = claims.values().map(|volume| volume.id.clone()).collect();
        let defaults = self.sandboxes.runtime_defaults(&self.values.sandboxes)?;
        let (runner_id, runner_group_id, prepared) = if serverless {
            // No runner, so no runner policy: the runtime defaults and the spec alone.
            self.serverless_enabled()?;
            let id = self.values().serverless.runner_id.clone();
            (id.clone(), id, Arc::new(PreparedPolicy::new(None)))
        } else {
            // A claim lives in one runner's cluster: its sandboxes run there.
            let pinned = claims.values().next().map(|volume| SandboxSpec {
                runner_ids: vec![volume.source.runner_id.clone()],
                ..SandboxSpec::default()
            });
            let runner = self.choose_runner(owner, pinned.as_ref().unwrap_or(&spec))?;
            let runner_id = runner.identity.as_ref().map(|identity| identity.runner_id.clone()).unwrap_or_default();
            let runner_group_id =
                runner.identity.as_ref().map(|identity| identity.runner_group_id.clone()).unwrap_or_default();
            let prepared =
                self.sandboxes.prepared_policy(&owner.org, &runner_id, self.runners.find(&owner.org, &runner_id));
            (runner_id, runner_group_id, prepared)
        };
        let resolved = policy::resolve_prepared(&defaults, &prepared, &spec)?;
        self.check_runtime_class_runs_here(&owner.org, resolved.runtime_class.as_deref())?;
        self.check_runtime_class_container_count(&resolved)?;
        self.check_network_runs_here(&owner.org, &spec, &resolved)?;
        let own_network = self.wants_own_network(&spec, &resolved);
        if !serverless {
            self.check_gpu_type_runs_here(&owner.org, &resolved)?;
        }
        if resolved.max_lifetime_seconds <= 0 || resolved.max_lifetime_seconds > MAX_LIFETIME_SECONDS {
            return Err(SimError::invalid_field(
                "sandbox.spec.maxLifetimeSeconds",
                format!("must be between 1 and {MAX_LIFETIME_SECONDS} seconds"),
            ));
        }

        let stores = self.readable_secret_stores(&owner.org, &spec);
        let mut inputs = container_inputs(&spec, &stores, &claims)?;
        let deny_egress = spec.network.as_ref().and_then(|network| network.deny_egress).unwrap_or(false);
        let deny_ingress = spec.network.as_ref().and_then(|network| network.deny_ingress).unwrap_or(false);
        let containers: Vec<PodContainer> = resolved
            .containers
            .iter()
            .zip(inputs.iter_mut())
            .map(|(container, inputs)| PodContainer {
                name: container.name.clone(),
                image: container.image.clone(),
                command: container.command.iter().cloned().collect(),
                args: container.args.clone(),
                env: container.env.clone(),
                inputs: inputs.take(),
                working_dir: container.working_dir.clone(),
                requests: container.requests,
                limits: container.limits,
                state: ContainerState::Waiting("ContainerCreating".to_owned()),
            })
            .collect();
        if serverless {
            // Checked before anything is made, so a refusal changes nothing.
            self.serverless_room(&owner.org, requested_by(&containers))?;
        }
        let id = self.ids.sandbox_id();
        let namespace = self.sandboxes.user_namespace(&self.values.sandboxes.namespace_prefix, &owner.org, &owner.user);
        let pod_name = SharedStr::concat(&["sandbox-", &id]);
        let pod_uid = self.ids.uid();
        self.ensure_namespace(&namespace);
        let mut labels = Labels::with_capacity(resolved.labels.len() + 3);
        labels.extend(resolved.labels.iter().map(|(key, value)| (key.clone(), value.clone())));
        labels.insert(SANDBOX_ID_LABEL.to_owned(), id.to_string());
        labels.insert("sandbox.coreweave.com/runner-id".to_owned(), runner_id.clone());
        let (scheduler_name, mut node_selector, tolerations) = if serverless {
            labels.insert(SANDBOX_MODE_LABEL.to_owned(), SERVERLESS_POOL.to_owned());
            ("default-scheduler".to_owned(), serverless_node_selector(), vec![serverless_toleration()])
        } else {
            (
                resolved.scheduler_name.clone().unwrap_or_else(|| "default-scheduler".to_owned()),
                resolved.node_selector.clone(),
                resolved.tolerations.clone(),
            )
        };
        if let Some(gpu_type) = resolved.gpu_type() {
            // As on CKS: the model is a Node label, and both schedulers honour the selector.
            node_selector.insert(GPU_CLASS_LABEL.to_owned(), gpu_type.name.clone());
        }
        let now = self.now();
        let pod = Pod {
            uid: pod_uid.clone(),
            namespace: namespace.clone(),
            name: pod_name.clone(),
            labels,
            annotations: resolved.annotations.iter().map(|(key, value)| (key.clone(), value.clone())).collect(),
            scheduler_name,
            node_name: None,
            termination_grace_period_seconds: i64::from(self.sandbox_values().pod_termination_grace_period_seconds),
            node_selector,
            tolerations,
            required_node_affinity: resolved.required_node_affinity.clone(),
            priority_class_name: resolved.priority_class_name.clone(),
            extra_spec: pod_extra_spec(&resolved),
            containers,
            phase: PodPhase::Pending,
            reason: None,
            message: None,
            scheduled_condition: None,
            start_time: None,
            created: now,
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            owner: PodOwner::Sandbox(id.clone()),
            resource_version: 0,
            object_ref: Default::default(),
            host_started: false,
            pod_ip: None,
        };
        let lifetime = Duration::from_secs(resolved.max_lifetime_seconds as u64);
        self.sandboxes.insert(Sandbox {
            info: Arc::new(SandboxInfo {
                id: id.clone(),
                owner: owner.clone(),
                display_name: display_name.to_owned(),
                tags: spec.tags.clone(),
                spec_bytes,
                resolved,
                deny_egress,
                deny_ingress,
                own_network,
                serverless,
                runner_id,
                runner_group_id,
                namespace,
                pod_name,
                pod_uid,
                created: now,
                request_id: request_id.to_owned(),
                scratch_limits: crate::sandbox::scratch_limits(&spec),
                memory_volumes: crate::sandbox::memory_volumes(&spec),
                attached_volume_ids,
                source_template,
                start_plan,
                request_body,
            }),
            lifetime_timer: None,
            job_id: None,
            started: None,
            life: Life::Live,
            published: Vec::new(),
            endpoint_share_token: None,
            ended_containers: Vec::new(),
        });
        self.count_sandbox(SandboxTransition::Create);
        let uid = pod.uid.clone();
        self.insert_new_pod(pod);
        self.arm_faults(&uid, faults);
        let lifetime_timer = self.timers.schedule(now + lifetime, crate::world::Timer::SandboxLifetime(id.clone()));
        if let Some(sandbox) = self.sandboxes.get_mut(&id) {
            sandbox.lifetime_timer = Some(lifetime_timer);
        }
        self.settle();
        self.get_sandbox(&owner.org, &id)
    }

    /// The registered volumes a new sandbox mounts, by the spec's volume name: each READY, all on
    /// one runner, which `runner_ids` (when set) must name; a serverless sandbox can mount none.
    fn registered_volumes_of(
        &mut self,
        org: &str,
        spec: &SandboxSpec,
        serverless: bool,
    ) -> SimResult<HashMap<String, RegisteredVolume>> {
        use cwsandbox_api::sandbox_v1::sandbox_volume::Source;
        let mut claims: HashMap<String, RegisteredVolume> = HashMap::new();
        for (index, volume) in spec.volumes.iter().enumerate() {
            let Some(Source::VolumeId(id)) = &volume.source else { continue };
            let field = format!("sandbox.spec.volumes[{index}].volumeId");
            if serverless {
                return Err(SimError::invalid(
                    Reason::VolumeRunnerIneligible,
                    vec![FieldViolation::new(
                        field,
                        "a registered volume's claim lives in a runner's cluster, which serverless placement does not use",
                    )],
                ));
            }
            let registered = self.claim_for_mount(org, id, &field)?;
            let runner = &registered.source.runner_id;
            let conflict = if let Some(other) = claims.values().find(|other| other.source.runner_id != *runner) {
                Some(format!(
                    "volume {id:?} is on runner {runner:?} and volume {:?} on runner {:?}: a sandbox runs on one runner",
                    other.id, other.source.runner_id
                ))
            } else if !spec.runner_ids.is_empty() && !spec.runner_ids.contains(runner) {
                Some(format!(
                    "volume {id:?} is on runner {runner:?}, which runner_ids {:?} leaves out",
                    spec.runner_ids
                ))
            } else {
                None
            };
            if let Some(conflict) = conflict {
                return Err(SimError::invalid(
                    Reason::VolumePlacementConflict,
                    vec![FieldViolation::new(field, conflict)],
                ));
            }
            // Other sandboxes write to a claim while this one starts: a sub-path could be swapped
            // for a link between its check and its mount, so only the volume's root is mounted.
            for (container_index, container) in spec.containers.iter().enumerate() {
                for (mount_index, mount) in container.volume_mounts.iter().enumerate() {
                    if mount.volume == volume.name && !mount.sub_path.trim_matches('/').is_empty() {
                        let at =
                            format!("sandbox.spec.containers[{container_index}].volumeMounts[{mount_index}].subPath");
                        return Err(SimError::Unimplemented {
                            message: format!("{at}: a sub-path of a registered volume is not emulated: mount its root"),
                            violations: vec![FieldViolation::new(
                                at,
                                "not emulated for a registered volume (other sandboxes write to it, so a sub-path could be swapped for a link while it is mounted): mount the volume's root",
                            )],
                        });
                    }
                }
            }
            claims.insert(volume.name.clone(), registered);
        }
        Ok(claims)
    }

    /// A named RuntimeClass (asked, a policy default, or a mapping's) must be one the host's
    /// Nodes have; where the host runs none (its runtime runs Pods on the node's default only),
    /// no runner can host the sandbox, as the fleet answers when none can: nothing is made.
    fn check_runtime_class_runs_here(&self, org: &str, class: Option<&str>) -> SimResult<()> {
        let (Some(class), Some(available)) = (class, &self.runtime_classes) else { return Ok(()) };
        if available.iter().any(|known| known == class) {
            return Ok(());
        }
        Err(SimError::FailedPrecondition {
            reason: Reason::NoSuitableRunner,
            message: format!(
                "no runner of organization {org:?} can host RuntimeClass {class:?}: this emulator's Nodes have no such RuntimeClass (its runtime runs Pods on the node's default runtime{}); ask for none, or map the class to node_default in the runner policy",
                if available.is_empty() { String::new() } else { format!(" or {}", available.join(", ")) }
            ),
        })
    }

    /// A sandbox of several containers with a RuntimeClass the host runs one container of per
    /// Pod (gVisor here): refused by name, nothing made, rather than failing at its start.
    fn check_runtime_class_container_count(&self, resolved: &ResolvedSpec) -> SimResult<()> {
        let Some(class) = resolved.runtime_class.as_deref() else { return Ok(()) };
        let count = resolved.containers.len();
        if count < 2 || !self.one_container_runtime_classes.iter().any(|known| known == class) {
            return Ok(());
        }
        Err(SimError::not_emulated(vec![FieldViolation::new(
            "sandbox.spec.containers",
            format!(
                "RuntimeClass {class:?} runs one container per sandbox on this emulator (its runtime cannot join another container's namespaces); this sandbox has {count}: run it without the class, or one container per sandbox"
            ),
        )]))
    }

    /// Refuses a GPU model no Node of the cluster has, as the fleet refuses a sandbox no runner
    /// can host; and a model the runner policy's node selector rules out.
    fn check_gpu_type_runs_here(&self, org: &str, resolved: &ResolvedSpec) -> SimResult<()> {
        let Some(asked) = resolved.gpu_type() else { return Ok(()) };
        if let Some(pinned) = resolved.node_selector.get(GPU_CLASS_LABEL)
            && *pinned != asked.name
        {
            return Err(SimError::invalid_field(
                asked.field.clone(),
                format!(
                    "GPU type {:?} cannot be placed: the runner policy's base.spec.nodeSelector pins {GPU_CLASS_LABEL}={pinned:?}",
                    asked.name
                ),
            ));
        }
        let known = self.offered_gpu_classes();
        if known.contains(asked.name.as_str()) {
            return Ok(());
        }
        Err(SimError::FailedPrecondition {
            reason: Reason::NoSuitableRunner,
            message: format!(
                "{}: no runner of organization {org:?} offers GPU type {:?} (no Node is labelled {GPU_CLASS_LABEL}={:?}); the runners offer {}",
                asked.field,
                asked.name,
                asked.name,
                if known.is_empty() {
                    "no GPUs".to_owned()
                } else {
                    known.iter().map(|class| format!("{class:?}")).collect::<Vec<_>>().join(", ")
                }
            ),
        })
    }

    /// Picks the runner: the first of `runner_ids` that exists and is ready, else (with no ids)
    /// the organization's first ready runner. Borrowed: placing a sandbox copies no policy.
    fn choose_runner(&self, owner: &Owner, spec: &SandboxSpec) -> SimResult<&ManagedRunner> {
        let ready = |runner: &ManagedRunner| runner.install_status == RunnerInstallStatus::Ready as i32;
        if spec.runner_ids.is_empty() {
            return self.runners.iter(&owner.org).find(|runner| ready(runner)).ok_or_else(|| {
                SimError::FailedPrecondition {
                    reason: Reason::NoSuitableRunner,
                    message: format!("organization {:?} has no ready runner", owner.org),
                }
            });
        }
        let mut unavailable = None;
        for runner_id in &spec.runner_ids {
            if let Some(runner) = self.runners.find(&owner.org, runner_id) {
                if ready(runner) {
                    return Ok(runner);
                }
                unavailable = Some(runner_id.clone());
            }
        }
        Err(match unavailable {
            Some(runner_id) => SimError::Unavailable {
                reason: Reason::RunnerUnavailable,
                message: format!("runner {runner_id:?} is not ready"),
                retry_after: Some(Duration::from_secs(5)),
            },
            None => SimError::NotFound {
                reason: Reason::RunnerNotFound,
                message: format!("no runner named {:?} in organization {:?}", spec.runner_ids, owner.org),
            },
        })
    }

    /// How many of an organization's serverless sandboxes hold the pool's capacity: every one
    /// whose Pod has not ended (a terminating Pod still holds its Node's room).
    pub(crate) fn serverless_sandboxes_holding_capacity(&self, org: &str) -> usize {
        self.sandboxes
            .iter()
            .filter(|sandbox| sandbox.info.serverless && sandbox.owner.org == org)
            .filter(|sandbox| self.cluster.pod(&sandbox.pod_uid).is_some_and(|pod| !pod.phase.is_terminal()))
            .count()
    }

    /// What a sandbox's Pod waits on its host for, if anything: the pull of its images, or the
    /// start of its containers (while either lasts the sandbox is not RUNNING yet), or, once it
    /// is being deleted, the end of the processes the host was asked to stop or kill (while that
    /// lasts the sandbox reads TERMINATING).
    pub fn awaits_host(&self, pod_uid: &str) -> Option<HostWait> {
        if self.pods.is_awaiting_kill(pod_uid) {
            return Some(HostWait::Stop);
        }
        let pod = self.cluster.pod(pod_uid)?;
        if pod.deletion_timestamp.is_some() {
            // Asked to stop processes it started: their end comes back as an exit.
            let stopping = self.host_confirms_starts && pod.phase == PodPhase::Running && pod.host_started;
            return stopping.then_some(HostWait::Stop);
        }
        if self.pods.is_pulling(pod_uid) {
            Some(HostWait::Pull)
        } else if pod.phase == PodPhase::Running && !pod.host_started {
            Some(HostWait::Start)
        } else {
            None
        }
    }

    /// A sandbox as its owner's organization sees it.
    pub fn get_sandbox(&self, org: &str, id: &str) -> SimResult<SandboxView> {
        self.sandboxes
            .get(id)
            .filter(|sandbox| sandbox.owner.org == org)
            .map(|sandbox| self.view(sandbox))
            .ok_or_else(|| crate::sandbox::sandbox_not_found(id))
    }

    /// A sandbox by id for the host (no organization check).
    pub fn sandbox(&self, id: &str) -> Option<SandboxView> {
        self.sandboxes.get(id).map(|sandbox| self.view(sandbox))
    }

    /// Every sandbox on record, of every organization, in no particular order (for the host's
    /// copy of the views, which [`World::take_touched_sandboxes`] keeps current).
    pub fn every_sandbox(&self) -> impl Iterator<Item = SandboxView> + '_ {
        self.sandboxes.iter().map(|sandbox| self.view(sandbox))
    }

    /// One page of an organization's sandboxes.
    pub fn list_sandboxes(
        &self,
        org: &str,
        filter: &SandboxFilter,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<SandboxView>, String)> {
        let pager = Pager::new("sandboxes", filter.fingerprint(), page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let after = match pager.after(page_token)?.as_deref() {
            None => None,
            Some([created, id]) => Some((
                created
                    .parse::<i64>()
                    .map_err(|_| SimError::invalid_field("page_token", "not a page token of this listing"))?,
                id.clone(),
            )),
            Some(_) => return Err(SimError::invalid_field("page_token", "not a page token of this listing")),
        };
        let mut matching: Vec<SandboxView> = self
            .sandboxes
            .iter()
            .filter(|sandbox| sandbox.owner.org == org)
            .map(|sandbox| self.view(sandbox))
            .filter(|view| filter.show_terminated || !view.state.is_terminal() || filter.state == Some(view.state))
            .filter(|view| filter.state.is_none_or(|state| state == view.state))
            .filter(|view| filter.tags.iter().all(|tag| view.tags.contains(tag)))
            .filter(|view| filter.runner_ids.is_empty() || filter.runner_ids.contains(&view.runner_id))
            .filter(|view| {
                filter.volume_ids.is_empty() || view.attached_volume_ids.iter().any(|id| filter.volume_ids.contains(id))
            })
            .collect();
        matching.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        if filter.descending {
            matching.reverse();
        }
        let start = match &after {
            None => 0,
            Some(position) => matching
                .iter()
                .position(|view| {
                    let key = (view.created.millis(), view.id.as_str());
                    let bound = (position.0, position.1.as_str());
                    if filter.descending { key < bound } else { key > bound }
                })
                .unwrap_or(matching.len()),
        };
        Ok(pager.page(matching.into_iter().skip(start), |last| {
            vec![last.created.millis().to_string(), last.id.to_string()]
        }))
    }

    /// Deletes a sandbox: its Pod terminates with `grace_seconds` (0: the Pod's own grace;
    /// negative is refused).
    /// Deleting an ended sandbox is a no-op that returns it.
    pub fn delete_sandbox(&mut self, org: &str, id: &str, grace_seconds: i32) -> SimResult<SandboxView> {
        if grace_seconds < 0 {
            return Err(SimError::invalid_field("grace_period_seconds", "must not be negative"));
        }
        self.settle();
        let sandbox = self.get_sandbox(org, id)?;
        if sandbox.state.is_terminal() || sandbox.state == SandboxState::Terminating {
            return Ok(sandbox);
        }
        let grace = u64::try_from(grace_seconds).ok().filter(|grace| *grace > 0);
        // A stop (a grace of the caller's) and a delete read differently in the sandbox's reason.
        let cause = grace.map_or(TeardownCause::OwnerDeleted, TeardownCause::OwnerStopped);
        legal(self.sandbox_step(id, SandboxTransition::Delete, Life::TearingDown(cause)));
        self.begin_pod_deletion(&sandbox.pod_uid, grace);
        self.settle();
        self.get_sandbox(org, id)
    }

    /// The host reports that a sandbox's main process exited.
    pub fn sandbox_exited(&mut self, id: &str, exit_code: i32) {
        self.settle();
        if let Some(pod_uid) = self.sandboxes.get(id).map(|sandbox| sandbox.pod_uid.clone()) {
            self.pod_exited(&pod_uid, exit_code);
        }
    }

    /// SUNK submitted the sandbox Pod's placeholder job.
    pub(crate) fn sandbox_job_submitted(&mut self, id: &str, job: JobId) {
        if let Some(sandbox) = self.sandboxes.get_mut(id) {
            sandbox.job_id = Some(job);
        }
    }

    pub(crate) fn sandbox_delete_requested(&mut self, id: &str) {
        // A Pod already going (its sandbox deleted, or expired) is deleted again: nothing changes.
        if self.sandboxes.get(id).is_some_and(|sandbox| sandbox.life == Life::Live) {
            legal(self.sandbox_step(id, SandboxTransition::PodDeleted, Life::TearingDown(TeardownCause::PodDeleted)));
        }
    }

    pub(crate) fn sandbox_lifetime_over(&mut self, id: &str) {
        let Some(sandbox) = self.sandboxes.get_mut(id) else { return };
        if sandbox.life != Life::Live {
            return;
        }
        let lifetime = sandbox.resolved.max_lifetime_seconds;
        let pod_uid = sandbox.pod_uid.clone();
        legal(self.sandbox_step(
            id,
            SandboxTransition::Expire,
            Life::TearingDown(TeardownCause::LifetimeExpired(lifetime)),
        ));
        if self.cluster.pod(&pod_uid).is_some() {
            self.begin_pod_deletion(&pod_uid, None);
        } else {
            self.sandbox_pod_gone(id, None);
        }
    }

    /// The Pod turned terminal by itself (exit, or kubelet rejection).
    pub(crate) fn sandbox_pod_changed(&mut self, id: &str) {
        let Some(sandbox) = self.sandboxes.get(id) else { return };
        if !matches!(sandbox.life, Life::Live) {
            return;
        }
        let Some(pod) = self.cluster.pod(&sandbox.pod_uid) else { return };
        let (exit_code, container_reason) = pod
            .containers
            .iter()
            .find_map(|container| match &container.state {
                ContainerState::Terminated { exit_code, reason, .. } => Some((Some(*exit_code), reason.as_str())),
                _ => None,
            })
            .unwrap_or((None, ""));
        let (state, reason) = match (pod.phase, &pod.reason, exit_code) {
            (PodPhase::Failed, Some(reason), _) => {
                // The kubelet's messages end with a space (they are joined): not the sandbox's reason's.
                (SandboxState::Failed, format!("{reason}: {}", pod.message.as_deref().unwrap_or_default().trim_end()))
            }
            (_, _, Some(code)) if container_reason == "OOMKilled" => (
                SandboxState::Failed,
                format!("OOMKilled: the main process ran out of memory and was killed (exit code {code})"),
            ),
            (_, _, Some(0)) => (SandboxState::Completed, "main process exited with code 0".to_owned()),
            (_, _, Some(code)) => (SandboxState::Failed, format!("main process exited with code {code}")),
            _ => return,
        };
        let now = self.now();
        let retention = Duration::from_secs(u64::from(self.sandbox_values().retention_seconds));
        legal(self.sandbox_step(id, SandboxTransition::Finish, Life::Ended { state, reason, exit_code, at: now }));
        let Some(id) = self.sandboxes.get(id).map(|sandbox| sandbox.info.id.clone()) else { return };
        self.timers.schedule(now + retention, crate::world::Timer::SandboxForget(id));
    }

    /// The Pod object is gone: the sandbox ends.
    pub(crate) fn sandbox_pod_gone(&mut self, id: &str, pod_exit_code: Option<i32>) {
        let job_note = self.sandboxes.get(id).and_then(|sandbox| {
            let job = sandbox.job_id?;
            let record = self.slurm.job_or_record(job)?;
            Some((job, record.state, record.cancelled_by))
        });
        let now = self.now();
        let retention = Duration::from_secs(u64::from(self.sandbox_values().retention_seconds));
        let Some(sandbox) = self.sandboxes.get(id) else { return };
        let (state, reason) = match &sandbox.life {
            Life::Ended { .. } => return,
            Life::TearingDown(TeardownCause::OwnerDeleted) => {
                (SandboxState::Completed, "deleted by its owner".to_owned())
            }
            Life::TearingDown(TeardownCause::OwnerStopped(grace)) => {
                (SandboxState::Completed, format!("stopped by its owner (grace period {grace}s)"))
            }
            Life::TearingDown(TeardownCause::PodDeleted) => {
                (SandboxState::Terminated, "its Pod was deleted".to_owned())
            }
            Life::TearingDown(TeardownCause::LifetimeExpired(seconds)) => {
                (SandboxState::Terminated, format!("maximum lifetime of {seconds}s reached"))
            }
            Life::Live => match job_note {
                Some((job, JobBaseState::Cancelled, by)) => (
                    SandboxState::Terminated,
                    format!("Slurm job {job} was cancelled{}", by.map(|uid| format!(" by {uid}")).unwrap_or_default()),
                ),
                Some((job, JobBaseState::Preempted | JobBaseState::Requeued, _)) => {
                    (SandboxState::Terminated, format!("Slurm job {job} was preempted"))
                }
                Some((job, JobBaseState::Timeout, _)) => {
                    (SandboxState::Terminated, format!("Slurm job {job} reached its time limit"))
                }
                _ => (SandboxState::Terminated, "its Pod was removed".to_owned()),
            },
        };
        let id = sandbox.info.id.clone();
        let exit_code = pod_exit_code.filter(|_| self.sandbox_values().exit_code_after_stop);
        legal(self.sandbox_step(&id, SandboxTransition::End, Life::Ended { state, reason, exit_code, at: now }));
        self.timers.schedule(now + retention, crate::world::Timer::SandboxForget(id));
    }

    /// Ends a sandbox at once (its Pod removed without grace) and forgets it, for an
    /// organization's reset. Says whether its Pod was running.
    pub(crate) fn sandbox_reset(&mut self, id: &str) -> bool {
        let Some(pod_uid) = self.sandboxes.get(id).map(|sandbox| sandbox.pod_uid.clone()) else { return false };
        let running = self.cluster.pod(&pod_uid).is_some_and(|pod| pod.phase == PodPhase::Running);
        self.sandbox_delete_requested(id);
        self.remove_pod(&pod_uid);
        // The Pod's end is this sandbox's end before it is forgotten.
        self.hand_over_sandbox_outcomes();
        let now = self.now();
        if self.sandboxes.get(id).is_some_and(|sandbox| sandbox.life.phase() != LifePhase::Ended) {
            // Its Pod was already gone without ending it (no path does that today): end it here,
            // or it could never be forgotten.
            let reason = "its organization was reset".to_owned();
            let ended = Life::Ended { state: SandboxState::Terminated, reason, exit_code: None, at: now };
            legal(self.sandbox_step(id, SandboxTransition::End, ended));
        }
        self.sandbox_forget(id);
        running
    }

    pub(crate) fn sandbox_forget(&mut self, id: &str) {
        let Some(sandbox) = self.sandboxes.get(id) else { return };
        // Only an ended sandbox is forgotten (an organization's reset ends it first).
        if !SandboxTransition::Forget.allowed_from().contains(&sandbox.life.phase()) {
            return;
        }
        let pod_uid = sandbox.pod_uid.clone();
        // Its placeholder job stays in accounting; the organization still sees it as its own.
        if let Some(job) = sandbox.job_id {
            let org = crate::world::shared_org_name(&mut self.org_names, &sandbox.owner.org);
            self.job_orgs.insert(job, org);
        }
        // Its lifetime timer would find nothing: drop it now rather than at its distant time.
        if let Some(key) = sandbox.lifetime_timer {
            self.timers.cancel(key);
        }
        self.sandboxes.remove(id);
        if self.cluster.pod(&pod_uid).is_some() {
            self.remove_pod(&pod_uid);
        }
        self.count_sandbox(SandboxTransition::Forget);
    }

    /// A sandbox's state and reason as the API shows them (for the world's journal of changes);
    /// `None` once it is forgotten.
    pub(crate) fn sandbox_state_now(&self, id: &str) -> Option<(SandboxState, String)> {
        let view = self.view(self.sandboxes.get(id)?);
        Some((view.state, view.state_reason))
    }

    fn view(&self, sandbox: &Sandbox) -> SandboxView {
        let pod = self.cluster.pod(&sandbox.pod_uid);
        let job_id = sandbox.job_id;
        // A Pod still pulling its image has a start time, but the sandbox has not started.
        let started =
            pod.filter(|pod| pod.shown_phase() != PodPhase::Pending).and_then(|pod| pod.start_time).or(sandbox.started);
        let (state, state_reason, exit_code, ended) = match &sandbox.life {
            Life::Ended { state, reason, exit_code, at } => (*state, reason.clone(), *exit_code, Some(*at)),
            Life::TearingDown(_) => (SandboxState::Terminating, String::new(), None, None),
            Life::Live => match pod {
                Some(pod) if pod.phase == PodPhase::Running && pod.host_started => {
                    (SandboxState::Running, String::new(), None, None)
                }
                // Placed and admitted; the host is starting its containers.
                Some(pod) if pod.phase == PodPhase::Running => {
                    (SandboxState::Creating, CONTAINER_CREATING.to_owned(), None, None)
                }
                Some(pod) => {
                    let (state, reason) = self.pending_reason(pod, job_id);
                    (state, reason, None, None)
                }
                None => (SandboxState::Creating, String::new(), None, None),
            },
        };
        SandboxView {
            info: Arc::clone(&sandbox.info),
            state,
            state_reason,
            exit_code,
            started,
            ended,
            job_id,
            node_name: pod.and_then(|pod| pod.node_name.clone()),
            // A stopped sandbox's ports are no longer served.
            published: if state.is_terminal() { Vec::new() } else { sandbox.published.clone() },
            endpoint_share_token: sandbox.endpoint_share_token.clone(),
            ended_containers: sandbox.ended_containers.clone(),
        }
    }

    /// A container of a live sandbox other than its main one ended with `exit_code`.
    pub(crate) fn sandbox_container_ended(&mut self, id: &str, container: &str, exit_code: i32) {
        if let Some(sandbox) = self.sandboxes.get_mut(id)
            && matches!(sandbox.life, Life::Live)
        {
            sandbox.ended_containers.push((container.to_owned(), exit_code));
        }
    }

    /// The host serves a sandbox's services at these addresses: (port in the sandbox, host
    /// `address:port`), shown in its status while it has not ended; its share-token endpoints
    /// ask for `share_token`.
    pub fn publish_services(&mut self, id: &str, published: Vec<(i32, String)>, share_token: Option<Arc<str>>) {
        if let Some(sandbox) = self.sandboxes.get_mut(id) {
            sandbox.published = published;
            sandbox.endpoint_share_token = share_token;
        }
    }

    /// What keeps a Pending sandbox Pod from running, in words a user can act on.
    fn pending_reason(&self, pod: &Pod, job_id: Option<JobId>) -> (SandboxState, String) {
        let waiting = pod.containers.iter().find_map(|container| match &container.state {
            ContainerState::Waiting(reason) if reason != "ContainerCreating" => Some(reason.as_str()),
            _ => None,
        });
        if let Some(reason) = waiting {
            let image = self
                .unpullable_image(&pod.uid)
                .map(|(image, fault)| format!(" (image {image:?}, injected by {fault})"));
            return (
                SandboxState::Pending,
                format!("{reason}: the image cannot be pulled{}", image.unwrap_or_default()),
            );
        }
        if let Some((false, _, message)) = &pod.scheduled_condition {
            return (SandboxState::Pending, message.clone());
        }
        if let Some(job) = job_id.and_then(|job| self.slurm.job(job)) {
            let reason = match job.state {
                JobBaseState::Pending => {
                    format!("waiting for Slurm job {} in partition {} (reason: {})", job.id, job.partition, job.reason)
                }
                _ => format!(
                    "Slurm job {} allocated on {}; waiting for the prolog to lock the node",
                    job.id,
                    job.node.as_deref().unwrap_or_default()
                ),
            };
            return (SandboxState::Pending, reason);
        }
        if pod.scheduler_name == "default-scheduler" {
            return (SandboxState::Creating, String::new());
        }
        let values = self.values();
        let reason = match sunk::handles(values, pod) {
            Err(NotHandled::OutOfScope) => format!(
                "no scheduler places this Pod: scheduler {:?} does not watch namespace {:?} (scheduler.scope)",
                pod.scheduler_name, pod.namespace
            ),
            Err(NotHandled::Disabled) => {
                format!("no scheduler places this Pod: scheduler {:?} is not enabled", pod.scheduler_name)
            }
            Err(NotHandled::OtherScheduler) => {
                format!("waiting for scheduler {:?}, which is not running", pod.scheduler_name)
            }
            Ok(()) => return (SandboxState::Creating, String::new()),
        };
        (SandboxState::Pending, reason)
    }
}

/// The Pod's `spec` keys besides the modelled ones: the policy's, and the RuntimeClass the
/// sandbox resolved to (`runtimeClassName`, which the policy's `base` may not set).
fn pod_extra_spec(resolved: &ResolvedSpec) -> BTreeMap<String, serde_json::Value> {
    let mut extra = resolved.extra_pod_spec.clone();
    if let Some(class) = &resolved.runtime_class {
        extra.insert("runtimeClassName".to_owned(), serde_json::Value::String(class.clone()));
    }
    extra
}
