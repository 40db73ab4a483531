//! Path confinement: every path a builtin touches must resolve, physically, inside the
//! root. AWF's Go builtins checked paths lexically, so one symlink escaped them; here each
//! component is looked at on disk (`lstat`), symlinks are followed by hand (in any
//! component, dangling ones included) and the result must stay under the canonical root.
//! The resolved path has no symlinks left, so callers open *it* (never the raw input),
//! with `O_NOFOLLOW`, and re-check the opened file through `/proc/self/fd` to close the
//! window between the check and the open.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};

/// Linux's PATH_MAX and NAME_MAX: longer inputs are refused up front with a clear message
/// rather than failing later with ENAMETOOLONG somewhere deep.
const MAX_PATH_BYTES: usize = 4096;
const MAX_NAME_BYTES: usize = 255;
/// The kernel's own limit on symlinks followed in one lookup (ELOOP).
const MAX_SYMLINKS: usize = 40;

/// A refusal or failure to resolve a path; the text names the path and the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxError(pub String);

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The root directory all builtin paths are confined to.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// `root` must be an existing directory; it is canonicalized once so that later
    /// comparisons are between physical paths.
    pub fn new(root: &Path) -> io::Result<Sandbox> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Sandbox { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `input` (relative to the root, or absolute) to a physical path inside the
    /// root. The path need not exist (Write creates it); the part that exists is resolved
    /// through its symlinks, the rest is taken literally.
    pub fn resolve(&self, input: &str) -> Result<PathBuf, SandboxError> {
        self.check_text(input)?;
        let path = Path::new(input);
        let (mut cur, rest): (PathBuf, &Path) = if path.is_absolute() {
            (PathBuf::from("/"), path)
        } else {
            (self.root.clone(), path)
        };
        // Pending components, last one first; symlink targets are pushed on top.
        let mut pending: Vec<OsString> = Vec::new();
        push_components(&mut pending, rest);
        let mut links = 0usize;
        let mut missing = false;
        while let Some(name) = pending.pop() {
            match name.as_bytes() {
                b"" | b"." => continue,
                b"/" => {
                    cur = PathBuf::from("/");
                    continue;
                }
                b".." => {
                    cur.pop();
                    continue;
                }
                _ => {}
            }
            let next = cur.join(&name);
            if missing {
                cur = next;
                continue;
            }
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(self.refuse(input, "it goes through too many symbolic links"));
                    }
                    let target = std::fs::read_link(&next).map_err(|e| {
                        SandboxError(format!("cannot read the symlink {}: {e}", next.display()))
                    })?;
                    // The target replaces this component; an absolute one restarts at "/".
                    push_components(&mut pending, &target);
                }
                Ok(_) => cur = next,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing = true;
                    cur = next;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Err(SandboxError(format!(
                        "path \"{input}\": {} is not a directory",
                        self.show(&cur)
                    )));
                }
                Err(e) => {
                    return Err(SandboxError(format!(
                        "path \"{input}\": cannot inspect {}: {e}",
                        next.display()
                    )));
                }
            }
        }
        if cur.starts_with(&self.root) {
            Ok(cur)
        } else {
            Err(self.refuse(
                input,
                &format!("it resolves to {}, which is outside", cur.display()),
            ))
        }
    }

    fn check_text(&self, input: &str) -> Result<(), SandboxError> {
        if input.is_empty() {
            return Err(SandboxError(
                "path is empty; give a path relative to the root".into(),
            ));
        }
        if input.contains('\0') {
            return Err(SandboxError(format!(
                "path {input:?} contains a NUL byte, which no file name can hold; refused"
            )));
        }
        if input.contains('\\') {
            return Err(SandboxError(format!(
                "path {input:?} contains a backslash; on this system paths use '/' (a backslash \
                 would be part of a file name), so it is refused"
            )));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(SandboxError(format!(
                "path is {} bytes long; the limit is {MAX_PATH_BYTES} bytes",
                input.len()
            )));
        }
        if let Some(c) = input.split('/').find(|c| c.len() > MAX_NAME_BYTES) {
            return Err(SandboxError(format!(
                "a component of the path is {} bytes long; the limit is {MAX_NAME_BYTES} bytes",
                c.len()
            )));
        }
        Ok(())
    }

    fn refuse(&self, input: &str, why: &str) -> SandboxError {
        SandboxError(format!(
            "path \"{input}\" is outside the root {}: {why} the root; refused",
            self.root.display()
        ))
    }

    /// How to show a resolved path to the agent: relative to the root when inside it.
    pub fn show(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// The fast path for the common case, a plain path with no symlink and no `..`: one
    /// `openat2(RESOLVE_NO_SYMLINKS)` on the root-joined path, no `lstat` walk. Returns
    /// None when the path needs the full resolution (it has `..`, is absolute outside the
    /// root lexically, or goes through a symlink), so refusals always come from
    /// [`Sandbox::resolve`] with its full explanation. On an open error, the path tried.
    #[allow(clippy::type_complexity)]
    pub fn open_direct(
        &self,
        input: &str,
        flags: i32,
    ) -> Option<Result<(File, PathBuf), (PathBuf, io::Error)>> {
        self.check_text(input).ok()?;
        let path = Path::new(input);
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return None;
        }
        let full = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        if !full.starts_with(&self.root) {
            return None;
        }
        match openat2_no_symlinks(&full, flags, 0) {
            Ok(file) => Some(Ok((file, full))),
            // ELOOP: a symlink on the way; ENOSYS/EPERM: no openat2 here. Take the long way.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ENOSYS | libc::EPERM | libc::EXDEV)
                ) =>
            {
                None
            }
            Err(e) => Some(Err((full, e))),
        }
    }

    /// Opens a path returned by [`Sandbox::resolve`] so that no symlink can be followed on
    /// the way (one `openat2` with RESOLVE_NO_SYMLINKS: a symlink swapped in after the
    /// check makes the open fail with ELOOP). Kernels before 5.6 lack openat2: there the
    /// path is opened with O_NOFOLLOW and the result re-checked through /proc.
    pub fn open_resolved(
        &self,
        path: &Path,
        flags: i32,
        mode: u32,
        input: &str,
    ) -> io::Result<File> {
        match openat2_no_symlinks(path, flags, mode) {
            Err(e)
                if e.raw_os_error() == Some(libc::ENOSYS)
                    || e.raw_os_error() == Some(libc::EPERM) =>
            {
                // ENOSYS: old kernel; EPERM: a seccomp filter that forbids openat2.
                use std::os::unix::fs::OpenOptionsExt;
                let mut o = std::fs::OpenOptions::new();
                o.custom_flags(flags | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .mode(mode);
                match flags & libc::O_ACCMODE {
                    libc::O_WRONLY => o.write(true),
                    libc::O_RDWR => o.read(true).write(true),
                    _ => o.read(true),
                };
                if flags & libc::O_CREAT != 0 {
                    o.create(true);
                }
                let file = o.open(path)?;
                self.verify_opened(&file, input)
                    .map_err(|e| io::Error::other(e.0))?;
                Ok(file)
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(io::Error::other(format!(
                "\"{input}\" changed while being opened (a symlink appeared); refused"
            ))),
            other => other,
        }
    }

    /// Re-checks an opened file: the kernel's view of what was opened must be inside the
    /// root (defeats a symlink swapped in between `resolve` and `open`). Where /proc is not
    /// mounted the check is skipped: `resolve` plus O_NOFOLLOW still hold.
    pub fn verify_opened(&self, file: &File, input: &str) -> Result<(), SandboxError> {
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        match std::fs::read_link(&link) {
            Ok(real) if real.starts_with(&self.root) => Ok(()),
            Ok(real) => Err(self.refuse(
                input,
                &format!(
                    "while it was opened it became {}, which is outside",
                    real.display()
                ),
            )),
            Err(_) => Ok(()),
        }
    }

    /// A regular file with several hard links may be the same inode as a file outside the
    /// root (a hard link cannot be told from the original), so reading it is refused.
    pub fn check_links(&self, meta: &std::fs::Metadata, input: &str) -> Result<(), SandboxError> {
        if meta.is_file() && meta.nlink() > 1 {
            return Err(SandboxError(format!(
                "path \"{input}\" has {} hard links; a hard link may be a file outside the root {}, \
                 so it is refused (copy the file instead of linking it)",
                meta.nlink(),
                self.root.display()
            )));
        }
        Ok(())
    }
}

/// `struct open_how` of linux/openat2.h (the kernel ABI; libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn openat2_no_symlinks(path: &Path, flags: i32, mode: u32) -> io::Result<File> {
    use std::os::unix::io::FromRawFd;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        // The kernel rejects a mode without O_CREAT/O_TMPFILE.
        mode: if flags & libc::O_CREAT != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid C string and a properly sized open_how; the returned fd is ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let start = pending.len();
    for c in path.components() {
        pending.push(match c {
            Component::RootDir => OsString::from("/"),
            Component::CurDir => OsString::from("."),
            Component::ParentDir => OsString::from(".."),
            Component::Normal(n) => n.to_os_string(),
            Component::Prefix(p) => p.as_os_str().to_os_string(),
        });
    }
    pending[start..].reverse();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("awf-sandbox-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("root/sub")).unwrap();
        std::fs::create_dir_all(d.join("outside")).unwrap();
        std::fs::write(d.join("outside/secret"), "s").unwrap();
        std::fs::write(d.join("root/sub/f.txt"), "f").unwrap();
        d
    }

    #[test]
    fn relative_and_absolute_inside_resolve() {
        let d = tmp("inside");
        let sb = Sandbox::new(&d.join("root")).unwrap();
        let want = sb.root().join("sub/f.txt");
        assert_eq!(sb.resolve("sub/f.txt").unwrap(), want);
        assert_eq!(sb.resolve("./sub/../sub/f.txt").unwrap(), want);
        assert_eq!(sb.resolve(want.to_str().unwrap()).unwrap(), want);
        assert_eq!(
            sb.resolve("new/dir/file").unwrap(),
            sb.root().join("new/dir/file")
        );
    }

    #[test]
    fn dotdot_and_absolute_outside_are_refused() {
        let d = tmp("dotdot");
        let sb = Sandbox::new(&d.join("root")).unwrap();
        let e = sb.resolve("../outside/secret").unwrap_err();
        assert!(e.0.contains("outside the root"), "{e}");
        assert!(sb.resolve("/etc/passwd").is_err());
        assert!(sb.resolve("sub/../../outside/secret").is_err());
    }

    #[test]
    fn symlinks_leading_out_are_refused_inside_ones_followed() {
        let d = tmp("symlink");
        let root = d.join("root");
        symlink(d.join("outside"), root.join("outdir")).unwrap();
        symlink(d.join("outside/secret"), root.join("outfile")).unwrap();
        symlink(d.join("outside/nothing-yet"), root.join("dangling")).unwrap();
        symlink("sub/f.txt", root.join("infile")).unwrap();
        let sb = Sandbox::new(&root).unwrap();
        assert!(sb.resolve("outdir/secret").is_err());
        assert!(sb.resolve("outfile").is_err());
        assert!(sb.resolve("dangling").is_err());
        assert_eq!(sb.resolve("infile").unwrap(), sb.root().join("sub/f.txt"));
    }

    #[test]
    fn tricky_texts_are_refused_with_a_reason() {
        let d = tmp("texts");
        let sb = Sandbox::new(&d.join("root")).unwrap();
        assert!(sb.resolve("a\0b").unwrap_err().0.contains("NUL"));
        assert!(
            sb.resolve("..\\outside")
                .unwrap_err()
                .0
                .contains("backslash")
        );
        assert!(
            sb.resolve(&"a/".repeat(3000))
                .unwrap_err()
                .0
                .contains("limit is 4096")
        );
        assert!(
            sb.resolve(&"x".repeat(300))
                .unwrap_err()
                .0
                .contains("limit is 255")
        );
        assert!(sb.resolve("").is_err());
        assert!(sb.resolve("/proc/self/root/etc/passwd").is_err());
    }

    #[test]
    fn direct_open_takes_plain_paths_and_leaves_the_rest_to_resolve() {
        let d = tmp("direct");
        let root = d.join("root");
        symlink("sub/f.txt", root.join("infile")).unwrap();
        let sb = Sandbox::new(&root).unwrap();
        let (_, p) = sb
            .open_direct("sub/f.txt", libc::O_RDONLY)
            .unwrap()
            .unwrap();
        assert_eq!(p, sb.root().join("sub/f.txt"));
        let (_, e) = sb
            .open_direct("sub/missing", libc::O_RDONLY)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // A symlink on the way, `..`, outside paths and bad texts: the long way.
        assert!(sb.open_direct("infile", libc::O_RDONLY).is_none());
        assert!(sb.open_direct("sub/../sub/f.txt", libc::O_RDONLY).is_none());
        assert!(sb.open_direct("/etc/passwd", libc::O_RDONLY).is_none());
        assert!(sb.open_direct("a\\b", libc::O_RDONLY).is_none());
    }

    #[test]
    fn symlink_loops_stop() {
        let d = tmp("loop");
        let root = d.join("root");
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        let sb = Sandbox::new(&root).unwrap();
        assert!(sb.resolve("a").unwrap_err().0.contains("too many"));
    }
}
