//! Golden tests of the Slurm renderers: constructed records, exact expected text (fixed-width
//! lines end with a space, as Slurm prints them). The rules are those of docs/facts/slurm.md and
//! the SUNK checklist's items 30–38 (docs/facts/sunk-checklist.md#item-30 and after), from Slurm
//! 25.05's sources.

use cwsandbox_api::wkt::Timestamp;
use cwsandbox_client::emulator_v1 as pb;

use super::{Caller, Env, sacct, scancel, scontrol, sinfo, squeue};

/// 2025-01-02T03:04:05Z.
const NOW: i64 = 1_735_787_045;
/// Midnight of that day.
const MIDNIGHT: i64 = 1_735_776_000;

fn ts(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos: 0 })
}

fn users() -> Vec<(String, u32)> {
    vec![("root".into(), 0), ("alice".into(), 1001), ("bob".into(), 1002)]
}

/// A running root job on slurm-cpu-0 since `start`.
fn running(id: u32, name: &str, start: i64) -> pb::Job {
    pb::Job {
        source: pb::JobSource::Accounting as i32,
        job_id: id,
        name: name.to_owned(),
        user: "root".into(),
        uid: 0,
        group: "root".into(),
        gid: 0,
        account: "root".into(),
        partition: "cpu".into(),
        qos: "normal".into(),
        state: pb::JobState::Running as i32,
        reason: "None".into(),
        submit_time: ts(start),
        eligible_time: ts(start),
        start_time: ts(start),
        elapsed_seconds: NOW - start,
        node_list: "slurm-cpu-0".into(),
        alloc_nodes: 1,
        alloc_cpus: 2,
        req_cpus: 2,
        req_mem_mb: 512,
        priority: 100,
        kind: pb::JobKind::Placeholder as i32,
        over_subscribe: pb::OverSubscribe::Ok as i32,
        steps: vec![step("batch", pb::JobState::Running, start, None, NOW - start, 2, (0, 0))],
        ..Default::default()
    }
}

fn step(
    name: &str,
    state: pb::JobState,
    start: i64,
    end: Option<i64>,
    elapsed: i64,
    cpus: u32,
    exit: (i32, i32),
) -> pb::JobStep {
    pb::JobStep {
        name: name.into(),
        state: state as i32,
        start_time: ts(start),
        end_time: end.and_then(ts),
        elapsed_seconds: elapsed,
        node_list: "slurm-cpu-0".into(),
        alloc_cpus: cpus,
        exit_code: exit.0,
        exit_signal: exit.1,
    }
}

fn pending(id: u32, name: &str, submit: i64) -> pb::Job {
    pb::Job {
        state: pb::JobState::Pending as i32,
        reason: "Resources".into(),
        start_time: None,
        elapsed_seconds: 0,
        node_list: String::new(),
        alloc_nodes: 0,
        alloc_cpus: 0,
        steps: Vec::new(),
        ..running(id, name, submit)
    }
}

/// Cancelled by `uid` at `end` after running since `start`.
fn cancelled(id: u32, name: &str, start: i64, end: i64, uid: u32) -> pb::Job {
    pb::Job {
        state: pb::JobState::Cancelled as i32,
        end_time: ts(end),
        elapsed_seconds: end - start,
        // Real Slurm: the job line `0:0`, the batch step `0:15`.
        exit_code: 0,
        exit_signal: 0,
        cancelled_by_uid: Some(uid),
        steps: vec![
            step("batch", pb::JobState::Cancelled, start, Some(end), end - start, 2, (0, 15)),
            step("extern", pb::JobState::Completed, start, Some(end), end - start, 2, (0, 0)),
        ],
        ..running(id, name, start)
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn env(pairs: &[(&str, &str)]) -> Env {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// `sacct <list>` as root over `jobs`; returns stdout, asserting success.
fn sacct_as(caller: &Caller, list: &[&str], environment: &Env, jobs: &[pb::Job]) -> super::Output {
    match sacct::parse(&args(list), environment) {
        Ok(options) => sacct::render(&options, jobs, NOW, caller, &users(), None),
        Err(output) => output,
    }
}

fn sacct(list: &[&str], jobs: &[pb::Job]) -> String {
    let output = sacct_as(&Caller::root(), list, &Env::new(), jobs);
    assert_eq!(output.code, 0, "sacct {list:?}: {}", output.stderr);
    output.stdout
}

fn sacct_err(list: &[&str]) -> super::Output {
    let output = sacct_as(&Caller::root(), list, &Env::new(), &[]);
    assert_ne!(output.code, 0, "sacct {list:?} should fail: {}", output.stdout);
    output
}

// ------------------------------------------------------------------------------------------------
// sacct
// ------------------------------------------------------------------------------------------------

#[test]
fn sacct_default_view_of_the_research_example() {
    // docs/facts/slurm.md#sacct-example: a pending placeholder and a cancelled one, default
    // format, -X.
    let jobs = [pending(41, "sandbox-7f3c9a", NOW - 60), cancelled(43, "short", NOW - 50, NOW - 10, 0)];
    assert_eq!(
        sacct(&["-X"], &jobs),
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n\
         ------------ ---------- ---------- ---------- ---------- ---------- -------- \n\
         41           sandbox-7+        cpu       root          0    PENDING      0:0 \n\
         43                short        cpu       root          2 CANCELLED+      0:0 \n"
    );
}

#[test]
fn sacct_width_suffix_replaces_the_width_and_sign_chooses_the_side() {
    let jobs = [running(1000, "tenant-ns/sandbox-7f3c9a", NOW - 5)];
    let wide = sacct(&["-X", "-o", "JobName%60"], &jobs);
    assert_eq!(wide.lines().nth(2).unwrap(), format!("{:>60} ", "tenant-ns/sandbox-7f3c9a"));
    assert_eq!(wide.lines().nth(1).unwrap(), format!("{} ", "-".repeat(60)));
    let left = sacct(&["-X", "-o", "JobName%-30"], &jobs);
    assert_eq!(left.lines().nth(2).unwrap(), format!("{:<30} ", "tenant-ns/sandbox-7f3c9a"));
    // JobID%20 turns the left-justified JobID right-justified.
    let id = sacct(&["-X", "-n", "-o", "JobID%20"], &jobs);
    assert_eq!(id, format!("{:>20} \n", "1000"));
    // A header longer than its width is cut without `+`; a value gets the `+`.
    let cut = sacct(&["-X", "-o", "AllocCPUS%5,JobName%5"], &jobs);
    assert_eq!(cut, "Alloc JobNa \n----- ----- \n    2 tena+ \n");
}

#[test]
fn sacct_the_guides_format_line() {
    let jobs = [running(1000, "sandbox-cks-runner-u0/sandbox-7f3c9a", NOW - 5)];
    let out = sacct(&["--format=JobID,JobName%60,State,NodeList", "-X"], &jobs);
    assert_eq!(
        out,
        format!(
            "JobID        {:>60}      State        NodeList \n------------ {} ---------- --------------- \n1000         {:>60}    RUNNING     slurm-cpu-0 \n",
            "JobName",
            "-".repeat(60),
            "sandbox-cks-runner-u0/sandbox-7f3c9a"
        )
    );
}

#[test]
fn sacct_steps_follow_the_job_without_x() {
    let jobs = [cancelled(43, "short", NOW - 50, NOW - 10, 0)];
    assert_eq!(
        sacct(&["-o", "JobID,JobName,Partition,Account,ReqMem,State,ExitCode"], &jobs),
        "JobID           JobName  Partition    Account     ReqMem      State ExitCode \n\
         ------------ ---------- ---------- ---------- ---------- ---------- -------- \n\
         43                short        cpu       root       512M CANCELLED+      0:0 \n\
         43.batch          batch                  root             CANCELLED     0:15 \n\
         43.extern        extern                  root             COMPLETED      0:0 \n"
    );
    // -j 43.batch lists that step only.
    assert_eq!(sacct(&["-n", "-P", "-j", "43.batch", "-o", "JobID,State"], &jobs), "43.batch|CANCELLED\n");
}

#[test]
fn sacct_parsable_modes_and_noheader() {
    let jobs = [cancelled(43, "short", NOW - 50, NOW - 10, 0)];
    assert_eq!(sacct(&["-X", "-P", "-o", "JobID,State"], &jobs), "JobID|State\n43|CANCELLED by 0\n");
    assert_eq!(sacct(&["-X", "-p", "-o", "JobID,State"], &jobs), "JobID|State|\n43|CANCELLED by 0|\n");
    assert_eq!(sacct(&["-X", "-p", "-n", "-o", "JobID,State"], &jobs), "43|CANCELLED by 0|\n");
    assert_eq!(
        sacct(&["-X", "-P", "--delimiter=;", "-o", "JobID,Partition,State"], &jobs),
        "JobID;Partition;State\n43;cpu;CANCELLED by 0\n"
    );
    // --delimiter only matters in parsable mode.
    assert_eq!(sacct(&["-X", "-n", "--delimiter=;", "-o", "JobID"], &jobs), "43           \n");
    // -n drops both header lines in fixed-width mode too.
    assert_eq!(sacct(&["-X", "-n", "-o", "State"], &jobs), "CANCELLED+ \n");
}

#[test]
fn sacct_dates_elapsed_and_unknown() {
    let long = pb::Job { elapsed_seconds: 93_784, ..running(7, "long", NOW - 93_784) };
    let jobs = [pending(5, "waits", NOW - 20), cancelled(6, "done", NOW - 12, NOW, 0), long];
    assert_eq!(
        sacct(&["-X", "-n", "-P", "-o", "JobID,Start,End,Elapsed,CPUTime,ElapsedRaw"], &jobs),
        "7|2025-01-01T01:01:01|Unknown|1-02:03:04|2-04:06:08|93784\n\
         5|Unknown|Unknown|00:00:00|00:00:00|0\n\
         6|2025-01-02T03:03:53|2025-01-02T03:04:05|00:00:12|00:00:24|12\n"
    );
    assert_eq!(sacct(&["-X", "-n", "-j", "5", "-o", "Start,Elapsed"], &jobs), "            Unknown   00:00:00 \n");
}

#[test]
fn sacct_field_names_are_case_insensitive_prefixes_in_table_order() {
    let jobs = [cancelled(43, "short", NOW - 50, NOW - 10, 0)];
    let header = |list: &str| sacct(&["-X", "-P", "-o", list], &jobs).lines().next().unwrap().to_owned();
    assert_eq!(header("state"), "State");
    assert_eq!(header("st"), "Start");
    assert_eq!(header("jobid"), "JobID");
    assert_eq!(header("alloc"), "AllocCPUS");
    assert_eq!(header("NODEL,reqm,ncpus"), "NodeList|ReqMem|NCPUS");
    // Slurm's quirk: any prefix of ALL is ALL.
    assert_eq!(header("a").split('|').count(), 120);
    assert_eq!(header("acc"), "Account");
    let error = sacct_err(&["-o", "foo"]);
    assert_eq!((error.stderr.as_str(), error.code), ("sacct: error: Invalid field requested: \"foo\"\n", 1));
    assert_eq!(sacct_err(&["-o", "AllocGRES"]).stderr, "sacct: fatal: AllocGRES is deprecated, please use AllocTRES\n");
}

#[test]
fn sacct_format_sources_and_conflicts() {
    let jobs = [cancelled(43, "short", NOW - 50, NOW - 10, 0)];
    // -o given twice concatenates.
    assert_eq!(sacct(&["-X", "-P", "-n", "-o", "JobID", "-o", "State"], &jobs), "43|CANCELLED by 0\n");
    // SACCT_FORMAT replaces the default; -o replaces SACCT_FORMAT.
    let formatted = env(&[("SACCT_FORMAT", "jobid,user")]);
    let out = sacct_as(&Caller::root(), &["-X", "-P", "-n"], &formatted, &jobs);
    assert_eq!(out.stdout, "43|root\n");
    let out = sacct_as(&Caller::root(), &["-X", "-P", "-n", "-o", "State"], &formatted, &jobs);
    assert_eq!(out.stdout, "CANCELLED by 0\n");
    assert_eq!(sacct(&["-X", "-P", "-b"], &jobs), "JobID|State|ExitCode\n43|CANCELLED by 0|0:0\n");
    let error = sacct_err(&["-l", "-o", "JobID"]);
    assert_eq!(
        error.stderr,
        "sacct: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n"
    );
    assert_eq!(
        sacct(&["-X", "-P", "-l"], &jobs).lines().next().unwrap().split('|').take(4).collect::<Vec<_>>(),
        ["JobID", "JobIDRaw", "JobName", "Partition"]
    );
}

#[test]
fn sacct_req_mem_units() {
    let mem = |mb: u64| pb::Job { req_mem_mb: mb, ..running(mb as u32, "m", NOW - 5) };
    let jobs = [mem(512), mem(1024), mem(1536), mem(1000), mem(2048), mem(0)];
    let sorted = |list: &[&str]| {
        let mut rows: Vec<(u32, String)> = sacct(list, &jobs)
            .lines()
            .map(|line| {
                let (id, value) = line.split_once('|').unwrap();
                (id.parse().unwrap(), value.to_owned())
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|(_, value)| value).collect::<Vec<_>>()
    };
    assert_eq!(sorted(&["-X", "-n", "-P", "-o", "JobID,ReqMem"]), ["0", "512M", "1000M", "1G", "1.50G", "2G"]);
    assert_eq!(
        sorted(&["-X", "-n", "-P", "--noconvert", "-o", "JobID,ReqMem"]),
        ["0", "512M", "1000M", "1024M", "1536M", "2048M"]
    );
    assert_eq!(
        sorted(&["-X", "-n", "-P", "--units=G", "-o", "JobID,ReqMem"]),
        ["0", "0.50G", "0.98G", "1G", "1.50G", "2G"]
    );
    assert_eq!(sacct_err(&["--units=x"]).stderr.lines().last().unwrap(), "sacct: fatal: Invalid unit type");
}

#[test]
fn sacct_lists_only_the_callers_jobs_unless_root_all_users_or_jobs() {
    let alice = pb::Job { user: "alice".into(), uid: 1001, account: "research".into(), ..running(2, "mine", NOW - 5) };
    let jobs = [running(1, "placeholder", NOW - 5), alice];
    let as_alice = Caller { name: "alice".into(), uid: 1001 };
    let ids = |caller: &Caller, list: &[&str]| {
        let mut list = list.to_vec();
        list.extend(["-X", "-n", "-P", "-o", "JobID"]);
        sacct_as(caller, &list, &Env::new(), &jobs).stdout
    };
    assert_eq!(ids(&as_alice, &[]), "2\n", "a non-root caller sees only its own jobs");
    assert_eq!(ids(&as_alice, &["-a"]), "1\n2\n");
    assert_eq!(ids(&as_alice, &["-u", "root"]), "1\n");
    assert_eq!(ids(&as_alice, &["--uid=0"]), "1\n");
    assert_eq!(ids(&as_alice, &["-u", "-1"]), "1\n2\n");
    assert_eq!(ids(&as_alice, &["-j", "1"]), "1\n", "-j switches to all users");
    assert_eq!(ids(&as_alice, &["-j", "1", "-u", "alice"]), "", "-j with -u keeps the user filter");
    assert_eq!(ids(&Caller::root(), &[]), "1\n2\n", "root sees everyone");
    assert_eq!(ids(&Caller::root(), &["--user=alice"]), "2\n");
    let error = sacct_as(&as_alice, &["-u", "nobody"], &Env::new(), &jobs);
    assert_eq!((error.stderr.as_str(), error.code), ("sacct: error: Invalid user id: nobody\n", 1));
}

/// The accounting query a command line sends at NOW: its window `[start, end)` (`None`: no
/// lower bound) and states. Which rows a window selects is the emulator's (the simulation's
/// `query` tests hold the same jobs and windows).
fn query(list: &[&str]) -> (Option<i64>, i64, Vec<i32>, Vec<u32>) {
    let options = sacct::parse(&args(list), &Env::new()).expect("parses");
    let request = sacct::request(&options, NOW).expect("a valid window").expect("a query");
    let seconds = |at: Option<Timestamp>| at.map(|at| at.seconds);
    (seconds(request.window_start), seconds(request.window_end).expect("an end"), request.states, request.job_ids)
}

#[test]
fn sacct_time_window_defaults_and_forms() {
    let day = 86_400;
    assert_eq!(
        query(&[]),
        (Some(MIDNIGHT), NOW + 1, vec![], vec![]),
        "default: since midnight, the current second included"
    );
    assert_eq!(query(&["-j", "1,2"]), (None, NOW + 1, vec![], vec![1, 2]), "-j: from the epoch");
    assert_eq!(query(&["-S", "2025-01-01"]), (Some(MIDNIGHT - day), NOW + 1, vec![], vec![]));
    assert_eq!(
        query(&["-S", "2025-01-01T00:00:00", "-E", "2025-01-01T23:30"]),
        (Some(MIDNIGHT - day), MIDNIGHT - 1800, vec![], vec![])
    );
    assert_eq!(query(&["--starttime=now-1days", "--endtime", "now"]).0, Some(NOW - day));
    assert_eq!(query(&["--starttime=now-1days", "--endtime", "now"]).1, NOW + 1, "an end at now includes that second");
    assert_eq!(
        query(&["-S", "0101", "-E", "01/01/25-23:30"]),
        query(&["-S", "2025-01-01T00:00:00", "-E", "2025-01-01T23:30"])
    );
    assert_eq!(query(&["-S", "midnight"]).0, Some(MIDNIGHT));
    let refused = |list: &[&str]| {
        let options = sacct::parse(&args(list), &Env::new()).expect("parses");
        sacct::request(&options, NOW).expect_err("refused")
    };
    let error = refused(&["-S", "2025-01-02", "-E", "2025-01-01"]);
    assert_eq!(
        (error.stderr.as_str(), error.code),
        ("sacct: error: Start time (2025-01-02T00:00:00) requested is after end time (2025-01-01T00:00:00).\n", 1)
    );
    assert_eq!(
        refused(&["-S", "yesterdayish"]).stderr,
        "sacct: error: Invalid time specification (pos=0): yesterdayish\n"
    );
}

#[test]
fn sacct_states_short_or_long_and_the_instant() {
    let (cancelled, completed, running) =
        (pb::JobState::Cancelled as i32, pb::JobState::Completed as i32, pb::JobState::Running as i32);
    assert_eq!(query(&["-s", "CA"]), (Some(NOW), NOW + 1, vec![cancelled], vec![]), "-s alone: at the current instant");
    assert_eq!(query(&["-s", "cancelled"]), query(&["-s", "CA"]));
    assert_eq!(query(&["--state=ca,CD"]).2, [cancelled, completed]);
    assert_eq!(query(&["-s", "CA", "-S", "midnight", "-E", "now"]), (Some(MIDNIGHT), NOW + 1, vec![cancelled], vec![]));
    assert_eq!(
        query(&["-s", "R", "-S", "now+1"]),
        (Some(NOW + 1), NOW + 2, vec![running], vec![]),
        "-S alone: end = start"
    );
    assert_eq!(query(&["-s", "CA", "-j", "2"]), (None, NOW + 1, vec![cancelled], vec![2]), "-j and -s: from the epoch");
    assert_eq!(sacct_err(&["-s", "bogus"]).code, 1);
}

#[test]
fn sacct_filters_by_name_partition_account_and_node() {
    let other = pb::Job {
        partition: "hpc-prod".into(),
        account: "research".into(),
        node_list: "slurm-cpu-3".into(),
        ..running(2, "train", NOW - 5)
    };
    let jobs = [running(1, "infer", NOW - 5), other];
    let ids = |list: &[&str]| {
        let mut list = list.to_vec();
        list.extend(["-X", "-n", "-P", "-o", "JobID"]);
        sacct(&list, &jobs)
    };
    assert_eq!(ids(&["--name=train"]), "2\n");
    assert_eq!(ids(&["-r", "cpu"]), "1\n");
    assert_eq!(ids(&["--partition", "hpc-prod,cpu"]), "1\n2\n");
    assert_eq!(ids(&["-A", "research"]), "2\n");
    assert_eq!(ids(&["-N", "slurm-cpu-[2-3]"]), "2\n");
}

#[test]
fn sacct_timelimit_exit_codes_and_cancelled_by() {
    let limited = pb::Job { time_limit_seconds: Some(90_000), ..running(1, "a", NOW - 5) };
    let hour = pb::Job { time_limit_seconds: Some(3600), exit_code: 130, ..running(2, "b", NOW - 5) };
    let jobs =
        [limited, hour, running(3, "c", NOW - 5), cancelled(4, "d", NOW - 9, NOW - 1, 1001), pending(5, "e", NOW - 3)];
    // Without a limit of its own a job shows its partition's once it has nodes (here always
    // UNLIMITED), `Partition_Limit` before.
    assert_eq!(
        sacct(&["-X", "-n", "-P", "-o", "JobID,Timelimit,TimelimitRaw,ExitCode,State"], &jobs),
        "4|UNLIMITED|UNLIMITED|0:0|CANCELLED by 1001\n\
         1|1-01:00:00|1500|0:0|RUNNING\n\
         2|01:00:00|60|2:0|RUNNING\n\
         3|UNLIMITED|UNLIMITED|0:0|RUNNING\n\
         5|Partition_Limit|Partition_Limit|0:0|PENDING\n"
    );
}

#[test]
fn sacct_slurm_time_format() {
    let jobs = [running(1, "a", NOW - 3600)];
    let out = |value: &str| {
        sacct_as(&Caller::root(), &["-X", "-n", "-P", "-o", "Start"], &env(&[("SLURM_TIME_FORMAT", value)]), &jobs)
            .stdout
    };
    assert_eq!(out("standard"), "2025-01-02T02:04:05\n");
    assert_eq!(out("%d/%m %H:%M"), "02/01 02:04\n");
    assert_eq!(out("relative"), "02:04:05\n");
    let invalid =
        sacct_as(&Caller::root(), &["-X", "-n", "-P", "-o", "Start"], &env(&[("SLURM_TIME_FORMAT", "junk")]), &jobs);
    assert_eq!(
        (invalid.stdout.as_str(), invalid.stderr.as_str()),
        ("2025-01-02T02:04:05\n", "sacct: error: invalid SLURM_TIME_FORMAT = junk\n")
    );
}

#[test]
fn sacct_tres_and_accounting_fields() {
    let gpu = pb::Job { req_gpus: 4, gres_type: "h100".into(), req_mem_mb: 1536, ..running(1, "g", NOW - 10) };
    let out = sacct(&["-X", "-n", "-P", "-o", "ReqTRES,AllocTRES,NNodes,ReqCPUS,User,UID,Group,Priority,QOS"], &[gpu]);
    assert_eq!(
        out,
        "billing=2,cpu=2,gres/gpu=4,gres/gpu:h100=4,mem=1.50G,node=1|billing=2,cpu=2,gres/gpu=4,gres/gpu:h100=4,mem=1.50G,node=1|1|2|root|0|root|100|normal\n"
    );
    // A pending job has no allocation: AllocCPUS 0, AllocTRES empty, NodeList None assigned.
    let out = sacct(&["-X", "-n", "-P", "-o", "AllocCPUS,AllocTRES,NodeList"], &[pending(2, "p", NOW - 10)]);
    assert_eq!(out, "0||None assigned\n");
}

#[test]
fn sacct_unknown_arguments_and_bad_jobs() {
    let error = sacct_err(&["extra"]);
    assert_eq!(error.stderr, "sacct: error: Unknown arguments:\nsacct: error:  extra\n");
    assert_eq!(sacct_err(&["-j", "abc"]).stderr, "sacct: fatal: Bad job/step specified: abc\n");
    assert_eq!(sacct_err(&["--bogus"]).stderr, "sacct: unrecognized option '--bogus'\n");
}

// ------------------------------------------------------------------------------------------------
// squeue
// ------------------------------------------------------------------------------------------------

fn queue(job: pb::Job) -> pb::Job {
    pb::Job { source: pb::JobSource::Queue as i32, ..job }
}

fn squeue(list: &[&str], environment: &Env, jobs: &[pb::Job]) -> super::Output {
    match squeue::parse(&args(list), environment) {
        Ok(options) => squeue::render(&options, jobs, NOW, 0, &users(), "slurm", environment),
        Err(output) => output,
    }
}

#[test]
fn squeue_default_format_reasons_and_completing() {
    let completing = pb::Job { completing: true, ..queue(cancelled(44, "tenant/sandbox-7f3c9a", NOW - 3700, NOW, 0)) };
    let jobs = [queue(running(42, "train", NOW - 65)), queue(pending(43, "waits", NOW - 5)), completing];
    let out = squeue(&[], &Env::new(), &jobs);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let header = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n";
    // Sorted by the compact state as text: CG before PD before R.
    let rows = [
        // The name is cut at 8 without `+`.
        format!(
            "{:>18} {:>9} {:>8} {:>8} {:>2} {:>10} {:>6} {}\n",
            44, "cpu", "tenant/s", "root", "CG", "1:01:40", 1, "slurm-cpu-0"
        ),
        format!(
            "{:>18} {:>9} {:>8} {:>8} {:>2} {:>10} {:>6} {}\n",
            43, "cpu", "waits", "root", "PD", "0:00", 1, "(Resources)"
        ),
        format!(
            "{:>18} {:>9} {:>8} {:>8} {:>2} {:>10} {:>6} {}\n",
            42, "cpu", "train", "root", "R", "1:05", 1, "slurm-cpu-0"
        ),
    ];
    assert_eq!(out.stdout, format!("{header}{}", rows.concat()));
}

#[test]
fn squeue_formats_long_view_and_filters() {
    let alice = pb::Job { user: "alice".into(), uid: 1001, ..queue(running(2, "a", NOW - 90_061)) };
    let jobs = [queue(running(1, "r", NOW - 5)), alice, queue(pending(3, "p", NOW))];
    // No limit of its own: the partition's (UNLIMITED), pending or not, as the controller packs
    // it; the word is cut to a narrow column, a limit's time never is.
    assert_eq!(
        squeue(&["-h", "-o", "%i %l %L"], &Env::new(), &jobs).stdout,
        "3 UNLIMITED UNLIMITED\n1 UNLIMITED UNLIMITED\n2 UNLIMITED UNLIMITED\n"
    );
    assert_eq!(squeue(&["-h", "-o", "%i %.3l %.3L"], &Env::new(), &jobs).stdout, "3 UNL UNL\n1 UNL UNL\n2 UNL UNL\n");
    let limited = [queue(pb::Job { time_limit_seconds: Some(3600), ..running(4, "t", NOW - 5) })];
    assert_eq!(squeue(&["-h", "-o", "%i %.3l %.3L"], &Env::new(), &limited).stdout, "4 1:00:00 59:55\n");
    let out = squeue(&["-h", "-o", "%i|%.5u|%6j|%T|%M|%2P"], &Env::new(), &jobs).stdout;
    assert_eq!(
        out,
        "3| root|p     |PENDING|0:00|cp\n1| root|r     |RUNNING|0:05|cp\n2|alice|a     |RUNNING|1-01:01:01|cp\n"
    );
    // squeue has no `-` flag: `%-6j` is an invalid specification `-`, printed as written.
    let invalid = squeue(&["-h", "-o", "%i %-6j"], &Env::new(), &jobs[..1]);
    assert_eq!(invalid.stdout, "1 %-6j\n");
    assert_eq!(invalid.stderr, "squeue: error: Invalid job format specification: -\n");
    assert_eq!(squeue(&["-h", "-o", "%i %Z"], &Env::new(), &jobs[..1]).stdout, "1 /\n", "%Z: the work dir");
    assert_eq!(squeue(&["-h", "-u", "alice", "-o", "%i"], &Env::new(), &jobs).stdout, "2\n");
    assert_eq!(squeue(&["-h", "-t", "pd", "-o", "%i"], &Env::new(), &jobs).stdout, "3\n");
    assert_eq!(squeue(&["-h", "-t", "R", "--jobs=1,3", "-o", "%i"], &Env::new(), &jobs).stdout, "1\n");
    assert_eq!(squeue(&["-h", "-j", "2", "-o", "%i"], &Env::new(), &jobs).stdout, "2\n");
    let formatted = env(&[("SQUEUE_FORMAT", "%.4i %u")]);
    assert_eq!(squeue(&["-t", "R"], &formatted, &jobs).stdout, "JOBI USER\n   1 root\n   2 alice\n");
    let long = squeue(&["-l", "-t", "PD"], &Env::new(), &jobs).stdout;
    let row = |values: [&str; 9]| {
        format!(
            "{:>18} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>6} {}\n",
            values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7], values[8]
        )
    };
    assert_eq!(
        long,
        format!(
            "Thu Jan 02 03:04:05 2025\n{}{}",
            row(["JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "TIME_LIMI", "NODES", "NODELIST(REASON)"]),
            row(["3", "cpu", "p", "root", "PENDING", "0:00", "UNLIMITED", "1", "(Resources)"])
        )
    );
    let unknown = squeue(&["-j", "99"], &Env::new(), &jobs);
    assert_eq!((unknown.stderr.as_str(), unknown.code), ("slurm_load_jobs error: Invalid job id specified\n", 1));
    assert_eq!(squeue(&["-u", "nobody"], &Env::new(), &jobs).stderr, "squeue: error: Invalid user: nobody\n");
    assert_eq!(
        squeue(&["-z"], &Env::new(), &jobs).stderr,
        "squeue: invalid option -- 'z'\nTry \"squeue --help\" for more information\n"
    );
}

// ------------------------------------------------------------------------------------------------
// sinfo
// ------------------------------------------------------------------------------------------------

fn node(name: &str, state: pb::SlurmNodeState, partitions: &[&str]) -> pb::SlurmNode {
    pb::SlurmNode {
        name: name.into(),
        cpus: 16,
        real_memory_mb: 65536,
        state: state as i32,
        partitions: partitions.iter().map(|p| (*p).to_owned()).collect(),
        ..Default::default()
    }
}

fn partition(name: &str, default: bool, nodes: &[&str]) -> pb::Partition {
    pb::Partition {
        name: name.into(),
        default,
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        over_subscribe: "NO".into(),
        state: pb::PartitionState::Up as i32,
        ..Default::default()
    }
}

#[test]
fn sinfo_default_view_marks_the_default_partition_and_drained_nodes() {
    let names = ["slurm-cpu-0", "slurm-cpu-1", "slurm-cpu-2", "slurm-cpu-3"];
    let nodes = [
        node(names[0], pb::SlurmNodeState::Mixed, &["cpu", "hpc-prod"]),
        node(names[1], pb::SlurmNodeState::Idle, &["cpu", "hpc-prod"]),
        node(names[2], pb::SlurmNodeState::Draining, &["cpu", "hpc-prod"]),
        node(names[3], pb::SlurmNodeState::Idle, &["cpu", "hpc-prod"]),
    ];
    let partitions = [partition("cpu", true, &names), partition("hpc-prod", false, &names[..2])];
    let render = |list: &[&str]| {
        sinfo::render(&sinfo::parse(&args(list), &Env::new()).unwrap(), &partitions, &nodes, NOW, &Env::new(), None)
            .stdout
    };
    assert_eq!(
        render(&[]),
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
         cpu*         up   infinite      1   drng slurm-cpu-2\n\
         cpu*         up   infinite      1    mix slurm-cpu-0\n\
         cpu*         up   infinite      2   idle slurm-cpu-[1,3]\n\
         hpc-prod     up   infinite      1    mix slurm-cpu-0\n\
         hpc-prod     up   infinite      1   idle slurm-cpu-1\n"
    );
    assert_eq!(
        render(&["-h", "-p", "hpc-prod"]),
        "hpc-prod     up   infinite      1    mix slurm-cpu-0\nhpc-prod     up   infinite      1   idle slurm-cpu-1\n"
    );
    assert_eq!(
        render(&["-N", "-p", "hpc-prod"]),
        "NODELIST     NODES PARTITION STATE \nslurm-cpu-0      1  hpc-prod mix   \nslurm-cpu-1      1  hpc-prod idle  \n"
    );
    // `-s`: one space before NODELIST; `-l`: GROUPS `all`; `-N -l`: CPUS left-justified.
    assert_eq!(
        render(&["-s"]),
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n\
         cpu*         up   infinite          0/4/0/4 slurm-cpu-[0-3]\n\
         hpc-prod     up   infinite          0/2/0/2 slurm-cpu-[0-1]\n"
    );
    assert_eq!(
        render(&["-l", "-p", "hpc-prod"]),
        "Thu Jan 02 03:04:05 2025\n\
         PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE RESERVATION NODELIST\n\
         hpc-prod     up   infinite 1-infinite   no       NO        all      1       mixed             slurm-cpu-0\n\
         hpc-prod     up   infinite 1-infinite   no       NO        all      1        idle             slurm-cpu-1\n"
    );
    assert_eq!(
        render(&["-N", "-l", "-p", "hpc-prod"]),
        "Thu Jan 02 03:04:05 2025\n\
         NODELIST     NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON              \n\
         slurm-cpu-0      1  hpc-prod       mixed 16     1:16:1  65536        0      1   (null) none                \n\
         slurm-cpu-1      1  hpc-prod        idle 16     1:16:1  65536        0      1   (null) none                \n"
    );
    // No state field: a partition's nodes share one line.
    assert_eq!(
        render(&["-o", "%P %D %N"]),
        "PARTITION NODES NODELIST\ncpu* 4 slurm-cpu-[0-3]\nhpc-prod 2 slurm-cpu-[0-1]\n"
    );
    // A per-node field that differs still splits them.
    assert_eq!(
        render(&["-o", "%P %D %t", "-p", "hpc-prod"]),
        "PARTITION NODES STATE\nhpc-prod 1 mix\nhpc-prod 1 idle\n"
    );
    // %e (FreeMem) matches nodes, as MATCH_FLAG_FREE_MEM does: RealMemory - AllocMem.
    let mut busy = nodes.clone();
    busy[0].alloc_memory_mb = 4096;
    let out = sinfo::render(
        &sinfo::parse(&args(&["-o", "%P %D %e %N", "-p", "hpc-prod"]), &Env::new()).unwrap(),
        &partitions,
        &busy,
        NOW,
        &Env::new(),
        None,
    );
    assert_eq!(
        out.stdout,
        "PARTITION NODES FREE_MEM NODELIST\nhpc-prod 1 61440 slurm-cpu-0\nhpc-prod 1 65536 slurm-cpu-1\n"
    );
    // A state filter keeps every partition: one without a matching node shows NODES 0 and STATE
    // n/a (`_build_sinfo_data`'s entry per partition), also in -s and -l; not in -N, nor in a
    // format without a partition field.
    assert_eq!(
        render(&["-t", "drain"]),
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
         cpu*         up   infinite      1   drng slurm-cpu-2\n\
         hpc-prod     up   infinite      0    n/a \n"
    );
    assert_eq!(
        render(&["-h", "-s", "-t", "drain", "-p", "hpc-prod"]),
        "hpc-prod     up   infinite          0/0/0/0 \n"
    );
    assert_eq!(
        render(&["-h", "-l", "-t", "drain", "-p", "hpc-prod"]),
        "Thu Jan 02 03:04:05 2025\n\
         hpc-prod     up   infinite 1-infinite   no       NO        all      0         n/a             \n"
    );
    assert_eq!(
        render(&["-h", "-t", "drain", "-p", "hpc-prod", "-o", "%P|%c|%C|%m|%z|%E|%G|%f|%w|%d|%F|%H"]),
        "hpc-prod|0|0/0/0/0|0|0:0:0|none|(null)|(null)|0|0|0/0/0/0|Unknown\n"
    );
    assert_eq!(render(&["-h", "-N", "-t", "drain", "-p", "hpc-prod"]), "");
    assert_eq!(render(&["-h", "-t", "drain", "-o", "%D %N"]), "1 slurm-cpu-2\n");
    // A letter sinfo does not know: Slurm's error first, the token printed as written.
    let invalid = sinfo::render(
        &sinfo::parse(&args(&["-h", "-o", "%P %y"]), &Env::new()).unwrap(),
        &partitions[1..],
        &nodes,
        NOW,
        &Env::new(),
        None,
    );
    assert_eq!(invalid.stderr, "Invalid node format specification: y\n");
    assert_eq!(invalid.stdout, "hpc-prod %y\n");
    let drained = [node(names[0], pb::SlurmNodeState::Drained, &["cpu"])];
    let out = sinfo::render(
        &sinfo::parse(&args(&["-h"]), &Env::new()).unwrap(),
        &partitions[..1],
        &drained,
        NOW,
        &Env::new(),
        None,
    )
    .stdout;
    assert_eq!(out, "cpu*         up   infinite      1  drain slurm-cpu-0\n");
}

// ------------------------------------------------------------------------------------------------
// scontrol
// ------------------------------------------------------------------------------------------------

#[test]
fn scontrol_show_job_lines_and_one_liner() {
    let job = pb::Job {
        extra: "sandbox: started".into(),
        comment: "c".into(),
        over_subscribe: pb::OverSubscribe::No as i32,
        alloc_node: "slurm-scheduler-7d9f".into(),
        ..queue(running(1000, "tenant/sandbox-1", NOW - 5))
    };
    let render = |list: &[&str], jobs: &[pb::Job]| {
        let answer = scontrol::Answer { jobs: jobs.to_vec(), now: NOW, ..Default::default() };
        scontrol::render(&scontrol::parse(&args(list)).unwrap(), &answer, &Env::new())
    };
    let out = render(&["show", "job", "1000"], std::slice::from_ref(&job));
    // Slurm 25.05 `_sprint_job_info`: Comment and Extra end in a space, the record in an
    // indented empty line, then an empty line.
    let expected = "JobId=1000 JobName=tenant/sandbox-1\n\
        \x20  UserId=root(0) GroupId=root(0) MCS_label=N/A\n\
        \x20  Priority=100 Nice=0 Account=root QOS=normal\n\
        \x20  JobState=RUNNING Reason=None Dependency=(null)\n\
        \x20  Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n\
        \x20  RunTime=00:00:05 TimeLimit=UNLIMITED TimeMin=N/A\n\
        \x20  SubmitTime=2025-01-02T03:04:00 EligibleTime=2025-01-02T03:04:00\n\
        \x20  AccrueTime=2025-01-02T03:04:00\n\
        \x20  StartTime=2025-01-02T03:04:00 EndTime=Unknown Deadline=N/A\n\
        \x20  SuspendTime=None SecsPreSuspend=0 LastSchedEval=2025-01-02T03:04:00 Scheduler=Main\n\
        \x20  Partition=cpu AllocNode:Sid=slurm-scheduler-7d9f:0\n\
        \x20  ReqNodeList=(null) ExcNodeList=(null)\n\
        \x20  NodeList=slurm-cpu-0\n\
        \x20  BatchHost=slurm-cpu-0\n\
        \x20  NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*\n\
        \x20  ReqTRES=cpu=2,mem=512M,node=1,billing=2\n\
        \x20  AllocTRES=cpu=2,mem=512M,node=1,billing=2\n\
        \x20  Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n\
        \x20  MinCPUsNode=2 MinMemoryNode=512M MinTmpDiskNode=0\n\
        \x20  Features=(null) DelayBoot=00:00:00\n\
        \x20  OverSubscribe=NO Contiguous=0 Licenses=(null) LicensesAlloc=(null) Network=(null)\n\
        \x20  Command=(null)\n\
        \x20  WorkDir=/\n\
        \x20  Comment=c \n\
        \x20  Extra=sandbox: started \n\
        \x20  StdErr=//slurm-1000.out\n\
        \x20  StdIn=/dev/null\n\
        \x20  StdOut=//slurm-1000.out\n\
        \x20  \n\
        \n";
    assert_eq!(out.stdout, expected);
    // -o: one line, each key followed by a space, the last one too.
    let one = render(&["-o", "show", "job", "1000"], std::slice::from_ref(&job)).stdout;
    let body = expected.strip_suffix("\n   \n\n").expect("the closing lines");
    assert_eq!(one, body.replace("\n   ", " ") + " \n");
    assert!(one.ends_with("StdOut=//slurm-1000.out \n"), "{one:?}");
    let missing = render(&["show", "job", "999"], &[job]);
    assert_eq!((missing.stderr.as_str(), missing.code), ("slurm_load_jobs error: Invalid job id specified\n", 1));
    // Pending: no nodes (`NodeList=` empty), the scheduler's estimate as StartTime and, with a
    // limit, EndTime; without an estimate both Unknown.
    let estimated = pb::Job {
        estimated_start_time: ts(NOW + 3600),
        time_limit_seconds: Some(600),
        ..queue(pending(5, "p", NOW - 5))
    };
    let out = render(&["show", "job", "5"], &[estimated]).stdout;
    assert!(out.contains("   JobState=PENDING Reason=Resources Dependency=(null)\n"), "{out}");
    assert!(out.contains("   StartTime=2025-01-02T04:04:05 EndTime=2025-01-02T04:14:05 Deadline=N/A\n"), "{out}");
    assert!(out.contains("   NodeList=\n   NumNodes=1"), "{out}");
    assert!(out.contains("   AllocTRES=(null)\n"), "{out}");
    let out = render(&["show", "job", "6"], &[queue(pending(6, "p", NOW - 5))]).stdout;
    assert!(out.contains("   StartTime=Unknown EndTime=Unknown Deadline=N/A\n"), "{out}");
    // Pending without a limit of its own: the partition's, as the controller packs it.
    assert!(out.contains(" TimeLimit=UNLIMITED TimeMin=N/A\n"), "{out}");
    // A running job with a limit of its own ends when it runs out.
    let limited = pb::Job { time_limit_seconds: Some(120), ..queue(running(7, "r", NOW - 5)) };
    let out = render(&["show", "job", "7"], &[limited]).stdout;
    assert!(out.contains("   StartTime=2025-01-02T03:04:00 EndTime=2025-01-02T03:06:00 Deadline=N/A\n"), "{out}");
    // A timed-out batch job as the controller keeps it: why it ended, its script's SIGTERM, and
    // the script's path as Command.
    let timed_out = pb::Job {
        state: pb::JobState::Timeout as i32,
        reason: "TimeLimit".into(),
        exit_signal: 15,
        end_time: ts(NOW),
        kind: pb::JobKind::Batch as i32,
        command: "/home/root/jobs/train.sh".into(),
        ..queue(running(8, "train", NOW - 60))
    };
    let out = render(&["show", "job", "8"], &[timed_out]).stdout;
    assert!(out.contains("   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)\n"), "{out}");
    assert!(out.contains(" ExitCode=0:15\n"), "{out}");
    assert!(out.contains("   Command=/home/root/jobs/train.sh\n"), "{out}");
}

#[test]
fn scontrol_and_scancel_refuse_bad_input() {
    assert_eq!(scontrol::parse(&args(&["show", "job", "x"])).unwrap_err().stderr, "Invalid job id specified: x\n");
    assert_eq!(scontrol::parse(&args(&["shw"])).unwrap_err().stderr, "invalid keyword: shw\n");
    assert_eq!(
        scontrol::parse(&args(&["show", "bogus"])).unwrap_err().stderr,
        "invalid entity:bogus for keyword:show \n",
        "Slurm's trailing space"
    );
    assert_eq!(scancel::parse(&args(&[])).unwrap_err().stderr, "scancel: error: No job identification provided\n");
    assert_eq!(scancel::parse(&args(&["12x"])).unwrap_err().stderr, "scancel: error: Invalid job id 12x\n");
    assert_eq!(
        scancel::kill_error(7, cwsandbox_client::Code::NotFound),
        "scancel: error: Kill job error on job id 7: Invalid job id specified"
    );
    let options = scancel::parse(&args(&["-u", "alice", "-t", "PD"])).unwrap();
    let alice_pending = pb::Job { uid: 1001, user: "alice".into(), ..queue(pending(9, "p", NOW)) };
    let jobs = [queue(running(8, "r", NOW)), alice_pending];
    assert_eq!(scancel::select(&options, &jobs, &Caller::root(), &users()).unwrap(), [9]);
}

#[test]
fn sacct_database_fields_read_as_slurmdbd_stores_them() {
    let mut waiting_on_priority = pending(6, "f", NOW - 2);
    waiting_on_priority.reason = "Priority".into();
    let jobs = [cancelled(4, "d", NOW - 9, NOW - 1, 1001), pending(5, "e", NOW - 3), waiting_on_priority];
    // The extern step carries the job's billing; the job line's CPU frequencies are Unknown,
    // a step's 0 (as its energy); the energy of a job that got an allocation is blank.
    let fields = "JobID,AllocTRES,ReqCPUFreq,ReqCPUFreqGov,AveCPUFreq,ConsumedEnergy,ConsumedEnergyRaw";
    assert_eq!(
        sacct(&["-n", "-P", "-j", "4", "-o", fields], &jobs),
        "4|billing=2,cpu=2,mem=512M,node=1|Unknown|Unknown|||\n\
         4.batch|cpu=2,mem=512M,node=1|0|0|0|0|0\n\
         4.extern|billing=2,cpu=2,mem=512M,node=1|0|0|0|0|0\n"
    );
    // A job never allocated has no TRES: its energy reads 0.
    assert_eq!(
        sacct(&["-n", "-P", "-j", "5", "-o", "JobID,ConsumedEnergy,ConsumedEnergyRaw,ReqCPUFreqMin"], &jobs),
        "5|0|0|Unknown\n"
    );
    // The database keeps no reason for a job waiting on resources or priority.
    assert_eq!(sacct(&["-X", "-n", "-P", "-j", "5,6", "-o", "JobID,Reason"], &jobs), "5|None\n6|None\n");
}

#[test]
fn squeue_lists_ended_jobs_the_controller_keeps_only_when_asked() {
    // Queue rows carry the controller's reason: why the job ended.
    let ended = |id: u32, state: pb::JobState, reason: &str| {
        queue(pb::Job {
            state: state as i32,
            reason: reason.into(),
            end_time: ts(NOW - 1),
            ..running(id, "x", NOW - 60)
        })
    };
    let jobs = [
        queue(running(1, "r", NOW - 5)),
        ended(2, pb::JobState::Failed, "NonZeroExitCode"),
        ended(3, pb::JobState::Timeout, "TimeLimit"),
        ended(4, pb::JobState::Completed, "None"),
        ended(5, pb::JobState::Cancelled, "None"),
        queue(pending(6, "p", NOW - 5)),
        // Cancelled while pending: it keeps the reason it waited for, and has no node.
        pb::Job { node_list: String::new(), ..ended(7, pb::JobState::Cancelled, "Priority") },
        ended(8, pb::JobState::NodeFail, "NodeDown"),
    ];
    assert_eq!(squeue(&["-h", "-o", "%i %t %R"], &Env::new(), &jobs).stdout, "6 PD (Resources)\n1 R slurm-cpu-0\n");
    assert_eq!(
        squeue(&["-h", "-t", "all", "-o", "%i %t %R"], &Env::new(), &jobs).stdout,
        // squeue's default sort: partition, then the compact state as text (CA, CD, F, NF, PD,
        // R, TO), then priority; `%R` gives the reason of a pending, failed or timed-out job.
        "5 CA slurm-cpu-0\n7 CA \n4 CD slurm-cpu-0\n2 F (NonZeroExitCode)\n8 NF slurm-cpu-0\n\
         6 PD (Resources)\n1 R slurm-cpu-0\n3 TO (TimeLimit)\n"
    );
    let rows = [
        (5, "CANCELLED", "None"),
        (7, "CANCELLED", "Priority"),
        (4, "COMPLETED", "None"),
        (2, "FAILED", "NonZeroExitCode"),
        (8, "NODE_FAIL", "NodeDown"),
        (6, "PENDING", "Resources"),
        (1, "RUNNING", "None"),
        (3, "TIMEOUT", "TimeLimit"),
    ];
    assert_eq!(
        squeue(&["-h", "-t", "all", "-O", "JobID:.4,State,Reason:.16"], &Env::new(), &jobs).stdout,
        rows.iter().map(|(id, state, reason)| format!("{id:>4}{state:<20}{reason:>16}\n")).collect::<String>()
    );
    assert_eq!(squeue(&["-h", "-t", "F", "-o", "%i"], &Env::new(), &jobs).stdout, "2\n");
    // Flags no emulated job carries are valid states that match nothing; `all` only alone.
    assert_eq!(squeue(&["-h", "-t", "stage_out,SE", "-o", "%i"], &Env::new(), &jobs).stdout, "");
    assert_eq!(squeue(&["-h", "-t", "ALL", "-o", "%i"], &Env::new(), &jobs).stdout.lines().count(), 8);
    assert_eq!(squeue(&["-h", "-t", "R,all"], &Env::new(), &jobs).code, 1);
}

#[test]
fn squeue_lists_the_valid_states_after_an_invalid_one() {
    let out = squeue(&["-t", "R,bogus"], &Env::new(), &[]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    // 25.05's `_parse_state`: the list lowercased, then an empty line (its "%s\n" and error()'s).
    assert_eq!(
        out.stderr,
        "squeue: error: Invalid job state specified: bogus\n\
         squeue: error: Valid job states include: pending,running,suspended,completed,cancelled,failed,timeout,\
         node_fail,preempted,boot_fail,deadline,out_of_memory,completing,configuring,resizing,resv_del_hold,\
         requeued,requeue_fed,requeue_hold,revoked,signaling,special_exit,stage_out,stopped\n\n"
    );
}

#[test]
fn scontrol_show_node_and_partition_carry_every_key_with_its_trailing_spaces() {
    let drained = pb::SlurmNode {
        alloc_cpus: 2,
        alloc_memory_mb: 512,
        drain_reason: "disk is full".into(),
        drain_user: "alice".into(),
        drain_uid: Some(1001),
        drain_time: ts(NOW - 60),
        boot_time: ts(MIDNIGHT),
        last_busy_time: ts(MIDNIGHT + 60),
        os: "Linux 6.8.0-45-generic #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024".into(),
        job_ids: vec![1000],
        ..node("slurm-cpu-0", pb::SlurmNodeState::Draining, &["cpu", "hpc-prod"])
    };
    let idle = pb::SlurmNode {
        alloc_cpus: 0,
        boot_time: ts(MIDNIGHT),
        last_busy_time: ts(MIDNIGHT),
        ..node("slurm-cpu-1", pb::SlurmNodeState::Idle, &["cpu"])
    };
    let partitions = [partition("cpu", true, &["slurm-cpu-0", "slurm-cpu-1"])];
    let partitions = [pb::Partition { total_cpus: 32, priority_tier: 2, ..partitions[0].clone() }];
    let answer = scontrol::Answer {
        nodes: vec![drained, idle],
        partitions: partitions.to_vec(),
        now: NOW,
        ..Default::default()
    };
    let render = |list: &[&str]| scontrol::render(&scontrol::parse(&args(list)).unwrap(), &answer, &Env::new());
    assert_eq!(
        render(&["show", "node", "slurm-cpu-0"]).stdout,
        "NodeName=slurm-cpu-0 Arch=x86_64 CoresPerSocket=16 \n\
         \x20  CPUAlloc=2 CPUEfctv=16 CPUTot=16 CPULoad=0.00\n\
         \x20  AvailableFeatures=(null)\n\
         \x20  ActiveFeatures=(null)\n\
         \x20  Gres=(null)\n\
         \x20  NodeAddr=slurm-cpu-0 NodeHostName=slurm-cpu-0 Version=25.05.3\n\
         \x20  OS=Linux 6.8.0-45-generic #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024 \n\
         \x20  RealMemory=65536 AllocMem=512 FreeMem=65024 Sockets=1 Boards=1\n\
         \x20  State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n\
         \x20  Partitions=cpu,hpc-prod \n\
         \x20  BootTime=2025-01-02T00:00:00 SlurmdStartTime=2025-01-02T00:00:00\n\
         \x20  LastBusyTime=2025-01-02T00:01:00 ResumeAfterTime=None\n\
         \x20  CfgTRES=cpu=16,mem=64G,billing=16\n\
         \x20  AllocTRES=cpu=2,mem=512M\n\
         \x20  CurrentWatts=0 AveWatts=0\n\
         \x20  Reason=disk is full [alice@2025-01-02T03:03:05]\n\
         \n"
    );
    // An idle node allocates nothing (`AllocTRES=` empty) and has no Reason line; -o keeps the
    // spaces Slurm writes after NodeName's line and Partitions. A count of zero is left out.
    let cpus_only = pb::SlurmNode { alloc_cpus: 4, ..answer.nodes[1].clone() };
    let out = scontrol::render(
        &scontrol::parse(&args(&["show", "node"])).unwrap(),
        &scontrol::Answer { nodes: vec![cpus_only], ..answer.clone() },
        &Env::new(),
    );
    assert!(out.stdout.contains("\n   AllocTRES=cpu=4\n"), "{}", out.stdout);
    assert_eq!(
        render(&["-o", "show", "node", "slurm-cpu-1"]).stdout,
        "NodeName=slurm-cpu-1 Arch=x86_64 CoresPerSocket=16  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.00 \
         AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=slurm-cpu-1 NodeHostName=slurm-cpu-1 \
         Version=25.05.3 RealMemory=65536 AllocMem=0 FreeMem=65536 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 \
         TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu  BootTime=2025-01-02T00:00:00 \
         SlurmdStartTime=2025-01-02T00:00:00 LastBusyTime=2025-01-02T00:00:00 ResumeAfterTime=None \
         CfgTRES=cpu=16,mem=64G,billing=16 AllocTRES= CurrentWatts=0 AveWatts=0\n"
    );
    assert_eq!(
        render(&["show", "partition"]).stdout,
        "PartitionName=cpu\n\
         \x20  AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n\
         \x20  AllocNodes=ALL Default=YES QoS=N/A\n\
         \x20  DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO ExclusiveTopo=NO GraceTime=0 Hidden=NO\n\
         \x20  MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED MaxCPUsPerSocket=UNLIMITED\n\
         \x20  Nodes=slurm-cpu-[0-1]\n\
         \x20  PriorityJobFactor=1 PriorityTier=2 RootOnly=NO ReqResv=NO OverSubscribe=NO\n\
         \x20  OverTimeLimit=NONE PreemptMode=OFF\n\
         \x20  State=UP TotalCPUs=32 TotalNodes=2 SelectTypeParameters=NONE\n\
         \x20  JobDefaults=(null)\n\
         \x20  DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n\
         \x20  TRES=cpu=32,mem=128G,node=2,billing=32\n\
         \n"
    );
    // OverSubscribe=YES carries Slurm's default job count.
    let shared = scontrol::Answer {
        partitions: vec![pb::Partition { over_subscribe: "YES".into(), ..partitions[0].clone() }],
        ..answer.clone()
    };
    let out = scontrol::render(&scontrol::parse(&args(&["show", "partition"])).unwrap(), &shared, &Env::new());
    assert!(out.stdout.contains(" OverSubscribe=YES:4\n"), "{}", out.stdout);
    // `p` alone is not a partition (Slurm wants two letters), `pa` is.
    assert!(scontrol::parse(&args(&["show", "p"])).is_err());
    assert!(matches!(scontrol::parse(&args(&["show", "pa"])).unwrap().request, scontrol::Request::Partitions(None)));
}

#[test]
fn scontrol_show_config_prints_the_values_and_slurms_defaults() {
    let config = pb::SlurmConfig {
        cluster_name: "slurm".into(),
        slurmctld_host: "slurm-controller-0".into(),
        kill_wait_seconds: 60,
        min_job_age_seconds: 300,
        prolog_flags: "contain,Alloc".into(),
        private_data: "jobs".into(),
        first_job_id: 1000,
        next_job_id: 1042,
        boot_time: ts(MIDNIGHT),
        preempt_type: String::new(),
        preempt_mode: "OFF".into(),
        node_count: 4,
    };
    let answer = scontrol::Answer { config, now: NOW, ..Default::default() };
    let out = scontrol::render(&scontrol::parse(&args(&["show", "config"])).unwrap(), &answer, &Env::new());
    assert_eq!(out.code, 0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "Configuration data as of 2025-01-02T00:00:00");
    assert_eq!(lines[1], "AccountingStorageBackupHost = (null)", "a key longer than 23 keeps one space");
    for line in [
        "BOOT_TIME               = 2025-01-02T00:00:00",
        "ClusterName             = slurm",
        "FirstJobId              = 1000",
        "KillWait                = 60 sec",
        "MaxNodeCount            = 4",
        "MinJobAge               = 300 sec",
        "NEXT_JOB_ID             = 1042",
        "PreemptMode             = OFF",
        "PreemptType             = (null)",
        "PrivateData             = jobs",
        "PrologFlags             = Alloc,Contain",
        "SlurmctldHost[0]        = slurm-controller-0",
        "SLURM_VERSION           = 25.05.3",
        // Defaults 25.05 prints for keys the emulator has no value for.
        "AllowSpecResourcesUsage = no",
        "PriorityType            = priority/multifactor",
        "TreeWidth               = 16",
        "X11Parameters           = (null)",
    ] {
        assert!(lines.contains(&line), "{line:?} missing from\n{}", out.stdout);
    }
    assert!(
        out.stdout.ends_with("X11Parameters           = (null)\n\nSlurmctld(primary) at slurm-controller-0 is UP\n")
    );
    // 25.05 dropped keys 22.05 printed; Prolog/Epilog print only when set.
    for gone in ["CoreSpecPlugin ", "ExtSensorsType ", "LaunchType ", "RoutePlugin ", "Prolog ", "Epilog "] {
        assert!(!lines.iter().any(|line| line.starts_with(gone)), "{gone} is not a 25.05 key");
    }
    // Without PrivateData or PrologFlags.
    let bare = scontrol::Answer {
        config: pb::SlurmConfig { private_data: String::new(), prolog_flags: String::new(), ..answer.config.clone() },
        ..answer.clone()
    };
    let out = scontrol::render(&scontrol::parse(&args(&["show", "conf"])).unwrap(), &bare, &Env::new()).stdout;
    assert!(out.contains("\nPrivateData             = none\n"), "{out}");
    assert!(out.contains("\nPrologFlags             = (null)\n"), "{out}");
}

#[test]
fn sinfo_lists_drain_reasons_with_who_and_when() {
    let drained = |name: &str, reason: &str, user: &str, uid: u32, at: i64, state: pb::SlurmNodeState| pb::SlurmNode {
        drain_reason: reason.into(),
        drain_user: user.into(),
        drain_uid: Some(uid),
        drain_time: ts(at),
        ..node(name, state, &["cpu", "hpc-prod"])
    };
    let nodes = [
        drained("slurm-cpu-0", "disk is full", "alice", 1001, NOW - 60, pb::SlurmNodeState::Drained),
        node("slurm-cpu-1", pb::SlurmNodeState::Idle, &["cpu", "hpc-prod"]),
        drained("slurm-cpu-2", "disk is full", "alice", 1001, NOW - 60, pb::SlurmNodeState::Draining),
        drained(
            "slurm-cpu-3",
            "SUNK: pod was not deleted before KillWait",
            "root",
            0,
            NOW - 5,
            pb::SlurmNodeState::Drained,
        ),
    ];
    let names = ["slurm-cpu-0", "slurm-cpu-1", "slurm-cpu-2", "slurm-cpu-3"];
    let partitions = [partition("cpu", true, &names), partition("hpc-prod", false, &names)];
    let render = |list: &[&str]| {
        sinfo::render(&sinfo::parse(&args(list), &Env::new()).unwrap(), &partitions, &nodes, NOW, &Env::new(), None)
            .stdout
    };
    // Each drained node once, whatever its partitions; nodes with the same reason, user and
    // time share a line; the reason is cut at 20 without `+`.
    assert_eq!(
        render(&["-R"]),
        "REASON               USER      TIMESTAMP           NODELIST\n\
         disk is full         alice     2025-01-02T03:03:05 slurm-cpu-[0,2]\n\
         SUNK: pod was not de root      2025-01-02T03:04:00 slurm-cpu-3\n"
    );
    assert_eq!(
        render(&["-R", "-l"]),
        "Thu Jan 02 03:04:05 2025\n\
         REASON               USER         TIMESTAMP           STATE  NODELIST\n\
         disk is full         alice(1001)  2025-01-02T03:03:05 drng   slurm-cpu-2\n\
         disk is full         alice(1001)  2025-01-02T03:03:05 drain  slurm-cpu-0\n\
         SUNK: pod was not de root(0)      2025-01-02T03:04:00 drain  slurm-cpu-3\n"
    );
    assert_eq!(
        render(&["-R", "-h", "-n", "slurm-cpu-3"]),
        "SUNK: pod was not de root      2025-01-02T03:04:00 slurm-cpu-3\n"
    );
    let relative = env(&[("SLURM_TIME_FORMAT", "%H:%M")]);
    let out = sinfo::render(
        &sinfo::parse(&args(&["-R", "-h"]), &relative).unwrap(),
        &partitions,
        &nodes,
        NOW,
        &relative,
        None,
    );
    assert_eq!(
        out.stdout.lines().next().unwrap(),
        "disk is full         alice     03:03               slurm-cpu-[0,2]"
    );
}

#[test]
fn squeue_long_format_names_and_sizes() {
    let pending_job = pb::Job { estimated_start_time: ts(NOW + 60), ..queue(pending(43, "waits", NOW - 5)) };
    let jobs = [queue(running(42, "train", NOW - 65)), pending_job];
    let run = |list: &[&str]| squeue(list, &Env::new(), &jobs);
    // Without a size a field is 20 wide and left-justified; no separator but the padding.
    assert_eq!(
        run(&["-O", "jobid,name,state"]).stdout,
        format!(
            "{:<20}{:<20}{:<20}\n{:<20}{:<20}{:<20}\n{:<20}{:<20}{:<20}\n",
            "JOBID", "NAME", "STATE", 43, "waits", "PENDING", 42, "train", "RUNNING"
        )
    );
    // `name:[.]size[suffix]`: `.` right-justifies, the rest after the size is printed after
    // the field; names in any case; values cut at the size.
    assert_eq!(
        run(&["--Format=JobID:.6|,STATE:5,reason:.12 ,TimeUsed:3"]).stdout,
        // A right-justified header is right-justified too.
        " JOBID|STATE      REASON TIM\n    43|PENDI   Resources 0:0\n    42|RUNNI        None 1:0\n"
    );
    assert_eq!(
        run(&["-h", "-O", "StartTime:20,EndTime:20,AllocNodes,PendingTime:5,StdOut:30,LicensesAlloc:7,exit_code:4"])
            .stdout,
        "2025-01-02T03:05:05 N/A                 (null)              5    //slurm-%j.out                (null) 0:0 \n\
         2025-01-02T03:03:00 NONE                (null)              0    //slurm-%j.out                (null) 0:0 \n"
    );
    // A name squeue does not know: Slurm's error, the field prints only its suffix.
    let bogus = run(&["-h", "-O", "jobid:3,bogus:4|"]);
    assert_eq!(bogus.stderr, "squeue: error: Invalid job format specification: bogus\n");
    assert_eq!(bogus.stdout, "43 |\n42 |\n");
    assert_eq!(
        run(&["-o", "%i", "-O", "jobid"]).stderr,
        "squeue: error: -O (--Format) is incompatible with -o (--format)\n"
    );
    // SQUEUE_FORMAT2 is the long-format default; -o letters reach the same table (%A JobId).
    let formatted = env(&[("SQUEUE_FORMAT2", "JobId:4,UserName:5")]);
    assert_eq!(squeue(&["-h", "-t", "R"], &formatted, &jobs).stdout, "42  root \n");
    assert_eq!(run(&["-h", "-t", "R", "-o", "%A %G %B"]).stdout, "42 0 slurm-cpu-0\n");
    assert_eq!(run(&["-t", "R", "-o", "%G"]).stdout.lines().next(), Some("GROUP"));
    // Cluster comes from the configuration.
    assert_eq!(run(&["-h", "-t", "R", "-O", "cluster:6"]).stdout, "slurm \n");
}

#[test]
fn sacct_25_05_fields_req_reservation_and_sluid() {
    let reserved = pb::Job { reservation: "maint".into(), ..cancelled(43, "short", NOW - 50, NOW - 10, 0) };
    assert_eq!(
        sacct(&["-o", "JobID,ReqReservation,SLUID"], std::slice::from_ref(&reserved)),
        "JobID              ReqReservation          SLUID \n\
         ------------ -------------------- -------------- \n\
         43                          maint s0000000000000 \n\
         43.batch                          s0000000000000 \n\
         43.extern                         s0000000000000 \n"
    );
    // The SLUID is never cut.
    assert_eq!(sacct(&["-X", "-n", "-o", "SLUID%5"], &[reserved]), "s0000000000000 \n");
    // Prefixes still match in table order: `reqr` is ReqReservation, `sl` SLUID.
    assert_eq!(sacct(&["-X", "-P", "-o", "reqr,sl"], &[]).lines().next(), Some("ReqReservation|SLUID"));
}
