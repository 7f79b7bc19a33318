//! `cwsbx image …`: the emulator's image cache, over EmulatorService (`load`, `ls`, `rm`, `prune`).

use anyhow::Result;
use clap::Subcommand;
use cwsandbox_client::emulator_v1 as emu;

use std::path::PathBuf;

use crate::output::{Format, Output, print_value, table};

#[derive(Subcommand, Debug)]
pub enum ImageCmd {
    /// Load the images of an archive into the emulator's image cache, under the names it
    /// carries: a `docker save` file (its RepoTags) or an OCI image layout tarball (each index
    /// entry's io.containerd.image.name, else org.opencontainers.image.ref.name when that is a
    /// whole reference), gzipped or not. The file is streamed to the emulator, which checks it
    /// (paths, digests, sizes) before anything is kept. A sandbox naming the image then runs in
    /// it with no registry asked (pull policy IfNotPresent, the default for a tagged name other
    /// than :latest; see the emulator README for :latest). Needs a cluster_admin token.
    #[command(after_help = "Examples:
  docker save python:3.11 -o python.tar && cwsbx image load python.tar
  skopeo copy docker://busybox:1.36 oci-archive:busybox.tar:docker.io/library/busybox:1.36
  cwsbx image load busybox.tar")]
    Load {
        /// The archive (`-` is not accepted: the file is read as it is sent).
        file: PathBuf,
    },
    /// List the images of the emulator's image cache: names, digest, size, last use, and
    /// whether a sandbox runs on it. Needs a cluster_admin token.
    #[command(
        visible_alias = "list",
        after_help = "Examples:
  cwsbx image ls
  cwsbx image ls -o json | jq '.images[].references'"
    )]
    Ls,
    /// Remove names from the emulator's image cache, and each image with its last name. The last
    /// name of an image a running sandbox uses is refused (a name beside others is only
    /// untagged). Needs a cluster_admin token.
    #[command(
        visible_alias = "remove",
        after_help = "Examples:
  cwsbx image rm python:3.11"
    )]
    Rm {
        /// The names, as a sandbox names its image (`python:3.11`).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove the cached images no sandbox runs on, and the blobs only they needed; print what
    /// was freed. Images a running sandbox uses (of this emulator or another sharing the cache)
    /// stay. Needs a cluster_admin token.
    #[command(after_help = "Examples:
  cwsbx image prune
  cwsbx image prune -o json | jq .bytesFreed")]
    Prune,
}

/// `1.5 MiB`: sizes as a person reads them (the JSON output has the exact bytes).
fn human(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes.max(0) as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// The lines `cwsbx image prune` prints for a person.
fn prune_lines(pruned: &emu::PruneImagesResponse) -> Vec<String> {
    if pruned.image_cache.is_empty() {
        return vec![
            "this emulator pulls no images (process runtime, or runc does not work here): nothing to prune".to_owned(),
        ];
    }
    let mut lines = Vec::new();
    for image in &pruned.images {
        let names = if image.references.is_empty() { image.digest.clone() } else { image.references.join(", ") };
        lines.push(format!("removed {names} ({}, {})", image.digest, human(image.bytes)));
    }
    for digest in &pruned.in_use_digests {
        lines.push(format!("kept {digest}: a sandbox runs on it"));
    }
    lines.push(format!(
        "{} images and {} blobs removed from {}: {} freed, {} left",
        pruned.images.len(),
        pruned.blobs_removed,
        pruned.image_cache,
        human(pruned.bytes_freed),
        human(pruned.bytes_after)
    ));
    lines
}

/// The lines `cwsbx image load` prints for a person.
fn load_lines(loaded: &emu::LoadImagesResponse) -> Vec<String> {
    let mut lines = Vec::new();
    for image in &loaded.images {
        lines.push(format!("loaded {} ({}, {})", image.references.join(", "), image.digest, human(image.size_bytes)));
    }
    for why in &loaded.unnamed {
        lines.push(format!("not loaded: {why}"));
    }
    lines
}

/// "3m ago": how long since `then`, read from the emulator's answer.
fn ago(then: Option<&cwsandbox_api::wkt::Timestamp>) -> String {
    let Some(then) = then else { return "-".to_owned() };
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let seconds = (now - then.seconds).max(0);
    match seconds {
        0..60 => format!("{seconds}s ago"),
        60..3600 => format!("{}m ago", seconds / 60),
        3600..86400 => format!("{}h ago", seconds / 3600),
        _ => format!("{}d ago", seconds / 86400),
    }
}

/// Runs one `cwsbx image` command.
pub async fn run(admin: &cwsandbox_client::EmulatorAdmin, command: &ImageCmd, output: Output) -> Result<u8> {
    match command {
        ImageCmd::Load { file } => {
            let loaded = admin.load_images(file).await?;
            match output.rows() {
                Format::Table => {
                    for line in load_lines(&loaded) {
                        println!("{line}");
                    }
                }
                format => print_value(&serde_json::to_value(&loaded)?, format)?,
            }
        }
        ImageCmd::Ls => {
            let listed = admin.list_images().await?;
            match output.rows() {
                Format::Table => {
                    if listed.image_cache.is_empty() {
                        eprintln!("this emulator runs no images (process runtime, or runc does not work here)");
                    }
                    table(
                        &["NAME", "DIGEST", "SIZE", "UNPACKED", "LAST USED", "IN USE"],
                        listed.images.iter().map(|image| {
                            vec![
                                if image.references.is_empty() {
                                    "<none>".to_owned()
                                } else {
                                    image.references.join(",")
                                },
                                image.digest.chars().take(19).collect(),
                                human(image.size_bytes),
                                human(image.unpacked_bytes),
                                ago(image.last_used.as_ref()),
                                if image.in_use { "yes".to_owned() } else { "no".to_owned() },
                            ]
                        }),
                    );
                }
                format => print_value(&serde_json::to_value(&listed)?, format)?,
            }
        }
        ImageCmd::Rm { names } => {
            let mut removed = Vec::new();
            for name in names {
                removed.push(admin.remove_image(name).await?);
            }
            match output.rows() {
                Format::Table => {
                    for image in &removed {
                        if image.image_removed {
                            println!(
                                "removed {} ({}, {} freed)",
                                image.reference,
                                image.digest,
                                human(image.bytes_freed)
                            );
                        } else {
                            println!("untagged {} ({} keeps its other names)", image.reference, image.digest);
                        }
                    }
                }
                format => print_value(&serde_json::to_value(&removed)?, format)?,
            }
        }
        ImageCmd::Prune => {
            let pruned = admin.prune_images().await?;
            match output.rows() {
                Format::Table => {
                    for line in prune_lines(&pruned) {
                        println!("{line}");
                    }
                }
                format => print_value(&serde_json::to_value(&pruned)?, format)?,
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_says_what_went_and_what_stayed() {
        let pruned = emu::PruneImagesResponse {
            image_cache: "/cache/images/ids-0".to_owned(),
            images: vec![emu::PrunedImage {
                digest: "sha256:ab".to_owned(),
                references: vec!["docker.io/library/python:3.11".to_owned()],
                bytes: 3 << 20,
            }],
            blobs_removed: 4,
            bytes_freed: 5 << 20,
            in_use_digests: vec!["sha256:cd".to_owned()],
            bytes_after: 1024,
        };
        assert_eq!(
            prune_lines(&pruned),
            [
                "removed docker.io/library/python:3.11 (sha256:ab, 3.0 MiB)",
                "kept sha256:cd: a sandbox runs on it",
                "1 images and 4 blobs removed from /cache/images/ids-0: 5.0 MiB freed, 1.0 KiB left",
            ]
        );
        assert!(prune_lines(&emu::PruneImagesResponse::default())[0].contains("pulls no images"));
    }
}
