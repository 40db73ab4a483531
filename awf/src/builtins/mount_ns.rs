//! Metadata confinement for Bash. Landlock governs writes but not chmod, chown or utime, so
//! before exec Bash's child enters its own user and mount namespace (mapping its uid and gid
//! to themselves) in which every mount is read-only except fresh clones of the writable
//! paths (root, private temp directory, configured paths). A chmod, chown or touch outside
//! then fails with EROFS; inside, it works as before. No capability survives the exec
//! (SECBIT_NOROOT, for uid 0 too), so the shell cannot make a mount writable again; a
//! nested user namespace only gets copies whose read-only flag is locked; and Landlock,
//! applied after, refuses every mount change besides. Everything that allocates happens
//! in [`ReadOnlyMounts::new`], in the parent; [`ReadOnlyMounts::enter`] only makes
//! syscalls, as is required between fork and exec.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

#[derive(Debug, Clone)]
pub struct ReadOnlyMounts {
    writable: Vec<CString>,
    /// The detached clones, filled in the child (capacity reserved: no allocation there).
    clones: Vec<libc::c_int>,
    /// The command's working directory, entered again once the clones are in place (the
    /// one entered before pointed into the mount beneath them).
    cwd: CString,
    uid_map: CString,
    gid_map: CString,
}

impl ReadOnlyMounts {
    pub fn new(writable: &[PathBuf], cwd: &Path) -> ReadOnlyMounts {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let writable: Vec<CString> = writable
            .iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
            .collect();
        ReadOnlyMounts {
            clones: Vec::with_capacity(writable.len()),
            writable,
            cwd: CString::new(cwd.as_os_str().as_bytes()).unwrap_or_else(|_| c"/".into()),
            uid_map: CString::new(format!("{uid} {uid} 1")).unwrap(),
            gid_map: CString::new(format!("{gid} {gid} 1")).unwrap(),
        }
    }

    /// True when this kernel lets the process do all of [`enter`](Self::enter) (user
    /// namespaces may be switched off or restricted). Found out once, by a child that
    /// does it and runs `shell -c :`; when not, one WARN line says so.
    pub fn available(&self, shell: &Path) -> bool {
        static PROBE: OnceLock<bool> = OnceLock::new();
        *PROBE.get_or_init(|| match self.probe(shell) {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(
                    "Bash can change mode, owner and times of files outside its writable \
                     paths (Landlock does not cover them; no user namespace: {why})"
                );
                false
            }
        })
    }

    fn probe(&self, shell: &Path) -> Result<(), String> {
        let mut probe = self.clone();
        probe.clones.reserve(probe.writable.len());
        let mut cmd = Command::new(shell);
        cmd.args(["-c", ":"])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: `enter` only makes syscalls on memory allocated before fork.
        unsafe { cmd.pre_exec(move || probe.enter()) };
        // Through ProcessGroup: in a subreaper any other child counts as an orphan.
        let status = crate::process::ProcessGroup::spawn(&mut cmd)
            .and_then(|mut group| group.wait())
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the probe exited with {status}"))
        }
    }

    /// In the child, between fork and exec: new namespaces, every mount read-only but the
    /// writable paths, no capability after exec.
    pub fn enter(&mut self) -> io::Result<()> {
        // SAFETY: every call below is a plain syscall on NUL-terminated strings and a
        // mount_attr owned by this frame; none allocates.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
            write_proc(c"/proc/self/setgroups", c"deny")?;
            write_proc(c"/proc/self/uid_map", &self.uid_map)?;
            write_proc(c"/proc/self/gid_map", &self.gid_map)?;
            // Private: nothing done here reaches the parent namespace, and no mount made
            // there later (which would be writable) appears here.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            self.clones.clear();
            for path in &self.writable {
                let fd = libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as u32,
                );
                if fd < 0 && *libc::__errno_location() == libc::ENOENT {
                    self.clones.push(-1); // a configured path that does not exist
                    continue;
                }
                self.clones.push(check(fd as libc::c_int)?);
            }
            let attr = libc::mount_attr {
                attr_set: libc::MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            check(libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                libc::AT_RECURSIVE,
                &attr as *const libc::mount_attr,
                std::mem::size_of::<libc::mount_attr>(),
            ) as libc::c_int)?;
            for (path, &fd) in self.writable.iter().zip(&self.clones) {
                if fd < 0 {
                    continue;
                }
                check(libc::syscall(
                    libc::SYS_move_mount,
                    fd,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH,
                ) as libc::c_int)?;
                libc::close(fd);
            }
            check(libc::chdir(self.cwd.as_ptr()))?;
            // uid 0 inside would otherwise get every capability of this namespace at exec.
            check(libc::prctl(
                libc::PR_SET_SECUREBITS,
                (libc::SECBIT_NOROOT | libc::SECBIT_NOROOT_LOCKED) as libc::c_ulong,
            ))?;
        }
        Ok(())
    }
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Writes one short value to a /proc file, by syscalls only.
unsafe fn write_proc(path: &std::ffi::CStr, value: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: both pointers are NUL-terminated strings that outlive the calls.
    unsafe {
        let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let bytes = value.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
