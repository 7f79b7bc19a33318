//! `scontrol show config`: Slurm 25.05's `slurm_print_ctl_conf`, the keys of
//! `slurm_ctl_conf_2_key_pairs` in its order, each `%-23s = %s`, after the line
//! "Configuration data as of <time>", then the controller's ping line.
//!
//! The emulator gives what its values set or its controller derives (`GetSlurmConfig`); every
//! other key prints Slurm 25.05's default for a slurm.conf that leaves it unset (read from
//! 25.05's `read_config.c`/`read_config.h`; where 25.05 did not change it, as a Slurm 22.05.8
//! controller with such a slurm.conf printed it). 25.05 differs from 22.05 here: plugin types
//! without a default print `(null)` (22.05: `…/none`), booleans print `yes`/`no` (22.05:
//! `Yes`/`No`), the default PriorityType is `priority/multifactor` (with its weights),
//! `TreeWidth` is 16, `TopologyPlugin` `topology/flat`, and the Certgen/Certmgr/TLS/HashPlugin
//! keys are new while CoreSpecPlugin, ExtSensors*, GetEnvTimeout, JobCredential*, LaunchType,
//! Power*, RoutePlugin and SlurmctldPlugstack are gone; Prolog/Epilog print only when set.

use cwsandbox_client::emulator_v1 as pb;

use super::fmt::{self, TimeFormat};

/// What the cluster's accounting is: the emulator keeps the accounting `sacct` reads, as
/// SUNK's slurmdbd does.
const ACCOUNTING_STORAGE_TYPE: &str = "accounting_storage/slurmdbd";
/// slurmdbd's default port, which slurmctld uses when `AccountingStoragePort` is unset and the
/// type is slurmdbd.
const SLURMDBD_PORT: &str = "6819";
/// The version the views model.
pub const SLURM_VERSION: &str = "25.05.3";

/// `private_data_string`: the items in Slurm's order, `none` when empty.
fn private_data(given: &str) -> String {
    const ORDER: [&str; 8] = ["accounts", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"];
    let items: Vec<String> = given.split(',').map(|item| item.trim().to_ascii_lowercase()).collect();
    let known: Vec<&str> = ORDER.iter().copied().filter(|item| items.iter().any(|given| given == item)).collect();
    if known.is_empty() { "none".to_owned() } else { known.join(",") }
}

/// `prolog_flags2str`: the flags in Slurm's order, `(null)` when none.
fn prolog_flags(given: &str) -> String {
    const ORDER: [&str; 8] =
        ["Alloc", "Contain", "RunInJob", "DeferBatch", "NoHold", "ForceRequeueOnFail", "Serial", "X11"];
    let items: Vec<String> = given.split(',').map(|item| item.trim().to_ascii_lowercase()).collect();
    let known: Vec<&str> =
        ORDER.iter().copied().filter(|flag| items.iter().any(|given| *given == flag.to_ascii_lowercase())).collect();
    if known.is_empty() { "(null)".to_owned() } else { known.join(",") }
}

fn or_null(text: &str) -> String {
    if text.is_empty() { "(null)".to_owned() } else { text.to_owned() }
}

/// The key/value pairs of `slurm_ctl_conf_2_key_pairs`, in its order.
pub fn key_pairs(config: &pb::SlurmConfig, format: &TimeFormat, now: i64) -> Vec<(String, String)> {
    let boot_time = fmt::time_str(fmt::secs(config.boot_time.as_ref()), format, now, 256);
    let null = "(null)".to_owned();
    let pairs: Vec<(&str, String)> = vec![
        ("AccountingStorageBackupHost", null.clone()),
        ("AccountingStorageEnforce", "none".to_owned()),
        ("AccountingStorageHost", "localhost".to_owned()),
        ("AccountingStorageExternalHost", null.clone()),
        ("AccountingStorageParameters", null.clone()),
        ("AccountingStoragePort", SLURMDBD_PORT.to_owned()),
        ("AccountingStorageTRES", "cpu,mem,energy,node,billing,fs/disk,vmem,pages".to_owned()),
        ("AccountingStorageType", ACCOUNTING_STORAGE_TYPE.to_owned()),
        ("AccountingStorageUser", "root".to_owned()),
        ("AccountingStoreFlags", null.clone()),
        ("AcctGatherEnergyType", null.clone()),
        ("AcctGatherFilesystemType", null.clone()),
        ("AcctGatherInterconnectType", null.clone()),
        ("AcctGatherNodeFreq", "0 sec".to_owned()),
        ("AcctGatherProfileType", null.clone()),
        ("AllowSpecResourcesUsage", "no".to_owned()),
        ("AuthAltTypes", null.clone()),
        ("AuthAltParameters", null.clone()),
        ("AuthInfo", null.clone()),
        ("AuthType", "auth/munge".to_owned()),
        ("BatchStartTimeout", "10 sec".to_owned()),
        ("BcastExclude", "/lib,/usr/lib,/lib64,/usr/lib64".to_owned()),
        ("BcastParameters", null.clone()),
        ("BOOT_TIME", boot_time),
        ("BurstBufferType", null.clone()),
        ("CertgenParameters", null.clone()),
        ("CertgenType", null.clone()),
        ("CertmgrParameters", null.clone()),
        ("CertmgrType", null.clone()),
        ("CliFilterPlugins", null.clone()),
        ("ClusterName", or_null(&config.cluster_name)),
        ("CommunicationParameters", null.clone()),
        ("CompleteWait", "0 sec".to_owned()),
        ("CpuFreqDef", "Unknown".to_owned()),
        ("CpuFreqGovernors", "OnDemand,Performance,UserSpace".to_owned()),
        ("CredType", "cred/munge".to_owned()),
        ("DataParserParameters", null.clone()),
        ("DebugFlags", null.clone()),
        ("DefMemPerNode", "UNLIMITED".to_owned()),
        ("DependencyParameters", null.clone()),
        ("DisableRootJobs", "no".to_owned()),
        ("EioTimeout", "60".to_owned()),
        ("EnforcePartLimits", "NO".to_owned()),
        ("EpilogMsgTime", "2000 usec".to_owned()),
        // Printed because the default PriorityType is not priority/basic.
        ("FairShareDampeningFactor", "1".to_owned()),
        ("FederationParameters", null.clone()),
        ("FirstJobId", config.first_job_id.to_string()),
        ("GresTypes", null.clone()),
        ("GpuFreqDef", null.clone()),
        ("GroupUpdateForce", "1".to_owned()),
        ("GroupUpdateTime", "600 sec".to_owned()),
        ("HASH_VAL", "Match".to_owned()),
        ("HashPlugin", "hash/k12".to_owned()),
        ("HealthCheckInterval", "0 sec".to_owned()),
        ("HealthCheckNodeState", "ANY".to_owned()),
        ("HealthCheckProgram", null.clone()),
        ("InactiveLimit", "0 sec".to_owned()),
        ("InteractiveStepOptions", "--interactive --preserve-env --pty $SHELL".to_owned()),
        ("JobAcctGatherFrequency", "30".to_owned()),
        ("JobAcctGatherType", null.clone()),
        ("JobAcctGatherParams", null.clone()),
        ("JobCompHost", "localhost".to_owned()),
        ("JobCompLoc", null.clone()),
        ("JobCompParams", null.clone()),
        ("JobCompPort", "0".to_owned()),
        ("JobCompType", null.clone()),
        ("JobCompUser", "root".to_owned()),
        ("JobContainerType", null.clone()),
        ("JobDefaults", null.clone()),
        ("JobFileAppend", "0".to_owned()),
        ("JobRequeue", "1".to_owned()),
        ("JobSubmitPlugins", null.clone()),
        ("KillOnBadExit", "0".to_owned()),
        ("KillWait", format!("{} sec", config.kill_wait_seconds)),
        ("LaunchParameters", null.clone()),
        ("Licenses", null.clone()),
        ("LogTimeFormat", "iso8601_ms".to_owned()),
        ("MailDomain", null.clone()),
        ("MailProg", "/bin/mail".to_owned()),
        ("MaxArraySize", "1001".to_owned()),
        ("MaxBatchRequeue", "5".to_owned()),
        ("MaxDBDMsgs", "10000".to_owned()),
        ("MaxJobCount", "10000".to_owned()),
        ("MaxJobId", "67043328".to_owned()),
        ("MaxMemPerNode", "UNLIMITED".to_owned()),
        ("MaxNodeCount", config.node_count.to_string()),
        ("MaxStepCount", "40000".to_owned()),
        ("MaxTasksPerNode", "512".to_owned()),
        ("MCSPlugin", null.clone()),
        ("MCSParameters", null.clone()),
        ("MessageTimeout", "10 sec".to_owned()),
        ("MinJobAge", format!("{} sec", config.min_job_age_seconds)),
        ("MpiDefault", null.clone()),
        ("MpiParams", null.clone()),
        ("NEXT_JOB_ID", config.next_job_id.to_string()),
        ("NodeFeaturesPlugins", null.clone()),
        ("OverTimeLimit", "0 min".to_owned()),
        ("PluginDir", "/usr/local/lib/slurm".to_owned()),
        ("PlugStackConfig", null.clone()),
        ("PreemptMode", if config.preempt_mode.is_empty() { "OFF".to_owned() } else { config.preempt_mode.clone() }),
        ("PreemptParameters", null.clone()),
        ("PreemptType", or_null(&config.preempt_type)),
        ("PreemptExemptTime", "00:00:00".to_owned()),
        ("PrEpParameters", null.clone()),
        ("PrEpPlugins", "prep/script".to_owned()),
        ("PriorityParameters", null.clone()),
        ("PrioritySiteFactorParameters", null.clone()),
        ("PrioritySiteFactorPlugin", null.clone()),
        ("PriorityDecayHalfLife", "7-00:00:00".to_owned()),
        ("PriorityCalcPeriod", "00:05:00".to_owned()),
        ("PriorityFavorSmall", "no".to_owned()),
        ("PriorityFlags", null.clone()),
        ("PriorityMaxAge", "7-00:00:00".to_owned()),
        ("PriorityType", "priority/multifactor".to_owned()),
        ("PriorityUsageResetPeriod", "NONE".to_owned()),
        ("PriorityWeightAge", "0".to_owned()),
        ("PriorityWeightAssoc", "0".to_owned()),
        ("PriorityWeightFairShare", "0".to_owned()),
        ("PriorityWeightJobSize", "0".to_owned()),
        ("PriorityWeightPartition", "0".to_owned()),
        ("PriorityWeightQOS", "0".to_owned()),
        ("PriorityWeightTRES", null.clone()),
        ("PrivateData", private_data(&config.private_data)),
        ("ProctrackType", "proctrack/cgroup".to_owned()),
        ("PrologEpilogTimeout", "65534".to_owned()),
        ("PrologFlags", prolog_flags(&config.prolog_flags)),
        ("PropagatePrioProcess", "0".to_owned()),
        ("PropagateResourceLimits", "ALL".to_owned()),
        ("PropagateResourceLimitsExcept", null.clone()),
        ("RebootProgram", null.clone()),
        ("ReconfigFlags", null.clone()),
        ("RequeueExit", null.clone()),
        ("RequeueExitHold", null.clone()),
        ("ResumeFailProgram", null.clone()),
        ("ResumeProgram", null.clone()),
        ("ResumeRate", "300 nodes/min".to_owned()),
        ("ResumeTimeout", "60 sec".to_owned()),
        ("ResvEpilog", null.clone()),
        ("ResvOverRun", "0 min".to_owned()),
        ("ResvProlog", null.clone()),
        ("ReturnToService", "0".to_owned()),
        ("SchedulerParameters", null.clone()),
        ("SchedulerTimeSlice", "30 sec".to_owned()),
        ("SchedulerType", "sched/backfill".to_owned()),
        ("ScronParameters", null.clone()),
        ("SelectType", "select/cons_tres".to_owned()),
        ("SelectTypeParameters", "CR_CORE_MEMORY".to_owned()),
        ("SlurmUser", "root(0)".to_owned()),
        ("SlurmctldAddr", null.clone()),
        ("SlurmctldDebug", "info".to_owned()),
        ("SlurmctldHost[0]", or_null(&config.slurmctld_host)),
        ("SlurmctldLogFile", null.clone()),
        ("SlurmctldPort", "6817".to_owned()),
        ("SlurmctldSyslogDebug", null.clone()),
        ("SlurmctldPrimaryOffProg", null.clone()),
        ("SlurmctldPrimaryOnProg", null.clone()),
        ("SlurmctldTimeout", "120 sec".to_owned()),
        ("SlurmctldParameters", null.clone()),
        ("SlurmdDebug", "info".to_owned()),
        ("SlurmdLogFile", null.clone()),
        ("SlurmdParameters", null.clone()),
        ("SlurmdPidFile", "/var/run/slurmd.pid".to_owned()),
        ("SlurmdPort", "6818".to_owned()),
        ("SlurmdSpoolDir", "/var/spool/slurmd".to_owned()),
        ("SlurmdSyslogDebug", null.clone()),
        ("SlurmdTimeout", "300 sec".to_owned()),
        ("SlurmdUser", "root(0)".to_owned()),
        ("SlurmSchedLogFile", null.clone()),
        ("SlurmSchedLogLevel", "0".to_owned()),
        ("SlurmctldPidFile", "/var/run/slurmctld.pid".to_owned()),
        ("SLURM_CONF", "/etc/slurm/slurm.conf".to_owned()),
        ("SLURM_VERSION", SLURM_VERSION.to_owned()),
        ("SrunEpilog", null.clone()),
        ("SrunPortRange", "0-0".to_owned()),
        ("SrunProlog", null.clone()),
        ("StateSaveLocation", "/var/spool".to_owned()),
        ("SuspendExcNodes", null.clone()),
        ("SuspendExcParts", null.clone()),
        ("SuspendExcStates", null.clone()),
        ("SuspendProgram", null.clone()),
        ("SuspendRate", "60 nodes/min".to_owned()),
        ("SuspendTime", "INFINITE".to_owned()),
        ("SuspendTimeout", "30 sec".to_owned()),
        ("SwitchParameters", null.clone()),
        ("SwitchType", null.clone()),
        ("TaskEpilog", null.clone()),
        ("TaskPlugin", null.clone()),
        ("TaskPluginParam", "(null type)".to_owned()),
        ("TaskProlog", null.clone()),
        ("TCPTimeout", "2 sec".to_owned()),
        ("TLSParameters", null.clone()),
        ("TLSType", "tls/none".to_owned()),
        ("TmpFS", "/tmp".to_owned()),
        ("TopologyParam", null.clone()),
        ("TopologyPlugin", "topology/flat".to_owned()),
        ("TrackWCKey", "no".to_owned()),
        ("TreeWidth", "16".to_owned()),
        ("UsePam", "no".to_owned()),
        ("UnkillableStepProgram", null.clone()),
        ("UnkillableStepTimeout", "60 sec".to_owned()),
        ("VSizeFactor", "0 percent".to_owned()),
        ("WaitTime", "0 sec".to_owned()),
        ("X11Parameters", null),
    ];
    pairs.into_iter().map(|(key, value)| (key.to_owned(), value)).collect()
}

/// The whole of `scontrol show config`: the header, the pairs, a blank line and the ping line.
/// The cgroup, MPI and plugin sections Slurm prints after the pairs come from cgroup.conf,
/// mpi.conf and plugin configurations the emulator does not model; they are left out.
pub fn render(config: &pb::SlurmConfig, format: &TimeFormat, now: i64) -> String {
    let updated = fmt::time_str(fmt::secs(config.boot_time.as_ref()), format, now, 32);
    let mut out = format!("Configuration data as of {updated}\n");
    for (key, value) in key_pairs(config, format, now) {
        out.push_str(&format!("{key:<23} = {value}\n"));
    }
    out.push('\n');
    out.push_str(&format!("Slurmctld(primary) at {} is UP\n", or_null(&config.slurmctld_host)));
    out
}
