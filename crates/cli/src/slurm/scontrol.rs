//! `scontrol show job [<id>]` (Slurm 25.05 scontrol's `_sprint_job_info`): `Key=Value` tokens,
//! the first line `JobId=… JobName=…`, following lines indented three spaces, a closing
//! indented empty line and an empty line after each job; `-o` puts a job on one line, ending in
//! a space. `scontrol show partition|node` print the partition and node records the same way
//! (`slurm_sprint_partition_info`, `slurm_sprint_node_table`), `scontrol show config` slurm.conf
//! (`slurm_conf`). `scontrol update nodename=<nodes> state=resume|undrain|drain [reason=<why>]`
//! recovers or drains nodes (cluster_admin) as the caller's Slurm user, printing nothing when it
//! worked.

use cwsandbox_client::emulator_v1 as pb;

use super::fmt::{self, Convert, TimeFormat};
use super::getopt::{self, Arg, Item, Opt};
use super::{Command, Conn, Env, Output};

const SPEC: &[Opt] = &[
    Opt { key: "oneliner", short: Some('o'), long: &["oneliner"], arg: Arg::No },
    Opt { key: "details", short: Some('d'), long: &["details"], arg: Arg::No },
    Opt { key: "quiet", short: Some('Q'), long: &["quiet"], arg: Arg::No },
    Opt { key: "all", short: Some('a'), long: &["all"], arg: Arg::No },
    Opt { key: "help", short: Some('h'), long: &["help"], arg: Arg::No },
    Opt { key: "verbose", short: Some('v'), long: &["verbose"], arg: Arg::No },
    Opt { key: "version", short: Some('V'), long: &["version"], arg: Arg::No },
    Opt { key: "json", short: None, long: &["json"], arg: Arg::Optional },
    Opt { key: "yaml", short: None, long: &["yaml"], arg: Arg::Optional },
];

/// What was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `show job [id]`.
    Jobs(Option<u32>),
    /// `show partition [name]`.
    Partitions(Option<String>),
    /// `show node [name]`.
    Nodes(Option<String>),
    /// `show config`.
    Config,
    /// `update nodename=… state=…`.
    UpdateNodes {
        /// The nodes (a hostlist, expanded).
        names: Vec<String>,
        /// What to do with them.
        change: NodeChange,
    },
    /// Text to print as is (help, version).
    Info(String),
}

/// A node state change `scontrol update` can make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChange {
    /// `state=resume` or `state=undrain`: it takes jobs again.
    Resume,
    /// `state=drain reason=…`: it takes no new job.
    Drain {
        /// Why.
        reason: String,
    },
}

/// A parsed `scontrol` command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// `-o`.
    pub one_liner: bool,
    /// `-Q`: no error messages.
    pub quiet: bool,
    /// What to show.
    pub request: Request,
    /// `--json`: the whole command line, for the document's `meta.command` (`show job` only).
    pub json: Option<Vec<String>>,
}

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

/// Parses `scontrol [-o] show job|partition|node [<id>]`.
pub fn parse(args: &[String]) -> Result<Options, Output> {
    let items = getopt::parse("scontrol", args, SPEC)
        .map_err(|e| fail(format!("{e}\nTry \"scontrol --help\" for more information")))?;
    let mut one_liner = false;
    let mut quiet = false;
    let mut words = Vec::new();
    let mut info = None;
    let mut json = None;
    for item in items {
        match item {
            Item::Opt("yaml", _) => return Err(fail("scontrol: error: --yaml is not emulated (--json is, with the same data)".to_owned())),
            Item::Opt("json", spec) => {
                super::json::check_spec("scontrol", spec.as_deref().unwrap_or_default()).map_err(fail)?;
                json = Some(std::iter::once("scontrol".to_owned()).chain(args.iter().cloned()).collect());
            }
            Item::Opt("oneliner", _) => one_liner = true,
            Item::Opt("quiet", _) => quiet = true,
            Item::Opt("help", _) => info = Some("scontrol [<OPTION>] [<COMMAND>]\n  show job [<jobid>]\n  show partition [<name>]\n  show node [<name>]\n  show config\n  update NodeName=<nodes> State=resume|undrain|drain [Reason=<why>]\n".to_owned()),
            Item::Opt("version", _) => info = Some("slurm 25.05.3\n".to_owned()),
            Item::Opt(_, _) => {}
            Item::Operand(word) => words.push(word),
        }
    }
    if let Some(info) = info {
        return Ok(Options { one_liner, quiet, request: Request::Info(info), json: None });
    }
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let command = lower.first().map(String::as_str).unwrap_or("");
    if command.is_empty() {
        return Err(fail("scontrol: interactive mode is not emulated; give a command (show job <id>)".to_owned()));
    }
    if "update".starts_with(command) && command.len() >= 3 {
        if json.is_some() {
            return Err(fail("scontrol: error: --json applies to show commands".to_owned()));
        }
        return parse_update(&words[1..]).map(|request| Options { one_liner, quiet, request, json: None });
    }
    if !"show".starts_with(command) || command.len() < 3 {
        return Err(fail(format!("invalid keyword: {}", words[0])));
    }
    let entity = lower.get(1).map(String::as_str).unwrap_or("");
    let target = words.get(2).cloned();
    if words.len() > 3 {
        return Err(fail(format!("too many arguments for keyword:{}", words[0])));
    }
    // Slurm's `xstrncasecmp(tag, name, MAX(len, min))`, in its order: `c` is config, `p` too
    // short for partitions.
    let is = |full: &str, min: usize| entity.len() >= min && full.starts_with(entity);
    let request = if is("config", 1) {
        Request::Config
    } else if is("jobs", 1) || is("jobid", 1) {
        match target {
            None => Request::Jobs(None),
            Some(id) => match id.parse::<u32>() {
                Ok(id) if id > 0 => Request::Jobs(Some(id)),
                _ => return Err(fail(format!("Invalid job id specified: {id}"))),
            },
        }
    } else if is("partitions", 2) || is("partitionname", 2) {
        Request::Partitions(target)
    } else if is("nodes", 1) {
        Request::Nodes(target)
    } else if entity.is_empty() {
        return Err(fail("too few arguments for keyword:show".to_owned()));
    } else {
        // Slurm's message ends in a space.
        return Err(fail(format!("invalid entity:{} for keyword:show ", words[1])));
    };
    if json.is_some() && matches!(request, Request::Config) {
        return Err(fail(format!(
            "scontrol: error: --json of show {} is not emulated (show job, node and partition have it; the CLI README lists what --json covers)",
            words[1]
        )));
    }
    Ok(Options { one_liner, quiet, request, json })
}

fn or_null(text: &str) -> &str {
    if text.is_empty() { "(null)" } else { text }
}

fn time(seconds: Option<i64>, now: i64, format: &TimeFormat) -> String {
    fmt::time_str(seconds, format, now, 256)
}

/// TRES in slurmctld's id order (cpu, mem, node, billing, then GRES).
pub(crate) fn tres(cpus: u32, mem_mb: u64, job: &pb::Job) -> String {
    let mut text =
        format!("cpu={cpus},mem={},node=1,billing={cpus}", fmt::convert_num_unit(mem_mb as f64, 2, Convert::Exact));
    if job.req_gpus > 0 {
        text.push_str(&format!(",gres/gpu={}", job.req_gpus));
        if !job.gres_type.is_empty() {
            text.push_str(&format!(",gres/gpu:{}={}", job.gres_type, job.req_gpus));
        }
    }
    text
}

/// The working directory of every job: SUNK's placeholder script and the emulator's batch jobs
/// run in `/` (squeue `%Z` reads the same).
pub const WORK_DIR: &str = "/";

/// `slurm_get_job_stdout`/`stderr` of a batch job that named no file: `<WorkDir>/slurm-<id>.out`
/// (`//slurm-<id>.out` for `/`, as C's `"%s/slurm-%u.out"` writes it).
pub fn default_output(job: &pb::Job) -> String {
    format!("{WORK_DIR}/slurm-{}.out", job.job_id)
}

/// `EndTime`: when it ended; while running with a limit of its own, when the limit runs out;
/// while pending with an estimated start and a limit, that start plus the limit; else Unknown
/// (Slurm prints Unknown for an INFINITE limit whose end lies ahead).
pub(crate) fn end_time(job: &pb::Job, pending: bool) -> Option<i64> {
    if let Some(end) = fmt::secs(job.end_time.as_ref()) {
        return Some(end);
    }
    let limit = i64::from(fmt::limit_minutes(job.time_limit_seconds?) as u32) * 60;
    let start = if pending { fmt::secs(job.estimated_start_time.as_ref()) } else { fmt::secs(job.start_time.as_ref()) };
    start.map(|start| start + limit)
}

/// One job as `scontrol show job` prints it (25.05 scontrol's `_sprint_job_info`). The emulator's
/// jobs are batch jobs (`BatchFlag=1`) on one node that name no output files; the main
/// scheduler placed them (`Scheduler=Main`), last looking at them when they were submitted or
/// started. 25.05 prints `ReqTRES`/`AllocTRES` and `LicensesAlloc` (22.05: one `TRES=` line,
/// no `LicensesAlloc`, and a `Power=` line).
pub fn job_text(job: &pb::Job, now: i64, one_liner: bool, format: &TimeFormat) -> String {
    let state = fmt::state(job.state);
    let state_name = if job.completing { "COMPLETING" } else { fmt::state_long(state) };
    let pending = state == pb::JobState::Pending;
    let start = if pending { fmt::secs(job.estimated_start_time.as_ref()) } else { fmt::secs(job.start_time.as_ref()) };
    let submit = fmt::secs(job.submit_time.as_ref());
    let eligible = fmt::secs(job.eligible_time.as_ref()).or(submit);
    let last_sched_eval = fmt::secs(job.start_time.as_ref()).or(submit);
    let limit = match job.time_limit_seconds {
        None => fmt::CONTROLLER_NO_TIME_LIMIT.to_owned(),
        Some(seconds) => fmt::mins2time(fmt::limit_minutes(seconds)),
    };
    let cpus = if pending { job.req_cpus } else { job.alloc_cpus };
    let mut lines: Vec<String> = vec![
        format!("JobId={} JobName={}", job.job_id, job.name),
        format!("UserId={}({}) GroupId={}({}) MCS_label=N/A", job.user, job.uid, job.group, job.gid),
        format!("Priority={} Nice=0 Account={} QOS={}", job.priority, or_null(&job.account), or_null(&job.qos)),
        format!(
            "JobState={state_name} Reason={} Dependency=(null)",
            if job.reason.is_empty() { "None" } else { &job.reason }
        ),
        format!("Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={}:{}", job.exit_code, job.exit_signal),
        format!("RunTime={} TimeLimit={limit} TimeMin=N/A", fmt::secs2time(job.elapsed_seconds)),
        format!("SubmitTime={} EligibleTime={}", time(submit, now, format), time(eligible, now, format)),
        format!("AccrueTime={}", time(eligible, now, format)),
        format!(
            "StartTime={} EndTime={} Deadline=N/A",
            time(start, now, format),
            time(end_time(job, pending), now, format)
        ),
        format!(
            "SuspendTime=None SecsPreSuspend=0 LastSchedEval={} Scheduler=Main",
            time(last_sched_eval, now, format)
        ),
        // Jobs come in through slurmrestd and the emulator's sbatch, which have no session.
        format!("Partition={} AllocNode:Sid={}:0", job.partition, or_null(&job.alloc_node)),
        "ReqNodeList=(null) ExcNodeList=(null)".to_owned(),
        // A pending job has no nodes: Slurm's sorted node list of none is empty.
        format!("NodeList={}", job.node_list),
    ];
    if !job.node_list.is_empty() {
        lines.push(format!("BatchHost={}", job.node_list));
    }
    lines.push(format!("NumNodes=1 NumCPUs={cpus} NumTasks=1 CPUs/Task={} ReqB:S:C:T=0:0:*:*", job.req_cpus.max(1)));
    lines.push(format!("ReqTRES={}", tres(job.req_cpus, job.req_mem_mb, job)));
    lines.push(format!(
        "AllocTRES={}",
        if pending { "(null)".to_owned() } else { tres(job.alloc_cpus, job.req_mem_mb, job) }
    ));
    lines.push("Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*".to_owned());
    lines.push(format!(
        "MinCPUsNode={} MinMemoryNode={} MinTmpDiskNode=0",
        job.req_cpus.max(1),
        fmt::convert_num_unit(job.req_mem_mb as f64, 2, Convert::Exact)
    ));
    lines.push("Features=(null) DelayBoot=00:00:00".to_owned());
    if !job.reservation.is_empty() {
        lines.push(format!("Reservation={}", job.reservation));
    }
    lines.push(format!(
        "OverSubscribe={} Contiguous=0 Licenses=(null) LicensesAlloc=(null) Network=(null)",
        fmt::over_subscribe(job.over_subscribe)
    ));
    lines.push(format!("Command={}", if job.command.is_empty() { "(null)" } else { &job.command }));
    lines.push(format!("WorkDir={WORK_DIR}"));
    // Slurm writes these two with a space after the value.
    if !job.comment.is_empty() {
        lines.push(format!("Comment={} ", job.comment));
    }
    if !job.extra.is_empty() {
        lines.push(format!("Extra={} ", job.extra));
    }
    lines.push(format!("StdErr={}", default_output(job)));
    lines.push("StdIn=/dev/null".to_owned());
    lines.push(format!("StdOut={}", default_output(job)));
    record(&lines, one_liner, true)
}

/// Joins a record's lines as Slurm does: three-space indents (`-o`: spaces), then, for jobs, one
/// more separator (an indented empty line, or `-o`'s trailing space), and the record's end.
fn record(lines: &[String], one_liner: bool, closing_separator: bool) -> String {
    let separator = if one_liner { " " } else { "\n   " };
    let mut text = lines.join(separator);
    if closing_separator {
        text.push_str(separator);
    }
    text.push_str(if one_liner { "\n" } else { "\n\n" });
    text
}

/// `OverSubscribe=` of a partition: the configured value with Slurm's job count (`YES:4`,
/// `FORCE:4`, the default of 4 when slurm.conf gives none).
fn partition_over_subscribe(configured: &str) -> String {
    match configured.to_ascii_uppercase().as_str() {
        "" | "NO" => "NO".to_owned(),
        "EXCLUSIVE" => "EXCLUSIVE".to_owned(),
        "YES" | "FORCE" => format!("{}:4", configured.to_ascii_uppercase()),
        other => other.to_owned(),
    }
}

/// A node's configured TRES (`CfgTRES`, a partition's `TRES` without `node`): billing is the CPU
/// count, as without `TRESBillingWeights`.
pub(crate) fn cfg_tres(cpus: u32, mem_mb: u64, nodes: Option<usize>, gpus: u32) -> String {
    let mem = fmt::convert_num_unit(mem_mb as f64, 2, Convert::Exact);
    let mut text = match nodes {
        Some(count) => format!("cpu={cpus},mem={mem},node={count},billing={cpus}"),
        None => format!("cpu={cpus},mem={mem},billing={cpus}"),
    };
    if gpus > 0 {
        text.push_str(&format!(",gres/gpu={gpus}"));
    }
    text
}

/// One partition as `scontrol show partition` prints it (25.05 `slurm_sprint_partition_info`;
/// `ExclusiveTopo` and `MaxCPUsPerSocket` are new since 22.05). `members` are its nodes, for
/// its TRES.
fn partition_text(partition: &pb::Partition, members: &[&pb::SlurmNode], one_liner: bool) -> String {
    let max_time = match partition.max_time_seconds {
        None => "UNLIMITED".to_owned(),
        Some(seconds) => fmt::mins2time(fmt::limit_minutes(seconds)),
    };
    let preempt = match pb::PreemptMode::try_from(partition.preempt_mode) {
        Ok(pb::PreemptMode::Cancel) => "CANCEL",
        Ok(pb::PreemptMode::Requeue) => "REQUEUE",
        _ => "OFF",
    };
    let memory: u64 = members.iter().map(|node| node.real_memory_mb).sum();
    let gpus: u32 = members.iter().map(|node| node.gpus).sum();
    let lines = [
        format!("PartitionName={}", partition.name),
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL".to_owned(),
        format!("AllocNodes=ALL Default={} QoS=N/A", if partition.default { "YES" } else { "NO" }),
        "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO ExclusiveTopo=NO GraceTime=0 Hidden=NO".to_owned(),
        format!(
            "MaxNodes=UNLIMITED MaxTime={max_time} MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED MaxCPUsPerSocket=UNLIMITED"
        ),
        format!("Nodes={}", fmt::hostlist(&partition.nodes)),
        format!(
            "PriorityJobFactor=1 PriorityTier={} RootOnly=NO ReqResv=NO OverSubscribe={}",
            partition.priority_tier,
            partition_over_subscribe(&partition.over_subscribe)
        ),
        format!("OverTimeLimit=NONE PreemptMode={preempt}"),
        format!(
            "State=UP TotalCPUs={} TotalNodes={} SelectTypeParameters=NONE",
            partition.total_cpus,
            partition.nodes.len()
        ),
        "JobDefaults=(null)".to_owned(),
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED".to_owned(),
        format!("TRES={}", cfg_tres(partition.total_cpus, memory, Some(partition.nodes.len()), gpus)),
    ];
    record(&lines, one_liner, false)
}

/// `node_state_string_complete`: the base state, `+DRAIN` while drained.
pub(crate) fn node_state(node: &pb::SlurmNode) -> &'static str {
    let full = node.alloc_cpus >= node.cpus;
    match pb::SlurmNodeState::try_from(node.state) {
        Ok(pb::SlurmNodeState::Idle) => "IDLE",
        Ok(pb::SlurmNodeState::Mixed) => "MIXED",
        Ok(pb::SlurmNodeState::Allocated) => "ALLOCATED",
        Ok(pb::SlurmNodeState::Drained) => "IDLE+DRAIN",
        Ok(pb::SlurmNodeState::Draining) if full => "ALLOCATED+DRAIN",
        Ok(pb::SlurmNodeState::Draining) => "MIXED+DRAIN",
        _ => "UNKNOWN",
    }
}

/// A node's `AllocTRES`: Slurm's TRES string leaves out what counts zero (empty on an idle node).
pub(crate) fn node_alloc_tres(node: &pb::SlurmNode) -> String {
    [
        ("cpu", u64::from(node.alloc_cpus), node.alloc_cpus.to_string()),
        ("mem", node.alloc_memory_mb, fmt::convert_num_unit(node.alloc_memory_mb as f64, 2, Convert::Exact)),
        ("gres/gpu", u64::from(node.alloc_gpus), node.alloc_gpus.to_string()),
    ]
    .into_iter()
    .filter(|(_, count, _)| *count > 0)
    .map(|(name, _, text)| format!("{name}={text}"))
    .collect::<Vec<_>>()
    .join(",")
}

/// One node as `scontrol show node` prints it (25.05 `slurm_sprint_node_table`, trailing
/// spaces where Slurm writes them; `ResumeAfterTime` is new since 22.05, `CapWatts` and the
/// `ExtSensors` line are gone). The emulator models neither load nor power (`CPULoad=0.00`,
/// watts 0); `OS=` is the emulator host's kernel. `FreeMem=` is what a running slurmd reports
/// (Slurm prints N/A only for a node that reported nothing): a node here has no host of its
/// own, so its jobs are taken to use exactly the memory allocated to them, RealMemory − AllocMem.
fn node_text(node: &pb::SlurmNode, now: i64, one_liner: bool, format: &TimeFormat) -> String {
    let gres = fmt::node_gres(node).unwrap_or_else(|| "(null)".to_owned());
    let boot = time(fmt::secs(node.boot_time.as_ref()), now, format);
    let alloc_tres = node_alloc_tres(node);
    let mut lines = vec![
        format!("NodeName={} Arch=x86_64 CoresPerSocket={} ", node.name, node.cpus),
        format!("CPUAlloc={} CPUEfctv={} CPUTot={} CPULoad=0.00", node.alloc_cpus, node.cpus, node.cpus),
        "AvailableFeatures=(null)".to_owned(),
        "ActiveFeatures=(null)".to_owned(),
        format!("Gres={gres}"),
        format!("NodeAddr={} NodeHostName={} Version={}", node.name, node.name, super::slurm_conf::SLURM_VERSION),
    ];
    if !node.os.is_empty() {
        lines.push(format!("OS={} ", node.os));
    }
    lines.extend([
        format!(
            "RealMemory={} AllocMem={} FreeMem={} Sockets=1 Boards=1",
            node.real_memory_mb,
            node.alloc_memory_mb,
            node.real_memory_mb.saturating_sub(node.alloc_memory_mb)
        ),
        format!("State={} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A", node_state(node)),
        format!("Partitions={} ", node.partitions.join(",")),
        format!("BootTime={boot} SlurmdStartTime={boot}"),
        format!("LastBusyTime={} ResumeAfterTime=None", time(fmt::secs(node.last_busy_time.as_ref()), now, format)),
        format!("CfgTRES={}", cfg_tres(node.cpus, node.real_memory_mb, None, node.gpus)),
        format!("AllocTRES={alloc_tres}"),
        "CurrentWatts=0 AveWatts=0".to_owned(),
    ]);
    if !node.drain_reason.is_empty() {
        let mut reason = format!("Reason={}", node.drain_reason);
        if let Some(at) = fmt::secs(node.drain_time.as_ref()) {
            reason.push_str(&format!(" [{}@{}]", node.drain_user, time(Some(at), now, format)));
        }
        lines.push(reason);
    }
    record(&lines, one_liner, false)
}

/// `update NodeName=… State=… [Reason=…]`: keys in any case, each `Key=Value` one word (the
/// shell keeps a quoted reason in one).
fn parse_update(words: &[String]) -> Result<Request, Output> {
    let mut names = None;
    let mut state = None;
    let mut reason = None;
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            return Err(fail(format!("scontrol: error: Invalid input: {word}\nscontrol: error: Request aborted")));
        };
        match key.to_ascii_lowercase().as_str() {
            "nodename" | "nodenames" => names = Some(fmt::expand_hostlist(value)),
            "state" => state = Some(value.to_owned()),
            "reason" => reason = Some(value.to_owned()),
            _ => {
                return Err(fail(format!(
                    "scontrol: error: Update of {key} is not emulated (only NodeName=… State=resume|undrain|drain Reason=…)"
                )));
            }
        }
    }
    let Some(names) = names.filter(|names| !names.is_empty()) else {
        return Err(fail("No valid entity in update command\nInput line must include \"NodeName\"".to_owned()));
    };
    let Some(state) = state else {
        return Err(fail("scontrol: error: Update of a node needs State=resume|undrain|drain".to_owned()));
    };
    let change = match state.to_ascii_lowercase().as_str() {
        "resume" | "undrain" => NodeChange::Resume,
        "drain" => match reason.filter(|reason| !reason.trim().is_empty()) {
            Some(reason) => NodeChange::Drain { reason },
            None => {
                return Err(fail(
                    "You must specify a reason when DOWNING or DRAINING a node. Request denied".to_owned(),
                ));
            }
        },
        "down" | "idle" | "fail" | "future" | "power_down" | "power_up" | "reboot" | "no_resp" => {
            return Err(fail(format!(
                "scontrol: error: State={state} is not emulated (resume, undrain and drain are)"
            )));
        }
        _ => return Err(fail(format!("scontrol: error: Invalid node state specified: {state}"))),
    };
    Ok(Request::UpdateNodes { names, change })
}

/// Renders `scontrol show …` from what the emulator answered (queue rows, partitions, nodes,
/// slurm.conf) and its time. Pure.
pub fn render(options: &Options, answer: &Answer, env: &Env) -> Output {
    let now = answer.now;
    let (format, _) = TimeFormat::from_env(env.get("SLURM_TIME_FORMAT").map(String::as_str));
    let quiet_fail =
        |message: &str| if options.quiet { Output::fail(String::new(), 1) } else { fail(message.to_owned()) };
    match &options.request {
        Request::Info(text) => Output::ok(text.clone()),
        Request::Config => Output::ok(super::slurm_conf::render(&answer.config, &format, now)),
        Request::Jobs(id) => {
            let shown: Vec<&pb::Job> = answer
                .jobs
                .iter()
                .filter(|job| job.source != pb::JobSource::Accounting as i32)
                .filter(|job| id.is_none_or(|id| job.job_id == id))
                .collect();
            match (id, shown.is_empty()) {
                (Some(_), true) => quiet_fail("slurm_load_jobs error: Invalid job id specified"),
                _ if options.json.is_some() => Output::ok(jobs_json(options, answer, &shown)),
                (None, true) => Output::ok("No jobs in the system\n".to_owned()),
                _ => Output::ok(shown.iter().map(|job| job_text(job, now, options.one_liner, &format)).collect()),
            }
        }
        Request::Partitions(name) => {
            let shown: Vec<&pb::Partition> =
                answer.partitions.iter().filter(|p| name.as_ref().is_none_or(|name| &p.name == name)).collect();
            if let (Some(name), true) = (name, shown.is_empty()) {
                return quiet_fail(&format!("Partition {name} not found"));
            }
            if options.json.is_some() {
                let document =
                    super::json::partitions_document(&shown, &answer.nodes, answer.now, &about(options, answer));
                return Output::ok(document.pretty());
            }
            if shown.is_empty() {
                return Output::ok("No partitions in the system\n".to_owned());
            }
            let text = shown
                .iter()
                .map(|partition| {
                    let members: Vec<&pb::SlurmNode> =
                        answer.nodes.iter().filter(|node| partition.nodes.contains(&node.name)).collect();
                    partition_text(partition, &members, options.one_liner)
                })
                .collect();
            Output::ok(text)
        }
        // The update was made in `call`; success prints nothing, as Slurm's does.
        Request::UpdateNodes { .. } => Output::ok(String::new()),
        Request::Nodes(name) => {
            let wanted = name.as_ref().map(|name| fmt::expand_hostlist(name));
            let shown: Vec<&pb::SlurmNode> =
                answer.nodes.iter().filter(|n| wanted.as_ref().is_none_or(|wanted| wanted.contains(&n.name))).collect();
            if let (Some(name), true) = (name, shown.is_empty()) {
                return quiet_fail(&format!("Node {name} not found"));
            }
            if options.json.is_some() {
                return Output::ok(super::json::nodes_document(&shown, now, &about(options, answer)).pretty());
            }
            if shown.is_empty() {
                return Output::ok("No nodes in the system\n".to_owned());
            }
            Output::ok(shown.iter().map(|n| node_text(n, now, options.one_liner, &format)).collect())
        }
    }
}

/// `--json`'s `meta`: the command line, the caller and the cluster.
fn about<'a>(options: &'a Options, answer: &'a Answer) -> super::json::Meta<'a> {
    let command = options.json.as_deref().unwrap_or_default();
    let (user, uid) = answer.caller.as_ref().map_or(("root", 0), |caller| (caller.name.as_str(), caller.uid));
    let group = super::json::client_group(uid, &answer.jobs);
    super::json::Meta { command, user, group, cluster: &answer.config.cluster_name }
}

/// `scontrol --json show job`: the jobs as `squeue --json` prints them.
fn jobs_json(options: &Options, answer: &Answer, shown: &[&pb::Job]) -> String {
    super::json::jobs_document(shown, answer.now, &about(options, answer)).pretty()
}

/// `scontrol show …` against the emulator's queue, partitions and nodes.
pub struct Scontrol;

/// What `scontrol` renders: only what was asked is fetched, the rest stays empty.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Queue rows (`show job`).
    pub jobs: Vec<pb::Job>,
    /// Partitions (`show partition`).
    pub partitions: Vec<pb::Partition>,
    /// Nodes (`show node`, and a partition's TRES).
    pub nodes: Vec<pb::SlurmNode>,
    /// slurm.conf (`show config`).
    pub config: pb::SlurmConfig,
    /// The emulator's time.
    pub now: i64,
    /// Who asked (`--json`'s `meta.client`).
    pub caller: Option<super::Caller>,
}

impl Command for Scontrol {
    const NAME: &'static str = "scontrol";
    type Options = Options;
    type Answer = Answer;

    fn parse(args: &[String], _env: &Env) -> Result<Options, Output> {
        parse(args)
    }

    fn info(options: &Options) -> Option<&str> {
        match &options.request {
            Request::Info(text) => Some(text),
            _ => None,
        }
    }

    async fn call(options: &Options, env: &Env, conn: &Conn) -> Result<Answer, Output> {
        let api_error = |error| super::api_error(Self::NAME, &error);
        let admin = conn.admin();
        let mut answer = Answer::default();
        let clock_now =
            || async { admin.clock().await.map(|clock| clock.now.map(|now| now.seconds).unwrap_or_default()) };
        match &options.request {
            Request::Jobs(id) => {
                let request = pb::ListJobsRequest {
                    source: pb::JobSource::Queue as i32,
                    job_ids: id.iter().copied().collect(),
                    ..Default::default()
                };
                let response = admin.list_jobs(&request).await.map_err(api_error)?;
                answer.now = super::now_of(&response);
                answer.jobs = response.jobs;
            }
            Request::Partitions(_) => {
                answer.partitions = admin.list_partitions().await.map_err(api_error)?;
                answer.nodes =
                    admin.list_slurm_nodes(&pb::ListSlurmNodesRequest::default()).await.map_err(api_error)?;
                if options.json.is_some() {
                    answer.now = clock_now().await.map_err(api_error)?;
                }
            }
            Request::Nodes(_) => {
                answer.nodes =
                    admin.list_slurm_nodes(&pb::ListSlurmNodesRequest::default()).await.map_err(api_error)?;
                answer.now = clock_now().await.map_err(api_error)?;
            }
            Request::Config => {
                answer.config = admin.slurm_config().await.map_err(api_error)?;
                answer.now = clock_now().await.map_err(api_error)?;
            }
            Request::UpdateNodes { names, change } => {
                // The drain is recorded as the Slurm user scontrol runs as (`sinfo -R`'s USER).
                let uid = match change {
                    NodeChange::Drain { .. } => Some(super::caller(Self::NAME, env, conn).await?.0.uid),
                    NodeChange::Resume => None,
                };
                for name in names {
                    let done = match change {
                        NodeChange::Resume => admin.resume_node(name).await.map(|_| ()),
                        NodeChange::Drain { reason } => admin.drain_node(name, reason, uid).await.map(|_| ()),
                    };
                    if let Err(error) = done {
                        let message = match error.code() {
                            cwsandbox_client::Code::NotFound => {
                                "slurm_update error: Invalid node name specified".to_owned()
                            }
                            _ => format!("slurm_update error: {error}"),
                        };
                        return Err(if options.quiet { Output::fail(String::new(), 1) } else { fail(message) });
                    }
                }
            }
            Request::Info(_) => {}
        }
        if options.json.is_some() {
            answer.config = admin.slurm_config().await.map_err(api_error)?;
            answer.caller = Some(super::caller(Self::NAME, env, conn).await?.0);
        }
        Ok(answer)
    }

    fn render(options: &Options, answer: Answer, env: &Env) -> Output {
        render(options, &answer, env)
    }
}
