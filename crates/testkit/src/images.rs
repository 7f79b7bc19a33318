//! Small container images built by the tests themselves and pushed to a [`LocalRegistry`]: a
//! busybox-static root filesystem, and a second image layered on it that deletes, replaces and
//! hides files (whiteouts, an opaque directory). Built from Debian's `busybox-static`
//! (`/bin/busybox`, `$CWSANDBOX_BUSYBOX` to use another static one).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::registry::LocalRegistry;

/// The base image's `/etc/os-release`.
pub const OS_RELEASE: &str = "NAME=\"cwsandbox test busybox\"\nID=cwsandbox-test\nVERSION_ID=1\nPRETTY_NAME=\"cwsandbox test image (busybox)\"\n";
/// `/etc/motd` in the base image, replaced by the layered one with [`LAYERED_MOTD`].
pub const BASE_MOTD: &str = "from the base image\n";
/// `/etc/motd` in the layered image.
pub const LAYERED_MOTD: &str = "from the layered image\n";
/// A file of the base image that the layered image deletes (a whiteout).
pub const REMOVED_FILE: &str = "/etc/remove-me";
/// A directory whose base content (`old-1`, `sub/old-2`) the layered image hides (opaque) and
/// replaces with `new`.
pub const OPAQUE_DIR: &str = "/data";
/// The base image's environment besides `PATH`.
pub const BASE_GREETING: (&str, &str) = ("GREETING", "hello from the image");
/// The base image's working directory (holds `hello.txt`).
pub const BASE_WORKDIR: &str = "/app";
/// The programs linked to busybox in `/bin`.
pub const APPLETS: &[&str] = &[
    "sh", "cat", "ls", "echo", "env", "id", "pwd", "sleep", "true", "false", "mkdir", "rm", "touch", "head", "tail",
    "wc", "hostname", "ps", "grep", "sed", "stat", "test", "uname", "whoami", "cp", "mv", "ln", "chmod", "find",
    "sort", "dd", "df", "kill", "readlink", "printf", "seq", "tr", "cut", "date", "du", "mount", "nproc", "xargs",
    "which", "awk",
];

/// The images [`push_test_images`] made.
#[derive(Debug, Clone)]
pub struct TestImages {
    /// `127.0.0.1:PORT/test/busybox:1`: a Docker v2 schema 2 manifest. busybox in `/bin` (with
    /// [`APPLETS`] linked to it), [`OS_RELEASE`], [`BASE_MOTD`], [`REMOVED_FILE`], `/data/old-1`
    /// and `/data/sub/old-2`, `/app/hello.txt`, users `root` and `app` (1000:1000, home
    /// `/home/app`, owned by it). Config: `Env` `PATH=/bin:/usr/bin` and [`BASE_GREETING`],
    /// `WorkingDir` [`BASE_WORKDIR`], `Entrypoint` `["/bin/sh", "-c"]`, `Cmd`
    /// `["exec sleep 2147483647"]` (so it stays up by itself, and `args` are a shell script).
    pub base: String,
    /// `127.0.0.1:PORT/test/layered:1`: an OCI manifest, the base layer plus one that deletes
    /// [`REMOVED_FILE`], replaces `/etc/motd` with [`LAYERED_MOTD`] and makes [`OPAQUE_DIR`]
    /// opaque with only `new` in it. Config: the base's plus `LAYER=2`, `WorkingDir` `/data`.
    pub layered: String,
    /// `127.0.0.1:PORT/test/busybox:multi`: an OCI image index with the base manifest for this
    /// machine's architecture and the layered one for another (a platform resolver must pick
    /// the base).
    pub multi_arch: String,
    /// The manifest digest of `base`.
    pub base_digest: String,
    /// The manifest digest of `layered`.
    pub layered_digest: String,
}

/// A plain-HTTP registry client for `registry`, and its credentials (anonymous without any).
fn registry_client(registry: &LocalRegistry) -> Result<(oci_client::Client, RegistryAuth)> {
    // reqwest (under oci-client) takes its TLS crypto from the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = oci_client::Client::try_from(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() })
        .context("registry client")?;
    let auth = match registry.credentials() {
        Some((user, password)) => RegistryAuth::Basic(user.to_string(), password.to_string()),
        None => RegistryAuth::Anonymous,
    };
    Ok((client, auth))
}

/// Builds the test images and pushes them to `registry` (with its credentials when it has any).
pub async fn push_test_images(registry: &LocalRegistry) -> Result<TestImages> {
    let (client, auth) = registry_client(registry)?;
    let host = registry.host();
    let base_layer = Layer::gzip(&base_entries()?)?;
    let change_layer = Layer::gzip(&change_entries())?;

    let base_config = config_json(&[("PATH", "/bin:/usr/bin"), BASE_GREETING], BASE_WORKDIR, &[&base_layer]);
    let layered_config = config_json(
        &[("PATH", "/bin:/usr/bin"), BASE_GREETING, ("LAYER", "2")],
        "/data",
        &[&base_layer, &change_layer],
    );

    let base = format!("{host}/test/busybox:1");
    let base_digest = push_image(&client, &auth, &base, &base_config, &[&base_layer], Format::Docker).await?;
    let layered = format!("{host}/test/layered:1");
    let layered_digest =
        push_image(&client, &auth, &layered, &layered_config, &[&base_layer, &change_layer], Format::Oci).await?;

    // The index lives in test/busybox, so the layered manifest must be there too.
    let in_busybox = format!("{host}/test/busybox:layered");
    let layered_there =
        push_image(&client, &auth, &in_busybox, &layered_config, &[&base_layer, &change_layer], Format::Oci).await?;
    let other_arch = if go_arch() == "s390x" { "arm64" } else { "s390x" };
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": layered_there.0, "size": layered_there.1,
              "platform": { "architecture": other_arch, "os": "linux" } },
            { "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": base_digest.0, "size": base_digest.1,
              "platform": { "architecture": go_arch(), "os": "linux" } },
        ]
    });
    let multi_arch = format!("{host}/test/busybox:multi");
    push_manifest(&client, &auth, &multi_arch, &serde_json::to_vec(&index)?, "application/vnd.oci.image.index.v1+json")
        .await?;
    Ok(TestImages { base, layered, multi_arch, base_digest: base_digest.0, layered_digest: layered_digest.0 })
}

/// What `/etc/motd` says in the image [`push_private_image`] pushes.
pub const PRIVATE_MOTD: &str = "from the private image\n";

/// Pushes `127.0.0.1:PORT/test/private:1` to `registry` (with its credentials): the base image
/// with `/etc/motd` saying [`PRIVATE_MOTD`], an image no other registry of the tests holds (the
/// same bytes elsewhere would be the same image to a content-addressed cache). Returns its name.
pub async fn push_private_image(registry: &LocalRegistry) -> Result<String> {
    let (client, auth) = registry_client(registry)?;
    let base_layer = Layer::gzip(&base_entries()?)?;
    let private_layer = Layer::gzip(&[dir("etc", 0o755), file("etc/motd", PRIVATE_MOTD.as_bytes(), 0o644)])?;
    let config = config_json(&[("PATH", "/bin:/usr/bin"), BASE_GREETING], BASE_WORKDIR, &[&base_layer, &private_layer]);
    let name = format!("{}/test/private:1", registry.host());
    push_image(&client, &auth, &name, &config, &[&base_layer, &private_layer], Format::Oci).await?;
    Ok(name)
}

/// Pushes `name` (`test/<something>:<tag>`, on `registry`) made of `tars`, each a layer's tar
/// archive as given (so a test can push what a hostile image would: bombs, odd entries),
/// gzipped; returns the full name (`127.0.0.1:PORT/…`) and the manifest's digest.
pub async fn push_tar_image(registry: &LocalRegistry, name: &str, tars: &[Vec<u8>]) -> Result<(String, String)> {
    let (client, auth) = registry_client(registry)?;
    let layers = tars.iter().map(|tar| Layer::gzip_tar(tar)).collect::<Result<Vec<_>>>()?;
    let layer_refs: Vec<&Layer> = layers.iter().collect();
    let config = config_json(&[("PATH", "/bin:/usr/bin")], "/", &layer_refs);
    let full = format!("{}/{name}", registry.host());
    let (digest, _) = push_image(&client, &auth, &full, &config, &layer_refs, Format::Oci).await?;
    Ok((full, digest))
}

#[derive(Clone, Copy)]
enum Format {
    Docker,
    Oci,
}

/// Pushes the blobs and the manifest; returns the manifest's digest and size.
async fn push_image(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    name: &str,
    config: &[u8],
    layers: &[&Layer],
    format: Format,
) -> Result<(String, usize)> {
    let reference: oci_client::Reference = name.parse().with_context(|| format!("image name {name}"))?;
    client.store_auth_if_needed(reference.resolve_registry(), auth).await;
    let (manifest_type, config_type, layer_type) = match format {
        Format::Docker => (
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.docker.container.image.v1+json",
            "application/vnd.docker.image.rootfs.diff.tar.gzip",
        ),
        Format::Oci => (
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.oci.image.layer.v1.tar+gzip",
        ),
    };
    let config_digest = sha256(config);
    client.push_blob(&reference, config.to_vec(), &config_digest).await.context("pushing the config")?;
    for layer in layers {
        client.push_blob(&reference, layer.gzip.clone(), &layer.digest).await.context("pushing a layer")?;
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": { "mediaType": config_type, "digest": config_digest, "size": config.len() },
        "layers": layers.iter().map(|l| json!({ "mediaType": layer_type, "digest": l.digest, "size": l.gzip.len() })).collect::<Vec<_>>(),
    });
    let body = serde_json::to_vec(&manifest)?;
    push_manifest(client, auth, name, &body, manifest_type).await?;
    Ok((sha256(&body), body.len()))
}

async fn push_manifest(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    name: &str,
    body: &[u8],
    media_type: &str,
) -> Result<()> {
    let reference: oci_client::Reference = name.parse().with_context(|| format!("image name {name}"))?;
    client.store_auth_if_needed(reference.resolve_registry(), auth).await;
    client
        .push_manifest_raw(&reference, body.to_vec(), http::HeaderValue::from_str(media_type)?)
        .await
        .with_context(|| format!("pushing the manifest of {name}"))?;
    Ok(())
}

fn config_json(env: &[(&str, &str)], workdir: &str, layers: &[&Layer]) -> Vec<u8> {
    let config = json!({
        "architecture": go_arch(),
        "os": "linux",
        "config": {
            "Env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "Entrypoint": ["/bin/sh", "-c"],
            "Cmd": ["exec sleep 2147483647"],
            "WorkingDir": workdir,
        },
        "rootfs": { "type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>() },
    });
    serde_json::to_vec(&config).unwrap_or_default()
}

/// This machine's architecture as Go (and so the OCI platform) spells it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// One tar entry of a test layer.
pub enum Entry {
    Dir { path: String, mode: u32, owner: u64 },
    File { path: String, data: Vec<u8>, mode: u32, owner: u64 },
    Symlink { path: String, target: String },
}

fn dir(path: &str, mode: u32) -> Entry {
    Entry::Dir { path: path.to_string(), mode, owner: 0 }
}

fn file(path: &str, data: &[u8], mode: u32) -> Entry {
    Entry::File { path: path.to_string(), data: data.to_vec(), mode, owner: 0 }
}

struct Layer {
    gzip: Vec<u8>,
    digest: String,
    diff_id: String,
}

impl Layer {
    fn gzip(entries: &[Entry]) -> Result<Self> {
        Self::gzip_tar(&tar_bytes(entries)?)
    }

    fn gzip_tar(tar: &[u8]) -> Result<Self> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(tar)?;
        let gzip = encoder.finish()?;
        Ok(Self { digest: sha256(&gzip), diff_id: sha256(tar), gzip })
    }
}

/// A tar archive of one old-GNU sparse file (type `S`, as GNU tar writes it) of `real_size`
/// apparent bytes whose only data is `data` (at most 512 bytes) at offset 0: a few KiB of tar
/// that unpack, naively, to `real_size` bytes.
pub fn gnu_sparse_tar(path: &str, real_size: u64, data: &[u8]) -> Result<Vec<u8>> {
    fn octal(field: &mut [u8], value: u64) {
        let text = format!("{value:0width$o}", width = field.len() - 1);
        field[..text.len()].copy_from_slice(text.as_bytes());
        field[text.len()..].fill(0);
    }
    if data.len() > 512 || path.len() > 100 {
        bail!("gnu_sparse_tar: at most 512 bytes of data and a 100-byte path");
    }
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::GNUSparse);
    header.set_mode(0o644);
    header.set_mtime(1_700_000_000);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(512);
    header.set_path(path)?;
    let gnu = header.as_gnu_mut().context("a GNU header")?;
    // The map: the data block, then an empty block at the apparent size that ends it.
    octal(&mut gnu.sparse[0].offset, 0);
    octal(&mut gnu.sparse[0].numbytes, 512);
    octal(&mut gnu.sparse[1].offset, real_size);
    octal(&mut gnu.sparse[1].numbytes, 0);
    octal(&mut gnu.realsize, real_size);
    header.set_cksum();
    let mut bytes = header.as_bytes().to_vec();
    let mut block = [0u8; 512];
    block[..data.len()].copy_from_slice(data);
    bytes.extend_from_slice(&block);
    bytes.extend_from_slice(&[0; 1024]);
    Ok(bytes)
}

/// A tar archive of `entries` (paths as written, times fixed so builds are reproducible).
pub fn tar_bytes(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(1_700_000_000);
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            Entry::Dir { path, mode, owner } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_uid(*owner);
                header.set_gid(*owner);
                header.set_size(0);
                builder.append_data(&mut header, path, std::io::empty())?;
            }
            Entry::File { path, data, mode, owner } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_uid(*owner);
                header.set_gid(*owner);
                header.set_size(data.len() as u64);
                builder.append_data(&mut header, path, data.as_slice())?;
            }
            Entry::Symlink { path, target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, path, target)?;
            }
        }
    }
    Ok(builder.into_inner()?)
}

/// The busybox binary the base image carries.
pub fn busybox_path() -> PathBuf {
    std::env::var_os("CWSANDBOX_BUSYBOX").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/bin/busybox"))
}

fn base_entries() -> Result<Vec<Entry>> {
    let busybox_path = busybox_path();
    let busybox = std::fs::read(&busybox_path)
        .with_context(|| format!("reading {} (apt-get install busybox-static)", busybox_path.display()))?;
    // A dynamically linked busybox would need the host's libc inside the image.
    if busybox.len() < 100_000 {
        bail!("{} is too small to be busybox-static", busybox_path.display());
    }
    let mut entries = vec![
        dir("bin", 0o755),
        file("bin/busybox", &busybox, 0o755),
        dir("etc", 0o755),
        file("etc/os-release", OS_RELEASE.as_bytes(), 0o644),
        file("etc/motd", BASE_MOTD.as_bytes(), 0o644),
        file(REMOVED_FILE.trim_start_matches('/'), b"deleted by the layered image\n", 0o644),
        file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644),
        file("etc/group", b"root:x:0:\napp:x:1000:\nnogroup:x:65534:\n", 0o644),
        file("etc/hostname", b"image\n", 0o644),
        dir("root", 0o700),
        dir("tmp", 0o1777),
        dir("home", 0o755),
        Entry::Dir { path: "home/app".into(), mode: 0o755, owner: 1000 },
        Entry::File { path: "home/app/.profile".into(), data: b"# app's\n".to_vec(), mode: 0o644, owner: 1000 },
        dir("app", 0o755),
        file("app/hello.txt", b"hello from /app\n", 0o644),
        dir("data", 0o755),
        file("data/old-1", b"old\n", 0o644),
        dir("data/sub", 0o755),
        file("data/sub/old-2", b"old\n", 0o644),
        dir("usr", 0o755),
        Entry::Symlink { path: "usr/bin".into(), target: "../bin".into() },
        dir("proc", 0o555),
        dir("sys", 0o555),
        dir("dev", 0o755),
        dir("var", 0o755),
    ];
    entries.extend(
        APPLETS.iter().map(|applet| Entry::Symlink { path: format!("bin/{applet}"), target: "busybox".into() }),
    );
    Ok(entries)
}

fn change_entries() -> Vec<Entry> {
    vec![
        dir("etc", 0o755),
        file("etc/.wh.remove-me", b"", 0o644),
        file("etc/motd", LAYERED_MOTD.as_bytes(), 0o644),
        dir("data", 0o755),
        file("data/.wh..wh..opq", b"", 0o644),
        file("data/new", b"new\n", 0o644),
    ]
}

/// Saves `image` (in a loopback registry) as an archive at `file` with skopeo, as `docker save`
/// or an OCI tool would write it: `format` `docker-archive` (manifest.json with `RepoTags`
/// `[name]`) or `oci-archive` (an OCI layout tarball, `name` as `org.opencontainers.image.ref.name`).
pub fn save_archive(image: &str, format: &str, file: &Path, name: &str) -> Result<()> {
    let output = std::process::Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{image}"))
        .arg(format!("{format}:{}:{name}", file.display()))
        .output()
        .context("running skopeo (apt-get install skopeo)")?;
    anyhow::ensure!(
        output.status.success(),
        "skopeo copy {image} → {format}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
