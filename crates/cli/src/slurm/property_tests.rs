//! Bounded property tests of the Slurm command parsers (hardening issue 11): `getopt_long`
//! argument parsing, `sacct -S/-E` time forms, `sacct --format` field specs with `%N` widths,
//! squeue/sinfo `-o` format tokens, and every command's parse-then-render path on arbitrary
//! command lines.
//!
//! Each property runs a fixed number of cases from a fixed seed, so a failure replays exactly
//! (`cargo test -p cwsbx property_tests`); no regression files are written. Each bug these
//! properties found has a plain test below with the minimal input.

use chrono::{Datelike, NaiveDate, NaiveTime, Utc};
use cwsandbox_api::wkt::Timestamp;
use cwsandbox_client::emulator_v1 as pb;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::fmt::{self, MAX_WIDTH};
use super::getopt::{self, Arg, Item, Opt};
use super::{Caller, Env, sacct, scancel, scontrol, sinfo, squeue};

/// A fixed case count and seed: CI runs the same cases every time, whatever PROPTEST_* says.
fn config(cases: u32) -> Config {
    Config { cases, rng_seed: RngSeed::Fixed(0x11_5eed), failure_persistence: None, ..Config::default() }
}

/// 2025-01-02T03:04:05Z.
const NOW: i64 = 1_735_787_045;

fn ts(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos: 0 })
}

fn users() -> Vec<(String, u32)> {
    vec![("root".into(), 0), ("alice".into(), 1001)]
}

/// Accounting and queue rows of a running and a pending job, with steps.
fn jobs() -> Vec<pb::Job> {
    let running = pb::Job {
        source: pb::JobSource::Accounting as i32,
        job_id: 1000,
        name: "sandbox-placeholder".into(),
        user: "root".into(),
        group: "root".into(),
        account: "root".into(),
        partition: "cpu".into(),
        qos: "normal".into(),
        state: pb::JobState::Running as i32,
        reason: "None".into(),
        submit_time: ts(NOW - 600),
        eligible_time: ts(NOW - 600),
        start_time: ts(NOW - 590),
        elapsed_seconds: 590,
        node_list: "slurm-cpu-[0-1]".into(),
        alloc_nodes: 2,
        alloc_cpus: 4,
        req_cpus: 4,
        req_mem_mb: 1536,
        req_gpus: 1,
        gres_type: "a100".into(),
        time_limit_seconds: Some(3600),
        priority: 100,
        steps: vec![pb::JobStep {
            name: "batch".into(),
            state: pb::JobState::Running as i32,
            start_time: ts(NOW - 590),
            elapsed_seconds: 590,
            node_list: "slurm-cpu-0".into(),
            alloc_cpus: 4,
            ..Default::default()
        }],
        ..Default::default()
    };
    let pending = pb::Job {
        job_id: 1001,
        name: "ünïcode name that is long".into(),
        user: "alice".into(),
        uid: 1001,
        state: pb::JobState::Pending as i32,
        reason: "Resources".into(),
        start_time: None,
        elapsed_seconds: 0,
        node_list: String::new(),
        steps: Vec::new(),
        ..running.clone()
    };
    let queued = |job: &pb::Job| pb::Job { source: pb::JobSource::Queue as i32, ..job.clone() };
    vec![queued(&running), queued(&pending), running, pending]
}

fn partitions() -> Vec<pb::Partition> {
    vec![pb::Partition {
        name: "cpu".into(),
        default: true,
        nodes: vec!["slurm-cpu-0".into(), "slurm-cpu-1".into()],
        over_subscribe: "NO".into(),
        max_time_seconds: Some(86_400),
        ..Default::default()
    }]
}

fn nodes() -> Vec<pb::SlurmNode> {
    ["slurm-cpu-0", "slurm-cpu-1"]
        .iter()
        .map(|name| pb::SlurmNode {
            name: (*name).into(),
            state: pb::SlurmNodeState::Mixed as i32,
            partitions: vec!["cpu".into()],
            cpus: 16,
            alloc_cpus: 4,
            real_memory_mb: 65_536,
            ..Default::default()
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Arbitrary command lines
// ------------------------------------------------------------------------------------------------

/// Words a Slurm command line is made of: every option of the five commands in short and long
/// form, values of the kinds they take, `--`, and random text.
fn word() -> impl Strategy<Value = String> {
    let options = &[
        "-a",
        "-A",
        "-X",
        "-b",
        "--delimiter",
        "-D",
        "-e",
        "-E",
        "-h",
        "-U",
        "--name",
        "-j",
        "-l",
        "--local",
        "-N",
        "-n",
        "--noconvert",
        "--units",
        "-o",
        "-p",
        "-P",
        "-r",
        "-s",
        "-S",
        "-T",
        "-u",
        "-v",
        "-V",
        "-t",
        "--format",
        "--starttime",
        "--endtime",
        "--state",
        "--states",
        "--user",
        "--jobs",
        "--long",
        "--me",
        "--noheader",
        "--help",
        "--parsable2",
        "--format=",
        "--form",
        "--st",
        "--",
        "-",
        "-oJobID%5",
        "-Xn",
        "--units=G",
        "-w",
        "--nodelist",
        "show",
        "job",
        "partition",
        "node",
        "-o",
        "--oneliner",
        "--quiet",
        "--signal",
        "--user=alice",
    ];
    let values = &[
        "jobid,jobname%-30,state%5,start%3,end%0",
        "ALL%7",
        "%.18i %.9P %20j %.2t %#N %10M",
        "%#P %.5a %N %0T",
        "now",
        "now-1days",
        "now+99999999999999999weeks",
        "midnight",
        "12:30PM",
        "2025-01-02T03:04:05",
        "0102",
        "01/02/25",
        "1.2.3",
        "1000",
        "1000.batch",
        "0",
        "-1",
        "R,PD,CA",
        "running",
        "cpu",
        "slurm-cpu-[0-1]",
        "n[0-99999999999]",
        "alice",
        "root",
        "K",
        "x",
        "",
        "jobid%2147483647",
        "%99999999999999999999i",
    ];
    prop_oneof![
        3 => proptest::sample::select(&options[..]).prop_map(str::to_owned),
        3 => proptest::sample::select(&values[..]).prop_map(str::to_owned),
        1 => "-{0,2}[a-zA-Z%.#0-9,=:+-]{0,12}",
        1 => any::<String>(),
    ]
}

fn env() -> impl Strategy<Value = Env> {
    let formats = prop_oneof![
        Just(None),
        proptest::sample::select(&["", "%s", "relative", "standard", "%A %B %d %Y %T", "%Q", "junk"][..])
            .prop_map(|s| Some(s.to_owned())),
        "\\PC{0,8}".prop_map(Some),
        "(%[-:#.0-9a-zA-Z%]{0,3}){1,5}".prop_map(Some)
    ];
    (
        formats,
        proptest::option::of(word()),
        proptest::option::of(word()),
        proptest::option::of(word()),
        proptest::option::of(proptest::sample::select(&["root", "alice", "1001", "nobody", ""][..])),
    )
        .prop_map(|(time_format, sacct_format, squeue_format, sinfo_format, user)| {
            let mut env = Env::new();
            let mut put = |key: &str, value: Option<String>| {
                if let Some(value) = value {
                    env.insert(key.to_owned(), value);
                }
            };
            put("SLURM_TIME_FORMAT", time_format);
            put("SACCT_FORMAT", sacct_format);
            put("SQUEUE_FORMAT", squeue_format);
            put("SINFO_FORMAT", sinfo_format);
            put(super::USER_ENV, user.map(str::to_owned));
            env
        })
}

/// A refusal is the command's own voice on stderr with a failing exit code.
fn refusal_is_well_formed(prog: &str, output: &super::Output) -> Result<(), TestCaseError> {
    prop_assert_ne!(output.code, 0);
    prop_assert!(output.stdout.is_empty());
    prop_assert!(output.stderr.starts_with(&format!("{prog}: ")), "{:?}", output.stderr);
    Ok(())
}

proptest! {
    #![proptest_config(config(1000))]

    /// Any command line parses or is refused with a message; what parses renders; none panics.
    #[test]
    fn every_command_line_parses_or_is_refused_and_renders(args in proptest::collection::vec(word(), 0..6), env in env()) {
        let caller = Caller::root();
        let jobs = jobs();
        match sacct::parse(&args, &env) {
            Ok(options) => {
                let _ = sacct::request(&options, NOW);
                let output = sacct::render(&options, &jobs, NOW, &caller, &users(), None);
                if output.code != 0 {
                    refusal_is_well_formed("sacct", &output)?;
                }
            }
            Err(output) => refusal_is_well_formed("sacct", &output)?,
        }
        match squeue::parse(&args, &env) {
            Ok(options) => {
                let output = squeue::render(&options, &jobs, NOW, 0, &users(), "cluster", &env);
                if output.code != 0 && !output.stderr.starts_with("slurm_load_jobs error") {
                    refusal_is_well_formed("squeue", &output)?;
                }
            }
            Err(output) => refusal_is_well_formed("squeue", &output)?,
        }
        match sinfo::parse(&args, &env) {
            Ok(options) => prop_assert_eq!(sinfo::render(&options, &partitions(), &nodes(), NOW, &env, None).code, 0),
            Err(output) => refusal_is_well_formed("sinfo", &output)?,
        }
        match scontrol::parse(&args) {
            Ok(options) => {
                let answer = scontrol::Answer {
                    jobs: jobs.clone(),
                    partitions: partitions(),
                    nodes: nodes(),
                    config: Default::default(),
                    now: NOW,
                    caller: None,
                };
                let _ = scontrol::render(&options, &answer, &env);
            }
            Err(output) => prop_assert_ne!(output.code, 0),
        }
        match scancel::parse(&args) {
            Ok(options) => {
                let _ = scancel::select(&options, &jobs, &caller, &users());
            }
            Err(output) => refusal_is_well_formed("scancel", &output)?,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// getopt_long against a reference
// ------------------------------------------------------------------------------------------------

const SPEC: &[Opt] = &[
    Opt { key: "format", short: Some('o'), long: &["format", "fields"], arg: Arg::Required },
    Opt { key: "allocations", short: Some('X'), long: &["allocations"], arg: Arg::No },
    Opt { key: "noheader", short: Some('n'), long: &["noheader"], arg: Arg::No },
    Opt { key: "starttime", short: Some('S'), long: &["starttime"], arg: Arg::Required },
    Opt { key: "state", short: Some('s'), long: &["state"], arg: Arg::Required },
    Opt { key: "jobs", short: Some('j'), long: &["jobs"], arg: Arg::Optional },
    Opt { key: "verbose", short: None, long: &["verbose"], arg: Arg::No },
];

/// The shortest prefix of `long` no other long name of the spec starts with (getopt accepts it).
fn unambiguous_prefix(long: &str, key: &str) -> String {
    (1..=long.len())
        .map(|length| &long[..length])
        .find(|prefix| {
            SPEC.iter().filter(|opt| opt.key != key).all(|opt| opt.long.iter().all(|other| !other.starts_with(prefix)))
                && !SPEC.iter().any(|opt| {
                    opt.key == key && opt.long.iter().any(|other| other != &long && other.starts_with(prefix))
                })
        })
        .unwrap_or(long)
        .to_owned()
}

/// One thing said on a command line and one of the ways to spell it.
#[derive(Debug, Clone)]
struct Said {
    item: Item,
    words: Vec<String>,
}

fn said() -> impl Strategy<Value = Said> {
    let value = prop_oneof![Just(String::new()), Just("-n".to_owned()), "[a-zA-Z0-9%,.=-]{1,8}", "\\PC{0,6}"];
    let operand = "[a-zA-Z0-9][a-zA-Z0-9,.=-]{0,6}";
    (0..SPEC.len(), value, 0u8..6, operand).prop_map(|(index, value, form, operand)| {
        let opt = SPEC[index];
        let long = opt.long[usize::from(form) % opt.long.len()];
        let prefix = unambiguous_prefix(long, opt.key);
        if form == 5 {
            return Said { item: Item::Operand(operand.clone()), words: vec![operand] };
        }
        match (opt.arg, opt.short, form) {
            (Arg::No, Some(short), 0 | 1) => Said { item: Item::Opt(opt.key, None), words: vec![format!("-{short}")] },
            (Arg::No, _, _) => Said { item: Item::Opt(opt.key, None), words: vec![format!("--{prefix}")] },
            (Arg::Required, Some(short), 0) if !value.is_empty() => {
                Said { item: Item::Opt(opt.key, Some(value.clone())), words: vec![format!("-{short}{value}")] }
            }
            (Arg::Required, Some(short), 1) => {
                Said { item: Item::Opt(opt.key, Some(value.clone())), words: vec![format!("-{short}"), value] }
            }
            (Arg::Required, _, 2) => {
                Said { item: Item::Opt(opt.key, Some(value.clone())), words: vec![format!("--{prefix}"), value] }
            }
            (Arg::Required, _, _) => {
                Said { item: Item::Opt(opt.key, Some(value.clone())), words: vec![format!("--{long}={value}")] }
            }
            (Arg::Optional, Some(short), 0) => Said {
                item: Item::Opt(opt.key, (!value.is_empty()).then(|| value.clone())),
                words: vec![format!("-{short}{value}")],
            },
            (Arg::Optional, _, 1 | 2) => Said { item: Item::Opt(opt.key, None), words: vec![format!("--{prefix}")] },
            (Arg::Optional, _, _) => {
                Said { item: Item::Opt(opt.key, Some(value.clone())), words: vec![format!("--{prefix}={value}")] }
            }
        }
    })
}

proptest! {
    #![proptest_config(config(1000))]

    /// Options spelled any way getopt_long allows come back as the reference says, in order, with
    /// operands permuted in place; after `--` everything is an operand.
    #[test]
    fn getopt_reads_every_spelling_as_the_reference_says(
        said in proptest::collection::vec(said(), 0..8),
        after_dash_dash in proptest::collection::vec(prop_oneof![Just("-n".to_owned()), Just("--format".to_owned()), "\\PC{0,5}"], 0..3),
    ) {
        let mut args: Vec<String> = said.iter().flat_map(|said| said.words.clone()).collect();
        let mut expected: Vec<Item> = said.iter().map(|said| said.item.clone()).collect();
        if !after_dash_dash.is_empty() {
            args.push("--".to_owned());
            args.extend(after_dash_dash.iter().cloned());
            expected.extend(after_dash_dash.into_iter().map(Item::Operand));
        }
        prop_assert_eq!(getopt::parse("sacct", &args, SPEC), Ok(expected), "{:?}", args);
    }

    /// Bundled flags (`-Xn`) read as the flags one by one, and a bundle may end in an option
    /// that takes the rest of the word as its argument.
    #[test]
    fn bundled_flags_read_one_by_one(flags in proptest::collection::vec(proptest::sample::select(&['X', 'n'][..]), 1..5), tail in proptest::option::of("[a-zA-Z0-9,%]{1,6}")) {
        let mut word: String = std::iter::once('-').chain(flags.iter().copied()).collect();
        let mut expected: Vec<Item> =
            flags.iter().map(|flag| Item::Opt(if *flag == 'X' { "allocations" } else { "noheader" }, None)).collect();
        if let Some(tail) = &tail {
            word.push('o');
            word.push_str(tail);
            expected.push(Item::Opt("format", Some(tail.clone())));
        }
        prop_assert_eq!(getopt::parse("sacct", &[word], SPEC), Ok(expected));
    }
}

// ------------------------------------------------------------------------------------------------
// sacct -S/-E time forms against chrono
// ------------------------------------------------------------------------------------------------

fn at(date: NaiveDate, time: NaiveTime) -> i64 {
    date.and_time(time).and_utc().timestamp()
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn time_parsing_never_panics_and_stays_on_the_calendar(text in prop_oneof![word(), "(now|NOW)[+-][0-9]{0,22}[a-z]{0,7}", "[0-9/.:T-]{0,20}(AM|PM|am)?"]) {
        if let Some(seconds) = sacct::parse_time(&text, NOW) {
            prop_assert!(chrono::DateTime::from_timestamp(seconds, 0).is_some(), "{:?} → {}", text, seconds);
        }
    }

    /// Every documented form of a date and time parses to the instant chrono computes.
    #[test]
    fn documented_time_forms_parse_to_the_reference(
        year in 2000i32..2100,
        month in 1u32..=12,
        day in 1u32..=28,
        hour in 0u32..24,
        minute in 0u32..60,
        second in 0u32..60,
        with_seconds in any::<bool>(),
        form in 0u8..7,
    ) {
        let date = NaiveDate::from_ymd_opt(year, month, day).expect("day ≤ 28 exists every month");
        let time = NaiveTime::from_hms_opt(hour, minute, if with_seconds { second } else { 0 }).expect("valid clock");
        let clock = if with_seconds { format!("{hour:02}:{minute:02}:{second:02}") } else { format!("{hour:02}:{minute:02}") };
        let today = chrono::DateTime::<Utc>::from_timestamp(NOW, 0).expect("NOW").date_naive();
        let yy = year % 100;
        let (text, expected) = match form {
            0 => (format!("{year}-{month:02}-{day:02}"), at(date, NaiveTime::MIN)),
            1 => (format!("{year}-{month:02}-{day:02}T{clock}"), at(date, time)),
            2 => (format!("{month:02}/{day:02}/{yy:02}-{clock}"), at(date, time)),
            3 => (format!("{month:02}{day:02}{yy:02}"), at(date, NaiveTime::MIN)),
            4 => (format!("{month:02}.{day:02}.{yy:02}-{clock}"), at(date, time)),
            5 => (format!("{month:02}{day:02}"), at(NaiveDate::from_ymd_opt(today.year(), month, day).expect("exists"), NaiveTime::MIN)),
            _ => {
                let (twelve, meridiem) = match hour { 0 => (12, "AM"), 1..=11 => (hour, "AM"), 12 => (12, "PM"), _ => (hour - 12, "PM") };
                let text = if with_seconds { format!("{twelve}:{minute:02}:{second:02}{meridiem}") } else { format!("{twelve}:{minute:02}{meridiem}") };
                (text, at(today, time))
            }
        };
        prop_assert_eq!(sacct::parse_time(&text, NOW), Some(expected), "{}", text);
    }

    #[test]
    fn relative_times_count_from_now(count in 0i64..100_000, sign in proptest::sample::select(&['+', '-'][..]), unit in 0usize..5, spelling in 0usize..3) {
        let units: [(&[&str], i64); 5] = [
            (&["", "s", "seconds"], 1),
            (&["m", "min", "minutes"], 60),
            (&["h", "hour", "hours"], 3600),
            (&["d", "day", "days"], 86_400),
            (&["w", "week", "weeks"], 604_800),
        ];
        let (names, scale) = units[unit];
        let text = format!("now{sign}{count}{}", names[spelling]);
        let delta = count * scale;
        prop_assert_eq!(sacct::parse_time(&text, NOW), Some(if sign == '+' { NOW + delta } else { NOW - delta }), "{}", text);
    }
}

// ------------------------------------------------------------------------------------------------
// Format widths
// ------------------------------------------------------------------------------------------------

/// sacct fields printed with `print_fields_str` or `print_fields_date`, which cut and pad to the
/// width (the unsigned and duration printers never cut, as in Slurm).
const CUT_FIELDS: &[&str] = &[
    "JobID",
    "JobName",
    "Partition",
    "Account",
    "State",
    "ExitCode",
    "User",
    "Group",
    "NodeList",
    "Start",
    "End",
    "Submit",
    "Eligible",
    "Reason",
    "ReqMem",
    "AllocTRES",
    "ReqTRES",
    "Timelimit",
    "QOS",
    "Comment",
    "WorkDir",
];

proptest! {
    #![proptest_config(config(400))]

    /// `-o name%N`: every header cell, dash and value cell is |N| characters and a space.
    #[test]
    fn sacct_widths_are_honoured(fields in proptest::collection::vec((proptest::sample::select(CUT_FIELDS), -40i32..=40), 1..6)) {
        let list = fields.iter().map(|(name, width)| format!("{name}%{width}")).collect::<Vec<_>>().join(",");
        let args = vec!["-a".to_owned(), "-o".to_owned(), list.clone(), "-S".to_owned(), "midnight".to_owned()];
        let options = sacct::parse(&args, &Env::new()).map_err(|output| TestCaseError::fail(output.stderr))?;
        let output = sacct::render(&options, &jobs(), NOW, &Caller::root(), &users(), None);
        prop_assert_eq!(output.code, 0, "{}", output.stderr);
        let lines: Vec<&str> = output.stdout.lines().collect();
        prop_assert!(lines.len() >= 4, "header, dashes, two jobs and a step: {}", output.stdout);
        // A `%N` sets the width of the field's table entry, as in Slurm: the last one given wins.
        let width_of = |name: &str| fields.iter().rev().find(|(other, _)| *other == name).map_or(0, |(_, width)| *width);
        for line in lines {
            let mut rest: Vec<char> = line.chars().collect();
            for (name, _) in &fields {
                let width = &width_of(name);
                let size = width.unsigned_abs() as usize + 1;
                prop_assert!(rest.len() >= size, "{:?} too short for {}%{}", line, name, width);
                prop_assert_eq!(rest[size - 1], ' ', "{:?}: {}%{} is {} wide", line, name, width, size);
                rest.drain(..size);
            }
            prop_assert!(rest.is_empty(), "{:?} has more than {}", line, list);
        }
    }

    /// `-O name:[.]N|`: every field of squeue's table prints in exactly N characters, except the
    /// right-justified values Slurm does not cut (times, node lists), which are at least N.
    #[test]
    fn squeue_long_names_honour_their_sizes(
        fields in proptest::collection::vec((any::<bool>(), 1usize..30, proptest::sample::select(squeue::fields::FIELDS.to_vec())), 1..6),
    ) {
        let list = fields
            .iter()
            .map(|(right, width, (name, _, _))| format!("{name}:{}{width}|", if *right { "." } else { "" }))
            .collect::<Vec<_>>()
            .join(",");
        let args = vec!["-t".to_owned(), "all".to_owned(), "-O".to_owned(), list.clone()];
        let options = squeue::parse(&args, &Env::new()).map_err(|output| TestCaseError::fail(output.stderr))?;
        let output = squeue::render(&options, &jobs(), NOW, 0, &users(), "cluster", &Env::new());
        prop_assert_eq!(output.code, 0, "{}", output.stderr);
        prop_assert_eq!(output.stderr, "", "every table name is known");
        for line in output.stdout.lines() {
            let cells: Vec<&str> = line.split('|').collect();
            prop_assert_eq!(cells.len(), fields.len() + 1, "{:?}", line);
            for (cell, (right, width, (name, _, print))) in cells.iter().zip(&fields) {
                let uncut = ["time_left", "time_limit", "time_used", "nodes", "reason_list", "schednodes", "req_nodes", "exc_nodes", "resize_time"];
                if *right && uncut.contains(print) {
                    prop_assert!(cell.chars().count() >= *width, "{:?}: {}:.{}", line, name, width);
                } else {
                    prop_assert_eq!(cell.chars().count(), *width, "{:?}: {}:{}", line, name, width);
                }
            }
        }
    }

    /// `-o %[.]N<letter>`: squeue and sinfo print every field in exactly N characters.
    #[test]
    fn squeue_and_sinfo_widths_are_honoured(
        squeue_fields in proptest::collection::vec((any::<bool>(), 1usize..30, proptest::sample::select("aABCDeEFgGhiIjJkKlLmMnNoOpPqQrRStTuUvVwWxXyYzZ".chars().collect::<Vec<_>>())), 1..6),
        sinfo_fields in proptest::collection::vec((any::<bool>(), 1usize..30, proptest::sample::select("acCdDEfFghlmNPrstTwzG".chars().collect::<Vec<_>>())), 1..6),
    ) {
        let format = |fields: &[(bool, usize, char)]| fields.iter().map(|(right, width, letter)| format!("%{}{width}{letter}|", if *right { "." } else { "" })).collect::<String>();
        let check = |stdout: &str, fields: &[(bool, usize, char)], squeue_uncut: bool| -> Result<(), TestCaseError> {
            for line in stdout.lines() {
                let cells: Vec<&str> = line.split('|').collect();
                prop_assert_eq!(cells.len(), fields.len() + 1, "{:?}", line);
                for (cell, (right, width, letter)) in cells.iter().zip(fields) {
                    if squeue_uncut && *right && "lLMNRYnx".contains(*letter) {
                        // squeue's times and node lists are not cut when right-justified (`%Ns`):
                        // at least N wide, longer when they must be. Left-justified, C's `%.Ns`
                        // cuts them like any value.
                        prop_assert!(cell.chars().count() >= *width, "{:?}: %{}{}", line, width, letter);
                    } else {
                        prop_assert_eq!(cell.chars().count(), *width, "{:?}: %{}{}", line, width, letter);
                    }
                }
            }
            Ok(())
        };
        let args = vec!["-o".to_owned(), format(&squeue_fields)];
        let options = squeue::parse(&args, &Env::new()).map_err(|output| TestCaseError::fail(output.stderr))?;
        let output = squeue::render(&options, &jobs(), NOW, 0, &users(), "cluster", &Env::new());
        check(&output.stdout, &squeue_fields, true)?;
        let args = vec!["-o".to_owned(), format(&sinfo_fields)];
        let options = sinfo::parse(&args, &Env::new()).map_err(|output| TestCaseError::fail(output.stderr))?;
        let output = sinfo::render(&options, &partitions(), &nodes(), NOW, &Env::new(), None);
        check(&output.stdout, &sinfo_fields, false)?;
    }

    /// Format tokens read back what was written: flags, width (held at MAX_WIDTH), letter, suffix.
    #[test]
    fn format_tokens_read_back_what_was_written(
        prefix in "[a-z ]{0,3}",
        tokens in proptest::collection::vec((any::<bool>(), any::<bool>(), proptest::option::of("[0-9]{1,25}"), "[a-zA-Z]", "[ a-z|]{0,3}"), 0..5),
    ) {
        let text = tokens.iter().map(|(auto, right, width, letter, suffix)| {
            format!("%{}{}{}{letter}{suffix}", if *auto { "#" } else { "" }, if *right { "." } else { "" }, width.clone().unwrap_or_default())
        }).collect::<String>();
        let (read_prefix, read) = fmt::format_tokens(&format!("{prefix}{text}"), true);
        prop_assert_eq!(read_prefix, prefix);
        prop_assert_eq!(read.len(), tokens.len());
        for (token, (auto, right, width, letter, suffix)) in read.iter().zip(&tokens) {
            let digits = width.as_deref().unwrap_or("0").trim_start_matches('0');
            let expected_width = if digits.len() > 6 { MAX_WIDTH } else { digits.parse::<usize>().unwrap_or(0).min(MAX_WIDTH) };
            prop_assert_eq!((token.auto, token.right, token.width), (*auto, *right, expected_width));
            prop_assert_eq!(token.letter.to_string(), letter.clone());
            prop_assert_eq!(&token.suffix, suffix);
        }
    }

    /// Hostlists compress and expand back to the same names.
    #[test]
    fn hostlists_round_trip(numbers in proptest::collection::btree_set(0u64..300, 1..20), prefix in "[a-z]{1,5}-") {
        let names: Vec<String> = numbers.iter().map(|number| format!("{prefix}{number}")).collect();
        prop_assert_eq!(fmt::expand_hostlist(&fmt::hostlist(&names)), names);
    }
}

// ------------------------------------------------------------------------------------------------
// The bugs the properties found, each at its minimal input
// ------------------------------------------------------------------------------------------------

/// `every_command_line_parses_or_is_refused_and_renders`: `-S now+99999999999999999weeks`
/// overflowed `count * scale` (a panic in debug builds); it is now refused as any bad time is.
#[test]
fn a_relative_time_past_the_calendar_is_refused() {
    assert_eq!(sacct::parse_time("now+99999999999999999weeks", NOW), None);
    assert_eq!(sacct::parse_time("now+9223372036854775807", NOW), None, "past i64 after adding now");
    assert_eq!(sacct::parse_time("now-9000000000000000", NOW), None, "before the calendar starts");
    let options =
        sacct::parse(&["-S".to_owned(), "now+99999999999999999weeks".to_owned()], &Env::new()).expect("parses");
    let output = sacct::request(&options, NOW).expect_err("refused before any call");
    assert_eq!(output.stderr, "sacct: error: Invalid time specification (pos=0): now+99999999999999999weeks\n");
}

/// `every_command_line_parses_or_is_refused_and_renders` (with `SINFO_FORMAT=jobid%2147483647`):
/// a width past u16::MAX made `format!` panic ("Formatting argument out of range", in release
/// builds too), and `%99999999999999999999i` overflowed the width first (a panic in debug builds).
#[test]
fn a_huge_squeue_or_sinfo_width_is_held() {
    for format in ["%65536i", "%99999999999999999999i"] {
        let options =
            squeue::parse(&["-h".to_owned(), "-o".to_owned(), format.to_owned()], &Env::new()).expect("parses");
        let output = squeue::render(&options, &jobs(), NOW, 0, &users(), "cluster", &Env::new());
        assert_eq!(output.stdout.lines().map(|line| line.chars().count()).collect::<Vec<_>>(), [MAX_WIDTH, MAX_WIDTH]);
    }
    let options = sinfo::parse(&["-h".to_owned(), "-o".to_owned(), "%65536P".to_owned()], &Env::new()).expect("parses");
    let output = sinfo::render(&options, &partitions(), &nodes(), NOW, &Env::new(), None);
    assert_eq!(output.stdout.lines().map(|line| line.chars().count()).collect::<Vec<_>>(), [MAX_WIDTH]);
}

/// The same for `sacct -o jobid%65536` (a panic) and `jobid%-2147483647`.
#[test]
fn a_huge_sacct_width_is_held() {
    let options = sacct::parse(
        &[
            "-a".to_owned(),
            "-X".to_owned(),
            "-n".to_owned(),
            "-o".to_owned(),
            "jobid%65536,jobid%-2147483647".to_owned(),
        ],
        &Env::new(),
    )
    .expect("parses");
    let output = sacct::render(&options, &jobs(), NOW, &Caller::root(), &users(), None);
    assert!(output.stdout.lines().all(|line| line.chars().count() == 2 * (MAX_WIDTH + 1)), "{}", output.stdout.len());
}

/// `every_command_line_parses_or_is_refused_and_renders`: `squeue -w n[0-99999999999]` expanded
/// a hundred billion node names.
#[test]
fn a_huge_node_range_is_not_expanded() {
    let options = squeue::parse(&["-w".to_owned(), "n[0-99999999999]".to_owned()], &Env::new()).expect("parses");
    let output = squeue::render(&options, &jobs(), NOW, 0, &users(), "cluster", &Env::new());
    assert_eq!(output.stdout.lines().count(), 1, "the header only: no node has that name");
}
