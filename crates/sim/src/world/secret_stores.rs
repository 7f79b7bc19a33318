//! The secret-store commands (SettingsService) on the world: the records live in
//! [`crate::secret_stores`]; the world seeds them from its values and its clock stamps them.

use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::SandboxSpec;

use crate::config::SecretStoreValues;
use crate::error::SimResult;
use crate::secret_stores::{OrganizationStores, SecretStore, SecretStoreInput, SecretStoreUpdate};
use crate::world::World;

impl World {
    fn organization_stores(&mut self, org: &str) -> &mut OrganizationStores {
        let now = self.now;
        self.secret_stores.of(org, &self.values.secret_stores, now)
    }

    /// CreateSecretStore in `org`.
    pub fn create_secret_store(
        &mut self,
        org: &str,
        input: SecretStoreInput,
        request_id: &str,
    ) -> SimResult<SecretStore> {
        let now = self.now;
        self.organization_stores(org).create(input, request_id, now)
    }

    /// GetSecretStore in `org`.
    pub fn secret_store(&mut self, org: &str, name: &str) -> SimResult<SecretStore> {
        self.organization_stores(org).get(name)
    }

    /// ListSecretStores in `org`: one page, by name.
    pub fn list_secret_stores(
        &mut self,
        org: &str,
        page_size: i32,
        page_token: &str,
    ) -> SimResult<(Vec<SecretStore>, String)> {
        self.organization_stores(org).list(page_size, page_token)
    }

    /// UpdateSecretStore in `org`.
    pub fn update_secret_store(&mut self, org: &str, name: &str, update: SecretStoreUpdate) -> SimResult<SecretStore> {
        let now = self.now;
        self.organization_stores(org).update(name, update, now)
    }

    /// DeleteSecretStore in `org`.
    pub fn delete_secret_store(&mut self, org: &str, name: &str, allow_missing: bool) -> SimResult<()> {
        self.organization_stores(org).delete(name, allow_missing)
    }

    /// The stores a new sandbox of `org` names, each with the secrets it holds: the values' for a
    /// store the values serve to `org`, none for a store the organization made itself. A store
    /// the organization does not have (never made, or deleted) is left out, so a reference to it
    /// is refused.
    pub(crate) fn readable_secret_stores(
        &mut self,
        org: &str,
        spec: &SandboxSpec,
    ) -> BTreeMap<String, SecretStoreValues> {
        let names: Vec<&str> = spec
            .containers
            .iter()
            .flat_map(|container| {
                let pull = container.image_pull_credentials.as_ref().and_then(|pull| pull.credentials.as_ref());
                container
                    .secret_stores
                    .iter()
                    .map(|reference| reference.store_name.as_str())
                    .chain(pull.map(|source| source.store_name.as_str()))
            })
            .collect();
        if names.is_empty() {
            return BTreeMap::new();
        }
        let now = self.now;
        let stores = self.secret_stores.of(org, &self.values.secret_stores, now);
        let mut readable = BTreeMap::new();
        for name in names {
            if !stores.has(name) || readable.contains_key(name) {
                continue;
            }
            let secrets = match self.values.secret_stores.get(name) {
                Some(seed) if seed.serves(org) => seed.clone(),
                _ => SecretStoreValues::default(),
            };
            readable.insert(name.to_owned(), secrets);
        }
        readable
    }
}
