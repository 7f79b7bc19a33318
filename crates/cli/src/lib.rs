//! `cwsbx`: cwic's `sandbox runner` and `policy` commands, sandbox commands, the emulator's
//! cluster values and the Slurm views (`sacct`, `squeue`, `sinfo`, `scontrol`, `scancel`), on
//! top of `cwsandbox-client`. Started under one of the Slurm names (a symlink), it is that
//! command, with that command's own options; started as `cwic`, it is cwsbx under cwic's name,
//! so the guide's `cwic sandbox runner policy …` lines run as written.

mod common;
mod emulator;
mod image;
mod links;
mod output;
mod policy;
mod runner;
mod sandbox;
mod slurm;
mod values;

#[cfg(test)]
mod help_tests;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cwsandbox_client::Config;

pub use common::Exit;
use common::GlobalArgs;
// The help tests find the global options' heading here, beside `Cli`.
#[cfg(test)]
use common::GLOBAL;

#[derive(Parser, Debug)]
#[command(
    name = "cwsbx",
    version,
    about = "CoreWeave Sandboxes from the command line (works against the emulator)",
    after_help = TOP_EXAMPLES
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Top,
}

const TOP_EXAMPLES: &str = "Examples:
  cwsbx sandbox run -- python3 -c 'print(1)'       # a sandbox on $CWSANDBOX_RUNNER_ID
  cwsbx sandbox describe SANDBOX_ID                # state, Pod, Slurm job and events in one screen
  cwsbx sandbox runner policy get                  # the policy of $CWSANDBOX_RUNNER_ID, as YAML
  cwsbx slurm squeue                               # the Slurm views (or through `slurm install-links`)
  cwsbx completion bash > ~/.local/share/bash-completion/completions/cwsbx
The connection: CWSANDBOX_BASE_URL and CWSANDBOX_API_KEY, as `cwsandbox-emulator serve` prints them.";

// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Top {
    /// Sandboxes and managed runners.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx sandbox run -- python3 -c 'print(1)'
  cwsbx sandbox ls
  cwsbx sandbox runner policy get"
    )]
    Sandbox(sandbox::SandboxCmd),
    /// The emulated cluster.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx cluster values get
  cwsbx cluster values apply -f values.yaml"
    )]
    Cluster(values::ClusterCmd),
    /// The emulator's own controls: clock, reset, tenants, faults.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx emulator clock freeze
  cwsbx emulator reset
  cwsbx emulator faults add --method CreateSandbox --code UNAVAILABLE --times 2"
    )]
    Emulator(emulator::EmulatorCmd),
    /// The emulator's image cache: load archives, list, remove, prune.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx image load python-3.11.tar
  cwsbx image ls
  cwsbx image rm python:3.11
  cwsbx image prune"
    )]
    Image(image::ImageCmd),
    /// Slurm views over the emulator: sacct, squeue, sinfo, scontrol, scancel.
    #[command(long_about = SLURM_ABOUT, after_help = SLURM_EXAMPLES)]
    Slurm {
        /// `sacct|squeue|sinfo|scontrol|scancel` and its own options, or `install-links DIR`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, value_name = "COMMAND [ARGS]")]
        args: Vec<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:
  cwsbx completion bash > ~/.local/share/bash-completion/completions/cwsbx
  cwsbx completion zsh > \"${fpath[1]}/_cwsbx\"
  cwsbx completion fish > ~/.config/fish/completions/cwsbx.fish")]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the lines that make the SUNK guide's `curl https://api.coreweave.com/…` lines reach
    /// the emulator unchanged (DIR/.curlrc, a curl configuration whose connect-to sends them to
    /// the emulator's port; its self-signed certificate is not verified).
    #[command(after_help = links::GUIDE_ENV_EXAMPLES)]
    GuideEnv {
        /// Where to write the curl configuration (`.curlrc`, the only file written).
        #[arg(long, value_name = "DIR", default_value = "/tmp/cwsandbox-guide")]
        dir: std::path::PathBuf,
    },
}

const SLURM_ABOUT: &str = "Slurm views over the emulator, with Slurm 25.05's option syntax and output.
The binary is also each of these commands when started under its name:
  cwsbx slurm install-links DIR   (symlinks DIR/sacct … and DIR/cwic → this binary; put DIR on PATH)
The commands run as the Slurm user $CWSBX_SLURM_USER (a name or a uid), default root (uid 0),
as SUNK's placeholder jobs are root's. Times are the emulator's clock, in UTC.
The connection comes from CWSANDBOX_BASE_URL and CWSANDBOX_API_KEY (an admin token).";

const SLURM_EXAMPLES: &str = "Examples:
  cwsbx slurm sacct --format=JobID,JobName%60,State,NodeList -X
  cwsbx slurm squeue -u root
  cwsbx slurm sinfo
  cwsbx slurm scontrol show job 1000
  cwsbx slurm scancel 1000
  cwsbx slurm install-links ~/.local/bin";

/// `cwsbx … | head`: once the reader is gone, the next write to stdout ends the process with
/// SIGPIPE, silently, as it ends `ls`, `cat` and every Unix tool (exit status 141 under
/// `pipefail`), instead of Rust's default (SIGPIPE ignored, so `println!` panics on EPIPE).
///
/// The signal's default rather than handling `BrokenPipe` at each write: cwsbx writes to stdout
/// from dozens of places (`println!`, clap's completion generator, the streamed output of `exec`
/// and `logs`, the Slurm views), and one setting covers all of them, those added later too.
/// cwsbx writes to no other pipe (its editor child inherits the terminal), and its connections
/// to the server are sockets: a write to one the server has reset ends the process the same way
/// (with 141 rather than the transport's error message), a race only with a server that dies
/// mid-call.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; it runs before any other thread
    // exists (the tokio runtime is built later), so nothing races the disposition's change.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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
    // Slurm's errors come first: those of its options are printed while it parses them, before
    // any output, and its C stdio holds stdout back until exit unless it is a terminal, while
    // stderr goes out at once; so a `2>&1` capture reads the errors, then the table.
    eprint!("{}", output.stderr);
    print!("{}", output.stdout);
    let _ = std::io::stdout().flush();
    ExitCode::from(output.code)
}

/// The command definitions under the name the binary was started as (`cwsbx` or `cwic`).
fn command_named(name: &str) -> clap::Command {
    let command = Cli::command();
    if name == "cwic" { command.name("cwic").bin_name("cwic") } else { command }
}

/// The whole command: `src/bin/cwsbx.rs` and the Python wheel's `cwsbx` (crates/wheel) call it.
pub fn main() -> ExitCode {
    die_quietly_on_a_closed_pipe();
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let called = std::path::Path::new(&argv0).file_name().and_then(|name| name.to_str()).unwrap_or_default().to_owned();
    if slurm::COMMANDS.contains(&called.as_str()) {
        let args: Vec<String> = argv.collect();
        return slurm_command(&called, &args, Config::from_env().map_err(anyhow::Error::from));
    }
    let matches = command_named(&called).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    match &cli.command {
        Top::Slurm { args } => {
            let (name, rest) = args.split_first().map(|(n, r)| (n.as_str(), r)).unwrap_or(("", &[]));
            if name == "install-links" {
                let [dir] = rest else {
                    eprintln!("error: usage: cwsbx slurm install-links DIR");
                    return ExitCode::from(2);
                };
                return match links::install_links(dir) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(error) => {
                        eprintln!("error: {error:#}");
                        ExitCode::from(1)
                    }
                };
            }
            return slurm_command(name, rest, cli.global.config());
        }
        Top::Completion { shell } => {
            let name = if called == "cwic" { "cwic" } else { "cwsbx" };
            clap_complete::generate(*shell, &mut command_named(name), name, &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(&cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            if let Some(Exit(code)) = error.downcast_ref::<Exit>() {
                return ExitCode::from(*code);
            }
            let text = format!("{error:#}").replace('\n', "; ");
            eprintln!("error: {text}{}", connection_hint(&error, &cli));
            ExitCode::from(1)
        }
    }
}

/// Where a call could not reach the server, the URL it tried and why it was that one.
fn connection_hint(error: &anyhow::Error, cli: &Cli) -> String {
    let unreachable = error.chain().any(|cause| match cause.downcast_ref::<cwsandbox_client::Error>() {
        Some(cwsandbox_client::Error::Transport(_)) => true,
        Some(cwsandbox_client::Error::Api(status)) => {
            status.code == cwsandbox_client::Code::Unavailable
                && ["connect", "dns error", "transport error", "connection"]
                    .iter()
                    .any(|word| status.message.to_lowercase().contains(word))
        }
        _ => false,
    });
    if !unreachable {
        return String::new();
    }
    let url = cli.global.base_url();
    let origin = if cli.global.base_url.as_deref().is_some_and(|u| !u.is_empty()) {
        "from --base-url or CWSANDBOX_BASE_URL"
    } else {
        "the real service's default: CWSANDBOX_BASE_URL is not set (source the lines `cwsandbox-emulator serve` prints)"
    };
    format!(" (could not reach {url}, {origin})")
}

async fn run(cli: &Cli) -> Result<u8> {
    let output = cli.global.output();
    match &cli.command {
        Top::Slurm { .. } | Top::Completion { .. } => unreachable!("handled in main"),
        Top::Sandbox(command) => sandbox::run(&cli.global, command, output).await,
        Top::Emulator(command) => {
            let config = cli.global.config()?;
            let admin = cwsandbox_client::EmulatorAdmin::new(&config)?;
            emulator::run(&admin, command, &config.base_url, output).await
        }
        Top::Image(command) => {
            let config = cli.global.config()?;
            let admin = cwsandbox_client::EmulatorAdmin::new(&config)?;
            image::run(&admin, command, output).await
        }
        Top::Cluster(command) => values::run(&cli.global, command, output).await,
        Top::GuideEnv { dir } => links::guide_env(&cli.global, dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_default_url_is_named_with_why_it_was_used() {
        let transport = || anyhow::Error::from(cwsandbox_client::Error::Transport("dns error".to_owned()));
        let defaulted = Cli::try_parse_from(["cwsbx", "--base-url", "", "sandbox", "ls"]).expect("parses");
        let hint = connection_hint(&transport().context("listing"), &defaulted);
        assert!(
            hint.contains(cwsandbox_client::DEFAULT_BASE_URL) && hint.contains("CWSANDBOX_BASE_URL is not set"),
            "{hint}"
        );
        let given =
            Cli::try_parse_from(["cwsbx", "--base-url", "http://127.0.0.1:9", "sandbox", "ls"]).expect("parses");
        let hint = connection_hint(&transport(), &given);
        assert_eq!(hint, " (could not reach http://127.0.0.1:9, from --base-url or CWSANDBOX_BASE_URL)");
        // A refusal by the server is no connection problem.
        let refused = cwsandbox_client::Error::Config("bad token".to_owned());
        assert_eq!(connection_hint(&anyhow::Error::from(refused), &given), "");
    }
}
