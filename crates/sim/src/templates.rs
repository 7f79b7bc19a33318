//! Sandbox templates (SandboxTemplateService): an organization's stored partial specs, revisioned
//! and soft-deleted, and the layering of CreateSandboxFromTemplate's overrides onto one.
//!
//! Overrides replace on presence, field by field of the partial spec, as the published client's
//! `run_from_template` documents: a set field (a non-empty list or map, a non-default scalar, a
//! present message) replaces the template's value whole, and an unset one keeps it. Containers
//! too: overrides that name containers replace the template's whole list, so each must be a whole
//! container (an image at least); the API "rejects a sparse patch".

use std::collections::HashMap;

use cwsandbox_api::sandbox_v1::{PartialSandboxSpec, SandboxMode, SandboxSpec};
use cwsandbox_api::wkt::FieldMask;
use prost::Message;

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::pager::Pager;
use crate::time::SimTime;

/// A stored template, as a reader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// Server-assigned id (a UUID).
    pub id: String,
    /// Its organization.
    pub org: String,
    /// Human name.
    pub display_name: String,
    /// The settings sandboxes made from it start with.
    pub spec: PartialSandboxSpec,
    /// 1 on create, one more on every update.
    pub revision: i64,
    /// When it was created.
    pub created: SimTime,
    /// When it last changed (its deletion included).
    pub updated: SimTime,
    /// When it was soft-deleted.
    pub deleted: Option<SimTime>,
    /// Who created it.
    pub create_user: String,
}

impl Template {
    /// Whether only CKS placement can use it: it names runners, which need CKS placement and
    /// which overrides cannot take away (an unset override keeps the template's value). The
    /// other reason the API gives, attachments, is refused on input.
    pub fn requires_cks(&self) -> bool {
        !self.spec.runner_ids.is_empty()
    }
}

/// The settings a create or an update writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateInput {
    /// Human name; required.
    pub display_name: String,
    /// The partial spec; `None` is the empty one.
    pub spec: Option<PartialSandboxSpec>,
}

/// Every template, by id; each is visible to its organization only.
#[derive(Debug, Clone, Default)]
pub(crate) struct Templates {
    by_id: HashMap<String, Template>,
    /// Organization → request id → template id: CreateSandboxTemplate's idempotency.
    by_request: HashMap<String, HashMap<String, (String, TemplateInput)>>,
}

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

fn not_found(id: &str) -> SimError {
    SimError::NotFound { reason: Reason::TemplateNotFound, message: format!("sandbox template {id:?} not found") }
}

impl Templates {
    /// The template an organization's request id created, and the settings it was asked with.
    pub(crate) fn created_by_request(&self, org: &str, request_id: &str) -> Option<&(String, TemplateInput)> {
        self.by_request.get(org).and_then(|requests| requests.get(request_id))
    }

    /// Stores a new template, and the request id (when there is one) that asked for it with `input`.
    pub(crate) fn insert(&mut self, template: Template, request_id: &str, input: TemplateInput) {
        if !request_id.is_empty() {
            self.by_request
                .entry(template.org.clone())
                .or_default()
                .insert(request_id.to_owned(), (template.id.clone(), input));
        }
        self.by_id.insert(template.id.clone(), template);
    }

    /// A template to change, whatever its organization.
    pub(crate) fn get_mut(&mut self, id: &str) -> SimResult<&mut Template> {
        self.by_id.get_mut(id).ok_or_else(|| not_found(id))
    }

    /// A template by id, whatever its organization.
    pub(crate) fn find(&self, id: &str) -> SimResult<Template> {
        self.by_id.get(id).cloned().ok_or_else(|| not_found(id))
    }

    /// One of the organization's templates; a deleted one only with `show_deleted`.
    pub(crate) fn get(&self, org: &str, id: &str, show_deleted: bool) -> SimResult<Template> {
        self.by_id
            .get(id)
            .filter(|template| template.org == org && (show_deleted || template.deleted.is_none()))
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// One page of the organization's templates, oldest first.
    pub(crate) fn list(
        &self,
        org: &str,
        show_deleted: bool,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<Template>, String)> {
        let filters = [if show_deleted { "all" } else { "live" }.to_owned()];
        let pager = Pager::new("sandbox_templates", filters, page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
        let invalid = || SimError::invalid_field("page_token", "not a page token of this listing");
        let after = match pager.after(page_token)?.as_deref() {
            None => None,
            Some([created, id]) => Some((created.parse::<i64>().map_err(|_| invalid())?, id.clone())),
            Some(_) => return Err(invalid()),
        };
        let mut matching: Vec<&Template> = self
            .by_id
            .values()
            .filter(|template| template.org == org && (show_deleted || template.deleted.is_none()))
            .collect();
        matching.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        let start = after.map_or(0, |(created, id)| {
            matching
                .iter()
                .position(|template| (template.created.millis(), template.id.as_str()) > (created, id.as_str()))
                .unwrap_or(matching.len())
        });
        Ok(pager.page(matching.into_iter().skip(start).cloned(), |last| {
            vec![last.created.millis().to_string(), last.id.clone()]
        }))
    }

    /// Forgets an organization's templates (its part of the world is reset).
    pub(crate) fn forget_organization(&mut self, org: &str) {
        self.by_id.retain(|_, template| template.org != org);
        self.by_request.remove(org);
    }
}

/// One field of a partial spec, for layering overrides and for update masks (`spec.tags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpecField {
    Containers,
    Volumes,
    Services,
    MaxLifetimeSeconds,
    NetworkIds,
    ObjectStorageAccess,
    Tags,
    RunnerIds,
    Network,
    Annotations,
    InstanceType,
    Mode,
    RuntimeClass,
    NetworkConfigId,
    RuntimeClassSelection,
}

impl SpecField {
    const ALL: [SpecField; 15] = [
        SpecField::Containers,
        SpecField::Volumes,
        SpecField::Services,
        SpecField::MaxLifetimeSeconds,
        SpecField::NetworkIds,
        SpecField::ObjectStorageAccess,
        SpecField::Tags,
        SpecField::RunnerIds,
        SpecField::Network,
        SpecField::Annotations,
        SpecField::InstanceType,
        SpecField::Mode,
        SpecField::RuntimeClass,
        SpecField::NetworkConfigId,
        SpecField::RuntimeClassSelection,
    ];

    /// The field's proto name.
    fn name(self) -> &'static str {
        match self {
            SpecField::Containers => "containers",
            SpecField::Volumes => "volumes",
            SpecField::Services => "services",
            SpecField::MaxLifetimeSeconds => "max_lifetime_seconds",
            SpecField::NetworkIds => "network_ids",
            SpecField::ObjectStorageAccess => "object_storage_access",
            SpecField::Tags => "tags",
            SpecField::RunnerIds => "runner_ids",
            SpecField::Network => "network",
            SpecField::Annotations => "annotations",
            SpecField::InstanceType => "instance_type",
            SpecField::Mode => "mode",
            SpecField::RuntimeClass => "runtime_class",
            SpecField::NetworkConfigId => "network_config_id",
            SpecField::RuntimeClassSelection => "runtime_class_selection",
        }
    }

    /// Whether `spec` sets the field (what "present" means for replace-on-presence).
    fn is_set(self, spec: &PartialSandboxSpec) -> bool {
        match self {
            SpecField::Containers => !spec.containers.is_empty(),
            SpecField::Volumes => !spec.volumes.is_empty(),
            SpecField::Services => !spec.services.is_empty(),
            SpecField::MaxLifetimeSeconds => spec.max_lifetime_seconds != 0,
            SpecField::NetworkIds => !spec.network_ids.is_empty(),
            SpecField::ObjectStorageAccess => spec.object_storage_access.is_some(),
            SpecField::Tags => !spec.tags.is_empty(),
            SpecField::RunnerIds => !spec.runner_ids.is_empty(),
            SpecField::Network => spec.network.is_some(),
            SpecField::Annotations => !spec.annotations.is_empty(),
            SpecField::InstanceType => !spec.instance_type.is_empty(),
            SpecField::Mode => spec.mode != SandboxMode::Unspecified as i32,
            SpecField::RuntimeClass => !spec.runtime_class.is_empty(),
            SpecField::NetworkConfigId => !spec.network_config_id.is_empty(),
            SpecField::RuntimeClassSelection => spec.runtime_class_selection.is_some(),
        }
    }

    /// Replaces the field of `to` with `from`'s.
    pub(crate) fn copy(self, to: &mut PartialSandboxSpec, from: &PartialSandboxSpec) {
        match self {
            SpecField::Containers => to.containers = from.containers.clone(),
            SpecField::Volumes => to.volumes = from.volumes.clone(),
            SpecField::Services => to.services = from.services.clone(),
            SpecField::MaxLifetimeSeconds => to.max_lifetime_seconds = from.max_lifetime_seconds,
            SpecField::NetworkIds => to.network_ids = from.network_ids.clone(),
            SpecField::ObjectStorageAccess => to.object_storage_access = from.object_storage_access.clone(),
            SpecField::Tags => to.tags = from.tags.clone(),
            SpecField::RunnerIds => to.runner_ids = from.runner_ids.clone(),
            SpecField::Network => to.network = from.network.clone(),
            SpecField::Annotations => to.annotations = from.annotations.clone(),
            SpecField::InstanceType => to.instance_type = from.instance_type.clone(),
            SpecField::Mode => to.mode = from.mode,
            SpecField::RuntimeClass => to.runtime_class = from.runtime_class.clone(),
            SpecField::NetworkConfigId => to.network_config_id = from.network_config_id.clone(),
            SpecField::RuntimeClassSelection => to.runtime_class_selection = from.runtime_class_selection,
        }
    }
}

/// What an update mask asks to change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TemplateUpdate {
    DisplayName,
    Spec,
    SpecField(SpecField),
}

/// The mask's paths; an empty mask changes the fields the patch sets (AIP-134), `*` all of them.
pub(crate) fn update_paths(mask: &FieldMask, patch: &TemplateInput) -> SimResult<Vec<TemplateUpdate>> {
    if mask.paths.is_empty() {
        let mut implied = Vec::new();
        if !patch.display_name.is_empty() {
            implied.push(TemplateUpdate::DisplayName);
        }
        if patch.spec.is_some() {
            implied.push(TemplateUpdate::Spec);
        }
        return Ok(implied);
    }
    let mut paths = Vec::new();
    let mut violations = Vec::new();
    for path in &mask.paths {
        let parsed = match path.as_str() {
            "*" => {
                paths.extend([TemplateUpdate::DisplayName, TemplateUpdate::Spec]);
                continue;
            }
            "display_name" => Ok(TemplateUpdate::DisplayName),
            "spec" => Ok(TemplateUpdate::Spec),
            // Attachments are refused when set, so the only change a mask can ask is to clear
            // what is never there.
            "attachments" => continue,
            "sandbox_template_id"
            | "revision"
            | "create_time"
            | "update_time"
            | "delete_time"
            | "create_user_id"
            | "deleted"
            | "requires_cks" => Err(format!("`{path}` is output only")),
            other => match other.strip_prefix("spec.") {
                Some(name) => SpecField::ALL
                    .into_iter()
                    .find(|field| field.name() == name)
                    .map(TemplateUpdate::SpecField)
                    .ok_or_else(|| format!("unknown field path `{other}`: the spec's fields are replaced whole")),
                None => Err(format!("unknown field path `{other}`")),
            },
        };
        match parsed {
            Ok(update) => paths.push(update),
            Err(description) => violations.push(FieldViolation::new("update_mask", description)),
        }
    }
    if violations.is_empty() { Ok(paths) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
}

/// A partial spec as a spec. The two messages share every field number and type (the partial
/// one only adds presence to `runtime_class_selection`), so the wire form carries one into the
/// other unchanged.
pub(crate) fn as_spec(partial: &PartialSandboxSpec) -> SandboxSpec {
    // Our own encoding of a message whose fields the decoder knows: decoding cannot fail.
    SandboxSpec::decode(partial.encode_to_vec().as_slice()).unwrap_or_default()
}

/// The template's spec with the overrides layered on, replace-on-presence (see the module).
pub fn layered(template: &PartialSandboxSpec, overrides: &PartialSandboxSpec) -> SimResult<SandboxSpec> {
    let sparse: Vec<FieldViolation> = overrides
        .containers
        .iter()
        .enumerate()
        .filter(|(_, container)| container.image.trim().is_empty())
        .map(|(index, _)| {
            FieldViolation::new(
                format!("overrides.containers[{index}].image"),
                "required: overrides replace the template's whole container list, so each must be a whole \
                 container (a sparse patch of a template container is refused)",
            )
        })
        .collect();
    if !sparse.is_empty() {
        return Err(SimError::invalid(Reason::InvalidRequest, sparse));
    }
    let mut merged = template.clone();
    for field in SpecField::ALL {
        if field.is_set(overrides) {
            field.copy(&mut merged, overrides);
        }
    }
    Ok(as_spec(&merged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwsandbox_api::sandbox_v1::{NetworkOptions, PartialContainer, RuntimeClass};

    fn container(name: &str, image: &str) -> PartialContainer {
        PartialContainer { name: name.to_owned(), image: image.to_owned(), ..Default::default() }
    }

    #[test]
    fn a_partial_spec_carries_every_field_into_a_spec() {
        let partial = PartialSandboxSpec {
            containers: vec![PartialContainer { primary: Some(true), command: "sh".to_owned(), ..container("a", "i") }],
            tags: vec!["t".to_owned()],
            max_lifetime_seconds: 5,
            network: Some(NetworkOptions { deny_egress: Some(true), ..Default::default() }),
            annotations: [("k".to_owned(), "v".to_owned())].into(),
            instance_type: "x".to_owned(),
            mode: SandboxMode::Cks as i32,
            runtime_class: "r".to_owned(),
            network_config_id: "n".to_owned(),
            runtime_class_selection: Some(RuntimeClass::CpuNestedVirt as i32),
            ..Default::default()
        };
        let spec = as_spec(&partial);
        assert_eq!(spec.encode_to_vec(), partial.encode_to_vec(), "no field is lost on the way");
        assert_eq!(spec.containers[0].command, "sh");
        assert_eq!(spec.runtime_class_selection, RuntimeClass::CpuNestedVirt as i32);
    }

    #[test]
    fn overrides_replace_the_fields_they_set_and_keep_the_others() {
        let template = PartialSandboxSpec {
            containers: vec![container("main", "python:3.11"), container("side", "busybox")],
            tags: vec!["from-template".to_owned()],
            annotations: [("a".to_owned(), "1".to_owned())].into(),
            max_lifetime_seconds: 60,
            ..Default::default()
        };
        let overrides = PartialSandboxSpec {
            containers: vec![container("main", "alpine")],
            tags: vec!["mine".to_owned()],
            ..Default::default()
        };
        let spec = layered(&template, &overrides).unwrap();
        assert_eq!(spec.containers.len(), 1, "the container list is replaced whole");
        assert_eq!(spec.containers[0].image, "alpine");
        assert_eq!(spec.tags, ["mine"]);
        assert_eq!(spec.annotations, template.annotations, "unset overrides keep the template's");
        assert_eq!(spec.max_lifetime_seconds, 60);
        assert_eq!(layered(&template, &PartialSandboxSpec::default()).unwrap(), as_spec(&template));
    }

    #[test]
    fn a_sparse_container_override_is_refused_by_name() {
        let overrides = PartialSandboxSpec { containers: vec![container("main", "")], ..Default::default() };
        let error = layered(&PartialSandboxSpec::default(), &overrides).unwrap_err();
        assert_eq!(error.violations()[0].field, "overrides.containers[0].image");
    }

    #[test]
    fn update_masks_name_fields_and_refuse_output_only_and_unknown_paths() {
        let patch = TemplateInput { display_name: "n".to_owned(), spec: None };
        let mask = |paths: &[&str]| FieldMask { paths: paths.iter().map(|path| path.to_string()).collect() };
        assert_eq!(update_paths(&mask(&[]), &patch).unwrap(), [TemplateUpdate::DisplayName]);
        assert_eq!(update_paths(&mask(&["spec.tags"]), &patch).unwrap(), [TemplateUpdate::SpecField(SpecField::Tags)]);
        let error = update_paths(&mask(&["revision", "spec.nope", "colour"]), &patch).unwrap_err();
        let described: Vec<&str> = error.violations().iter().map(|violation| violation.description.as_str()).collect();
        assert_eq!(
            described,
            [
                "`revision` is output only",
                "unknown field path `spec.nope`: the spec's fields are replaced whole",
                "unknown field path `colour`"
            ]
        );
    }
}
