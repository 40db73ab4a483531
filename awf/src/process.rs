//! Child processes: every process awf starts runs as the leader of its own process group,
//! owned by a [`ProcessGroup`] that ends the group with grace (SIGTERM, a wait, SIGKILL),
//! reaps the leader, and kills and reaps on drop, so that no path leaves a group running.
//!
//! A process can leave its group (`setsid`, `setpgid`) and outlive its parent. `awf run`
//! and `awf mcp-serve` are child subreapers ([`become_subreaper`]), so such a process is
//! re-parented to them instead of to init: it becomes an *adopted* child, one that no
//! `ProcessGroup` owns. [`kill_orphans`] kills every adopted child with all its descendants
//! and reaps them; ending a group reaps the members it adopted. Both tell owned from
//! adopted children by the set of pids the live `ProcessGroup`s hold. That set is kept for
//! the whole process, because children are a property of the process (as the subreaper
//! flag is); it follows that in a subreaper every child must be started through
//! `ProcessGroup`, or it would be taken for an orphan. Outside a subreaper, and in a
//! process that never started a child, [`kill_orphans`] does nothing: there, every child is
//! some `std::process::Child`'s own, or there is none.
//!
//! The costs are kept off the common path: ending a group asks the kernel whether the group
//! still has a member (`kill(-pgid, 0)`) and reads `/proc` only for one that outlived its
//! grace; [`kill_orphans`] reads every process's `/proc/<pid>/stat`, so callers at once
//! share one pass.

mod launch;

pub use launch::Launch;
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Between SIGTERM and SIGKILL when a group is ended with grace.
pub const GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(25);
/// Rounds of [`kill_orphans`] (each a scan, kills and reaps) before it gives up on
/// processes that do not die (uninterruptible sleep).
const KILL_ROUNDS: usize = 400;
const KILL_ROUND_PAUSE: Duration = Duration::from_millis(5);

/// Set once when the process is going down on a signal: whoever runs commands for it
/// ends them at once (a running Bash command is killed, a new one is refused).
#[derive(Debug, Clone, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    pub fn begin(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Set when this process first starts a child: before, it has no descendants, so none can
/// have been re-parented to it.
static SPAWNED: AtomicBool = AtomicBool::new(false);

/// Pids of the children the live `ProcessGroup`s own (not yet reaped).
fn owned() -> MutexGuard<'static, HashSet<i32>> {
    static OWNED: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    OWNED
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        // A panic while holding the lock leaves a consistent set (single inserts/removes).
        .unwrap_or_else(|p| p.into_inner())
}

/// A child made by [`fork_owned`]: this process's copy, running the closure it was given.
pub struct Forked {
    pid: i32,
}

/// Runs `child` in a fork of this process, without an exec (so `child` must only make
/// syscalls: this process may have other threads, whose locks the copy must not take), and
/// exits with what it returns. It dies with the thread that forked it, and no orphan sweep
/// takes it (it is owned, as a [`ProcessGroup`]'s leader). Cheaper than spawning a program
/// for what a few syscalls tell (whether a namespace can be made, say).
pub fn fork_owned(mut child: impl FnMut() -> i32) -> io::Result<Forked> {
    SPAWNED.store(true, Ordering::SeqCst);
    let mut owned = owned();
    let pid = raw_fork()?;
    if pid == 0 {
        // SAFETY: syscalls only (the closure's contract), then _exit.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::_exit(child());
        }
    }
    owned.insert(pid);
    Ok(Forked { pid })
}

/// `fork` by the raw syscall, without libc's atfork handlers (another thread of this
/// process may hold a lock they take): the child's pid, 0 in the child. The child must only
/// make syscalls until it execs or exits.
fn raw_fork() -> io::Result<i32> {
    // SAFETY: clone with no new stack behaves like fork; the caller's contract covers the
    // child.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as i32)
    }
}

/// In a fork that does not exec: closes every descriptor above stderr but those in `keep`,
/// by syscalls only (`close_range` over the gaps), so that the copy holds nothing of what
/// this process's other threads have open (a pipe whose end of file one of them waits for).
///
/// # Safety
/// Only in a forked child, before it uses any descriptor it does not keep.
pub unsafe fn close_fds_but(keep: &[libc::c_int]) {
    let mut kept = [libc::c_int::MAX; 8];
    let n = keep.len().min(kept.len());
    kept[..n].copy_from_slice(&keep[..n]);
    kept[..n].sort_unstable();
    let mut from: libc::c_uint = 3;
    for &fd in &kept[..n] {
        if fd < 3 {
            continue;
        }
        let fd = fd as libc::c_uint;
        if fd > from {
            // SAFETY: close_range takes plain integers and touches no memory.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0u32) };
}

impl Forked {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits for it to exit and reaps it.
    pub fn wait(self) -> io::Result<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let mut st: libc::c_int = 0;
        loop {
            // SAFETY: waitpid on our own child, into stack memory.
            let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if r == self.pid {
                owned().remove(&self.pid);
                return Ok(ExitStatus::from_raw(st));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                owned().remove(&self.pid);
                return Err(e);
            }
        }
    }
}

fn my_pid() -> i32 {
    std::process::id() as i32
}

/// Orphans of this process's descendants are re-parented to it, not to init. Returns
/// false if the kernel refused (then escaped processes are beyond [`kill_orphans`]).
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// True when this process is a child subreaper.
pub fn is_subreaper() -> bool {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer, which is valid.
    let ok = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) };
    ok == 0 && flag != 0
}

/// One line of /proc/<pid>/stat, the fields used here.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    state: char,
}

impl Proc {
    fn live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

fn stat(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgrp,
        state,
    })
}

/// Every process, from /proc.
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(stat)
        .collect()
}

fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|p| p.live())
}

/// Live members of process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && p.live())
        .map(|p| p.pid)
        .collect()
}

/// A pidfd of `pid` (readable once the process exits); `None` where the kernel has none.
fn pidfd_of(pid: libc::pid_t) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags; on success the fd is ours alone.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    // SAFETY: fd is a fresh descriptor returned to us above.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Waits up to `limit` for `fd` to become readable (or for a signal).
fn wait_readable(fd: &std::os::fd::OwnedFd, limit: Duration) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: one pollfd we own, for the call's duration.
    unsafe {
        libc::poll(&mut pfd, 1, ms);
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid or negative group id; no memory involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid on one zombie child of ours, non-blocking; status is a valid int.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// [`kill_orphans`] passes, run one at a time: `started` counts those begun, `done` is the
/// number of the last one finished, `killed` what it killed, `last` when the last began.
struct Passes {
    started: u64,
    done: u64,
    killed: Vec<i32>,
    last: Option<Instant>,
}

static PASSES: Mutex<Passes> = Mutex::new(Passes {
    started: 0,
    done: 0,
    killed: Vec::new(),
    last: None,
});
/// Passes of [`kill_orphans`] begin at least this far apart.
const PASS_GAP: Duration = Duration::from_millis(25);
static PASS: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves the data consistent: a panic in one changes nothing.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every adopted child of this subreaper and all its descendants with SIGKILL (they
/// left their group, so no grace is owed), and reaps them. Children a `ProcessGroup` owns,
/// and everything below them, are left alone. Returns the pids killed by the pass that
/// served this call.
///
/// A pass reads all of `/proc`, so callers at once share one: a caller is served by the
/// first pass that *starts* after it asked (whatever it wants gone was adopted by then),
/// and passes begin at least `PASS_GAP` apart. A lone caller waits for nothing; 200
/// steps ending within a second share a few dozen scans instead of making 200.
pub fn kill_orphans() -> Vec<i32> {
    if !SPAWNED.load(Ordering::SeqCst) || !is_subreaper() {
        return Vec::new();
    }
    let asked = lock(&PASSES).started;
    let _one_at_a_time = lock(&PASS);
    let last = {
        let p = lock(&PASSES);
        if p.done > asked {
            // A pass that started after we asked ended while we waited for our turn.
            return p.killed.clone();
        }
        p.last
    };
    // Who asks while this one waits is served by it.
    if let Some(wait) = last.and_then(|t| PASS_GAP.checked_sub(t.elapsed())) {
        std::thread::sleep(wait);
    }
    let number = {
        let mut p = lock(&PASSES);
        p.started += 1;
        p.last = Some(Instant::now());
        p.started
    };
    let killed = kill_orphans_pass();
    let mut p = lock(&PASSES);
    p.done = number;
    p.killed = killed.clone();
    killed
}

fn kill_orphans_pass() -> Vec<i32> {
    let me = my_pid();
    let mut killed: Vec<i32> = Vec::new();
    for _ in 0..KILL_ROUNDS {
        // Held for the round: a child spawned meanwhile is registered before it is seen.
        let owned = owned();
        let procs = processes();
        let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
        for p in &procs {
            children.entry(p.ppid).or_default().push(p);
        }
        let adopted: Vec<&Proc> = children
            .get(&me)
            .into_iter()
            .flatten()
            .filter(|p| !owned.contains(&p.pid))
            .copied()
            .collect();
        if adopted.is_empty() {
            break;
        }
        // The adopted children and their descendants; SIGKILL cannot be caught, so a
        // process seen here forks no more once signalled, and what it forked before is
        // found in the next round (re-parented to us when its parent dies).
        let mut todo = adopted.clone();
        while let Some(p) = todo.pop() {
            if p.ppid == me && !p.live() {
                reap(p.pid);
                continue;
            }
            if p.live() {
                signal(p.pid, libc::SIGKILL);
                if !killed.contains(&p.pid) {
                    killed.push(p.pid);
                }
            }
            todo.extend(children.get(&p.pid).into_iter().flatten().copied());
        }
        drop(owned);
        std::thread::sleep(KILL_ROUND_PAUSE);
    }
    if !killed.is_empty() {
        tracing::debug!(pids = ?killed, "killed processes that escaped their group");
    }
    killed
}

/// `SIGTERM`, `SIGKILL`, … for the signals awf reports; `unknown signal` otherwise.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGPIPE => "SIGPIPE",
        _ => "unknown signal",
    }
}

/// Registers, as a `pre_exec` step of `cmd`, SIGKILL for the spawned process when the
/// spawning thread ends (PR_SET_PDEATHSIG), checked against the parent dying before it was
/// armed; with `subreaper`, the process also holds on to its own orphans.
fn arm_parent_death(cmd: &mut Command, subreaper: bool) {
    let parent = my_pid();
    // SAFETY: the closure only makes syscalls (prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                || (subreaper && libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
            {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the signal was armed: nobody will wait for us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Spawns `cmd` as the leader of a new process group that the kernel kills when awf dies
/// (by SIGKILL too), whichever thread asks. PR_SET_PDEATHSIG fires when the spawning
/// *thread* ends, not the process: the spawn is made by one thread that lives as long as
/// the process (for children that outlive the thread that wanted them, as plugins do).
///
/// `after_tie` adds the `pre_exec` steps meant for the process below the spawned one (a
/// [`crate::confine::Jail`] forks there), after the death signal is armed.
pub fn spawn_dying_with_awf(
    mut cmd: Command,
    after_tie: impl FnOnce(&mut Command),
) -> io::Result<ProcessGroup> {
    arm_parent_death(&mut cmd, false);
    after_tie(&mut cmd);
    on_lasting_thread(move || ProcessGroup::spawn(&mut cmd))?
}

/// Runs `f` on a thread of awf's that lives as long as the process, and returns what it
/// returns: a child forked there with PR_SET_PDEATHSIG dies with awf, not with the thread
/// that asked for it.
pub fn on_lasting_thread<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> io::Result<R> {
    type Job = Box<dyn FnOnce() + Send>;
    static THREAD: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let thread = THREAD.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("awf-spawner".into())
            .spawn(move || {
                // Never ends: the sender lives in the static.
                for job in rx {
                    job();
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    let gone = || io::Error::other("the spawner thread is gone");
    thread
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(Box::new(move || {
            let _ = tx.send(f());
        }))
        .map_err(|_| gone())?;
    rx.recv().map_err(|_| gone())
}

/// How a supervised group leader ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

/// A child started as the leader of its own process group, reaped by this value only.
pub struct ProcessGroup {
    /// The leader's pid (our child, unreaped until `status` is set).
    pid: i32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    pgid: i32,
    status: Option<ExitStatus>,
    /// What the leader and the descendants it reaped used, once reaped.
    usage: Option<Usage>,
}

/// What a process and the descendants it waited for used (getrusage's children figures).
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User and system CPU time.
    pub cpu_ms: u64,
    /// The largest resident set of any one of them.
    pub max_rss_bytes: u64,
}

impl ProcessGroup {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> io::Result<ProcessGroup> {
        Self::start(cmd)
    }

    /// Ties the process `cmd` spawns to the calling thread and lets it hold on to its own
    /// descendants: it gets SIGKILL when that thread ends (PR_SET_PDEATHSIG: the thread
    /// that runs a command waits for it, so this fires when awf dies, by SIGKILL too), and
    /// it is a subreaper, so that while it runs every process it started stays below it,
    /// whatever other commands of this process do. The settings survive the exec. Call it
    /// before any other `pre_exec` step that may fork (a [`crate::confine::Jail`]): it is
    /// meant for the spawned process itself.
    pub fn tie(cmd: &mut Command) {
        arm_parent_death(cmd, true);
    }

    /// Ties the process `cmd` spawns to the calling thread, as [`ProcessGroup::tie`], but
    /// without making it a subreaper: for the commands `awf run` supervises itself (steps,
    /// agent CLIs), whose leftovers awf's own subreaper collects. A SIGKILL of `awf run`
    /// then takes the agent CLI with it (its `awf mcp-serve` ends with its input) rather
    /// than leaving it to call the model on its own.
    pub fn die_with_thread(cmd: &mut Command) {
        arm_parent_death(cmd, false);
    }

    fn start(cmd: &mut Command) -> io::Result<ProcessGroup> {
        cmd.process_group(0);
        SPAWNED.store(true, Ordering::SeqCst);
        // Registered under the lock before anyone can see the child as an orphan.
        let mut owned = owned();
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        owned.insert(pid);
        // std's Child does nothing to the process when dropped: the group is ours now.
        Ok(ProcessGroup {
            pid,
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            pgid: pid,
            status: None,
            usage: None,
        })
    }

    /// Forks the leader of a new process group, tied as [`ProcessGroup::tie`] ties a
    /// spawned one (SIGKILL when the forking thread ends; a subreaper), which runs `child`
    /// and exits with what it returns. `child` must only make syscalls (this process may
    /// have other threads, whose locks the copy must not take) and should end in an exec;
    /// `stdout` and `stderr` are the read ends of the pipes it writes to.
    pub fn fork(
        stdout: std::os::fd::OwnedFd,
        stderr: std::os::fd::OwnedFd,
        mut child: impl FnMut() -> i32,
    ) -> io::Result<ProcessGroup> {
        SPAWNED.store(true, Ordering::SeqCst);
        let parent = my_pid();
        // Registered under the lock before anyone can see the child as an orphan.
        let mut owned = owned();
        let pid = raw_fork()?;
        if pid == 0 {
            // SAFETY: syscalls on stack memory, then the closure, then _exit.
            unsafe {
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                if libc::setpgid(0, 0) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                    || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
                    || libc::getppid() != parent
                {
                    libc::_exit(127);
                }
                libc::_exit(child());
            }
        }
        owned.insert(pid);
        // SAFETY: setpgid on our own child (also done in the child: whichever comes first).
        unsafe { libc::setpgid(pid, pid) };
        Ok(ProcessGroup {
            pid,
            stdin: None,
            stdout: Some(ChildStdout::from(stdout)),
            stderr: Some(ChildStderr::from(stderr)),
            pgid: pid,
            status: None,
            usage: None,
        })
    }

    /// Starts `l` as [`ProcessGroup::spawn`] starts a command with
    /// [`ProcessGroup::die_with_thread`], without copying awf's memory (see [`Launch`]):
    /// stdin /dev/null, stdout and stderr piped.
    pub fn launch(l: &Launch) -> io::Result<ProcessGroup> {
        SPAWNED.store(true, Ordering::SeqCst);
        let mut owned = owned();
        let (pid, out, err) = launch::start(l)?;
        owned.insert(pid);
        Ok(ProcessGroup {
            pid,
            stdin: None,
            stdout: Some(ChildStdout::from(out)),
            stderr: Some(ChildStderr::from(err)),
            pgid: pid,
            status: None,
            usage: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The group's id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    fn ended(&mut self, status: ExitStatus) -> ExitStatus {
        self.status = Some(status);
        owned().remove(&self.pgid);
        status
    }

    /// The leader's exit status if it exited (reaped now), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(false)
    }

    /// Waits for the leader's exit and reaps it.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        Ok(self.reap(true)?.expect("a blocking wait4 returns a status"))
    }

    /// Reaps the leader by wait4, which also gives what it used.
    fn reap(&mut self, block: bool) -> io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let pid = self.pid;
        let flags = if block { 0 } else { libc::WNOHANG };
        loop {
            let mut st: libc::c_int = 0;
            // SAFETY: wait4 on our own unreaped child, into stack memory.
            let (r, ru) = unsafe {
                let mut ru: libc::rusage = std::mem::zeroed();
                (libc::wait4(pid, &mut st, flags, &mut ru), ru)
            };
            if r == pid {
                let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
                self.usage = Some(Usage {
                    cpu_ms: ms(ru.ru_utime) + ms(ru.ru_stime),
                    max_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
                });
                return Ok(Some(self.ended(ExitStatus::from_raw(st))));
            }
            if r == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// What the leader and the descendants it reaped used, once it was reaped.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Waits up to `limit` for the leader's exit; `None` if it still runs.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            match self.try_wait() {
                Ok(Some(status)) => return Some(status),
                Err(_) => return None,
                Ok(None) if Instant::now() >= until => return None,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Waits until the leader exits, `deadline` passes or `interrupt` (asked about every
    /// `poll`) says stop. The exit is noticed at once, not at the next poll: the wait is a
    /// poll(2) on a pidfd of the leader (no thread). Does not kill: the caller ends the
    /// group.
    pub fn supervise(
        &mut self,
        deadline: Option<Instant>,
        poll: Duration,
        interrupt: &mut dyn FnMut() -> bool,
    ) -> io::Result<Ended> {
        // The leader is our unreaped child, so the pid is its own until try_wait reaps it.
        let pidfd = pidfd_of(self.pid);
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Ended::Exited(status));
            }
            if interrupt() {
                return Ok(Ended::Interrupted);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Ended::TimedOut);
            }
            let wait = deadline.map_or(poll, |d| poll.min(d - now));
            match &pidfd {
                Some(fd) => wait_readable(fd, wait),
                None => std::thread::sleep(wait),
            }
        }
    }

    /// Sends `sig` to the whole group.
    pub fn signal(&self, sig: i32) {
        signal(-self.pgid, sig);
    }

    /// Ends the group with grace: SIGTERM, up to `grace` for every member to go, then
    /// SIGKILL; the leader is reaped. Returns true when SIGKILL was needed.
    pub fn terminate(&mut self, grace: Duration) -> bool {
        !terminate(Some(self), &[], grace).is_empty()
    }

    /// SIGKILL to the group (and to the leader, should it have changed group), then reaps
    /// the leader.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            self.signal(libc::SIGKILL);
            // SAFETY: a signal to our own unreaped child (its pid is still its own).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.wait();
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill();
        }
        // Reaping failed (it never does for our own child): do not keep the pid owned.
        owned().remove(&self.pgid);
    }
}

/// True while a member of `g`'s group may be alive: its leader runs, or, once the members
/// adopted here are reaped, the kernel still finds the group (a member elsewhere, or a
/// zombie its parent has not reaped yet).
fn group_left(g: &mut ProcessGroup) -> bool {
    if !matches!(g.try_wait(), Ok(Some(_))) {
        return true;
    }
    reap_adopted_in(g.pgid);
    // SAFETY: kill(2) with signal 0 only checks; no memory involved.
    let r = unsafe { libc::kill(-g.pgid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Reaps this process's exited children in group `pgid` that no `ProcessGroup` owns: the
/// members re-parented here. Asked once the group's leader is reaped; an owned child is
/// never in another's group (each leads its own), and is left alone should one be found.
fn reap_adopted_in(pgid: i32) {
    loop {
        // SAFETY: waitid writes into a zeroed siginfo_t we own; WNOWAIT only looks.
        let pid = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            if libc::waitid(libc::P_PGID, pgid as libc::id_t, &mut info, flags) != 0 {
                return;
            }
            info.si_pid()
        };
        if pid <= 0 || owned().contains(&pid) {
            return;
        }
        reap(pid);
    }
}

/// Reaps `pid` if it is an adopted child that exited (a stray server re-parented here).
fn reap_if_adopted(pid: i32) {
    if !owned().contains(&pid) {
        reap(pid);
    }
}

/// Ends a group and some extra pids: SIGTERM, up to `grace` for them to go, then SIGKILL.
/// The group's leader is reaped, and so are the adopted members and extras that exit
/// meanwhile. Returns the pids that needed SIGKILL.
pub fn terminate(group: Option<&mut ProcessGroup>, extra: &[i32], grace: Duration) -> Vec<i32> {
    let mut group = group;
    let pgid = group.as_ref().map(|g| g.pgid);
    let mut left = || -> bool {
        let members = group.as_mut().is_some_and(|g| group_left(g));
        let extras = extra.iter().fold(false, |any, p| {
            reap_if_adopted(*p);
            alive(*p) || any
        });
        members || extras
    };
    if !left() {
        return Vec::new();
    }
    if let Some(g) = pgid {
        signal(-g, libc::SIGTERM);
    }
    for p in extra {
        signal(*p, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    let mut waiting = left();
    while waiting && Instant::now() < end {
        std::thread::sleep(POLL);
        waiting = left();
    }
    // Past the grace only: which processes live (a zombie left for its parent does not).
    let stubborn = || -> Vec<i32> {
        let mut v: Vec<i32> = pgid.map(group_members).unwrap_or_default();
        for p in extra {
            if alive(*p) && !v.contains(p) {
                v.push(*p);
            }
        }
        v
    };
    let killed = if waiting { stubborn() } else { Vec::new() };
    if !killed.is_empty() {
        if let Some(g) = pgid {
            signal(-g, libc::SIGKILL);
        }
        for p in &killed {
            signal(*p, libc::SIGKILL);
        }
        for _ in 0..200 {
            left();
            if stubborn().is_empty() {
                break;
            }
            std::thread::sleep(POLL);
        }
    }
    if let Some(g) = group {
        let _ = g.wait();
        reap_adopted_in(g.pgid);
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched(l: &Launch) -> (ExitStatus, String, String) {
        use std::io::Read;
        let mut g = ProcessGroup::launch(l).unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        g.take_stdout().unwrap().read_to_string(&mut out).unwrap();
        g.take_stderr().unwrap().read_to_string(&mut err).unwrap();
        (g.wait().unwrap(), out, err)
    }

    #[test]
    fn a_launched_command_gets_its_args_env_dir_group_and_kept_descriptors() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir();
        let kept = std::fs::File::open("/proc/self/stat").unwrap();
        let fd = kept.as_raw_fd();
        let mut l = Launch::new("/bin/sh");
        l.arg("-c")
            .arg(format!(
                "echo \"$0 $AWF_LAUNCH_TEST\"; pwd; [ -e /proc/self/fd/{fd} ] && echo kept; \
                 ps -o pgid= -p $$ | tr -d ' '; echo $$; echo err >&2; exit 3"
            ))
            .env("AWF_LAUNCH_TEST", "value")
            .current_dir(&dir)
            .keep_fd(fd);
        let (status, out, err) = launched(&l);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(status.code(), Some(3), "{out}{err}");
        assert_eq!(lines[0], "/bin/sh value");
        assert_eq!(std::path::Path::new(lines[1]), dir.canonicalize().unwrap());
        assert_eq!(lines[2], "kept");
        // The leader of its own group.
        assert_eq!(lines[3], lines[4], "{out}");
        assert_eq!(err, "err\n");
    }

    #[test]
    fn a_launched_command_has_sigpipe_and_no_blocked_signal() {
        // `yes | head -1` ends by SIGPIPE (awf ignores it; the command must not).
        let mut l = Launch::new("/bin/sh");
        l.arg("-c")
            .arg("yes | head -1; grep -E '^Sig(Blk|Ign)' /proc/self/status");
        let (status, out, _) = launched(&l);
        assert!(status.success(), "{out}");
        assert!(out.starts_with("y\n"), "{out}");
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error_naming_why() {
        let l = Launch::new("/nonexistent/program");
        let Err(e) = ProcessGroup::launch(&l) else {
            panic!("a missing program was started")
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        let mut l = Launch::new("/bin/sh");
        l.current_dir("/nonexistent/dir");
        let Err(e) = ProcessGroup::launch(&l) else {
            panic!("started in a missing directory")
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    }
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    #[test]
    fn a_group_is_reaped_and_disowned_once_it_exits() {
        let mut g = ProcessGroup::spawn(&mut sh("exit 7")).unwrap();
        let pid = g.pgid();
        assert!(owned().contains(&pid));
        assert_eq!(g.wait().unwrap().code(), Some(7));
        assert!(!owned().contains(&pid));
        // Cached: asking again does not wait on a pid that may now be someone else's.
        assert_eq!(g.try_wait().unwrap().unwrap().code(), Some(7));
    }

    #[test]
    fn terminate_uses_sigkill_only_for_a_group_that_ignores_sigterm() {
        let mut polite = ProcessGroup::spawn(&mut sh("sleep 1000")).unwrap();
        assert!(!polite.terminate(GRACE));
        assert_eq!(
            polite.try_wait().unwrap().unwrap().signal(),
            Some(libc::SIGTERM)
        );

        let mut c = sh("trap '' TERM; echo ready; while :; do sleep 0.05; done");
        c.stdout(Stdio::piped());
        let mut stubborn = ProcessGroup::spawn(&mut c).unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(stubborn.take_stdout().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(stubborn.terminate(Duration::from_millis(200)));
        assert_eq!(
            stubborn.try_wait().unwrap().unwrap().signal(),
            Some(libc::SIGKILL)
        );
    }

    #[test]
    fn drop_kills_the_whole_group() {
        let mut c = sh("sleep 1000 & echo $!; wait");
        c.stdout(Stdio::piped());
        let mut g = ProcessGroup::spawn(&mut c).unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(g.take_stdout().unwrap()),
            &mut line,
        )
        .unwrap();
        let member: i32 = line.trim().parse().unwrap();
        drop(g);
        // The member got SIGKILL with its group; it may wait as a zombie for init.
        let end = Instant::now() + Duration::from_secs(20);
        while alive(member) && Instant::now() < end {
            std::thread::sleep(POLL);
        }
        assert!(!alive(member));
    }

    #[test]
    fn supervise_reports_exit_timeout_and_interrupt() {
        let mut g = ProcessGroup::spawn(&mut sh("exit 3")).unwrap();
        let ended = g.supervise(None, Duration::from_secs(3600), &mut || false);
        assert!(matches!(ended, Ok(Ended::Exited(s)) if s.code() == Some(3)));

        let mut g = ProcessGroup::spawn(&mut sh("sleep 1000")).unwrap();
        let past = Instant::now();
        assert!(matches!(
            g.supervise(Some(past), POLL, &mut || false),
            Ok(Ended::TimedOut)
        ));
        assert!(matches!(
            g.supervise(None, POLL, &mut || true),
            Ok(Ended::Interrupted)
        ));
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGABRT), "SIGABRT");
        assert_eq!(signal_name(64), "unknown signal");
    }
}
