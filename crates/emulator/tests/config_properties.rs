//! Bounded property tests of the emulator's values decoder (hardening issue 11): YAML overlays
//! (`-f` files, the `auth:` section) read on top of a scenario, and the typed values they merge
//! into. Arbitrary text and structurally generated documents never panic; an error names the key;
//! an overlay applied twice is the overlay applied once.
//!
//! Every property runs a fixed number of cases from a fixed seed, so a failure replays exactly
//! (`cargo test -p cwsandbox-emulator --test config_properties`); no regression files are written.

use std::path::Path;

use cwsandbox_emulator::config::{ConfigError, EmulatorConfig, parse_values_text, values_from_tree};
use cwsandbox_sim::config::{Scenario, Values, merge_values};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value};

/// A fixed case count and seed: CI runs the same cases every time, whatever PROPTEST_* says.
fn config(cases: u32) -> Config {
    Config { cases, rng_seed: RngSeed::Fixed(0x11_5eed), failure_persistence: None, ..Config::default() }
}

/// Keys of the values document and of `auth:`, at every level, and random ones.
fn key() -> BoxedStrategy<String> {
    let known = &[
        "sunk",
        "version",
        "namespace",
        "release",
        "scheduler",
        "enabled",
        "name",
        "scope",
        "type",
        "namespaces",
        "terminationOffsetSeconds",
        "gpuTypes",
        "slurmConfig",
        "KillWait",
        "PrologFlags",
        "slurm",
        "users",
        "uid",
        "partitions",
        "default",
        "nodeSets",
        "firstJobId",
        "replicas",
        "cpu",
        "memory",
        "gpus",
        "labels",
        "slurmd",
        "requests",
        "extraNodes",
        "runners",
        "policy",
        "sandboxes",
        "eventCapacity",
        "kubelet",
        "cpuManagerPolicy",
        "auth",
        "tokens",
        "token",
        "org",
        "user",
        "roles",
    ];
    prop_oneof![5 => proptest::sample::select(&known[..]).prop_map(str::to_owned), 1 => "[a-zA-Z_]{1,8}", 1 => "\\PC{0,6}"].boxed()
}

fn tree() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..100_000).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1.0e3f64..1.0e3).prop_map(|number| serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)),
        proptest::sample::select(
            &[
                "cluster",
                "namespace",
                "static",
                "none",
                "CANCELLED",
                "sandbox_user",
                "sandbox_admin",
                "1",
                "4Gi",
                "",
                "~",
                "yes"
            ][..]
        )
        .prop_map(|text| Value::String(text.to_owned())),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            1 => proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            3 => proptest::collection::vec((key(), inner), 0..4).prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
    .boxed()
}

fn overlay() -> BoxedStrategy<Value> {
    proptest::collection::vec((key(), tree()), 0..5)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
        .boxed()
}

/// YAML-ish text: indentation, block and flow syntax, anchors, tags, comments, documents.
fn yaml_like() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just(": ".to_owned()),
        Just("- ".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(", ".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("!!str ".to_owned()),
        Just("!!binary ".to_owned()),
        Just("# c".to_owned()),
        Just("---\n".to_owned()),
        Just("...\n".to_owned()),
        Just("'".to_owned()),
        Just("\"".to_owned()),
        Just("|\n".to_owned()),
        Just("? ".to_owned()),
        Just("<<: *a".to_owned()),
        Just("\t".to_owned()),
        key(),
        "[0-9.e+-]{1,6}",
    ];
    proptest::collection::vec(token, 0..24).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(config(600))]

    /// Arbitrary bytes and YAML-ish text: parsed into a map or refused with a message, never a panic.
    #[test]
    fn values_text_parses_or_is_refused(
        text in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            yaml_like(),
        ],
    ) {
        match parse_values_text(&text) {
            Ok(tree) => prop_assert!(tree.is_object()),
            Err(error) => prop_assert!(!error.to_string().is_empty()),
        }
        if let Err(error) = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("values.yaml"), text.as_str())]) {
            prop_assert!(!error.to_string().is_empty());
        }
    }
}

use cwsandbox_sim::config::KeyPathStep as Step;

/// The steps of a path as the simulation writes it.
fn steps(path: &str) -> Option<Vec<Step>> {
    cwsandbox_sim::config::key_path_steps(path)
}

fn step_key(map: &Map<String, Value>, step: &Step) -> Option<String> {
    match step {
        Step::Field(name) => map.contains_key(name).then(|| name.clone()),
        Step::Key(quoted) => map.keys().find(|key| format!("{key:?}") == *quoted).cloned(),
        Step::Index(_) => None,
    }
}

/// The place a values path names in `tree`.
fn resolve<'t>(tree: &'t Value, path: &str) -> Option<&'t Value> {
    steps(path)?.iter().try_fold(tree, |here, step| match (here, step) {
        (Value::Array(items), Step::Index(index)) => items.get(*index),
        (Value::Object(map), step) => map.get(&step_key(map, step)?),
        _ => None,
    })
}

fn lookup_mut<'t>(tree: &'t mut Value, path: &str) -> Option<&'t mut Value> {
    steps(path)?.iter().try_fold(tree, |here, step| match (here, step) {
        (Value::Array(items), Step::Index(index)) => items.get_mut(*index),
        (Value::Object(map), step) => {
            let key = step_key(map, step)?;
            map.get_mut(&key)
        }
        _ => None,
    })
}

/// A key of a values path, as `key_path` writes it.
fn member(path: &str, key: &str) -> String {
    let mut chars = key.chars();
    let is_name = chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    match (is_name, path.is_empty()) {
        (true, true) => key.to_owned(),
        (true, false) => format!("{path}.{key}"),
        (false, _) => format!("{path}[{key:?}]"),
    }
}

proptest! {
    #![proptest_config(config(300))]

    /// Structurally generated overlays, written as YAML: a configuration or an error, and a values
    /// error names a key that is there in the merged tree.
    #[test]
    fn yaml_overlays_load_or_name_the_key(overlay in overlay()) {
        let text = serde_saphyr::to_string(&overlay).map_err(|error| TestCaseError::fail(error.to_string()))?;
        let loaded = EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("values.yaml"), text.as_str())]);
        let mut values_part = overlay.clone();
        values_part.as_object_mut().map(|map| map.remove("auth"));
        let mut merged = Values::scenario_tree(Scenario::Ready);
        merge_values(&mut merged, &values_part);
        match values_from_tree(merged.clone()) {
            Ok(_) => prop_assert!(!matches!(loaded, Err(ConfigError::Values(_))), "{:?}", loaded),
            Err(error) => {
                prop_assert!(resolve(&merged, &error.path).is_some(), "{:?} is not in {}", error.path, merged);
                prop_assert!(matches!(loaded, Err(ConfigError::Values(_))), "{:?}", loaded);
            }
        }
        if let Err(ConfigError::Auth(message)) = &loaded {
            prop_assert!(!message.is_empty());
        }
    }

    /// `-f a.yaml -f a.yaml` reads as `-f a.yaml`.
    #[test]
    fn an_overlay_given_twice_reads_as_given_once(overlay in overlay()) {
        let text = serde_saphyr::to_string(&overlay).map_err(|error| TestCaseError::fail(error.to_string()))?;
        let file = Path::new("values.yaml");
        let once = EmulatorConfig::from_overlays(Scenario::Fresh, [(file, text.as_str())]).map_err(|error| error.to_string());
        let twice = EmulatorConfig::from_overlays(Scenario::Fresh, [(file, text.as_str()), (file, text.as_str())]).map_err(|error| error.to_string());
        prop_assert_eq!(once, twice);
    }
}

/// One place in a tree.
#[derive(Debug, Clone)]
struct Place {
    /// As serde_path_to_error prints it.
    path: String,
    /// The path of the map or list holding it.
    parent: String,
    /// Its key in a map; `None` for a list item.
    key: Option<String>,
    /// Whether it lies inside a runner's `policy`, which the values stage keeps as free JSON.
    free: bool,
    /// Whether its parent does.
    parent_free: bool,
}

fn places(tree: &Value, path: &str, free: bool, out: &mut Vec<Place>) {
    match tree {
        Value::Object(map) => {
            for (key, value) in map {
                let child = member(path, key);
                let child_free = free || key == "policy";
                out.push(Place {
                    path: child.clone(),
                    parent: path.to_owned(),
                    key: Some(key.clone()),
                    free: child_free,
                    parent_free: free,
                });
                places(value, &child, child_free, out);
            }
        }
        Value::Array(items) => {
            for (index, value) in items.iter().enumerate() {
                let child = format!("{path}[{index}]");
                out.push(Place { path: child.clone(), parent: path.to_owned(), key: None, free, parent_free: free });
                places(value, &child, free, out);
            }
        }
        _ => {}
    }
}

/// Maps of the values document with free keys (everything else is a struct refusing unknown keys).
fn is_free_map(path: &str) -> bool {
    path.ends_with(".labels") || path == "scheduler.gpuTypes"
}

/// A value of another JSON type than `value`.
fn retyped(value: &Value) -> Value {
    match value {
        Value::String(_) => Value::from(7),
        Value::Number(_) | Value::Bool(_) | Value::Null => Value::String("seven".to_owned()),
        Value::Array(_) => Value::Object(Map::new()),
        // Not a list: serde reads a struct from a list of its fields, and an empty one is the
        // default of a struct whose fields all have defaults (`kubelet: []`).
        Value::Object(_) => Value::String("seven".to_owned()),
    }
}

proptest! {
    #![proptest_config(config(600))]

    /// One mistake put into a valid document is reported at its key: a value of the wrong type at
    /// that key, an unknown key at that key, a missing key at its parent, naming it.
    #[test]
    fn a_mistake_is_reported_at_its_key(
        scenario in prop_oneof![Just(Scenario::Ready), Just(Scenario::Fresh)],
        pick in any::<proptest::sample::Index>(),
        mistake in 0u8..3,
        unknown in "[a-z]{1,6}Typo",
    ) {
        let mut tree = Values::scenario_tree(scenario);
        let mut all = Vec::new();
        places(&tree, "", false, &mut all);
        let place = pick.get(&all).clone();
        let (path, free) = (place.path.clone(), place.free);
        let target = lookup_mut(&mut tree, &path).ok_or_else(|| TestCaseError::fail(format!("{path} not found")))?;
        let outcome = match mistake {
            0 => {
                *target = retyped(target);
                values_from_tree(tree)
            }
            1 => {
                let Value::Object(map) = target else { return Ok(()) };
                map.insert(unknown.clone(), Value::from("x"));
                let result = values_from_tree(tree);
                if free || is_free_map(&path) {
                    prop_assert!(result.is_ok(), "{path}.{unknown}: {:?}", result);
                } else {
                    let error = result.err().ok_or_else(|| TestCaseError::fail(format!("{path}.{unknown} accepted")))?;
                    prop_assert_eq!(error.path, member(&path, &unknown));
                    prop_assert!(error.message.contains("unknown field"), "{}", error.message);
                }
                return Ok(());
            }
            _ => {
                let Some(removed_key) = place.key.clone() else { return Ok(()) };
                let parent = lookup_mut(&mut tree, &place.parent).ok_or_else(|| TestCaseError::fail(place.parent.clone()))?;
                let Value::Object(map) = parent else { return Ok(()) };
                map.remove(&removed_key);
                if let Err(error) = values_from_tree(tree) {
                    prop_assert!(!place.parent_free, "{}: {}", path, error);
                    prop_assert_eq!(&error.path, &place.parent);
                    prop_assert!(error.message.contains(&format!("missing field `{removed_key}`")), "{}", error.message);
                }
                return Ok(());
            }
        };
        if free {
            prop_assert!(outcome.is_ok(), "{path} inside a policy: {:?}", outcome);
        } else {
            let error = outcome.err().ok_or_else(|| TestCaseError::fail(format!("{path} retyped and accepted")))?;
            prop_assert_eq!(&error.path, &path, "{}", error.message);
        }
    }
}

/// Found while writing `an_overlay_given_twice_reads_as_given_once`: a bare `auth:` (YAML null)
/// was refused as "invalid type: null, expected struct AuthConfig" instead of meaning "no tokens".
#[test]
fn a_bare_auth_key_means_no_tokens() {
    let config =
        EmulatorConfig::from_overlays(Scenario::Ready, [(Path::new("values.yaml"), "auth:\n")]).expect("loads");
    assert!(config.auth.tokens.is_empty());
}

/// Found by `yaml_overlays_load_or_name_the_key`: an unknown key `[` was reported at the path
/// `[`, and a label key holding dots at `…labels.node-role.kubernetes.io/x`, paths that name
/// another place (or none). Keys that are not plain names are now quoted as map keys are.
#[test]
fn a_key_that_is_not_a_name_is_quoted_in_the_path() {
    let mut tree = Values::scenario_tree(Scenario::Ready);
    merge_values(&mut tree, &serde_json::json!({"[": false}));
    assert_eq!(values_from_tree(tree).unwrap_err().path, r#"["["]"#);
    let mut tree = Values::scenario_tree(Scenario::Ready);
    merge_values(
        &mut tree,
        &serde_json::json!({"extraNodes": [{"name": "n", "cpu": "1", "memory": "1Gi", "labels": {"a.b/c": 5}}]}),
    );
    assert_eq!(values_from_tree(tree).unwrap_err().path, r#"extraNodes[0].labels["a.b/c"]"#);
}
