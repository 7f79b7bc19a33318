//! The runner's state machines: install phase, rollout and existence, their named transitions,
//! and `RunnerRecord::transition`, the only writer of a runner's status fields.

use super::*;
use crate::machine::transitions;

transitions! {
    machine "runner";
    /// One named step of a runner's state machines. Every change of install, connection, rollout or
    /// existence state goes through exactly one of these, so tests can count them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum RunnerTransition {
        /// PENDING → PROVISIONING: the installer picked the runner up.
        BeginInstall,
        /// PROVISIONING → READY: installed, CONNECTED, first heartbeat.
        CompleteInstall,
        /// PENDING | PROVISIONING → FAILED, with `install_error` (an injected fault).
        FailInstall,
        /// READY → READY: the runner reported to the gateway (`last_heartbeat_time` moves).
        Heartbeat,
        /// No rollout → rollout: ApplyAvailableUpdate accepted (`target_revision` + 1).
        StartRollout,
        /// Rollout → no rollout: `active_revision` reaches `target_revision`.
        CompleteRollout,
        /// Anything but DELETING → DELETING.
        BeginDelete,
        /// DELETING → gone: the runner is removed and Get answers NOT_FOUND.
        FinishDelete,
    }
}

impl fmt::Display for RunnerTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a runner's installation stands. The `since` times are when the phase became due, not
/// when `advance` noticed, so results do not depend on how often the driver ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InstallPhase {
    Pending { since: SimTime },
    Provisioning { since: SimTime },
    Ready,
    Failed,
    Deleting { since: SimTime },
    // Terminal: the registry drops the record right after the transition that leads here.
    Gone,
}

impl InstallPhase {
    pub(super) fn name(self) -> &'static str {
        match self {
            InstallPhase::Pending { .. } => "PENDING",
            InstallPhase::Provisioning { .. } => "PROVISIONING",
            InstallPhase::Ready => "READY",
            InstallPhase::Failed => "FAILED",
            InstallPhase::Deleting { .. } => "DELETING",
            InstallPhase::Gone => "gone",
        }
    }
}

/// Whether a version rollout runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rollout {
    Idle,
    Running { since: SimTime },
}

/// A fault armed by [`RunnerRegistry::fail_install`], fired by the next `advance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InstallFault {
    pub(super) reason: RunnerInstallErrorReason,
    pub(super) message: String,
}

/// One runner and the state behind its output-only fields.
#[derive(Debug, Clone)]
pub(super) struct RunnerRecord {
    /// The resource as clients read it. Status fields mirror `phase`/`rollout` and are written
    /// only by [`RunnerRecord::transition`].
    pub(super) runner: ManagedRunner,
    pub(super) phase: InstallPhase,
    pub(super) rollout: Rollout,
    /// Distinguishes a runner from an earlier one with the same id, so an etag read before a
    /// delete-and-recreate can never match the new runner.
    pub(super) incarnation: u64,
    /// Policy revision: 1 at creation, +1 per policy change. The etag encodes it.
    pub(super) policy_revision: u64,
    /// Registered volumes referencing the runner; deletion is refused while > 0.
    pub(super) volume_refs: u32,
    pub(super) fault: Option<InstallFault>,
}

impl RunnerRecord {
    /// Applies one transition if the current state allows it; otherwise changes nothing.
    pub(super) fn transition(
        &mut self,
        transition: RunnerTransition,
        now: SimTime,
    ) -> Result<(), IllegalTransition<RunnerTransition>> {
        let illegal = IllegalTransition { transition, state: self.phase.name() };
        match (transition, self.phase) {
            (RunnerTransition::BeginInstall, InstallPhase::Pending { since }) => {
                // The installer starts at once; the install delay is measured from creation.
                self.phase = InstallPhase::Provisioning { since };
                self.runner.install_status = RunnerInstallStatus::Provisioning as i32;
            }
            (RunnerTransition::CompleteInstall, InstallPhase::Provisioning { .. }) => {
                self.phase = InstallPhase::Ready;
                self.runner.install_status = RunnerInstallStatus::Ready as i32;
                self.runner.connection_status = RunnerConnectionStatus::Connected as i32;
                self.runner.last_heartbeat_time = Some(timestamp(now));
            }
            (RunnerTransition::FailInstall, InstallPhase::Pending { .. } | InstallPhase::Provisioning { .. }) => {
                let fault = self.fault.take().unwrap_or(InstallFault {
                    reason: RunnerInstallErrorReason::Internal,
                    message: "installation failed".to_owned(),
                });
                self.phase = InstallPhase::Failed;
                self.runner.install_status = RunnerInstallStatus::Failed as i32;
                self.runner.connection_status = RunnerConnectionStatus::Disconnected as i32;
                self.runner.install_error = Some(RunnerInstallError {
                    reason: fault.reason as i32,
                    message: fault.message,
                    diagnostic_detail: String::new(),
                    remediation_hints: remediation_hints(fault.reason),
                    occurred_at: Some(timestamp(now)),
                });
            }
            (RunnerTransition::Heartbeat, InstallPhase::Ready) => {
                self.runner.last_heartbeat_time = Some(timestamp(now));
            }
            (
                RunnerTransition::StartRollout,
                InstallPhase::Pending { .. }
                | InstallPhase::Provisioning { .. }
                | InstallPhase::Ready
                | InstallPhase::Failed,
            ) if self.rollout == Rollout::Idle && self.runner.update_available => {
                self.rollout = Rollout::Running { since: now };
                self.runner.target_revision = self.runner.target_revision.saturating_add(1);
                self.runner.rollout_in_progress = true;
                self.runner.update_available = false;
            }
            (RunnerTransition::CompleteRollout, phase)
                if phase != InstallPhase::Gone && matches!(self.rollout, Rollout::Running { .. }) =>
            {
                self.rollout = Rollout::Idle;
                self.runner.active_revision = self.runner.target_revision;
                self.runner.active_config_version = config_version(self.runner.active_revision);
                self.runner.rollout_in_progress = false;
            }
            (
                RunnerTransition::BeginDelete,
                InstallPhase::Pending { .. }
                | InstallPhase::Provisioning { .. }
                | InstallPhase::Ready
                | InstallPhase::Failed,
            ) => {
                self.phase = InstallPhase::Deleting { since: now };
                self.fault = None;
                self.runner.install_status = RunnerInstallStatus::Deleting as i32;
                self.runner.connection_status = RunnerConnectionStatus::Disconnected as i32;
            }
            (RunnerTransition::FinishDelete, InstallPhase::Deleting { .. }) => {
                self.phase = InstallPhase::Gone;
            }
            _ => return Err(illegal),
        }
        Ok(())
    }

    /// The transition `advance(now)` should run next, if any. Only transitions legal in the
    /// current state are returned.
    pub(super) fn due(&self, now: SimTime, timings: &RunnerTimings) -> Option<RunnerTransition> {
        match self.phase {
            InstallPhase::Gone => return None,
            InstallPhase::Deleting { since } => {
                // A runner being deleted does nothing else, whatever else was pending.
                return (now >= since + timings.delete_delay).then_some(RunnerTransition::FinishDelete);
            }
            InstallPhase::Pending { .. } | InstallPhase::Provisioning { .. } if self.fault.is_some() => {
                // An armed fault wins over progress: that is what the fault is for.
                return Some(RunnerTransition::FailInstall);
            }
            InstallPhase::Pending { since } if now >= since => return Some(RunnerTransition::BeginInstall),
            InstallPhase::Provisioning { since } if now >= since + timings.install_delay => {
                return Some(RunnerTransition::CompleteInstall);
            }
            InstallPhase::Pending { .. }
            | InstallPhase::Provisioning { .. }
            | InstallPhase::Ready
            | InstallPhase::Failed => {}
        }
        if let Rollout::Running { since } = self.rollout
            && now >= since + timings.rollout_delay
        {
            return Some(RunnerTransition::CompleteRollout);
        }
        let heartbeat_is_old = self.runner.last_heartbeat_time.is_none_or(|last| last < timestamp(now));
        (self.phase == InstallPhase::Ready && heartbeat_is_old).then_some(RunnerTransition::Heartbeat)
    }

    pub(super) fn is_deleting(&self) -> bool {
        matches!(self.phase, InstallPhase::Deleting { .. } | InstallPhase::Gone)
    }

    pub(super) fn etag(&self) -> String {
        etag(&self.runner_id(), self.incarnation, self.policy_revision)
    }

    pub(super) fn runner_id(&self) -> String {
        self.runner.identity.as_ref().map(|identity| identity.runner_id.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_refuse_states_that_do_not_allow_them() {
        let mut record = RunnerRecord {
            runner: ManagedRunner::default(),
            phase: InstallPhase::Ready,
            rollout: Rollout::Idle,
            incarnation: 1,
            policy_revision: 1,
            volume_refs: 0,
            fault: None,
        };
        let now = SimTime::from_secs(1);
        for transition in [
            RunnerTransition::BeginInstall,
            RunnerTransition::CompleteInstall,
            RunnerTransition::FailInstall,
            RunnerTransition::StartRollout,    // no update available
            RunnerTransition::CompleteRollout, // no rollout running
            RunnerTransition::FinishDelete,
        ] {
            assert_eq!(
                record.transition(transition, now),
                Err(IllegalTransition { transition, state: "READY" }),
                "{transition}"
            );
        }
        assert_eq!(record.transition(RunnerTransition::BeginDelete, now), Ok(()));
        assert_eq!(
            record.transition(RunnerTransition::Heartbeat, now),
            Err(IllegalTransition { transition: RunnerTransition::Heartbeat, state: "DELETING" })
        );
        assert!(record.transition(RunnerTransition::BeginDelete, now).is_err());
    }
}
