//! Times (`parse_time` of src/common/parse_time.c) and the time window of a query
//! (`slurmdb_job_cond_def_start_end`).

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, Utc};

use super::args::Options;
use super::fail;
use crate::slurm::Output;
use crate::slurm::fmt::{self, TimeFormat};

fn at(date: NaiveDate, time: NaiveTime) -> i64 {
    NaiveDateTime::new(date, time).and_utc().timestamp()
}

fn parse_clock(text: &str) -> Option<NaiveTime> {
    let upper = text.to_ascii_uppercase();
    let (body, meridiem) = if let Some(body) = upper.strip_suffix("AM") {
        (body.to_owned(), Some(false))
    } else if let Some(body) = upper.strip_suffix("PM") {
        (body.to_owned(), Some(true))
    } else {
        (upper, None)
    };
    let parts: Vec<&str> = body.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let mut hour: u32 = parts[0].parse().ok()?;
    let minute: u32 = parts[1].parse().ok()?;
    let second: u32 = parts.get(2).map_or(Some(0), |s| s.parse().ok())?;
    match meridiem {
        Some(pm) => {
            if hour == 0 || hour > 12 {
                return None;
            }
            hour = hour % 12 + if pm { 12 } else { 0 };
        }
        None if hour > 23 => return None,
        None => {}
    }
    NaiveTime::from_hms_opt(hour, minute, second)
}

fn year_of(text: &str, today: NaiveDate) -> Option<i32> {
    match text.len() {
        2 => text.parse::<i32>().ok().map(|y| 2000 + y),
        4 => text.parse().ok(),
        _ => None,
    }
    .or(if text.is_empty() { Some(today.year()) } else { None })
}

/// Slurm's time forms against `now` (UTC): `HH:MM[:SS][AM|PM]`, `MMDD[YY][-HH:MM[:SS]]`,
/// `MM.DD[.YY][-…]`, `MM/DD[/YY][-…]`, `YYYY-MM-DD[THH:MM[:SS]]`, `today`, `midnight`, `noon`,
/// `elevenses`, `fika`, `teatime`, `tomorrow`, `now[{+|-}count[seconds|minutes|hours|days|weeks]]`.
pub fn parse_time(text: &str, now: i64) -> Option<i64> {
    let now_dt: DateTime<Utc> = DateTime::from_timestamp(now, 0)?;
    let today = now_dt.date_naive();
    let lower = text.trim().to_ascii_lowercase();
    let named = |hour: u32| Some(at(today, NaiveTime::from_hms_opt(hour, 0, 0)?));
    match lower.as_str() {
        "today" | "midnight" => return named(0),
        "noon" => return named(12),
        "elevenses" => return named(11),
        "fika" => return named(15),
        "teatime" => return named(16),
        "tomorrow" => return Some(at(today.succ_opt()?, NaiveTime::MIN)),
        _ => {}
    }
    if let Some(rest) = lower.strip_prefix("now") {
        if rest.is_empty() {
            return Some(now);
        }
        let (sign, rest) = match rest.chars().next()? {
            '+' => (1, &rest[1..]),
            '-' => (-1, &rest[1..]),
            _ => return None,
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let count: i64 = digits.parse().ok()?;
        let unit = &rest[digits.len()..];
        let scale = match unit {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 604_800,
            _ => return None,
        };
        // A count past the calendar is not a time: checked, not overflowed (a panic in debug builds).
        let seconds = count.checked_mul(scale).and_then(|delta| now.checked_add(sign * delta))?;
        return DateTime::from_timestamp(seconds, 0).map(|_| seconds);
    }
    if let Some(time) = parse_clock(&lower) {
        return Some(at(today, time));
    }
    // YYYY-MM-DD[THH:MM[:SS]]
    if lower.len() >= 10 && lower.as_bytes().get(4) == Some(&b'-') {
        let (date, time) = match lower.split_once('t') {
            Some((date, time)) => (date, Some(time)),
            None => (lower.as_str(), None),
        };
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
        let time = match time {
            Some(time) => parse_clock(time)?,
            None => NaiveTime::MIN,
        };
        return Some(at(date, time));
    }
    // MMDD[YY], MM/DD[/YY], MM.DD[.YY], each with an optional -HH:MM[:SS].
    let (date, time) = match lower.split_once('-') {
        Some((date, time)) => (date, Some(time)),
        None => (lower.as_str(), None),
    };
    let (month, day, year) = if let Some(sep) = ['/', '.'].into_iter().find(|sep| date.contains(*sep)) {
        let parts: Vec<&str> = date.split(sep).collect();
        match parts.as_slice() {
            [m, d] => (*m, *d, ""),
            [m, d, y] => (*m, *d, *y),
            _ => return None,
        }
    } else if date.chars().all(|c| c.is_ascii_digit()) && (date.len() == 4 || date.len() == 6) {
        (&date[0..2], &date[2..4], &date[4..])
    } else {
        return None;
    };
    let date = NaiveDate::from_ymd_opt(year_of(year, today)?, month.parse().ok()?, day.parse().ok()?)?;
    let time = match time {
        Some(time) => parse_clock(time)?,
        None => NaiveTime::MIN,
    };
    Some(at(date, time))
}

/// The window of `slurmdb_job_cond_def_start_end`: `[start, end)` in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start; 0 is the epoch ("no lower bound").
    pub start: i64,
    /// End (exclusive).
    pub end: i64,
}

fn time_arg(text: &str, now: i64) -> Result<i64, Output> {
    parse_time(text, now).ok_or_else(|| fail(format!("sacct: error: Invalid time specification (pos=0): {text}")))
}

/// Resolves `-S`/`-E` and their defaults against the emulator's `now`.
pub fn window(options: &Options, now: i64) -> Result<Window, Output> {
    let mut start = match &options.start {
        Some(text) => time_arg(text, now)?,
        None => 0,
    };
    let mut end = match &options.end {
        Some(text) => time_arg(text, now)?,
        None => 0,
    };
    let jobs = !options.jobs.is_empty();
    if !options.states.is_empty() {
        if start == 0 && !jobs {
            start = now;
        }
        if start != 0 && end == 0 {
            end = start;
        }
    } else if !jobs && start == 0 {
        start = now - now.rem_euclid(86400);
    }
    if end == 0 {
        end = now;
    }
    // The query is [start, end): an end equal to the start or to now includes that second.
    if end == start || end == now {
        end += 1;
    }
    if start > end {
        let show = |t: i64| fmt::time_str(Some(t), &TimeFormat::Standard, now, 32);
        return Err(fail(format!(
            "sacct: error: Start time ({}) requested is after end time ({}).",
            show(start),
            show(end)
        )));
    }
    Ok(Window { start, end })
}
