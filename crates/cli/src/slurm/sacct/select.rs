//! Which of the rows the emulator returned a query shows: its users, ids, names, partitions,
//! accounts and nodes. (States and the time window the emulator applies, as slurmdbd does.)

use cwsandbox_client::emulator_v1 as pb;

use super::args::Options;
use super::fail;
use crate::slurm::fmt;
use crate::slurm::{Caller, Output, resolve_user};

/// Who the listing covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Users {
    /// Everyone.
    All,
    /// These uids.
    Uids(Vec<u32>),
}

/// Whether the caller's query selects `job` among the rows the emulator selected by ids, states
/// and time window: users, names, partitions, accounts and nodes.
pub(super) fn selects(options: &Options, users: &Users, job: &pb::Job) -> bool {
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
    true
}

/// Who `sacct` lists: `-a`, `-u -1`, `-j`/`-N` without `-u`, and root see everyone; otherwise
/// the `-u` users, else the caller alone. Unknown user names are Slurm's error.
pub(super) fn users(options: &Options, caller: &Caller, known: &[(String, u32)]) -> Result<Users, Output> {
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
