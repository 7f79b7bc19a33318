//! `--json` of the Slurm views: the documents Slurm 25.05's commands print through its
//! `data_parser/v0.0.43` plugin (`src/plugins/data_parser/v0.0.43/parsers.c` at tag
//! `slurm-25-05-8-1`), key for key and in Slurm's order, with Slurm's encodings: numbers that may
//! be unset or infinite as `{"set", "infinite", "number"}`, flags as arrays of names, exit codes as
//! `{"status", "return_code", "signal"}`, unset strings as `""`. Fields the emulator does not model
//! (array jobs, federation, burst buffers, mail, CPU frequency, job flags, …) carry the value Slurm
//! prints for a job that did not ask for them; the CLI README's table says which.
//!
//! `squeue --json` and `scontrol --json show job` print the same job records (`JOB_INFO`);
//! `scontrol --json show node|partition` print `NODE` and `PARTITION_INFO` records, `sinfo --json`
//! one `SINFO_DATA` record per line it would print, `sacct --json` slurmdb's `JOB` records with
//! their `STEP`s.

use cwsandbox_client::emulator_v1 as pb;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::fmt;
use super::scontrol::{WORK_DIR, default_output, tres as tres_text};

/// The data_parser version printed and accepted by `--json[=v0.0.43]`.
pub const DATA_PARSER: &str = "v0.0.43";

/// A JSON value whose objects keep their keys in the order written (Slurm's order), without
/// changing `serde_json`'s map order for the rest of the binary.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// A scalar or a value with no keys of its own.
    Plain(Value),
    /// An object, keys in order.
    Object(Vec<(&'static str, Json)>),
    /// A list.
    List(Vec<Json>),
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Plain(value) => value.serialize(serializer),
            Json::List(items) => items.serialize(serializer),
            Json::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl Json {
    /// Slurm's JSON serializer prints pretty JSON (two-space indents) and a final newline.
    pub fn pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_owned());
        text.push('\n');
        text
    }
}

fn string(text: &str) -> Json {
    Json::Plain(Value::String(text.to_owned()))
}

fn int(number: impl Into<i64>) -> Json {
    Json::Plain(Value::from(number.into()))
}

fn boolean(value: bool) -> Json {
    Json::Plain(Value::Bool(value))
}

fn names(list: &[&str]) -> Json {
    Json::List(list.iter().map(|name| string(name)).collect())
}

/// `UINT32_NO_VAL` and friends: a number that may be unset (Slurm's NO_VAL) or infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// NO_VAL: not set.
    Unset,
    /// INFINITE.
    Infinite,
    /// A value.
    Set(u64),
}

fn number(value: Number) -> Json {
    let (set, infinite, number) = match value {
        Number::Unset => (false, false, 0),
        Number::Infinite => (false, true, 0),
        Number::Set(number) => (true, false, number),
    };
    Json::Object(vec![("set", boolean(set)), ("infinite", boolean(infinite)), ("number", int(number as i64))])
}

fn set(value: impl Into<u64>) -> Json {
    number(Number::Set(value.into()))
}

fn unset() -> Json {
    number(Number::Unset)
}

/// `TIMESTAMP_NO_VAL`: seconds since the epoch; 0 (Slurm's "none") is a set 0.
fn timestamp(seconds: Option<i64>) -> Json {
    set(seconds.unwrap_or(0).max(0) as u64)
}

/// `FLOAT64_NO_VAL`.
fn float(value: Option<f64>) -> Json {
    match value {
        Some(value) => Json::Object(vec![
            ("set", boolean(true)),
            ("infinite", boolean(false)),
            ("number", Json::Plain(Value::from(value))),
        ]),
        None => Json::Object(vec![("set", boolean(false)), ("infinite", boolean(false)), ("number", int(0))]),
    }
}

/// How a process ended, as `PROCESS_EXIT_CODE` reads a wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Not started or not finished (NO_VAL).
    Pending,
    /// Exited with this code.
    Exited(u32),
    /// Killed by this signal.
    Signaled(u16),
}

impl ExitStatus {
    /// A job's exit status: pending jobs have none; a signal wins over a code, as in a wait status.
    pub fn of_job(job: &pb::Job) -> ExitStatus {
        if fmt::state(job.state) == pb::JobState::Pending {
            ExitStatus::Pending
        } else if job.exit_signal > 0 {
            ExitStatus::Signaled(job.exit_signal as u16)
        } else {
            ExitStatus::Exited(job.exit_code.max(0) as u32)
        }
    }
}

/// `sig_num2name` (src/common/proc_args.c): the name without `SIG`, or the number.
fn signal_name(signal: u16) -> String {
    const NAMES: &[(&str, u16)] = &[
        ("HUP", 1),
        ("INT", 2),
        ("QUIT", 3),
        ("ABRT", 6),
        ("KILL", 9),
        ("ALRM", 14),
        ("TERM", 15),
        ("CHLD", 17),
        ("USR1", 10),
        ("USR2", 12),
        ("CONT", 18),
        ("STOP", 19),
        ("TSTP", 20),
        ("TTIN", 21),
        ("TTOU", 22),
        ("URG", 23),
        ("XCPU", 24),
        ("XFSZ", 25),
        ("VTALRM", 26),
        ("PROF", 27),
        ("WINCH", 28),
        ("IO", 29),
        ("PWR", 30),
        ("SYS", 31),
    ];
    NAMES.iter().find(|(_, number)| *number == signal).map(|(name, _)| (*name).to_owned()).unwrap_or(signal.to_string())
}

/// `PROCESS_EXIT_CODE_VERBOSE`.
pub fn exit_code(status: ExitStatus) -> Json {
    let (state, return_code, signal) = match status {
        ExitStatus::Pending => ("PENDING", Number::Unset, None),
        ExitStatus::Exited(0) => ("SUCCESS", Number::Set(0), None),
        ExitStatus::Exited(code) => ("ERROR", Number::Set(u64::from(code)), None),
        ExitStatus::Signaled(signal) => ("SIGNALED", Number::Unset, Some(signal)),
    };
    Json::Object(vec![
        ("status", names(&[state])),
        ("return_code", number(return_code)),
        (
            "signal",
            Json::Object(vec![
                ("id", signal.map_or_else(unset, set)),
                ("name", string(&signal.map(signal_name).unwrap_or_default())),
            ]),
        ),
    ])
}

/// What every document carries besides its data: `meta`, `errors`, `warnings`
/// (`add_openapi_response_meta` and friends).
#[derive(Debug, Clone)]
pub struct Meta<'a> {
    /// The command line as typed (`squeue --json`).
    pub command: &'a [String],
    /// The caller's user and group names.
    pub user: &'a str,
    /// The caller's group name.
    pub group: &'a str,
    /// The cluster's name (`ClusterName`).
    pub cluster: &'a str,
}

/// `meta.client.group` of the caller `uid`: root's, else the group its jobs run under (the
/// emulator keeps no group database), empty when it has none here.
pub fn client_group(uid: u32, jobs: &[pb::Job]) -> &str {
    if uid == 0 { "root" } else { jobs.iter().find(|job| job.uid == uid).map_or("", |job| job.group.as_str()) }
}

fn meta(meta: &Meta<'_>) -> Json {
    let mut version = super::slurm_conf::SLURM_VERSION.split('.');
    let (major, minor, micro) =
        (version.next().unwrap_or_default(), version.next().unwrap_or_default(), version.next().unwrap_or_default());
    Json::Object(vec![
        (
            "plugin",
            Json::Object(vec![
                ("type", string("")),
                ("name", string("")),
                ("data_parser", string(&format!("data_parser/{DATA_PARSER}"))),
                ("accounting_storage", string("")),
            ]),
        ),
        (
            "client",
            Json::Object(vec![("source", string("")), ("user", string(meta.user)), ("group", string(meta.group))]),
        ),
        ("command", Json::List(meta.command.iter().map(|word| string(word)).collect())),
        (
            "slurm",
            Json::Object(vec![
                (
                    "version",
                    Json::Object(vec![("major", string(major)), ("micro", string(micro)), ("minor", string(minor))]),
                ),
                ("release", string(&format!("{major}.{minor}.{micro}"))),
                ("cluster", string(meta.cluster)),
            ]),
        ),
    ])
}

/// A response document: the data's keys, then `meta`, `errors`, `warnings`.
pub fn response(data: Vec<(&'static str, Json)>, about: &Meta<'_>, warnings: &[&str]) -> Json {
    let mut entries = data;
    entries.push(("meta", meta(about)));
    entries.push(("errors", Json::List(Vec::new())));
    let warnings = warnings
        .iter()
        .map(|warning| Json::Object(vec![("description", string(warning)), ("source", string(""))]))
        .collect();
    entries.push(("warnings", Json::List(warnings)));
    Json::Object(entries)
}

/// `--json[=SPEC]`: the spec names the data_parser (`v0.0.43`, `data_parser/v0.0.43`); others are
/// refused as Slurm refuses a plugin it does not have.
pub fn check_spec(program: &str, spec: &str) -> Result<(), String> {
    let version = spec.trim_start_matches("data_parser/");
    if spec.is_empty() || version == DATA_PARSER || version == "latest" {
        Ok(())
    } else {
        Err(format!(
            "{program}: error: Unable to find data_parser plugin {spec}: this emulator prints data_parser/{DATA_PARSER} (Slurm 25.05's)"
        ))
    }
}

/// `gres_detail`: `gpu[:type]:N(IDX:list)` per node of a job holding GPUs.
fn gres_detail(job: &pb::Job) -> Json {
    if job.req_gpus == 0 || job.gpu_indices.is_empty() {
        return Json::List(Vec::new());
    }
    let mut indices: Vec<u32> = job.gpu_indices.clone();
    indices.sort_unstable();
    let mut ranges: Vec<String> = Vec::new();
    let mut start = indices[0];
    let mut end = start;
    for &index in &indices[1..] {
        if index == end + 1 {
            end = index;
            continue;
        }
        ranges.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        start = index;
        end = index;
    }
    ranges.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    let kind = if job.gres_type.is_empty() { String::new() } else { format!(":{}", job.gres_type) };
    Json::List(vec![string(&format!("gpu{kind}:{}(IDX:{})", indices.len(), ranges.join(",")))])
}

/// `job_resources` of a job holding nodes (`JOB_RES`): one node, its CPUs and memory. The
/// emulator does not model sockets and cores, so `allocation[].sockets` is empty.
fn job_resources(job: &pb::Job) -> Json {
    if fmt::state(job.state) == pb::JobState::Pending || job.node_list.is_empty() {
        return Json::Plain(Value::Null);
    }
    Json::Object(vec![
        ("select_type", names(&["CORE", "MEMORY"])),
        (
            "nodes",
            Json::Object(vec![
                ("count", int(job.alloc_nodes.max(1))),
                ("select_type", names(&["AVAILABLE"])),
                ("list", string(&job.node_list)),
                ("whole", boolean(job.over_subscribe == pb::OverSubscribe::No as i32)),
                (
                    "allocation",
                    Json::List(vec![Json::Object(vec![
                        ("index", int(0)),
                        ("name", string(&job.node_list)),
                        ("cpus", Json::Object(vec![("count", int(job.alloc_cpus)), ("used", int(0))])),
                        ("memory", Json::Object(vec![("used", int(0)), ("allocated", int(job.req_mem_mb as i64))])),
                        ("sockets", Json::List(Vec::new())),
                    ])]),
                ),
            ]),
        ),
        ("cpus", int(job.alloc_cpus)),
        ("threads_per_core", unset()),
    ])
}

/// `JOB_SHARED`: how the job shares its nodes (`OverSubscribe=` in show job).
fn shared(job: &pb::Job) -> Json {
    match pb::OverSubscribe::try_from(job.over_subscribe) {
        Ok(pb::OverSubscribe::No) => names(&["none"]),
        Ok(pb::OverSubscribe::Yes) => names(&["oversubscribe"]),
        Ok(pb::OverSubscribe::User) => names(&["user"]),
        _ => names(&[]),
    }
}

/// One job as `JOB_INFO` dumps it, in the parser's order.
pub fn job_info(job: &pb::Job, cluster: &str) -> Json {
    let state = fmt::state(job.state);
    let pending = state == pb::JobState::Pending;
    let submit = fmt::secs(job.submit_time.as_ref());
    let eligible = fmt::secs(job.eligible_time.as_ref()).or(submit);
    let start = if pending { fmt::secs(job.estimated_start_time.as_ref()) } else { fmt::secs(job.start_time.as_ref()) };
    let end = super::scontrol::end_time(job, pending);
    let cpus = if pending { job.req_cpus } else { job.alloc_cpus };
    let mut job_state = vec![fmt::state_long(state)];
    if job.completing {
        job_state.push("COMPLETING");
    }
    let output = default_output(job);
    let reason = if job.reason.is_empty() { "None" } else { &job.reason };
    let time_limit = match job.time_limit_seconds {
        Some(seconds) => Number::Set(u64::from(fmt::limit_minutes(seconds) as u32)),
        None => Number::Infinite,
    };
    let tres_per_node = if job.req_gpus > 0 { format!("gres/gpu:{}", job.req_gpus) } else { String::new() };
    Json::Object(vec![
        ("account", string(&job.account)),
        ("accrue_time", timestamp(eligible)),
        ("admin_comment", string("")),
        ("allocating_node", string(&job.alloc_node)),
        ("array_job_id", set(0u32)),
        ("array_task_id", unset()),
        ("array_max_tasks", set(0u32)),
        ("array_task_string", string("")),
        ("association_id", int(0)),
        ("batch_features", string("")),
        ("batch_flag", boolean(true)),
        ("batch_host", string(if pending { "" } else { &job.node_list })),
        ("flags", names(&[])),
        ("burst_buffer", string("")),
        ("burst_buffer_state", string("")),
        ("cluster", string(cluster)),
        ("cluster_features", string("")),
        ("command", string(&job.command)),
        ("comment", string(&job.comment)),
        ("container", string("")),
        ("container_id", string("")),
        ("contiguous", boolean(false)),
        ("core_spec", int(0)),
        ("thread_spec", int(0)),
        ("cores_per_socket", unset()),
        ("billable_tres", float((!pending).then_some(f64::from(job.alloc_cpus)))),
        ("cpus_per_task", set(job.req_cpus.max(1))),
        ("cpu_frequency_minimum", unset()),
        ("cpu_frequency_maximum", unset()),
        ("cpu_frequency_governor", unset()),
        ("cpus_per_tres", string("")),
        ("cron", string("")),
        ("deadline", timestamp(None)),
        ("delay_boot", set(0u32)),
        ("dependency", string("")),
        ("derived_exit_code", exit_code(if pending { ExitStatus::Pending } else { ExitStatus::Exited(0) })),
        ("eligible_time", timestamp(eligible)),
        ("end_time", timestamp(end)),
        ("excluded_nodes", string("")),
        ("exit_code", exit_code(ExitStatus::of_job(job))),
        ("extra", string(&job.extra)),
        ("failed_node", string("")),
        ("features", string("")),
        ("federation_origin", string("")),
        ("federation_siblings_active", string("")),
        ("federation_siblings_viable", string("")),
        ("gres_detail", gres_detail(job)),
        ("group_id", int(job.gid)),
        ("group_name", string(&job.group)),
        ("het_job_id", set(0u32)),
        ("het_job_id_set", string("")),
        ("het_job_offset", set(0u32)),
        ("job_id", int(job.job_id)),
        ("job_resources", job_resources(job)),
        ("job_size_str", names(&[])),
        ("job_state", names(&job_state)),
        ("last_sched_evaluation", timestamp(fmt::secs(job.start_time.as_ref()).or(submit))),
        ("licenses", string("")),
        ("licenses_allocated", string("")),
        ("mail_type", names(&[])),
        ("mail_user", string("")),
        ("max_cpus", set(0u32)),
        ("max_nodes", set(0u32)),
        ("mcs_label", string("")),
        ("memory_per_tres", string("")),
        ("name", string(&job.name)),
        ("network", string("")),
        ("nodes", string(&job.node_list)),
        ("nice", int(0)),
        ("tasks_per_core", unset()),
        ("tasks_per_tres", unset()),
        ("tasks_per_node", set(0u32)),
        ("tasks_per_socket", unset()),
        ("tasks_per_board", set(0u32)),
        ("cpus", set(cpus)),
        ("node_count", set(job.alloc_nodes.max(1))),
        ("tasks", set(1u32)),
        ("partition", string(&job.partition)),
        ("prefer", string("")),
        ("memory_per_cpu", unset()),
        ("memory_per_node", set(job.req_mem_mb)),
        ("minimum_cpus_per_node", set(job.req_cpus.max(1))),
        ("minimum_tmp_disk_per_node", set(0u32)),
        ("preempt_time", timestamp(None)),
        ("preemptable_time", timestamp(None)),
        ("pre_sus_time", timestamp(None)),
        ("hold", boolean(job.priority == 0)),
        ("priority", set(job.priority)),
        ("priority_by_partition", Json::List(Vec::new())),
        ("profile", names(&["NOT_SET"])),
        ("qos", string(&job.qos)),
        ("reboot", boolean(false)),
        ("required_nodes", string("")),
        ("required_switches", int(0)),
        ("requeue", boolean(true)),
        ("resize_time", timestamp(None)),
        ("restart_cnt", int(0)),
        ("resv_name", string(&job.reservation)),
        ("scheduled_nodes", string("")),
        ("segment_size", int(0)),
        ("selinux_context", string("")),
        ("shared", shared(job)),
        ("sockets_per_board", int(0)),
        ("sockets_per_node", unset()),
        ("start_time", timestamp(start)),
        ("state_description", string("")),
        ("state_reason", string(reason)),
        ("standard_input", string("/dev/null")),
        ("standard_output", string(&output)),
        ("standard_error", string(&output)),
        ("stdin_expanded", string("/dev/null")),
        ("stdout_expanded", string(&output)),
        ("stderr_expanded", string(&output)),
        ("submit_time", timestamp(submit)),
        ("suspend_time", timestamp(None)),
        ("system_comment", string("")),
        ("time_limit", number(time_limit)),
        ("time_minimum", set(0u32)),
        ("threads_per_core", unset()),
        ("tres_bind", string("")),
        ("tres_freq", string("")),
        ("tres_per_job", string("")),
        ("tres_per_node", string(&tres_per_node)),
        ("tres_per_socket", string("")),
        ("tres_per_task", string("")),
        ("tres_req_str", string(&tres_text(job.req_cpus, job.req_mem_mb, job))),
        (
            "tres_alloc_str",
            string(&if pending { String::new() } else { tres_text(job.alloc_cpus, job.req_mem_mb, job) }),
        ),
        ("user_id", int(job.uid)),
        ("user_name", string(&job.user)),
        ("maximum_switch_wait_time", int(0)),
        ("wckey", string("")),
        ("current_working_directory", string(WORK_DIR)),
    ])
}

/// `OPENAPI_JOB_INFO_RESP`: what `squeue --json` and `scontrol show job --json` print.
pub fn jobs_document(jobs: &[&pb::Job], now: i64, about: &Meta<'_>) -> Json {
    let records = jobs.iter().map(|job| job_info(job, about.cluster)).collect();
    // DUMP_FUNC(JOB_INFO_MSG) warns when there is nothing to dump.
    let warnings: &[&str] = if jobs.is_empty() { &["Zero jobs to dump"] } else { &[] };
    response(
        vec![
            ("jobs", Json::List(records)),
            ("last_backfill", timestamp(Some(now))),
            ("last_update", timestamp(Some(now))),
        ],
        about,
        warnings,
    )
}

/// An object built from data_parser paths (`time/start`): a path's first part opens (or reuses)
/// a nested object at the place it first appears, as the parser's dump does.
fn object(entries: Vec<(&'static str, Json)>) -> Json {
    fn insert(object: &mut Vec<(&'static str, Json)>, path: &'static str, value: Json) {
        match path.split_once('/') {
            None => object.push((path, value)),
            Some((head, rest)) => {
                let index = match object.iter().position(|(key, _)| *key == head) {
                    Some(index) => index,
                    None => {
                        object.push((head, Json::Object(Vec::new())));
                        object.len() - 1
                    }
                };
                if let Json::Object(inner) = &mut object[index].1 {
                    insert(inner, rest, value);
                }
            }
        }
    }
    let mut root = Vec::new();
    for (path, value) in entries {
        insert(&mut root, path, value);
    }
    Json::Object(root)
}

/// A TRES list (`TRES_STR`): `{type, name, id, count}` in the database's id order (cpu 1, mem 2
/// in megabytes, node 4, billing 5, GRES from 1001).
fn tres_list(cpus: u32, mem_mb: u64, node: bool, billing: Option<u32>, job: Option<&pb::Job>) -> Json {
    let entry = |kind: &str, name: &str, id: i64, count: i64| {
        Json::Object(vec![("type", string(kind)), ("name", string(name)), ("id", int(id)), ("count", int(count))])
    };
    let mut list = vec![entry("cpu", "", 1, i64::from(cpus)), entry("mem", "", 2, mem_mb as i64)];
    if node {
        list.push(entry("node", "", 4, 1));
    }
    if let Some(billing) = billing {
        list.push(entry("billing", "", 5, i64::from(billing)));
    }
    if let Some(job) = job.filter(|job| job.req_gpus > 0) {
        list.push(entry("gres", "gpu", 1001, i64::from(job.req_gpus)));
        if !job.gres_type.is_empty() {
            list.push(entry("gres", &format!("gpu:{}", job.gres_type), 1002, i64::from(job.req_gpus)));
        }
    }
    Json::List(list)
}

/// One step of an accounting record (`STEP`).
fn step_record(job: &pb::Job, step: &pb::JobStep) -> Json {
    let exit = if step.exit_signal > 0 {
        ExitStatus::Signaled(step.exit_signal as u16)
    } else {
        ExitStatus::Exited(step.exit_code.max(0) as u32)
    };
    let nodes: Vec<String> = fmt::expand_hostlist(&step.node_list);
    // The extern step (the job's container) is accounted with the job's billing too.
    let billing = (step.name == "extern").then_some(step.alloc_cpus);
    object(vec![
        ("time/elapsed", int(step.elapsed_seconds.max(0))),
        ("time/end", timestamp(fmt::secs(step.end_time.as_ref()))),
        ("exit_code", exit_code(exit)),
        ("nodes/count", int(nodes.len() as i64)),
        ("nodes/range", string(&step.node_list)),
        ("tasks/count", int(1)),
        // Deprecated since 24.11 but still dumped.
        ("pid", string("")),
        ("CPU/requested_frequency/min", unset()),
        ("CPU/requested_frequency/max", unset()),
        ("CPU/governor", names(&[])),
        ("kill_request_user", string("")),
        ("time/start", timestamp(fmt::secs(step.start_time.as_ref()))),
        ("state", names(&[fmt::state_long(fmt::state(step.state))])),
        ("statistics/CPU/actual_frequency", int(0)),
        ("statistics/energy/consumed", set(0u32)),
        ("step/id", string(&format!("{}.{}", job.job_id, step.name))),
        ("step/name", string(&step.name)),
        ("step/stderr", string("")),
        ("step/stdin", string("")),
        ("step/stdout", string("")),
        ("step/stderr_expanded", string("")),
        ("step/stdin_expanded", string("")),
        ("step/stdout_expanded", string("")),
        ("time/suspended", int(0)),
        ("time/system/seconds", int(0)),
        ("time/system/microseconds", int(0)),
        ("task/distribution", string("Unknown")),
        ("time/limit", unset()),
        ("time/total/seconds", int(0)),
        ("time/total/microseconds", int(0)),
        ("time/user/seconds", int(0)),
        ("time/user/microseconds", int(0)),
        ("nodes/list", Json::List(nodes.iter().map(|node| string(node)).collect())),
        ("tres/requested/max", Json::List(Vec::new())),
        ("tres/requested/min", Json::List(Vec::new())),
        ("tres/consumed/max", Json::List(Vec::new())),
        ("tres/consumed/min", Json::List(Vec::new())),
        ("tres/requested/average", Json::List(Vec::new())),
        ("tres/requested/total", Json::List(Vec::new())),
        ("tres/consumed/average", Json::List(Vec::new())),
        ("tres/consumed/total", Json::List(Vec::new())),
        ("tres/allocated", tres_list(step.alloc_cpus, job.req_mem_mb, true, billing, None)),
    ])
}

/// One accounting record as `JOB` (slurmdb) dumps it, with its steps unless `with_steps` is
/// false (`-X`). `kill_user` names who cancelled it.
pub fn accounting_record(job: &pb::Job, cluster: &str, kill_user: &str, with_steps: bool, now: i64) -> Json {
    let state = fmt::state(job.state);
    let started = fmt::secs(job.start_time.as_ref());
    let submit = fmt::secs(job.submit_time.as_ref());
    let eligible = fmt::secs(job.eligible_time.as_ref()).or(submit);
    let end = fmt::secs(job.end_time.as_ref());
    // JOB_PLANNED_TIME: how long it waited to start (sacct's Planned).
    let planned = match (eligible, started, end) {
        (None, _, _) => 0,
        (Some(eligible), Some(start), _) => start - eligible,
        (Some(eligible), None, Some(end)) => end - eligible,
        (Some(eligible), None, None) => now - eligible,
    };
    // Without a limit of its own the database holds the partition's (INFINITE) once the job
    // started, nothing before (sacct's UNLIMITED and Partition_Limit).
    let time_limit = match (job.time_limit_seconds, started) {
        (Some(seconds), _) => Number::Set(u64::from(fmt::limit_minutes(seconds) as u32)),
        (None, Some(_)) => Number::Infinite,
        (None, None) => Number::Unset,
    };
    let reason = if job.reason.is_empty() { "None" } else { &job.reason };
    let steps = if with_steps { job.steps.iter().map(|step| step_record(job, step)).collect() } else { Vec::new() };
    let allocated = if started.is_some() && job.alloc_cpus > 0 {
        tres_list(job.alloc_cpus, job.req_mem_mb, true, Some(job.alloc_cpus), Some(job))
    } else {
        Json::List(Vec::new())
    };
    object(vec![
        ("account", string(&job.account)),
        ("comment/administrator", string("")),
        ("allocation_nodes", int(if started.is_some() { job.alloc_nodes.max(1) } else { 0 })),
        ("array/job_id", int(0)),
        ("array/limits/max/running/tasks", int(0)),
        ("array/task_id", unset()),
        ("array/task", string("")),
        (
            "association",
            Json::Object(vec![
                ("account", string("")),
                ("cluster", string(cluster)),
                ("partition", string("")),
                ("user", string("")),
                ("id", int(0)),
            ]),
        ),
        ("block", string("")),
        ("cluster", string(cluster)),
        ("constraints", string("")),
        ("container", string("")),
        ("derived_exit_code", exit_code(ExitStatus::Exited(0))),
        ("comment/job", string(&job.comment)),
        ("time/elapsed", int(job.elapsed_seconds.max(0))),
        ("time/eligible", int(eligible.unwrap_or(0))),
        ("time/end", int(end.unwrap_or(0))),
        ("exit_code", exit_code(ExitStatus::of_job(job))),
        ("extra", string(&job.extra)),
        ("failed_node", string("")),
        ("flags", names(&[if started.is_some() { "STARTED_ON_SCHEDULE" } else { "NONE" }])),
        ("group", string(&job.group)),
        ("het/job_id", int(0)),
        ("het/job_offset", unset()),
        ("job_id", int(job.job_id)),
        ("name", string(&job.name)),
        ("licenses", string("")),
        ("mcs/label", string("")),
        ("nodes", string(if job.node_list.is_empty() { "None assigned" } else { &job.node_list })),
        ("partition", string(&job.partition)),
        ("hold", boolean(job.priority == 0)),
        ("priority", set(job.priority)),
        ("qos", string(&job.qos)),
        ("qosreq", string("")),
        ("required/CPUs", int(job.req_cpus)),
        ("required/memory_per_cpu", unset()),
        ("required/memory_per_node", set(job.req_mem_mb)),
        ("kill_request_user", string(kill_user)),
        ("restart_cnt", int(0)),
        ("reservation/id", int(0)),
        ("reservation/name", string(&job.reservation)),
        ("reservation/requested", string(&job.reservation)),
        ("time/planned", set(planned.max(0) as u64)),
        ("script", string("")),
        ("segment_size", int(0)),
        ("stdin_expanded", string("")),
        ("stdout_expanded", string("")),
        ("stderr_expanded", string("")),
        ("stdout", string("")),
        ("stderr", string("")),
        ("stdin", string("")),
        ("time/start", int(started.unwrap_or(0))),
        ("state/current", names(&[fmt::state_long(state)])),
        ("state/reason", string(reason)),
        ("steps", Json::List(steps)),
        ("time/submission", int(submit.unwrap_or(0))),
        ("submit_line", string("")),
        ("time/suspended", int(0)),
        ("comment/system", string("")),
        ("time/system/seconds", int(0)),
        ("time/system/microseconds", int(0)),
        ("time/limit", number(time_limit)),
        ("time/total/seconds", int(0)),
        ("time/total/microseconds", int(0)),
        ("tres/allocated", allocated),
        ("tres/requested", tres_list(job.req_cpus, job.req_mem_mb, true, Some(job.req_cpus), Some(job))),
        ("used_gres", string("")),
        ("user", string(&job.user)),
        ("time/user/seconds", int(0)),
        ("time/user/microseconds", int(0)),
        ("wckey", Json::Object(vec![("wckey", string("")), ("flags", names(&[]))])),
        ("working_directory", string("")),
    ])
}

/// `OPENAPI_SLURMDBD_JOBS_RESP`: what `sacct --json` prints.
pub fn accounting_document(records: Vec<Json>, about: &Meta<'_>) -> Json {
    response(vec![("jobs", Json::List(records))], about, &[])
}

/// `NODE_STATES` of a node: `node_state_string_complete`'s parts (`MIXED+DRAIN`).
fn node_states(node: &pb::SlurmNode) -> Json {
    let states: Vec<&str> = super::scontrol::node_state(node).split('+').collect();
    names(&states)
}

/// One node as `NODE` dumps it (`scontrol --json show node`), with the values `show node`
/// prints: one socket of `cpus` cores, one thread per core, no load, no power, free memory as
/// RealMemory − AllocMem.
pub fn node_info(node: &pb::SlurmNode) -> Json {
    let boot = fmt::secs(node.boot_time.as_ref());
    let alloc_tres = super::scontrol::node_alloc_tres(node);
    let gres = fmt::node_gres(node).unwrap_or_default();
    // Slurm adds the indices in use (`(IDX:0-1)`); the emulator's nodes do not say which.
    let gres_used = match (node.gpus, node.gres_type.as_str()) {
        (0, _) => String::new(),
        (_, "") => format!("gpu:{}", node.alloc_gpus),
        (_, kind) => format!("gpu:{kind}:{}", node.alloc_gpus),
    };
    object(vec![
        ("architecture", string("x86_64")),
        ("burstbuffer_network_address", string("")),
        ("boards", int(1)),
        ("boot_time", timestamp(boot)),
        ("tls_cert_last_renewal", timestamp(None)),
        ("cert_flags", names(&[])),
        ("cluster_name", string("")),
        ("cores", int(node.cpus)),
        ("specialized_cores", int(0)),
        ("cpu_binding", int(0)),
        ("cpu_load", int(0)),
        ("free_mem", set(node.real_memory_mb.saturating_sub(node.alloc_memory_mb))),
        ("cpus", int(node.cpus)),
        ("effective_cpus", int(node.cpus)),
        ("specialized_cpus", string("")),
        (
            "energy",
            object(vec![
                ("average_watts", int(0)),
                ("base_consumed_energy", int(0)),
                ("consumed_energy", int(0)),
                ("current_watts", set(0u32)),
                ("previous_consumed_energy", int(0)),
                ("last_collected", int(0)),
            ]),
        ),
        ("extra", string("")),
        ("features", names(&[])),
        ("active_features", names(&[])),
        ("gpu_spec", string("")),
        ("gres", string(&gres)),
        ("gres_drained", string("")),
        ("gres_used", string(&gres_used)),
        ("instance_id", string("")),
        ("instance_type", string("")),
        ("last_busy", timestamp(fmt::secs(node.last_busy_time.as_ref()))),
        ("mcs_label", string("")),
        ("specialized_memory", int(0)),
        ("name", string(&node.name)),
        ("next_state_after_reboot", names(&["INVALID"])),
        ("address", string(&node.name)),
        ("hostname", string(&node.name)),
        ("state", node_states(node)),
        ("operating_system", string(&node.os)),
        ("owner", string("")),
        ("partitions", Json::List(node.partitions.iter().map(|name| string(name)).collect())),
        ("port", int(SLURMD_PORT)),
        ("real_memory", int(node.real_memory_mb as i64)),
        ("res_cores_per_gpu", int(0)),
        ("comment", string("")),
        ("reason", string(&node.drain_reason)),
        ("reason_changed_at", timestamp(fmt::secs(node.drain_time.as_ref()))),
        ("reason_set_by_user", string(&node.drain_user)),
        ("resume_after", timestamp(None)),
        ("reservation", string("")),
        ("alloc_memory", int(node.alloc_memory_mb as i64)),
        ("alloc_cpus", int(node.alloc_cpus)),
        ("alloc_idle_cpus", int(i64::from(node.cpus) - i64::from(node.alloc_cpus))),
        ("tres_used", string(&alloc_tres)),
        ("slurmd_start_time", timestamp(boot)),
        ("sockets", int(1)),
        ("threads", int(1)),
        ("temporary_disk", int(0)),
        ("weight", int(1)),
        ("topology", string("")),
        ("tres", string(&super::scontrol::cfg_tres(node.cpus, node.real_memory_mb, None, node.gpus))),
        ("version", string(super::slurm_conf::SLURM_VERSION)),
    ])
}

/// slurm.conf's `SlurmdPort` (`scontrol show config`).
const SLURMD_PORT: i64 = 6818;

/// `SHARED_FORCE`: the partition's `OverSubscribe=FORCE` bit of `max_share`.
const SHARED_FORCE: u64 = 0x8000;

/// One partition as `PARTITION_INFO` dumps it; `members` are its nodes (its TRES). Values are
/// the ones `show partition` prints (no defaults or maximums but the time limit, one job per
/// resource unless OverSubscribe says otherwise).
pub fn partition_info(partition: &pb::Partition, members: &[&pb::SlurmNode]) -> Json {
    let max_share = match partition.over_subscribe.to_ascii_uppercase().as_str() {
        "EXCLUSIVE" => 0,
        "YES" => 4,
        "FORCE" => SHARED_FORCE | 4,
        _ => 1,
    };
    let max_time = match partition.max_time_seconds {
        Some(seconds) => Number::Set(u64::from(fmt::limit_minutes(seconds) as u32)),
        None => Number::Infinite,
    };
    let memory: u64 = members.iter().map(|node| node.real_memory_mb).sum();
    let gpus: u32 = members.iter().map(|node| node.gpus).sum();
    let tres = super::scontrol::cfg_tres(partition.total_cpus, memory, Some(partition.nodes.len()), gpus);
    let force: &[&str] = if max_share & SHARED_FORCE != 0 { &["force"] } else { &[] };
    object(vec![
        ("nodes/allowed_allocation", string("")),
        ("accounts/allowed", string("")),
        ("groups/allowed", string("")),
        ("qos/allowed", string("")),
        ("alternate", string("")),
        ("tres/billing_weights", string("")),
        ("cluster", string("")),
        ("select_type", names(&[])),
        ("cpus/task_binding", int(0)),
        ("defaults/memory_per_cpu", int(0)),
        ("defaults/partition_memory_per_cpu", unset()),
        ("defaults/partition_memory_per_node", set(0u32)),
        ("defaults/time", unset()),
        ("accounts/deny", string("")),
        ("qos/deny", string("")),
        ("grace_time", int(0)),
        ("defaults/job", string("")),
        ("maximums/cpus_per_node", number(Number::Infinite)),
        ("maximums/cpus_per_socket", number(Number::Infinite)),
        ("maximums/memory_per_cpu", int(0)),
        ("maximums/partition_memory_per_cpu", unset()),
        ("maximums/partition_memory_per_node", set(0u32)),
        ("maximums/nodes", number(Number::Infinite)),
        ("maximums/shares", int(max_share as i64)),
        ("maximums/oversubscribe/jobs", int((max_share & !SHARED_FORCE) as i64)),
        ("maximums/oversubscribe/flags", names(force)),
        ("maximums/time", number(max_time)),
        ("minimums/nodes", int(0)),
        ("name", string(&partition.name)),
        ("nodes/configured", string(&fmt::hostlist(&partition.nodes))),
        ("node_sets", string("")),
        ("maximums/over_time_limit", unset()),
        ("priority/job_factor", int(1)),
        ("priority/tier", int(partition.priority_tier)),
        ("qos/assigned", string("")),
        ("timeouts/resume", unset()),
        ("topology", string("")),
        ("partition/state", names(&["UP"])),
        ("suspend_time", unset()),
        ("timeouts/suspend", unset()),
        ("cpus/total", int(partition.total_cpus)),
        ("nodes/total", int(partition.nodes.len() as i64)),
        ("tres/configured", string(&tres)),
    ])
}

/// `OPENAPI_NODES_RESP`: `scontrol --json show node`.
pub fn nodes_document(nodes: &[&pb::SlurmNode], now: i64, about: &Meta<'_>) -> Json {
    let records = nodes.iter().map(|node| node_info(node)).collect();
    response(vec![("nodes", Json::List(records)), ("last_update", timestamp(Some(now)))], about, &[])
}

/// `OPENAPI_PARTITION_RESP`: `scontrol --json show partition`.
pub fn partitions_document(partitions: &[&pb::Partition], nodes: &[pb::SlurmNode], now: i64, about: &Meta<'_>) -> Json {
    let records = partitions
        .iter()
        .map(|partition| {
            let members: Vec<&pb::SlurmNode> =
                nodes.iter().filter(|node| partition.nodes.contains(&node.name)).collect();
            partition_info(partition, &members)
        })
        .collect();
    response(vec![("partitions", Json::List(records)), ("last_update", timestamp(Some(now)))], about, &[])
}

/// One line of sinfo as `SINFO_DATA` dumps it: `nodes` of `partition` that share a line
/// (`all_nodes` are every node, for the partition's own record).
pub fn sinfo_entry(partition: &pb::Partition, nodes: &[&pb::SlurmNode], all_nodes: &[pb::SlurmNode]) -> Json {
    let busy = |node: &&pb::SlurmNode| node.alloc_cpus > 0;
    let drained = |node: &&pb::SlurmNode| {
        matches!(
            pb::SlurmNodeState::try_from(node.state),
            Ok(pb::SlurmNodeState::Drained | pb::SlurmNodeState::Draining)
        )
    };
    let count = |keep: &dyn Fn(&&pb::SlurmNode) -> bool| nodes.iter().filter(|node| keep(node)).count() as i64;
    let cpus_total: i64 = nodes.iter().map(|node| i64::from(node.cpus)).sum();
    let cpus_alloc: i64 = nodes.iter().map(|node| i64::from(node.alloc_cpus)).sum();
    // sinfo counts a drained node's free CPUs as "other", not idle.
    let cpus_other: i64 = nodes
        .iter()
        .filter(|node| drained(node))
        .map(|node| i64::from(node.cpus - node.alloc_cpus.min(node.cpus)))
        .sum();
    let min_max = |value: &dyn Fn(&pb::SlurmNode) -> i64| {
        let values: Vec<i64> = nodes.iter().map(|node| value(node)).collect();
        (values.iter().copied().min().unwrap_or(0), values.iter().copied().max().unwrap_or(0))
    };
    let (min_cpus, max_cpus) = min_max(&|node| i64::from(node.cpus));
    let (min_mem, max_mem) = min_max(&|node| node.real_memory_mb as i64);
    let (min_cores, max_cores) = min_max(&|node| i64::from(node.cpus));
    let (min_free, max_free) = min_max(&|node| node.real_memory_mb.saturating_sub(node.alloc_memory_mb) as i64);
    let ones = if nodes.is_empty() { (0, 0) } else { (1, 1) };
    let state = nodes.first().map_or_else(|| names(&[]), |node| node_states(node));
    let first = nodes.first();
    let gres = first.and_then(|node| fmt::node_gres(node)).unwrap_or_default();
    let members: Vec<&pb::SlurmNode> = all_nodes.iter().filter(|node| partition.nodes.contains(&node.name)).collect();
    let node_names: Vec<Json> = nodes.iter().map(|node| string(&node.name)).collect();
    let reason_time = first.and_then(|node| fmt::secs(node.drain_time.as_ref())).unwrap_or(0);
    object(vec![
        ("port", int(SLURMD_PORT)),
        ("node/state", state),
        ("nodes/allocated", int(count(&|node| busy(node) && !drained(node)))),
        ("nodes/idle", int(count(&|node| !busy(node) && !drained(node)))),
        ("nodes/other", int(count(&|node| drained(node)))),
        ("nodes/total", int(nodes.len() as i64)),
        ("cpus/allocated", int(cpus_alloc)),
        ("cpus/idle", int(cpus_total - cpus_alloc - cpus_other)),
        ("cpus/other", int(cpus_other)),
        ("cpus/total", int(cpus_total)),
        ("cpus/minimum", int(min_cpus)),
        ("cpus/maximum", int(max_cpus)),
        ("sockets/minimum", int(ones.0)),
        ("sockets/maximum", int(ones.1)),
        ("cores/minimum", int(min_cores)),
        ("cores/maximum", int(max_cores)),
        ("threads/minimum", int(ones.0)),
        ("threads/maximum", int(ones.1)),
        ("disk/minimum", int(0)),
        ("disk/maximum", int(0)),
        ("memory/minimum", int(min_mem)),
        ("memory/maximum", int(max_mem)),
        ("weight/minimum", int(ones.0)),
        ("weight/maximum", int(ones.1)),
        ("cpus/load/minimum", int(0)),
        ("cpus/load/maximum", int(0)),
        ("memory/free/minimum", if nodes.is_empty() { unset() } else { set(min_free as u64) }),
        ("memory/free/maximum", if nodes.is_empty() { unset() } else { set(max_free as u64) }),
        ("cpus/per_node/max", number(Number::Infinite)),
        ("memory/allocated", int(nodes.iter().map(|node| node.alloc_memory_mb as i64).sum::<i64>())),
        ("features/total", string("")),
        ("features/active", string("")),
        ("gres/total", string(&gres)),
        ("gres/used", string("")),
        ("cluster", string("")),
        ("comment", string("")),
        ("extra", string("")),
        ("reason/description", string(first.map_or("", |node| node.drain_reason.as_str()))),
        ("reason/time", int(reason_time)),
        ("reservation", string("")),
        ("reason/user", string(first.map_or("", |node| node.drain_user.as_str()))),
        ("resource_spec/cpus", string("")),
        ("resource_spec/memory", int(0)),
        ("nodes/hostnames", Json::List(node_names.clone())),
        ("nodes/addresses", Json::List(node_names.clone())),
        ("nodes/nodes", Json::List(node_names)),
        ("partition", partition_info(partition, &members)),
    ])
}

/// `OPENAPI_SINFO_RESP`: what `sinfo --json` prints.
pub fn sinfo_document(entries: Vec<Json>, about: &Meta<'_>) -> Json {
    response(vec![("sinfo", Json::List(entries))], about, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_slurm_dumps_them() {
        assert_eq!(serde_json::to_string(&set(5u32)).unwrap(), r#"{"set":true,"infinite":false,"number":5}"#);
        assert_eq!(serde_json::to_string(&unset()).unwrap(), r#"{"set":false,"infinite":false,"number":0}"#);
        assert_eq!(
            serde_json::to_string(&number(Number::Infinite)).unwrap(),
            r#"{"set":false,"infinite":true,"number":0}"#
        );
    }

    #[test]
    fn exit_codes_read_as_slurm_dumps_them() {
        let text = |status| serde_json::to_string(&exit_code(status)).unwrap();
        assert_eq!(
            text(ExitStatus::Exited(3)),
            r#"{"status":["ERROR"],"return_code":{"set":true,"infinite":false,"number":3},"signal":{"id":{"set":false,"infinite":false,"number":0},"name":""}}"#
        );
        assert_eq!(
            text(ExitStatus::Signaled(15)),
            r#"{"status":["SIGNALED"],"return_code":{"set":false,"infinite":false,"number":0},"signal":{"id":{"set":true,"infinite":false,"number":15},"name":"TERM"}}"#
        );
        assert!(text(ExitStatus::Pending).starts_with(r#"{"status":["PENDING"],"return_code":{"set":false"#));
    }

    #[test]
    fn the_spec_names_the_data_parser() {
        assert!(check_spec("squeue", "").is_ok());
        assert!(check_spec("squeue", "v0.0.43").is_ok());
        assert!(check_spec("squeue", "data_parser/v0.0.43").is_ok());
        let refused = check_spec("squeue", "v0.0.39").expect_err("not this release's");
        assert!(refused.starts_with("squeue: error: Unable to find data_parser plugin v0.0.39"), "{refused}");
    }

    #[test]
    fn job_records_have_every_key_of_job_info_in_slurms_order() {
        let Json::Object(entries) = job_info(&pb::Job { job_id: 7, ..Default::default() }, "slurm") else {
            panic!("an object")
        };
        let keys: Vec<&str> = entries.iter().map(|(key, _)| *key).collect();
        // PARSER_ARRAY(JOB_INFO) of v0.0.43 dumps 132 keys (its skipped and removed fields print none).
        assert_eq!(keys.len(), 132);
        assert_eq!(keys.iter().collect::<std::collections::BTreeSet<_>>().len(), 132, "no key twice");
        assert_eq!(&keys[..4], ["account", "accrue_time", "admin_comment", "allocating_node"]);
        assert_eq!(&keys[keys.len() - 3..], ["maximum_switch_wait_time", "wckey", "current_working_directory"]);
        let document = jobs_document(&[], 0, &Meta { command: &[], user: "root", group: "root", cluster: "slurm" });
        assert!(document.pretty().starts_with("{\n  \"jobs\": [],\n  \"last_backfill\": {\n"), "{}", document.pretty());
    }

    #[test]
    fn accounting_records_nest_slurms_paths_in_order() {
        let step =
            pb::JobStep { name: "batch".into(), node_list: "slurm-cpu-0".into(), alloc_cpus: 2, ..Default::default() };
        let job = pb::Job { job_id: 9, steps: vec![step], ..Default::default() };
        let Json::Object(entries) = accounting_record(&job, "slurm", "", true, 0) else { panic!("an object") };
        let keys: Vec<&str> = entries.iter().map(|(key, _)| *key).collect();
        // PARSER_ARRAY(JOB)'s 72 paths, each nested object where its first path puts it.
        assert_eq!(
            keys,
            [
                "account",
                "comment",
                "allocation_nodes",
                "array",
                "association",
                "block",
                "cluster",
                "constraints",
                "container",
                "derived_exit_code",
                "time",
                "exit_code",
                "extra",
                "failed_node",
                "flags",
                "group",
                "het",
                "job_id",
                "name",
                "licenses",
                "mcs",
                "nodes",
                "partition",
                "hold",
                "priority",
                "qos",
                "qosreq",
                "required",
                "kill_request_user",
                "restart_cnt",
                "reservation",
                "script",
                "segment_size",
                "stdin_expanded",
                "stdout_expanded",
                "stderr_expanded",
                "stdout",
                "stderr",
                "stdin",
                "state",
                "steps",
                "submit_line",
                "tres",
                "used_gres",
                "user",
                "wckey",
                "working_directory",
            ]
        );
        let text = serde_json::to_string(&Json::Object(entries)).unwrap();
        assert!(text.contains(r#""comment":{"administrator":"","job":"","system":""}"#), "{text}");
        assert!(text.contains(r#""step":{"id":"9.batch","name":"batch","stderr":"","stdin":"","stdout":"""#), "{text}");
        assert!(text.contains(r#""nodes":{"count":1,"range":"slurm-cpu-0","list":["slurm-cpu-0"]}"#), "{text}");
    }

    /// Every path to a value (`time/start`), in order: a `{set, infinite, number}` is one value.
    fn leaf_paths(json: &Json, prefix: &str, out: &mut Vec<String>) {
        let is_number =
            |entries: &[(&str, Json)]| entries.iter().map(|(key, _)| *key).eq(["set", "infinite", "number"]);
        match json {
            Json::Object(entries) if !is_number(entries) => {
                for (key, value) in entries {
                    let path = if prefix.is_empty() { (*key).to_owned() } else { format!("{prefix}/{key}") };
                    leaf_paths(value, &path, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }

    #[test]
    fn node_partition_and_sinfo_records_have_every_path_of_their_parsers() {
        let node = pb::SlurmNode { name: "slurm-cpu-0".into(), cpus: 16, ..Default::default() };
        let partition = pb::Partition { name: "cpu".into(), nodes: vec!["slurm-cpu-0".into()], ..Default::default() };
        let paths = |json: &Json| {
            let mut out = Vec::new();
            leaf_paths(json, "", &mut out);
            out
        };
        // NODE: 57 paths (its removed ones print none), `energy` an object of 6.
        let node_paths = paths(&node_info(&node));
        assert_eq!(node_paths.len(), 57 - 1 + 6);
        assert_eq!(node_paths.first().map(String::as_str), Some("architecture"));
        assert!(
            node_paths.contains(&"energy/current_watts/set".to_owned())
                || node_paths.contains(&"energy/current_watts".to_owned())
        );
        // PARTITION_INFO: 43 paths, numbers that may be unset being objects of 3.
        let partition_json = partition_info(&partition, &[&node]);
        let Json::Object(entries) = &partition_json else { panic!("an object") };
        let top: Vec<&str> = entries.iter().map(|(key, _)| *key).collect();
        assert_eq!(paths(&partition_json).len(), 43);
        assert_eq!(
            top,
            [
                "nodes",
                "accounts",
                "groups",
                "qos",
                "alternate",
                "tres",
                "cluster",
                "select_type",
                "cpus",
                "defaults",
                "grace_time",
                "maximums",
                "minimums",
                "name",
                "node_sets",
                "priority",
                "timeouts",
                "topology",
                "partition",
                "suspend_time",
            ]
        );
        // SINFO_DATA: 47 paths, the last the partition's record.
        let entry = sinfo_entry(&partition, &[&node], std::slice::from_ref(&node));
        let Json::Object(entries) = &entry else { panic!("an object") };
        assert_eq!(entries.first().map(|(key, _)| *key), Some("port"));
        assert_eq!(entries.last().map(|(key, _)| *key), Some("partition"));
        let entry_paths = paths(&entry);
        assert_eq!(entry_paths.iter().filter(|path| !path.starts_with("partition/")).count(), 46);
        assert!(entry_paths.contains(&"cpus/load/minimum".to_owned()));
    }

    #[test]
    fn gpu_indices_read_as_ranges() {
        let job =
            pb::Job { req_gpus: 3, gres_type: "h100".into(), gpu_indices: vec![2, 0, 1, 5], ..Default::default() };
        assert_eq!(gres_detail(&job), Json::List(vec![string("gpu:h100:4(IDX:0-2,5)")]));
    }
}
