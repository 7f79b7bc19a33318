//! `squeue` (Slurm 25.05): the queue rows of the emulator with `-o` format strings
//! (`%[.][width]<letter>`, `.` right-justifies, values cut at the width without `+`), the default
//! and long formats, `SQUEUE_FORMAT`, and the usual filters.

use cwsandbox_client::emulator_v1 as pb;

use super::fmt::{self, Convert, TimeFormat};
use super::getopt::{self, Arg, Item, Opt};
use super::{Caller, Command, Conn, Env, Output, resolve_user};

/// The default format.
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// `-l`.
pub const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";

const SPEC: &[Opt] = &[
    Opt { key: "account", short: Some('A'), long: &["account"], arg: Arg::Required },
    Opt { key: "all", short: Some('a'), long: &["all"], arg: Arg::No },
    Opt { key: "array", short: Some('r'), long: &["array"], arg: Arg::No },
    Opt { key: "noheader", short: Some('h'), long: &["noheader"], arg: Arg::No },
    Opt { key: "help", short: None, long: &["help"], arg: Arg::No },
    Opt { key: "usage", short: None, long: &["usage"], arg: Arg::No },
    Opt { key: "jobs", short: Some('j'), long: &["jobs"], arg: Arg::Optional },
    Opt { key: "long", short: Some('l'), long: &["long"], arg: Arg::No },
    Opt { key: "me", short: None, long: &["me"], arg: Arg::No },
    Opt { key: "name", short: Some('n'), long: &["name"], arg: Arg::Required },
    Opt { key: "format", short: Some('o'), long: &["format"], arg: Arg::Required },
    Opt { key: "partition", short: Some('p'), long: &["partition"], arg: Arg::Required },
    Opt { key: "qos", short: Some('q'), long: &["qos"], arg: Arg::Required },
    Opt { key: "states", short: Some('t'), long: &["states"], arg: Arg::Required },
    Opt { key: "user", short: Some('u'), long: &["user"], arg: Arg::Required },
    Opt { key: "verbose", short: Some('v'), long: &["verbose"], arg: Arg::No },
    Opt { key: "version", short: Some('V'), long: &["version"], arg: Arg::No },
    Opt { key: "nodelist", short: Some('w'), long: &["nodelist"], arg: Arg::Required },
];

/// One field of a format string.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    letter: char,
    width: usize,
    right: bool,
    suffix: String,
    /// For a letter squeue does not know: the token as written, `%` included, which Slurm's
    /// `_print_com_invalid` prints in place of a value (and of a header).
    invalid: Option<String>,
}

/// A parsed `squeue` command line.
#[derive(Debug, Clone)]
pub struct Options {
    prefix: String,
    fields: Vec<Field>,
    header: bool,
    long: bool,
    jobs: Vec<u32>,
    users: Vec<String>,
    me: bool,
    states: Vec<String>,
    partitions: Vec<String>,
    accounts: Vec<String>,
    names: Vec<String>,
    qos: Vec<String>,
    nodes: Option<Vec<String>>,
    info: Option<String>,
    warnings: Vec<String>,
}

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

fn usage_error(message: String) -> Output {
    fail(format!("{message}\nTry \"squeue --help\" for more information"))
}

fn list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

const LETTERS: &str = "aCDeGghijklLmMNPqQrRStTuUvVZ";
/// Fields printed whole even past their width (`_print_secs` does not cut).
const UNCUT: &str = "lLM";

/// `_parse_format` of squeue's opts.c: text before the first `%` is a prefix; each `%` token is
/// `[.][width]<letter><suffix>`.
fn parse_format(format: &str, warnings: &mut Vec<String>) -> (String, Vec<Field>) {
    let (prefix, tokens) = super::fmt::format_tokens(format, false);
    let fields = tokens
        .into_iter()
        .map(|token| {
            let invalid = (!LETTERS.contains(token.letter)).then(|| {
                warnings.push(format!("squeue: error: Invalid job format specification: {}", token.letter));
                format!("%{}", token.raw)
            });
            Field { letter: token.letter, width: token.width, right: token.right, suffix: token.suffix, invalid }
        })
        .collect();
    (prefix, fields)
}

/// Parses a `squeue` command line; `env` gives `SQUEUE_FORMAT`.
pub fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
    let items = getopt::parse("squeue", args, SPEC).map_err(usage_error)?;
    let mut options = Options {
        prefix: String::new(),
        fields: Vec::new(),
        header: true,
        long: false,
        jobs: Vec::new(),
        users: Vec::new(),
        me: false,
        states: Vec::new(),
        partitions: Vec::new(),
        accounts: Vec::new(),
        names: Vec::new(),
        qos: Vec::new(),
        nodes: None,
        info: None,
        warnings: Vec::new(),
    };
    let mut format = None;
    let mut job_flag = false;
    let mut operands = Vec::new();
    let add_jobs = |options: &mut Options, text: &str| -> Result<(), Output> {
        for id in list(text) {
            match id.parse::<u32>() {
                Ok(id) if id > 0 => options.jobs.push(id),
                _ => return Err(fail(format!("squeue: error: Invalid job id: {id}"))),
            }
        }
        Ok(())
    };
    for item in items {
        match item {
            Item::Operand(operand) => operands.push(operand),
            Item::Opt(key, value) => {
                let value = value.unwrap_or_default();
                match key {
                    "account" => options.accounts.extend(list(&value)),
                    "noheader" => options.header = false,
                    "help" | "usage" => options.info = Some(
                        "Usage: squeue [-A account] [-j jobid] [-l] [-n name] [-o format] [-p partitions] [-t states] \
                             [-u user_name] [-w nodes] [-h] [--me]\n"
                            .to_owned(),
                    ),
                    "version" => options.info = Some("slurm 25.05.3\n".to_owned()),
                    "jobs" if value.is_empty() => job_flag = true,
                    "jobs" => add_jobs(&mut options, &value)?,
                    "long" => options.long = true,
                    "me" => options.me = true,
                    "name" => options.names.extend(list(&value)),
                    "format" => format = Some(value),
                    "partition" => options.partitions.extend(list(&value)),
                    "qos" => options.qos.extend(list(&value)),
                    "states" => {
                        for state in list(&value) {
                            let upper = state.to_ascii_uppercase();
                            if upper != "ALL"
                                && upper != "CG"
                                && upper != "COMPLETING"
                                && fmt::parse_state(&upper).is_none()
                            {
                                return Err(usage_error(format!(
                                    "squeue: error: Invalid job state specified: {state}"
                                )));
                            }
                            options.states.push(upper);
                        }
                    }
                    "user" => options.users.extend(list(&value)),
                    "nodelist" => options.nodes = Some(fmt::expand_hostlist(&value)),
                    // Accepted; the emulator has no arrays or hidden partitions.
                    _ => {}
                }
            }
        }
    }
    let mut operands = operands.into_iter();
    if job_flag && let Some(jobs) = operands.next() {
        add_jobs(&mut options, &jobs)?;
    }
    if let Some(extra) = operands.next() {
        return Err(usage_error(format!("squeue: error: Unrecognized option: {extra}")));
    }
    if options.long && format.is_some() {
        return Err(fail(
            "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."
                .to_owned(),
        ));
    }
    let format = format
        .or_else(|| env.get("SQUEUE_FORMAT").cloned())
        .unwrap_or_else(|| if options.long { LONG_FORMAT } else { DEFAULT_FORMAT }.to_owned());
    let (prefix, fields) = parse_format(&format, &mut options.warnings);
    options.prefix = prefix;
    options.fields = fields;
    Ok(options)
}

/// `_print_str`: right-justified (`%Ns`) or left (`%.Ns`), cut at the width with no `+`, padded.
fn print_str(out: &mut String, text: &str, width: usize, right: bool) {
    if width == 0 {
        out.push_str(text);
        return;
    }
    let shown: String = if right { format!("{text:>width$}") } else { text.to_owned() };
    let cut: String = shown.chars().take(width).collect();
    out.push_str(&format!("{cut:<width$}"));
}

/// `_print_secs`: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn squeue_secs(seconds: i64) -> String {
    if !(0..=365 * 24 * 3600).contains(&seconds) {
        return "INVALID".to_owned();
    }
    let (days, hours, minutes, secs) = (seconds / 86400, (seconds / 3600) % 24, (seconds / 60) % 60, seconds % 60);
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{secs:02}")
    } else if hours > 0 {
        format!("{hours}:{minutes:02}:{secs:02}")
    } else {
        format!("{minutes}:{secs:02}")
    }
}

fn header_of(letter: char) -> &'static str {
    match letter {
        'a' => "ACCOUNT",
        'C' => "CPUS",
        'D' => "NODES",
        'e' => "END_TIME",
        'g' => "GROUP",
        'G' => "GID",
        'h' => "OVER_SUBSCRIBE",
        'i' => "JOBID",
        'j' => "NAME",
        'k' => "COMMENT",
        'l' => "TIME_LIMIT",
        'L' => "TIME_LEFT",
        'm' => "MIN_MEMORY",
        'M' => "TIME",
        'N' => "NODELIST",
        'P' => "PARTITION",
        'q' => "QOS",
        'Q' => "PRIORITY",
        'r' => "REASON",
        'R' => "NODELIST(REASON)",
        'S' => "START_TIME",
        't' => "ST",
        'T' => "STATE",
        'u' => "USER",
        'U' => "UID",
        'v' => "RESERVATION",
        'V' => "SUBMIT_TIME",
        'Z' => "WORK_DIR",
        _ => "INVALID",
    }
}

/// Why an ended job ended, where squeue shows it in place of the nodes.
fn ended_reason(job: &pb::Job) -> Option<&'static str> {
    if job.completing {
        return None;
    }
    match fmt::state(job.state) {
        pb::JobState::Failed => Some("NonZeroExitCode"),
        pb::JobState::Timeout => Some("TimeLimit"),
        pb::JobState::NodeFail => Some("NodeDown"),
        _ => None,
    }
}

fn pending(job: &pb::Job) -> bool {
    fmt::state(job.state) == pb::JobState::Pending
}

fn state_long(job: &pb::Job) -> &'static str {
    if job.completing { "COMPLETING" } else { fmt::state_long(fmt::state(job.state)) }
}

fn state_compact(job: &pb::Job) -> &'static str {
    if job.completing { "CG" } else { fmt::state_compact(fmt::state(job.state)) }
}

fn over_subscribe(value: i32) -> &'static str {
    match pb::OverSubscribe::try_from(value) {
        Ok(pb::OverSubscribe::No) => "NO",
        Ok(pb::OverSubscribe::Yes) => "YES",
        Ok(pb::OverSubscribe::User) => "USER",
        _ => "OK",
    }
}

fn time_or_na(seconds: Option<i64>, now: i64) -> String {
    match seconds {
        Some(seconds) => fmt::time_str(Some(seconds), &TimeFormat::Standard, now, 32),
        None => "N/A".to_owned(),
    }
}

fn value_of(letter: char, job: &pb::Job, now: i64, time_format: &TimeFormat) -> String {
    let time = |seconds: Option<i64>| match seconds {
        Some(seconds) => fmt::time_str(Some(seconds), time_format, now, 32),
        None => "N/A".to_owned(),
    };
    match letter {
        'a' => job.account.clone(),
        'C' => (if pending(job) { job.req_cpus } else { job.alloc_cpus }).to_string(),
        'D' => job.alloc_nodes.max(1).to_string(),
        'e' => time(fmt::secs(job.end_time.as_ref())),
        'g' => job.group.clone(),
        'G' => job.gid.to_string(),
        'h' => over_subscribe(job.over_subscribe).to_owned(),
        'i' => job.job_id.to_string(),
        'j' => job.name.clone(),
        'k' => {
            if job.comment.is_empty() {
                "(null)".to_owned()
            } else {
                job.comment.clone()
            }
        }
        'l' => match job.time_limit_seconds {
            None => fmt::no_time_limit(job).to_owned(),
            Some(seconds) => squeue_secs(fmt::limit_minutes(seconds) * 60),
        },
        'L' => match job.time_limit_seconds {
            None if job.node_list.is_empty() => "NOT_SET".to_owned(),
            None => "UNLIMITED".to_owned(),
            Some(seconds) => squeue_secs((fmt::limit_minutes(seconds) * 60 - job.elapsed_seconds).max(0)),
        },
        'm' => fmt::convert_num_unit(job.req_mem_mb as f64, 2, Convert::Exact),
        'M' => squeue_secs(if pending(job) { 0 } else { job.elapsed_seconds }),
        'N' => job.node_list.clone(),
        'P' => job.partition.clone(),
        'q' => job.qos.clone(),
        'Q' => job.priority.to_string(),
        'r' => {
            if job.reason.is_empty() {
                "None".to_owned()
            } else {
                job.reason.clone()
            }
        }
        // Slurm gives the reason instead of the nodes for a pending job, and for one that
        // failed, timed out or lost its node.
        'R' => match (pending(job), ended_reason(job)) {
            (true, _) => format!("({})", if job.reason.is_empty() { "None" } else { &job.reason }),
            (false, Some(reason)) => format!("({reason})"),
            (false, None) => job.node_list.clone(),
        },
        'S' => time(fmt::secs(job.start_time.as_ref())),
        't' => state_compact(job).to_owned(),
        'T' => state_long(job).to_owned(),
        'u' => job.user.clone(),
        'U' => job.uid.to_string(),
        'v' => {
            if job.reservation.is_empty() {
                "(null)".to_owned()
            } else {
                job.reservation.clone()
            }
        }
        'V' => time_or_na(fmt::secs(job.submit_time.as_ref()), now),
        // The job's working directory; `scontrol show job` reads the same (`WorkDir=/`).
        'Z' => "/".to_owned(),
        _ => String::new(),
    }
}

/// Whether a queue row is a job that has ended (kept by the controller for MinJobAge), which
/// squeue lists only when asked (`-t all`, or its state).
fn ended(job: &pb::Job) -> bool {
    !job.completing
        && !matches!(
            fmt::state(job.state),
            pb::JobState::Pending | pb::JobState::Running | pb::JobState::Requeued | pb::JobState::Unspecified
        )
}

fn state_matches(job: &pb::Job, states: &[String]) -> bool {
    (states.is_empty() && !ended(job))
        || states.iter().any(|state| match state.as_str() {
            "ALL" => true,
            "CG" | "COMPLETING" => job.completing,
            other => {
                !job.completing
                    && fmt::parse_state(other).flatten().is_some_and(|wanted| wanted == fmt::state(job.state))
            }
        })
}

/// Renders the queue: `jobs` are queue rows, `now` the emulator's time, `caller_uid` for `--me`,
/// `known` the Slurm users (for `-u <name>`). Pure.
pub fn render(
    options: &Options,
    jobs: &[pb::Job],
    now: i64,
    caller_uid: u32,
    known: &[(String, u32)],
    env: &Env,
) -> Output {
    if let Some(info) = &options.info {
        return Output::ok(info.clone());
    }
    let mut uids = Vec::new();
    for user in &options.users {
        match resolve_user(user, known) {
            Some(uid) => uids.push(uid),
            None => return fail(format!("squeue: error: Invalid user: {user}")),
        }
    }
    if options.me {
        uids.push(caller_uid);
    }
    let (time_format, _) = TimeFormat::from_env(env.get("SLURM_TIME_FORMAT").map(String::as_str));
    let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|wanted| wanted == value);
    let mut selected: Vec<&pb::Job> = jobs
        .iter()
        .filter(|job| job.source != pb::JobSource::Accounting as i32)
        .filter(|job| options.jobs.is_empty() || options.jobs.contains(&job.job_id))
        .filter(|job| uids.is_empty() || uids.contains(&job.uid))
        .filter(|job| any(&options.partitions, &job.partition) && any(&options.accounts, &job.account))
        .filter(|job| any(&options.names, &job.name) && any(&options.qos, &job.qos))
        .filter(|job| state_matches(job, &options.states))
        .filter(|job| {
            options
                .nodes
                .as_ref()
                .is_none_or(|nodes| fmt::expand_hostlist(&job.node_list).iter().any(|node| nodes.contains(node)))
        })
        .collect();
    if options.jobs.len() == 1 && selected.is_empty() {
        return fail("slurm_load_jobs error: Invalid job id specified".to_owned());
    }
    // squeue's default sort "P,t,-p": partition, state, then priority (highest first).
    let state_rank = |job: &pb::Job| if job.completing { 10 } else { job.state };
    selected.sort_by(|a, b| {
        a.partition
            .cmp(&b.partition)
            .then(state_rank(a).cmp(&state_rank(b)))
            .then(b.priority.cmp(&a.priority))
            .then(a.job_id.cmp(&b.job_id))
    });
    let mut out = String::new();
    if options.long {
        out.push_str(&fmt::long_listing_date(now));
        out.push('\n');
    }
    let line = |out: &mut String, value: &dyn Fn(char) -> String, cut: bool| {
        out.push_str(&options.prefix);
        for field in &options.fields {
            if let Some(token) = &field.invalid {
                out.push_str(token);
                continue;
            }
            let text = value(field.letter);
            if !cut && UNCUT.contains(field.letter) && text.chars().count() > field.width {
                out.push_str(&text);
            } else {
                print_str(out, &text, field.width, field.right);
            }
            out.push_str(&field.suffix);
        }
        out.push('\n');
    };
    if options.header {
        line(&mut out, &|letter| header_of(letter).to_owned(), true);
    }
    for job in selected {
        line(&mut out, &|letter| value_of(letter, job, now, &time_format), false);
    }
    let mut output = Output::ok(out);
    output.stderr = options.warnings.iter().map(|w| format!("{w}\n")).collect();
    output
}

/// `squeue` against the emulator's queue.
pub struct Squeue;

/// What `squeue` renders: queue rows, the emulator's time, the caller and the Slurm users.
pub struct Answer {
    jobs: Vec<pb::Job>,
    now: i64,
    caller: Caller,
    known: Vec<(String, u32)>,
}

impl Command for Squeue {
    const NAME: &'static str = "squeue";
    type Options = Options;
    type Answer = Answer;

    fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
        parse(args, env)
    }

    fn info(options: &Options) -> Option<&str> {
        options.info.as_deref()
    }

    async fn call(_options: &Options, env: &Env, conn: &Conn) -> Result<Answer, Output> {
        let (caller, known) = super::caller(Self::NAME, env, conn).await?;
        let request = pb::ListJobsRequest { source: pb::JobSource::Queue as i32, ..Default::default() };
        let response = conn.admin().list_jobs(&request).await.map_err(|error| super::api_error(Self::NAME, &error))?;
        Ok(Answer { now: super::now_of(&response), jobs: response.jobs, caller, known })
    }

    fn render(options: &Options, answer: Answer, env: &Env) -> Output {
        render(options, &answer.jobs, answer.now, answer.caller.uid, &answer.known, env)
    }
}
