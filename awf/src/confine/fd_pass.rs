//! Handing a descriptor out of a call's jail over a socketpair (SCM_RIGHTS): the egress
//! proxy's listener made inside the call's network namespace, the seccomp supervisor's
//! notification descriptor. The jail sends between fork and exec (syscalls only); awf
//! receives once the command is spawned.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A stream socketpair (close-on-exec): awf's end, and the end a jail sends over.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair fills two descriptors, owned from here on.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors of this process.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `fd` over the unix socket `sock` (SCM_RIGHTS, one byte of data), by syscalls.
pub unsafe fn send_fd(sock: libc::c_int, fd: libc::c_int) -> io::Result<()> {
    // SAFETY (whole body): a control buffer on the stack, sized by CMSG_SPACE.
    unsafe {
        let mut byte = [1u8];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4]; // 32 bytes, aligned: CMSG_SPACE(4) is 24
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives one descriptor (SCM_RIGHTS) without waiting: the jail sent it before the
/// command could start.
pub fn recv_fd(sock: RawFd, what: &str) -> io::Result<RawFd> {
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 4];
    // SAFETY: a msghdr over stack buffers that outlive the call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n != 1
            || cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other(format!(
                "the command's jail sent no {what}"
            )));
        }
        Ok(std::ptr::read_unaligned(
            libc::CMSG_DATA(cmsg).cast::<libc::c_int>(),
        ))
    }
}
