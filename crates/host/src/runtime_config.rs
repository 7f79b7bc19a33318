//! The `containerRuntime:` section of the values: what runs a sandbox's containers and how
//! images are pulled and kept. Read at start by the binary (`serve --runtime` overrides `kind`);
//! the values document (the API surface's `config`) embeds it.

use std::path::PathBuf;

use serde::Deserialize;

/// What runs a sandbox's containers (`containerRuntime.kind`, `serve --runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// The image through the OCI runtime where runc works here and the image's registry answers;
    /// the process runtime otherwise (said in the Pod's Events).
    #[default]
    Auto,
    /// Always the image through the OCI runtime: a start fails where runc does not work, and a
    /// sandbox whose image cannot be pulled fails with `ErrImagePull`.
    Oci,
    /// The host's programs in namespaces of their own (or plain processes); images are recorded,
    /// never pulled.
    Process,
}

impl RuntimeKind {
    /// The name as written in the values and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Auto => "auto",
            RuntimeKind::Oci => "oci",
            RuntimeKind::Process => "process",
        }
    }
}

/// The `containerRuntime:` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerRuntimeConfig {
    /// What runs containers.
    #[serde(default)]
    pub kind: RuntimeKind,
    /// The OCI runtime binary: a path, or a name looked up on `PATH`.
    #[serde(default = "default_runc")]
    pub runc: PathBuf,
    /// gVisor's OCI runtime, which runs the sandboxes of RuntimeClass `gvisor` (the Nodes have
    /// that class where it works here: a root emulator): a path, or a name looked up on `PATH`.
    /// Under the process runtime, a gVisor sandbox runs the host's programs as its other
    /// sandboxes do; under `oci`/`auto`, its image. `""` turns gVisor off, and with it the
    /// probe that runs a throw-away gVisor container at start (about 0.3 s here).
    #[serde(default = "default_runsc")]
    pub runsc: PathBuf,
    /// A docker-style `config.json` with registry credentials; `None`: `$DOCKER_CONFIG/config.json`
    /// or `~/.docker/config.json` where present.
    #[serde(default)]
    pub docker_config: Option<PathBuf>,
    /// Registries spoken to over plain HTTP besides the loopback ones (`host:port`).
    #[serde(default)]
    pub insecure_registries: Vec<String>,
    /// How long one image's pull may take before it fails.
    #[serde(default = "default_pull_timeout_seconds")]
    pub pull_timeout_seconds: u32,
    /// Where pulled images are kept (content-addressed, shared by emulators, kept across runs);
    /// `None`: `$XDG_CACHE_HOME/cwsandbox-emulator/images`, else `~/.cache/cwsandbox-emulator/images`.
    #[serde(default)]
    pub image_cache: Option<PathBuf>,
    /// The most one image may unpack to, in bytes: the sum of the sizes its layers' entries
    /// declare (a sparse file's apparent size). A pull over it fails with ErrImagePull before the
    /// entry that passes it is written, and the partial tree is removed. Default 8 GiB (8589934592):
    /// above the images sandboxes usually run, below a CI machine's free disk. 0: no limit.
    /// `serve --max-image-bytes` overrides it.
    #[serde(default = "default_max_image_bytes")]
    pub max_image_bytes: u64,
    /// The most entries (files, directories, links, whiteouts) one image's layers may hold
    /// together. Default 1000000. 0: no limit. `serve --max-image-entries` overrides it.
    #[serde(default = "default_max_image_entries")]
    pub max_image_entries: u64,
    /// The image cache's bound, in bytes (blobs plus the data of unpacked trees). After a pull
    /// leaves the cache over it, the least recently used images no running sandbox uses are
    /// removed. Default 32 GiB (34359738368). 0: no bound. `serve --image-cache-max-bytes`
    /// overrides it; `cwsbx image prune` removes every unused image at once.
    #[serde(default = "default_image_cache_max_bytes")]
    pub image_cache_max_bytes: u64,
    /// Mirrors by registry host, as containerd's `hosts.toml`: `docker.io:
    /// [http://127.0.0.1:5000]`. A pull asks each mirror in order for the same repository and
    /// tag or digest (`docker.io/library/python:3.11` → `library/python:3.11` on the mirror), the
    /// registry itself last; a mirror that fails (404, no answer) passes to the next, and a pull
    /// that reaches none names each one tried with its error. A mirror is `scheme://host[:port]`;
    /// `http://` only for loopback mirrors and `insecureRegistries`. `serve --registry-mirror
    /// HOST=URL` replaces a host's list.
    #[serde(default)]
    pub registry_mirrors: std::collections::BTreeMap<String, Vec<String>>,
    /// Sandbox networks: a network namespace of its own for each sandbox whose spec asks for
    /// network rules (or for every sandbox), on a bridge this emulator owns, its effective
    /// rules enforced with nftables. Needs a root emulator with the namespaces isolation,
    /// iproute2 and nftables.
    #[serde(default)]
    pub network: SandboxNetworkConfig,
}

/// The `containerRuntime.network:` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxNetworkConfig {
    /// The bridge this emulator makes and owns: a lowercase letter, then up to 7 lowercase
    /// letters or digits. Two emulators on one machine need two bridges (and two ranges): the
    /// second's first sandbox with network rules fails, naming the first's pid. `""` turns
    /// sandbox networks off (a sandbox asking for rules is then refused as when no runner can
    /// host it).
    #[serde(default = "default_bridge")]
    pub bridge: String,
    /// The pod range: the bridge holds its first address (the sandboxes' gateway), sandboxes
    /// get the following ones in turn (`status.podIP`).
    #[serde(default = "default_pod_cidr")]
    pub pod_cidr: String,
    /// Every sandbox gets a network of its own, its effective rules (a runner policy's
    /// defaults included) enforced; otherwise only those whose spec asks for rules
    /// (`egress`, `ingress`, `deny_ingress`) do, and the others share the host's network.
    /// gVisor sandboxes keep the host's network either way.
    #[serde(default)]
    pub every_sandbox: bool,
    /// Names the sandboxes' resolver and the HTTPS proxy resolve to these IPv4 addresses before
    /// asking this machine's resolver: for tests, whose hosts have no names elsewhere.
    #[serde(default)]
    pub static_hosts: std::collections::BTreeMap<String, std::net::Ipv4Addr>,
}

fn default_bridge() -> String {
    "cwsbx0".to_owned()
}

fn default_pod_cidr() -> String {
    "10.244.0.0/16".to_owned()
}

impl Default for SandboxNetworkConfig {
    fn default() -> SandboxNetworkConfig {
        SandboxNetworkConfig {
            bridge: default_bridge(),
            pod_cidr: default_pod_cidr(),
            every_sandbox: false,
            static_hosts: Default::default(),
        }
    }
}

impl ContainerRuntimeConfig {
    /// The image cache's directory: the configured one or the user's cache directory.
    pub fn image_cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.image_cache {
            return dir.clone();
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|value| !value.is_empty())
                    .map(|home| PathBuf::from(home).join(".cache"))
            })
            .unwrap_or_else(|| std::env::temp_dir().join("cwsandbox-emulator-cache"));
        base.join("cwsandbox-emulator").join("images")
    }
}

fn default_runc() -> PathBuf {
    PathBuf::from("runc")
}

fn default_runsc() -> PathBuf {
    PathBuf::from("runsc")
}

fn default_pull_timeout_seconds() -> u32 {
    600
}

fn default_max_image_bytes() -> u64 {
    cwsandbox_images::DEFAULT_MAX_IMAGE_BYTES
}

fn default_max_image_entries() -> u64 {
    cwsandbox_images::DEFAULT_MAX_IMAGE_ENTRIES
}

fn default_image_cache_max_bytes() -> u64 {
    cwsandbox_images::DEFAULT_MAX_CACHE_BYTES
}

impl Default for ContainerRuntimeConfig {
    fn default() -> ContainerRuntimeConfig {
        ContainerRuntimeConfig {
            kind: RuntimeKind::default(),
            runc: default_runc(),
            runsc: default_runsc(),
            docker_config: None,
            insecure_registries: Vec::new(),
            pull_timeout_seconds: default_pull_timeout_seconds(),
            image_cache: None,
            max_image_bytes: default_max_image_bytes(),
            max_image_entries: default_max_image_entries(),
            image_cache_max_bytes: default_image_cache_max_bytes(),
            registry_mirrors: Default::default(),
            network: SandboxNetworkConfig::default(),
        }
    }
}
