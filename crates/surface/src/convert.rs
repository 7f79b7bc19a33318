//! Conversions between the API's messages and the simulation's types, in one place. Handlers
//! call these and nothing else to cross the boundary. The emulator's own API has its conversions
//! in [`emulator`].

pub mod emulator;

use std::collections::BTreeSet;

use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::wkt::Timestamp;
use cwsandbox_sim::quantity::{Quantity, format_bytes};
use cwsandbox_sim::resolved::ResourceAmounts;
use cwsandbox_sim::sandbox::{DEFAULT_ENDPOINT_REQUEST_TIMEOUT_SECONDS, SandboxFilter, SandboxState, SandboxView};
use cwsandbox_sim::templates::{Template, TemplateInput};
use cwsandbox_sim::time::SimTime;

use crate::direct::{Issued, Permission};
use crate::errors::ApiError;

/// A simulated time as a protobuf Timestamp.
pub fn timestamp(time: SimTime) -> Timestamp {
    let millis = time.millis();
    Timestamp { seconds: millis.div_euclid(1000), nanos: (millis.rem_euclid(1000) * 1_000_000) as i32 }
}

/// A protobuf Timestamp as a simulated time (millisecond precision).
pub fn sim_time(timestamp: &Timestamp) -> SimTime {
    SimTime::from_millis(timestamp.seconds.saturating_mul(1000).saturating_add(i64::from(timestamp.nanos) / 1_000_000))
}

/// The API's state of a sandbox state.
pub fn state(state: SandboxState) -> pb::State {
    match state {
        SandboxState::Creating => pb::State::Creating,
        SandboxState::Pending => pb::State::Pending,
        SandboxState::Running => pb::State::Running,
        SandboxState::Terminating => pb::State::Terminating,
        SandboxState::Completed => pb::State::Completed,
        SandboxState::Failed => pb::State::Failed,
        SandboxState::Terminated => pb::State::Terminated,
    }
}

/// What a ListSandboxes `state` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    /// No filter.
    Any,
    /// Only this state.
    Only(SandboxState),
    /// A state the emulator never reports (PAUSED, PREPARING): nothing matches.
    Never,
}

/// The state filter of ListSandboxes.
pub fn state_filter(value: i32) -> Result<StateFilter, ApiError> {
    let only = |state| Ok(StateFilter::Only(state));
    match pb::State::try_from(value) {
        Ok(pb::State::Unspecified) => Ok(StateFilter::Any),
        Ok(pb::State::Creating) => only(SandboxState::Creating),
        Ok(pb::State::Pending) => only(SandboxState::Pending),
        Ok(pb::State::Running) => only(SandboxState::Running),
        Ok(pb::State::Terminating) => only(SandboxState::Terminating),
        Ok(pb::State::Completed) => only(SandboxState::Completed),
        Ok(pb::State::Failed) => only(SandboxState::Failed),
        Ok(pb::State::Terminated) => only(SandboxState::Terminated),
        Ok(pb::State::Paused | pb::State::Preparing) => Ok(StateFilter::Never),
        Err(_) => Err(ApiError::invalid_field("state", format!("unknown state {value}"))),
    }
}

/// The filter of a ListSandboxes request (the state is converted separately).
pub fn sandbox_filter(request: &pb::ListSandboxesRequest, state: Option<SandboxState>) -> SandboxFilter {
    SandboxFilter {
        tags: request.tags.clone(),
        state,
        runner_ids: request.runner_ids.clone(),
        show_terminated: request.show_terminated,
        descending: request.sort_direction == pb::SortDirection::Descending as i32,
        volume_ids: request.volume_ids.clone(),
    }
}

/// The status of a sandbox's services: each port as asked, with where the host serves it (an
/// `http://` URL, an HTTPS endpoint's `https://` URL, or a TLS_PASSTHROUGH endpoint's
/// `host:port`) once it is published and while the sandbox has not ended. An unset visibility
/// reads PRIVATE: the port is on the host's loopback. An HTTPS endpoint echoes its effective
/// request timeout (15 s when it asked for none).
fn services(view: &SandboxView, asked: &[pb::Service]) -> Vec<pb::ServiceStatus> {
    asked
        .iter()
        .map(|service| {
            let address =
                view.published.iter().find(|(port, _)| *port == service.port).map(|(_, address)| address.clone());
            let visibility = if service.visibility == pb::Visibility::Unspecified as i32 {
                pb::Visibility::Private as i32
            } else {
                service.visibility
            };
            let (endpoint, url) = match &service.endpoint {
                Some(endpoint) if endpoint.kind == pb::EndpointKind::Https as i32 => (
                    Some(pb::EndpointStatus {
                        kind: endpoint.kind,
                        auth: endpoint.auth,
                        url: address.map(|address| format!("https://{address}")).unwrap_or_default(),
                        request_timeout_seconds: if endpoint.request_timeout_seconds > 0 {
                            endpoint.request_timeout_seconds
                        } else {
                            DEFAULT_ENDPOINT_REQUEST_TIMEOUT_SECONDS
                        },
                        address: String::new(),
                    }),
                    String::new(),
                ),
                Some(endpoint) => (
                    Some(pb::EndpointStatus {
                        kind: endpoint.kind,
                        auth: endpoint.auth,
                        url: String::new(),
                        request_timeout_seconds: endpoint.request_timeout_seconds,
                        address: address.unwrap_or_default(),
                    }),
                    String::new(),
                ),
                None => (None, address.map(|address| format!("http://{address}")).unwrap_or_default()),
            };
            pb::ServiceStatus {
                port: service.port,
                name: service.name.clone(),
                protocol: pb::ServiceProtocol::Tcp as i32,
                visibility,
                endpoint,
                url,
            }
        })
        .collect()
}

/// The spec and display name of a CreateSandbox body; the simulation normalizes the spec.
pub fn sandbox_input(sandbox: Option<pb::Sandbox>) -> Result<(pb::SandboxSpec, String), ApiError> {
    let sandbox = sandbox.ok_or_else(|| ApiError::missing_field("sandbox"))?;
    let spec = sandbox.spec.ok_or_else(|| ApiError::missing_field("sandbox.spec"))?;
    Ok((spec, sandbox.display_name))
}

fn cpu_text(quantity: Option<Quantity>) -> String {
    quantity.map(|quantity| quantity.to_string()).unwrap_or_default()
}

fn memory_text(quantity: Option<Quantity>) -> String {
    quantity.map(|quantity| format_bytes(quantity.units_ceil())).unwrap_or_default()
}

/// One side of the effective resources: the caller's own strings where it gave them (echoed
/// verbatim), the resolved values (defaults, policy) elsewhere.
fn effective_side(asked: Option<&pb::Resources>, resolved: &ResourceAmounts) -> Option<pb::Resources> {
    let cpu =
        asked.map(|asked| asked.cpu.clone()).filter(|cpu| !cpu.is_empty()).unwrap_or_else(|| cpu_text(resolved.cpu));
    let memory = asked
        .map(|asked| asked.memory.clone())
        .filter(|memory| !memory.is_empty())
        .unwrap_or_else(|| memory_text(resolved.memory));
    let gpu = match (asked.and_then(|asked| asked.gpu.clone()), resolved.gpu) {
        (Some(gpu), _) => Some(gpu),
        (None, Some(count)) if count > 0 => Some(pb::Gpu { count, selector: None }),
        _ => None,
    };
    if cpu.is_empty() && memory.is_empty() && gpu.is_none() {
        return None;
    }
    Some(pb::Resources { cpu, memory, gpu })
}

/// What `status.effective_runtime_class` says when no named RuntimeClass resolved (no class
/// asked, none by policy, or a mapping to `node_default`): the Pod runs on its Node's default
/// runtime. The service never echoes an empty class; the published client's suite reads this
/// sentinel as "the node's default" (`_required_runtime_class` in its `test_sandbox.py`).
pub const NODE_DEFAULT_RUNTIME_CLASS: &str = "<node-default>";

/// A sandbox as the API shows it. `spec.network` is input only and is not echoed.
pub fn sandbox(view: &SandboxView) -> pb::Sandbox {
    let mut spec = view.spec();
    spec.network = None;
    let main = view.main_container_index();
    let resolved_main = main.and_then(|index| view.resolved.containers.get(index));
    let asked_main = main
        .and_then(|index| spec.containers.get(index))
        .and_then(|container| container.resource_requirements.as_ref());
    let effective_requirements = resolved_main.map(|resolved| pb::ResourceRequirements {
        requests: effective_side(asked_main.and_then(|asked| asked.requests.as_ref()), &resolved.requests),
        limits: effective_side(asked_main.and_then(|asked| asked.limits.as_ref()), &resolved.limits),
    });
    let sandbox_state = state(view.state);
    let container_statuses = view
        .resolved
        .containers
        .iter()
        .map(|container| {
            // A sidecar whose command ended shows its own end while the sandbox runs on.
            let ended = view.ended_containers.iter().find(|(name, _)| *name == container.name);
            let (state, exit_code) = match ended {
                Some((_, 0)) => (pb::State::Completed, 0),
                Some((_, code)) => (pb::State::Failed, *code),
                None if view.state.is_terminal() => (sandbox_state, view.exit_code.unwrap_or(0)),
                None => (sandbox_state, 0),
            };
            pb::ContainerStatus { name: container.name.clone(), state: state as i32, exit_code, restart_count: 0 }
        })
        .collect();
    let status = pb::SandboxStatus {
        state: sandbox_state as i32,
        state_reason: view.state_reason.clone(),
        create_time: Some(timestamp(view.created)),
        start_time: view.started.map(timestamp),
        end_time: view.ended.map(timestamp),
        exit_code: view.exit_code,
        effective_resources: effective_requirements.as_ref().and_then(|requirements| requirements.requests.clone()),
        effective_max_lifetime_seconds: view.resolved.max_lifetime_seconds,
        container_statuses,
        attached_volume_ids: view.attached_volume_ids.clone(),
        services: services(view, &spec.services),
        runner_id: view.runner_id.clone(),
        runner_group_id: view.runner_group_id.clone(),
        effective_ingress: view.resolved.ingress.clone(),
        effective_egress: view.resolved.egress.clone(),
        effective_resource_requirements: effective_requirements,
        effective_runtime_class: view
            .resolved
            .runtime_class
            .clone()
            .unwrap_or_else(|| NODE_DEFAULT_RUNTIME_CLASS.to_owned()),
        effective_dns_egress: view.resolved.dns_egress as i32,
        ..Default::default()
    };
    let (source_template_id, source_template_revision) = view.source_template.clone().unwrap_or_default();
    pb::Sandbox {
        sandbox_id: view.id.to_string(),
        spec: Some(spec),
        status: Some(status),
        display_name: view.display_name.clone(),
        source_template_id,
        source_template_revision,
        ..Default::default()
    }
}

/// A template's settings as a create or update request carries them (`sandbox_template`, required;
/// its output-only fields are ignored).
pub fn template_input(template: Option<pb::SandboxTemplate>) -> Result<TemplateInput, ApiError> {
    let template = template.ok_or_else(|| ApiError::missing_field("sandbox_template"))?;
    Ok(TemplateInput { display_name: template.display_name, spec: template.spec })
}

/// A template as the API shows it.
pub fn template(template: &Template) -> pb::SandboxTemplate {
    pb::SandboxTemplate {
        sandbox_template_id: template.id.clone(),
        display_name: template.display_name.clone(),
        spec: Some(template.spec.clone()),
        revision: template.revision,
        create_time: Some(timestamp(template.created)),
        update_time: Some(timestamp(template.updated)),
        delete_time: template.deleted.map(timestamp),
        create_user_id: template.create_user.clone(),
        deleted: template.deleted.is_some(),
        attachments: None,
        requires_cks: template.requires_cks(),
    }
}

/// ConnectSandbox's requested permissions: at least one, each a known operation (duplicates
/// collapse).
pub fn data_permissions(requested: &[i32]) -> Result<BTreeSet<Permission>, ApiError> {
    use pb::SandboxDataPermission as Asked;
    if requested.is_empty() {
        return Err(ApiError::missing_field("requested_permissions"));
    }
    requested
        .iter()
        .enumerate()
        .map(|(index, value)| {
            Ok(match Asked::try_from(*value) {
                Ok(Asked::Exec) => Permission::Exec,
                Ok(Asked::StreamExec) => Permission::StreamExec,
                Ok(Asked::StreamLogs) => Permission::StreamLogs,
                Ok(Asked::WriteFile) => Permission::WriteFile,
                Ok(Asked::ReadFile) => Permission::ReadFile,
                Ok(Asked::Unspecified) | Err(_) => {
                    return Err(ApiError::invalid_field(
                        &format!("requested_permissions[{index}]"),
                        format!("{value} is not a data operation (SANDBOX_DATA_PERMISSION_EXEC … _READ_FILE)"),
                    ));
                }
            })
        })
        .collect()
}

/// The API's value of a data permission.
fn data_permission(permission: Permission) -> pb::SandboxDataPermission {
    match permission {
        Permission::Exec => pb::SandboxDataPermission::Exec,
        Permission::StreamExec => pb::SandboxDataPermission::StreamExec,
        Permission::StreamLogs => pb::SandboxDataPermission::StreamLogs,
        Permission::WriteFile => pb::SandboxDataPermission::WriteFile,
        Permission::ReadFile => pb::SandboxDataPermission::ReadFile,
    }
}

/// ConnectSandbox's answer: the endpoint, the certificates and what they grant.
pub fn sandbox_connection(issued: Issued) -> pb::SandboxConnection {
    pb::SandboxConnection {
        endpoint_uri: issued.endpoint_uri,
        client_certificate_chain_pem: issued.certificate_chain_pem.into_bytes(),
        server_ca_bundle_pem: issued.ca_pem.into_bytes(),
        expires_at: Some(timestamp(issued.expires_at)),
        endpoint_id: issued.endpoint_id,
        transport: pb::SandboxDataTransport::DirectMtls as i32,
        protocol: pb::SandboxDataProtocol::ConnectH2V1 as i32,
        granted_permissions: issued
            .permissions
            .into_iter()
            .map(|permission| data_permission(permission) as i32)
            .collect(),
    }
}

/// A required string field.
pub fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, ApiError> {
    if value.trim().is_empty() { Err(ApiError::missing_field(field)) } else { Ok(value) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_at_millisecond_precision() {
        let time = SimTime::from_millis(1_764_480_000_123);
        let converted = timestamp(time);
        assert_eq!((converted.seconds, converted.nanos), (1_764_480_000, 123_000_000));
        assert_eq!(sim_time(&converted), time);
    }

    #[test]
    fn a_sandbox_body_needs_its_spec() {
        assert_eq!(sandbox_input(None).unwrap_err().violations[0].0, "sandbox");
        let no_spec = sandbox_input(Some(pb::Sandbox::default())).unwrap_err();
        assert_eq!(no_spec.violations[0].0, "sandbox.spec");
    }

    #[test]
    fn effective_resources_echo_the_callers_strings() {
        let asked = pb::Resources { cpu: "500m".to_owned(), memory: String::new(), gpu: None };
        let resolved = ResourceAmounts {
            cpu: Some(Quantity::parse("0.5").unwrap()),
            memory: Some(Quantity::parse("512Mi").unwrap()),
            gpu: None,
        };
        let side = effective_side(Some(&asked), &resolved).unwrap();
        assert_eq!((side.cpu.as_str(), side.memory.as_str()), ("500m", "512Mi"));
        assert_eq!(effective_side(None, &ResourceAmounts::default()), None);
    }
}
