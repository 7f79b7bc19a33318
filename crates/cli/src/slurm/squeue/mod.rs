//! `squeue` (Slurm 25.05): the queue rows of the emulator with `-o` format strings
//! (`%[.][width]<letter>`, `.` right-justifies, values cut at the width without `+`), `-O` long
//! field names (`name[:[.]size[suffix]]`), both over Slurm's field table (`fields.rs`), the
//! default and long formats, `SQUEUE_FORMAT`/`SQUEUE_FORMAT2`, and the usual filters.

use cwsandbox_client::emulator_v1 as pb;

pub(crate) mod fields;

use super::fmt::{self, TimeFormat};
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
    Opt { key: "json", short: None, long: &["json"], arg: Arg::Optional },
    Opt { key: "yaml", short: None, long: &["yaml"], arg: Arg::Optional },
    Opt { key: "long", short: Some('l'), long: &["long"], arg: Arg::No },
    Opt { key: "me", short: None, long: &["me"], arg: Arg::No },
    Opt { key: "name", short: Some('n'), long: &["name"], arg: Arg::Required },
    Opt { key: "format", short: Some('o'), long: &["format"], arg: Arg::Required },
    Opt { key: "Format", short: Some('O'), long: &["Format"], arg: Arg::Required },
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
    /// The print function (`fields::FIELDS`); `None` for one squeue does not know.
    print: Option<&'static str>,
    width: usize,
    right: bool,
    suffix: String,
    /// For a letter squeue does not know: the token as written, `%` included, which Slurm's
    /// `_print_com_invalid` prints in place of a value (and of a header); for a long name it
    /// does not know, the suffix after its size.
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
    /// `--json`: the whole command line, for the document's `meta.command`.
    json: Option<Vec<String>>,
}

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

fn usage_error(message: String) -> Output {
    fail(format!("{message}\nTry \"squeue --help\" for more information"))
}

/// What 25.05's `_parse_state` lists after an unknown state (`_job_state_list`): the base
/// states, then the flags, lowercased (22.05 prints them in capitals).
const VALID_STATES: &str = "pending,running,suspended,completed,cancelled,failed,timeout,node_fail,preempted,\
                            boot_fail,deadline,out_of_memory,completing,configuring,resizing,resv_del_hold,\
                            requeued,requeue_fed,requeue_hold,revoked,signaling,special_exit,stage_out,stopped";

/// The state flags `job_state_num` knows (long and compact names) that no emulated job carries
/// (COMPLETING and REQUEUED it does carry): valid in `-t`, matching nothing.
const UNMODELLED_FLAGS: &[&str] = &[
    "CONFIGURING",
    "CF",
    "RESIZING",
    "RS",
    "RESV_DEL_HOLD",
    "RD",
    "REQUEUE_FED",
    "RF",
    "REQUEUE_HOLD",
    "RH",
    "REVOKED",
    "RV",
    "SIGNALING",
    "SI",
    "SPECIAL_EXIT",
    "SE",
    "STAGE_OUT",
    "SO",
    "STOPPED",
    "ST",
];

/// Whether `job_state_num` knows the (uppercased) name: a base state or a flag, long or compact.
fn valid_state(upper: &str) -> bool {
    upper == "CG" || upper == "COMPLETING" || fmt::parse_state(upper).is_some() || UNMODELLED_FLAGS.contains(&upper)
}

fn list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// `parse_format` of squeue's opts.c: text before the first `%` is a prefix; each `%` token is
/// `[.][width]<letter><suffix>`, the letter looked up in the field table.
fn parse_format(format: &str, warnings: &mut Vec<String>) -> (String, Vec<Field>) {
    let (prefix, tokens) = super::fmt::format_tokens(format, false);
    let fields = tokens
        .into_iter()
        .map(|token| {
            let print = fields::by_letter(token.letter);
            let invalid = print.is_none().then(|| {
                warnings.push(format!("squeue: error: Invalid job format specification: {}", token.letter));
                format!("%{}", token.raw)
            });
            Field { print, width: token.width, right: token.right, suffix: token.suffix, invalid }
        })
        .collect();
    (prefix, fields)
}

/// `parse_long_format` of squeue's opts.c (`-O`, `--Format`, `SQUEUE_FORMAT2`): comma-separated
/// `name[:[.]size[suffix]]`; without a size a field is 20 wide, left-justified.
fn parse_long_format(format: &str, warnings: &mut Vec<String>) -> Vec<Field> {
    format
        .split(',')
        .filter(|token| !token.is_empty())
        .map(|token| {
            let (name, width, right, suffix) = match token.split_once(':') {
                None => (token, 20, false, String::new()),
                Some((name, spec)) => {
                    let (right, spec) = match spec.strip_prefix('.') {
                        Some(rest) => (true, rest),
                        None => (false, spec),
                    };
                    let digits = spec.len() - spec.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    let width = spec[..digits].parse::<usize>().unwrap_or(0).min(fmt::MAX_WIDTH);
                    (name, width, right, spec[digits..].to_owned())
                }
            };
            let print = fields::by_name(name);
            let invalid = print.is_none().then(|| {
                warnings.push(format!("squeue: error: Invalid job format specification: {name}"));
                suffix.clone()
            });
            Field { print, width, right, suffix, invalid }
        })
        .collect()
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
        json: None,
    };
    let mut format = None;
    let mut format_long: Option<String> = None;
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
                        "Usage: squeue [-A account] [-j jobid] [-l] [-n name] [-o format] [-O format] [-p partitions] [-t states] \
                             [-u user_name] [-w nodes] [-h] [--me] [--json[=data_parser]]\n"
                            .to_owned(),
                    ),
                    "version" => options.info = Some("slurm 25.05.3\n".to_owned()),
                    "yaml" => return Err(fail("squeue: error: --yaml is not emulated (--json is, with the same data)".to_owned())),
                    "json" => {
                        super::json::check_spec("squeue", &value).map_err(fail)?;
                        options.json = Some(std::iter::once("squeue".to_owned()).chain(args.iter().cloned()).collect());
                    }
                    "jobs" if value.is_empty() => job_flag = true,
                    "jobs" => add_jobs(&mut options, &value)?,
                    "long" => options.long = true,
                    "me" => options.me = true,
                    "name" => options.names.extend(list(&value)),
                    "format" if format_long.is_some() => {
                        return Err(fail("squeue: error: -o (--format) is incompatible with -O (--Format)".to_owned()));
                    }
                    "format" => format = Some(value),
                    "Format" if format.is_some() => {
                        return Err(fail("squeue: error: -O (--Format) is incompatible with -o (--format)".to_owned()));
                    }
                    "Format" => format_long = Some(value),
                    "partition" => options.partitions.extend(list(&value)),
                    "qos" => options.qos.extend(list(&value)),
                    // `_build_state_list`: `all` only as the whole argument, else each name
                    // through `_parse_state`, which exits at the first unknown one.
                    "states" if value.eq_ignore_ascii_case("all") => options.states = vec!["ALL".to_owned()],
                    "states" => {
                        for state in list(&value) {
                            let upper = state.to_ascii_uppercase();
                            if !valid_state(&upper) {
                                // error("Valid job states include: %s\n", …): the message's own
                                // newline and error()'s make an empty line.
                                return Err(fail(format!(
                                    "squeue: error: Invalid job state specified: {state}\n\
                                     squeue: error: Valid job states include: {VALID_STATES}\n\n"
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
    // squeue's order: -o or -O as given, else SQUEUE_FORMAT, else SQUEUE_FORMAT2, else -l's or
    // the default format.
    let given = format.is_some() || format_long.is_some();
    let format = format.or_else(|| env.get("SQUEUE_FORMAT").cloned().filter(|_| !given));
    let format_long = format_long.or_else(|| env.get("SQUEUE_FORMAT2").cloned().filter(|_| !given && format.is_none()));
    match (format, format_long) {
        (_, Some(long)) => options.fields = parse_long_format(&long, &mut options.warnings),
        (format, None) => {
            let format = format.unwrap_or_else(|| if options.long { LONG_FORMAT } else { DEFAULT_FORMAT }.to_owned());
            let (prefix, fields) = parse_format(&format, &mut options.warnings);
            options.prefix = prefix;
            options.fields = fields;
        }
    }
    Ok(options)
}

/// `_print_str`: right-justified (`%Ns`) or left (`%.Ns`, which cuts at the width), padded;
/// a right-justified value is cut at the width too unless its print function passes
/// `cut_output = false`.
fn print_str(out: &mut String, text: &str, width: usize, right: bool, cut: bool) {
    if width == 0 {
        out.push_str(text);
        return;
    }
    let shown: String = if right { format!("{text:>width$}") } else { text.to_owned() };
    let shown: String = if right && !cut { shown } else { shown.chars().take(width).collect() };
    out.push_str(&format!("{shown:<width$}"));
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
    cluster: &str,
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
    // squeue's default sort "P,t,-p" (sort_job_list in squeue's sort.c): partition name, then
    // the compact state *as text* (`_sort_job_by_state_compact` compares
    // job_state_string_compact with xstrcmp, so CA < CD < CG < F < PD < R < TO), then priority
    // highest first. Slurm sorts key by key, last key first, with list_sort (glibc's qsort, a
    // merge sort at these sizes, so stable): ties keep the controller's order, its job list,
    // which job_mgr.c appends to at submission (id order).
    selected.sort_by(|a, b| {
        a.partition
            .cmp(&b.partition)
            .then(fields::state_compact(a).cmp(fields::state_compact(b)))
            .then(b.priority.cmp(&a.priority))
            .then(a.job_id.cmp(&b.job_id))
    });
    if let Some(command) = &options.json {
        // Slurm: "All other formatting arguments will be ignored"; the filters apply.
        let user = match known.iter().find(|(_, uid)| *uid == caller_uid) {
            Some((name, _)) => name.clone(),
            None if caller_uid == 0 => "root".to_owned(),
            None => caller_uid.to_string(),
        };
        let group = super::json::client_group(caller_uid, jobs);
        let about = super::json::Meta { command, user: &user, group, cluster };
        return Output::ok(super::json::jobs_document(&selected, now, &about).pretty());
    }
    let mut out = String::new();
    if options.long {
        out.push_str(&fmt::long_listing_date(now));
        out.push('\n');
    }
    let line = |out: &mut String, value: &dyn Fn(&str) -> (String, bool)| {
        out.push_str(&options.prefix);
        for field in &options.fields {
            let (Some(print), None) = (field.print, &field.invalid) else {
                out.push_str(field.invalid.as_deref().unwrap_or_default());
                continue;
            };
            let (text, cut) = value(print);
            print_str(out, &text, field.width, field.right, cut);
            out.push_str(&field.suffix);
        }
        out.push('\n');
    };
    if options.header {
        line(&mut out, &|print| (fields::header_of(print).to_owned(), true));
    }
    let context = fields::Context { now, time_format: &time_format, cluster };
    for job in selected {
        line(&mut out, &|print| fields::value_of(print, job, &context));
    }
    let mut output = Output::ok(out);
    output.stderr = options.warnings.iter().map(|w| format!("{w}\n")).collect();
    output
}

/// `squeue` against the emulator's queue.
pub struct Squeue;

/// What `squeue` renders: queue rows, the emulator's time, the caller, the Slurm users and,
/// when a `Cluster` field asks for it, the cluster's name.
pub struct Answer {
    jobs: Vec<pb::Job>,
    now: i64,
    caller: Caller,
    known: Vec<(String, u32)>,
    cluster: String,
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

    async fn call(options: &Options, env: &Env, conn: &Conn) -> Result<Answer, Output> {
        let api_error = |error| super::api_error(Self::NAME, &error);
        let (caller, known) = super::caller(Self::NAME, env, conn).await?;
        let request = pb::ListJobsRequest { source: pb::JobSource::Queue as i32, ..Default::default() };
        let response = conn.admin().list_jobs(&request).await.map_err(api_error)?;
        let cluster =
            if options.json.is_some() || options.fields.iter().any(|field| field.print == Some("cluster_name")) {
                conn.admin().slurm_config().await.map_err(api_error)?.cluster_name
            } else {
                String::new()
            };
        Ok(Answer { now: super::now_of(&response), jobs: response.jobs, caller, known, cluster })
    }

    fn render(options: &Options, answer: Answer, env: &Env) -> Output {
        render(options, &answer.jobs, answer.now, answer.caller.uid, &answer.known, &answer.cluster, env)
    }
}
