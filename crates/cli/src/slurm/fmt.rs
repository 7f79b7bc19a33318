//! Text forms shared by the Slurm views, after Slurm 25.05's own helpers: `slurm_make_time_str`
//! (dates, `SLURM_TIME_FORMAT`), `secs2time_str` and `mins2time_str` (durations),
//! `convert_num_unit2` (memory), hostlist ranges (`slurm-cpu-[0-2]`) and job state names.
//!
//! Times are whole seconds since the epoch; the emulator's time zone is UTC.

use chrono::{DateTime, Datelike, Utc};
use cwsandbox_api::wkt::Timestamp;
use cwsandbox_client::emulator_v1 as pb;

/// Seconds of a timestamp (Slurm keeps whole seconds).
pub fn secs(timestamp: Option<&Timestamp>) -> Option<i64> {
    timestamp.map(|t| t.seconds).filter(|seconds| *seconds > 0)
}

/// How dates print (`SLURM_TIME_FORMAT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeFormat {
    /// `%FT%T` (unset, empty or `standard`).
    Standard,
    /// `relative`: `Ystday HH:MM`, `HH:MM:SS` today, `Tomorr HH:MM`, …, against `now`.
    Relative,
    /// An strftime format (it holds a `%`).
    Custom(String),
}

impl TimeFormat {
    /// From `SLURM_TIME_FORMAT`; an unusable value falls back to the standard form with Slurm's
    /// error, which the caller prints.
    pub fn from_env(value: Option<&str>) -> (TimeFormat, Option<String>) {
        match value {
            None | Some("") | Some("standard") => (TimeFormat::Standard, None),
            Some("relative") => (TimeFormat::Relative, None),
            // Slurm copies the format into a 32-byte buffer.
            Some(format) if format.contains('%') && format.len() < 32 => (TimeFormat::Custom(format.to_owned()), None),
            Some(format) => (TimeFormat::Standard, Some(format!("invalid SLURM_TIME_FORMAT = {format}"))),
        }
    }
}

fn datetime(seconds: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(seconds, 0).unwrap_or_default()
}

fn strftime(seconds: i64, format: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    match write!(out, "{}", datetime(seconds).format(format)) {
        Ok(()) => out,
        // chrono refuses specifiers C's strftime would pass through; keep the date readable.
        Err(_) => datetime(seconds).format("%FT%T").to_string(),
    }
}

/// What sacct shows for a job without a time limit of its own: slurmdbd records it unset
/// (`Partition_Limit`) until the job gets its nodes, then the partition's, which here is always
/// `INFINITE` (`UNLIMITED`).
pub fn accounted_no_time_limit(job: &pb::Job) -> &'static str {
    if job.node_list.is_empty() { "Partition_Limit" } else { "UNLIMITED" }
}

/// What the controller's views (scontrol, squeue) show for a job without a time limit of its
/// own, pending or not: slurmctld packs an unset limit as the partition's `MaxTime` (`pack_job`
/// in `job_mgr.c`), which here is always `INFINITE`.
pub const CONTROLLER_NO_TIME_LIMIT: &str = "UNLIMITED";

/// The first line of `squeue -l`, `sinfo -l` and `sinfo -N -l`: Slurm's `slurm_ctime2`, whose
/// day is zero-padded (`Tue Dec 01 …`), unlike C's `ctime`.
pub fn long_listing_date(now: i64) -> String {
    strftime(now, "%a %b %d %T %Y")
}

/// Slurm's `_relative_date_fmt`.
fn relative_format(seconds: i64, now: i64) -> &'static str {
    let day = |t: DateTime<Utc>| 1000 * i64::from(t.year()) + i64::from(t.ordinal0());
    let distance = day(datetime(seconds)) - day(datetime(now));
    match distance {
        -1 => "Ystday %H:%M",
        0 => "%H:%M:%S",
        1 => "Tomorr %H:%M",
        d if !(-365..=365).contains(&d) => "%-d %b %Y",
        d if !(-1..=6).contains(&d) => "%-d %b %H:%M",
        _ => "%a %H:%M",
    }
}

/// `slurm_make_time_str` into a buffer of `size` bytes: `Unknown` for no time, the formatted
/// date otherwise; a date that does not fit the buffer is `#` signs (Slurm's `slurm_strftime`).
pub fn time_str(seconds: Option<i64>, format: &TimeFormat, now: i64, size: usize) -> String {
    let text = match seconds {
        None | Some(0) => "Unknown".to_owned(),
        Some(seconds) => {
            let text = match format {
                TimeFormat::Standard => strftime(seconds, "%FT%T"),
                TimeFormat::Relative => strftime(seconds, relative_format(seconds, now)),
                TimeFormat::Custom(format) => strftime(seconds, format),
            };
            if text.len() >= size {
                return "#".repeat(size.saturating_sub(1));
            }
            text
        }
    };
    if text.len() >= size { text[..size.saturating_sub(1)].to_owned() } else { text }
}

/// `secs2time_str`: `HH:MM:SS` or `D-HH:MM:SS`; `INVALID` below zero.
pub fn secs2time(seconds: i64) -> String {
    if seconds < 0 {
        return "INVALID".to_owned();
    }
    let (days, hours, minutes, secs) = (seconds / 86400, (seconds / 3600) % 24, (seconds / 60) % 60, seconds % 60);
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{secs:02}")
    } else {
        format!("{hours:02}:{minutes:02}:{secs:02}")
    }
}

/// `mins2time_str`.
pub fn mins2time(minutes: i64) -> String {
    secs2time(minutes * 60)
}

/// A time limit in seconds as Slurm keeps it: minutes, rounded up.
pub fn limit_minutes(seconds: u32) -> i64 {
    (i64::from(seconds) + 59) / 60
}

/// Units of `convert_num_unit2`: none, K, M, G, T, P.
pub const UNITS: &[char] = &['K', 'M', 'G', 'T', 'P'];

/// How numbers are scaled (`--noconvert`, `--units`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convert {
    /// `CONVERT_NUM_UNIT_EXACT`: scale while the value stays a multiple of half the divisor.
    Exact,
    /// `--noconvert`.
    No,
    /// `--units=<unit>`: index into "\0KMGTP" (1 = K).
    To(usize),
}

/// `convert_num_unit2(num, orig_type, spec_type, 1024, flags)`: `orig` is the unit index of
/// `num` (2 = M).
pub fn convert_num_unit(num: f64, orig: usize, convert: Convert) -> String {
    if num as i64 == 0 {
        return "0".to_owned();
    }
    let (mut num, mut unit) = (num, orig as i64);
    match convert {
        Convert::To(target) => {
            let target = target as i64;
            while target < unit {
                num *= 1024.0;
                unit -= 1;
            }
            while target > unit {
                num /= 1024.0;
                unit += 1;
            }
        }
        Convert::No => {}
        Convert::Exact => {
            // Half values (1.50G) still count as exact.
            while num >= 1024.0 && (num as u64).is_multiple_of(512) {
                num /= 1024.0;
                unit += 1;
            }
        }
    }
    let suffix = match unit {
        0 => String::new(),
        1..=5 => UNITS[(unit - 1) as usize].to_string(),
        _ => "?".to_owned(),
    };
    if num.fract() == 0.0 { format!("{}{suffix}", num as u64) } else { format!("{num:.2}{suffix}") }
}

/// Compresses node names into Slurm's hostlist form: `slurm-cpu-[0-2,5]`. Names keep their
/// order of first appearance per prefix; numbers with leading zeros keep their width.
pub fn hostlist(names: &[String]) -> String {
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    let mut order: Vec<(bool, usize)> = Vec::new();
    for name in names {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            if !plain.iter().any(|(_, seen)| seen == name) {
                order.push((false, plain.len()));
                plain.push((plain.len(), name.clone()));
            }
            continue;
        }
        let (prefix, number) = name.split_at(name.len() - digits);
        let width = if number.starts_with('0') && number.len() > 1 { number.len() } else { 0 };
        let Ok(value) = number.parse::<u64>() else { continue };
        match groups.iter_mut().position(|(p, w, _)| p == prefix && *w == width) {
            Some(index) => {
                if !groups[index].2.contains(&value) {
                    groups[index].2.push(value);
                }
            }
            None => {
                order.push((true, groups.len()));
                groups.push((prefix.to_owned(), width, vec![value]));
            }
        }
    }
    let mut parts = Vec::new();
    for (grouped, index) in order {
        if !grouped {
            parts.push(plain[index].1.clone());
            continue;
        }
        let (prefix, width, values) = &mut groups[index];
        values.sort_unstable();
        let number = |value: u64| format!("{value:0width$}", width = *width);
        if values.len() == 1 {
            parts.push(format!("{prefix}{}", number(values[0])));
            continue;
        }
        let mut ranges = Vec::new();
        let mut start = values[0];
        let mut end = values[0];
        for &value in &values[1..] {
            if value == end + 1 {
                end = value;
            } else {
                ranges.push(if start == end { number(start) } else { format!("{}-{}", number(start), number(end)) });
                start = value;
                end = value;
            }
        }
        ranges.push(if start == end { number(start) } else { format!("{}-{}", number(start), number(end)) });
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

/// Expands a hostlist expression (`slurm-cpu-[0-2,5]`, `a,b`) into names.
pub fn expand_hostlist(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    let mut parts = Vec::new();
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    for part in parts.into_iter().filter(|part| !part.is_empty()) {
        match (part.find('['), part.rfind(']')) {
            (Some(open), Some(close)) if open < close => {
                let prefix = &part[..open];
                let suffix = &part[close + 1..];
                for range in part[open + 1..close].split(',') {
                    let (low, high) = range.split_once('-').unwrap_or((range, range));
                    let width = if low.starts_with('0') { low.len() } else { 0 };
                    match (low.parse::<u64>(), high.parse::<u64>()) {
                        (Ok(low), Ok(high)) if low <= high && high - low < MAX_RANGE_HOSTS => {
                            names.extend((low..=high).map(|n| format!("{prefix}{n:0width$}{suffix}")));
                        }
                        _ => names.push(format!("{prefix}{range}{suffix}")),
                    }
                }
            }
            _ => names.push(part),
        }
    }
    names
}

/// A base state of the API.
/// A job's OverSubscribe as squeue's `%h` and scontrol's `OverSubscribe=` print it (`OK` when the
/// job asked for nothing).
pub fn over_subscribe(value: i32) -> &'static str {
    match pb::OverSubscribe::try_from(value) {
        Ok(pb::OverSubscribe::No) => "NO",
        Ok(pb::OverSubscribe::Yes) => "YES",
        Ok(pb::OverSubscribe::User) => "USER",
        _ => "OK",
    }
}

/// A node's configured GRES (`gpu[:type]:N`); `None` without GPUs (which Slurm prints as
/// `(null)` in text).
pub fn node_gres(node: &pb::SlurmNode) -> Option<String> {
    match (node.gpus, node.gres_type.as_str()) {
        (0, _) => None,
        (gpus, "") => Some(format!("gpu:{gpus}")),
        (gpus, kind) => Some(format!("gpu:{kind}:{gpus}")),
    }
}

pub fn state(job_state: i32) -> pb::JobState {
    pb::JobState::try_from(job_state).unwrap_or(pb::JobState::Unspecified)
}

/// `job_state_string` of a base state.
pub fn state_long(job_state: pb::JobState) -> &'static str {
    match job_state {
        pb::JobState::Pending => "PENDING",
        pb::JobState::Running => "RUNNING",
        pb::JobState::Completed => "COMPLETED",
        pb::JobState::Cancelled => "CANCELLED",
        pb::JobState::Failed => "FAILED",
        pb::JobState::Timeout => "TIMEOUT",
        pb::JobState::Preempted => "PREEMPTED",
        pb::JobState::Requeued => "REQUEUED",
        pb::JobState::NodeFail => "NODE_FAIL",
        pb::JobState::Unspecified => "UNKNOWN",
    }
}

/// `job_state_string_compact` of a base state.
pub fn state_compact(job_state: pb::JobState) -> &'static str {
    match job_state {
        pb::JobState::Pending => "PD",
        pb::JobState::Running => "R",
        pb::JobState::Completed => "CD",
        pb::JobState::Cancelled => "CA",
        pb::JobState::Failed => "F",
        pb::JobState::Timeout => "TO",
        pb::JobState::Preempted => "PR",
        pb::JobState::Requeued => "RQ",
        pb::JobState::NodeFail => "NF",
        pb::JobState::Unspecified => "?",
    }
}

/// A state name as `-s`/`-t` accept it (short or long, any case). Slurm's list also has states
/// the emulator never produces (SUSPENDED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY): they are valid
/// names that simply match nothing.
pub fn parse_state(name: &str) -> Option<Option<pb::JobState>> {
    let upper = name.trim().to_ascii_uppercase();
    let known = [
        pb::JobState::Pending,
        pb::JobState::Running,
        pb::JobState::Completed,
        pb::JobState::Cancelled,
        pb::JobState::Failed,
        pb::JobState::Timeout,
        pb::JobState::Preempted,
        pb::JobState::Requeued,
        pb::JobState::NodeFail,
    ];
    if let Some(state) = known.into_iter().find(|state| state_long(*state) == upper || state_compact(*state) == upper) {
        return Some(Some(state));
    }
    match upper.as_str() {
        "SUSPENDED" | "S" | "BOOT_FAIL" | "BF" | "DEADLINE" | "DL" | "OUT_OF_MEMORY" | "OOM" => Some(None),
        // Slurm's `CANCELLED` short form is also spelled `CA`; `CD`/`COMPLETED` above.
        _ => None,
    }
}

/// The widest column a format may ask for: the widest padding Rust's formatter accepts (it
/// panics with "Formatting argument out of range" beyond `u16::MAX`), and wider than any
/// terminal. Slurm reads widths into an `int`, so `%99999999999i` overflows there too; here a
/// wider request is held at this width.
pub const MAX_WIDTH: usize = u16::MAX as usize;

/// Most names one bracketed range of a hostlist expands to (`n[0-99999999999]` would otherwise
/// build a hundred billion names); a longer range is kept verbatim and so matches no node.
pub const MAX_RANGE_HOSTS: u64 = 65_536;

/// One `%[#][.][width]<letter><suffix>` token of a squeue or sinfo `-o` format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatToken {
    /// `#`: as wide as the widest value (sinfo only).
    pub auto: bool,
    /// `.`: right-justified.
    pub right: bool,
    /// The width (0: as long as the value).
    pub width: usize,
    /// The field letter.
    pub letter: char,
    /// Text printed after the field.
    pub suffix: String,
    /// The token as written after its `%` (what Slurm prints for one it does not know).
    pub raw: String,
}

/// Splits a squeue/sinfo format as their `_parse_format` do: the text before the first `%`, then one
/// token per `%`. `auto_marks` lets a leading `#` mean auto width (sinfo); otherwise `#` is read as
/// the field letter, which the caller then refuses as squeue does.
pub fn format_tokens(format: &str, auto_marks: bool) -> (String, Vec<FormatToken>) {
    let prefix = format.split('%').next().unwrap_or_default().to_owned();
    let mut tokens = Vec::new();
    for token in format.split('%').skip(1).filter(|token| !token.is_empty()) {
        let chars: Vec<char> = token.chars().collect();
        let mut index = 0;
        let auto = auto_marks && chars.first() == Some(&'#');
        if auto {
            index += 1;
        }
        let right = chars.get(index) == Some(&'.');
        if right {
            index += 1;
        }
        let mut width = 0usize;
        while index < chars.len() && chars[index].is_ascii_digit() {
            width = (width * 10 + chars[index].to_digit(10).unwrap_or(0) as usize).min(MAX_WIDTH);
            index += 1;
        }
        let letter = chars.get(index).copied().unwrap_or(' ');
        let suffix: String = chars.iter().skip(index + 1).collect();
        tokens.push(FormatToken { auto, right, width, letter, suffix, raw: token.to_owned() });
    }
    (prefix, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn req_mem_conversions_of_the_research() {
        let mem = |mb: f64| convert_num_unit(mb, 2, Convert::Exact);
        assert_eq!(mem(512.0), "512M");
        assert_eq!(mem(1024.0), "1G");
        assert_eq!(mem(1536.0), "1.50G");
        assert_eq!(mem(1000.0), "1000M");
        assert_eq!(mem(2048.0), "2G");
        assert_eq!(mem(0.0), "0");
        assert_eq!(mem(1536.0 * 1024.0), "1.50T");
        assert_eq!(convert_num_unit(1024.0, 2, Convert::No), "1024M");
        assert_eq!(convert_num_unit(512.0, 2, Convert::To(3)), "0.50G");
        assert_eq!(convert_num_unit(512.0, 2, Convert::To(1)), "524288K");
        assert_eq!(convert_num_unit(3.0, 0, Convert::Exact), "3");
    }

    #[test]
    fn durations() {
        assert_eq!(secs2time(0), "00:00:00");
        assert_eq!(secs2time(12), "00:00:12");
        assert_eq!(secs2time(93784), "1-02:03:04");
        assert_eq!(mins2time(60), "01:00:00");
        assert_eq!(mins2time(1440), "1-00:00:00");
        assert_eq!(limit_minutes(61), 2);
    }

    #[test]
    fn dates_and_time_formats() {
        let t = 1_735_787_045; // 2025-01-02T03:04:05Z
        assert_eq!(long_listing_date(1_796_115_907), "Tue Dec 01 09:05:07 2026");
        assert_eq!(time_str(Some(t), &TimeFormat::Standard, t, 20), "2025-01-02T03:04:05");
        assert_eq!(time_str(None, &TimeFormat::Standard, t, 20), "Unknown");
        assert_eq!(time_str(Some(t), &TimeFormat::Custom("%s".into()), t, 20), "1735787045");
        assert_eq!(time_str(Some(t), &TimeFormat::Custom("%A %d %B %Y %T".into()), t, 20), "###################");
        assert_eq!(time_str(Some(t), &TimeFormat::Relative, t + 60, 20), "03:04:05");
        assert_eq!(time_str(Some(t), &TimeFormat::Relative, t + 86400, 20), "Ystday 03:04");
        assert_eq!(time_str(Some(t), &TimeFormat::Relative, t - 86400, 20), "Tomorr 03:04");
        assert_eq!(TimeFormat::from_env(Some("nonsense")).1.unwrap(), "invalid SLURM_TIME_FORMAT = nonsense");
    }

    #[test]
    fn hostlists_compress_and_expand() {
        let names: Vec<String> = ["slurm-cpu-0", "slurm-cpu-1", "slurm-cpu-2", "slurm-cpu-5", "login"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(hostlist(&names), "slurm-cpu-[0-2,5],login");
        assert_eq!(hostlist(&names[..1]), "slurm-cpu-0");
        assert_eq!(expand_hostlist("slurm-cpu-[0-2,5],login"), names);
        assert_eq!(expand_hostlist("n[01-02]"), ["n01", "n02"]);
    }

    #[test]
    fn huge_widths_are_held_not_overflowed() {
        // `width * 10` overflowed usize (a panic in debug builds), and any width past u16::MAX
        // made the renderers' `format!` panic; the width is now held.
        let (_, tokens) = format_tokens("%.99999999999999999999999i|%5j", false);
        assert_eq!((tokens[0].width, tokens[0].right, tokens[0].letter), (MAX_WIDTH, true, 'i'));
        assert_eq!(tokens[1].width, 5);
    }

    #[test]
    fn huge_hostlist_ranges_stay_unexpanded() {
        // Expanding this built 10^11 names (hours, and all the memory).
        assert_eq!(expand_hostlist("n[0-99999999999]"), ["n0-99999999999"]);
        assert_eq!(expand_hostlist("n[0-65535]").len(), 65_536);
    }

    #[test]
    fn states_short_or_long_any_case() {
        assert_eq!(parse_state("ca"), Some(Some(pb::JobState::Cancelled)));
        assert_eq!(parse_state("Cancelled"), Some(Some(pb::JobState::Cancelled)));
        assert_eq!(parse_state("oom"), Some(None));
        assert_eq!(parse_state("bogus"), None);
    }
}
