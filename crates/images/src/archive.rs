//! Images from a file instead of a registry: a `docker save` archive or an OCI image layout
//! tarball ([`ImageStore::load`]), and the cache's listing and removal by name
//! ([`ImageStore::list`], [`ImageStore::remove`]).
//!
//! The archive is untrusted input. It is read once, as a stream of tar entries: each regular
//! file is copied into the cache's work directory under a number (never under its name), hashed
//! on the way, and known afterwards only by its cleaned path in the archive; an entry whose path
//! is absolute or climbs with `..` refuses the whole archive. Links are followed inside that
//! table only. Sizes are held to the store's limits before anything is copied (an entry over
//! `max_image_bytes`, more entries than `max_image_entries`, an archive over `max_cache_bytes`),
//! every blob named by a digest is checked against it (an OCI layout's `blobs/sha256/<hex>`, a
//! descriptor's size, a `docker save` config named by its digest, uncompressed layers against
//! the config's `rootfs.diff_ids`), and layers unpack with the pull's rules and limits. Then the
//! blobs, the image's metadata and its names are written exactly as a pull writes them, so a
//! later `IfNotPresent` pull of one of the names finds the image with no registry asked. A refused
//! archive leaves nothing: the work directory is removed, and blobs and trees appear only by a
//! rename once complete.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use thiserror::Error;
use tracing::info;

use crate::config::ImageConfig;
use crate::error::PullError;
use crate::reference::ImageReference;
use crate::store::{
    Fetched, FlockMode, ImageMeta, ImageStore, RefEntry, digest_hex, lock_file, read_meta, reference_index,
    remove_image,
};

/// The largest metadata file (`manifest.json`, `index.json`, a manifest, a config) read into memory.
const MAX_METADATA_BYTES: u64 = 16 << 20;

/// Why an archive was not loaded. Nothing of it stays in the cache.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The archive is not one of the two formats, or is malformed or hostile (a path leaving the
    /// archive, a digest that does not match, a link to nowhere). The message names the entry.
    #[error("{0}")]
    Invalid(String),
    /// Over one of the store's limits (the message names it).
    #[error("{0}")]
    TooLarge(String),
    /// No image in the archive has a name to load it under.
    #[error("{0}")]
    NoName(String),
    /// An image's layers could not be unpacked (or unpack over the limits).
    #[error(transparent)]
    Unpack(PullError),
    /// The cache could not be written.
    #[error("image cache: {context}: {source}")]
    Cache {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl LoadError {
    fn cache(context: &str, source: io::Error) -> Self {
        Self::Cache { context: context.to_string(), source }
    }
}

/// What [`ImageStore::load`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// `docker-archive` or `oci-layout`.
    pub format: String,
    /// The images loaded, in the archive's order.
    pub images: Vec<LoadedImage>,
    /// Images of the archive not loaded because they have no name, each with why.
    pub unnamed: Vec<String>,
}

/// One image put into the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedImage {
    /// The manifest digest (for a `docker save` archive, of the manifest made for it).
    pub digest: String,
    /// The normalized names it can now be run by.
    pub references: Vec<String>,
    /// Its config and layers as the archive holds them.
    pub size_bytes: u64,
}

/// One image of the cache ([`ImageStore::list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedImage {
    pub digest: String,
    /// Its normalized names (none: only its digest names it).
    pub references: Vec<String>,
    /// Config and layers as pulled or loaded (compressed where they were).
    pub size_bytes: u64,
    /// The data written to its tree.
    pub unpacked_bytes: u64,
    /// Its last pull, load or use.
    pub last_used: SystemTime,
    /// Whether a sandbox (of this process or another sharing the cache) runs on it.
    pub in_use: bool,
}

/// What [`ImageStore::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedImage {
    pub reference: String,
    pub digest: String,
    /// Whether the image itself went (its last name was removed), not only the name.
    pub image_removed: bool,
    /// Bytes freed: its tree's data and the blobs only it referred to.
    pub bytes_freed: u64,
}

/// Why a name could not be removed.
#[derive(Debug, Error)]
pub enum RemoveError {
    #[error(transparent)]
    InvalidReference(#[from] crate::reference::InvalidReference),
    #[error("image \"{0}\" is not in the cache")]
    NotFound(String),
    #[error("image \"{reference}\" ({digest}) is in use by a running sandbox; remove the sandbox first")]
    InUse { reference: String, digest: String },
    #[error("image cache: {0}")]
    Cache(#[from] io::Error),
}

/// A regular file of the archive, copied into the work directory.
#[derive(Debug, Clone)]
struct Stored {
    hex: String,
    size: u64,
    file: PathBuf,
}

/// An entry of the archive: a file, or a link to another entry's path.
#[derive(Debug)]
enum Entry {
    File(Stored),
    Link(String),
}

/// The archive's entries by cleaned path.
struct Contents {
    entries: HashMap<String, Entry>,
}

impl Contents {
    fn get(&self, path: &str) -> Result<&Stored, LoadError> {
        let mut path = clean(path).map_err(LoadError::Invalid)?;
        for _ in 0..16 {
            match self.entries.get(&path) {
                Some(Entry::File(stored)) => return Ok(stored),
                Some(Entry::Link(target)) => path = target.clone(),
                None => return Err(LoadError::Invalid(format!("the archive has no file {path}"))),
            }
        }
        Err(LoadError::Invalid(format!("{path}: too many levels of links")))
    }

    fn has(&self, path: &str) -> bool {
        self.entries.contains_key(path)
    }

    fn json<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<(T, &Stored), LoadError> {
        let stored = self.get(path)?;
        if stored.size > MAX_METADATA_BYTES {
            return Err(LoadError::TooLarge(format!(
                "{path}: {} bytes is more than the {MAX_METADATA_BYTES} bytes a metadata file may hold",
                stored.size
            )));
        }
        let bytes = std::fs::read(&stored.file).map_err(|e| LoadError::cache("reading the archive's copy", e))?;
        let value = serde_json::from_slice(&bytes).map_err(|e| LoadError::Invalid(format!("{path}: {e}")))?;
        Ok((value, stored))
    }

    /// The blob `digest` of an OCI layout, checked to be `sha256:<hex>` (and its size, when given).
    fn blob(&self, digest: &str, size: Option<i64>) -> Result<&Stored, LoadError> {
        let hex = digest_hex(digest).ok_or_else(|| {
            LoadError::Invalid(format!("digest \"{digest}\" is not sha256:<64 lowercase hex digits>"))
        })?;
        let stored = self.get(&format!("blobs/sha256/{hex}"))?;
        if let Some(size) = size
            && size >= 0
            && size as u64 != stored.size
        {
            return Err(LoadError::Invalid(format!(
                "blob {digest}: {} bytes in the archive, its descriptor says {size}",
                stored.size
            )));
        }
        Ok(stored)
    }
}

/// An entry's path made relative and plain: `./a//b` → `a/b`; absolute paths and `..` refused.
fn clean(path: &str) -> Result<String, String> {
    if path.starts_with('/') {
        return Err(format!("entry \"{path}\": an absolute path in an image archive"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("entry \"{path}\": a path that leaves the archive (..)")),
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// The target of a symbolic link at `path`, as a cleaned path of the archive.
fn link_target(path: &str, target: &str) -> Result<String, String> {
    if target.starts_with('/') {
        return Err(format!("entry \"{path}\": a link to the absolute path \"{target}\""));
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("entry \"{path}\": a link that leaves the archive (\"{target}\")"));
                }
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifestEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct ConfigRootfs {
    #[serde(default)]
    rootfs: Option<RootfsIds>,
}

#[derive(Deserialize)]
struct RootfsIds {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: i64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize, Clone)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

/// An image found in the archive, ready to be written.
struct Found {
    names: Vec<ImageReference>,
    digest: String,
    config: ImageConfig,
    config_blob: Stored,
    layers: Vec<Stored>,
}

/// The OCI name of this machine's architecture.
fn this_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn is_compressed(file: &Path) -> io::Result<bool> {
    let mut magic = [0u8; 4];
    let mut reader = std::fs::File::open(file)?;
    let mut have = 0;
    while have < magic.len() {
        let n = reader.read(&mut magic[have..])?;
        if n == 0 {
            break;
        }
        have += n;
    }
    Ok(magic[..2] == [0x1f, 0x8b] || magic == [0x28, 0xb5, 0x2f, 0xfd])
}

impl ImageStore {
    /// Loads the images of the archive `path` (a `docker save` archive or an OCI image layout
    /// tarball, either possibly gzipped) into the cache under the names they carry.
    pub async fn load(&self, path: &Path) -> Result<LoadReport, LoadError> {
        let work = self.tmp_path("load");
        std::fs::create_dir(&work).map_err(|e| LoadError::cache("making a work directory", e))?;
        let result = self.load_into(path, &work).await;
        if let Err(e) = crate::fsutil::remove_tree(&work) {
            tracing::warn!(path = %work.display(), error = %e, "a load's work directory not removed");
        }
        let report = result?;
        // The images just loaded are held while the bound is kept, so it evicts older ones
        // first and never what this load brought.
        let mut held = Vec::new();
        for image in &report.images {
            if let Some(hex) = digest_hex(&image.digest)
                && let Ok(Some(lease)) = crate::store::lease(&self.root, hex, true)
            {
                held.push(lease);
            }
        }
        self.keep_in_bound().await;
        drop(held);
        Ok(report)
    }

    async fn load_into(&self, path: &Path, work: &Path) -> Result<LoadReport, LoadError> {
        let (archive, work_dir) = (path.to_path_buf(), work.to_path_buf());
        let limits = (self.config.max_image_bytes, self.config.max_image_entries, self.config.max_cache_bytes);
        let contents = tokio::task::spawn_blocking(move || read_archive(&archive, &work_dir, limits))
            .await
            .map_err(|e| LoadError::cache("reading the archive", io::Error::other(e.to_string())))??;

        let (format, found, unnamed) = if contents.has("manifest.json") {
            let (found, unnamed) = docker_images(&contents)?;
            ("docker-archive", found, unnamed)
        } else if contents.has("index.json") && contents.has("oci-layout") {
            let (found, unnamed) = oci_images(&contents)?;
            ("oci-layout", found, unnamed)
        } else {
            return Err(LoadError::Invalid(
                "neither a docker save archive (no manifest.json) nor an OCI image layout (no index.json and oci-layout)"
                    .to_string(),
            ));
        };
        if found.is_empty() {
            return Err(LoadError::NoName(format!(
                "no image of this {format} has a name to load it under: {}",
                unnamed.join("; ")
            )));
        }

        let _gc = self.lock_cache(true).await.map_err(|e| LoadError::cache("locking the cache", e))?;
        let mut report = LoadReport { format: format.to_string(), images: Vec::new(), unnamed };
        for image in found {
            report.images.push(self.store_found(image).await?);
        }
        for image in &report.images {
            info!(digest = %image.digest, names = ?image.references, format, "image loaded");
        }
        Ok(report)
    }

    /// Writes one image as a pull would: blobs, tree, metadata, then its names.
    async fn store_found(&self, image: Found) -> Result<LoadedImage, LoadError> {
        let mut layers = Vec::new();
        for stored in std::iter::once(&image.config_blob).chain(&image.layers) {
            let target = self.root.join("blobs/sha256").join(&stored.hex);
            if !target.is_file() {
                // A second name for the work file (the same file may be two images' layer), or a
                // copy where a link cannot be made; renamed into place whole.
                let tmp = self.tmp_path("blob");
                std::fs::hard_link(&stored.file, &tmp)
                    .or_else(|_| std::fs::copy(&stored.file, &tmp).map(|_| ()))
                    .and_then(|()| std::fs::rename(&tmp, &target))
                    .inspect_err(|_| {
                        let _ = std::fs::remove_file(&tmp);
                    })
                    .map_err(|e| LoadError::cache("storing a blob", e))?;
            }
            layers.push((format!("sha256:{}", stored.hex), target));
        }
        layers.remove(0);
        let size_bytes = image.config_blob.size + image.layers.iter().map(|l| l.size).sum::<u64>();
        let fetched = Fetched {
            digest: image.digest.clone(),
            config: image.config.clone(),
            config_blob: format!("sha256:{}", image.config_blob.hex),
            size_bytes,
            layers,
            sandbox_reader: None,
        };
        let (_rootfs, unpacked_now) = self.unpack(&image.names[0], &fetched).await.map_err(LoadError::Unpack)?;
        let hex = digest_hex(&image.digest).unwrap_or_default().to_string();
        let meta_path = self.root.join("images").join(format!("{hex}.json"));
        let unpacked_bytes = match unpacked_now {
            Some(bytes) => bytes,
            None => read_meta(&meta_path).map(|meta| meta.unpacked_bytes).unwrap_or(0),
        };
        let meta = ImageMeta {
            digest: image.digest.clone(),
            config: image.config,
            size_bytes,
            layers: fetched.layers.iter().map(|(digest, _)| digest.clone()).collect(),
            config_blob: Some(fetched.config_blob.clone()),
            unpacked_bytes,
            // Loaded by whoever may load images (the operator): every sandbox here may run it.
            readers: None,
        };
        self.write_json(&meta_path, &meta).map_err(|e| LoadError::cache("writing the image's metadata", e))?;
        let mut references = Vec::new();
        for name in &image.names {
            let entry = RefEntry { reference: name.to_string(), digest: image.digest.clone() };
            self.write_json(&self.ref_path(name), &entry)
                .map_err(|e| LoadError::cache("writing the reference index", e))?;
            references.push(name.to_string());
        }
        Ok(LoadedImage { digest: image.digest, references, size_bytes })
    }

    /// Every image of the cache, most recently used first.
    /// Takes no cache-wide lock (a listing does not wait for pulls in progress); whether an
    /// image is in use is probed by trying its lock exclusively for an instant, which a
    /// concurrent [`ImageStore::cached`] waits out.
    pub async fn list(&self) -> io::Result<Vec<CachedImage>> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || list_images(&root)).await.map_err(|e| io::Error::other(e.to_string()))?
    }

    /// Removes the name `image` from the cache, and the image with it when no other name is
    /// left (its tree, metadata and the blobs only it referred to). Removing the last name of an
    /// image a sandbox runs on is refused ([`RemoveError::InUse`]); a name beside others only
    /// goes itself, as `docker rmi` untags.
    pub async fn remove(&self, image: &str) -> Result<RemovedImage, RemoveError> {
        let reference = ImageReference::normalize(image)?;
        let name = reference.to_string();
        let root = self.root.clone();
        let ref_path = self.ref_path(&reference);
        let guard = self.lock_cache(false).await?;
        let outcome = tokio::task::spawn_blocking(move || -> Result<RemovedImage, RemoveError> {
            let bytes = std::fs::read(&ref_path).map_err(|_| RemoveError::NotFound(name.clone()))?;
            let entry: RefEntry = serde_json::from_slice(&bytes).map_err(|_| RemoveError::NotFound(name.clone()))?;
            let hex = digest_hex(&entry.digest).ok_or_else(|| RemoveError::NotFound(name.clone()))?.to_string();
            // Another name keeps the image: only this name goes, in use or not (`docker rmi` of
            // one tag of several).
            let others = reference_index(&root).remove(&entry.digest).unwrap_or_default();
            if others.iter().any(|(path, _)| path != &ref_path) {
                std::fs::remove_file(&ref_path)?;
                let digest = entry.digest;
                return Ok(RemovedImage { reference: name, digest, image_removed: false, bytes_freed: 0 });
            }
            let lock_path = root.join("images").join(format!("{hex}.lock"));
            let Some(_lock) = exclusive_soon(&lock_path)? else {
                return Err(RemoveError::InUse { reference: name.clone(), digest: entry.digest });
            };
            std::fs::remove_file(&ref_path)?;
            let freed = match read_meta(&root.join("images").join(format!("{hex}.json"))) {
                Some(meta) => remove_image(&root, &hex, &meta)?,
                None => 0,
            };
            Ok(RemovedImage { reference: name, digest: entry.digest, image_removed: true, bytes_freed: freed })
        })
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
        drop(guard);
        if let Ok(removed) = &outcome {
            info!(image = %removed.reference, digest = %removed.digest, image_removed = removed.image_removed, "image removed");
        }
        outcome
    }
}

/// The image lock `path` taken exclusively, or `None` when someone keeps holding it. A lease
/// just released may still be held for a moment by a child this process forked before its
/// `exec` closed the copy of the descriptor (a `flock` belongs to the open file, which the fork
/// shares): a few tries over ~100 ms tell that apart from a sandbox running on the image.
fn exclusive_soon(path: &Path) -> io::Result<Option<std::fs::File>> {
    for _ in 0..20 {
        if let Some(file) = lock_file(path, FlockMode::ExclusiveNow)? {
            return Ok(Some(file));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(None)
}

fn list_images(root: &Path) -> io::Result<Vec<CachedImage>> {
    let names = reference_index(root);
    let mut images = Vec::new();
    for entry in std::fs::read_dir(root.join("images"))? {
        let path = entry?.path();
        let Some(hex) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        let Some(meta) = read_meta(&path) else { continue };
        let last_used = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
        // Held shared by every user of the image: an exclusive lock taken now means no one uses it.
        let in_use = exclusive_soon(&root.join("images").join(format!("{hex}.lock")))?.is_none();
        let mut references: Vec<String> =
            names.get(&meta.digest).into_iter().flatten().map(|(_, name)| name.clone()).collect();
        references.sort();
        images.push(CachedImage {
            digest: meta.digest,
            references,
            size_bytes: meta.size_bytes,
            unpacked_bytes: meta.unpacked_bytes,
            last_used,
            in_use,
        });
    }
    images.sort_by(|a, b| b.last_used.cmp(&a.last_used).then_with(|| a.digest.cmp(&b.digest)));
    Ok(images)
}

/// Reads the archive's entries into `work`, each regular file under a number, hashed.
fn read_archive(
    path: &Path,
    work: &Path,
    (max_image_bytes, max_entries, max_total): (u64, u64, u64),
) -> Result<Contents, LoadError> {
    let file = std::fs::File::open(path).map_err(|e| LoadError::cache(&format!("opening {}", path.display()), e))?;
    let mut reader = io::BufReader::new(file);
    let gzipped = {
        let head = io::BufRead::fill_buf(&mut reader).map_err(|e| LoadError::cache("reading the archive", e))?;
        head.starts_with(&[0x1f, 0x8b])
    };
    let reader: Box<dyn Read> =
        if gzipped { Box::new(flate2::read::MultiGzDecoder::new(reader)) } else { Box::new(reader) };
    let mut archive = tar::Archive::new(reader);
    let mut entries = HashMap::new();
    let (mut count, mut total) = (0u64, 0u64);
    let invalid = |e: io::Error| LoadError::Invalid(format!("not a readable tar archive: {e}"));
    for entry in archive.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        count += 1;
        if max_entries != 0 && count > max_entries {
            return Err(LoadError::TooLarge(format!(
                "the archive has more than {max_entries} entries (max_image_entries)"
            )));
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = clean(&raw).map_err(LoadError::Invalid)?;
        let kind = entry.header().entry_type();
        if kind.is_file() {
            let size = entry.header().size().map_err(invalid)?;
            if max_image_bytes != 0 && size > max_image_bytes {
                return Err(LoadError::TooLarge(format!(
                    "entry {name} declares {size} bytes, more than an image's limit of {max_image_bytes} bytes (max_image_bytes)"
                )));
            }
            total += size;
            if max_total != 0 && total > max_total {
                return Err(LoadError::TooLarge(format!(
                    "the archive holds more than the image cache's bound of {max_total} bytes (max_cache_bytes)"
                )));
            }
            // Numbered by the entry's place in the archive (`count`), never by how many paths
            // are known: a path given twice must not make two entries share a file.
            let file = work.join(count.to_string());
            let mut out = std::fs::File::create(&file).map_err(|e| LoadError::cache("copying the archive", e))?;
            let mut hasher = Sha256::new();
            let mut buffer = vec![0u8; 1 << 16];
            let mut copied = 0u64;
            loop {
                let n = entry.read(&mut buffer).map_err(invalid)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buffer[..n]);
                out.write_all(&buffer[..n]).map_err(|e| LoadError::cache("copying the archive", e))?;
                copied += n as u64;
            }
            if copied != size {
                return Err(LoadError::Invalid(format!("entry {name}: cut short ({copied} of {size} bytes)")));
            }
            let hex = hex::encode(hasher.finalize());
            // An OCI layout names its blobs by their digest: every one is checked, used or not.
            if let Some(named) = name.strip_prefix("blobs/sha256/")
                && named != hex
            {
                return Err(LoadError::Invalid(format!(
                    "blob {name}: its content's digest is sha256:{hex}, not the one its name says"
                )));
            }
            entries.insert(name, Entry::File(Stored { hex, size, file }));
        } else if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .ok_or_else(|| LoadError::Invalid(format!("entry {name}: a link without a target")))?;
            let target = if kind.is_symlink() { link_target(&name, &target) } else { clean(&target) }
                .map_err(LoadError::Invalid)?;
            entries.insert(name, Entry::Link(target));
        }
        // Directories and anything else carry nothing an image needs.
    }
    Ok(Contents { entries })
}

/// The images of a `docker save` archive's `manifest.json`.
fn docker_images(contents: &Contents) -> Result<(Vec<Found>, Vec<String>), LoadError> {
    let (manifest, _) = contents.json::<Vec<DockerManifestEntry>>("manifest.json")?;
    let (mut found, mut unnamed) = (Vec::new(), Vec::new());
    for entry in manifest {
        let config_blob = contents.get(&entry.config)?.clone();
        // `<hex>.json` (older Docker) or `blobs/sha256/<hex>` (Docker 25): the image ID is the
        // config's digest.
        let base = entry.config.rsplit('/').next().unwrap_or_default();
        let named = base.strip_suffix(".json").unwrap_or(base);
        if digest_hex(&format!("sha256:{named}")).is_some() && named != config_blob.hex {
            return Err(LoadError::Invalid(format!(
                "config {}: its content's digest is sha256:{}, not the one its name says",
                entry.config, config_blob.hex
            )));
        }
        let (config_json, _) = contents.json::<serde_json::Value>(&entry.config)?;
        let bytes = serde_json::to_vec(&config_json).unwrap_or_default();
        let config =
            ImageConfig::from_blob(&bytes).map_err(|e| LoadError::Invalid(format!("config {}: {e}", entry.config)))?;
        let diff_ids = serde_json::from_value::<ConfigRootfs>(config_json)
            .ok()
            .and_then(|c| c.rootfs)
            .map(|r| r.diff_ids)
            .unwrap_or_default();
        let mut layers = Vec::new();
        for (i, layer) in entry.layers.iter().enumerate() {
            let stored = contents.get(layer)?.clone();
            let compressed = is_compressed(&stored.file).map_err(|e| LoadError::cache("reading a layer", e))?;
            if !compressed
                && let Some(diff_id) = diff_ids.get(i)
                && diff_id != &format!("sha256:{}", stored.hex)
            {
                return Err(LoadError::Invalid(format!(
                    "layer {layer}: its content's digest is sha256:{}, the config's rootfs.diff_ids[{i}] says {diff_id}",
                    stored.hex
                )));
            }
            layers.push(stored);
        }
        if !diff_ids.is_empty() && diff_ids.len() != layers.len() {
            return Err(LoadError::Invalid(format!(
                "config {}: {} diff_ids for {} layers",
                entry.config,
                diff_ids.len(),
                layers.len()
            )));
        }
        // The Docker v2 manifest this image would have in a registry with uncompressed layers:
        // its digest names the image in the cache, as a pulled manifest's does.
        let layer_type = |stored: &Stored| {
            if is_compressed(&stored.file).unwrap_or(false) {
                "application/vnd.docker.image.rootfs.diff.tar.gzip"
            } else {
                "application/vnd.docker.image.rootfs.diff.tar"
            }
        };
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": config_blob.size, "digest": format!("sha256:{}", config_blob.hex)},
            "layers": layers.iter().map(|l| json!({"mediaType": layer_type(l), "size": l.size, "digest": format!("sha256:{}", l.hex)})).collect::<Vec<_>>(),
        });
        let digest =
            format!("sha256:{}", hex::encode(Sha256::digest(serde_json::to_vec(&manifest).unwrap_or_default())));
        let mut names = Vec::new();
        for tag in entry.repo_tags.unwrap_or_default() {
            names.push(
                ImageReference::normalize(&tag)
                    .map_err(|e| LoadError::Invalid(format!("manifest.json: RepoTags \"{tag}\": {e}")))?,
            );
        }
        if names.is_empty() {
            unnamed.push(format!(
                "image sha256:{} has no RepoTags (saved by its ID): not loaded; `docker tag` it and save it by name",
                config_blob.hex
            ));
            continue;
        }
        found.push(Found { names, digest, config, config_blob, layers });
    }
    Ok((found, unnamed))
}

/// The images of an OCI layout's `index.json`: each entry's name from
/// `io.containerd.image.name`, else `org.opencontainers.image.ref.name` when that is a whole
/// reference (not a bare tag).
fn oci_images(contents: &Contents) -> Result<(Vec<Found>, Vec<String>), LoadError> {
    let (layout, _) = contents.json::<serde_json::Value>("oci-layout")?;
    if layout.get("imageLayoutVersion").and_then(|v| v.as_str()).is_none() {
        return Err(LoadError::Invalid("oci-layout: no imageLayoutVersion".to_string()));
    }
    let (index, _) = contents.json::<Document>("index.json")?;
    let (mut found, mut unnamed) = (Vec::new(), Vec::new());
    for descriptor in index.manifests.unwrap_or_default() {
        let ref_name = descriptor.annotations.get("org.opencontainers.image.ref.name");
        let name = descriptor
            .annotations
            .get("io.containerd.image.name")
            .or(ref_name.filter(|name| name.contains('/') || name.contains(':')));
        let Some(name) = name else {
            unnamed.push(match ref_name {
                Some(tag) => format!(
                    "image {} is named only \"{tag}\" (org.opencontainers.image.ref.name, a tag without a repository) and has no io.containerd.image.name: not loaded; give it a whole name (skopeo copy … oci-archive:FILE:registry/repository:{tag})",
                    descriptor.digest
                ),
                None => format!(
                    "image {} has no name (neither io.containerd.image.name nor org.opencontainers.image.ref.name): not loaded",
                    descriptor.digest
                ),
            });
            continue;
        };
        let reference = ImageReference::normalize(name)
            .map_err(|e| LoadError::Invalid(format!("index.json: image name \"{name}\": {e}")))?;
        let (digest, document) = resolve_manifest(contents, &descriptor, 0)?;
        let config_descriptor =
            document.config.ok_or_else(|| LoadError::Invalid(format!("manifest {digest}: no config")))?;
        let config_blob = contents.blob(&config_descriptor.digest, Some(config_descriptor.size))?.clone();
        let bytes = std::fs::read(&config_blob.file).map_err(|e| LoadError::cache("reading a config", e))?;
        let config = ImageConfig::from_blob(&bytes)
            .map_err(|e| LoadError::Invalid(format!("config {}: {e}", config_descriptor.digest)))?;
        let mut layers = Vec::new();
        for layer in document.layers.unwrap_or_default() {
            layers.push(contents.blob(&layer.digest, Some(layer.size))?.clone());
        }
        // Another name for an image already found: one image, two names.
        if let Some(same) = found.iter_mut().find(|f: &&mut Found| f.digest == digest) {
            same.names.push(reference);
            continue;
        }
        found.push(Found { names: vec![reference], digest, config, config_blob, layers });
    }
    Ok((found, unnamed))
}

/// The image manifest `descriptor` leads to: itself, or this platform's entry of an index.
fn resolve_manifest(contents: &Contents, descriptor: &Descriptor, depth: u8) -> Result<(String, Document), LoadError> {
    if depth > 4 {
        return Err(LoadError::Invalid(format!("{}: indexes nested too deep", descriptor.digest)));
    }
    let stored = contents.blob(&descriptor.digest, Some(descriptor.size))?;
    if stored.size > MAX_METADATA_BYTES {
        return Err(LoadError::TooLarge(format!("manifest {}: {} bytes", descriptor.digest, stored.size)));
    }
    let bytes = std::fs::read(&stored.file).map_err(|e| LoadError::cache("reading a manifest", e))?;
    let document: Document = serde_json::from_slice(&bytes)
        .map_err(|e| LoadError::Invalid(format!("manifest {}: {e}", descriptor.digest)))?;
    let is_index = document.manifests.is_some()
        || document.media_type.contains("index")
        || document.media_type.contains("manifest.list")
        || descriptor.media_type.contains("index")
        || descriptor.media_type.contains("manifest.list");
    if !is_index {
        return Ok((descriptor.digest.clone(), document));
    }
    let manifests = document.manifests.unwrap_or_default();
    let wanted =
        |d: &&Descriptor| d.platform.as_ref().is_some_and(|p| p.os == "linux" && p.architecture == this_architecture());
    let chosen = manifests
        .iter()
        .find(wanted)
        .or_else(|| if manifests.len() == 1 { manifests.first() } else { None })
        .ok_or_else(|| {
            LoadError::Invalid(format!(
                "index {}: no image for linux/{} among its {} manifests",
                descriptor.digest,
                this_architecture(),
                manifests.len()
            ))
        })?;
    resolve_manifest(contents, chosen, depth + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_paths_stay_inside() {
        assert_eq!(clean("./a//b/./c").unwrap(), "a/b/c");
        assert!(clean("../x").unwrap_err().contains("leaves the archive"));
        assert!(clean("a/../../x").is_err());
        assert!(clean("/etc/passwd").unwrap_err().contains("absolute"));
        assert_eq!(link_target("blobs/sha256/a", "../sha256/b").unwrap(), "blobs/sha256/b");
        assert_eq!(link_target("x/layer.tar", "../y/layer.tar").unwrap(), "y/layer.tar");
        assert!(link_target("x/layer.tar", "../../etc/shadow").is_err());
        assert!(link_target("x", "/etc/shadow").is_err());
    }
}
