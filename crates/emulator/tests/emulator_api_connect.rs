//! Every EmulatorService RPC over Connect JSON with real `curl`, as a script or the CLI would call
//! it: lowerCamelCase names, enums by name, int64 as strings, Timestamps as RFC 3339, Durations as
//! `"2s"`; and `permission_denied` for a user token on each of them.

mod common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

const SERVICE: &str = "coreweave.sandbox.emulator.v1.EmulatorService";

/// POSTs a Connect JSON request with curl; returns the HTTP status and the parsed body.
async fn curl(base_url: &str, token: &str, path: &str, body: Value) -> (u16, Value) {
    let (url, token) = (format!("{base_url}/{path}"), token.to_owned());
    tokio::task::spawn_blocking(move || {
        let output = Command::new("curl")
            .args(["--silent", "--show-error", "--max-time", "30", "-X", "POST", "-w", "\n%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .args(["-H", "Content-Type: application/json", "-H", "Connect-Protocol-Version: 1"])
            .args(["--data", &body.to_string(), &url])
            .output()
            .expect("curl runs");
        assert!(output.status.success(), "curl failed: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).expect("utf-8");
        let (json, status) = text.rsplit_once('\n').expect("status line");
        (status.parse().expect("HTTP status"), serde_json::from_str(json).unwrap_or(Value::Null))
    })
    .await
    .expect("curl task")
}

#[tokio::test]
async fn every_rpc_over_connect_json_with_curl() {
    let emulator = start().await;
    let info = emulator.info().clone();
    let (base, admin) = (info.base_url.as_str(), info.admin_token.as_str());
    let call = |method: &str, body: Value| {
        let path = format!("{SERVICE}/{method}");
        async move {
            let (status, reply) = curl(base, admin, &path, body).await;
            assert_eq!(status, 200, "{path}: {reply}");
            reply
        }
    };

    let clock = call("GetClock", json!({})).await;
    assert_eq!(clock["clock"]["frozen"], json!(null), "false is the default and is omitted: {clock}");
    assert!(clock["clock"]["now"].as_str().unwrap().ends_with('Z'), "{clock}");
    let frozen = call("FreezeClock", json!({})).await;
    assert_eq!(frozen["clock"]["frozen"], true);

    // A sandbox through the public API (Connect JSON too), then its job and Pod.
    let (status, created) = curl(
        base,
        &info.user_token,
        "coreweave.sandbox.v1.SandboxService/CreateSandbox",
        json!({"sandbox": {"spec": {
            "containers": [{"name": "main", "image": "python:3.11", "command": "/bin/sh", "args": ["-c", "sleep infinity"],
                            "resourceRequirements": {"requests": {"cpu": "1500m", "memory": "512Mi"}}}],
            "runnerIds": [info.runner_id], "mode": "SANDBOX_MODE_CKS",
            "annotations": {"sunk.coreweave.com/partition": "hpc-prod", "sunk.coreweave.com/user-id": "1001"}}}}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let id = created["sandboxId"].as_str().unwrap().to_owned();
    let advanced = call("AdvanceClock", json!({"duration": "2s"})).await;
    assert_eq!(advanced["clock"]["frozen"], true);

    let accounting = call("ListJobs", json!({"source": "JOB_SOURCE_ACCOUNTING"})).await;
    let job = &accounting["jobs"][0];
    assert!(job["name"].as_str().unwrap().contains(&id), "{job}");
    assert_eq!(job["source"], "JOB_SOURCE_ACCOUNTING");
    assert_eq!(job["state"], "JOB_STATE_RUNNING");
    assert_eq!((&job["partition"], &job["user"], &job["uid"]), (&json!("hpc-prod"), &json!("alice"), &json!(1001)));
    assert_eq!((&job["reqCpus"], &job["allocCpus"], &job["reqMemMb"]), (&json!(2), &json!(2), &json!("512")));
    assert_eq!(job["elapsedSeconds"], "2");
    assert!(job["submitTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(job["pod"]["sandboxId"], id.as_str());
    let job_id = job["jobId"].as_u64().unwrap();

    let pods = call("ListPods", json!({"labelSelector": format!("sandbox.coreweave.com/sandbox-id={id}")})).await;
    let pod = &pods["pods"][0];
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["metadata"]["labels"]["sandbox.coreweave.com/sandbox-id"], id.as_str());
    assert_eq!(pod["spec"]["schedulerName"], "slurm-scheduler");
    assert_eq!(pod["origin"]["placeholderJobId"], json!(job_id));
    let (namespace, pod_name) = (
        pod["metadata"]["namespace"].as_str().unwrap().to_owned(),
        pod["metadata"]["name"].as_str().unwrap().to_owned(),
    );

    let nodes = call("ListNodes", json!({"labelSelector": "sunk.coreweave.com/nodeset=cpu"})).await;
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 4);
    let events = call("ListEvents", json!({"involvedObjectName": pod_name})).await;
    assert_eq!(events["events"][0]["reason"], "Submitted");
    assert_eq!(events["events"][0]["involvedObject"]["kind"], "Pod");
    let maps = call("ListConfigMaps", json!({"namespace": "tenant-slurm"})).await;
    assert!(maps["configMaps"][0]["data"]["scheduler.conf"].as_str().unwrap().contains("killWait: 60s"));
    let namespaces = call("ListNamespaces", json!({"fieldSelector": "metadata.name=sandbox-alice"})).await;
    assert_eq!(namespaces["namespaces"][0]["phase"], "Active");
    let slurm_nodes = call("ListSlurmNodes", json!({"partitions": ["cpu"]})).await;
    assert_eq!(slurm_nodes["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(slurm_nodes["nodes"][0]["realMemoryMb"], "65536");
    let partitions = call("ListPartitions", json!({})).await;
    assert_eq!(
        (&partitions["partitions"][0]["name"], &partitions["partitions"][0]["default"]),
        (&json!("cpu"), &json!(true))
    );

    let values = call("GetValues", json!({})).await;
    assert!(values["yaml"].as_str().unwrap().contains("KillWait: 60"));
    assert_eq!(values["values"]["slurmConfig"]["KillWait"], 60.0);
    let applied = call("ApplyValues", json!({"values": {"slurmConfig": {"KillWait": 50}}})).await;
    assert_eq!(applied["values"]["slurmConfig"]["KillWait"], 50.0);
    let (status, refused) =
        curl(base, admin, &format!("{SERVICE}/ApplyValues"), json!({"yaml": "slurmConfig: {KillWiat: 5}"})).await;
    assert_eq!((status, refused["code"].as_str()), (400, Some("invalid_argument")), "{refused}");
    assert!(refused["message"].as_str().unwrap().starts_with("yaml.slurmConfig.KillWiat: unknown field"), "{refused}");

    let batch = call("SubmitBatchJob", json!({"name": "train", "user": "bob", "cpus": 4, "runSeconds": 60})).await;
    assert_eq!(batch["job"]["state"], "JOB_STATE_RUNNING");
    assert_eq!(batch["job"]["kind"], "JOB_KIND_BATCH");

    let cancelled = call("CancelJob", json!({"jobId": job_id, "uid": 1001})).await;
    assert_eq!(cancelled["job"]["state"], "JOB_STATE_CANCELLED");
    assert_eq!(cancelled["job"]["completing"], true);
    assert_eq!(cancelled["job"]["cancelledByUid"], 1001);
    let (status, unknown) = curl(base, admin, &format!("{SERVICE}/CancelJob"), json!({"jobId": 424242})).await;
    assert_eq!((status, unknown["code"].as_str()), (404, Some("not_found")), "{unknown}");
    assert_eq!(unknown["message"], "scancel: error: Kill job error on job id 424242: Invalid job id specified");

    let resumed = call("ResumeNode", json!({"nodeName": "slurm-cpu-0"})).await;
    assert_eq!(resumed["node"]["name"], "slurm-cpu-0");
    let deleted = call("DeletePod", json!({"namespace": namespace, "name": pod_name, "gracePeriodSeconds": "5"})).await;
    assert_eq!(deleted["pod"]["metadata"]["deletionGracePeriodSeconds"], "5");
    let running = call("ResumeClock", json!({})).await;
    assert_eq!(running["clock"]["frozen"], json!(null));
    let reset = call("Reset", json!({})).await;
    assert!(reset["clock"]["now"].is_string(), "{reset}");
    let after = call("ListJobs", json!({})).await;
    assert_eq!(after["jobs"], json!(null), "a fresh world has no jobs: {after}");
    emulator.stop().await;
}

#[tokio::test]
async fn a_user_token_is_denied_every_rpc_but_the_slurm_views_over_connect() {
    let emulator = start().await;
    let info = emulator.info().clone();
    // What any Slurm user reads (squeue, sacct, sinfo, scontrol show config, the clock), a user
    // token reads too.
    for method in ["ListJobs", "ListSlurmNodes", "ListPartitions", "ListSlurmUsers", "GetSlurmConfig", "GetClock"] {
        let (status, reply) = curl(&info.base_url, &info.user_token, &format!("{SERVICE}/{method}"), json!({})).await;
        assert_eq!(status, 200, "{method}: {reply}");
    }
    for method in [
        "GetValues",
        "ApplyValues",
        "ListPods",
        "DeletePod",
        "ListNodes",
        "ListEvents",
        "ListConfigMaps",
        "ListNamespaces",
        "CancelJob",
        "SubmitBatchJob",
        "ResumeNode",
        "DrainNode",
        "FreezeClock",
        "AdvanceClock",
        "ResumeClock",
        "Reset",
    ] {
        let (status, reply) = curl(&info.base_url, &info.user_token, &format!("{SERVICE}/{method}"), json!({})).await;
        assert_eq!((status, reply["code"].as_str()), (403, Some("permission_denied")), "{method}: {reply}");
    }
    emulator.stop().await;
}
