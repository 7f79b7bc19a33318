//! `cwsbx`: cwic's `sandbox runner` and `policy` commands, sandbox commands, the emulator's
//! cluster values and the Slurm views (`sacct`, `squeue`, `sinfo`, `scontrol`, `scancel`), on
//! top of `cwsandbox-client`. Started under one of the Slurm names (a symlink), it is that
//! command, with that command's own options.

mod emulator;
mod output;
mod policy;
mod slurm;

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use cwsandbox_client::{Client, Config, ExecEvent, ExecOptions, pb, state_name};
use futures::StreamExt;

use output::{Format, print_value, table};

#[derive(Parser, Debug)]
#[command(name = "cwsbx", version, about = "CoreWeave Sandboxes from the command line (works against the emulator)")]
struct Cli {
    /// The API (data plane and gateway).
    #[arg(long, global = true, env = "CWSANDBOX_BASE_URL")]
    base_url: Option<String>,
    /// The control plane (managed runners); defaults to the base URL.
    #[arg(long, global = true, env = "CWSANDBOX_CONTROL_PLANE_URL")]
    control_plane_url: Option<String>,
    /// The bearer token.
    #[arg(long, global = true, env = "CWSANDBOX_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: Top,
}

// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Top {
    /// Sandboxes and managed runners.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// The emulated cluster.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// The emulator's own controls: clock, reset, tenants, faults.
    #[command(subcommand)]
    Emulator(emulator::EmulatorCmd),
    /// Slurm views over the emulator: sacct, squeue, sinfo, scontrol, scancel.
    #[command(long_about = SLURM_ABOUT)]
    Slurm {
        /// `sacct|squeue|sinfo|scontrol|scancel` and its own options, or `install-links DIR`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, value_name = "COMMAND [ARGS]")]
        args: Vec<String>,
    },
}

const SLURM_ABOUT: &str = "Slurm views over the emulator, with Slurm 25.05's option syntax and output:
  cwsbx slurm sacct --format=JobID,JobName%60,State,NodeList -X
  cwsbx slurm squeue -u root
  cwsbx slurm sinfo
  cwsbx slurm scontrol show job 1000
  cwsbx slurm scancel 1000
The binary is also each of these commands when started under its name:
  cwsbx slurm install-links DIR   (symlinks DIR/sacct … → this binary; put DIR on PATH)
The commands run as the Slurm user $CWSBX_SLURM_USER (a name or a uid), default root (uid 0),
as SUNK's placeholder jobs are root's. Times are the emulator's clock, in UTC.
The connection comes from CWSANDBOX_BASE_URL and CWSANDBOX_API_KEY (an admin token).";

#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum SandboxCmd {
    /// Managed runners and their policies.
    #[command(subcommand)]
    Runner(RunnerCmd),
    /// Start a sandbox and wait until it runs.
    Run(RunArgs),
    /// Run a command in a sandbox; exits with the command's code.
    Exec {
        sandbox_id: String,
        /// Forward this process's stdin to the command.
        #[arg(short, long)]
        interactive: bool,
        /// Environment for the command (KEY=VALUE).
        #[arg(long = "env", value_parser = parse_pair)]
        env: Vec<(String, String)>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List sandboxes.
    #[command(alias = "list")]
    Ls {
        /// Include terminated sandboxes.
        #[arg(short, long)]
        all: bool,
        #[arg(long)]
        tag: Vec<String>,
        #[arg(long = "runner")]
        runner_ids: Vec<String>,
    },
    /// Show one sandbox.
    Get { sandbox_id: String },
    /// The main process's output.
    Logs {
        sandbox_id: String,
        /// Keep streaming while the sandbox runs.
        #[arg(short, long)]
        follow: bool,
        #[arg(long, default_value_t = 0)]
        tail: i32,
    },
    /// Stop sandboxes (graceful).
    Stop {
        #[arg(required = true)]
        sandbox_ids: Vec<String>,
        #[arg(long, default_value_t = 10)]
        grace: i32,
    },
    /// Delete sandboxes at once.
    Delete {
        #[arg(required = true)]
        sandbox_ids: Vec<String>,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    #[arg(long, default_value = "python:3.11")]
    image: String,
    /// Runner to place on (repeatable); default `$CWSANDBOX_RUNNER_ID`.
    #[arg(long = "runner", env = "CWSANDBOX_RUNNER_ID", value_delimiter = ',')]
    runner_ids: Vec<String>,
    /// Placement mode.
    #[arg(long, default_value = "cks", value_parser = ["cks", "serverless"])]
    mode: String,
    /// Annotation KEY=VALUE (repeatable), e.g. sunk.coreweave.com/partition=gpu.
    #[arg(long = "annotation", short = 'a', value_parser = parse_pair)]
    annotations: Vec<(String, String)>,
    #[arg(long)]
    tag: Vec<String>,
    #[arg(long = "env", short = 'e', value_parser = parse_pair)]
    env: Vec<(String, String)>,
    #[arg(long)]
    cpu_request: Option<String>,
    #[arg(long)]
    memory_request: Option<String>,
    #[arg(long)]
    cpu_limit: Option<String>,
    #[arg(long)]
    memory_limit: Option<String>,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 0)]
    lifetime: i32,
    #[arg(long)]
    workdir: Option<String>,
    /// Return after the create, without waiting for RUNNING.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for RUNNING.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// The main command and its arguments (default: sleep until stopped).
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum RunnerCmd {
    /// List managed runners.
    List {
        #[arg(long)]
        cluster: Option<String>,
        #[arg(long)]
        zone: Option<String>,
    },
    /// Show runners.
    Get {
        #[arg(required = true)]
        runner_ids: Vec<String>,
    },
    /// Create a runner from a ManagedRunner YAML/JSON file.
    Create {
        /// The file (`-` for stdin).
        #[arg(short = 'f', long = "file", required_unless_present = "print_template")]
        file: Option<String>,
        #[arg(long, default_value = "")]
        request_id: String,
        #[arg(long)]
        print_template: bool,
    },
    /// Delete runners.
    Delete {
        #[arg(required = true)]
        runner_ids: Vec<String>,
        /// Confirm.
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        allow_missing: bool,
    },
    /// The runner policy.
    #[command(subcommand)]
    Policy(PolicyCmd),
}

#[derive(Subcommand, Debug)]
enum PolicyCmd {
    /// Print the policy (`null` in JSON for a never-configured runner).
    Get { runner_id: String },
    /// A readable summary of the policy.
    Describe { runner_id: String },
    /// Replace the policy: from a file, or in $EDITOR on the current one.
    Edit {
        runner_id: String,
        /// The new policy (`-` for stdin); without it, $EDITOR opens on the current policy.
        #[arg(short = 'f', long = "file")]
        file: Option<String>,
        /// Apply only if the policy is still at this revision.
        #[arg(long)]
        etag: Option<String>,
        /// Print a policy template and exit.
        #[arg(long)]
        print_template: bool,
    },
    /// Check a policy file offline; prints every violation with its field path.
    Validate {
        #[arg(short = 'f', long = "file")]
        file: String,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// The emulator's Helm-style values.
    #[command(subcommand)]
    Values(ValuesCmd),
}

#[derive(Subcommand, Debug)]
enum ValuesCmd {
    /// Print the values in force.
    Get,
    /// Merge a values file like `helm upgrade -f`.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Check without applying.
        #[arg(long)]
        dry_run: bool,
    },
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// An error that carries its own exit code and has already been reported.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}

impl Cli {
    fn config(&self) -> Result<Config> {
        let base_url = self
            .base_url
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| cwsandbox_client::DEFAULT_BASE_URL.to_owned());
        let api_key = self.api_key.clone().context("no API key: set CWSANDBOX_API_KEY or pass --api-key")?;
        let mut config = Config::new(base_url, api_key);
        if let Some(url) = self.control_plane_url.clone().filter(|u| !u.is_empty()) {
            config = config.with_control_plane_url(url);
        }
        Ok(config)
    }

    fn client(&self) -> Result<Client> {
        Ok(Client::new(self.config()?)?)
    }
}

/// Runs a Slurm command and prints what it printed.
fn slurm_command(name: &str, args: &[String], config: Result<Config>) -> ExitCode {
    let env: slurm::Env = std::env::vars().collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    // The lazy channel registers with the runtime when it is built.
    let _context = runtime.enter();
    let conn = config
        .map_err(|error| format!("{error:#}"))
        .and_then(|config| slurm::Conn::new(config).map_err(|e| e.to_string()));
    let output = runtime.block_on(slurm::run(name, args, &env, conn));
    print!("{}", output.stdout);
    eprint!("{}", output.stderr);
    let _ = std::io::stdout().flush();
    ExitCode::from(output.code)
}

/// `cwsbx slurm install-links DIR`: a symlink per Slurm command to this binary.
fn install_links(dir: &str) -> Result<()> {
    let target = std::env::current_exe().context("the path of this binary")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {dir}"))?;
    for name in slurm::COMMANDS {
        let link = std::path::Path::new(dir).join(name);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link).with_context(|| format!("replacing {}", link.display()))?;
        }
        std::os::unix::fs::symlink(&target, &link).with_context(|| format!("linking {}", link.display()))?;
        println!("{} -> {}", link.display(), target.display());
    }
    Ok(())
}

/// The whole command: `src/bin/cwsbx.rs` and the Python wheel's `cwsbx` (crates/wheel) call it.
pub fn main() -> ExitCode {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let called = std::path::Path::new(&argv0).file_name().and_then(|name| name.to_str()).unwrap_or_default().to_owned();
    if slurm::COMMANDS.contains(&called.as_str()) {
        let args: Vec<String> = argv.collect();
        return slurm_command(&called, &args, Config::from_env().map_err(anyhow::Error::from));
    }
    let cli = Cli::parse();
    if let Top::Slurm { args } = &cli.command {
        let (name, rest) = args.split_first().map(|(n, r)| (n.as_str(), r)).unwrap_or(("", &[]));
        if name == "install-links" {
            let [dir] = rest else {
                eprintln!("error: usage: cwsbx slurm install-links DIR");
                return ExitCode::from(2);
            };
            return match install_links(dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error:#}");
                    ExitCode::from(1)
                }
            };
        }
        return slurm_command(name, rest, cli.config());
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            if let Some(Exit(code)) = error.downcast_ref::<Exit>() {
                return ExitCode::from(*code);
            }
            let text = format!("{error:#}").replace('\n', "; ");
            eprintln!("error: {text}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> Result<u8> {
    let format = cli.output;
    match &cli.command {
        Top::Slurm { .. } => unreachable!("handled in main"),
        Top::Sandbox(SandboxCmd::Runner(command)) => runner(&cli, command, format).await,
        Top::Sandbox(command) => sandbox(&cli, command, format).await,
        Top::Emulator(command) => {
            let config = cli.config()?;
            let admin = cwsandbox_client::EmulatorAdmin::new(&config)?;
            emulator::run(&admin, command, &config.base_url, format).await
        }
        Top::Cluster(ClusterCmd::Values(ValuesCmd::Get)) => {
            let yaml = cli.client()?.emulator()?.get_values().await?;
            match format {
                Format::Table | Format::Yaml => print!("{yaml}"),
                Format::Json => print_value(&output::yaml_to_json(&yaml)?, Format::Json)?,
            }
            Ok(0)
        }
        Top::Cluster(ClusterCmd::Values(ValuesCmd::Apply { file, dry_run })) => {
            let yaml = policy::read_input(file)?;
            let applied = cli.client()?.emulator()?.apply_values(&yaml, *dry_run).await?;
            match format {
                Format::Table => {
                    // What changed, one line each: a no-op apply restarts nothing and says so.
                    let verdict = match (*dry_run, applied.changes.is_empty()) {
                        (true, true) => "values are valid and change nothing (dry run)".to_owned(),
                        (true, false) => "values are valid; they would change (dry run):".to_owned(),
                        (false, true) => "values unchanged: nothing applied, nothing restarted".to_owned(),
                        (false, false) => format!("values applied, {} changed:", applied.changes.len()),
                    };
                    eprintln!("{verdict}");
                    for change in &applied.changes {
                        println!("  {change}");
                    }
                }
                Format::Yaml => print!("{}", applied.yaml),
                Format::Json => print_value(&output::yaml_to_json(&applied.yaml)?, Format::Json)?,
            }
            Ok(0)
        }
    }
}

fn runner_row(runner: &pb::ManagedRunner) -> Vec<String> {
    let identity = runner.identity.clone().unwrap_or_default();
    let install = pb::RunnerInstallStatus::try_from(runner.install_status)
        .map(|s| s.as_str_name().trim_start_matches("RUNNER_INSTALL_STATUS_").to_owned())
        .unwrap_or_default();
    let conn = pb::RunnerConnectionStatus::try_from(runner.connection_status)
        .map(|s| s.as_str_name().trim_start_matches("RUNNER_CONNECTION_STATUS_").to_owned())
        .unwrap_or_default();
    vec![
        identity.runner_id,
        identity.zone,
        identity.cluster_id,
        install,
        conn,
        if runner.policy.is_some() { "set".to_owned() } else { "unset".to_owned() },
        runner.etag.clone(),
    ]
}

const RUNNER_HEADER: [&str; 7] = ["RUNNER ID", "ZONE", "CLUSTER", "INSTALL", "CONN", "POLICY", "ETAG"];

async fn runner(cli: &Cli, command: &RunnerCmd, format: Format) -> Result<u8> {
    match command {
        RunnerCmd::Policy(command) => policy::run(cli, command, format).await,
        RunnerCmd::List { cluster, zone } => {
            let runners =
                cli.client()?.runners()?.list(cluster.as_deref().unwrap_or(""), zone.as_deref().unwrap_or("")).await?;
            match format {
                Format::Table => table(&RUNNER_HEADER, runners.iter().map(runner_row)),
                _ => print_value(&serde_json::to_value(&runners)?, format)?,
            }
            Ok(0)
        }
        RunnerCmd::Get { runner_ids } => {
            let admin = cli.client()?.runners()?;
            let mut runners = Vec::new();
            for id in runner_ids {
                runners.push(admin.get(id).await.with_context(|| format!("runner {id}"))?);
            }
            match format {
                Format::Table => table(&RUNNER_HEADER, runners.iter().map(runner_row)),
                // cwic prints a JSON array of ManagedRunner.
                _ => print_value(&serde_json::to_value(&runners)?, format)?,
            }
            Ok(0)
        }
        RunnerCmd::Create { print_template: true, .. } => {
            print!("{}", policy::RUNNER_TEMPLATE);
            Ok(0)
        }
        RunnerCmd::Create { file, request_id, .. } => {
            let text = policy::read_input(file.as_deref().unwrap_or("-"))?;
            let runner: pb::ManagedRunner = policy::parse_document(&text).context("the runner file")?;
            let created = cli.client()?.runners()?.create(runner, request_id).await?;
            match format {
                Format::Table => table(&RUNNER_HEADER, [runner_row(&created)]),
                _ => print_value(&serde_json::to_value(&created)?, format)?,
            }
            Ok(0)
        }
        RunnerCmd::Delete { runner_ids, yes, allow_missing } => {
            if !yes {
                bail!("refusing to delete {} without --yes", runner_ids.join(", "));
            }
            let admin = cli.client()?.runners()?;
            let mut failed = 0;
            for id in runner_ids {
                match admin.delete(id, *allow_missing).await {
                    Ok(()) => println!("runner {id} deleted"),
                    Err(error) => {
                        eprintln!("error: runner {id}: {error}");
                        failed += 1;
                    }
                }
            }
            if failed > 0 { Err(Exit(1).into()) } else { Ok(0) }
        }
    }
}

fn sandbox_row(sandbox: &pb::Sandbox) -> Vec<String> {
    let status = sandbox.status.clone().unwrap_or_default();
    let created = status.create_time.and_then(|t| serde_json::to_value(t).ok());
    vec![
        sandbox.sandbox_id.clone(),
        state_name(status.state).trim_start_matches("STATE_").to_owned(),
        status.runner_id.clone(),
        created.and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        status.state_reason.clone(),
    ]
}

const SANDBOX_HEADER: [&str; 5] = ["SANDBOX ID", "STATE", "RUNNER", "CREATED", "REASON"];

fn print_sandboxes(sandboxes: &[pb::Sandbox], format: Format, single: bool) -> Result<()> {
    match format {
        Format::Table => table(&SANDBOX_HEADER, sandboxes.iter().map(sandbox_row)),
        _ if single && sandboxes.len() == 1 => print_value(&serde_json::to_value(&sandboxes[0])?, format)?,
        _ => print_value(&serde_json::to_value(sandboxes)?, format)?,
    }
    Ok(())
}

async fn sandbox(cli: &Cli, command: &SandboxCmd, format: Format) -> Result<u8> {
    let client = cli.client()?;
    match command {
        SandboxCmd::Runner(_) => unreachable!("handled by runner()"),
        SandboxCmd::Run(args) => {
            let mut builder = client
                .sandbox()
                .image(&args.image)
                .runner_ids(args.runner_ids.iter().filter(|s| !s.is_empty()).cloned())
                .mode(if args.mode == "cks" { pb::SandboxMode::Cks } else { pb::SandboxMode::Serverless })
                .max_lifetime_seconds(args.lifetime)
                .wait_timeout(std::time::Duration::from_secs(args.timeout));
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
                builder = builder.requests(
                    args.cpu_request.clone().unwrap_or_default(),
                    args.memory_request.clone().unwrap_or_default(),
                );
            }
            if args.cpu_limit.is_some() || args.memory_limit.is_some() {
                builder = builder
                    .limits(args.cpu_limit.clone().unwrap_or_default(), args.memory_limit.clone().unwrap_or_default());
            }
            if let Some(dir) = &args.workdir {
                builder = builder.working_dir(dir);
            }
            if let Some((command, rest)) = args.command.split_first() {
                builder = builder.command(command).args(rest.iter().cloned());
            }
            let sandbox = if args.no_wait {
                builder.create().await?
            } else {
                let mut last = String::new();
                let result = builder
                    .run_with_progress(|sandbox| {
                        let status = sandbox.status.clone().unwrap_or_default();
                        let line = format!(
                            "{}: {}{}",
                            sandbox.sandbox_id,
                            state_name(status.state),
                            if status.state_reason.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", status.state_reason)
                            }
                        );
                        if line != last {
                            eprintln!("waiting for {line}");
                            last = line;
                        }
                    })
                    .await;
                result?
            };
            print_sandboxes(std::slice::from_ref(sandbox.proto()), format, true)?;
            Ok(0)
        }
        SandboxCmd::Exec { sandbox_id, interactive, env, command } => {
            let sandbox = client.get(sandbox_id).await?;
            let argv: Vec<&str> = command.iter().map(String::as_str).collect();
            let options = ExecOptions { env: env.iter().cloned().collect(), tty: false };
            let mut stream = sandbox.exec_stream(&argv, options).await?;
            if *interactive {
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
        SandboxCmd::Ls { all, tag, runner_ids } => {
            let sandboxes = client
                .list(pb::ListSandboxesRequest {
                    tags: tag.clone(),
                    runner_ids: runner_ids.clone(),
                    show_terminated: *all,
                    ..Default::default()
                })
                .await?;
            print_sandboxes(&sandboxes, format, false)?;
            Ok(0)
        }
        SandboxCmd::Get { sandbox_id } => {
            let sandbox = client.get(sandbox_id).await?;
            print_sandboxes(std::slice::from_ref(sandbox.proto()), format, true)?;
            Ok(0)
        }
        SandboxCmd::Logs { sandbox_id, follow, tail } => {
            let mut stream = client.logs(sandbox_id, *follow, *tail).await?;
            while let Some(chunk) = stream.next().await {
                std::io::stdout().write_all(&chunk?)?;
                std::io::stdout().flush()?;
            }
            Ok(0)
        }
        SandboxCmd::Stop { sandbox_ids, grace } => {
            for id in sandbox_ids {
                client.stop(id, *grace).await.with_context(|| format!("sandbox {id}"))?;
                println!("sandbox {id} stopping");
            }
            Ok(0)
        }
        SandboxCmd::Delete { sandbox_ids } => {
            for id in sandbox_ids {
                client.delete(id, false).await.with_context(|| format!("sandbox {id}"))?;
                println!("sandbox {id} deleted");
            }
            Ok(0)
        }
    }
}
