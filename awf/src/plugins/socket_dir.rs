//! The private directory awf makes for one plugin's socket. The plugin gets it as its
//! TMPDIR (the SDK makes its socket directory there); the socket it announces is accepted
//! only inside it, as a socket reached without a symlink — never a path elsewhere, never
//! another plugin's socket. At cleanup awf removes this directory and what is in it, by
//! the descriptor it opened at creation (entries by `unlinkat`, symlinks never followed),
//! and nothing a plugin named. The directory of an awf that was killed before it could
//! remove it is removed by a later session ([`sweep_leftovers`]).

use crate::session_dirs::{self, clear, open_dir};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// How the names of these directories begin (see [`session_dirs`] for the rest).
const PREFIX: &str = "awf-p-";

/// A socket path has at most 107 bytes (`sun_path`, NUL included).
const MAX_SOCKET_PATH: usize = 107;

/// What the SDK adds beneath the directory, at most: `/awf-plugin-<pid>-<n>/plugin.sock`
/// (pids up to 7 digits, `n` up to 99).
const SDK_SUFFIX: usize = "/awf-plugin-1234567-99/plugin.sock".len();

/// How deep the plugin may nest what it leaves (the SDK: one directory, one socket).
const MAX_DEPTH: usize = 8;

#[derive(Debug)]
pub struct SocketDir {
    path: PathBuf,
    fd: OwnedFd,
    /// Device and inode of the directory made, to remove it only if its name still names it.
    id: (u64, u64),
}

impl SocketDir {
    /// A fresh 0700 directory under the temp dir (under `/tmp` when a socket path the SDK
    /// makes beneath it could be too long).
    pub fn create() -> io::Result<SocketDir> {
        Self::create_in(&std::env::temp_dir())
    }

    fn create_in(temp: &Path) -> io::Result<SocketDir> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        for _ in 0..100 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let name = session_dirs::fresh_name(PREFIX, n);
            // Under the temp dir when the SDK's socket path fits there, else under /tmp
            // (short on every Linux system), which the SDK would fall back to anyway.
            let fits = temp.as_os_str().len() + 1 + name.len() + SDK_SUFFIX <= MAX_SOCKET_PATH;
            let base = if fits {
                temp.to_path_buf()
            } else {
                PathBuf::from("/tmp")
            };
            let path = base.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            let fd = open_dir(libc::AT_FDCWD, &path)?;
            let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
            return Ok(SocketDir {
                path,
                fd,
                id: (meta.dev(), meta.ino()),
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no fresh name for a plugin socket directory",
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that `announced` is a Unix socket inside this directory, reached without a
    /// symlink and without `..`; the message says what it is otherwise.
    pub fn accept(&self, announced: &Path) -> Result<(), String> {
        let refuse = |why: &str| {
            Err(format!(
                "announced the socket {}, which {why}; a plugin must serve on a socket in the \
                 directory awf gave it as TMPDIR ({}), as plugin_sdk::serve does",
                announced.display(),
                self.path.display()
            ))
        };
        let Ok(rel) = announced.strip_prefix(&self.path) else {
            return refuse("lies outside the plugin's private directory");
        };
        let parts: Vec<_> = rel.components().collect();
        if parts.is_empty() || parts.iter().any(|c| !matches!(c, Component::Normal(_))) {
            return refuse("is not a plain path beneath the plugin's private directory");
        }
        let mut at = self.path.clone();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                return refuse("does not exist");
            };
            let last = i + 1 == parts.len();
            if last && !meta.file_type().is_socket() {
                return refuse("is not a Unix socket");
            }
            if !last && !meta.is_dir() {
                return refuse("is reached through something other than a directory (a symlink?)");
            }
        }
        Ok(())
    }

    /// Removes the directory and its content, by descriptor; never follows a symlink.
    pub fn remove(&self) {
        let _ = clear(&self.fd, MAX_DEPTH);
        // The name is removed only while it still names the directory made.
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && meta.is_dir()
            && (meta.dev(), meta.ino()) == self.id
        {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// Removes, in the background, the socket directories left by sessions that no longer run
/// (see `session_dirs::sweep`), in both places [`SocketDir::create`] makes them.
pub fn sweep_leftovers() {
    let temp = std::env::temp_dir();
    let tmp = PathBuf::from("/tmp");
    let mut parents = vec![temp];
    if std::fs::canonicalize(&parents[0]).ok().as_ref() != Some(&tmp) {
        parents.push(tmp);
    }
    session_dirs::sweep_in_background("plugin socket directories", parents, PREFIX, MAX_DEPTH);
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_a_long_temp_dir_the_sdk_s_socket_path_still_fits() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-sockdir-long-")
            .tempdir()
            .unwrap();
        let long = tmp.path().join("x".repeat(60));
        std::fs::create_dir_all(&long).unwrap();
        let d = SocketDir::create_in(&long).unwrap();
        assert!(
            d.path().as_os_str().len() + SDK_SUFFIX <= MAX_SOCKET_PATH,
            "{:?}",
            d.path()
        );
        drop(d);
    }

    #[test]
    fn only_a_socket_inside_is_accepted_and_removal_stays_inside() {
        let d = SocketDir::create().unwrap();
        let tmp = tempfile::Builder::new()
            .prefix("awf-sockdir-out-")
            .tempdir()
            .unwrap();
        let outside = tmp.path().to_path_buf();
        std::fs::write(outside.join("precious.txt"), "keep").unwrap();
        let sub = d.path().join("awf-plugin-1-0");
        std::fs::create_dir(&sub).unwrap();
        let sock = sub.join("plugin.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(d.accept(&sock), Ok(()));
        let e = d.accept(&outside.join("precious.txt")).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        std::fs::write(sub.join("file"), "x").unwrap();
        assert!(
            d.accept(&sub.join("file"))
                .unwrap_err()
                .contains("not a Unix socket")
        );
        assert!(d.accept(&d.path().join("../x")).is_err());
        // A symlink planted inside that leads out: refused, and removal does not follow it.
        std::os::unix::fs::symlink(&outside, d.path().join("link")).unwrap();
        assert!(d.accept(&d.path().join("link/precious.txt")).is_err());
        let path = d.path().to_path_buf();
        drop(d);
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("precious.txt")).unwrap(),
            "keep"
        );
    }
}
