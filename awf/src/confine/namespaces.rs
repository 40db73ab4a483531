//! Bash's namespaces, entered between fork and exec. In its own user and mount namespace
//! (its uid and gid mapped to themselves) every mount is read-only but fresh clones of the
//! writable paths, so chmod, chown and utime outside them fail with EROFS (Landlock does
//! not cover them); secret locations are covered by empty read-only mounts (a tmpfs over a
//! directory, `/dev/null` over a file; never a writable mount). In its own PID namespace,
//! with a fresh `/proc`, Bash sees and signals only its own processes; the namespace's
//! init reaps them and, by exiting when the shell exits, makes the kernel kill whatever is
//! left. No capability survives the exec (SECBIT_NOROOT, for uid 0 too), so the shell can
//! neither make a mount writable again nor lift a cover; Landlock, applied last, refuses
//! mount changes besides.
//!
//! Process tree of one call: the spawned process (the *waiter*, in awf's PID namespace,
//! the process group leader awf waits for) → the *init* (PID 1 of the new namespace) →
//! the shell. The waiter ends with the shell's own status, which the init hands it over a
//! pipe. Each link dies with the one above it (parent-death signals, the init checked
//! against a race by a pidfd of the waiter), so a SIGKILL of `awf mcp-serve` takes the
//! whole call with it, `setsid` escapees included.
//!
//! Everything that allocates happens in [`Jail::new`], in the parent; [`Jail::enter`]
//! only makes syscalls (raw `clone`, never libc's `fork` with its atfork handlers).

pub use super::network_ns::NetJail;
use super::network_ns::enter_network;
use super::syscalls::{check, write_proc};
use super::{DEFAULT_PROCESSES, bounds, cgroup, landlock, seccomp};
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the kernel lets this process do, found out once by a child that does it (and
/// handed by `awf run` to the `awf mcp-serve` of each step in its private config, so that
/// 200 steps at once do not probe 200 times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Support {
    /// User and mount namespaces (read-only mounts, covers).
    pub mounts: bool,
    /// A PID namespace with a fresh `/proc`.
    pub pids: bool,
    /// A `pid_max` of its own in that namespace (Linux 6.14+): the call's process cap.
    pub pid_max: bool,
    /// A network namespace of its own, with loopback only.
    pub net: bool,
}

/// One call's confinement, prepared in the parent.
#[derive(Debug)]
pub struct Jail {
    mounts: bool,
    /// Every mount read-only but the writable paths (Landlock confines the writes).
    read_only: bool,
    pids: bool,
    writable: Vec<CString>,
    /// The detached clones, filled in the child (capacity reserved: no allocation there).
    clones: Vec<libc::c_int>,
    /// Covers: (path, is a directory).
    hidden: Vec<(CString, bool)>,
    /// The directories between a writable root and a cover beneath it, outermost first,
    /// each bound onto itself before the covers: a mount point cannot be renamed or
    /// removed (EBUSY), so `mv proj proj2` cannot carry a hidden `proj/.env` out from
    /// under its cover for the next call.
    pins: Vec<CString>,
    /// The command's working directory, entered again once the mounts are in place (the one
    /// entered before pointed into the mount beneath them).
    cwd: CString,
    uid_map: CString,
    gid_map: CString,
    /// awf's own command line in memory (start, end), which the init blanks in its copy.
    argv: Option<(usize, usize)>,
    /// The namespace's `pid_max` (the process cap plus one: PID 1 is the init), when set.
    pid_max: Option<CString>,
    net: NetJail,
    landlock: Option<landlock::Plan>,
    /// Installed last, after Landlock: keeps the shell off the host's unix sockets.
    seccomp: Option<seccomp::Filter>,
    /// Where a supervised filter's notification descriptor goes (one end of a socketpair
    /// whose other end awf keeps).
    notify: Option<std::os::fd::OwnedFd>,
    /// The `cgroup.procs` files of the call's cgroup, joined first.
    cgroup: Vec<CString>,
    /// The call's rlimits, set before Landlock.
    rlimits: Option<bounds::Rlimits>,
    /// The session's namespace the call's own mount namespace is made from, if any.
    session: Option<std::sync::Arc<super::session_ns::SessionNs>>,
}

/// Where this process's command line lies in its memory (`arg_start`, `arg_end` of
/// /proc/self/stat): forked, not exec'd, the init would show awf's arguments (an `awf run
/// --input token=...`) to `ps` in the namespace.
fn argv_range() -> Option<(usize, usize)> {
    static RANGE: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    *RANGE.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (_, rest) = stat.rsplit_once(") ")?;
        // Fields 48 and 49 of stat(5); `rest` starts at field 3.
        let mut fields = rest.split(' ').skip(45);
        let start = fields.next()?.parse().ok()?;
        let end = fields.next()?.parse().ok()?;
        (start < end).then_some((start, end))
    })
}

fn cstr(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

impl Jail {
    /// `support` says which namespaces to enter; with `read_only` every mount but the
    /// `writable` paths is made read-only; `hidden` are existing paths to cover; at most
    /// `processes` processes and threads live at once where `support.pid_max`; `net` is
    /// entered where `support.net`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        support: Support,
        processes: u32,
        net: NetJail,
        read_only: bool,
        writable: &[PathBuf],
        hidden: &[PathBuf],
        cwd: &Path,
        landlock: Option<landlock::Plan>,
    ) -> Jail {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let writable: Vec<CString> = writable.iter().filter_map(|p| cstr(p)).collect();
        Jail {
            mounts: support.mounts,
            read_only,
            pids: support.mounts && support.pids,
            clones: Vec::with_capacity(writable.len()),
            writable,
            hidden: hidden
                .iter()
                .filter_map(|p| Some((cstr(p)?, p.is_dir())))
                .collect(),
            cwd: cstr(cwd).unwrap_or_else(|| c"/".into()),
            uid_map: CString::new(format!("{uid} {uid} 1")).unwrap(),
            gid_map: CString::new(format!("{gid} {gid} 1")).unwrap(),
            argv: argv_range(),
            pid_max: (support.mounts && support.pids && support.pid_max)
                .then(|| CString::new((processes + 1).to_string()).unwrap()),
            net: if support.mounts && support.net {
                net
            } else {
                NetJail::Host
            },
            landlock,
            seccomp: None,
            notify: None,
            pins: Vec::new(),
            cgroup: Vec::new(),
            rlimits: None,
            session: None,
        }
    }

    /// Makes the call's mount namespace from `session`'s rather than from awf's.
    pub fn with_session(
        mut self,
        session: Option<std::sync::Arc<super::session_ns::SessionNs>>,
    ) -> Jail {
        self.session = session;
        self
    }

    /// Joins the cgroup whose `cgroup.procs` files are `procs` (before anything else: its
    /// every process is then in it) and sets `rlimits`.
    pub fn with_bounds(mut self, procs: Vec<CString>, rlimits: Option<bounds::Rlimits>) -> Jail {
        self.cgroup = procs;
        self.rlimits = rlimits;
        self
    }

    /// Binds `pins` onto themselves before the covers (see the field).
    pub fn with_pins(mut self, pins: &[PathBuf]) -> Jail {
        self.pins = pins.iter().filter_map(|p| cstr(p)).collect();
        self
    }

    /// Installs `filter` ([`seccomp`]); a supervised one sends its notification
    /// descriptor over `notify`.
    pub fn with_filter(
        mut self,
        filter: Option<seccomp::Filter>,
        notify: Option<std::os::fd::OwnedFd>,
    ) -> Jail {
        self.seccomp = filter;
        self.notify = notify;
        self
    }

    /// Registers [`enter`](Self::enter) as a `pre_exec` step of `cmd`. It must come after
    /// any step meant for the spawned process itself (the waiter): the shell runs in a
    /// grandchild of it.
    /// True when the command gets a PID namespace of its own: then nothing it starts can
    /// outlive the namespace's init, which dies with the spawned process (so no orphan of
    /// the command is ever re-parented outside).
    pub fn own_pids(&self) -> bool {
        self.pids
    }

    pub fn install(mut self, cmd: &mut Command) {
        // SAFETY: `enter` only makes syscalls on memory allocated before fork; on failure
        // it returns an errno without allocating.
        unsafe { cmd.pre_exec(move || self.enter()) };
    }

    /// In the child, between fork and exec. Returns in the process that execs the shell.
    pub fn enter(&mut self) -> io::Result<()> {
        self.enter_namespaces()?;
        // SAFETY: a NUL-terminated path prepared before fork.
        check(unsafe { libc::chdir(self.cwd.as_ptr()) })?;
        if let Some(r) = &self.rlimits {
            r.apply()?;
        }
        self.restrict()
    }

    /// [`enter`](Self::enter) but the working directory and the rlimits, for a jail made
    /// ahead of its command ([`super::standby`]): those come with the command. Returns in
    /// the process that will exec it.
    pub fn enter_ahead(&mut self) -> io::Result<()> {
        self.enter_namespaces()?;
        self.restrict()
    }

    /// The cgroup, then the namespaces (mounts, network, PIDs).
    fn enter_namespaces(&mut self) -> io::Result<()> {
        cgroup::enter(&self.cgroup)?;
        if self.mounts {
            self.enter_mounts()?;
        }
        let shared = match (&self.net, &self.session) {
            (NetJail::Empty, Some(s)) => s.net_fd(),
            _ => None,
        };
        match shared {
            // SAFETY: a descriptor the session holds.
            Some(fd) => check(unsafe { libc::setns(fd, libc::CLONE_NEWNET) }).map(drop)?,
            // SAFETY: syscalls on memory prepared before fork.
            None => unsafe { enter_network(&self.net)? },
        }
        if self.pids {
            // SAFETY: syscalls only; see the module's process tree.
            unsafe { enter_pid_namespace(self.argv, self.pid_max.as_deref())? };
        }
        Ok(())
    }

    /// Landlock, then the seccomp filter: what the process may still do.
    fn restrict(&self) -> io::Result<()> {
        if let Some(plan) = &self.landlock {
            plan.apply()?;
        }
        if let Some(filter) = &self.seccomp {
            let notify = self.notify.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
            super::unix_grants::enter(filter, notify)?;
        }
        Ok(())
    }

    fn enter_mounts(&mut self) -> io::Result<()> {
        // SAFETY: every call below is a plain syscall on NUL-terminated strings and a
        // mount_attr owned by this frame; none allocates.
        unsafe {
            if let Some(session) = &self.session {
                // Its user namespace (every capability there, as its owner) and a copy of
                // its mounts, the TMPDIR tmpfs among them.
                let (user, mnt) = session.fds();
                check(libc::setns(user, libc::CLONE_NEWUSER))?;
                check(libc::setns(mnt, libc::CLONE_NEWNS))?;
                check(libc::unshare(libc::CLONE_NEWNS))?;
            } else {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write_proc(c"/proc/self/setgroups", c"deny")?;
                write_proc(c"/proc/self/uid_map", &self.uid_map)?;
                write_proc(c"/proc/self/gid_map", &self.gid_map)?;
            }
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
            let writable = if self.read_only {
                &self.writable[..]
            } else {
                &[]
            };
            for path in writable {
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
            if self.read_only {
                set_read_only(c"/", libc::AT_RECURSIVE as libc::c_uint)?;
            }
            for (path, &fd) in writable.iter().zip(&self.clones) {
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
            for pin in &self.pins {
                // Recursive: the covers and clones beneath stay as they are.
                let r = libc::mount(
                    pin.as_ptr(),
                    pin.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                );
                if r < 0 && *libc::__errno_location() != libc::ENOENT {
                    return Err(io::Error::last_os_error());
                }
            }
            for (path, dir) in &self.hidden {
                cover(path, *dir)?;
            }
            // uid 0 inside would otherwise get every capability of this namespace at exec.
            check(libc::prctl(
                libc::PR_SET_SECUREBITS,
                (libc::SECBIT_NOROOT | libc::SECBIT_NOROOT_LOCKED) as libc::c_ulong,
            ))?;
        }
        Ok(())
    }
}

/// Covers `path` with an empty read-only mount: a tmpfs over a directory, `/dev/null` over
/// a file.
unsafe fn cover(path: &CStr, dir: bool) -> io::Result<()> {
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: NUL-terminated strings that outlive the calls.
    unsafe {
        if dir {
            check(libc::mount(
                c"awf-hidden".as_ptr(),
                path.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                c"size=4k,nr_inodes=1,mode=0555".as_ptr().cast(),
            ))?;
        } else {
            check(libc::mount(
                c"/dev/null".as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            set_read_only(path, 0)?;
        }
    }
    Ok(())
}

unsafe fn set_read_only(path: &CStr, flags: libc::c_uint) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr owned by this frame.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    } as libc::c_int)?;
    Ok(())
}

/// `fork` by the raw syscall (no atfork handlers: this runs in a child of a multithreaded
/// process, where another thread may have held a lock those handlers take).
unsafe fn raw_fork(flags: libc::c_int) -> io::Result<libc::pid_t> {
    // SAFETY: clone with no new stack behaves like fork: the child continues on a copy.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as libc::pid_t)
    }
}

/// Creates the PID namespace: the calling process becomes the waiter and never returns;
/// its child becomes the init and never returns; the init's child returns, to exec.
unsafe fn enter_pid_namespace(
    argv: Option<(usize, usize)>,
    pid_max: Option<&CStr>,
) -> io::Result<()> {
    // SAFETY (whole body): syscalls on stack memory only.
    unsafe {
        // Handlers of awf's (signal-hook) would run in these copies: the default for all.
        for sig in 1..libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut status_pipe = [0 as libc::c_int; 2];
        check(libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
        let [rx, tx] = status_pipe;
        let waiter_fd =
            check(libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as libc::c_int)?;
        let init = raw_fork(libc::CLONE_NEWPID)?;
        if init > 0 {
            libc::close(tx);
            libc::close(waiter_fd);
            wait_for_init(init, rx);
        }
        // The init: PID 1 of the new namespace.
        libc::close(rx);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        // The waiter may have died before the signal was armed: then nobody would.
        let mut pfd = libc::pollfd {
            fd: waiter_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 0) != 0 {
            libc::_exit(126);
        }
        libc::close(waiter_fd);
        // A /proc of this namespace only: no other process is there to read or signal.
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            flags,
            std::ptr::null(),
        ))?;
        // The process cap: the kernel hands out PIDs below this namespace's pid_max only
        // (every level's, so a nested namespace cannot lift it). Written through the
        // fresh /proc, which is then made read-only for good.
        if let Some(value) = pid_max {
            write_proc(c"/proc/sys/kernel/pid_max", value)?;
        }
        check(libc::mount(
            std::ptr::null(),
            c"/proc".as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            std::ptr::null(),
        ))?;
        // Its memory (awf's environment among it) stays closed to the shell's processes,
        // and its command line reads `awf-init`, not awf's arguments.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        if let Some((start, end)) = argv {
            let name = b"awf-init\0";
            let p = start as *mut u8;
            std::ptr::write_bytes(p, 0, end - start);
            std::ptr::copy_nonoverlapping(name.as_ptr(), p, name.len().min(end - start));
        }
        libc::prctl(libc::PR_SET_NAME, c"awf-init".as_ptr(), 0, 0, 0);
        let shell = raw_fork(0)?;
        if shell > 0 {
            init_loop(shell, tx);
        }
        libc::close(tx);
    }
    Ok(())
}

/// Closes every descriptor above stderr but `keep`, by syscalls only.
unsafe fn close_all_above_stdio_but(keep: libc::c_int) {
    // SAFETY: close_range takes plain integers and touches no memory.
    unsafe {
        if keep > 3 {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                (keep - 1) as libc::c_uint,
                0u32,
            );
        }
        libc::syscall(
            libc::SYS_close_range,
            (keep + 1) as libc::c_uint,
            libc::c_uint::MAX,
            0u32,
        );
    }
}

/// The waiter: waits for the init, then ends as the shell did (exit code or signal).
unsafe fn wait_for_init(init: libc::pid_t, rx: libc::c_int) -> ! {
    // SAFETY (whole body): syscalls on stack memory only.
    unsafe {
        // Holds nothing but the status pipe: the spawn's exec-error pipe closes here, so
        // the parent sees the exec of the shell (or its error) in the grandchild.
        close_all_above_stdio_but(rx);
        let mut st: libc::c_int = 0;
        loop {
            let r = libc::waitpid(init, &mut st, 0);
            if r == init {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let mut shell: libc::c_int = 0;
        let n = libc::read(rx, (&mut shell as *mut libc::c_int).cast(), 4);
        // Without the shell's status, the init's own (SIGKILL from outside, say).
        let st = if n == 4 { shell } else { st };
        if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(st));
    }
}

/// The init: reaps every process of the namespace until the shell exits, hands its status
/// to the waiter and exits, which makes the kernel kill the rest of the namespace.
unsafe fn init_loop(shell: libc::pid_t, tx: libc::c_int) -> ! {
    // SAFETY (whole body): syscalls on stack memory only.
    unsafe {
        close_all_above_stdio_but(tx);
        // Nothing of the shell's output stays open here.
        for fd in 0..3 {
            libc::close(fd);
        }
        let mut st: libc::c_int = 0;
        loop {
            let r = libc::waitpid(-1, &mut st, 0);
            if r == shell {
                libc::write(tx, (&st as *const libc::c_int).cast(), 4);
                libc::_exit(0);
            }
            if r < 0 && *libc::__errno_location() == libc::ECHILD {
                libc::_exit(127);
            }
        }
    }
}

/// Why each layer the probe tried failed: (layer, the error), for `awf sandbox check`.
static WHY: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// Why the probe found each missing layer missing (`mounts`, `pids`, `pid_max`, `net`).
pub fn probe_errors() -> Vec<(&'static str, String)> {
    WHY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn note(layer: &'static str, why: &str) {
    WHY.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((layer, why.to_string()));
}

/// Starts [`support`]'s probe (unless `probe` is false: the answer was handed over) and the
/// search for the calls' cgroups on a thread of their own, so that what a process does
/// before it needs the answers (reading its config, starting its telemetry, its plugins)
/// overlaps them.
pub fn prefetch(shell: &Path, root: &Path, probe: bool) {
    let (shell, root) = (shell.to_path_buf(), root.to_path_buf());
    std::thread::spawn(move || {
        if probe {
            support(&shell, &root);
        }
        bounds::Mechanism::detect();
    });
}

/// What this kernel lets `awf` do for Bash, probed once by a fork that enters the jail;
/// each failure is one WARN line naming what Bash can do because of it.
///
/// The answer is kept for the other awf processes of this boot that would find the same
/// (in the user's runtime directory), so that a plain `awf mcp-serve` answers `initialize` without probing.
pub fn support(shell: &Path, root: &Path) -> Support {
    static PROBE: OnceLock<Support> = OnceLock::new();
    *PROBE.get_or_init(|| {
        if let Some(found) = cached::load() {
            return found;
        }
        let found = probe_all(shell, root);
        cached::store(found);
        found
    })
}

/// [`support`] probed again, whatever was kept (`awf sandbox check`, which also keeps the
/// new answer).
pub fn support_fresh(shell: &Path, root: &Path) -> Support {
    let found = probe_all(shell, root);
    cached::store(found);
    found
}

/// Forgets the kept answer (a jail made from it failed: the machine changed).
pub fn forget_support() {
    cached::forget();
}

/// The probe's answer, kept per boot in the user's runtime directory under a key of everything
/// it depends on: the boot, the user, the user and mount namespaces and the seccomp filters
/// awf runs in, its AppArmor label, the sysctls that allow or restrict user namespaces, the
/// kernel and the awf binary. A machine that changes otherwise within a boot is caught by
/// the first jail that fails (its answer is then forgotten) or by `awf sandbox check`.
mod cached {
    use super::Support;
    use std::hash::{Hash, Hasher};
    use std::path::PathBuf;

    fn key() -> Option<u64> {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let status = read("/proc/self/status");
        let mut h = std::collections::hash_map::DefaultHasher::new();
        read("/proc/sys/kernel/random/boot_id").hash(&mut h);
        for l in status.lines() {
            if ["Uid:", "Gid:", "Seccomp", "NoNewPrivs:", "CapEff:"]
                .iter()
                .any(|k| l.starts_with(k))
            {
                l.hash(&mut h);
            }
        }
        for ns in ["user", "mnt", "pid", "net"] {
            std::fs::read_link(format!("/proc/self/ns/{ns}"))
                .ok()?
                .hash(&mut h);
        }
        for p in [
            "/proc/self/attr/current",
            "/proc/sys/user/max_user_namespaces",
            "/proc/sys/kernel/unprivileged_userns_clone",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "/proc/sys/kernel/osrelease",
        ] {
            read(p).hash(&mut h);
        }
        let exe = std::env::current_exe().ok()?;
        let meta = std::fs::metadata(&exe).ok()?;
        (exe, meta.len(), meta.modified().ok()).hash(&mut h);
        Some(h.finish())
    }

    /// In the user's runtime directory (`$XDG_RUNTIME_DIR`, else `/run/user/<uid>`: made
    /// per login and gone at reboot), for root without one `/run` (a container's root has no
    /// login, and only root writes there); never in the home or the temp directory, which
    /// others may write. Where there is none, nothing is kept. The key holds the boot, so an
    /// answer of an earlier boot is never read.
    fn path() -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: getuid and geteuid have no preconditions.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        let dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && d.is_dir())
            .or_else(|| Some(PathBuf::from(format!("/run/user/{uid}"))).filter(|d| d.is_dir()))
            .or_else(|| {
                let run = std::fs::metadata("/run").ok()?;
                (uid == 0 && euid == 0 && run.is_dir() && run.uid() == 0 && run.mode() & 0o022 == 0)
                    .then(|| PathBuf::from("/run"))
            })?;
        Some(dir.join("awf").join(format!("probe-{:016x}.json", key()?)))
    }

    pub fn load() -> Option<Support> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path()?)
            .ok()?;
        // SAFETY: geteuid has no preconditions.
        if f.metadata().ok()?.uid() != unsafe { libc::geteuid() } {
            return None;
        }
        serde_json::from_reader(f).ok()
    }

    pub fn store(found: Support) {
        let Some(path) = path() else { return };
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec(&found).unwrap_or_default();
        if crate::private_files::write_private(&tmp, &bytes).is_ok()
            && std::fs::rename(&tmp, &path).is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    pub fn forget() {
        if let Some(p) = path() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn probe_all(shell: &Path, root: &Path) -> Support {
    {
        let none = Support {
            mounts: false,
            pids: false,
            pid_max: false,
            net: false,
        };
        // One probe where the kernel has it all (the usual case); one per layer else, to
        // say which is missing.
        let all = Support {
            mounts: true,
            pids: true,
            pid_max: true,
            net: true,
        };
        if probe(shell, root, all).is_ok() {
            return all;
        }
        let mounts = Support {
            mounts: true,
            ..none
        };
        if let Err(why) = probe(shell, root, mounts) {
            note("mounts", &why);
            tracing::warn!(
                "no user and mount namespace for Bash ({why}); `awf sandbox check` says why \
                 and what falls back to what"
            );
            return none;
        }
        let pids = Support {
            pids: true,
            ..mounts
        };
        let mut found = mounts;
        match probe(shell, root, pids) {
            Ok(()) => found = pids,
            Err(why) => {
                note("pids", &why);
                tracing::warn!(
                    "no PID namespace with its own /proc for Bash ({why}); `awf sandbox \
                     check` says what falls back to what"
                )
            }
        }
        if found.pids {
            match probe(
                shell,
                root,
                Support {
                    pid_max: true,
                    ..pids
                },
            ) {
                Ok(()) => found.pid_max = true,
                Err(why) => note("pid_max", &why),
            }
            if !found.pid_max
                && let Some((_, why)) = probe_errors().into_iter().find(|(l, _)| *l == "pid_max")
            {
                tracing::warn!(
                    "Bash's processes are not capped by a pid_max of their own (it needs \
                     Linux 6.14+: {why})"
                );
            }
        }
        // Its own result: a host list or `network: deny` says what this means for them.
        let net = probe(
            shell,
            root,
            Support {
                net: true,
                ..mounts
            },
        );
        if let Err(why) = &net {
            note("net", why);
        }
        found.net = net.is_ok();
        found
    }
}

fn probe(_shell: &Path, root: &Path, support: Support) -> Result<(), String> {
    let net = if support.net {
        NetJail::Empty
    } else {
        NetJail::Host
    };
    let jail = Jail::new(
        support,
        DEFAULT_PROCESSES,
        net,
        true,
        &[root.to_path_buf()],
        &[],
        root,
        None,
    );
    // In a fork that enters the jail and exits where a shell would be run: no program to
    // start, so the probe costs the namespaces alone (it is on `awf mcp-serve`'s way to
    // answering `initialize`).
    let mut jail = jail;
    let status = crate::process::fork_owned(move || match jail.enter() {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(1).clamp(1, 125),
    })
    .and_then(crate::process::Forked::wait)
    .map_err(|e| e.to_string())?;
    if let Some(code) = status.code()
        && code != 0
    {
        return Err(std::io::Error::from_raw_os_error(code).to_string());
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("the probe exited with {status}"))
    }
}
