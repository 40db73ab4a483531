//! The session's private temp directory: Bash's TMPDIR, the one temp directory it may write.

use crate::session_dirs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A session's own temp directory: created fresh (0700, named after this process) under
/// the system temp directory, removed with everything in it when dropped, i.e. at the
/// session's end; one left by a killed session goes at a later session's start.
#[derive(Debug)]
pub struct PrivateTmp {
    path: PathBuf,
}

/// How the names of these directories begin (see [`session_dirs`] for the rest).
const PREFIX: &str = "awf-tmp-";

/// How deep a leftover's tree is removed (Bash may leave a build's tree there).
const MAX_DEPTH: usize = 64;

impl PrivateTmp {
    pub fn create() -> std::io::Result<PrivateTmp> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        static CREATED: AtomicU32 = AtomicU32::new(0);
        for _ in 0..100 {
            let n = CREATED.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(session_dirs::fresh_name(PREFIX, n));
            // Not recursive: fails if the name exists (nothing planted there is reused).
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            // The umask may have taken bits off; the owner needs all three.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
            return Ok(PrivateTmp { path });
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "no fresh name for a private temp directory",
        ))
    }

    /// Removes, in the background, the temp directories left under the temp directory by
    /// sessions that no longer run (killed before they could remove theirs; see
    /// `session_dirs::sweep`).
    pub fn sweep_leftovers() {
        session_dirs::sweep_in_background(
            "temp directories",
            vec![std::env::temp_dir()],
            PREFIX,
            MAX_DEPTH,
        );
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(
                "cannot remove the temp directory {}: {e}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_tmp_is_0700_and_goes_when_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let t = PrivateTmp::create().unwrap();
        let p = t.path().to_path_buf();
        assert_ne!(p, std::env::temp_dir());
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(p.join("f"), "x").unwrap();
        drop(t);
        assert!(!p.exists());
    }
}
