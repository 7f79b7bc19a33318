//! What DiscoveryService tells about runners: each runner's health, and the capacity the
//! simulated cluster offers its sandboxes.

use std::collections::{BTreeSet, HashMap};

use cwsandbox_api::sandbox_v1 as pb;

use crate::error::{Reason, SimError, SimResult};
use crate::k8s::{PodOwner, PodPhase, ResourceTotals};
use crate::pager::Pager;
use crate::world::World;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

/// The architecture sandboxes run on: the one this emulator was built for (they run on this
/// host), in Kubernetes' names.
fn host_architecture() -> String {
    std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64")
}

impl World {
    /// A runner as DiscoveryService shows it, with health and capacity computed from the
    /// cluster: `capabilities` is the largest sandbox one Node can hold (its allocatable minus
    /// what non-sandbox Pods such as slurmd request), `resources` what all Nodes have free now.
    /// Control-plane Nodes are not counted. An unknown runner, or another organization's, is
    /// NOT_FOUND (`CWSANDBOX_RUNNER_NOT_FOUND`). `view` as GetAvailableRunner's: FULL unless
    /// BASIC is asked for ([`shows_resources`]).
    pub fn available_runner(&self, org: &str, runner_id: &str, view: i32) -> SimResult<pb::AvailableRunner> {
        let with_resources = shows_resources(view, true)?;
        let runner = self.runners.find(org, runner_id).ok_or_else(|| SimError::NotFound {
            reason: Reason::RunnerNotFound,
            message: format!("no runner {runner_id:?} visible in organization {org:?}"),
        })?;
        Ok(availability(org, runner, &self.capacity(org), with_resources))
    }

    /// ListAvailableRunners: the organization's runners in runner-id order, filtered as the
    /// request asks, one page at a time.
    pub fn list_available_runners(
        &self,
        org: &str,
        request: &pb::ListAvailableRunnersRequest,
    ) -> SimResult<(Vec<pb::AvailableRunner>, String)> {
        let filters = [
            request.runner_group_id.clone(),
            request.healthy_only.to_string(),
            request.gpu_type.clone(),
            request.architecture.clone(),
            request.service_visibility.to_string(),
        ];
        let with_resources = shows_resources(request.view, false)?;
        let pager = Pager::new("available-runners", filters, request.page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let after = pager.after(&request.page_token)?.and_then(|key| key.into_iter().next());
        // The same for every runner of the listing: computed once, not per runner.
        let capacity = self.capacity(org);
        let matching = self
            .runners
            .iter(org)
            .filter(|runner| after.as_deref().is_none_or(|last| runner_id(runner) > last))
            .map(|runner| availability(org, runner, &capacity, with_resources))
            .filter(|runner| request.runner_group_id.is_empty() || runner.runner_group_id == request.runner_group_id)
            .filter(|runner| !request.healthy_only || runner.healthy)
            .filter(|runner| {
                let capabilities = runner.capabilities.clone().unwrap_or_default();
                (request.gpu_type.is_empty() || capabilities.supported_gpu_types.contains(&request.gpu_type))
                    && (request.architecture.is_empty()
                        || capabilities.supported_architectures.contains(&request.architecture))
                    && (request.service_visibility == pb::Visibility::Unspecified as i32
                        || capabilities.supported_service_visibilities.contains(&request.service_visibility))
            });
        Ok(pager.page(matching, |runner| vec![runner.runner_id.clone()]))
    }

    /// The GPU models the runners offer: the `gpu.nvidia.com/class` of every Node with GPUs
    /// that runs sandboxes (not the control plane's, not the serverless pool's). Discovery lists
    /// them and a create asking for another is refused, by this one rule.
    pub(crate) fn offered_gpu_classes(&self) -> BTreeSet<&str> {
        self.cluster
            .nodes
            .values()
            .filter(|node| runs_runner_sandboxes(node) && node.allocatable.gpus > 0)
            .filter_map(|node| node.labels.get(crate::k8s::GPU_CLASS_LABEL).map(String::as_str))
            .collect()
    }

    /// What the cluster offers the organization's sandboxes now.
    fn capacity(&self, org: &str) -> Capacity {
        let mut capabilities =
            pb::RunnerCapabilitySummary { supported_architectures: vec![host_architecture()], ..Default::default() };
        let mut resources = pb::RunnerResourceSummary::default();
        for node in self.cluster.nodes.values() {
            if !runs_runner_sandboxes(node) {
                continue;
            }
            let mut system = ResourceTotals::default();
            for pod in self.cluster.pods_on(&node.name) {
                if pod.holds_resources() && !matches!(pod.owner, PodOwner::Sandbox(_)) {
                    system.add(pod.requested());
                }
            }
            capabilities.max_cpu_millicores =
                capabilities.max_cpu_millicores.max(node.allocatable.cpu_millis - system.cpu_millis);
            capabilities.max_memory_bytes =
                capabilities.max_memory_bytes.max(node.allocatable.memory_bytes - system.memory_bytes);
            capabilities.max_gpu_count = capabilities.max_gpu_count.max(node.allocatable.gpus - system.gpus);
            resources.available_cpu_millicores += (node.allocatable.cpu_millis - node.requested.cpu_millis).max(0);
            resources.available_memory_bytes += (node.allocatable.memory_bytes - node.requested.memory_bytes).max(0);
            resources.available_gpu_count += (node.allocatable.gpus - node.requested.gpus).max(0);
        }
        capabilities.supported_gpu_types = self.offered_gpu_classes().into_iter().map(str::to_owned).collect();
        // Every service is served on the host's loopback, whatever its visibility; PUBLIC and
        // PRIVATE are accepted (one of them per sandbox, as in v1). CUSTOM follows the sandbox's
        // ingress rules, which are not enforced yet, so it is not advertised.
        capabilities.supported_service_visibilities =
            vec![pb::Visibility::Public as i32, pb::Visibility::Private as i32];
        let mut running_by_runner: HashMap<&str, i32> = HashMap::new();
        for pod in self.cluster.pods_iter().filter(|pod| pod.phase == PodPhase::Running) {
            if let PodOwner::Sandbox(id) = &pod.owner
                && let Some((sandbox_org, runner_id)) = self.sandboxes.placement(id)
                && sandbox_org == org
            {
                *running_by_runner.entry(runner_id).or_default() += 1;
            }
        }
        let running_by_runner =
            running_by_runner.into_iter().map(|(runner_id, count)| (runner_id.to_owned(), count)).collect();
        Capacity { capabilities, resources, running_by_runner }
    }
}

/// The cluster's capacity for one organization's sandboxes, shared by its runners.
struct Capacity {
    capabilities: pb::RunnerCapabilitySummary,
    resources: pb::RunnerResourceSummary,
    /// Running sandbox Pods per runner id.
    running_by_runner: HashMap<String, i32>,
}

/// Whether a runner is shown with `resources`, what it has free now: the FULL view's, which the
/// published client asks for when it wants them (`include_resources=True`, also implied by its
/// minimum-capacity filters) and whose absence its own suite checks in the BASIC view
/// (`test_include_resources_false_default`). UNSPECIFIED is `unspecified_full`'s (List: BASIC,
/// Get: FULL); an unknown view is refused, naming the field.
fn shows_resources(view: i32, unspecified_full: bool) -> SimResult<bool> {
    match pb::RunnerView::try_from(view) {
        Ok(pb::RunnerView::Unspecified) => Ok(unspecified_full),
        Ok(pb::RunnerView::Basic) => Ok(false),
        Ok(pb::RunnerView::Full) => Ok(true),
        Err(_) => Err(SimError::invalid_field("view", format!("{view} is not a RunnerView (0 to 2)"))),
    }
}

fn availability(
    org: &str,
    runner: &pb::ManagedRunner,
    capacity: &Capacity,
    with_resources: bool,
) -> pb::AvailableRunner {
    let identity = runner.identity.clone().unwrap_or_default();
    let healthy = runner.install_status == pb::RunnerInstallStatus::Ready as i32
        && runner.connection_status == pb::RunnerConnectionStatus::Connected as i32;
    let running = capacity.running_by_runner.get(&identity.runner_id).copied().unwrap_or(0);
    pb::AvailableRunner {
        runner_id: identity.runner_id,
        runner_group_id: identity.runner_group_id,
        tags: Vec::new(),
        healthy,
        capabilities: Some(capacity.capabilities.clone()),
        resources: with_resources
            .then_some(pb::RunnerResourceSummary { running_sandboxes: running, ..capacity.resources }),
        connected_at: runner.last_heartbeat_time.or(runner.create_time),
        is_shared: false,
        organization_id: org.to_owned(),
    }
}

fn runner_id(runner: &pb::ManagedRunner) -> &str {
    runner.identity.as_ref().map_or("", |identity| identity.runner_id.as_str())
}

/// Whether a Node runs runners' sandboxes: not the control plane's, and the serverless pool is
/// not the runners' to offer.
fn runs_runner_sandboxes(node: &crate::k8s::Node) -> bool {
    !node.labels.contains_key("node-role.kubernetes.io/control-plane") && !crate::world::is_serverless_node(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Scenario, Values};
    use crate::ids::SeededIds;
    use crate::time::{ManualClock, SimTime};

    fn world_with_runners(ids: &[(&str, &str)]) -> World {
        let clock = ManualClock::new(SimTime::from_secs(1_764_480_000));
        let mut world =
            World::new(Values::scenario(Scenario::Ready), Box::new(clock), Box::new(SeededIds::new(3))).unwrap();
        for (index, (runner_id, group)) in ids.iter().enumerate() {
            let runner = pb::ManagedRunner {
                identity: Some(pb::RunnerIdentity {
                    runner_id: (*runner_id).to_owned(),
                    runner_group_id: (*group).to_owned(),
                    zone: "us-east-1a".to_owned(),
                    cluster_id: "cluster-1".to_owned(),
                    ..Default::default()
                }),
                policy: Some(pb::Policy::default()),
                ..Default::default()
            };
            world.runners.create("default-org", runner, &format!("request-{index}"), world.now()).unwrap();
        }
        world
    }

    #[test]
    fn available_runners_page_in_runner_id_order_with_filters_bound_to_the_token() {
        let world = world_with_runners(&[("runner-c", "gpu"), ("runner-a", "gpu"), ("runner-b", "cpu")]);
        let mut request =
            pb::ListAvailableRunnersRequest { runner_group_id: "gpu".to_owned(), page_size: 1, ..Default::default() };
        let mut seen = Vec::new();
        loop {
            let (page, next) = world.list_available_runners("default-org", &request).unwrap();
            seen.extend(page.into_iter().map(|runner| runner.runner_id));
            if next.is_empty() {
                break;
            }
            request.page_token = next;
        }
        assert_eq!(seen, ["runner-a", "runner-c"], "the group filter, in runner-id order, one per page");

        let (_, token) = world
            .list_available_runners(
                "default-org",
                &pb::ListAvailableRunnersRequest { page_size: 1, ..Default::default() },
            )
            .unwrap();
        let other_filter = pb::ListAvailableRunnersRequest {
            runner_group_id: "gpu".to_owned(),
            page_token: token,
            ..Default::default()
        };
        let error = world.list_available_runners("default-org", &other_filter).unwrap_err();
        assert_eq!(error.to_string(), "page_token: the page token belongs to a listing with other filters");
        assert!(world.list_available_runners("other-org", &Default::default()).unwrap().0.is_empty());
        assert_eq!(
            world.available_runner("other-org", "runner-a", 0).unwrap_err().reason(),
            Some(Reason::RunnerNotFound)
        );
    }

    #[test]
    fn the_basic_view_leaves_out_resources_and_each_call_has_its_default() {
        let world = world_with_runners(&[("runner-a", "gpu")]);
        let listed = |view: pb::RunnerView| {
            let request = pb::ListAvailableRunnersRequest { view: view as i32, ..Default::default() };
            world.list_available_runners("default-org", &request).unwrap().0.remove(0)
        };
        assert!(listed(pb::RunnerView::Unspecified).resources.is_none(), "List defaults to BASIC");
        assert!(listed(pb::RunnerView::Basic).resources.is_none());
        assert!(listed(pb::RunnerView::Basic).capabilities.is_some(), "BASIC keeps the capabilities");
        assert!(listed(pb::RunnerView::Full).resources.is_some());
        let got = |view: pb::RunnerView| world.available_runner("default-org", "runner-a", view as i32).unwrap();
        assert!(got(pb::RunnerView::Unspecified).resources.is_some(), "Get defaults to FULL");
        assert!(got(pb::RunnerView::Basic).resources.is_none());
        assert!(got(pb::RunnerView::Full).resources.is_some());
        let unknown = pb::ListAvailableRunnersRequest { view: 7, ..Default::default() };
        let error = world.list_available_runners("default-org", &unknown).unwrap_err();
        assert_eq!(error.reason(), Some(Reason::InvalidRequest));
        assert!(error.to_string().contains("view"), "{error}");
        assert!(world.available_runner("default-org", "runner-a", -1).is_err());
    }

    #[test]
    fn runners_advertise_public_and_private_services_and_filter_on_them() {
        let world = world_with_runners(&[("runner-a", "gpu")]);
        let with_visibility = |visibility: pb::Visibility| {
            let request =
                pb::ListAvailableRunnersRequest { service_visibility: visibility as i32, ..Default::default() };
            world.list_available_runners("default-org", &request).unwrap().0
        };
        let every = with_visibility(pb::Visibility::Unspecified);
        assert_eq!(every.len(), 2, "the scenario's runner and runner-a");
        for runner in &every {
            let advertised = &runner.capabilities.as_ref().unwrap().supported_service_visibilities;
            assert_eq!(advertised, &[pb::Visibility::Public as i32, pb::Visibility::Private as i32]);
        }
        assert_eq!(with_visibility(pb::Visibility::Public), every);
        assert_eq!(with_visibility(pb::Visibility::Private), every);
        assert!(with_visibility(pb::Visibility::Custom).is_empty(), "CUSTOM needs ingress rules, not enforced yet");
    }
}
