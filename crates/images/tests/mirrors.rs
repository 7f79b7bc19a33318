//! Registry mirrors (`ImageStoreConfig::registry_mirrors`, containerd's `hosts.toml`): tried in
//! order, the registry itself last; a mirror's 404 or silence passes to the next; a pull that
//! reaches nothing names every mirror and registry it tried. Every registry is on loopback: a
//! mirror serves `docker.io`'s names, so Docker Hub itself is never asked.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cwsandbox_images::{ImageStore, ImageStoreConfig, PullError, PullPolicy};
use cwsandbox_testkit::images;
use cwsandbox_testkit::registry::{LocalRegistry, free_port};

fn store(root: &Path, mirrors: &[(&str, Vec<String>)]) -> ImageStore {
    let registry_mirrors: BTreeMap<String, Vec<String>> =
        mirrors.iter().map(|(host, list)| (host.to_string(), list.clone())).collect();
    ImageStore::new(ImageStoreConfig {
        docker_config: None,
        pull_timeout: Duration::from_secs(60),
        registry_mirrors,
        ..ImageStoreConfig::new(root)
    })
    .unwrap()
}

/// Copies `from` to `to` between loopback registries (plain HTTP).
fn copy(from: &str, to: &str) {
    let output = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(format!("docker://{from}"))
        .arg(format!("docker://{to}"))
        .output()
        .expect("skopeo runs");
    assert!(output.status.success(), "skopeo copy {from} {to}: {}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_are_tried_in_order_and_the_registry_last() {
    let origin = LocalRegistry::start().expect("registry");
    let pushed = images::push_test_images(&origin).await.unwrap_or_else(|e| panic!("{e:#}\n{}", origin.log()));
    // The mirror holds docker.io's library/python:3.11 (the busybox test image under that name).
    let mirror = LocalRegistry::start().expect("mirror");
    copy(&pushed.base, &format!("{}/library/python:3.11", mirror.host()));
    let dead = format!("http://127.0.0.1:{}", free_port().unwrap());
    let dir = tempfile::tempdir().unwrap();

    // docker.io through a silent mirror, then one that has it: Docker Hub is never asked.
    let hub = store(&dir.path().join("a"), &[("docker.io", vec![dead.clone(), format!("http://{}", mirror.host())])]);
    let image = hub.pull("python:3.11", PullPolicy::Always).await.unwrap();
    assert_eq!(image.reference.to_string(), "docker.io/library/python:3.11");
    assert_eq!(image.digest, pushed.base_digest);
    assert_eq!(std::fs::read_to_string(image.rootfs.join("etc/motd")).unwrap(), images::BASE_MOTD);
    assert!(hub.cached("python:3.11").is_some(), "cached under the name asked for");

    // A mirror without the repository (404) passes to the registry itself.
    let own = store(&dir.path().join("b"), &[(origin.host().as_str(), vec![format!("http://{}", mirror.host())])]);
    let image = own.pull(&pushed.base, PullPolicy::Always).await.unwrap();
    assert_eq!(image.digest, pushed.base_digest);

    // Plain HTTP only for loopback mirrors; a path is refused by name; both pass to the next.
    let odd = store(
        &dir.path().join("c"),
        &[(
            origin.host().as_str(),
            vec!["http://mirror.invalid:5000".to_string(), format!("http://{}/v2/", mirror.host()) + "x"],
        )],
    );
    let image = odd.pull(&pushed.base, PullPolicy::Always).await.unwrap();
    assert_eq!(image.digest, pushed.base_digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_that_reaches_nothing_names_every_mirror_and_registry_tried() {
    let upstream = format!("127.0.0.1:{}", free_port().unwrap());
    let (first, second) =
        (format!("http://127.0.0.1:{}", free_port().unwrap()), format!("http://127.0.0.1:{}", free_port().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), &[(upstream.as_str(), vec![first.clone(), second.clone()])]);
    let error = store.pull(&format!("{upstream}/team/app:1"), PullPolicy::IfNotPresent).await.unwrap_err();
    assert!(matches!(error, PullError::Unreachable { .. }), "{error}");
    assert!(error.is_unreachable(), "every one silent: unreachable, as a registry alone is");
    let text = error.to_string();
    eprintln!("{text}");
    assert!(text.contains(&format!("failed to do request to {upstream}")), "{text}");
    let (at_first, at_second) = (text.find(&format!("mirror {first}: ")), text.find(&format!("mirror {second}: ")));
    assert!(at_first.is_some() && at_second.is_some() && at_first < at_second, "both mirrors, in order: {text}");
    let host = |url: &str| url.trim_start_matches("http://").to_string();
    assert!(text.contains(&format!("failed to do request to {}", host(&first))), "{text}");
    assert!(text.contains(&format!("failed to do request to {}", host(&second))), "{text}");
}
