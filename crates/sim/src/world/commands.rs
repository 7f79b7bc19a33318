//! Commands from outside on Slurm and Pods (scancel, sbatch, kubectl delete, scontrol resume,
//! an organization's reset).

use cwsandbox_api::emulator_v1;

use crate::error::{Reason, SimError, SimResult};
use crate::ids::SharedStr;
use crate::k8s::{Pod, PodOwner};
use crate::query::Scope;
use crate::slurm::{JobBaseState, JobId, JobKind, JobRequest, Sharing, SubmitError};

use crate::machine::legal;
use crate::world::{SandboxOutcome, World, shared_org_name};

impl World {
    /// `scancel` by `by_uid`, of a job inside `scope` (others are NOT_FOUND like unknown ids).
    pub fn scancel(&mut self, scope: &Scope, job: JobId, by_uid: u32) -> SimResult<()> {
        self.settle();
        let not_found = || SimError::NotFound {
            reason: Reason::JobNotFound,
            message: format!("scancel: error: Kill job error on job id {job}: Invalid job id specified"),
        };
        if !self.job_in_scope(scope, job) {
            return Err(not_found());
        }
        let Some(queued) = self.slurm.job(job).cloned() else {
            if self.slurm.job_or_record(job).is_some() {
                return Err(SimError::FailedPrecondition {
                    reason: Reason::PreconditionFailed,
                    message: format!(
                        "scancel: error: Kill job error on job id {job}: Job/step already completing or completed"
                    ),
                });
            }
            return Err(not_found());
        };
        if queued.completing || queued.state.is_finished() {
            // Slurm refuses a second cancel; the placeholder keeps waiting for its Pod.
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: format!(
                    "scancel: error: Kill job error on job id {job}: Job/step already completing or completed"
                ),
            });
        }
        let was_running = legal(self.slurm.cancel(job, by_uid, self.now)).unwrap_or(false);
        if was_running {
            self.on_job_ended(job);
        } else if let JobKind::Placeholder { pod_uid } = &queued.kind {
            self.pod_of_placeholder.remove(&job);
            self.placeholder_of_pod.remove(pod_uid);
            if queued.state == JobBaseState::Pending && self.values.scheduler.delete_pod_when_pending_job_cancelled {
                self.begin_pod_deletion(pod_uid, None);
            } else {
                // Never placed and never retried.
                self.sunk_rejected.insert(pod_uid.clone());
            }
        }
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    /// Submits an ordinary Slurm batch job (not a Pod) for `scope`: an organization's job is its
    /// own, the cluster scope's the cluster's.
    pub fn submit_batch_job(&mut self, scope: &Scope, request: JobRequest) -> SimResult<JobId> {
        self.settle();
        let job = self.slurm.submit(request, self.now).map_err(|error| {
            let field = match error {
                SubmitError::InvalidPartition => "partition",
                SubmitError::InvalidUser => "user",
                SubmitError::NodeConfigUnavailable => "cpus",
            };
            SimError::invalid_field(field, format!("Batch job submission failed: {error}"))
        })?;
        if let Scope::Organization(org) = scope {
            let org = shared_org_name(&mut self.org_names, org);
            self.job_orgs.insert(job, org);
        }
        self.slurm_dirty = true;
        self.settle();
        Ok(job)
    }

    /// SubmitBatchJob of the emulator's API, with the defaults `sbatch` fills in: the name
    /// `batch`, at least one CPU, priority 100, and the caller's own uid unless `user` names
    /// another Slurm user, by name or by uid.
    pub fn submit_batch(
        &mut self,
        scope: &Scope,
        caller_uid: u32,
        request: &emulator_v1::SubmitBatchJobRequest,
    ) -> SimResult<JobId> {
        let sharing = requested_sharing(request.over_subscribe)?;
        let uid = match request.user.trim() {
            "" => caller_uid,
            user => user
                .parse::<u32>()
                .ok()
                .or_else(|| self.slurm.users.values().find(|known| &*known.name == user).map(|known| known.uid))
                .ok_or_else(|| SimError::invalid_field("user", format!("Invalid user id: {user}")))?,
        };
        let exit_code = match (request.exit_code, request.run_seconds) {
            (None | Some(0), _) => 0,
            (Some(code), Some(_)) => u8::try_from(code).ok().filter(|code| *code > 0).ok_or_else(|| {
                SimError::invalid_field("exit_code", format!("{code} is not an exit status (0 to 255)"))
            })?,
            (Some(_), None) => {
                return Err(SimError::invalid_field(
                    "exit_code",
                    "a job without run_seconds never ends by itself, so it never exits with a status: set run_seconds",
                ));
            }
        };
        let text = |value: &str| (!value.is_empty()).then(|| value.to_owned());
        let job = JobRequest {
            name: if request.name.is_empty() { "batch".to_owned() } else { request.name.clone() },
            uid,
            gid: request.gid,
            account: text(&request.account),
            partition: text(&request.partition),
            qos: text(&request.qos),
            comment: text(&request.comment),
            reservation: text(&request.reservation),
            cpus: request.cpus.max(1),
            mem_mb: request.mem_mb,
            gpus: request.gpus,
            gres_type: text(&request.gres_type),
            gres_type_required: !request.gres_type.is_empty(),
            sharing,
            time_limit_seconds: request.time_limit_seconds,
            priority: if request.priority == 0 { 100 } else { request.priority },
            kind: JobKind::Batch { run_seconds: request.run_seconds, exit_code, command: text(&request.command) },
            prolog: false,
        };
        self.submit_batch_job(scope, job)
    }

    /// Deletes a Pod inside `scope` by namespace and name (`kubectl delete pod`).
    pub fn delete_pod(
        &mut self,
        scope: &Scope,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
    ) -> SimResult<()> {
        self.delete_pod_with(scope, namespace, name, &PodDeletion { grace_seconds, ..Default::default() }).map(|_| ())
    }

    /// Deletes a Pod as a Kubernetes DELETE asks: with its grace period, only if the
    /// preconditions hold, or not at all (dry run). Checked and applied at one instant, so the
    /// Pod the preconditions saw is the Pod deleted; returns it as it was and as it is now.
    pub fn delete_pod_with(
        &mut self,
        scope: &Scope,
        namespace: &str,
        name: &str,
        deletion: &PodDeletion,
    ) -> SimResult<DeletedPod> {
        if deletion.grace_seconds.is_some_and(|grace| grace < 0) {
            return Err(SimError::invalid_field("grace_period_seconds", "must not be negative"));
        }
        self.settle();
        let before = self.scoped_pod_by_name(scope, namespace, name).cloned().ok_or_else(|| SimError::NotFound {
            reason: Reason::PodNotFound,
            message: format!("pods \"{name}\" not found"),
        })?;
        let precondition_failed = |what: &str, expected: &str, actual: &str| SimError::FailedPrecondition {
            reason: Reason::PreconditionFailed,
            message: format!(
                "Precondition failed: {what} in precondition: {expected}, {what} in object meta: {actual}"
            ),
        };
        if let Some(uid) = deletion.uid.as_deref().filter(|uid| *uid != before.uid.as_str()) {
            return Err(precondition_failed("UID", uid, &before.uid));
        }
        let version = before.resource_version.to_string();
        if let Some(expected) = deletion.resource_version.as_deref().filter(|expected| *expected != version) {
            return Err(precondition_failed("ResourceVersion", expected, &version));
        }
        if deletion.dry_run {
            let after = Some(before.clone());
            return Ok(DeletedPod { before, after });
        }
        let uid = before.uid.clone();
        if let PodOwner::Sandbox(id) = &before.owner {
            self.sandbox_outcomes.push_back(SandboxOutcome::PodDeleteRequested(id.clone()));
        }
        self.begin_pod_deletion(&uid, deletion.grace_seconds.map(|grace| grace.unsigned_abs()));
        self.settle();
        let after = self.cluster.pod(&uid).cloned();
        Ok(DeletedPod { before, after })
    }

    /// Resets one organization's part of the cluster, leaving every other organization's and the
    /// cluster's own as they are: each of its sandboxes ends at once (its Pod removed without a
    /// grace period, its processes killed) and is forgotten; its batch jobs still queued are
    /// cancelled; and none of its jobs is its own any more (they stay in the cluster's accounting,
    /// as cancelled jobs stay in `sacct`; nodes held by them free after the epilog, as in Slurm);
    /// its sandbox templates are forgotten, and its secret stores go back to the values' seeds. Runners and policies are
    /// kept. Returns how many running Pods were stopped.
    pub fn reset_organization(&mut self, org: &str) -> usize {
        self.settle();
        let sandboxes: Vec<SharedStr> = self.sandboxes.of_organization(org).map(|sandbox| sandbox.id.clone()).collect();
        let mut stopped = 0;
        for id in &sandboxes {
            stopped += usize::from(self.sandbox_reset(id));
        }
        let batch_jobs: Vec<JobId> = self
            .job_orgs
            .iter()
            .filter(|(job, owner)| owner.as_str() == org && self.slurm.job(**job).is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in batch_jobs {
            // A job already completing cannot be cancelled again; it ends by itself.
            let _ = self.scancel(&Scope::Cluster, job, 0);
        }
        self.job_orgs.retain(|_, owner| owner.as_str() != org);
        self.templates.forget_organization(org);
        self.secret_stores.forget_organization(org);
        self.settle();
        stopped
    }

    /// Resumes a drained Slurm node (`scontrol update nodename=… state=resume`).
    pub fn resume_node(&mut self, name: &str) -> SimResult<()> {
        if self.slurm.node(name).is_none() {
            return Err(SimError::NotFound {
                reason: Reason::NodeNotFound,
                message: format!("scontrol: error: Invalid node name specified: {name}"),
            });
        }
        self.slurm.resume(name);
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    /// Drains a Slurm node by hand (`scontrol update nodename=… state=drain reason=…`) as `uid`
    /// (who ran scontrol): it takes no new job; those running finish. Slurm refuses a drain
    /// without a reason.
    pub fn drain_node_by_operator(&mut self, name: &str, reason: &str, uid: u32) -> SimResult<()> {
        if self.slurm.node(name).is_none() {
            return Err(SimError::NotFound {
                reason: Reason::NodeNotFound,
                message: format!("scontrol: error: Invalid node name specified: {name}"),
            });
        }
        if reason.trim().is_empty() {
            return Err(SimError::invalid_field(
                "reason",
                "You must specify a reason when DOWNING or DRAINING a node. Request denied",
            ));
        }
        self.drain_node(name, reason, uid);
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }

    /// The placeholder job of a Pod, if it has one.
    pub fn placeholder_job(&self, pod_uid: &str) -> Option<JobId> {
        // Once released, the placeholder is only on record: search the jobs without copying them.
        self.placeholder_of_pod.get(pod_uid).copied().or_else(|| {
            self.slurm
                .jobs()
                .filter(|job| matches!(&job.kind, JobKind::Placeholder { pod_uid: owner } if owner == pod_uid))
                .map(|job| job.id)
                .max()
        })
    }
}

/// A requested `OverSubscribe` (the emulator API's enum) as Slurm's sharing.
pub fn requested_sharing(over_subscribe: i32) -> SimResult<Sharing> {
    match emulator_v1::OverSubscribe::try_from(over_subscribe) {
        Ok(emulator_v1::OverSubscribe::Unspecified | emulator_v1::OverSubscribe::Ok) => Ok(Sharing::Default),
        Ok(emulator_v1::OverSubscribe::No) => Ok(Sharing::Exclusive),
        Ok(emulator_v1::OverSubscribe::Yes) => Ok(Sharing::Ok),
        Ok(emulator_v1::OverSubscribe::User) => Ok(Sharing::User),
        Err(_) => {
            Err(SimError::invalid_field("over_subscribe", format!("{over_subscribe} is not an OverSubscribe value")))
        }
    }
}

/// What a Pod delete asks beyond the Pod's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDeletion {
    /// Grace period; `None` is the Pod's own. Negative is refused.
    pub grace_seconds: Option<i64>,
    /// `preconditions.uid`: delete only the Pod with this uid.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only at this version.
    pub resource_version: Option<String>,
    /// Check everything, change nothing.
    pub dry_run: bool,
}

/// A Pod delete's result.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletedPod {
    /// The Pod as the delete found it.
    pub before: Pod,
    /// The Pod now: still Terminating, or `None` once removed.
    pub after: Option<Pod>,
}
