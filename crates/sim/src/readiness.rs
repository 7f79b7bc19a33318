//! The guide's step 1 as a checklist: what must hold before sandbox Pods can go through the SUNK
//! Pod Scheduler, read off the world as it is now, each failed item with the fix the guide gives.
//!
//! The checks are the same rules the world enforces elsewhere ([`crate::sunk::handles`], the
//! grace rule of [`crate::sunk::SunkRejection::GraceNotBelowKillWait`], the kubelet's resource
//! admission); this module only asks them ahead of time, so a red item here is a Pod that would
//! fail there.

use crate::config::ScopeType;
use crate::k8s::{PodOwner, PodPhase};
use crate::policy::quantity::{Quantity, format_bytes};
use crate::query::{ObjectQuery, Scope};
use crate::sunk::watches_namespace;
use crate::world::World;

/// Which check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// The SUNK Pod Scheduler runs, under the name Pods must put in `spec.schedulerName`.
    SchedulerRunning,
    /// A runner's policy routes its sandboxes to that scheduler (`base.spec.schedulerName`).
    PolicyRoutesToScheduler,
    /// Every sandbox Pod's grace period is below KillWait minus the termination offset.
    GraceBelowKillWait,
    /// The scheduler's scope covers the namespaces sandbox Pods are made in.
    ScopeCoversSandboxes,
    /// Each NodeSet's Nodes have room for a sandbox Pod beside slurmd's requests.
    RoomBesideSlurmd,
}

impl CheckKind {
    /// A stable name (the dashboard's element ids and the tests use it).
    pub fn key(self) -> &'static str {
        match self {
            CheckKind::SchedulerRunning => "scheduler",
            CheckKind::PolicyRoutesToScheduler => "policy",
            CheckKind::GraceBelowKillWait => "grace",
            CheckKind::ScopeCoversSandboxes => "scope",
            CheckKind::RoomBesideSlurmd => "room",
        }
    }
}

/// One item of the checklist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Which rule.
    pub kind: CheckKind,
    /// What it checks, for this world (`runner cks-runner routes to slurm-scheduler`).
    pub title: String,
    /// Whether it holds.
    pub ok: bool,
    /// The numbers behind the verdict.
    pub detail: String,
    /// What to change when it does not hold (empty when it does).
    pub fix: String,
}

/// The checklist for the part of the world `scope` sees: its runners' policies and its sandbox
/// Pods; the cluster-wide settings (scheduler, KillWait, NodeSets) for every scope.
pub fn sunk_readiness(world: &World, scope: &Scope) -> Vec<Check> {
    let values = world.values();
    let scheduler = &values.scheduler;
    let mut checks = Vec::new();

    let scheduler_pod = world
        .cluster
        .pods_iter()
        .find(|pod| matches!(pod.owner, PodOwner::Scheduler) && pod.phase == PodPhase::Running);
    let running = scheduler.enabled && scheduler_pod.is_some();
    checks.push(Check {
        kind: CheckKind::SchedulerRunning,
        title: format!("SUNK Pod Scheduler {:?} is running", scheduler.name),
        ok: running,
        detail: match (scheduler.enabled, scheduler_pod) {
            (false, _) => "scheduler.enabled is false".to_owned(),
            (true, None) => "no scheduler Pod is Running".to_owned(),
            (true, Some(pod)) => format!("Pod {}/{} is Running", pod.namespace, pod.name),
        },
        fix: if running {
            String::new()
        } else {
            "Set scheduler.enabled: true in the Slurm chart's values and upgrade the release.".to_owned()
        },
    });

    let mut runners = 0;
    for org in world.runners.organizations().filter(|org| scope.sees(Some(org))) {
        for runner in world.runners.iter(org) {
            runners += 1;
            let id = runner.identity.as_ref().map(|identity| identity.runner_id.as_str()).unwrap_or_default();
            let routed = runner
                .policy
                .as_ref()
                .and_then(|policy| policy.base.as_ref())
                .and_then(|base| serde_json::to_value(base).ok())
                .and_then(|base| base.pointer("/spec/schedulerName").and_then(|name| name.as_str().map(str::to_owned)));
            let ok = routed.as_deref() == Some(scheduler.name.as_str());
            checks.push(Check {
                kind: CheckKind::PolicyRoutesToScheduler,
                title: format!("Runner {id:?} ({org}) routes sandboxes to {:?}", scheduler.name),
                ok,
                detail: match &routed {
                    None => "its policy sets no base.spec.schedulerName: Pods go to default-scheduler".to_owned(),
                    Some(name) => format!("its policy sets base.spec.schedulerName: {name}"),
                },
                fix: if ok {
                    String::new()
                } else {
                    format!(
                        "Set base.spec.schedulerName: {} in the runner's policy (cwsbx sandbox runner policy edit {id}).",
                        scheduler.name
                    )
                },
            });
        }
    }
    if runners == 0 {
        checks.push(Check {
            kind: CheckKind::PolicyRoutesToScheduler,
            title: format!("A runner routes sandboxes to {:?}", scheduler.name),
            ok: false,
            detail: "no runner is visible".to_owned(),
            fix: "Create a managed runner whose policy sets base.spec.schedulerName.".to_owned(),
        });
    }

    let kill_wait = i64::from(values.slurm_config.kill_wait);
    let offset = i64::from(scheduler.termination_offset_seconds);
    let limit = kill_wait - offset;
    let default_grace = i64::from(values.sandboxes.pod_termination_grace_period_seconds);
    let sandbox_pods: Vec<_> = world
        .query_pods(&ObjectQuery { scope: scope.clone(), ..ObjectQuery::default() })
        .into_iter()
        .filter(|pod| matches!(pod.owner, PodOwner::Sandbox(_)))
        .collect();
    let mut too_long: Vec<String> = sandbox_pods
        .iter()
        .filter(|pod| pod.termination_grace_period_seconds >= limit)
        .map(|pod| format!("{}/{} ({} s)", pod.namespace, pod.name, pod.termination_grace_period_seconds))
        .collect();
    let longest = sandbox_pods.iter().map(|pod| pod.termination_grace_period_seconds).max().unwrap_or(0);
    let grace_ok = default_grace < limit && too_long.is_empty();
    let mut detail = format!(
        "a sandbox Pod's terminationGracePeriodSeconds is {default_grace} s; KillWait {kill_wait} s − {offset} s = {limit} s"
    );
    if !too_long.is_empty() {
        too_long.truncate(5);
        detail.push_str(&format!("; at or above it: {}", too_long.join(", ")));
    }
    checks.push(Check {
        kind: CheckKind::GraceBelowKillWait,
        title: format!("Grace period < KillWait − {offset} s"),
        ok: grace_ok,
        detail,
        fix: if grace_ok {
            String::new()
        } else {
            let grace = default_grace.max(longest);
            format!(
                "Raise slurmConfig.KillWait above {} s (the guide uses 60), or give sandbox Pods a grace below {limit} s.",
                grace + offset
            )
        },
    });

    let mut namespaces: Vec<String> = sandbox_pods.iter().map(|pod| pod.namespace.to_string()).collect();
    namespaces.sort();
    namespaces.dedup();
    let outside: Vec<&String> = namespaces.iter().filter(|namespace| !watches_namespace(values, namespace)).collect();
    let scope_ok = match scheduler.scope.scope_type {
        ScopeType::Cluster => true,
        // Sandbox namespaces are made per user as sandboxes come; only a cluster scope is sure
        // to cover the next one.
        ScopeType::Namespace => false,
    };
    let watched_text = match scheduler.scope.scope_type {
        ScopeType::Cluster => "every namespace (scope: cluster)".to_owned(),
        ScopeType::Namespace if scheduler.scope.namespaces.is_empty() => {
            format!("only its release namespace {} (scope: namespace)", values.sunk.namespace)
        }
        ScopeType::Namespace => format!("only {} (scope: namespace)", scheduler.scope.namespaces.join(", ")),
    };
    let mut detail = format!(
        "the scheduler watches {watched_text}; sandbox Pods are made in {}<user> namespaces",
        values.sandboxes.namespace_prefix
    );
    if !outside.is_empty() {
        let names: Vec<&str> = outside.iter().map(|name| name.as_str()).collect();
        detail.push_str(&format!("; outside it now: {}", names.join(", ")));
    }
    checks.push(Check {
        kind: CheckKind::ScopeCoversSandboxes,
        title: "The scheduler's scope covers the sandbox namespaces".to_owned(),
        ok: scope_ok,
        detail,
        fix: if scope_ok {
            String::new()
        } else {
            "Set scheduler.scope.type: cluster in the Slurm chart's values (a namespace scope misses the per-user sandbox namespaces).".to_owned()
        },
    });

    // In the kubelet's units, as the world accounts Nodes and Pods: millicores, bytes rounded up.
    let millicores = |text: &str| Quantity::parse(text).map(Quantity::millis).unwrap_or(0);
    let bytes = |text: &str| Quantity::parse(text).map(Quantity::units_ceil).unwrap_or(0);
    let need_cpu = millicores(&values.sandboxes.default_cpu);
    let need_memory = bytes(&values.sandboxes.default_memory);
    for node_set in &values.node_sets {
        let free_cpu = millicores(&node_set.cpu) - millicores(&node_set.slurmd.requests.cpu);
        let free_memory = bytes(&node_set.memory) - bytes(&node_set.slurmd.requests.memory);
        let ok = free_cpu >= need_cpu && free_memory >= need_memory;
        checks.push(Check {
            kind: CheckKind::RoomBesideSlurmd,
            title: format!("NodeSet {:?} has room for a sandbox beside slurmd", node_set.name),
            ok,
            detail: format!(
                "{} CPU / {} per Node, slurmd requests {} / {}: {}m CPU and {} left; a sandbox requests {} / {}",
                node_set.cpu,
                node_set.memory,
                node_set.slurmd.requests.cpu,
                node_set.slurmd.requests.memory,
                free_cpu.max(0),
                format_bytes(free_memory.max(0)),
                values.sandboxes.default_cpu,
                values.sandboxes.default_memory,
            ),
            fix: if ok {
                String::new()
            } else {
                format!(
                    "Lower nodeSets[{}].slurmd.requests (the guide: cpu 1, memory 4Gi) so sandbox Pods are not refused OutOfcpu/OutOfmemory.",
                    node_set.name
                )
            },
        });
    }
    checks
}
