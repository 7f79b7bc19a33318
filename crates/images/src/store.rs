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
//! gc.lock                pulls hold it shared, a collection exclusive (flock)
//! images/<hex>.lock      held shared while the image is in use (an [`Image`]'s lease)
//! ```
//!
//! Every pull touches `images/<hex>.json`: its modification time is the image's last use, the
//! order in which [`ImageStore::prune`] and the cache's bound evict.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use cwsandbox_sync::MutexUnpoisoned;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::auth::{self, PullCredentials};
use crate::config::ImageConfig;
use crate::error::{PullError, StoreError, chain};
use crate::fsutil;
use crate::reference::{ImageReference, PullPolicy, host_of};
use crate::unpack::{UnpackFailure, UnpackOptions, unpack_layers};
use oci_client::secrets::RegistryAuth;

/// The default most an image may unpack to ([`ImageStoreConfig::max_image_bytes`]): 8 GiB.
/// The images sandboxes run (python, node, ubuntu, CUDA runtime images) unpack to well under
/// that, and it stays below the free disk of a typical CI machine (GitHub's hosted runners have
/// about 14 GB), so a decompression bomb fails its pull instead of filling the disk. The largest
/// images (CUDA devel, NGC PyTorch: 10 to 20 GiB) need it raised.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 8 << 30;
/// The default most entries an image's layers may hold ([`ImageStoreConfig::max_image_entries`]):
/// a million, several times the largest common images (a few hundred thousand files), far below
/// what it takes to exhaust a file system's inodes.
pub const DEFAULT_MAX_IMAGE_ENTRIES: u64 = 1_000_000;
/// The default bound of the cache ([`ImageStoreConfig::max_cache_bytes`]): 32 GiB, four images
/// at the size limit; past it the least recently used images not in use are evicted.
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 32 << 30;

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
    /// The most an image's layers may unpack to: the sum of the sizes their entries declare (a
    /// file's apparent size: a sparse file counts its holes, though they take no disk), over
    /// all layers. An entry that would pass it is refused before it is written, the pull fails
    /// with [`PullError::TooLarge`] and the partial tree is removed. 0: no limit.
    pub max_image_bytes: u64,
    /// The most entries (files, directories, links, whiteouts…) an image's layers may hold
    /// together. 0: no limit.
    pub max_image_entries: u64,
    /// The cache's bound: its blobs plus the data of its unpacked trees. After each pull that
    /// leaves the cache over it, blobs no image refers to and then the least recently used
    /// images that are not in use are removed until it is under. 0: no bound.
    pub max_cache_bytes: u64,
    /// Mirrors by registry host (`docker.io` → `["http://127.0.0.1:5000"]`), as containerd's
    /// `hosts.toml`: a pull asks each mirror in order for the same repository and tag or digest
    /// (`docker.io/library/python:3.11` → `library/python:3.11` of the mirror), and the
    /// registry itself last. A mirror that fails (404, unreachable, anything) passes to the next;
    /// when all fail, the error names each one tried with its error. `http://` only for loopback
    /// mirrors and `insecure_registries`, as for registries; a mirror is `scheme://host[:port]`.
    pub registry_mirrors: std::collections::BTreeMap<String, Vec<String>>,
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
            max_image_bytes: DEFAULT_MAX_IMAGE_BYTES,
            max_image_entries: DEFAULT_MAX_IMAGE_ENTRIES,
            max_cache_bytes: DEFAULT_MAX_CACHE_BYTES,
            registry_mirrors: Default::default(),
        }
    }
}

/// An image ready to run. While any clone of it lives, its tree is in use: neither
/// [`ImageStore::prune`] nor the cache's bound removes it (in this process or any other sharing
/// the cache), so a runtime keeps it as long as a sandbox runs on its tree.
#[derive(Debug, Clone)]
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
    /// A shared lock on `images/<hex>.lock`, released when the last clone goes (held, never read).
    _lease: Arc<ImageLease>,
}

/// Two images are equal when they are the same image; their leases are not part of it.
impl PartialEq for Image {
    fn eq(&self, other: &Self) -> bool {
        (&self.reference, &self.digest, &self.rootfs, &self.config, self.pulled, self.size_bytes)
            == (&other.reference, &other.digest, &other.rootfs, &other.config, other.pulled, other.size_bytes)
    }
}

impl Eq for Image {}

/// An open lock file holding `flock(LOCK_SH)`: the image is in use. The lock goes with the file.
#[derive(Debug)]
pub(crate) struct ImageLease {
    _file: File,
}

/// What [`ImageStore::prune`] (or the cache's bound) removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// The images removed, least recently used first.
    pub removed: Vec<PrunedImage>,
    /// Blobs removed that no image left refers to (layers of failed pulls, of removed images).
    pub blobs_removed: u64,
    /// The bytes freed: blobs and trees' data.
    pub bytes_freed: u64,
    /// Images kept because a sandbox (of this process or another sharing the cache) uses them.
    pub in_use: Vec<String>,
    /// The cache's size after the removal.
    pub bytes_after: u64,
}

/// One image removed from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedImage {
    /// The manifest digest.
    pub digest: String,
    /// The names it was pulled by.
    pub references: Vec<String>,
    /// Its tree's data and the blobs only it referred to.
    pub bytes: u64,
}
/// Pulls images and keeps them. Cheap to share (`Arc`); pulls of the same name at the same time
/// share one download.
pub struct ImageStore {
    pub(crate) config: ImageStoreConfig,
    pub(crate) root: PathBuf,
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    next_tmp: AtomicU64,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ImageMeta {
    pub(crate) digest: String,
    pub(crate) config: ImageConfig,
    pub(crate) size_bytes: u64,
    pub(crate) layers: Vec<String>,
    /// The config blob's digest (absent in metadata written before it was recorded).
    #[serde(default)]
    pub(crate) config_blob: Option<String>,
    /// The data written to the tree (sparse files' holes not counted): the cache's accounting.
    #[serde(default)]
    pub(crate) unpacked_bytes: u64,
    /// Set when the image was pulled with a sandbox's own registry credentials
    /// (`image_pull_credentials`) and never shown to be readable without them: the fingerprints
    /// of the credentials the registry let read it. Another sandbox gets it from the cache only
    /// with one of those, or after the registry lets its own credentials read the same manifest
    /// (as the kubelet's "ensure secret pulled images" checks), so a private image does not
    /// reach an organization through the cache. `None`: readable by anyone here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) readers: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RefEntry {
    pub(crate) reference: String,
    pub(crate) digest: String,
}

/// What the registry gave for one image: everything the unpack needs, on disk.
pub(crate) struct Fetched {
    pub(crate) digest: String,
    pub(crate) config: ImageConfig,
    pub(crate) config_blob: String,
    pub(crate) size_bytes: u64,
    pub(crate) layers: Vec<(String, PathBuf)>,
    /// The fingerprint of the sandbox's own credentials, when the registry was read with them.
    pub(crate) sandbox_reader: Option<String>,
}

/// Who asks for an image: the credentials a pull of its registry uses, and whether they are a
/// sandbox's own (`image_pull_credentials`) rather than the emulator's docker config.
#[derive(Clone)]
struct Requester {
    /// The sandbox's credentials, if it brought any.
    credentials: Option<PullCredentials>,
}

impl Requester {
    /// The sandbox's authentication for `registry`, if it brought credentials for it.
    fn sandbox_auth(&self, registry: &str) -> Option<RegistryAuth> {
        self.credentials.as_ref().and_then(|credentials| credentials.auth_for(registry))
    }
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

    /// A new path under the cache's work directory, for a file on its way in (an uploaded
    /// archive): on the cache's file system, and removed by the next store opened on the root
    /// if this process dies before it does.
    pub fn work_path(&self, what: &str) -> PathBuf {
        self.tmp_path(what)
    }

    /// The store's configuration.
    pub fn config(&self) -> &ImageStoreConfig {
        &self.config
    }

    /// Gets `image` as `policy` says: from the cache (`IfNotPresent` with the image here,
    /// `Never`), or from its registry (`Always`, or not here yet). Layers already here are not
    /// downloaded again; trees are unpacked once per manifest.
    pub async fn pull(&self, image: &str, policy: PullPolicy) -> Result<Image, PullError> {
        self.pull_with(image, policy, None).await
    }

    /// [`ImageStore::pull`] for a sandbox that brings its own credentials for the image's
    /// registry (`image_pull_credentials`): they replace the emulator's docker config for that
    /// registry, and an image pulled with them stays theirs in the cache (see `ImageMeta`).
    pub async fn pull_with(
        &self,
        image: &str,
        policy: PullPolicy,
        credentials: Option<&PullCredentials>,
    ) -> Result<Image, PullError> {
        let reference = ImageReference::normalize(image)?;
        let requester = Requester { credentials: credentials.cloned() };
        match policy {
            PullPolicy::Never => {
                return self
                    .cached_for(&reference, &requester, false)
                    .await?
                    .ok_or_else(|| PullError::NeverPull { reference: reference.to_string() });
            }
            PullPolicy::IfNotPresent => {
                if let Some(image) = self.cached_for(&reference, &requester, true).await? {
                    return Ok(image);
                }
            }
            PullPolicy::Always => {}
        }

        let lock = self.lock(format!("ref:{reference}"));
        let waited = lock.try_lock().is_err();
        let _guard = lock.lock().await;
        if waited && let Some(mut image) = self.cached_for(&reference, &requester, true).await? {
            // The pull this one waited for was made for it too: one download for both.
            image.pulled = true;
            return Ok(image);
        }

        // Shared with other pulls, exclusive with a collection: the blobs this pull downloads
        // belong to no image until its metadata is written, and must not be collected before.
        let gc_guard =
            self.lock_cache(true).await.map_err(|source| cache_error(&reference, "locking the cache", source))?;
        let started = Instant::now();
        let fetched =
            match tokio::time::timeout(self.config.pull_timeout, self.fetch_through_mirrors(&reference, &requester))
                .await
            {
                Ok(fetched) => fetched?,
                Err(_) => {
                    return Err(PullError::Unreachable {
                        reference: reference.to_string(),
                        registry: reference.registry().to_string(),
                        reason: format!("pull timed out after {:?}", self.config.pull_timeout),
                    });
                }
            };
        let (rootfs, unpacked_now) = self.unpack(&reference, &fetched).await?;
        let hex = digest_hex(&fetched.digest).unwrap_or_default().to_string();
        let meta_path = self.root.join("images").join(format!("{hex}.json"));
        let previous = read_meta(&meta_path);
        let unpacked_bytes = match unpacked_now {
            Some(bytes) => bytes,
            // Unpacked by an earlier pull: its accounting stands.
            None => previous.as_ref().map(|meta| meta.unpacked_bytes).unwrap_or(0),
        };
        // Read with the sandbox's own credentials: theirs (and those that read it before), unless
        // the cache already held it as readable by anyone.
        let readers = match (&fetched.sandbox_reader, previous) {
            (None, _) => None,
            (Some(_), Some(previous)) if previous.readers.is_none() => None,
            (Some(reader), previous) => {
                let mut readers = previous.and_then(|previous| previous.readers).unwrap_or_default();
                if !readers.contains(reader) {
                    readers.push(reader.clone());
                }
                Some(readers)
            }
        };
        let meta = ImageMeta {
            digest: fetched.digest.clone(),
            config: fetched.config.clone(),
            size_bytes: fetched.size_bytes,
            layers: fetched.layers.iter().map(|(digest, _)| digest.clone()).collect(),
            config_blob: Some(fetched.config_blob.clone()),
            unpacked_bytes,
            readers,
        };
        // A new file: its modification time, now, is the image's last use.
        self.write_json(&meta_path, &meta)
            .map_err(|source| cache_error(&reference, "writing the image's metadata", source))?;
        let entry = RefEntry { reference: reference.to_string(), digest: fetched.digest.clone() };
        self.write_json(&self.ref_path(&reference), &entry)
            .map_err(|source| cache_error(&reference, "writing the reference index", source))?;
        // No collection runs while this pull holds the cache shared, so the lease is free to take.
        let lease = lease(&self.root, &hex, true)
            .and_then(|lease| lease.ok_or_else(|| io::Error::other("the image is being removed")))
            .map_err(|source| cache_error(&reference, "leasing the image", source))?;
        drop(gc_guard);
        info!(image = %reference, digest = %fetched.digest, size = fetched.size_bytes, elapsed = ?started.elapsed(), "image pulled");
        let image = Image {
            reference,
            digest: fetched.digest,
            rootfs,
            config: fetched.config,
            pulled: true,
            size_bytes: fetched.size_bytes,
            _lease: Arc::new(lease),
        };
        self.keep_in_bound().await;
        Ok(image)
    }

    /// Removes every image no sandbox uses (here or in another process sharing the cache) and
    /// every blob no image left refers to; waits for pulls in progress to end first.
    pub async fn prune(&self) -> Result<PruneReport, StoreError> {
        let root = self.root.clone();
        let guard = self.lock_cache(false).await.map_err(|source| StoreError { path: root.join("gc.lock"), source })?;
        let outcome = tokio::task::spawn_blocking(move || {
            let report = collect(&root, None);
            drop(guard);
            report
        })
        .await
        .map_err(|join| StoreError { path: self.root.clone(), source: io::Error::other(join.to_string()) })?;
        let report = outcome.map_err(|source| StoreError { path: self.root.clone(), source })?;
        info!(
            images = report.removed.len(),
            blobs = report.blobs_removed,
            freed = report.bytes_freed,
            "image cache pruned"
        );
        Ok(report)
    }

    /// After a pull: when the cache is over its bound, removes unreferenced blobs and then the
    /// least recently used images not in use. Skipped (for the next pull to do) while another
    /// pull or collection holds the cache; a failure is logged, the pull stands.
    pub(crate) async fn keep_in_bound(&self) {
        let bound = self.config.max_cache_bytes;
        if bound == 0 {
            return;
        }
        let root = self.root.clone();
        let outcome = tokio::task::spawn_blocking(move || -> io::Result<Option<PruneReport>> {
            let Some(_guard) = lock_file(&root.join("gc.lock"), FlockMode::ExclusiveNow)? else {
                return Ok(None);
            };
            collect(&root, Some(bound)).map(Some)
        })
        .await;
        match outcome {
            Ok(Ok(Some(report))) if !report.removed.is_empty() || report.blobs_removed > 0 => info!(
                images = ?report.removed.iter().map(|image| &image.digest).collect::<Vec<_>>(),
                blobs = report.blobs_removed,
                freed = report.bytes_freed,
                size = report.bytes_after,
                bound,
                "image cache over its bound: least recently used images removed"
            ),
            Ok(Ok(Some(report))) if report.bytes_after > bound => warn!(
                size = report.bytes_after,
                bound,
                in_use = report.in_use.len(),
                "image cache over its bound, and every image in it is in use"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "image cache bound not kept"),
            Err(join) => warn!(error = %join, "image cache bound not kept"),
        }
    }

    /// Locks `gc.lock`: shared for a pull, exclusive for a collection (waiting for the other
    /// holders, off the async threads).
    pub(crate) async fn lock_cache(&self, shared: bool) -> io::Result<File> {
        let path = self.root.join("gc.lock");
        let mode = if shared { FlockMode::Shared } else { FlockMode::Exclusive };
        tokio::task::spawn_blocking(move || lock_file(&path, mode))
            .await
            .map_err(|join| io::Error::other(join.to_string()))?
            .map(|file| file.ok_or_else(|| io::Error::other("gc.lock not taken")))?
    }

    /// The image if it is here (pulled before under this name, or named by the digest of a
    /// manifest pulled before), without asking any registry.
    pub fn cached(&self, image: &str) -> Option<Image> {
        self.cached_reference(&ImageReference::normalize(image).ok()?).map(|(image, _)| image)
    }

    /// The cached image of `reference`, with its metadata's `readers` (who may read it, when only
    /// some may).
    fn cached_reference(&self, reference: &ImageReference) -> Option<(Image, Option<Vec<String>>)> {
        let digest = match std::fs::read(self.ref_path(reference)) {
            Ok(bytes) => serde_json::from_slice::<RefEntry>(&bytes).ok()?.digest,
            // A digest names its manifest whatever tag it was pulled by.
            Err(_) => reference.digest()?.to_string(),
        };
        let hex = digest_hex(&digest)?;
        let meta: ImageMeta =
            serde_json::from_slice(&std::fs::read(self.root.join("images").join(format!("{hex}.json"))).ok()?).ok()?;
        // Held exclusively: a listing's probe of whether it is in use (an instant), or a
        // collection removing it (metadata first, then the tree). Wait, then look again: a
        // probe must not make a cached image look absent (and a pull ask the registry).
        let lease = match lease(&self.root, hex, false).ok()? {
            Some(lease) => lease,
            None => {
                let lease = lease(&self.root, hex, true).ok()??;
                if !self.root.join("images").join(format!("{hex}.json")).is_file() {
                    return None;
                }
                lease
            }
        };
        let rootfs = self.root.join("rootfs").join(hex);
        if !rootfs.is_dir() {
            return None;
        }
        touch(&self.root.join("images").join(format!("{hex}.json")));
        let image = Image {
            reference: reference.clone(),
            digest,
            rootfs,
            config: meta.config,
            pulled: false,
            size_bytes: meta.size_bytes,
            _lease: Arc::new(lease),
        };
        Some((image, meta.readers))
    }

    /// The cached image for `requester`: any cached image readable by anyone; an image pulled
    /// with a sandbox's own credentials only for those credentials, or once the registry let the
    /// requester's credentials read the same manifest (`may_ask_registry`; pull policy `Never`
    /// may not ask, so it is refused). `None` when the image is not here, or the registry now
    /// has another manifest under the reference (a pull fetches it).
    async fn cached_for(
        &self,
        reference: &ImageReference,
        requester: &Requester,
        may_ask_registry: bool,
    ) -> Result<Option<Image>, PullError> {
        let Some((image, readers)) = self.cached_reference(reference) else { return Ok(None) };
        let Some(readers) = readers else { return Ok(Some(image)) };
        let own_auth = requester.sandbox_auth(reference.registry());
        let fingerprint = own_auth.as_ref().and_then(auth::fingerprint);
        if fingerprint.as_ref().is_some_and(|fingerprint| readers.contains(fingerprint)) {
            return Ok(Some(image));
        }
        if !may_ask_registry {
            return Err(PullError::Unauthorized {
                reference: reference.to_string(),
                message: "the cached image was pulled with other registry credentials, and pull policy Never does not let the registry check these".to_owned(),
            });
        }
        let auth =
            own_auth.unwrap_or_else(|| auth::registry_auth(self.config.docker_config.as_deref(), reference.registry()));
        let plain = speaks_plain_http(reference, &self.config.insecure_registries);
        let client = self.client_for(reference, plain)?;
        let (_, digest) = client
            .pull_image_manifest(&reference.to_oci(), &auth)
            .await
            .map_err(|error| registry_error(reference, error))?;
        if digest != image.digest {
            return Ok(None);
        }
        info!(image = %reference, "the registry lets these credentials read the cached image");
        // Read with the emulator's own credentials (or none): by anyone here from now on; with a
        // sandbox's own: by those too.
        let meta_path =
            self.root.join("images").join(format!("{}.json", digest_hex(&image.digest).unwrap_or_default()));
        if let Some(mut meta) = read_meta(&meta_path) {
            meta.readers = fingerprint.map(|fingerprint| {
                let mut readers = meta.readers.take().unwrap_or_default();
                readers.push(fingerprint);
                readers
            });
            if let Err(error) = self.write_json(&meta_path, &meta) {
                warn!(image = %reference, %error, "could not record who may read the cached image");
            }
        }
        Ok(Some(image))
    }

    /// Fetches `reference` from its registry's mirrors in order, then from the registry itself
    /// (with the requester's own credentials, if it brought some for that registry).
    async fn fetch_through_mirrors(
        &self,
        reference: &ImageReference,
        requester: &Requester,
    ) -> Result<Fetched, PullError> {
        let upstream_plain = speaks_plain_http(reference, &self.config.insecure_registries);
        let upstream_auth = requester.sandbox_auth(reference.registry());
        let Some(mirrors) = self.config.registry_mirrors.get(reference.registry()).filter(|m| !m.is_empty()) else {
            return self.fetch(reference, upstream_plain, upstream_auth).await;
        };
        let mut tried = Vec::new();
        for mirror in mirrors {
            let outcome = match mirror_reference(reference, mirror, &self.config.insecure_registries) {
                Ok((mirrored, plain)) => self.fetch(&mirrored, plain, None).await,
                Err(why) => Err(registry_message(reference, why)),
            };
            match outcome {
                Ok(fetched) => {
                    info!(image = %reference, mirror, "pulled from a mirror");
                    return Ok(fetched);
                }
                Err(error) => {
                    debug!(image = %reference, mirror, error = %error, "mirror failed, trying the next");
                    tried.push(format!("mirror {mirror}: {error}"));
                }
            }
        }
        self.fetch(reference, upstream_plain, upstream_auth).await.map_err(|error| with_tried(error, &tried))
    }

    /// Fetches from one registry, with `sandbox_auth` (a sandbox's own credentials) when given,
    /// else the emulator's docker config.
    async fn fetch(
        &self,
        reference: &ImageReference,
        plain: bool,
        sandbox_auth: Option<RegistryAuth>,
    ) -> Result<Fetched, PullError> {
        let client = self.client_for(reference, plain)?;
        let oci_ref = reference.to_oci();
        let sandbox_reader = sandbox_auth.as_ref().and_then(auth::fingerprint);
        let auth = sandbox_auth
            .unwrap_or_else(|| auth::registry_auth(self.config.docker_config.as_deref(), reference.registry()));
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
        Ok(Fetched { digest, config, config_blob: manifest.config.digest.clone(), size_bytes, layers, sandbox_reader })
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

    /// The tree of `fetched`'s manifest: already here (`None`), or unpacked beside and renamed
    /// into place (with the bytes written).
    pub(crate) async fn unpack(
        &self,
        reference: &ImageReference,
        fetched: &Fetched,
    ) -> Result<(PathBuf, Option<u64>), PullError> {
        let hex = digest_hex(&fetched.digest).unwrap_or_default();
        let rootfs = self.root.join("rootfs").join(hex);
        if rootfs.is_dir() {
            return Ok((rootfs, None));
        }
        let lock = self.lock(format!("rootfs:{hex}"));
        let _guard = lock.lock().await;
        if rootfs.is_dir() {
            return Ok((rootfs, None));
        }
        let tmp = self.tmp_path("rootfs");
        let no_limit_if_zero = |limit: u64| if limit == 0 { u64::MAX } else { limit };
        let options = UnpackOptions {
            id_shift: self.config.id_shift,
            chown: rustix::process::geteuid().is_root(),
            max_bytes: no_limit_if_zero(self.config.max_image_bytes),
            max_entries: no_limit_if_zero(self.config.max_image_entries),
        };
        let layers = fetched.layers.clone();
        let (work, target) = (tmp.clone(), rootfs.clone());
        let started = Instant::now();
        let outcome = tokio::task::spawn_blocking(move || -> Result<u64, PullOrUnpack> {
            make_tree_root(&work, options).map_err(|e| PullOrUnpack::Io("making the image's root directory", e))?;
            let stats = unpack_layers(&work, &layers, options).map_err(|failure| match failure {
                UnpackFailure::Layer(error) => PullOrUnpack::Unpack(error),
                UnpackFailure::Limit(limit) => PullOrUnpack::Limit(limit),
            })?;
            debug!(?stats, "layers applied");
            match std::fs::rename(&work, &target) {
                Ok(()) => Ok(stats.written_bytes),
                // Another process finished the same tree first: theirs is as good.
                Err(e) if target.is_dir() => {
                    debug!(error = %e, "tree already in place");
                    fsutil::remove_tree(&work).map_err(|e| PullOrUnpack::Io("removing a duplicate tree", e))?;
                    Ok(stats.written_bytes)
                }
                Err(e) => Err(PullOrUnpack::Io("moving the tree into place", e)),
            }
        })
        .await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(join) => Err(PullOrUnpack::Io("unpacking", io::Error::other(join.to_string()))),
        };
        let written = match outcome {
            Ok(written) => written,
            Err(e) => {
                if let Err(cleanup) = fsutil::remove_tree(&tmp) {
                    warn!(path = %tmp.display(), error = %cleanup, "half-unpacked tree not removed");
                }
                return Err(match e {
                    PullOrUnpack::Unpack(source) => PullError::Unpack { reference: reference.to_string(), source },
                    PullOrUnpack::Limit(limit) => PullError::TooLarge { reference: reference.to_string(), limit },
                    PullOrUnpack::Io(context, source) => cache_error(reference, context, source),
                });
            }
        };
        debug!(image = %reference, elapsed = ?started.elapsed(), "unpacked");
        Ok((rootfs, Some(written)))
    }

    fn client_for(&self, reference: &ImageReference, plain: bool) -> Result<oci_client::Client, PullError> {
        let config = ClientConfig {
            protocol: if plain { ClientProtocol::Http } else { ClientProtocol::Https },
            platform_resolver: Some(Box::new(oci_client::client::current_platform_resolver)),
            connect_timeout: Some(self.config.pull_timeout.min(Duration::from_secs(30))),
            ..ClientConfig::default()
        };
        oci_client::Client::try_from(config)
            .map_err(|e| registry_message(reference, format!("registry client: {}", chain(&e))))
    }

    pub(crate) fn ref_path(&self, reference: &ImageReference) -> PathBuf {
        let key = hex::encode(Sha256::digest(reference.to_string().as_bytes()));
        self.root.join("refs").join(format!("{key}.json"))
    }

    pub(crate) fn tmp_path(&self, what: &str) -> PathBuf {
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{}.{n}.{what}", std::process::id()))
    }

    /// Writes `value` beside `path` and renames it into place, so a reader sees all or nothing.
    pub(crate) fn write_json(&self, path: &Path, value: &impl Serialize) -> io::Result<()> {
        let tmp = self.tmp_path("json");
        let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    fn lock(&self, key: String) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock_unpoisoned();
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

/// `reference` as asked of `mirror` (`scheme://host[:port]`): the same repository and tag or
/// digest on the mirror's host, and whether it is spoken to over plain HTTP; or why the mirror
/// cannot be used.
fn mirror_reference(
    reference: &ImageReference,
    mirror: &str,
    insecure_registries: &[String],
) -> Result<(ImageReference, bool), String> {
    let (scheme, rest) = mirror.split_once("://").unwrap_or(("https", mirror));
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(format!("mirror \"{mirror}\" is not scheme://host[:port] (paths are not supported)"));
    }
    let full = reference.to_string();
    let mirrored = ImageReference::normalize(&format!("{host}/{}", &full[reference.registry().len() + 1..]))
        .map_err(|e| format!("mirror \"{mirror}\": {e}"))?;
    let plain = match scheme {
        "https" => false,
        "http" if speaks_plain_http(&mirrored, insecure_registries) => true,
        "http" => {
            return Err(format!("mirror \"{mirror}\": plain HTTP is only for loopback mirrors and insecureRegistries"));
        }
        other => return Err(format!("mirror \"{mirror}\": scheme {other} is neither http nor https")),
    };
    Ok((mirrored, plain))
}

/// The upstream's `error`, with the mirrors tried before it and theirs.
fn with_tried(error: PullError, tried: &[String]) -> PullError {
    let note = |text: String| format!("{text}; tried first: {}", tried.join("; "));
    match error {
        PullError::NotFound { reference, message } => PullError::NotFound { reference, message: note(message) },
        PullError::Unauthorized { reference, message } => PullError::Unauthorized { reference, message: note(message) },
        PullError::Unreachable { reference, registry, reason } => {
            PullError::Unreachable { reference, registry, reason: note(reason) }
        }
        PullError::Registry { reference, message } => PullError::Registry { reference, message: note(message) },
        other => other,
    }
}

/// Whether a process `pid` exists (`kill(pid, 0)` answers EPERM for another user's live one).
fn process_alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH)))
}

enum PullOrUnpack {
    Unpack(crate::unpack::UnpackError),
    Limit(crate::unpack::LimitExceeded),
    Io(&'static str, io::Error),
}

#[derive(Clone, Copy)]
pub(crate) enum FlockMode {
    Shared,
    Exclusive,
    /// Exclusive if no one holds it, else nothing.
    ExclusiveNow,
    /// Shared if no one holds it exclusively, else nothing.
    SharedNow,
}

/// Opens (making it when missing) and locks the file `path` with `flock`; `None` when a `*Now`
/// mode finds it held. The lock lasts as long as the returned file.
pub(crate) fn lock_file(path: &Path, mode: FlockMode) -> io::Result<Option<File>> {
    use rustix::fs::FlockOperation as Op;
    let file = File::options().read(true).write(true).create(true).truncate(false).open(path)?;
    let operation = match mode {
        FlockMode::Shared => Op::LockShared,
        FlockMode::Exclusive => Op::LockExclusive,
        FlockMode::ExclusiveNow => Op::NonBlockingLockExclusive,
        FlockMode::SharedNow => Op::NonBlockingLockShared,
    };
    match rustix::fs::flock(&file, operation) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Takes the image `hex`'s lease (its lock file shared); `None` without `wait` when a
/// collection holds it (the image is being removed).
pub(crate) fn lease(root: &Path, hex: &str, wait: bool) -> io::Result<Option<ImageLease>> {
    let mode = if wait { FlockMode::Shared } else { FlockMode::SharedNow };
    Ok(lock_file(&root.join("images").join(format!("{hex}.lock")), mode)?.map(|file| ImageLease { _file: file }))
}

/// Marks a use: the metadata's modification time is the image's last use. Best effort.
fn touch(meta: &Path) {
    let now = std::fs::FileTimes::new().set_modified(SystemTime::now());
    if let Err(e) = File::options().append(true).open(meta).and_then(|file| file.set_times(now)) {
        debug!(path = %meta.display(), error = %e, "last use not recorded");
    }
}

pub(crate) fn read_meta(path: &Path) -> Option<ImageMeta> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Removes, under the cache's exclusive lock, blobs no image refers to and then images no one
/// uses, least recently used first: all of them (`bound` `None`, a prune), or until the cache's
/// size is at most `bound`.
fn collect(root: &Path, bound: Option<u64>) -> io::Result<PruneReport> {
    let mut images = Vec::new();
    for entry in std::fs::read_dir(root.join("images"))? {
        let path = entry?.path();
        let Some(hex) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        if digest_hex(&format!("sha256:{hex}")).is_none() {
            continue;
        }
        let Some(meta) = read_meta(&path) else {
            warn!(path = %path.display(), "unreadable image metadata left alone");
            continue;
        };
        let last_use = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
        images.push((last_use, hex.to_string(), meta));
    }
    images.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));

    let mut blobs: HashMap<String, u64> = HashMap::new();
    for entry in std::fs::read_dir(root.join("blobs/sha256"))? {
        let entry = entry?;
        let Some(hex) = entry.file_name().to_str().map(str::to_string) else { continue };
        if digest_hex(&format!("sha256:{hex}")).is_some() {
            blobs.insert(hex, entry.metadata()?.len());
        }
    }
    let blobs_of = |meta: &ImageMeta| -> Vec<String> {
        meta.layers
            .iter()
            .chain(meta.config_blob.iter())
            .filter_map(|digest| digest_hex(digest).map(str::to_string))
            .collect()
    };
    let mut references: HashMap<String, usize> = HashMap::new();
    for (_, _, meta) in &images {
        for blob in blobs_of(meta) {
            *references.entry(blob).or_default() += 1;
        }
    }
    let mut size: u64 =
        blobs.values().sum::<u64>() + images.iter().map(|(_, _, meta)| meta.unpacked_bytes).sum::<u64>();
    let over = |size: u64| bound.is_none_or(|bound| size > bound);
    let mut report = PruneReport::default();

    if over(size) {
        let unreferenced: Vec<String> = blobs.keys().filter(|hex| !references.contains_key(*hex)).cloned().collect();
        for hex in unreferenced {
            let bytes = blobs.remove(&hex).unwrap_or(0);
            remove_file_if_present(&root.join("blobs/sha256").join(&hex))?;
            size = size.saturating_sub(bytes);
            report.blobs_removed += 1;
            report.bytes_freed += bytes;
        }
    }

    let names = reference_index(root);
    for (_, hex, meta) in images {
        if !over(size) {
            break;
        }
        let lock_path = root.join("images").join(format!("{hex}.lock"));
        let Some(_lock) = lock_file(&lock_path, FlockMode::ExclusiveNow)? else {
            report.in_use.push(meta.digest);
            continue;
        };
        let mut freed = meta.unpacked_bytes;
        let mut pruned_names = Vec::new();
        for (path, name) in names.get(&meta.digest).into_iter().flatten() {
            remove_file_if_present(path)?;
            pruned_names.push(name.clone());
        }
        remove_meta_and_tree(root, &hex)?;
        for blob in blobs_of(&meta) {
            let count = references.entry(blob.clone()).or_default();
            *count = count.saturating_sub(1);
            if *count == 0
                && let Some(bytes) = blobs.remove(&blob)
            {
                remove_file_if_present(&root.join("blobs/sha256").join(&blob))?;
                report.blobs_removed += 1;
                freed += bytes;
            }
        }
        // Gone while still locked: a lease taken after this makes a new file and finds no tree.
        remove_file_if_present(&lock_path)?;
        size = size.saturating_sub(freed);
        report.bytes_freed += freed;
        pruned_names.sort();
        report.removed.push(PrunedImage { digest: meta.digest, references: pruned_names, bytes: freed });
    }
    report.bytes_after = size;
    Ok(report)
}

/// Removes the image `hex`'s metadata, then its tree (out of `rootfs/` at once by a rename, then
/// removed: no one finds a half-removed tree). The caller holds the image's lock exclusively.
fn remove_meta_and_tree(root: &Path, hex: &str) -> io::Result<()> {
    remove_file_if_present(&root.join("images").join(format!("{hex}.json")))?;
    let rootfs = root.join("rootfs").join(hex);
    let doomed = root.join("tmp").join(format!("{}.evict.{hex}", std::process::id()));
    match std::fs::rename(&rootfs, &doomed) {
        Ok(()) => fsutil::remove_tree(&doomed),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes one image whose names are gone, under the cache's exclusive lock and the image's
/// own: its metadata, tree and the blobs no other image refers to. Returns the bytes freed.
pub(crate) fn remove_image(root: &Path, hex: &str, meta: &ImageMeta) -> io::Result<u64> {
    let mut still_used = std::collections::HashSet::new();
    for entry in std::fs::read_dir(root.join("images"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json")
            && path.file_stem().and_then(|s| s.to_str()) != Some(hex)
            && let Some(other) = read_meta(&path)
        {
            still_used.extend(other.layers.into_iter().chain(other.config_blob));
        }
    }
    remove_meta_and_tree(root, hex)?;
    let mut freed = meta.unpacked_bytes;
    for blob in meta.layers.iter().chain(meta.config_blob.iter()) {
        if still_used.contains(blob) {
            continue;
        }
        if let Some(blob_hex) = digest_hex(blob) {
            let path = root.join("blobs/sha256").join(blob_hex);
            if let Ok(metadata) = std::fs::metadata(&path) {
                remove_file_if_present(&path)?;
                freed += metadata.len();
            }
        }
    }
    remove_file_if_present(&root.join("images").join(format!("{hex}.lock")))?;
    Ok(freed)
}

/// The reference files by the digest they name: (file, normalized name).
pub(crate) fn reference_index(root: &Path) -> HashMap<String, Vec<(PathBuf, String)>> {
    let mut index: HashMap<String, Vec<(PathBuf, String)>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(root.join("refs")) else { return index };
    for entry in entries.flatten() {
        let path = entry.path();
        if let Some(entry) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<RefEntry>(&b).ok()) {
            index.entry(entry.digest).or_default().push((path, entry.reference));
        }
    }
    index
}

fn remove_file_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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

    /// Puts an image in a cache by hand: its tree (`tree_bytes` of data), metadata last used
    /// at `last_use` seconds, a reference, and a layer blob of `blob_bytes` (shared when two
    /// images name the same `layer`).
    fn fake_image(root: &Path, n: u8, last_use: u64, tree_bytes: u64, layer: u8, blob_bytes: usize) -> String {
        let hex = format!("{n:02x}").repeat(32);
        let layer_hex = format!("{layer:02x}").repeat(32);
        let digest = format!("sha256:{hex}");
        std::fs::create_dir_all(root.join("rootfs").join(&hex).join("etc")).unwrap();
        std::fs::write(root.join("blobs/sha256").join(&layer_hex), vec![1u8; blob_bytes]).unwrap();
        let meta = ImageMeta {
            digest: digest.clone(),
            config: ImageConfig::default(),
            size_bytes: blob_bytes as u64,
            layers: vec![format!("sha256:{layer_hex}")],
            config_blob: None,
            unpacked_bytes: tree_bytes,
            readers: None,
        };
        let meta_path = root.join("images").join(format!("{hex}.json"));
        std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(last_use);
        File::options()
            .append(true)
            .open(&meta_path)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_modified(at))
            .unwrap();
        let name = format!("example.com/image-{n}:1");
        let entry = RefEntry { reference: name, digest: digest.clone() };
        std::fs::write(root.join("refs").join(format!("{hex}.json")), serde_json::to_vec(&entry).unwrap()).unwrap();
        digest
    }

    #[test]
    fn the_bound_evicts_least_recently_used_images_not_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let config = ImageStoreConfig { docker_config: None, ..ImageStoreConfig::new(dir.path()) };
        drop(ImageStore::new(config).unwrap());
        let root = dir.path();
        // Used in the order b (oldest), a, c; a and b share their layer blob 10.
        let a = fake_image(root, 1, 2_000, 1000, 10, 100);
        let b = fake_image(root, 2, 1_000, 1000, 10, 100);
        let c = fake_image(root, 3, 3_000, 1000, 30, 100);
        let orphan = root.join("blobs/sha256").join("ee".repeat(32));
        std::fs::write(&orphan, vec![0u8; 50]).unwrap();
        // b is in use (a sandbox runs on it): the oldest after it, a, goes instead.
        let b_lease = lease(root, &"02".repeat(32), true).unwrap().unwrap();

        // 3 trees of 1000, 2 blobs of 100, an orphan of 50: 3250. A bound of 2300 takes the
        // orphan (3200) and one image (2200: the shared blob stays, b refers to it).
        let report = collect(root, Some(2300)).unwrap();
        assert_eq!(report.in_use, vec![b.clone()]);
        assert_eq!(
            report.removed,
            vec![PrunedImage { digest: a.clone(), references: vec!["example.com/image-1:1".to_string()], bytes: 1000 }]
        );
        assert_eq!((report.blobs_removed, report.bytes_freed, report.bytes_after), (1, 1050, 2200));
        assert!(!orphan.exists());
        assert!(!root.join("rootfs").join("01".repeat(32)).exists());
        assert!(!root.join("images").join(format!("{}.json", "01".repeat(32))).exists());
        assert!(!root.join("refs").join(format!("{}.json", "01".repeat(32))).exists());
        assert!(root.join("blobs/sha256").join("0a".repeat(32)).exists(), "b still refers to the shared blob");
        assert!(
            root.join("rootfs").join("02".repeat(32)).is_dir() && root.join("rootfs").join("03".repeat(32)).is_dir()
        );
        assert_eq!(std::fs::read_dir(root.join("tmp")).unwrap().count(), 0, "the evicted tree is removed");

        // Under the bound: nothing to do.
        assert_eq!(collect(root, Some(2300)).unwrap().removed, vec![]);

        // A prune takes every image not in use, and the blobs only they referred to.
        let report = collect(root, None).unwrap();
        assert_eq!(report.removed.iter().map(|image| &image.digest).collect::<Vec<_>>(), vec![&c]);
        assert_eq!((report.in_use, report.bytes_after), (vec![b.clone()], 1100));
        drop(b_lease);
        let report = collect(root, None).unwrap();
        assert_eq!(report.removed.iter().map(|image| &image.digest).collect::<Vec<_>>(), vec![&b]);
        assert_eq!((report.bytes_freed, report.bytes_after), (1100, 0));
        for dir in ["rootfs", "images", "refs", "blobs/sha256", "tmp"] {
            assert_eq!(std::fs::read_dir(root.join(dir)).unwrap().count(), 0, "{dir} is empty");
        }
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
