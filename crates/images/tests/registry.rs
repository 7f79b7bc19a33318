//! Pulls from a real registry (Debian's `docker-registry` on 127.0.0.1, a free port) the images
//! the test builds and pushes itself: unpacked trees, the cache, pull policies, errors, auth.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use cwsandbox_images::{Image, ImageStore, ImageStoreConfig, PullError, PullPolicy};
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

fn rustix_is_root() -> bool {
    rustix::process::geteuid().is_root()
}
