//! A seccomp filter that keeps Bash off the host's unix sockets. A pathname unix socket is
//! reached by `connect()`, which needs only path resolution: a read-only mount does not
//! stop it and Landlock before ABI 9 does not cover it, so `/var/run/docker.sock` (root
//! on the host for a member of the `docker` group), the user's ssh-agent and the D-Bus
//! session bus would be a way out of every other layer. The filter refuses the calls that
//! make a unix socket able to name an address:
//!
//! - `socket(AF_UNIX, …)`, with `EACCES`;
//! - `socketpair(AF_UNIX, SOCK_DGRAM, …)`, with `EACCES`: a datagram socket of a pair can
//!   still `connect()` or `sendto()` a pathname; stream and seqpacket pairs (pipes between
//!   processes, Node's and Python's child IPC) are connected for good and stay allowed;
//! - `io_uring_setup`, with `ENOSYS`: io_uring's socket and connect operations do not pass
//!   through seccomp (programs fall back to plain syscalls);
//! - on x86_64, the x32 ABI's calls (`ENOSYS`) and the i386 ABI's `socketcall` (whose
//!   arguments lie in memory a filter cannot read; `ENOSYS`), so neither is a way around;
//!   a call of another architecture kills the process.
//!
//! Where a step grants some sockets (`unix_sockets:`), stream and seqpacket unix sockets may
//! be made and every `connect()` goes to a supervisor instead (`SECCOMP_RET_USER_NOTIF`,
//! [`super::unix_grants`]), which connects granted sockets only.
//!
//! Abstract sockets are Landlock's (its scope, ABI 6) and the network namespace's.
//! Sockets made before the filter (the egress bridge's listener, sent out by then) are not
//! concerned. [`Filter::new`] allocates, in the parent; [`Filter::apply`] only makes
//! syscalls, as is required between fork and exec.

use std::io;

// Classic BPF (linux/filter.h, linux/bpf_common.h): class | size | mode, class | op | src.
/// BPF_LD | BPF_W | BPF_ABS.
const LD_W_ABS: u16 = 0x20;
/// BPF_JMP | BPF_JEQ | BPF_K.
const JMP_JEQ_K: u16 = 0x15;
/// BPF_JMP | BPF_JGE | BPF_K.
const JMP_JGE_K: u16 = 0x35;
/// BPF_ALU | BPF_AND | BPF_K.
const ALU_AND_K: u16 = 0x54;
/// BPF_RET | BPF_K.
const RET_K: u16 = 0x06;

// linux/seccomp.h.
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SET_MODE_FILTER: libc::c_uint = 1;
const FLAG_NEW_LISTENER: libc::c_uint = 1 << 3;

// struct seccomp_data: nr, arch, instruction_pointer, args[6] (the low half of each
// argument first on a little-endian machine; the calls filtered take ints).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;
const ARG1: u32 = 24;

const SOCK_TYPE_MASK: u32 = 0xf;

/// The system call numbers the filter looks at, for one ABI.
struct Abi {
    /// `AUDIT_ARCH_*` of linux/audit.h.
    arch: u32,
    socket: u32,
    socketpair: u32,
    connect: u32,
    io_uring_setup: u32,
    /// `socketcall` (the i386 multiplexer), where the ABI has one.
    socketcall: Option<u32>,
}

#[cfg(target_arch = "x86_64")]
const NATIVE: Abi = Abi {
    arch: 0xc000_003e,
    socket: 41,
    socketpair: 53,
    connect: 42,
    io_uring_setup: 425,
    socketcall: None,
};
/// The i386 ABI a 64-bit process reaches with `int 0x80`.
#[cfg(target_arch = "x86_64")]
const COMPAT: Option<Abi> = Some(Abi {
    arch: 0x4000_0003,
    socket: 359,
    socketpair: 360,
    connect: 362,
    io_uring_setup: 425,
    socketcall: Some(102),
});
/// The x32 ABI's calls carry this bit with x86_64's architecture.
#[cfg(target_arch = "x86_64")]
const X32_BIT: Option<u32> = Some(0x4000_0000);

#[cfg(target_arch = "aarch64")]
const NATIVE: Abi = Abi {
    arch: 0xc000_00b7,
    socket: 198,
    socketpair: 199,
    connect: 203,
    io_uring_setup: 425,
    socketcall: None,
};
#[cfg(target_arch = "aarch64")]
const COMPAT: Option<Abi> = None;
#[cfg(target_arch = "aarch64")]
const X32_BIT: Option<u32> = None;

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Filter {
    program: Vec<libc::sock_filter>,
    /// Every `connect()` goes to a supervisor ([`super::unix_grants`]).
    supervised: bool,
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The checks of `socket()`: a unix socket is refused (with `supervised`, only a datagram
/// one); with `no_udp`, an IPv4 or IPv6 socket that is not a stream one (UDP, raw, ICMP,
/// SCTP) is refused too. Ends in a return.
fn socket_rule(supervised: bool, no_udp: bool) -> Vec<libc::sock_filter> {
    let eacces = RET_ERRNO | libc::EACCES as u32;
    // The family tests, then `allow`, then the unix part, then the inet part.
    let unix: Vec<libc::sock_filter> = if supervised {
        vec![
            stmt(LD_W_ABS, ARG1),
            stmt(ALU_AND_K, SOCK_TYPE_MASK),
            jump(JMP_JEQ_K, libc::SOCK_DGRAM as u32, 0, 1),
            stmt(RET_K, eacces),
            stmt(RET_K, RET_ALLOW),
        ]
    } else {
        vec![stmt(RET_K, eacces)]
    };
    let inet = [
        stmt(LD_W_ABS, ARG1),
        stmt(ALU_AND_K, SOCK_TYPE_MASK),
        jump(JMP_JEQ_K, libc::SOCK_STREAM as u32, 0, 1),
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, eacces),
    ];
    let families = if no_udp { 3u8 } else { 1 };
    let mut out = vec![stmt(LD_W_ABS, ARG0)];
    // From the family test at index i (0-based among `families`), the unix part lies
    // `families - i` instructions on (the tests left, then `allow`), the inet part beyond.
    out.push(jump(JMP_JEQ_K, libc::AF_UNIX as u32, families, 0));
    if no_udp {
        let to_inet = |i: u8| families - i + unix.len() as u8;
        out.push(jump(JMP_JEQ_K, libc::AF_INET as u32, to_inet(1), 0));
        out.push(jump(JMP_JEQ_K, libc::AF_INET6 as u32, to_inet(2), 0));
    }
    out.push(stmt(RET_K, RET_ALLOW));
    out.extend(unix);
    if no_udp {
        out.extend(inet);
    }
    out
}

/// A program under construction. Each block handles one syscall number and ends in a
/// return, so the accumulator holds the number at the start of every block.
struct Asm(Vec<libc::sock_filter>);

impl Asm {
    /// `if nr == k { body }`; `body` ends in a return.
    fn block(&mut self, nr: u32, body: &[libc::sock_filter]) {
        self.0.push(jump(JMP_JEQ_K, nr, 0, body.len() as u8));
        self.0.extend_from_slice(body);
    }

    /// The checks of one ABI, with the syscall number loaded; ends by allowing.
    fn abi(&mut self, abi: &Abi, supervised: bool, no_udp: bool) {
        let eacces = RET_ERRNO | libc::EACCES as u32;
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        self.block(abi.io_uring_setup, &[stmt(RET_K, enosys)]);
        if let Some(nr) = abi.socketcall {
            self.block(nr, &[stmt(RET_K, enosys)]);
        }
        // A unix socket of datagram type: refused (it could sendto() any pathname).
        let unix_dgram = [
            stmt(LD_W_ABS, ARG0),
            jump(JMP_JEQ_K, libc::AF_UNIX as u32, 0, 4),
            stmt(LD_W_ABS, ARG1),
            stmt(ALU_AND_K, SOCK_TYPE_MASK),
            jump(JMP_JEQ_K, libc::SOCK_DGRAM as u32, 0, 1),
            stmt(RET_K, eacces),
            stmt(RET_K, RET_ALLOW),
        ];
        self.block(abi.socketpair, &unix_dgram);
        self.block(abi.socket, &socket_rule(supervised, no_udp));
        if supervised {
            // Stream and seqpacket unix sockets may be made; whom they reach is the
            // supervisor's to decide, at connect().
            self.block(abi.connect, &[stmt(RET_K, RET_USER_NOTIF)]);
        }
        self.0.push(stmt(RET_K, RET_ALLOW));
    }
}

impl Filter {
    /// The filter for this machine's architecture: unix sockets refused, or with
    /// `supervised`, every `connect()` handed to a supervisor (`unix_sockets:` grants).
    pub fn new(supervised: bool) -> Filter {
        Self::build(supervised, false)
    }

    /// As [`new`](Self::new), and UDP, raw and every other non-stream IPv4 and IPv6 socket
    /// refused (`EACCES`): `network: deny` where no network namespace can be had (Landlock
    /// refuses TCP there, and covers no other protocol).
    pub fn without_udp(supervised: bool) -> Filter {
        Self::build(supervised, true)
    }

    fn build(supervised: bool, no_udp: bool) -> Filter {
        let mut native = Asm(Vec::new());
        native.0.push(stmt(LD_W_ABS, NR));
        if let Some(bit) = X32_BIT {
            native.0.push(jump(JMP_JGE_K, bit, 0, 1));
            native.0.push(stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32));
        }
        native.abi(&NATIVE, supervised, no_udp);
        let mut a = Asm(vec![stmt(LD_W_ABS, ARCH)]);
        a.0.push(jump(JMP_JEQ_K, NATIVE.arch, 0, native.0.len() as u8));
        a.0.extend(native.0);
        if let Some(abi) = &COMPAT {
            let mut compat = Asm(vec![stmt(LD_W_ABS, NR)]);
            compat.abi(abi, supervised, no_udp);
            a.0.push(jump(JMP_JEQ_K, abi.arch, 0, compat.0.len() as u8));
            a.0.extend(compat.0);
        }
        a.0.push(stmt(RET_K, RET_KILL_PROCESS));
        Filter {
            program: a.0,
            supervised,
        }
    }

    /// True when the filter hands `connect()` to a supervisor.
    pub fn supervised(&self) -> bool {
        self.supervised
    }

    /// In the child, between fork and exec: installs the filter (no new privileges first,
    /// as an unprivileged filter requires). A supervised filter returns the descriptor its
    /// supervisor receives the calls on. Syscalls only.
    pub fn apply(&self) -> io::Result<Option<libc::c_int>> {
        let prog = libc::sock_fprog {
            len: self.program.len() as libc::c_ushort,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        let flags = if self.supervised {
            FLAG_NEW_LISTENER
        } else {
            0
        };
        // SAFETY: plain syscalls; `prog` points at the program owned by `self`.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let r = libc::syscall(
                libc::SYS_seccomp,
                SET_MODE_FILTER,
                flags,
                &prog as *const libc::sock_fprog,
            );
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(self.supervised.then_some(r as libc::c_int))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    /// Runs `f` in a forked child under the filter; its exit code is `f`'s result.
    fn under_filter(f: fn() -> i32) -> i32 {
        under(&Filter::new(false), f)
    }

    fn under(filter: &Filter, f: fn() -> i32) -> i32 {
        // SAFETY: the child only makes syscalls and exits; the test harness's threads are
        // not touched in it.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                if filter.apply().is_err() {
                    libc::_exit(100);
                }
                libc::_exit(f());
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            assert!(libc::WIFEXITED(status), "status {status}");
            libc::WEXITSTATUS(status)
        }
    }

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn unix_sockets_are_refused_and_the_rest_allowed() {
        // Each case returns 0 when the call did what the filter intends.
        fn unix_stream() -> i32 {
            // SAFETY: a plain syscall.
            let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
            (fd >= 0 || errno() != libc::EACCES) as i32
        }
        fn unix_dgram_cloexec() -> i32 {
            // SAFETY: a plain syscall.
            let fd =
                unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            (fd >= 0 || errno() != libc::EACCES) as i32
        }
        fn inet() -> i32 {
            // SAFETY: a plain syscall.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            (fd < 0) as i32
        }
        fn stream_pair() -> i32 {
            UnixStream::pair().is_err() as i32
        }
        fn dgram_pair() -> i32 {
            match UnixDatagram::pair() {
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => 0,
                _ => 1,
            }
        }
        fn uring() -> i32 {
            // SAFETY: a plain syscall with a zeroed parameter block.
            let r = unsafe {
                let mut params = [0u8; 120];
                libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr())
            };
            (r >= 0 || errno() != libc::ENOSYS) as i32
        }
        for (name, case) in [
            ("socket(AF_UNIX, SOCK_STREAM)", unix_stream as fn() -> i32),
            (
                "socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)",
                unix_dgram_cloexec,
            ),
            ("socket(AF_INET)", inet),
            ("socketpair(AF_UNIX, SOCK_STREAM)", stream_pair),
            ("socketpair(AF_UNIX, SOCK_DGRAM)", dgram_pair),
            ("io_uring_setup", uring),
        ] {
            assert_eq!(under_filter(case), 0, "{name}");
        }
    }

    #[test]
    fn without_udp_only_inet_stream_sockets_are_made() {
        // SAFETY (each): a plain syscall; 0 when the filter did what it intends.
        fn tcp() -> i32 {
            (unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) } < 0)
                as i32
        }
        fn tcp6() -> i32 {
            (unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM, 0) } < 0) as i32
        }
        fn refused(family: i32, kind: i32) -> i32 {
            let fd = unsafe { libc::socket(family, kind, 0) };
            (fd >= 0 || errno() != libc::EACCES) as i32
        }
        fn udp() -> i32 {
            refused(libc::AF_INET, libc::SOCK_DGRAM)
        }
        fn udp6() -> i32 {
            refused(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK)
        }
        fn raw() -> i32 {
            refused(libc::AF_INET, libc::SOCK_RAW)
        }
        fn unix() -> i32 {
            refused(libc::AF_UNIX, libc::SOCK_STREAM)
        }
        fn netlink() -> i32 {
            (unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM, 0) } < 0) as i32
        }
        let f = Filter::without_udp(false);
        for (name, case) in [
            ("tcp", tcp as fn() -> i32),
            ("tcp6", tcp6),
            ("udp", udp),
            ("udp6", udp6),
            ("raw", raw),
            ("unix", unix),
            ("netlink", netlink),
        ] {
            assert_eq!(under(&f, case), 0, "{name}");
        }
        // Supervised: a unix stream socket may be made, UDP still not.
        fn unix_stream_made() -> i32 {
            (unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) } < 0) as i32
        }
        let s = Filter::without_udp(true);
        let code = unsafe {
            let pid = libc::fork();
            if pid == 0 {
                if s.apply().is_err() {
                    libc::_exit(100);
                }
                libc::_exit(unix_stream_made() * 2 + udp());
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        };
        assert_eq!(code, 0);
    }

    #[test]
    fn a_supervised_filter_lets_stream_unix_sockets_be_made_and_returns_its_listener() {
        let filter = Filter::new(true);
        assert!(filter.supervised());
        // SAFETY: the child only makes syscalls and exits.
        let code = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let Ok(Some(listener)) = filter.apply() else {
                    libc::_exit(100);
                };
                let stream = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let dgram = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
                let refused = dgram < 0 && errno() == libc::EACCES;
                libc::_exit(if listener >= 0 && stream >= 0 && refused {
                    0
                } else {
                    1
                });
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        };
        assert_eq!(code, 0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_x32_abi_is_no_way_around() {
        fn x32_socket() -> i32 {
            // SAFETY: a plain syscall.
            let r = unsafe {
                libc::syscall(
                    X32_BIT.unwrap() as libc::c_long | libc::SYS_socket,
                    libc::AF_UNIX,
                    libc::SOCK_STREAM,
                    0,
                )
            };
            (r >= 0 || errno() != libc::ENOSYS) as i32
        }
        assert_eq!(under_filter(x32_socket), 0);
    }
}
