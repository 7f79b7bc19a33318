//! The serverless pool (`SANDBOX_MODE_SERVERLESS`): Nodes of the platform's own (values
//! `serverless:`), no runner, no runner policy, no SUNK. A serverless sandbox is admitted only when
//! the pool has room for it at once, because the real service answers a create it cannot place
//! with an error the client may spill over on (docs/facts/client-contract.md#retries), not with a
//! sandbox left PENDING. Once admitted, its Pod is an ordinary default-scheduler Pod, pinned to
//! the pool by a node selector and a toleration, and lives the same Pod and kubelet life as any
//! other.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{SERVERLESS_POOL, SERVERLESS_POOL_LABEL, SERVERLESS_TAINT_KEY};
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::k8s::ResourceTotals;
use crate::quantity::{Quantity, format_bytes};
use crate::resolved::Toleration;
use crate::world::World;
use crate::world::is_serverless_node;

/// How long a client should wait before asking the full pool again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

impl World {
    /// Refuses serverless placement when the values turn the pool off.
    pub(crate) fn serverless_enabled(&self) -> SimResult<()> {
        if self.values().serverless.enabled {
            return Ok(());
        }
        Err(SimError::FailedPrecondition {
            reason: Reason::ServerlessDisabled,
            message: "serverless placement is disabled (values: serverless.enabled is false); use placement mode CKS"
                .to_owned(),
        })
    }

    /// Whether the pool can take a sandbox of `org` requesting `need` now. More than one Node
    /// holds is refused as a ceiling (no wait helps; CKS may take it); a full pool as exhausted
    /// capacity, which a retry or CKS can get past.
    pub(crate) fn serverless_room(&self, org: &str, need: ResourceTotals) -> SimResult<()> {
        let pool = &self.values().serverless;
        let mut too_big = Vec::new();
        let node_size = self
            .serverless_nodes()
            .map(|node| node.allocatable)
            .max_by_key(|size| (size.cpu_millis, size.memory_bytes))
            .unwrap_or_default();
        if need.cpu_millis > node_size.cpu_millis {
            too_big.push(format!(
                "total cpu requests {} exceed what one serverless node holds (serverless.cpu {})",
                Quantity::from_millis(need.cpu_millis),
                pool.cpu
            ));
        }
        if need.memory_bytes > node_size.memory_bytes {
            too_big.push(format!(
                "total memory requests {} exceed what one serverless node holds (serverless.memory {})",
                format_bytes(need.memory_bytes),
                pool.memory
            ));
        }
        if need.gpus > 0 {
            too_big.push(format!("{} GPUs requested: the serverless pool has no GPUs", need.gpus));
        }
        if !too_big.is_empty() {
            let violations =
                too_big.into_iter().map(|problem| FieldViolation::new("sandbox.spec.containers", problem)).collect();
            return Err(SimError::invalid(Reason::ResourceCeilingExceeded, violations));
        }
        let limit = pool.max_sandboxes_per_organization;
        if limit > 0 {
            let held = self.serverless_sandboxes_holding_capacity(org);
            if held >= limit as usize {
                return Err(SimError::ResourceExhausted {
                    reason: Reason::RunnerCapacityExhausted,
                    message: format!(
                        "organization {org:?} holds {held} serverless sandboxes, the most it may \
                         (serverless.maxSandboxesPerOrganization)"
                    ),
                    retry_after: Some(RETRY_AFTER),
                });
            }
        }
        if !self.serverless_nodes().any(|node| node.ready && node.free().holds(need)) {
            return Err(SimError::ResourceExhausted {
                reason: Reason::RunnerCapacityExhausted,
                message: format!(
                    "no serverless node has {} cpu and {} memory free",
                    Quantity::from_millis(need.cpu_millis),
                    format_bytes(need.memory_bytes)
                ),
                retry_after: Some(RETRY_AFTER),
            });
        }
        Ok(())
    }

    fn serverless_nodes(&self) -> impl Iterator<Item = &crate::k8s::Node> {
        self.cluster.nodes.values().filter(|node| is_serverless_node(node))
    }
}

/// The node selector that keeps a serverless Pod on the pool.
pub(crate) fn serverless_node_selector() -> BTreeMap<String, String> {
    BTreeMap::from([(SERVERLESS_POOL_LABEL.to_owned(), SERVERLESS_POOL.to_owned())])
}

/// The toleration of the pool's taint.
pub(crate) fn serverless_toleration() -> Toleration {
    Toleration {
        key: SERVERLESS_TAINT_KEY.to_owned(),
        operator: "Equal".to_owned(),
        value: "true".to_owned(),
        effect: "NoSchedule".to_owned(),
    }
}
