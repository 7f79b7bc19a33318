//! The `sacct` command line: its options (`getopt`-style, as `src/sacct/options.c` takes them),
//! `--help`, and the field list with `%N` widths and prefix matching.

use cwsandbox_client::emulator_v1 as pb;

use super::fail;
use super::fields::{BRIEF_FIELDS, DEFAULT_FIELDS, FIELDS, LONG_FIELDS, help_fields};
use crate::slurm::Env;
use crate::slurm::Output;
use crate::slurm::fmt::{self, Convert, TimeFormat};
use crate::slurm::getopt::{self, Arg, Item, Opt};

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
    Opt { key: "json", short: None, long: &["json"], arg: Arg::Optional },
    Opt { key: "yaml", short: None, long: &["yaml"], arg: Arg::Optional },
    Opt { key: "allocations", short: Some('t'), long: &[], arg: Arg::No },
];

/// Parsable output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Parsable {
    /// `-p`: a delimiter after every field.
    Ending,
    /// `-P`: between fields only.
    NoEnding,
}

/// A parsed `sacct` command line (before the time window is resolved against "now").
#[derive(Debug, Clone)]
pub struct Options {
    /// Field indexes into [`FIELDS`], in print order.
    pub(super) fields: Vec<usize>,
    /// Widths per field of the table (a `%N` changes the field, as Slurm's table entry).
    pub(super) widths: Vec<i32>,
    pub(super) parsable: Option<Parsable>,
    pub(super) delimiter: Option<String>,
    pub(super) header: bool,
    pub(super) no_steps: bool,
    /// `-j`: job id and optional step name.
    pub(super) jobs: Vec<(u32, Option<String>)>,
    /// `-u` values as given (names or uids), `None` when absent.
    pub(super) users: Option<Vec<String>>,
    pub(super) all_users: bool,
    pub(super) states: Vec<Option<pb::JobState>>,
    pub(super) start: Option<String>,
    pub(super) end: Option<String>,
    pub(super) names: Vec<String>,
    pub(super) partitions: Vec<String>,
    pub(super) accounts: Vec<String>,
    pub(super) nodes: Option<Vec<String>>,
    pub(super) convert: Convert,
    pub(super) time_format: TimeFormat,
    /// What to print instead of a listing (`--help`, `--helpformat`, `--version`).
    pub(super) info: Option<String>,
    /// Warnings printed before the listing.
    pub(super) warnings: Vec<String>,
    /// `--json`: the whole command line, for the document's `meta.command`.
    pub(super) json: Option<Vec<String>>,
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
        json: None,
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
            "yaml" => {
                return Err(fail("sacct: error: --yaml is not emulated (--json is, with the same data)".to_owned()));
            }
            "json" => {
                crate::slurm::json::check_spec("sacct", &value).map_err(fail)?;
                options.json = Some(std::iter::once("sacct".to_owned()).chain(args.iter().cloned()).collect());
            }
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
