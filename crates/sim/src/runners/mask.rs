//! UpdateManagedRunner's field mask: the legal paths, output-only ones, and copying one field.

use super::*;

/// A legal update-mask path (docs/facts/runner-api.md#gap-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UpdatePath {
    DisplayName,
    RunnerGroupId,
    Policy,
    SpecReleaseChannel,
    SpecMaintenancePolicy,
    SpecOverrides,
    SpecEnforceResourceLimits,
    SpecVolumes,
    SpecTenantMetrics,
    SpecImagePull,
    SpecDataPlane,
}

/// Parses the mask, rejecting it as a whole with one violation per bad path.
pub(super) fn parse_update_mask(mask: &FieldMask) -> SimResult<Vec<UpdatePath>> {
    if mask.paths.is_empty() || mask.paths.iter().any(|path| path == "*") {
        return Err(SimError::InvalidArgument {
            reason: Reason::InvalidRequest,
            message: EXPLICIT_MASK_REQUIRED.to_owned(),
            violations: vec![FieldViolation::new("update_mask", EXPLICIT_MASK_REQUIRED)],
        });
    }
    let mut paths = Vec::new();
    let mut violations = Vec::new();
    for path in &mask.paths {
        let parsed = match path.as_str() {
            "display_name" => Ok(UpdatePath::DisplayName),
            "identity.runner_group_id" => Ok(UpdatePath::RunnerGroupId),
            "policy" => Ok(UpdatePath::Policy),
            "spec.release_channel" => Ok(UpdatePath::SpecReleaseChannel),
            "spec.maintenance_policy" => Ok(UpdatePath::SpecMaintenancePolicy),
            "spec.overrides" => Ok(UpdatePath::SpecOverrides),
            "spec.enforce_resource_limits" => Ok(UpdatePath::SpecEnforceResourceLimits),
            "spec.volumes" => Ok(UpdatePath::SpecVolumes),
            "spec.tenant_metrics" => Ok(UpdatePath::SpecTenantMetrics),
            "spec.image_pull" => Ok(UpdatePath::SpecImagePull),
            "spec.data_plane" => Ok(UpdatePath::SpecDataPlane),
            "identity.runner_id" | "identity.zone" | "identity.cluster_id" => Err(format!("`{path}` is immutable")),
            "identity" => {
                Err("`identity` cannot be replaced; the only mutable key is `identity.runner_group_id`".to_owned())
            }
            "spec" => Err("name the spec fields to change (`spec.<field>`), not `spec`".to_owned()),
            other if other.starts_with("policy.") => {
                Err(format!("`{other}`: only `policy` is supported; a policy update replaces the whole document"))
            }
            other if is_output_only_path(other) => Err(format!("`{other}` is output only")),
            other => Err(format!("unknown field path `{other}`")),
        };
        match parsed {
            Ok(parsed) if !paths.contains(&parsed) => paths.push(parsed),
            Ok(_) => {}
            Err(description) => violations.push(FieldViolation::new("update_mask", description)),
        }
    }
    if violations.is_empty() { Ok(paths) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
}

pub(super) fn is_output_only_path(path: &str) -> bool {
    let top = path.split('.').next().unwrap_or(path);
    path == "identity.cluster_name"
        || matches!(
            top,
            "etag"
                | "install_status"
                | "connection_status"
                | "active_config_version"
                | "active_revision"
                | "target_revision"
                | "update_available"
                | "rollout_in_progress"
                | "deployment_spec"
                | "install_error"
                | "data_plane_status"
                | "create_time"
                | "update_time"
                | "last_heartbeat_time"
        )
}

/// Copies one masked spec field; an absent source clears the target (a release channel cannot
/// be absent here: that was refused earlier).
pub(super) fn copy_spec_field(path: UpdatePath, from: &ManagedRunnerSpec, to: &mut ManagedRunnerSpec) {
    match path {
        UpdatePath::SpecReleaseChannel => to.release_channel = from.release_channel,
        UpdatePath::SpecMaintenancePolicy => to.maintenance_policy = from.maintenance_policy.clone(),
        UpdatePath::SpecOverrides => to.overrides = from.overrides.clone(),
        UpdatePath::SpecEnforceResourceLimits => to.enforce_resource_limits = from.enforce_resource_limits,
        UpdatePath::SpecVolumes => to.volumes = from.volumes.clone(),
        UpdatePath::SpecTenantMetrics => to.tenant_metrics = from.tenant_metrics.clone(),
        UpdatePath::SpecImagePull => to.image_pull = from.image_pull,
        UpdatePath::SpecDataPlane => to.data_plane = from.data_plane.clone(),
        UpdatePath::DisplayName | UpdatePath::RunnerGroupId | UpdatePath::Policy => {}
    }
}
