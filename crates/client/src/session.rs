//! A session: defaults shared by several sandboxes, created lazily; closing it stops every
//! sandbox it started (the Python client's `Sandbox.session(defaults)`).

use std::sync::{Arc, Mutex};

use cwsandbox_sync::MutexUnpoisoned;

use crate::sandbox::stop;
use crate::{Client, Result, Sandbox, SandboxBuilder, SandboxDefaults, pb};

/// Defaults plus the sandboxes started with them.
#[derive(Debug, Clone)]
pub struct Session {
    client: Client,
    defaults: SandboxDefaults,
    started: Arc<Mutex<Vec<String>>>,
}

impl Session {
    /// A session; nothing is created until [`Session::run`].
    pub fn new(client: Client, defaults: SandboxDefaults) -> Session {
        Session { client, defaults, started: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The defaults.
    pub fn defaults(&self) -> &SandboxDefaults {
        &self.defaults
    }

    /// A builder that starts from the session's defaults.
    pub fn sandbox(&self) -> SandboxBuilder {
        self.client.sandbox().defaults(self.defaults.clone())
    }

    /// Starts a sandbox with the defaults (plus whatever `configure` changes) and waits until it
    /// runs; the session remembers it.
    pub async fn run_with(&self, configure: impl FnOnce(SandboxBuilder) -> SandboxBuilder) -> Result<Sandbox> {
        let mut sandbox = configure(self.sandbox()).create().await?;
        self.started.lock_unpoisoned().push(sandbox.id().to_owned());
        sandbox.wait_running(std::time::Duration::from_secs(300), |_| {}).await?;
        Ok(sandbox)
    }

    /// Starts a sandbox with the defaults and waits until it runs.
    pub async fn run(&self) -> Result<Sandbox> {
        self.run_with(|builder| builder).await
    }

    /// Ids of the sandboxes this session started.
    pub fn started(&self) -> Vec<String> {
        self.started.lock_unpoisoned().clone()
    }

    /// The live sandboxes matching the defaults' tags and runners.
    pub async fn list(&self) -> Result<Vec<pb::Sandbox>> {
        self.client
            .list(pb::ListSandboxesRequest {
                tags: self.defaults.tags.clone(),
                runner_ids: self.defaults.runner_ids.clone(),
                ..Default::default()
            })
            .await
    }

    /// Stops every sandbox this session started (missing ones are fine); returns how many.
    pub async fn close(&self) -> Result<usize> {
        let ids = std::mem::take(&mut *self.started.lock_unpoisoned());
        let mut first_error = None;
        for id in &ids {
            if let Err(error) = stop(&self.client, id, 0, true).await {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(ids.len()),
        }
    }
}
