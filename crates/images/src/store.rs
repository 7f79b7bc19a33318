//! The image cache and the pulls that fill it.
//!
//! Layout under the root (every name that comes from a registry is a digest checked to be
//! `sha256:` and 64 hex digits before it becomes a path):
//!
//! ```text
//! blobs/sha256/<hex>     config and layer blobs, each checked against its digest
//! rootfs/<hex>/          the unpacked tree of the manifest <hex>, complete once it exists
//! images/<hex>.json      that manifest's run config, size and layers
//! refs/<hash>.json       a normalized reference → its manifest digest (IfNotPresent, Never)
//! tmp/<pid>.<n>.<what>   work in progress, renamed into place when complete
//! ```

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::auth;
use crate::config::ImageConfig;
use crate::error::{PullError, StoreError, chain};
use crate::fsutil;
use crate::reference::{ImageReference, PullPolicy, host_of};
use crate::unpack::{UnpackOptions, unpack_layers};

/// Where and how images are kept and pulled.
#[derive(Debug, Clone)]
pub struct ImageStoreConfig {
    /// The cache directory, e.g. `<state dir>/images`. Made when missing.
    pub root: PathBuf,
    /// A Docker-style `config.json` with registry credentials (`auths`). [`ImageStoreConfig::new`]
    /// sets `$DOCKER_CONFIG/config.json` or `~/.docker/config.json` when one exists; `None`
    /// pulls anonymously. It is read at each pull, so a `docker login` applies at once.
    pub docker_config: Option<PathBuf>,
    /// Registries (`host` or `host:port`) spoken to over plain HTTP, besides the loopback ones
    /// (`127.0.0.0/8`, `localhost`, `[::1]`) which always are, as Docker does.
    pub insecure_registries: Vec<String>,
    /// Added to every uid and gid when unpacking (a root emulator maps its sandboxes' root to a
    /// host id range); 0 keeps the layers' ids. Owners are only set when this process is root.
    pub id_shift: u32,
    /// The longest a pull may talk to the registry (manifest, config and layers), unpacking not
    /// included.
    pub pull_timeout: Duration,
}

impl ImageStoreConfig {
    /// Defaults: the user's Docker config when there is one, no insecure registries, no id
    /// shift, a 5-minute pull timeout.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            docker_config: auth::default_docker_config(),
            insecure_registries: Vec::new(),
            id_shift: 0,
            pull_timeout: Duration::from_secs(300),
        }
    }
}

/// An image ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The reference as asked for, normalized.
    pub reference: ImageReference,
    /// The manifest's digest (`sha256:…`; for a multi-platform image, this platform's manifest).
    pub digest: String,
    /// The unpacked tree, shared by every sandbox of this image: never written after it is
    /// complete, so a runtime must give each sandbox a writable layer of its own over it
    /// (overlayfs) or a copy.
    pub rootfs: PathBuf,
    pub config: ImageConfig,
    /// False when the image came from the cache (Kubernetes' "Container image … already present
    /// on machine").
    pub pulled: bool,
    /// The config and layers as the registry stores them (compressed), as `crictl images` shows.
    pub size_bytes: u64,
}

/// Pulls images and keeps them. Cheap to share (`Arc`); pulls of the same name at the same time
/// share one download.
pub struct ImageStore {
    config: ImageStoreConfig,
    root: PathBuf,
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    next_tmp: AtomicU64,
}

#[derive(Debug, Serialize, Deserialize)]
struct ImageMeta {
    digest: String,
    config: ImageConfig,
    size_bytes: u64,
    layers: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RefEntry {
    reference: String,
    digest: String,
}

/// What the registry gave for one image: everything the unpack needs, on disk.
struct Fetched {
    digest: String,
    config: ImageConfig,
    size_bytes: u64,
    layers: Vec<(String, PathBuf)>,
}

impl ImageStore {
    /// Opens (or makes) the store at `config.root`, and removes the work directories that pulls
    /// of an ended process left (a killed emulator's half-unpacked trees).
    pub fn new(config: ImageStoreConfig) -> Result<Self, StoreError> {
        let root =
            std::path::absolute(&config.root).map_err(|source| StoreError { path: config.root.clone(), source })?;
        for dir in ["blobs/sha256", "rootfs", "images", "refs", "tmp"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|source| StoreError { path, source })?;
        }
        // reqwest (under oci-client) takes its TLS crypto from the process default; ring is the
        // provider the workspace builds anyway. Another caller may have set one already: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = Self { config, root, locks: Mutex::new(HashMap::new()), next_tmp: AtomicU64::new(0) };
        store.remove_stale_work()?;
        Ok(store)
    }

    /// The store's configuration.
    pub fn config(&self) -> &ImageStoreConfig {
        &self.config
    }

    /// Gets `image` as `policy` says: from the cache (`IfNotPresent` with the image here,
    /// `Never`), or from its registry (`Always`, or not here yet). Layers already here are not
    /// downloaded again; trees are unpacked once per manifest.
    pub async fn pull(&self, image: &str, policy: PullPolicy) -> Result<Image, PullError> {
        let reference = ImageReference::normalize(image)?;
        match policy {
            PullPolicy::Never => {
                return self
                    .cached_reference(&reference)
                    .ok_or_else(|| PullError::NeverPull { reference: reference.to_string() });
            }
            PullPolicy::IfNotPresent => {
                if let Some(image) = self.cached_reference(&reference) {
                    return Ok(image);
                }
            }
            PullPolicy::Always => {}
        }

        let lock = self.lock(format!("ref:{reference}"));
        let waited = lock.try_lock().is_err();
        let _guard = lock.lock().await;
        if waited && let Some(mut image) = self.cached_reference(&reference) {
            // The pull this one waited for was made for it too: one download for both.
            image.pulled = true;
            return Ok(image);
        }

        let started = Instant::now();
        let fetched = match tokio::time::timeout(self.config.pull_timeout, self.fetch(&reference)).await {
            Ok(fetched) => fetched?,
            Err(_) => {
                return Err(PullError::Unreachable {
                    reference: reference.to_string(),
                    registry: reference.registry().to_string(),
                    reason: format!("pull timed out after {:?}", self.config.pull_timeout),
                });
            }
        };
        let rootfs = self.unpack(&reference, &fetched).await?;
        let meta = ImageMeta {
            digest: fetched.digest.clone(),
            config: fetched.config.clone(),
            size_bytes: fetched.size_bytes,
            layers: fetched.layers.iter().map(|(digest, _)| digest.clone()).collect(),
        };
        let hex = digest_hex(&fetched.digest).unwrap_or_default();
        self.write_json(&self.root.join("images").join(format!("{hex}.json")), &meta)
            .map_err(|source| cache_error(&reference, "writing the image's metadata", source))?;
        let entry = RefEntry { reference: reference.to_string(), digest: fetched.digest.clone() };
        self.write_json(&self.ref_path(&reference), &entry)
            .map_err(|source| cache_error(&reference, "writing the reference index", source))?;
        info!(image = %reference, digest = %fetched.digest, size = fetched.size_bytes, elapsed = ?started.elapsed(), "image pulled");
        Ok(Image {
            reference,
            digest: fetched.digest,
            rootfs,
            config: fetched.config,
            pulled: true,
            size_bytes: fetched.size_bytes,
        })
    }

    /// The image if it is here (pulled before under this name, or named by the digest of a
    /// manifest pulled before), without asking any registry.
    pub fn cached(&self, image: &str) -> Option<Image> {
        self.cached_reference(&ImageReference::normalize(image).ok()?)
    }

    fn cached_reference(&self, reference: &ImageReference) -> Option<Image> {
        let digest = match std::fs::read(self.ref_path(reference)) {
            Ok(bytes) => serde_json::from_slice::<RefEntry>(&bytes).ok()?.digest,
            // A digest names its manifest whatever tag it was pulled by.
            Err(_) => reference.digest()?.to_string(),
        };
        let hex = digest_hex(&digest)?;
        let meta: ImageMeta =
            serde_json::from_slice(&std::fs::read(self.root.join("images").join(format!("{hex}.json"))).ok()?).ok()?;
        let rootfs = self.root.join("rootfs").join(hex);
        if !rootfs.is_dir() {
            return None;
        }
        Some(Image {
            reference: reference.clone(),
            digest,
            rootfs,
            config: meta.config,
            pulled: false,
            size_bytes: meta.size_bytes,
        })
    }

    async fn fetch(&self, reference: &ImageReference) -> Result<Fetched, PullError> {
        let client = self.client_for(reference)?;
        let oci_ref = reference.to_oci();
        let auth = auth::registry_auth(self.config.docker_config.as_deref(), reference.registry());
        debug!(image = %reference, "resolving");
        let (manifest, digest) =
            client.pull_image_manifest(&oci_ref, &auth).await.map_err(|e| registry_error(reference, e))?;
        if digest_hex(&digest).is_none() {
            return Err(registry_message(
                reference,
                format!("manifest digest \"{digest}\" is not sha256:<64 hex digits>"),
            ));
        }
        let config_file = self.fetch_blob(&client, reference, &oci_ref, &manifest.config).await?;
        let config_blob = tokio::fs::read(&config_file)
            .await
            .map_err(|source| cache_error(reference, "reading the image config", source))?;
        let config = ImageConfig::from_blob(&config_blob)
            .map_err(|e| registry_message(reference, format!("image config {}: {e}", manifest.config.digest)))?;
        let mut size_bytes = u64::try_from(manifest.config.size).unwrap_or(0);
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for layer in &manifest.layers {
            let file = self.fetch_blob(&client, reference, &oci_ref, layer).await?;
            size_bytes += u64::try_from(layer.size).unwrap_or(0);
            layers.push((layer.digest.clone(), file));
        }
        Ok(Fetched { digest, config, size_bytes, layers })
    }

    /// The blob `descriptor` names, from the cache or downloaded into it; its content is checked
    /// against the digest (and size) before it is kept.
    async fn fetch_blob(
        &self,
        client: &oci_client::Client,
        reference: &ImageReference,
        oci_ref: &oci_client::Reference,
        descriptor: &OciDescriptor,
    ) -> Result<PathBuf, PullError> {
        let hex = digest_hex(&descriptor.digest).ok_or_else(|| {
            registry_message(reference, format!("blob digest \"{}\" is not sha256:<64 hex digits>", descriptor.digest))
        })?;
        let path = self.root.join("blobs/sha256").join(hex);
        if path.is_file() {
            return Ok(path);
        }
        let lock = self.lock(format!("blob:{hex}"));
        let _guard = lock.lock().await;
        if path.is_file() {
            return Ok(path);
        }
        let tmp = self.tmp_path("blob");
        let result = async {
            let file = tokio::fs::File::create(&tmp)
                .await
                .map_err(|source| cache_error(reference, "creating a blob file", source))?;
            let mut writer = HashingWriter { inner: file, hasher: Sha256::new(), written: 0 };
            client.pull_blob(oci_ref, descriptor, &mut writer).await.map_err(|e| registry_error(reference, e))?;
            writer.inner.flush().await.map_err(|source| cache_error(reference, "writing a blob", source))?;
            let actual = hex::encode(writer.hasher.finalize());
            if actual != hex {
                return Err(registry_message(
                    reference,
                    format!(
                        "blob {}: content digest sha256:{actual} does not match (failed precondition)",
                        descriptor.digest
                    ),
                ));
            }
            if descriptor.size > 0 && u64::try_from(descriptor.size).ok() != Some(writer.written) {
                return Err(registry_message(
                    reference,
                    format!(
                        "blob {}: {} bytes received, the manifest says {}",
                        descriptor.digest, writer.written, descriptor.size
                    ),
                ));
            }
            std::fs::rename(&tmp, &path).map_err(|source| cache_error(reference, "storing a blob", source))
        }
        .await;
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map(|()| path)
    }

    /// The tree of `fetched`'s manifest: already here, or unpacked beside and renamed into place.
    async fn unpack(&self, reference: &ImageReference, fetched: &Fetched) -> Result<PathBuf, PullError> {
        let hex = digest_hex(&fetched.digest).unwrap_or_default();
        let rootfs = self.root.join("rootfs").join(hex);
        if rootfs.is_dir() {
            return Ok(rootfs);
        }
        let lock = self.lock(format!("rootfs:{hex}"));
        let _guard = lock.lock().await;
        if rootfs.is_dir() {
            return Ok(rootfs);
        }
        let tmp = self.tmp_path("rootfs");
        let options = UnpackOptions { id_shift: self.config.id_shift, chown: rustix::process::geteuid().is_root() };
        let layers = fetched.layers.clone();
        let (work, target) = (tmp.clone(), rootfs.clone());
        let started = Instant::now();
        let outcome = tokio::task::spawn_blocking(move || -> Result<(), PullOrUnpack> {
            make_tree_root(&work, options).map_err(|e| PullOrUnpack::Io("making the image's root directory", e))?;
            let stats = unpack_layers(&work, &layers, options).map_err(PullOrUnpack::Unpack)?;
            debug!(?stats, "layers applied");
            match std::fs::rename(&work, &target) {
                Ok(()) => Ok(()),
                // Another process finished the same tree first: theirs is as good.
                Err(e) if target.is_dir() => {
                    debug!(error = %e, "tree already in place");
                    fsutil::remove_tree(&work).map_err(|e| PullOrUnpack::Io("removing a duplicate tree", e))
                }
                Err(e) => Err(PullOrUnpack::Io("moving the tree into place", e)),
            }
        })
        .await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(join) => Err(PullOrUnpack::Io("unpacking", io::Error::other(join.to_string()))),
        };
        if let Err(e) = outcome {
            if let Err(cleanup) = fsutil::remove_tree(&tmp) {
                warn!(path = %tmp.display(), error = %cleanup, "half-unpacked tree not removed");
            }
            return Err(match e {
                PullOrUnpack::Unpack(source) => PullError::Unpack { reference: reference.to_string(), source },
                PullOrUnpack::Io(context, source) => cache_error(reference, context, source),
            });
        }
        debug!(image = %reference, elapsed = ?started.elapsed(), "unpacked");
        Ok(rootfs)
    }

    fn client_for(&self, reference: &ImageReference) -> Result<oci_client::Client, PullError> {
        let plain = speaks_plain_http(reference, &self.config.insecure_registries);
        let config = ClientConfig {
            protocol: if plain { ClientProtocol::Http } else { ClientProtocol::Https },
            platform_resolver: Some(Box::new(oci_client::client::current_platform_resolver)),
            connect_timeout: Some(self.config.pull_timeout.min(Duration::from_secs(30))),
            ..ClientConfig::default()
        };
        oci_client::Client::try_from(config)
            .map_err(|e| registry_message(reference, format!("registry client: {}", chain(&e))))
    }

    fn ref_path(&self, reference: &ImageReference) -> PathBuf {
        let key = hex::encode(Sha256::digest(reference.to_string().as_bytes()));
        self.root.join("refs").join(format!("{key}.json"))
    }

    fn tmp_path(&self, what: &str) -> PathBuf {
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{}.{n}.{what}", std::process::id()))
    }

    /// Writes `value` beside `path` and renames it into place, so a reader sees all or nothing.
    fn write_json(&self, path: &Path, value: &impl Serialize) -> io::Result<()> {
        let tmp = self.tmp_path("json");
        let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    fn lock(&self, key: String) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key, Arc::downgrade(&lock));
        lock
    }

    /// Removes `tmp/` entries of processes that are gone (a pull killed half-way). Entries of
    /// live processes are another emulator's pulls in progress, on the same root.
    fn remove_stale_work(&self) -> Result<(), StoreError> {
        let tmp = self.root.join("tmp");
        let entries = std::fs::read_dir(&tmp).map_err(|source| StoreError { path: tmp.clone(), source })?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let owner = name.to_str().and_then(|n| n.split('.').next()).and_then(|pid| pid.parse::<i32>().ok());
            let alive = owner.is_some_and(|pid| pid as u32 == std::process::id() || process_alive(pid));
            if !alive {
                let path = entry.path();
                info!(path = %path.display(), "removing the work of an ended pull");
                fsutil::remove_tree(&path)
                    .or_else(|_| std::fs::remove_file(&path))
                    .map_err(|source| StoreError { path, source })?;
            }
        }
        Ok(())
    }
}

/// Whether `reference`'s registry is spoken to over plain HTTP: a loopback one, or one listed
/// as insecure (by `host:port`, or by host for every port), as Docker decides.
fn speaks_plain_http(reference: &ImageReference, insecure_registries: &[String]) -> bool {
    let registry = reference.registry();
    reference.is_loopback_registry() || insecure_registries.iter().any(|r| r == registry || r == host_of(registry))
}

/// Whether a process `pid` exists (`kill(pid, 0)` answers EPERM for another user's live one).
fn process_alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH)))
}

enum PullOrUnpack {
    Unpack(crate::unpack::UnpackError),
    Io(&'static str, io::Error),
}

/// The tree's own root: 0755, owned by the image's (shifted) root when owners are set; the
/// layers' `./` entry, when there is one, says otherwise.
fn make_tree_root(path: &Path, options: UnpackOptions) -> io::Result<()> {
    std::fs::create_dir(path)?;
    let fd = fsutil::open_root(path)?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))?;
    if options.chown && options.id_shift != 0 {
        let id = options.id_shift;
        rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(id)), Some(rustix::fs::Gid::from_raw(id)))?;
    }
    Ok(())
}

/// The hex part of `sha256:<64 lowercase hex>`, the only digests used as file names.
pub(crate) fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(hex)
}

fn cache_error(reference: &ImageReference, context: &str, source: io::Error) -> PullError {
    PullError::Cache { reference: reference.to_string(), context: context.to_string(), source }
}

fn registry_message(reference: &ImageReference, message: String) -> PullError {
    PullError::Registry { reference: reference.to_string(), message }
}

/// Sorts a registry client error into what a user can act on.
fn registry_error(reference: &ImageReference, error: OciDistributionError) -> PullError {
    let name = reference.to_string();
    let not_found = |message: String| PullError::NotFound { reference: name.clone(), message };
    let unauthorized = |message: String| PullError::Unauthorized { reference: name.clone(), message };
    match error {
        OciDistributionError::RequestError(ref e) if e.is_connect() || e.is_timeout() => PullError::Unreachable {
            reference: name.clone(),
            registry: reference.registry().to_string(),
            reason: chain(&error),
        },
        OciDistributionError::UnauthorizedError { url } => unauthorized(format!("401 Unauthorized from {url}")),
        OciDistributionError::AuthenticationFailure(message) => {
            unauthorized(format!("authentication failed: {message}"))
        }
        OciDistributionError::RegistryError { envelope, url } => {
            let messages = envelope
                .errors
                .iter()
                .map(|e| if e.message.is_empty() { format!("{:?}", e.code) } else { e.message.clone() })
                .collect::<Vec<_>>()
                .join("; ");
            let codes = |wanted: &[OciErrorCode]| envelope.errors.iter().any(|e| wanted.contains(&e.code));
            if codes(&[
                OciErrorCode::ManifestUnknown,
                OciErrorCode::NameUnknown,
                OciErrorCode::NotFound,
                OciErrorCode::BlobUnknown,
            ]) {
                not_found(messages)
            } else if codes(&[OciErrorCode::Unauthorized, OciErrorCode::Denied]) {
                unauthorized(messages)
            } else {
                registry_message(reference, format!("{messages} ({url})"))
            }
        }
        OciDistributionError::ServerError { code: 404, message, .. } => not_found(non_empty(message, "404 Not Found")),
        OciDistributionError::ServerError { code: code @ (401 | 403), message, .. } => {
            unauthorized(non_empty(message, &format!("HTTP {code}")))
        }
        OciDistributionError::ImageManifestNotFoundError(message) => {
            not_found(format!("{message} ({}/{})", std::env::consts::OS, std::env::consts::ARCH))
        }
        other => registry_message(reference, chain(&other)),
    }
}

fn non_empty(message: String, fallback: &str) -> String {
    if message.trim().is_empty() { fallback.to_string() } else { message.trim().to_string() }
}

/// Writes through, hashing what was accepted.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for HashingWriter<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            self.hasher.update(&buf[..n]);
            self.written += n as u64;
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Compiles only if a pull can run on another task and the store can be shared.
    #[allow(dead_code)]
    fn pulls_can_be_spawned(store: Arc<ImageStore>) -> tokio::task::JoinHandle<Result<Image, PullError>> {
        tokio::spawn(async move { store.pull("busybox", PullPolicy::Always).await })
    }

    #[test]
    fn only_sha256_digests_become_file_names() {
        let good = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(digest_hex(&good), Some(&good[7..]));
        assert_eq!(digest_hex("sha256:../../etc"), None);
        assert_eq!(digest_hex(&format!("sha512:{}", "ab".repeat(32))), None);
        assert_eq!(digest_hex(&format!("sha256:{}", "AB".repeat(32))), None);
    }

    #[test]
    fn plain_http_only_for_loopback_and_insecure_registries() {
        let insecure = vec!["registry.lan:5000".to_string(), "10.0.0.7".to_string()];
        let plain = |name: &str| speaks_plain_http(&ImageReference::normalize(name).unwrap(), &insecure);
        assert!(plain("127.0.0.1:5000/x"));
        assert!(plain("localhost/x"));
        assert!(plain("registry.lan:5000/x"));
        assert!(plain("10.0.0.7:5000/x"));
        assert!(!plain("registry.lan:5001/x"));
        assert!(!plain("registry.lan/x"));
        assert!(!plain("ubuntu"));
        assert!(!plain("ghcr.io/a/b"));
    }

    #[test]
    fn stale_work_is_removed_and_live_work_kept() {
        let dir = tempfile::tempdir().unwrap();
        let config = ImageStoreConfig { docker_config: None, ..ImageStoreConfig::new(dir.path()) };
        drop(ImageStore::new(config.clone()).unwrap());
        // A pid that cannot be running (above the kernel's maximum), and this process's own.
        let stale = dir.path().join("tmp/2147483000.0.rootfs");
        let live = dir.path().join(format!("tmp/{}.99.rootfs", std::process::id()));
        std::fs::create_dir_all(stale.join("usr/bin")).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        // A read-only directory, as images have, does not stop the removal.
        std::fs::set_permissions(stale.join("usr"), std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        ImageStore::new(config).unwrap();
        assert!(!stale.exists());
        assert!(live.exists());
    }
}
