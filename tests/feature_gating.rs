//! A client-only consumer of `cwsandbox-api` does not compile server code, and a server-only
//! one does not compile clients: the dependency graphs show it without building.

use std::collections::BTreeSet;
use std::process::Command;

fn normal_dependencies(features: &str) -> anyhow::Result<BTreeSet<String>> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "-p", "cwsandbox-api", "--no-default-features", "--features", features])
        .args(["-e", "normal", "--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    anyhow::ensure!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect())
}

#[test]
fn client_feature_builds_no_server_stack() -> anyhow::Result<()> {
    let dependencies = normal_dependencies("client")?;
    assert!(dependencies.contains("connectrpc-axum-client"), "{dependencies:?}");
    for server_crate in ["axum", "connectrpc-axum", "tower-http"] {
        assert!(!dependencies.contains(server_crate), "client-only build pulls {server_crate}: {dependencies:?}");
    }
    Ok(())
}

#[test]
fn server_feature_builds_no_client_stack() -> anyhow::Result<()> {
    let dependencies = normal_dependencies("server")?;
    assert!(dependencies.contains("connectrpc-axum"), "{dependencies:?}");
    assert!(!dependencies.contains("connectrpc-axum-client"), "server-only build pulls the Connect client");
    Ok(())
}

#[test]
fn no_feature_leaves_only_messages() -> anyhow::Result<()> {
    let dependencies = normal_dependencies("")?;
    for transport_crate in ["tonic", "axum", "connectrpc-axum", "connectrpc-axum-client", "hyper"] {
        assert!(!dependencies.contains(transport_crate), "message-only build pulls {transport_crate}");
    }
    Ok(())
}
