//! `sacct` (Slurm 25.05): accounting rows of the emulator rendered the way `src/sacct` prints
//! them — the field table and its prefix matching, `%N` widths, fixed-width and parsable modes,
//! job and step lines, the user and time-window defaults of `slurmdb_job_cond_def_start_end`,
//! and the accounting database's selection rules per state.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use cwsandbox_client::emulator_v1 as pb;

use super::fmt::{self, Convert, TimeFormat};
use super::getopt::{self, Arg, Item, Opt};
use super::{Caller, Conn, Env, Output, resolve_user};

/// How a field prints (Slurm's `print_fields_*` routine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `print_fields_str`: cut to width − 1 plus `+`.
    Str,
    /// `print_fields_uint*`: never cut; NO_VAL prints blank.
    Uint,
    /// `print_fields_date`: `slurm_make_time_str` into a width + 1 buffer.
    Date,
    /// `print_fields_time_from_secs`: `secs2time_str`.
    Time,
}

/// `fields[]` of `src/sacct/sacct.c`, in table order (prefixes match the first entry):
/// `(default width, name, kind)`; a negative width is left-justified.
const FIELDS: &[(i32, &str, Kind)] = &[
    (10, "Account", Kind::Str),
    (15, "AdminComment", Kind::Str),
    (10, "AllocCPUS", Kind::Uint),
    (10, "AllocNodes", Kind::Str),
    (10, "AllocTRES", Kind::Str),
    (7, "AssocID", Kind::Uint),
    (10, "AveCPU", Kind::Str),
    (10, "AveCPUFreq", Kind::Str),
    (14, "AveDiskRead", Kind::Str),
    (14, "AveDiskWrite", Kind::Str),
    (10, "AvePages", Kind::Str),
    (10, "AveRSS", Kind::Str),
    (10, "AveVMSize", Kind::Str),
    (16, "BlockID", Kind::Str),
    (10, "Cluster", Kind::Str),
    (14, "Comment", Kind::Str),
    (19, "Constraints", Kind::Str),
    (14, "ConsumedEnergy", Kind::Str),
    (17, "ConsumedEnergyRaw", Kind::Uint),
    (19, "Container", Kind::Str),
    (10, "CPUTime", Kind::Time),
    (10, "CPUTimeRAW", Kind::Uint),
    (-21, "DBIndex", Kind::Uint),
    (15, "DerivedExitCode", Kind::Str),
    (10, "Elapsed", Kind::Time),
    (10, "ElapsedRaw", Kind::Uint),
    (19, "Eligible", Kind::Date),
    (19, "End", Kind::Date),
    (8, "ExitCode", Kind::Str),
    (14, "Extra", Kind::Str),
    (8, "FailedNode", Kind::Str),
    (19, "Flags", Kind::Str),
    (6, "GID", Kind::Uint),
    (9, "Group", Kind::Str),
    (-12, "JobID", Kind::Str),
    (-12, "JobIDRaw", Kind::Str),
    (10, "JobName", Kind::Str),
    (9, "Layout", Kind::Str),
    (10, "Licenses", Kind::Str),
    (12, "MaxDiskRead", Kind::Str),
    (15, "MaxDiskReadNode", Kind::Str),
    (15, "MaxDiskReadTask", Kind::Uint),
    (12, "MaxDiskWrite", Kind::Str),
    (16, "MaxDiskWriteNode", Kind::Str),
    (16, "MaxDiskWriteTask", Kind::Uint),
    (8, "MaxPages", Kind::Str),
    (12, "MaxPagesNode", Kind::Str),
    (14, "MaxPagesTask", Kind::Uint),
    (10, "MaxRSS", Kind::Str),
    (10, "MaxRSSNode", Kind::Str),
    (10, "MaxRSSTask", Kind::Uint),
    (10, "MaxVMSize", Kind::Str),
    (14, "MaxVMSizeNode", Kind::Str),
    (14, "MaxVMSizeTask", Kind::Uint),
    (12, "McsLabel", Kind::Str),
    (10, "MinCPU", Kind::Str),
    (10, "MinCPUNode", Kind::Str),
    (10, "MinCPUTask", Kind::Uint),
    (10, "NCPUS", Kind::Uint),
    (8, "NNodes", Kind::Uint),
    (15, "NodeList", Kind::Str),
    (8, "NTasks", Kind::Uint),
    (10, "Partition", Kind::Str),
    (10, "Planned", Kind::Time),
    (10, "PlannedCPU", Kind::Time),
    (13, "PlannedCPURAW", Kind::Uint),
    (10, "Priority", Kind::Uint),
    (10, "QOS", Kind::Str),
    (6, "QOSRAW", Kind::Uint),
    (10, "QOSREQ", Kind::Str),
    (22, "Reason", Kind::Str),
    (10, "ReqCPUFreq", Kind::Str),
    (13, "ReqCPUFreqGov", Kind::Str),
    (13, "ReqCPUFreqMax", Kind::Str),
    (13, "ReqCPUFreqMin", Kind::Str),
    (8, "ReqCPUS", Kind::Uint),
    (10, "ReqMem", Kind::Str),
    (8, "ReqNodes", Kind::Str),
    (10, "ReqTRES", Kind::Str),
    (20, "Reservation", Kind::Str),
    (8, "ReservationId", Kind::Uint),
    (8, "Restarts", Kind::Uint),
    (11, "SegmentSize", Kind::Uint),
    (19, "Start", Kind::Date),
    (10, "State", Kind::Str),
    (20, "StdErr", Kind::Str),
    (20, "StdIn", Kind::Str),
    (20, "StdOut", Kind::Str),
    (19, "Submit", Kind::Date),
    (20, "SubmitLine", Kind::Str),
    (10, "Suspended", Kind::Time),
    (15, "SystemComment", Kind::Str),
    (10, "SystemCPU", Kind::Str),
    (10, "Timelimit", Kind::Str),
    (10, "TimelimitRaw", Kind::Str),
    (10, "TotalCPU", Kind::Str),
    (14, "TRESUsageInAve", Kind::Str),
    (14, "TRESUsageInMax", Kind::Str),
    (18, "TRESUsageInMaxNode", Kind::Str),
    (18, "TRESUsageInMaxTask", Kind::Str),
    (14, "TRESUsageInMin", Kind::Str),
    (18, "TRESUsageInMinNode", Kind::Str),
    (18, "TRESUsageInMinTask", Kind::Str),
    (14, "TRESUsageInTot", Kind::Str),
    (15, "TRESUsageOutAve", Kind::Str),
    (15, "TRESUsageOutMax", Kind::Str),
    (19, "TRESUsageOutMaxNode", Kind::Str),
    (19, "TRESUsageOutMaxTask", Kind::Str),
    (15, "TRESUsageOutMin", Kind::Str),
    (19, "TRESUsageOutMinNode", Kind::Str),
    (19, "TRESUsageOutMinTask", Kind::Str),
    (15, "TRESUsageOutTot", Kind::Str),
    (6, "UID", Kind::Uint),
    (9, "User", Kind::Str),
    (10, "UserCPU", Kind::Str),
    (10, "WCKey", Kind::Str),
    (10, "WCKeyID", Kind::Uint),
    (20, "WorkDir", Kind::Str),
];

/// `DEFAULT_FIELDS` of `sacct.h`.
pub const DEFAULT_FIELDS: &str = "jobid,jobname,partition,account,alloccpus,state,exitcode";
/// `BRIEF_FIELDS`.
const BRIEF_FIELDS: &str = "jobid,state,exitcode";
/// `LONG_FIELDS`.
const LONG_FIELDS: &str = "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,\
maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,mincputask,avecpu,ntasks,\
alloccpus,elapsed,state,exitcode,avecpufreq,reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,\
maxdiskread,maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,maxdiskwritetask,avediskwrite,\
reqtres,alloctres,tresusageinave,tresusageinmax,tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,\
tresusageinmint,tresusageintot,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutave,tresusageouttot";

const SPEC: &[Opt] = &[
    Opt { key: "allusers", short: Some('a'), long: &["allusers"], arg: Arg::No },
    Opt { key: "accounts", short: Some('A'), long: &["accounts"], arg: Arg::Required },
    Opt { key: "allocations", short: Some('X'), long: &["allocations"], arg: Arg::No },
    Opt { key: "brief", short: Some('b'), long: &["brief"], arg: Arg::No },
    Opt { key: "delimiter", short: None, long: &["delimiter"], arg: Arg::Required },
    Opt { key: "duplicates", short: Some('D'), long: &["duplicates"], arg: Arg::No },
    Opt { key: "helpformat", short: Some('e'), long: &["helpformat", "help-fields"], arg: Arg::No },
    Opt { key: "endtime", short: Some('E'), long: &["endtime"], arg: Arg::Required },
    Opt { key: "help", short: Some('h'), long: &["help"], arg: Arg::No },
    Opt { key: "usage", short: Some('U'), long: &["usage"], arg: Arg::No },
    Opt { key: "name", short: None, long: &["name"], arg: Arg::Required },
    Opt { key: "jobs", short: Some('j'), long: &["jobs"], arg: Arg::Required },
    Opt { key: "long", short: Some('l'), long: &["long"], arg: Arg::No },
    Opt { key: "local", short: None, long: &["local"], arg: Arg::No },
    Opt { key: "nodelist", short: Some('N'), long: &["nodelist"], arg: Arg::Required },
    Opt { key: "noconvert", short: None, long: &["noconvert"], arg: Arg::No },
    Opt { key: "units", short: None, long: &["units"], arg: Arg::Required },
    Opt { key: "noheader", short: Some('n'), long: &["noheader"], arg: Arg::No },
    Opt { key: "format", short: Some('o'), long: &["format", "fields"], arg: Arg::Required },
    Opt { key: "parsable", short: Some('p'), long: &["parsable"], arg: Arg::No },
    Opt { key: "parsable2", short: Some('P'), long: &["parsable2"], arg: Arg::No },
    Opt { key: "partition", short: Some('r'), long: &["partition"], arg: Arg::Required },
    Opt { key: "state", short: Some('s'), long: &["state"], arg: Arg::Required },
    Opt { key: "starttime", short: Some('S'), long: &["starttime"], arg: Arg::Required },
    Opt { key: "truncate", short: Some('T'), long: &["truncate"], arg: Arg::No },
    Opt { key: "user", short: Some('u'), long: &["user", "uid"], arg: Arg::Required },
    Opt { key: "verbose", short: Some('v'), long: &["verbose"], arg: Arg::No },
    Opt { key: "version", short: Some('V'), long: &["version"], arg: Arg::No },
    Opt { key: "allocations", short: Some('t'), long: &[], arg: Arg::No },
];

/// Parsable output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parsable {
    /// `-p`: a delimiter after every field.
    Ending,
    /// `-P`: between fields only.
    NoEnding,
}

/// Who the listing covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Users {
    /// Everyone.
    All,
    /// These uids.
    Uids(Vec<u32>),
}

/// A parsed `sacct` command line (before the time window is resolved against "now").
#[derive(Debug, Clone)]
pub struct Options {
    /// Field indexes into [`FIELDS`], in print order.
    fields: Vec<usize>,
    /// Widths per field of the table (a `%N` changes the field, as Slurm's table entry).
    widths: Vec<i32>,
    parsable: Option<Parsable>,
    delimiter: Option<String>,
    header: bool,
    no_steps: bool,
    /// `-j`: job id and optional step name.
    jobs: Vec<(u32, Option<String>)>,
    /// `-u` values as given (names or uids), `None` when absent.
    users: Option<Vec<String>>,
    all_users: bool,
    states: Vec<Option<pb::JobState>>,
    start: Option<String>,
    end: Option<String>,
    names: Vec<String>,
    partitions: Vec<String>,
    accounts: Vec<String>,
    nodes: Option<Vec<String>>,
    convert: Convert,
    time_format: TimeFormat,
    /// What to print instead of a listing (`--help`, `--helpformat`, `--version`).
    info: Option<String>,
    /// Warnings printed before the listing.
    warnings: Vec<String>,
}

impl Options {
    /// The job ids `-j` names (to narrow the request).
    pub fn job_ids(&self) -> Vec<u32> {
        self.jobs.iter().map(|(id, _)| *id).collect()
    }

    /// `--help`, `--helpformat` or `--version` output, if asked.
    pub fn info(&self) -> Option<&str> {
        self.info.as_deref()
    }
}

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

fn split_list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',').map(str::trim).filter(|item| !item.is_empty()).map(str::to_owned)
}

/// C `atoi`: leading sign and digits, anything else stops it.
fn atoi(text: &str) -> i32 {
    let text = text.trim_start();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let digits: String = digits.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<i64>().map(|value| (sign * value).clamp(i32::MIN as i64, i32::MAX as i64) as i32).unwrap_or(0)
}

fn help_fields() -> String {
    let mut out = String::new();
    for (index, (_, name, _)) in FIELDS.iter().enumerate() {
        if index & 3 != 0 {
            out.push(' ');
        } else if index != 0 {
            out.push('\n');
        }
        out.push_str(&format!("{name:<19}"));
    }
    out.push('\n');
    out
}

const HELP: &str = "Usage: sacct [OPTION...]
(cwsbx's sacct over the emulator's accounting; runs as $CWSBX_SLURM_USER, default root)
  -a, --allusers           all users' jobs
  -A, --accounts=list      only these accounts
  -b, --brief              jobid,state,exitcode
      --delimiter=chars    field delimiter with -p/-P
  -e, --helpformat         the fields -o accepts
  -E, --endtime=time       end of the window
  -j, --jobs=job[.step]    only these jobs (all users)
  -l, --long               the long field list
  -n, --noheader           no header
      --name=list          only these job names
  -N, --nodelist=hostlist  only jobs that ran on these nodes
      --noconvert          no unit scaling of memory
  -o, --format=list        fields (name[%[-]width],...)
  -p, --parsable           '|' after every field
  -P, --parsable2          '|' between fields
  -r, --partition=list     only these partitions
  -s, --state=list         only jobs in these states during the window
  -S, --starttime=time     start of the window
  -u, --user=list          only these users (names or uids; -1 = all)
      --units=[KMGTP]      memory in this unit
  -X, --allocations        no job steps
";

/// Parses a `sacct` command line. `env` gives `SACCT_FORMAT` and `SLURM_TIME_FORMAT`.
pub fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
    let items = getopt::parse("sacct", args, SPEC).map_err(fail)?;
    let (time_format, time_warning) = TimeFormat::from_env(env.get("SLURM_TIME_FORMAT").map(String::as_str));
    let mut options = Options {
        fields: Vec::new(),
        widths: FIELDS.iter().map(|(width, _, _)| *width).collect(),
        parsable: None,
        delimiter: None,
        header: true,
        no_steps: false,
        jobs: Vec::new(),
        users: None,
        all_users: false,
        states: Vec::new(),
        start: None,
        end: None,
        names: Vec::new(),
        partitions: Vec::new(),
        accounts: Vec::new(),
        nodes: None,
        convert: Convert::Exact,
        time_format,
        info: None,
        warnings: time_warning.map(|w| format!("sacct: error: {w}")).into_iter().collect(),
    };
    let mut field_list: Option<String> = None;
    let (mut brief, mut long) = (false, false);
    let mut operands = Vec::new();
    for item in items {
        let (key, value) = match item {
            Item::Operand(operand) => {
                operands.push(operand);
                continue;
            }
            Item::Opt(key, value) => (key, value.unwrap_or_default()),
        };
        match key {
            "allusers" => options.all_users = true,
            "accounts" => options.accounts.extend(split_list(&value)),
            "allocations" => options.no_steps = true,
            "brief" => brief = true,
            "delimiter" => options.delimiter = Some(value),
            "helpformat" => options.info = Some(help_fields()),
            "help" | "usage" => options.info = Some(HELP.to_owned()),
            "version" => options.info = Some("slurm 25.05.3\n".to_owned()),
            "endtime" => options.end = Some(value),
            "starttime" => options.start = Some(value),
            "name" => options.names.extend(split_list(&value)),
            "jobs" => {
                for entry in split_list(&value) {
                    let (id, step) = match entry.split_once('.') {
                        Some((id, step)) => (id, Some(step.to_owned())),
                        None => (entry.as_str(), None),
                    };
                    match id.parse::<u32>() {
                        Ok(id) if id > 0 => options.jobs.push((id, step)),
                        _ => return Err(fail(format!("sacct: fatal: Bad job/step specified: {entry}"))),
                    }
                }
            }
            "long" => long = true,
            "nodelist" => options.nodes = Some(fmt::expand_hostlist(&value)),
            "noconvert" => options.convert = Convert::No,
            "units" => {
                let unit = value.chars().next().map(|c| c.to_ascii_uppercase());
                match unit.and_then(|unit| fmt::UNITS.iter().position(|u| *u == unit)) {
                    Some(index) => options.convert = Convert::To(index + 1),
                    None => {
                        return Err(fail(format!(
                            "sacct: error: Invalid unit type '{}'. Possible options are 'KMGTP'\nsacct: fatal: Invalid unit type",
                            value.chars().next().unwrap_or(' ')
                        )));
                    }
                }
            }
            "noheader" => options.header = false,
            "format" => field_list.get_or_insert_with(String::new).push_str(&format!("{value},")),
            "parsable" => options.parsable = Some(Parsable::Ending),
            "parsable2" => options.parsable = Some(Parsable::NoEnding),
            "partition" => options.partitions.extend(split_list(&value)),
            "state" => {
                for name in split_list(&value) {
                    match fmt::parse_state(&name) {
                        Some(state) => options.states.push(state),
                        None => return Err(fail(format!("sacct: fatal: unrecognized job state value {name}"))),
                    }
                }
            }
            "user" => {
                if value == "-1" {
                    options.all_users = true;
                } else {
                    options.all_users = false;
                    options.users.get_or_insert_with(Vec::new).extend(split_list(&value));
                }
            }
            // Accepted for compatibility; they change nothing the emulator records.
            "duplicates" | "local" | "truncate" | "verbose" => {}
            _ => {}
        }
    }
    if long && field_list.is_some() {
        return Err(fail(
            "sacct: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."
                .to_owned(),
        ));
    }
    if options.info.is_some() {
        return Ok(options);
    }
    if brief {
        field_list.get_or_insert_with(String::new).push_str(&format!("{BRIEF_FIELDS},"));
    }
    if long {
        field_list.get_or_insert_with(String::new).push_str(&format!("{LONG_FIELDS},"));
    }
    let list = field_list.unwrap_or_else(|| {
        format!("{},", env.get("SACCT_FORMAT").cloned().unwrap_or_else(|| DEFAULT_FIELDS.to_owned()))
    });
    for token in list.split(',').map(str::trim_start).filter(|token| !token.is_empty()) {
        let (name, width) = match token.split_once('%') {
            // Held at ±MAX_WIDTH: `%2147483647` would pad every cell with two gigabytes.
            Some((name, width)) => (name, Some(atoi(width).clamp(-(fmt::MAX_WIDTH as i32), fmt::MAX_WIDTH as i32))),
            None => (token, None),
        };
        let prefix_of = |full: &str| full.len() >= name.len() && full[..name.len()].eq_ignore_ascii_case(name);
        if prefix_of("ALL") {
            for index in 0..FIELDS.len() {
                if let Some(width) = width {
                    options.widths[index] = width;
                }
                options.fields.push(index);
            }
            continue;
        }
        match FIELDS.iter().position(|(_, full, _)| prefix_of(full)) {
            Some(index) => {
                if let Some(width) = width {
                    options.widths[index] = width;
                }
                options.fields.push(index);
            }
            None if name.eq_ignore_ascii_case("AllocGRES") => {
                return Err(fail("sacct: fatal: AllocGRES is deprecated, please use AllocTRES".to_owned()));
            }
            None if name.eq_ignore_ascii_case("ReqGRES") => {
                return Err(fail("sacct: fatal: ReqGRES is deprecated, please use ReqTRES".to_owned()));
            }
            None => return Err(fail(format!("sacct: error: Invalid field requested: \"{name}\""))),
        }
    }
    if !operands.is_empty() {
        let mut message = "sacct: error: Unknown arguments:".to_owned();
        for operand in operands {
            message.push_str(&format!("\nsacct: error:  {operand}"));
        }
        return Err(fail(message));
    }
    Ok(options)
}

// ------------------------------------------------------------------------------------------------
// Times (`parse_time` of src/common/parse_time.c)
// ------------------------------------------------------------------------------------------------

fn at(date: NaiveDate, time: NaiveTime) -> i64 {
    NaiveDateTime::new(date, time).and_utc().timestamp()
}

fn parse_clock(text: &str) -> Option<NaiveTime> {
    let upper = text.to_ascii_uppercase();
    let (body, meridiem) = if let Some(body) = upper.strip_suffix("AM") {
        (body.to_owned(), Some(false))
    } else if let Some(body) = upper.strip_suffix("PM") {
        (body.to_owned(), Some(true))
    } else {
        (upper, None)
    };
    let parts: Vec<&str> = body.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let mut hour: u32 = parts[0].parse().ok()?;
    let minute: u32 = parts[1].parse().ok()?;
    let second: u32 = parts.get(2).map_or(Some(0), |s| s.parse().ok())?;
    match meridiem {
        Some(pm) => {
            if hour == 0 || hour > 12 {
                return None;
            }
            hour = hour % 12 + if pm { 12 } else { 0 };
        }
        None if hour > 23 => return None,
        None => {}
    }
    NaiveTime::from_hms_opt(hour, minute, second)
}

fn year_of(text: &str, today: NaiveDate) -> Option<i32> {
    match text.len() {
        2 => text.parse::<i32>().ok().map(|y| 2000 + y),
        4 => text.parse().ok(),
        _ => None,
    }
    .or(if text.is_empty() { Some(today.year()) } else { None })
}

/// Slurm's time forms against `now` (UTC): `HH:MM[:SS][AM|PM]`, `MMDD[YY][-HH:MM[:SS]]`,
/// `MM.DD[.YY][-…]`, `MM/DD[/YY][-…]`, `YYYY-MM-DD[THH:MM[:SS]]`, `today`, `midnight`, `noon`,
/// `elevenses`, `fika`, `teatime`, `tomorrow`, `now[{+|-}count[seconds|minutes|hours|days|weeks]]`.
pub fn parse_time(text: &str, now: i64) -> Option<i64> {
    let now_dt: DateTime<Utc> = DateTime::from_timestamp(now, 0)?;
    let today = now_dt.date_naive();
    let lower = text.trim().to_ascii_lowercase();
    let named = |hour: u32| Some(at(today, NaiveTime::from_hms_opt(hour, 0, 0)?));
    match lower.as_str() {
        "today" | "midnight" => return named(0),
        "noon" => return named(12),
        "elevenses" => return named(11),
        "fika" => return named(15),
        "teatime" => return named(16),
        "tomorrow" => return Some(at(today.succ_opt()?, NaiveTime::MIN)),
        _ => {}
    }
    if let Some(rest) = lower.strip_prefix("now") {
        if rest.is_empty() {
            return Some(now);
        }
        let (sign, rest) = match rest.chars().next()? {
            '+' => (1, &rest[1..]),
            '-' => (-1, &rest[1..]),
            _ => return None,
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let count: i64 = digits.parse().ok()?;
        let unit = &rest[digits.len()..];
        let scale = match unit {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 604_800,
            _ => return None,
        };
        // A count past the calendar is not a time: checked, not overflowed (a panic in debug builds).
        let seconds = count.checked_mul(scale).and_then(|delta| now.checked_add(sign * delta))?;
        return DateTime::from_timestamp(seconds, 0).map(|_| seconds);
    }
    if let Some(time) = parse_clock(&lower) {
        return Some(at(today, time));
    }
    // YYYY-MM-DD[THH:MM[:SS]]
    if lower.len() >= 10 && lower.as_bytes().get(4) == Some(&b'-') {
        let (date, time) = match lower.split_once('t') {
            Some((date, time)) => (date, Some(time)),
            None => (lower.as_str(), None),
        };
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
        let time = match time {
            Some(time) => parse_clock(time)?,
            None => NaiveTime::MIN,
        };
        return Some(at(date, time));
    }
    // MMDD[YY], MM/DD[/YY], MM.DD[.YY], each with an optional -HH:MM[:SS].
    let (date, time) = match lower.split_once('-') {
        Some((date, time)) => (date, Some(time)),
        None => (lower.as_str(), None),
    };
    let (month, day, year) = if let Some(sep) = ['/', '.'].into_iter().find(|sep| date.contains(*sep)) {
        let parts: Vec<&str> = date.split(sep).collect();
        match parts.as_slice() {
            [m, d] => (*m, *d, ""),
            [m, d, y] => (*m, *d, *y),
            _ => return None,
        }
    } else if date.chars().all(|c| c.is_ascii_digit()) && (date.len() == 4 || date.len() == 6) {
        (&date[0..2], &date[2..4], &date[4..])
    } else {
        return None;
    };
    let date = NaiveDate::from_ymd_opt(year_of(year, today)?, month.parse().ok()?, day.parse().ok()?)?;
    let time = match time {
        Some(time) => parse_clock(time)?,
        None => NaiveTime::MIN,
    };
    Some(at(date, time))
}

/// The window of `slurmdb_job_cond_def_start_end`: `[start, end)` in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start; 0 is the epoch ("no lower bound").
    pub start: i64,
    /// End (exclusive).
    pub end: i64,
}

fn time_arg(text: &str, now: i64) -> Result<i64, Output> {
    parse_time(text, now).ok_or_else(|| fail(format!("sacct: error: Invalid time specification (pos=0): {text}")))
}

/// Resolves `-S`/`-E` and their defaults against the emulator's `now`.
pub fn window(options: &Options, now: i64) -> Result<Window, Output> {
    let mut start = match &options.start {
        Some(text) => time_arg(text, now)?,
        None => 0,
    };
    let mut end = match &options.end {
        Some(text) => time_arg(text, now)?,
        None => 0,
    };
    let jobs = !options.jobs.is_empty();
    if !options.states.is_empty() {
        if start == 0 && !jobs {
            start = now;
        }
        if start != 0 && end == 0 {
            end = start;
        }
    } else if !jobs && start == 0 {
        start = now - now.rem_euclid(86400);
    }
    if end == 0 {
        end = now;
    }
    // The query is [start, end): an end equal to the start or to now includes that second.
    if end == start || end == now {
        end += 1;
    }
    if start > end {
        let show = |t: i64| fmt::time_str(Some(t), &TimeFormat::Standard, now, 32);
        return Err(fail(format!(
            "sacct: error: Start time ({}) requested is after end time ({}).",
            show(start),
            show(end)
        )));
    }
    Ok(Window { start, end })
}

// ------------------------------------------------------------------------------------------------
// Selection
// ------------------------------------------------------------------------------------------------

fn between(value: i64, low: i64, high: i64) -> bool {
    low <= value && value <= high
}

/// `_state_time_string` of as_mysql_jobacct_process.c: whether a job counts as being in `state`
/// during the window. PENDING and RUNNING select by the times alone (a job that ran during the
/// window is listed with its present state); the final states by their end time.
fn state_in_window(job: &pb::Job, state: pb::JobState, window: Window) -> bool {
    let eligible = fmt::secs(job.eligible_time.as_ref()).unwrap_or(0);
    let started = fmt::secs(job.start_time.as_ref()).unwrap_or(0);
    let ended = fmt::secs(job.end_time.as_ref()).unwrap_or(0);
    let (start, end) = (window.start, window.end);
    if start == 0 && end == 0 {
        return fmt::state(job.state) == state;
    }
    match state {
        pb::JobState::Pending => {
            eligible != 0
                && if start != 0 {
                    between(start, eligible, started)
                        || between(eligible, start, end)
                        || (started == 0 && between(start, eligible, ended))
                } else {
                    eligible < end
                }
        }
        pb::JobState::Running => {
            started != 0
                && if start != 0 {
                    (ended == 0 && fmt::state(job.state) == pb::JobState::Running)
                        || between(start, started, ended)
                        || between(started, start, end)
                } else {
                    started < end
                }
        }
        _ => {
            fmt::state(job.state) == state
                && ended != 0
                && if start != 0 { between(ended, start, end) } else { ended <= end }
        }
    }
}

/// Whether the caller's query selects `job`: users, ids, names, partitions, accounts, nodes,
/// and the window (by state when `-s` is given, else "eligible before the end and not ended
/// before the start").
fn selects(options: &Options, users: &Users, window: Window, job: &pb::Job) -> bool {
    if let Users::Uids(uids) = users
        && !uids.contains(&job.uid)
    {
        return false;
    }
    let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|wanted| wanted == value);
    if !options.jobs.is_empty() && !options.jobs.iter().any(|(id, _)| *id == job.job_id) {
        return false;
    }
    if !any(&options.names, &job.name)
        || !any(&options.partitions, &job.partition)
        || !any(&options.accounts, &job.account)
    {
        return false;
    }
    if let Some(nodes) = &options.nodes {
        let ran_on = fmt::expand_hostlist(&job.node_list);
        if !ran_on.iter().any(|node| nodes.contains(node)) {
            return false;
        }
    }
    if !options.states.is_empty() {
        return options.states.iter().flatten().any(|state| state_in_window(job, *state, window));
    }
    let eligible = fmt::secs(job.eligible_time.as_ref()).unwrap_or(0);
    let ended = fmt::secs(job.end_time.as_ref()).unwrap_or(0);
    eligible < window.end && (ended == 0 || ended >= window.start)
}

/// Who `sacct` lists: `-a`, `-u -1`, `-j`/`-N` without `-u`, and root see everyone; otherwise
/// the `-u` users, else the caller alone. Unknown user names are Slurm's error.
fn users(options: &Options, caller: &Caller, known: &[(String, u32)]) -> Result<Users, Output> {
    let mut all = options.all_users;
    if options.users.is_none() && (!options.jobs.is_empty() || options.nodes.is_some()) {
        all = true;
    }
    if options.users.is_none() && caller.uid == 0 {
        all = true;
    }
    if all {
        return Ok(Users::All);
    }
    match &options.users {
        Some(list) => {
            let mut uids = Vec::new();
            for user in list {
                match resolve_user(user, known) {
                    Some(uid) => uids.push(uid),
                    None => return Err(fail(format!("sacct: error: Invalid user id: {user}"))),
                }
            }
            Ok(Users::Uids(uids))
        }
        None => Ok(Users::Uids(vec![caller.uid])),
    }
}

// ------------------------------------------------------------------------------------------------
// Values
// ------------------------------------------------------------------------------------------------

/// One line: a job or one of its steps.
#[derive(Clone, Copy)]
enum Row<'a> {
    Job(&'a pb::Job),
    Step(&'a pb::Job, &'a pb::JobStep),
}

/// A value before formatting; `None` is Slurm's NULL or NO_VAL (blank).
enum Value {
    Str(Option<String>),
    Uint(Option<u64>),
    Date(Option<i64>),
    Time(Option<i64>),
}

fn exit_code(code: i32, signal: i32) -> String {
    let code = if code >= 128 { code - 128 } else { code };
    format!("{code}:{signal}")
}

fn tres(entries: Vec<(String, String)>) -> Option<String> {
    let mut entries = entries;
    entries.sort();
    (!entries.is_empty()).then(|| entries.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
}

fn gres(job: &pb::Job) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    if job.req_gpus > 0 {
        entries.push(("gres/gpu".to_owned(), job.req_gpus.to_string()));
        if !job.gres_type.is_empty() {
            entries.push((format!("gres/gpu:{}", job.gres_type), job.req_gpus.to_string()));
        }
    }
    entries
}

fn value(name: &str, row: Row<'_>, options: &Options, now: i64) -> Value {
    use Value::{Date, Str, Time, Uint};
    let job = match row {
        Row::Job(job) | Row::Step(job, _) => job,
    };
    let step = match row {
        Row::Job(_) => None,
        Row::Step(_, step) => Some(step),
    };
    let text = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
    let mem = |mb: u64| fmt::convert_num_unit(mb as f64, 2, options.convert);
    let job_start = fmt::secs(job.start_time.as_ref());
    let job_end = fmt::secs(job.end_time.as_ref());
    match (name, step) {
        ("Account", _) => Str(text(&job.account)),
        ("AllocCPUS" | "NCPUS", None) => Uint(Some(u64::from(job.alloc_cpus))),
        ("AllocCPUS" | "NCPUS", Some(step)) => Uint(Some(u64::from(step.alloc_cpus))),
        ("AllocNodes", None) => Str(Some(job.alloc_nodes.to_string())),
        ("AllocNodes", Some(_)) => Str(Some("1".to_owned())),
        ("AllocTRES", None) => Str(if job.alloc_cpus > 0 {
            let mut entries = vec![
                ("billing".to_owned(), job.alloc_cpus.to_string()),
                ("cpu".to_owned(), job.alloc_cpus.to_string()),
                ("mem".to_owned(), mem(job.req_mem_mb)),
                ("node".to_owned(), job.alloc_nodes.max(1).to_string()),
            ];
            entries.extend(gres(job));
            tres(entries)
        } else {
            None
        }),
        ("AllocTRES", Some(step)) => Str(tres(vec![
            ("cpu".to_owned(), step.alloc_cpus.to_string()),
            ("mem".to_owned(), mem(job.req_mem_mb)),
            ("node".to_owned(), "1".to_owned()),
        ])),
        ("ConsumedEnergy", _) => Str(Some("0".to_owned())),
        ("ConsumedEnergyRaw", None) => Uint(Some(0)),
        ("CPUTime", None) => Time(Some(job.elapsed_seconds * i64::from(job.alloc_cpus))),
        ("CPUTime", Some(step)) => Time(Some(step.elapsed_seconds * i64::from(step.alloc_cpus))),
        ("CPUTimeRAW", None) => Uint(Some((job.elapsed_seconds * i64::from(job.alloc_cpus)).max(0) as u64)),
        ("CPUTimeRAW", Some(step)) => Uint(Some((step.elapsed_seconds * i64::from(step.alloc_cpus)).max(0) as u64)),
        ("Comment", None) => Str(text(&job.comment)),
        ("DerivedExitCode", None) => Str(Some("0:0".to_owned())),
        ("Elapsed", None) => Time(Some(job.elapsed_seconds)),
        ("Elapsed", Some(step)) => Time(Some(step.elapsed_seconds)),
        ("ElapsedRaw", None) => Uint(Some(job.elapsed_seconds.max(0) as u64)),
        ("ElapsedRaw", Some(step)) => Uint(Some(step.elapsed_seconds.max(0) as u64)),
        ("Eligible", None) => Date(fmt::secs(job.eligible_time.as_ref())),
        ("Eligible" | "Submit" | "Start", Some(step)) => Date(fmt::secs(step.start_time.as_ref())),
        ("End", None) => Date(job_end),
        ("End", Some(step)) => Date(fmt::secs(step.end_time.as_ref()).or(job_end)),
        ("ExitCode", None) => Str(Some(exit_code(job.exit_code, job.exit_signal))),
        ("ExitCode", Some(step)) => Str(Some(exit_code(step.exit_code, step.exit_signal))),
        ("Extra", None) => Str(text(&job.extra)),
        ("GID", None) => Uint(Some(u64::from(job.gid))),
        ("Group", None) => Str(text(&job.group)),
        ("JobID" | "JobIDRaw", None) => Str(Some(job.job_id.to_string())),
        ("JobID" | "JobIDRaw", Some(step)) => Str(Some(format!("{}.{}", job.job_id, step.name))),
        ("JobName", None) => Str(text(&job.name)),
        ("JobName", Some(step)) => Str(text(&step.name)),
        ("NNodes", None) => Uint(Some(u64::from(job.alloc_nodes.max(1)))),
        ("NNodes", Some(_)) => Uint(Some(1)),
        ("NodeList", None) => {
            Str(Some(if job.node_list.is_empty() { "None assigned".to_owned() } else { job.node_list.clone() }))
        }
        ("NodeList", Some(step)) => Str(text(&step.node_list)),
        ("NTasks", Some(_)) => Uint(Some(1)),
        ("Partition", None) => Str(text(&job.partition)),
        ("Planned" | "PlannedCPU" | "PlannedCPURAW", None) => {
            let eligible = fmt::secs(job.eligible_time.as_ref()).unwrap_or(0);
            let planned = if eligible == 0 {
                0
            } else if let Some(start) = job_start {
                start - eligible
            } else if let Some(end) = job_end {
                end - eligible
            } else {
                now - eligible
            }
            .max(0);
            match name {
                "Planned" => Time(Some(planned)),
                "PlannedCPU" => Time(Some(planned * i64::from(job.req_cpus))),
                _ => Uint(Some((planned * i64::from(job.req_cpus)) as u64)),
            }
        }
        ("Priority", None) => Uint(Some(u64::from(job.priority))),
        ("QOS", None) => Str(text(&job.qos)),
        ("Reason", None) => Str(Some(if job.reason.is_empty() { "None".to_owned() } else { job.reason.clone() })),
        ("ReqCPUS", None) => Uint(Some(u64::from(job.req_cpus))),
        ("ReqCPUS", Some(step)) => Uint(Some(u64::from(step.alloc_cpus))),
        ("ReqMem", None) => Str(Some(mem(job.req_mem_mb))),
        ("ReqMem", Some(_)) => Str(Some(String::new())),
        ("ReqNodes", _) => Str(Some("1".to_owned())),
        ("ReqTRES", None) => {
            let mut entries = vec![
                ("billing".to_owned(), job.req_cpus.to_string()),
                ("cpu".to_owned(), job.req_cpus.to_string()),
                ("mem".to_owned(), mem(job.req_mem_mb)),
                ("node".to_owned(), "1".to_owned()),
            ];
            entries.extend(gres(job));
            Str(tres(entries))
        }
        ("Reservation", None) => Str(text(&job.reservation)),
        ("Restarts", None) => Uint(Some(0)),
        ("Start", None) => Date(job_start),
        ("State", None) => {
            let state = fmt::state(job.state);
            Str(Some(match (state, job.cancelled_by_uid) {
                (pb::JobState::Cancelled, Some(uid)) => format!("CANCELLED by {uid}"),
                _ => fmt::state_long(state).to_owned(),
            }))
        }
        ("State", Some(step)) => Str(Some(fmt::state_long(fmt::state(step.state)).to_owned())),
        ("Submit", None) => Date(fmt::secs(job.submit_time.as_ref())),
        ("Suspended", _) => Time(Some(0)),
        ("SystemCPU" | "TotalCPU" | "UserCPU", _) => Str(Some("00:00:00".to_owned())),
        ("Timelimit", None) => Str(match job.time_limit_seconds {
            None => Some("Partition_Limit".to_owned()),
            Some(0) => None,
            Some(seconds) => Some(fmt::mins2time(fmt::limit_minutes(seconds))),
        }),
        ("TimelimitRaw", None) => Str(match job.time_limit_seconds {
            None => Some("Partition_Limit".to_owned()),
            Some(0) => None,
            Some(seconds) => Some(fmt::limit_minutes(seconds).to_string()),
        }),
        ("UID", None) => Uint(Some(u64::from(job.uid))),
        ("User", None) => Str(text(&job.user)),
        ("WCKeyID", None) => Uint(Some(0)),
        // Fields the emulator records nothing for (step statistics, energy, cluster, paths):
        // Slurm's NULL.
        (_, _) => match FIELDS.iter().find(|(_, full, _)| *full == name).map(|(_, _, kind)| *kind) {
            Some(Kind::Uint) => Uint(None),
            Some(Kind::Date) => Date(None),
            Some(Kind::Time) => Time(None),
            _ => Str(None),
        },
    }
}

// ------------------------------------------------------------------------------------------------
// Printing (`print_fields.c`)
// ------------------------------------------------------------------------------------------------

fn justify(text: &str, width: i32) -> String {
    let abs = width.unsigned_abs() as usize;
    let cut: String = text.chars().take(abs).collect();
    if width < 0 { format!("{cut:<abs$} ") } else { format!("{cut:>abs$} ") }
}

fn cell(out: &mut String, options: &Options, width: i32, value: Value, last: bool, now: i64) {
    let abs = width.unsigned_abs() as usize;
    // Parsable text and fixed-width text of the value.
    let (parsable_text, fixed): (String, String) = match value {
        Value::Str(value) => {
            let parsable = value.clone().unwrap_or_default();
            let fixed = match value {
                None => justify(" ", width),
                Some(text) => {
                    let chars: Vec<char> = text.chars().collect();
                    if chars.len() > abs && abs > 0 {
                        let mut cut: String = chars[..abs - 1].iter().collect();
                        cut.push('+');
                        justify(&cut, width)
                    } else {
                        justify(&text, width)
                    }
                }
            };
            (parsable, fixed)
        }
        Value::Uint(value) => match value {
            None => (String::new(), format!("{:>abs$} ", " ")),
            Some(number) => {
                let text = number.to_string();
                let fixed = if width < 0 { format!("{text:<abs$} ") } else { format!("{text:>abs$} ") };
                (text, fixed)
            }
        },
        Value::Date(seconds) => {
            let text = fmt::time_str(seconds, &options.time_format, now, abs + 1);
            (text.clone(), justify(&text, width))
        }
        Value::Time(seconds) => match seconds {
            None => (String::new(), format!("{:>abs$} ", " ")),
            Some(seconds) => {
                let text = fmt::secs2time(seconds);
                let fixed = if width < 0 { format!("{text:<abs$} ") } else { format!("{text:>abs$} ") };
                (text, fixed)
            }
        },
    };
    match options.parsable {
        Some(Parsable::NoEnding) if last => out.push_str(&parsable_text),
        Some(_) => {
            out.push_str(&parsable_text);
            out.push_str(options.delimiter.as_deref().unwrap_or("|"));
        }
        None => out.push_str(&fixed),
    }
}

fn header(options: &Options) -> String {
    let mut out = String::new();
    let count = options.fields.len();
    for (position, index) in options.fields.iter().enumerate() {
        let name = FIELDS[*index].1;
        let width = options.widths[*index];
        match options.parsable {
            Some(Parsable::NoEnding) if position + 1 == count => out.push_str(name),
            Some(_) => {
                out.push_str(name);
                out.push_str(options.delimiter.as_deref().unwrap_or("|"));
            }
            None => out.push_str(&justify(name, width)),
        }
    }
    out.push('\n');
    if options.parsable.is_none() {
        for index in &options.fields {
            out.push_str(&"-".repeat(options.widths[*index].unsigned_abs() as usize));
            out.push(' ');
        }
        out.push('\n');
    }
    out
}

fn line(out: &mut String, options: &Options, row: Row<'_>, now: i64) {
    let count = options.fields.len();
    for (position, index) in options.fields.iter().enumerate() {
        let value = value(FIELDS[*index].1, row, options, now);
        cell(out, options, options.widths[*index], value, position + 1 == count, now);
    }
    out.push('\n');
}

/// Renders the listing: `jobs` are accounting rows, `now` the emulator's time, `known` the Slurm
/// users (for `-u <name>`). Pure.
pub fn render(options: &Options, jobs: &[pb::Job], now: i64, caller: &Caller, known: &[(String, u32)]) -> Output {
    if let Some(info) = &options.info {
        return Output::ok(info.clone());
    }
    let window = match window(options, now) {
        Ok(window) => window,
        Err(output) => return output,
    };
    let users = match users(options, caller, known) {
        Ok(users) => users,
        Err(output) => return output,
    };
    let mut selected: Vec<&pb::Job> = jobs
        .iter()
        .filter(|job| job.source != pb::JobSource::Queue as i32)
        .filter(|job| selects(options, &users, window, job))
        .collect();
    selected.sort_by_key(|job| (fmt::secs(job.submit_time.as_ref()).unwrap_or(0), job.job_id));
    let mut out = String::new();
    if options.header {
        out.push_str(&header(options));
    }
    for job in selected {
        let wanted: Vec<&Option<String>> =
            options.jobs.iter().filter(|(id, _)| *id == job.job_id).map(|(_, step)| step).collect();
        let full = wanted.is_empty() || wanted.iter().any(|step| step.is_none());
        if full {
            line(&mut out, options, Row::Job(job), now);
        }
        if !options.no_steps {
            for step in &job.steps {
                if full || wanted.iter().any(|wanted| wanted.as_deref() == Some(step.name.as_str())) {
                    line(&mut out, options, Row::Step(job, step), now);
                }
            }
        }
    }
    let mut output = Output::ok(out);
    output.stderr = options.warnings.iter().map(|w| format!("{w}\n")).collect();
    output
}

/// `sacct` against the emulator.
pub async fn run(args: &[String], env: &Env, conn: Result<Conn, String>) -> Output {
    let options = match parse(args, env) {
        Ok(options) => options,
        Err(output) => return output,
    };
    if let Some(info) = options.info() {
        return Output::ok(info.to_owned());
    }
    let conn = match conn {
        Ok(conn) => conn,
        Err(error) => return fail(format!("sacct: error: {error}")),
    };
    let known = match conn.admin().slurm_users().await {
        Ok(known) => known,
        Err(error) => return super::api_error("sacct", &error),
    };
    let caller = match Caller::from_env(env, &known) {
        Ok(caller) => caller,
        Err(error) => return fail(format!("sacct: error: {error}")),
    };
    let request = pb::ListJobsRequest {
        source: pb::JobSource::Accounting as i32,
        job_ids: options.job_ids(),
        ..Default::default()
    };
    match conn.admin().list_jobs(&request).await {
        Ok(response) => render(&options, &response.jobs, super::now_of(&response), &caller, &known),
        Err(error) => super::api_error("sacct", &error),
    }
}
