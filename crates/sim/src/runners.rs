//! TEMPORARY stub, replaced on merge of the `runners` branch.
use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::{ManagedRunner, Policy, RunnerInstallStatus};

use crate::error::{Reason, SimError, SimResult};
use crate::time::SimTime;

#[derive(Debug, Clone, Default)]
pub struct RunnerRegistry {
    runners: BTreeMap<(String, String), ManagedRunner>,
}

impl RunnerRegistry {
    pub fn create(&mut self, org: &str, mut runner: ManagedRunner, _request_id: &str, _now: SimTime) -> SimResult<ManagedRunner> {
        let id = runner.identity.as_ref().map(|i| i.runner_id.clone()).unwrap_or_default();
        runner.install_status = RunnerInstallStatus::Ready as i32;
        self.runners.insert((org.to_owned(), id), runner.clone());
        Ok(runner)
    }
    pub fn get(&self, org: &str, runner_id: &str) -> SimResult<ManagedRunner> {
        self.runners.get(&(org.to_owned(), runner_id.to_owned())).cloned().ok_or(SimError::NotFound {
            reason: Reason::RunnerNotFound,
            message: format!("runner {runner_id} not found"),
        })
    }
    pub fn policy_of(&self, org: &str, runner_id: &str) -> Option<&Policy> {
        self.runners.get(&(org.to_owned(), runner_id.to_owned())).and_then(|r| r.policy.as_ref())
    }
    pub fn iter(&self, org: &str) -> impl Iterator<Item = &ManagedRunner> {
        let org = org.to_owned();
        self.runners.iter().filter(move |((o, _), _)| *o == org).map(|(_, r)| r)
    }
    pub fn advance(&mut self, _now: SimTime) {}
}
