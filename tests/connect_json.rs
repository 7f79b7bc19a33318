//! The Connect JSON bodies that public examples send (docs/facts/runner-api.md#connect-bodies, the
//! guide's docs/facts/sunk-guide.md#step-2) decode into our messages and encode back as proto3
//! JSON: lowerCamelCase out, both spellings in, int64 as strings, enums by name, FieldMask as a
//! comma string, Timestamp as RFC 3339, unknown fields rejected by name
//! (docs/facts/runner-api.md#gap-16).

use cwsandbox_api::sandbox_v1::{
    GetManagedRunnerRequest, ManagedRunner, ReleaseChannel, Sandbox, UpdateManagedRunnerRequest,
};
use prost::Message;
use serde_json::{Value, json};

fn round_trip<T>(body: &Value) -> T
where
    T: serde::de::DeserializeOwned + serde::Serialize + Message + Default + PartialEq + std::fmt::Debug,
{
    let decoded: T = serde_json::from_value(body.clone()).expect("decodes");
    assert_eq!(&serde_json::to_value(&decoded).expect("encodes"), body, "JSON round trip");
    let binary = T::decode(decoded.encode_to_vec().as_slice()).expect("binary decodes");
    assert_eq!(binary, decoded, "binary round trip");
    decoded
}

fn rejection<T: serde::de::DeserializeOwned + std::fmt::Debug>(body: &str) -> String {
    serde_json::from_str::<T>(body).expect_err("must be rejected").to_string()
}

#[test]
fn get_managed_runner_body_of_the_guide() {
    let request: GetManagedRunnerRequest = round_trip(&json!({"runnerId": "r1"}));
    assert_eq!(request.runner_id, "r1");
    assert_eq!(serde_json::to_string(&request).unwrap(), r#"{"runnerId":"r1"}"#);
}

#[test]
fn proto_field_names_are_accepted_on_input() {
    let request: GetManagedRunnerRequest = serde_json::from_str(r#"{"runner_id": "r1"}"#).unwrap();
    assert_eq!(request.runner_id, "r1");
}

#[test]
fn update_managed_runner_body_of_the_guide() {
    let body = json!({
        "runnerId": "r1",
        "managedRunner": {
            "identity": {"runnerId": "r1", "runnerGroupId": "default", "zone": "us-east-04a",
                         "clusterId": "00000000-0000-4000-8000-000000000001", "clusterName": "cks-1"},
            "policy": {"base": {"spec": {"schedulerName": "slurm-scheduler"}}},
            "etag": "etag-7"
        },
        "updateMask": "policy"
    });
    let request: UpdateManagedRunnerRequest = round_trip(&body);
    assert_eq!(request.runner_id, "r1");
    assert_eq!(request.update_mask.as_ref().unwrap().paths, ["policy"]);
    let runner = request.managed_runner.as_ref().unwrap();
    assert_eq!(runner.etag, "etag-7");
    assert_eq!(runner.identity.as_ref().unwrap().cluster_name, "cks-1");
    let base = serde_json::to_value(runner.policy.as_ref().unwrap().base.as_ref().unwrap()).unwrap();
    assert_eq!(base["spec"]["schedulerName"], "slurm-scheduler");
}

#[test]
fn unknown_fields_are_rejected_by_name() {
    let top = rejection::<GetManagedRunnerRequest>(r#"{"runnerId": "r1", "runnerID": "r2"}"#);
    assert!(top.contains("runnerID"), "{top}");

    let nested = rejection::<UpdateManagedRunnerRequest>(
        r#"{"runnerId": "r1", "managedRunner": {"policy": {"constraints": {"lifecycle": {"maxLifetimeSeconds": 5}}}}}"#,
    );
    assert!(nested.contains("maxLifetimeSeconds"), "{nested}");

    let legacy = rejection::<ManagedRunner>(r#"{"profileBindings": []}"#);
    assert!(legacy.contains("profileBindings"), "{legacy}");
}

#[test]
fn wrong_types_are_rejected() {
    let error = rejection::<UpdateManagedRunnerRequest>(r#"{"runnerId": 7}"#);
    assert!(error.contains("runnerId") || error.contains("string"), "{error}");
    let error = rejection::<ManagedRunner>(r#"{"spec": {"releaseChannel": "RELEASE_CHANNEL_NIGHTLY"}}"#);
    assert!(error.contains("RELEASE_CHANNEL_NIGHTLY"), "{error}");
}

#[test]
fn full_managed_runner_round_trips_with_proto3_json_rules() {
    let body = json!({
        "identity": {"runnerId": "test-runner", "runnerGroupId": "development", "zone": "us-east-04a",
                     "clusterId": "00000000-0000-4000-8000-000000000001"},
        "displayName": "Development runner",
        "spec": {
            "releaseChannel": "RELEASE_CHANNEL_RAPID",
            "enforceResourceLimits": true,
            "maintenancePolicy": {
                "windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}],
                "exclusions": [{"startTime": "2026-12-24T00:00:00Z", "endTime": "2026-12-26T00:00:00Z",
                                "reason": "Holiday freeze"}]
            },
            "overrides": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "sandbox",
                                           "effect": "NoSchedule"}],
                          "scaling": {"replicas": 2, "autoscalingEnabled": true, "minReplicas": 2, "maxReplicas": 4}},
            "dataPlane": {"loadBalancer": {"scope": "RUNNER_DATA_PLANE_SERVICE_SCOPE_PRIVATE",
                                           "sourceRanges": ["10.0.0.0/8"]}}
        },
        "policy": {
            "displayName": "Development policy",
            "base": {"metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
                     "spec": {"schedulerName": "slurm-scheduler"}},
            "constraints": {
                "resources": {"maxCpu": "8", "maxMemory": "32Gi", "maxGpuCount": "0", "requireLimits": true},
                "network": {
                    "allowedEgress": [{"cidr": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
                                      {"tenant": "TENANT_SCOPE_SAME_ORG"},
                                      {"httpsHostname": "*", "httpsHostnameExcept": ["blocked.example.com"]}],
                    "dnsEgress": "DNS_EGRESS_MODE_ALLOW"
                },
                "security": {"allowedRuntimeClasses": ["kata"], "defaultCpuRuntimeClass": "kata",
                             "runtimeClassMappings": [{"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT", "nodeDefault": true}]},
                "lifecycle": {"defaultLifetimeSeconds": 3600},
                "metadata": {"deniedAnnotationPrefixes": ["internal.example.com/"], "maxAnnotationCount": 20},
                "volumes": {"allowedMedia": ["STORAGE_MEDIUM_DISK"], "maxSize": "100Gi"}
            },
            "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["203.0.113.0/24"]}}
        },
        "etag": "etag-1",
        "installStatus": "RUNNER_INSTALL_STATUS_READY",
        "activeRevision": "1",
        "createTime": "2026-11-30T06:18:08Z"
    });
    let runner: ManagedRunner = round_trip(&body);
    assert_eq!(runner.spec.as_ref().unwrap().release_channel(), ReleaseChannel::Rapid);
    assert_eq!(runner.active_revision, 1);
    let resources = runner.policy.unwrap().constraints.unwrap().resources.unwrap();
    assert_eq!(resources.max_gpu_count, Some(0), "an explicit 0 (GPUs forbidden) survives");
}

#[test]
fn numbers_for_int64_and_enums_are_accepted_on_input() {
    let runner: ManagedRunner = serde_json::from_value(json!({
        "spec": {"releaseChannel": 2},
        "activeRevision": 3,
        "policy": {"constraints": {"resources": {"maxGpuCount": 4}}}
    }))
    .unwrap();
    assert_eq!(runner.spec.as_ref().unwrap().release_channel(), ReleaseChannel::Rapid);
    let out = serde_json::to_value(&runner).unwrap();
    assert_eq!(out["spec"]["releaseChannel"], "RELEASE_CHANNEL_RAPID");
    assert_eq!(out["activeRevision"], "3");
    assert_eq!(out["policy"]["constraints"]["resources"]["maxGpuCount"], "4");
}

#[test]
fn field_mask_is_a_comma_string_of_camel_case_paths() {
    let request: UpdateManagedRunnerRequest =
        round_trip(&json!({"runnerId": "r1", "updateMask": "displayName,identity.runnerGroupId,spec.releaseChannel"}));
    assert_eq!(
        request.update_mask.unwrap().paths,
        ["display_name", "identity.runner_group_id", "spec.release_channel"]
    );
}

#[test]
fn public_sandbox_messages_use_the_same_rules() {
    let body = json!({
        "sandboxId": "sb-1",
        "spec": {
            "containers": [{"name": "main", "image": "python:3.11",
                            "resourceRequirements": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                                     "limits": {"cpu": "2", "memory": "2Gi"}}}],
            "runnerIds": ["r1"],
            "mode": "SANDBOX_MODE_CKS",
            "annotations": {"sunk.coreweave.com/partition": "hpc-prod"},
            "maxLifetimeSeconds": 600
        },
        "status": {"state": "STATE_RUNNING", "createTime": "2026-11-30T06:18:08.250Z", "exitCode": 0}
    });
    let sandbox: Sandbox = round_trip(&body);
    assert_eq!(sandbox.status.as_ref().unwrap().exit_code, Some(0), "proto3 optional keeps an explicit 0");
}
