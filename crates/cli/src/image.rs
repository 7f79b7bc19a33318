//! `cwsbx image …`: the emulator's image cache, over EmulatorService (`prune`).

use anyhow::Result;
use clap::Subcommand;
use cwsandbox_client::emulator_v1 as emu;

use crate::output::{Format, Output, print_value};

#[derive(Subcommand, Debug)]
pub enum ImageCmd {
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

/// Runs one `cwsbx image` command.
pub async fn run(admin: &cwsandbox_client::EmulatorAdmin, command: &ImageCmd, output: Output) -> Result<u8> {
    match command {
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
