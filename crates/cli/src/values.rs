//! `cwsbx cluster values …`: the emulator's Helm-style values (get, apply with the diff it made).

use anyhow::Result;
use clap::Subcommand;

use crate::Cli;
use crate::output::{Format, Output, print_value, yaml_to_json};
use crate::policy::read_input;

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// The emulator's Helm-style values.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx cluster values get
  cwsbx cluster values apply -f values.yaml --dry-run"
    )]
    Values(ValuesCmd),
}

#[derive(Subcommand, Debug)]
pub enum ValuesCmd {
    /// Print the values in force (YAML; `-o json`: JSON).
    #[command(after_help = "Examples:
  cwsbx cluster values get
  cwsbx cluster values get -o json | jq .slurmConfig")]
    Get,
    /// Merge a values file like `helm upgrade -f` (maps merge; lists and scalars replace whole,
    /// so a list entry cannot be changed alone; `null` deletes); prints each value it changed.
    #[command(after_help = "Examples:
  printf 'slurmConfig:\\n  KillWait: 60\\n' | cwsbx cluster values apply -f -
  cwsbx cluster values apply -f values.yaml --dry-run
  cwsbx cluster values apply -f values.yaml -o json | jq .changes")]
    Apply {
        /// The values file (`-` for stdin).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
        /// Check and show what would change, without applying.
        #[arg(long)]
        dry_run: bool,
    },
}

pub async fn run(cli: &Cli, command: &ClusterCmd, output: Output) -> Result<u8> {
    let ClusterCmd::Values(command) = command;
    match command {
        ValuesCmd::Get => {
            let format = output.document("the values")?;
            let yaml = cli.client()?.emulator()?.get_values().await?;
            match format {
                Format::Json => print_value(&yaml_to_json(&yaml)?, Format::Json)?,
                _ => print!("{yaml}"),
            }
            Ok(0)
        }
        ValuesCmd::Apply { file, dry_run } => {
            let yaml = read_input(file)?;
            let applied = cli.client()?.emulator()?.apply_values(&yaml, *dry_run).await?;
            match output.rows() {
                Format::Table => {
                    // What changed, one line each: a no-op apply restarts nothing and says so.
                    let verdict = match (*dry_run, applied.changes.is_empty()) {
                        (true, true) => "values are valid and change nothing (dry run)".to_owned(),
                        (true, false) => "values are valid; they would change (dry run):".to_owned(),
                        (false, true) => "values unchanged: nothing applied, nothing restarted".to_owned(),
                        (false, false) => format!("values applied, {} changed:", applied.changes.len()),
                    };
                    println!("{verdict}");
                    for change in &applied.changes {
                        println!("  {change}");
                    }
                }
                format => {
                    let value = serde_json::json!({
                        "dryRun": dry_run,
                        "changes": applied.changes,
                        "values": yaml_to_json(&applied.yaml)?,
                    });
                    print_value(&value, format)?;
                }
            }
            Ok(0)
        }
    }
}
