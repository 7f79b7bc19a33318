//! Which accounting rows a query selects: its users, ids, names, partitions, accounts and nodes,
//! and the accounting database's rules for a state during the time window.

use cwsandbox_client::emulator_v1 as pb;

use super::args::Options;
use super::fail;
use super::time::Window;
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
pub(super) fn selects(options: &Options, users: &Users, window: Window, job: &pb::Job) -> bool {
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
