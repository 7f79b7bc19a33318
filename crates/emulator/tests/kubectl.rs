//! The machine's real `kubectl` (and `yq`) against the emulator's kube facade: the guide's
//! inspection commands of step 1 (docs/facts/sunk-guide.md#step-1-1 to #step-1-4, numbered 1.1 to
//! 1.4 below), typed as the guide prints them, give the guide's answers for SUNK 8.x and 7.x
//! values; kubectl's tables for Pending, Running and `OutOfcpu` sandbox Pods read as a real API
//! server would make them read; watch, describe, delete and the API server's refusals.
//!
//! Expected tables are built with kubectl's own tab-writer rule (width = max(6, longest + 3), last
//! column unpadded, docs/facts/kubectl.md#tab-writer), so each assertion checks both our cells and
//! that kubectl accepted our Table. The emulator's clock is frozen, so every AGE is exact.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use common::{FakeRuntime, advance, client_spec, create_request, sandboxes, start_for_kubectl, state_of};
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_emulator::Emulator;
use cwsandbox_sim::config::Scenario;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Longest a watch may stay silent before the test gives up (a guard against hanging, not a timing
/// assertion).
const WATCH_GUARD: Duration = Duration::from_secs(60);

struct Kube {
    dir: tempfile::TempDir,
    emulator: Emulator,
}

impl Kube {
    async fn start(scenario: Scenario, overlay: &str) -> Kube {
        for tool in ["kubectl", "yq"] {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|output| output.status.success());
            assert!(found, "`{tool}` is not on PATH: the kube facade suite needs the machine's real {tool}");
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        let emulator = start_for_kubectl(scenario, overlay, &kubeconfig, FakeRuntime::new()).await;
        assert_eq!(emulator.info().kubeconfig, kubeconfig.display().to_string(), "the ready info names the kubeconfig");
        Kube { dir, emulator }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn command(&self, program: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .kill_on_drop(true);
        command
    }

    async fn kubectl(&self, args: &[&str]) -> Output {
        self.command("kubectl").args(args).output().await.expect("kubectl runs")
    }

    /// kubectl that must succeed; its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args).await;
        assert!(output.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("utf-8")
    }

    /// A guide line run by the shell, as a user pastes it.
    async fn sh(&self, line: &str) -> String {
        let output = self.command("sh").args(["-c", line]).output().await.expect("sh runs");
        assert!(output.status.success(), "{line} failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("utf-8")
    }

    async fn create(&self, annotations: &[(&str, &str)]) -> String {
        let info = self.emulator.info();
        let mut spec = client_spec(&info.runner_id);
        spec.annotations = annotations.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        let request_id = format!("kubectl-{}", annotations.len() + spec.runner_ids.len() + rand_suffix());
        let sandbox = sandboxes(&self.emulator, &info.admin_token)
            .await
            .create_sandbox(create_request(spec, &request_id))
            .await
            .expect("sandbox created")
            .into_inner();
        sandbox.sandbox_id
    }

    fn advance(&self, seconds: u64) {
        advance(&self.emulator, Duration::from_secs(seconds));
    }

    fn set_values(&self, change: impl FnOnce(&mut cwsandbox_sim::config::Values)) {
        self.emulator
            .app()
            .driver()
            .with_world(|world| {
                let mut values = world.values().clone();
                change(&mut values);
                world.apply_values(values)
            })
            .expect("values apply");
    }
}

fn rand_suffix() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// kubectl's tab writer: every column but the last padded to max(6, longest cell + 3).
fn tabular(rows: &[&[&str]]) -> String {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0).saturating_add(3).max(6))
        .collect();
    let mut text = String::new();
    for row in rows {
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == columns {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}", width = widths[column]));
            }
        }
        text.push('\n');
    }
    text
}

/// yq prints a scalar as YAML (mikefarah's yq) or as JSON (the jq-based yq): both read back alike.
fn yq_scalar(output: &str) -> String {
    let trimmed = output.trim();
    serde_json::from_str::<String>(trimmed).unwrap_or_else(|_| trimmed.to_owned())
}

/// A list printed by yq, as YAML (`- item` lines) or as JSON.
fn yq_list(output: &str) -> Vec<String> {
    serde_json::from_str::<Vec<String>>(output.trim()).unwrap_or_else(|_| {
        output.lines().filter_map(|line| line.trim().strip_prefix("- ")).map(|item| item.trim().to_owned()).collect()
    })
}

const GUIDE_1_1: &str = "kubectl get pods -n tenant-slurm -l app.kubernetes.io/name=sunk-scheduler";
const GUIDE_1_2: &str = r#"kubectl get configmap -n tenant-slurm -l app.kubernetes.io/component=scheduler \
  -o jsonpath='{.items[0].data.scheduler\.conf}' | yq '.scheduler.name'"#;
const GUIDE_1_3: &str = r#"kubectl get pods -n tenant-slurm -l app.kubernetes.io/name=sunk-scheduler -o yaml \
  | yq '.items[0].spec.containers[] | select(.name == "scheduler").args'"#;

fn troubleshooting_line(sandbox_id: &str) -> String {
    format!(
        "kubectl get pods -A -l 'sandbox.coreweave.com/sandbox-id={sandbox_id}' \\\n  -o \
         custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,SCHEDULER:.spec.schedulerName,GRACE:.spec.\
         terminationGracePeriodSeconds,PARTITION:.metadata.annotations.sunk\\.coreweave\\.com/partition'"
    )
}

async fn scheduler_pod_name(kube: &Kube) -> String {
    kube.ok(&[
        "get",
        "pods",
        "-n",
        "tenant-slurm",
        "-l",
        "app.kubernetes.io/name=sunk-scheduler",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guide_step_1_inspection_reads_true_on_sunk_8() {
    let kube = Kube::start(Scenario::Ready, "").await;

    // 1.1: the scheduler runs.
    let name = scheduler_pod_name(&kube).await;
    assert!(name.starts_with("slurm-scheduler-"), "{name}");
    let expected = tabular(&[&["NAME", "READY", "STATUS", "RESTARTS", "AGE"], &[&name, "1/1", "Running", "0", "0s"]]);
    assert_eq!(kube.sh(GUIDE_1_1).await, expected);

    // 1.2: the name comes from the scheduler.conf ConfigMap on 8.x.
    assert_eq!(yq_scalar(&kube.sh(GUIDE_1_2).await), "slurm-scheduler");

    // 1.3: KillWait from the scheduler's arguments.
    let args = yq_list(&kube.sh(GUIDE_1_3).await);
    assert!(args.contains(&"--slurm-kill-wait=60s".to_owned()), "{args:?}");
    assert!(
        !args.iter().any(|arg| arg.starts_with("--scheduler-name")),
        "8.x reads its name from the ConfigMap: {args:?}"
    );

    // 1.4: after `helm upgrade` with a new KillWait the same command reports it.
    kube.set_values(|values| values.slurm_config.kill_wait = 330);
    let args = yq_list(&kube.sh(GUIDE_1_3).await);
    assert!(args.contains(&"--slurm-kill-wait=330s".to_owned()), "{args:?}");
    let conf = kube
        .ok(&[
            "get",
            "configmap",
            "-n",
            "tenant-slurm",
            "-l",
            "app.kubernetes.io/component=scheduler",
            "-o",
            r"jsonpath={.items[0].data.scheduler\.conf}",
        ])
        .await;
    assert!(conf.contains("killWait: 330s"), "{conf}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guide_step_1_inspection_reads_true_on_sunk_7() {
    let kube = Kube::start(Scenario::Fresh, "sunk:\n  version: 7\n").await;

    let name = scheduler_pod_name(&kube).await;
    let expected = tabular(&[&["NAME", "READY", "STATUS", "RESTARTS", "AGE"], &[&name, "1/1", "Running", "0", "0s"]]);
    assert_eq!(kube.sh(GUIDE_1_1).await, expected);

    // 7.x has no scheduler.conf: the name and KillWait are both arguments (the guide's fresh start).
    let args = yq_list(&kube.sh(GUIDE_1_3).await);
    assert!(args.contains(&"--scheduler-name=slurm-scheduler".to_owned()), "{args:?}");
    assert!(args.contains(&"--slurm-kill-wait=30s".to_owned()), "{args:?}");
    let output =
        kube.kubectl(&["get", "configmap", "-n", "tenant-slurm", "-l", "app.kubernetes.io/component=scheduler"]).await;
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stderr).trim(), "No resources found in tenant-slurm namespace.");

    kube.set_values(|values| values.slurm_config.kill_wait = 60);
    let args = yq_list(&kube.sh(GUIDE_1_3).await);
    assert!(args.contains(&"--slurm-kill-wait=60s".to_owned()), "{args:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_pod_tables_pending_running_and_out_of_cpu() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let namespace = "sandbox-admin";

    // Pending: the placeholder job is still in its prolog, the Pod is not bound.
    let first = kube.create(&[]).await;
    let first_pod = format!("sandbox-{first}");
    let header: &[&str] = &["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
    assert_eq!(
        kube.ok(&["get", "pods", "-n", namespace]).await,
        tabular(&[header, &[&first_pod, "0/1", "Pending", "0", "0s"]])
    );
    assert_eq!(
        kube.ok(&["get", "pods", "-n", namespace, "-o", "wide"]).await,
        tabular(&[
            &["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
            &[&first_pod, "0/1", "Pending", "0", "0s", "<none>", "<none>", "<none>", "<none>"],
        ])
    );

    // Running once the prolog is over and the Pod is bound.
    kube.advance(2);
    let node = kube.ok(&["get", "pod", "-n", namespace, &first_pod, "-o", "jsonpath={.spec.nodeName}"]).await;
    assert!(node.starts_with("node-cpu-"), "{node}");
    assert_eq!(
        kube.ok(&["get", "pods", "-n", namespace]).await,
        tabular(&[header, &[&first_pod, "1/1", "Running", "0", "2s"]])
    );
    assert_eq!(
        kube.ok(&["get", "pods", "-n", namespace, "-o", "wide"]).await,
        tabular(&[
            &["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
            &[&first_pod, "1/1", "Running", "0", "2s", "<none>", &node, "<none>", "<none>"],
        ])
    );

    // OutOfcpu: slurmd takes most of each Node again, Slurm still sees free CPUs, the kubelet
    // rejects the Pod right after binding.
    kube.set_values(|values| values.node_sets[0].slurmd.requests.cpu = "15500m".to_owned());
    let second = kube.create(&[("sunk.coreweave.com/partition", "hpc-prod")]).await;
    let second_pod = format!("sandbox-{second}");
    kube.advance(3);
    // kubectl lists by name, and names are drawn ids: their order is not the order of creation.
    let running: [&str; 5] = [&first_pod, "1/1", "Running", "0", "5s"];
    let rejected: [&str; 5] = [&second_pod, "0/1", "OutOfcpu", "0", "3s"];
    let mut rows: Vec<&[&str]> = vec![&running, &rejected];
    rows.sort_by_key(|row| row[0]);
    assert_eq!(kube.ok(&["get", "pods", "-n", namespace]).await, tabular(&[&[header], rows.as_slice()].concat()));
    let describe = kube.ok(&["describe", "pod", "-n", namespace, &second_pod]).await;
    let field = |name: &str| {
        describe
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")).map(|value| value.trim().to_owned()))
            .unwrap_or_default()
    };
    assert_eq!(field("Status"), "Failed", "{describe}");
    assert_eq!(field("Reason"), "OutOfcpu", "{describe}");
    assert!(
        field("Message")
            .starts_with("Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: "),
        "{describe}"
    );
    assert_eq!(
        field("Node"),
        format!("{}/", kube.ok(&["get", "pod", "-n", namespace, &second_pod, "-o", "jsonpath={.spec.nodeName}"]).await)
    );
    assert!(describe.contains("Warning  OutOfcpu"), "{describe}");
    let events = kube.ok(&["get", "events", "-n", namespace, "--field-selector", "reason=OutOfcpu"]).await;
    let lines: Vec<&str> = events.lines().collect();
    assert_eq!(lines.len(), 2, "{events}");
    assert!(lines[0].starts_with("LAST SEEN   TYPE      REASON     OBJECT"), "{events}");
    assert!(lines[1].contains(&format!("Warning   OutOfcpu   pod/{second_pod}")), "{events}");

    // The troubleshooting view, as the guide types it (docs/facts/sunk-guide.md#troubleshooting).
    let expected = tabular(&[
        &["NAMESPACE", "NAME", "SCHEDULER", "GRACE", "PARTITION"],
        &[namespace, &second_pod, "slurm-scheduler", "30", "hpc-prod"],
    ]);
    assert_eq!(kube.sh(&troubleshooting_line(&second)).await, expected);
    let expected = tabular(&[
        &["NAMESPACE", "NAME", "SCHEDULER", "GRACE", "PARTITION"],
        &[namespace, &first_pod, "slurm-scheduler", "30", "<none>"],
    ]);
    assert_eq!(kube.sh(&troubleshooting_line(&first)).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_reach_the_simulation() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let names = |output: String| output.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let jsonpath = "jsonpath={.items[*].metadata.name}";

    let set_based = kube
        .ok(&["get", "pods", "-A", "-l", "app.kubernetes.io/name in (sunk-scheduler, nothing)", "-o", jsonpath])
        .await;
    assert_eq!(names(set_based).len(), 1);
    let not_sandboxes =
        names(kube.ok(&["get", "pods", "-A", "-l", "!sandbox.coreweave.com/sandbox-id", "-o", jsonpath]).await);
    assert_eq!(not_sandboxes.len(), 5, "four slurmd Pods and the scheduler: {not_sandboxes:?}");
    let on_node =
        names(kube.ok(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node-cpu-0", "-o", jsonpath]).await);
    assert_eq!(on_node, vec!["slurm-cpu-0"]);
    let running = names(
        kube.ok(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "status.phase=Running,metadata.namespace=tenant-slurm",
            "-o",
            jsonpath,
        ])
        .await,
    );
    assert_eq!(running.len(), 5, "{running:?}");
    let nodes = names(kube.ok(&["get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", jsonpath]).await);
    assert_eq!(nodes, vec!["node-system-0"]);

    let bad = kube.kubectl(&["get", "pods", "-A", "--field-selector", "spec.bogus=1"]).await;
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("Error from server (BadRequest)") && stderr.contains("spec.bogus"), "{stderr}");

    // Paging: kubectl's chunked list sees every object once.
    let paged = names(kube.ok(&["get", "pods", "-A", "--chunk-size=2", "-o", "name"]).await);
    assert_eq!(paged.len(), 5, "{paged:?}");
    let mut unique = paged.clone();
    unique.dedup();
    assert_eq!(unique, paged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_sandbox_pod_and_delete_tears_it_down() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let namespace = "sandbox-admin";
    let mut watch = kube
        .command("kubectl")
        .args(["get", "pods", "-n", namespace, "-w", "--output-watch-events", "--no-headers"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl -w starts");
    let mut events_watch = kube
        .command("kubectl")
        .args(["get", "events", "-n", namespace, "-w", "--no-headers"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl get events -w starts");
    let mut event_lines = BufReader::new(events_watch.stdout.take().expect("stdout")).lines();
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let mut next_line = async || {
        tokio::time::timeout(WATCH_GUARD, lines.next_line())
            .await
            .expect("watch output")
            .expect("read")
            .expect("a line")
    };

    // The namespace is empty until the first sandbox; kubectl's list prints nothing, the watch is open.
    let sandbox_id = kube.create(&[]).await;
    let pod = format!("sandbox-{sandbox_id}");
    let added = next_line().await;
    let words: Vec<&str> = added.split_whitespace().collect();
    assert_eq!(words, vec!["ADDED", pod.as_str(), "0/1", "Pending", "0", "0s"], "{added}");

    // The SUNK scheduler's Event about the placeholder job reaches the Events watch.
    let event =
        tokio::time::timeout(WATCH_GUARD, event_lines.next_line()).await.expect("event").expect("read").expect("line");
    let words: Vec<&str> = event.split_whitespace().collect();
    assert_eq!(&words[..4], &["0s", "Normal", "Submitted", &format!("pod/{pod}")], "{event}");
    let _ = events_watch.kill().await;

    kube.advance(2);
    loop {
        let line = next_line().await;
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "MODIFIED", "{line}");
        if words[3] == "Running" {
            assert_eq!(words, vec!["MODIFIED", pod.as_str(), "1/1", "Running", "0", "2s"], "{line}");
            break;
        }
    }

    // kubectl delete waits until the Pod is gone: the fake runtime's main process exits on SIGTERM.
    let output = kube.kubectl(&["delete", "pod", "-n", namespace, &pod]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("pod \"{pod}\" deleted\n"));
    // Each watch event carries the Pod as it is after a step of the world; the Terminating step and
    // the removal may come as one when the main process exits at once.
    loop {
        let line = next_line().await;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "DELETED" {
            assert_eq!(words[1], pod);
            break;
        }
        assert_eq!((words[0], words[3]), ("MODIFIED", "Terminating"), "{line}");
    }
    let _ = watch.kill().await;

    let gone = kube.kubectl(&["get", "pod", "-n", namespace, &pod]).await;
    assert!(!gone.status.success());
    assert_eq!(
        String::from_utf8_lossy(&gone.stderr).trim(),
        format!("Error from server (NotFound): pods \"{pod}\" not found")
    );

    // The same teardown as DeleteSandbox: the sandbox is no longer running.
    let info = kube.emulator.info();
    let sandbox = sandboxes(&kube.emulator, &info.admin_token)
        .await
        .get_sandbox(pb::GetSandboxRequest { sandbox_id: sandbox_id.clone() })
        .await
        .expect("sandbox still readable")
        .into_inner();
    assert!(
        matches!(state_of(&sandbox), pb::State::Terminated | pb::State::Completed | pb::State::Terminating),
        "{:?}",
        state_of(&sandbox)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_the_sandbox_main_process() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let namespace = "sandbox-admin";
    let pod = format!("sandbox-{}", kube.create(&[]).await);
    let stderr = |output: Output| String::from_utf8_lossy(&output.stderr).trim().to_owned();

    // Not bound yet: the API server's words for a Pod without a Node.
    assert_eq!(
        stderr(kube.kubectl(&["logs", "-n", namespace, &pod]).await),
        format!("Error from server (BadRequest): pod {pod} does not have a host assigned")
    );
    kube.advance(2);
    // The fake runtime's main process wrote two lines; the real one's are the process's output.
    assert_eq!(kube.ok(&["logs", "-n", namespace, &pod]).await, "started\nworking\n");
    assert_eq!(
        kube.ok(&["logs", "-n", namespace, &pod, "--timestamps"]).await,
        "2026-01-01T00:00:00Z started\n2026-01-01T00:00:00Z working\n"
    );
    // kubectl checks the container against the Pod's spec itself, with the server's wording.
    assert_eq!(
        stderr(kube.kubectl(&["logs", "-n", namespace, &pod, "-c", "sidecar"]).await),
        format!("error: container sidecar is not valid for pod {pod}")
    );
    // Pods that run no process here have an empty log.
    let scheduler = scheduler_pod_name(&kube).await;
    assert_eq!(kube.ok(&["logs", "-n", "tenant-slurm", &scheduler]).await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_read_as_the_api_server_writes_them() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let stderr = |output: Output| String::from_utf8_lossy(&output.stderr).trim().to_owned();

    assert_eq!(
        stderr(kube.kubectl(&["get", "services"]).await),
        "error: the server doesn't have a resource type \"services\""
    );
    assert_eq!(
        stderr(kube.kubectl(&["get", "--raw", "/api/v1/services"]).await),
        "Error from server (NotFound): the server could not find the requested resource"
    );
    assert_eq!(
        stderr(kube.kubectl(&["create", "configmap", "x", "-n", "default", "--from-literal=a=b"]).await),
        "error: failed to create configmap: the server does not allow this method on the requested resource"
    );
    assert_eq!(
        stderr(kube.kubectl(&["delete", "node", "node-cpu-0"]).await),
        "Error from server (MethodNotAllowed): the server does not allow this method on the requested resource"
    );
    // Query parameters are checked the same way on every path, naming the parameter.
    for path in
        ["/api/v1/pods?includeObject=Bogus", "/api/v1/namespaces/default/pods/nope?watch=true&includeObject=Bogus"]
    {
        assert_eq!(
            stderr(kube.kubectl(&["get", "--raw", path]).await),
            "Error from server (BadRequest): invalid includeObject \"Bogus\"",
            "{path}"
        );
    }
    assert_eq!(
        stderr(kube.kubectl(&["get", "--raw", "/api/v1/pods?limit=many"]).await),
        "Error from server (BadRequest): invalid value for limit: \"many\": must be a number"
    );
    assert_eq!(
        stderr(kube.kubectl(&["get", "pod", "-n", "default", "nope"]).await),
        "Error from server (NotFound): pods \"nope\" not found"
    );
    assert_eq!(
        stderr(kube.kubectl(&["get", "pods", "--token", "not-a-token"]).await),
        "error: You must be logged in to the server (Unauthorized)"
    );
    let user_token = kube.emulator.info().user_token.clone();
    let forbidden = stderr(kube.kubectl(&["get", "pods", "-n", "default", "--token", &user_token]).await);
    assert!(
        forbidden.starts_with(
            "Error from server (Forbidden): pods is forbidden: User \"alice\" cannot list resource \"pods\""
        ),
        "{forbidden}"
    );

    // Plain HTTP with the token in a header (curl + jq, as the guide's HTTP examples do).
    let info = kube.emulator.info();
    let line = format!(
        "curl -s -H 'Authorization: Bearer {}' {}/api/v1/namespaces/default/pods/nope | jq -r '.kind, .reason, .code'",
        info.admin_token, info.base_url
    );
    assert_eq!(kube.sh(&line).await, "Status\nNotFound\n404\n");
    let line = format!("curl -s {}/version | jq -r .gitVersion", info.base_url);
    assert_eq!(kube.sh(&line).await, "v1.33.0\n");
}

/// The Nodes' RuntimeClasses (node.k8s.io/v1, the one API group besides core): what a cluster
/// admin lists to see which `runtime_class` a sandbox may pin here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_classes_are_listed_as_the_api_server_lists_them() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let table = kube.ok(&["get", "runtimeclass"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "HANDLER", "AGE"], "{table}");
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][..2], ["gvisor", "runsc"], "{table}");
    assert_eq!(kube.ok(&["get", "runtimeclass", "gvisor", "-o", "jsonpath={.handler}"]).await, "runsc");
    assert_eq!(
        kube.ok(&["get", "runtimeclasses", "-o", "jsonpath={.items[*].metadata.name}"]).await,
        "gvisor",
        "the plural and a list"
    );
    let resources = kube.ok(&["api-resources", "--api-group=node.k8s.io", "-o", "name"]).await;
    assert_eq!(resources.trim(), "runtimeclasses.node.k8s.io");
    let missing = kube.kubectl(&["get", "runtimeclass", "kata"]).await;
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        "Error from server (NotFound): runtimeclasses.node.k8s.io \"kata\" not found"
    );
    let selected = kube.ok(&["get", "runtimeclass", "--field-selector", "metadata.name=kata", "-o", "name"]).await;
    assert_eq!(selected, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_delete_honours_dry_run_preconditions_and_refuses_a_negative_grace() {
    let kube = Kube::start(Scenario::Ready, "").await;
    let pod = format!("sandbox-{}", kube.create(&[]).await);
    kube.advance(2);
    let namespace = "sandbox-admin";
    let uid = kube.ok(&["get", "pod", "-n", namespace, &pod, "-o", "jsonpath={.metadata.uid}"]).await;

    let dry = kube.ok(&["delete", "pod", "-n", namespace, &pod, "--dry-run=server"]).await;
    assert_eq!(dry.trim(), format!("pod \"{pod}\" deleted (server dry run)"));
    let phase = kube.ok(&["get", "pod", "-n", namespace, &pod, "-o", "jsonpath={.status.phase}"]).await;
    assert_eq!(phase, "Running", "a dry run changes nothing");

    let info = kube.emulator.info();
    let delete = |body: &str| {
        format!(
            "curl -s -X DELETE -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' -d '{body}' \
             {}/api/v1/namespaces/{namespace}/pods/{pod} | jq -r '.kind, .reason // .status.phase, .code // 0, .message // \"\"'",
            info.admin_token, info.base_url
        )
    };
    let conflict = kube.sh(&delete(r#"{"preconditions":{"uid":"not-its-uid"}}"#)).await;
    assert_eq!(
        conflict,
        format!(
            "Status\nConflict\n409\nPrecondition failed: UID in precondition: not-its-uid, UID in object meta: {uid}\n"
        )
    );
    let invalid = kube.sh(&delete(r#"{"gracePeriodSeconds":-3}"#)).await;
    assert_eq!(
        invalid,
        format!(
            "Status\nInvalid\n422\nPod \"{pod}\" is invalid: gracePeriodSeconds: Invalid value: must not be negative\n"
        )
    );
    let phase = kube.ok(&["get", "pod", "-n", namespace, &pod, "-o", "jsonpath={.status.phase}"]).await;
    assert_eq!(phase, "Running", "refused deletes change nothing");

    let deleted = kube.sh(&delete(&format!(r#"{{"preconditions":{{"uid":"{uid}"}},"gracePeriodSeconds":0}}"#))).await;
    assert!(deleted.starts_with("Pod\n"), "the Pod as it was is returned: {deleted}");
    let gone = kube.kubectl(&["get", "pod", "-n", namespace, &pod]).await;
    assert!(!gone.status.success(), "deleted with grace 0");
}

#[test]
fn tabular_matches_kubectls_own_example() {
    // kubectl's get_test.go: "NAME   AGE" / "foo    <unknown>".
    assert_eq!(tabular(&[&["NAME", "AGE"], &["foo", "<unknown>"]]), "NAME   AGE\nfoo    <unknown>\n");
}
