//! Sandbox life cycles on the `ready` scenario: creation, idempotency, runner choice, the state
//! mirrored from Pod and job, deletion, exits, lifetime, retention and listing.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{ResourceRequirements, Resources, SandboxMode, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::query::Scope;
use cwsandbox_sim::sandbox::{Owner, SandboxFilter, SandboxState};
use cwsandbox_sim::world::{Effect, PodLaunch};

fn alice() -> Owner {
    Owner { org: "default-org".to_owned(), user: "alice".to_owned() }
}

/// What `Sandbox.run(placement_mode="cks", runner_ids=["cks-runner"])` sends.
fn client_spec() -> SandboxSpec {
    SandboxSpec {
        containers: vec![client_container()],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    }
}

fn ready() -> Harness {
    harness_with(Values::scenario(Scenario::Ready))
}

#[test]
fn create_goes_pending_then_running_through_slurm() {
    let mut h = ready();
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "req-1").unwrap();
    assert_eq!(created.state, SandboxState::Pending, "prolog running: {}", created.state_reason);
    assert!(created.state_reason.contains("prolog"), "{}", created.state_reason);
    assert_eq!(created.namespace, "sandbox-alice");
    assert!(h.world.cluster.namespaces.contains_key("sandbox-alice"), "namespace made on first use");
    assert!(created.job_id.is_some());
    h.advance(1);
    let running = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(running.state, SandboxState::Running);
    assert!(running.started.is_some());
    assert_eq!(running.runner_id, "cks-runner");
    assert!(running.node_name.as_deref().is_some_and(|node| node.starts_with("node-cpu-")));
    let effects = h.world.take_effects();
    assert!(
        effects.iter().any(
            |effect| matches!(effect, Effect::StartPod(PodLaunch { sandbox_id: Some(id), .. }) if *id == created.id)
        ),
        "{effects:?}"
    );
    let pod = h.world.cluster.pod(&running.pod_uid).unwrap();
    assert_eq!(pod.labels["sandbox.coreweave.com/sandbox-id"], created.id);
    assert_eq!(pod.scheduler_name, "slurm-scheduler");
    let job = h.world.slurm.job(running.job_id.unwrap()).unwrap();
    assert!(job.name.contains(created.id.as_str()), "sacct … | grep <sandbox-id> finds it: {}", job.name);
}

#[test]
fn same_request_id_same_body_returns_the_same_sandbox_other_body_conflicts() {
    let mut h = ready();
    let first = h.world.create_sandbox(&alice(), client_spec(), "", "req-1").unwrap();
    let again = h.world.create_sandbox(&alice(), client_spec(), "", "req-1").unwrap();
    assert_eq!(first.id, again.id);
    let mut other = client_spec();
    other.tags.push("different".to_owned());
    let error = h.world.create_sandbox(&alice(), other, "", "req-1").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::RequestIdConflict));
    assert!(matches!(error, SimError::InvalidArgument { .. }));
    assert_eq!(h.world.list_sandboxes("default-org", &SandboxFilter::default(), 0, "").unwrap().0.len(), 1);
}

#[test]
fn a_lone_unnamed_container_is_main_and_a_replay_with_the_name_spelled_out_is_the_same_request() {
    let mut h = ready();
    let mut unnamed = client_spec();
    unnamed.containers[0].name = " ".to_owned();
    let created = h.world.create_sandbox(&alice(), unnamed, "", "request-1").unwrap();
    assert_eq!(created.resolved.containers[0].name, "main");
    let replayed = h.world.create_sandbox(&alice(), client_spec(), "", "request-1").unwrap();
    assert_eq!(replayed.id, created.id);
}

#[test]
fn start_pod_carries_the_containers_to_run_primary_first() {
    let mut h = ready();
    let mut spec = client_spec();
    let mut sidecar = spec.containers[0].clone();
    sidecar.name = "sidecar".to_owned();
    spec.containers.insert(0, sidecar);
    spec.containers[1].primary = Some(true);
    let created = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(1);
    let effects = h.world.take_effects();
    let started = effects.iter().find_map(|effect| match effect {
        Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if *id == created.id => Some(containers),
        _ => None,
    });
    let names: Vec<&str> = started.expect("started").iter().map(|container| container.name.as_str()).collect();
    assert_eq!(names, ["main", "sidecar"], "the primary container first, whatever its place in the spec");
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    assert_eq!(pod.containers[0].name, "sidecar", "the Pod keeps the spec's order");
}

#[test]
fn unknown_runner_and_serverless_with_runner_ids_are_refused_and_nothing_is_created() {
    let mut h = ready();
    let mut spec = client_spec();
    spec.runner_ids = vec!["nope".to_owned()];
    let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::RunnerNotFound));
    let mut spec = client_spec();
    spec.mode = SandboxMode::Serverless as i32;
    let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
    assert_eq!(error.violations()[0].field, "sandbox.spec.mode", "runner_ids need CKS: {error}");
    let error = h.world.create_sandbox(&alice(), SandboxSpec::default(), "", "").unwrap_err();
    assert_eq!(error.violations()[0].field, "sandbox.spec.containers");
    assert!(
        h.world
            .list_sandboxes("default-org", &SandboxFilter { show_terminated: true, ..Default::default() }, 0, "")
            .unwrap()
            .0
            .is_empty()
    );
    assert_eq!(h.world.slurm.accounted_jobs(), 0);
}

#[test]
fn delete_goes_terminating_then_completed_and_stays_readable_until_retention() {
    let mut h = ready();
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    let deleting = h.world.delete_sandbox("default-org", &sandbox.id, 10).unwrap();
    assert_eq!(deleting.state, SandboxState::Terminating);
    assert!(
        h.world
            .take_effects()
            .iter()
            .any(|effect| matches!(effect, Effect::StopPod { grace, .. } if grace.as_secs() == 10))
    );
    // The keep-alive traps TERM and exits at once.
    h.world.sandbox_exited(&sandbox.id, 0);
    let done = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(done.state, SandboxState::Completed);
    assert!(done.ended.is_some());
    let job = h.world.slurm.accounting_record(done.job_id.unwrap()).unwrap();
    assert_eq!(job.state.as_str(), "CANCELLED");
    assert!(
        h.world.list_sandboxes("default-org", &SandboxFilter::default(), 0, "").unwrap().0.is_empty(),
        "hidden by default"
    );
    let shown = h
        .world
        .list_sandboxes("default-org", &SandboxFilter { show_terminated: true, ..Default::default() }, 0, "")
        .unwrap()
        .0;
    assert_eq!(shown.len(), 1);
    h.advance(3600);
    assert_eq!(h.world.get_sandbox("default-org", &sandbox.id).unwrap_err().reason(), Some(Reason::SandboxNotFound));
}

#[test]
fn delete_of_a_process_ignoring_sigterm_completes_after_the_grace() {
    let mut h = ready();
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &sandbox.id, 10).unwrap();
    h.advance(9);
    assert_eq!(h.world.get_sandbox("default-org", &sandbox.id).unwrap().state, SandboxState::Terminating);
    h.advance(1);
    assert_eq!(h.world.get_sandbox("default-org", &sandbox.id).unwrap().state, SandboxState::Completed);
    let deleted_again = h.world.delete_sandbox("default-org", &sandbox.id, 10).unwrap();
    assert_eq!(deleted_again.state, SandboxState::Completed, "deleting an ended sandbox is a no-op");
}

#[test]
fn main_process_exit_codes_give_completed_or_failed() {
    let mut h = ready();
    let ok = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    let bad = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.sandbox_exited(&ok.id, 0);
    h.world.sandbox_exited(&bad.id, 3);
    let ok = h.world.get_sandbox("default-org", &ok.id).unwrap();
    let bad = h.world.get_sandbox("default-org", &bad.id).unwrap();
    assert_eq!((ok.state, ok.exit_code), (SandboxState::Completed, Some(0)));
    assert_eq!((bad.state, bad.exit_code), (SandboxState::Failed, Some(3)));
    assert!(bad.state_reason.contains("code 3"));
}

#[test]
fn lifetime_expiry_terminates() {
    let mut h = ready();
    let mut spec = client_spec();
    spec.max_lifetime_seconds = 60;
    let sandbox = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(60);
    let view = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Terminating);
    h.advance(30);
    let view = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Terminated);
    assert!(view.state_reason.contains("lifetime"), "{}", view.state_reason);
}

#[test]
fn kubelet_rejection_fails_the_sandbox_with_the_reason() {
    let mut values = Values::scenario(Scenario::Ready);
    values.node_sets[0].slurmd.requests.cpu = "15".to_owned();
    let mut h = harness_with(values);
    let mut spec = client_spec();
    spec.containers[0].resource_requirements = Some(ResourceRequirements {
        requests: Some(Resources { cpu: "2".to_owned(), memory: "1Gi".to_owned(), gpu: None }),
        limits: Some(Resources { cpu: "2".to_owned(), memory: "1Gi".to_owned(), gpu: None }),
    });
    let sandbox = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(1);
    let view = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Failed);
    assert!(
        view.state_reason.starts_with("OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu"),
        "{}",
        view.state_reason
    );
}

#[test]
fn scancel_terminates_the_sandbox_with_the_job_in_the_reason() {
    let mut h = ready();
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    let job = h.world.get_sandbox("default-org", &sandbox.id).unwrap().job_id.unwrap();
    h.world.scancel(&Scope::Cluster, job, 1001).unwrap();
    h.world.sandbox_exited(&sandbox.id, 0);
    let view = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Terminated);
    assert_eq!(view.state_reason, format!("Slurm job {job} was cancelled by 1001"));
}

#[test]
fn other_organizations_see_nothing() {
    let mut h = ready();
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    assert_eq!(h.world.get_sandbox("other-org", &sandbox.id).unwrap_err().reason(), Some(Reason::SandboxNotFound));
    assert!(h.world.list_sandboxes("other-org", &SandboxFilter::default(), 0, "").unwrap().0.is_empty());
}

#[test]
fn listing_pages_with_opaque_tokens_and_filters() {
    let mut h = ready();
    let mut ids = Vec::new();
    for index in 0..7 {
        let mut spec = client_spec();
        spec.tags = vec![if index % 2 == 0 { "even" } else { "odd" }.to_owned()];
        ids.push(h.world.create_sandbox(&alice(), spec, "", "").unwrap().id.clone());
        h.advance_millis(10);
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let (page, next) = h.world.list_sandboxes("default-org", &SandboxFilter::default(), 3, &token).unwrap();
        assert!(page.len() <= 3);
        seen.extend(page.into_iter().map(|view| view.id.clone()));
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!(seen, ids, "every sandbox once, in creation order");
    let even = h
        .world
        .list_sandboxes("default-org", &SandboxFilter { tags: vec!["even".to_owned()], ..Default::default() }, 0, "")
        .unwrap()
        .0;
    assert_eq!(even.len(), 4);
    let error = h.world.list_sandboxes("default-org", &SandboxFilter::default(), 3, "garbage").unwrap_err();
    assert_eq!(error.violations()[0].field, "page_token");
}

#[test]
fn fresh_scenario_rejects_the_default_grace_and_says_why() {
    let mut values = Values::scenario(Scenario::Fresh);
    values.runners[0].policy = Some(serde_json::json!({"base": {"spec": {"schedulerName": "slurm-scheduler"}}}));
    values.scheduler.scope.scope_type = cwsandbox_sim::config::ScopeType::Cluster;
    let mut h = harness_with(values);
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(5);
    let view = h.world.get_sandbox("default-org", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Pending);
    assert!(
        view.state_reason.contains("termination grace period must be less than Slurm KillWait - 5s"),
        "{}",
        view.state_reason
    );
}

#[test]
fn same_seed_same_world() {
    let run = || {
        let mut h = ready();
        let ids: Vec<String> =
            (0..3).map(|_| h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap().id.to_string()).collect();
        h.advance(1);
        (ids, h.world.slurm.accounting_records().iter().map(|job| job.id).collect::<Vec<_>>())
    };
    assert_eq!(run(), run());
}

#[test]
fn job_listings_keep_queue_and_accounting_apart() {
    use cwsandbox_sim::query::{JobQuery, JobSource, ObjectQuery, POD_FIELDS};
    use cwsandbox_sim::slurm::JobBaseState;

    let mut h = ready();
    let sandbox = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    let job = h.world.get_sandbox("default-org", &sandbox.id).unwrap().job_id.unwrap();
    let rows = |h: &Harness| {
        h.world
            .query_jobs(&JobQuery { job_ids: vec![job], ..JobQuery::default() })
            .iter()
            .map(|row| (row.source, row.job.state, row.completing(), row.pod.as_ref().map(|pod| pod.exists)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&h),
        [
            (JobSource::Queue, JobBaseState::Running, false, Some(true)),
            (JobSource::Accounting, JobBaseState::Running, false, Some(true)),
        ]
    );

    h.world.scancel(&Scope::Cluster, job, 1001).unwrap();
    assert_eq!(
        rows(&h),
        [
            (JobSource::Queue, JobBaseState::Cancelled, true, Some(true)),
            (JobSource::Accounting, JobBaseState::Cancelled, false, Some(true)),
        ],
        "COMPLETING is a queue flag: accounting stores the base state"
    );
    let again = h.world.scancel(&Scope::Cluster, job, 0).unwrap_err();
    assert!(again.to_string().ends_with("Job/step already completing or completed"), "{again}");
    assert_eq!(h.world.scancel(&Scope::Cluster, 9_999_999, 0).unwrap_err().reason(), Some(Reason::JobNotFound));

    // The Pod goes after its grace period; the controller keeps the ended job for MinJobAge
    // (no longer COMPLETING), then only the accounting has it, still naming the Pod through the
    // sandbox.
    h.advance(31);
    let kept = h.world.query_jobs(&JobQuery { job_ids: vec![job], ..JobQuery::default() });
    assert_eq!(
        kept.iter().map(|row| (row.source, row.completing())).collect::<Vec<_>>(),
        [(JobSource::Queue, false), (JobSource::Accounting, false)]
    );
    h.advance(300);
    let after = h.world.query_jobs(&JobQuery { job_ids: vec![job], ..JobQuery::default() });
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].source, JobSource::Accounting);
    assert_eq!(after[0].job.cancelled_by, Some(1001));
    let pod = after[0].pod.as_ref().unwrap();
    assert_eq!((pod.exists, pod.sandbox_id), (false, Some(sandbox.id.as_str())));
    assert_eq!(pod.name, Some(sandbox.pod_name.as_str()));

    // Filters: users by name or uid, states, sources.
    let by = |query: JobQuery| h.world.query_jobs(&query).len();
    assert_eq!(by(JobQuery { users: vec!["root".to_owned()], ..JobQuery::default() }), 1, "placeholders run as root");
    assert_eq!(by(JobQuery { users: vec!["0".to_owned()], ..JobQuery::default() }), 1);
    assert_eq!(by(JobQuery { users: vec!["alice".to_owned()], ..JobQuery::default() }), 0);
    assert_eq!(by(JobQuery { states: vec![JobBaseState::Running], ..JobQuery::default() }), 0);
    assert_eq!(by(JobQuery { queue: true, accounting: false, ..JobQuery::default() }), 0);

    let none = ObjectQuery::parse(
        Scope::Cluster,
        "",
        &format!("sandbox.coreweave.com/sandbox-id={}", sandbox.id),
        "",
        POD_FIELDS,
    )
    .unwrap();
    assert!(h.world.query_pods(&none).is_empty(), "the Pod is gone");
    let slurmd = ObjectQuery::parse(
        Scope::Cluster,
        "tenant-slurm",
        "app.kubernetes.io/name=slurmd",
        "status.phase=Running",
        POD_FIELDS,
    )
    .unwrap();
    assert_eq!(h.world.query_pods(&slurmd).len(), 4);
    assert!(ObjectQuery::parse(Scope::Cluster, "", "", "spec.foo=bar", POD_FIELDS).is_err());
}

#[test]
fn a_failed_upgrade_changes_nothing() {
    let mut h = ready();
    let mut values = h.world.values().clone();
    values.node_sets[0].cpu = "lots".to_owned();
    let error = h.world.apply_values(values).unwrap_err();
    assert!(error.to_string().starts_with("nodeSets[0].cpu: "), "{error}");
    assert_eq!(h.world.values(), &Values::scenario(Scenario::Ready));
    assert_eq!(h.world.slurm.nodes.len(), 4);
    assert_eq!(h.world.cluster.pod_count(), 5, "4 slurmd Pods and the scheduler are still there");
}

/// Two organizations on one cluster: each sees its own Pods, Events, Namespaces and jobs, commands
/// on the other's objects are NOT_FOUND, and resetting one leaves the other running.
#[test]
fn organizations_see_and_reset_only_their_own_part_of_the_cluster() {
    use cwsandbox_sim::query::{EVENT_FIELDS, JobQuery, NAMESPACE_FIELDS, NODE_FIELDS, ObjectQuery, POD_FIELDS};

    let mut values = Values::scenario(Scenario::Ready);
    let mut other = values.runners[0].clone();
    other.org = "other-org".to_owned();
    values.runners.push(other);
    let mut h = harness_with(values);
    let bob = Owner { org: "other-org".to_owned(), user: "bob".to_owned() };
    let mine = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    let theirs = h.world.create_sandbox(&bob, client_spec(), "", "").unwrap();
    h.advance(1);
    let a = Scope::Organization("default-org".to_owned());
    let b = Scope::Organization("other-org".to_owned());
    let batch_job = h.world.submit_batch_job(&b, batch(1, None)).unwrap();

    let pods = |h: &Harness, scope: &Scope| -> Vec<String> {
        let query = ObjectQuery::parse(scope.clone(), "", "", "", POD_FIELDS).unwrap();
        h.world.query_pods(&query).iter().map(|pod| pod.uid.to_string()).collect()
    };
    assert_eq!(pods(&h, &b), [theirs.pod_uid.to_string()], "no slurmd, scheduler or other organization's Pod");
    assert_eq!(pods(&h, &a), [mine.pod_uid.to_string()]);
    assert!(pods(&h, &Scope::Cluster).len() > 2, "the operator sees every Pod");

    let events = ObjectQuery::parse(b.clone(), "", "", "", EVENT_FIELDS).unwrap();
    let events = h.world.query_events(&events);
    assert!(!events.is_empty());
    assert!(events.iter().all(|event| event.involved.uid == theirs.pod_uid), "only its Pods' Events");
    let namespaces = ObjectQuery::parse(b.clone(), "", "", "", NAMESPACE_FIELDS).unwrap();
    let namespaces: Vec<&str> =
        h.world.query_namespaces(&namespaces).iter().map(|namespace| namespace.name.as_str()).collect();
    assert_eq!(namespaces, ["sandbox-bob"]);
    let everything = ObjectQuery::parse(b.clone(), "", "", "", &["metadata.name", "metadata.namespace"]).unwrap();
    assert!(h.world.query_config_maps(&everything).is_empty(), "ConfigMaps are the operator's");
    let nodes = ObjectQuery::parse(b.clone(), "", "", "", NODE_FIELDS).unwrap();
    assert_eq!(h.world.query_nodes(&nodes).len(), h.world.cluster.nodes.len(), "Nodes are cluster information");

    let jobs = |h: &Harness, scope: &Scope| -> Vec<u32> {
        let query = JobQuery { scope: scope.clone(), queue: false, ..JobQuery::default() };
        h.world.query_jobs(&query).iter().map(|row| row.job.id).collect()
    };
    let (my_job, their_job) = (mine.job_id.unwrap(), h.world.sandbox(&theirs.id).unwrap().job_id.unwrap());
    assert_eq!(jobs(&h, &b), [their_job, batch_job]);
    assert_eq!(jobs(&h, &a), [my_job]);

    let refused = h.world.scancel(&b, my_job, 0).unwrap_err();
    assert_eq!(refused.reason(), Some(Reason::JobNotFound));
    assert!(refused.to_string().ends_with("Invalid job id specified"), "as for an unknown id: {refused}");
    let refused = h.world.delete_pod(&b, &mine.namespace, &mine.pod_name, Some(0)).unwrap_err();
    assert_eq!(refused.reason(), Some(Reason::PodNotFound));
    assert_eq!(h.world.get_sandbox("default-org", &mine.id).unwrap().state, SandboxState::Running, "nothing changed");

    assert_eq!(h.world.reset_organization("other-org"), 1, "its running Pod was stopped");
    let effects = h.world.take_effects();
    assert!(
        effects.iter().any(|effect| matches!(effect, Effect::KillPod { pod_uid } if *pod_uid == theirs.pod_uid)),
        "{effects:?}"
    );
    assert_eq!(h.world.get_sandbox("other-org", &theirs.id).unwrap_err().reason(), Some(Reason::SandboxNotFound));
    assert!(pods(&h, &b).is_empty() && jobs(&h, &b).is_empty(), "a clean slate");
    assert_eq!(h.world.get_sandbox("default-org", &mine.id).unwrap().state, SandboxState::Running);
    assert!(h.world.slurm.job(batch_job).is_none_or(|job| job.state == cwsandbox_sim::slurm::JobBaseState::Cancelled));
    assert!(jobs(&h, &Scope::Cluster).contains(&(batch_job)), "the cluster's accounting keeps it");

    // A forgotten sandbox's job is still its organization's row.
    h.world.delete_sandbox("default-org", &mine.id, 0).unwrap();
    h.advance(4000);
    assert_eq!(h.world.get_sandbox("default-org", &mine.id).unwrap_err().reason(), Some(Reason::SandboxNotFound));
    assert_eq!(jobs(&h, &a), [my_job]);
}

/// Every named sandbox transition runs in some scenario of this file.
#[test]
fn every_sandbox_transition_is_exercised() {
    let coverage = coverage_of(&[
        start_pod_carries_the_containers_to_run_primary_first,
        a_lone_unnamed_container_is_main_and_a_replay_with_the_name_spelled_out_is_the_same_request,
        create_goes_pending_then_running_through_slurm,
        same_request_id_same_body_returns_the_same_sandbox_other_body_conflicts,
        unknown_runner_and_serverless_with_runner_ids_are_refused_and_nothing_is_created,
        delete_goes_terminating_then_completed_and_stays_readable_until_retention,
        delete_of_a_process_ignoring_sigterm_completes_after_the_grace,
        main_process_exit_codes_give_completed_or_failed,
        lifetime_expiry_terminates,
        kubelet_rejection_fails_the_sandbox_with_the_reason,
        scancel_terminates_the_sandbox_with_the_job_in_the_reason,
        other_organizations_see_nothing,
        listing_pages_with_opaque_tokens_and_filters,
        fresh_scenario_rejects_the_default_grace_and_says_why,
        same_seed_same_world,
        job_listings_keep_queue_and_accounting_apart,
        a_failed_upgrade_changes_nothing,
        organizations_see_and_reset_only_their_own_part_of_the_cluster,
    ]);
    assert_eq!(coverage.sandboxes.never_run(), [], "sandboxes transitions no scenario here exercises");
}

fn with_secret_store() -> Harness {
    use cwsandbox_sim::config::{SecretStoreValues, SecretValue};
    let mut values = Values::scenario(Scenario::Ready);
    values.secret_stores.insert(
        "vault".to_owned(),
        SecretStoreValues {
            secrets: [
                ("token".to_owned(), SecretValue::Whole("t0ken".to_owned())),
                (
                    "db".to_owned(),
                    SecretValue::Fields([("password".to_owned(), "pw".to_owned())].into_iter().collect()),
                ),
            ]
            .into_iter()
            .collect(),
            ..SecretStoreValues::default()
        },
    );
    harness_with(values)
}

fn secret(store: &str, path: &str, field: &str, env_var: &str) -> cwsandbox_api::sandbox_v1::SecretStoreReference {
    use cwsandbox_api::sandbox_v1::{SecretMapping, SecretStoreReference};
    SecretStoreReference {
        store_name: store.to_owned(),
        secrets: vec![SecretMapping { path: path.to_owned(), field: field.to_owned(), env_var: env_var.to_owned() }],
    }
}

#[test]
fn secrets_mounted_files_and_the_user_reach_the_container_start_but_secrets_not_the_pods_environment() {
    use cwsandbox_api::sandbox_v1::FileMount;
    let mut h = with_secret_store();
    let mut spec = client_spec();
    spec.containers[0].secret_stores =
        vec![secret("vault", "token", "", "API_TOKEN"), secret("vault", "db", "password", "DB_PASSWORD")];
    spec.containers[0].files = vec![FileMount { path: "/app/config.json".to_owned(), content: b"{}".to_vec() }];
    spec.containers[0].security_context =
        Some(cwsandbox_api::sandbox_v1::SecurityContext { run_as_user: Some(1000), ..Default::default() });
    let created = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(1);
    let effects = h.world.take_effects();
    let started = effects
        .iter()
        .find_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if *id == created.id => {
                Some(containers)
            }
            _ => None,
        })
        .expect("started");
    assert_eq!(started[0].env["API_TOKEN"], "t0ken");
    assert_eq!(started[0].env["DB_PASSWORD"], "pw");
    assert_eq!(started[0].files, vec![("/app/config.json".to_owned(), std::sync::Arc::from(&b"{}"[..]))]);
    assert_eq!(started[0].run_as, (Some(1000), None));
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    assert!(!pod.containers[0].env.contains_key("API_TOKEN"), "a Pod's views never show a secret's value");
}

#[test]
fn a_missing_store_secret_or_field_refuses_the_sandbox_naming_the_field_and_creates_nothing() {
    let mut h = with_secret_store();
    for (reference, field) in [
        (secret("nope", "token", "", "X"), "secretStores[0].storeName"),
        (secret("vault", "nope", "", "X"), "secretStores[0].secrets[0].path"),
        (secret("vault", "db", "nope", "X"), "secretStores[0].secrets[0].field"),
        (secret("vault", "token", "nope", "X"), "secretStores[0].secrets[0].field"),
    ] {
        let mut spec = client_spec();
        spec.containers[0].secret_stores = vec![reference];
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        assert_eq!(error.reason(), Some(Reason::SecretNotFound), "{error}");
        assert!(error.to_string().contains(field), "{field}: {error}");
    }
    // A secret with fields needs one named; an env var needs a name.
    for (reference, field) in
        [(secret("vault", "db", "", "X"), "secrets[0].field"), (secret("vault", "token", "", ""), "secrets[0].envVar")]
    {
        let mut spec = client_spec();
        spec.containers[0].secret_stores = vec![reference];
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        assert!(matches!(error, SimError::InvalidArgument { .. }), "{error}");
        assert!(error.to_string().contains(field), "{field}: {error}");
    }
    assert!(h.world.list_sandboxes("default-org", &SandboxFilter::default(), 0, "").unwrap().0.is_empty());
}

/// `image_pull_credentials`: a secret with username and password, or a docker config.json (whole
/// or one field), for the image's own registry; the pull gets them, the Pod's views never do.
#[test]
fn image_pull_credentials_resolve_to_the_pull_and_bad_ones_are_named() {
    use cwsandbox_api::sandbox_v1::{ImagePullCredentials, SecretSource};
    use cwsandbox_sim::config::{SecretStoreValues, SecretValue};
    use cwsandbox_sim::k8s::PullSecret;
    use cwsandbox_sim::world::ImageToPull;
    let config = r#"{"auths":{"registry.example.test":{"auth":"dTpw"}}}"#;
    let mut values = Values::scenario(Scenario::Ready);
    let fields = |pairs: &[(&str, &str)]| {
        SecretValue::Fields(pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect())
    };
    values.secret_stores.insert(
        "registry".to_owned(),
        SecretStoreValues {
            secrets: [
                ("login".to_owned(), fields(&[("username", "u"), ("password", "p")])),
                ("config".to_owned(), SecretValue::Whole(config.to_owned())),
                ("k8s".to_owned(), fields(&[(".dockerconfigjson", config)])),
                ("plain".to_owned(), SecretValue::Whole("not json".to_owned())),
                ("half".to_owned(), fields(&[("username", "u")])),
            ]
            .into_iter()
            .collect(),
            ..SecretStoreValues::default()
        },
    );
    let mut h = harness_with(values);
    h.world.set_pulls_images(true);
    let asking = |registry: &str, store: &str, path: &str, field: &str| {
        let mut spec = client_spec();
        spec.containers[0].image = "registry.example.test/team/app:1".to_owned();
        spec.containers[0].image_pull_credentials = Some(ImagePullCredentials {
            registry: registry.to_owned(),
            credentials: Some(SecretSource {
                store_name: store.to_owned(),
                path: path.to_owned(),
                field: field.to_owned(),
            }),
        });
        spec
    };
    for (path, field, expected) in [
        ("login", "", PullSecret::Basic { username: "u".to_owned(), password: "p".to_owned() }),
        ("config", "", PullSecret::DockerConfigJson(config.to_owned())),
        ("k8s", ".dockerconfigjson", PullSecret::DockerConfigJson(config.to_owned())),
    ] {
        let created =
            h.world.create_sandbox(&alice(), asking("registry.example.test", "registry", path, field), "", "").unwrap();
        h.advance(1);
        let pulls: Vec<Vec<ImageToPull>> = h
            .world
            .take_effects()
            .into_iter()
            .filter_map(|effect| match effect {
                Effect::PullImages { pod_uid, images } if *pod_uid == *created.pod_uid => Some(images),
                _ => None,
            })
            .collect();
        let [images] = pulls.as_slice() else { panic!("one pull: {pulls:?}") };
        let secret = images[0].credentials.as_ref().expect("credentials");
        assert_eq!((secret.registry.as_str(), &secret.secret), ("registry.example.test", &expected));
        assert!(!format!("{secret:?}").contains("\"p\""), "Debug hides the secret: {secret:?}");
    }
    for (spec, field, reason) in [
        (asking("ghcr.io", "registry", "login", ""), "imagePullCredentials.registry", None),
        (asking("", "registry", "login", ""), "imagePullCredentials.registry", None),
        (asking("registry.example.test", "nope", "login", ""), "credentials.storeName", Some(Reason::SecretNotFound)),
        (asking("registry.example.test", "registry", "nope", ""), "credentials.path", Some(Reason::SecretNotFound)),
        (asking("registry.example.test", "registry", "plain", ""), "credentials.path", None),
        (asking("registry.example.test", "registry", "half", ""), "credentials.field", None),
        (asking("registry.example.test", "registry", "k8s", "nope"), "credentials.field", Some(Reason::SecretNotFound)),
    ] {
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        assert!(error.to_string().contains(field), "{field}: {error}");
        match reason {
            Some(reason) => assert_eq!(error.reason(), Some(reason), "{error}"),
            None => assert!(matches!(error, SimError::InvalidArgument { .. }), "{error:?}"),
        }
    }
}

#[test]
fn mounted_files_need_absolute_plain_paths_outside_proc_and_dev() {
    use cwsandbox_api::sandbox_v1::FileMount;
    let mut h = ready();
    for path in ["relative", "/", "/a/../b", "/a//b", "/proc/x", "/dev/null"] {
        let mut spec = client_spec();
        spec.containers[0].files = vec![FileMount { path: path.to_owned(), content: Vec::new() }];
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        assert_eq!(error.violations()[0].field, "sandbox.spec.containers[0].files[0].path", "{path}");
    }
}

#[test]
fn a_stopped_sandbox_reports_how_its_main_process_ended_unless_the_values_say_otherwise() {
    // Honours SIGTERM by exiting 0 (the client's default command): 0.
    let mut h = ready();
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &created.id, 10).unwrap();
    h.world.pod_exited(&created.pod_uid, 0);
    let ended = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!((ended.state, ended.exit_code), (SandboxState::Completed, Some(0)));
    // Ended by SIGTERM: 143.
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &created.id, 10).unwrap();
    h.world.pod_exited(&created.pod_uid, 143);
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().exit_code, Some(143));
    // Still running when the grace ends: killed, 137.
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &created.id, 10).unwrap();
    h.advance(11);
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().exit_code, Some(137));

    let mut values = Values::scenario(Scenario::Ready);
    values.sandboxes.exit_code_after_stop = false;
    let mut h = harness_with(values);
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &created.id, 10).unwrap();
    h.world.pod_exited(&created.pod_uid, 143);
    let ended = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!((ended.state, ended.exit_code), (SandboxState::Completed, None), "gateway-initiated stops stamp none");
}

#[test]
fn a_container_the_host_cannot_start_fails_the_sandbox_with_the_hosts_reason() {
    let mut h = ready();
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.pod_start_failed(&created.pod_uid, "mounted file /usr/x: read-only");
    let ended = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(ended.state, SandboxState::Failed);
    assert_eq!(ended.state_reason, "StartError: mounted file /usr/x: read-only");
    assert_eq!(ended.exit_code, Some(128));
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    assert_eq!(pod.reason.as_deref(), Some("StartError"));
}

#[test]
fn a_side_containers_end_reported_before_the_hosts_start_report_is_kept() {
    use cwsandbox_api::sandbox_v1::Container;
    use cwsandbox_sim::k8s::ContainerState;
    let mut h = ready();
    h.world.set_host_confirms_starts(true);
    let mut spec = client_spec();
    spec.containers[0].name = "app".to_owned();
    spec.containers[0].primary = Some(true);
    spec.containers.push(Container { name: "migrate".to_owned(), primary: None, ..spec.containers[0].clone() });
    let created = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(1);
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().state, SandboxState::Creating);
    // The side container exits at once; its end reaches the world before the start report.
    h.world.container_exited(&created.pod_uid, "migrate", 3);
    let running = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(running.state, SandboxState::Running, "an ended container had started");
    assert_eq!(running.ended_containers, [("migrate".to_owned(), 3)]);
    // The late start report changes nothing: the side container stays ended.
    h.world.pod_host_started(&created.pod_uid);
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    let migrate = pod.containers.iter().find(|container| container.name == "migrate").unwrap();
    assert!(matches!(migrate.state, ContainerState::Terminated { exit_code: 3, .. }), "{:?}", migrate.state);
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().ended_containers.len(), 1);
}

#[test]
fn with_a_host_attached_a_deleted_sandbox_ends_only_once_the_host_ended_its_processes() {
    use cwsandbox_sim::sandbox::HostWait;
    let mut h = ready();
    h.world.set_host_confirms_starts(true);
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.pod_host_started(&created.pod_uid);
    assert_eq!(h.world.awaits_host(&created.pod_uid), None, "running: nothing awaited");
    h.world.take_effects();

    let deleting = h.world.delete_sandbox("default-org", &created.id, 30).unwrap();
    assert_eq!(deleting.state, SandboxState::Terminating);
    assert!(deleting.may_await_stop());
    assert_eq!(h.world.awaits_host(&created.pod_uid), Some(HostWait::Stop), "asked to stop its processes");
    // The processes honour SIGTERM: their exit removes the Pod, whose leftovers the host kills.
    h.world.pod_exited(&created.pod_uid, 0);
    assert!(h.world.cluster.pod(&created.pod_uid).is_none(), "the Pod object is gone");
    let effects = h.world.take_effects();
    assert!(effects.iter().any(|effect| matches!(effect, Effect::KillPod { pod_uid } if *pod_uid == created.pod_uid)));
    let killing = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(killing.state, SandboxState::Terminating, "not ended while the kill is applied");
    assert_eq!(h.world.awaits_host(&created.pod_uid), Some(HostWait::Stop));

    h.world.pod_host_killed(&created.pod_uid);
    let ended = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert!(ended.state.is_terminal(), "{:?}", ended.state);
    assert!(!ended.may_await_stop());
    assert_eq!(h.world.awaits_host(&created.pod_uid), None);
    // A second report, or one for a Pod nobody waits on, changes nothing.
    h.world.pod_host_killed(&created.pod_uid);
    h.world.pod_host_killed("no-such-pod");
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().state, ended.state);
}

#[test]
fn without_a_host_a_deleted_sandbox_ends_with_its_pod() {
    let mut h = ready();
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &created.id, 30).unwrap();
    assert_eq!(h.world.awaits_host(&created.pod_uid), None, "no host to wait for");
    h.world.pod_exited(&created.pod_uid, 0);
    assert!(h.world.get_sandbox("default-org", &created.id).unwrap().state.is_terminal());
}

#[test]
fn with_a_host_attached_a_sandbox_is_running_only_once_the_host_started_its_containers() {
    use cwsandbox_sim::k8s::{ContainerState, PodPhase};
    use cwsandbox_sim::sandbox::{CONTAINER_CREATING, HostWait};
    let mut h = ready();
    h.world.set_host_confirms_starts(true);
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    // Placed and asked to start, but the host has not said it did.
    let effects = h.world.take_effects();
    assert!(effects.iter().any(|effect| matches!(effect, Effect::StartPod(_))), "{effects:?}");
    let creating = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!((creating.state, creating.state_reason.as_str()), (SandboxState::Creating, CONTAINER_CREATING));
    assert_eq!(creating.started, None);
    assert_eq!(h.world.awaits_host(&created.pod_uid), Some(HostWait::Start));
    assert!(creating.may_await_host());
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    assert_eq!(pod.shown_phase(), PodPhase::Pending, "kubectl shows it Pending, ContainerCreating");
    assert!(
        pod.containers.iter().all(
            |container| matches!(&container.state, ContainerState::Waiting(reason) if reason == "ContainerCreating")
        )
    );
    let started_events = |h: &Harness| {
        h.world
            .cluster
            .events
            .iter()
            .filter(|event| event.reason == "Started" && event.involved.uid == created.pod_uid)
            .count()
    };
    assert_eq!(started_events(&h), 0);

    h.world.pod_host_started(&created.pod_uid);
    let running = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(running.state, SandboxState::Running);
    assert!(running.started.is_some());
    assert_eq!(h.world.awaits_host(&created.pod_uid), None);
    assert_eq!(h.world.cluster.pod(&created.pod_uid).unwrap().shown_phase(), PodPhase::Running);
    assert!(!running.may_await_host(), "a running sandbox's readers skip the query");
    assert_eq!(started_events(&h), 1, "one Started Event for its one container");
    // A second report changes nothing.
    h.world.pod_host_started(&created.pod_uid);
    assert_eq!(started_events(&h), 1);

    // A container the host cannot start fails the sandbox before it ever reads RUNNING.
    let failing = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    assert_eq!(h.world.get_sandbox("default-org", &failing.id).unwrap().state, SandboxState::Creating);
    h.world.pod_start_failed(&failing.pod_uid, "exec: \"nope\": not found");
    let failed = h.world.get_sandbox("default-org", &failing.id).unwrap();
    assert_eq!(failed.state, SandboxState::Failed);
    assert_eq!(h.world.awaits_host(&failing.pod_uid), None);

    // Deleted while the host starts it: the host is told to stop it all the same.
    let deleted = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    h.advance(1);
    h.world.take_effects();
    h.world.delete_sandbox("default-org", &deleted.id, 10).unwrap();
    let effects = h.world.take_effects();
    assert!(
        effects.iter().any(|effect| matches!(effect, Effect::StopPod { pod_uid, .. } if *pod_uid == deleted.pod_uid)),
        "{effects:?}"
    );
}

#[test]
fn scratch_volumes_reach_the_container_start_and_bad_volumes_and_mounts_are_named() {
    use cwsandbox_api::sandbox_v1::{SandboxVolume, VolumeMount, sandbox_volume::Source};
    let scratch =
        |name: &str| SandboxVolume { name: name.to_owned(), source: Some(Source::Scratch(Default::default())) };
    let mount = |volume: &str, path: &str| VolumeMount {
        volume: volume.to_owned(),
        mount_path: path.to_owned(),
        sub_path: "part/".to_owned(),
        read_only: true,
    };
    let mut h = ready();
    let mut spec = client_spec();
    spec.volumes = vec![scratch("work")];
    spec.containers[0].volume_mounts = vec![mount("work", "/data")];
    let created = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(1);
    let started = h
        .world
        .take_effects()
        .into_iter()
        .find_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if id == created.id => {
                Some(containers)
            }
            _ => None,
        })
        .expect("started");
    let mounts = &started[0].volume_mounts;
    assert_eq!(mounts.len(), 1);
    assert_eq!((mounts[0].volume.as_str(), mounts[0].path.as_str(), mounts[0].read_only), ("work", "/data", true));
    assert_eq!(mounts[0].sub_path, "part", "the sub-path is relative to the volume");

    let cases: [(Vec<SandboxVolume>, VolumeMount, &str); 5] = [
        (vec![scratch("work")], mount("other", "/data"), "sandbox.spec.containers[0].volumeMounts[0].volume"),
        (vec![scratch("work")], mount("work", "data"), "sandbox.spec.containers[0].volumeMounts[0].mountPath"),
        (
            vec![scratch("work")],
            VolumeMount { sub_path: "../up".to_owned(), ..mount("work", "/data") },
            "sandbox.spec.containers[0].volumeMounts[0].subPath",
        ),
        (vec![scratch("Work_1")], mount("Work_1", "/data"), "sandbox.spec.volumes[0].name"),
        (vec![scratch("work"), scratch("work")], mount("work", "/data"), "sandbox.spec.volumes[1].name"),
    ];
    for (volumes, mount, field) in cases {
        let mut spec = client_spec();
        spec.volumes = volumes;
        spec.containers[0].volume_mounts = vec![mount];
        let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
        assert_eq!(error.violations()[0].field, field);
    }
}

#[test]
fn a_sandbox_slurm_refused_ends_at_once_when_deleted() {
    let mut h = ready();
    let mut spec = client_spec();
    spec.annotations.insert("sunk.coreweave.com/partition".to_owned(), "nope".to_owned());
    let created = h.world.create_sandbox(&alice(), spec, "", "req-refused").unwrap();
    h.advance(1);
    let pending = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(pending.state, SandboxState::Pending, "{}", pending.state_reason);
    assert!(pending.state_reason.contains("Invalid partition"), "{}", pending.state_reason);
    // Never bound, nothing runs: the Pod goes without a grace period, and the sandbox with it.
    let deleted = h.world.delete_sandbox("default-org", &created.id, 0).unwrap();
    assert_eq!(deleted.state, SandboxState::Completed, "{}", deleted.state_reason);
    assert_eq!(deleted.state_reason, "deleted by its owner");
}

#[test]
fn a_stop_and_a_delete_leave_different_reasons() {
    let mut h = ready();
    let stopped = h.world.create_sandbox(&alice(), client_spec(), "", "req-stop").unwrap();
    let deleted = h.world.create_sandbox(&alice(), client_spec(), "", "req-delete").unwrap();
    h.advance(1);
    h.world.delete_sandbox("default-org", &stopped.id, 5).unwrap();
    h.world.delete_sandbox("default-org", &deleted.id, 0).unwrap();
    // The processes are gone (the host reports it): both Pods finish their termination.
    for id in [&stopped.id, &deleted.id] {
        h.world.sandbox_exited(id, 143);
    }
    h.advance(31);
    let stopped = h.world.get_sandbox("default-org", &stopped.id).unwrap();
    let deleted = h.world.get_sandbox("default-org", &deleted.id).unwrap();
    assert_eq!((stopped.state, deleted.state), (SandboxState::Completed, SandboxState::Completed));
    assert_eq!(stopped.state_reason, "stopped by its owner (grace period 5s)");
    assert_eq!(deleted.state_reason, "deleted by its owner");
}

#[test]
fn the_journal_reports_each_state_and_reason_change_once() {
    let mut h = ready();
    h.world.take_sandbox_changes();
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "req-journal").unwrap();
    let changes = h.world.take_sandbox_changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((changes[0].sandbox_id.as_str(), changes[0].state), (created.id.as_str(), SandboxState::Pending));
    assert!(changes[0].reason.contains("prolog"), "{changes:?}");
    assert!(h.world.take_sandbox_changes().is_empty(), "nothing new, nothing reported");
    h.advance(1);
    let changes = h.world.take_sandbox_changes();
    assert_eq!(changes.iter().map(|change| change.state).collect::<Vec<_>>(), vec![SandboxState::Running]);
    h.world.delete_sandbox("default-org", &created.id, 0).unwrap();
    h.world.sandbox_exited(&created.id, 143);
    h.advance(1);
    let states: Vec<_> =
        h.world.take_sandbox_changes().into_iter().map(|change| (change.state, change.reason)).collect();
    assert_eq!(states.last(), Some(&(SandboxState::Completed, "deleted by its owner".to_owned())), "{states:?}");
}

#[test]
fn the_data_target_query_finds_one_running_container_through_either_front_door() {
    use cwsandbox_sim::data_target::{
        AwaitsHostStart, PodDataRefusal, PodNeeds, PodRefusal, SandboxDataRefusal, SandboxNeeds,
    };
    let mut h = ready();
    h.world.set_host_confirms_starts(true);
    let created = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    let main = created.resolved.containers[0].name.clone();
    let by_id = |h: &Harness, org: &str, container: &str, needs| {
        h.world.get_sandbox(org, &created.id).map_err(SandboxDataRefusal::NoSandbox)?.data_target(container, needs)
    };
    let by_pod = |h: &Harness, scope: &Scope, container: &str, needs| {
        h.world.pod_data_target(scope, &created.namespace, &created.pod_name, container, needs)
    };
    let operator = Scope::Cluster;

    // Pending in Slurm: nothing to wait for on the sandbox API; the Pod has no Node yet.
    let pending = by_id(&h, "default-org", "", SandboxNeeds::Running).unwrap_err();
    assert!(matches!(&pending, SandboxDataRefusal::NotRunning(view) if view.state == SandboxState::Pending));
    assert_eq!(pending.awaits_start_of(), Some(created.pod_uid.as_str()), "a Pending sandbox may still start");

    // Placed, the host not yet started: both refusals say which Pod to wait for.
    h.advance(1);
    let creating = by_id(&h, "default-org", "", SandboxNeeds::Running).unwrap_err();
    assert_eq!(creating.awaits_start_of(), Some(created.pod_uid.as_str()));
    let not_started = by_pod(&h, &operator, "", PodNeeds::Exec).unwrap_err();
    assert_eq!(not_started, PodDataRefusal::NotStarted { container: main.clone(), pod_uid: created.pod_uid.clone() });
    assert_eq!(not_started.awaits_start_of(), Some(created.pod_uid.as_str()));

    // Started: the same target either way, the main container when none is named.
    h.world.pod_host_started(&created.pod_uid);
    let target = by_id(&h, "default-org", "", SandboxNeeds::Running).unwrap();
    assert_eq!((target.sandbox_id.as_str(), target.pod_uid.as_str()), (created.id.as_str(), created.pod_uid.as_str()));
    assert_eq!(target.container, main);
    assert_eq!(by_pod(&h, &operator, "", PodNeeds::Exec).unwrap(), target);
    assert_eq!(by_pod(&h, &Scope::Organization("default-org".to_owned()), &main, PodNeeds::Logs).unwrap(), target);

    // Each front door's own refusals, none of which waiting can change.
    let other_org = by_id(&h, "other-org", "", SandboxNeeds::Running).unwrap_err();
    assert!(matches!(
        &other_org,
        SandboxDataRefusal::NoSandbox(SimError::NotFound { reason: Reason::SandboxNotFound, .. })
    ));
    assert_eq!(other_org.awaits_start_of(), None);
    assert_eq!(by_id(&h, "default-org", "nope", SandboxNeeds::Running), Err(SandboxDataRefusal::NoSuchContainer));
    let hidden = by_pod(&h, &Scope::Organization("other-org".to_owned()), "", PodNeeds::Exec);
    assert_eq!(
        hidden,
        Err(PodDataRefusal::Pod(PodRefusal::NotFound)),
        "another organization's Pod does not exist for it"
    );
    assert_eq!(
        by_pod(&h, &operator, "nope", PodNeeds::Exec),
        Err(PodDataRefusal::Pod(PodRefusal::ContainerNotValid { container: "nope".to_owned() }))
    );
    let slurmd = h.world.cluster.pods_iter().find(|pod| pod.namespace.as_str() == "tenant-slurm").unwrap();
    let (namespace, name) = (slurmd.namespace.to_string(), slurmd.name.to_string());
    assert_eq!(
        h.world.pod_data_target(&operator, &namespace, &name, "", PodNeeds::Logs),
        Err(PodDataRefusal::NoProcess)
    );

    // Ended: logs still have a target, exec has none.
    h.world.delete_sandbox("default-org", &created.id, 0).unwrap();
    let terminating = by_pod(&h, &operator, "", PodNeeds::Exec).unwrap_err();
    assert_eq!(terminating, PodDataRefusal::SandboxNotReady { container: main.clone() });
    assert_eq!(terminating.awaits_start_of(), None, "a stopping sandbox is not waited for");
    h.world.pod_exited(&created.pod_uid, 0);
    h.world.pod_host_killed(&created.pod_uid);
    let ended = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert!(ended.state.is_terminal(), "{:?}", ended.state);
    assert!(matches!(by_id(&h, "default-org", "", SandboxNeeds::Running), Err(SandboxDataRefusal::NotRunning(_))));
    assert_eq!(by_id(&h, "default-org", "", SandboxNeeds::RunningOrEnded).unwrap(), target);
}

/// A named RuntimeClass the policy allows but the host's Nodes do not have: no runner can host
/// the sandbox (FAILED_PRECONDITION, CWSANDBOX_NO_SUITABLE_RUNNER) and nothing is made; one the
/// Nodes have, or any class where no host runs Pods, is accepted.
#[test]
fn a_runtime_class_the_nodes_lack_is_refused_as_no_runner_can_host_it() {
    let mut h = ready_with_runtime_classes(serde_json::json!({"allowedRuntimeClasses": ["gvisor", "kata"]}), &[]);
    let asking = |class: &str| SandboxSpec { runtime_class: class.to_owned(), ..client_spec() };

    let error = h.world.create_sandbox(&alice(), asking("gvisor"), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NoSuitableRunner));
    assert!(matches!(error, SimError::FailedPrecondition { .. }), "{error:?}");
    assert!(error.to_string().contains("RuntimeClass \"gvisor\""), "{error}");
    assert_eq!(h.world.every_sandbox().count(), 0, "nothing was made");
    // No class asked: the node's default runtime, which every Node has.
    h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();

    h.world.set_runtime_classes(Some(vec!["kata".to_owned()]));
    h.world.create_sandbox(&alice(), asking("kata"), "", "").unwrap();
    assert_eq!(
        h.world.create_sandbox(&alice(), asking("gvisor"), "", "").unwrap_err().reason(),
        Some(Reason::NoSuitableRunner)
    );

    h.world.set_runtime_classes(None);
    h.world.create_sandbox(&alice(), asking("gvisor"), "", "").unwrap();
}

/// A RuntimeClass the Nodes have: the Pod runs with it (`runtimeClassName`, as kubectl shows it),
/// and the host is asked to start it with that class's handler; a sandbox without one gets none.
#[test]
fn a_runtime_class_the_nodes_have_reaches_the_pod_and_its_start() {
    let mut h = ready_with_runtime_classes(serde_json::json!({"allowedRuntimeClasses": ["gvisor"]}), &["gvisor"]);
    let pinned = h
        .world
        .create_sandbox(&alice(), SandboxSpec { runtime_class: "gvisor".to_owned(), ..client_spec() }, "", "")
        .unwrap();
    let plain = h.world.create_sandbox(&alice(), client_spec(), "", "").unwrap();
    assert_eq!(pinned.resolved.runtime_class.as_deref(), Some("gvisor"));
    h.advance(1);
    let effects = h.world.take_effects();
    let class_of = |sandbox: &str| {
        effects.iter().find_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), runtime_class, .. }) if **id == *sandbox => {
                Some(runtime_class.clone())
            }
            _ => None,
        })
    };
    assert_eq!(class_of(&pinned.id), Some(Some("gvisor".to_owned())), "{effects:?}");
    assert_eq!(class_of(&plain.id), Some(None), "{effects:?}");
    let pod = h.world.cluster.pod(&pinned.pod_uid).unwrap();
    assert_eq!(pod.extra_spec.get("runtimeClassName"), Some(&serde_json::json!("gvisor")));
    assert!(!h.world.cluster.pod(&plain.pod_uid).unwrap().extra_spec.contains_key("runtimeClassName"));
}

/// An abstract class the policy maps to a RuntimeClass the Nodes have (`runtimeClassMappings`:
/// CPU_NESTED_VIRT → gvisor) runs with that class; echoed as the class it resolved to.
#[test]
fn a_runtime_class_selection_mapped_to_gvisor_runs_with_it() {
    use cwsandbox_api::sandbox_v1::RuntimeClass;
    let mappings = serde_json::json!([
        {"runtimeClass": "RUNTIME_CLASS_CPU_NESTED_VIRT", "kubernetesRuntimeClassName": "gvisor"}
    ]);
    let mut h = ready_with_runtime_classes(serde_json::json!({"runtimeClassMappings": mappings}), &["gvisor"]);
    let spec = SandboxSpec { runtime_class_selection: RuntimeClass::CpuNestedVirt as i32, ..client_spec() };
    let created = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    assert_eq!(created.resolved.runtime_class.as_deref(), Some("gvisor"));
    let pod = h.world.cluster.pod(&created.pod_uid).unwrap();
    assert_eq!(pod.extra_spec.get("runtimeClassName"), Some(&serde_json::json!("gvisor")));
}

/// A sandbox of several containers with a RuntimeClass the host runs one container of per Pod:
/// refused by name (UNIMPLEMENTED, the containers named), nothing made; one container runs.
#[test]
fn several_containers_with_a_one_container_runtime_class_are_refused_by_name() {
    let mut h = ready_with_runtime_classes(serde_json::json!({"allowedRuntimeClasses": ["gvisor"]}), &["gvisor"]);
    h.world.set_one_container_runtime_classes(vec!["gvisor".to_owned()]);
    let mut spec = SandboxSpec { runtime_class: "gvisor".to_owned(), ..client_spec() };
    let mut side = spec.containers[0].clone();
    side.name = "side".to_owned();
    spec.containers.push(side);
    let error = h.world.create_sandbox(&alice(), spec.clone(), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NotImplemented), "{error:?}");
    assert_eq!(error.violations()[0].field, "sandbox.spec.containers", "{error:?}");
    assert_eq!(h.world.every_sandbox().count(), 0, "nothing was made");
    spec.containers.pop();
    h.world.create_sandbox(&alice(), spec, "", "").unwrap();
}
