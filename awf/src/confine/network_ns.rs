//! A call's network namespace with loopback only, entered between fork and exec: empty, or
//! with a listener on 127.0.0.1 handed out of it to awf's egress proxy.

use super::syscalls::check;
use std::io;

/// Bash's network namespace, when it gets one.
#[derive(Debug)]
pub enum NetJail {
    /// The host's network (`network: allow`, or no network namespace to be had).
    Host,
    /// Loopback only: nothing leaves the call.
    Empty,
    /// Loopback only, and a listener on 127.0.0.1:`port` created inside it, sent over
    /// `sock` (one end of a socketpair whose other end awf keeps) to awf's egress proxy,
    /// which accepts the call's connections from outside the namespace.
    Proxied {
        port: u16,
        sock: std::os::fd::OwnedFd,
    },
}

/// Enters a network namespace with loopback up, and for a proxied one sends a listener
/// on 127.0.0.1:port out over the socketpair. Needs the user namespace's capabilities
/// (before the exec drops them).
pub unsafe fn enter_network(net: &NetJail) -> io::Result<()> {
    let (port, sock) = match net {
        NetJail::Host => return Ok(()),
        NetJail::Empty => (None, -1),
        NetJail::Proxied { port, sock } => (Some(*port), std::os::fd::AsRawFd::as_raw_fd(sock)),
    };
    // SAFETY (whole body): syscalls on stack memory only.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNET))?;
        let ctl = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as _;
        let up = libc::ioctl(ctl, libc::SIOCSIFFLAGS, &ifr);
        libc::close(ctl);
        check(up)?;
        let Some(port) = port else {
            return Ok(());
        };
        let l = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let one: libc::c_int = 1;
        libc::setsockopt(
            l,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            4,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        check(libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ))?;
        check(libc::listen(l, 128))?;
        let sent = super::fd_pass::send_fd(sock, l);
        libc::close(l);
        libc::close(sock);
        sent
    }
}
