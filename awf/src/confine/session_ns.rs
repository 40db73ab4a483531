//! The session's own user and mount namespace, made once and held by two descriptors: in
//! it the private TMPDIR is a tmpfs of `tmp_size` bytes, so that a call writing past it
//! gets ENOSPC, and what one call leaves there the next finds. Each call's jail joins it
//! (`setns`, as the owner of the namespace it gets every capability there) and makes its
//! own mount namespace from it ([`super::namespaces`]); that also spares each call a user
//! namespace and its id maps. The namespace ends with the last descriptor (the session's
//! end), and the tmpfs with it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug)]
pub struct SessionNs {
    user: OwnedFd,
    mnt: OwnedFd,
}

impl SessionNs {
    /// Makes the namespace with a tmpfs of `tmp_size` bytes over `tmp` (owned by this
    /// process's user, mode 0700), by a child that makes it and waits while its
    /// descriptors are opened; `shell` is what the child runs to wait (`read`).
    pub fn new(tmp: &Path, tmp_size: u64, shell: &Path) -> io::Result<SessionNs> {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let uid_map = CString::new(format!("{uid} {uid} 1"))?;
        let gid_map = CString::new(format!("{gid} {gid} 1"))?;
        let target = CString::new(tmp.as_os_str().as_bytes())?;
        let options = CString::new(format!(
            "size={tmp_size},mode=0700,uid={uid},gid={gid},nr_inodes=0"
        ))?;
        let mut cmd = Command::new(shell);
        cmd.args(["-c", "read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only syscalls on memory prepared above.
        unsafe {
            cmd.pre_exec(move || {
                use super::namespaces::{check, write_proc};
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write_proc(c"/proc/self/setgroups", c"deny")?;
                write_proc(c"/proc/self/uid_map", &uid_map)?;
                write_proc(c"/proc/self/gid_map", &gid_map)?;
                check(libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    c"awf-tmp".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                ))?;
                Ok(())
            })
        };
        // Through ProcessGroup: in a subreaper any other child counts as an orphan.
        let mut child = crate::process::ProcessGroup::spawn(&mut cmd)?;
        let pid = child.pid();
        let open = |kind: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))?.into())
        };
        let held = open("user").and_then(|user| Ok((user, open("mnt")?)));
        // Its stdin closes: `read` ends, and the child with it.
        drop(child.take_stdin());
        let status = child.wait();
        let (user, mnt) = held?;
        status?;
        Ok(SessionNs { user, mnt })
    }

    /// The descriptors a call joins: (user namespace, mount namespace).
    pub fn fds(&self) -> (libc::c_int, libc::c_int) {
        (self.user.as_raw_fd(), self.mnt.as_raw_fd())
    }
}
