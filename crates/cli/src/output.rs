//! Output formats: aligned tables, JSON (proto3 JSON names) and YAML.

use anyhow::{Context, Result};

/// `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// Proto3 JSON.
    Json,
    /// The same document as YAML.
    Yaml,
}

/// Prints rows under a header, columns padded to the widest cell.
pub fn table<R: IntoIterator<Item = Vec<String>>>(header: &[&str], rows: R) {
    let rows: Vec<Vec<String>> = rows.into_iter().collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| if i == last { c } else { format!("{c:<width$}", width = widths[i]) })
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row);
    }
}

/// A JSON value as YAML text.
pub fn to_yaml(value: &serde_json::Value) -> Result<String> {
    serde_saphyr::to_string(value).context("rendering YAML")
}

/// YAML text as a JSON value (an empty document is `null`).
pub fn yaml_to_json(text: &str) -> Result<serde_json::Value> {
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Ok(serde_json::Value::Null);
    }
    Ok(serde_saphyr::from_str(text)?)
}

/// Prints a document as JSON or YAML; a table is the caller's to print (asking this for one is a
/// bug, reported as an error rather than YAML under the name of a table).
pub fn print_value(value: &serde_json::Value, format: Format) -> Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", to_yaml(value)?),
        Format::Table => anyhow::bail!("internal: no table form for this output"),
    }
    Ok(())
}

/// `-o` as given: each command has its natural form when it is not (a table for lists and
/// results, YAML for documents such as a policy or the values).
#[derive(Debug, Clone, Copy)]
pub struct Output(pub Option<Format>);

impl Output {
    /// The form of a list or a result: a table unless asked otherwise.
    pub fn rows(self) -> Format {
        self.0.unwrap_or(Format::Table)
    }

    /// The form of a document, which has no table form: YAML unless JSON is asked for.
    pub fn document(self, what: &str) -> Result<Format> {
        match self.0 {
            Some(Format::Table) => {
                anyhow::bail!("{what} is a document and has no table form: use -o yaml (its default) or -o json")
            }
            Some(format) => Ok(format),
            None => Ok(Format::Yaml),
        }
    }
}

/// The result of a command that changes something: a line for people (on stdout), or the same
/// facts as a JSON/YAML object for scripts.
pub fn report(format: Format, line: &str, value: serde_json::Value) -> Result<()> {
    match format {
        Format::Table => println!("{line}"),
        _ => print_value(&value, format)?,
    }
    Ok(())
}

/// Several results: one line each, or one JSON/YAML document (an object for one, a list for more).
pub fn report_all(format: Format, results: Vec<(String, serde_json::Value)>) -> Result<()> {
    match format {
        Format::Table => {
            for (line, _) in &results {
                println!("{line}");
            }
            Ok(())
        }
        _ => {
            let mut values: Vec<serde_json::Value> = results.into_iter().map(|(_, value)| value).collect();
            let value = if values.len() == 1 { values.remove(0) } else { serde_json::Value::Array(values) };
            print_value(&value, format)
        }
    }
}

/// A sandbox state as people and scripts read it everywhere: `RUNNING`, not `STATE_RUNNING`.
pub fn state_label(state: i32) -> String {
    cwsandbox_client::state_name(state).trim_start_matches("STATE_").to_owned()
}
