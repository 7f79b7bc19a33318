//! Printing (`print_fields.c`): fixed-width and parsable cells, the header, job and step lines,
//! and the listing itself.

use cwsandbox_client::emulator_v1 as pb;

use super::args::{Options, Parsable};
use super::fields::{FIELDS, Row, Value, value};
use super::select::{selects, users};
use crate::slurm::fmt;
use crate::slurm::{Caller, Output, json};

fn justify(text: &str, width: i32) -> String {
    let abs = width.unsigned_abs() as usize;
    let cut: String = text.chars().take(abs).collect();
    if width < 0 { format!("{cut:<abs$} ") } else { format!("{cut:>abs$} ") }
}

fn cell(out: &mut String, options: &Options, width: i32, value: Value, last: bool, now: i64) {
    let abs = width.unsigned_abs() as usize;
    // Parsable text and fixed-width text of the value.
    let (parsable_text, fixed): (String, String) = match value {
        Value::Str(value) => {
            let parsable = value.clone().unwrap_or_default();
            let fixed = match value {
                None => justify(" ", width),
                Some(text) => {
                    let chars: Vec<char> = text.chars().collect();
                    if chars.len() > abs && abs > 0 {
                        let mut cut: String = chars[..abs - 1].iter().collect();
                        cut.push('+');
                        justify(&cut, width)
                    } else {
                        justify(&text, width)
                    }
                }
            };
            (parsable, fixed)
        }
        Value::Uint(value) => match value {
            None => (String::new(), format!("{:>abs$} ", " ")),
            Some(number) => {
                let text = number.to_string();
                let fixed = if width < 0 { format!("{text:<abs$} ") } else { format!("{text:>abs$} ") };
                (text, fixed)
            }
        },
        Value::Date(seconds) => {
            let text = fmt::time_str(seconds, &options.time_format, now, abs + 1);
            (text.clone(), justify(&text, width))
        }
        Value::Sluid(id) => {
            let text = super::fields::sluid(id);
            let fixed = if width < 0 { format!("{text:<abs$} ") } else { format!("{text:>abs$} ") };
            (text, fixed)
        }
        Value::Time(seconds) => match seconds {
            None => (String::new(), format!("{:>abs$} ", " ")),
            Some(seconds) => {
                let text = fmt::secs2time(seconds);
                let fixed = if width < 0 { format!("{text:<abs$} ") } else { format!("{text:>abs$} ") };
                (text, fixed)
            }
        },
    };
    match options.parsable {
        Some(Parsable::NoEnding) if last => out.push_str(&parsable_text),
        Some(_) => {
            out.push_str(&parsable_text);
            out.push_str(options.delimiter.as_deref().unwrap_or("|"));
        }
        None => out.push_str(&fixed),
    }
}

fn header(options: &Options) -> String {
    let mut out = String::new();
    let count = options.fields.len();
    for (position, index) in options.fields.iter().enumerate() {
        let name = FIELDS[*index].1;
        let width = options.widths[*index];
        match options.parsable {
            Some(Parsable::NoEnding) if position + 1 == count => out.push_str(name),
            Some(_) => {
                out.push_str(name);
                out.push_str(options.delimiter.as_deref().unwrap_or("|"));
            }
            None => out.push_str(&justify(name, width)),
        }
    }
    out.push('\n');
    if options.parsable.is_none() {
        for index in &options.fields {
            out.push_str(&"-".repeat(options.widths[*index].unsigned_abs() as usize));
            out.push(' ');
        }
        out.push('\n');
    }
    out
}

fn line(out: &mut String, options: &Options, row: Row<'_>, now: i64) {
    let count = options.fields.len();
    for (position, index) in options.fields.iter().enumerate() {
        let value = value(FIELDS[*index].1, row, options, now);
        cell(out, options, options.widths[*index], value, position + 1 == count, now);
    }
    out.push('\n');
}

/// Renders the listing: `jobs` are accounting rows, `now` the emulator's time, `known` the Slurm
/// users (for `-u <name>`). Pure.
/// The listing, or with `--json` the document (`json` carries its `meta`). Pure.
pub fn render(
    options: &Options,
    jobs: &[pb::Job],
    now: i64,
    caller: &Caller,
    known: &[(String, u32)],
    json: Option<&json::Meta<'_>>,
) -> Output {
    if let Some(info) = &options.info {
        return Output::ok(info.clone());
    }
    let users = match users(options, caller, known) {
        Ok(users) => users,
        Err(output) => return output,
    };
    let mut selected: Vec<&pb::Job> = jobs
        .iter()
        .filter(|job| job.source != pb::JobSource::Queue as i32)
        .filter(|job| selects(options, &users, job))
        .collect();
    selected.sort_by_key(|job| (fmt::secs(job.submit_time.as_ref()).unwrap_or(0), job.job_id));
    if let Some(about) = json {
        // Slurm: formats are ignored; the query's filters and -X (no steps) apply.
        let name_of =
            |uid: u32| known.iter().find(|(_, known)| *known == uid).map_or(uid.to_string(), |(name, _)| name.clone());
        let records = selected
            .iter()
            .map(|job| {
                let killer = job.cancelled_by_uid.map(name_of).unwrap_or_default();
                json::accounting_record(job, about.cluster, &killer, !options.no_steps, now)
            })
            .collect();
        return Output::ok(json::accounting_document(records, about).pretty());
    }
    let mut out = String::new();
    if options.header {
        out.push_str(&header(options));
    }
    for job in selected {
        let wanted: Vec<&Option<String>> =
            options.jobs.iter().filter(|(id, _)| *id == job.job_id).map(|(_, step)| step).collect();
        let full = wanted.is_empty() || wanted.iter().any(|step| step.is_none());
        if full {
            line(&mut out, options, Row::Job(job), now);
        }
        if !options.no_steps {
            for step in &job.steps {
                if full || wanted.iter().any(|wanted| wanted.as_deref() == Some(step.name.as_str())) {
                    line(&mut out, options, Row::Step(job, step), now);
                }
            }
        }
    }
    let mut output = Output::ok(out);
    output.stderr = options.warnings.iter().map(|w| format!("{w}\n")).collect();
    output
}
