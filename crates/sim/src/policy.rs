//! TEMPORARY stub, replaced on merge of the `policy` branch.
use cwsandbox_api::sandbox_v1::{Policy, SandboxSpec};

use crate::error::{FieldViolation, SimError};
use crate::quantity::Quantity;
use crate::resolved::{ResolvedContainer, ResolvedSpec, ResourceAmounts};

pub fn validate_policy(_: &Policy) -> Vec<FieldViolation> {
    Vec::new()
}

#[derive(Debug, Clone)]
pub struct RuntimeDefaults {
    pub cpu_request: Quantity,
    pub memory_request: Quantity,
    pub lifetime_seconds: i32,
}

pub fn resolve(defaults: &RuntimeDefaults, policy: Option<&Policy>, spec: &SandboxSpec) -> Result<ResolvedSpec, SimError> {
    let base = policy.and_then(|p| p.base.as_ref()).map(|b| serde_json::to_value(b).unwrap_or_default()).unwrap_or_default();
    let mut resolved = ResolvedSpec {
        scheduler_name: base["spec"]["schedulerName"].as_str().map(str::to_owned),
        max_lifetime_seconds: if spec.max_lifetime_seconds > 0 { spec.max_lifetime_seconds } else { defaults.lifetime_seconds },
        annotations: spec.annotations.clone().into_iter().collect(),
        ..ResolvedSpec::default()
    };
    if let Some(annotations) = base["metadata"]["annotations"].as_object() {
        for (k, v) in annotations {
            resolved.annotations.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
    }
    for container in &spec.containers {
        let req = container.resource_requirements.as_ref();
        let side = |r: Option<&cwsandbox_api::sandbox_v1::Resources>| ResourceAmounts {
            cpu: r.and_then(|r| Quantity::parse(&r.cpu).ok()),
            memory: r.and_then(|r| Quantity::parse(&r.memory).ok()),
            gpu: None,
        };
        let mut requests = side(req.and_then(|r| r.requests.as_ref()));
        let limits = side(req.and_then(|r| r.limits.as_ref()));
        requests.cpu = requests.cpu.or(limits.cpu).or(Some(defaults.cpu_request));
        requests.memory = requests.memory.or(limits.memory).or(Some(defaults.memory_request));
        resolved.containers.push(ResolvedContainer {
            name: container.name.clone(),
            image: container.image.clone(),
            command: (!container.command.is_empty()).then(|| container.command.clone()),
            args: container.args.clone(),
            env: container.environment_variables.clone().into_iter().collect(),
            requests,
            limits,
            ..ResolvedContainer::default()
        });
    }
    Ok(resolved)
}
