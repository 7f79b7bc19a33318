//! Builds the gVisor helper (`gvisor-helper/main.rs`) as a static binary the executor embeds:
//! it runs inside gVisor sandboxes, in images whose C library (if any) is not the host's, so it
//! links glibc statically (`crt-static`: `libc.a` of Debian's libc6-dev, which every Rust link
//! here already needs). It uses std only, so one `rustc` call builds it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = PathBuf::from("gvisor-helper/main.rs");
    println!("cargo:rerun-if-changed={}", source.display());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let output = out_dir.join("gvisor-helper");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let built = Command::new(rustc)
        .args(["--edition=2021", "--crate-name=gvisor_helper", "--crate-type=bin", "-C", "opt-level=2"])
        .args(["-C", "target-feature=+crt-static", "-C", "strip=symbols", "-C", "panic=abort"])
        .arg("-o")
        .arg(&output)
        .arg(&source)
        .status()
        .expect("cannot run rustc for the gVisor helper");
    assert!(built.success(), "building the gVisor helper (gvisor-helper/main.rs) failed: {built}");
}
