//! Running the guide's own command lines as written: the `sacct`/`squeue`/… and `cwic` links to
//! this binary, and the curl configuration that points `https://api.coreweave.com` at the emulator.

use std::path::Path;

use anyhow::{Context, Result};

use crate::common::GlobalArgs;

/// Each Slurm command, and `cwic` (the guide's `cwic sandbox runner policy …`).
fn link_names() -> impl Iterator<Item = &'static str> {
    crate::slurm::COMMANDS.iter().copied().chain(["cwic"])
}

/// `cwsbx slurm install-links DIR`: a symlink per Slurm command, and `cwic`, to this binary.
pub fn install_links(dir: &str) -> Result<()> {
    let target = std::env::current_exe().context("the path of this binary")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {dir}"))?;
    for name in link_names() {
        let link = Path::new(dir).join(name);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link).with_context(|| format!("replacing {}", link.display()))?;
        }
        std::os::unix::fs::symlink(&target, &link).with_context(|| format!("linking {}", link.display()))?;
        println!("{} -> {}", link.display(), target.display());
    }
    if !on_path(Path::new(dir)) {
        eprintln!(
            "warning: {dir} is not on PATH, so `sacct`, `cwic` and the others are not found by name; \
             add it: export PATH=\"{}:$PATH\"",
            std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into()).display()
        );
    }
    Ok(())
}

/// Whether a directory is one of `$PATH`'s (compared after resolving links and `..`).
fn on_path(dir: &Path) -> bool {
    let wanted = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|entry| std::fs::canonicalize(&entry).unwrap_or(entry) == wanted)
    })
}

pub const GUIDE_ENV_EXAMPLES: &str = "Examples:
  cwsbx guide-env > /tmp/guide.env && . /tmp/guide.env
  curl --fail-with-body --silent --show-error -X POST \\
    'https://api.coreweave.com/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner' \\
    -H \"Authorization: Bearer $TOKEN\" -H \"Content-Type: application/json\" \\
    -H \"Connect-Protocol-Version: 1\" --data \"{\\\"runnerId\\\": \\\"$CWSANDBOX_RUNNER_ID\\\"}\"
curl reads DIR/.curlrc through CURL_HOME: its `connect-to` sends api.coreweave.com:443 to the
emulator's port, which also speaks TLS, with a certificate made at its start for localhost and
the loopback addresses, not api.coreweave.com: no CA file could make curl accept it, hence
`insecure`. Unset CURL_HOME to reach the real service again.";

/// `cwsbx guide-env`: writes DIR/.curlrc and prints the variables that make the guide's curl lines
/// (`https://api.coreweave.com/…`, `$TOKEN`) reach the emulator unchanged.
pub fn guide_env(global: &GlobalArgs, dir: &Path) -> Result<u8> {
    let base_url = global.base_url();
    let authority = base_url
        .strip_prefix("http://")
        .or_else(|| base_url.strip_prefix("https://"))
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|authority| authority.contains(':'))
        .with_context(|| {
            format!("CWSANDBOX_BASE_URL {base_url:?} is not an emulator's http://HOST:PORT: source the lines `cwsandbox-emulator serve` prints")
        })?;
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "443"));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let curlrc = dir.join(".curlrc");
    let text = format!(
        "# Written by `cwsbx guide-env`: the SUNK guide's https://api.coreweave.com lines reach the\n\
         # emulator at {base_url}, which serves TLS on the same port with a certificate it made at\n\
         # its start (so it is not verified). Unset CURL_HOME to reach the real service again.\n\
         connect-to = \"api.coreweave.com:443:{host}:{port}\"\n\
         insecure\n"
    );
    std::fs::write(&curlrc, text).with_context(|| format!("writing {}", curlrc.display()))?;
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    println!("export CURL_HOME={}", dir.display());
    // The guide's lines send `$TOKEN`.
    match &global.api_key {
        Some(token) if !token.is_empty() => println!("export TOKEN={token}"),
        _ => println!("# no CWSANDBOX_API_KEY: set TOKEN to the emulator's admin token"),
    }
    if let Ok(runner) = std::env::var("CWSANDBOX_RUNNER_ID")
        && !runner.is_empty()
    {
        println!("export RUNNER_ID={runner}   # the guide's [RUNNER-ID]");
    }
    Ok(0)
}
