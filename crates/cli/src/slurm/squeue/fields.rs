//! squeue's field table (25.05 `fmt_data_job[]` of `src/squeue/opts.c`): the long names `-O`
//! takes, the letters `-o` takes, and the print function of `src/squeue/print.c` each shares,
//! with that function's header and its value for an emulator job.

use cwsandbox_client::emulator_v1 as pb;

use super::super::fmt::{self, Convert, TimeFormat};

/// `(long name, letter or '\0', print function)` in Slurm's order: `-o %X` takes the first entry
/// with letter X, `-O name` the entry with that name in any case. Hidden entries (`Gres`,
/// `PackJob*`, `Shared`, `Tres`, `tres-per-node`) are accepted as Slurm accepts them.
pub const FIELDS: &[(&str, char, &str)] = &[
    ("Account", 'a', "account"),
    ("AccrueTime", '\0', "accrue_time"),
    ("admin_comment", '\0', "admin_comment"),
    ("AllocNodes", '\0', "alloc_nodes"),
    ("AllocSID", '\0', "alloc_sid"),
    ("ArrayJobId", 'F', "array_job_id"),
    ("ArrayTaskId", 'K', "array_task_id"),
    ("AssocId", '\0', "assoc_id"),
    ("BatchFlag", '\0', "batch_flag"),
    ("BatchHost", 'B', "batch_host"),
    ("BoardsPerNode", '\0', "boards_per_node"),
    ("BurstBuffer", '\0', "burst_buffer"),
    ("BurstBufferState", '\0', "burst_buffer_state"),
    ("Cluster", '\0', "cluster_name"),
    ("ClusterFeature", '\0', "cluster_features"),
    ("Command", 'o', "command"),
    ("Comment", 'k', "comment"),
    ("Container", '\0', "container"),
    ("ContainerId", '\0', "container_id"),
    ("Contiguous", 'O', "contiguous"),
    ("Cores", 'I', "cores"),
    ("CoreSpec", 'X', "core_spec"),
    ("CPUsPerTask", '\0', "cpus_per_task"),
    ("cpus-per-task", '\0', "cpus_per_task"),
    ("cpus-per-tres", '\0', "cpus_per_tres"),
    ("CronJob", '\0', "cron_flag"),
    ("Deadline", '\0', "deadline"),
    ("DelayBoot", '\0', "delay_boot"),
    ("Dependency", 'E', "dependency"),
    ("DerivedEC", '\0', "derived_ec"),
    ("EligibleTime", '\0', "eligible_time"),
    ("EndTime", 'e', "time_end"),
    ("ExcNodes", 'x', "exc_nodes"),
    ("exit_code", '\0', "exit_code"),
    ("Feature", 'f', "features"),
    ("Gres", 'b', "tres_per_node"),
    ("GroupId", 'G', "group_id"),
    ("GroupName", 'g', "group_name"),
    ("HetJobId", '\0', "het_job_id"),
    ("HetJobIdSet", '\0', "het_job_id_set"),
    ("HetJobOffset", '\0', "het_job_offset"),
    ("JobArrayId", 'i', "job_id"),
    ("JobId", 'A', "job_id2"),
    ("LastSchedEval", '\0', "last_sched_eval"),
    ("Licenses", 'W', "licenses"),
    ("LicensesAlloc", '\0', "licenses_alloc"),
    ("MaxCPUs", '\0', "max_cpus"),
    ("MaxNodes", '\0', "max_nodes"),
    ("mem-per-tres", '\0', "mem_per_tres"),
    ("MCSLabel", '\0', "mcs_label"),
    ("MinCPUs", 'c', "pn_min_cpus"),
    ("MinMemory", 'm', "pn_min_memory"),
    ("MinTime", '\0', "min_time"),
    ("MinTmpDisk", 'd', "pn_min_tmp_disk"),
    ("Name", 'j', "name"),
    ("Network", '\0', "network"),
    ("Nice", 'y', "nice"),
    ("NodeList", 'N', "nodes"),
    ("NTPerCore", '\0', "ntasks_per_core"),
    ("NTPerNode", '\0', "ntasks_per_node"),
    ("NTPerSocket", '\0', "ntasks_per_socket"),
    ("NTPerBoard", '\0', "ntasks_per_board"),
    ("NumCPUs", 'C', "num_cpus"),
    ("NumNodes", 'D', "num_nodes"),
    ("NumTasks", '\0', "num_tasks"),
    ("Origin", '\0', "fed_origin"),
    ("OriginRaw", '\0', "fed_origin_raw"),
    ("OverSubscribe", 'h', "over_subscribe"),
    ("PackJobId", '\0', "het_job_id"),
    ("PackJobIdSet", '\0', "het_job_id_set"),
    ("PackJobOffset", '\0', "het_job_offset"),
    ("Partition", 'P', "partition"),
    ("PendingTime", '\0', "time_pending"),
    ("PreemptTime", '\0', "preempt_time"),
    ("Prefer", '\0', "prefer"),
    ("Priority", 'p', "priority"),
    ("PriorityLong", 'Q', "priority_long"),
    ("Profile", '\0', "profile"),
    ("QOS", 'q', "qos"),
    ("Reason", 'r', "reason"),
    ("ReasonList", 'R', "reason_list"),
    ("Reboot", '\0', "reboot"),
    ("ReqNodes", 'n', "req_nodes"),
    ("ReqSwitch", '\0', "req_switch"),
    ("Requeue", '\0', "requeue"),
    ("Reservation", 'v', "reservation"),
    ("ResizeTime", '\0', "resize_time"),
    ("RestartCnt", '\0', "restart_cnt"),
    ("SchedNodes", 'Y', "schednodes"),
    ("SCT", 'z', "num_sct"),
    ("SegmentSize", '\0', "segment_size"),
    ("SiblingsActive", '\0', "fed_siblings_active"),
    ("SiblingsActiveRaw", '\0', "fed_siblings_active_raw"),
    ("SiblingsViable", '\0', "fed_siblings_viable"),
    ("SiblingsViableRaw", '\0', "fed_siblings_viable_raw"),
    ("Shared", 'h', "over_subscribe"),
    ("Sockets", 'H', "sockets"),
    ("SPerBoard", '\0', "sockets_per_board"),
    ("StartTime", 'S', "time_start"),
    ("State", 'T', "job_state"),
    ("StateCompact", 't', "job_state_compact"),
    ("StdErr", '\0', "std_err"),
    ("StdIn", '\0', "std_in"),
    ("StdOut", '\0', "std_out"),
    ("SubmitTime", 'V', "time_submit"),
    ("system_comment", '\0', "system_comment"),
    ("Threads", 'J', "threads"),
    ("TimeLeft", 'L', "time_left"),
    ("TimeLimit", 'l', "time_limit"),
    ("TimeUsed", 'M', "time_used"),
    ("Tres", '\0', "tres_alloc"),
    ("tres-alloc", '\0', "tres_alloc"),
    ("tres-bind", '\0', "tres_bind"),
    ("tres-freq", '\0', "tres_freq"),
    ("tres-per-job", '\0', "tres_per_job"),
    ("tres-per-node", '\0', "tres_per_node"),
    ("tres-per-socket", '\0', "tres_per_socket"),
    ("tres-per-task", '\0', "tres_per_task"),
    ("UserId", 'U', "user_id"),
    ("UserName", 'u', "user_name"),
    ("Wait4Switch", '\0', "wait4switch"),
    ("WCKey", 'w', "wckey"),
    ("WorkDir", 'Z', "work_dir"),
];

/// The print function of `-o`'s letter.
pub fn by_letter(letter: char) -> Option<&'static str> {
    FIELDS.iter().find(|(_, each, _)| *each == letter && letter != '\0').map(|(_, _, print)| *print)
}

/// The print function of `-O`'s name (Slurm's `xstrcasecmp`: whole name, any case).
pub fn by_name(name: &str) -> Option<&'static str> {
    FIELDS.iter().find(|(each, _, _)| each.eq_ignore_ascii_case(name)).map(|(_, _, print)| *print)
}

/// The header each print function writes.
pub fn header_of(print: &str) -> &'static str {
    match print {
        "account" => "ACCOUNT",
        "accrue_time" => "ACCRUE_TIME",
        "admin_comment" => "ADMIN_COMMENT",
        "alloc_nodes" => "ALLOC_NODES",
        "alloc_sid" => "ALLOC_SID",
        "array_job_id" => "ARRAY_JOB_ID",
        "array_task_id" => "ARRAY_TASK_ID",
        "assoc_id" => "ASSOC_ID",
        "batch_flag" => "BATCH_FLAG",
        "batch_host" => "EXEC_HOST",
        "boards_per_node" => "BOARDS_PER_NODE",
        "burst_buffer" => "BURST_BUFFER",
        "burst_buffer_state" => "BURST_BUFFER_STATE",
        "cluster_name" => "CLUSTER",
        "cluster_features" => "CLUSTER_FEATURES",
        "command" => "COMMAND",
        "comment" => "COMMENT",
        "container" => "CONTAINER",
        "container_id" => "CONTAINERID",
        "contiguous" => "CONTIGUOUS",
        "cores" => "CORES_PER_SOCKET",
        "core_spec" => "CORE_SPEC",
        "cpus_per_task" => "CPUS_PER_TASK",
        "cpus_per_tres" => "CPUS_PER_TRES",
        "cron_flag" => "CRON_JOB",
        "deadline" => "DEADLINE",
        "delay_boot" => "DELAY_BOOT",
        "dependency" => "DEPENDENCY",
        "derived_ec" => "DERIVED_EC",
        "eligible_time" => "ELIGIBLE_TIME",
        "time_end" => "END_TIME",
        "exc_nodes" => "EXC_NODES",
        "exit_code" => "EXIT_CODE",
        "features" => "FEATURES",
        "tres_per_node" => "TRES_PER_NODE",
        "group_id" | "group_name" => "GROUP",
        "het_job_id" => "HET_JOB_ID",
        "het_job_id_set" => "HET_JOB_ID_SET",
        "het_job_offset" => "HET_JOB_OFFSET",
        "job_id" | "job_id2" => "JOBID",
        "last_sched_eval" => "LAST_SCHED_EVAL",
        "licenses" => "LICENSES",
        "licenses_alloc" => "LICENSES_ALLOC",
        "max_cpus" => "MAX_CPUS",
        "max_nodes" => "MAX_NODES",
        "mem_per_tres" => "MEM_PER_TRES",
        "mcs_label" => "MCSLABEL",
        "pn_min_cpus" => "MIN_CPUS",
        "pn_min_memory" => "MIN_MEMORY",
        "min_time" => "TIME_MIN",
        "pn_min_tmp_disk" => "MIN_TMP_DISK",
        "name" => "NAME",
        "network" => "NETWORK",
        "nice" => "NICE",
        "nodes" => "NODELIST",
        "ntasks_per_core" => "NTASKS_PER_CORE",
        "ntasks_per_node" => "NTASKS_PER_NODE",
        "ntasks_per_socket" => "NTASKS_PER_SOCKET",
        "ntasks_per_board" => "NTASKS_PER_BOARD",
        "num_cpus" => "CPUS",
        "num_nodes" => "NODES",
        "num_tasks" => "TASKS",
        "fed_origin" => "ORIGIN",
        "fed_origin_raw" => "ORIGIN_RAW",
        "over_subscribe" => "OVER_SUBSCRIBE",
        "partition" => "PARTITION",
        "time_pending" => "PENDING_TIME",
        "preempt_time" => "PREEMPT_TIME",
        "prefer" => "PREFER",
        "priority" | "priority_long" => "PRIORITY",
        "profile" => "PROFILE",
        "qos" => "QOS",
        "reason" => "REASON",
        "reason_list" => "NODELIST(REASON)",
        "reboot" => "REBOOT",
        "req_nodes" => "REQ_NODES",
        "req_switch" => "REQ_SWITCH",
        "requeue" => "REQUEUE",
        "reservation" => "RESERVATION",
        "resize_time" => "RESIZE_TIME",
        "restart_cnt" => "RESTART_COUNT",
        "schednodes" => "SCHEDNODES",
        "num_sct" => "S:C:T",
        "segment_size" => "SEGMENT_SIZE",
        "fed_siblings_active" => "ACTIVE_SIBLINGS",
        "fed_siblings_active_raw" => "ACTIVE_SIBLINGS_RAW",
        "fed_siblings_viable" => "VIABLE_SIBLINGS",
        // Slurm's own spelling.
        "fed_siblings_viable_raw" => "VIALBLE_SIBLINGS_RAW",
        "sockets" => "SOCKETS_PER_NODE",
        "sockets_per_board" => "SOCKETS_PER_BOARD",
        "time_start" => "START_TIME",
        "job_state" => "STATE",
        "job_state_compact" => "ST",
        "std_err" => "STDERR",
        "std_in" => "STDIN",
        "std_out" => "STDOUT",
        "time_submit" => "SUBMIT_TIME",
        "system_comment" => "SYSTEM_COMMENT",
        "threads" => "THREADS_PER_CORE",
        "time_left" => "TIME_LEFT",
        "time_limit" => "TIME_LIMIT",
        "time_used" => "TIME",
        "tres_alloc" => "TRES_ALLOC",
        "tres_bind" => "TRES_BIND",
        "tres_freq" => "TRES_FREQ",
        "tres_per_job" => "TRES_PER_JOB",
        "tres_per_socket" => "TRES_PER_SOCKET",
        "tres_per_task" => "TRES_PER_TASK",
        "user_id" => "UID",
        "user_name" => "USER",
        "wait4switch" => "WAIT4SWITCH",
        "wckey" => "WCKEY",
        "work_dir" => "WORK_DIR",
        _ => "INVALID",
    }
}

/// What a value is printed from: the emulator's time (and its format) and the cluster's name.
pub struct Context<'a> {
    /// The emulator's time.
    pub now: i64,
    /// `SLURM_TIME_FORMAT`.
    pub time_format: &'a TimeFormat,
    /// `ClusterName`, for the `Cluster` field.
    pub cluster: &'a str,
}

fn pending(job: &pb::Job) -> bool {
    fmt::state(job.state) == pb::JobState::Pending
}

/// `job_state_string_compact` of a queue row: `CG` while COMPLETING (the flag wins over the
/// base state), else the base state's short name.
pub fn state_compact(job: &pb::Job) -> &'static str {
    if job.completing { "CG" } else { fmt::state_compact(fmt::state(job.state)) }
}

/// Whether `%R` shows the job's reason in place of its nodes: `_print_job_reason_list` does so
/// for a job that is not COMPLETING and is pending, timed out or failed (a NODE_FAIL or
/// cancelled job shows its nodes).
fn reason_in_place_of_nodes(job: &pb::Job) -> bool {
    !job.completing
        && matches!(fmt::state(job.state), pb::JobState::Pending | pb::JobState::Timeout | pb::JobState::Failed)
}

fn or_null(text: &str) -> String {
    if text.is_empty() { "(null)".to_owned() } else { text.to_owned() }
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

/// A job's `start_time` as slurmctld sends it: the start, or while pending the scheduler's
/// estimate.
fn start_time(job: &pb::Job) -> Option<i64> {
    if pending(job) { fmt::secs(job.estimated_start_time.as_ref()) } else { fmt::secs(job.start_time.as_ref()) }
}

/// A job's value for a print function, and whether Slurm cuts it at the field's width (the
/// functions that pass `cut_output = false`: times, node lists; only a right-justified field can
/// overflow, as `%.Ns` cuts a left-justified one anyway).
pub fn value_of(print: &str, job: &pb::Job, context: &Context<'_>) -> (String, bool) {
    let time = |seconds: Option<i64>| match seconds {
        Some(seconds) => fmt::time_str(Some(seconds), context.time_format, context.now, 256),
        None => "N/A".to_owned(),
    };
    let cpus = if pending(job) { job.req_cpus } else { job.alloc_cpus };
    let limit_seconds = job.time_limit_seconds.map(|seconds| fmt::limit_minutes(seconds) * 60);
    let uncut = |text: String| (text, false);
    let text = match print {
        "account" => or_null(&job.account),
        "accrue_time" | "eligible_time" => {
            time(fmt::secs(job.eligible_time.as_ref()).or(fmt::secs(job.submit_time.as_ref())))
        }
        "alloc_nodes" => or_null(&job.alloc_node),
        "alloc_sid" | "assoc_id" | "contiguous" | "nice" | "reboot" | "req_switch" | "restart_cnt"
        | "pn_min_tmp_disk" | "boards_per_node" | "ntasks_per_node" | "ntasks_per_board" | "sockets_per_board" => {
            "0".to_owned()
        }
        "array_job_id" | "job_id" | "job_id2" => job.job_id.to_string(),
        "array_task_id" | "het_job_id" | "het_job_id_set" | "het_job_offset" | "core_spec" | "cpus_per_tres"
        | "mem_per_tres" | "ntasks_per_core" | "ntasks_per_socket" | "segment_size" | "tres_bind" | "tres_freq"
        | "tres_per_job" | "tres_per_socket" | "tres_per_task" | "preempt_time" | "deadline" => "N/A".to_owned(),
        "resize_time" => return uncut("N/A".to_owned()),
        "batch_flag" | "requeue" | "num_tasks" | "max_nodes" => "1".to_owned(),
        "batch_host" => {
            if job.node_list.is_empty() {
                "n/a".to_owned()
            } else {
                job.node_list.clone()
            }
        }
        "cluster_name" => or_null(context.cluster),
        "command" => or_null(&job.command),
        "admin_comment" | "burst_buffer" | "burst_buffer_state" | "cluster_features" | "container" | "container_id"
        | "dependency" | "features" | "licenses" | "licenses_alloc" | "mcs_label" | "network" | "prefer"
        | "system_comment" | "wckey" => "(null)".to_owned(),
        "schednodes" => return uncut("(null)".to_owned()),
        "comment" => or_null(&job.comment),
        "cores" | "sockets" | "threads" => "*".to_owned(),
        "num_sct" => "*:*:*".to_owned(),
        "cpus_per_task" => job.req_cpus.max(1).to_string(),
        "cron_flag" => "No".to_owned(),
        "delay_boot" | "min_time" | "wait4switch" => squeue_secs(0),
        "derived_ec" => "0:0".to_owned(),
        "exit_code" => format!("{}:{}", job.exit_code, job.exit_signal),
        "time_end" => {
            let end = fmt::secs(job.end_time.as_ref());
            match (end, pending(job), limit_seconds) {
                (Some(end), _, _) => time(Some(end)),
                (None, true, Some(limit)) => time(start_time(job).map(|start| start + limit)),
                (None, true, None) => "N/A".to_owned(),
                // Running without a limit of its own: the partition's INFINITE.
                (None, false, None) => "NONE".to_owned(),
                (None, false, Some(limit)) => time(fmt::secs(job.start_time.as_ref()).map(|start| start + limit)),
            }
        }
        "exc_nodes" | "req_nodes" => return uncut(String::new()),
        "tres_per_node" => match (job.req_gpus, job.gres_type.as_str()) {
            (0, _) => "N/A".to_owned(),
            (gpus, "") => format!("gres/gpu:{gpus}"),
            (gpus, kind) => format!("gres/gpu:{kind}:{gpus}"),
        },
        "group_id" => job.gid.to_string(),
        "group_name" => job.group.clone(),
        "last_sched_eval" => time(fmt::secs(job.start_time.as_ref()).or(fmt::secs(job.submit_time.as_ref()))),
        "max_cpus" | "num_cpus" => cpus.to_string(),
        "pn_min_cpus" => job.req_cpus.max(1).to_string(),
        "pn_min_memory" => fmt::convert_num_unit(job.req_mem_mb as f64, 2, Convert::Exact),
        "name" => job.name.clone(),
        "nodes" => return uncut(job.node_list.clone()),
        "num_nodes" => job.alloc_nodes.max(1).to_string(),
        "fed_origin"
        | "fed_origin_raw"
        | "fed_siblings_active"
        | "fed_siblings_active_raw"
        | "fed_siblings_viable"
        | "fed_siblings_viable_raw" => "NA".to_owned(),
        "over_subscribe" => fmt::over_subscribe(job.over_subscribe).to_owned(),
        "partition" => job.partition.clone(),
        "time_pending" => {
            let submit = fmt::secs(job.submit_time.as_ref()).unwrap_or(context.now);
            match fmt::secs(job.start_time.as_ref()).filter(|start| *start < context.now) {
                Some(start) => (start - submit).to_string(),
                None => (context.now - submit).to_string(),
            }
        }
        "priority" => format!("{:16.14}", f64::from(job.priority) / f64::from(u32::MAX)),
        "priority_long" => job.priority.to_string(),
        "profile" => "NotSet".to_owned(),
        "qos" => or_null(&job.qos),
        "reason" => {
            if job.reason.is_empty() {
                "None".to_owned()
            } else {
                job.reason.clone()
            }
        }
        // A queue row's reason is the controller's: why it waits, or why it ended
        // (NonZeroExitCode, TimeLimit).
        "reason_list" if reason_in_place_of_nodes(job) => {
            format!("({})", if job.reason.is_empty() { "None" } else { &job.reason })
        }
        "reason_list" => return uncut(job.node_list.clone()),
        "reservation" => or_null(&job.reservation),
        "time_start" => time(start_time(job)),
        "job_state" => if job.completing { "COMPLETING" } else { fmt::state_long(fmt::state(job.state)) }.to_owned(),
        "job_state_compact" => state_compact(job).to_owned(),
        // The batch script names no files: squeue shows the unexpanded default pattern.
        "std_err" | "std_out" => format!("{}/slurm-%j.out", super::super::scontrol::WORK_DIR),
        "std_in" => "/dev/null".to_owned(),
        "time_submit" => time(fmt::secs(job.submit_time.as_ref())),
        // `_print_job_time_left` and `_print_job_time_limit`: a limit's seconds are never cut,
        // the words for no limit are, like any text.
        "time_left" => match limit_seconds {
            None => fmt::CONTROLLER_NO_TIME_LIMIT.to_owned(),
            Some(limit) => return uncut(squeue_secs((limit - job.elapsed_seconds).max(0))),
        },
        "time_limit" => match limit_seconds {
            None => fmt::CONTROLLER_NO_TIME_LIMIT.to_owned(),
            Some(limit) => return uncut(squeue_secs(limit)),
        },
        "time_used" => return uncut(squeue_secs(if pending(job) { 0 } else { job.elapsed_seconds })),
        "tres_alloc" => {
            let mem = fmt::convert_num_unit(job.req_mem_mb as f64, 2, Convert::Exact);
            format!("cpu={cpus},mem={mem},node=1,billing={cpus}")
        }
        "user_id" => job.uid.to_string(),
        "user_name" => job.user.clone(),
        "work_dir" => super::super::scontrol::WORK_DIR.to_owned(),
        _ => String::new(),
    };
    (text, true)
}
