//! `cwsbx sandbox runner …`: managed runners (cwic's `sandbox runner` commands) and their policy.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use cwsandbox_client::pb;

use crate::common::{Exit, GlobalArgs, read_input};
use crate::output::{Format, Output, print_value, report_all, table};
use crate::policy::{self, PolicyCmd};

#[derive(Subcommand, Debug)]
pub enum RunnerCmd {
    /// List managed runners.
    #[command(after_help = "Examples:
  cwsbx sandbox runner list
  cwsbx sandbox runner list --zone us-east-04a -o json")]
    List {
        /// Only runners of this cluster (id).
        #[arg(long, value_name = "CLUSTER_ID")]
        cluster: Option<String>,
        /// Only runners in this zone.
        #[arg(long)]
        zone: Option<String>,
    },
    /// Show runners (one: an object with -o json; several: a list).
    #[command(after_help = "Examples:
  cwsbx sandbox runner get cks-runner
  cwsbx sandbox runner get cks-runner -o json | jq -r .etag")]
    Get {
        /// The runners.
        #[arg(required = true, value_name = "RUNNER_ID")]
        runner_ids: Vec<String>,
    },
    /// Create a runner from a ManagedRunner YAML/JSON file.
    #[command(after_help = "Examples:
  cwsbx sandbox runner create --print-template > runner.yaml
  cwsbx sandbox runner create -f runner.yaml")]
    Create {
        /// The file (`-` for stdin).
        #[arg(short = 'f', long = "file", required_unless_present = "print_template", value_name = "FILE")]
        file: Option<String>,
        /// Idempotency key: a repeated create with the same key returns the same runner.
        #[arg(long, default_value = "")]
        request_id: String,
        /// Print a runner template and exit.
        #[arg(long)]
        print_template: bool,
    },
    /// Delete runners.
    #[command(after_help = "Examples:
  cwsbx sandbox runner delete --yes my-runner
  cwsbx sandbox runner delete --yes --allow-missing my-runner")]
    Delete {
        /// The runners.
        #[arg(required = true, value_name = "RUNNER_ID")]
        runner_ids: Vec<String>,
        /// Confirm: nothing is deleted without it.
        #[arg(long)]
        yes: bool,
        /// A runner that does not exist is not an error (it is reported as not found).
        #[arg(long)]
        allow_missing: bool,
    },
    /// The runner policy.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx sandbox runner policy get
  cwsbx sandbox runner policy validate -f slurm-policy.yaml
  cwsbx sandbox runner policy edit cks-runner -f slurm-policy.yaml"
    )]
    Policy(PolicyCmd),
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

pub async fn run(global: &GlobalArgs, command: &RunnerCmd, output: Output) -> Result<u8> {
    let format = output.rows();
    match command {
        RunnerCmd::Policy(command) => policy::run(global, command, output).await,
        RunnerCmd::List { cluster, zone } => {
            let runners = global
                .client()?
                .runners()?
                .list(cluster.as_deref().unwrap_or(""), zone.as_deref().unwrap_or(""))
                .await?;
            match format {
                Format::Table => table(&RUNNER_HEADER, runners.iter().map(runner_row)),
                _ => print_value(&serde_json::to_value(&runners)?, format)?,
            }
            Ok(0)
        }
        RunnerCmd::Get { runner_ids } => {
            let admin = global.client()?.runners()?;
            let mut runners = Vec::new();
            for id in runner_ids {
                runners.push(admin.get(id).await.with_context(|| format!("runner {id}"))?);
            }
            match (format, runners.as_slice()) {
                (Format::Table, _) => table(&RUNNER_HEADER, runners.iter().map(runner_row)),
                // `get` of one object prints that object; of several, the list.
                (_, [runner]) => print_value(&serde_json::to_value(runner)?, format)?,
                _ => print_value(&serde_json::to_value(&runners)?, format)?,
            }
            Ok(0)
        }
        RunnerCmd::Create { print_template: true, .. } => {
            print!("{}", policy::RUNNER_TEMPLATE);
            Ok(0)
        }
        RunnerCmd::Create { file, request_id, .. } => {
            let text = read_input(file.as_deref().unwrap_or("-"))?;
            let runner: pb::ManagedRunner = policy::parse_document(&text).context("the runner file")?;
            let created = global.client()?.runners()?.create(runner, request_id).await?;
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
            let admin = global.client()?.runners()?;
            let mut results = Vec::new();
            let mut failed = 0;
            for id in runner_ids {
                // Asked without allow_missing, so that a runner that was not there can be said so.
                match admin.delete(id, false).await {
                    Ok(()) => results.push((
                        format!("runner {id} deleted"),
                        serde_json::json!({"runnerId": id, "result": "deleted"}),
                    )),
                    Err(error) if *allow_missing && error.code() == cwsandbox_client::Code::NotFound => results.push((
                        format!("runner {id} not found: nothing deleted (--allow-missing)"),
                        serde_json::json!({"runnerId": id, "result": "not found"}),
                    )),
                    Err(error) => {
                        eprintln!("error: runner {id}: {error}");
                        failed += 1;
                    }
                }
            }
            report_all(format, results)?;
            if failed > 0 { Err(Exit(1).into()) } else { Ok(0) }
        }
    }
}
