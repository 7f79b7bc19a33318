//! `sacct` (Slurm 25.05): accounting rows of the emulator rendered the way `src/sacct` prints
//! them — the field table and its prefix matching, `%N` widths, fixed-width and parsable modes,
//! job and step lines, the user and time-window defaults of `slurmdb_job_cond_def_start_end`,
//! and the accounting database's selection rules per state.

mod args;
mod fields;
mod render;
mod select;
mod time;

use cwsandbox_client::emulator_v1 as pb;

pub use args::{Options, parse};
pub use render::render;
// The property tests drive the time parser and the window directly.
#[cfg(test)]
pub use time::parse_time;
pub use time::window;

use super::{Caller, Command, Conn, Env, Output};

fn fail(message: String) -> Output {
    Output::fail(message, 1)
}

/// `sacct` against the emulator's accounting rows.
pub struct Sacct;

/// What `sacct` renders: accounting rows, the emulator's time, the caller and the Slurm users
/// (and for `--json`, the cluster's name).
pub struct Answer {
    jobs: Vec<pb::Job>,
    now: i64,
    caller: Caller,
    known: Vec<(String, u32)>,
    cluster: String,
}

impl Command for Sacct {
    const NAME: &'static str = "sacct";
    type Options = Options;
    type Answer = Answer;

    fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
        parse(args, env)
    }

    fn info(options: &Options) -> Option<&str> {
        options.info()
    }

    async fn call(options: &Options, env: &Env, conn: &Conn) -> Result<Answer, Output> {
        let (caller, known) = super::caller(Self::NAME, env, conn).await?;
        // The defaults of the window are the client's, as in Slurm (against the emulator's time);
        // which rows a window and states select is the accounting database's, the emulator's.
        let clock = conn.admin().clock().await.map_err(|error| super::api_error(Self::NAME, &error))?;
        let now = clock.now.map(|now| now.seconds).unwrap_or_default();
        let cluster = if options.json.is_some() {
            conn.admin().slurm_config().await.map_err(|error| super::api_error(Self::NAME, &error))?.cluster_name
        } else {
            String::new()
        };
        let Some(request) = request(options, now)? else {
            return Ok(Answer { now, jobs: Vec::new(), caller, known, cluster });
        };
        let response = conn.admin().list_jobs(&request).await.map_err(|error| super::api_error(Self::NAME, &error))?;
        Ok(Answer { now: super::now_of(&response), jobs: response.jobs, caller, known, cluster })
    }

    fn render(options: &Options, answer: Answer, _env: &Env) -> Output {
        let group = super::json::client_group(answer.caller.uid, &answer.jobs);
        let about = options.json.as_deref().map(|command| super::json::Meta {
            command,
            user: &answer.caller.name,
            group,
            cluster: &answer.cluster,
        });
        render(options, &answer.jobs, answer.now, &answer.caller, &answer.known, about.as_ref())
    }
}

/// The accounting query of a command line at `now`: its job ids, states and time window
/// (`slurmdb_job_cond_def_start_end`'s defaults, `[start, end)`). `None` when it can select
/// nothing (only states the emulator never records). Pure.
pub fn request(options: &Options, now: i64) -> Result<Option<pb::ListJobsRequest>, Output> {
    let window = window(options, now)?;
    let states: Vec<i32> = options.states.iter().flatten().map(|state| *state as i32).collect();
    if !options.states.is_empty() && states.is_empty() {
        return Ok(None);
    }
    let at = |seconds: i64| cwsandbox_api::wkt::Timestamp { seconds, nanos: 0 };
    Ok(Some(pb::ListJobsRequest {
        source: pb::JobSource::Accounting as i32,
        job_ids: options.job_ids(),
        states,
        window_start: (window.start != 0).then(|| at(window.start)),
        window_end: Some(at(window.end)),
        ..Default::default()
    }))
}
