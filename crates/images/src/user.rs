//! An image's `USER` (or a Pod's) as numeric ids, read from the image's own `/etc/passwd` and
//! `/etc/group` as runc and containerd read them.

use std::path::Path;

use thiserror::Error;

use crate::fsutil;

// An /etc/passwd larger than this is not a real one; the limit keeps a hostile image from making
// us read gigabytes.
const MAX_DB_BYTES: u64 = 4 << 20;

/// A user that cannot be found in the image: the message the runtime gives when the container
/// cannot start.
#[derive(Debug, Error)]
pub enum UserError {
    #[error("unable to find user {user}: no matching entries in passwd file")]
    UnknownUser { user: String },
    #[error("unable to find group {group}: no matching entries in group file")]
    UnknownGroup { group: String },
    #[error("invalid user \"{spec}\": {reason}")]
    Invalid { spec: String, reason: String },
    #[error("unable to read {file} of the image: {source}")]
    Read {
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The uid and gid `user` names in the image whose tree is `rootfs`: `""` (root), `"1000"`,
/// `"1000:1000"`, `"name"`, `"name:group"`, `"1000:group"`, `"name:100"`. A number alone takes
/// the primary group of its passwd entry when there is one, else 0 (as Docker does); a name
/// must be in the image's passwd. The files are opened with links resolved inside `rootfs`, so a
/// link in the image cannot make the emulator read one of the host's.
pub fn resolve_user(rootfs: &Path, user: &str) -> Result<(u32, u32), UserError> {
    let (user_part, group_part) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let invalid = |reason: &str| UserError::Invalid { spec: user.to_string(), reason: reason.to_string() };
    if group_part.is_some_and(str::is_empty) {
        return Err(invalid("the group after ':' is empty"));
    }
    if user_part.is_empty() {
        if group_part.is_some() {
            return Err(invalid("the user before ':' is empty"));
        }
        return Ok((0, 0));
    }

    let numeric_user = user_part.parse::<u32>().ok();
    // The passwd file is needed for a name, and for a number's primary group; its absence is
    // fine for numbers (a scratch image has none).
    let passwd = match (numeric_user, group_part) {
        (Some(_), Some(_)) => None,
        _ => read_db(rootfs, "etc/passwd", numeric_user.is_none())?,
    };
    let entry = passwd.as_deref().and_then(|text| {
        text.lines().map(|line| line.split(':').collect::<Vec<_>>()).find(|fields| {
            fields.len() >= 4
                && match numeric_user {
                    Some(uid) => fields[2].parse::<u32>().ok() == Some(uid),
                    None => fields[0] == user_part,
                }
        })
    });
    let (uid, primary_gid) = match (numeric_user, &entry) {
        (Some(uid), Some(fields)) => (uid, fields[3].parse::<u32>().unwrap_or(0)),
        (Some(uid), None) => (uid, 0),
        (None, Some(fields)) => (
            fields[2].parse::<u32>().map_err(|_| invalid("its passwd entry has no numeric uid"))?,
            fields[3].parse::<u32>().map_err(|_| invalid("its passwd entry has no numeric gid"))?,
        ),
        (None, None) => return Err(UserError::UnknownUser { user: user_part.to_string() }),
    };
    let gid = match group_part {
        None => primary_gid,
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => {
                let text = read_db(rootfs, "etc/group", true)?.unwrap_or_default();
                text.lines()
                    .map(|line| line.split(':').collect::<Vec<_>>())
                    .find(|fields| fields.len() >= 3 && fields[0] == group)
                    .and_then(|fields| fields[2].parse::<u32>().ok())
                    .ok_or_else(|| UserError::UnknownGroup { group: group.to_string() })?
            }
        },
    };
    Ok((uid, gid))
}

/// Reads `etc/passwd` or `etc/group` of the image; `None` when it is missing and not `required`.
fn read_db(rootfs: &Path, file: &'static str, required: bool) -> Result<Option<String>, UserError> {
    match fsutil::read_in_root(rootfs, Path::new(file), MAX_DB_BYTES) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some(String::new())),
        Err(source) => Err(UserError::Read { file, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\napp:x:1000:1001:App:/home/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/group"), "root:x:0:\nstaff:x:50:app\napp:x:1001:\n").unwrap();
        dir
    }

    #[test]
    fn users_resolve_through_the_image_files() {
        let dir = image();
        let root = dir.path();
        for (spec, want) in [
            ("", (0, 0)),
            ("root", (0, 0)),
            ("app", (1000, 1001)),
            ("1000", (1000, 1001)),
            ("4242", (4242, 0)),
            ("1000:7", (1000, 7)),
            ("app:staff", (1000, 50)),
            ("app:9", (1000, 9)),
            ("4242:staff", (4242, 50)),
            ("nobody", (65534, 65534)),
        ] {
            assert_eq!(resolve_user(root, spec).unwrap_or_else(|e| panic!("{spec}: {e}")), want, "{spec}");
        }
        assert!(matches!(resolve_user(root, "ghost"), Err(UserError::UnknownUser { .. })));
        assert!(matches!(resolve_user(root, "app:ghosts"), Err(UserError::UnknownGroup { .. })));
        assert!(matches!(resolve_user(root, "app:"), Err(UserError::Invalid { .. })));
        assert!(matches!(resolve_user(root, ":50"), Err(UserError::Invalid { .. })));
        let err = resolve_user(root, "ghost").unwrap_err().to_string();
        assert_eq!(err, "unable to find user ghost: no matching entries in passwd file");
    }

    #[test]
    fn numbers_need_no_passwd_and_names_do() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(resolve_user(dir.path(), "1000").unwrap(), (1000, 0));
        assert_eq!(resolve_user(dir.path(), "1000:1000").unwrap(), (1000, 1000));
        assert!(matches!(resolve_user(dir.path(), "app"), Err(UserError::UnknownUser { .. })));
    }

    #[test]
    fn a_link_to_the_hosts_passwd_is_read_inside_the_image() {
        // The image's /etc/passwd points at /etc/passwd-host: inside the image that is the image's
        // own file, never the host's (which has a root entry this image does not).
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(outside.path().join("passwd"), "secret:x:7:7::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("passwd"), dir.path().join("etc/passwd")).unwrap();
        assert!(matches!(resolve_user(dir.path(), "secret"), Err(UserError::UnknownUser { .. })));
        std::os::unix::fs::symlink("../../../../../../etc/group-in-image", dir.path().join("etc/group")).unwrap();
        std::fs::write(dir.path().join("etc/group-in-image"), "g:x:77:\n").unwrap();
        assert_eq!(resolve_user(dir.path(), "5:g").unwrap(), (5, 77));
    }
}
