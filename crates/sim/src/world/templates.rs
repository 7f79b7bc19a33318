//! The template commands (SandboxTemplateService) on the world: the template lifecycle
//! ([`crate::templates`]) keeps the records, and a template's spec is checked by the sandbox
//! lifecycle's rules, so the commands that need both live here, above the two.

use cwsandbox_api::sandbox_v1::SandboxMode;
use cwsandbox_api::wkt::FieldMask;

use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::templates::{Template, TemplateInput, TemplateUpdate, as_spec, update_paths};
use crate::world::World;

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
            && let Some((id, first)) = self.templates.created_by_request(org, request_id)
        {
            if *first != input {
                return Err(SimError::request_id_conflict(request_id));
            }
            return self.templates.find(id);
        }
        Self::validate_template(&input)?;
        let now = self.now();
        let template = Template {
            id: self.ids.uid().to_string(),
            org: org.to_owned(),
            display_name: input.display_name.clone(),
            spec: input.spec.clone().unwrap_or_default(),
            revision: 1,
            created: now,
            updated: now,
            deleted: None,
            create_user: user.to_owned(),
        };
        self.templates.insert(template.clone(), request_id, input);
        Ok(template)
    }

    /// One of the organization's templates; a deleted one only with `show_deleted`.
    pub fn get_template(&self, org: &str, id: &str, show_deleted: bool) -> SimResult<Template> {
        self.templates.get(org, id, show_deleted)
    }

    /// One page of the organization's templates, oldest first.
    pub fn list_templates(
        &self,
        org: &str,
        show_deleted: bool,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<Template>, String)> {
        self.templates.list(org, show_deleted, page_size, page_token)
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
        let template = self.templates.get_mut(id)?;
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
        let template = self.templates.get_mut(id)?;
        template.deleted = Some(now);
        template.updated = now;
        Ok(template.clone())
    }
}
