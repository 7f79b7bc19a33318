//! The managed-runner registry against docs/facts/runner-api.md: the resource
//! (docs/facts/runner-api.md#managed-runner), etags and masks (docs/facts/runner-api.md#etag,
//! docs/facts/runner-api.md#update-mask), the life cycle (docs/facts/runner-api.md#create) and,
//! where the API is not public, the emulator's choices (docs/facts/runner-api.md#not-public).
//! One test per rule, named after it; each asserts exact codes, reasons, messages and fields.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use cwsandbox_api::sandbox_v1::{
    CidrBlock, EgressRule, MaintenancePolicy, MaintenanceWindow, ManagedRunner, ManagedRunnerSpec, Policy,
    ReleaseChannel, RunnerConnectionStatus, RunnerDataPlaneDisabled, RunnerDataPlaneSpec, RunnerDeploymentOverrides,
    RunnerIdentity, RunnerImagePullSpec, RunnerInstallError, RunnerInstallErrorReason, RunnerInstallStatus,
    RunnerTenantMetricsSpec, RunnerVolumesSpec, SandboxImagePullPolicy, UpdateManagedRunnerRequest, egress_rule,
    runner_data_plane_spec,
};
use cwsandbox_api::wkt::{FieldMask, Timestamp};
use cwsandbox_sim::machine::Transition;
use cwsandbox_sim::runners::{
    EXPLICIT_MASK_REQUIRED, RunnerRegistry, RunnerTimings, RunnerTransition, STALE_ETAG_MESSAGE, default_policy,
};
use cwsandbox_sim::time::SimTime;
use cwsandbox_sim::{FieldViolation, Reason, SimError};
use serde_json::json;

const ORG: &str = "org-a";

fn at(seconds: i64) -> SimTime {
    SimTime::from_secs(seconds)
}

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

fn policy(value: serde_json::Value) -> Policy {
    serde_json::from_value(value).expect("test policies are valid proto3 JSON")
}

fn runner(runner_id: &str) -> ManagedRunner {
    runner_in(runner_id, "us-east-04a", "cluster-a")
}

fn runner_in(runner_id: &str, zone: &str, cluster_id: &str) -> ManagedRunner {
    ManagedRunner {
        identity: Some(RunnerIdentity {
            runner_id: runner_id.to_owned(),
            zone: zone.to_owned(),
            cluster_id: cluster_id.to_owned(),
            ..RunnerIdentity::default()
        }),
        policy: Some(Policy::default()),
        ..ManagedRunner::default()
    }
}

fn mask(paths: &[&str]) -> FieldMask {
    FieldMask::new(paths.iter().copied())
}

fn identity(runner: &ManagedRunner) -> &RunnerIdentity {
    runner.identity.as_ref().expect("stored runners have an identity")
}

fn spec(runner: &ManagedRunner) -> &ManagedRunnerSpec {
    runner.spec.as_ref().expect("stored runners have a spec")
}

fn install_status(runner: &ManagedRunner) -> RunnerInstallStatus {
    RunnerInstallStatus::try_from(runner.install_status).expect("a known install status")
}

fn connection_status(runner: &ManagedRunner) -> RunnerConnectionStatus {
    RunnerConnectionStatus::try_from(runner.connection_status).expect("a known connection status")
}

/// A registry holding `runner_id` already READY at t=0.
fn with_ready(runner_id: &str) -> Result<RunnerRegistry> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner(runner_id), "", at(0))?;
    registry.advance(at(0));
    Ok(registry)
}

/// The reason and field violations of an INVALID_ARGUMENT, or a failure for anything else.
fn invalid_argument(result: Result<impl std::fmt::Debug, SimError>) -> Result<(Reason, Vec<FieldViolation>)> {
    match result {
        Err(SimError::InvalidArgument { reason, violations, .. }) => Ok((reason, violations)),
        other => bail!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

fn violation_fields(violations: &[FieldViolation]) -> Vec<&str> {
    violations.iter().map(|violation| violation.field.as_str()).collect()
}

fn assert_failed_precondition(result: Result<impl std::fmt::Debug, SimError>, reason: Reason, message: &str) {
    match result {
        Err(SimError::FailedPrecondition { reason: got_reason, message: got_message }) => {
            assert_eq!(got_reason, reason);
            assert_eq!(got_message, message);
        }
        other => panic!("expected FAILED_PRECONDITION, got {other:?}"),
    }
}

fn assert_runner_not_found(result: Result<impl std::fmt::Debug, SimError>, runner_id: &str) {
    match result {
        Err(SimError::NotFound { reason, message }) => {
            assert_eq!(reason, Reason::RunnerNotFound);
            assert_eq!(message, format!("runner {runner_id:?} not found"));
        }
        other => panic!("expected NOT_FOUND, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Create

#[test]
fn create_requires_identity_runner_id_zone_and_cluster_id() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let no_identity = ManagedRunner { policy: Some(Policy::default()), ..ManagedRunner::default() };
    let (reason, violations) = invalid_argument(registry.create(ORG, no_identity, "", at(0)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(
        violations,
        vec![
            FieldViolation::new("managed_runner.identity.runnerId", "required"),
            FieldViolation::new("managed_runner.identity.zone", "required"),
            FieldViolation::new("managed_runner.identity.clusterId", "required"),
        ]
    );
    let (_, violations) = invalid_argument(registry.create(ORG, runner_in("r1", "", "c1"), "", at(0)))?;
    assert_eq!(violation_fields(&violations), ["managed_runner.identity.zone"]);
    assert_eq!(registry.iter(ORG).count(), 0, "a failed create stores nothing");
    Ok(())
}

#[test]
fn create_requires_runner_id_to_be_a_dns_label() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    for bad in ["Runner-1", "runner_1", "-runner", "runner-", "run.ner", &"a".repeat(64)] {
        let (reason, violations) = invalid_argument(registry.create(ORG, runner(bad), "", at(0)))?;
        assert_eq!(reason, Reason::InvalidRequest);
        assert_eq!(violation_fields(&violations), ["managed_runner.identity.runnerId"], "{bad}");
        assert!(violations[0].description.contains("is not a DNS-1123 label"), "{:?}", violations[0]);
    }
    registry.create(ORG, runner(&"a".repeat(63)), "", at(0))?;
    registry.create(ORG, runner("0-runner-9"), "", at(0))?;
    Ok(())
}

#[test]
fn create_requires_a_policy_and_accepts_the_empty_one() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut no_policy = runner("runner-1");
    no_policy.policy = None;
    let (reason, violations) = invalid_argument(registry.create(ORG, no_policy, "", at(0)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violation_fields(&violations), ["managed_runner.policy"]);

    let created = registry.create(ORG, runner("runner-1"), "", at(0))?;
    assert_eq!(created.policy, Some(Policy::default()), "`{{}}` is stored as given, not as null");
    Ok(())
}

/// A validator that rejects policies named "bad", the way the real one reports problems: one
/// path rooted at `policy`, one relative to it.
fn rejecting_validator(policy: &Policy) -> Vec<FieldViolation> {
    if policy.display_name != "bad" {
        return Vec::new();
    }
    vec![
        FieldViolation::new("policy.base.spec.terminationGracePeriodSeconds", "field is managed by the platform"),
        FieldViolation::new("constraints.lifecycle.defaultLifetimeSeconds", "must be at most 2592000"),
    ]
}

#[test]
fn create_surfaces_policy_validator_violations() -> Result<()> {
    let mut registry = RunnerRegistry::default().with_policy_validator(rejecting_validator);
    let mut bad = runner("runner-1");
    bad.policy = Some(Policy { display_name: "bad".into(), ..Policy::default() });
    let (reason, violations) = invalid_argument(registry.create(ORG, bad, "", at(0)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(
        violations,
        vec![
            FieldViolation::new(
                "managed_runner.policy.base.spec.terminationGracePeriodSeconds",
                "field is managed by the platform"
            ),
            FieldViolation::new(
                "managed_runner.policy.constraints.lifecycle.defaultLifetimeSeconds",
                "must be at most 2592000"
            ),
        ]
    );
    assert_runner_not_found(registry.get(ORG, "runner-1"), "runner-1");
    Ok(())
}

#[test]
fn create_ignores_output_only_fields() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut input = runner("runner-1");
    input.etag = "forged".into();
    input.install_status = RunnerInstallStatus::Ready as i32;
    input.connection_status = RunnerConnectionStatus::Connected as i32;
    input.active_config_version = "v9".into();
    input.active_revision = 99;
    input.target_revision = 100;
    input.update_available = true;
    input.rollout_in_progress = true;
    input.install_error = Some(RunnerInstallError { message: "forged".into(), ..RunnerInstallError::default() });
    input.create_time = Some(ts(5));
    input.update_time = Some(ts(6));
    input.last_heartbeat_time = Some(ts(7));
    if let Some(identity) = input.identity.as_mut() {
        identity.cluster_name = "forged-name".into();
    }

    let created = registry.create(ORG, input, "", at(1))?;
    assert_ne!(created.etag, "forged");
    assert_eq!(install_status(&created), RunnerInstallStatus::Pending);
    assert_eq!(connection_status(&created), RunnerConnectionStatus::Disconnected);
    assert_eq!(created.active_config_version, "rev-1");
    assert_eq!((created.active_revision, created.target_revision), (1, 1));
    assert!(!created.update_available);
    assert!(!created.rollout_in_progress);
    assert_eq!(created.install_error, None);
    assert_eq!(created.deployment_spec, None);
    assert_eq!(created.data_plane_status, None);
    assert_eq!(created.create_time, Some(ts(1)));
    assert_eq!(created.update_time, Some(ts(1)));
    assert_eq!(created.last_heartbeat_time, None);
    assert_eq!(identity(&created).cluster_name, "cluster-a");
    Ok(())
}

#[test]
fn create_lowercases_the_zone() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let created = registry.create(ORG, runner_in("runner-1", "US-East-04A", "cluster-a"), "", at(0))?;
    assert_eq!(identity(&created).zone, "us-east-04a");
    Ok(())
}

#[test]
fn create_defaults_runner_group_id_to_default() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let created = registry.create(ORG, runner("runner-1"), "", at(0))?;
    assert_eq!(identity(&created).runner_group_id, "default");

    let mut grouped = runner("runner-2");
    if let Some(identity) = grouped.identity.as_mut() {
        identity.runner_group_id = "gpu".into();
    }
    assert_eq!(identity(&registry.create(ORG, grouped, "", at(0))?).runner_group_id, "gpu");
    Ok(())
}

#[test]
fn create_turns_an_unspecified_release_channel_into_stable() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let created = registry.create(ORG, runner("no-spec"), "", at(0))?;
    assert_eq!(spec(&created).release_channel, ReleaseChannel::Stable as i32);

    let mut rapid = runner("rapid");
    rapid.spec = Some(ManagedRunnerSpec { release_channel: ReleaseChannel::Rapid as i32, ..Default::default() });
    assert_eq!(spec(&registry.create(ORG, rapid, "", at(0))?).release_channel, ReleaseChannel::Rapid as i32);

    let mut unknown = runner("unknown");
    unknown.spec = Some(ManagedRunnerSpec { release_channel: 9, ..Default::default() });
    let (_, violations) = invalid_argument(registry.create(ORG, unknown, "", at(0)))?;
    assert_eq!(
        violations,
        vec![FieldViolation::new("managed_runner.spec.releaseChannel", "unknown release channel 9")]
    );
    Ok(())
}

#[test]
fn create_rejects_allow_privileged_profile_annotations() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut legacy = runner("runner-1");
    legacy.spec = Some(ManagedRunnerSpec { allow_privileged_profile_annotations: true, ..Default::default() });
    let (reason, violations) = invalid_argument(registry.create(ORG, legacy, "", at(0)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violation_fields(&violations), ["managed_runner.spec.allowPrivilegedProfileAnnotations"]);
    Ok(())
}

#[test]
fn create_limits_request_id_to_128_utf8_bytes() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner("ascii-128"), &"r".repeat(128), at(0))?;
    registry.create(ORG, runner("utf8-128"), &"é".repeat(64), at(0))?;

    let (reason, violations) = invalid_argument(registry.create(ORG, runner("ascii-129"), &"r".repeat(129), at(0)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violations, vec![FieldViolation::new("request_id", "must be at most 128 bytes of UTF-8, got 129")]);
    // 65 characters, but 130 bytes: the limit counts bytes.
    let (_, violations) = invalid_argument(registry.create(ORG, runner("utf8-130"), &"é".repeat(65), at(0)))?;
    assert_eq!(violations, vec![FieldViolation::new("request_id", "must be at most 128 bytes of UTF-8, got 130")]);
    Ok(())
}

#[test]
fn create_with_the_same_request_id_and_identical_input_returns_the_same_runner() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let first = registry.create(ORG, runner("runner-1"), "req-1", at(0))?;
    registry.advance(at(0));
    let mut replay = runner("runner-1");
    // Output-only fields are not input, so they do not make the replay different.
    replay.etag = "whatever".into();
    replay.active_revision = 7;
    let again = registry.create(ORG, replay, "req-1", at(5))?;
    assert_eq!(identity(&again), identity(&first));
    assert_eq!(again.etag, first.etag);
    assert_eq!(again.create_time, Some(ts(0)), "no second runner was made");
    assert_eq!(install_status(&again), RunnerInstallStatus::Ready, "the runner as it is now");
    assert_eq!(registry.iter(ORG).count(), 1);
    Ok(())
}

#[test]
fn create_with_the_same_request_id_and_different_input_is_a_request_id_conflict() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner("runner-1"), "req-1", at(0))?;
    let mut changed = runner("runner-1");
    changed.display_name = "other".into();
    for different in [changed, runner("runner-2")] {
        match registry.create(ORG, different, "req-1", at(1)) {
            Err(SimError::InvalidArgument { reason, message, violations }) => {
                assert_eq!(reason, Reason::RequestIdConflict);
                assert_eq!(message, "request_id \"req-1\" was already used with a different request");
                assert_eq!(violation_fields(&violations), ["request_id"]);
            }
            other => bail!("expected a request id conflict, got {other:?}"),
        }
    }
    assert_eq!(registry.iter(ORG).count(), 1);
    Ok(())
}

#[test]
fn create_of_an_existing_runner_id_with_another_request_id_is_already_exists() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner("runner-1"), "req-1", at(0))?;
    for request_id in ["req-2", ""] {
        match registry.create(ORG, runner("runner-1"), request_id, at(1)) {
            Err(SimError::AlreadyExists { reason, message }) => {
                assert_eq!(reason, Reason::AlreadyExists);
                assert_eq!(message, "runner \"runner-1\" already exists");
            }
            other => bail!("expected ALREADY_EXISTS, got {other:?}"),
        }
    }
    Ok(())
}

#[test]
fn create_gives_an_opaque_etag_for_policy_revision_one() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let one = registry.create(ORG, runner("runner-1"), "", at(0))?;
    let two = registry.create(ORG, runner("runner-2"), "", at(0))?;
    assert!(!one.etag.is_empty());
    assert!(!one.etag.contains("runner-1"), "the etag is opaque: {}", one.etag);
    assert_ne!(one.etag, two.etag, "etags are per runner");
    assert_eq!(registry.get(ORG, "runner-1")?.etag, one.etag, "reading does not change it");
    Ok(())
}

#[test]
fn create_resolves_cluster_name_from_the_cluster_id() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    assert_eq!(identity(&registry.create(ORG, runner("runner-1"), "", at(0))?).cluster_name, "cluster-a");

    let mut named = RunnerRegistry::default().with_cluster_names([("8c1f-uuid".to_owned(), "prod-east".to_owned())]);
    let created = named.create(ORG, runner_in("runner-1", "us-east-04a", "8c1f-uuid"), "", at(0))?;
    assert_eq!(identity(&created).cluster_id, "8c1f-uuid");
    assert_eq!(identity(&created).cluster_name, "prod-east");
    Ok(())
}

#[test]
fn create_sets_create_and_update_time_from_now() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let created = registry.create(ORG, runner("runner-1"), "", SimTime::from_millis(1_700_000_000_250))?;
    let expected = Timestamp { seconds: 1_700_000_000, nanos: 250_000_000 };
    assert_eq!(created.create_time, Some(expected));
    assert_eq!(created.update_time, Some(expected));
    Ok(())
}

#[test]
fn runner_ids_and_request_ids_are_unique_per_org() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create("org-a", runner("runner-1"), "req-1", at(0))?;
    let mut other = runner("runner-1");
    other.display_name = "org b's".into();
    registry.create("org-b", other, "req-1", at(0))?;
    assert_eq!(registry.get("org-b", "runner-1")?.display_name, "org b's");
    assert_eq!(registry.get("org-a", "runner-1")?.display_name, "");
    assert_runner_not_found(registry.get("org-c", "runner-1"), "runner-1");
    let (page, _) = registry.list("org-b", 0, "", "", "")?;
    assert_eq!(page.len(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Install, delete and rollout state machines

#[test]
fn install_goes_pending_provisioning_ready_after_the_install_delay() -> Result<()> {
    let timings = RunnerTimings { install_delay: Duration::from_secs(10), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    let created = registry.create(ORG, runner("runner-1"), "", at(100))?;
    assert_eq!(install_status(&created), RunnerInstallStatus::Pending);

    registry.advance(at(100));
    let provisioning = registry.get(ORG, "runner-1")?;
    assert_eq!(install_status(&provisioning), RunnerInstallStatus::Provisioning);
    assert_eq!(connection_status(&provisioning), RunnerConnectionStatus::Disconnected);

    registry.advance(SimTime::from_millis(109_999));
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Provisioning);

    registry.advance(at(110));
    let ready = registry.get(ORG, "runner-1")?;
    assert_eq!(install_status(&ready), RunnerInstallStatus::Ready);
    assert_eq!(connection_status(&ready), RunnerConnectionStatus::Connected);
    assert_eq!(ready.last_heartbeat_time, Some(ts(110)));
    Ok(())
}

#[test]
fn install_delay_counts_from_creation_not_from_the_first_advance() -> Result<()> {
    let timings = RunnerTimings { install_delay: Duration::from_secs(10), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    // A driver that ticks late sees the runner READY at once.
    registry.advance(at(30));
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Ready);
    Ok(())
}

#[test]
fn ready_runners_are_connected_and_heartbeat_on_every_advance() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    assert_eq!(registry.get(ORG, "runner-1")?.last_heartbeat_time, Some(ts(0)));
    registry.advance(at(42));
    let runner = registry.get(ORG, "runner-1")?;
    assert_eq!(connection_status(&runner), RunnerConnectionStatus::Connected);
    assert_eq!(runner.last_heartbeat_time, Some(ts(42)));
    assert_eq!(runner.update_time, Some(ts(0)), "a heartbeat is not a change of the resource");
    assert_eq!(registry.transition_count(RunnerTransition::Heartbeat), 1);
    registry.advance(at(42));
    assert_eq!(registry.transition_count(RunnerTransition::Heartbeat), 1, "no heartbeat without time passing");
    Ok(())
}

#[test]
fn fail_install_fault_moves_the_runner_to_failed_with_install_error() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    registry.fail_install(ORG, "runner-1", RunnerInstallErrorReason::ClusterUnreachable, "API server timed out")?;
    registry.advance(at(3));
    let failed = registry.get(ORG, "runner-1")?;
    assert_eq!(install_status(&failed), RunnerInstallStatus::Failed);
    assert_eq!(connection_status(&failed), RunnerConnectionStatus::Disconnected);
    let error = failed.install_error.context("a FAILED runner carries install_error")?;
    assert_eq!(error.reason, RunnerInstallErrorReason::ClusterUnreachable as i32);
    assert_eq!(error.message, "API server timed out");
    assert_eq!(error.occurred_at, Some(ts(3)));
    assert_eq!(error.remediation_hints.len(), 1);
    assert_eq!(failed.last_heartbeat_time, None);

    registry.advance(at(10));
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Failed, "FAILED stays");
    registry.delete(ORG, "runner-1", false, at(10))?;
    registry.advance(at(10));
    assert_runner_not_found(registry.get(ORG, "runner-1"), "runner-1");
    Ok(())
}

#[test]
fn fail_install_applies_only_to_an_installation_in_progress() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    assert_failed_precondition(
        registry.fail_install(ORG, "runner-1", RunnerInstallErrorReason::Internal, "boom"),
        Reason::PreconditionFailed,
        "runner \"runner-1\" is READY; only an installation in progress can fail",
    );
    assert_runner_not_found(registry.fail_install(ORG, "nope", RunnerInstallErrorReason::Internal, "boom"), "nope");
    Ok(())
}

#[test]
fn delete_goes_deleting_then_gone_after_the_delete_delay() -> Result<()> {
    let timings = RunnerTimings { delete_delay: Duration::from_secs(30), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    registry.advance(at(0));
    registry.delete(ORG, "runner-1", false, at(10))?;

    let deleting = registry.get(ORG, "runner-1")?;
    assert_eq!(install_status(&deleting), RunnerInstallStatus::Deleting);
    assert_eq!(connection_status(&deleting), RunnerConnectionStatus::Disconnected);
    assert_eq!(deleting.update_time, Some(ts(10)));
    assert_eq!(registry.list(ORG, 0, "", "", "")?.0.len(), 1, "still listed while DELETING");

    // Deleting again is accepted and does not restart the clock.
    registry.delete(ORG, "runner-1", false, at(20))?;
    registry.advance(at(39));
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Deleting);
    registry.advance(at(40));
    assert_runner_not_found(registry.get(ORG, "runner-1"), "runner-1");
    assert!(registry.list(ORG, 0, "", "", "")?.0.is_empty());
    Ok(())
}

#[test]
fn every_transition_is_exercised() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.create(ORG, runner("healthy"), "", at(0))?;
    registry.create(ORG, runner("broken"), "", at(0))?;
    registry.fail_install(ORG, "broken", RunnerInstallErrorReason::InsufficientPermissions, "forbidden")?;
    registry.advance(at(0)); // healthy: BeginInstall, CompleteInstall; broken: FailInstall
    registry.advance(at(1)); // healthy: Heartbeat
    registry.set_update_available(ORG, "healthy", true)?;
    registry.apply_available_update(ORG, "healthy", at(2))?; // StartRollout
    registry.advance(at(2)); // healthy: CompleteRollout, Heartbeat
    registry.delete(ORG, "healthy", false, at(3))?; // BeginDelete
    registry.delete(ORG, "broken", false, at(3))?; // BeginDelete
    registry.advance(at(3)); // FinishDelete ×2

    let expected = [
        (RunnerTransition::BeginInstall, 1),
        (RunnerTransition::CompleteInstall, 1),
        (RunnerTransition::FailInstall, 1),
        (RunnerTransition::Heartbeat, 2),
        (RunnerTransition::StartRollout, 1),
        (RunnerTransition::CompleteRollout, 1),
        (RunnerTransition::BeginDelete, 2),
        (RunnerTransition::FinishDelete, 2),
    ];
    assert_eq!(expected.len(), RunnerTransition::ALL.len(), "every transition is listed");
    for (transition, count) in expected {
        assert_eq!(registry.transition_count(transition), count, "{transition}");
    }
    assert_eq!(registry.transition_counts().never_run(), [], "every transition ran");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Update

#[test]
fn update_requires_an_explicit_update_mask() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    for paths in [&[][..], &["*"][..], &["display_name", "*"][..]] {
        match registry.update(ORG, "runner-1", ManagedRunner::default(), &mask(paths), at(1)) {
            Err(SimError::InvalidArgument { reason, message, violations }) => {
                assert_eq!(reason, Reason::InvalidRequest);
                assert_eq!(message, "an explicit update mask is required");
                assert_eq!(message, EXPLICIT_MASK_REQUIRED);
                assert_eq!(violations, vec![FieldViolation::new("update_mask", EXPLICIT_MASK_REQUIRED)]);
            }
            other => bail!("mask {paths:?}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
    Ok(())
}

#[test]
fn update_rejects_immutable_identity_paths() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let before = registry.get(ORG, "runner-1")?;
    let patch = runner_in("runner-1", "us-west-01b", "cluster-b");
    let paths = ["identity.runner_id", "identity.zone", "identity.cluster_id"];
    let (reason, violations) = invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&paths), at(1)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(
        violations,
        vec![
            FieldViolation::new("update_mask", "`identity.runner_id` is immutable"),
            FieldViolation::new("update_mask", "`identity.zone` is immutable"),
            FieldViolation::new("update_mask", "`identity.cluster_id` is immutable"),
        ]
    );
    assert_eq!(registry.get(ORG, "runner-1")?, before, "nothing changed");
    Ok(())
}

#[test]
fn update_rejects_policy_sub_paths() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let current = registry.get(ORG, "runner-1")?;
    let (_, violations) = invalid_argument(registry.update(
        ORG,
        "runner-1",
        current,
        &mask(&["policy.base", "policy.constraints.resources"]),
        at(1),
    ))?;
    assert_eq!(violation_fields(&violations), ["update_mask", "update_mask"]);
    for violation in &violations {
        assert!(violation.description.contains("only `policy` is supported"), "{violation:?}");
    }
    assert_eq!(
        violations[0].description,
        "`policy.base`: only `policy` is supported; a policy update replaces the whole document"
    );
    Ok(())
}

#[test]
fn update_rejects_unknown_and_output_only_paths() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let paths =
        ["bogus", "spec", "identity", "etag", "identity.cluster_name", "spec.allow_privileged_profile_annotations"];
    let (reason, violations) =
        invalid_argument(registry.update(ORG, "runner-1", ManagedRunner::default(), &mask(&paths), at(1)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    let descriptions: Vec<&str> = violations.iter().map(|violation| violation.description.as_str()).collect();
    assert_eq!(
        descriptions,
        [
            "unknown field path `bogus`",
            "name the spec fields to change (`spec.<field>`), not `spec`",
            "`identity` cannot be replaced; the only mutable key is `identity.runner_group_id`",
            "`etag` is output only",
            "`identity.cluster_name` is output only",
            "unknown field path `spec.allow_privileged_profile_annotations`",
        ]
    );
    assert!(violation_fields(&violations).iter().all(|field| *field == "update_mask"));
    Ok(())
}

#[test]
fn update_applies_every_legal_path() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let before = registry.get(ORG, "runner-1")?;
    let new_spec = ManagedRunnerSpec {
        release_channel: ReleaseChannel::Rapid as i32,
        maintenance_policy: Some(MaintenancePolicy {
            windows: vec![MaintenanceWindow { cron: "0 3 * * 6".into(), duration_seconds: 3600 }],
            exclusions: Vec::new(),
        }),
        overrides: Some(RunnerDeploymentOverrides {
            env: [("ENABLE_LIVE_NETWORK_UPDATE".to_owned(), "true".to_owned())].into(),
            ..Default::default()
        }),
        enforce_resource_limits: true,
        volumes: Some(RunnerVolumesSpec { enabled: true, csi_driver_allowlist: vec!["csi.vastdata.com".into()] }),
        tenant_metrics: Some(RunnerTenantMetricsSpec { enabled: true, image: "metrics:1".into() }),
        image_pull: Some(RunnerImagePullSpec { policy: SandboxImagePullPolicy::Always as i32 }),
        data_plane: Some(RunnerDataPlaneSpec {
            exposure: Some(runner_data_plane_spec::Exposure::Disabled(RunnerDataPlaneDisabled {})),
        }),
        allow_privileged_profile_annotations: false,
    };
    let patch = ManagedRunner {
        identity: Some(RunnerIdentity { runner_group_id: "gpu".into(), ..RunnerIdentity::default() }),
        display_name: "Prod runner".into(),
        spec: Some(new_spec.clone()),
        ..ManagedRunner::default()
    };
    let paths = [
        "display_name",
        "identity.runner_group_id",
        "spec.release_channel",
        "spec.maintenance_policy",
        "spec.overrides",
        "spec.enforce_resource_limits",
        "spec.volumes",
        "spec.tenant_metrics",
        "spec.image_pull",
        "spec.data_plane",
    ];
    let updated = registry.update(ORG, "runner-1", patch, &mask(&paths), at(5))?;
    assert_eq!(updated.display_name, "Prod runner");
    assert_eq!(identity(&updated).runner_group_id, "gpu");
    assert_eq!(identity(&updated).zone, "us-east-04a", "unmasked identity keys are untouched");
    assert_eq!(updated.spec, Some(new_spec));
    assert_eq!(updated.etag, before.etag, "no policy change, no new etag");
    assert_eq!(registry.get(ORG, "runner-1")?, updated, "the update is stored");
    Ok(())
}

#[test]
fn update_ignores_fields_outside_the_mask() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let mut patch = runner_in("runner-1", "elsewhere", "other-cluster");
    patch.display_name = "not masked".into();
    patch.spec = Some(ManagedRunnerSpec { enforce_resource_limits: true, ..Default::default() });
    patch.policy = Some(Policy { display_name: "not masked".into(), ..Policy::default() });
    let updated = registry.update(ORG, "runner-1", patch, &mask(&["spec.enforce_resource_limits"]), at(1))?;
    assert!(spec(&updated).enforce_resource_limits);
    assert_eq!(spec(&updated).release_channel, ReleaseChannel::Stable as i32);
    assert_eq!(updated.display_name, "");
    assert_eq!(updated.policy, Some(Policy::default()));
    assert_eq!(identity(&updated).zone, "us-east-04a");
    Ok(())
}

#[test]
fn update_clears_a_masked_field_absent_from_the_patch() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut input = runner("runner-1");
    input.display_name = "named".into();
    if let Some(identity) = input.identity.as_mut() {
        identity.runner_group_id = "gpu".into();
    }
    input.spec = Some(ManagedRunnerSpec {
        release_channel: ReleaseChannel::Rapid as i32,
        overrides: Some(RunnerDeploymentOverrides { args: vec!["--verbose".into()], ..Default::default() }),
        enforce_resource_limits: true,
        volumes: Some(RunnerVolumesSpec { enabled: true, csi_driver_allowlist: Vec::new() }),
        ..Default::default()
    });
    registry.create(ORG, input, "", at(0))?;
    let paths =
        ["display_name", "identity.runner_group_id", "spec.overrides", "spec.enforce_resource_limits", "spec.volumes"];
    let cleared = registry.update(ORG, "runner-1", ManagedRunner::default(), &mask(&paths), at(1))?;
    assert_eq!(cleared.display_name, "");
    assert_eq!(identity(&cleared).runner_group_id, "default", "a cleared group is the default group");
    assert_eq!(spec(&cleared).overrides, None);
    assert!(!spec(&cleared).enforce_resource_limits);
    assert_eq!(spec(&cleared).volumes, None);
    assert_eq!(spec(&cleared).release_channel, ReleaseChannel::Rapid as i32, "not masked, kept");
    Ok(())
}

#[test]
fn update_refuses_to_clear_the_policy() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let current = registry.get(ORG, "runner-1")?;
    let patch = ManagedRunner { etag: current.etag.clone(), ..ManagedRunner::default() };
    let (reason, violations) = invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violation_fields(&violations), ["managed_runner.policy"]);
    assert_eq!(registry.get(ORG, "runner-1")?, current);
    Ok(())
}

#[test]
fn update_refuses_to_clear_the_release_channel() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    for patch in [
        ManagedRunner::default(),
        ManagedRunner { spec: Some(ManagedRunnerSpec::default()), ..ManagedRunner::default() },
    ] {
        let (_, violations) =
            invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&["spec.release_channel"]), at(1)))?;
        assert_eq!(
            violations,
            vec![FieldViolation::new("managed_runner.spec.releaseChannel", "the release channel cannot be removed")]
        );
    }
    assert_eq!(spec(&registry.get(ORG, "runner-1")?).release_channel, ReleaseChannel::Stable as i32);
    Ok(())
}

#[test]
fn update_of_the_policy_requires_the_etag() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let before = registry.get(ORG, "runner-1")?;
    let patch = ManagedRunner { policy: Some(policy(json!({"displayName": "x"}))), ..ManagedRunner::default() };
    let (reason, violations) = invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violation_fields(&violations), ["managed_runner.etag"]);
    assert_eq!(registry.get(ORG, "runner-1")?, before);

    // The etag guards the policy only: other paths need none.
    let renamed = ManagedRunner { display_name: "renamed".into(), ..ManagedRunner::default() };
    registry.update(ORG, "runner-1", renamed, &mask(&["display_name"]), at(2))?;
    Ok(())
}

#[test]
fn update_of_the_policy_without_etag_is_a_blind_write_when_allowed() -> Result<()> {
    let mut registry = RunnerRegistry::default().with_blind_policy_writes(true);
    let created = registry.create(ORG, runner("runner-1"), "", at(0))?;
    let patch = ManagedRunner { policy: Some(policy(json!({"displayName": "blind"}))), ..ManagedRunner::default() };
    let updated = registry.update(ORG, "runner-1", patch.clone(), &mask(&["policy"]), at(1))?;
    assert_eq!(updated.policy.as_ref().map(|policy| policy.display_name.as_str()), Some("blind"));
    assert_ne!(updated.etag, created.etag);

    // An etag that is sent is still checked.
    let stale = ManagedRunner { etag: created.etag, ..patch };
    assert_failed_precondition(
        registry.update(ORG, "runner-1", stale, &mask(&["policy"]), at(2)),
        Reason::PreconditionFailed,
        STALE_ETAG_MESSAGE,
    );
    Ok(())
}

#[test]
fn update_with_a_stale_etag_is_failed_precondition() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let before = registry.get(ORG, "runner-1")?;
    let patch = ManagedRunner {
        policy: Some(policy(json!({"displayName": "x"}))),
        etag: "c29tZXRoaW5nLWVsc2U".into(),
        ..ManagedRunner::default()
    };
    assert_failed_precondition(
        registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1)),
        Reason::PreconditionFailed,
        "managed_runner.etag is stale; reload the runner and retry",
    );
    assert_eq!(registry.get(ORG, "runner-1")?, before);
    Ok(())
}

#[test]
fn update_surfaces_policy_validator_violations() -> Result<()> {
    let mut registry = RunnerRegistry::default().with_policy_validator(rejecting_validator);
    let created = registry.create(ORG, runner("runner-1"), "", at(0))?;
    let patch = ManagedRunner {
        policy: Some(Policy { display_name: "bad".into(), ..Policy::default() }),
        etag: created.etag.clone(),
        ..ManagedRunner::default()
    };
    let (reason, violations) = invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1)))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(
        violation_fields(&violations),
        [
            "managed_runner.policy.base.spec.terminationGracePeriodSeconds",
            "managed_runner.policy.constraints.lifecycle.defaultLifetimeSeconds",
        ]
    );
    assert_eq!(registry.get(ORG, "runner-1")?, created, "a rejected policy is not stored");
    Ok(())
}

#[test]
fn policy_update_bumps_the_etag_only_when_the_policy_changes() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let first = registry.get(ORG, "runner-1")?;
    let new_policy = policy(json!({"base": {"spec": {"schedulerName": "slurm-scheduler"}}}));
    let patch =
        ManagedRunner { policy: Some(new_policy.clone()), etag: first.etag.clone(), ..ManagedRunner::default() };
    let second = registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1))?;
    assert_ne!(second.etag, first.etag);
    assert_eq!(second.policy, Some(new_policy.clone()));

    // Writing the same document again is not a policy change: the revision stays.
    let same = ManagedRunner { policy: Some(new_policy), etag: second.etag.clone(), ..ManagedRunner::default() };
    let third = registry.update(ORG, "runner-1", same, &mask(&["policy"]), at(2))?;
    assert_eq!(third.etag, second.etag);

    // Neither do other fields, nor the install and rollout machinery.
    let renamed = ManagedRunner { display_name: "renamed".into(), ..ManagedRunner::default() };
    let fourth = registry.update(ORG, "runner-1", renamed, &mask(&["display_name"]), at(3))?;
    assert_eq!(fourth.etag, second.etag);
    registry.set_update_available(ORG, "runner-1", true)?;
    registry.apply_available_update(ORG, "runner-1", at(4))?;
    registry.advance(at(4));
    assert_eq!(registry.get(ORG, "runner-1")?.etag, second.etag);
    Ok(())
}

#[test]
fn update_bumps_update_time_only() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let renamed = ManagedRunner { display_name: "renamed".into(), ..ManagedRunner::default() };
    let updated = registry.update(ORG, "runner-1", renamed, &mask(&["display_name"]), SimTime::from_millis(5_500))?;
    assert_eq!(updated.update_time, Some(Timestamp { seconds: 5, nanos: 500_000_000 }));
    assert_eq!(updated.create_time, Some(ts(0)));
    Ok(())
}

#[test]
fn update_that_changes_nothing_succeeds_and_changes_nothing() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let before = registry.get(ORG, "runner-1")?;
    let same = ManagedRunner {
        policy: before.policy.clone(),
        etag: before.etag.clone(),
        display_name: before.display_name.clone(),
        ..ManagedRunner::default()
    };
    let after = registry.update(ORG, "runner-1", same, &mask(&["display_name", "policy"]), at(9))?;
    // As Kubernetes keeps resourceVersion for a no-op update: nothing moves, not even the times.
    assert_eq!(after, before, "a no-op update leaves the runner, update_time and etag included");
    Ok(())
}

#[test]
fn update_of_a_deleting_runner_is_failed_precondition() -> Result<()> {
    let timings = RunnerTimings { delete_delay: Duration::from_secs(60), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    registry.delete(ORG, "runner-1", false, at(1))?;
    let renamed = ManagedRunner { display_name: "renamed".into(), ..ManagedRunner::default() };
    assert_failed_precondition(
        registry.update(ORG, "runner-1", renamed, &mask(&["display_name"]), at(2)),
        Reason::PreconditionFailed,
        "runner \"runner-1\" is being deleted",
    );
    Ok(())
}

#[test]
fn update_of_a_missing_runner_is_not_found() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let renamed = ManagedRunner { display_name: "renamed".into(), ..ManagedRunner::default() };
    assert_runner_not_found(registry.update(ORG, "nope", renamed, &mask(&["display_name"]), at(1)), "nope");
    assert_runner_not_found(registry.get(ORG, "nope"), "nope");
    Ok(())
}

#[test]
fn update_rejects_a_body_naming_another_runner() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    registry.create(ORG, runner("runner-2"), "", at(0))?;
    let patch = ManagedRunner { display_name: "x".into(), ..runner("runner-2") };
    let (_, violations) = invalid_argument(registry.update(ORG, "runner-1", patch, &mask(&["display_name"]), at(1)))?;
    assert_eq!(
        violations,
        vec![FieldViolation::new(
            "managed_runner.identity.runnerId",
            "\"runner-2\" does not match runner_id \"runner-1\""
        )]
    );
    Ok(())
}

/// The guide's step 2 (docs/facts/sunk-guide.md#step-2), as curl + jq do it over Connect JSON:
/// read the runner, set `policy.base.spec.schedulerName`, send identity + policy + etag with mask
/// "policy".
#[test]
fn seed_etag_flow_sets_the_scheduler_name_and_rejects_the_old_etag() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let start = policy(json!({"displayName": "team", "constraints": {"lifecycle": {"defaultLifetimeSeconds": 86400}}}));
    let etag = registry.get(ORG, "runner-1")?.etag;
    let patch = ManagedRunner { policy: Some(start), etag, ..ManagedRunner::default() };
    registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(1))?;

    // GetManagedRunner → runner.json
    let runner_json = serde_json::to_value(registry.get(ORG, "runner-1")?)?;
    assert!(!runner_json["policy"].is_null() && !runner_json["etag"].is_null(), "jq's guard passes");
    let old_etag = runner_json["etag"].clone();
    // jq: .policy.base.spec.schedulerName = "slurm-scheduler" | {runnerId, managedRunner, updateMask}
    let mut edited = runner_json["policy"].clone();
    edited["base"]["spec"]["schedulerName"] = json!("slurm-scheduler");
    let body = json!({
        "runnerId": runner_json["identity"]["runnerId"],
        "managedRunner": {"identity": runner_json["identity"], "policy": edited, "etag": old_etag},
        "updateMask": "policy",
    });
    let request: UpdateManagedRunnerRequest = serde_json::from_value(body.clone())?;
    let send = |registry: &mut RunnerRegistry, request: UpdateManagedRunnerRequest, now| {
        registry.update(
            ORG,
            &request.runner_id,
            request.managed_runner.unwrap_or_default(),
            &request.update_mask.unwrap_or_default(),
            now,
        )
    };
    let updated = send(&mut registry, request, at(2))?;

    let updated_json = serde_json::to_value(&updated)?;
    assert_ne!(updated_json["etag"], old_etag, "a new etag");
    assert_eq!(updated_json["policy"]["base"]["spec"]["schedulerName"], json!("slurm-scheduler"));
    assert_eq!(updated_json["policy"]["displayName"], json!("team"), "the rest of the document is kept");
    assert_eq!(updated_json["policy"]["constraints"]["lifecycle"]["defaultLifetimeSeconds"], json!(86400));

    // Sending the same file again reuses the old etag.
    let replay: UpdateManagedRunnerRequest = serde_json::from_value(body)?;
    assert_failed_precondition(send(&mut registry, replay, at(3)), Reason::PreconditionFailed, STALE_ETAG_MESSAGE);
    Ok(())
}

#[test]
fn two_readers_first_policy_write_wins_second_is_stale() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let alice = registry.get(ORG, "runner-1")?;
    let bob = registry.get(ORG, "runner-1")?;
    let write = |read: &ManagedRunner, name: &str| ManagedRunner {
        policy: Some(policy(json!({"displayName": name}))),
        etag: read.etag.clone(),
        ..ManagedRunner::default()
    };

    registry.update(ORG, "runner-1", write(&alice, "alice"), &mask(&["policy"]), at(1))?;
    assert_failed_precondition(
        registry.update(ORG, "runner-1", write(&bob, "bob"), &mask(&["policy"]), at(2)),
        Reason::PreconditionFailed,
        STALE_ETAG_MESSAGE,
    );
    assert_eq!(registry.policy_of(ORG, "runner-1").map(|policy| policy.display_name.as_str()), Some("alice"));

    // Bob reloads and retries on top of Alice's write.
    let reloaded = registry.get(ORG, "runner-1")?;
    registry.update(ORG, "runner-1", write(&reloaded, "bob"), &mask(&["policy"]), at(3))?;
    assert_eq!(registry.policy_of(ORG, "runner-1").map(|policy| policy.display_name.as_str()), Some("bob"));
    Ok(())
}

#[test]
fn an_etag_never_survives_delete_and_recreate() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    let old = registry.get(ORG, "runner-1")?;
    registry.delete(ORG, "runner-1", false, at(1))?;
    registry.advance(at(1));
    let new = registry.create(ORG, runner("runner-1"), "", at(2))?;
    assert_ne!(new.etag, old.etag, "same id and revision, different runner");
    let patch = ManagedRunner { policy: Some(Policy::default()), etag: old.etag, ..ManagedRunner::default() };
    assert_failed_precondition(
        registry.update(ORG, "runner-1", patch, &mask(&["policy"]), at(3)),
        Reason::PreconditionFailed,
        STALE_ETAG_MESSAGE,
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// List

/// 120 runners `runner-000`…`runner-119`, created out of order: even ones on cluster-a, odd
/// ones on cluster-b; every third in us-east-04a, the others in us-west-01b.
fn registry_with_120() -> Result<RunnerRegistry> {
    let mut registry = RunnerRegistry::default().with_cluster_names([("cluster-a".to_owned(), "Prod-East".to_owned())]);
    for step in 0..120 {
        let index = step * 7 % 120; // 7 is coprime to 120: a permutation
        let cluster = if index % 2 == 0 { "cluster-a" } else { "cluster-b" };
        let zone = if index % 3 == 0 { "US-EAST-04A" } else { "us-west-01b" };
        registry.create(ORG, runner_in(&format!("runner-{index:03}"), zone, cluster), "", at(0))?;
    }
    Ok(registry)
}

/// Every page of a listing, following tokens; the number of pages too.
fn list_all(registry: &RunnerRegistry, page_size: i32, cluster: &str, zone: &str) -> Result<(Vec<String>, usize)> {
    let (mut ids, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let (page, next) = registry.list(ORG, page_size, &token, cluster, zone)?;
        pages += 1;
        ids.extend(page.iter().map(|runner| identity(runner).runner_id.clone()));
        if next.is_empty() {
            return Ok((ids, pages));
        }
        if pages > 1000 {
            bail!("the listing does not end");
        }
        token = next;
    }
}

#[test]
fn list_pages_120_runners_by_50_in_runner_id_order() -> Result<()> {
    let registry = registry_with_120()?;
    let (first, token) = registry.list(ORG, 50, "", "", "")?;
    assert_eq!(first.len(), 50);
    assert_eq!(identity(&first[0]).runner_id, "runner-000");
    assert_eq!(identity(&first[49]).runner_id, "runner-049");
    assert!(!token.is_empty());
    assert!(!token.contains("runner-049"), "tokens are opaque: {token}");
    let (second, token) = registry.list(ORG, 50, &token, "", "")?;
    assert_eq!(identity(&second[0]).runner_id, "runner-050");
    let (third, token) = registry.list(ORG, 50, &token, "", "")?;
    assert_eq!(third.len(), 20);
    assert_eq!(identity(&third[19]).runner_id, "runner-119");
    assert_eq!(token, "", "the last page has no next token");

    let (all, pages) = list_all(&registry, 50, "", "")?;
    let expected: Vec<String> = (0..120).map(|index| format!("runner-{index:03}")).collect();
    assert_eq!(all, expected);
    assert_eq!(pages, 3);
    Ok(())
}

#[test]
fn list_filters_by_cluster_id_or_name_and_zone_case_insensitively() -> Result<()> {
    let registry = registry_with_120()?;
    let ids = |indexes: &mut dyn Iterator<Item = usize>| -> Vec<String> {
        indexes.map(|index| format!("runner-{index:03}")).collect()
    };

    let (by_cluster, pages) = list_all(&registry, 50, "CLUSTER-A", "")?;
    assert_eq!(by_cluster, ids(&mut (0..120).filter(|index| index % 2 == 0)));
    assert_eq!(pages, 2, "60 matches make two pages of 50");

    let (by_name, _) = list_all(&registry, 50, "prod-east", "")?;
    assert_eq!(by_name, by_cluster, "the cluster filter also matches cluster_name");

    let (by_zone, pages) = list_all(&registry, 50, "", "us-east-04a")?;
    assert_eq!(by_zone, ids(&mut (0..120).filter(|index| index % 3 == 0)));
    assert_eq!(pages, 1);

    let (both, _) = list_all(&registry, 7, "cluster-a", "US-East-04a")?;
    assert_eq!(both, ids(&mut (0..120).filter(|index| index % 6 == 0)));

    let (none, pages) = list_all(&registry, 50, "cluster-z", "")?;
    assert!(none.is_empty());
    assert_eq!(pages, 1);
    Ok(())
}

#[test]
fn list_page_size_defaults_to_50_and_is_capped_at_1000() -> Result<()> {
    let registry = registry_with_120()?;
    assert_eq!(registry.list(ORG, 0, "", "", "")?.0.len(), 50);

    let mut big = RunnerRegistry::default();
    for index in 0..1001 {
        big.create(ORG, runner(&format!("r-{index:04}")), "", at(0))?;
    }
    let (page, token) = big.list(ORG, 5000, "", "", "")?;
    assert_eq!(page.len(), 1000);
    let (rest, token) = big.list(ORG, 5000, &token, "", "")?;
    assert_eq!(rest.len(), 1);
    assert_eq!(token, "");
    Ok(())
}

#[test]
fn list_rejects_a_negative_page_size() -> Result<()> {
    let registry = registry_with_120()?;
    let (reason, violations) = invalid_argument(registry.list(ORG, -1, "", "", ""))?;
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(violations, vec![FieldViolation::new("page_size", "must not be negative")]);
    Ok(())
}

#[test]
fn list_rejects_a_garbage_page_token() -> Result<()> {
    let registry = registry_with_120()?;
    // Not base64; base64 of non-JSON ("hello"); base64 of JSON of the wrong shape.
    for token in ["not a token!", "aGVsbG8", "WyJhIl0"] {
        let (reason, violations) = invalid_argument(registry.list(ORG, 50, token, "", ""))?;
        assert_eq!(reason, Reason::InvalidRequest);
        assert_eq!(violations, vec![FieldViolation::new("page_token", "not a page token of this listing")], "{token}");
    }
    Ok(())
}

#[test]
fn list_rejects_a_page_token_from_a_different_filter() -> Result<()> {
    let registry = registry_with_120()?;
    let (_, token) = registry.list(ORG, 10, "", "cluster-a", "")?;
    let (_, violations) = invalid_argument(registry.list(ORG, 10, &token, "", ""))?;
    assert_eq!(
        violations,
        vec![FieldViolation::new("page_token", "the page token belongs to a listing with other filters")]
    );
    let (_, violations) = invalid_argument(registry.list(ORG, 10, &token, "cluster-b", ""))?;
    assert_eq!(violation_fields(&violations), ["page_token"]);
    // The same filter in another letter case is the same filter.
    assert_eq!(registry.list(ORG, 10, &token, "Cluster-A", "")?.0.len(), 10);
    Ok(())
}

#[test]
fn list_continues_after_the_last_runner_of_a_page_is_deleted() -> Result<()> {
    let mut registry = registry_with_120()?;
    let (_, token) = registry.list(ORG, 50, "", "", "")?;
    registry.delete(ORG, "runner-049", false, at(1))?;
    registry.advance(at(1));
    let (page, _) = registry.list(ORG, 50, &token, "", "")?;
    assert_eq!(identity(&page[0]).runner_id, "runner-050");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Delete

#[test]
fn delete_of_a_missing_runner_with_allow_missing_succeeds() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    registry.delete(ORG, "nope", true, at(0))?;
    registry.delete("never-seen-org", "nope", true, at(0))?;
    Ok(())
}

#[test]
fn delete_of_a_missing_runner_is_not_found() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    assert_runner_not_found(registry.delete(ORG, "nope", false, at(0)), "nope");
    Ok(())
}

#[test]
fn delete_is_refused_while_volumes_reference_the_runner() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    registry.set_volume_refs(ORG, "runner-1", 2)?;
    assert_failed_precondition(
        registry.delete(ORG, "runner-1", true, at(1)),
        Reason::VolumeInUse,
        "runner \"runner-1\" is referenced by 2 registered volume(s); remove them first",
    );
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Ready);

    registry.set_volume_refs(ORG, "runner-1", 0)?;
    registry.delete(ORG, "runner-1", false, at(2))?;
    assert_eq!(install_status(&registry.get(ORG, "runner-1")?), RunnerInstallStatus::Deleting);
    assert_runner_not_found(registry.set_volume_refs(ORG, "nope", 1), "nope");
    Ok(())
}

#[test]
fn request_ids_live_as_long_as_their_runner() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let first = registry.create(ORG, runner("runner-1"), "req-1", at(0))?;
    registry.delete(ORG, "runner-1", false, at(1))?;
    registry.advance(at(1));
    let second = registry.create(ORG, runner("runner-1"), "req-1", at(2))?;
    assert_eq!(second.create_time, Some(ts(2)), "a new runner, not a replay of the deleted one");
    assert_ne!(second.etag, first.etag);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ApplyAvailableUpdate

#[test]
fn apply_available_update_without_an_update_is_failed_precondition() -> Result<()> {
    let mut registry = with_ready("runner-1")?;
    assert_failed_precondition(
        registry.apply_available_update(ORG, "runner-1", at(1)),
        Reason::PreconditionFailed,
        "no update is available for runner \"runner-1\"",
    );
    assert_runner_not_found(registry.apply_available_update(ORG, "nope", at(1)), "nope");
    assert_runner_not_found(registry.set_update_available(ORG, "nope", true), "nope");
    Ok(())
}

#[test]
fn apply_available_update_rolls_out_after_the_rollout_delay() -> Result<()> {
    let timings = RunnerTimings { rollout_delay: Duration::from_secs(60), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    registry.advance(at(0));
    registry.set_update_available(ORG, "runner-1", true)?;
    assert!(registry.get(ORG, "runner-1")?.update_available);

    let started = registry.apply_available_update(ORG, "runner-1", at(100))?;
    assert_eq!((started.active_revision, started.target_revision), (1, 2));
    assert!(started.rollout_in_progress);
    assert!(!started.update_available);
    assert_eq!(started.update_time, Some(ts(100)));
    // Nothing more to apply while this one rolls out.
    assert_failed_precondition(
        registry.apply_available_update(ORG, "runner-1", at(101)),
        Reason::PreconditionFailed,
        "no update is available for runner \"runner-1\"",
    );

    registry.advance(at(159));
    assert!(registry.get(ORG, "runner-1")?.rollout_in_progress);
    registry.advance(at(160));
    let done = registry.get(ORG, "runner-1")?;
    assert_eq!((done.active_revision, done.target_revision), (2, 2));
    assert!(!done.rollout_in_progress);
    assert_eq!(done.active_config_version, "rev-2");
    Ok(())
}

#[test]
fn apply_available_update_of_a_deleting_runner_is_failed_precondition() -> Result<()> {
    let timings = RunnerTimings { delete_delay: Duration::from_secs(60), ..RunnerTimings::default() };
    let mut registry = RunnerRegistry::new(timings);
    registry.create(ORG, runner("runner-1"), "", at(0))?;
    registry.set_update_available(ORG, "runner-1", true)?;
    registry.delete(ORG, "runner-1", false, at(1))?;
    assert_failed_precondition(
        registry.apply_available_update(ORG, "runner-1", at(2)),
        Reason::PreconditionFailed,
        "runner \"runner-1\" is being deleted",
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Default policy and read access

#[test]
fn default_policy_allows_public_egress_but_not_private_or_link_local() {
    let expected_rule = EgressRule {
        ports: Vec::new(),
        https_hostname_except: Vec::new(),
        destination: Some(egress_rule::Destination::Cidr(CidrBlock {
            cidr: "0.0.0.0/0".into(),
            except: vec!["10.0.0.0/8".into(), "169.254.0.0/16".into()],
        })),
    };
    let policy = default_policy();
    let network = policy
        .constraints
        .as_ref()
        .and_then(|constraints| constraints.network.as_ref())
        .expect("the default policy constrains the network");
    assert_eq!(network.allowed_egress, vec![expected_rule.clone()]);
    assert_eq!(network.default_egress, vec![expected_rule]);
    assert!(network.allowed_ingress.is_empty() && network.default_ingress.is_empty());
    assert_eq!(policy.base, None);
    assert_eq!(policy.control_plane_access, None);
}

#[test]
fn create_with_default_policy_fills_only_an_absent_policy() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut bare = runner("console");
    bare.policy = None;
    let created = registry.create_with_default_policy(ORG, bare.clone(), "", at(0))?;
    assert_eq!(created.policy, Some(default_policy()));

    let kept = registry.create_with_default_policy(ORG, runner("explicit-empty"), "", at(0))?;
    assert_eq!(kept.policy, Some(Policy::default()), "`{{}}` is a policy and is never overwritten");

    let custom = policy(json!({"displayName": "site default"}));
    let mut site = RunnerRegistry::default().with_default_policy(custom.clone());
    assert_eq!(site.create_with_default_policy(ORG, bare, "", at(0))?.policy, Some(custom));
    Ok(())
}

#[test]
fn policy_of_and_iter_expose_the_org_runners() -> Result<()> {
    let mut registry = RunnerRegistry::default();
    let mut input = runner("runner-b");
    input.policy = Some(policy(json!({"base": {"spec": {"schedulerName": "slurm-scheduler"}}})));
    registry.create(ORG, input.clone(), "", at(0))?;
    registry.create(ORG, runner("runner-a"), "", at(0))?;
    registry.create("org-b", runner("runner-c"), "", at(0))?;

    assert_eq!(registry.policy_of(ORG, "runner-b"), input.policy.as_ref());
    assert_eq!(registry.policy_of(ORG, "runner-c"), None, "another org's runner");
    assert_eq!(registry.policy_of(ORG, "nope"), None);
    let ids: Vec<&str> = registry.iter(ORG).map(|runner| identity(runner).runner_id.as_str()).collect();
    assert_eq!(ids, ["runner-a", "runner-b"]);
    assert_eq!(registry.iter("nobody").count(), 0);
    Ok(())
}

/// The guide's `.policy == null` guard needs a runner whose policy was never set
/// (docs/facts/policy.md#never-configured): values
/// `neverConfigured` make one; a policy is otherwise required, and both together are refused.
#[test]
fn a_never_configured_runner_has_no_policy_until_one_is_set() -> Result<()> {
    use cwsandbox_sim::config::{Scenario, Values};
    use cwsandbox_sim::ids::SeededIds;
    use cwsandbox_sim::time::ManualClock;
    use cwsandbox_sim::world::World;

    let world = |modify: &dyn Fn(&mut Values)| {
        let mut values = Values::scenario(Scenario::Ready);
        modify(&mut values);
        World::new(values, Box::new(ManualClock::new(at(0))), Box::new(SeededIds::new(1)))
    };
    let mut unset = world(&|values| {
        values.runners[0].policy = None;
        values.runners[0].never_configured = true;
    })?;
    let org = unset.runners.list("default-org", 0, "", "", "")?.0;
    let runner = org.first().expect("the values' runner");
    assert_eq!(runner.policy, None, "GetManagedRunner shows no policy");
    let runner_id = identity(runner).runner_id.clone();
    let set = ManagedRunner { policy: Some(policy(json!({}))), etag: runner.etag.clone(), ..ManagedRunner::default() };
    let updated = unset.runners.update("default-org", &runner_id, set, &mask(&["policy"]), at(1))?;
    assert_eq!(updated.policy, Some(Policy::default()), "an update sets the first policy");

    let both = world(&|values| values.runners[0].never_configured = true).err().expect("refused");
    assert_eq!(both.violations()[0].field, "runners[0].neverConfigured");
    let neither = world(&|values| values.runners[0].policy = None).err().expect("refused");
    assert_eq!(neither.violations()[0].field, "runners[0].policy");
    Ok(())
}
