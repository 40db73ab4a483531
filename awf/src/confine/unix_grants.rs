//! `unix_sockets: [paths]`: the host's unix sockets a step grants Bash on purpose (a local
//! database's socket), each connection decided and audited by awf. With grants, the call's
//! seccomp filter ([`super::seccomp`]) hands every `connect()` to this supervisor, a thread
//! of `awf mcp-serve` outside the jail, which makes the connection itself on the caller's
//! socket (a duplicate of its descriptor, `pidfd_getfd`) with the address it copied, and
//! answers with the result. Acting on what it checked, never letting the kernel resume the
//! call, leaves no time between check and use: another thread of the caller may change the
//! address or the descriptor meanwhile, to no effect.
//!
//! - A socket that is not a unix one (TCP, UDP) connects to the address as given: its own
//!   network namespace, and the egress proxy where there is one, decide the rest.
//! - A unix socket connects only to a granted socket, told by its inode (device and inode
//!   numbers of the path as granted, looked up at each connection, so a restarted daemon's
//!   new socket is granted too): the caller's path (relative to its working directory) is
//!   opened `O_PATH` and connected through `/proc/self/fd/N`, so the inode checked is the
//!   one connected to. Anything else — another socket, an abstract or unnamed address —
//!   is refused with `EACCES`; a path where nothing is gets the kernel's `ENOENT`.
//!
//! Each unix connection to something is reported (a `net.connect` record with `family:
//! unix`), allowed or denied.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Whether this machine lets awf act for a process it started (`pidfd_getfd` needs ptrace
/// rights over it): Yama's `ptrace_scope` 2 and 3 refuse them to unprivileged users, and
/// then no supervisor can work; why, otherwise.
pub fn supervisable() -> Result<(), String> {
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(v) if matches!(v.trim(), "2" | "3") => Err(format!(
            "kernel.yama.ptrace_scope is {}, which keeps awf from acting for the processes it \
             starts (pidfd_getfd)",
            v.trim()
        )),
        _ => Ok(()),
    }
}

/// One connection to a unix socket, as the supervisor decided it.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The path the caller named (absolute), or how it named none.
    pub path: String,
    pub allowed: bool,
    /// The grant that allowed it, or why it was refused.
    pub why: String,
    pub duration: std::time::Duration,
}

impl Attempt {
    /// The `net.connect` audit record's fields (besides ts, type, call_id).
    pub fn record(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("family".into(), "unix".into());
        m.insert("path".into(), self.path.clone().into());
        m.insert("method".into(), "connect".into());
        m.insert("decision".into(), self.decision_name().into());
        m.insert(
            (if self.allowed { "rule" } else { "reason" }).into(),
            self.why.clone().into(),
        );
        m.insert(
            "duration_ms".into(),
            serde_json::json!((self.duration.as_secs_f64() * 1e6).round() / 1000.0),
        );
        m
    }

    pub fn decision_name(&self) -> &'static str {
        if self.allowed { "allowed" } else { "denied" }
    }
}

/// What the supervisor tells of each unix connection.
pub type Reporter = Arc<dyn Fn(Attempt) + Send + Sync>;

// linux/seccomp.h: struct seccomp_notif, seccomp_notif_resp and the ioctls on the
// listener (_IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct seccomp_notif_resp),
// _IOW('!', 2, __u64)).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    nr: i32,
    arch: u32,
    instruction_pointer: u64,
    args: [u64; 6],
}

#[repr(C)]
struct NotifResp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

const NOTIF_RECV: libc::c_ulong = 0xc050_2100;
const NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;

/// awf's end of one call's socketpair, until the call's notification descriptor arrives.
pub struct Pending {
    sock: OwnedFd,
}

impl Pending {
    /// A socketpair: awf's end, and the end the jail sends the descriptor over.
    pub fn pair() -> io::Result<(Pending, OwnedFd)> {
        let (ours, theirs) = super::fd_pass::pair()?;
        Ok((Pending { sock: ours }, theirs))
    }

    /// Once the command is spawned: decides its connections until [`Supervisor::stop`].
    pub fn serve(self, grants: Arc<Vec<PathBuf>>, report: Reporter) -> io::Result<Supervisor> {
        let fd = super::fd_pass::recv_fd(self.sock.as_raw_fd(), "seccomp notification descriptor")?;
        // SAFETY: a descriptor just received, owned from here on.
        let listener = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (listener, stop) = (listener.clone(), stop.clone());
            std::thread::Builder::new()
                .name("awf-unix-grants".into())
                .spawn(move || receive_loop(&listener, &stop, &grants, &report))?
        };
        Ok(Supervisor { stop, thread })
    }
}

/// Puts the process `cmd` starts under the supervised filter, its notification
/// descriptor sent over `sock` (the other end of [`Pending::pair`]): for a process that is
/// not in Bash's jail (a plugin), which serves unix sockets of its own but may reach none
/// of the host's beyond the grants its [`Pending::serve`] is given. No `pre_exec` step
/// after this one may connect: the supervisor starts once the spawn returns.
pub fn install(cmd: &mut std::process::Command, sock: OwnedFd) {
    use std::os::unix::process::CommandExt;
    let filter = super::seccomp::Filter::new(true);
    // SAFETY: the closure only makes syscalls on memory allocated before fork.
    unsafe { cmd.pre_exec(move || enter(&filter, Some(sock.as_raw_fd()))) };
}

/// Between fork and exec: installs `filter`; a supervised one's notification descriptor
/// goes out over `notify` (and is closed here). Syscalls only.
pub(super) fn enter(filter: &super::seccomp::Filter, notify: Option<RawFd>) -> io::Result<()> {
    if let Some(listener) = filter.apply()? {
        // SAFETY: syscalls on descriptors of this process.
        unsafe {
            let sent = super::fd_pass::send_fd(notify.unwrap_or(-1), listener);
            libc::close(listener);
            sent?;
        }
    }
    Ok(())
}

/// One call's supervisor at work.
pub struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Supervisor {
    /// After the call's processes are gone (the loop also ends by itself then).
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

fn receive_loop(
    listener: &Arc<OwnedFd>,
    stop: &AtomicBool,
    grants: &Arc<Vec<PathBuf>>,
    report: &Reporter,
) {
    let fd = listener.as_raw_fd();
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, 100) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
        if pfd.revents & libc::POLLIN == 0 {
            if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return; // every process under the filter is gone
            }
            continue;
        }
        let mut notif = Notif::default();
        // SAFETY: the ioctl fills the struct it is given, of the kernel's layout.
        if unsafe { libc::ioctl(fd, NOTIF_RECV, &mut notif as *mut Notif) } < 0 {
            continue; // the caller went away (ENOENT) or a signal interrupted it
        }
        // A connect may block (a remote TCP peer): each gets a thread of its own, so one
        // slow connection holds up no other.
        let id = notif.id;
        let (listener, grants, report) = (listener.clone(), grants.clone(), report.clone());
        let answered = std::thread::Builder::new()
            .name("awf-unix-connect".into())
            .spawn(move || {
                let l = listener.as_raw_fd();
                let error = decide(l, &notif, &grants, &report);
                respond(l, notif.id, error);
            });
        if answered.is_err() {
            respond(fd, id, libc::EAGAIN);
        }
    }
}

fn respond(listener: RawFd, id: u64, errno: i32) {
    let resp = NotifResp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: the ioctl reads the struct it is given; a caller that went away makes it
    // fail with ENOENT, which needs no handling.
    unsafe { libc::ioctl(listener, NOTIF_SEND, &resp as *const NotifResp) };
}

/// True while the notification `id` still stands for the caller that made it (its pid was
/// not reused), checked after each look at the caller.
fn still_valid(listener: RawFd, id: u64) -> bool {
    // SAFETY: the ioctl reads a u64.
    unsafe { libc::ioctl(listener, NOTIF_ID_VALID, &id as *const u64) == 0 }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Makes the connection the caller asked for, or refuses it; the errno to answer (0: done).
fn decide(listener: RawFd, n: &Notif, grants: &[PathBuf], report: &Reporter) -> i32 {
    let started = Instant::now();
    let pid = n.pid as libc::pid_t;
    let (sock, addr, len) = match callers_socket(listener, n) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let domain = match socket_domain(&sock) {
        Ok(d) => d,
        Err(e) => return e, // ENOTSOCK
    };
    let family = if len >= 2 {
        u16::from_ne_bytes([addr[0], addr[1]]) as libc::c_int
    } else {
        libc::AF_UNSPEC
    };
    if domain != libc::AF_UNIX || family != libc::AF_UNIX {
        // Not a unix address: the kernel's own checks (and the network namespace) apply.
        return connect(sock.as_raw_fd(), &addr[..len]);
    }
    let path_bytes = &addr[2..len];
    let path_bytes = &path_bytes[..path_bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(path_bytes.len())];
    let refuse = |path: String, why: &str| {
        report(Attempt {
            path,
            allowed: false,
            why: why.into(),
            duration: started.elapsed(),
        });
        libc::EACCES
    };
    if path_bytes.is_empty() {
        let how = if len > 2 && addr[2] == 0 {
            "an abstract socket"
        } else {
            "no address"
        };
        return refuse(
            format!("({how})"),
            "only pathname sockets listed in unix_sockets may be reached",
        );
    }
    let named = Path::new(std::ffi::OsStr::from_bytes(path_bytes));
    // The caller's relative path starts at its working directory, as it sees it.
    let dir = if named.is_absolute() {
        None
    } else {
        match callers_cwd(pid) {
            Some(d) => Some(d),
            None => return libc::ESRCH,
        }
    };
    let shown = match &dir {
        None => named.display().to_string(),
        Some(d) => std::fs::read_link(format!("/proc/self/fd/{}", d.as_raw_fd()))
            .map(|c| c.join(named).display().to_string())
            .unwrap_or_else(|_| named.display().to_string()),
    };
    let Ok(cpath) = CString::new(path_bytes) else {
        return refuse(shown, "the path holds a NUL byte");
    };
    // SAFETY: a NUL-terminated path, relative to an owned directory or absolute.
    let target = unsafe {
        libc::openat(
            dir.as_ref().map_or(libc::AT_FDCWD, |d| d.as_raw_fd()),
            cpath.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if target < 0 {
        // Nothing there to reach (glibc asks for nscd's socket at every user lookup): the
        // kernel's own answer, and no record.
        return errno();
    }
    // SAFETY: a fresh descriptor.
    let target = unsafe { OwnedFd::from_raw_fd(target) };
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{}", target.as_raw_fd())) else {
        return refuse(shown, "no such socket");
    };
    let granted = grants.iter().find(|g| {
        std::fs::metadata(g).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    });
    let Some(grant) = granted else {
        return refuse(shown, "not listed in mcp_proxy.sandbox.unix_sockets");
    };
    let e = connect_through(&sock, &target);
    report(Attempt {
        path: shown,
        allowed: true,
        why: grant.display().to_string(),
        duration: started.elapsed(),
    });
    e
}

/// Connects `sock` through the descriptor checked (`target`): the inode granted, whatever
/// its name leads to by now. The errno (0: connected).
fn connect_through(sock: &OwnedFd, target: &OwnedFd) -> i32 {
    let mut via = [0u8; 2 + 32];
    via[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
    let through = format!("/proc/self/fd/{}", target.as_raw_fd());
    via[2..2 + through.len()].copy_from_slice(through.as_bytes());
    connect(sock.as_raw_fd(), &via[..2 + through.len() + 1])
}

/// The socket the caller's `connect` names, shared with it, and the address it asks for
/// (read from its memory); the errno to answer when either cannot be had, or the call is
/// no longer waiting.
fn callers_socket(
    listener: RawFd,
    n: &Notif,
) -> Result<
    (
        OwnedFd,
        [u8; std::mem::size_of::<libc::sockaddr_storage>()],
        usize,
    ),
    i32,
> {
    // The thread that made the call; its descriptors are its process's (thread group's).
    let pid = n.pid as libc::pid_t;
    let tgid = thread_group(pid).ok_or(libc::ESRCH)?;
    let (fd, addr_ptr, addr_len) = (n.args[0] as i32, n.args[1], n.args[2] as usize);
    // SAFETY: plain syscalls; descriptors received are owned at once.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
    if pidfd < 0 {
        return Err(libc::ESRCH);
    }
    // SAFETY: a fresh descriptor.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    if !still_valid(listener, n.id) {
        return Err(libc::ESRCH);
    }
    // SAFETY: as above.
    let sock = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if sock < 0 {
        return Err(errno()); // EBADF: not a descriptor of the caller's
    }
    // SAFETY: a fresh descriptor: the caller's socket, shared.
    let sock = unsafe { OwnedFd::from_raw_fd(sock as RawFd) };
    let mut addr = [0u8; std::mem::size_of::<libc::sockaddr_storage>()];
    let len = addr_len.min(addr.len());
    if len > 0 {
        let local = libc::iovec {
            iov_base: addr.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr_ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: copies `len` bytes of the caller's memory into `addr`.
        let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if r != len as isize {
            return Err(libc::EFAULT);
        }
    }
    if !still_valid(listener, n.id) {
        return Err(libc::ESRCH);
    }
    Ok((sock, addr, len))
}

/// The domain of a socket (`AF_UNIX`, ...); the errno when it is not one.
fn socket_domain(sock: &OwnedFd) -> Result<libc::c_int, i32> {
    let mut domain: libc::c_int = 0;
    let mut dlen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt fills an int.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut dlen,
        )
    };
    if r < 0 {
        return Err(errno());
    }
    Ok(domain)
}

/// The working directory of process `pid`, opened as a path (None: it is gone).
fn callers_cwd(pid: libc::pid_t) -> Option<OwnedFd> {
    let cwd = CString::new(format!("/proc/{pid}/cwd")).unwrap();
    // SAFETY: a NUL-terminated path; the descriptor is owned at once.
    let d = unsafe {
        libc::open(
            cwd.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if d < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor.
    Some(unsafe { OwnedFd::from_raw_fd(d) })
}

/// The process (thread group) the thread `tid` belongs to.
fn thread_group(tid: libc::pid_t) -> Option<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `connect(sock, addr)`; the errno, or 0.
fn connect(sock: RawFd, addr: &[u8]) -> i32 {
    // SAFETY: `addr` is a buffer of `addr.len()` bytes; the kernel checks its contents.
    let r = unsafe { libc::connect(sock, addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
    if r < 0 { errno() } else { 0 }
}
