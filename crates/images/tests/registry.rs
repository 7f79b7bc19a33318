//! Pulls from a real registry (Debian's `docker-registry` on 127.0.0.1, a free port) the images
//! the test builds and pushes itself: unpacked trees, the cache, pull policies, errors, auth.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use cwsandbox_images::{Image, ImageStore, ImageStoreConfig, PullCredentials, PullError, PullPolicy, RegistrySecret};
use cwsandbox_testkit::images::{self, TestImages};
use cwsandbox_testkit::registry::{LocalRegistry, free_port};

fn store_config(root: &Path) -> ImageStoreConfig {
    // No docker config of the machine running the tests.
    ImageStoreConfig { docker_config: None, pull_timeout: Duration::from_secs(60), ..ImageStoreConfig::new(root) }
}

async fn registry_with_images() -> (LocalRegistry, TestImages) {
    let registry = LocalRegistry::start().expect("starting the registry");
    let images = images::push_test_images(&registry).await.unwrap_or_else(|e| panic!("{e:#}\n{}", registry.log()));
    (registry, images)
}

fn read(image: &Image, path: &str) -> String {
    let full = image.rootfs.join(path.trim_start_matches('/'));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn exists(image: &Image, path: &str) -> bool {
    image.rootfs.join(path.trim_start_matches('/')).symlink_metadata().is_ok()
}

fn env<'a>(image: &'a Image, key: &str) -> Option<&'a str> {
    image.config.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_unpack_and_cache_images_as_their_policies_say() {
    let (registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(store_config(dir.path())).unwrap();

    let started = Instant::now();
    let base = store.pull(&images.base, PullPolicy::IfNotPresent).await.unwrap();
    eprintln!("pull + unpack of {} ({} bytes): {:?}", images.base, base.size_bytes, started.elapsed());
    assert!(base.pulled);
    assert_eq!(base.digest, images.base_digest);
    assert_eq!(base.reference.to_string(), images.base);
    assert!(base.size_bytes > 100_000, "busybox is in the size: {}", base.size_bytes);
    assert_eq!(read(&base, "/etc/os-release"), images::OS_RELEASE);
    assert_eq!(read(&base, "/etc/motd"), images::BASE_MOTD);
    assert!(exists(&base, images::REMOVED_FILE));
    assert_eq!(std::fs::read_link(base.rootfs.join("bin/sh")).unwrap(), Path::new("busybox"));
    assert_eq!(std::fs::metadata(base.rootfs.join("tmp")).unwrap().mode() & 0o7777, 0o1777);
    // The unpacked busybox is the real program.
    let out = std::process::Command::new(base.rootfs.join("bin/busybox")).args(["echo", "alive"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    assert_eq!(env(&base, images::BASE_GREETING.0), Some(images::BASE_GREETING.1));
    assert_eq!(base.config.working_dir.as_deref(), Some(images::BASE_WORKDIR));
    assert_eq!(base.config.entrypoint, ["/bin/sh", "-c"]);
    assert_eq!(base.config.argv(&[], &["echo hi".to_string()]), ["/bin/sh", "-c", "echo hi"]);
    assert_eq!(cwsandbox_images::resolve_user(&base.rootfs, "app").unwrap(), (1000, 1000));
    if rustix_is_root() {
        assert_eq!(std::fs::metadata(base.rootfs.join("home/app")).unwrap().uid(), 1000);
    }

    // Here now: IfNotPresent and Never take it from the cache, Always asks the registry.
    let started = Instant::now();
    let again = store.pull(&images.base, PullPolicy::IfNotPresent).await.unwrap();
    eprintln!("IfNotPresent pull of a cached image: {:?}", started.elapsed());
    assert!(!again.pulled);
    assert_eq!((&again.rootfs, &again.digest, &again.config), (&base.rootfs, &base.digest, &base.config));
    assert!(!store.pull(&images.base, PullPolicy::Never).await.unwrap().pulled);
    assert!(!store.cached(&images.base).unwrap().pulled);
    let started = Instant::now();
    let always = store.pull(&images.base, PullPolicy::Always).await.unwrap();
    eprintln!("Always pull of an image already here: {:?}", started.elapsed());
    assert!(always.pulled);
    assert_eq!(always.rootfs, base.rootfs);
    // Named by its digest, the manifest is here whatever tag brought it.
    let host = registry.host();
    let by_digest = store.pull(&format!("{host}/test/busybox@{}", images.base_digest), PullPolicy::IfNotPresent).await;
    assert!(!by_digest.unwrap().pulled);

    // The layered image: a whiteout, a replaced file, an opaque directory.
    let layered = store.pull(&images.layered, PullPolicy::IfNotPresent).await.unwrap();
    assert!(layered.pulled);
    assert_eq!(layered.digest, images.layered_digest);
    assert_ne!(layered.rootfs, base.rootfs);
    assert!(!exists(&layered, images::REMOVED_FILE), "whiteout");
    assert_eq!(read(&layered, "/etc/motd"), images::LAYERED_MOTD);
    assert!(!exists(&layered, "/data/old-1"), "opaque directory");
    assert!(!exists(&layered, "/data/sub"), "opaque directory");
    assert_eq!(read(&layered, "/data/new"), "new\n");
    assert_eq!(read(&layered, "/etc/os-release"), images::OS_RELEASE);
    assert_eq!(env(&layered, "LAYER"), Some("2"));
    assert_eq!(layered.config.working_dir.as_deref(), Some("/data"));
    // The base image's tree is untouched by the layered one.
    assert_eq!(read(&base, "/etc/motd"), images::BASE_MOTD);
    assert!(exists(&base, "/data/old-1"));
    // The shared base layer was downloaded once: base config, layered config, two layers.
    assert_eq!(std::fs::read_dir(dir.path().join("blobs/sha256")).unwrap().count(), 4);

    // An image index: this machine's platform is picked.
    let multi = store.pull(&images.multi_arch, PullPolicy::Always).await.unwrap();
    assert_eq!(multi.digest, images.base_digest);
    assert_eq!(multi.rootfs, base.rootfs);

    // Errors.
    let err = store.pull(&format!("{host}/test/busybox:nope"), PullPolicy::Always).await.unwrap_err();
    eprintln!("unknown tag: {err}");
    assert!(matches!(err, PullError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("manifest unknown"), "the registry's message is kept: {err}");
    assert!(err.to_string().contains(&format!("\"{host}/test/busybox:nope\"")), "{err}");
    assert!(!err.is_unreachable());
    let err = store.pull(&format!("{host}/test/nosuchrepo:1"), PullPolicy::IfNotPresent).await.unwrap_err();
    assert!(matches!(err, PullError::NotFound { .. }), "{err:?}");
    let err = store.pull(&images.base.replace(":1", ":2"), PullPolicy::Never).await.unwrap_err();
    assert!(matches!(err, PullError::NeverPull { .. }), "{err:?}");
    assert_eq!(err.kubernetes_reason(), "ErrImageNeverPull");
    assert!(err.to_string().ends_with("is not present with pull policy of Never"), "{err}");
    let err = store.pull("Bad//Name", PullPolicy::Always).await.unwrap_err();
    assert_eq!(err.kubernetes_reason(), "InvalidImageName");
    let nobody = format!("127.0.0.1:{}/test/busybox:1", free_port().unwrap());
    let err = store.pull(&nobody, PullPolicy::Always).await.unwrap_err();
    eprintln!("nothing listening: {err}");
    assert!(err.is_unreachable(), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("connect"), "{err}");

    // A registry whose name does not resolve (`.invalid` never does), spoken to over HTTPS.
    let err = store.pull("registry.invalid/test/busybox:1", PullPolicy::Always).await.unwrap_err();
    eprintln!("unknown host: {err}");
    assert!(err.is_unreachable(), "{err:?}");

    // A new store on the same directory (the emulator restarted) has everything.
    drop(store);
    let store = ImageStore::new(store_config(dir.path())).unwrap();
    let cached = store.pull(&images.layered, PullPolicy::Never).await.unwrap();
    assert_eq!(cached.rootfs, layered.rootfs);
    assert_eq!(cached.config, layered.config);
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0, "no work left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_share_one_download() {
    let (_registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(store_config(dir.path())).unwrap();
    let (a, b, c) = tokio::join!(
        store.pull(&images.layered, PullPolicy::Always),
        store.pull(&images.layered, PullPolicy::Always),
        store.pull(&images.layered, PullPolicy::IfNotPresent),
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!((&a.rootfs, &a.rootfs), (&b.rootfs, &c.rootfs));
    assert!(a.pulled && b.pulled && c.pulled, "each got the image of the one pull");
    assert_eq!(std::fs::read_dir(dir.path().join("rootfs")).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_are_shifted_into_the_sandboxes_range() {
    if !rustix_is_root() {
        eprintln!("skipped: only root may set owners");
        return;
    }
    let (_registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(ImageStoreConfig { id_shift: 1_000_000_000, ..store_config(dir.path()) }).unwrap();
    let image = store.pull(&images.base, PullPolicy::IfNotPresent).await.unwrap();
    let owner = |path: &str| {
        let meta = std::fs::symlink_metadata(image.rootfs.join(path)).unwrap();
        (meta.uid(), meta.gid())
    };
    assert_eq!(owner(""), (1_000_000_000, 1_000_000_000));
    assert_eq!(owner("bin/busybox"), (1_000_000_000, 1_000_000_000));
    assert_eq!(owner("bin/sh"), (1_000_000_000, 1_000_000_000));
    assert_eq!(owner("home/app"), (1_000_001_000, 1_000_001_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_with_authentication_needs_the_docker_config() {
    let registry = LocalRegistry::start_with_auth("tester", "pa:ss word").expect("starting the registry");
    let images = images::push_test_images(&registry).await.unwrap_or_else(|e| panic!("{e:#}\n{}", registry.log()));
    let dir = tempfile::tempdir().unwrap();

    let anonymous = ImageStore::new(store_config(&dir.path().join("a"))).unwrap();
    let err = anonymous.pull(&images.base, PullPolicy::Always).await.unwrap_err();
    eprintln!("no credentials: {err}");
    assert!(matches!(err, PullError::Unauthorized { .. }), "{err:?}");
    assert!(err.to_string().contains("pull access denied"), "{err}");
    assert!(!err.is_unreachable());

    let wrong = dir.path().join("wrong/config.json");
    std::fs::create_dir_all(wrong.parent().unwrap()).unwrap();
    std::fs::write(
        &wrong,
        format!(r#"{{"auths":{{"{}":{{"username":"tester","password":"nope"}}}}}}"#, registry.host()),
    )
    .unwrap();
    let store = ImageStore::new(ImageStoreConfig { docker_config: Some(wrong), ..store_config(&dir.path().join("w")) })
        .unwrap();
    let err = store.pull(&images.base, PullPolicy::Always).await.unwrap_err();
    assert!(matches!(err, PullError::Unauthorized { .. }), "{err:?}");

    let config = registry.write_docker_config(&dir.path().join("docker")).unwrap();
    let store =
        ImageStore::new(ImageStoreConfig { docker_config: Some(config), ..store_config(&dir.path().join("b")) })
            .unwrap();
    let image = store.pull(&images.layered, PullPolicy::Always).await.unwrap();
    assert_eq!(read(&image, "/etc/motd"), images::LAYERED_MOTD);
}

fn basic(registry: &str, username: &str, password: &str) -> PullCredentials {
    PullCredentials {
        registry: registry.to_owned(),
        secret: RegistrySecret::Basic { username: username.to_owned(), password: password.to_owned() },
    }
}

/// A sandbox's own credentials (`image_pull_credentials`) pull from their registry without the
/// emulator's docker config, and the image they pulled is theirs in the cache: another sandbox
/// gets it only with the same credentials, or once the registry lets its own read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxs_own_credentials_pull_and_keep_the_image_theirs() {
    let registry = LocalRegistry::start_with_auth("tester", "pa:ss word").expect("starting the registry");
    let images = images::push_test_images(&registry).await.unwrap_or_else(|e| panic!("{e:#}\n{}", registry.log()));
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(store_config(dir.path())).unwrap();
    let own = basic(&registry.host(), "tester", "pa:ss word");

    let image = store.pull_with(&images.layered, PullPolicy::IfNotPresent, Some(&own)).await.unwrap();
    assert!(image.pulled);
    assert_eq!(read(&image, "/etc/motd"), images::LAYERED_MOTD);

    // Without credentials, with wrong ones, or with some for another registry: the registry
    // refuses them, so the cache does too, whatever the pull policy.
    let wrong = basic(&registry.host(), "tester", "nope");
    let elsewhere = basic("registry.example.test", "tester", "pa:ss word");
    for credentials in [None, Some(&wrong), Some(&elsewhere)] {
        for policy in [PullPolicy::IfNotPresent, PullPolicy::Never] {
            let err = store.pull_with(&images.layered, policy, credentials).await.unwrap_err();
            assert!(matches!(err, PullError::Unauthorized { .. }), "{credentials:?} {policy:?}: {err:?}");
        }
    }

    // The same credentials, as a docker config.json this time: from the cache, without asking.
    let auth = base64_of("tester:pa:ss word");
    let json = format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, registry.host());
    let as_config =
        PullCredentials { registry: registry.host(), secret: RegistrySecret::DockerConfigJson(json.into_bytes()) };
    let cached = store.pull_with(&images.layered, PullPolicy::Never, Some(&as_config)).await.unwrap();
    assert!(!cached.pulled);
}

/// An image a sandbox's credentials pulled that the registry serves to anyone becomes anyone's
/// once an anonymous pull was let read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_registry_serves_to_anyone_is_anyones_after_one_check() {
    let (registry, images) = registry_with_images().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(store_config(dir.path())).unwrap();
    let own = basic(&registry.host(), "someone", "whatever");
    store.pull_with(&images.base, PullPolicy::IfNotPresent, Some(&own)).await.unwrap();
    let never = store.pull(&images.base, PullPolicy::Never).await.unwrap_err();
    assert!(matches!(never, PullError::Unauthorized { .. }), "Never may not ask the registry: {never:?}");
    let checked = store.pull(&images.base, PullPolicy::IfNotPresent).await.unwrap();
    assert!(!checked.pulled, "the registry was asked for the manifest only");
    store.pull(&images.base, PullPolicy::Never).await.unwrap();
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Hostile layers from a registry: a whiteout of `..`, a gzip bomb and a sparse bomb. Each
/// fails its pull with a clear error and leaves nothing: no tree, nothing removed that was not
/// its own, and the blobs they brought go at the next prune.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_layers_fail_their_pulls_and_leave_nothing() {
    let registry = LocalRegistry::start().expect("starting the registry");
    let push = |name: &'static str, tars: Vec<Vec<u8>>| {
        let registry = &registry;
        async move { images::push_tar_image(registry, name, &tars).await.unwrap_or_else(|e| panic!("{e:#}")).0 }
    };
    let file = |path: &str, data: Vec<u8>| images::Entry::File { path: path.to_string(), data, mode: 0o644, owner: 0 };
    let dotdot = push("test/dotdot:1", vec![images::tar_bytes(&[file(".wh...", Vec::new())]).unwrap()]).await;
    // 8 MiB of zeros: a gzip layer of a few KiB.
    let gzip_bomb =
        push("test/gzip-bomb:1", vec![images::tar_bytes(&[file("zeros", vec![0; 8 << 20])]).unwrap()]).await;
    // 2.5 KiB of tar declaring 1 GiB.
    let sparse_bomb = push("test/sparse-bomb:1", vec![images::gnu_sparse_tar("big", 1 << 30, b"data").unwrap()]).await;
    let fits = push("test/sparse-fits:1", vec![images::gnu_sparse_tar("big", 512 << 10, b"data").unwrap()]).await;

    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::new(ImageStoreConfig { max_image_bytes: 1 << 20, ..store_config(dir.path()) }).unwrap();
    // Another pull in progress, of this process (a live one): its work must survive.
    let other_work = dir.path().join(format!("tmp/{}.999.rootfs", std::process::id()));
    std::fs::create_dir_all(other_work.join("etc")).unwrap();

    let err = store.pull(&dotdot, PullPolicy::Always).await.unwrap_err();
    eprintln!("whiteout of ..: {err}");
    assert!(matches!(err, PullError::Unpack { .. }), "{err:?}");
    assert!(err.to_string().contains("/.wh...: whiteout of \"..\""), "{err}");
    assert!(other_work.join("etc").is_dir(), "the cache's shared tmp/ was emptied");

    for (image, declared) in [(&gzip_bomb, 8u64 << 20), (&sparse_bomb, 1 << 30)] {
        let err = store.pull(image, PullPolicy::Always).await.unwrap_err();
        eprintln!("bomb: {err}");
        let PullError::TooLarge { reference, limit: cwsandbox_images::LimitExceeded::Bytes { max, entry_bytes, .. } } =
            &err
        else {
            panic!("{image} unpacked under a 1 MiB limit: {err:?}")
        };
        assert_eq!((reference, *max, *entry_bytes), (image, 1 << 20, declared));
        assert!(err.to_string().contains("max_image_bytes"), "{err}");
        assert_eq!(err.kubernetes_reason(), "ErrImagePull");
    }
    assert_eq!(std::fs::read_dir(dir.path().join("rootfs")).unwrap().count(), 0, "no tree is kept");
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 1, "only the other pull's work");

    // A sparse file under the limit is written with its hole.
    let image = store.pull(&fits, PullPolicy::Always).await.unwrap();
    let meta = std::fs::metadata(image.rootfs.join("big")).unwrap();
    assert_eq!(meta.len(), 512 << 10);
    assert!(meta.blocks() * 512 <= 64 << 10, "{} bytes allocated", meta.blocks() * 512);
    drop(image);

    // The failed pulls' blobs (3 configs, 3 layers) and the image that fitted go at a prune.
    let report = store.prune().await.unwrap();
    assert_eq!(report.removed.len(), 1);
    assert_eq!(report.removed[0].references, vec![fits.clone()]);
    assert_eq!(report.blobs_removed, 8);
    assert_eq!(report.bytes_after, 0);
    assert_eq!(std::fs::read_dir(dir.path().join("blobs/sha256")).unwrap().count(), 0);
}

/// The cache's bound evicts the least recently used image no one uses; `prune` removes every
/// image not in use and says what it freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_bound_and_prune_spare_images_in_use() {
    let (registry, images) = registry_with_images().await;
    let small = images::push_tar_image(
        &registry,
        "test/small:1",
        &[images::tar_bytes(&[images::Entry::File {
            path: "hello".into(),
            data: b"hi".to_vec(),
            mode: 0o644,
            owner: 0,
        }])
        .unwrap()],
    )
    .await
    .unwrap()
    .0;
    let dir = tempfile::tempdir().unwrap();
    // A bound every image passes: after each pull, everything not in use goes.
    let store = ImageStore::new(ImageStoreConfig { max_cache_bytes: 1, ..store_config(dir.path()) }).unwrap();

    let base = store.pull(&images.base, PullPolicy::IfNotPresent).await.unwrap();
    let layered = store.pull(&images.layered, PullPolicy::IfNotPresent).await.unwrap();
    assert!(base.rootfs.is_dir() && layered.rootfs.is_dir(), "images in use are kept over the bound");
    let base_tree = base.rootfs.clone();
    drop(base);
    let small_image = store.pull(&small, PullPolicy::IfNotPresent).await.unwrap();
    assert!(!base_tree.exists(), "the unused image is evicted");
    assert!(store.cached(&images.base).is_none());
    assert!(layered.rootfs.is_dir() && small_image.rootfs.is_dir());
    assert_eq!(read(&layered, "/etc/motd"), images::LAYERED_MOTD);

    // A use (a cached pull) counts as one; prune spares what is in use.
    drop(small_image);
    let report = store.prune().await.unwrap();
    assert_eq!(report.removed.iter().map(|image| image.references.clone()).collect::<Vec<_>>(), vec![vec![small]]);
    assert_eq!(report.in_use, vec![images.layered_digest.clone()]);
    assert!(report.bytes_freed > 0 && report.bytes_after > 0, "{report:?}");
    assert!(layered.rootfs.is_dir());
    drop(layered);
    let report = store.prune().await.unwrap();
    assert_eq!(report.removed.len(), 1);
    assert_eq!(report.removed[0].digest, images.layered_digest);
    assert_eq!(report.bytes_after, 0);
    for sub in ["rootfs", "images", "refs", "blobs/sha256", "tmp"] {
        let left: Vec<_> = std::fs::read_dir(dir.path().join(sub)).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{sub}: {left:?}");
    }
}

fn rustix_is_root() -> bool {
    rustix::process::geteuid().is_root()
}
