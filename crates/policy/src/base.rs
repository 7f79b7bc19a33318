//! The policy's `base`: a pod-template fragment (`{metadata: {...}, spec: {...}}`) an administrator
//! pins under every sandbox. Which keys it may carry is not public (docs/facts/runner-api.md#gap-7,
//! docs/facts/policy.md#base); the emulator's answer lives in [`BASE_SCHEMA`], one table, so it is
//! easy to revise.
//!
//! The same parser serves two callers: policy validation wants every problem with its path, and
//! resolution wants the typed fragment. Parsing once for both keeps them from drifting apart.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};

use crate::error::FieldViolation;
use crate::k8s_names::{label_value_problem, qualified_name_problem};
use crate::quoted;
use crate::resolved::Toleration;

/// Description of a key the platform sets itself (lifecycle and safety fields).
pub const MANAGED_BY_PLATFORM: &str = "field is managed by the platform";
/// Description of any other key outside the allowlist.
pub const NOT_ALLOWED_IN_BASE: &str = "field is not allowed in base";

/// The keys one object level of `base` accepts, and the keys it refuses because the platform owns
/// them. A key in neither list is refused as not allowed.
#[derive(Debug, Clone, Copy)]
pub struct KeyRules {
    /// Keys an administrator may set.
    pub allowed: &'static [&'static str],
    /// Keys refused with [`MANAGED_BY_PLATFORM`], so the administrator learns why.
    pub managed_by_platform: &'static [&'static str],
}

/// Every level of `base` the emulator understands.
#[derive(Debug, Clone, Copy)]
pub struct BaseSchema {
    /// `base` itself.
    pub top_level: KeyRules,
    /// `base.metadata`.
    pub metadata: KeyRules,
    /// `base.spec`: infrastructure settings a sandbox should not have to declare.
    pub spec: KeyRules,
    /// `base.spec.containers[]`: attachments merged into the sandbox's containers.
    pub container: KeyRules,
    /// `base.spec.containers[].env[]`.
    pub env_var: KeyRules,
    /// `base.spec.tolerations[]`.
    pub toleration: KeyRules,
}

/// The allow/deny table of `base` (docs/facts/runner-api.md#gap-7).
pub const BASE_SCHEMA: BaseSchema = BaseSchema {
    top_level: KeyRules { allowed: &["metadata", "spec"], managed_by_platform: &[] },
    metadata: KeyRules { allowed: &["labels", "annotations"], managed_by_platform: &[] },
    spec: KeyRules {
        allowed: &[
            "schedulerName",
            "nodeSelector",
            "tolerations",
            "priorityClassName",
            "topologySpreadConstraints",
            "affinity",
            "serviceAccountName",
            "imagePullSecrets",
            "volumes",
            "dnsPolicy",
            "dnsConfig",
            "enableServiceLinks",
            "containers",
        ],
        managed_by_platform: &[
            "terminationGracePeriodSeconds",
            "activeDeadlineSeconds",
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "runtimeClassName",
            "securityContext",
            "restartPolicy",
            "nodeName",
        ],
    },
    container: KeyRules { allowed: &["name", "volumeMounts", "env"], managed_by_platform: &["securityContext"] },
    env_var: KeyRules { allowed: &["name", "value"], managed_by_platform: &[] },
    toleration: KeyRules {
        allowed: &["key", "operator", "value", "effect", "tolerationSeconds"],
        managed_by_platform: &[],
    },
};

/// `base.spec` keys resolution turns into typed fields; every other allowed key is carried to the
/// Pod verbatim. `affinity` is both: its required node terms are extracted for the scheduler and
/// the whole object is kept for the Pod.
const TYPED_SPEC_KEYS: &[&str] = &["schedulerName", "nodeSelector", "tolerations", "priorityClassName", "containers"];

const TOLERATION_OPERATORS: &[&str] = &["Equal", "Exists"];
const TOLERATION_EFFECTS: &[&str] = &["", "NoSchedule", "PreferNoSchedule", "NoExecute"];
const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];

/// Environment and volume mounts `base` attaches to sandbox containers.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BaseContainer {
    /// The sandbox container this applies to; `None` applies to every container.
    pub name: Option<String>,
    /// `env[]` as name → value, in list order (a later duplicate wins, as in Kubernetes).
    pub env: Vec<(String, String)>,
}

/// `base`, typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BaseTemplate {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub scheduler_name: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub priority_class_name: Option<String>,
    pub required_node_affinity: Vec<BTreeMap<String, Vec<String>>>,
    pub extra_pod_spec: BTreeMap<String, Value>,
    pub containers: Vec<BaseContainer>,
}

/// Parses `base` into its typed form, collecting every problem (with `policy.base…` paths) rather
/// than stopping at the first, so an administrator can fix a document in one round.
pub(crate) fn parse_base(base: Option<&pbjson_types::Struct>) -> (BaseTemplate, Vec<FieldViolation>) {
    let mut parser = BaseParser::default();
    let mut template = BaseTemplate::default();
    if let Some(base) = base {
        let root = struct_to_json(base);
        parser.parse_root(&root, &mut template);
    }
    (template, parser.violations)
}

/// `google.protobuf.Struct` as JSON, keys sorted so that violations come out in a stable order
/// whatever the hash map did.
fn struct_to_json(value: &pbjson_types::Struct) -> Map<String, Value> {
    let mut entries: Vec<(&String, &pbjson_types::Value)> = value.fields.iter().collect();
    entries.sort_by(|left, right| left.0.cmp(right.0));
    entries.into_iter().map(|(key, value)| (key.clone(), value_to_json(value))).collect()
}

/// One `google.protobuf.Value` as JSON. Whole numbers become integers so that Kubernetes integer
/// fields (`tolerationSeconds`) type-check and print as they were written; non-finite numbers,
/// which JSON cannot carry, become null and fail any type check.
fn value_to_json(value: &pbjson_types::Value) -> Value {
    use pbjson_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(flag)) => Value::Bool(*flag),
        Some(Kind::StringValue(text)) => Value::String(text.clone()),
        Some(Kind::NumberValue(number)) => {
            let is_whole = number.fract() == 0.0 && number.abs() < 9.0e15;
            if is_whole {
                Value::Number(Number::from(*number as i64))
            } else {
                Number::from_f64(*number).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StructValue(object)) => Value::Object(struct_to_json(object)),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_to_json).collect()),
    }
}

/// The JSON type name used in "must be …" descriptions.
fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The path of `key` inside the object at `path`: `.key` for a name a path can spell, else the
/// quoted form maps use (`policy.base["sunk.coreweave.com/x"]`), so that a key holding a dot or a
/// bracket cannot pass for a nested field.
fn member_path(path: &str, key: &str) -> String {
    let mut chars = key.chars();
    let is_name = chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if is_name { format!("{path}.{key}") } else { format!("{path}[{}]", quoted(key)) }
}

#[derive(Default)]
struct BaseParser {
    violations: Vec<FieldViolation>,
}

impl BaseParser {
    fn report(&mut self, path: impl Into<String>, description: impl Into<String>) {
        self.violations.push(FieldViolation::new(path, description));
    }

    fn wrong_type(&mut self, path: &str, expected: &str, found: &Value) {
        self.report(path, format!("must be {expected}, not {}", json_type_name(found)));
    }

    /// Reports every key of `object` outside `rules.allowed`.
    fn check_keys(&mut self, object: &Map<String, Value>, rules: &KeyRules, path: &str) {
        for key in object.keys() {
            if rules.allowed.contains(&key.as_str()) {
                continue;
            }
            let description = if rules.managed_by_platform.contains(&key.as_str()) {
                MANAGED_BY_PLATFORM
            } else {
                NOT_ALLOWED_IN_BASE
            };
            self.report(member_path(path, key), description);
        }
    }

    fn object<'v>(&mut self, value: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match value {
            Value::Object(object) => Some(object),
            other => {
                self.wrong_type(path, "an object", other);
                None
            }
        }
    }

    fn list<'v>(&mut self, value: &'v Value, path: &str) -> &'v [Value] {
        match value {
            Value::Array(items) => items,
            other => {
                self.wrong_type(path, "a list", other);
                &[]
            }
        }
    }

    fn string<'v>(&mut self, value: &'v Value, path: &str) -> Option<&'v str> {
        match value {
            Value::String(text) => Some(text),
            other => {
                self.wrong_type(path, "a string", other);
                None
            }
        }
    }

    fn boolean(&mut self, value: &Value, path: &str) {
        if !value.is_boolean() {
            self.wrong_type(path, "a boolean", value);
        }
    }

    /// A string that must be one of `choices`.
    fn one_of(&mut self, value: &Value, choices: &[&str], path: &str) -> Option<String> {
        let text = self.string(value, path)?;
        if choices.contains(&text) {
            Some(text.to_owned())
        } else {
            let listed = choices.iter().map(|choice| format!("{choice:?}")).collect::<Vec<_>>().join(", ");
            self.report(path, format!("{text:?} must be one of {listed}"));
            None
        }
    }

    /// An object of strings whose keys must be qualified names and, for label-like maps, whose
    /// values must be label values.
    fn string_map(&mut self, value: &Value, path: &str, values_are_labels: bool) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        let Some(object) = self.object(value, path) else { return map };
        for (key, entry) in object {
            let entry_path = format!("{path}[{}]", quoted(key));
            let Some(text) = self.string(entry, &entry_path) else { continue };
            let problem = qualified_name_problem(key)
                .or_else(|| if values_are_labels { label_value_problem(text) } else { None });
            match problem {
                Some(problem) => self.report(entry_path, problem),
                None => {
                    map.insert(key.clone(), text.to_owned());
                }
            }
        }
        map
    }

    /// The object entries of a list, each with its path; non-object entries are reported.
    fn objects<'v>(&mut self, value: &'v Value, path: &str) -> Vec<(String, &'v Map<String, Value>)> {
        let mut entries = Vec::new();
        for (index, item) in self.list(value, path).iter().enumerate() {
            let item_path = format!("{path}[{index}]");
            if let Some(object) = self.object(item, &item_path) {
                entries.push((item_path, object));
            }
        }
        entries
    }

    /// Objects that must carry a non-empty string `field` (image pull secrets, volumes).
    fn named_objects(&mut self, value: &Value, path: &str, field: &str) {
        for (item_path, object) in self.objects(value, path) {
            self.required_string(object, field, &item_path);
        }
    }

    fn required_string<'v>(&mut self, object: &'v Map<String, Value>, field: &str, path: &str) -> Option<&'v str> {
        let field_path = format!("{path}.{field}");
        match object.get(field) {
            None => {
                self.report(field_path, format!("{field} is required"));
                None
            }
            Some(value) => match self.string(value, &field_path)? {
                "" => {
                    self.report(field_path, format!("{field} must not be empty"));
                    None
                }
                text => Some(text),
            },
        }
    }

    fn parse_root(&mut self, root: &Map<String, Value>, template: &mut BaseTemplate) {
        self.check_keys(root, &BASE_SCHEMA.top_level, "policy.base");
        if let Some(metadata) = root.get("metadata") {
            self.parse_metadata(metadata, template);
        }
        if let Some(spec) = root.get("spec") {
            self.parse_spec(spec, template);
        }
    }

    fn parse_metadata(&mut self, value: &Value, template: &mut BaseTemplate) {
        let path = "policy.base.metadata";
        let Some(metadata) = self.object(value, path) else { return };
        self.check_keys(metadata, &BASE_SCHEMA.metadata, path);
        if let Some(labels) = metadata.get("labels") {
            template.labels = self.string_map(labels, &format!("{path}.labels"), true);
        }
        if let Some(annotations) = metadata.get("annotations") {
            template.annotations = self.string_map(annotations, &format!("{path}.annotations"), false);
        }
    }

    fn parse_spec(&mut self, value: &Value, template: &mut BaseTemplate) {
        let path = "policy.base.spec";
        let Some(spec) = self.object(value, path) else { return };
        self.check_keys(spec, &BASE_SCHEMA.spec, path);
        for (key, value) in spec {
            if !BASE_SCHEMA.spec.allowed.contains(&key.as_str()) {
                continue;
            }
            let key_path = format!("{path}.{key}");
            match key.as_str() {
                "schedulerName" => template.scheduler_name = self.string(value, &key_path).map(str::to_owned),
                "priorityClassName" => template.priority_class_name = self.string(value, &key_path).map(str::to_owned),
                "nodeSelector" => template.node_selector = self.string_map(value, &key_path, true),
                "tolerations" => template.tolerations = self.parse_tolerations(value, &key_path),
                "containers" => template.containers = self.parse_containers(value, &key_path),
                "affinity" => template.required_node_affinity = self.parse_affinity(value, &key_path),
                "serviceAccountName" => {
                    self.string(value, &key_path);
                }
                "imagePullSecrets" => self.named_objects(value, &key_path, "name"),
                "volumes" => self.named_objects(value, &key_path, "name"),
                "topologySpreadConstraints" => {
                    self.objects(value, &key_path);
                }
                "dnsPolicy" => {
                    self.one_of(value, DNS_POLICIES, &key_path);
                }
                "dnsConfig" => {
                    self.object(value, &key_path);
                }
                "enableServiceLinks" => self.boolean(value, &key_path),
                // A key added to the allowlist without a type check is carried verbatim.
                _ => {}
            }
            if !TYPED_SPEC_KEYS.contains(&key.as_str()) {
                template.extra_pod_spec.insert(key.clone(), value.clone());
            }
        }
    }

    /// Tolerations, with the Kubernetes rules that matter for matching taints: operator `Exists`
    /// takes no value, an empty key needs `Exists`, and `tolerationSeconds` needs `NoExecute`.
    fn parse_tolerations(&mut self, value: &Value, path: &str) -> Vec<Toleration> {
        let mut tolerations = Vec::new();
        for (item_path, object) in self.objects(value, path) {
            self.check_keys(object, &BASE_SCHEMA.toleration, &item_path);
            let mut toleration = Toleration { operator: "Equal".to_owned(), ..Toleration::default() };
            let mut valid = true;
            for (field, target) in [("key", &mut toleration.key), ("value", &mut toleration.value)] {
                if let Some(value) = object.get(field) {
                    match self.string(value, &format!("{item_path}.{field}")) {
                        Some(text) => *target = text.to_owned(),
                        None => valid = false,
                    }
                }
            }
            if let Some(operator) = object.get("operator") {
                match self.one_of(operator, TOLERATION_OPERATORS, &format!("{item_path}.operator")) {
                    Some(operator) => toleration.operator = operator,
                    None => valid = false,
                }
            }
            if let Some(effect) = object.get("effect") {
                match self.one_of(effect, TOLERATION_EFFECTS, &format!("{item_path}.effect")) {
                    Some(effect) => toleration.effect = effect,
                    None => valid = false,
                }
            }
            if let Some(seconds) = object.get("tolerationSeconds") {
                let seconds_path = format!("{item_path}.tolerationSeconds");
                if !seconds.is_i64() {
                    self.wrong_type(&seconds_path, "an integer", seconds);
                    valid = false;
                } else if toleration.effect != "NoExecute" {
                    self.report(seconds_path, "tolerationSeconds needs effect NoExecute");
                    valid = false;
                }
            }
            if toleration.operator == "Exists" && !toleration.value.is_empty() {
                self.report(format!("{item_path}.value"), "value must be empty when operator is Exists");
                valid = false;
            }
            if toleration.key.is_empty() && toleration.operator != "Exists" {
                self.report(format!("{item_path}.operator"), "an empty key needs operator Exists");
                valid = false;
            }
            if valid {
                tolerations.push(toleration);
            }
        }
        tolerations
    }

    /// Container attachments: matched to sandbox containers by `name`, or applied to all when
    /// unnamed. Two entries with the same name would make the merge order-dependent.
    fn parse_containers(&mut self, value: &Value, path: &str) -> Vec<BaseContainer> {
        let mut containers: Vec<BaseContainer> = Vec::new();
        for (item_path, object) in self.objects(value, path) {
            self.check_keys(object, &BASE_SCHEMA.container, &item_path);
            let mut container = BaseContainer::default();
            if let Some(name) = object.get("name") {
                let name_path = format!("{item_path}.name");
                if let Some(name) = self.string(name, &name_path).filter(|name| !name.is_empty()) {
                    if containers.iter().any(|seen| seen.name.as_deref() == Some(name)) {
                        self.report(name_path, format!("duplicate container name {name:?}"));
                    }
                    container.name = Some(name.to_owned());
                }
            }
            if let Some(env) = object.get("env") {
                container.env = self.parse_env(env, &format!("{item_path}.env"));
            }
            if let Some(mounts) = object.get("volumeMounts") {
                let mounts_path = format!("{item_path}.volumeMounts");
                for (mount_path, mount) in self.objects(mounts, &mounts_path) {
                    self.required_string(mount, "name", &mount_path);
                    self.required_string(mount, "mountPath", &mount_path);
                }
            }
            containers.push(container);
        }
        containers
    }

    /// `env[]` in Kubernetes form; only literal `value`s, since the resolved environment is a
    /// plain string map.
    fn parse_env(&mut self, value: &Value, path: &str) -> Vec<(String, String)> {
        let mut env = Vec::new();
        for (item_path, object) in self.objects(value, path) {
            self.check_keys(object, &BASE_SCHEMA.env_var, &item_path);
            let Some(name) = self.required_string(object, "name", &item_path) else { continue };
            if name.contains('=') {
                self.report(format!("{item_path}.name"), format!("{name:?} must not contain '='"));
                continue;
            }
            let text = match object.get("value") {
                None => Some(""),
                Some(value) => self.string(value, &format!("{item_path}.value")),
            };
            if let Some(text) = text {
                env.push((name.to_owned(), text.to_owned()));
            }
        }
        env
    }

    /// Extracts `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` as label → allowed
    /// values per term. Only operator `In` fits that shape; the other operators and `matchFields`
    /// are refused rather than dropped, because dropping a required term would let the scheduler
    /// place Pods where the administrator said they must not go.
    fn parse_affinity(&mut self, value: &Value, path: &str) -> Vec<BTreeMap<String, Vec<String>>> {
        let mut terms = Vec::new();
        let Some(affinity) = self.object(value, path) else { return terms };
        let Some(node_affinity) = affinity.get("nodeAffinity") else { return terms };
        let node_path = format!("{path}.nodeAffinity");
        let Some(node_affinity) = self.object(node_affinity, &node_path) else { return terms };
        let Some(required) = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") else {
            return terms;
        };
        let required_path = format!("{node_path}.requiredDuringSchedulingIgnoredDuringExecution");
        let Some(required) = self.object(required, &required_path) else { return terms };
        let terms_path = format!("{required_path}.nodeSelectorTerms");
        let Some(term_list) = required.get("nodeSelectorTerms") else {
            self.report(terms_path, "nodeSelectorTerms is required");
            return terms;
        };
        for (term_path, term) in self.objects(term_list, &terms_path) {
            if term.contains_key("matchFields") {
                self.report(
                    format!("{term_path}.matchFields"),
                    "matchFields is not emulated; select nodes by label with matchExpressions",
                );
            }
            let expressions =
                term.get("matchExpressions").map(|list| self.objects(list, &format!("{term_path}.matchExpressions")));
            let expressions = expressions.unwrap_or_default();
            if expressions.is_empty() {
                self.report(term_path, "a node selector term needs at least one matchExpression");
                continue;
            }
            let mut allowed_values: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (expression_path, expression) in expressions {
                let key = self.required_string(expression, "key", &expression_path).map(str::to_owned);
                let operator_path = format!("{expression_path}.operator");
                let operator_is_in = match expression.get("operator") {
                    None => {
                        self.report(operator_path, "operator is required");
                        false
                    }
                    Some(operator) => match self.string(operator, &operator_path) {
                        Some("In") => true,
                        Some(other) => {
                            self.report(
                                operator_path,
                                format!("operator {other:?} is not emulated; required node affinity supports only In"),
                            );
                            false
                        }
                        None => false,
                    },
                };
                let values_path = format!("{expression_path}.values");
                let mut values = Vec::new();
                for (index, item) in
                    expression.get("values").map_or(&[][..], |list| self.list(list, &values_path)).iter().enumerate()
                {
                    if let Some(text) = self.string(item, &format!("{values_path}[{index}]")) {
                        values.push(text.to_owned());
                    }
                }
                if operator_is_in && values.is_empty() {
                    self.report(values_path, "operator In needs at least one value");
                }
                if let (Some(key), true) = (key, operator_is_in) {
                    // Expressions of one term are ANDed: a repeated key narrows to the common values.
                    allowed_values
                        .entry(key)
                        .and_modify(|existing| existing.retain(|value| values.contains(value)))
                        .or_insert(values);
                }
            }
            terms.push(allowed_values);
        }
        terms
    }
}
