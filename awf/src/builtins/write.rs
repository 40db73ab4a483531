//! Write: replaces or creates a file atomically (temp file in the same directory, then
//! rename, both by the directory's fd), creating parent directories and keeping an
//! existing file's mode and owner.
//! Readers never see a half-written file, and a hard link to the old file is left
//! untouched (the name is re-pointed, the old inode is not written through).

use super::paths::cstr;
use super::{BuiltinEnv, resolve, schema};
use mcpserver::Tool;
use serde::Deserialize;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub content: String,
}

pub fn tool(env: &BuiltinEnv) -> Tool {
    Tool::new(
        "Write",
        format!(
            "Write a file inside the workspace root, replacing it if it exists (atomically: \
             readers see the old or the new content, never a mix). Creates parent directories; \
             keeps an existing file's permissions. Content is at most {} bytes.",
            env.limits.write_bytes
        ),
        schema(
            &[
                (
                    "path",
                    "string",
                    "File path, relative to the root (or absolute inside it)",
                ),
                ("content", "string", "The complete new content of the file"),
            ],
            &["path", "content"],
        ),
    )
    .annotations(
        serde_json::json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true}),
    )
}

pub fn run(env: &BuiltinEnv, args: Args) -> Result<String, String> {
    if args.content.len() > env.limits.write_bytes {
        return Err(format!(
            "content is {} bytes, over the {}-byte limit for Write; write the file in parts with \
             Bash (cat >>) or raise limits.write_bytes",
            args.content.len(),
            env.limits.write_bytes
        ));
    }
    let path = resolve(env, &args.path)?;
    let created = atomic_write(env, &path, &args.path, args.content.as_bytes())?;
    let lines = args.content.lines().count();
    Ok(format!(
        "{} {} ({} bytes, {} lines)",
        if created { "Created" } else { "Replaced" },
        env.workspace.show(&path),
        args.content.len(),
        lines
    ))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to the resolved `path`: the parent directory is opened (and created)
/// by fd beneath the root, the content goes to an unnamed O_TMPFILE file in it, which is
/// linked under a temp name and renamed over `path` only once complete, all relative to
/// that directory's fd, so a rename race cannot redirect any step, and a kill mid-write
/// leaves no file behind. Returns whether the file was created (true) or replaced (false).
pub(crate) fn atomic_write(
    env: &BuiltinEnv,
    path: &Path,
    input: &str,
    content: &[u8],
) -> Result<bool, String> {
    let sb = &env.workspace;
    let name = Path::new(
        path.file_name()
            .ok_or_else(|| format!("\"{input}\" does not name a file"))?,
    );
    let parent = path
        .parent()
        .ok_or_else(|| format!("\"{input}\" has no parent directory"))?;
    let dir = sb.open_dir(parent, input, true)?;
    let existing = match sb.open_at(dir.as_fd(), name, libc::O_PATH, 0) {
        Ok(f) => {
            let m = f
                .metadata()
                .map_err(|e| format!("cannot inspect \"{input}\": {e}"))?;
            if m.is_dir() {
                return Err(format!("\"{input}\" is a directory; give a file path"));
            }
            if !m.is_file() {
                return Err(format!(
                    "\"{input}\" is not a regular file (a device, FIFO or socket); refused"
                ));
            }
            Some(m)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(sb.open_error(input, path, e)),
    };
    let mut temp = TempFile::create(env, &dir, input)?;
    if let Some(m) = &existing {
        let _ = temp
            .file
            .set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777));
        // Best effort: only root may give a file away, and then it should keep its owner.
        let _ = std::os::unix::fs::fchown(&temp.file, Some(m.uid()), Some(m.gid()));
    }
    temp.file
        .write_all(content)
        .and_then(|_| temp.file.sync_data())
        .map_err(|e| format!("cannot write \"{input}\": {e}"))?;
    temp.commit(&dir, name, existing.is_none())
        .map_err(|e| format!("cannot replace \"{input}\": {e}"))?;
    Ok(existing.is_none())
}

/// The new content, in the target's directory: unnamed (O_TMPFILE) where the file system
/// offers it, else a named `.awf-*.tmp` file removed on drop unless committed.
struct TempFile {
    file: std::fs::File,
    /// The name, once the file has one (named from the start, or linked by `commit`).
    name: Option<String>,
    dir: RawFd,
}

impl TempFile {
    fn create(env: &BuiltinEnv, dir: &std::fs::File, input: &str) -> Result<TempFile, String> {
        let sb = &env.workspace;
        let unnamed = sb.open_at(
            dir.as_fd(),
            Path::new("."),
            libc::O_TMPFILE | libc::O_WRONLY,
            0o666,
        );
        let err = |e| format!("cannot create a temp file for \"{input}\": {e}");
        match unnamed {
            Ok(file) => Ok(TempFile {
                file,
                name: None,
                dir: dir.as_raw_fd(),
            }),
            // The file system has no O_TMPFILE (EOPNOTSUPP; EISDIR on old kernels).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
                let name = temp_name();
                let file = sb
                    .open_at(
                        dir.as_fd(),
                        Path::new(&name),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                        0o666,
                    )
                    .map_err(err)?;
                Ok(TempFile {
                    file,
                    name: Some(name),
                    dir: dir.as_raw_fd(),
                })
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Gives the file its final `name` in `dir`, replacing what was there in one rename;
    /// a `new` file is linked straight under its name (no temp name ever exists).
    fn commit(&mut self, dir: &std::fs::File, name: &Path, new: bool) -> std::io::Result<()> {
        if self.name.is_none() && new {
            match link_unnamed(&self.file, dir, name) {
                Ok(()) => return Ok(()),
                // Created meanwhile: replace it like an existing file.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        if self.name.is_none() {
            let temp = temp_name();
            link_unnamed(&self.file, dir, Path::new(&temp))?;
            self.name = Some(temp);
        }
        let from = cstr(Path::new(self.name.as_deref().unwrap_or_default()))?;
        let to = cstr(name)?;
        // SAFETY: valid fds and C strings.
        let rc =
            unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.name = None;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(name) = &self.name
            && let Ok(c) = cstr(Path::new(name))
        {
            // SAFETY: the directory fd outlives this value (both live in atomic_write).
            unsafe { libc::unlinkat(self.dir, c.as_ptr(), 0) };
        }
    }
}

fn temp_name() -> String {
    format!(
        ".awf-{}-{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Links an O_TMPFILE file as `name` in `dir`: by its fd (AT_EMPTY_PATH, which needs
/// CAP_DAC_READ_SEARCH), else through its /proc/self/fd entry (the documented way).
fn link_unnamed(file: &std::fs::File, dir: &std::fs::File, name: &Path) -> std::io::Result<()> {
    let to = cstr(name)?;
    // SAFETY: valid fds and C strings.
    let rc = unsafe {
        libc::linkat(
            file.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            to.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let proc_path = cstr(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
    // SAFETY: valid fds and C strings.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            dir.as_raw_fd(),
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn write(env: &BuiltinEnv, path: &str, content: &str) -> Result<String, String> {
        run(
            env,
            Args {
                path: path.into(),
                content: content.into(),
            },
        )
    }

    #[test]
    fn creates_with_parents_then_replaces_keeping_mode() {
        let (_tmp, root) = testutil::root("write-basic");
        let env = testutil::env(&root);
        let out = write(&env, "a/b/c.txt", "one\ntwo\n").unwrap();
        assert_eq!(out, "Created a/b/c.txt (8 bytes, 2 lines)");
        let p = root.join("a/b/c.txt");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o751)).unwrap();
        let out = write(&env, "a/b/c.txt", "new").unwrap();
        assert!(out.starts_with("Replaced"), "{out}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o751);
        // No temp file left behind.
        assert_eq!(std::fs::read_dir(root.join("a/b")).unwrap().count(), 1);
    }

    #[test]
    fn refuses_directories_and_oversized_content() {
        let (_tmp, root) = testutil::root("write-refuse");
        std::fs::create_dir(root.join("d")).unwrap();
        let mut env = testutil::env(&root);
        assert!(write(&env, "d", "x").unwrap_err().contains("directory"));
        env.limits.write_bytes = 3;
        assert!(write(&env, "f", "four").unwrap_err().contains("limit"));
        assert!(!root.join("f").exists());
    }

    #[test]
    fn a_hard_link_to_the_old_file_is_not_written_through() {
        let (_tmp, root) = testutil::root("write-hardlink");
        let outside = root.join("outside-file");
        std::fs::write(&outside, "original").unwrap();
        std::fs::create_dir(root.join("r")).unwrap();
        std::fs::hard_link(&outside, root.join("r/link")).unwrap();
        let env = testutil::env(&root.join("r"));
        write(&env, "link", "changed").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original");
    }
}
