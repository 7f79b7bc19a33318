//! `cwsbx sandbox …`: run, exec, list, get, describe, logs, stop and delete sandboxes.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use cwsandbox_client::{Client, ExecEvent, ExecOptions, emulator_v1 as emu, pb};
use futures::StreamExt;

use crate::common::{GlobalArgs, parse_pair};
use crate::output::{Format, Output, print_value, report_all, state_label, table};
use crate::runner::RunnerCmd;

// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum SandboxCmd {
    /// Managed runners and their policies.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx sandbox runner list
  cwsbx sandbox runner policy get cks-runner"
    )]
    Runner(RunnerCmd),
    /// Start a sandbox and wait until it runs.
    #[command(after_help = "Examples:
  cwsbx sandbox run                                   # sleeps until stopped, on $CWSANDBOX_RUNNER_ID
  cwsbx sandbox run -a sunk.coreweave.com/partition=gpu --cpu-request 2 -- python3 train.py
  cwsbx sandbox run --no-wait -o json | jq -r .sandboxId")]
    Run(RunArgs),
    /// Run a command in a sandbox; exits with the command's code.
    #[command(after_help = "Examples:
  cwsbx sandbox exec SANDBOX_ID -- hostname
  echo hello | cwsbx sandbox exec -i SANDBOX_ID -- cat
  cwsbx sandbox exec --env DEBUG=1 SANDBOX_ID -- sh -c 'echo $DEBUG'")]
    Exec {
        /// The sandbox.
        sandbox_id: String,
        /// Forward this process's stdin to the command.
        #[arg(short, long)]
        interactive: bool,
        /// Environment for the command (KEY=VALUE, repeatable).
        #[arg(long = "env", value_parser = parse_pair, value_name = "KEY=VALUE")]
        env: Vec<(String, String)>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List sandboxes.
    #[command(
        alias = "list",
        after_help = "Examples:
  cwsbx sandbox ls
  cwsbx sandbox ls --all --tag nightly -o json"
    )]
    Ls {
        /// Include ended sandboxes.
        #[arg(short, long)]
        all: bool,
        /// Only sandboxes with this tag (repeatable: any of them).
        #[arg(long)]
        tag: Vec<String>,
        /// Only sandboxes on this runner (repeatable).
        #[arg(long = "runner", value_name = "RUNNER_ID")]
        runner_ids: Vec<String>,
    },
    /// Show one sandbox (an object with -o json).
    #[command(after_help = "Examples:
  cwsbx sandbox get SANDBOX_ID
  cwsbx sandbox get SANDBOX_ID -o json | jq -r .status.state")]
    Get {
        /// The sandbox.
        sandbox_id: String,
    },
    /// One screen on a sandbox: its state and reason, its Pod (namespace, node, scheduler, grace,
    /// annotations after the policy), its placeholder Slurm job and its recent Events. Parts only
    /// the emulator has (Pod, job, Events) need an admin token.
    #[command(after_help = "Examples:
  cwsbx sandbox describe SANDBOX_ID
  cwsbx sandbox describe SANDBOX_ID -o yaml")]
    Describe {
        /// The sandbox.
        sandbox_id: String,
        /// How many of the newest Events to show.
        #[arg(long, default_value_t = 10)]
        events: usize,
    },
    /// The main process's output (with -o json: one JSON object per entry, with its timestamp).
    #[command(after_help = "Examples:
  cwsbx sandbox logs SANDBOX_ID
  cwsbx sandbox logs -f --tail 20 SANDBOX_ID
  cwsbx sandbox logs -o json SANDBOX_ID | jq -r .text")]
    Logs {
        /// The sandbox.
        sandbox_id: String,
        /// Keep streaming while the sandbox runs.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines (0: all).
        #[arg(long, default_value_t = 0, value_name = "N")]
        tail: i32,
    },
    /// Stop sandboxes: their processes get SIGTERM, then SIGKILL after --grace seconds.
    #[command(after_help = "Examples:
  cwsbx sandbox stop SANDBOX_ID
  cwsbx sandbox stop --grace 0 SANDBOX_ID OTHER_ID   # the Pod's own grace period")]
    Stop {
        /// The sandboxes.
        #[arg(required = true)]
        sandbox_ids: Vec<String>,
        /// Seconds between SIGTERM and SIGKILL (0: the Pod's terminationGracePeriodSeconds).
        #[arg(long, default_value_t = 10, value_name = "SECONDS")]
        grace: i32,
    },
    /// Delete sandboxes: their processes get SIGTERM, then SIGKILL after the Pod's termination
    /// grace period (terminationGracePeriodSeconds, 30 s unless the policy says otherwise), so a
    /// process that ignores SIGTERM holds the delete that long; waits until each has ended.
    #[command(after_help = "Examples:
  cwsbx sandbox delete SANDBOX_ID
  cwsbx sandbox delete --no-wait SANDBOX_ID OTHER_ID")]
    Delete {
        /// The sandboxes.
        #[arg(required = true)]
        sandbox_ids: Vec<String>,
        /// Return once the deletes are accepted, without waiting for the sandboxes to end.
        #[arg(long)]
        no_wait: bool,
        /// Seconds to wait for each sandbox to end.
        #[arg(long, default_value_t = 300, value_name = "SECONDS")]
        timeout: u64,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The container image.
    #[arg(long, default_value = "python:3.11")]
    image: String,
    /// Runner to place on (repeatable or comma-separated); default `$CWSANDBOX_RUNNER_ID`.
    #[arg(long = "runner", env = "CWSANDBOX_RUNNER_ID", value_delimiter = ',', value_name = "RUNNER_ID")]
    runner_ids: Vec<String>,
    /// Placement mode.
    #[arg(long, default_value = "cks", value_parser = ["cks", "serverless"])]
    mode: String,
    /// Annotation KEY=VALUE (repeatable), e.g. sunk.coreweave.com/partition=gpu.
    #[arg(long = "annotation", short = 'a', value_parser = parse_pair, value_name = "KEY=VALUE")]
    annotations: Vec<(String, String)>,
    /// A tag (repeatable), for `ls --tag`.
    #[arg(long)]
    tag: Vec<String>,
    /// Environment of the main process (KEY=VALUE, repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_pair, value_name = "KEY=VALUE")]
    env: Vec<(String, String)>,
    /// CPU request, e.g. `500m` or `2`.
    #[arg(long, value_name = "QUANTITY")]
    cpu_request: Option<String>,
    /// Memory request, e.g. `512Mi`.
    #[arg(long, value_name = "QUANTITY")]
    memory_request: Option<String>,
    /// CPU limit.
    #[arg(long, value_name = "QUANTITY")]
    cpu_limit: Option<String>,
    /// Memory limit.
    #[arg(long, value_name = "QUANTITY")]
    memory_limit: Option<String>,
    /// Maximum lifetime in seconds. Default: the runner policy's
    /// (`constraints.lifecycle.defaultLifetimeSeconds`; the emulator's values: 600 s).
    #[arg(long, value_name = "SECONDS")]
    lifetime: Option<i32>,
    /// Working directory of the main process (inside the sandbox).
    #[arg(long, value_name = "PATH")]
    workdir: Option<String>,
    /// The Kubernetes RuntimeClass to run with (`gvisor`: gVisor's kernel, where the runner
    /// policy's `constraints.security.allowedRuntimeClasses` admits it and the cluster has it:
    /// `kubectl get runtimeclass`).
    #[arg(long, value_name = "NAME")]
    runtime_class: Option<String>,
    /// Return after the create, without waiting for RUNNING.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for RUNNING; then the sandbox is deleted (unless --keep-on-timeout) and
    /// the command fails.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    timeout: u64,
    /// When --timeout passes, leave the sandbox as it is (and print how to delete it).
    #[arg(long)]
    keep_on_timeout: bool,
    /// The main command and its arguments, after `--` (default: sleep until stopped).
    #[arg(last = true)]
    command: Vec<String>,
}

fn sandbox_row(sandbox: &pb::Sandbox) -> Vec<String> {
    let status = sandbox.status.clone().unwrap_or_default();
    let created = status.create_time.and_then(|t| serde_json::to_value(t).ok());
    vec![
        sandbox.sandbox_id.clone(),
        state_label(status.state),
        status.runner_id.clone(),
        created.and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        status.state_reason.clone(),
    ]
}

const SANDBOX_HEADER: [&str; 5] = ["SANDBOX ID", "STATE", "RUNNER", "CREATED", "REASON"];

/// One sandbox: a table row, or the object itself.
fn print_sandbox(sandbox: &pb::Sandbox, format: Format) -> Result<()> {
    match format {
        Format::Table => table(&SANDBOX_HEADER, [sandbox_row(sandbox)]),
        _ => print_value(&serde_json::to_value(sandbox)?, format)?,
    }
    Ok(())
}

/// `STATE (reason)`, as progress lines and describe show it.
fn state_with_reason(sandbox: &pb::Sandbox) -> String {
    let status = sandbox.status.clone().unwrap_or_default();
    if status.state_reason.is_empty() {
        state_label(status.state)
    } else {
        format!("{} ({})", state_label(status.state), status.state_reason)
    }
}

pub async fn run(global: &GlobalArgs, command: &SandboxCmd, output: Output) -> Result<u8> {
    if let SandboxCmd::Runner(command) = command {
        return crate::runner::run(global, command, output).await;
    }
    let client = global.client()?;
    let format = output.rows();
    match command {
        SandboxCmd::Runner(_) => unreachable!("handled above"),
        SandboxCmd::Run(args) => run_sandbox(&client, args, format).await,
        SandboxCmd::Exec { sandbox_id, interactive, env, command } => {
            exec(&client, sandbox_id, *interactive, env, command).await
        }
        SandboxCmd::Ls { all, tag, runner_ids } => {
            let sandboxes = client
                .list(pb::ListSandboxesRequest {
                    tags: tag.clone(),
                    runner_ids: runner_ids.clone(),
                    show_terminated: *all,
                    ..Default::default()
                })
                .await?;
            match format {
                Format::Table => table(&SANDBOX_HEADER, sandboxes.iter().map(sandbox_row)),
                _ => print_value(&serde_json::to_value(&sandboxes)?, format)?,
            }
            Ok(0)
        }
        SandboxCmd::Get { sandbox_id } => {
            let sandbox = client.get(sandbox_id).await?;
            print_sandbox(sandbox.proto(), format)?;
            Ok(0)
        }
        SandboxCmd::Describe { sandbox_id, events } => describe(global, &client, sandbox_id, *events, format).await,
        SandboxCmd::Logs { sandbox_id, follow, tail } => logs(&client, sandbox_id, *follow, *tail, format).await,
        SandboxCmd::Stop { sandbox_ids, grace } => {
            let mut results = Vec::new();
            for id in sandbox_ids {
                client.stop(id, *grace).await.with_context(|| format!("sandbox {id}"))?;
                results.push((
                    format!("sandbox {id} stopping (SIGTERM, then SIGKILL after {})", grace_words(*grace)),
                    serde_json::json!({"sandboxId": id, "result": "stopping", "gracePeriodSeconds": grace}),
                ));
            }
            report_all(format, results)?;
            Ok(0)
        }
        SandboxCmd::Delete { sandbox_ids, no_wait, timeout } => {
            let mut results = Vec::new();
            for id in sandbox_ids {
                client.delete(id, false).await.with_context(|| format!("sandbox {id}"))?;
                if *no_wait {
                    results.push((
                        format!("sandbox {id} deleting"),
                        serde_json::json!({"sandboxId": id, "result": "deleting"}),
                    ));
                    continue;
                }
                let ended = wait_ended(&client, id, Duration::from_secs(*timeout)).await?;
                let line = match &ended {
                    Some(sandbox) => format!("sandbox {id} deleted: {}", state_with_reason(sandbox)),
                    None => format!("sandbox {id} deleted (already gone)"),
                };
                let state = ended.as_ref().map(|s| state_label(s.status.clone().unwrap_or_default().state));
                results.push((line, serde_json::json!({"sandboxId": id, "result": "deleted", "state": state})));
            }
            report_all(format, results)?;
            Ok(0)
        }
    }
}

fn grace_words(grace: i32) -> String {
    if grace > 0 { format!("{grace}s") } else { "the Pod's termination grace period".to_owned() }
}

async fn run_sandbox(client: &Client, args: &RunArgs, format: Format) -> Result<u8> {
    let mut builder = client
        .sandbox()
        .image(&args.image)
        .runner_ids(args.runner_ids.iter().filter(|s| !s.is_empty()).cloned())
        .mode(if args.mode == "cks" { pb::SandboxMode::Cks } else { pb::SandboxMode::Serverless })
        .max_lifetime_seconds(args.lifetime.unwrap_or(0));
    for (k, v) in &args.annotations {
        builder = builder.annotation(k, v);
    }
    for tag in &args.tag {
        builder = builder.tag(tag);
    }
    for (k, v) in &args.env {
        builder = builder.env(k, v);
    }
    if args.cpu_request.is_some() || args.memory_request.is_some() {
        builder = builder
            .requests(args.cpu_request.clone().unwrap_or_default(), args.memory_request.clone().unwrap_or_default());
    }
    if args.cpu_limit.is_some() || args.memory_limit.is_some() {
        builder =
            builder.limits(args.cpu_limit.clone().unwrap_or_default(), args.memory_limit.clone().unwrap_or_default());
    }
    if let Some(dir) = &args.workdir {
        builder = builder.working_dir(dir);
    }
    if let Some(class) = &args.runtime_class {
        builder = builder.runtime_class(class);
    }
    if let Some((command, rest)) = args.command.split_first() {
        builder = builder.command(command).args(rest.iter().cloned());
    }
    let mut sandbox = builder.create().await?;
    if !args.no_wait {
        let id = sandbox.id().to_owned();
        let mut progress = Progress::new(&id, "starting");
        let waited = sandbox.wait_running(Duration::from_secs(args.timeout), |s| progress.show(s)).await;
        progress.finish();
        match waited {
            Ok(()) => {}
            Err(cwsandbox_client::Error::Timeout(..)) if args.keep_on_timeout => anyhow::bail!(
                "sandbox {id} is not RUNNING after {}s; it is kept (--keep-on-timeout): delete it with `cwsbx sandbox delete {id}`",
                args.timeout
            ),
            Err(cwsandbox_client::Error::Timeout(..)) => {
                let deleted = client.delete(&id, true).await;
                let what = match deleted {
                    Ok(()) => "deleted it".to_owned(),
                    Err(error) => format!("could not delete it ({error}): delete it with `cwsbx sandbox delete {id}`"),
                };
                anyhow::bail!("sandbox {id} is not RUNNING after {}s ({}); {what}", args.timeout, progress.last_state())
            }
            Err(cwsandbox_client::Error::SandboxEnded { sandbox_id, state, reason }) => anyhow::bail!(
                "sandbox {sandbox_id} ended {} before it was seen RUNNING: {reason}",
                state.trim_start_matches("STATE_")
            ),
            Err(error) => return Err(error.into()),
        }
    }
    print_sandbox(sandbox.proto(), format)?;
    Ok(0)
}

async fn exec(
    client: &Client,
    sandbox_id: &str,
    interactive: bool,
    env: &[(String, String)],
    command: &[String],
) -> Result<u8> {
    let sandbox = client.get(sandbox_id).await?;
    let argv: Vec<&str> = command.iter().map(String::as_str).collect();
    let options = ExecOptions { env: env.iter().cloned().collect(), tty: false };
    let mut stream = sandbox.exec_stream(&argv, options).await?;
    if interactive {
        let mut input = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut input).await?;
        if !input.is_empty() {
            stream.write_stdin(input).await?;
        }
    }
    stream.close_stdin().await;
    let mut code = 0;
    while let Some(event) = stream.next_event().await? {
        match event {
            ExecEvent::Stdout(data) => {
                std::io::stdout().write_all(&data)?;
                std::io::stdout().flush()?;
            }
            ExecEvent::Stderr(data) => std::io::stderr().write_all(&data)?,
            ExecEvent::Exit(exit) => code = exit,
        }
    }
    // A code a process cannot exit with (negative: unknown) reads as 255, never as a
    // truncated value that could look like success.
    Ok(u8::try_from(code).unwrap_or(255))
}

async fn logs(client: &Client, sandbox_id: &str, follow: bool, tail: i32, format: Format) -> Result<u8> {
    let mut entries = client.log_entries(sandbox_id, follow, tail).await?;
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        match format {
            Format::Table => std::io::stdout().write_all(&entry.data)?,
            // One document per entry, so a follower can read them as they come.
            Format::Json => {
                let line = serde_json::json!({
                    "timestamp": entry.timestamp.and_then(|t| serde_json::to_value(t).ok()),
                    "text": String::from_utf8_lossy(&entry.data),
                    "nextLogOffset": entry.next_log_offset.to_string(),
                });
                println!("{line}");
            }
            Format::Yaml => {
                let value = serde_json::json!([{
                    "timestamp": entry.timestamp.and_then(|t| serde_json::to_value(t).ok()),
                    "text": String::from_utf8_lossy(&entry.data),
                }]);
                print_value(&value, Format::Yaml)?;
            }
        }
        std::io::stdout().flush()?;
    }
    Ok(0)
}

/// Polls a deleted sandbox until it has ended; `None` when it is gone already.
async fn wait_ended(client: &Client, id: &str, timeout: Duration) -> Result<Option<pb::Sandbox>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut progress = Progress::new(id, "ending");
    let result = loop {
        let sandbox = match client.get(id).await {
            Ok(sandbox) => sandbox.proto().clone(),
            Err(error) if error.code() == cwsandbox_client::Code::NotFound => break Ok(None),
            Err(error) => break Err(error.into()),
        };
        progress.show(&sandbox);
        let state = sandbox.status.as_ref().map(|s| s.state).unwrap_or_default();
        if matches!(pb::State::try_from(state), Ok(pb::State::Completed | pb::State::Failed | pb::State::Terminated)) {
            break Ok(Some(sandbox));
        }
        if tokio::time::Instant::now() >= deadline {
            break Err(anyhow::anyhow!(
                "sandbox {id} has not ended after {}s ({}); its processes may ignore SIGTERM and wait out their grace period",
                timeout.as_secs(),
                progress.last_state()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    progress.finish();
    result
}

/// What a wait shows: a spinner with the current state and reason on a terminal, one plain line
/// per change otherwise (so logs of scripts read well).
struct Progress {
    id: String,
    last: String,
    spinner: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(id: &str, doing: &str) -> Progress {
        let spinner = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let spinner = indicatif::ProgressBar::new_spinner();
            spinner.enable_steady_tick(Duration::from_millis(100));
            spinner.set_message(format!("{id}: {doing}"));
            spinner
        });
        Progress { id: id.to_owned(), last: String::new(), spinner }
    }

    fn show(&mut self, sandbox: &pb::Sandbox) {
        let line = state_with_reason(sandbox);
        if line == self.last {
            return;
        }
        match &self.spinner {
            Some(spinner) => spinner.set_message(format!("{}: {line}", self.id)),
            None => eprintln!("{}: {line}", self.id),
        }
        self.last = line;
    }

    fn last_state(&self) -> &str {
        if self.last.is_empty() { "no state seen yet" } else { &self.last }
    }

    fn finish(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }
}

/// The Pod, placeholder job and Events of a sandbox, as the emulator has them.
struct ClusterView {
    pod: Option<emu::Pod>,
    job: Option<emu::Job>,
    events: Vec<emu::Event>,
}

async fn cluster_view(global: &GlobalArgs, sandbox_id: &str) -> Result<ClusterView> {
    let admin = cwsandbox_client::EmulatorAdmin::new(&global.config()?)?;
    let raw = admin.raw();
    // The runner labels each sandbox Pod with its sandbox's id.
    let request = emu::ListPodsRequest {
        label_selector: format!("sandbox.coreweave.com/sandbox-id={sandbox_id}"),
        ..Default::default()
    };
    let pods = raw.list_pods(&request).await?.into_inner().pods;
    let pod = pods.into_iter().find(|pod| pod.origin.as_ref().is_some_and(|origin| origin.sandbox_id == sandbox_id));
    let job_id = pod.as_ref().and_then(|pod| pod.origin.as_ref()).and_then(|origin| origin.placeholder_job_id);
    let job = match job_id {
        Some(job_id) => {
            let request = emu::ListJobsRequest {
                source: emu::JobSource::Accounting as i32,
                job_ids: vec![job_id],
                ..Default::default()
            };
            admin.list_jobs(&request).await?.jobs.into_iter().next()
        }
        None => None,
    };
    let events = match &pod {
        Some(pod) => {
            let meta = pod.metadata.clone().unwrap_or_default();
            let request = emu::ListEventsRequest { involved_object_uid: meta.uid, ..Default::default() };
            raw.list_events(&request).await?.into_inner().events
        }
        None => Vec::new(),
    };
    Ok(ClusterView { pod, job, events })
}

async fn describe(global: &GlobalArgs, client: &Client, sandbox_id: &str, newest: usize, format: Format) -> Result<u8> {
    let sandbox = client.get(sandbox_id).await?.proto().clone();
    // The cluster's side needs the emulator's API and an admin token: without them, say so and
    // show the sandbox alone.
    let (view, missing) = match cluster_view(global, sandbox_id).await {
        Ok(view) => (Some(view), None),
        Err(error) => (None, Some(format!("{error:#}"))),
    };
    let events: Vec<&emu::Event> = match &view {
        Some(view) => view.events.iter().rev().take(newest).collect::<Vec<_>>().into_iter().rev().collect(),
        None => Vec::new(),
    };
    if format != Format::Table {
        let value = serde_json::json!({
            "sandbox": serde_json::to_value(&sandbox)?,
            "pod": view.as_ref().and_then(|v| v.pod.as_ref()).map(serde_json::to_value).transpose()?,
            "slurmJob": view.as_ref().and_then(|v| v.job.as_ref()).map(serde_json::to_value).transpose()?,
            "events": events.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>()?,
            "clusterViewError": missing,
        });
        print_value(&value, format)?;
        return Ok(0);
    }
    let status = sandbox.status.clone().unwrap_or_default();
    println!("Sandbox:      {}", sandbox.sandbox_id);
    println!("State:        {}", state_label(status.state));
    println!("Reason:       {}", if status.state_reason.is_empty() { "<none>" } else { &status.state_reason });
    println!("Runner:       {}", if status.runner_id.is_empty() { "<none>" } else { &status.runner_id });
    if let Some(error) = &missing {
        println!("Cluster:      <not available: {error}>");
        return Ok(0);
    }
    let (pod, job) = view.as_ref().map(|view| (view.pod.as_ref(), view.job.as_ref())).unwrap_or((None, None));
    match pod {
        None => println!("Pod:          <none> (not created yet, or removed after the sandbox ended)"),
        Some(pod) => {
            let meta = pod.metadata.clone().unwrap_or_default();
            let spec = pod.spec.clone().unwrap_or_default();
            let pod_status = pod.status.clone().unwrap_or_default();
            println!("Pod:          {}/{}", meta.namespace, meta.name);
            println!("  Phase:      {}", describe_phase(&pod_status));
            println!("  Node:       {}", if spec.node_name.is_empty() { "<unassigned>" } else { &spec.node_name });
            println!("  Scheduler:  {}", spec.scheduler_name);
            println!("  Grace:      {}s (terminationGracePeriodSeconds)", spec.termination_grace_period_seconds);
            let mut annotations: Vec<_> = meta.annotations.iter().collect();
            annotations.sort();
            if annotations.is_empty() {
                println!("  Annotations: <none>");
            } else {
                println!("  Annotations:");
                for (key, value) in annotations {
                    println!("    {key}={value}");
                }
            }
        }
    }
    match job {
        None => println!("Slurm job:    <none> (not placed through SUNK, or not submitted yet)"),
        Some(job) => {
            let state = emu::JobState::try_from(job.state)
                .map(|s| s.as_str_name().trim_start_matches("JOB_STATE_").to_owned())
                .unwrap_or_default();
            println!("Slurm job:    {}", job.job_id);
            println!("  Partition:  {}", job.partition);
            println!("  User:       {} ({})", job.user, job.uid);
            println!(
                "  State:      {state}{}",
                if job.reason.is_empty() { String::new() } else { format!(" ({})", job.reason) }
            );
            println!("  NodeList:   {}", if job.node_list.is_empty() { "<none>" } else { &job.node_list });
        }
    }
    if events.is_empty() {
        println!("Events:       <none>");
    } else {
        println!("Events:");
        let rows = events.iter().map(|event| {
            let when = event.last_timestamp.and_then(|t| serde_json::to_value(t).ok());
            vec![
                format!("  {}", when.and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()),
                event.r#type.clone(),
                event.reason.clone(),
                event.message.clone(),
            ]
        });
        table(&["  LAST SEEN", "TYPE", "REASON", "MESSAGE"], rows);
    }
    Ok(0)
}

/// `Running`, or `Pending (Unschedulable: …)` with the condition that says why.
fn describe_phase(status: &emu::PodStatus) -> String {
    let why = status
        .conditions
        .iter()
        .find(|condition| condition.status == "False" && !condition.reason.is_empty())
        .map(|condition| format!("{}: {}", condition.reason, condition.message))
        .or_else(|| (!status.reason.is_empty()).then(|| format!("{}: {}", status.reason, status.message)));
    match why {
        Some(why) if status.phase != "Running" => format!("{} ({why})", status.phase),
        _ => status.phase.clone(),
    }
}
