//! The Slurm commands over the emulator's API: `sacct`, `squeue`, `sinfo`, `scontrol` and
//! `scancel`, with their own option syntax, rendered by pure functions from job, node and
//! partition records (the emulator's `ListJobs`, `ListSlurmNodes`, `ListPartitions`), the
//! emulator's "now" and the options. Nothing here reads the host clock: times are the
//! emulator's, in its time zone (UTC).
//!
//! The binary answers to these names when started under them (a symlink `sacct` → `cwsbx`), and
//! to `cwsbx slurm <command> …`.
//!
//! Who runs the command: `CWSBX_SLURM_USER` (a Slurm user name or uid), default `root` (uid 0),
//! as SUNK's placeholder jobs are root's and the guide runs `sacct` as root.

pub mod fmt;
pub mod getopt;
pub mod sacct;
pub mod scancel;
pub mod scontrol;
pub mod sinfo;
pub mod squeue;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod property_tests;

use std::collections::HashMap;

use cwsandbox_client::{Client, Config, Error, emulator_v1 as pb};

/// The command names the binary answers to.
pub const COMMANDS: &[&str] = &["sacct", "squeue", "sinfo", "scontrol", "scancel"];

/// The variable naming the Slurm user the commands run as.
pub const USER_ENV: &str = "CWSBX_SLURM_USER";

/// What a command printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit code.
    pub code: u8,
}

impl Output {
    /// Success with `stdout`.
    pub fn ok(stdout: String) -> Output {
        Output { stdout, stderr: String::new(), code: 0 }
    }

    /// Failure with one message (a newline is added).
    pub fn fail(stderr: impl Into<String>, code: u8) -> Output {
        let mut stderr = stderr.into();
        if !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        Output { stdout: String::new(), stderr, code }
    }
}

/// The environment a command reads (`SACCT_FORMAT`, `SQUEUE_FORMAT`, `SLURM_TIME_FORMAT`,
/// `CWSBX_SLURM_USER`), passed in so the renderers stay pure.
pub type Env = HashMap<String, String>;

/// The caller as Slurm sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User name.
    pub name: String,
    /// Uid.
    pub uid: u32,
}

impl Caller {
    /// `root`.
    pub fn root() -> Caller {
        Caller { name: "root".to_owned(), uid: 0 }
    }

    /// Resolves `CWSBX_SLURM_USER` against the Slurm users: a name or a uid; unset is root.
    pub fn from_env(env: &Env, users: &[(String, u32)]) -> Result<Caller, String> {
        let Some(value) = env.get(USER_ENV).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
            return Ok(Caller::root());
        };
        if let Some((name, uid)) = users.iter().find(|(name, _)| name == value) {
            return Ok(Caller { name: name.clone(), uid: *uid });
        }
        if let Ok(uid) = value.parse::<u32>() {
            let name = users.iter().find(|(_, known)| *known == uid).map(|(name, _)| name.clone());
            return Ok(Caller { name: name.unwrap_or_else(|| uid.to_string()), uid });
        }
        Err(format!("{USER_ENV}={value}: no such Slurm user"))
    }
}

/// A user given as a name or a uid, resolved against the Slurm users.
pub fn resolve_user(text: &str, users: &[(String, u32)]) -> Option<u32> {
    users.iter().find(|(name, _)| name == text).map(|(_, uid)| *uid).or_else(|| text.parse().ok())
}

/// The connection: the same variables `cwsbx` reads (`CWSANDBOX_BASE_URL`,
/// `CWSANDBOX_API_KEY`, `CWSANDBOX_CONTROL_PLANE_URL`) or `cwsbx`'s global flags.
pub struct Conn {
    admin: cwsandbox_client::EmulatorAdmin,
}

impl Conn {
    /// From a client configuration.
    pub fn new(config: Config) -> Result<Conn, Error> {
        Ok(Conn { admin: Client::new(config)?.emulator()? })
    }

    /// The emulator's admin API.
    pub fn admin(&self) -> &cwsandbox_client::EmulatorAdmin {
        &self.admin
    }
}

/// How a failed call reads on stderr, in the command's own voice.
pub fn api_error(prog: &str, error: &Error) -> Output {
    Output::fail(format!("{prog}: error: {error}"), 1)
}

/// Runs one of [`COMMANDS`] with its arguments (without argv[0]).
pub async fn run(prog: &str, args: &[String], env: &Env, conn: Result<Conn, String>) -> Output {
    match prog {
        "sacct" => sacct::run(args, env, conn).await,
        "squeue" => squeue::run(args, env, conn).await,
        "sinfo" => sinfo::run(args, env, conn).await,
        "scontrol" => scontrol::run(args, env, conn).await,
        "scancel" => scancel::run(args, env, conn).await,
        other => Output::fail(format!("cwsbx: {other} is not a Slurm command ({})", COMMANDS.join(", ")), 2),
    }
}

/// The emulator's time of a listing, in seconds.
pub fn now_of(response: &pb::ListJobsResponse) -> i64 {
    response.now.as_ref().map(|now| now.seconds).unwrap_or_default()
}
