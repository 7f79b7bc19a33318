//! Images loaded from archives (`docker save` and OCI layout tarballs made by skopeo from the
//! test images of a loopback registry), then found with no registry asked; listing and removal
//! by name; hostile archives refused, leaving nothing.

use std::path::Path;
use std::time::Duration;

use cwsandbox_images::{ImageStore, ImageStoreConfig, LoadError, PullPolicy, RemoveError};
use cwsandbox_testkit::images::{self, Entry, TestImages};
use cwsandbox_testkit::registry::LocalRegistry;

fn store_config(root: &Path) -> ImageStoreConfig {
    ImageStoreConfig { docker_config: None, pull_timeout: Duration::from_secs(60), ..ImageStoreConfig::new(root) }
}

async fn registry_with_images() -> (LocalRegistry, TestImages) {
    let registry = LocalRegistry::start().expect("starting the registry");
    let images = images::push_test_images(&registry).await.unwrap_or_else(|e| panic!("{e:#}\n{}", registry.log()));
    (registry, images)
}

/// Every directory of the cache is empty: nothing of a refused archive stayed.
fn assert_cache_empty(root: &Path) {
    for dir in ["blobs/sha256", "rootfs", "images", "refs", "tmp"] {
        let left: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{dir} holds {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_load_under_their_names_and_run_with_no_registry() {
    let (registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let docker = dir.path().join("busybox.tar");
    let oci = dir.path().join("layered-oci.tar");
    images::save_archive(&images.base, "docker-archive", &docker, "example.com/offline/busybox:1").unwrap();
    images::save_archive(&images.layered, "oci-archive", &oci, "example.com/offline/layered:2").unwrap();
    // A `:latest` name, on a loopback registry where nothing listens.
    let latest_name = format!("127.0.0.1:{}/offline/busybox:latest", cwsandbox_testkit::registry::free_port().unwrap());
    let latest = dir.path().join("latest.tar");
    images::save_archive(&images.base, "docker-archive", &latest, &latest_name).unwrap();
    drop(registry); // nothing to ask from here on

    let cache = dir.path().join("cache");
    let store = ImageStore::new(store_config(&cache)).unwrap();
    let report = store.load(&docker).await.unwrap();
    assert_eq!(report.format, "docker-archive");
    assert_eq!(report.images.len(), 1);
    assert_eq!(report.images[0].references, ["example.com/offline/busybox:1"]);
    let image = store.pull("example.com/offline/busybox:1", PullPolicy::IfNotPresent).await.unwrap();
    assert!(!image.pulled, "found in the cache, no registry asked");
    assert_eq!(image.digest, report.images[0].digest);
    assert_eq!(std::fs::read_to_string(image.rootfs.join("etc/motd")).unwrap(), images::BASE_MOTD);
    assert_eq!(image.config.entrypoint, ["/bin/sh", "-c"]);
    assert_eq!(image.config.working_dir.as_deref(), Some(images::BASE_WORKDIR));
    let out = std::process::Command::new(image.rootfs.join("bin/busybox")).args(["echo", "alive"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    // `Never` finds it too; a second load of the same archive changes nothing, gzipped or not
    // (`docker save IMAGE | gzip`).
    store.pull("example.com/offline/busybox:1", PullPolicy::Never).await.unwrap();
    assert_eq!(store.load(&docker).await.unwrap().images[0].digest, image.digest);
    let gzipped = dir.path().join("busybox.tar.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, &std::fs::read(&docker).unwrap()).unwrap();
    std::fs::write(&gzipped, encoder.finish().unwrap()).unwrap();
    assert_eq!(store.load(&gzipped).await.unwrap().images[0].digest, image.digest);

    let report = store.load(&oci).await.unwrap();
    assert_eq!(report.format, "oci-layout");
    assert_eq!(report.images[0].references, ["example.com/offline/layered:2"]);
    assert_eq!(report.images[0].digest, images.layered_digest, "an OCI layout keeps the registry's manifest");
    let layered = store.pull("example.com/offline/layered:2", PullPolicy::IfNotPresent).await.unwrap();
    assert_eq!(std::fs::read_to_string(layered.rootfs.join("etc/motd")).unwrap(), images::LAYERED_MOTD);
    assert!(!layered.rootfs.join(images::REMOVED_FILE.trim_start_matches('/')).exists(), "the whiteout applied");

    // A loaded `:latest` image: used as it is by IfNotPresent and Never, but `Always` asks the
    // registry every time, as the kubelet (and containerd's CRI) do: with none reachable, the
    // pull fails although the image is here.
    store.load(&latest).await.unwrap();
    store.pull(&latest_name, PullPolicy::IfNotPresent).await.unwrap();
    let error = store.pull(&latest_name, PullPolicy::Always).await.unwrap_err();
    assert!(error.is_unreachable(), "{error}");
    // The same image as busybox:1 (one manifest): this name only goes, though `image` holds it.
    let untagged = store.remove(&latest_name).await.unwrap();
    assert!(!untagged.image_removed && untagged.digest == image.digest, "{untagged:?}");

    // The listing: both, the one held by `image` in use.
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 2);
    let busybox = listed.iter().find(|i| i.digest == image.digest).unwrap();
    assert!(busybox.in_use && busybox.size_bytes > 100_000 && busybox.unpacked_bytes > 0);
    assert_eq!(busybox.references, ["example.com/offline/busybox:1"]);
    assert!(listed.iter().find(|i| i.digest == layered.digest).unwrap().in_use);
    drop(layered);
    assert!(!store.list().await.unwrap().iter().find(|i| i.digest == images.layered_digest).unwrap().in_use);

    // Removal by name: refused while a sandbox (here: the `Image`) holds it, then done.
    let refused = store.remove("example.com/offline/busybox:1").await.unwrap_err();
    assert!(matches!(refused, RemoveError::InUse { .. }), "{refused}");
    assert!(refused.to_string().contains("in use by a running sandbox"), "{refused}");
    drop(image);
    let removed = store.remove("example.com/offline/busybox:1").await.unwrap();
    assert!(removed.image_removed && removed.bytes_freed > 0);
    assert!(store.cached("example.com/offline/busybox:1").is_none());
    let missing = store.remove("example.com/offline/busybox:1").await.unwrap_err();
    assert!(missing.to_string().contains("is not in the cache"), "{missing}");
    store.remove("example.com/offline/layered:2").await.unwrap();
    assert_cache_empty(&cache);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_layout_image_named_by_a_bare_tag_is_reported_unnamed() {
    let (registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let oci = dir.path().join("tagged.tar");
    images::save_archive(&images.base, "oci-archive", &oci, "1.0").unwrap();
    drop(registry);
    let cache = dir.path().join("cache");
    let store = ImageStore::new(store_config(&cache)).unwrap();
    let error = store.load(&oci).await.unwrap_err();
    assert!(matches!(error, LoadError::NoName(_)), "{error}");
    let text = error.to_string();
    assert!(text.contains("named only \"1.0\"") && text.contains("io.containerd.image.name"), "{text}");
    assert_cache_empty(&cache);
}

/// A tar of `files` (path, content), as an archive tool would write.
fn archive(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let entries: Vec<Entry> = files
        .iter()
        .map(|(path, data)| Entry::File { path: path.to_string(), data: data.clone(), mode: 0o644, owner: 0 })
        .collect();
    images::tar_bytes(&entries).unwrap()
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// A `docker save` archive of one layer, named `hostile:1`.
fn docker_archive(layer: &[u8], diff_id: &str) -> Vec<u8> {
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{"Cmd":["/bin/sh"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{diff_id}"]}}}}"#
    );
    let config_name = format!("{}.json", sha256(config.as_bytes()));
    let manifest = format!(r#"[{{"Config":"{config_name}","RepoTags":["hostile:1"],"Layers":["l/layer.tar"]}}]"#);
    archive(&[
        (&config_name, config.into_bytes()),
        ("l/layer.tar", layer.to_vec()),
        ("manifest.json", manifest.into_bytes()),
    ])
}

fn small_layer() -> Vec<u8> {
    images::tar_bytes(&[Entry::File { path: "etc/motd".into(), data: b"hi\n".to_vec(), mode: 0o644, owner: 0 }])
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_archives_are_refused_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let config = ImageStoreConfig { max_image_bytes: 64 << 10, ..store_config(&cache) };
    let store = ImageStore::new(config).unwrap();
    let load = async |name: &str, bytes: Vec<u8>| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let error = store.load(&path).await.unwrap_err();
        assert_cache_empty(&cache);
        error.to_string()
    };

    // A good one first: the archive builder makes loadable archives.
    let layer = small_layer();
    let good = dir.path().join("good.tar");
    std::fs::write(&good, docker_archive(&layer, &sha256(&layer))).unwrap();
    let report = store.load(&good).await.unwrap();
    assert_eq!(report.images[0].references, ["docker.io/library/hostile:1"]);
    store.remove("hostile:1").await.unwrap();
    assert_cache_empty(&cache);

    // A path that climbs out (written raw: the tar crate's builder refuses to).
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..9].copy_from_slice(b"../escape");
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(1);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append(&header, &b"x"[..]).unwrap();
    let error = load("climb.tar", builder.into_inner().unwrap()).await;
    assert!(error.contains("\"../escape\"") && error.contains("leaves the archive"), "{error}");
    assert!(!dir.path().join("escape").exists() && !cache.join("escape").exists());

    // A layer whose content is not what the config's diff_ids say.
    let error = load("mismatch.tar", docker_archive(&layer, &"ab".repeat(32))).await;
    assert!(error.contains("layer l/layer.tar") && error.contains("diff_ids[0]"), "{error}");

    // An OCI layout blob whose content does not match its name.
    let blob = b"not what the name says".to_vec();
    let name = format!("blobs/sha256/{}", "cd".repeat(32));
    let error = load(
        "oci-mismatch.tar",
        archive(&[
            ("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            ("index.json", br#"{"schemaVersion":2,"manifests":[]}"#.to_vec()),
            (&name, blob),
        ]),
    )
    .await;
    assert!(error.contains(&name) && error.contains("not the one its name says"), "{error}");

    // A layer over the image's size limit, refused from its header before it is copied.
    let big = vec![0u8; 128 << 10];
    let error = load("big.tar", docker_archive(&big, &sha256(&big))).await;
    assert!(error.contains("l/layer.tar") && error.contains("max_image_bytes"), "{error}");

    // A link out of the archive.
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    builder.append_link(&mut header, "l/layer.tar", "../../etc/shadow").unwrap();
    let error = load("link.tar", builder.into_inner().unwrap()).await;
    assert!(error.contains("leaves the archive"), "{error}");

    // A path given twice: the later entry wins, and no entry's copy is overwritten by another
    // (each keeps the content its digest was computed from).
    let config = r#"{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config_name = format!("{}.json", sha256(config.as_bytes()));
    let manifest = format!(r#"[{{"Config":"{config_name}","RepoTags":["twice:1"],"Layers":["l/layer.tar"]}}]"#);
    let good_layer = small_layer();
    let diff_id = sha256(&good_layer);
    let config = config.replace(r#""diff_ids":[]"#, &format!(r#""diff_ids":["sha256:{diff_id}"]"#));
    let config_name_2 = format!("{}.json", sha256(config.as_bytes()));
    let manifest = manifest.replace(&config_name, &config_name_2);
    let twice = archive(&[
        ("l/layer.tar", b"first, replaced".to_vec()),
        ("l/layer.tar", good_layer.clone()),
        ("zz-other", b"an entry after the repeated one".to_vec()),
        (&config_name_2, config.into_bytes()),
        ("manifest.json", manifest.into_bytes()),
    ]);
    let path = dir.path().join("twice.tar");
    std::fs::write(&path, twice).unwrap();
    let report = store.load(&path).await.unwrap();
    let image = store.pull("twice:1", PullPolicy::Never).await.unwrap();
    assert_eq!(std::fs::read_to_string(image.rootfs.join("etc/motd")).unwrap(), "hi\n", "{report:?}");
    let blob = cache.join("blobs/sha256").join(&diff_id);
    assert_eq!(sha256(&std::fs::read(&blob).unwrap()), diff_id, "every blob is what its name says");
    drop(image);
    store.remove("twice:1").await.unwrap();
    assert_cache_empty(&cache);

    // Not an image archive at all.
    let error = load("neither.tar", archive(&[("hello.txt", b"hi".to_vec())])).await;
    assert!(error.contains("neither a docker save archive"), "{error}");
}
