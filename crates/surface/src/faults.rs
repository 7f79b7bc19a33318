//! Reproducible faults: rules that make matching calls fail, slow down or end early, so a
//! client's retry and error paths can be tested (EmulatorService AddFault and friends, the values'
//! `faults:`, and the one-call header [`FAULT_HEADER`]). The rules, their order and their counts
//! are here; the request guard (the edge's `guard`) asks [`Faults::evaluate`] about every call after
//! authenticating it and before any handler runs, so a failed call changes nothing.
//!
//! Each rule draws from its own seeded generator (xorshift, a fixed algorithm), so the same rules,
//! seeds and sequence of calls give the same failures run after run.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cwsandbox_api::emulator_v1 as pb;
use rand_core::{Rng, SeedableRng};
use rand_xorshift::XorShiftRng;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};
use wildmatch::WildMatch;

use cwsandbox_sim::world::{InjectedFault, InjectedKind};
use cwsandbox_sync::MutexUnpoisoned;

use crate::catalogue::{Catalogue, names};
use crate::errors::{ApiError, DOMAIN};

/// The request metadata that injects a fault into one call.
pub const FAULT_HEADER: &str = "x-cwsandbox-emulator-fault";
/// The longest latency a fault may add (a longer one would outlive any client's deadline).
pub const MAX_LATENCY: Duration = Duration::from_secs(300);

/// gRPC's status codes by name (what `FaultAction.code` accepts).
const CODES: &[(&str, Code)] = &[
    ("CANCELLED", Code::Cancelled),
    ("UNKNOWN", Code::Unknown),
    ("INVALID_ARGUMENT", Code::InvalidArgument),
    ("DEADLINE_EXCEEDED", Code::DeadlineExceeded),
    ("NOT_FOUND", Code::NotFound),
    ("ALREADY_EXISTS", Code::AlreadyExists),
    ("PERMISSION_DENIED", Code::PermissionDenied),
    ("RESOURCE_EXHAUSTED", Code::ResourceExhausted),
    ("FAILED_PRECONDITION", Code::FailedPrecondition),
    ("ABORTED", Code::Aborted),
    ("OUT_OF_RANGE", Code::OutOfRange),
    ("UNIMPLEMENTED", Code::Unimplemented),
    ("INTERNAL", Code::Internal),
    ("UNAVAILABLE", Code::Unavailable),
    ("DATA_LOSS", Code::DataLoss),
    ("UNAUTHENTICATED", Code::Unauthenticated),
];

/// A status code's gRPC name (`NOT_FOUND`), as the request log spells it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        code => CODES.iter().find(|(_, known)| *known == code).map_or("UNKNOWN", |(name, _)| name),
    }
}

/// A status code by its gRPC name (`UNAVAILABLE`; case and `-` for `_` do not matter).
fn code_named(name: &str) -> Option<Code> {
    let name = name.trim().to_ascii_uppercase().replace('-', "_");
    CODES.iter().find(|(known, _)| *known == name).map(|(_, code)| *code)
}

/// One RPC as the fault rules see it.
pub struct Call<'a> {
    /// `coreweave.sandbox.v1.SandboxService`.
    pub service: &'a str,
    /// `CreateSandbox`.
    pub method: &'a str,
    /// The caller's organization.
    pub org: &'a str,
    /// Request metadata.
    pub headers: &'a http::HeaderMap,
    /// Whether the answer is a stream of messages.
    pub server_streaming: bool,
    /// The tags of the sandbox the call concerns, computed only if a rule asks.
    pub tags: &'a dyn Fn() -> Option<Vec<String>>,
}

/// What the rules decided for one call.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Wait this long first.
    pub latency: Duration,
    /// Then answer with this status instead of calling the handler.
    pub failure: Option<tonic::Status>,
    /// Or let the handler answer, and end its stream after this many messages.
    pub cut: Option<StreamCut>,
    /// Faults of the simulated cluster for the sandbox a CreateSandbox call makes.
    pub domain: Vec<InjectedFault>,
    /// The ids of the rules that hit the call, in the order they were evaluated.
    pub hit: Vec<String>,
}

/// The domain faults the guard hands to CreateSandbox (a request extension).
#[derive(Debug, Clone, Default)]
pub struct InjectedFaults(pub Vec<InjectedFault>);

/// A stream ended early by a fault.
#[derive(Debug)]
pub struct StreamCut {
    /// Messages let through.
    pub after: u32,
    /// The status the stream ends with.
    pub status: tonic::Status,
}

struct Rule {
    fault: pb::Fault,
    method: Option<WildMatch>,
    headers: Vec<(String, WildMatch)>,
    rng: XorShiftRng,
    /// For a domain fault: what it injects into the sandboxes it hits.
    domain: Option<InjectedKind>,
}

#[derive(Default)]
struct Registry {
    rules: Vec<Rule>,
    added: u64,
}

/// The faults in force.
#[derive(Default)]
pub struct Faults {
    // Counters only: a panic elsewhere leaves nothing half-done here.
    registry: Mutex<Registry>,
    /// How many rules are in force, kept with every change under the lock: every request asks,
    /// and with none in force (nearly always) the answer costs no lock that all requests share.
    in_force: AtomicUsize,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").field("rules", &self.registry.lock_unpoisoned().rules.len()).finish()
    }
}

impl Faults {
    /// Installs a fault owned by `owner` (an organization's admin) or by the operator (`None`);
    /// checks it first (`fault.…` fields named) and answers it with its id.
    pub fn add(&self, fault: pb::Fault, owner: Option<&str>) -> Result<pb::Fault, ApiError> {
        let mut rule = check(fault, owner)?;
        let mut registry = self.registry.lock_unpoisoned();
        registry.added += 1;
        rule.fault.id = format!("fault-{}", registry.added);
        let answer = rule.fault.clone();
        registry.rules.push(rule);
        self.in_force.store(registry.rules.len(), Ordering::SeqCst);
        Ok(answer)
    }

    /// The faults `owner` sees (the operator, `None`, sees all), in the order they were added.
    pub fn list(&self, owner: Option<&str>) -> Vec<pb::Fault> {
        let registry = self.registry.lock_unpoisoned();
        registry.rules.iter().filter(|rule| visible(rule, owner)).map(|rule| rule.fault.clone()).collect()
    }

    /// Removes one fault `owner` sees.
    pub fn remove(&self, id: &str, owner: Option<&str>) -> Result<pb::Fault, ApiError> {
        let mut registry = self.registry.lock_unpoisoned();
        let Some(index) = registry.rules.iter().position(|rule| rule.fault.id == id && visible(rule, owner)) else {
            return Err(ApiError::new(
                Code::NotFound,
                cwsandbox_sim::Reason::FaultNotFound,
                format!("no fault {id:?} is in force"),
            )
            .with_metadata("id", id));
        };
        let removed = registry.rules.remove(index).fault;
        self.in_force.store(registry.rules.len(), Ordering::SeqCst);
        Ok(removed)
    }

    /// Removes every fault `owner` sees; returns how many.
    pub fn clear(&self, owner: Option<&str>) -> usize {
        let mut registry = self.registry.lock_unpoisoned();
        let before = registry.rules.len();
        registry.rules.retain(|rule| !visible(rule, owner));
        self.in_force.store(registry.rules.len(), Ordering::SeqCst);
        before - registry.rules.len()
    }

    /// Removes an organization's own faults (its reset, its tenant's end).
    pub fn forget_organization(&self, org: &str) {
        self.clear(Some(org));
    }

    /// What the faults do to one call; counts matches and hits.
    pub fn evaluate(&self, call: &Call<'_>) -> Verdict {
        let mut verdict = Verdict::default();
        if self.in_force.load(Ordering::SeqCst) == 0 {
            return verdict;
        }
        let mut registry = self.registry.lock_unpoisoned();
        if registry.rules.is_empty() {
            return verdict;
        }
        let mut tags: Option<Option<Vec<String>>> = None;
        let forms = method_forms(call.service, call.method);
        for rule in &mut registry.rules {
            if !matches(rule, call, &forms, &mut tags) {
                continue;
            }
            rule.fault.matched += 1;
            if !scheduled(rule) {
                continue;
            }
            rule.fault.hits += 1;
            verdict.hit.push(rule.fault.id.clone());
            if let Some(kind) = &rule.domain {
                verdict.domain.push(InjectedFault { id: rule.fault.id.clone(), kind: kind.clone() });
                continue;
            }
            let action = rule.fault.action.clone().unwrap_or_default();
            let id = rule.fault.id.clone();
            act(&action, &id, call.server_streaming, &mut rule.rng, &mut verdict);
        }
        verdict
    }
}

/// What the one-call header [`FAULT_HEADER`] asks for: a `FaultAction` as proto3 JSON, or a bare
/// code name. `INVALID_ARGUMENT` naming the header when it is neither.
pub fn header_verdict(value: &str, server_streaming: bool) -> Result<Verdict, ApiError> {
    let value = value.trim();
    let action: pb::FaultAction = if value.starts_with('{') {
        serde_json::from_str(value)
            .map_err(|error| ApiError::invalid_field(FAULT_HEADER, format!("not a FaultAction as JSON: {error}")))?
    } else {
        pb::FaultAction { code: value.to_owned(), ..Default::default() }
    };
    let action = check_action(action, FAULT_HEADER)?;
    let mut verdict = Verdict::default();
    act(&action, FAULT_HEADER, server_streaming, &mut XorShiftRng::seed_from_u64(1), &mut verdict);
    Ok(verdict)
}

/// The three spellings a method pattern is matched against: `CreateSandbox`,
/// `SandboxService/CreateSandbox`, `coreweave.sandbox.v1.SandboxService/CreateSandbox`.
fn method_forms(service: &str, method: &str) -> [String; 3] {
    let short = service.rsplit('.').next().unwrap_or(service);
    [method.to_owned(), format!("{short}/{method}"), format!("{service}/{method}")]
}

fn visible(rule: &Rule, owner: Option<&str>) -> bool {
    owner.is_none_or(|owner| rule.fault.owner == owner)
}

fn matches(rule: &Rule, call: &Call<'_>, forms: &[String; 3], tags: &mut Option<Option<Vec<String>>>) -> bool {
    let unset = pb::FaultMatch::default();
    let condition = rule.fault.r#match.as_ref().unwrap_or(&unset);
    if !rule.fault.owner.is_empty() && rule.fault.owner != call.org {
        return false;
    }
    if !condition.organization.is_empty() && condition.organization != call.org {
        return false;
    }
    if rule.domain.is_some() && (call.method != names::CREATE_SANDBOX || call.service != names::SANDBOX_SERVICE) {
        return false;
    }
    if let Some(pattern) = &rule.method
        && !forms.iter().any(|form| pattern.matches(form))
    {
        return false;
    }
    for (key, pattern) in &rule.headers {
        let value = call.headers.get(key.as_str()).and_then(|value| value.to_str().ok());
        if !value.is_some_and(|value| pattern.matches(value)) {
            return false;
        }
    }
    if !condition.tags.is_empty() {
        let have = tags.get_or_insert_with(|| (call.tags)());
        let Some(have) = have else { return false };
        if !condition.tags.iter().all(|tag| have.contains(tag)) {
            return false;
        }
    }
    true
}

fn scheduled(rule: &mut Rule) -> bool {
    let schedule = rule.fault.schedule.unwrap_or_default();
    if schedule.times > 0 {
        rule.fault.hits < u64::from(schedule.times)
    } else if schedule.every > 0 {
        rule.fault.matched.is_multiple_of(u64::from(schedule.every))
    } else if schedule.probability > 0.0 {
        unit(&mut rule.rng) < schedule.probability
    } else {
        true
    }
}

/// A uniform draw in [0, 1).
fn unit(rng: &mut XorShiftRng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn act(action: &pb::FaultAction, id: &str, server_streaming: bool, rng: &mut XorShiftRng, verdict: &mut Verdict) {
    let low = action.latency.map(duration).unwrap_or_default();
    let latency = match action.latency_max.map(duration) {
        Some(high) if high > low => {
            let span = (high - low).as_micros() as u64;
            low + Duration::from_micros(rng.next_u64() % (span + 1))
        }
        _ => low,
    };
    verdict.latency += latency;
    let status = || status_of(action, id);
    let fails = action.stream_messages.is_some() || !action.code.is_empty();
    match action.stream_messages.filter(|_| server_streaming) {
        Some(after) => {
            if verdict.cut.is_none() && verdict.failure.is_none() {
                verdict.cut = Some(StreamCut { after, status: status() });
            }
        }
        // A stream cut asked of a unary call fails the call itself.
        None => {
            if fails && verdict.failure.is_none() {
                verdict.failure = Some(status());
            }
        }
    }
}

/// The status a fault answers with, its details included.
fn status_of(action: &pb::FaultAction, id: &str) -> tonic::Status {
    let code = code_named(&action.code).unwrap_or(Code::Unavailable);
    let message = if action.message.is_empty() { format!("injected by fault {id}") } else { action.message.clone() };
    let mut details = ErrorDetails::new();
    if !action.reason.is_empty() {
        details.set_error_info(
            action.reason.clone(),
            DOMAIN,
            std::collections::HashMap::from([("fault".to_owned(), id.to_owned())]),
        );
    }
    if let Some(delay) = action.retry_delay {
        details.set_retry_info(Some(duration(delay)));
    }
    for violation in &action.violations {
        details.add_bad_request_violation(violation.field.clone(), violation.description.clone());
    }
    tonic::Status::with_error_details(code, message, details)
}

fn duration(value: pbjson_types::Duration) -> Duration {
    Duration::new(value.seconds.max(0) as u64, value.nanos.max(0) as u32)
}

/// A duration of a fault, refused on `field` when negative or above `max` (`limit` says why).
fn bounded_duration(
    value: pbjson_types::Duration,
    field: &str,
    max: Duration,
    limit: &str,
) -> Result<Duration, ApiError> {
    if value.seconds < 0 || value.nanos < 0 {
        return Err(ApiError::invalid_field(field, "must not be negative"));
    }
    let value = duration(value);
    if value > max {
        return Err(ApiError::invalid_field(field, limit));
    }
    Ok(value)
}

/// An action's delay: at most [`MAX_LATENCY`]; unset is none.
fn check_duration(value: Option<pbjson_types::Duration>, field: &str) -> Result<Duration, ApiError> {
    let Some(value) = value else { return Ok(Duration::ZERO) };
    bounded_duration(value, field, MAX_LATENCY, &format!("at most {} seconds", MAX_LATENCY.as_secs()))
}

fn check_action(action: pb::FaultAction, field: &str) -> Result<pb::FaultAction, ApiError> {
    if !action.code.is_empty() {
        match code_named(&action.code) {
            Some(_) => {}
            None if action.code.trim().eq_ignore_ascii_case("ok") => {
                return Err(ApiError::invalid_field(&format!("{field}.code"), "OK is not a failure"));
            }
            None => {
                return Err(ApiError::invalid_field(
                    &format!("{field}.code"),
                    format!("{:?} is not a gRPC status code name (UNAVAILABLE, PERMISSION_DENIED, …)", action.code),
                ));
            }
        }
    }
    let low = check_duration(action.latency, &format!("{field}.latency"))?;
    let high = check_duration(action.latency_max, &format!("{field}.latency_max"))?;
    if action.latency_max.is_some() && high < low {
        return Err(ApiError::invalid_field(&format!("{field}.latency_max"), "must not be below latency"));
    }
    if action.latency_max.is_some() && action.latency.is_none() {
        return Err(ApiError::invalid_field(&format!("{field}.latency"), "required with latency_max"));
    }
    if let Some(delay) = action.retry_delay {
        check_duration(Some(delay), &format!("{field}.retry_delay"))?;
    }
    let acts = !action.code.is_empty() || action.latency.is_some() || action.stream_messages.is_some();
    if !acts {
        return Err(ApiError::invalid_field(field, "does nothing: set code, latency or stream_messages"));
    }
    if action.code.is_empty()
        && (!action.message.is_empty()
            || !action.reason.is_empty()
            || action.retry_delay.is_some()
            || !action.violations.is_empty())
        && action.stream_messages.is_none()
    {
        return Err(ApiError::invalid_field(
            &format!("{field}.code"),
            "required with message, reason, retry_delay or violations (they describe a failure)",
        ));
    }
    Ok(action)
}

/// The methods of the API, as `package.Service/Method`.
fn known_methods() -> impl Iterator<Item = &'static str> {
    Catalogue::get().methods().map(|method| method.qualified_name())
}

fn check(mut fault: pb::Fault, owner: Option<&str>) -> Result<Rule, ApiError> {
    for (field, set) in [
        ("fault.id", !fault.id.is_empty()),
        ("fault.matched", fault.matched != 0),
        ("fault.hits", fault.hits != 0),
        ("fault.owner", !fault.owner.is_empty()),
    ] {
        if set {
            return Err(ApiError::invalid_field(field, "assigned by the emulator; leave it unset"));
        }
    }
    let domain = match &fault.domain {
        None => {
            let action = fault.action.take().ok_or_else(|| ApiError::missing_field("fault.action"))?;
            fault.action = Some(check_action(action, "fault.action")?);
            None
        }
        Some(domain) => {
            if fault.action.as_ref().is_some_and(|action| *action != pb::FaultAction::default()) {
                return Err(ApiError::invalid_field(
                    "fault.action",
                    "a domain fault has no RPC action; leave it unset",
                ));
            }
            Some(domain_kind(domain)?)
        }
    };
    let condition = fault.r#match.clone().unwrap_or_default();
    if domain.is_some() && !condition.method.is_empty() {
        let pattern = WildMatch::new(condition.method.trim());
        if !method_forms(names::SANDBOX_SERVICE, names::CREATE_SANDBOX).iter().any(|name| pattern.matches(name)) {
            return Err(ApiError::invalid_field(
                "fault.match.method",
                "a domain fault acts on the sandboxes CreateSandbox makes: leave it empty or name CreateSandbox",
            ));
        }
    }
    if let Some(owner) = owner
        && !condition.organization.is_empty()
        && condition.organization != owner
    {
        return Err(ApiError::permission_denied(
            "cluster_admin",
            format!(
                "organization {:?} is not the caller's: only cluster_admin installs faults for another",
                condition.organization
            ),
        )
        .with_metadata("organization", condition.organization.clone()));
    }
    let method = match condition.method.trim() {
        "" => None,
        pattern => {
            let compiled = WildMatch::new(pattern);
            let reaches = known_methods().any(|path| {
                let (service, method) = path.split_once('/').unwrap_or((path, ""));
                method_forms(service, method).iter().any(|form| compiled.matches(form))
            });
            if !reaches {
                return Err(ApiError::invalid_field(
                    "fault.match.method",
                    format!("{pattern:?} matches no method of the API (`CreateSandbox`, `SandboxService/*`, …)"),
                ));
            }
            Some(compiled)
        }
    };
    let headers = condition
        .headers
        .iter()
        .map(|(key, pattern)| (key.trim().to_ascii_lowercase(), WildMatch::new(pattern)))
        .collect();
    let schedule = fault.schedule.unwrap_or_default();
    let ways = [schedule.times > 0, schedule.every > 0, schedule.probability != 0.0].iter().filter(|set| **set).count();
    if ways > 1 {
        return Err(ApiError::invalid_field("fault.schedule", "set one of times, every and probability"));
    }
    if schedule.probability != 0.0 && !(schedule.probability > 0.0 && schedule.probability <= 1.0) {
        return Err(ApiError::invalid_field("fault.schedule.probability", "must be in (0, 1]"));
    }
    let seed = if schedule.seed == 0 { 1 } else { schedule.seed };
    fault.owner = owner.unwrap_or_default().to_owned();
    Ok(Rule { fault, method, headers, rng: XorShiftRng::seed_from_u64(seed), domain })
}

/// What a domain fault injects, its durations checked.
fn domain_kind(domain: &pb::DomainFault) -> Result<InjectedKind, ApiError> {
    use pb::domain_fault::Kind;
    let positive = |value: &pbjson_types::Duration, field: &str| {
        bounded_duration(
            *value,
            field,
            Duration::from_secs(30 * 24 * 3600),
            "at most 30 days (a sandbox's longest lifetime)",
        )
    };
    match &domain.kind {
        None => Err(ApiError::invalid_field(
            "fault.domain",
            "set one of image_pull, oom_kill_after, node_not_ready_after, pending_for",
        )),
        Some(Kind::ImagePull(images)) => Ok(InjectedKind::ImagePull { images: images.trim().to_owned() }),
        Some(Kind::OomKillAfter(after)) => {
            Ok(InjectedKind::OomKillAfter(positive(after, "fault.domain.oom_kill_after")?))
        }
        Some(Kind::NodeNotReadyAfter(after)) => {
            Ok(InjectedKind::NodeNotReadyAfter(positive(after, "fault.domain.node_not_ready_after")?))
        }
        Some(Kind::PendingFor(hold)) => Ok(InjectedKind::PendingFor(positive(hold, "fault.domain.pending_for")?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(method: &str, action: pb::FaultAction, schedule: pb::FaultSchedule) -> pb::Fault {
        pb::Fault {
            r#match: Some(pb::FaultMatch { method: method.to_owned(), ..Default::default() }),
            action: Some(action),
            schedule: Some(schedule),
            ..Default::default()
        }
    }

    fn unavailable() -> pb::FaultAction {
        pb::FaultAction { code: "UNAVAILABLE".to_owned(), ..Default::default() }
    }

    fn call<'a>(
        method: &'a str,
        org: &'a str,
        headers: &'a http::HeaderMap,
        tags: &'a dyn Fn() -> Option<Vec<String>>,
    ) -> Call<'a> {
        Call { service: "coreweave.sandbox.v1.SandboxService", method, org, headers, server_streaming: false, tags }
    }

    fn outcomes(faults: &Faults, method: &str, calls: usize) -> Vec<bool> {
        let headers = http::HeaderMap::new();
        let no_tags = || None;
        (0..calls).map(|_| faults.evaluate(&call(method, "org", &headers, &no_tags)).failure.is_some()).collect()
    }

    #[test]
    fn times_every_and_probability_pick_the_same_calls_each_run() {
        let faults = Faults::default();
        faults
            .add(fault("CreateSandbox", unavailable(), pb::FaultSchedule { times: 2, ..Default::default() }), None)
            .unwrap();
        assert_eq!(outcomes(&faults, "CreateSandbox", 4), [true, true, false, false]);
        assert_eq!(outcomes(&faults, "GetSandbox", 1), [false]);
        let listed = faults.list(None);
        assert_eq!((listed[0].matched, listed[0].hits), (4, 2));

        let faults = Faults::default();
        faults
            .add(fault("*Sandbox", unavailable(), pb::FaultSchedule { every: 3, ..Default::default() }), None)
            .unwrap();
        assert_eq!(outcomes(&faults, "GetSandbox", 6), [false, false, true, false, false, true]);

        let draw = || {
            let faults = Faults::default();
            let schedule = pb::FaultSchedule { probability: 0.5, seed: 7, ..Default::default() };
            faults.add(fault("SandboxService/*", unavailable(), schedule), None).unwrap();
            outcomes(&faults, "Exec", 64)
        };
        let first = draw();
        assert_eq!(first, draw(), "same seed, same calls: same failures");
        let failed = first.iter().filter(|failed| **failed).count();
        assert!((16..=48).contains(&failed), "p = 0.5 fails about half of 64 calls, not {failed}");
    }

    #[test]
    fn an_organizations_faults_touch_only_its_calls() {
        let faults = Faults::default();
        faults.add(fault("", unavailable(), pb::FaultSchedule::default()), Some("a")).unwrap();
        let headers = http::HeaderMap::new();
        let no_tags = || None;
        assert!(faults.evaluate(&call("GetSandbox", "a", &headers, &no_tags)).failure.is_some());
        assert!(faults.evaluate(&call("GetSandbox", "b", &headers, &no_tags)).failure.is_none());
        assert!(faults.list(Some("b")).is_empty());
        assert!(faults.remove("fault-1", Some("b")).is_err());
        assert_eq!(faults.clear(Some("a")), 1);
    }

    #[test]
    fn headers_and_tags_narrow_the_match() {
        let faults = Faults::default();
        let mut rule = fault("", unavailable(), pb::FaultSchedule::default());
        let condition = rule.r#match.as_mut().unwrap();
        condition.headers.insert("X-Test-Case".to_owned(), "retry-*".to_owned());
        condition.tags.push("flaky".to_owned());
        faults.add(rule, None).unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert("x-test-case", "retry-3".parse().unwrap());
        let flaky = || Some(vec!["flaky".to_owned(), "x".to_owned()]);
        let steady = || Some(vec!["x".to_owned()]);
        assert!(faults.evaluate(&call("GetSandbox", "o", &headers, &flaky)).failure.is_some());
        assert!(faults.evaluate(&call("GetSandbox", "o", &headers, &steady)).failure.is_none());
        assert!(faults.evaluate(&call("GetSandbox", "o", &http::HeaderMap::new(), &flaky)).failure.is_none());
    }

    #[test]
    fn bad_rules_name_their_field() {
        let faults = Faults::default();
        let field = |fault: pb::Fault| faults.add(fault, None).unwrap_err().violations[0].0.clone();
        assert_eq!(field(fault("CreateSandbx", unavailable(), Default::default())), "fault.match.method");
        let bad_code = pb::FaultAction { code: "BROKEN".to_owned(), ..Default::default() };
        assert_eq!(field(fault("", bad_code, Default::default())), "fault.action.code");
        assert_eq!(field(fault("", pb::FaultAction::default(), Default::default())), "fault.action");
        let both = pb::FaultSchedule { times: 1, every: 2, ..Default::default() };
        assert_eq!(field(fault("", unavailable(), both)), "fault.schedule");
        let odds = pb::FaultSchedule { probability: 1.5, ..Default::default() };
        assert_eq!(field(fault("", unavailable(), odds)), "fault.schedule.probability");
        let mut assigned = fault("", unavailable(), Default::default());
        assigned.hits = 3;
        assert_eq!(field(assigned), "fault.hits");
    }

    #[test]
    fn the_header_takes_a_code_or_an_action() {
        let verdict = header_verdict("permission_denied", false).unwrap();
        assert_eq!(verdict.failure.unwrap().code(), Code::PermissionDenied);
        let verdict = header_verdict(r#"{"code":"UNAVAILABLE","retryDelay":"2s","message":"down"}"#, false).unwrap();
        let status = verdict.failure.unwrap();
        assert_eq!((status.code(), status.message()), (Code::Unavailable, "down"));
        assert_eq!(status.get_details_retry_info().unwrap().retry_delay, Some(Duration::from_secs(2)));
        // Exactly the details the action names (docs/errors.md): no reason, no ErrorInfo.
        assert!(status.get_details_error_info().is_none());
        let named = header_verdict(r#"{"code":"UNAVAILABLE","reason":"CWSANDBOX_RUNNER_OVERLOADED"}"#, false).unwrap();
        let named = named.failure.unwrap();
        assert_eq!(named.get_details_error_info().unwrap().reason, "CWSANDBOX_RUNNER_OVERLOADED");
        assert!(named.get_details_retry_info().is_none());
        let cut = header_verdict(r#"{"streamMessages":1}"#, true).unwrap().cut.unwrap();
        assert_eq!((cut.after, cut.status.code()), (1, Code::Unavailable));
        assert_eq!(header_verdict("nonsense", false).unwrap_err().violations[0].0, "x-cwsandbox-emulator-fault.code");
    }
}
