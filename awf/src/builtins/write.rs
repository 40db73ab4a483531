//! Write: replaces or creates a file atomically (temp file in the same directory, then
//! rename), creating parent directories and keeping an existing file's mode and owner.
//! Readers never see a half-written file, and a hard link to the old file is left
//! untouched (the name is re-pointed, the old inode is not written through).

use super::{BuiltinEnv, resolve, schema};
use crate::tools::ToolSpec;
use serde::Deserialize;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub content: String,
}

pub fn spec(env: &BuiltinEnv) -> ToolSpec {
    ToolSpec {
        name: "Write".into(),
        description: format!(
            "Write a file inside the workspace root, replacing it if it exists (atomically: \
             readers see the old or the new content, never a mix). Creates parent directories; \
             keeps an existing file's permissions. Content is at most {} bytes.",
            env.limits.write_bytes
        ),
        input_schema: schema(
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
        annotations: Some(
            serde_json::json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true}),
        ),
    }
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
        env.sandbox.show(&path),
        args.content.len(),
        lines
    ))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to the resolved `path` through a temp file + rename. Returns whether
/// the file was created (true) or replaced (false).
pub(crate) fn atomic_write(
    env: &BuiltinEnv,
    path: &Path,
    input: &str,
    content: &[u8],
) -> Result<bool, String> {
    let parent = path
        .parent()
        .ok_or_else(|| format!("\"{input}\" has no parent directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| format!("\"{input}\" does not name a file"))?;
    std::fs::create_dir_all(parent).map_err(|e| {
        format!(
            "cannot create the directory {}: {e}",
            env.sandbox.show(parent)
        )
    })?;
    let existing = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => return Err(format!("\"{input}\" is a directory; give a file path")),
        Ok(m) if m.file_type().is_symlink() => {
            // resolve() followed every symlink, so one here was swapped in meanwhile.
            return Err(format!(
                "\"{input}\" became a symlink while being written; refused"
            ));
        }
        Ok(m) if !m.is_file() => {
            return Err(format!(
                "\"{input}\" is not a regular file (a device, FIFO or socket); refused"
            ));
        }
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot inspect \"{input}\": {e}")),
    };
    let temp = parent.join(format!(
        ".{}.awf-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = env
        .sandbox
        .open_resolved(
            &temp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o666,
            input,
        )
        .map_err(|e| {
            format!(
                "cannot create a temp file in {}: {e}",
                env.sandbox.show(parent)
            )
        })?;
    let cleanup = |msg: String| {
        let _ = std::fs::remove_file(&temp);
        msg
    };
    if let Some(m) = &existing {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777));
        // Best effort: only root may give a file away, and then it should keep its owner.
        let _ = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()));
    }
    file.write_all(content)
        .and_then(|_| file.sync_data())
        .map_err(|e| cleanup(format!("cannot write \"{input}\": {e}")))?;
    drop(file);
    std::fs::rename(&temp, path)
        .map_err(|e| cleanup(format!("cannot replace \"{input}\": {e}")))?;
    Ok(existing.is_none())
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
        let root = testutil::root("write-basic");
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
        let root = testutil::root("write-refuse");
        std::fs::create_dir(root.join("d")).unwrap();
        let mut env = testutil::env(&root);
        assert!(write(&env, "d", "x").unwrap_err().contains("directory"));
        env.limits.write_bytes = 3;
        assert!(write(&env, "f", "four").unwrap_err().contains("limit"));
        assert!(!root.join("f").exists());
    }

    #[test]
    fn a_hard_link_to_the_old_file_is_not_written_through() {
        let root = testutil::root("write-hardlink");
        let outside = root.join("outside-file");
        std::fs::write(&outside, "original").unwrap();
        std::fs::create_dir(root.join("r")).unwrap();
        std::fs::hard_link(&outside, root.join("r/link")).unwrap();
        let env = testutil::env(&root.join("r"));
        write(&env, "link", "changed").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original");
    }
}
