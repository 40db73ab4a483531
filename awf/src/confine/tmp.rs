//! The session's private temp directory: Bash's TMPDIR, the one temp directory it may write.

use std::path::{Path, PathBuf};

/// A session's own temp directory: created fresh (0700, unique name) under the system
/// temp directory, removed with everything in it when dropped, i.e. at the session's end.
#[derive(Debug)]
pub struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    pub fn create() -> std::io::Result<PrivateTmp> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        // pid, clock and a counter: unique among live and earlier sessions alike.
        static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "awf-tmp-{}-{nanos:x}-{}",
            std::process::id(),
            CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        // Not recursive: fails if the name exists (nothing planted there is reused).
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        // The umask may have taken bits off; the owner needs all three.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        Ok(PrivateTmp { path })
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
