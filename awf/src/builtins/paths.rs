//! Path confinement: every path a builtin touches must resolve, physically, inside the
//! root. AWF's Go builtins checked paths lexically, so one symlink escaped them; here each
//! component is looked at on disk (`lstat`), symlinks are followed by hand (in any
//! component, dangling ones included) and the result must stay under the canonical root.
//!
//! A checked path is only a name, and the agent may rename things meanwhile (swap a
//! directory with a symlink in a loop). So nothing is ever opened by that name: every open
//! is one `openat2` relative to a directory fd (the root's, held from the start) with
//! RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, which the kernel refuses (ELOOP, EXDEV) when a
//! symlink or a way out appears on the way, and creating, linking and renaming go through
//! the fd of the parent directory opened that way ([`Workspace::open_dir`]).

use std::ffi::{CString, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

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

/// The root directory all builtin paths are confined to, and an fd of it that every open
/// starts from.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    root_fd: Arc<OwnedFd>,
    /// Physical paths beneath the root no builtin may open or list: what the step's
    /// sandbox hides from Bash (`hidden:`, the secret locations) is hidden from every tool.
    hidden: Arc<Vec<PathBuf>>,
}

impl Workspace {
    /// `root` must be an existing directory; it is canonicalized once so that later
    /// comparisons are between physical paths.
    pub fn new(root: &Path) -> io::Result<Workspace> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        let root_fd = openat2_beneath(None, &root, libc::O_PATH | libc::O_DIRECTORY, 0).map_err(
            |e| match e.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM) => io::Error::other(format!(
                    "this system refuses openat2 ({e}); awf needs it (Linux 5.6 or later, not \
                 blocked by a seccomp filter) to keep the builtins' paths inside the root"
                )),
                _ => e,
            },
        )?;
        Ok(Workspace {
            root,
            root_fd: Arc::new(root_fd),
            hidden: Arc::default(),
        })
    }

    /// Refuses every path beneath one of `hidden` (physical paths; those outside the root
    /// concern no builtin and are dropped).
    pub fn with_hidden(mut self, hidden: Vec<PathBuf>) -> Workspace {
        let inside: Vec<PathBuf> = hidden
            .into_iter()
            .filter(|h| h.starts_with(&self.root))
            .collect();
        self.hidden = Arc::new(inside);
        self
    }

    /// The hidden paths beneath the root.
    pub fn hidden(&self) -> Arc<Vec<PathBuf>> {
        self.hidden.clone()
    }

    /// Refuses a physical `path` that is or lies beneath a hidden path.
    fn check_hidden(&self, path: &Path, input: &str) -> Result<(), SandboxError> {
        match self.hidden.iter().find(|h| path.starts_with(h)) {
            Some(h) => Err(SandboxError(format!(
                "path \"{input}\" is hidden by the step's sandbox ({} is in its hidden \
                 paths); no tool reads or changes it",
                self.show(h)
            ))),
            None => Ok(()),
        }
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
            self.check_hidden(&cur, input)?;
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

    /// `path` (from [`Workspace::resolve`], or any path under the root) relative to the
    /// root; "." for the root itself.
    pub fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        match path.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel,
            _ => Path::new("."),
        }
    }

    /// The root's directory fd (the start of every open).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Opens `input` (checked like [`Workspace::resolve`]) with `flags`; returns the file and
    /// the resolved path. A plain path (no `..`, no symlink) is opened as given in one
    /// `openat2`; one with a symlink on the way is resolved by hand first, then opened the
    /// same way, so a symlink swapped in between fails the open instead of being followed.
    pub fn open(&self, input: &str, flags: i32) -> Result<(File, PathBuf), String> {
        self.check_text(input).map_err(|e| e.0)?;
        let path = Path::new(input);
        let plain = !path.components().any(|c| matches!(c, Component::ParentDir));
        let full = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        if plain && full.starts_with(&self.root) {
            // No `..`, and the open below follows no symlink: `full` is physical.
            self.check_hidden(&full, input).map_err(|e| e.0)?;
            match self.open_at(self.root_fd(), self.relative(&full), flags, 0) {
                Ok(file) => return Ok((file, full)),
                // A symlink on the way: it may be one that stays inside; take the long way.
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
                Err(e) => return Err(self.open_error(input, &full, e)),
            }
        }
        let resolved = self.resolve(input).map_err(|e| e.0)?;
        let file = self
            .open_at(self.root_fd(), self.relative(&resolved), flags, 0)
            .map_err(|e| self.open_error(input, &resolved, e))?;
        Ok((file, resolved))
    }

    /// The one way a builtin opens anything: `openat2(dir, rel, flags)` with
    /// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS. `dir` is the root's
    /// fd or one opened from it this way.
    pub fn open_at(
        &self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        flags: i32,
        mode: u32,
    ) -> io::Result<File> {
        openat2_beneath(Some(dir), rel, flags, mode).map(File::from)
    }

    /// Opens the directory `dir` (a resolved path under the root), creating what is
    /// missing one component at a time (`mkdirat` in the fd of the one before), for
    /// creating, linking and renaming inside it by fd. Returns an O_PATH fd.
    pub fn open_dir(&self, dir: &Path, input: &str, create: bool) -> Result<File, String> {
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let rel = self.relative(dir);
        match self.open_at(self.root_fd(), rel, flags, 0) {
            Ok(d) => return Ok(d),
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.open_error(input, dir, e)),
        }
        let mut cur = self
            .open_at(self.root_fd(), Path::new("."), flags, 0)
            .map_err(|e| self.open_error(input, &self.root, e))?;
        let mut shown = self.root.clone();
        for c in rel.components() {
            let Component::Normal(name) = c else {
                continue;
            };
            shown.push(name);
            let name = Path::new(name);
            cur = match self.open_at(cur.as_fd(), name, flags, 0) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    mkdir_at(cur.as_fd(), name).map_err(|e| {
                        format!("cannot create the directory {}: {e}", self.show(&shown))
                    })?;
                    self.open_at(cur.as_fd(), name, flags, 0)
                        .map_err(|e| self.open_error(input, &shown, e))?
                }
                Err(e) => return Err(self.open_error(input, &shown, e)),
            };
        }
        Ok(cur)
    }

    /// The message for a failed open of `input` (looked for at `path`).
    pub fn open_error(&self, input: &str, path: &Path, e: io::Error) -> String {
        match e.raw_os_error() {
            Some(libc::ENOENT) => format!(
                "file not found: \"{input}\" (looked for {} under the root {})",
                self.show(path),
                self.root.display()
            ),
            // The checks saw no symlink and no way out, the kernel met one: the tree was
            // changed meanwhile (a rename race).
            Some(libc::ELOOP | libc::EXDEV) => format!(
                "\"{input}\" changed while being opened (a symlink appeared on the way); refused"
            ),
            Some(libc::ENOTDIR) => format!(
                "path \"{input}\": a component of {} is not a directory",
                self.show(path)
            ),
            _ => format!("cannot open \"{input}\": {e}"),
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

/// `openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS (relative
/// to `dir`), or, without a `dir`, an absolute path opened with no symlink followed.
fn openat2_beneath(
    dir: Option<BorrowedFd<'_>>,
    path: &Path,
    flags: i32,
    mode: u32,
) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    let beneath = if dir.is_some() {
        libc::RESOLVE_BENEATH
    } else {
        0
    };
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        // The kernel rejects a mode without O_CREAT/O_TMPFILE.
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: beneath | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: a valid C string and a properly sized open_how; the returned fd is ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub(crate) fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `mkdirat(dir, name, 0777)`; an existing entry is fine (the open after it checks it).
fn mkdir_at(dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: a valid fd and C string.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o777) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Ok(())
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

    /// A `root` and an `outside` next to it in one temp dir, removed when the guard drops.
    fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
        let guard = tempfile::Builder::new()
            .prefix(&format!("awf-sandbox-{name}-"))
            .tempdir()
            .unwrap();
        let d = guard.path().to_path_buf();
        std::fs::create_dir_all(d.join("root/sub")).unwrap();
        std::fs::create_dir_all(d.join("outside")).unwrap();
        std::fs::write(d.join("outside/secret"), "s").unwrap();
        std::fs::write(d.join("root/sub/f.txt"), "f").unwrap();
        (guard, d)
    }

    #[test]
    fn relative_and_absolute_inside_resolve() {
        let (_tmp, d) = tmp("inside");
        let sb = Workspace::new(&d.join("root")).unwrap();
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
        let (_tmp, d) = tmp("dotdot");
        let sb = Workspace::new(&d.join("root")).unwrap();
        let e = sb.resolve("../outside/secret").unwrap_err();
        assert!(e.0.contains("outside the root"), "{e}");
        assert!(sb.resolve("/etc/passwd").is_err());
        assert!(sb.resolve("sub/../../outside/secret").is_err());
    }

    #[test]
    fn symlinks_leading_out_are_refused_inside_ones_followed() {
        let (_tmp, d) = tmp("symlink");
        let root = d.join("root");
        symlink(d.join("outside"), root.join("outdir")).unwrap();
        symlink(d.join("outside/secret"), root.join("outfile")).unwrap();
        symlink(d.join("outside/nothing-yet"), root.join("dangling")).unwrap();
        symlink("sub/f.txt", root.join("infile")).unwrap();
        let sb = Workspace::new(&root).unwrap();
        assert!(sb.resolve("outdir/secret").is_err());
        assert!(sb.resolve("outfile").is_err());
        assert!(sb.resolve("dangling").is_err());
        assert_eq!(sb.resolve("infile").unwrap(), sb.root().join("sub/f.txt"));
    }

    #[test]
    fn tricky_texts_are_refused_with_a_reason() {
        let (_tmp, d) = tmp("texts");
        let sb = Workspace::new(&d.join("root")).unwrap();
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
    fn open_takes_plain_paths_and_inside_symlinks_and_refuses_the_rest() {
        let (_tmp, d) = tmp("open");
        let root = d.join("root");
        symlink("sub/f.txt", root.join("infile")).unwrap();
        symlink(d.join("outside"), root.join("outdir")).unwrap();
        let sb = Workspace::new(&root).unwrap();
        let (_, p) = sb.open("sub/f.txt", libc::O_RDONLY).unwrap();
        assert_eq!(p, sb.root().join("sub/f.txt"));
        let (_, p) = sb.open("infile", libc::O_RDONLY).unwrap();
        assert_eq!(p, sb.root().join("sub/f.txt"));
        let e = sb.open("sub/missing", libc::O_RDONLY).unwrap_err();
        assert!(e.contains("file not found"), "{e}");
        assert!(
            sb.open("outdir/secret", libc::O_RDONLY)
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            sb.open("/etc/passwd", libc::O_RDONLY)
                .unwrap_err()
                .contains("outside")
        );
        // The kernel check alone: a symlink on the way is refused, not followed.
        let e = sb
            .open_at(sb.root_fd(), Path::new("outdir/secret"), libc::O_RDONLY, 0)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let e = sb
            .open_at(
                sb.root_fd(),
                Path::new("../outside/secret"),
                libc::O_RDONLY,
                0,
            )
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
    }

    #[test]
    fn open_dir_creates_missing_directories_inside_only() {
        let (_tmp, d) = tmp("mkdir");
        let root = d.join("root");
        symlink(d.join("outside"), root.join("outdir")).unwrap();
        let sb = Workspace::new(&root).unwrap();
        sb.open_dir(&sb.root().join("a/b/c"), "a/b/c/f", true)
            .unwrap();
        assert!(root.join("a/b/c").is_dir());
        // Given a path that names a symlink (as after a swap), nothing is created beyond it.
        let e = sb
            .open_dir(&sb.root().join("outdir/x/y"), "outdir/x/y/f", true)
            .unwrap_err();
        assert!(e.contains("changed while being opened"), "{e}");
        assert!(!d.join("outside/x").exists());
    }

    #[test]
    fn symlink_loops_stop() {
        let (_tmp, d) = tmp("loop");
        let root = d.join("root");
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        let sb = Workspace::new(&root).unwrap();
        assert!(sb.resolve("a").unwrap_err().0.contains("too many"));
    }
}
