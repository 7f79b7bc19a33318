//! `cwsandbox-client`: an async Rust SDK for CoreWeave Sandboxes with the ergonomics of the
//! published Python client.
//!
//! - [`Sandbox`] and [`SandboxBuilder`]: create, wait for RUNNING (with the state reason), exec,
//!   streaming exec with stdin, files, logs, stop, delete. Sandbox operations speak gRPC.
//! - [`Session`]: defaults shared by several sandboxes; closing it stops every sandbox it started.
//! - [`RunnerAdmin`]: RunnerManagementService over **Connect JSON** (field names are the public
//!   contract; field numbers are not), on a separately configurable control-plane URL.
//! - [`EmulatorAdmin`]: the emulator's own API (values, reset) over Connect JSON.
//! - [`Config`] from `CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY` and `CWSANDBOX_CONTROL_PLANE_URL`.
//! - [`Error`]: code, `ErrorInfo` reason, field violations and retry delay.

mod admin;
mod error;
mod sandbox;
mod session;

use std::time::Duration;

pub use admin::{EmulatorAdmin, RunnerAdmin};
pub use cwsandbox_api::emulator_v1;
pub use cwsandbox_api::sandbox_v1 as pb;
pub use error::{ApiStatus, Code, Error, FieldViolation, Reason, Result, code_name};
pub use sandbox::{
    ExecEvent, ExecOptions, ExecOutput, ExecStream, Sandbox, SandboxBuilder, SandboxDefaults, state_name,
};
pub use session::Session;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Where the API is and who calls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The data plane and gateway (`CWSANDBOX_BASE_URL`): sandboxes, discovery.
    pub base_url: String,
    /// The control plane (`CWSANDBOX_CONTROL_PLANE_URL`, default: `base_url`): managed runners.
    /// The real API splits hosts (`api.coreweave.com` vs `api.cwsandbox.com`); the emulator
    /// serves both on one port.
    pub control_plane_url: String,
    /// The bearer token (`CWSANDBOX_API_KEY`).
    pub api_key: String,
    /// Per-call timeout for unary calls.
    pub timeout: Duration,
}

/// The public endpoint the Python client uses when `CWSANDBOX_BASE_URL` is unset.
pub const DEFAULT_BASE_URL: &str = "https://api.cwsandbox.com";

impl Config {
    /// A configuration for one URL (both planes) and token.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Config {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Config {
            control_plane_url: base_url.clone(),
            base_url,
            api_key: api_key.into(),
            timeout: Duration::from_secs(60),
        }
    }

    /// From the environment: `CWSANDBOX_BASE_URL` (default the public endpoint),
    /// `CWSANDBOX_API_KEY` (required), `CWSANDBOX_CONTROL_PLANE_URL` (default the base URL).
    pub fn from_env() -> Result<Config> {
        let base_url = std::env::var("CWSANDBOX_BASE_URL").unwrap_or_else(|_| DEFAULT_BASE_URL.to_owned());
        let api_key =
            std::env::var("CWSANDBOX_API_KEY").map_err(|_| Error::Config("CWSANDBOX_API_KEY is not set".to_owned()))?;
        let mut config = Config::new(base_url, api_key);
        if let Ok(url) = std::env::var("CWSANDBOX_CONTROL_PLANE_URL")
            && !url.is_empty()
        {
            config.control_plane_url = url.trim_end_matches('/').to_owned();
        }
        Ok(config)
    }

    /// Another control-plane URL.
    pub fn with_control_plane_url(mut self, url: impl Into<String>) -> Config {
        self.control_plane_url = url.into().trim_end_matches('/').to_owned();
        self
    }
}

/// Adds `authorization: Bearer …` to every gRPC call.
#[derive(Clone)]
pub struct Auth(MetadataValue<Ascii>);

impl Auth {
    /// An interceptor sending `value` as the `authorization` header.
    pub fn new(value: MetadataValue<Ascii>) -> Auth {
        Auth(value)
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

type GrpcChannel = InterceptedService<Channel, Auth>;
/// The gRPC SandboxService client with the token attached.
pub type SandboxServiceClient = pb::sandbox_service_client::SandboxServiceClient<GrpcChannel>;

/// A connection to the API: cheap to clone, connects lazily.
#[derive(Clone)]
pub struct Client {
    config: Config,
    sandboxes: SandboxServiceClient,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base_url", &self.config.base_url).finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `config` (no connection is made until the first call).
    pub fn new(config: Config) -> Result<Client> {
        let token: MetadataValue<Ascii> = format!("Bearer {}", config.api_key)
            .parse()
            .map_err(|_| Error::Config("the API key is not a valid header value".to_owned()))?;
        let endpoint = Endpoint::from_shared(config.base_url.clone())
            .map_err(|error| Error::Config(format!("base URL {:?}: {error}", config.base_url)))?
            .connect_timeout(Duration::from_secs(10));
        let channel = endpoint.connect_lazy();
        let sandboxes = pb::sandbox_service_client::SandboxServiceClient::with_interceptor(channel, Auth(token))
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Ok(Client { config, sandboxes })
    }

    /// A client from [`Config::from_env`].
    pub fn from_env() -> Result<Client> {
        Client::new(Config::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The raw gRPC SandboxService client (token attached).
    pub fn sandbox_service(&self) -> SandboxServiceClient {
        self.sandboxes.clone()
    }

    /// Runner administration on the control plane.
    pub fn runners(&self) -> Result<RunnerAdmin> {
        RunnerAdmin::new(&self.config)
    }

    /// The emulator's own API.
    pub fn emulator(&self) -> Result<EmulatorAdmin> {
        EmulatorAdmin::new(&self.config)
    }

    /// A builder for a new sandbox.
    pub fn sandbox(&self) -> SandboxBuilder {
        SandboxBuilder::new(self.clone())
    }

    /// An existing sandbox by id (fetched once).
    pub async fn get(&self, sandbox_id: &str) -> Result<Sandbox> {
        Sandbox::get(self, sandbox_id).await
    }

    /// Every sandbox matching the filters, following pages.
    pub async fn list(&self, mut request: pb::ListSandboxesRequest) -> Result<Vec<pb::Sandbox>> {
        let mut all = Vec::new();
        loop {
            let page = self.sandbox_service().list_sandboxes(request.clone()).await?.into_inner();
            all.extend(page.sandboxes);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            request.page_token = page.next_page_token;
        }
    }
}
