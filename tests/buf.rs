//! `buf lint` and `buf build` pass with the pinned buf CLI, so others can generate clients.

use std::process::Command;

fn buf(args: &[&str]) -> anyhow::Result<()> {
    let buf = cwsandbox_testkit::buf()?;
    let output = Command::new(&buf).args(args).current_dir(cwsandbox_testkit::workspace_root()).output()?;
    assert!(
        output.status.success(),
        "buf {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[test]
fn buf_lint_passes() -> anyhow::Result<()> {
    buf(&["lint"])
}

#[test]
fn buf_build_passes() -> anyhow::Result<()> {
    let image = tempfile::Builder::new().suffix(".binpb").tempfile()?;
    let path = image.path().to_str().expect("temp paths are UTF-8");
    buf(&["build", "-o", path])?;
    assert!(std::fs::metadata(image.path())?.len() > 0, "buf build wrote an empty image");
    Ok(())
}
