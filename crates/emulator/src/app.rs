//! The state every handler shares: the driver (world and clock), the tokens, the optional
//! process runtime and the limits.

use std::sync::Arc;

use crate::auth::Tokens;
use crate::driver::Driver;
use crate::errors::ApiError;
use crate::runtime::SandboxRuntime;

/// Size limits of one request or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest message accepted or sent, in bytes, on every transport.
    pub max_message_bytes: usize,
    /// Largest file ReadFile/WriteFile carries in one message (the Python client's unary cap is
    /// 32 MiB; above it, and after `CWSANDBOX_FILE_TOO_LARGE`, it streams through exec).
    pub max_file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_message_bytes: 64 << 20, max_file_bytes: 32 << 20 }
    }
}

struct Inner {
    driver: Arc<Driver>,
    tokens: Tokens,
    runtime: Option<Arc<dyn SandboxRuntime>>,
    limits: Limits,
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
    pub fn new(driver: Arc<Driver>, tokens: Tokens, runtime: Option<Arc<dyn SandboxRuntime>>, limits: Limits) -> App {
        App(Arc::new(Inner { driver, tokens, runtime, limits }))
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<Driver> {
        &self.0.driver
    }

    /// The accepted tokens.
    pub fn tokens(&self) -> &Tokens {
        &self.0.tokens
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
