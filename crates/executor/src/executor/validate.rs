//! Checks of what callers hand the executor (sandbox ids, launch specs, exec requests) and the
//! conversion of their strings for `execve`, each refused as an `ExecutorError` naming the value.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::Path;

use crate::exec::ExecRequest;
use crate::{ExecutorError, LaunchSpec};

pub(super) fn c_string(value: String) -> Result<CString, ExecutorError> {
    CString::new(value).map_err(|error| {
        ExecutorError::InvalidRequest(format!("{:?} contains a NUL byte", String::from_utf8_lossy(&error.into_vec())))
    })
}

pub(super) fn path_c_string(path: &Path) -> Result<CString, ExecutorError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ExecutorError::InvalidRequest(format!("{} contains a NUL byte", path.display())))
}

pub(super) fn validate_id(id: &str) -> Result<(), ExecutorError> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid { Ok(()) } else { Err(ExecutorError::InvalidId(id.to_owned())) }
}

fn validate_env(env: &BTreeMap<String, String>) -> Result<(), ExecutorError> {
    for (key, value) in env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(ExecutorError::InvalidRequest(format!("invalid environment variable {key:?}")));
        }
    }
    Ok(())
}

fn validate_working_dir(dir: Option<&str>) -> Result<(), ExecutorError> {
    if let Some(dir) = dir
        && (dir.contains('\0') || dir.split('/').any(|component| component == ".."))
    {
        return Err(ExecutorError::InvalidRequest(format!(
            "invalid working directory {dir:?}: no NUL bytes or '..' components"
        )));
    }
    Ok(())
}

pub(super) fn validate_spec(spec: &LaunchSpec) -> Result<(), ExecutorError> {
    if spec.hostname.is_empty() || spec.hostname.len() > 64 || spec.hostname.contains('\0') {
        return Err(ExecutorError::InvalidHostname(spec.hostname.clone()));
    }
    if spec.command.first().is_some_and(String::is_empty) {
        return Err(ExecutorError::InvalidRequest("the command's program is empty".into()));
    }
    validate_env(&spec.env)?;
    for file in &spec.files {
        if let Err(problem) = crate::rootfs::check_file_path(&file.path) {
            return Err(ExecutorError::InvalidRequest(format!("mounted file {:?}: {problem}", file.path)));
        }
    }
    validate_working_dir(spec.working_dir.as_deref())?;
    for mount in &spec.volume_mounts {
        if let Some(claim) = &mount.claim {
            if !is_claim_key(claim) {
                return Err(ExecutorError::InvalidRequest(format!(
                    "invalid claim {claim:?}: 2 to 8 segments separated by '/', each 1 to 63 of a-z, 0-9, '-' and '_' (e.g. organization/cluster/namespace/name)"
                )));
            }
            if !mount.sub_path.trim_matches('/').is_empty() || mount.restore_from.is_some() {
                return Err(ExecutorError::InvalidRequest(format!(
                    "volume {:?}: a claim's volume is mounted at its root, as it is (no sub-path, no restore)",
                    mount.volume
                )));
            }
        }
        if !is_label(&mount.volume) {
            return Err(ExecutorError::InvalidRequest(format!("invalid volume name {:?}", mount.volume)));
        }
        if let Err(problem) = crate::rootfs::check_file_path(&mount.path) {
            return Err(ExecutorError::InvalidRequest(format!("volume mount path {:?}: {problem}", mount.path)));
        }
        if mount.sub_path.contains('\0') || mount.sub_path.split('/').any(|part| part == "..") {
            return Err(ExecutorError::InvalidRequest(format!("invalid volume sub-path {:?}", mount.sub_path)));
        }
    }
    crate::file_mounts::check(&spec.volume_mounts, &spec.files).map_err(ExecutorError::InvalidRequest)?;
    let mut names = std::collections::HashSet::from([spec.name.as_str()]);
    for sidecar in &spec.sidecars {
        if sidecar.name.is_empty() || sidecar.name.contains('\0') {
            return Err(ExecutorError::InvalidRequest(format!("invalid container name {:?}", sidecar.name)));
        }
        if !names.insert(sidecar.name.as_str()) {
            return Err(ExecutorError::InvalidRequest(format!("two containers are named {:?}", sidecar.name)));
        }
        if sidecar.command.first().is_some_and(String::is_empty) {
            return Err(ExecutorError::InvalidRequest(format!("container {:?}: the program is empty", sidecar.name)));
        }
        validate_env(&sidecar.env)?;
        validate_working_dir(sidecar.working_dir.as_deref())?;
    }
    Ok(())
}

pub(super) fn validate_exec(request: &ExecRequest) -> Result<(), ExecutorError> {
    match request.argv.first() {
        None => return Err(ExecutorError::InvalidRequest("argv is empty".into())),
        Some(program) if program.is_empty() => {
            return Err(ExecutorError::InvalidRequest("the program is empty".into()));
        }
        Some(_) => {}
    }
    if request.argv.iter().any(|arg| arg.contains('\0')) {
        return Err(ExecutorError::InvalidRequest("an argument contains a NUL byte".into()));
    }
    validate_env(&request.env)?;
    validate_working_dir(request.working_dir.as_deref())
}

/// Whether `claim` is a key the claims' directory can hold: 2 to 8 segments, each a directory
/// name of a DNS label's characters or `_` (never `.`, `..`, `/` or NUL), so the path made of it
/// stays inside the claims' directory.
pub(super) fn is_claim_key(claim: &str) -> bool {
    let segments: Vec<&str> = claim.split('/').collect();
    (2..=8).contains(&segments.len())
        && segments.iter().all(|segment| {
            !segment.is_empty()
                && segment.len() <= 63
                && segment
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-_".contains(&byte))
        })
}

/// Whether `text` can name a volume or a claim's part: a DNS label's characters, 1 to 63 of them
/// (what the emulator checked already; here it keeps paths made of it inside their directory).
pub(super) fn is_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_escape_the_root_directory() {
        for bad in ["", ".", "..", "a/b", "a b", "../x"] {
            assert!(matches!(validate_id(bad), Err(ExecutorError::InvalidId(_))), "{bad:?}");
        }
        assert!(validate_id("sbx-1.a_b").is_ok());
    }
}
