//! The session's own user and mount namespace, made once (at the session's first Bash
//! call) and held by two descriptors: in it the private TMPDIR is a tmpfs of `tmp_size`
//! bytes, so that a call writing past it gets ENOSPC, and what one call leaves there the
//! next finds. Each call's jail joins it (`setns`, as the owner of the namespace it gets
//! every capability there) and makes its own mount namespace from it
//! ([`super::namespaces`]); that also spares each call a user namespace and its id maps.
//! Under `network: deny` it holds the session's network namespace too (loopback only):
//! its calls share it, which spares each call the namespace's making (the largest part of
//! a call's jail) at the price of one loopback for the session's calls at once.
//! The namespace ends with the last descriptor (the session's end), and the tmpfs with it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

#[derive(Debug)]
pub struct SessionNs {
    user: OwnedFd,
    mnt: OwnedFd,
    net: Option<OwnedFd>,
}

impl SessionNs {
    /// Makes the namespace with a tmpfs of `tmp_size` bytes over `tmp` (owned by this
    /// process's user, mode 0700), by a fork that makes it and waits while its descriptors
    /// are opened.
    /// With `net`, a network namespace with loopback only too.
    pub fn new(tmp: &Path, tmp_size: u64, net: bool) -> io::Result<SessionNs> {
        use super::syscalls::{check, write_proc};
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let uid_map = CString::new(format!("{uid} {uid} 1"))?;
        let gid_map = CString::new(format!("{gid} {gid} 1"))?;
        let target = CString::new(tmp.as_os_str().as_bytes())?;
        let options = CString::new(format!(
            "size={tmp_size},mode=0700,uid={uid},gid={gid},nr_inodes=0"
        ))?;
        // Ready or failed (the child writes `r` or `e`), then released (we write one byte).
        // Bytes, not end of file: a fork made by another thread meanwhile (another
        // session's, a call's jail) holds copies of these pipes' ends until it closes them,
        // and an end of file would wait for it; two sessions made at once would each wait
        // for the other's copy, for good.
        let (ready_rx, ready_tx) = pipe()?;
        let (hold_rx, hold_tx) = pipe()?;
        let (ready_w, hold_r) = (ready_tx.as_raw_fd(), hold_rx.as_raw_fd());
        let child = crate::process::fork_owned(move || {
            // SAFETY: syscalls on memory prepared before the fork.
            unsafe {
                // Nothing of the other threads' (their pipes, their sockets) stays open
                // here while this copy lives.
                crate::process::close_fds_but(&[ready_w, hold_r]);
                let made = (|| -> io::Result<()> {
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
                    if net {
                        super::network_ns::enter_network(&super::NetJail::Empty)?;
                    }
                    Ok(())
                })();
                if let Err(e) = made {
                    libc::write(ready_w, b"e".as_ptr().cast(), 1);
                    return e.raw_os_error().unwrap_or(1).clamp(1, 125);
                }
                libc::write(ready_w, b"r".as_ptr().cast(), 1);
                let mut b = 0u8;
                while libc::read(hold_r, (&mut b as *mut u8).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                0
            }
        })?;
        drop(ready_tx);
        drop(hold_rx);
        let mut b = 0u8;
        // SAFETY: a one-byte read into the stack from a pipe we own.
        let n = unsafe { libc::read(ready_rx.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        let pid = child.pid();
        let open = |kind: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))?.into())
        };
        let held = if n == 1 && b == b'r' {
            open("user").and_then(|user| {
                let net = if net { Some(open("net")?) } else { None };
                Ok((user, open("mnt")?, net))
            })
        } else {
            Err(io::Error::other("the namespace could not be made"))
        };
        // Released: the byte (its end of file may be held open by another fork a while).
        // SAFETY: a one-byte write from the stack to a pipe we own.
        unsafe { libc::write(hold_tx.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        drop(hold_tx);
        let status = child.wait()?;
        if let Some(code) = status.code().filter(|c| *c != 0) {
            return Err(io::Error::from_raw_os_error(code));
        }
        let (user, mnt, net) = held?;
        Ok(SessionNs { user, mnt, net })
    }

    /// The session's network namespace, where it holds one.
    pub fn net_fd(&self) -> Option<libc::c_int> {
        self.net.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The descriptors a call joins: (user namespace, mount namespace).
    pub fn fds(&self) -> (libc::c_int, libc::c_int) {
        (self.user.as_raw_fd(), self.mnt.as_raw_fd())
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two ints; both are owned at once.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
