//! A cgroup per call, below the cgroup awf was started in, where awf may make one: its
//! memory limit (the kernel's OOM killer ends the call past it) and its `pids.max` (the
//! kernel counts threads). How the home is found ([`Home::find`], once per process, from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`):
//!
//! - cgroup v2: the cgroup awf runs in, when it offers the `memory` and `pids` controllers
//!   and awf is alone in it (a systemd scope made with `systemd-run --user --scope -p
//!   Delegate=yes`, a container's own cgroup): awf moves itself into a leaf `awf.leaf` below
//!   it and turns both controllers on for its children, as the rule that a cgroup with
//!   processes has no child with controllers requires. An awf started inside such a leaf
//!   (the `awf mcp-serve` of an `awf run`) uses the leaf's parent;
//! - cgroup v1: the `memory` and `pids` hierarchies' cgroups of awf, where awf may make a
//!   directory in both.
//!
//! Anything else (no write access, a cgroup shared with other processes, a controller
//! missing) is said in one line, and the bounds fall back to rlimits
//! ([`super::bounds::Mechanism`]). A call's cgroup is named `call-<awf pid>-<n>`; one left by
//! a killed awf is removed by the next one, before it makes its first.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};

#[derive(Debug, Clone)]
pub enum Home {
    /// The v2 cgroup below which calls get theirs.
    V2(PathBuf),
    /// The v1 memory and pids cgroups below which calls get theirs.
    V1 { memory: PathBuf, pids: PathBuf },
}

/// What a call's cgroup saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    /// The OOM killer ended a process of the call (its memory limit).
    pub oom_killed: bool,
    /// The call's peak memory over all its processes, where the kernel keeps it.
    pub peak_bytes: Option<u64>,
}

const LEAF: &str = "awf.leaf";

fn read(p: &Path) -> io::Result<String> {
    std::fs::read_to_string(p)
}

fn write(p: &Path, v: &str) -> io::Result<()> {
    std::fs::write(p, v)
}

/// (mount point, fstype, super options) of each cgroup mount of this process.
fn cgroup_mounts() -> Vec<(PathBuf, String, String)> {
    let Ok(info) = read(Path::new("/proc/self/mountinfo")) else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let _source = r.next()?;
            let opts = r.next().unwrap_or("");
            fstype
                .starts_with("cgroup")
                .then(|| (PathBuf::from(mount), fstype.to_string(), opts.to_string()))
        })
        .collect()
}

fn below(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

fn lists(text: &str, word: &str) -> bool {
    text.split_whitespace().any(|w| w == word)
}

impl Home {
    /// The home of this process's calls' cgroups, or why there is none.
    pub fn find() -> Result<Home, String> {
        let own = read(Path::new("/proc/self/cgroup"))
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = cgroup_mounts();
        let mut why = Vec::new();
        if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::"))
            && let Some((mount, _, _)) = mounts.iter().find(|(_, t, _)| t == "cgroup2")
        {
            match Self::v2(&below(mount, path)) {
                Ok(home) => return Ok(home),
                Err(e) => why.push(e),
            }
        }
        let v1 = |controller: &str| -> Option<PathBuf> {
            let path = own.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, names, path) = (f.next()?, f.next()?, f.next()?);
                names.split(',').any(|n| n == controller).then_some(path)
            })?;
            let (mount, _, _) = mounts
                .iter()
                .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|w| w == controller))?;
            Some(below(mount, path))
        };
        match (v1("memory"), v1("pids")) {
            (Some(memory), Some(pids)) => match (Self::writable(&memory), Self::writable(&pids)) {
                (Ok(()), Ok(())) => return Ok(Home::V1 { memory, pids }),
                (Err(e), _) | (_, Err(e)) => why.push(e),
            },
            (None, None) if why.is_empty() => why.push("no cgroup hierarchy is mounted".into()),
            (m, _) if why.is_empty() => why.push(format!(
                "cgroup v1 lacks the {} controller",
                if m.is_none() { "memory" } else { "pids" }
            )),
            _ => {}
        }
        Err(why.join("; "))
    }

    fn writable(dir: &Path) -> Result<(), String> {
        let probe = dir.join(format!("awf-probe-{}", std::process::id()));
        std::fs::create_dir(&probe)
            .and_then(|()| std::fs::remove_dir(&probe))
            .map_err(|e| {
                format!(
                    "awf may not make a cgroup in {} ({e}); start awf in a delegated cgroup, e.g. \
                     `systemd-run --user --scope -p Delegate=yes awf ...`",
                    dir.display()
                )
            })
    }

    fn v2(dir: &Path) -> Result<Home, String> {
        let controllers = read(&dir.join("cgroup.controllers")).unwrap_or_default();
        if !lists(&controllers, "memory") || !lists(&controllers, "pids") {
            return Err(format!(
                "the cgroup v2 {} offers no memory and pids controllers (found: {:?})",
                dir.display(),
                controllers.trim()
            ));
        }
        let enabled = |d: &Path| {
            read(&d.join("cgroup.subtree_control"))
                .is_ok_and(|s| lists(&s, "memory") && lists(&s, "pids"))
        };
        // Inside the leaf of an awf above: its parent is the home.
        if dir.file_name().is_some_and(|n| n == LEAF)
            && let Some(parent) = dir.parent()
            && enabled(parent)
        {
            return Ok(Home::V2(parent.to_path_buf()));
        }
        if enabled(dir) {
            Self::writable(dir)?;
            return Ok(Home::V2(dir.to_path_buf()));
        }
        let procs = read(&dir.join("cgroup.procs")).unwrap_or_default();
        let me = std::process::id().to_string();
        if procs.split_whitespace().any(|p| p != me) {
            return Err(format!(
                "the cgroup v2 {} holds other processes besides awf, so awf cannot turn its \
                 controllers on; start awf in a cgroup of its own, e.g. `systemd-run --user \
                 --scope -p Delegate=yes awf ...`",
                dir.display()
            ));
        }
        let leaf = dir.join(LEAF);
        let moved = std::fs::create_dir(&leaf)
            .or_else(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .and_then(|()| write(&leaf.join("cgroup.procs"), "0"))
            .and_then(|()| write(&dir.join("cgroup.subtree_control"), "+memory +pids"));
        if let Err(e) = moved {
            // Back where it was, as far as it can be.
            let _ = write(&dir.join("cgroup.procs"), "0");
            let _ = std::fs::remove_dir(&leaf);
            return Err(format!(
                "cannot turn on the memory and pids controllers below {} ({e}); start awf in \
                 a delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes awf ...`",
                dir.display()
            ));
        }
        Ok(Home::V2(dir.to_path_buf()))
    }

    pub fn describe(&self) -> String {
        match self {
            Home::V2(d) => format!("cgroup v2 below {}", d.display()),
            Home::V1 { memory, .. } => format!("cgroup v1 below {}", memory.display()),
        }
    }
}

impl Home {
    /// Removes the call cgroups that awf processes now gone left here (once per process,
    /// before its first call cgroup is made: off the way to a server's start).
    fn sweep_once(&self) {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| match self {
            Home::V2(d) => sweep(d),
            Home::V1 { memory, pids } => {
                sweep(memory);
                sweep(pids);
            }
        });
    }
}

/// Removes the call cgroups of awf processes that are gone (empty by then: their processes
/// died with them).
fn sweep(home: &Path) {
    let Ok(entries) = std::fs::read_dir(home) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("call-"))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the pid exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// A session's call cgroups, made once each and used again: making and removing one per
/// call costs more than the rest of a call's jail (some 0.6 ms under cgroup v1), taking one
/// from here a few small reads and writes. Each holds `memory` bytes and `processes` tasks
/// at most; they go with the pool (the session's end).
///
/// Under cgroup v1 each also keeps a thread of awf's inside it (its `Spawner`), which
/// forks the call's process there: a process moved into a cgroup (a write to
/// `cgroup.procs`) waits for the kernel's cgroup lock to change hands, which takes an RCU
/// grace period when no move came shortly before — 7 to 13 ms for a call that follows a
/// pause, as an agent's calls do. A child is born in its forking thread's cgroups, so the
/// thread moves once, when the cgroup is made, and no call pays for it again. (v1 lets one
/// thread of a process sit in another cgroup; v2 does not, for memory: there the child moves
/// itself.)
#[derive(Debug)]
pub struct Pool {
    home: &'static Home,
    memory: u64,
    processes: u32,
    free: Mutex<Vec<Slot>>,
}

/// The cgroup (v2), or the memory and pids ones (v1), of one call at a time.
#[derive(Debug)]
struct Slot {
    dirs: Vec<PathBuf>,
    v2: bool,
    /// `cgroup.procs` of each dir, for the child to join.
    procs: Vec<CString>,
    /// The thread inside it that forks the call's process (v1), if it could move there.
    spawner: Option<Spawner>,
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread of awf's that lives in a call cgroup (cgroup v1, which moves threads one by
/// one through `tasks`) and runs the jobs handed to it: what it forks is born in the
/// cgroup. It ends, leaving the cgroup, when the slot goes. It is a task of the cgroup
/// (`pids.max` counts it: the pool adds one) but not a process of it: the OOM killer looks
/// at thread-group leaders only, and its memory is charged to awf's own cgroup (a
/// process's pages go to the cgroup of the process, its leader's).
#[derive(Debug)]
struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spawner {
    /// A thread moved into each of `dirs` (their `tasks` files), or why it could not be.
    fn start(dirs: &[PathBuf]) -> io::Result<Spawner> {
        let tasks: Vec<PathBuf> = dirs.iter().map(|d| d.join("tasks")).collect();
        let (moved_tx, moved_rx) = mpsc::channel::<io::Result<()>>();
        let (jobs, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("awf-cgroup".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                // "0" in `tasks` is the writing thread.
                let moved = tasks.iter().try_for_each(|t| write(t, "0"));
                let ok = moved.is_ok();
                let _ = moved_tx.send(moved);
                if ok {
                    for job in rx {
                        job();
                    }
                }
            })?;
        let spawner = Spawner {
            jobs: Some(jobs),
            thread: Some(thread),
        };
        match moved_rx.recv() {
            Ok(Ok(())) => Ok(spawner),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other(
                "the cgroup's thread ended before it moved",
            )),
        }
    }

    /// Runs `f` on the thread in the cgroup; None if the thread is gone.
    fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .as_ref()?
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .ok()?;
        rx.recv().ok()
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // Its channel closed, the thread ends; once joined, it has left the cgroup.
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One call's cgroup, back to its pool at [`CallCgroup::finish`] (or when dropped).
#[derive(Debug)]
pub struct CallCgroup {
    slot: Option<Slot>,
    pool: Arc<Pool>,
    /// The OOM kills the cgroup had seen before the call.
    oom_before: u64,
    /// Its peak was reset for the call (else the processes' own peak is the figure).
    peak_reset: bool,
}

impl Pool {
    pub fn new(home: &'static Home, memory: u64, processes: u32) -> Arc<Pool> {
        Arc::new(Pool {
            home,
            memory,
            processes,
            free: Mutex::new(Vec::new()),
        })
    }

    /// A cgroup for one call: a free one, else a new one.
    pub fn take(self: &Arc<Self>) -> io::Result<CallCgroup> {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let slot = match free {
            Some(s) => s,
            None => self.make()?,
        };
        let peak_reset = write(&slot.dirs[0].join(slot.peak_file()), "0").is_ok();
        Ok(CallCgroup {
            oom_before: slot.oom_kills(),
            slot: Some(slot),
            pool: self.clone(),
            peak_reset,
        })
    }

    fn make(&self) -> io::Result<Slot> {
        static N: AtomicU32 = AtomicU32::new(0);
        self.home.sweep_once();
        let name = format!(
            "call-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let (dirs, v2) = match self.home {
            Home::V2(d) => (vec![d.join(&name)], true),
            Home::V1 { memory, pids } => (vec![memory.join(&name), pids.join(&name)], false),
        };
        let mut slot = Slot {
            dirs: Vec::new(),
            v2,
            procs: Vec::new(),
            spawner: None,
        };
        for d in &dirs {
            if let Err(e) = std::fs::create_dir(d) {
                slot.remove();
                return Err(e);
            }
            slot.dirs.push(d.clone());
            slot.procs.push(
                CString::new(d.join("cgroup.procs").into_os_string().into_encoded_bytes())
                    .map_err(io::Error::other)?,
            );
        }
        let mem = self.memory.to_string();
        // Under v1 the spawner thread is a task of the cgroup: one more.
        let pids = (self.processes + u32::from(!v2)).to_string();
        let set = if v2 {
            let d = &dirs[0];
            // No swap: past the limit the call ends rather than the machine slowing down;
            // and the whole call goes, not one process of it.
            let _ = write(&d.join("memory.swap.max"), "0");
            let _ = write(&d.join("memory.oom.group"), "1");
            write(&d.join("memory.max"), &mem).and_then(|()| write(&d.join("pids.max"), &pids))
        } else {
            write(&dirs[0].join("memory.limit_in_bytes"), &mem)
                .map(|()| {
                    let _ = write(&dirs[0].join("memory.memsw.limit_in_bytes"), &mem);
                })
                .and_then(|()| write(&dirs[1].join("pids.max"), &pids))
        };
        if let Err(e) = set {
            slot.remove();
            return Err(e);
        }
        if !v2 {
            // Without it the child moves itself, as under v2: slower, as safe.
            match Spawner::start(&slot.dirs) {
                Ok(s) => slot.spawner = Some(s),
                Err(e) => {
                    tracing::debug!(error = %e, "no thread in the call's cgroup: the child moves itself")
                }
            }
        }
        Ok(slot)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for mut s in self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            s.remove();
        }
    }
}

impl Slot {
    fn peak_file(&self) -> &'static str {
        if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        }
    }

    fn count(&self, file: &str, key: &str) -> u64 {
        read(&self.dirs[0].join(file))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse().ok())?
                })
            })
            .unwrap_or(0)
    }

    /// The OOM kills the cgroup saw so far.
    fn oom_kills(&self) -> u64 {
        if self.v2 {
            self.count("memory.events", "oom_kill") + self.count("memory.events", "oom_group_kill")
        } else {
            self.count("memory.oom_control", "oom_kill")
        }
    }

    /// Kills every process left in it; true once none is (awf's own, listed while its
    /// spawner thread is inside, is not one).
    fn empty(&self) -> bool {
        let me = std::process::id() as i32;
        for _ in 0..200 {
            let mut left = false;
            for d in &self.dirs {
                if self.v2 {
                    let _ = write(&d.join("cgroup.kill"), "1");
                }
                for pid in read(&d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .filter(|&p| p != me)
                {
                    left = true;
                    // SAFETY: a plain signal to a pid in the call's own cgroup.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            if !left {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    fn remove(&mut self) {
        if !self.empty() {
            tracing::warn!(dirs = ?self.dirs, "a call's cgroup still holds processes");
        }
        // The thread leaves first (it ends); the kernel may list an ended task a moment
        // longer, hence the few tries.
        self.spawner.take();
        for d in self.dirs.drain(..) {
            for _ in 0..50 {
                match std::fs::remove_dir(&d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(2))
                    }
                    _ => break,
                }
            }
        }
    }
}

impl CallCgroup {
    /// The `cgroup.procs` files the child writes itself into: none when its process is
    /// started by [`CallCgroup::spawn_inside`] from a thread already in the cgroup.
    pub fn procs(&self) -> &[CString] {
        match &self.slot {
            Some(s) if s.spawner.is_none() => &s.procs,
            _ => &[],
        }
    }

    /// True when [`CallCgroup::spawn_inside`] forks on the cgroup's own thread.
    pub fn forks_inside(&self) -> bool {
        self.slot.as_ref().is_some_and(|s| s.spawner.is_some())
    }

    /// Runs `spawn` (which forks the call's process) where its child is born inside the
    /// cgroup: on the cgroup's own thread where it has one, else here (and the child joins
    /// through [`CallCgroup::procs`]). The thread that forks is the one whose end
    /// PR_SET_PDEATHSIG follows: the cgroup's lives until the session ends.
    pub fn spawn_inside<R: Send + 'static>(
        &self,
        spawn: impl FnOnce() -> R + Send + 'static,
    ) -> io::Result<R> {
        match self.slot.as_ref().and_then(|s| s.spawner.as_ref()) {
            Some(t) => t
                .run(spawn)
                .ok_or_else(|| io::Error::other("the call cgroup's thread is gone")),
            None => Ok(spawn()),
        }
    }

    /// Once the call ended: what the cgroup saw; then every process left in it is killed
    /// and it goes back to its pool.
    pub fn finish(&mut self) -> Seen {
        let Some(slot) = self.slot.take() else {
            return Seen::default();
        };
        let seen = Seen {
            oom_killed: slot.oom_kills() > self.oom_before,
            peak_bytes: self
                .peak_reset
                .then(|| read(&slot.dirs[0].join(slot.peak_file())).ok())
                .flatten()
                .and_then(|t| t.trim().parse().ok()),
        };
        self.give_back(slot);
        seen
    }

    fn give_back(&self, mut slot: Slot) {
        if slot.empty() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
        } else {
            slot.remove();
        }
    }
}

impl Drop for CallCgroup {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.give_back(slot);
        }
    }
}

/// In the child, between fork and exec: moves the calling process into each of `procs`.
/// Syscalls only.
pub fn enter(procs: &[CString]) -> io::Result<()> {
    for p in procs {
        // SAFETY: a NUL-terminated path prepared before fork; a two-byte stack buffer.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let e = io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(e);
            }
        }
    }
    Ok(())
}
