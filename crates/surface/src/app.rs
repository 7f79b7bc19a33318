//! The state every handler shares: the driver (world and clock), the tokens, the optional
//! process runtime, the limits, the direct data plane's certificate authority and the HTTPS
//! endpoints' TLS.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cwsandbox_sync::{MutexUnpoisoned, RwLockUnpoisoned};

use crate::auth::{Principal, Tokens, bearer};
use crate::direct::DirectPlane;
use crate::endpoints::EndpointTls;
use crate::errors::ApiError;
use crate::faults::Faults;
use crate::fidelity::{self, Strictness};
use crate::requests::RequestLog;
use crate::tenants::Tenants;
use cwsandbox_host::driver::Driver;
use cwsandbox_host::runtime::SandboxRuntime;

/// Size limits of one request or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest message accepted or sent, in bytes, on every transport.
    pub max_message_bytes: usize,
    /// Largest file ReadFile/WriteFile carries in one message (the Python client's unary cap is
    /// 32 MiB; above it, and after `CWSANDBOX_FILE_TOO_LARGE`, it streams through exec).
    pub max_file_bytes: u64,
    /// A StreamExec's buffer between its command and the client's stream, in bytes: while it is
    /// full the command's output waits.
    pub stream_backpressure_bytes: usize,
    /// How long a full buffer may wait for the client to take something before the stream ends
    /// with `STREAM_BACKPRESSURE` (the cloud's in-band code for a reader that falls behind).
    /// The cloud's own bounds are not published: these are the emulator's (8 MiB, 10 s).
    pub stream_stall: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 64 << 20,
            max_file_bytes: 32 << 20,
            stream_backpressure_bytes: 8 << 20,
            stream_stall: std::time::Duration::from_secs(10),
        }
    }
}

struct Inner {
    driver: Arc<Driver>,
    tokens: Tokens,
    tenants: RwLock<Tenants>,
    faults: Faults,
    /// The values' `faults:`, installed again by each full Reset.
    configured_faults: std::sync::Mutex<Vec<cwsandbox_api::emulator_v1::Fault>>,
    runtime: Option<Arc<dyn SandboxRuntime>>,
    limits: Limits,
    strictness: Strictness,
    direct: Arc<DirectPlane>,
    endpoints: Arc<EndpointTls>,
    requests: RequestLog,
}

/// Cheap to clone; handlers get it as axum state.
#[derive(Clone)]
pub struct App(Arc<Inner>);

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("runtime", &self.0.runtime.is_some()).finish_non_exhaustive()
    }
}

impl App {
    /// Assembles the state.
    pub fn new(
        driver: Arc<Driver>,
        tokens: Tokens,
        runtime: Option<Arc<dyn SandboxRuntime>>,
        limits: Limits,
        strictness: Strictness,
        direct: Arc<DirectPlane>,
        endpoints: Arc<EndpointTls>,
    ) -> App {
        App(Arc::new(Inner {
            driver,
            tokens,
            tenants: RwLock::default(),
            faults: Faults::default(),
            configured_faults: Default::default(),
            runtime,
            limits,
            strictness,
            direct,
            endpoints,
            requests: RequestLog::default(),
        }))
    }

    /// Refuses a request that sets a field the emulator does not emulate, or logs the fields and
    /// lets it through, as the values' `strictness` says (`crate::fidelity`).
    pub fn check_fields<R: fidelity::Request>(&self, method: &str, request: &R) -> Result<(), ApiError> {
        fidelity::check(self.0.strictness, method, request)
    }

    /// The direct data plane's certificate authority and grants.
    pub fn direct(&self) -> &DirectPlane {
        &self.0.direct
    }

    /// The HTTPS endpoints' certificate authority and TLS configuration.
    pub fn endpoints(&self) -> &EndpointTls {
        &self.0.endpoints
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<Driver> {
        &self.0.driver
    }

    /// The configured tokens (tenants' tokens are in [`App::tenants`]).
    pub fn tokens(&self) -> &Tokens {
        &self.0.tokens
    }

    /// The caller of a request's W&B credentials (the values' `auth.wandbKeys`).
    pub fn authenticate_wandb(&self, credentials: crate::auth::WandbCredentials<'_>) -> Result<Principal, ApiError> {
        self.0.tokens.authenticate_wandb(credentials)
    }

    /// The principal of an `authorization` header: a configured token, else a tenant's.
    pub fn authenticate(&self, header: Option<&str>) -> Result<Principal, ApiError> {
        let token = bearer(header)?;
        if let Some(principal) = self.0.tokens.principal(token) {
            return Ok(principal.clone());
        }
        self.tenants().principal(token).cloned().ok_or_else(|| ApiError::unauthenticated("unknown bearer token"))
    }

    /// The tenants, for reading (a poisoned lock is still readable: the registry has no
    /// invariant a panic could break halfway).
    pub fn tenants(&self) -> RwLockReadGuard<'_, Tenants> {
        self.0.tenants.read_unpoisoned()
    }

    /// The tenants, for changing.
    pub fn tenants_mut(&self) -> RwLockWriteGuard<'_, Tenants> {
        self.0.tenants.write_unpoisoned()
    }

    /// The faults in force.
    pub fn faults(&self) -> &Faults {
        &self.0.faults
    }

    /// Installs the values' faults (the operator's), at start.
    pub fn install_configured_faults(&self, faults: Vec<cwsandbox_api::emulator_v1::Fault>) -> Result<(), ApiError> {
        for (index, fault) in faults.iter().enumerate() {
            self.0.faults.add(fault.clone(), None).map_err(|error| {
                let mut error = error;
                error.message = format!("[{index}]: {}", error.message);
                error
            })?;
        }
        *self.0.configured_faults.lock_unpoisoned() = faults;
        Ok(())
    }

    /// After a full Reset: only the values' faults, with fresh counts.
    pub fn reinstall_configured_faults(&self) {
        self.0.faults.clear(None);
        let faults = self.0.configured_faults.lock_unpoisoned().clone();
        for fault in faults {
            // They were checked at start.
            let _ = self.0.faults.add(fault, None);
        }
    }

    /// The last API calls (the request guard writes them, the dashboard reads them).
    pub fn requests(&self) -> &RequestLog {
        &self.0.requests
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.0.limits
    }

    /// The process runtime, or UNAVAILABLE naming the operation.
    pub fn runtime(&self, operation: &str) -> Result<&Arc<dyn SandboxRuntime>, ApiError> {
        self.0.runtime.as_ref().ok_or_else(|| ApiError::backend_unavailable(operation))
    }

    /// Whether a runtime is attached.
    pub fn has_runtime(&self) -> bool {
        self.0.runtime.is_some()
    }
}
