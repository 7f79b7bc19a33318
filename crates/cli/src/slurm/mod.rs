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
pub mod json;
pub mod sacct;
pub mod scancel;
pub mod scontrol;
pub mod sinfo;
pub mod slurm_conf;
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
    #[cfg(test)]
    pub fn root() -> Caller {
        Caller { name: "root".to_owned(), uid: 0 }
    }

    /// Resolves `CWSBX_SLURM_USER` against the Slurm users: a name or a uid; unset is the user
    /// of the token's uid (`token_uid`; root for the operator's).
    pub fn from_env(env: &Env, users: &[(String, u32)], token_uid: u32) -> Result<Caller, String> {
        let Some(value) = env.get(USER_ENV).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
            let name = users.iter().find(|(_, uid)| *uid == token_uid).map(|(name, _)| name.clone());
            return Ok(Caller { name: name.unwrap_or_else(|| token_uid.to_string()), uid: token_uid });
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
        "sacct" => run_command::<sacct::Sacct>(args, env, conn).await,
        "squeue" => run_command::<squeue::Squeue>(args, env, conn).await,
        "sinfo" => run_command::<sinfo::Sinfo>(args, env, conn).await,
        "scontrol" => run_command::<scontrol::Scontrol>(args, env, conn).await,
        "scancel" => run_command::<scancel::Scancel>(args, env, conn).await,
        other => Output::fail(format!("cwsbx: {other} is not a Slurm command ({})", COMMANDS.join(", ")), 2),
    }
}

/// What one Slurm command supplies to the skeleton every command runs ([`run_command`]): its
/// option syntax, its calls to the emulator and its rendering. Parsing and rendering stay pure
/// functions of the command's module, so the golden and property tests drive them directly.
pub(crate) trait Command {
    /// The program name that starts its messages (`sacct: error: …`).
    const NAME: &'static str;
    /// A parsed command line.
    type Options;
    /// What the emulator answered.
    type Answer;

    /// Parses the command line (without argv[0]); an `Err` is printed as it is.
    fn parse(args: &[String], env: &Env) -> Result<Self::Options, Output>;

    /// `--help`, `--version` and the like: printed without asking the emulator.
    fn info(options: &Self::Options) -> Option<&str>;

    /// Asks the emulator (and, for `scancel`, acts); an `Err` is printed as it is.
    async fn call(options: &Self::Options, env: &Env, conn: &Conn) -> Result<Self::Answer, Output>;

    /// What the command prints, and its exit code.
    fn render(options: &Self::Options, answer: Self::Answer, env: &Env) -> Output;
}

/// The skeleton of every Slurm command: parse the arguments, print `--help`-style text if that
/// was asked, else call the emulator and render its answer. A missing connection is reported
/// only once a command needs one, so `--help` works without an emulator.
pub async fn run_command<C: Command>(args: &[String], env: &Env, conn: Result<Conn, String>) -> Output {
    let options = match C::parse(args, env) {
        Ok(options) => options,
        Err(output) => return output,
    };
    if let Some(info) = C::info(&options) {
        return Output::ok(info.to_owned());
    }
    let conn = match conn {
        Ok(conn) => conn,
        Err(error) => return Output::fail(format!("{}: error: {error}", C::NAME), 1),
    };
    match C::call(&options, env, &conn).await {
        Ok(answer) => C::render(&options, answer, env),
        Err(output) => output,
    }
}

/// The Slurm users and the caller among them (`CWSBX_SLURM_USER`), in `prog`'s words on failure.
pub async fn caller(prog: &str, env: &Env, conn: &Conn) -> Result<(Caller, Vec<(String, u32)>), Output> {
    let (known, token_uid) = conn.admin().slurm_users().await.map_err(|error| api_error(prog, &error))?;
    let caller =
        Caller::from_env(env, &known, token_uid).map_err(|error| Output::fail(format!("{prog}: error: {error}"), 1))?;
    Ok((caller, known))
}

/// The emulator's time of a listing, in seconds.
pub fn now_of(response: &pb::ListJobsResponse) -> i64 {
    response.now.as_ref().map(|now| now.seconds).unwrap_or_default()
}
