//! Secret stores (SettingsService): each organization's named stores, which containers read
//! secrets from (`Container.secret_stores`) and registries' credentials from
//! (`Container.image_pull_credentials`).
//!
//! The API's only provider is W&B (`api_url`, `team`), which the emulator never reaches: a store's
//! secrets are the values' `secretStores.<name>.secrets`, readable only by the organizations that
//! store serves. The values' stores are also seeds: an organization has them from its first use
//! of secret stores (a listing, a create, a sandbox that reads one) and may then update or delete
//! its copy like any store it made. A store holds no secret values on the API side (the message
//! has no field for them), so none is ever returned.

use std::collections::{BTreeMap, HashMap};

use crate::config::SecretStoreValues;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::pager::Pager;
use crate::time::SimTime;

/// The W&B settings of a store (`SecretStore.wandb`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WandbSettings {
    /// Base URL of the W&B API; empty: W&B's own.
    pub api_url: String,
    /// The W&B team whose secrets are used.
    pub team: String,
}

/// A stored secret store, as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretStore {
    /// Its name, unique in its organization.
    pub name: String,
    /// Its provider's settings (W&B, the API's only provider).
    pub wandb: WandbSettings,
    /// When it was created (for a seeded store, when the organization first used stores).
    pub created: SimTime,
    /// When it last changed.
    pub updated: SimTime,
}

/// What CreateSecretStore asks for, checked by [`SecretStoreInput::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretStoreInput {
    /// The store's name.
    pub name: String,
    /// The W&B settings.
    pub wandb: WandbSettings,
}

/// What UpdateSecretStore changes: each `Some` replaces the stored value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretStoreUpdate {
    /// New `wandb.api_url`.
    pub api_url: Option<String>,
    /// New `wandb.team`.
    pub team: Option<String>,
}

/// The longest store name: a Kubernetes label value's length, since the name identifies the
/// store in paths and references.
const NAME_MAX: usize = 63;

/// Why `name` cannot name a store, if it cannot: 1 to 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit (it is a path segment of the REST binding).
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("required".to_owned());
    }
    if name.len() > NAME_MAX {
        return Some(format!("{} characters, over {NAME_MAX}", name.len()));
    }
    let allowed = |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-';
    let bytes = name.as_bytes();
    if !bytes.iter().all(|&byte| allowed(byte)) || bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
        return Some(format!(
            "{name:?}: lowercase letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    None
}

/// Why `url` cannot be a W&B API URL, if it cannot: empty (W&B's own) or an absolute http(s) URL.
fn api_url_problem(url: &str) -> Option<String> {
    if url.is_empty() {
        return None;
    }
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !url.chars().any(char::is_whitespace) => None,
        _ => Some(format!("{url:?} is not an absolute http:// or https:// URL")),
    }
}

impl SecretStoreInput {
    /// The request's violations, each naming its field under `secret_store`.
    pub fn check(&self) -> SimResult<()> {
        let mut violations = Vec::new();
        if let Some(problem) = name_problem(&self.name) {
            violations.push(FieldViolation::new("secret_store.name", problem));
        }
        if let Some(problem) = api_url_problem(&self.wandb.api_url) {
            violations.push(FieldViolation::new("secret_store.wandb.api_url", problem));
        }
        if violations.is_empty() { Ok(()) } else { Err(SimError::invalid(Reason::InvalidRequest, violations)) }
    }
}

impl SecretStoreUpdate {
    /// The update's violations.
    pub fn check(&self) -> SimResult<()> {
        match self.api_url.as_deref().and_then(api_url_problem) {
            Some(problem) => Err(SimError::invalid_field("secret_store.wandb.api_url", problem)),
            None => Ok(()),
        }
    }
}

/// One organization's stores, and the create requests it made (for `request_id` replays).
#[derive(Debug, Default)]
pub(crate) struct OrganizationStores {
    stores: BTreeMap<String, SecretStore>,
    by_request: HashMap<String, (String, SecretStoreInput)>,
}

/// Every organization's secret stores. An organization missing here has not used stores yet:
/// its first use seeds it from the values.
#[derive(Debug, Default)]
pub(crate) struct SecretStores {
    organizations: HashMap<String, OrganizationStores>,
}

impl SecretStores {
    /// The organization's stores, seeded from `seeds` at its first use.
    pub(crate) fn of(
        &mut self,
        org: &str,
        seeds: &BTreeMap<String, SecretStoreValues>,
        now: SimTime,
    ) -> &mut OrganizationStores {
        self.organizations.entry(org.to_owned()).or_insert_with(|| {
            let stores = seeds
                .iter()
                .filter(|(_, seed)| seed.serves(org))
                .map(|(name, seed)| {
                    let wandb = WandbSettings { api_url: seed.wandb.api_url.clone(), team: seed.wandb.team.clone() };
                    (name.clone(), SecretStore { name: name.clone(), wandb, created: now, updated: now })
                })
                .collect();
            OrganizationStores { stores, by_request: HashMap::new() }
        })
    }

    /// Forgets an organization's stores (its reset); its next use seeds it again.
    pub(crate) fn forget_organization(&mut self, org: &str) {
        self.organizations.remove(org);
    }
}

fn not_found(name: &str) -> SimError {
    SimError::NotFound {
        reason: Reason::SecretStoreNotFound,
        message: format!("no secret store {name:?} in this organization"),
    }
}

impl OrganizationStores {
    /// Whether the organization has a store of that name.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.stores.contains_key(name)
    }

    /// Adds a store. A replay of `request_id` with the same input returns the store it made; with
    /// another input it is refused, and so is a name the organization already has.
    pub(crate) fn create(&mut self, input: SecretStoreInput, request_id: &str, now: SimTime) -> SimResult<SecretStore> {
        if !request_id.is_empty()
            && let Some((name, first)) = self.by_request.get(request_id)
        {
            if *first != input {
                return Err(SimError::request_id_conflict(request_id));
            }
            return self.stores.get(name).cloned().ok_or_else(|| not_found(name));
        }
        input.check()?;
        if self.stores.contains_key(&input.name) {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("secret store {:?} exists already", input.name),
            });
        }
        let store = SecretStore { name: input.name.clone(), wandb: input.wandb.clone(), created: now, updated: now };
        self.stores.insert(store.name.clone(), store.clone());
        if !request_id.is_empty() {
            self.by_request.insert(request_id.to_owned(), (store.name.clone(), input));
        }
        Ok(store)
    }

    /// One store.
    pub(crate) fn get(&self, name: &str) -> SimResult<SecretStore> {
        self.stores.get(name).cloned().ok_or_else(|| not_found(name))
    }

    /// One page of the stores, by name.
    pub(crate) fn list(&self, page_size: i32, page_token: &str) -> SimResult<(Vec<SecretStore>, String)> {
        let pager = Pager::new("secret_stores", [], page_size, 50, 1000)?;
        let after = pager.after(page_token)?.and_then(|key| key.into_iter().next());
        let items = self
            .stores
            .values()
            .filter(|store| after.as_deref().is_none_or(|last| store.name.as_str() > last))
            .cloned();
        Ok(pager.page(items, |store| vec![store.name.clone()]))
    }

    /// Changes a store's settings.
    pub(crate) fn update(&mut self, name: &str, update: SecretStoreUpdate, now: SimTime) -> SimResult<SecretStore> {
        update.check()?;
        let store = self.stores.get_mut(name).ok_or_else(|| not_found(name))?;
        if let Some(api_url) = update.api_url {
            store.wandb.api_url = api_url;
        }
        if let Some(team) = update.team {
            store.wandb.team = team;
        }
        store.updated = now;
        Ok(store.clone())
    }

    /// Removes a store; sandboxes already made keep the secrets they were given.
    pub(crate) fn delete(&mut self, name: &str, allow_missing: bool) -> SimResult<()> {
        if self.stores.remove(name).is_none() && !allow_missing {
            return Err(not_found(name));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_labels() {
        for good in ["a", "team-secrets", "s3", &"x".repeat(63)] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in ["", "Team", "-a", "a-", "a_b", "a/b", &"x".repeat(64)] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn api_urls_are_absolute_http_urls() {
        for good in ["", "https://api.wandb.ai", "http://127.0.0.1:8080/"] {
            assert_eq!(api_url_problem(good), None, "{good}");
        }
        for bad in ["api.wandb.ai", "ftp://x", "https://", "https:///x", "https://a b"] {
            assert!(api_url_problem(bad).is_some(), "{bad}");
        }
    }
}
