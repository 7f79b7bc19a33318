//! `sandbox runner policy get|describe|edit|validate`.
//!
//! Policy documents are proto3 JSON (lowerCamelCase; snake_case accepted on input), shown as YAML.
//! `edit` works like `kubectl edit`: $EDITOR on the current document, validated on save with the
//! same validator the emulator uses (`cwsandbox_policy::validate_policy`), errors shown as
//! comments and the editor reopened; nothing is sent when unchanged; the etag of the version that
//! was read goes with the update, so a concurrent change fails instead of being overwritten.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cwsandbox_client::{RunnerAdmin, pb};
use serde::de::DeserializeOwned;

use crate::common::{Exit, GlobalArgs, read_input};
use crate::output::{Format, Output, print_value, report, to_yaml, yaml_to_json};

/// The runner a policy command is about: the argument, else `$CWSANDBOX_RUNNER_ID` (as `sandbox
/// run` does), as cwic's `[RUNNER-ID]` is optional.
#[derive(clap::Args, Debug)]
pub struct RunnerArg {
    /// The runner; default `$CWSANDBOX_RUNNER_ID`.
    #[arg(env = "CWSANDBOX_RUNNER_ID", value_name = "RUNNER_ID", required = true)]
    runner_id: String,
}

#[derive(clap::Subcommand, Debug)]
pub enum PolicyCmd {
    /// Print the policy as YAML (`-o json`: JSON; `null` for a runner never configured).
    #[command(after_help = "Examples:
  cwsbx sandbox runner policy get                 # the runner of $CWSANDBOX_RUNNER_ID
  cwic sandbox runner policy get cks-runner       # through the `cwic` link, as the guide writes it
  cwsbx sandbox runner policy get cks-runner -o json | jq .base")]
    Get {
        #[command(flatten)]
        runner: RunnerArg,
    },
    /// A readable summary of the policy.
    #[command(after_help = "Examples:
  cwsbx sandbox runner policy describe cks-runner")]
    Describe {
        #[command(flatten)]
        runner: RunnerArg,
    },
    /// Replace the policy: from a file, or in $EDITOR on the current one (checked on save, sent
    /// with the etag it was read at, so a concurrent change fails instead of being overwritten).
    #[command(after_help = "Examples:
  cwsbx sandbox runner policy edit                          # $EDITOR on the policy of $CWSANDBOX_RUNNER_ID
  cwsbx sandbox runner policy edit cks-runner -f slurm-policy.yaml
  cwsbx sandbox runner policy edit --print-template > slurm-policy.yaml")]
    Edit {
        /// The runner; default `$CWSANDBOX_RUNNER_ID`.
        #[arg(env = "CWSANDBOX_RUNNER_ID", value_name = "RUNNER_ID", required_unless_present = "print_template")]
        runner_id: Option<String>,
        /// The new policy (`-` for stdin); without it, $EDITOR opens on the current policy.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<String>,
        /// Apply only if the policy is still at this revision.
        #[arg(long)]
        etag: Option<String>,
        /// Print a policy template and exit.
        #[arg(long)]
        print_template: bool,
    },
    /// Check a policy file offline; prints every violation with its field path.
    #[command(after_help = "Examples:
  cwsbx sandbox runner policy validate -f slurm-policy.yaml
  cwsbx sandbox runner policy validate -f slurm-policy.yaml -o json | jq .valid")]
    Validate {
        /// The policy file (`-` for stdin).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
    },
}

/// `runner create --print-template`.
pub const RUNNER_TEMPLATE: &str = r#"# A v1 ManagedRunner (proto3 JSON names; snake_case is accepted too).
identity:
  runnerId: my-runner
  zone: us-east-04a
  clusterId: 00000000-0000-0000-0000-000000000000
displayName: My runner
spec:
  releaseChannel: RELEASE_CHANNEL_STABLE
policy:
  constraints:
    lifecycle:
      defaultLifetimeSeconds: 86400
"#;

/// `policy edit --print-template`.
pub const POLICY_TEMPLATE: &str = r#"# A runner policy (coreweave.sandbox.v1.Policy). Every group is optional; {} is fully permissive.
displayName: SUNK sandboxes
base:
  metadata:
    annotations:
      sunk.coreweave.com/partition: sandbox
  spec:
    schedulerName: slurm-scheduler
constraints:
  resources:
    maxCpu: "8"
    maxMemory: 32Gi
    requireLimits: false
  lifecycle:
    defaultLifetimeSeconds: 3600
"#;

/// YAML or JSON text as a proto message (proto3 JSON rules: unknown fields are refused by name).
pub fn parse_document<T: DeserializeOwned>(text: &str) -> Result<T> {
    let value = yaml_to_json(text).context("not valid YAML or JSON")?;
    let value = if value.is_null() { serde_json::Value::Object(Default::default()) } else { value };
    serde_json::from_value(value).map_err(|error| anyhow::anyhow!("{error}"))
}

/// Every problem of a policy document: parse errors, then the validator's violations as
/// `field: description`.
pub fn check_policy(text: &str) -> Result<pb::Policy, Vec<String>> {
    let policy: pb::Policy = parse_document(text).map_err(|error| vec![format!("policy: {error:#}")])?;
    let violations = cwsandbox_policy::validate_policy(&policy);
    if violations.is_empty() {
        Ok(policy)
    } else {
        Err(violations.into_iter().map(|v| format!("{}: {}", v.field, v.description)).collect())
    }
}

fn policy_json(policy: &Option<pb::Policy>) -> Result<serde_json::Value> {
    Ok(match policy {
        Some(policy) => serde_json::to_value(policy)?,
        None => serde_json::Value::Null,
    })
}

pub async fn run(global: &GlobalArgs, command: &PolicyCmd, output: Output) -> Result<u8> {
    match command {
        PolicyCmd::Validate { file } => {
            let text = read_input(file)?;
            let format = output.rows();
            match check_policy(&text) {
                Ok(_) => {
                    report(
                        format,
                        &format!("{file}: valid"),
                        serde_json::json!({"file": file, "valid": true, "violations": []}),
                    )?;
                    Ok(0)
                }
                Err(problems) => {
                    if format == Format::Table {
                        for problem in &problems {
                            println!("{problem}");
                        }
                    } else {
                        let value = serde_json::json!({"file": file, "valid": false, "violations": problems});
                        print_value(&value, format)?;
                    }
                    eprintln!("error: {file}: {} violation(s)", problems.len());
                    Err(Exit(1).into())
                }
            }
        }
        PolicyCmd::Get { runner } => {
            let format = output.document("a policy")?;
            let runner = global.client()?.runners()?.get(&runner.runner_id).await?;
            print_value(&policy_json(&runner.policy)?, format)?;
            Ok(0)
        }
        PolicyCmd::Describe { runner } => {
            let runner_id = &runner.runner_id;
            let runner = global.client()?.runners()?.get(runner_id).await?;
            let format = output.rows();
            if format != Format::Table {
                let value = serde_json::json!({"runnerId": runner_id, "etag": runner.etag, "policy": policy_json(&runner.policy)?});
                print_value(&value, format)?;
                return Ok(0);
            }
            describe(runner_id, &runner);
            Ok(0)
        }
        PolicyCmd::Edit { print_template: true, .. } => {
            print!("{POLICY_TEMPLATE}");
            Ok(0)
        }
        PolicyCmd::Edit { runner_id: None, .. } => bail!("no runner: give RUNNER_ID or set CWSANDBOX_RUNNER_ID"),
        PolicyCmd::Edit { runner_id: Some(runner_id), file: Some(file), etag, .. } => {
            let text = read_input(file)?;
            let policy = match check_policy(&text) {
                Ok(policy) => policy,
                Err(problems) => bail!("{file} is not a valid policy: {}", problems.join("; ")),
            };
            let admin = global.client()?.runners()?;
            // cwic reads the current revision at submit time unless an etag is pinned.
            let etag = match etag {
                Some(etag) => etag.clone(),
                None => admin.get(runner_id).await?.etag,
            };
            submit(&admin, runner_id, policy, &etag, None, output.rows()).await
        }
        PolicyCmd::Edit { runner_id: Some(runner_id), file: None, etag, .. } => {
            let admin = global.client()?.runners()?;
            let runner = admin.get(runner_id).await?;
            let etag = etag.clone().unwrap_or(runner.etag.clone());
            edit_interactively(&admin, runner_id, &runner, &etag, output.rows()).await
        }
    }
}

fn describe(runner_id: &str, runner: &pb::ManagedRunner) {
    println!("Runner:       {runner_id}");
    println!("Etag:         {}", runner.etag);
    let Some(policy) = &runner.policy else {
        println!("Policy:       <unset> (never configured)");
        return;
    };
    println!("Display name: {}", if policy.display_name.is_empty() { "<none>" } else { &policy.display_name });
    match &policy.base {
        Some(base) if !base.fields.is_empty() => {
            let mut keys: Vec<&String> = base.fields.keys().collect();
            keys.sort();
            println!("Base:         {}", keys.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "));
            if let Ok(yaml) = serde_json::to_value(base).map_err(anyhow::Error::from).and_then(|v| to_yaml(&v)) {
                for line in yaml.lines() {
                    println!("  {line}");
                }
            }
        }
        _ => println!("Base:         <unset>"),
    }
    let constraints = policy.constraints.clone().unwrap_or_default();
    let groups = [
        ("resources", constraints.resources.is_some()),
        ("image", constraints.image.is_some()),
        ("network", constraints.network.is_some()),
        ("security", constraints.security.is_some()),
        ("instance", constraints.instance.is_some()),
        ("lifecycle", constraints.lifecycle.is_some()),
        ("metadata", constraints.metadata.is_some()),
        ("volumes", constraints.volumes.is_some()),
    ];
    println!("Constraints:");
    for (name, set) in groups {
        println!("  {name:<10} {}", if set { "set" } else { "<unset>" });
    }
    if let Ok(value) = serde_json::to_value(&constraints)
        && value.as_object().is_some_and(|o| !o.is_empty())
        && let Ok(yaml) = to_yaml(&value)
    {
        for line in yaml.lines() {
            println!("    {line}");
        }
    }
    println!(
        "Control-plane access: {}",
        match &policy.control_plane_access {
            None => "<unrestricted>".to_owned(),
            Some(access) => format!("{:?}", access.source_ip_allowlist.as_ref().map(|a| &a.cidrs)),
        }
    );
}

async fn submit(
    admin: &RunnerAdmin,
    runner_id: &str,
    policy: pb::Policy,
    etag: &str,
    saved: Option<&Path>,
    format: Format,
) -> Result<u8> {
    match admin.update_policy(runner_id, policy, etag).await {
        Ok(updated) => {
            let line = format!("runner {runner_id}: policy updated (etag {})", updated.etag);
            report(format, &line, serde_json::to_value(&updated)?)?;
            Ok(0)
        }
        Err(error) if error.is_stale_etag() => {
            let kept = saved.map(|p| format!("; your edit is kept in {}", p.display())).unwrap_or_default();
            bail!(
                "the policy of runner {runner_id} was changed by someone else since it was read (etag {etag} is stale); nothing was applied{kept}. Read it again and redo the edit"
            )
        }
        Err(error) => Err(error.into()),
    }
}

fn strip_comments(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n")
}

fn run_editor(path: &Path) -> Result<()> {
    let editor = std::env::var("CWSBX_EDITOR")
        .or_else(|_| std::env::var("VISUAL"))
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("starting the editor {editor:?}"))?;
    if !status.success() {
        bail!("the editor {editor:?} failed ({status}); nothing was applied");
    }
    Ok(())
}

/// How often the editor reopens on an invalid policy before `edit` gives up.
const MAX_EDITS: usize = 20;

fn edit_file(runner_id: &str) -> PathBuf {
    std::env::temp_dir().join(format!("cwsbx-policy-{runner_id}-{}.yaml", std::process::id()))
}

async fn edit_interactively(
    admin: &RunnerAdmin,
    runner_id: &str,
    runner: &pb::ManagedRunner,
    etag: &str,
    format: Format,
) -> Result<u8> {
    let original = policy_json(&runner.policy)?;
    let original = if original.is_null() { serde_json::json!({}) } else { original };
    let body = to_yaml(&original)?;
    let header = format!(
        "# Please edit the policy of runner {runner_id} below. Lines beginning with '#' are ignored,\n\
         # and an empty file aborts the edit. If an error occurs while saving, this file is reopened\n\
         # with the errors. Read at etag {etag}.\n#\n"
    );
    let path = edit_file(runner_id);
    std::fs::write(&path, format!("{header}{body}")).with_context(|| format!("writing {}", path.display()))?;
    let mut last_invalid: Option<String> = None;
    let mut attempts = 0;
    loop {
        run_editor(&path)?;
        let text = std::fs::read_to_string(&path)?;
        let content = strip_comments(&text);
        if content.trim().is_empty() {
            let _ = std::fs::remove_file(&path);
            eprintln!("Edit cancelled, the file was empty; nothing was applied.");
            return Ok(0);
        }
        attempts += 1;
        if last_invalid.as_deref() == Some(content.as_str()) || attempts > MAX_EDITS {
            bail!(
                "edit cancelled: the policy is still invalid and was not changed; your edit is kept in {}",
                path.display()
            );
        }
        match check_policy(&content) {
            Ok(policy) => {
                if serde_json::to_value(&policy)? == original {
                    let _ = std::fs::remove_file(&path);
                    eprintln!("Edit cancelled, no changes made.");
                    return Ok(0);
                }
                let result = submit(admin, runner_id, policy, etag, Some(&path), format).await;
                if result.is_ok() {
                    let _ = std::fs::remove_file(&path);
                }
                return result;
            }
            Err(problems) => {
                let mut errors = String::from("# The edited policy is invalid; fix it or empty the file to abort:\n");
                for problem in &problems {
                    // Every line of a problem is a comment (YAML errors span several lines).
                    for line in problem.lines() {
                        errors.push_str(&format!("#   {line}\n"));
                    }
                }
                errors.push_str("#\n");
                std::fs::write(&path, format!("{header}{errors}{content}\n"))?;
                eprintln!("error: the edited policy is invalid ({} problem(s)); reopening the editor", problems.len());
                last_invalid = Some(content);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Bounded property test of the offline validator (hardening issue 11): fixed seed and case
    //! count, so a failure replays exactly.

    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};
    use serde_json::Value;

    use super::check_policy;

    fn key() -> impl Strategy<Value = String> {
        let known = &[
            "displayName",
            "base",
            "metadata",
            "labels",
            "annotations",
            "spec",
            "schedulerName",
            "tolerations",
            "constraints",
            "resources",
            "maxCpu",
            "minMemory",
            "maxGpuCount",
            "network",
            "allowedEgress",
            "cidr",
            "ports",
            "port",
            "security",
            "runtimeClassMappings",
            "lifecycle",
            "defaultLifetimeSeconds",
            "controlPlaneAccess",
            "sourceIpAllowlist",
            "cidrs",
            "max_cpu",
            "display_name",
        ];
        prop_oneof![4 => proptest::sample::select(&known[..]).prop_map(str::to_owned), 1 => "\\PC{0,8}"]
    }

    fn document() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            proptest::sample::select(&["8", "500m", "32Gi", "10.0.0.0/8", "TENANT_SCOPE_SAME_ORG", "", "x"][..])
                .prop_map(|text| Value::String(text.to_owned())),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..4)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(Config { cases: 400, rng_seed: RngSeed::Fixed(0x11_5eed), failure_persistence: None, ..Config::default() })]

        /// YAML or JSON text of any shape: a policy, or problems each naming `policy…`; no panic.
        #[test]
        fn policy_documents_validate_or_name_the_field(document in document(), as_json in any::<bool>(), noise in "\\PC{0,6}") {
            let text = if as_json { document.to_string() } else { crate::output::to_yaml(&document).unwrap_or_default() };
            for text in [text.clone(), format!("{text}{noise}")] {
                if let Err(problems) = check_policy(&text) {
                    prop_assert!(!problems.is_empty());
                    for problem in problems {
                        prop_assert!(problem.starts_with("policy"), "{problem}");
                    }
                }
            }
        }
    }
}
