//! `cwsbx emulator …`: the emulator's own controls over EmulatorService: the clock, resets,
//! tenants (an organization per test) and faults (calls that fail on purpose).

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use cwsandbox_client::emulator_v1 as emu;

use crate::common::{parse_pair, read_input};
use crate::output::{Format, Output, print_value, report, report_all, table};

#[derive(Subcommand, Debug)]
pub enum EmulatorCmd {
    /// The emulator's clock.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx emulator clock freeze && cwsbx emulator clock advance 5m
  cwsbx emulator clock get -o json"
    )]
    Clock(ClockCmd),
    /// Back to the configured start, or only one organization's part of it (`--org`).
    #[command(after_help = "Examples:
  cwsbx emulator reset
  cwsbx emulator reset --org tenant-1")]
    Reset {
        /// Reset only this organization's sandboxes, Pods, jobs and faults.
        #[arg(long = "org")]
        organization: Option<String>,
    },
    /// Tenants: organizations made at run time, one per test.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx emulator tenant create --org team-a --env > team-a.env
  cwsbx emulator tenant list"
    )]
    Tenant(TenantCmd),
    /// Faults: rules that make calls fail, slow down or end early.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx emulator faults add --method CreateSandbox --code UNAVAILABLE --times 2
  cwsbx emulator faults list"
    )]
    Faults(FaultsCmd),
}

#[derive(Subcommand, Debug)]
pub enum ClockCmd {
    /// Print the emulator's time and whether it is frozen.
    #[command(after_help = "Examples:
  cwsbx emulator clock get")]
    Get,
    /// Stop time; it moves only with `advance` until `resume`.
    #[command(after_help = "Examples:
  cwsbx emulator clock freeze")]
    Freeze,
    /// Move time forward (`90`, `90s`, `5m`, `1h30m`, `250ms`); due timers fire in order.
    #[command(after_help = "Examples:
  cwsbx emulator clock advance 90s
  cwsbx emulator clock advance 1h30m")]
    Advance {
        /// How far: a number of seconds, or with units (`ms`, `s`, `m`, `h`, combined).
        #[arg(value_parser = parse_duration)]
        duration: Duration,
    },
    /// Let time run again.
    #[command(after_help = "Examples:
  cwsbx emulator clock resume")]
    Resume,
}

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Create a tenant and print its tokens.
    #[command(after_help = "Examples:
  cwsbx emulator tenant create
  cwsbx emulator tenant create --org team-a --user alice --role sandbox_admin --env > team-a.env")]
    Create {
        /// Organization name (a DNS label); default `tenant-<n>`.
        #[arg(long = "org")]
        organization: Option<String>,
        /// User name; default the organization's.
        #[arg(long)]
        user: Option<String>,
        /// Numeric uid; default the next free one from 20000.
        #[arg(long)]
        uid: Option<u32>,
        /// Role of the user token (repeatable): sandbox_user (default), sandbox_admin.
        #[arg(long = "role")]
        roles: Vec<String>,
        /// Print `export` lines for a shell (CWSANDBOX_API_KEY is the user token).
        #[arg(long)]
        env: bool,
    },
    /// Delete tenants: their tokens stop working, their sandboxes end.
    #[command(after_help = "Examples:
  cwsbx emulator tenant delete team-a")]
    Delete {
        /// The tenants' organizations.
        #[arg(required = true, value_name = "ORG")]
        organizations: Vec<String>,
    },
    /// List the tenants.
    #[command(after_help = "Examples:
  cwsbx emulator tenant list -o json")]
    List,
}

// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum FaultsCmd {
    /// Install a fault, from options or from a file (a `Fault` as YAML or proto3 JSON).
    #[command(after_help = "Examples:
  cwsbx emulator faults add --method CreateSandbox --code UNAVAILABLE --times 2 --retry-delay 1s
  cwsbx emulator faults add --method 'SandboxService/*' --latency 200ms
  cwsbx emulator faults add -f fault.yaml")]
    Add(AddFault),
    /// List the faults in force with their counts.
    #[command(after_help = "Examples:
  cwsbx emulator faults list -o json | jq '.[].hits'")]
    List,
    /// Remove faults by id.
    #[command(after_help = "Examples:
  cwsbx emulator faults remove fault-1")]
    Remove {
        /// The faults' ids (as `faults list` shows them).
        #[arg(required = true, value_name = "FAULT_ID")]
        ids: Vec<String>,
    },
    /// Remove every fault.
    #[command(after_help = "Examples:
  cwsbx emulator faults clear")]
    Clear,
}

#[derive(Args, Debug)]
pub struct AddFault {
    /// The fault as a file (`-` for stdin); excludes the other options.
    #[arg(short = 'f', long = "file", conflicts_with_all = ["method", "code", "latency", "stream_messages"])]
    file: Option<String>,
    /// The method, or a glob (`CreateSandbox`, `SandboxService/*`, `*Sandbox`); default every method.
    #[arg(long)]
    method: Option<String>,
    /// Only this organization's calls.
    #[arg(long = "org")]
    organization: Option<String>,
    /// Only calls about sandboxes with this tag (repeatable: all must be present).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Only calls with this request header value (KEY=GLOB, repeatable).
    #[arg(long = "header", value_parser = parse_pair)]
    headers: Vec<(String, String)>,
    /// The status code to answer with (UNAVAILABLE, PERMISSION_DENIED, …).
    #[arg(long)]
    code: Option<String>,
    /// The status message.
    #[arg(long)]
    message: Option<String>,
    /// ErrorInfo reason.
    #[arg(long)]
    reason: Option<String>,
    /// RetryInfo delay (`2s`).
    #[arg(long, value_parser = parse_duration)]
    retry_delay: Option<Duration>,
    /// Delay before answering (`200ms`); with --latency-max, uniform in between.
    #[arg(long, value_parser = parse_duration)]
    latency: Option<Duration>,
    /// Upper bound of a uniform latency.
    #[arg(long, value_parser = parse_duration, requires = "latency")]
    latency_max: Option<Duration>,
    /// For StreamExec and StreamLogs: end the stream after this many messages.
    #[arg(long)]
    stream_messages: Option<u32>,
    /// Act on the first N matching calls only.
    #[arg(long, conflicts_with_all = ["every", "probability"])]
    times: Option<u32>,
    /// Act on every Kth matching call.
    #[arg(long, conflicts_with = "probability")]
    every: Option<u32>,
    /// Act on each matching call with this probability.
    #[arg(long)]
    probability: Option<f64>,
    /// Seed of the fault's generator (probability, latency).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `90`, `90s`, `1.5s`, `250ms`, `5m`, `1h30m`.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|error| format!("{text:?}: {error}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let unit = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit);
        let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration (90s, 5m, 1h30m, 250ms)"))?;
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
        };
        total += Duration::try_from_secs_f64(value * scale).map_err(|error| format!("{text:?}: {error}"))?;
        rest = next;
    }
    if text.is_empty() {
        return Err("a duration is required".to_owned());
    }
    Ok(total)
}

fn pb_duration(duration: Duration) -> pbjson_types::Duration {
    pbjson_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

fn clock_line(clock: &emu::Clock) -> String {
    let now = clock
        .now
        .as_ref()
        .and_then(|now| chrono::DateTime::from_timestamp(now.seconds, u32::try_from(now.nanos).unwrap_or(0)))
        .map(|now| now.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default();
    format!("{now} {}", if clock.frozen { "frozen" } else { "running" })
}

fn print_clock(clock: &emu::Clock, format: Format) -> Result<()> {
    match format {
        Format::Table => println!("{}", clock_line(clock)),
        _ => print_value(&serde_json::to_value(clock)?, format)?,
    }
    Ok(())
}

impl AddFault {
    fn fault(&self) -> Result<emu::Fault> {
        if let Some(file) = &self.file {
            let text = read_input(file)?;
            let tree = crate::output::yaml_to_json(&text)?;
            return serde_json::from_value(tree).with_context(|| format!("{file} is not a Fault"));
        }
        let schedule = emu::FaultSchedule {
            times: self.times.unwrap_or(0),
            every: self.every.unwrap_or(0),
            probability: self.probability.unwrap_or(0.0),
            seed: self.seed,
        };
        Ok(emu::Fault {
            r#match: Some(emu::FaultMatch {
                method: self.method.clone().unwrap_or_default(),
                organization: self.organization.clone().unwrap_or_default(),
                tags: self.tags.clone(),
                headers: self.headers.iter().cloned().collect(),
            }),
            action: Some(emu::FaultAction {
                code: self.code.clone().unwrap_or_default(),
                message: self.message.clone().unwrap_or_default(),
                reason: self.reason.clone().unwrap_or_default(),
                retry_delay: self.retry_delay.map(pb_duration),
                violations: Vec::new(),
                latency: self.latency.map(pb_duration),
                latency_max: self.latency_max.map(pb_duration),
                stream_messages: self.stream_messages,
            }),
            schedule: Some(schedule),
            ..Default::default()
        })
    }
}

fn fault_row(fault: &emu::Fault) -> Vec<String> {
    let condition = fault.r#match.clone().unwrap_or_default();
    let action = fault.action.clone().unwrap_or_default();
    let schedule = fault.schedule.unwrap_or_default();
    let what = match (&action.code, action.stream_messages) {
        (code, Some(after)) => format!("{} after {after}", if code.is_empty() { "UNAVAILABLE" } else { code }),
        (code, None) if !code.is_empty() => code.clone(),
        _ => "latency".to_owned(),
    };
    let when = if schedule.times > 0 {
        format!("first {}", schedule.times)
    } else if schedule.every > 0 {
        format!("every {}", schedule.every)
    } else if schedule.probability > 0.0 {
        format!("p={} seed={}", schedule.probability, schedule.seed)
    } else {
        "always".to_owned()
    };
    vec![
        fault.id.clone(),
        if condition.method.is_empty() { "*".to_owned() } else { condition.method },
        if condition.organization.is_empty() { fault.owner.clone() } else { condition.organization },
        what,
        when,
        fault.matched.to_string(),
        fault.hits.to_string(),
    ]
}

const FAULT_HEADER: [&str; 7] = ["ID", "METHOD", "ORG", "ACTION", "WHEN", "MATCHED", "HITS"];

fn tenant_row(tenant: &emu::Tenant) -> Vec<String> {
    vec![
        tenant.organization.clone(),
        tenant.user.clone(),
        tenant.uid.to_string(),
        tenant.roles.join(","),
        tenant.runner_ids.join(","),
        tenant.user_token.clone(),
        tenant.admin_token.clone(),
    ]
}

const TENANT_HEADER: [&str; 7] = ["ORG", "USER", "UID", "ROLES", "RUNNERS", "USER TOKEN", "ADMIN TOKEN"];

/// Runs one `cwsbx emulator` command.
pub async fn run(
    admin: &cwsandbox_client::EmulatorAdmin,
    command: &EmulatorCmd,
    base_url: &str,
    output: Output,
) -> Result<u8> {
    let format = output.rows();
    match command {
        EmulatorCmd::Clock(command) => {
            let clock = match command {
                ClockCmd::Get => admin.clock().await?,
                ClockCmd::Freeze => admin.freeze_clock().await?,
                ClockCmd::Advance { duration } => admin.advance_clock(*duration).await?,
                ClockCmd::Resume => admin.resume_clock().await?,
            };
            print_clock(&clock, format)?;
        }
        EmulatorCmd::Reset { organization } => match organization.as_deref().filter(|org| !org.is_empty()) {
            Some(org) => {
                let stopped = admin.reset_organization(org).await?;
                let line = format!("organization {org} reset ({stopped} running Pods stopped)");
                report(
                    format,
                    &line,
                    serde_json::json!({"organization": org, "result": "reset", "stoppedPods": stopped}),
                )?;
            }
            None => {
                admin.reset().await?;
                report(format, "emulator reset to its configured start", serde_json::json!({"result": "reset"}))?;
            }
        },
        EmulatorCmd::Tenant(TenantCmd::Create { organization, user, uid, roles, env }) => {
            let request = emu::CreateTenantRequest {
                organization: organization.clone().unwrap_or_default(),
                user: user.clone().unwrap_or_default(),
                uid: *uid,
                roles: roles.clone(),
            };
            let tenant = admin.create_tenant(&request).await?;
            if *env {
                println!("export CWSANDBOX_BASE_URL={base_url}");
                println!("export CWSANDBOX_API_KEY={}", tenant.user_token);
                println!("export CWSANDBOX_ADMIN_TOKEN={}", tenant.admin_token);
                if let Some(runner) = tenant.runner_ids.first() {
                    println!("export CWSANDBOX_RUNNER_ID={runner}");
                }
            } else {
                match format {
                    Format::Table => table(&TENANT_HEADER, [tenant_row(&tenant)]),
                    _ => print_value(&serde_json::to_value(&tenant)?, format)?,
                }
            }
        }
        EmulatorCmd::Tenant(TenantCmd::Delete { organizations }) => {
            let mut results = Vec::new();
            for org in organizations {
                let stopped = admin.delete_tenant(org).await?;
                results.push((
                    format!("tenant {org} deleted ({stopped} running Pods stopped)"),
                    serde_json::json!({"organization": org, "result": "deleted", "stoppedPods": stopped}),
                ));
            }
            report_all(format, results)?;
        }
        EmulatorCmd::Tenant(TenantCmd::List) => {
            let tenants = admin.list_tenants().await?;
            match format {
                Format::Table => table(&TENANT_HEADER, tenants.iter().map(tenant_row)),
                _ => print_value(&serde_json::to_value(&tenants)?, format)?,
            }
        }
        EmulatorCmd::Faults(FaultsCmd::Add(options)) => {
            let fault = admin.add_fault(options.fault()?).await?;
            match format {
                Format::Table => table(&FAULT_HEADER, [fault_row(&fault)]),
                _ => print_value(&serde_json::to_value(&fault)?, format)?,
            }
        }
        EmulatorCmd::Faults(FaultsCmd::List) => {
            let faults = admin.list_faults().await?;
            match format {
                Format::Table => table(&FAULT_HEADER, faults.iter().map(fault_row)),
                _ => print_value(&serde_json::to_value(&faults)?, format)?,
            }
        }
        EmulatorCmd::Faults(FaultsCmd::Remove { ids }) => {
            let mut results = Vec::new();
            for id in ids {
                admin.remove_fault(id).await?;
                results.push((format!("fault {id} removed"), serde_json::json!({"faultId": id, "result": "removed"})));
            }
            report_all(format, results)?;
        }
        EmulatorCmd::Faults(FaultsCmd::Clear) => {
            let removed = admin.clear_faults().await?;
            report(format, &format!("{removed} faults removed"), serde_json::json!({"removed": removed}))?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-3").is_err());
    }
}
