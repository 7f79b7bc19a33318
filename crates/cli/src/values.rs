//! `cwsbx cluster values …`: the emulator's Helm-style values (get, apply with the diff it made).

use anyhow::Result;
use clap::Subcommand;

use crate::common::{GlobalArgs, read_input};
use crate::output::{Format, Output, print_value, yaml_to_json};

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// The emulator's Helm-style values.
    #[command(
        subcommand,
        after_help = "Examples:
  cwsbx cluster values get
  cwsbx cluster values apply -f values.yaml --dry-run"
    )]
    Values(ValuesCmd),
}

#[derive(Subcommand, Debug)]
pub enum ValuesCmd {
    /// Print the values in force (YAML; `-o json`: JSON).
    #[command(after_help = "Examples:
  cwsbx cluster values get
  cwsbx cluster values get -o json | jq .slurmConfig")]
    Get,
    /// Merge a values file like `helm upgrade -f` (maps merge; lists and scalars replace whole,
    /// so a list entry cannot be changed alone; `null` deletes); prints each value it changed.
    #[command(after_help = "Examples:
  printf 'slurmConfig:\\n  KillWait: 60\\n' | cwsbx cluster values apply -f -
  cwsbx cluster values apply -f values.yaml --dry-run
  cwsbx cluster values apply -f values.yaml -o json | jq .changes")]
    Apply {
        /// The values file (`-` for stdin).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
        /// Check and show what would change, without applying.
        #[arg(long)]
        dry_run: bool,
    },
    /// Explain the values' keys: each one's type, description, default and value in force, and
    /// the keys under it (the schema comes from the emulator, so it is the running version's).
    #[command(after_help = "Examples:
  cwsbx cluster values explain                         # the top-level sections
  cwsbx cluster values explain slurmConfig.KillWait
  cwsbx cluster values explain nodeSets.slurmd.requests   # a list's entries: nodeSets.<key>")]
    Explain {
        /// A dotted key path (`scheduler.scope.type`); a list's entries are reached through the
        /// list's name (`nodeSets.replicas`). Default: the whole document.
        key: Option<String>,
    },
    /// Print the values' JSON Schema (2020-12), e.g. for an editor to check a values file.
    #[command(after_help = "Examples:
  cwsbx cluster values schema > values.schema.json")]
    Schema,
}

pub async fn run(global: &GlobalArgs, command: &ClusterCmd, output: Output) -> Result<u8> {
    let ClusterCmd::Values(command) = command;
    match command {
        ValuesCmd::Schema => {
            // A JSON Schema is read as JSON unless YAML is asked for.
            let format = match output.0 {
                None => Format::Json,
                Some(_) => output.document("the schema")?,
            };
            let (_, schema) = global.client()?.emulator()?.values_with_schema().await?;
            print_value(&serde_json::from_str(&schema)?, format)?;
            Ok(0)
        }
        ValuesCmd::Explain { key } => {
            let (yaml, schema) = global.client()?.emulator()?.values_with_schema().await?;
            let schema: serde_json::Value = serde_json::from_str(&schema)?;
            let in_force = yaml_to_json(&yaml)?;
            let explained = explain(&schema, &in_force, key.as_deref().unwrap_or(""))?;
            match output.rows() {
                Format::Table => print!("{}", explained.text()),
                format => print_value(&explained.to_json(), format)?,
            }
            Ok(0)
        }
        ValuesCmd::Get => {
            let format = output.document("the values")?;
            let yaml = global.client()?.emulator()?.get_values().await?;
            match format {
                Format::Json => print_value(&yaml_to_json(&yaml)?, Format::Json)?,
                _ => print!("{yaml}"),
            }
            Ok(0)
        }
        ValuesCmd::Apply { file, dry_run } => {
            let yaml = read_input(file)?;
            let applied = global.client()?.emulator()?.apply_values(&yaml, *dry_run).await?;
            match output.rows() {
                Format::Table => {
                    // What changed, one line each: a no-op apply restarts nothing and says so.
                    let verdict = match (*dry_run, applied.changes.is_empty()) {
                        (true, true) => "values are valid and change nothing (dry run)".to_owned(),
                        (true, false) => "values are valid; they would change (dry run):".to_owned(),
                        (false, true) => "values unchanged: nothing applied, nothing restarted".to_owned(),
                        (false, false) => format!("values applied, {} changed:", applied.changes.len()),
                    };
                    println!("{verdict}");
                    for change in &applied.changes {
                        println!("  {change}");
                    }
                }
                format => {
                    let value = serde_json::json!({
                        "dryRun": dry_run,
                        "changes": applied.changes,
                        "values": yaml_to_json(&applied.yaml)?,
                    });
                    print_value(&value, format)?;
                }
            }
            Ok(0)
        }
    }
}

/// One key of the values as `explain` shows it.
#[derive(Debug)]
struct Explained {
    key: String,
    kind: String,
    description: String,
    default: Option<serde_json::Value>,
    in_force: Option<serde_json::Value>,
    is_list: bool,
    /// The keys under it: name, type, first line of the description.
    fields: Vec<(String, String, String)>,
}

impl Explained {
    fn text(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "KEY:         {}\n",
            if self.key.is_empty() { "(the values document)" } else { &self.key }
        ));
        out.push_str(&format!("TYPE:        {}\n", self.kind));
        if let Some(default) = &self.default {
            out.push_str(&format!("DEFAULT:     {}\n", compact(default)));
        }
        if let Some(value) = &self.in_force
            && !self.key.is_empty()
        {
            out.push_str(&format!("IN FORCE:    {}\n", compact(value)));
        }
        if !self.description.is_empty() {
            out.push_str("DESCRIPTION:\n");
            for line in self.description.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        if self.is_list {
            out.push_str(
                "APPLYING:    a list: `values apply` replaces it whole (maps merge key by key, lists do not), \
                 so give every entry\n",
            );
        } else if self.key.is_empty() {
            out.push_str(
                "APPLYING:    `values apply` merges maps key by key; lists and scalars replace whole; null deletes\n",
            );
        }
        if !self.fields.is_empty() {
            out.push_str(if self.is_list { "FIELDS OF EACH ENTRY:\n" } else { "FIELDS:\n" });
            let width = self.fields.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0);
            let kind_width = self.fields.iter().map(|(_, kind, _)| kind.len()).max().unwrap_or(0);
            for (name, kind, summary) in &self.fields {
                out.push_str(format!("  {name:<width$}  {kind:<kind_width$}  {summary}").trim_end());
                out.push('\n');
            }
        }
        out
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "key": self.key,
            "type": self.kind,
            "description": self.description,
            "default": self.default,
            "inForce": self.in_force,
            "list": self.is_list,
            "fields": self.fields.iter().map(|(name, kind, summary)| serde_json::json!({"name": name, "type": kind, "description": summary})).collect::<Vec<_>>(),
        })
    }
}

fn compact(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.len() > 200 {
        format!("{}… (see `values get`)", &text[..text.char_indices().nth(200).map_or(text.len(), |(i, _)| i)])
    } else {
        text
    }
}

/// A schema with its `$ref` (to `#/$defs/…`) followed, and `allOf` of one, as schemars writes a
/// described reference.
fn resolve<'a>(root: &'a serde_json::Value, mut schema: &'a serde_json::Value) -> &'a serde_json::Value {
    for _ in 0..16 {
        if let Some(reference) = schema.get("$ref").and_then(serde_json::Value::as_str)
            && let Some(name) = reference.strip_prefix("#/$defs/")
            && let Some(target) = root.get("$defs").and_then(|defs| defs.get(name))
        {
            schema = target;
            continue;
        }
        if let Some([only]) = schema.get("allOf").and_then(serde_json::Value::as_array).map(Vec::as_slice) {
            schema = only;
            continue;
        }
        break;
    }
    schema
}

/// The type of a schema in a word: `integer`, `string`, `list of object`, `one of: a, b`, ….
fn kind_of(root: &serde_json::Value, schema: &serde_json::Value) -> String {
    let schema = resolve(root, schema);
    if let Some(values) = schema.get("enum").and_then(serde_json::Value::as_array) {
        return format!(
            "one of: {}",
            values
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(variants) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(serde_json::Value::as_array) {
        let words: Vec<String> = variants.iter().map(|variant| kind_of(root, variant)).collect();
        return words.join(" or ");
    }
    if let Some(constant) = schema.get("const") {
        return constant.as_str().map_or_else(|| constant.to_string(), str::to_owned);
    }
    match schema.get("type") {
        Some(serde_json::Value::String(kind)) if kind == "array" => {
            format!(
                "list of {}",
                schema.get("items").map_or_else(|| "anything".to_owned(), |items| kind_of(root, items))
            )
        }
        Some(serde_json::Value::String(kind)) if kind == "object" && schema.get("properties").is_none() => {
            match schema.get("additionalProperties") {
                Some(values) if values.is_object() => format!("map of {}", kind_of(root, values)),
                _ => "object".to_owned(),
            }
        }
        Some(serde_json::Value::String(kind)) => kind.clone(),
        Some(serde_json::Value::Array(kinds)) => {
            kinds.iter().filter_map(serde_json::Value::as_str).filter(|k| *k != "null").collect::<Vec<_>>().join(" or ")
        }
        _ => "anything".to_owned(),
    }
}

/// The keys of an object schema (a list's entries' keys for a list).
fn fields_of(root: &serde_json::Value, schema: &serde_json::Value) -> Vec<(String, String, String)> {
    let schema = resolve(root, schema);
    let schema = match schema.get("items") {
        Some(items) if schema.get("type").and_then(serde_json::Value::as_str) == Some("array") => resolve(root, items),
        _ => schema,
    };
    let Some(properties) = schema.get("properties").and_then(serde_json::Value::as_object) else { return Vec::new() };
    properties
        .iter()
        .map(|(name, field)| {
            let summary = description(root, field).lines().next().unwrap_or_default().to_owned();
            (name.clone(), kind_of(root, field), summary)
        })
        .collect()
}

fn description(root: &serde_json::Value, schema: &serde_json::Value) -> String {
    schema
        .get("description")
        .or_else(|| resolve(root, schema).get("description"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Walks the schema and the values in force along a dotted key.
fn explain(root: &serde_json::Value, in_force: &serde_json::Value, key: &str) -> Result<Explained> {
    let mut schema = root;
    let mut value = Some(in_force.clone());
    let mut walked = Vec::new();
    for part in key.split('.').filter(|part| !part.is_empty()) {
        let mut current = resolve(root, schema);
        // A list's entries are reached through the list's own name.
        if current.get("type").and_then(serde_json::Value::as_str) == Some("array")
            && let Some(items) = current.get("items")
        {
            current = resolve(root, items);
            value = None;
        }
        let properties = current.get("properties").and_then(serde_json::Value::as_object);
        let Some(next) = properties.and_then(|properties| properties.get(part)) else {
            let known: Vec<String> = properties.map(|p| p.keys().cloned().collect()).unwrap_or_default();
            let at = if walked.is_empty() { "the values".to_owned() } else { walked.join(".") };
            anyhow::bail!(
                "{at} has no key {part:?}{}",
                if known.is_empty() { String::new() } else { format!("; its keys: {}", known.join(", ")) }
            );
        };
        walked.push(part.to_owned());
        schema = next;
        value = value.and_then(|value| value.get(part).cloned());
    }
    let resolved = resolve(root, schema);
    let is_list = resolved.get("type").and_then(serde_json::Value::as_str) == Some("array");
    Ok(Explained {
        key: walked.join("."),
        kind: kind_of(root, schema),
        description: description(root, schema),
        default: schema.get("default").or_else(|| resolved.get("default")).cloned(),
        in_force: value,
        is_list,
        fields: fields_of(root, schema),
    })
}
