//! The Slurm commands as users run them: the `cwsbx` binary behind symlinks named `sacct`,
//! `squeue`, `scontrol`, `scancel` and `sinfo`, against a real emulator (testkit harness: port 0,
//! no sleeps); and the guide's `sacct … | grep <sandbox-id>` lines after the real Python client
//! created a sandbox (docs/facts/sunk-guide.md#step-3, docs/facts/sunk-guide.md#troubleshooting).
//! The formats are those of docs/facts/slurm.md.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cwsandbox_client::{Config, emulator_v1 as pb};
use cwsandbox_testkit::emulator::{EmulatorProcess, emulator};
use cwsandbox_testkit::text;

/// A directory of symlinks `sacct` … → the cwsbx binary, made by `cwsbx slurm install-links`.
fn links(emu: &EmulatorProcess) -> PathBuf {
    let dir = emu.dir().join("slurm-bin");
    let output = Command::new(env!("CARGO_BIN_EXE_cwsbx")).args(["slurm", "install-links"]).arg(&dir).output().unwrap();
    assert!(output.status.success(), "install-links: {}", text(&output.stderr));
    for name in ["sacct", "squeue", "sinfo", "scontrol", "scancel"] {
        assert!(dir.join(name).symlink_metadata().unwrap().file_type().is_symlink(), "{name} is a symlink");
    }
    dir
}

fn slurm(emu: &EmulatorProcess, bin: &Path, name: &str, args: &[&str]) -> Output {
    Command::new(bin.join(name)).args(args).envs(emu.env()).env_remove("CWSBX_SLURM_USER").output().unwrap()
}

fn ok(emu: &EmulatorProcess, bin: &Path, name: &str, args: &[&str]) -> String {
    let output = slurm(emu, bin, name, args);
    assert!(output.status.success(), "{name} {args:?}: {}{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

fn admin(emu: &EmulatorProcess) -> cwsandbox_client::EmulatorAdmin {
    cwsandbox_client::Client::new(Config::new(&emu.ready.base_url, &emu.ready.admin_token)).unwrap().emulator().unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// An emulator, the Slurm links, and a batch job `train` (2 CPUs, 1536 MB) that runs.
fn a_running_batch_job() -> (EmulatorProcess, PathBuf, pb::Job) {
    let emu = emulator();
    let bin = links(&emu);
    let rt = runtime();
    let _context = rt.enter();
    let request = pb::SubmitBatchJobRequest { name: "train".into(), cpus: 2, mem_mb: 1536, ..Default::default() };
    let job = rt.block_on(admin(&emu).submit_batch_job(&request)).unwrap().expect("a queue row");
    (emu, bin, job)
}

#[test]
fn symlinked_commands_show_cancel_and_account_a_batch_job() {
    let (emu, bin, job) = a_running_batch_job();
    let id = job.job_id.to_string();

    let queue = ok(&emu, &bin, "squeue", &[]);
    assert!(
        queue.starts_with("             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"),
        "{queue}"
    );
    let row = queue
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("{queue}"));
    assert_eq!(&row[..18], format!("{id:>18}"));
    assert!(row.contains("    train     root  R "), "{row}");

    let shown = ok(&emu, &bin, "scontrol", &["show", "job", &id]);
    assert!(shown.starts_with(&format!("JobId={id} JobName=train\n   UserId=root(0) ")), "{shown}");
    assert!(shown.contains("\n   JobState=RUNNING Reason=None Dependency=(null)\n"), "{shown}");
    assert!(shown.contains("\n   ReqTRES=cpu=2,mem=1.50G,node=1,billing=2\n"), "{shown}");
    assert!(shown.contains("\n   Partition=cpu AllocNode:Sid=slurm-login-0:0\n"), "{shown}");
    assert!(shown.ends_with(&format!("\n   StdOut=//slurm-{id}.out\n   \n\n")), "{shown}");
    let one_line = ok(&emu, &bin, "scontrol", &["-o", "show", "job", &id]);
    assert_eq!(one_line.lines().count(), 1, "{one_line}");
    assert!(one_line.ends_with(" \n"), "{one_line:?}");
    // squeue's long names, sizes and suffixes.
    let long = ok(&emu, &bin, "squeue", &["-h", "-j", &id, "--Format=JobId:.8|,AllocNodes:14,Name:6,State"]);
    assert_eq!(long, format!("{id:>8}|slurm-login-0 train {:<20}\n", "RUNNING"));
    let config = ok(&emu, &bin, "scontrol", &["show", "config"]);
    assert!(config.starts_with("Configuration data as of "), "{config}");
    for line in [
        "ClusterName             = slurm\n",
        "SlurmctldHost[0]        = slurm-controller-0\n",
        "MinJobAge               = 300 sec\n",
    ] {
        assert!(config.contains(line), "{line:?} in {config}");
    }
    assert!(config.ends_with("\nSlurmctld(primary) at slurm-controller-0 is UP\n"), "{config}");

    let steps = ok(&emu, &bin, "sacct", &["-j", &id, "-o", "JobID,JobName,State", "-P", "-n"]);
    assert_eq!(steps, format!("{id}|train|RUNNING\n{id}.batch|batch|RUNNING\n{id}.extern|extern|RUNNING\n"));
    let nodes = ok(&emu, &bin, "sinfo", &[]);
    assert!(nodes.starts_with("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\ncpu*  "), "{nodes}");
    assert!(nodes.contains(" mix slurm-cpu-"), "{nodes}");

    let cancel = slurm(&emu, &bin, "scancel", &[&id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert_eq!(ok(&emu, &bin, "sacct", &["-j", &id, "-o", "State", "-P", "-X"]), "State\nCANCELLED by 0\n");
    assert_eq!(ok(&emu, &bin, "sacct", &["-j", &id, "-o", "State", "-X", "-n"]), "CANCELLED+ \n");
    // As real Slurm records a job cancelled while it ran: the job line 0:0, its script's step
    // killed by SIGTERM.
    assert_eq!(
        ok(&emu, &bin, "sacct", &["-j", &id, "-o", "JobID,ExitCode", "-P", "-n"]),
        format!("{id}|0:0\n{id}.batch|0:15\n{id}.extern|0:0\n")
    );

    // A job that is over, or unknown, is what a cancel wants: Slurm says nothing and succeeds;
    // `-v` names the job and the controller's answer, still succeeding.
    let again = slurm(&emu, &bin, "scancel", &[&id]);
    assert_eq!((again.status.code(), text(&again.stderr)), (Some(0), String::new()));
    let again_verbose = slurm(&emu, &bin, "scancel", &["-v", &id]);
    assert_eq!(again_verbose.status.code(), Some(0));
    assert_eq!(
        text(&again_verbose.stderr),
        format!(
            "scancel: Terminating job {id}\nscancel: error: Kill job error on job id {id}: Job/step already completing or completed\n"
        )
    );
    let unknown = slurm(&emu, &bin, "scancel", &["999999"]);
    assert_eq!((unknown.status.code(), text(&unknown.stderr)), (Some(0), String::new()));
    let unknown_verbose = slurm(&emu, &bin, "scancel", &["--verbose", "999999"]);
    assert_eq!(unknown_verbose.status.code(), Some(0));
    assert_eq!(
        text(&unknown_verbose.stderr),
        "scancel: Terminating job 999999\nscancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    );
    // With `--signal` Slurm verifies the ids first: an unknown or finished job is an error, exit 1
    // (`-Q` keeps quiet about it, and still fails).
    for target in ["999999", id.as_str()] {
        let signalled = slurm(&emu, &bin, "scancel", &["--signal=KILL", target]);
        assert_eq!(
            (signalled.status.code(), text(&signalled.stderr)),
            (Some(1), format!("scancel: error: Kill job error on job id {target}: Invalid job id specified\n"))
        );
    }
    let quiet = slurm(&emu, &bin, "scancel", &["-Q", "-s", "TERM", "999999"]);
    assert_eq!((quiet.status.code(), text(&quiet.stderr)), (Some(1), String::new()));
    // An invalid format is reported while the options are parsed, before any output: with both
    // streams on one pipe the error comes first, as Slurm's does.
    for (name, format, error) in [
        ("squeue", "%.5i %!", "squeue: error: Invalid job format specification: !"),
        ("sinfo", "%P %!", "Invalid node format specification: !"),
    ] {
        let merged = Command::new("sh")
            .args(["-c", "\"$0\" \"$@\" 2>&1"])
            .arg(bin.join(name))
            .args(["-o", format])
            .envs(emu.env())
            .env_remove("CWSBX_SLURM_USER")
            .output()
            .unwrap();
        let merged = text(&merged.stdout);
        assert!(merged.starts_with(&format!("{error}\n")), "{name}: {merged}");
        assert!(merged.lines().count() > 1, "{name}: the table follows: {merged}");
    }
    let missing = slurm(&emu, &bin, "scontrol", &["show", "job", "999999"]);
    assert_eq!(
        (missing.status.code(), text(&missing.stderr)),
        (Some(1), "slurm_load_jobs error: Invalid job id specified\n".to_owned())
    );
    let invalid = slurm(&emu, &bin, "sacct", &["-o", "foo"]);
    assert_eq!(
        (invalid.status.code(), text(&invalid.stderr)),
        (Some(1), "sacct: error: Invalid field requested: \"foo\"\n".to_owned())
    );
    assert!(invalid.stdout.is_empty());

    // `cwsbx slurm <command>` is the same command.
    let via_cwsbx = Command::new(env!("CARGO_BIN_EXE_cwsbx"))
        .args(["slurm", "sacct", "-j", &id, "-o", "State", "-P", "-X", "-n"])
        .envs(emu.env())
        .output()
        .unwrap();
    assert_eq!(text(&via_cwsbx.stdout), "CANCELLED by 0\n", "{}", text(&via_cwsbx.stderr));

    // A non-root caller does not see root's jobs unless it asks for them.
    let as_alice = |args: &[&str]| {
        Command::new(bin.join("sacct")).args(args).envs(emu.env()).env("CWSBX_SLURM_USER", "alice").output().unwrap()
    };
    assert_eq!(text(&as_alice(&["-X", "-n", "-P", "-o", "JobID"]).stdout), "");
    assert_eq!(text(&as_alice(&["-X", "-n", "-P", "-o", "JobID", "-u", "root"]).stdout), format!("{id}\n"));

    // A sandbox_user's token reads the Slurm views as any Slurm user does, acting as its token's
    // uid (the generated user token is alice's): her own jobs by default, root's with `-u`.
    let with_user_token = |name: &str, args: &[&str]| {
        Command::new(bin.join(name))
            .args(args)
            .envs(emu.env())
            .env("CWSANDBOX_API_KEY", &emu.ready.user_token)
            .env_remove("CWSBX_SLURM_USER")
            .output()
            .unwrap()
    };
    for (name, args) in [("squeue", &["-h"][..]), ("sinfo", &["-h"][..]), ("sacct", &["-X", "-n"][..])] {
        let output = with_user_token(name, args);
        assert!(output.status.success(), "{name} with a user token: {}", text(&output.stderr));
    }
    assert_eq!(text(&with_user_token("sacct", &["-X", "-n", "-P", "-o", "JobID"]).stdout), "");
    emu.stop().unwrap();
}

/// The guide's KillWait warning drains a node (docs/facts/sunk.md#drain-margin); `scontrol update`
/// is how an operator drains one by hand and brings it back.
#[test]
fn scancel_with_a_signal_names_it_and_cancels_a_running_job() {
    let (emu, bin, job) = a_running_batch_job();
    let id = job.job_id.to_string();
    let signalled = slurm(&emu, &bin, "scancel", &["-v", "--signal=TERM", &id]);
    assert_eq!(
        (signalled.status.code(), text(&signalled.stderr)),
        (Some(0), format!("scancel: Signal 15 to job {id}\n"))
    );
    assert_eq!(ok(&emu, &bin, "sacct", &["-j", &id, "-o", "State", "-P", "-X", "-n"]), "CANCELLED by 0\n");
}

#[test]
fn scontrol_update_drains_and_resumes_nodes() {
    let emu = emulator();
    let bin = links(&emu);
    let state = |node: &str| ok(&emu, &bin, "sinfo", &["-h", "-N", "-p", "cpu", "-n", node, "-o", "%t"]);
    assert_eq!(state("slurm-cpu-1"), "idle\n");

    // A drain needs a reason, as in Slurm; a node that does not exist is Slurm's error.
    let no_reason = slurm(&emu, &bin, "scontrol", &["update", "nodename=slurm-cpu-1", "state=drain"]);
    assert_eq!(no_reason.status.code(), Some(1));
    assert_eq!(text(&no_reason.stderr), "You must specify a reason when DOWNING or DRAINING a node. Request denied\n");
    let unknown = slurm(&emu, &bin, "scontrol", &["update", "NodeName=slurm-cpu-99", "State=RESUME"]);
    assert_eq!(
        (unknown.status.code(), text(&unknown.stderr)),
        (Some(1), "slurm_update error: Invalid node name specified\n".to_owned())
    );
    let down = slurm(&emu, &bin, "scontrol", &["update", "nodename=slurm-cpu-1", "state=down", "reason=x"]);
    assert_eq!(down.status.code(), Some(1));
    assert!(text(&down.stderr).contains("State=down is not emulated"), "{}", text(&down.stderr));

    // The drain records who ran scontrol and when: `sinfo -R` and `scontrol show node` say so.
    let rt = runtime();
    let _context = rt.enter();
    let frozen = rt.block_on(admin(&emu).freeze_clock()).unwrap().now.unwrap().seconds;
    let at = chrono::DateTime::from_timestamp(frozen, 0).unwrap().format("%FT%T").to_string();
    let drained =
        slurm(&emu, &bin, "scontrol", &["update", "NodeName=slurm-cpu-1", "State=DRAIN", "Reason=disk check"]);
    assert_eq!(
        (drained.status.code(), text(&drained.stdout), text(&drained.stderr)),
        (Some(0), String::new(), String::new())
    );
    let as_alice = Command::new(bin.join("scontrol"))
        .args(["update", "NodeName=slurm-cpu-2", "State=DRAIN", "Reason=disk check"])
        .envs(emu.env())
        .env("CWSBX_SLURM_USER", "alice")
        .output()
        .unwrap();
    assert!(as_alice.status.success(), "{}", text(&as_alice.stderr));
    assert_eq!(state("slurm-cpu-1"), "drain\n");
    assert_eq!(state("slurm-cpu-2"), "drain\n");
    assert_eq!(
        ok(&emu, &bin, "sinfo", &["-R"]),
        format!(
            "REASON               USER      TIMESTAMP           NODELIST\n\
             disk check           root      {at} slurm-cpu-1\n\
             disk check           alice     {at} slurm-cpu-2\n"
        )
    );
    let shown = ok(&emu, &bin, "scontrol", &["show", "node", "slurm-cpu-1"]);
    assert!(shown.contains(&format!("\n   Reason=disk check [root@{at}]\n\n")), "{shown}");

    ok(&emu, &bin, "scontrol", &["update", "nodename=slurm-cpu-1", "state=resume"]);
    ok(&emu, &bin, "scontrol", &["update", "nodename=slurm-cpu-2", "state=undrain"]);
    assert_eq!(state("slurm-cpu-1"), "idle\n");
    assert_eq!(state("slurm-cpu-2"), "idle\n");
    emu.stop().unwrap();
}

/// Step 3 of the guide with the real Python client, then its two `sacct … | grep` lines.
const GUIDE: &str = r#"
import os, subprocess, sys
from cwsandbox import ResourceOptions, Sandbox

def sh(line):
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True)
    return done.stdout.strip() + ("\n" + done.stderr.strip() if done.stderr.strip() else "")

resources = ResourceOptions(requests={"cpu": "500m", "memory": "512Mi"}, limits={"cpu": "2", "memory": "2Gi"})
with Sandbox.run(placement_mode="cks", runner_ids=[os.environ["RUNNER_ID"]], resources=resources) as sb:
    sid = sb.sandbox_id
    print("ID=" + sid)
    print("HOSTNAME=" + sb.exec(["hostname"]).result().stdout.strip())
    print("RUNNING=" + sh(f"sacct --format=JobID,JobName%60,State,NodeList -X | grep {sid}"))
    print("DETAIL=" + sh(f"sacct --format=JobID,JobName%60,Partition,Account,AllocCPUS,ReqMem,State,NodeList,Start,End -X | grep {sid}"))
print("AFTER=" + sh(f"sacct --format=JobID,JobName%60,State,NodeList -X | grep {sid}"))
print("PARSABLE=" + sh(f"sacct -X -P -n --format=JobName,State,End | grep {sid}"))
"#;

fn field<'a>(output: &'a str, key: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in:\n{output}"))
}

#[test]
fn the_guides_sacct_lines_find_a_python_clients_sandbox() {
    let python = cwsandbox_testkit::python_env().expect("python venv");
    let emu = emulator();
    let bin = links(&emu);
    let path =
        format!("{}:{}:{}", bin.display(), python.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new(python.python())
        .args(["-c", GUIDE])
        .current_dir(emu.dir())
        .envs(emu.env())
        .env("PATH", path)
        .env_remove("CWSBX_SLURM_USER")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    eprintln!("{stdout}");
    let id = field(&stdout, "ID");
    assert!(!id.is_empty());

    // While it runs: one line, the job RUNNING on a Slurm node, the name holding the sandbox id.
    let running = field(&stdout, "RUNNING");
    let columns: Vec<&str> = running.split_whitespace().collect();
    assert_eq!(columns.len(), 4, "{running}");
    assert!(columns[1].ends_with(&format!("sandbox-{id}")), "{running}");
    assert_eq!(columns[2], "RUNNING", "{running}");
    assert!(columns[3].starts_with("slurm-cpu-"), "{running}");
    // JobName%60 is right-justified in 60 columns after the 12-wide JobID and its space.
    assert_eq!(running.find(columns[1]).map(|at| at + columns[1].len()), Some(13 + 60), "{running}");

    // Partition, account, CPUs and memory of the placeholder: the default partition, root's
    // account, 500m → 1 CPU, 512Mi → 512M.
    let detail = field(&stdout, "DETAIL");
    let columns: Vec<&str> = detail.split_whitespace().collect();
    assert_eq!(columns.len(), 10, "{detail}");
    assert_eq!(&columns[2..7], ["cpu", "root", "1", "512M", "RUNNING"], "{detail}");
    assert_eq!(columns[7], field(&stdout, "RUNNING").split_whitespace().nth(3).unwrap());
    assert_eq!(columns[8].len(), 19, "Start is a date: {detail}");
    assert_eq!(columns[9], "Unknown", "End of a running job: {detail}");

    // After the sandbox is gone: the emulator's configured final state (CANCELLED by default,
    // cut to `CANCELLED+` at the default width), and an End.
    let after = field(&stdout, "AFTER");
    let columns: Vec<&str> = after.split_whitespace().collect();
    assert!(matches!(columns[2], "CANCELLED+" | "COMPLETED"), "{after}");
    let parsable = field(&stdout, "PARSABLE");
    let parts: Vec<&str> = parsable.split('|').collect();
    assert!(parts[1] == "COMPLETED" || parts[1].starts_with("CANCELLED by "), "{parsable}");
    assert_eq!(parts[2].len(), 19, "{parsable}");
    emu.stop().unwrap();
}

#[test]
fn squeue_and_scontrol_print_slurms_json_documents() {
    let (emu, bin, job) = a_running_batch_job();
    let id = job.job_id;

    let document: serde_json::Value = serde_json::from_str(&ok(&emu, &bin, "squeue", &["--json"])).unwrap();
    // data_parser v0.0.43's response: the data, then meta, errors, warnings, in Slurm's order.
    let keys: Vec<&str> = document.as_object().unwrap().keys().map(String::as_str).collect();
    let mut sorted = vec!["errors", "jobs", "last_backfill", "last_update", "meta", "warnings"];
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "serde_json sorts the keys it reads back");
    assert_eq!(document["meta"]["plugin"]["data_parser"], "data_parser/v0.0.43");
    assert_eq!(document["meta"]["command"], serde_json::json!(["squeue", "--json"]));
    assert_eq!(document["meta"]["slurm"]["cluster"], "slurm");
    let jobs = document["jobs"].as_array().unwrap();
    let record = jobs.iter().find(|record| record["job_id"] == id).unwrap_or_else(|| panic!("{document}"));
    assert_eq!(record["name"], "train");
    assert_eq!(record["job_state"], serde_json::json!(["RUNNING"]));
    assert_eq!(record["user_name"], "root");
    assert_eq!(record["partition"], "cpu");
    assert_eq!(record["cpus"], serde_json::json!({"set": true, "infinite": false, "number": 2}));
    assert_eq!(record["memory_per_node"], serde_json::json!({"set": true, "infinite": false, "number": 1536}));
    assert_eq!(record["time_limit"], serde_json::json!({"set": false, "infinite": true, "number": 0}));
    assert_eq!(record["exit_code"]["status"], serde_json::json!(["SUCCESS"]));
    // The same string show job prints as ReqTRES= (slurmctld keeps it converted to units).
    assert_eq!(record["tres_req_str"], "cpu=2,mem=1.50G,node=1,billing=2");
    assert_eq!(record["job_resources"]["nodes"]["list"], record["nodes"]);
    assert_eq!(record["standard_output"], format!("//slurm-{id}.out"));

    // Filters apply; formats are ignored, as Slurm says of --json.
    let filtered: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "squeue", &["--json=v0.0.43", "-t", "PD", "-o", "%i"])).unwrap();
    assert_eq!(filtered["jobs"], serde_json::json!([]));
    assert_eq!(filtered["warnings"][0]["description"], "Zero jobs to dump");

    let shown: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "scontrol", &["--json", "show", "job", &id.to_string()])).unwrap();
    assert_eq!(shown["jobs"].as_array().map(Vec::len), Some(1));
    assert_eq!(shown["jobs"][0], *record, "scontrol and squeue print the same record");

    // sacct: the accounting records (slurmdb's JOB), with their steps unless -X.
    let accounting: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "sacct", &["--json", "-j", &id.to_string()])).unwrap();
    let record = &accounting["jobs"][0];
    assert_eq!(record["job_id"], id);
    assert_eq!(record["state"]["current"], serde_json::json!(["RUNNING"]));
    assert_eq!(record["required"]["CPUs"], 2);
    assert_eq!(record["time"]["limit"], serde_json::json!({"set": false, "infinite": true, "number": 0}));
    let steps: Vec<&str> =
        record["steps"].as_array().unwrap().iter().map(|step| step["step"]["id"].as_str().unwrap()).collect();
    assert_eq!(steps, [format!("{id}.batch"), format!("{id}.extern")]);
    let cpus = record["tres"]["allocated"].as_array().unwrap().iter().find(|tres| tres["type"] == "cpu").cloned();
    assert_eq!(cpus, Some(serde_json::json!({"type": "cpu", "name": "", "id": 1, "count": 2})));
    let no_steps: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "sacct", &["--json", "-X", "-j", &id.to_string()])).unwrap();
    assert_eq!(no_steps["jobs"][0]["steps"], serde_json::json!([]));
    assert_eq!(no_steps["meta"]["command"], serde_json::json!(["sacct", "--json", "-X", "-j", id.to_string()]));

    // sinfo: one record per line sinfo prints, each with its partition's record.
    let sinfo: serde_json::Value = serde_json::from_str(&ok(&emu, &bin, "sinfo", &["--json", "-p", "cpu"])).unwrap();
    let lines = sinfo["sinfo"].as_array().unwrap();
    assert!(lines.iter().all(|line| line["partition"]["name"] == "cpu"), "{sinfo}");
    let busy: Vec<&serde_json::Value> =
        lines.iter().filter(|line| line["node"]["state"] == serde_json::json!(["MIXED"])).collect();
    assert_eq!(busy.len(), 1, "{sinfo}");
    assert_eq!(busy[0]["cpus"]["allocated"], 2);
    assert_eq!(busy[0]["nodes"]["nodes"].as_array().map(Vec::len), Some(1));
    let total: i64 = lines.iter().map(|line| line["nodes"]["total"].as_i64().unwrap()).sum();
    assert_eq!(total, lines[0]["partition"]["nodes"]["total"].as_i64().unwrap());

    // scontrol show node and show partition as NODE and PARTITION_INFO records.
    let node_name = busy[0]["nodes"]["nodes"][0].as_str().unwrap().to_owned();
    let node: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "scontrol", &["--json", "show", "node", &node_name])).unwrap();
    assert_eq!(node["nodes"][0]["name"], node_name.as_str());
    assert_eq!(node["nodes"][0]["alloc_cpus"], 2);
    assert_eq!(node["nodes"][0]["state"], serde_json::json!(["MIXED"]));
    let partitions: serde_json::Value =
        serde_json::from_str(&ok(&emu, &bin, "scontrol", &["--json", "show", "partition", "cpu"])).unwrap();
    assert_eq!(partitions["partitions"][0]["name"], "cpu");
    assert_eq!(partitions["partitions"][0]["partition"]["state"], serde_json::json!(["UP"]));

    // What is not emulated says so by name; another data_parser version is refused.
    let refused = slurm(&emu, &bin, "scontrol", &["--json", "show", "config"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).starts_with("scontrol: error: --json of show config is not emulated"),
        "{}",
        text(&refused.stderr)
    );
    for name in ["squeue", "sinfo", "sacct", "scontrol"] {
        let yaml = slurm(&emu, &bin, name, &["--yaml", "show", "job"][..if name == "scontrol" { 3 } else { 1 }]);
        assert_eq!(yaml.status.code(), Some(1), "{name}");
        assert_eq!(
            text(&yaml.stderr),
            format!("{name}: error: --yaml is not emulated (--json is, with the same data)\n")
        );
    }
    let old = slurm(&emu, &bin, "squeue", &["--json=v0.0.39"]);
    assert_eq!(old.status.code(), Some(1));
    assert!(
        text(&old.stderr).starts_with("squeue: error: Unable to find data_parser plugin v0.0.39"),
        "{}",
        text(&old.stderr)
    );
}
