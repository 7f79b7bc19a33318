//! Container images for the emulator's sandboxes: names resolved as Kubernetes resolves them,
//! pulled from OCI/Docker registries ([`ImageStore::pull`]), kept content-addressed on disk and
//! unpacked once per manifest into a root filesystem that every sandbox of the image shares
//! read-only. Also the rules that combine an image's config with a Pod's container spec
//! ([`ImageConfig::argv`], [`ImageConfig::env_with`], [`resolve_user`]).
//!
//! The crate knows nothing of sandboxes or runtimes: the emulator asks for an image, and hands
//! its tree and config to the executor.

mod archive;
mod auth;
mod config;
mod error;
mod fsutil;
mod reference;
mod store;
mod unpack;
mod user;

pub use archive::{CachedImage, LoadError, LoadReport, LoadedImage, RemoveError, RemovedImage};
pub use auth::{PullCredentials, RegistrySecret, default_docker_config};
pub use config::{DEFAULT_PATH, ImageConfig};
pub use error::{PullError, StoreError};
pub use reference::{DOCKER_HUB, ImageReference, InvalidPullPolicy, InvalidReference, PullPolicy};
pub use store::{
    DEFAULT_MAX_CACHE_BYTES, DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_ENTRIES, Image, ImageStore, ImageStoreConfig,
    PruneReport, PrunedImage,
};
pub use unpack::{LimitExceeded, UnpackError};
pub use user::{UserError, resolve_user};
