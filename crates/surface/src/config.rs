//! The emulator's configuration: the simulation's values (shaped like the SUNK Slurm Helm values,
//! see `cwsandbox_sim::config`) plus the emulator's own `auth:` section, read from the embedded
//! default scenario overlaid with `-f` files the way `helm -f` overlays values.
//!
//! ```yaml
//! slurmConfig:
//!   KillWait: 60
//! auth:
//!   tokens:
//!     - token: operator-secret
//!       org: default-org
//!       user: operator
//!       uid: 0
//!       roles: [cluster_admin, sandbox_admin]
//!     - token: admin-secret
//!       org: default-org
//!       user: admin
//!       uid: 0
//!       roles: [sandbox_admin, sandbox_user]
//!     - token: alice-secret
//!       org: default-org
//!       user: alice
//!       uid: 1001
//!       roles: [sandbox_user]
//! ```
//!
//! `strictness: strict | loose` (default strict, `serve --strictness` overrides it) says what a
//! request gets that sets a field the emulator does not emulate (`crate::fidelity`): strict
//! refuses it with UNIMPLEMENTED naming the fields, loose accepts it and logs a warning naming
//! them (Azurite's `--loose`).
//!
//! `containerRuntime:` says what runs a sandbox's containers (read at start; `serve --runtime`
//! overrides its `kind`):
//!
//! ```yaml
//! containerRuntime:
//!   kind: auto                 # auto | oci | process
//!   runc: runc                 # the OCI runtime: a path, or a name looked up on PATH
//!   dockerConfig: /root/.docker/config.json   # registry credentials; default $DOCKER_CONFIG or ~/.docker
//!   insecureRegistries: [registry.internal:5000]  # plain HTTP besides loopback registries
//!   pullTimeoutSeconds: 600
//!   imageCache: /var/cache/cwsandbox-emulator/images   # default $XDG_CACHE_HOME or ~/.cache
//!   maxImageBytes: 8589934592      # one image unpacked (declared sizes); 0: no limit
//!   maxImageEntries: 1000000       # entries of one image's layers; 0: no limit
//!   imageCacheMaxBytes: 34359738368   # the cache's bound, least recently used unused images evicted; 0: none
//!   registryMirrors:               # per registry host, tried in order, the registry last (containerd's hosts.toml)
//!     docker.io: [http://127.0.0.1:5000]
//! ```
//!
//! `auth`, `containerRuntime` and `strictness` never reach the simulation. With no tokens configured, the emulator generates an
//! admin token and a user token at start (see [`crate::auth::Tokens::generate`]).

use std::path::{Path, PathBuf};

use cwsandbox_sim::config::{Scenario, Timing, Values, key_path, merge_values};
use serde::Deserialize;

use crate::auth::{Principal, Role, Tokens, WandbKeys};
use crate::fidelity::Strictness;
// The host's own settings, read from the `containerRuntime:` section of the values.
pub use cwsandbox_host::runtime_config::{ContainerRuntimeConfig, RuntimeKind};

/// What can go wrong reading the configuration; every message names the file or the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A values file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A values file is not YAML, or its top level is not a map.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The merged values do not describe a world.
    #[error("values: {0}")]
    Values(String),
    /// The `auth:` section is malformed.
    #[error("auth: {0}")]
    Auth(String),
}

/// One configured bearer token and the principal it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenConfig {
    /// The secret sent as `authorization: Bearer <token>`.
    pub token: String,
    /// Organization.
    pub org: String,
    /// User name (sandbox namespaces are `sandbox-<user>`).
    pub user: String,
    /// Numeric uid (what `scancel` records as the canceller).
    #[serde(default)]
    pub uid: u32,
    /// Any of `cluster_admin` (the cluster operator), `sandbox_admin` (its organization's admin,
    /// includes `sandbox_user`) and `sandbox_user`; see `crate::auth`.
    pub roles: Vec<Role>,
}

/// One W&B API key's access to one W&B entity, and the principal it acts as there: what the
/// published client's W&B auth (`x-wandb-api-key`, `x-entity-id`) is mapped to. A key may be listed
/// once per entity; its first entry is the key's default entity (a request without `x-entity-id`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WandbKeyConfig {
    /// The W&B API key, sent as `x-wandb-api-key`.
    pub api_key: String,
    /// The W&B entity (team or user), sent as `x-entity-id`.
    pub entity: String,
    /// The W&B server the key belongs to, as the client sends it in `x-wandb-host` (`host` or
    /// `host:port`); empty: W&B's cloud, for which the client sends no `x-wandb-host`.
    #[serde(default)]
    pub host: String,
    /// Organization the entity's sandboxes belong to.
    pub org: String,
    /// User name.
    pub user: String,
    /// Numeric uid.
    #[serde(default)]
    pub uid: u32,
    /// Roles, as a token's.
    pub roles: Vec<Role>,
}

/// The `auth:` section.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted tokens; empty means "generate an admin and a user token".
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Accepted W&B API keys (the client's `auth=AuthStrategy.WANDB`), each for one entity.
    #[serde(default)]
    pub wandb_keys: Vec<WandbKeyConfig>,
}

impl AuthConfig {
    /// The configured tokens and the principals they stand for.
    pub fn tokens(&self) -> Tokens {
        let mut tokens = Tokens::default();
        for token in &self.tokens {
            let principal = Principal {
                org: token.org.clone(),
                user: token.user.clone(),
                uid: token.uid,
                roles: token.roles.clone(),
            };
            tokens.insert(token.token.clone(), principal);
        }
        tokens
    }

    /// The configured W&B keys, each entity's grant in configuration order.
    pub fn wandb_keys(&self) -> WandbKeys {
        let mut keys = WandbKeys::default();
        for key in &self.wandb_keys {
            let principal =
                Principal { org: key.org.clone(), user: key.user.clone(), uid: key.uid, roles: key.roles.clone() };
            keys.insert(key.api_key.clone(), key.entity.clone(), key.host.clone(), principal);
        }
        keys
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorConfig {
    /// The simulation's values.
    pub values: Values,
    /// Tokens.
    pub auth: AuthConfig,
    /// Faults installed at start and after each full Reset (`faults:`, each a `Fault` as proto3
    /// JSON).
    pub faults: Vec<cwsandbox_api::emulator_v1::Fault>,
    /// What a request that sets a field the emulator does not emulate gets (`strictness:`).
    pub strictness: Strictness,
    /// What runs a sandbox's containers (`containerRuntime:`).
    pub container_runtime: ContainerRuntimeConfig,
}

/// The JSON Schema (2020-12) of the values document: the simulation's `Values` and the
/// emulator's own sections (`auth`, `containerRuntime`, `faults`, `strictness`), with each key's
/// description (its doc comment) and default where it has one. `cwsbx cluster values explain`
/// reads it; editors can validate a values file against it.
pub fn values_schema() -> serde_json::Value {
    let mut generator = schemars::SchemaGenerator::default();
    let mut root = generator.root_schema_for::<Values>();
    let own: [(&str, schemars::Schema); 4] = [
        ("auth", generator.subschema_for::<AuthConfig>()),
        ("containerRuntime", generator.subschema_for::<ContainerRuntimeConfig>()),
        (
            "faults",
            schemars::json_schema!({
                "type": "array",
                "description": "Faults installed at start and after each full Reset: each a `Fault` of the \
                                emulator's API (coreweave.sandbox.emulator.v1) as YAML or proto3 JSON.",
                "items": {"type": "object"}
            }),
        ),
        ("strictness", generator.subschema_for::<Strictness>()),
    ];
    if let Some(properties) = root.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
        for (key, schema) in own {
            properties.insert(key.to_owned(), schema.to_value());
        }
    }
    let definitions = generator.take_definitions(true);
    let mut value = root.to_value();
    if let Some(object) = value.as_object_mut() {
        let defs = object.entry("$defs").or_insert_with(|| serde_json::json!({}));
        if let Some(defs) = defs.as_object_mut() {
            defs.extend(definitions);
        }
    }
    value
}

/// What differs between two values trees, one line per changed leaf in key order:
/// `path: old -> new`, `path: added value`, `path: removed`. A list that changed is one leaf.
pub fn values_changes(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    fn walk(path: &str, old: Option<&serde_json::Value>, new: Option<&serde_json::Value>, out: &mut Vec<String>) {
        use serde_json::Value;
        let join = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
        match (old, new) {
            (Some(Value::Object(old)), Some(Value::Object(new))) => {
                let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
                for key in keys {
                    walk(&join(key), old.get(key), new.get(key), out);
                }
            }
            (Some(old), Some(new)) if old == new => {}
            (Some(old), Some(new)) => out.push(format!("{path}: {old} -> {new}")),
            (None, Some(new)) => out.push(format!("{path}: added {new}")),
            (Some(_), None) => out.push(format!("{path}: removed")),
            (None, None) => {}
        }
    }
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &mut out);
    out
}

/// Parses one YAML overlay into a JSON tree (a map at the top).
pub fn parse_overlay(path: &Path, text: &str) -> Result<serde_json::Value, ConfigError> {
    parse_values_text(text).map_err(|error| ConfigError::Parse { path: path.to_owned(), message: error.to_string() })
}

/// Parses YAML (or JSON) values text into a JSON tree; the top level must be a map (empty text is
/// the empty map).
pub fn parse_values_text(text: &str) -> Result<serde_json::Value, ValuesTextError> {
    let tree: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_saphyr::from_str(text)?
    };
    match tree {
        serde_json::Value::Object(_) => Ok(tree),
        serde_json::Value::Null => Ok(serde_json::Value::Object(serde_json::Map::new())),
        other => Err(ValuesTextError::NotAMap { found: kind(&other) }),
    }
}

/// Why values text is not a map of values.
#[derive(Debug, thiserror::Error)]
pub enum ValuesTextError {
    /// The text is not YAML (or JSON); the parser's message says where.
    #[error(transparent)]
    Syntax(#[from] serde_saphyr::Error),
    /// The text is a scalar or a list, not a map.
    #[error("the top level must be a map of values, found {found}")]
    NotAMap {
        /// What it is instead (`a list`, `a string`).
        found: &'static str,
    },
}

/// Why a values tree does not describe a world: the sim's, which names the key by its path.
pub use cwsandbox_sim::config::KeyError;

/// The values a merged tree describes; errors name the offending key by its path.
pub fn values_from_tree(tree: serde_json::Value) -> Result<Values, KeyError> {
    from_tree(tree)
}

/// A typed section from a tree, naming the offending key by its path on error.
fn from_tree<T: serde::de::DeserializeOwned>(tree: serde_json::Value) -> Result<T, KeyError> {
    serde_path_to_error::deserialize::<_, T>(tree)
        .map_err(|error| KeyError { path: key_path(error.path()), message: error.into_inner().to_string() })
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
}

impl EmulatorConfig {
    /// The scenario overlaid with the given YAML documents, in order.
    pub fn from_overlays<'a>(
        scenario: Scenario,
        overlays: impl IntoIterator<Item = (&'a Path, &'a str)>,
    ) -> Result<EmulatorConfig, ConfigError> {
        EmulatorConfig::from_overlays_timed(scenario, overlays, None)
    }

    /// [`EmulatorConfig::from_overlays`] with a timing profile that overrides the values'
    /// `timing` (`serve --timing`). The profile sets the delay defaults the overlays start from,
    /// so a delay an overlay sets explicitly wins.
    pub fn from_overlays_timed<'a>(
        scenario: Scenario,
        overlays: impl IntoIterator<Item = (&'a Path, &'a str)>,
        timing: Option<Timing>,
    ) -> Result<EmulatorConfig, ConfigError> {
        // `auth` and `faults` merge under their own keys, so `auth: null` (or a bare `auth:`)
        // removes it as `null` removes any key, leaving the default.
        let mut auth_tree = serde_json::json!({});
        let mut faults_tree = serde_json::json!({});
        let mut runtime_tree = serde_json::json!({});
        let mut strictness = Strictness::default();
        let mut parsed = Vec::new();
        for (path, text) in overlays {
            let mut overlay = parse_overlay(path, text)?;
            if let Some(auth) = overlay.as_object_mut().and_then(|map| map.remove("auth")) {
                merge_values(&mut auth_tree, &serde_json::json!({ "auth": auth }));
            }
            if let Some(faults) = overlay.as_object_mut().and_then(|map| map.remove("faults")) {
                merge_values(&mut faults_tree, &serde_json::json!({ "faults": faults }));
            }
            if let Some(runtime) = overlay.as_object_mut().and_then(|map| map.remove("containerRuntime")) {
                merge_values(&mut runtime_tree, &serde_json::json!({ "containerRuntime": runtime }));
            }
            if let Some(value) = overlay.as_object_mut().and_then(|map| map.remove("strictness")) {
                strictness = match value {
                    serde_json::Value::Null => Strictness::default(),
                    value => serde_json::from_value(value.clone()).map_err(|_| {
                        ConfigError::Values(format!("strictness: {value} is not a strictness (strict, loose)"))
                    })?,
                };
            }
            parsed.push(overlay);
        }
        let timing = match timing {
            Some(timing) => timing,
            None => {
                // The profile the overlays ask for, read before they are merged onto its defaults.
                let mut asked = serde_json::json!({});
                for overlay in &parsed {
                    merge_values(&mut asked, overlay);
                }
                match asked.get("timing") {
                    None | Some(serde_json::Value::Null) => Timing::Realistic,
                    Some(value) => serde_json::from_value(value.clone()).map_err(|_| {
                        ConfigError::Values(format!("timing: {value} is not a timing profile (realistic, instant)"))
                    })?,
                }
            }
        };
        let mut tree = Values::scenario_tree_timed(scenario, timing);
        for overlay in &parsed {
            merge_values(&mut tree, overlay);
        }
        if let Some(map) = tree.as_object_mut() {
            map.insert("timing".to_owned(), serde_json::Value::String(timing.as_str().to_owned()));
        }
        let values = values_from_tree(tree).map_err(|error| ConfigError::Values(error.to_string()))?;
        let faults = match faults_tree.as_object_mut().and_then(|map| map.remove("faults")) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    serde_json::from_value::<cwsandbox_api::emulator_v1::Fault>(item)
                        .map_err(|error| ConfigError::Values(format!("faults[{index}]: {error}")))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ConfigError::Values("faults: must be a list of faults".to_owned())),
        };
        let auth_tree =
            auth_tree.as_object_mut().and_then(|map| map.remove("auth")).unwrap_or_else(|| serde_json::json!({}));
        let auth: AuthConfig = from_tree(auth_tree).map_err(|error| ConfigError::Auth(error.to_string()))?;
        for (index, token) in auth.tokens.iter().enumerate() {
            if token.token.trim().is_empty() {
                return Err(ConfigError::Auth(format!("tokens[{index}].token must not be empty")));
            }
            if token.org.trim().is_empty() || token.user.trim().is_empty() {
                return Err(ConfigError::Auth(format!("tokens[{index}]: org and user are required")));
            }
            if auth.tokens[..index].iter().any(|other| other.token == token.token) {
                return Err(ConfigError::Auth(format!("tokens[{index}]: the same token is listed twice")));
            }
        }
        for (index, key) in auth.wandb_keys.iter().enumerate() {
            if key.api_key.trim().is_empty() || key.entity.trim().is_empty() {
                return Err(ConfigError::Auth(format!("wandbKeys[{index}]: apiKey and entity are required")));
            }
            if key.org.trim().is_empty() || key.user.trim().is_empty() {
                return Err(ConfigError::Auth(format!("wandbKeys[{index}]: org and user are required")));
            }
            let earlier = &auth.wandb_keys[..index];
            if earlier.iter().any(|other| other.api_key == key.api_key && other.entity == key.entity) {
                return Err(ConfigError::Auth(format!(
                    "wandbKeys[{index}]: key and entity {:?} are listed twice",
                    key.entity
                )));
            }
            if earlier.iter().any(|other| other.api_key == key.api_key && other.host != key.host) {
                return Err(ConfigError::Auth(format!(
                    "wandbKeys[{index}]: the same key with another host: a W&B key belongs to one server"
                )));
            }
            if auth.tokens.iter().any(|token| token.token == key.api_key) {
                return Err(ConfigError::Auth(format!("wandbKeys[{index}]: the key is also a bearer token")));
            }
        }
        let runtime_tree = runtime_tree
            .as_object_mut()
            .and_then(|map| map.remove("containerRuntime"))
            .filter(|tree| !tree.is_null())
            .unwrap_or_else(|| serde_json::json!({}));
        let container_runtime: ContainerRuntimeConfig =
            from_tree(runtime_tree).map_err(|error| ConfigError::Values(format!("containerRuntime.{error}")))?;
        Ok(EmulatorConfig { values, auth, faults, strictness, container_runtime })
    }

    /// The scenario overlaid with the given files, in order.
    pub fn load(scenario: Scenario, files: &[PathBuf], timing: Option<Timing>) -> Result<EmulatorConfig, ConfigError> {
        let mut texts = Vec::new();
        for path in files {
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
            texts.push((path.as_path(), text));
        }
        EmulatorConfig::from_overlays_timed(scenario, texts.iter().map(|(path, text)| (*path, text.as_str())), timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(overlays: &[&str]) -> Result<EmulatorConfig, ConfigError> {
        EmulatorConfig::from_overlays(Scenario::Ready, overlays.iter().map(|text| (Path::new("v.yaml"), *text)))
    }

    #[test]
    fn values_changes_name_each_changed_leaf_in_key_order() {
        let old = serde_json::json!({"slurmConfig": {"KillWait": 30, "PrologFlags": "Alloc"}, "timing": "realistic",
            "nodeSets": [{"name": "cpu"}]});
        let new = serde_json::json!({"slurmConfig": {"KillWait": 60, "PrologFlags": "Alloc", "PrivateData": "jobs"},
            "nodeSets": [{"name": "gpu"}]});
        assert_eq!(
            values_changes(&old, &new),
            [
                "nodeSets: [{\"name\":\"cpu\"}] -> [{\"name\":\"gpu\"}]",
                "slurmConfig.KillWait: 30 -> 60",
                "slurmConfig.PrivateData: added \"jobs\"",
                "timing: removed",
            ]
        );
        assert!(values_changes(&old, &old).is_empty());
    }

    #[test]
    fn the_container_runtime_is_auto_unless_the_values_say_otherwise() {
        let default = load(&[]).unwrap().container_runtime;
        assert_eq!(default, ContainerRuntimeConfig::default());
        assert_eq!((default.kind, default.runc.as_path()), (RuntimeKind::Auto, Path::new("runc")));
        let set = load(&[
            "containerRuntime:\n  kind: oci\n  insecureRegistries: [a:5000]\n",
            "containerRuntime:\n  runc: /usr/sbin/runc\n",
        ])
        .unwrap()
        .container_runtime;
        assert_eq!(set.kind, RuntimeKind::Oci);
        assert_eq!(set.insecure_registries, ["a:5000"]);
        assert_eq!(set.runc, Path::new("/usr/sbin/runc"));
        assert_eq!(
            (default.max_image_bytes, default.max_image_entries, default.image_cache_max_bytes),
            (8 << 30, 1_000_000, 32 << 30)
        );
        let limits =
            load(&["containerRuntime:\n  maxImageBytes: 1048576\n  maxImageEntries: 10\n  imageCacheMaxBytes: 0\n"])
                .unwrap()
                .container_runtime;
        assert_eq!((limits.max_image_bytes, limits.max_image_entries, limits.image_cache_max_bytes), (1 << 20, 10, 0));
        let mirrors = load(&[
            "containerRuntime:\n  registryMirrors:\n    docker.io: [http://127.0.0.1:5000, https://m.example]\n",
        ])
        .unwrap()
        .container_runtime
        .registry_mirrors;
        assert_eq!(mirrors["docker.io"], ["http://127.0.0.1:5000", "https://m.example"]);
        let bad = load(&["containerRuntime:\n  kind: docker\n"]).unwrap_err().to_string();
        assert!(bad.contains("containerRuntime.kind") && bad.contains("docker"), "{bad}");
        let unknown = load(&["containerRuntime:\n  pullPolicy: Always\n"]).unwrap_err().to_string();
        assert!(unknown.contains("pullPolicy"), "{unknown}");
    }

    #[test]
    fn strictness_is_strict_unless_the_values_say_loose() {
        assert_eq!(load(&[]).unwrap().strictness, Strictness::Strict);
        assert_eq!(load(&["strictness: loose\n"]).unwrap().strictness, Strictness::Loose);
        assert_eq!(load(&["strictness: loose\n", "strictness: strict\n"]).unwrap().strictness, Strictness::Strict);
        assert_eq!(load(&["strictness: loose\n", "strictness:\n"]).unwrap().strictness, Strictness::Strict);
        let bad = load(&["strictness: lax\n"]).unwrap_err().to_string();
        assert!(bad.contains("strictness") && bad.contains("strict, loose"), "{bad}");
    }

    #[test]
    fn the_timing_profile_sets_delay_defaults_and_explicit_delays_win() {
        let load = |overlay: &str, timing: Option<Timing>| {
            EmulatorConfig::from_overlays_timed(Scenario::Ready, [(Path::new("v.yaml"), overlay)], timing)
        };
        let realistic = load("", None).unwrap().values;
        assert_eq!((realistic.timing, realistic.scheduler.prolog_seconds), (Timing::Realistic, 1));
        assert_eq!(realistic.kubelet.image_pull_back_off_seconds, 10);
        let instant = load("", Some(Timing::Instant)).unwrap().values;
        assert_eq!(
            (instant.timing, instant.scheduler.prolog_seconds, instant.kubelet.image_pull_back_off_seconds),
            (Timing::Instant, 0, 0)
        );
        // The values may ask for the profile themselves; the flag overrides them.
        assert_eq!(load("timing: instant\n", None).unwrap().values.scheduler.prolog_seconds, 0);
        assert_eq!(load("timing: instant\n", Some(Timing::Realistic)).unwrap().values.scheduler.prolog_seconds, 1);
        // A delay set explicitly wins over the profile.
        let explicit = load("scheduler: {prologSeconds: 3}\n", Some(Timing::Instant)).unwrap().values;
        assert_eq!((explicit.timing, explicit.scheduler.prolog_seconds), (Timing::Instant, 3));
        let bad = load("timing: fast\n", None).unwrap_err().to_string();
        assert!(bad.contains("timing") && bad.contains("realistic, instant"), "{bad}");
    }

    #[test]
    fn faults_in_the_values_are_read_as_faults_and_a_bad_one_is_named() {
        let text = "faults:\n  - match: {method: CreateSandbox}\n    action: {code: UNAVAILABLE, retryDelay: 0.1s}\n    schedule: {times: 2}\n";
        let config = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), text)]).unwrap();
        assert_eq!(config.faults.len(), 1);
        assert_eq!(config.faults[0].schedule.unwrap().times, 2);
        let bad = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), "faults:\n  - {mtach: {}}\n")]);
        assert!(bad.unwrap_err().to_string().contains("faults[0]"));
    }

    #[test]
    fn wandb_keys_are_read_and_contradictions_are_named() {
        let key = |api_key: &str, entity: &str, host: &str| {
            format!(
                "    - {{apiKey: \"{api_key}\", entity: \"{entity}\", host: \"{host}\", org: o, user: u, roles: [sandbox_user]}}\n"
            )
        };
        let load = |keys: &[String]| {
            let text = format!(
                "auth:\n  tokens:\n    - {{token: t, org: o, user: u, roles: [sandbox_user]}}\n  wandbKeys:\n{}",
                keys.concat()
            );
            EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), text.as_str())])
        };
        let config = load(&[key("k", "team-a", ""), key("k", "team-b", "")]).unwrap();
        let keys = config.auth.wandb_keys();
        let credentials = |entity| crate::auth::WandbCredentials { api_key: "k", entity, host: None };
        assert_eq!(keys.authenticate(credentials(Some("team-b"))).unwrap().org, "o");
        assert!(keys.authenticate(credentials(None)).is_ok());
        for (keys, words) in [
            (vec![key("k", "team-a", ""), key("k", "team-a", "")], "listed twice"),
            (vec![key("k", "team-a", ""), key("k", "team-b", "wandb.lab.test")], "another host"),
            (vec![key("", "team-a", "")], "apiKey and entity are required"),
            (vec![key("t", "team-a", "")], "also a bearer token"),
        ] {
            let error = load(&keys).unwrap_err().to_string();
            assert!(error.contains(words) && error.contains("wandbKeys["), "{words}: {error}");
        }
    }

    #[test]
    fn overlays_merge_in_order_and_auth_is_kept_apart() {
        let first = "slurmConfig:\n  KillWait: 90\nauth:\n  tokens:\n    - {token: a, org: o, user: u, roles: [sandbox_user]}\n    - {token: b, org: o, user: ops, roles: [cluster_admin, sandbox_admin]}\n";
        let second = "scheduler:\n  scope:\n    type: namespace\n";
        let config = EmulatorConfig::from_overlays(
            Scenario::Ready,
            [(Path::new("one.yaml"), first), (Path::new("two.yaml"), second)],
        )
        .unwrap();
        assert_eq!(config.values.slurm_config.kill_wait, 90);
        assert_eq!(config.values.scheduler.scope.scope_type, cwsandbox_sim::config::ScopeType::Namespace);
        assert_eq!(config.auth.tokens.len(), 2);
        assert_eq!(config.auth.tokens[0].roles, [Role::SandboxUser]);
        assert_eq!(config.auth.tokens[1].roles, [Role::ClusterAdmin, Role::SandboxAdmin]);
    }

    #[test]
    fn unknown_keys_and_bad_yaml_are_named() {
        let error =
            EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), "slurmConfig:\n  KillWiat: 3\n")])
                .unwrap_err()
                .to_string();
        assert!(error.contains("slurmConfig.KillWiat: unknown field `KillWiat`"), "{error}");
        let error = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), "a: [1, 2\n")])
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("v.yaml:"), "{error}");
        let error =
            EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("v.yaml"), "- 1\n")]).unwrap_err().to_string();
        assert!(error.contains("must be a map"), "{error}");
        let error = EmulatorConfig::from_overlays(
            Scenario::Ready,
            [(Path::new("v.yaml"), "auth:\n  tokens:\n    - {token: a, org: o, user: u, roles: [root]}\n")],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("root"), "{error}");
    }

    #[test]
    fn a_null_auth_is_the_default_and_auth_errors_name_the_key() {
        let tokens = "auth:\n  tokens:\n    - {token: a, org: o, user: u, roles: [sandbox_user]}\n";
        for cleared in ["auth:\n", "auth: null\n"] {
            let config = EmulatorConfig::from_overlays(
                Scenario::Fresh,
                [(Path::new("a.yaml"), tokens), (Path::new("b.yaml"), cleared)],
            )
            .unwrap_or_else(|error| panic!("{cleared:?}: {error}"));
            assert!(config.auth.tokens.is_empty(), "{cleared:?} removes the tokens");
        }
        let error = EmulatorConfig::from_overlays(Scenario::Fresh, [(Path::new("a.yaml"), "auth:\n  tokens: 5\n")])
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("auth: tokens: invalid type"), "{error}");
        let error = EmulatorConfig::from_overlays(
            Scenario::Fresh,
            [(Path::new("a.yaml"), "auth:\n  tokens:\n    - {token: a, org: o, user: u, uid: -1, roles: []}\n")],
        )
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("auth: tokens[0].uid: invalid value"), "{error}");
    }

    #[test]
    fn empty_file_is_the_default() {
        let config = EmulatorConfig::from_overlays(Scenario::Fresh, [(Path::new("empty.yaml"), "")]).unwrap();
        assert_eq!(config.values, Values::scenario(Scenario::Fresh));
        assert!(config.auth.tokens.is_empty());
    }
}
