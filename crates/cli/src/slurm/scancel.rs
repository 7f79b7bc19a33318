//! `scancel` (Slurm 25.05): cancels jobs through the emulator's `CancelJob` as the caller's uid
//! (`CANCELLED by <uid>` in `sacct`), by id or by the filters `-u`, `-p`, `-A`, `-n`, `-t`,
//! `-w`; errors in Slurm's words (`scancel: error: Kill job error on job id N: …`).

use cwsandbox_client::{Code, Error, emulator_v1 as pb};

use super::fmt;
use super::getopt::{self, Arg, Item, Opt};
use super::{Caller, Command, Conn, Env, Output, resolve_user};

const SPEC: &[Opt] = &[
    Opt { key: "account", short: Some('A'), long: &["account"], arg: Arg::Required },
    Opt { key: "batch", short: Some('b'), long: &["batch"], arg: Arg::No },
    Opt { key: "full", short: Some('f'), long: &["full"], arg: Arg::No },
    Opt { key: "help", short: None, long: &["help"], arg: Arg::No },
    Opt { key: "usage", short: None, long: &["usage"], arg: Arg::No },
    Opt { key: "me", short: None, long: &["me"], arg: Arg::No },
    Opt { key: "name", short: Some('n'), long: &["name", "jobname"], arg: Arg::Required },
    Opt { key: "partition", short: Some('p'), long: &["partition"], arg: Arg::Required },
    Opt { key: "quiet", short: Some('Q'), long: &["quiet"], arg: Arg::No },
    Opt { key: "qos", short: Some('q'), long: &["qos"], arg: Arg::Required },
    Opt { key: "signal", short: Some('s'), long: &["signal"], arg: Arg::Required },
    Opt { key: "state", short: Some('t'), long: &["state"], arg: Arg::Required },
    Opt { key: "user", short: Some('u'), long: &["user"], arg: Arg::Required },
    Opt { key: "verbose", short: Some('v'), long: &["verbose"], arg: Arg::No },
    Opt { key: "version", short: Some('V'), long: &["version"], arg: Arg::No },
    Opt { key: "nodelist", short: Some('w'), long: &["nodelist"], arg: Arg::Required },
];

/// A parsed `scancel` command line.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Job ids given as operands.
    pub jobs: Vec<u32>,
    users: Vec<String>,
    me: bool,
    partitions: Vec<String>,
    accounts: Vec<String>,
    names: Vec<String>,
    qos: Vec<String>,
    states: Vec<String>,
    nodes: Option<Vec<String>>,
    quiet: bool,
    verbose: bool,
    /// The number of the signal `--signal` named (9 or 15). Any option beyond ids
    /// (`has_default_opt()` false) makes Slurm verify the ids against the controller's jobs
    /// before it signals any: an unknown or finished one is then an error.
    signal: Option<u8>,
    info: Option<String>,
}

impl Options {
    /// Whether the jobs come from filters rather than ids.
    fn filtered(&self) -> bool {
        !self.users.is_empty()
            || self.me
            || !self.partitions.is_empty()
            || !self.accounts.is_empty()
            || !self.names.is_empty()
            || !self.qos.is_empty()
            || !self.states.is_empty()
            || self.nodes.is_some()
    }
}

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

fn list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Parses a `scancel` command line.
pub fn parse(args: &[String]) -> Result<Options, Output> {
    let items = getopt::parse("scancel", args, SPEC)
        .map_err(|e| fail(format!("{e}\nTry \"scancel --help\" for more information")))?;
    let mut options = Options::default();
    for item in items {
        match item {
            Item::Operand(operand) => {
                for id in operand.split([',', ' ']).filter(|s| !s.is_empty()) {
                    match id.parse::<u32>() {
                        Ok(id) if id > 0 => options.jobs.push(id),
                        _ => return Err(fail(format!("scancel: error: Invalid job id {id}"))),
                    }
                }
            }
            Item::Opt(key, value) => {
                let value = value.unwrap_or_default();
                match key {
                    "account" => options.accounts.extend(list(&value)),
                    "help" | "usage" => {
                        options.info = Some(
                            "Usage: scancel [-A account] [--batch] [--me] [-n job_name] [-p partition] [-Q] [-q qos] \
                             [-t PENDING | RUNNING | SUSPENDED] [-u user_name] [-w hosts] [job_id[,job_id...]]\n"
                                .to_owned(),
                        )
                    }
                    "version" => options.info = Some("slurm 25.05.3\n".to_owned()),
                    "me" => options.me = true,
                    "name" => options.names.extend(list(&value)),
                    "partition" => options.partitions.extend(list(&value)),
                    "quiet" => options.quiet = true,
                    "qos" => options.qos.extend(list(&value)),
                    "signal" => {
                        let upper = value.to_ascii_uppercase();
                        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
                        // A cancel is SIGKILL after SIGTERM; other signals only notify the job's
                        // processes, which the emulator does not model.
                        options.signal = Some(match name {
                            "KILL" | "9" => 9,
                            "TERM" | "15" => 15,
                            _ => {
                                return Err(fail(format!(
                                    "scancel: error: --signal={value} is not emulated (only KILL and TERM cancel a job)"
                                )));
                            }
                        });
                    }
                    "state" => {
                        for state in list(&value) {
                            let upper = state.to_ascii_uppercase();
                            if !matches!(upper.as_str(), "PENDING" | "PD" | "RUNNING" | "R" | "SUSPENDED" | "S") {
                                return Err(fail(format!("scancel: error: Invalid job state specified: {state}")));
                            }
                            options.states.push(upper);
                        }
                    }
                    "user" => options.users.extend(list(&value)),
                    "verbose" => options.verbose = true,
                    "nodelist" => options.nodes = Some(fmt::expand_hostlist(&value)),
                    _ => {}
                }
            }
        }
    }
    if options.info.is_none() && options.jobs.is_empty() && !options.filtered() {
        return Err(fail("scancel: error: No job identification provided".to_owned()));
    }
    Ok(options)
}

/// The jobs the filters select among queue rows (and the given ids, if any). Pure.
pub fn select(
    options: &Options,
    jobs: &[pb::Job],
    caller: &Caller,
    known: &[(String, u32)],
) -> Result<Vec<u32>, Output> {
    let mut uids = Vec::new();
    for user in &options.users {
        match resolve_user(user, known) {
            Some(uid) => uids.push(uid),
            None => return Err(fail(format!("scancel: error: Invalid user name: {user}"))),
        }
    }
    if options.me {
        uids.push(caller.uid);
    }
    let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|wanted| wanted == value);
    Ok(jobs
        .iter()
        .filter(|job| job.source != pb::JobSource::Accounting as i32 && !job.completing)
        .filter(|job| options.jobs.is_empty() || options.jobs.contains(&job.job_id))
        .filter(|job| uids.is_empty() || uids.contains(&job.uid))
        .filter(|job| any(&options.partitions, &job.partition) && any(&options.accounts, &job.account))
        .filter(|job| any(&options.names, &job.name) && any(&options.qos, &job.qos))
        .filter(|job| {
            options.states.is_empty()
                || options.states.iter().any(|state| {
                    fmt::parse_state(state).flatten().is_some_and(|wanted| wanted == fmt::state(job.state))
                })
        })
        .filter(|job| {
            options
                .nodes
                .as_ref()
                .is_none_or(|nodes| fmt::expand_hostlist(&job.node_list).iter().any(|n| nodes.contains(n)))
        })
        .map(|job| job.job_id)
        .collect())
}

/// The message of a refused cancel (Slurm's `slurm_strerror` text).
pub fn kill_error(job_id: u32, code: Code) -> String {
    let reason = match code {
        Code::NotFound => "Invalid job id specified",
        Code::FailedPrecondition => "Job/step already completing or completed",
        Code::PermissionDenied => "Access/permission denied",
        _ => "Unspecified error",
    };
    format!("scancel: error: Kill job error on job id {job_id}: {reason}")
}

/// `scancel` against the emulator: cancels through `CancelJob`, one job at a time.
pub struct Scancel;

/// What became of one job `scancel` was to cancel.
pub enum Outcome {
    /// Cancelled.
    Cancelled,
    /// Not the caller's job, and the caller is not root: not sent.
    NotOwner,
    /// The emulator refused.
    Refused(Error),
}

impl Command for Scancel {
    const NAME: &'static str = "scancel";
    type Options = Options;
    /// Each target job and its outcome, in the order they were cancelled.
    type Answer = Vec<(u32, Outcome)>;

    fn parse(args: &[String], _env: &Env) -> Result<Options, Output> {
        parse(args)
    }

    fn info(options: &Options) -> Option<&str> {
        options.info.as_deref()
    }

    async fn call(options: &Options, env: &Env, conn: &Conn) -> Result<Vec<(u32, Outcome)>, Output> {
        let admin = conn.admin();
        let (caller, known) = super::caller(Self::NAME, env, conn).await?;
        let request = pb::ListJobsRequest { source: pb::JobSource::Queue as i32, ..Default::default() };
        let queue = admin.list_jobs(&request).await.map_err(|error| super::api_error(Self::NAME, &error))?.jobs;
        let targets = if options.filtered() { select(options, &queue, &caller, &known)? } else { options.jobs.clone() };
        let mut outcomes = Vec::with_capacity(targets.len());
        for job_id in targets {
            // Only root and the owner may cancel a job.
            if caller.uid != 0
                && let Some(job) = queue.iter().find(|job| job.job_id == job_id)
                && job.uid != caller.uid
            {
                outcomes.push((job_id, Outcome::NotOwner));
                continue;
            }
            let outcome = match admin.cancel_job(job_id, Some(caller.uid)).await {
                Ok(_) => Outcome::Cancelled,
                Err(error) => Outcome::Refused(error),
            };
            outcomes.push((job_id, outcome));
        }
        Ok(outcomes)
    }

    fn render(options: &Options, outcomes: Vec<(u32, Outcome)>, _env: &Env) -> Output {
        let mut output = Output::default();
        for (job_id, outcome) in outcomes {
            let gone = matches!(&outcome, Outcome::Refused(error) if matches!(error.code(), Code::NotFound | Code::FailedPrecondition));
            // `_verify_job_ids`: with `--signal`, an unknown or finished job is refused before
            // anything is signalled: `Invalid job id specified` (not with `-Q`), exit 1.
            if options.signal.is_some() && gone {
                output.code = 1;
                if !options.quiet {
                    output.stderr.push_str(&format!("{}\n", kill_error(job_id, Code::NotFound)));
                }
                continue;
            }
            // Slurm says which job it signals before it asks the controller.
            if options.verbose {
                output.stderr.push_str(&match options.signal {
                    Some(signal) => format!("scancel: Signal {signal} to job {job_id}\n"),
                    None => format!("scancel: Terminating job {job_id}\n"),
                });
            }
            match outcome {
                Outcome::Cancelled => {}
                Outcome::NotOwner => {
                    output.code = 1;
                    if !options.quiet {
                        output.stderr.push_str(&format!("{}\n", kill_error(job_id, Code::PermissionDenied)));
                    }
                }
                // A job that is unknown or already over is what the cancel wanted: Slurm
                // (`_cancel_job_id`) keeps quiet about it unless asked to be verbose, and
                // succeeds either way.
                Outcome::Refused(error) if gone => {
                    if options.verbose {
                        output.stderr.push_str(&format!("{}\n", kill_error(job_id, error.code())));
                    }
                }
                Outcome::Refused(error) => {
                    output.code = 1;
                    output.stderr.push_str(&format!("scancel: error: Kill job error on job id {job_id}: {error}\n"));
                }
            }
        }
        output
    }
}
