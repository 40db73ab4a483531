//! Files and directories only awf may use: its private directories (0700, owned by us,
//! no symlink followed), files created fresh with mode 0600, and the check that they lie
//! where the agent's Bash cannot write. Used by the runner, the per-step proxy, the
//! providers' generated configs and `awf mcp-serve`'s audit file.

use crate::error::{AwfError, codes};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A directory only we can use: created 0700 (with its missing parents), then checked on
/// an fd opened without following a symlink: a directory, owned by us, mode 0700 (set if
/// it was not). A planted symlink or someone else's directory is refused.
pub fn private_dir(p: &Path) -> Result<(), AwfError> {
    let bad = |why: String| {
        AwfError::new(
            codes::IO,
            format!("private directory {}: {why}", p.display()),
        )
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| bad(format!("cannot create it: {e}")))?;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| {
            bad(format!(
                "cannot open it as a directory without following a symlink ({e}); awf keeps \
                 its private files only in a real directory of its own: remove what is there"
            ))
        })?;
    let meta = dir.metadata().map_err(|e| bad(e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(bad(format!(
            "it is owned by uid {}, not by awf's uid {me}; remove it or choose another directory",
            meta.uid()
        )));
    }
    if meta.mode() & 0o777 != 0o700 {
        dir.set_permissions(std::fs::Permissions::from_mode(0o700))
            .map_err(|e| bad(format!("cannot make it 0700: {e}")))?;
    }
    Ok(())
}

/// Writes a new file that only we can read (it may hold keys): created with
/// O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, in a [`private_dir`]; something already at the
/// path (a planted file or symlink) is an error, never followed or truncated.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AwfError> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        private_dir(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            AwfError::new(
                codes::IO,
                format!(
                    "cannot create {}: {e} (awf creates its files fresh; something already \
                     there was not made by this run)",
                    path.display()
                ),
            )
        })?;
    f.write_all(bytes)
        .map_err(|e| AwfError::new(codes::IO, format!("cannot write {}: {e}", path.display())))
}

/// Checks that the run's private files and audit trail live where the agent's Bash cannot
/// write (outside every path its Landlock domain may write): else the agent could forge or
/// delete its own audit, or plant symlinks where awf writes.
pub fn check_private_location(
    what: &str,
    dir: &Path,
    writable: &[PathBuf],
    fix: &str,
) -> Result<(), AwfError> {
    let dir_real = real_path(dir);
    for w in writable {
        if dir_real.starts_with(real_path(w)) {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "the {what} {} is beneath {}, which the agent's Bash may write: it could \
                     forge or delete awf's records there; {fix}",
                    dir.display(),
                    w.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `p` with its existing part canonicalized (symlinks resolved, a dangling one too: where
/// it points is where a directory made through it would be) and the rest appended.
pub(crate) fn real_path(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    let mut links = 0;
    loop {
        if let Ok(mut real) = std::fs::canonicalize(&cur) {
            real.extend(rest.iter().rev());
            return real;
        }
        if links < 40
            && std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink())
            && let Ok(target) = std::fs::read_link(&cur)
        {
            links += 1;
            cur = match cur.parent() {
                Some(parent) if target.is_relative() => parent.join(target),
                _ => target,
            };
            continue;
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Where awf keeps a run's private files and its audit trail by default:
/// `$XDG_STATE_HOME/awf` (else `~/.local/state/awf`), not the temp dir, which the agent's
/// Bash may write.
pub fn state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("awf")
}

#[cfg(test)]
mod real_path_tests {
    use super::*;

    #[test]
    fn a_dangling_symlink_resolves_to_where_it_points() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-realpath-")
            .tempdir()
            .unwrap();
        let base = tmp.path().to_path_buf();
        let ws = base.join("workspace");
        std::fs::create_dir_all(&ws).unwrap();
        let link = base.join("audit-link");
        std::os::unix::fs::symlink(ws.join("not-yet"), &link).unwrap();
        let ws_real = std::fs::canonicalize(&ws).unwrap();
        assert_eq!(real_path(&link), ws_real.join("not-yet"));
        assert_eq!(real_path(&link.join("a/b")), ws_real.join("not-yet/a/b"));
    }
}
