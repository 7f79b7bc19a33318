//! The template commands (SandboxTemplateService) on the world: the template lifecycle
//! ([`crate::templates`]) keeps the records, and a template's spec is checked by the sandbox
//! lifecycle's rules, so the commands that need both live here, above the two.

use cwsandbox_api::sandbox_v1::SandboxMode;
use cwsandbox_api::wkt::FieldMask;

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::pager::Pager;
use crate::templates::{Template, TemplateInput, TemplateUpdate, as_spec, update_paths};
use crate::world::World;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

fn not_found(id: &str) -> SimError {
    SimError::NotFound { reason: Reason::TemplateNotFound, message: format!("sandbox template {id:?} not found") }
}

impl World {
    /// Checks a template's settings as far as they can be checked without a runner: the display
    /// name, and the spec as CreateSandbox checks one, except that a template may leave the
    /// containers to the overrides.
    fn validate_template(input: &TemplateInput) -> SimResult<()> {
        let mut violations = Vec::new();
        if input.display_name.trim().is_empty() {
            violations.push(FieldViolation::new("sandbox_template.display_name", "required"));
        }
        if let Some(partial) = &input.spec {
            let spec = crate::sandbox::normalize_lone_container(as_spec(partial));
            let mut spec_violations = crate::sandbox::spec_violations(&spec, false);
            if !spec.runner_ids.is_empty() && spec.mode == SandboxMode::Serverless as i32 {
                spec_violations.push(FieldViolation::new(
                    "sandbox.spec.mode",
                    "runner_ids need placement mode CKS, not SERVERLESS",
                ));
            }
            violations.extend(spec_violations.into_iter().map(|violation| {
                let field = match violation.field.strip_prefix("sandbox.spec") {
                    Some(rest) => format!("sandbox_template.spec{rest}"),
                    None => violation.field,
                };
                FieldViolation::new(field, violation.description)
            }));
        }
        if violations.is_empty() { Ok(()) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
    }

    /// Stores a new template. The same `request_id` with the same settings returns the template
    /// it made; with other settings it is refused.
    pub fn create_template(
        &mut self,
        org: &str,
        user: &str,
        input: TemplateInput,
        request_id: &str,
    ) -> SimResult<Template> {
        if !request_id.is_empty()
            && let Some((id, first)) = self.templates.by_request.get(org).and_then(|requests| requests.get(request_id))
        {
            if *first != input {
                return Err(SimError::invalid(
                    Reason::RequestIdConflict,
                    vec![FieldViolation::new(
                        "request_id",
                        format!("request id {request_id:?} was used with a different request"),
                    )],
                ));
            }
            return self.templates.by_id.get(id).cloned().ok_or_else(|| not_found(id));
        }
        Self::validate_template(&input)?;
        let now = self.now();
        let id = self.ids.uid().to_string();
        let template = Template {
            id: id.clone(),
            org: org.to_owned(),
            display_name: input.display_name.clone(),
            spec: input.spec.clone().unwrap_or_default(),
            revision: 1,
            created: now,
            updated: now,
            deleted: None,
            create_user: user.to_owned(),
        };
        self.templates.by_id.insert(id.clone(), template.clone());
        if !request_id.is_empty() {
            self.templates.by_request.entry(org.to_owned()).or_default().insert(request_id.to_owned(), (id, input));
        }
        Ok(template)
    }

    /// One of the organization's templates; a deleted one only with `show_deleted`.
    pub fn get_template(&self, org: &str, id: &str, show_deleted: bool) -> SimResult<Template> {
        self.templates
            .by_id
            .get(id)
            .filter(|template| template.org == org && (show_deleted || template.deleted.is_none()))
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// One page of the organization's templates, oldest first.
    pub fn list_templates(
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
            .templates
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

    /// Changes the fields the mask names and raises the revision. A deleted template cannot be
    /// changed.
    pub fn update_template(
        &mut self,
        org: &str,
        id: &str,
        patch: TemplateInput,
        mask: &FieldMask,
    ) -> SimResult<Template> {
        let paths = update_paths(mask, &patch)?;
        let current = self.get_template(org, id, false)?;
        let mut updated = TemplateInput { display_name: current.display_name.clone(), spec: Some(current.spec) };
        let patch_spec = patch.spec.clone().unwrap_or_default();
        for path in &paths {
            match path {
                TemplateUpdate::DisplayName => updated.display_name = patch.display_name.clone(),
                TemplateUpdate::Spec => updated.spec = Some(patch_spec.clone()),
                TemplateUpdate::SpecField(field) => {
                    if let Some(spec) = updated.spec.as_mut() {
                        field.copy(spec, &patch_spec);
                    }
                }
            }
        }
        Self::validate_template(&updated)?;
        let now = self.now();
        let template = self.templates.by_id.get_mut(id).ok_or_else(|| not_found(id))?;
        template.display_name = updated.display_name;
        template.spec = updated.spec.unwrap_or_default();
        template.revision += 1;
        template.updated = now;
        Ok(template.clone())
    }

    /// Soft-deletes a template: it stays on record, marked deleted, and sandboxes can no longer
    /// be made from it.
    pub fn delete_template(&mut self, org: &str, id: &str) -> SimResult<Template> {
        self.get_template(org, id, false)?;
        let now = self.now();
        let template = self.templates.by_id.get_mut(id).ok_or_else(|| not_found(id))?;
        template.deleted = Some(now);
        template.updated = now;
        Ok(template.clone())
    }
}
