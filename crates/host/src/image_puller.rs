//! The kubelet's part of the OCI runtime: pulls a Pod's images (`cwsandbox-images`) as its
//! runner's pull policy says, tells the world how it went, and keeps the pulled images until the
//! Pod's start takes them.
//!
//! Under `containerRuntime.kind: auto`, an image whose registry cannot be reached (no network, a
//! name that does not resolve, a pull that times out) is not an error: its container runs with the
//! host's programs, as under the process runtime, and the Pod's Events say so. Such a registry is
//! not asked again for [`UNREACHABLE_FOR`], so a suite of sandboxes on an offline machine pays the
//! failed lookup once. Under `oci` the same failure is the Pod's `ErrImagePull`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cwsandbox_images::{
    Image, ImageReference, ImageStore, ImageStoreConfig, PruneReport, PullCredentials, PullError, PullPolicy,
    RegistrySecret, StoreError,
};
use cwsandbox_sim::k8s::{ImagePullSecret, PullSecret};
use cwsandbox_sim::world::{ImagePullFailure, ImagePullPolicy, ImagePulled, ImageToPull};
use cwsandbox_sync::MutexUnpoisoned;

use crate::runtime_config::{ContainerRuntimeConfig, RuntimeKind};

/// The image store's form of a container's registry secret.
fn registry_credentials(secret: &ImagePullSecret) -> PullCredentials {
    PullCredentials {
        registry: secret.registry.clone(),
        secret: match &secret.secret {
            PullSecret::Basic { username, password } => {
                RegistrySecret::Basic { username: username.clone(), password: password.clone() }
            }
            PullSecret::DockerConfigJson(json) => RegistrySecret::DockerConfigJson(json.clone().into_bytes()),
        },
    }
}

/// How long a registry that could not be reached is taken to be unreachable (`auto` only).
pub const UNREACHABLE_FOR: Duration = Duration::from_secs(60);

/// Pulls images and holds them for the Pods that start with them.
pub struct ImagePuller {
    store: ImageStore,
    kind: RuntimeKind,
    /// Registries found unreachable, with when and why.
    unreachable: Mutex<HashMap<String, (Instant, String)>>,
    /// Pulled images by Pod uid and container name, until the Pod starts or goes.
    pulled: Mutex<HashMap<String, HashMap<String, Image>>>,
    /// The images of started Pods, by Pod uid, until their sandbox is removed: holding an
    /// [`Image`] keeps its tree from the cache's eviction and prune.
    in_use: InUse,
}

/// The images started Pods run on. Cheap to clone: a sandbox's removal, on a task of its own,
/// releases its image through one.
#[derive(Debug, Clone, Default)]
pub struct InUse(Arc<Mutex<HashMap<String, Vec<Image>>>>);

impl InUse {
    /// Keeps `images` (its containers') in use for the Pod `pod_uid`.
    pub fn hold(&self, pod_uid: &str, images: Vec<Image>) {
        self.0.lock_unpoisoned().insert(pod_uid.to_owned(), images);
    }

    /// The Pod's sandbox is gone: its image may be evicted.
    pub fn release(&self, pod_uid: &str) {
        self.0.lock_unpoisoned().remove(pod_uid);
    }
}

impl std::fmt::Debug for ImagePuller {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ImagePuller")
            .field("root", &self.store.config().root)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl ImagePuller {
    /// A puller caching under `cache_root`, unpacking with owners shifted by `id_shift` (a root
    /// emulator's sandboxes map their root to that host id). Trees unpacked with another shift
    /// live in a directory of their own, so emulators with different id ranges share nothing
    /// they would read wrongly.
    pub fn new(config: &ContainerRuntimeConfig, cache_root: PathBuf, id_shift: u32) -> Result<ImagePuller, StoreError> {
        let mut store_config = ImageStoreConfig::new(cache_root.join(format!("ids-{id_shift}")));
        if let Some(docker_config) = &config.docker_config {
            store_config.docker_config = Some(docker_config.clone());
        }
        store_config.insecure_registries = config.insecure_registries.clone();
        store_config.id_shift = id_shift;
        store_config.pull_timeout = Duration::from_secs(u64::from(config.pull_timeout_seconds.max(1)));
        store_config.max_image_bytes = config.max_image_bytes;
        store_config.max_image_entries = config.max_image_entries;
        store_config.max_cache_bytes = config.image_cache_max_bytes;
        store_config.registry_mirrors = config.registry_mirrors.clone();
        Ok(ImagePuller {
            store: ImageStore::new(store_config)?,
            kind: config.kind,
            unreachable: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashMap::new()),
            in_use: InUse::default(),
        })
    }

    /// The images started Pods hold.
    pub fn in_use(&self) -> &InUse {
        &self.in_use
    }

    /// Removes every cached image no Pod of this emulator (nor of another sharing the cache)
    /// uses, and the blobs only they referred to.
    pub async fn prune(&self) -> Result<PruneReport, StoreError> {
        self.store.prune().await
    }

    /// The image cache.
    pub fn store(&self) -> &ImageStore {
        &self.store
    }

    /// The image cache's directory.
    pub fn cache_dir(&self) -> &std::path::Path {
        &self.store.config().root
    }

    /// Pulls each container's image; the first that fails fails the Pod (`ErrImagePull` and
    /// the registry's message), unless `auto` lets its container run without it.
    pub async fn pull(&self, pod_uid: &str, images: Vec<ImageToPull>) -> Result<Vec<ImagePulled>, ImagePullFailure> {
        let mut reports = Vec::with_capacity(images.len());
        let mut pulled = HashMap::new();
        for wanted in images {
            let policy = match wanted.policy {
                ImagePullPolicy::Always => PullPolicy::Always,
                ImagePullPolicy::IfNotPresent => PullPolicy::IfNotPresent,
                ImagePullPolicy::Never => PullPolicy::Never,
            };
            if let Some(reason) = self.known_unreachable(&wanted.image) {
                reports.push(ImagePulled::NotUsed { image: wanted.image, reason });
                continue;
            }
            let started = Instant::now();
            let credentials = wanted.credentials.as_ref().map(registry_credentials);
            match self.store.pull_with(&wanted.image, policy, credentials.as_ref()).await {
                Ok(image) => {
                    reports.push(if image.pulled {
                        ImagePulled::Pulled {
                            image: wanted.image.clone(),
                            took: started.elapsed(),
                            size_bytes: image.size_bytes,
                        }
                    } else {
                        ImagePulled::Present { image: wanted.image.clone() }
                    });
                    pulled.insert(wanted.container, image);
                }
                Err(error) if self.kind == RuntimeKind::Auto && error.is_unreachable() => {
                    let reason = self.note_unreachable(&wanted.image, &error);
                    tracing::info!(image = %wanted.image, "{reason}");
                    reports.push(ImagePulled::NotUsed { image: wanted.image, reason });
                }
                Err(error) => {
                    let mut message = error.to_string();
                    if let PullError::TooLarge { limit, .. } = &error {
                        // The store names its own setting; say which of ours sets it.
                        message.push_str(match limit {
                            cwsandbox_images::LimitExceeded::Bytes { .. } => {
                                " (containerRuntime.maxImageBytes, serve --max-image-bytes)"
                            }
                            cwsandbox_images::LimitExceeded::Entries { .. } => {
                                " (containerRuntime.maxImageEntries, serve --max-image-entries)"
                            }
                        });
                    }
                    return Err(ImagePullFailure {
                        image: wanted.image,
                        reason: error.kubernetes_reason().to_owned(),
                        message,
                    });
                }
            }
        }
        if !pulled.is_empty() {
            self.pulled.lock_unpoisoned().insert(pod_uid.to_owned(), pulled);
        }
        Ok(reports)
    }

    /// The images pulled for a Pod's containers, by container name; taken by its start.
    pub fn take(&self, pod_uid: &str) -> HashMap<String, Image> {
        self.pulled.lock_unpoisoned().remove(pod_uid).unwrap_or_default()
    }

    /// A Pod went before it started: its pulled images are not needed.
    pub fn forget(&self, pod_uid: &str) {
        self.pulled.lock_unpoisoned().remove(pod_uid);
    }

    fn registry_of(image: &str) -> Option<String> {
        ImageReference::normalize(image).ok().map(|reference| reference.registry().to_owned())
    }

    /// Why `image` runs without its image, if its registry was found unreachable lately.
    fn known_unreachable(&self, image: &str) -> Option<String> {
        if self.kind != RuntimeKind::Auto {
            return None;
        }
        let registry = Self::registry_of(image)?;
        let mut unreachable = self.unreachable.lock_unpoisoned();
        match unreachable.get(&registry) {
            Some((since, reason)) if since.elapsed() < UNREACHABLE_FOR => Some(reason.clone()),
            Some(_) => {
                unreachable.remove(&registry);
                None
            }
            None => None,
        }
    }

    fn note_unreachable(&self, image: &str, error: &PullError) -> String {
        let registry = Self::registry_of(image).unwrap_or_default();
        let reason = format!(
            "registry {registry} cannot be reached ({error}); the container runs the host's programs \
             (containerRuntime.kind auto; `oci` makes this an ErrImagePull)"
        );
        self.unreachable.lock_unpoisoned().insert(registry, (Instant::now(), reason.clone()));
        reason
    }
}

#[cfg(test)]
mod tests {
    use cwsandbox_testkit::images::{self, Entry};
    use cwsandbox_testkit::registry::LocalRegistry;

    use super::*;

    fn wanted(image: &str) -> Vec<ImageToPull> {
        vec![ImageToPull {
            container: "main".to_owned(),
            image: image.to_owned(),
            policy: ImagePullPolicy::Always,
            credentials: None,
            runtime_class: None,
        }]
    }

    /// The puller's share of the cache's limits: a bomb's failure names the values key and flag
    /// that set the limit, and an image a started Pod holds survives a prune until its release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limits_are_named_and_images_in_use_survive_a_prune() {
        let registry = LocalRegistry::start().expect("starting the registry");
        let file = |path: &str, data: Vec<u8>| Entry::File { path: path.to_owned(), data, mode: 0o644, owner: 0 };
        let push = |name: &'static str, tar: Vec<u8>| {
            let registry = &registry;
            async move { images::push_tar_image(registry, name, &[tar]).await.unwrap_or_else(|e| panic!("{e:#}")) }
        };
        let (bomb, _) = push("test/bomb:1", images::tar_bytes(&[file("zeros", vec![0; 4 << 20])]).unwrap()).await;
        let (small, small_digest) =
            push("test/small:1", images::tar_bytes(&[file("hi", b"hi".to_vec())]).unwrap()).await;

        let dir = tempfile::tempdir().unwrap();
        let config = ContainerRuntimeConfig {
            docker_config: Some(dir.path().join("no-docker-config.json")),
            max_image_bytes: 1 << 20,
            ..ContainerRuntimeConfig::default()
        };
        let puller = ImagePuller::new(&config, dir.path().join("cache"), 0).unwrap();

        let failure = puller.pull("pod-bomb", wanted(&bomb)).await.unwrap_err();
        assert_eq!(failure.reason, "ErrImagePull");
        assert!(failure.message.contains("(containerRuntime.maxImageBytes, serve --max-image-bytes)"), "{failure:?}");

        puller.pull("pod-1", wanted(&small)).await.unwrap();
        let image = puller.take("pod-1").remove("main").expect("the pulled image");
        // As the runtime does once the sandbox started.
        puller.in_use().hold("pod-1", vec![image]);
        let report = puller.prune().await.unwrap();
        assert_eq!(report.in_use, vec![small_digest.clone()]);
        assert!(report.removed.is_empty(), "{report:?}");
        assert_eq!(report.blobs_removed, 2, "the bomb's config and layer: {report:?}");

        puller.in_use().release("pod-1");
        let report = puller.prune().await.unwrap();
        assert_eq!(report.removed.iter().map(|image| &image.digest).collect::<Vec<_>>(), vec![&small_digest]);
        assert_eq!(report.bytes_after, 0);
    }

    /// `containerRuntime.registryMirrors`: `python:3.11` comes from a loopback mirror of
    /// docker.io after a silent one (Docker Hub is never asked); a pull that reaches nothing
    /// fails with a message (the Pod's Event) naming every mirror and the registry it tried.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mirrors_in_the_values_serve_docker_hub_names() {
        let mirror = LocalRegistry::start().expect("starting the mirror");
        let file =
            Entry::File { path: "etc/motd".to_owned(), data: b"from the mirror\n".to_vec(), mode: 0o644, owner: 0 };
        let (_, digest) =
            images::push_tar_image(&mirror, "library/python:3.11", &[images::tar_bytes(&[file]).unwrap()])
                .await
                .unwrap_or_else(|e| panic!("{e:#}"));
        let dead = |port: u16| format!("http://127.0.0.1:{port}");
        let (silent, upstream) =
            (cwsandbox_testkit::registry::free_port().unwrap(), cwsandbox_testkit::registry::free_port().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let config = ContainerRuntimeConfig {
            kind: RuntimeKind::Oci,
            docker_config: Some(dir.path().join("no-docker-config.json")),
            registry_mirrors: [
                ("docker.io".to_owned(), vec![dead(silent), format!("http://{}", mirror.host())]),
                (format!("127.0.0.1:{upstream}"), vec![dead(silent)]),
            ]
            .into_iter()
            .collect(),
            ..ContainerRuntimeConfig::default()
        };
        let puller = ImagePuller::new(&config, dir.path().join("cache"), 0).unwrap();

        let pulled = puller.pull("pod-1", wanted("python:3.11")).await.unwrap();
        assert_eq!(pulled.len(), 1);
        let image = puller.take("pod-1").remove("main").expect("the pulled image");
        assert_eq!(image.digest, digest);
        assert_eq!(std::fs::read_to_string(image.rootfs.join("etc/motd")).unwrap(), "from the mirror\n");

        let failure = puller.pull("pod-2", wanted(&format!("127.0.0.1:{upstream}/team/app:1"))).await.unwrap_err();
        assert_eq!(failure.reason, "ErrImagePull");
        assert!(failure.message.contains(&format!("failed to do request to 127.0.0.1:{upstream}")), "{failure:?}");
        assert!(failure.message.contains(&format!("tried first: mirror {}: ", dead(silent))), "{failure:?}");
    }
}
