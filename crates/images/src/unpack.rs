//! Applies an image's layers, in order, to a directory: the OCI image spec's changeset rules
//! (whiteouts, opaque directories) over tar archives (plain, gzip or zstd).
//!
//! Nothing an entry says can write outside the directory: its path is cleaned (`..` never goes
//! above the root, as containerd reads it), its parent is resolved with `RESOLVE_IN_ROOT` (a link
//! planted by an earlier entry or layer resolves inside the tree, as it would in the container),
//! and the entry itself is made relative to that parent's descriptor without following its last
//! component. The `tar` crate only parses; it never touches the file system here.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use thiserror::Error;
use tracing::{debug, warn};

use crate::fsutil::{self, clean, split};

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// A layer that could not be applied.
#[derive(Debug, Error)]
#[error("failed to extract layer {layer}: {}{source}", path.as_ref().map(|p| format!("/{}: ", p.display())).unwrap_or_default())]
pub struct UnpackError {
    /// The layer's digest (or file name).
    pub layer: String,
    /// The entry being applied, relative to the root, when the failure is about one.
    pub path: Option<PathBuf>,
    #[source]
    pub source: io::Error,
}

/// An image whose layers would unpack to more than its limits allow. The entry that would pass
/// the limit is refused before any of it is written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LimitExceeded {
    /// The entries' sizes (a sparse file's apparent size, holes included) add up to more than
    /// the limit.
    #[error(
        "the image unpacks to more than its limit of {} (max_image_bytes): entry /{path} of layer {layer} declares {}, which brings the image to {}",
        bytes(*max), bytes(*entry_bytes), bytes(*reached)
    )]
    Bytes { max: u64, reached: u64, entry_bytes: u64, layer: String, path: String },
    /// The layers hold more entries than the limit (every entry of every layer counts).
    #[error(
        "the image's layers hold more than its limit of {max} entries (max_image_entries): entry /{path} of layer {layer} is number {reached}"
    )]
    Entries { max: u64, reached: u64, layer: String, path: String },
}

/// `n bytes (x.y GiB)`, the exact number for a search and the rounded one for a reader.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = "";
    for next in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    if unit.is_empty() { format!("{n} bytes") } else { format!("{n} bytes ({value:.1} {unit})") }
}

/// Why layers could not be applied.
#[derive(Debug)]
pub(crate) enum UnpackFailure {
    Layer(UnpackError),
    Limit(LimitExceeded),
}

impl From<LimitExceeded> for UnpackFailure {
    fn from(error: LimitExceeded) -> Self {
        Self::Limit(error)
    }
}

impl From<UnpackError> for UnpackFailure {
    fn from(error: UnpackError) -> Self {
        Self::Layer(error)
    }
}

/// How layers are applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnpackOptions {
    /// Added to every uid and gid of the layers.
    pub id_shift: u32,
    /// Whether owners are set at all (only root may give files away).
    pub chown: bool,
    /// The most the entries' sizes may add up to (apparent sizes: a sparse file counts its
    /// holes), over all layers; `u64::MAX` for no limit.
    pub max_bytes: u64,
    /// The most entries all layers may hold together; `u64::MAX` for no limit.
    pub max_entries: u64,
}

/// What applying the layers did, for the log and the cache's accounting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnpackStats {
    pub entries: u64,
    pub skipped_devices: u64,
    pub neutralised_dotdot: u64,
    /// The entries' declared sizes, what the limit counts.
    pub apparent_bytes: u64,
    /// The data actually written (a sparse file's holes are not): near what the tree takes on disk.
    pub written_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct DirMeta {
    mode: u32,
    mtime: i64,
}

/// Applies `layers` (blob files, each named by its digest for errors) in order to `root`, an
/// existing empty directory. Directory modes and times are set at the very end, so a read-only
/// directory of a lower layer does not stop an upper one from writing in it and adding entries
/// does not disturb their times.
pub(crate) fn unpack_layers(
    root: &Path,
    layers: &[(String, PathBuf)],
    options: UnpackOptions,
) -> Result<UnpackStats, UnpackFailure> {
    let root_fd =
        fsutil::open_root(root).map_err(|source| UnpackError { layer: String::from("(root)"), path: None, source })?;
    let mut state = State { root: root_fd, options, dirs: HashMap::new(), stats: UnpackStats::default() };
    for (digest, file) in layers {
        state.apply_layer(digest, file)?;
    }
    state.finish_dirs();
    if state.stats.skipped_devices > 0 {
        // Containers get their /dev from the runtime; a device node in an image is never used.
        debug!(count = state.stats.skipped_devices, "device nodes in the image's layers were skipped");
    }
    Ok(state.stats)
}

struct State {
    root: OwnedFd,
    options: UnpackOptions,
    dirs: HashMap<PathBuf, DirMeta>,
    stats: UnpackStats,
}

/// The decompressed stream of a layer, whatever its media type says: the magic bytes decide.
fn open_layer(file: &Path) -> io::Result<Box<dyn Read>> {
    let mut reader = BufReader::with_capacity(256 * 1024, File::open(file)?);
    let head = reader.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(reader)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder = ruzstd::decoding::StreamingDecoder::new(reader)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
        Ok(Box::new(decoder))
    } else {
        Ok(Box::new(reader))
    }
}

impl State {
    fn apply_layer(&mut self, digest: &str, file: &Path) -> Result<(), UnpackFailure> {
        let fail = |path: Option<PathBuf>, source: io::Error| UnpackError { layer: digest.to_string(), path, source };
        let reader = open_layer(file).map_err(|e| fail(None, e))?;
        let mut archive = tar::Archive::new(reader);
        // Paths this layer wrote (with their ancestors): a whiteout or opaque directory removes
        // what the layers below had, never what its own layer adds.
        let mut written: HashSet<PathBuf> = HashSet::new();
        for entry in archive.entries().map_err(|e| fail(None, e))? {
            let mut entry = entry.map_err(|e| fail(None, e))?;
            let raw = entry.path().map_err(|e| fail(None, e))?.into_owned();
            let (rel, dotdot) = clean(&raw);
            if dotdot {
                self.stats.neutralised_dotdot += 1;
                warn!(layer = digest, entry = %raw.display(), now = %rel.display(), "a layer entry's `..` was kept inside the image's root");
            }
            self.count(digest, &rel, entry.size())?;
            self.apply_entry(&mut entry, &rel, &mut written).map_err(|e| fail(Some(rel.clone()), e))?;
        }
        Ok(())
    }

    /// Counts an entry against the image's limits before anything of it is written. Its size is
    /// the one its header declares (for a sparse file the apparent size, holes included), so a
    /// small compressed layer that declares a huge file is refused without reading it.
    fn count(&mut self, layer: &str, rel: &Path, entry_bytes: u64) -> Result<(), LimitExceeded> {
        let entries = self.stats.entries + 1;
        if entries > self.options.max_entries {
            return Err(LimitExceeded::Entries {
                max: self.options.max_entries,
                reached: entries,
                layer: layer.to_string(),
                path: rel.display().to_string(),
            });
        }
        let reached = self.stats.apparent_bytes.saturating_add(entry_bytes);
        if reached > self.options.max_bytes {
            return Err(LimitExceeded::Bytes {
                max: self.options.max_bytes,
                reached,
                entry_bytes,
                layer: layer.to_string(),
                path: rel.display().to_string(),
            });
        }
        self.stats.entries = entries;
        self.stats.apparent_bytes = reached;
        Ok(())
    }

    fn apply_entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        rel: &Path,
        written: &mut HashSet<PathBuf>,
    ) -> io::Result<()> {
        let kind = entry.header().entry_type();
        let meta = EntryMeta::read(entry)?;
        let Some((parent, name)) = split(rel) else {
            // The root itself (`./`): only its metadata matters.
            if kind.is_dir() {
                self.dirs.insert(PathBuf::new(), DirMeta { mode: meta.mode, mtime: meta.mtime });
            }
            return Ok(());
        };
        let name_bytes = name.as_bytes();
        if name_bytes.starts_with(WHITEOUT_PREFIX.as_bytes()) {
            if name_bytes == OPAQUE_MARKER.as_bytes() {
                self.make_opaque(parent, written)?;
            } else if name_bytes.starts_with(b".wh..wh.") {
                // aufs bookkeeping (`.wh..wh.plnk`…), no change to the tree.
            } else {
                let target = OsStr::from_bytes(&name_bytes[WHITEOUT_PREFIX.len()..]);
                // `.wh...` would name the directory's parent (at the top, the directory the tree
                // is unpacked in: the cache's shared work directory), `.wh..` the directory itself.
                if !fsutil::is_plain_name(target) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "whiteout of {:?}, which is not the name of an entry in its directory",
                            target.to_string_lossy()
                        ),
                    ));
                }
                self.whiteout(parent, target, written)?;
            }
            return Ok(());
        }

        let parent_fd = fsutil::ensure_dir_in_root(&self.root, parent)?;
        let existing = rustix::fs::statat(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let existing_is_dir = existing.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
        if existing.is_some() && !(kind.is_dir() && existing_is_dir) {
            fsutil::remove_all_at(&parent_fd, name)?;
            self.forget_dirs_under(rel);
        }

        use tar::EntryType as T;
        match kind {
            T::Regular | T::Continuous | T::GNUSparse => {
                let fd = rustix::fs::openat(
                    &parent_fd,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                let mut file = File::from(fd);
                let size = entry.size();
                self.stats.written_bytes += if kind == T::GNUSparse {
                    copy_sparse(entry, &mut file, size)?
                } else {
                    io::copy(entry, &mut file)?
                };
                self.set_owner(file.as_fd(), &meta)?;
                for (key, value) in &meta.xattrs {
                    if let Err(e) = rustix::fs::fsetxattr(&file, key.as_slice(), value, rustix::fs::XattrFlags::empty())
                    {
                        debug!(path = %rel.display(), xattr = %String::from_utf8_lossy(key), error = %e, "extended attribute not kept");
                    }
                }
                // After chown, which clears set-user-ID and set-group-ID bits.
                rustix::fs::fchmod(&file, Mode::from_raw_mode(meta.mode))?;
                rustix::fs::futimens(&file, &times(meta.mtime))?;
            }
            T::Directory => {
                if !existing_is_dir {
                    rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o755))?;
                }
                let fd = rustix::fs::openat(
                    &parent_fd,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                self.set_owner(fd.as_fd(), &meta)?;
                self.dirs.insert(rel.to_path_buf(), DirMeta { mode: meta.mode, mtime: meta.mtime });
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "symbolic link without a target"))?
                    .into_owned();
                // The target is stored as written: it is only ever resolved inside the tree.
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &parent_fd, name)?;
                if self.options.chown {
                    let (uid, gid) = self.ids(&meta)?;
                    rustix::fs::chownat(&parent_fd, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)?;
                }
                rustix::fs::utimensat(&parent_fd, name, &times(meta.mtime), AtFlags::SYMLINK_NOFOLLOW)?;
            }
            T::Link => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "hard link without a target"))?;
                let (target_rel, _) = clean(&target);
                let (target_parent, target_name) = split(&target_rel)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "hard link to the root"))?;
                let target_parent_fd = fsutil::open_dir_in_root(&self.root, target_parent)?;
                // Without AT_SYMLINK_FOLLOW: a link to a symbolic link links the link itself.
                rustix::fs::linkat(&target_parent_fd, target_name, &parent_fd, name, AtFlags::empty())?;
            }
            T::Fifo => {
                rustix::fs::mknodat(&parent_fd, name, FileType::Fifo, Mode::from_raw_mode(0o600), 0)?;
                if self.options.chown {
                    let (uid, gid) = self.ids(&meta)?;
                    rustix::fs::chownat(&parent_fd, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)?;
                }
                // The FIFO was just made by this call's parent descriptor: nothing else could swap it.
                rustix::fs::chmodat(&parent_fd, name, Mode::from_raw_mode(meta.mode), AtFlags::empty())?;
            }
            T::Char | T::Block => {
                self.stats.skipped_devices += 1;
                return Ok(());
            }
            other => {
                debug!(path = %rel.display(), kind = ?other, "layer entry of an unsupported type skipped");
                return Ok(());
            }
        }
        for ancestor in rel.ancestors() {
            if !written.insert(ancestor.to_path_buf()) {
                break;
            }
        }
        Ok(())
    }

    /// `.wh.<name>`: removes `<name>` of the layers below.
    fn whiteout(&mut self, parent: &Path, name: &OsStr, written: &HashSet<PathBuf>) -> io::Result<()> {
        let path = parent.join(name);
        if written.contains(&path) {
            return Ok(());
        }
        let parent_fd = match fsutil::open_dir_in_root(&self.root, parent) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        fsutil::remove_all_at(&parent_fd, name)?;
        self.forget_dirs_under(&path);
        Ok(())
    }

    /// `.wh..wh..opq`: the directory keeps only what its own layer puts in it.
    fn make_opaque(&mut self, dir: &Path, written: &HashSet<PathBuf>) -> io::Result<()> {
        let fd = fsutil::ensure_dir_in_root(&self.root, dir)?;
        self.purge(&fd, dir, written)
    }

    fn purge(&mut self, fd: &OwnedFd, dir: &Path, written: &HashSet<PathBuf>) -> io::Result<()> {
        for (name, kind) in fsutil::list_dir_typed(fd)? {
            let path = dir.join(&name);
            if !written.contains(&path) {
                fsutil::remove_all_at(fd, &name)?;
                self.forget_dirs_under(&path);
            } else if kind == FileType::Directory {
                let child = rustix::fs::openat(
                    fd,
                    &name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                self.purge(&child, &path, written)?;
            }
        }
        Ok(())
    }

    fn forget_dirs_under(&mut self, removed: &Path) {
        self.dirs.retain(|path, _| !path.starts_with(removed));
    }

    fn ids(&self, meta: &EntryMeta) -> io::Result<(rustix::fs::Uid, rustix::fs::Gid)> {
        let shift = |id: u64, what: &str| {
            u32::try_from(id)
                .ok()
                .and_then(|id| id.checked_add(self.options.id_shift))
                // -1 means "unchanged" to chown.
                .filter(|&id| id != u32::MAX)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{what} {id} plus the id shift {} is no valid id", self.options.id_shift),
                    )
                })
        };
        Ok((rustix::fs::Uid::from_raw(shift(meta.uid, "uid")?), rustix::fs::Gid::from_raw(shift(meta.gid, "gid")?)))
    }

    fn set_owner(&self, fd: impl AsFd, meta: &EntryMeta) -> io::Result<()> {
        if self.options.chown {
            let (uid, gid) = self.ids(meta)?;
            rustix::fs::fchown(fd, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Gives every directory the layers described its mode and time, last layer's word winning.
    fn finish_dirs(&mut self) {
        for (path, meta) in &self.dirs {
            let fd = match fsutil::open_in_root(&self.root, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW)
            {
                Ok(fd) => fd,
                Err(e) => {
                    debug!(path = %path.display(), error = %e, "directory gone before its metadata was set");
                    continue;
                }
            };
            if let Err(e) = rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.mode))
                .and_then(|()| rustix::fs::futimens(&fd, &times(meta.mtime)))
            {
                warn!(path = %path.display(), error = %e, "directory metadata not set");
            }
        }
    }
}

/// An entry's metadata, PAX records (large ids, precise times) over the ustar header.
struct EntryMeta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: i64,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl EntryMeta {
    fn read<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<Self> {
        let header = entry.header();
        // A blank numeric field reads as 0, as Go's archive/tar (which wrote most layers) reads it.
        let mut meta = Self {
            mode: header.mode()? & 0o7777,
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime: header.mtime().ok().and_then(|t| i64::try_from(t).ok()).unwrap_or(0),
            xattrs: Vec::new(),
        };
        if let Some(extensions) = entry.pax_extensions()? {
            for extension in extensions {
                let extension = extension?;
                let key = extension.key_bytes();
                let value = extension.value_bytes();
                let number = || std::str::from_utf8(value).ok().and_then(|v| v.split('.').next()?.parse::<i64>().ok());
                match key {
                    b"uid" => meta.uid = number().and_then(|n| u64::try_from(n).ok()).unwrap_or(meta.uid),
                    b"gid" => meta.gid = number().and_then(|n| u64::try_from(n).ok()).unwrap_or(meta.gid),
                    b"mtime" => meta.mtime = number().unwrap_or(meta.mtime),
                    _ => {
                        if let Some(name) = key.strip_prefix(b"SCHILY.xattr.") {
                            meta.xattrs.push((name.to_vec(), value.to_vec()));
                        }
                    }
                }
            }
        }
        Ok(meta)
    }
}

/// Writes a sparse entry of `size` apparent bytes, leaving holes where it reads zeros. The `tar`
/// crate hands a GNU sparse file's map over as zeros between the data (it does not expose the
/// map), so the holes are found again by looking: a block of zeros is skipped with a seek, and the
/// length set at the end makes a trailing hole. Returns the bytes actually written.
fn copy_sparse(reader: &mut impl Read, file: &mut File, size: u64) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom, Write};
    // The file system's usual block: a zero run shorter than this would not free a block anyway.
    const BLOCK: usize = 4096;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        let mut filled = 0;
        while filled < buffer.len() {
            match reader.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled == 0 {
            break;
        }
        for block in buffer[..filled].chunks(BLOCK) {
            if block.iter().all(|&b| b == 0) {
                file.seek(SeekFrom::Current(block.len() as i64))?;
            } else {
                file.write_all(block)?;
                written += block.len() as u64;
            }
        }
    }
    file.set_len(size)?;
    Ok(written)
}

fn times(mtime: i64) -> Timestamps {
    let at = Timespec { tv_sec: mtime, tv_nsec: 0 };
    Timestamps { last_access: at, last_modification: at }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    /// One entry of a synthetic layer. Paths are written into the header as they are (no
    /// checks), so layers can say what a hostile one would.
    enum E<'a> {
        Dir(&'a str, u32),
        File(&'a str, &'a [u8], u32),
        Owned(&'a str, u64, u64),
        Symlink(&'a str, &'a str),
        Link(&'a str, &'a str),
        Char(&'a str),
        Fifo(&'a str),
    }

    fn tar_bytes(entries: &[E<'_>]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for entry in entries {
            let mut header = tar::Header::new_gnu();
            header.set_mtime(1_600_000_000);
            header.set_uid(0);
            header.set_gid(0);
            let (path, data): (&str, &[u8]) = match entry {
                E::Dir(path, mode) => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(*mode);
                    (path, &[])
                }
                E::File(path, data, mode) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    (path, data)
                }
                E::Owned(path, uid, gid) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(0o644);
                    header.set_uid(*uid);
                    header.set_gid(*gid);
                    (path, b"owned")
                }
                E::Symlink(path, target) | E::Link(path, target) => {
                    let kind =
                        if matches!(entry, E::Symlink(..)) { tar::EntryType::Symlink } else { tar::EntryType::Link };
                    header.set_entry_type(kind);
                    header.set_mode(0o777);
                    header.set_link_name_literal(target).unwrap();
                    (path, &[])
                }
                E::Char(path) => {
                    header.set_entry_type(tar::EntryType::Char);
                    header.set_mode(0o666);
                    (path, &[])
                }
                E::Fifo(path) => {
                    header.set_entry_type(tar::EntryType::Fifo);
                    header.set_mode(0o640);
                    (path, &[])
                }
            };
            let name = &mut header.as_old_mut().name;
            name.fill(0);
            name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_size(data.len() as u64);
            header.set_cksum();
            builder.append(&header, data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    struct Fixture {
        dir: tempfile::TempDir,
        layers: Vec<(String, PathBuf)>,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("root")).unwrap();
            Self { dir, layers: Vec::new() }
        }

        fn root(&self) -> PathBuf {
            self.dir.path().join("root")
        }

        fn layer(&mut self, entries: &[E<'_>]) -> &mut Self {
            self.layer_bytes(tar_bytes(entries))
        }

        fn layer_bytes(&mut self, bytes: Vec<u8>) -> &mut Self {
            let path = self.dir.path().join(format!("layer{}", self.layers.len()));
            std::fs::write(&path, bytes).unwrap();
            self.layers.push((format!("layer{}", self.layers.len()), path));
            self
        }

        fn unpack(&self, id_shift: u32) -> Result<UnpackStats, UnpackError> {
            match self.unpack_limited(id_shift, u64::MAX, u64::MAX) {
                Ok(stats) => Ok(stats),
                Err(UnpackFailure::Layer(error)) => Err(error),
                Err(UnpackFailure::Limit(limit)) => panic!("no limit was set, yet: {limit}"),
            }
        }

        fn unpack_limited(
            &self,
            id_shift: u32,
            max_bytes: u64,
            max_entries: u64,
        ) -> Result<UnpackStats, UnpackFailure> {
            let chown = rustix::process::geteuid().is_root();
            unpack_layers(&self.root(), &self.layers, UnpackOptions { id_shift, chown, max_bytes, max_entries })
        }

        fn read(&self, rel: &str) -> String {
            std::fs::read_to_string(self.root().join(rel.trim_start_matches('/')))
                .unwrap_or_else(|e| panic!("{rel}: {e}"))
        }

        fn exists(&self, rel: &str) -> bool {
            self.root().join(rel).symlink_metadata().is_ok()
        }
    }

    #[test]
    fn whiteouts_remove_and_opaque_directories_hide_lower_layers() {
        let mut f = Fixture::new();
        f.layer(&[
            E::Dir("etc/", 0o755),
            E::File("etc/keep", b"lower", 0o644),
            E::File("etc/gone", b"x", 0o644),
            E::Dir("etc/gonedir/", 0o755),
            E::File("etc/gonedir/deep", b"x", 0o644),
            E::Dir("opq/", 0o755),
            E::File("opq/old", b"x", 0o644),
            E::Dir("opq/sub/", 0o755),
            E::File("opq/sub/older", b"x", 0o644),
            E::Dir("late/", 0o755),
            E::File("late/old", b"x", 0o644),
            E::File("dirbecomesfile/x", b"x", 0o644),
        ])
        .layer(&[
            E::File("etc/.wh.gone", b"", 0o644),
            E::File("etc/.wh.gonedir", b"", 0o644),
            E::File("etc/keep", b"upper", 0o600),
            E::File("etc/.wh.never-there", b"", 0o644),
            E::Dir("opq/", 0o755),
            E::File("opq/.wh..wh..opq", b"", 0o644),
            E::File("opq/new", b"new", 0o644),
            // The marker after the layer's own entries keeps them.
            E::File("late/mine", b"mine", 0o644),
            E::File("late/.wh..wh..opq", b"", 0o644),
            E::File("dirbecomesfile", b"file now", 0o644),
            E::File(".wh..wh.plnk", b"", 0o644),
        ]);
        f.unpack(0).unwrap();
        assert_eq!(f.read("etc/keep"), "upper");
        assert_eq!(std::fs::metadata(f.root().join("etc/keep")).unwrap().permissions().mode() & 0o7777, 0o600);
        assert!(!f.exists("etc/gone"));
        assert!(!f.exists("etc/gonedir"));
        assert!(!f.exists("etc/.wh.gone"));
        assert!(!f.exists("opq/old"));
        assert!(!f.exists("opq/sub"));
        assert!(!f.exists("opq/.wh..wh..opq"));
        assert_eq!(f.read("opq/new"), "new");
        assert!(!f.exists("late/old"));
        assert_eq!(f.read("late/mine"), "mine");
        assert_eq!(f.read("dirbecomesfile"), "file now");
        assert!(!f.exists(".wh..wh.plnk"));
    }

    #[test]
    fn modes_times_links_and_special_files_are_kept() {
        let mut f = Fixture::new();
        f.layer(&[
            E::Dir("./", 0o755),
            E::Dir("bin/", 0o755),
            E::File("bin/busybox", b"#!", 0o4755),
            E::Symlink("bin/sh", "busybox"),
            E::Link("bin/hard", "bin/busybox"),
            E::Dir("ro/", 0o555),
            E::File("ro/file", b"in a read-only dir", 0o444),
            E::Char("dev/null"),
            E::Fifo("run/fifo"),
        ]);
        let stats = f.unpack(0).unwrap();
        assert_eq!(stats.skipped_devices, 1);
        let root = f.root();
        let busybox = std::fs::metadata(root.join("bin/busybox")).unwrap();
        assert_eq!(busybox.permissions().mode() & 0o7777, 0o4755, "set-user-ID kept");
        assert_eq!(busybox.mtime(), 1_600_000_000);
        assert_eq!(std::fs::read_link(root.join("bin/sh")).unwrap(), Path::new("busybox"));
        assert_eq!(std::fs::symlink_metadata(root.join("bin/sh")).unwrap().mtime(), 1_600_000_000);
        assert_eq!(std::fs::metadata(root.join("bin/hard")).unwrap().ino(), busybox.ino());
        let ro = std::fs::metadata(root.join("ro")).unwrap();
        assert_eq!(ro.permissions().mode() & 0o7777, 0o555);
        assert_eq!(ro.mtime(), 1_600_000_000, "a directory's time is set after its entries");
        assert_eq!(f.read("ro/file"), "in a read-only dir");
        assert!(!f.exists("dev/null"), "device nodes are skipped");
        let fifo = std::fs::symlink_metadata(root.join("run/fifo")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
        assert_eq!(fifo.permissions().mode() & 0o7777, 0o640);
        // Make the tree removable for TempDir.
        std::fs::set_permissions(root.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn owners_are_shifted_when_root() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: only root may set owners");
            return;
        }
        let mut f = Fixture::new();
        f.layer(&[E::Owned("home/app/file", 1000, 1001), E::Symlink("link", "home")]);
        f.unpack(100_000).unwrap();
        let meta = std::fs::metadata(f.root().join("home/app/file")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (101_000, 101_001));
        let link = std::fs::symlink_metadata(f.root().join("link")).unwrap();
        assert_eq!((link.uid(), link.gid()), (100_000, 100_000));

        let mut f = Fixture::new();
        f.layer(&[E::Owned("x", u64::from(u32::MAX) - 5, 0)]);
        let err = f.unpack(100).unwrap_err();
        assert!(err.to_string().contains("no valid id"), "{err}");
    }

    #[test]
    fn dotdot_and_absolute_paths_stay_inside() {
        let mut f = Fixture::new();
        f.layer(&[
            E::File("../escape", b"x", 0o644),
            E::File("/etc/abs", b"abs", 0o644),
            E::File("a/../../../b", b"b", 0o644),
        ]);
        let stats = f.unpack(0).unwrap();
        assert_eq!(stats.neutralised_dotdot, 2);
        assert!(!f.dir.path().join("escape").exists());
        assert_eq!(f.read("escape"), "x");
        assert_eq!(f.read("etc/abs"), "abs");
        assert_eq!(f.read("b"), "b");
    }

    #[test]
    fn links_planted_by_a_layer_do_not_lead_out() {
        let outside = tempfile::tempdir().unwrap();
        let outside_path = outside.path().to_str().unwrap().to_string();

        // Links to `/` and above it resolve to the tree's root, where the writes land. (The
        // paths aim at a scratch directory of the host, so a broken unpack does no harm.)
        let mut f = Fixture::new();
        let through_root = format!("evil{outside_path}/pwned");
        let through_up = format!("up{outside_path}/pwned2");
        f.layer(&[E::Symlink("evil", "/"), E::Symlink("up", "../../../../..")])
            .layer(&[E::File(&through_root, b"in", 0o644), E::File(&through_up, b"in", 0o644)]);
        f.unpack(0).unwrap();
        assert_eq!(f.read(&format!("{outside_path}/pwned")), "in");
        assert_eq!(f.read(&format!("{outside_path}/pwned2")), "in");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "nothing written outside");

        // A link to a host directory, then a write through it (the next layer, or the same one):
        // inside the tree the link leads nowhere, and the unpack fails without writing there.
        for same_layer in [false, true] {
            let mut f = Fixture::new();
            let link = E::Symlink("out", &outside_path);
            let write = E::File("out/pwned", b"x", 0o644);
            if same_layer {
                f.layer(&[link, write]);
            } else {
                f.layer(&[link]).layer(&[write]);
            }
            let err = f.unpack(0).unwrap_err();
            assert!(err.to_string().contains("out"), "{err}");
            assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "nothing written outside");
        }

        // A file entry over a planted link replaces the link; it does not write through it.
        let target = outside.path().join("victim");
        std::fs::write(&target, "host").unwrap();
        let mut f = Fixture::new();
        f.layer(&[E::Symlink("victim", target.to_str().unwrap())]).layer(&[E::File("victim", b"image", 0o644)]);
        f.unpack(0).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "host");
        assert_eq!(f.read("victim"), "image");

        // A hard link to a host file: its target is read inside the tree, where it does not exist.
        let mut f = Fixture::new();
        f.layer(&[E::Link("hl", &format!("../../../../{}", target.display()))]);
        assert!(f.unpack(0).is_err());
        assert_eq!(std::fs::metadata(&target).unwrap().nlink(), 1);

        // A whiteout through a link removes nothing outside.
        let mut f = Fixture::new();
        f.layer(&[E::Symlink("o", &outside_path)]).layer(&[E::File("o/.wh.victim", b"", 0o644)]);
        f.unpack(0).unwrap();
        assert!(target.exists());
    }

    #[test]
    fn whiteouts_of_dot_and_dotdot_are_refused_and_remove_nothing() {
        // The tree is unpacked in a directory shared with other work (the cache's `tmp/`): a
        // whiteout of `..` at the top named that directory and emptied it.
        for (name, entry) in [
            (".wh...", ".wh..."),
            (".wh..", ".wh.."),
            ("./.wh...", ".wh..."),
            ("a/.wh...", "a/.wh..."),
            (".wh.", ".wh."),
        ] {
            let mut f = Fixture::new();
            std::fs::write(f.dir.path().join("other-pull"), "in progress").unwrap();
            f.layer(&[E::Dir("a/", 0o755), E::File("a/keep", b"lower", 0o644)]).layer(&[E::File(name, b"", 0o644)]);
            let err = f.unpack(0).unwrap_err();
            let message = err.to_string();
            assert!(message.contains("layer1") && message.contains(&format!("/{entry}:")), "{name}: {message}");
            assert!(message.contains("whiteout of"), "{name}: {message}");
            assert!(f.dir.path().join("other-pull").exists(), "{name}: the tree's parent was emptied");
            assert!(f.dir.path().join("layer0").exists(), "{name}: the tree's parent was emptied");
            assert_eq!(f.read("a/keep"), "lower", "{name}");
        }
    }

    #[test]
    fn removal_takes_only_plain_names() {
        let f = Fixture::new();
        std::fs::write(f.dir.path().join("sibling"), "x").unwrap();
        let root = fsutil::open_root(&f.root()).unwrap();
        for name in ["..", ".", "", "a/b"] {
            let err = fsutil::remove_all_at(&root, OsStr::new(name)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
        assert!(f.dir.path().join("sibling").exists());
    }

    /// An old-GNU sparse file (type `S`) of `real_size` apparent bytes whose data are the
    /// 512-byte `blocks` at their offsets, as GNU tar writes it: the map ends with an empty
    /// block at the apparent size (at most 3 blocks then: no extension headers).
    fn sparse_tar(path: &str, real_size: u64, blocks: &[(u64, [u8; 512])]) -> Vec<u8> {
        fn octal(field: &mut [u8], value: u64) {
            let text = format!("{value:0width$o}", width = field.len() - 1);
            field[..text.len()].copy_from_slice(text.as_bytes());
            field[text.len()..].fill(0);
        }
        assert!(blocks.len() <= 3);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::GNUSparse);
        header.set_mode(0o644);
        header.set_mtime(1_600_000_000);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(512 * blocks.len() as u64);
        let name = &mut header.as_old_mut().name;
        name.fill(0);
        name[..path.len()].copy_from_slice(path.as_bytes());
        let gnu = header.as_gnu_mut().unwrap();
        let map = blocks.iter().map(|(offset, _)| (*offset, 512)).chain([(real_size, 0)]);
        for (slot, (offset, length)) in gnu.sparse.iter_mut().zip(map) {
            octal(&mut slot.offset, offset);
            octal(&mut slot.numbytes, length);
        }
        octal(&mut gnu.realsize, real_size);
        header.set_cksum();
        let mut bytes = header.as_bytes().to_vec();
        for (_, data) in blocks {
            bytes.extend_from_slice(data);
        }
        bytes.extend_from_slice(&[0; 1024]);
        bytes
    }

    fn block(text: &str) -> [u8; 512] {
        let mut block = [0u8; 512];
        block[..text.len()].copy_from_slice(text.as_bytes());
        block
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn sparse_files_are_written_with_holes() {
        const APPARENT: u64 = 16 << 20;
        let mut f = Fixture::new();
        f.layer_bytes(sparse_tar("var/sparse", APPARENT, &[(0, block("head")), (APPARENT / 2, block("middle"))]));
        let stats = f.unpack(0).unwrap();
        // Holes are found in 4 KiB blocks: each data block is written as one.
        assert_eq!((stats.apparent_bytes, stats.written_bytes), (APPARENT, 2 * 4096));
        let path = f.root().join("var/sparse");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), APPARENT);
        // Two data blocks of 512 bytes: a few file system blocks, not 16 MiB of zeros.
        assert!(meta.blocks() * 512 <= 64 * 1024, "{} bytes allocated", meta.blocks() * 512);
        let data = std::fs::read(&path).unwrap();
        assert_eq!(&data[..4], b"head");
        assert_eq!(&data[APPARENT as usize / 2..APPARENT as usize / 2 + 6], b"middle");
        assert!(data[4..APPARENT as usize / 2].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_sparse_file_declaring_more_than_the_limit_is_refused_without_writing() {
        // 2 KiB of tar declaring 1 GiB.
        let mut f = Fixture::new();
        f.layer(&[E::File("small", b"fits", 0o644)]).layer_bytes(sparse_tar("huge", 1 << 30, &[(0, block("x"))]));
        let Err(UnpackFailure::Limit(limit)) = f.unpack_limited(0, 1 << 20, u64::MAX) else {
            panic!("a 1 GiB sparse file unpacked under a 1 MiB limit")
        };
        assert_eq!(
            limit,
            LimitExceeded::Bytes {
                max: 1 << 20,
                reached: (1 << 30) + 4,
                entry_bytes: 1 << 30,
                layer: "layer1".to_string(),
                path: "huge".to_string()
            }
        );
        let message = limit.to_string();
        assert!(
            message.contains("limit of 1048576 bytes (1.0 MiB)")
                && message.contains("/huge of layer layer1 declares 1073741824 bytes (1.0 GiB)"),
            "{message}"
        );
        assert!(!f.exists("huge"), "nothing of the refused entry is written");
    }

    #[test]
    fn a_gzip_bomb_is_refused_at_its_declared_size() {
        // 8 MiB of zeros in a gzip layer of a few KiB; the limit is 1 MiB.
        let zeros = vec![0u8; 8 << 20];
        let layer = gzip(&tar_bytes(&[E::File("etc/ok", b"small", 0o644), E::File("bomb", &zeros, 0o644)]));
        assert!(layer.len() < 64 * 1024, "{} bytes", layer.len());
        let mut f = Fixture::new();
        f.layer_bytes(layer);
        let Err(UnpackFailure::Limit(LimitExceeded::Bytes { reached, entry_bytes, path, .. })) =
            f.unpack_limited(0, 1 << 20, u64::MAX)
        else {
            panic!("an 8 MiB file unpacked under a 1 MiB limit")
        };
        assert_eq!((reached, entry_bytes, path.as_str()), ((8 << 20) + 5, 8 << 20, "bomb"));
        assert!(!f.exists("bomb"));

        // Under a limit it fits, it unpacks.
        let mut f = Fixture::new();
        f.layer_bytes(gzip(&tar_bytes(&[E::File("bomb", &zeros, 0o644)])));
        assert_eq!(f.unpack_limited(0, 8 << 20, u64::MAX).unwrap().apparent_bytes, 8 << 20);
    }

    #[test]
    fn entries_past_the_limit_are_refused() {
        let names: Vec<String> = (0..12).map(|n| format!("f{n}")).collect();
        let entries: Vec<E<'_>> = names.iter().map(|name| E::File(name, b"", 0o644)).collect();
        let mut f = Fixture::new();
        f.layer(&entries[..6]).layer(&entries[6..]);
        let Err(UnpackFailure::Limit(limit)) = f.unpack_limited(0, u64::MAX, 10) else {
            panic!("12 entries unpacked under a limit of 10")
        };
        assert_eq!(
            limit,
            LimitExceeded::Entries { max: 10, reached: 11, layer: "layer1".to_string(), path: "f10".to_string() }
        );
        assert!(limit.to_string().contains("more than its limit of 10 entries"), "{limit}");
        assert!(f.exists("f9") && !f.exists("f10"));

        let mut f = Fixture::new();
        f.layer(&entries[..6]).layer(&entries[6..]);
        assert_eq!(f.unpack_limited(0, u64::MAX, 12).unwrap().entries, 12);
    }

    #[test]
    fn gzip_and_zstd_layers_are_read() {
        use std::io::Write;
        let plain = tar_bytes(&[E::File("gz", b"gzip", 0o644)]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let zst = ruzstd::encoding::compress_to_vec(
            &tar_bytes(&[E::File("zst", b"zstd", 0o644)])[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let mut f = Fixture::new();
        f.layer_bytes(gz.finish().unwrap()).layer_bytes(zst).layer(&[E::File("plain", b"tar", 0o644)]);
        f.unpack(0).unwrap();
        assert_eq!((f.read("gz").as_str(), f.read("zst").as_str(), f.read("plain").as_str()), ("gzip", "zstd", "tar"));

        let mut f = Fixture::new();
        f.layer_bytes(vec![0x1f, 0x8b, 0, 1, 2, 3]);
        let err = f.unpack(0).unwrap_err();
        assert!(err.to_string().starts_with("failed to extract layer layer0"), "{err}");
    }
}
