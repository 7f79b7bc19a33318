//! Read-only queries over the world, as the emulator's own API and a Kubernetes facade ask them:
//! Kubernetes label and field selectors over Pods, Nodes, Events, ConfigMaps and Namespaces, and
//! Slurm job listings that keep the queue (`squeue`) and the accounting database (`sacct`) apart.
//!
//! Every listing runs in a [`Scope`]: the cluster operator's, which sees everything, or one
//! organization's, which sees only what is its own (the rules are in [`Scope`]).
//!
//! Nothing here changes the world; every listing borrows from it.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{SimError, SimResult};
use crate::k8s::{ConfigMap, Event, LabelMap, Namespace, Node, Pod, PodOwner, RuntimeClass};
use crate::policy::k8s_names::{label_value_problem, qualified_name_problem};
use crate::sandbox::SandboxInfo;
use crate::slurm::{Job, JobBaseState, JobId, JobKind, PreemptMode, SlurmNode};
use crate::time::SimTime;
use crate::world::World;

// ------------------------------------------------------------------------------------------------
// Label selectors
// ------------------------------------------------------------------------------------------------

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value`, `key notin (a,b)`: also true when the label is absent.
    NotIn(String, Vec<String>),
    /// `key>n`.
    GreaterThan(String, i64),
    /// `key<n`.
    LessThan(String, i64),
}

/// A Kubernetes label selector: requirements joined by commas, all of which must hold. The empty
/// selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Comma,
    Open,
    Close,
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    Greater,
    Less,
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            ',' => {
                chars.next();
                tokens.push(Token::Comma);
            }
            '(' => {
                chars.next();
                tokens.push(Token::Open);
            }
            ')' => {
                chars.next();
                tokens.push(Token::Close);
            }
            '>' => {
                chars.next();
                tokens.push(Token::Greater);
            }
            '<' => {
                chars.next();
                tokens.push(Token::Less);
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::DoubleEquals);
                } else {
                    tokens.push(Token::Equals);
                }
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::NotEquals);
                } else {
                    tokens.push(Token::Bang);
                }
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || ",()=!<>".contains(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

/// Why a label or field selector is refused; the messages are the API server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector that does not parse, or names an invalid key or value; the message says
    /// what is wrong and where.
    #[error("{0}")]
    Label(String),
    /// A field selector part that is not `field=value`, `field==value` or `field!=value`.
    #[error("invalid selector: {part:?}: expected field=value, field==value or field!=value")]
    FieldSyntax {
        /// The part, as written.
        part: String,
    },
    /// A field the resource cannot be selected by.
    #[error("field label not supported: {field}")]
    UnsupportedField {
        /// The field named.
        field: String,
    },
}

impl LabelSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`,
    /// joined by commas. Errors say what is wrong and where.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        LabelSelector::parse_text(text).map_err(SelectorError::Label)
    }

    fn parse_text(text: &str) -> Result<LabelSelector, String> {
        let tokens = tokenize(text)?;
        let mut requirements = Vec::new();
        let mut position = 0;
        let word = |position: &mut usize, what: &str| -> Result<String, String> {
            match tokens.get(*position) {
                Some(Token::Word(word)) => {
                    *position += 1;
                    Ok(word.clone())
                }
                other => Err(format!("expected {what}, found {}", describe(other))),
            }
        };
        while position < tokens.len() {
            let requirement = if tokens[position] == Token::Bang {
                position += 1;
                let key = word(&mut position, "a label key after '!'")?;
                check_label_key(&key)?;
                LabelRequirement::DoesNotExist(key)
            } else {
                let key = word(&mut position, "a label key")?;
                check_label_key(&key)?;
                match tokens.get(position) {
                    None | Some(Token::Comma) => LabelRequirement::Exists(key),
                    Some(Token::Equals | Token::DoubleEquals | Token::NotEquals) => {
                        let negated = tokens[position] == Token::NotEquals;
                        position += 1;
                        // `k=` selects the empty value.
                        let value = match tokens.get(position) {
                            Some(Token::Word(value)) => {
                                position += 1;
                                value.clone()
                            }
                            None | Some(Token::Comma) => String::new(),
                            other => return Err(format!("expected a value for {key:?}, found {}", describe(other))),
                        };
                        check_label_value(&key, &value)?;
                        if negated {
                            LabelRequirement::NotIn(key, vec![value])
                        } else {
                            LabelRequirement::In(key, vec![value])
                        }
                    }
                    Some(Token::Greater | Token::Less) => {
                        let greater = tokens[position] == Token::Greater;
                        position += 1;
                        let value = word(&mut position, "an integer")?;
                        let number: i64 =
                            value.parse().map_err(|_| format!("{value:?} is not an integer (for {key:?})"))?;
                        // Kubernetes checks the bound as a label value too, so `replicas>-1` is refused.
                        check_label_value(&key, &value)?;
                        if greater {
                            LabelRequirement::GreaterThan(key, number)
                        } else {
                            LabelRequirement::LessThan(key, number)
                        }
                    }
                    Some(Token::Word(operator)) if operator == "in" || operator == "notin" => {
                        let negated = operator == "notin";
                        position += 1;
                        if tokens.get(position) != Some(&Token::Open) {
                            return Err(format!(
                                "expected '(' after {operator:?}, found {}",
                                describe(tokens.get(position))
                            ));
                        }
                        position += 1;
                        let values = set_values(&tokens, &mut position, &key)?;
                        for value in &values {
                            check_label_value(&key, value)?;
                        }
                        if negated { LabelRequirement::NotIn(key, values) } else { LabelRequirement::In(key, values) }
                    }
                    other => return Err(format!("unexpected {} after {key:?}", describe(other))),
                }
            };
            requirements.push(requirement);
            match tokens.get(position) {
                None => break,
                Some(Token::Comma) if position + 1 < tokens.len() => position += 1,
                other => return Err(format!("expected ',' between requirements, found {}", describe(other))),
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether labels satisfy every requirement.
    pub fn matches(&self, labels: &impl LabelMap) -> bool {
        self.requirements.iter().all(|requirement| match requirement {
            LabelRequirement::Exists(key) => labels.label(key).is_some(),
            LabelRequirement::DoesNotExist(key) => labels.label(key).is_none(),
            LabelRequirement::In(key, values) => labels.label(key).is_some_and(|value| values.contains(value)),
            LabelRequirement::NotIn(key, values) => labels.label(key).is_none_or(|value| !values.contains(value)),
            LabelRequirement::GreaterThan(key, number) => {
                labels.label(key).and_then(|value| value.parse::<i64>().ok()).is_some_and(|value| value > *number)
            }
            LabelRequirement::LessThan(key, number) => {
                labels.label(key).and_then(|value| value.parse::<i64>().ok()).is_some_and(|value| value < *number)
            }
        })
    }
}

/// The API server refuses a selector whose key or value it could never store on an object; so
/// does the emulator, instead of answering an empty list.
fn check_label_key(key: &str) -> Result<(), String> {
    match qualified_name_problem(key) {
        Some(problem) => Err(format!("invalid label key: {problem}")),
        None => Ok(()),
    }
}

fn check_label_value(key: &str, value: &str) -> Result<(), String> {
    match label_value_problem(value) {
        Some(problem) => Err(format!("invalid value for {key:?}: {problem}")),
        None => Ok(()),
    }
}

/// The values of `key in (…)` after the `(`, up to and including the `)`. As in Kubernetes'
/// `parseIdentifiersList`, an empty element is the empty value: `()`, `(,a)`, `(a,)`, `(a,,b)`.
fn set_values(tokens: &[Token], position: &mut usize, key: &str) -> Result<Vec<String>, String> {
    let mut values = Vec::new();
    if tokens.get(*position) == Some(&Token::Close) {
        *position += 1;
        values.push(String::new());
        return Ok(values);
    }
    loop {
        match tokens.get(*position) {
            Some(Token::Word(value)) => {
                values.push(value.clone());
                *position += 1;
                match tokens.get(*position) {
                    Some(Token::Comma) => {}
                    Some(Token::Close) => {
                        *position += 1;
                        return Ok(values);
                    }
                    other => return Err(format!("expected ',' or ')', found {}", describe(other))),
                }
            }
            Some(Token::Comma) => {
                if values.is_empty() {
                    values.push(String::new());
                }
                *position += 1;
                match tokens.get(*position) {
                    Some(Token::Close) => {
                        values.push(String::new());
                        *position += 1;
                        return Ok(values);
                    }
                    Some(Token::Comma) => values.push(String::new()),
                    _ => {}
                }
            }
            other => return Err(format!("expected a value in the set of {key:?}, found {}", describe(other))),
        }
    }
}

fn describe(token: Option<&Token>) -> String {
    match token {
        None => "the end".to_owned(),
        Some(Token::Word(word)) => format!("{word:?}"),
        Some(Token::Comma) => "','".to_owned(),
        Some(Token::Open) => "'('".to_owned(),
        Some(Token::Close) => "')'".to_owned(),
        Some(Token::Equals) => "'='".to_owned(),
        Some(Token::DoubleEquals) => "'=='".to_owned(),
        Some(Token::NotEquals) => "'!='".to_owned(),
        Some(Token::Bang) => "'!'".to_owned(),
        Some(Token::Greater) => "'>'".to_owned(),
        Some(Token::Less) => "'<'".to_owned(),
    }
}

// ------------------------------------------------------------------------------------------------
// Field selectors
// ------------------------------------------------------------------------------------------------

/// A Kubernetes field selector: `field=value`, `field==value` or `field!=value`, joined by commas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    /// (field, value, equal).
    requirements: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parses a selector whose fields must be among `supported`; others are refused as the API
    /// server refuses them (`field label not supported: …`).
    pub fn parse(text: &str, supported: &[&str]) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            let (field, value, equal) = if let Some((field, value)) = part.split_once("!=") {
                (field, value, false)
            } else if let Some((field, value)) = part.split_once("==") {
                (field, value, true)
            } else if let Some((field, value)) = part.split_once('=') {
                (field, value, true)
            } else {
                return Err(SelectorError::FieldSyntax { part: part.to_owned() });
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(SelectorError::UnsupportedField { field: field.to_owned() });
            }
            requirements.push((field.to_owned(), value.trim().to_owned(), equal));
        }
        Ok(FieldSelector { requirements })
    }

    /// Adds `field=value` (for typed filters that sit next to a selector).
    pub fn and_equal(mut self, field: &str, value: &str) -> FieldSelector {
        self.requirements.push((field.to_owned(), value.to_owned(), true));
        self
    }

    /// Whether an object whose fields `value_of` reads satisfies every requirement.
    pub fn matches<'a>(&self, value_of: impl Fn(&str) -> &'a str) -> bool {
        self.requirements.iter().all(|(field, value, equal)| (value_of(field) == value) == *equal)
    }
}

/// Fields a Pod field selector may name.
pub const POD_FIELDS: &[&str] =
    &["metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase"];
/// Fields a Node field selector may name.
pub const NODE_FIELDS: &[&str] = &["metadata.name"];
/// Fields an Event field selector may name.
pub const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "type",
    "source",
    "metadata.name",
    "metadata.namespace",
];
/// Fields a ConfigMap field selector may name.
pub const CONFIG_MAP_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
/// Fields a RuntimeClass field selector may name.
pub const RUNTIME_CLASS_FIELDS: &[&str] = &["metadata.name"];
/// Fields a Namespace field selector may name.
pub const NAMESPACE_FIELDS: &[&str] = &["metadata.name", "status.phase"];

// ------------------------------------------------------------------------------------------------
// Scopes
// ------------------------------------------------------------------------------------------------

/// Whose objects a caller sees and may act on. The emulator is one cluster shared by
/// organizations (the CoreWeave Sandbox API keeps them apart), so an organization's view of the
/// cluster is its own part of it:
///
/// - Pods of its sandboxes (not slurmd, the scheduler or other organizations' Pods), the Events
///   of those Pods, and the Namespaces they live in;
/// - Slurm jobs submitted for it: the placeholder jobs of its sandboxes (while the sandbox is on
///   record or after it was forgotten) and the batch jobs it submitted;
/// - Nodes, Slurm nodes and partitions: cluster information that Slurm shows every user;
/// - no ConfigMaps: they carry the operator's configuration (the values), not the organization's.
///
/// Anything outside the scope does not exist for the caller: reads leave it out, and commands
/// naming it answer NOT_FOUND exactly as for an object that never existed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scope {
    /// The cluster operator: every organization's objects and the cluster's own.
    #[default]
    Cluster,
    /// One organization.
    Organization(String),
}

impl Scope {
    /// Whether an object of `org` (`None`: the cluster's own) is inside the scope.
    pub fn sees(&self, org: Option<&str>) -> bool {
        match self {
            Scope::Cluster => true,
            Scope::Organization(mine) => org == Some(mine.as_str()),
        }
    }
}

/// Which objects a Kubernetes listing selects.
#[derive(Debug, Clone, Default)]
pub struct ObjectQuery {
    /// Whose objects.
    pub scope: Scope,
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// Labels.
    pub labels: LabelSelector,
    /// Fields.
    pub fields: FieldSelector,
}

impl ObjectQuery {
    /// Parses the selectors of a listing in `scope`; errors name the offending request field.
    pub fn parse(
        scope: Scope,
        namespace: &str,
        label_selector: &str,
        field_selector: &str,
        fields: &[&str],
    ) -> SimResult<ObjectQuery> {
        Ok(ObjectQuery {
            scope,
            namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
            labels: LabelSelector::parse(label_selector)
                .map_err(|error| SimError::invalid_field("label_selector", error.to_string()))?,
            fields: FieldSelector::parse(field_selector, fields)
                .map_err(|error| SimError::invalid_field("field_selector", error.to_string()))?,
        })
    }

    fn namespace_matches(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|wanted| wanted == namespace)
    }
}

// ------------------------------------------------------------------------------------------------
// Slurm job listings
// ------------------------------------------------------------------------------------------------

/// Where a job row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSource {
    /// slurmctld's queue (`squeue`): pending, running, completing.
    Queue,
    /// The accounting database (`sacct`): every job, base state only.
    Accounting,
}

/// Which jobs a listing selects. Empty filters match everything; filters combine with AND.
#[derive(Debug, Clone)]
pub struct JobQuery {
    /// Whose jobs.
    pub scope: Scope,
    /// Include queue rows.
    pub queue: bool,
    /// Include accounting rows.
    pub accounting: bool,
    /// Only these ids.
    pub job_ids: Vec<JobId>,
    /// Only these users, by name or numeric uid.
    pub users: Vec<String>,
    /// Only these base states: the current state without a window, else a state held during the
    /// window (see [`JobQuery::selects`]).
    pub states: Vec<JobBaseState>,
    /// Only these partitions.
    pub partitions: Vec<String>,
    /// Only these accounts.
    pub accounts: Vec<String>,
    /// Only these job names.
    pub names: Vec<String>,
    /// sacct's `-S`: the window's start (inclusive); `None` is no lower bound.
    pub window_start: Option<SimTime>,
    /// sacct's `-E`: the window's end (exclusive); `None` is no upper bound.
    pub window_end: Option<SimTime>,
}

impl Default for JobQuery {
    fn default() -> Self {
        JobQuery {
            scope: Scope::Cluster,
            queue: true,
            accounting: true,
            job_ids: Vec::new(),
            users: Vec::new(),
            states: Vec::new(),
            partitions: Vec::new(),
            accounts: Vec::new(),
            names: Vec::new(),
            window_start: None,
            window_end: None,
        }
    }
}

impl JobQuery {
    fn selects(&self, job: &Job) -> bool {
        let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|wanted| wanted == value);
        (self.job_ids.is_empty() || self.job_ids.contains(&job.id))
            && (self.users.is_empty()
                || self.users.iter().any(|user| *user == *job.user || user.parse::<u32>() == Ok(job.uid)))
            && any(&self.partitions, &job.partition)
            && any(&self.accounts, &job.account)
            && any(&self.names, &job.name)
            && self.in_window(job)
    }

    /// The accounting database's time rules (slurmdbd's `_state_time_string`): without states,
    /// a job eligible before the window's end and not ended before its start; with states, a job
    /// in one of them during the window: PENDING and RUNNING by its times alone (a job that ran
    /// during the window is listed with its present state), the final states by their end time.
    /// Without a window, states are the current ones.
    fn in_window(&self, job: &Job) -> bool {
        let start = self.window_start.map(SimTime::secs);
        let end = self.window_end.map(SimTime::secs);
        if start.is_none() && end.is_none() {
            return self.states.is_empty() || self.states.contains(&job.state);
        }
        let end = end.unwrap_or(i64::MAX);
        let eligible = job.submit.secs();
        let started = job.start.map(SimTime::secs);
        let ended = job.end.map(SimTime::secs);
        if self.states.is_empty() {
            return eligible < end && ended.is_none_or(|ended| start.is_none_or(|start| ended >= start));
        }
        let between = |value: i64, low: i64, high: i64| low <= value && value <= high;
        self.states.iter().any(|state| match state {
            JobBaseState::Pending => match start {
                Some(start) => {
                    let started_or_zero = started.unwrap_or(0);
                    between(start, eligible, started_or_zero)
                        || between(eligible, start, end)
                        || (started.is_none() && ended.is_some_and(|ended| between(start, eligible, ended)))
                        // Still pending: it has been since it became eligible, so through any
                        // window that ends after that (slurmdbd's `time_start=0` case).
                        || (started.is_none() && ended.is_none() && eligible <= end)
                }
                None => eligible < end,
            },
            JobBaseState::Running => started.is_some_and(|started| match start {
                Some(start) => {
                    (ended.is_none() && job.state == JobBaseState::Running)
                        || ended.is_some_and(|ended| between(start, started, ended))
                        || between(started, start, end)
                }
                None => started < end,
            }),
            final_state => {
                job.state == *final_state
                    && ended.is_some_and(|ended| match start {
                        Some(start) => between(ended, start, end),
                        None => ended <= end,
                    })
            }
        })
    }
}

/// The Pod a placeholder job stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceholderPod<'a> {
    /// Pod uid.
    pub uid: &'a str,
    /// Namespace and name, when the Pod or its sandbox is still on record.
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: Option<&'a str>,
    /// The sandbox, for sandbox Pods.
    pub sandbox_id: Option<&'a str>,
    /// Whether the Pod object still exists.
    pub exists: bool,
}

/// The hosts jobs are submitted from (`AllocNode`), read once for a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitHosts {
    placeholder: String,
    batch: String,
}

impl SubmitHosts {
    /// `job`'s submit host: the SUNK scheduler's Pod for a placeholder, the login node for a batch job.
    pub fn of(&self, job: &Job) -> &str {
        match job.kind {
            JobKind::Placeholder { .. } => &self.placeholder,
            JobKind::Batch { .. } => &self.batch,
        }
    }
}

/// One row of a job listing, borrowed from the world.
#[derive(Debug, Clone)]
pub struct JobRow<'a> {
    /// Where it comes from.
    pub source: JobSource,
    /// The job (accounting rows read the same record with the COMPLETING flag dropped).
    pub job: &'a Job,
    /// For placeholders, the Pod.
    pub pod: Option<PlaceholderPod<'a>>,
}

impl JobRow<'_> {
    /// The COMPLETING flag as this source shows it: accounting never stores it.
    pub fn completing(&self) -> bool {
        self.source == JobSource::Queue && self.job.completing
    }
}

impl World {
    /// The organization a Pod belongs to: its sandbox's. slurmd, the scheduler and Pods made
    /// otherwise are the cluster's own (`None`).
    pub fn pod_organization(&self, pod: &Pod) -> Option<&str> {
        match &pod.owner {
            PodOwner::Sandbox(id) => self.sandboxes.organization_of(id),
            _ => None,
        }
    }

    /// A Pod by namespace and name, if it is inside `scope`.
    pub fn scoped_pod_by_name(&self, scope: &Scope, namespace: &str, name: &str) -> Option<&Pod> {
        self.cluster.pod_by_name(namespace, name).filter(|pod| scope.sees(self.pod_organization(pod)))
    }

    /// The organization a job was submitted for: a placeholder's sandbox's, a batch job's
    /// submitter's; `None` for the cluster's own.
    fn job_organization<'w>(&'w self, job: &Job, sandboxes: &HashMap<&'w str, &'w SandboxInfo>) -> Option<&'w str> {
        if let JobKind::Placeholder { pod_uid } = &job.kind
            && let Some(info) = sandboxes.get(pod_uid.as_str())
        {
            return Some(&info.owner.org);
        }
        self.job_orgs.get(&job.id).map(|org| &**org)
    }

    /// Whether job `id` is on record and inside `scope`.
    pub fn job_in_scope(&self, scope: &Scope, id: JobId) -> bool {
        let Some(job) = self.slurm.job_or_record(id) else { return false };
        match scope {
            Scope::Cluster => true,
            Scope::Organization(_) => scope.sees(self.job_organization(job, &self.sandboxes.by_pod_uid())),
        }
    }

    /// The uids of the Pods an organization's sandboxes on record have (had), or `None` for the
    /// cluster scope (everything).
    fn scope_pod_uids(&self, scope: &Scope) -> Option<HashSet<&str>> {
        let Scope::Organization(org) = scope else { return None };
        Some(self.sandboxes.of_organization(org).map(|sandbox| sandbox.pod_uid.as_str()).collect())
    }

    /// Pods by namespace and name.
    pub fn query_pods(&self, query: &ObjectQuery) -> Vec<&Pod> {
        self.cluster
            .pods_iter()
            .filter(|pod| query.scope == Scope::Cluster || query.scope.sees(self.pod_organization(pod)))
            .filter(|pod| query.namespace_matches(&pod.namespace) && query.labels.matches(&pod.labels))
            .filter(|pod| {
                query.fields.matches(|field| match field {
                    "metadata.name" => &pod.name,
                    "metadata.namespace" => &pod.namespace,
                    "spec.nodeName" => pod.node_name.as_deref().unwrap_or(""),
                    "spec.schedulerName" => &pod.scheduler_name,
                    "status.phase" => pod.shown_phase().as_str(),
                    _ => "",
                })
            })
            .collect()
    }

    /// Nodes by name (the namespace of the query is ignored: Nodes have none).
    pub fn query_nodes(&self, query: &ObjectQuery) -> Vec<&Node> {
        self.cluster
            .nodes
            .values()
            .filter(|node| query.labels.matches(&node.labels))
            .filter(|node| query.fields.matches(|field| if field == "metadata.name" { &node.name } else { "" }))
            .collect()
    }

    /// RuntimeClasses: cluster-scoped and unlabelled, seen by every caller of the facade (as
    /// Nodes are).
    pub fn query_runtime_classes(&self, query: &ObjectQuery) -> Vec<&RuntimeClass> {
        let no_labels: BTreeMap<String, String> = BTreeMap::new();
        self.cluster
            .runtime_classes
            .values()
            .filter(|_| query.labels.matches(&no_labels))
            .filter(|class| query.fields.matches(|field| if field == "metadata.name" { &class.name } else { "" }))
            .collect()
    }

    /// Events, oldest first; an organization sees those of its Pods.
    pub fn query_events(&self, query: &ObjectQuery) -> Vec<&Event> {
        let pods = self.scope_pod_uids(&query.scope);
        self.cluster
            .events
            .iter()
            .filter(|event| {
                pods.as_ref()
                    .is_none_or(|pods| event.involved.kind == "Pod" && pods.contains(event.involved.uid.as_str()))
            })
            .filter(|event| query.namespace_matches(event.namespace()))
            .filter(|event| {
                let name = event.name();
                query.fields.matches(|field| match field {
                    "involvedObject.kind" => event.involved.kind,
                    "involvedObject.name" => &event.involved.name,
                    "involvedObject.namespace" => &event.involved.namespace,
                    "involvedObject.uid" => &event.involved.uid,
                    "reason" => &event.reason,
                    "type" => event.event_type.as_str(),
                    "source" => event.source,
                    "metadata.name" => &name,
                    "metadata.namespace" => event.namespace(),
                    _ => "",
                })
            })
            .collect()
    }

    /// ConfigMaps by namespace and name; only the cluster scope sees them (they hold the
    /// operator's configuration).
    pub fn query_config_maps(&self, query: &ObjectQuery) -> Vec<&ConfigMap> {
        self.cluster
            .config_maps
            .values()
            .filter(|_| query.scope == Scope::Cluster)
            .filter(|map| query.namespace_matches(&map.namespace) && query.labels.matches(&map.labels))
            .filter(|map| {
                query.fields.matches(|field| match field {
                    "metadata.name" => &map.name,
                    "metadata.namespace" => &map.namespace,
                    _ => "",
                })
            })
            .collect()
    }

    /// Namespaces by name (all `Active`); an organization sees those of its sandboxes.
    pub fn query_namespaces(&self, query: &ObjectQuery) -> Vec<&Namespace> {
        let own: Option<HashSet<&str>> = match &query.scope {
            Scope::Cluster => None,
            Scope::Organization(org) => {
                Some(self.sandboxes.of_organization(org).map(|sandbox| sandbox.namespace.as_str()).collect())
            }
        };
        self.cluster
            .namespaces
            .values()
            .filter(|namespace| own.as_ref().is_none_or(|own| own.contains(namespace.name.as_str())))
            .filter(|namespace| query.labels.matches(&namespace.labels))
            .filter(|namespace| {
                query.fields.matches(|field| match field {
                    "metadata.name" => &namespace.name,
                    "status.phase" => "Active",
                    _ => "",
                })
            })
            .collect()
    }

    /// Slurm nodes in configuration order, only those named (if any) and in one of the
    /// partitions (if any).
    pub fn query_slurm_nodes(&self, names: &[String], partitions: &[String]) -> Vec<&SlurmNode> {
        self.slurm
            .nodes
            .iter()
            .filter(|node| names.is_empty() || names.contains(&node.name))
            .filter(|node| {
                partitions.is_empty() || node.partitions.iter().any(|partition| partitions.contains(partition))
            })
            .collect()
    }

    /// slurm.conf as the controller holds it (`scontrol show config`).
    pub fn slurm_controller(&self) -> SlurmController {
        let release = &self.values.sunk.release;
        let preempting: Vec<PreemptMode> = self
            .slurm
            .partitions
            .values()
            .map(|partition| partition.preempt_mode)
            .filter(|mode| *mode != PreemptMode::Off)
            .collect();
        SlurmController {
            cluster_name: release.clone(),
            host: format!("{release}-controller-0"),
            boot_time: self.slurm.nodes.iter().map(|node| node.boot_time).min().unwrap_or(self.now),
            next_job_id: self.slurm.next_job_id,
            // slurm.conf has one cluster-wide PreemptMode; partitions override it. Requeueing
            // partitions need REQUEUE there, so it wins over CANCEL.
            preempt_mode: if preempting.contains(&PreemptMode::Requeue) {
                PreemptMode::Requeue
            } else {
                preempting.first().copied().unwrap_or(PreemptMode::Off)
            },
        }
    }

    /// When the backfill scheduler expects a pending job to start (`scontrol show job`'s
    /// `StartTime` while pending): the earliest time one of its partition's nodes that could
    /// hold it has room, counting the running jobs there as ending at their time limit, a year
    /// after their start without one (Slurm's stand-in for INFINITE). `None` where Slurm has no
    /// estimate: a job not pending on Resources or Priority, or no node that could ever hold it.
    pub fn estimated_start(&self, job: &Job) -> Option<SimTime> {
        const YEAR: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
        if job.state != JobBaseState::Pending || !matches!(job.reason.as_str(), "Resources" | "Priority") {
            return None;
        }
        let partition = self.slurm.partitions.get(&*job.partition)?;
        let fits_on = |node: &SlurmNode| {
            node.drain.is_none()
                && node.cpus >= job.req_cpus
                && node.real_memory_mb >= job.req_mem_mb
                && node.gpus >= job.req_gpus
        };
        partition
            .nodes
            .iter()
            .filter_map(|name| self.slurm.node(name))
            .filter(|node| fits_on(node))
            .filter_map(|node| {
                let mut ends: Vec<(SimTime, u32, u64)> = node
                    .jobs
                    .iter()
                    .filter_map(|id| self.slurm.job(*id))
                    .map(|running| {
                        let start = running.start.unwrap_or(self.now);
                        let limit = running.time_limit_seconds.map_or(YEAR, |seconds| {
                            std::time::Duration::from_secs(u64::from(seconds.div_ceil(60)) * 60)
                        });
                        (start + limit, running.alloc_cpus, running.req_mem_mb)
                    })
                    .collect();
                ends.sort();
                let (mut free_cpus, mut free_mem) =
                    (node.free_cpus(), node.real_memory_mb.saturating_sub(node.alloc_mem_mb));
                for (end, cpus, mem) in ends {
                    free_cpus += cpus;
                    free_mem += mem;
                    if free_cpus >= job.req_cpus && free_mem >= job.req_mem_mb {
                        return Some(end.max(self.now));
                    }
                }
                None
            })
            .min()
    }

    /// The host a job was submitted from (`AllocNode`): the SUNK scheduler's Pod submits the
    /// placeholders; batch jobs come from the release's login node.
    pub fn submit_host(&self, job: &Job) -> String {
        self.submit_hosts().of(job).to_owned()
    }

    /// Both submit hosts, found once: a listing of many jobs asks [`SubmitHosts::of`] for each
    /// rather than looking for the scheduler's Pod among all Pods per job.
    pub fn submit_hosts(&self) -> SubmitHosts {
        SubmitHosts {
            placeholder: self
                .cluster
                .pods_iter()
                .find(|pod| pod.owner == PodOwner::Scheduler)
                .map(|pod| pod.name.to_string())
                .unwrap_or_else(|| format!("{}-scheduler", self.values.sunk.release)),
            batch: format!("{}-login-0", self.values.sunk.release),
        }
    }

    /// The latest placeholder job of each Pod that ever had one.
    pub fn placeholder_jobs_by_pod(&self) -> HashMap<&str, JobId> {
        let mut jobs = HashMap::new();
        for job in self.slurm.jobs_on_record() {
            if let JobKind::Placeholder { pod_uid } = &job.kind {
                jobs.insert(pod_uid.as_str(), job.id);
            }
        }
        jobs
    }

    /// Job rows by id; with both sources, a job's queue row comes first.
    pub fn query_jobs(&self, query: &JobQuery) -> Vec<JobRow<'_>> {
        let sandboxes = self.sandboxes.by_pod_uid();
        let mut rows = Vec::new();
        let in_scope = |job: &Job| match &query.scope {
            Scope::Cluster => true,
            scope => scope.sees(self.job_organization(job, &sandboxes)),
        };
        let min_job_age = i64::from(self.values.slurm_config.min_job_age);
        let now = self.now.secs();
        for job in self.slurm.jobs_on_record().filter(|job| query.selects(job) && in_scope(job)) {
            // The controller keeps a finished job for MinJobAge after its end.
            let queued = self.slurm.job(job.id).is_some()
                || job.end.is_some_and(|end| now - end.secs() < min_job_age && job.state.is_finished());
            if query.queue && queued {
                rows.push(JobRow { source: JobSource::Queue, job, pod: self.placeholder_pod(job, &sandboxes) });
            }
            if query.accounting {
                rows.push(JobRow { source: JobSource::Accounting, job, pod: self.placeholder_pod(job, &sandboxes) });
            }
        }
        rows
    }

    /// The Pod of a placeholder: the live object, else what its sandbox remembers.
    fn placeholder_pod<'w>(
        &'w self,
        job: &'w Job,
        sandboxes: &HashMap<&'w str, &'w SandboxInfo>,
    ) -> Option<PlaceholderPod<'w>> {
        let JobKind::Placeholder { pod_uid } = &job.kind else { return None };
        Some(match self.cluster.pod(pod_uid) {
            Some(pod) => PlaceholderPod {
                uid: &pod.uid,
                namespace: Some(&pod.namespace),
                name: Some(&pod.name),
                sandbox_id: match &pod.owner {
                    PodOwner::Sandbox(id) => Some(id),
                    _ => None,
                },
                exists: true,
            },
            None => match sandboxes.get(pod_uid.as_str()) {
                Some(&info) => PlaceholderPod {
                    uid: &info.pod_uid,
                    namespace: Some(&info.namespace),
                    name: Some(&info.pod_name),
                    sandbox_id: Some(&info.id),
                    exists: false,
                },
                None => PlaceholderPod { uid: pod_uid, namespace: None, name: None, sandbox_id: None, exists: false },
            },
        })
    }
}

/// What slurmctld derives from the values (`scontrol show config`); the slurm.conf parameters
/// themselves are the values' `slurmConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmController {
    /// `ClusterName`: the release name.
    pub cluster_name: String,
    /// `SlurmctldHost`: the controller Pod, `<release>-controller-0`.
    pub host: String,
    /// When it started (the world was built).
    pub boot_time: SimTime,
    /// The id the next submission gets.
    pub next_job_id: JobId,
    /// The cluster's `PreemptMode`.
    pub preempt_mode: PreemptMode,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    #[test]
    fn label_selectors_follow_kubernetes() {
        let pod = labels(&[("app", "web"), ("tier", "front"), ("replicas", "3")]);
        let matches = |text: &str| LabelSelector::parse(text).unwrap().matches(&pod);
        assert!(matches(""));
        assert!(matches("app=web"));
        assert!(matches("app==web,tier=front"));
        assert!(!matches("app=db"));
        assert!(matches("app!=db"));
        assert!(matches("missing!=x"), "!= matches an absent label");
        assert!(matches("app in (web, db)"));
        assert!(!matches("app notin (web)"));
        assert!(matches("missing notin (web)"));
        assert!(matches("app"));
        assert!(matches("!missing"));
        assert!(!matches("!app"));
        assert!(matches("replicas>2,replicas<4"));
        assert!(matches("tier in (front),app"));
        assert!(!matches("app="), "k= selects the empty value");
        for bad in ["app in web", "=x", "app=web,", "app in (a,", "a b"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn label_selectors_refuse_what_the_api_server_refuses() {
        // Each was accepted and answered with an empty list; the API server refuses it.
        for bad in ["a$b=c", "app=we$b", "Example.com/x", "!-app", "app in (web,-x)", "replicas>-1", "app!=v_"] {
            let error = LabelSelector::parse(bad).expect_err(bad);
            assert!(matches!(error, SelectorError::Label(_)), "{bad:?}: {error:?}");
            assert!(error.to_string().starts_with("invalid"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn empty_set_elements_are_the_empty_value_as_in_kubernetes() {
        // `app in ()` was refused; Kubernetes' parser reads it (and `(a,)`, `(,a)`) with the empty value.
        let empty = labels(&[("app", "")]);
        let web = labels(&[("app", "web")]);
        for text in ["app in ()", "app in (web,)", "app in (,web)", "app in (db,,web)"] {
            let selector = LabelSelector::parse(text).expect(text);
            assert!(selector.matches(&empty), "{text:?} selects the empty value");
        }
        assert!(!LabelSelector::parse("app in ()").unwrap().matches(&web));
        assert!(LabelSelector::parse("app in (db,,web)").unwrap().matches(&web));
        assert!(!LabelSelector::parse("app notin (,web)").unwrap().matches(&empty));
    }

    #[test]
    fn field_selectors_refuse_unknown_fields() {
        let selector = FieldSelector::parse("metadata.name=a,spec.nodeName!=", POD_FIELDS).unwrap();
        assert!(selector.matches(|field| if field == "metadata.name" { "a" } else { "node-1" }));
        assert!(!selector.matches(|field| if field == "metadata.name" { "a" } else { "" }));
        let error = FieldSelector::parse("spec.foo=1", POD_FIELDS).unwrap_err();
        assert_eq!(error, SelectorError::UnsupportedField { field: "spec.foo".to_owned() });
        assert_eq!(error.to_string(), "field label not supported: spec.foo");
        let error = FieldSelector::parse("metadata.name", POD_FIELDS).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid selector: \"metadata.name\": expected field=value, field==value or field!=value"
        );
    }

    /// A root batch job: submitted and started at `start`, ended at `end` (if it did).
    fn job(id: JobId, state: JobBaseState, start: i64, end: Option<i64>) -> Job {
        Job {
            id,
            name: format!("job-{id}"),
            user: "root".into(),
            uid: 0,
            group: "root".into(),
            gid: 0,
            account: "root".into(),
            partition: "cpu".into(),
            qos: "normal".into(),
            comment: String::new(),
            reservation: String::new(),
            req_cpus: 2,
            req_mem_mb: 512,
            req_gpus: 0,
            gres_type: None,
            gres_type_required: false,
            sharing: crate::slurm::Sharing::Default,
            time_limit_seconds: None,
            priority: 100,
            state,
            completing: false,
            reason: "None".to_owned(),
            submit: SimTime::from_secs(start),
            start: Some(SimTime::from_secs(start)),
            end: end.map(SimTime::from_secs),
            node: Some("slurm-cpu-0".to_owned()),
            gpu_indices: Vec::new(),
            alloc_cpus: 2,
            exit_code: (0, 0),
            cancelled_by: None,
            extra: String::new(),
            kind: JobKind::Batch { run_seconds: None, exit_code: 0, command: None },
            in_prolog: false,
            waiting_for_preempted: Vec::new(),
        }
    }

    fn selected(jobs: &[Job], start: Option<i64>, end: i64, states: &[JobBaseState], ids: &[JobId]) -> Vec<JobId> {
        let query = JobQuery {
            window_start: start.map(SimTime::from_secs),
            window_end: Some(SimTime::from_secs(end)),
            states: states.to_vec(),
            job_ids: ids.to_vec(),
            ..JobQuery::default()
        };
        jobs.iter().filter(|job| query.selects(job)).map(|job| job.id).collect()
    }

    // The windows are the ones `sacct` sends for these command lines at NOW (the CLI's golden
    // tests check each): these are the rows slurmdbd answers with.
    const NOW: i64 = 1_735_787_045;
    const MIDNIGHT: i64 = 1_735_776_000;
    const DAY: i64 = 86_400;

    #[test]
    fn a_window_selects_jobs_eligible_before_its_end_and_not_ended_before_its_start() {
        use JobBaseState::*;
        let jobs = [
            job(1, Cancelled, MIDNIGHT - 7200, Some(MIDNIGHT - 3600)),
            job(2, Cancelled, MIDNIGHT + 60, Some(MIDNIGHT + 120)),
            job(3, Running, NOW, None),
        ];
        assert_eq!(selected(&jobs, Some(MIDNIGHT), NOW + 1, &[], &[]), [2, 3], "sacct: since midnight, now included");
        assert_eq!(selected(&jobs, None, NOW + 1, &[], &[1, 2]), [1, 2], "sacct -j 1,2");
        assert_eq!(selected(&jobs, Some(MIDNIGHT - DAY), NOW + 1, &[], &[]), [1, 2, 3], "sacct -S 2025-01-01");
        assert_eq!(
            selected(&jobs, Some(MIDNIGHT - DAY), MIDNIGHT - 1800, &[], &[]),
            [1],
            "sacct -S 2025-01-01T00:00:00 -E 2025-01-01T23:30"
        );
        assert_eq!(selected(&jobs, Some(NOW - DAY), NOW + 1, &[], &[]), [1, 2, 3], "sacct -S now-1days -E now");
        assert_eq!(
            selected(&jobs, Some(MIDNIGHT - 3599), MIDNIGHT - 3598, &[], &[]),
            [] as [JobId; 0],
            "ended just before"
        );
        assert_eq!(selected(&jobs, Some(MIDNIGHT - 3600), MIDNIGHT - 3599, &[], &[]), [1], "the start is inclusive");
        assert_eq!(selected(&jobs, Some(MIDNIGHT), MIDNIGHT + 60, &[], &[]), [] as [JobId; 0], "the end is exclusive");
    }

    #[test]
    fn states_in_a_window_follow_slurmdbd_running_by_times_final_states_by_their_end() {
        use JobBaseState::*;
        let jobs = [
            job(1, Cancelled, NOW - 30, Some(NOW)),
            job(2, Cancelled, NOW - 300, Some(NOW - 100)),
            job(3, Completed, NOW - 30, Some(NOW)),
            job(4, Running, NOW - 60, None),
        ];
        assert_eq!(selected(&jobs, Some(NOW), NOW + 1, &[Cancelled], &[]), [1], "sacct -s CA: at the instant");
        assert_eq!(selected(&jobs, Some(NOW), NOW + 1, &[Cancelled, Completed], &[]), [1, 3], "sacct -s ca,CD");
        assert_eq!(selected(&jobs, Some(MIDNIGHT), NOW + 1, &[Cancelled], &[]), [1, 2], "-s CA -S midnight -E now");
        assert_eq!(selected(&jobs, Some(NOW), NOW + 1, &[Running], &[]), [1, 3, 4], "ended this second: ran in it");
        assert_eq!(selected(&jobs, Some(NOW + 1), NOW + 2, &[Running], &[]), [4], "sacct -s R -S now+1");
        assert_eq!(selected(&jobs, None, NOW + 1, &[Cancelled], &[2]), [2], "sacct -s CA -j 2: from the epoch");
        let no_window = JobQuery { states: vec![Running], ..JobQuery::default() };
        assert_eq!(jobs.iter().filter(|job| no_window.selects(job)).map(|job| job.id).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn sacct_s_pd_lists_the_jobs_still_pending() {
        use JobBaseState::*;
        let still_pending =
            |id, submit| Job { start: None, node: None, alloc_cpus: 0, ..job(id, Pending, submit, None) };
        let jobs = [
            still_pending(1, NOW - 3600),
            still_pending(2, NOW + 10),
            job(3, Running, NOW - 60, None),
            // Pending from NOW - 300 until it started at NOW - 60.
            Job { submit: SimTime::from_secs(NOW - 300), ..job(4, Running, NOW - 60, None) },
        ];
        assert_eq!(selected(&jobs, Some(NOW), NOW + 1, &[Pending], &[]), [1], "sacct -s PD: pending at the instant");
        // slurmdbd lists every job that became eligible in the window, however briefly it waited.
        assert_eq!(selected(&jobs, Some(MIDNIGHT), NOW + 1, &[Pending], &[]), [1, 3, 4], "-s PD -S midnight");
        assert_eq!(selected(&jobs, Some(NOW + 20), NOW + 30, &[Pending], &[]), [1, 2], "-s PD later: both still wait");
    }
}
