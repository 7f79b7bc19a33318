//! CreateSandboxFromFile's Compose files: each service becomes a container of the sandbox (the
//! primary service the primary container, the others sidecars), named volumes become scratch
//! volumes. What maps:
//!
//! - top level: `services` (in the file's order, which is the containers'), `volumes` (named
//!   volumes without settings), `name` (the project's name, which names nothing in one sandbox),
//!   `version` (obsolete; Compose itself ignores it) and `x-*` extensions (which Compose ignores
//!   by definition);
//! - per service: `image` (or `image_overrides`), `build` only beside an image (the image is used
//!   and nothing is built, as the gateway does), `command` and `entrypoint` (lists, or strings
//!   split as shell words), `environment` (map or `KEY=VALUE` list), `working_dir`, a numeric
//!   `user` (`uid[:gid]`, the security context's run_as), `volumes` naming a top-level volume
//!   (short `name:/path[:ro|rw]` or long `type: volume` syntax), `deploy.resources`
//!   (`limits`/`reservations` `cpus` and `memory`), `expose` (ports the Pod's containers reach on
//!   its loopback anyway, as Compose's own documentation-only key), `healthcheck` (the container's
//!   startup probe: `test`, `interval`, `timeout`, `retries`, `start_period` as a failure
//!   allowance, `disable`), `depends_on` (list or map; `condition` `service_started`,
//!   `service_healthy`, `service_completed_successfully`; `restart`, which no restart here
//!   triggers), and `x-*` extensions. The start order and conditions, and the service names every
//!   container resolves to its loopback, go to the Pod in its [`StartPlan`].
//!
//! Every other key is refused by name (UNIMPLEMENTED, reason `CWSANDBOX_NOT_IMPLEMENTED`, a
//! violation `contents.services.web.ports`), never ignored: a `build` with no image to use
//! instead (no image is built), bind mounts (no host path is shared), `${VAR}` interpolation (there
//! is no shell environment to take values from; `$$` is a literal `$`), and the keys with no
//! equivalent here (`ports`, `networks`, …).

use std::collections::{BTreeMap, HashMap};

use cwsandbox_api::sandbox_v1::{
    Container, Control, CreateSandboxFromFileRequest, ResourceRequirements, Resources, SandboxFileType, SandboxSpec,
    SandboxVolume, ScratchVolume, SecurityContext, VolumeMount, sandbox_volume,
};
use serde_json::Value;

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::k8s::{StartCondition, StartDependency, StartPlan};

/// The largest file the gateway accepts (the published client's `_CREATE_FROM_FILE_CONTENTS_MAX_BYTES`).
pub const MAX_CONTENTS_BYTES: usize = 256 * 1024;

/// The file's text, once the request's type and size allow reading it as a Compose file.
pub fn contents(request: &CreateSandboxFromFileRequest) -> SimResult<&str> {
    match SandboxFileType::try_from(request.r#type) {
        Ok(SandboxFileType::Compose) => {}
        Ok(SandboxFileType::Unspecified) => {
            return Err(SimError::invalid_field("type", "required: SANDBOX_FILE_TYPE_COMPOSE"));
        }
        Err(_) => return Err(SimError::invalid_field("type", format!("unknown file type {}", request.r#type))),
    }
    if request.contents.is_empty() {
        return Err(SimError::invalid_field("contents", "required: the Compose file"));
    }
    if request.contents.len() > MAX_CONTENTS_BYTES {
        return Err(SimError::invalid_field(
            "contents",
            format!("{} bytes, more than the {MAX_CONTENTS_BYTES} the gateway accepts", request.contents.len()),
        ));
    }
    std::str::from_utf8(&request.contents)
        .map_err(|error| SimError::invalid_field("contents", format!("not UTF-8 text: {error}")))
}

/// What reading the file found: malformed input, and keys that are not emulated.
#[derive(Default)]
struct Findings {
    invalid: Vec<FieldViolation>,
    refused: Vec<FieldViolation>,
}

impl Findings {
    fn invalid(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.invalid.push(FieldViolation::new(field, description));
    }

    fn refuse(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.refused.push(FieldViolation::new(field, description));
    }

    /// Malformed input first (the caller must fix it anyway), then what is not emulated.
    fn into_result<T>(self, value: T) -> SimResult<T> {
        if !self.invalid.is_empty() {
            Err(SimError::invalid(Reason::InvalidRequest, self.invalid))
        } else if !self.refused.is_empty() {
            Err(SimError::not_emulated(self.refused))
        } else {
            Ok(value)
        }
    }
}

/// Why a top-level or service key has no equivalent here, for the keys users meet most.
fn why_not(key: &str) -> &'static str {
    match key {
        "ports" => "no port is published on the host from a Compose file (the sandbox's services are)",
        "networks" | "network_mode" | "hostname" | "extra_hosts" | "dns" => {
            "the sandbox's containers share one network; networks are not configured"
        }
        "secrets" | "configs" | "env_file" => "no file is taken from the host",
        "restart" => "containers are not restarted",
        _ => "not emulated",
    }
}

/// The names of a Compose file's services in the file's order (read by the caller from the
/// YAML text, whose maps keep their order; a JSON tree's do not).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServiceOrder(pub Vec<String>);

impl<'de> serde::Deserialize<'de> for ServiceOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<ServiceOrder, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = ServiceOrder;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a map of services")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ServiceOrder, A::Error> {
                let mut names = Vec::new();
                while let Some((name, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                    names.push(name);
                }
                Ok(ServiceOrder(names))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<ServiceOrder, E> {
                Ok(ServiceOrder::default())
            }
        }
        deserializer.deserialize_any(Keys)
    }
}

/// Why no runner here can host `SandboxControl.CONTAINER_ENGINE`.
pub const CONTAINER_ENGINE_UNAVAILABLE: &str = "no runner can host a container engine (control CONTAINER_ENGINE): a Docker engine in a sandbox needs the privileges to make its own mounts, cgroups and networks, which this emulator's sandboxes do not have (they run in an unprivileged user namespace), and Debian 12 packages no `docker compose` v2 plugin; run the file under control PLATFORM, each service a container of the sandbox";

/// The part of a Compose file whose order matters: its services'.
#[derive(Debug, Default, serde::Deserialize)]
pub struct FileOrder {
    /// The services, in the file's order.
    #[serde(default)]
    pub services: ServiceOrder,
}

/// The sandbox spec `tree` (the parsed file) and the request describe, and how its containers
/// start ([`StartPlan`]). `order` lists the services in the file's order (unknown names and
/// missing ones are ignored: the tree decides which services there are).
pub fn sandbox_spec(
    request: &CreateSandboxFromFileRequest,
    tree: &Value,
    order: &ServiceOrder,
) -> SimResult<(SandboxSpec, StartPlan)> {
    let mut findings = Findings::default();
    if Control::try_from(request.control) == Ok(Control::ContainerEngine) {
        // As the fleet answers a sandbox no runner can host: an engine needs more in a sandbox
        // than this emulator's sandboxes have.
        return Err(SimError::FailedPrecondition {
            reason: Reason::NoSuitableRunner,
            message: CONTAINER_ENGINE_UNAVAILABLE.to_owned(),
        });
    }
    let Some(top) = tree.as_object() else {
        return Err(SimError::invalid_field("contents", "a Compose file is a map with `services`"));
    };
    for (key, value) in top {
        match key.as_str() {
            "services" | "volumes" | "version" => {}
            "name" => {
                text(value, "contents.name", &mut findings);
            }
            extension if extension.starts_with("x-") => {}
            other => findings.refuse(format!("contents.{other}"), why_not(other)),
        }
    }
    let volumes = named_volumes(top.get("volumes"), &mut findings);
    let services = match top.get("services").and_then(Value::as_object) {
        Some(services) if !services.is_empty() => services,
        _ => {
            findings.invalid("contents.services", "required: a map of at least one service");
            return findings.into_result(Default::default());
        }
    };
    if request.primary_service.is_empty() {
        findings.invalid("primary_service", "required: the service that becomes the primary container");
    } else if !services.contains_key(&request.primary_service) {
        findings.invalid("primary_service", format!("no service named {:?} in contents", request.primary_service));
    }
    for name in request.image_overrides.keys() {
        if !services.contains_key(name) {
            findings.invalid(format!("image_overrides.{name}"), "no service of that name in contents");
        }
    }
    if let Some(defaults) = &request.default_resources {
        let sides = [&defaults.requests, &defaults.limits];
        if sides.iter().any(|side| side.as_ref().is_some_and(|side| side.gpu.is_some())) {
            findings.invalid("default_resources", "must not set GPU");
        }
    }
    // The file's order (names the order does not know, after it, by name).
    let position = |name: &str| order.0.iter().position(|known| known == name).unwrap_or(usize::MAX);
    let mut ordered: Vec<(&String, &Value)> = services.iter().collect();
    ordered.sort_by_key(|(name, _)| (position(name), *name));
    let mut containers: Vec<Container> =
        ordered.iter().map(|(name, service)| container(request, name, service, &volumes, &mut findings)).collect();
    pull_credentials(request, &mut containers, &mut findings);
    let mut start_plan =
        StartPlan { host_aliases: ordered.iter().map(|(name, _)| (*name).clone()).collect(), ..Default::default() };
    for (name, service) in &ordered {
        if let Some(depends_on) = service.get("depends_on") {
            let after = dependencies(request, name, depends_on, &containers, &mut findings);
            start_plan.after.insert((*name).clone(), after);
        }
    }
    check_cycles(&start_plan, &mut findings);
    let spec = SandboxSpec {
        containers,
        volumes: volumes
            .keys()
            .map(|name| SandboxVolume {
                name: name.clone(),
                source: Some(sandbox_volume::Source::Scratch(ScratchVolume::default())),
            })
            .collect(),
        max_lifetime_seconds: request.max_lifetime_seconds,
        network_ids: request.network_ids.clone(),
        object_storage_access: request.object_storage_access.clone(),
        tags: request.tags.clone(),
        runner_ids: request.runner_ids.clone(),
        network: request.network.clone(),
        annotations: request.annotations.clone(),
        mode: request.mode,
        ..Default::default()
    };
    findings.into_result((spec, start_plan))
}

/// The request's `image_pull_credentials`, as a Pod's image pull secrets: each container whose
/// image is from a listed registry pulls it with those credentials (the first listed for it). A
/// listed registry no service's image is from would never be used: refused, naming it.
fn pull_credentials(request: &CreateSandboxFromFileRequest, containers: &mut [Container], findings: &mut Findings) {
    for (index, credentials) in request.image_pull_credentials.iter().enumerate() {
        let mut used = false;
        for container in containers.iter_mut() {
            let registry = crate::k8s::registry_of_image(&container.image);
            if container.image_pull_credentials.is_none()
                && crate::k8s::same_registry(credentials.registry.trim(), registry)
            {
                container.image_pull_credentials = Some(credentials.clone());
                used = true;
            }
        }
        if !used {
            findings.invalid(
                format!("image_pull_credentials[{index}].registry"),
                format!("no service's image is from {:?}: the credentials would never be used", credentials.registry),
            );
        }
    }
}

/// A service's `depends_on`: a list of names (`service_started`), or a map of names to
/// `condition` (and `restart`, which only a restart of the dependency would act on, and none
/// happens here; `required: false` is not emulated).
fn dependencies(
    request: &CreateSandboxFromFileRequest,
    name: &str,
    value: &Value,
    containers: &[Container],
    findings: &mut Findings,
) -> Vec<StartDependency> {
    let at = format!("contents.services.{name}.depends_on");
    let mut wanted: Vec<(String, StartCondition, String)> = Vec::new();
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let field = format!("{at}[{index}]");
                if let Some(other) = text(item, &field, findings) {
                    wanted.push((other, StartCondition::Started, field));
                }
            }
        }
        Value::Object(map) => {
            for (other, settings) in map {
                let field = format!("{at}.{other}");
                let mut condition = StartCondition::Started;
                match settings {
                    Value::Null => {}
                    Value::Object(settings) => {
                        for (key, setting) in settings {
                            let key_field = format!("{field}.{key}");
                            match key.as_str() {
                                "condition" => match setting.as_str() {
                                    Some("service_started") => condition = StartCondition::Started,
                                    Some("service_healthy") => condition = StartCondition::Healthy,
                                    Some("service_completed_successfully") => {
                                        condition = StartCondition::CompletedSuccessfully;
                                    }
                                    _ => findings.invalid(
                                        key_field,
                                        "one of service_started, service_healthy, service_completed_successfully",
                                    ),
                                },
                                "restart" => {
                                    if !setting.is_boolean() {
                                        findings.invalid(key_field, "true or false");
                                    }
                                }
                                "required" => match setting.as_bool() {
                                    Some(true) => {}
                                    Some(false) => findings.refuse(
                                        key_field,
                                        "an optional dependency is not emulated: every service of the file runs",
                                    ),
                                    None => findings.invalid(key_field, "true or false"),
                                },
                                extension if extension.starts_with("x-") => {}
                                other => findings.refuse(key_field, format!("{other} is not emulated")),
                            }
                        }
                    }
                    _ => findings.invalid(field.clone(), "a map of settings (condition, restart, required)"),
                }
                wanted.push((other.clone(), condition, field));
            }
        }
        _ => findings.invalid(at, "a list of service names, or a map of them to their condition"),
    }
    let mut after = Vec::new();
    for (other, condition, field) in wanted {
        let Some(dependency) = containers.iter().find(|container| container.name == other) else {
            findings.invalid(field, format!("no service named {other:?} in contents"));
            continue;
        };
        if other == name {
            findings.invalid(field, "a service cannot depend on itself");
            continue;
        }
        if other == request.primary_service {
            findings.refuse(
                field,
                "the primary service's container starts last here (its end ends the sandbox): another service waiting for it is not emulated",
            );
            continue;
        }
        if condition == StartCondition::Healthy && dependency.startup_probe.is_none() {
            findings.invalid(
                field,
                format!("service_healthy needs a healthcheck, and service {other:?} has none (or it is disabled)"),
            );
            continue;
        }
        after.push(StartDependency { container: other, condition });
    }
    after
}

/// Refuses a cycle of `depends_on` (Compose does too: no service of it could start).
fn check_cycles(plan: &StartPlan, findings: &mut Findings) {
    fn visit<'a>(
        name: &'a str,
        plan: &'a StartPlan,
        trail: &mut Vec<&'a str>,
        done: &mut Vec<&'a str>,
    ) -> Option<String> {
        if done.contains(&name) {
            return None;
        }
        if let Some(start) = trail.iter().position(|seen| *seen == name) {
            let mut cycle: Vec<&str> = trail[start..].to_vec();
            cycle.push(name);
            return Some(cycle.join(" -> "));
        }
        trail.push(name);
        for dependency in plan.after.get(name).into_iter().flatten() {
            if let Some(cycle) = visit(&dependency.container, plan, trail, done) {
                return Some(cycle);
            }
        }
        trail.pop();
        done.push(name);
        None
    }
    let mut done = Vec::new();
    for name in plan.after.keys() {
        if let Some(cycle) = visit(name, plan, &mut Vec::new(), &mut done) {
            findings.invalid(format!("contents.services.{name}.depends_on"), format!("a dependency cycle: {cycle}"));
            return;
        }
    }
}

/// A service's `healthcheck` as the container's startup probe; `None` when it is disabled.
/// `start_period` becomes failure allowance (as long a time of failed runs more), since a
/// startup probe has no grace of its own; Docker's defaults (30 s interval and timeout, 3
/// retries) for what it leaves out.
fn healthcheck(value: &Value, at: &str, findings: &mut Findings) -> Option<cwsandbox_api::sandbox_v1::Probe> {
    let Some(settings) = value.as_object() else {
        findings.invalid(at, "a map: test, interval, timeout, retries, start_period");
        return None;
    };
    let mut exec = None;
    let (mut interval, mut timeout, mut retries, mut start_period) = (30u32, 30u32, 3u32, 0u32);
    let mut disabled = false;
    let test_given = settings.contains_key("test");
    for (key, setting) in settings {
        let field = format!("{at}.{key}");
        match key.as_str() {
            "test" => match setting {
                Value::String(line) => {
                    exec =
                        literal(line, &field, findings).map(|line| vec!["/bin/sh".to_owned(), "-c".to_owned(), line]);
                }
                Value::Array(items) => {
                    let words: Option<Vec<String>> = items.iter().map(|item| text(item, &field, findings)).collect();
                    match words.as_deref().map(|words| words.split_first()) {
                        Some(Some((kind, rest))) if kind == "CMD" && !rest.is_empty() => exec = Some(rest.to_vec()),
                        Some(Some((kind, [line]))) if kind == "CMD-SHELL" => {
                            exec = Some(vec!["/bin/sh".to_owned(), "-c".to_owned(), line.clone()]);
                        }
                        Some(Some((kind, []))) if kind == "NONE" => disabled = true,
                        Some(_) => {
                            findings.invalid(field, "[\"CMD\", program, args…], [\"CMD-SHELL\", line] or [\"NONE\"]")
                        }
                        None => {}
                    }
                }
                _ => findings.invalid(field, "a string or a list"),
            },
            "interval" => interval = seconds(setting, &field, findings).unwrap_or(interval),
            "timeout" => timeout = seconds(setting, &field, findings).unwrap_or(timeout),
            "start_period" => start_period = seconds(setting, &field, findings).unwrap_or(start_period),
            "retries" => match setting.as_u64().and_then(|retries| u32::try_from(retries).ok()) {
                Some(count) => retries = count,
                None => findings.invalid(field, "a whole number"),
            },
            "disable" => {
                disabled = setting.as_bool().unwrap_or_else(|| {
                    findings.invalid(field, "true or false");
                    false
                })
            }
            extension if extension.starts_with("x-") => {}
            other => findings
                .refuse(field, format!("{other} is not emulated (the start period is a failure allowance here)")),
        }
    }
    if disabled {
        return None;
    }
    let Some(exec) = exec else {
        if !test_given {
            findings.invalid(format!("{at}.test"), "required: the check to run");
        }
        return None;
    };
    let period = interval.max(1);
    let allowance = start_period.div_ceil(period);
    Some(cwsandbox_api::sandbox_v1::Probe {
        exec,
        period_seconds: i32::try_from(period).unwrap_or(i32::MAX),
        timeout_seconds: i32::try_from(timeout.max(1)).unwrap_or(i32::MAX),
        failure_threshold: i32::try_from(retries.max(1).saturating_add(allowance)).unwrap_or(i32::MAX),
        initial_delay_seconds: 0,
    })
}

/// A Compose duration (`1m30s`, `10s`, `500ms`, `1h`) in whole seconds, rounded up.
fn seconds(value: &Value, field: &str, findings: &mut Findings) -> Option<u32> {
    let Some(text) = value.as_str() else {
        findings.invalid(field, "a duration such as 10s, 1m30s or 500ms");
        return None;
    };
    let mut millis: u64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        findings.invalid(field, "a duration such as 10s, 1m30s or 500ms");
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let unit_end = after.find(|c: char| c.is_ascii_digit()).unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = match unit {
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1_000,
            "ms" => 1,
            _ => 0,
        };
        let Ok(number) = number.parse::<u64>() else {
            findings.invalid(field, format!("{text:?} is not a duration such as 10s, 1m30s or 500ms"));
            return None;
        };
        if scale == 0 {
            findings.invalid(field, format!("{text:?} is not a duration such as 10s, 1m30s or 500ms"));
            return None;
        }
        millis = millis.saturating_add(number.saturating_mul(scale));
        rest = next;
    }
    u32::try_from(millis.div_ceil(1000)).ok()
}

/// The top-level named volumes, each a scratch volume; any setting of one is refused.
fn named_volumes(volumes: Option<&Value>, findings: &mut Findings) -> BTreeMap<String, ()> {
    let mut named = BTreeMap::new();
    let Some(volumes) = volumes else { return named };
    let Some(volumes) = volumes.as_object() else {
        findings.invalid("contents.volumes", "a map of volume names");
        return named;
    };
    for (name, settings) in volumes {
        match settings {
            Value::Null => {}
            Value::Object(settings) => {
                for key in settings.keys().filter(|key| !key.starts_with("x-")) {
                    findings.refuse(
                        format!("contents.volumes.{name}.{key}"),
                        "a named volume is a scratch volume of the sandbox: drivers, external and named volumes are not emulated",
                    );
                }
            }
            _ => findings.invalid(format!("contents.volumes.{name}"), "a map of settings, or empty"),
        }
        named.insert(name.clone(), ());
    }
    named
}

/// One service as a container.
fn container(
    request: &CreateSandboxFromFileRequest,
    name: &str,
    service: &Value,
    volumes: &BTreeMap<String, ()>,
    findings: &mut Findings,
) -> Container {
    let at = format!("contents.services.{name}");
    let mut container =
        Container { name: name.to_owned(), primary: Some(name == request.primary_service), ..Default::default() };
    let Some(service) = service.as_object() else {
        findings.invalid(at, "a service is a map");
        return container;
    };
    let mut entrypoint: Option<Vec<String>> = None;
    let mut command: Option<Vec<String>> = None;
    let mut has_resources = false;
    for (key, value) in service {
        let field = format!("{at}.{key}");
        match key.as_str() {
            "image" => container.image = text(value, &field, findings).unwrap_or_default(),
            // Beside an image (the file's or an override) the build is skipped; checked below.
            "build" => {}
            "command" => command = words(value, &field, findings),
            "entrypoint" => entrypoint = words(value, &field, findings),
            "environment" => container.environment_variables = environment(value, &field, findings),
            "working_dir" => container.working_dir = text(value, &field, findings).unwrap_or_default(),
            "user" => container.security_context = user(value, &field, findings),
            "volumes" => container.volume_mounts = mounts(value, &field, volumes, findings),
            "deploy" => {
                if let Some(requirements) = service_resources(value, &field, findings) {
                    container.resource_requirements = Some(requirements);
                    has_resources = true;
                }
            }
            "healthcheck" => container.startup_probe = healthcheck(value, &field, findings),
            // Read once every container is known (`dependencies`).
            "depends_on" => {}
            "expose" => exposed(value, &field, findings),
            extension if extension.starts_with("x-") => {}
            other => findings.refuse(field, why_not(other)),
        }
    }
    if let Some(image) = request.image_overrides.get(name) {
        container.image = image.clone();
    }
    if container.image.is_empty() {
        if service.contains_key("build") {
            findings.refuse(
                format!("{at}.build"),
                "no image is built: give the service an `image`, or an image in image_overrides",
            );
        } else {
            findings.invalid(format!("{at}.image"), "required (or an image in image_overrides)");
        }
    }
    // Compose's entrypoint is the program, its command the arguments; a command alone runs as is.
    let argv: Vec<String> = entrypoint.into_iter().flatten().chain(command.into_iter().flatten()).collect();
    if let Some((program, args)) = argv.split_first() {
        container.command = program.clone();
        container.args = args.to_vec();
    }
    if !has_resources {
        container.resource_requirements = request.default_resources.clone();
    }
    container
}

/// `expose`: ports (`8080`, `"8080/tcp"`) the Pod's containers reach on its loopback anyway.
fn exposed(value: &Value, field: &str, findings: &mut Findings) {
    let Some(items) = value.as_array() else {
        findings.invalid(field, "a list of ports");
        return;
    };
    for (index, item) in items.iter().enumerate() {
        let at = format!("{field}[{index}]");
        let Some(port) = text(item, &at, findings) else { continue };
        let number = port.split_once('/').map_or(port.as_str(), |(number, _)| number);
        if number.parse::<u16>().map_or(true, |port| port == 0) {
            findings.invalid(at, format!("{port:?} is not a port (1-65535, optionally /tcp or /udp)"));
        }
    }
}

/// A string value (numbers and booleans as YAML writes them), interpolation refused.
fn text(value: &Value, field: &str, findings: &mut Findings) -> Option<String> {
    let raw = match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        _ => {
            findings.invalid(field, "a string");
            return None;
        }
    };
    literal(&raw, field, findings)
}

/// `text` with Compose's `$$` escape undone; `$NAME` and `${…}` would be interpolated from the
/// shell's environment by Compose, and there is none here.
fn literal(raw: &str, field: &str, findings: &mut Findings) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(character) = chars.next() {
        if character != '$' {
            out.push(character);
            continue;
        }
        match chars.peek() {
            Some('$') => {
                chars.next();
                out.push('$');
            }
            Some(next) if *next == '{' || *next == '_' || next.is_ascii_alphabetic() => {
                findings.refuse(
                    field,
                    "variable interpolation is not emulated (no shell environment to take values from); write `$$` for a literal `$`",
                );
                return None;
            }
            _ => out.push('$'),
        }
    }
    Some(out)
}

/// `command` or `entrypoint`: a list of words, or a string split as shell words.
fn words(value: &Value, field: &str, findings: &mut Findings) -> Option<Vec<String>> {
    match value {
        Value::Array(items) => items.iter().map(|item| text(item, field, findings)).collect(),
        Value::String(line) => {
            let line = literal(line, field, findings)?;
            let split = shlex::split(&line);
            if split.is_none() {
                findings.invalid(field, "unbalanced quotes");
            }
            split
        }
        Value::Null => Some(Vec::new()),
        _ => {
            findings.invalid(field, "a string or a list of strings");
            None
        }
    }
}

/// `environment`: a map, or a list of `KEY=VALUE`; a key without a value (taken from the shell by
/// Compose) is refused.
fn environment(value: &Value, field: &str, findings: &mut Findings) -> HashMap<String, String> {
    let inherited = "a variable without a value takes the shell's by Compose; there is no shell environment here";
    let mut env = HashMap::new();
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                if value.is_null() {
                    findings.refuse(format!("{field}.{key}"), inherited);
                } else if let Some(value) = text(value, &format!("{field}.{key}"), findings) {
                    env.insert(key.clone(), value);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let at = format!("{field}[{index}]");
                let Some(entry) = text(item, &at, findings) else { continue };
                match entry.split_once('=') {
                    Some((key, value)) => {
                        env.insert(key.to_owned(), value.to_owned());
                    }
                    None => findings.refuse(at, inherited),
                }
            }
        }
        _ => findings.invalid(field, "a map, or a list of KEY=VALUE"),
    }
    env
}

/// `user`: `uid` or `uid:gid`, numbers (names would need the image's user database).
fn user(value: &Value, field: &str, findings: &mut Findings) -> Option<SecurityContext> {
    let text = text(value, field, findings)?;
    let (uid, gid) = match text.split_once(':') {
        Some((uid, gid)) => (uid, Some(gid)),
        None => (text.as_str(), None),
    };
    let number = |part: &str| part.parse::<u32>().ok();
    match (number(uid), gid.map(number)) {
        (Some(uid), None) => Some(SecurityContext { run_as_user: Some(uid), ..Default::default() }),
        (Some(uid), Some(Some(gid))) => {
            Some(SecurityContext { run_as_user: Some(uid), run_as_group: Some(gid), ..Default::default() })
        }
        _ => {
            findings.refuse(field, "only numeric uid[:gid] is emulated: user names need the image's user database");
            None
        }
    }
}

/// A service's `volumes`: named volumes only.
fn mounts(value: &Value, field: &str, volumes: &BTreeMap<String, ()>, findings: &mut Findings) -> Vec<VolumeMount> {
    let Some(items) = value.as_array() else {
        findings.invalid(field, "a list of mounts");
        return Vec::new();
    };
    let mut mounts = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("{field}[{index}]");
        let mount = match item {
            Value::String(short) => short_mount(short, &at, findings),
            Value::Object(long) => long_mount(long, &at, findings),
            _ => {
                findings.invalid(&at, "a mount string or map");
                None
            }
        };
        let Some(mount) = mount else { continue };
        if volumes.contains_key(&mount.volume) {
            mounts.push(mount);
        } else {
            findings.invalid(at, format!("no volume named {:?} in the file's top-level volumes", mount.volume));
        }
    }
    mounts
}

/// `name:/path[:ro|rw]`.
fn short_mount(short: &str, at: &str, findings: &mut Findings) -> Option<VolumeMount> {
    let parts: Vec<&str> = short.split(':').collect();
    let (source, target, mode) = match parts.as_slice() {
        [source, target] => (*source, *target, "rw"),
        [source, target, mode] => (*source, *target, *mode),
        [_] => {
            findings.refuse(at, "anonymous volumes are not emulated: name the volume in the top-level volumes");
            return None;
        }
        _ => {
            findings.invalid(at, "source:target[:mode]");
            return None;
        }
    };
    if source.starts_with(['/', '.', '~']) {
        findings.refuse(at, "bind mounts are not emulated: no host path is shared with the sandbox");
        return None;
    }
    let read_only = match mode {
        "ro" => true,
        "rw" => false,
        other => {
            findings.refuse(at, format!("mount mode {other:?} is not emulated (ro and rw are)"));
            return None;
        }
    };
    Some(VolumeMount { volume: source.to_owned(), mount_path: target.to_owned(), read_only, sub_path: String::new() })
}

/// `{type: volume, source, target, read_only}`.
fn long_mount(long: &serde_json::Map<String, Value>, at: &str, findings: &mut Findings) -> Option<VolumeMount> {
    let mut mount = VolumeMount::default();
    for (key, value) in long {
        let field = format!("{at}.{key}");
        match (key.as_str(), value) {
            ("type", Value::String(kind)) if kind == "volume" => {}
            ("type", _) => {
                findings.refuse(field, "only `type: volume` (a named volume) is emulated");
                return None;
            }
            ("source", Value::String(source)) => mount.volume = source.clone(),
            ("target", Value::String(target)) => mount.mount_path = target.clone(),
            ("read_only", Value::Bool(read_only)) => mount.read_only = *read_only,
            ("source" | "target" | "read_only", _) => findings.invalid(field, "wrong type"),
            (extension, _) if extension.starts_with("x-") => {}
            _ => findings.refuse(field, "not emulated"),
        }
    }
    if mount.volume.is_empty() {
        findings.refuse(at, "anonymous volumes are not emulated: name the volume in the top-level volumes");
        return None;
    }
    Some(mount)
}

/// `deploy`: its `resources` only, as requests (reservations) and limits; `None` when it gives
/// none.
fn service_resources(value: &Value, field: &str, findings: &mut Findings) -> Option<ResourceRequirements> {
    let Some(deploy) = value.as_object() else {
        findings.invalid(field, "a map");
        return None;
    };
    let mut requirements = None;
    for (key, value) in deploy {
        let at = format!("{field}.{key}");
        match key.as_str() {
            "resources" => {
                let Some(resources) = value.as_object() else {
                    findings.invalid(at, "a map");
                    continue;
                };
                let mut found = ResourceRequirements::default();
                for (side, amounts) in resources {
                    let side_at = format!("{at}.{side}");
                    let target = match side.as_str() {
                        "limits" => &mut found.limits,
                        "reservations" => &mut found.requests,
                        _ => {
                            findings.refuse(side_at, "only limits and reservations are emulated");
                            continue;
                        }
                    };
                    *target = Some(amounts_of(amounts, &side_at, findings));
                }
                requirements = Some(found);
            }
            extension if extension.starts_with("x-") => {}
            _ => findings.refuse(at, "only deploy.resources is emulated"),
        }
    }
    requirements
}

/// `cpus` and `memory` as Kubernetes quantities.
fn amounts_of(value: &Value, field: &str, findings: &mut Findings) -> Resources {
    let mut resources = Resources::default();
    let Some(amounts) = value.as_object() else {
        findings.invalid(field, "a map");
        return resources;
    };
    for (key, value) in amounts {
        let at = format!("{field}.{key}");
        match key.as_str() {
            "cpus" => resources.cpu = text(value, &at, findings).unwrap_or_default(),
            "memory" => match text(value, &at, findings).map(|bytes| memory_quantity(&bytes)) {
                Some(Some(quantity)) => resources.memory = quantity,
                Some(None) => findings.invalid(at, "a byte value such as 512m or 1g"),
                None => {}
            },
            _ => findings.refuse(at, "only cpus and memory are emulated"),
        }
    }
    resources
}

/// A Compose byte value (`512m`, `1g`, `1024`; units of 1024) as a Kubernetes quantity.
fn memory_quantity(bytes: &str) -> Option<String> {
    let lower = bytes.trim().to_ascii_lowercase();
    let digits_end =
        lower.find(|character: char| !(character.is_ascii_digit() || character == '.')).unwrap_or(lower.len());
    let (amount, unit) = lower.split_at(digits_end);
    let suffix = match unit.trim_end_matches('b') {
        "" => "",
        "k" => "Ki",
        "m" => "Mi",
        "g" => "Gi",
        "t" => "Ti",
        _ => return None,
    };
    amount.parse::<f64>().ok()?;
    Some(format!("{amount}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(primary: &str) -> CreateSandboxFromFileRequest {
        CreateSandboxFromFileRequest {
            r#type: SandboxFileType::Compose as i32,
            contents: b"x".to_vec(),
            primary_service: primary.to_owned(),
            ..Default::default()
        }
    }

    fn tree(json: serde_json::Value) -> Value {
        json
    }

    fn spec_of(request: &CreateSandboxFromFileRequest, file: &Value) -> SimResult<SandboxSpec> {
        sandbox_spec(request, file, &ServiceOrder::default()).map(|(spec, _)| spec)
    }

    fn fields(error: SimError) -> Vec<String> {
        error.violations().iter().map(|violation| violation.field.clone()).collect()
    }

    #[test]
    fn pull_credentials_go_to_the_services_of_their_registry_and_an_unused_one_is_refused() {
        use cwsandbox_api::sandbox_v1::{ImagePullCredentials, SecretSource};
        let file = tree(serde_json::json!({"services": {
            "web": {"image": "ghcr.io/team/web:1"},
            "db": {"image": "postgres:16"},
        }}));
        let credentials = |registry: &str| ImagePullCredentials {
            registry: registry.to_owned(),
            credentials: Some(SecretSource { store_name: "s".to_owned(), path: "p".to_owned(), field: String::new() }),
        };
        let mut asking = request("web");
        asking.image_pull_credentials = vec![credentials("ghcr.io")];
        let spec = spec_of(&asking, &file).unwrap();
        let registry_of = |name: &str| {
            let container = spec.containers.iter().find(|container| container.name == name).unwrap();
            container.image_pull_credentials.as_ref().map(|credentials| credentials.registry.clone())
        };
        assert_eq!((registry_of("web"), registry_of("db")), (Some("ghcr.io".to_owned()), None));
        asking.image_pull_credentials.push(credentials("quay.io"));
        let error = spec_of(&asking, &file).unwrap_err();
        assert_eq!(fields(error), ["image_pull_credentials[1].registry"]);
    }

    #[test]
    fn services_become_containers_in_the_files_order() {
        let file = tree(serde_json::json!({
            "version": "3.9",
            "services": {
                "web": {
                    "image": "python:3.11",
                    "entrypoint": ["sh", "-c"],
                    "command": "'echo $$HOME; sleep 5'",
                    "environment": {"ROLE": "web", "N": 3},
                    "working_dir": "/srv",
                    "user": "1000:1001",
                    "volumes": ["data:/data:ro"],
                    "deploy": {"resources": {"limits": {"cpus": "0.5", "memory": "512m"}}},
                },
                "cache": {"image": "redis:7", "environment": ["MODE=side"], "volumes": [{"type": "volume", "source": "data", "target": "/cache"}]},
            },
            "volumes": {"data": null},
            "x-note": {"anything": true},
        }));
        let order = ServiceOrder(vec!["web".to_owned(), "cache".to_owned()]);
        let (spec, plan) = sandbox_spec(&request("web"), &file, &order).unwrap();
        assert_eq!(plan.host_aliases, ["web", "cache"], "every service's name resolves in the Pod");
        let web = &spec.containers[0];
        assert_eq!((web.name.as_str(), web.primary), ("web", Some(true)));
        assert_eq!(web.command, "sh");
        assert_eq!(web.args, ["-c", "echo $HOME; sleep 5"]);
        assert_eq!(web.environment_variables["N"], "3");
        assert_eq!(web.working_dir, "/srv");
        let context = web.security_context.clone().unwrap();
        assert_eq!((context.run_as_user, context.run_as_group), (Some(1000), Some(1001)));
        assert!(web.volume_mounts[0].read_only);
        let limits = web.resource_requirements.clone().unwrap().limits.unwrap();
        assert_eq!((limits.cpu.as_str(), limits.memory.as_str()), ("0.5", "512Mi"));
        let cache = &spec.containers[1];
        assert_eq!((cache.name.as_str(), cache.primary), ("cache", Some(false)));
        assert_eq!(cache.environment_variables["MODE"], "side");
        assert_eq!(cache.volume_mounts[0].mount_path, "/cache");
        assert_eq!(spec.volumes.len(), 1);
    }

    #[test]
    fn keys_that_are_not_emulated_are_refused_by_name() {
        let file = tree(serde_json::json!({
            "name": "project",
            "services": {
                "web": {"build": ".", "ports": ["8080:80"], "volumes": ["./src:/src"], "environment": ["HOME"]},
                "db": {"image": "postgres", "command": "run ${PORT}", "user": "postgres"},
            },
        }));
        let error = spec_of(&request("web"), &file).unwrap_err();
        assert_eq!(error.reason(), Some(Reason::NotImplemented));
        let mut named = fields(error);
        named.sort();
        assert_eq!(
            named,
            [
                "contents.services.db.command",
                "contents.services.db.user",
                "contents.services.web.build",
                "contents.services.web.environment[0]",
                "contents.services.web.ports",
                "contents.services.web.volumes[0]",
            ]
        );
    }

    #[test]
    fn an_image_override_skips_the_build_and_bad_input_is_invalid() {
        let file = tree(serde_json::json!({"services": {"web": {"build": "."}}}));
        let mut with_override = request("web");
        with_override.image_overrides.insert("web".to_owned(), "python:3.11".to_owned());
        assert_eq!(spec_of(&with_override, &file).unwrap().containers[0].image, "python:3.11");

        with_override.image_overrides.insert("ghost".to_owned(), "x".to_owned());
        let error = spec_of(&with_override, &file).unwrap_err();
        assert_eq!(error.reason(), Some(Reason::InvalidRequest));
        assert_eq!(fields(error), ["image_overrides.ghost"]);
        assert_eq!(fields(spec_of(&request("nope"), &file).unwrap_err()), ["primary_service"]);
    }

    #[test]
    fn memory_values_convert_to_quantities() {
        assert_eq!(memory_quantity("512m").as_deref(), Some("512Mi"));
        assert_eq!(memory_quantity("1GB").as_deref(), Some("1Gi"));
        assert_eq!(memory_quantity("1024").as_deref(), Some("1024"));
        assert_eq!(memory_quantity("lots"), None);
    }

    #[test]
    fn the_type_and_the_size_cap_are_checked_before_the_file_is_read() {
        let mut oversized = request("web");
        oversized.contents = vec![b'#'; MAX_CONTENTS_BYTES + 1];
        assert_eq!(fields(contents(&oversized).unwrap_err()), ["contents"]);
        let untyped = CreateSandboxFromFileRequest { r#type: 0, ..request("web") };
        assert_eq!(fields(contents(&untyped).unwrap_err()), ["type"]);
        assert_eq!(contents(&request("web")).unwrap(), "x");
    }

    #[test]
    fn depends_on_and_healthchecks_make_the_start_plan() {
        let file = tree(serde_json::json!({
            "name": "project",
            "services": {
                "cache": {
                    "image": "redis:7",
                    "expose": ["6379", 6380, "6381/tcp"],
                    "healthcheck": {"test": ["CMD", "redis-cli", "ping"], "interval": "1s", "timeout": "500ms", "retries": 15, "start_period": "5s"},
                },
                "setup": {"image": "busybox", "healthcheck": {"test": "true", "disable": true}},
                "api": {
                    "image": "python:3.12-slim",
                    "depends_on": {"cache": {"condition": "service_healthy", "restart": true}, "setup": {"condition": "service_completed_successfully"}},
                    "healthcheck": {"test": ["CMD-SHELL", "curl -f localhost"], "interval": "1m30s"},
                },
                "main": {"image": "ubuntu:22.04", "depends_on": ["api"]},
            },
        }));
        let order = ServiceOrder(["cache", "setup", "api", "main"].map(str::to_owned).to_vec());
        let (spec, plan) = sandbox_spec(&request("main"), &file, &order).unwrap();
        let names: Vec<&str> = spec.containers.iter().map(|container| container.name.as_str()).collect();
        assert_eq!(names, ["cache", "setup", "api", "main"], "the file's order");
        let cache = spec.containers[0].startup_probe.clone().unwrap();
        assert_eq!(cache.exec, ["redis-cli", "ping"]);
        assert_eq!((cache.period_seconds, cache.timeout_seconds), (1, 1));
        assert_eq!(cache.failure_threshold, 20, "15 retries and 5 s of start period at 1 s");
        assert_eq!(spec.containers[1].startup_probe, None, "disabled");
        let api = spec.containers[2].startup_probe.clone().unwrap();
        assert_eq!(
            (api.exec.as_slice(), api.period_seconds),
            (&["/bin/sh".to_owned(), "-c".to_owned(), "curl -f localhost".to_owned()][..], 90)
        );
        let condition = |name: &str| -> Vec<(String, StartCondition)> {
            plan.after
                .get(name)
                .into_iter()
                .flatten()
                .map(|dependency| (dependency.container.clone(), dependency.condition))
                .collect()
        };
        assert_eq!(
            condition("api"),
            [
                ("cache".to_owned(), StartCondition::Healthy),
                ("setup".to_owned(), StartCondition::CompletedSuccessfully)
            ]
        );
        assert_eq!(condition("main"), [("api".to_owned(), StartCondition::Started)]);
    }

    #[test]
    fn impossible_dependencies_are_named() {
        let file = |services: serde_json::Value| tree(serde_json::json!({"services": services}));
        let unhealthy = file(serde_json::json!({
            "a": {"image": "x", "depends_on": {"b": {"condition": "service_healthy"}}},
            "b": {"image": "x"},
            "main": {"image": "x", "depends_on": ["ghost"]},
        }));
        let mut named = fields(spec_of(&request("main"), &unhealthy).unwrap_err());
        named.sort();
        assert_eq!(named, ["contents.services.a.depends_on.b", "contents.services.main.depends_on[0]"]);
        let cycle = file(serde_json::json!({
            "a": {"image": "x", "depends_on": ["b"]},
            "b": {"image": "x", "depends_on": ["a"]},
            "main": {"image": "x"},
        }));
        let error = spec_of(&request("main"), &cycle).unwrap_err();
        assert!(error.to_string().contains("a dependency cycle: a -> b -> a"), "{error}");
        let on_primary = file(serde_json::json!({"a": {"image": "x", "depends_on": ["main"]}, "main": {"image": "x"}}));
        let error = spec_of(&request("main"), &on_primary).unwrap_err();
        assert_eq!(
            (error.reason(), fields(error)),
            (Some(Reason::NotImplemented), vec!["contents.services.a.depends_on[0]".to_owned()])
        );
        let bad = file(
            serde_json::json!({"main": {"image": "x", "healthcheck": {"test": ["CMD"], "interval": "soon"}, "expose": ["http"]}}),
        );
        let mut named = fields(spec_of(&request("main"), &bad).unwrap_err());
        named.sort();
        assert_eq!(
            named,
            [
                "contents.services.main.expose[0]",
                "contents.services.main.healthcheck.interval",
                "contents.services.main.healthcheck.test"
            ]
        );
    }

    #[test]
    fn durations_read_as_compose_writes_them() {
        let mut findings = Findings::default();
        let read = |text: &str, findings: &mut Findings| seconds(&Value::String(text.to_owned()), "f", findings);
        assert_eq!(read("10s", &mut findings), Some(10));
        assert_eq!(read("1m30s", &mut findings), Some(90));
        assert_eq!(read("500ms", &mut findings), Some(1));
        assert_eq!(read("1h", &mut findings), Some(3600));
        assert!(findings.invalid.is_empty());
        assert_eq!(read("5", &mut findings), None);
        assert_eq!(read("later", &mut findings), None);
        assert_eq!(findings.invalid.len(), 2);
    }

    #[test]
    fn the_service_order_is_read_from_yaml_as_written() {
        let order: FileOrder = serde_json::from_str(r#"{"services": {"zeta": {}, "alpha": {}}}"#).unwrap();
        assert_eq!(order.services.0.len(), 2);
        let empty: FileOrder = serde_json::from_str("{}").unwrap();
        assert!(empty.services.0.is_empty());
    }
}
