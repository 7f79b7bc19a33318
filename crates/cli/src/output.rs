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

/// Prints a document as JSON or YAML (tables fall back to YAML).
pub fn print_value(value: &serde_json::Value, format: Format) -> Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml | Format::Table => print!("{}", to_yaml(value)?),
    }
    Ok(())
}
