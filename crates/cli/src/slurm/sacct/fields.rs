//! The field table of `src/sacct/sacct.c` (names, default widths, how each prints), the field
//! lists `-b`, `-l` and the default name, and the value of each field for a job or step line.

use cwsandbox_client::emulator_v1 as pb;

use super::args::Options;
use crate::slurm::fmt;

/// How a field prints (Slurm's `print_fields_*` routine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `print_fields_str`: cut to width − 1 plus `+`.
    Str,
    /// `print_fields_uint*`: never cut; NO_VAL prints blank.
    Uint,
    /// `print_fields_date`: `slurm_make_time_str` into a width + 1 buffer.
    Date,
    /// `print_fields_time_from_secs`: `secs2time_str`.
    Time,
    /// `print_fields_sluid` (25.05): `sluid2str`, never cut.
    Sluid,
}

/// `fields[]` of `src/sacct/sacct.c`, in table order (prefixes match the first entry):
/// `(default width, name, kind)`; a negative width is left-justified.
pub(super) const FIELDS: &[(i32, &str, Kind)] = &[
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
    (20, "ReqReservation", Kind::Str),
    (8, "Restarts", Kind::Uint),
    (11, "SegmentSize", Kind::Uint),
    (14, "SLUID", Kind::Sluid),
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
pub(super) const DEFAULT_FIELDS: &str = "jobid,jobname,partition,account,alloccpus,state,exitcode";
/// `BRIEF_FIELDS`.
pub(super) const BRIEF_FIELDS: &str = "jobid,state,exitcode";
/// `LONG_FIELDS`.
pub(super) const LONG_FIELDS: &str = "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,\
maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,mincputask,avecpu,ntasks,\
alloccpus,elapsed,state,exitcode,avecpufreq,reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,\
maxdiskread,maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,maxdiskwritetask,avediskwrite,\
reqtres,alloctres,tresusageinave,tresusageinmax,tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,\
tresusageinmint,tresusageintot,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutave,tresusageouttot";

pub(super) fn help_fields() -> String {
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

/// One line: a job or one of its steps.
#[derive(Clone, Copy)]
pub(super) enum Row<'a> {
    Job(&'a pb::Job),
    Step(&'a pb::Job, &'a pb::JobStep),
}

/// A value before formatting; `None` is Slurm's NULL or NO_VAL (blank).
pub(super) enum Value {
    Str(Option<String>),
    Uint(Option<u64>),
    Date(Option<i64>),
    Time(Option<i64>),
    /// A Slurm lexicographically sortable unique id.
    Sluid(u64),
}

/// `sluid2str`: `s` and 13 Crockford base-32 digits of the 64-bit id, most significant first.
pub(super) fn sluid(id: u64) -> String {
    const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut text = String::from("s");
    for position in (0..13).rev() {
        text.push(char::from(DIGITS[((id >> (5 * position)) & 0x1f) as usize]));
    }
    text
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

pub(super) fn value(name: &str, row: Row<'_>, options: &Options, now: i64) -> Value {
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
        ("AllocTRES", Some(step)) => {
            let mut entries = vec![
                ("cpu".to_owned(), step.alloc_cpus.to_string()),
                ("mem".to_owned(), mem(job.req_mem_mb)),
                ("node".to_owned(), "1".to_owned()),
            ];
            // Slurm accounts the extern step (the job's container) with the job's billing too.
            if step.name == "extern" {
                entries.insert(0, ("billing".to_owned(), step.alloc_cpus.to_string()));
            }
            Str(tres(entries))
        }
        // A job line has no CPU frequency (NO_VAL, which cpu_freq_to_string reads as a range
        // flag: Unknown); a batch or extern step has 0, as build_batch_step/build_extern_step
        // never set one and slurmdbd stores it as it is (22.05 and 25.05 alike). Without an
        // energy or gather plugin a step measured 0 of both.
        ("ReqCPUFreq" | "ReqCPUFreqMin" | "ReqCPUFreqMax" | "ReqCPUFreqGov", None) => Str(Some("Unknown".to_owned())),
        (
            "ReqCPUFreq" | "ReqCPUFreqMin" | "ReqCPUFreqMax" | "ReqCPUFreqGov" | "AveCPUFreq" | "ConsumedEnergy",
            Some(_),
        ) => Str(Some("0".to_owned())),
        ("ConsumedEnergyRaw", Some(_)) => Uint(Some(0)),
        // The job line's energy is its allocated TRES's: slurmctld sets it to NO_VAL64 (printed
        // blank) when it allocates the job; a job never allocated has no TRES, read as 0.
        ("ConsumedEnergy", None) => Str((job.alloc_cpus == 0).then(|| "0".to_owned())),
        ("ConsumedEnergyRaw", None) => Uint((job.alloc_cpus == 0).then_some(0)),
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
        // The database's `state_reason_prev`: the scheduler stores a pending job's reason
        // unless it is None, Priority or Resources (job_scheduler.c; job_record.h: "Previous
        // state_reason that isn't priority or resources, only stored in the database").
        ("Reason", None) => Str(Some(match job.reason.as_str() {
            "" | "Resources" | "Priority" => "None".to_owned(),
            reason => reason.to_owned(),
        })),
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
        // The reservation the job asked for (`--reservation`), which is the one it runs in.
        ("ReqReservation", None) => Str(text(&job.reservation)),
        // sacct prints the job's database index as the SLUID; the emulator's accounting keeps
        // none (its `DBIndex` is blank), which reads as Slurm's id 0.
        ("SLUID", _) => Value::Sluid(0),
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
            None => Some(fmt::accounted_no_time_limit(job).to_owned()),
            Some(0) => None,
            Some(seconds) => Some(fmt::mins2time(fmt::limit_minutes(seconds))),
        }),
        ("TimelimitRaw", None) => Str(match job.time_limit_seconds {
            None => Some(fmt::accounted_no_time_limit(job).to_owned()),
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
