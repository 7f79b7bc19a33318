//! Cluster: each Node as bars of its allocatable CPU and memory, split by who holds them, with
//! its taints, SUNK's prolog lock, the Slurm node's drain, and the Pods its kubelet refused.

use std::collections::{HashMap, HashSet};

use cwsandbox_sim::k8s::{LOCK_KEY, Node, Pod, PodOwner};
use cwsandbox_sim::query::ObjectQuery;
use cwsandbox_sim::slurm::SlurmNode;
use cwsandbox_sim::world::World;
use cwsandbox_surface::app::App;
use maud::{Markup, html};

use super::heading;
use crate::format;
use crate::viewer::{Refusal, Viewer, rpc};

/// Who holds a share of a Node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    Slurmd,
    SlurmJobPods,
    SandboxPods,
    Pinned,
    Other,
}

impl Holder {
    const ALL: [Holder; 5] = [Holder::Slurmd, Holder::SlurmJobPods, Holder::SandboxPods, Holder::Pinned, Holder::Other];

    fn class(self) -> &'static str {
        match self {
            Holder::Slurmd => "slurmd",
            Holder::SlurmJobPods => "jobs",
            Holder::SandboxPods => "sandboxes",
            Holder::Pinned => "pinned",
            Holder::Other => "other",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Holder::Slurmd => "slurmd",
            Holder::SlurmJobPods => "Slurm jobs' Pods",
            Holder::SandboxPods => "sandbox Pods",
            Holder::Pinned => "pinned CPUs",
            Holder::Other => "other Pods",
        }
    }
}

/// One Node's reading.
struct NodeReading {
    name: String,
    ready: bool,
    taints: Vec<String>,
    locked: bool,
    cpu_total: i64,
    memory_total: i64,
    /// (holder, millicores, bytes)
    shares: Vec<(Holder, i64, i64)>,
    slurm: Option<SlurmReading>,
    refused: Vec<(String, String, String)>,
}

struct SlurmReading {
    name: String,
    alloc_cpus: u32,
    cpus: u32,
    drain: Option<String>,
}

fn read(world: &World, viewer: &Viewer) -> Vec<NodeReading> {
    let scope = viewer.scope();
    let jobs = world.placeholder_jobs_by_pod();
    let slurm: HashMap<&str, &SlurmNode> =
        world.slurm.nodes.iter().map(|node| (node.k8s_node.as_str(), node)).collect();
    let visible: HashSet<&str> = world
        .query_pods(&ObjectQuery { scope: scope.clone(), ..ObjectQuery::default() })
        .into_iter()
        .map(|pod| &*pod.uid)
        .collect();
    let nodes: Vec<&Node> = world.query_nodes(&ObjectQuery { scope, ..ObjectQuery::default() });
    nodes
        .into_iter()
        .map(|node| {
            let mut totals: HashMap<u8, (i64, i64)> = HashMap::new();
            let mut refused = Vec::new();
            for pod in world.cluster.pods_on(&node.name) {
                if let Some(reason) = pod.reason.as_deref().filter(|reason| reason.starts_with("OutOf")) {
                    if visible.contains(&*pod.uid) {
                        refused.push((
                            format!("{}/{}", pod.namespace, pod.name),
                            reason.to_owned(),
                            pod.message.clone().unwrap_or_default(),
                        ));
                    }
                    continue;
                }
                if !pod.holds_resources() {
                    continue;
                }
                let holder = holder_of(pod, jobs.contains_key(&*pod.uid));
                let requested = pod.requested();
                let entry = totals.entry(holder as u8).or_default();
                entry.0 += requested.cpu_millis;
                entry.1 += requested.memory_bytes;
            }
            // Pinned CPUs are whole CPUs the kubelet took out of the sandbox Pods' requests for
            // Pods Slurm does not know: shown apart, not twice.
            let pinned = node.pinned_cpus * 1000;
            let sandbox = totals.entry(Holder::SandboxPods as u8).or_default();
            sandbox.0 = (sandbox.0 - pinned).max(0);
            totals.insert(Holder::Pinned as u8, (pinned, 0));
            let shares = Holder::ALL
                .into_iter()
                .map(|holder| {
                    let (cpu, memory) = totals.get(&(holder as u8)).copied().unwrap_or_default();
                    (holder, cpu, memory)
                })
                .collect();
            NodeReading {
                name: node.name.to_string(),
                ready: node.ready,
                taints: node
                    .taints
                    .iter()
                    .map(|taint| {
                        if taint.value.is_empty() {
                            format!("{}:{}", taint.key, taint.effect)
                        } else {
                            format!("{}={}:{}", taint.key, taint.value, taint.effect)
                        }
                    })
                    .collect(),
                locked: node.taints.iter().any(|taint| taint.key == LOCK_KEY),
                cpu_total: node.allocatable.cpu_millis,
                memory_total: node.allocatable.memory_bytes,
                shares,
                slurm: slurm.get(node.name.as_ref() as &str).map(|slurm| SlurmReading {
                    name: slurm.name.clone(),
                    alloc_cpus: slurm.alloc_cpus,
                    cpus: slurm.cpus,
                    drain: slurm.drain.as_ref().map(|drain| drain.reason.clone()),
                }),
                refused,
            }
        })
        .collect()
}

fn holder_of(pod: &Pod, has_job: bool) -> Holder {
    match &pod.owner {
        PodOwner::Slurmd { .. } => Holder::Slurmd,
        _ if has_job => Holder::SlurmJobPods,
        PodOwner::Sandbox(_) => Holder::SandboxPods,
        PodOwner::Scheduler | PodOwner::Other => Holder::Other,
    }
}

/// The view.
pub fn render(app: &App, viewer: &Viewer) -> Result<Markup, Refusal> {
    viewer.caller_for(rpc::LIST_NODES)?;
    let (nodes, now) = app.driver().with_world(|world| (read(world, viewer), world.now()));
    Ok(html! {
        (heading("Cluster", now))
        ul.legend {
            @for holder in Holder::ALL {
                li { span class={ "swatch " (holder.class()) } {} (holder.label()) }
            }
            li { span.swatch.free {} "free" }
        }
        div.nodes {
            @for node in &nodes {
                (node_card(node))
            }
        }
    })
}

fn node_card(node: &NodeReading) -> Markup {
    let used_cpu: i64 = node.shares.iter().map(|share| share.1).sum();
    let used_memory: i64 = node.shares.iter().map(|share| share.2).sum();
    html! {
        article.node data-node=(node.name) {
            header {
                h2 { (node.name) }
                @if !node.ready { span.badge.bad { "NotReady" } }
                @if node.locked { span.badge.lock title="SUNK's prolog holds this Node for a Slurm job" { "prolog lock" } }
                @if let Some(slurm) = &node.slurm {
                    span.badge title="the Slurm node whose slurmd runs here" {
                        (slurm.name) " · " (slurm.alloc_cpus) "/" (slurm.cpus) " CPUs allocated"
                    }
                    @if let Some(reason) = &slurm.drain {
                        span.badge.bad.drained data-drain=(reason) { "DRAINED: " (reason) }
                    }
                }
            }
            (bar("CPU", &node.shares, |share| share.1, node.cpu_total, used_cpu, format::cpus))
            (bar("Memory", &node.shares, |share| share.2, node.memory_total, used_memory, format::bytes))
            @if !node.taints.is_empty() {
                p.taints { "Taints: " @for taint in &node.taints { code { (taint) } " " } }
            }
            @if !node.refused.is_empty() {
                ul.refused {
                    @for (pod, reason, message) in &node.refused {
                        li.refusal data-reason=(reason) {
                            strong { (reason) } " " code { (pod) } ": " (message)
                        }
                    }
                }
            }
        }
    }
}

fn bar(
    title: &str,
    shares: &[(Holder, i64, i64)],
    amount: impl Fn(&(Holder, i64, i64)) -> i64,
    total: i64,
    used: i64,
    unit: fn(i64) -> String,
) -> Markup {
    let free = (total - used).max(0);
    html! {
        div.bar-row {
            span.bar-title { (title) }
            div.bar role="img" aria-label={ (title) ": " (unit(used)) " of " (unit(total)) " requested" } {
                @for share in shares {
                    @let value = amount(share);
                    @if value > 0 {
                        span class={ "seg " (share.0.class()) } style={ "width:" (format::percent(value, total)) }
                            data-amount=(value) title={ (share.0.label()) ": " (unit(value)) } {}
                    }
                }
                @if free > 0 {
                    span.seg.free style={ "width:" (format::percent(free, total)) } data-amount=(free)
                        title={ "free: " (unit(free)) } {}
                }
            }
            span.bar-numbers { (unit(free)) " free of " (unit(total)) }
        }
    }
}
