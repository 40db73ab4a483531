//! A Bash call's jail made ahead: its namespaces, init, Landlock domain and filter set up
//! by a process that then waits for its command, so that a call pays for the exec only.
//!
//! Once a call's processes are gone, the next call's jail is made on a thread of its own
//! ([`Shelf::refill`]), off the call's path, and waits on the session's shelf until a call
//! takes it ([`Shelf::take`]). The process forked for it
//! goes as far as a fresh call's would before its exec ([`Jail::enter_ahead`]: the cgroup,
//! the user, mount, network and PID namespaces and their init, Landlock, the filter) and
//! reads its command from a pipe: the working directory, the rlimits of its timeout, the
//! argument vector and the environment. It then execs as a fresh call would, and a second
//! pipe tells awf the exec happened (its end of file) or why it did not (an errno). Each
//! call still gets namespaces of its own: a jail made ahead serves one call.
//!
//! What it covers is fixed when it is made: the secret locations present then
//! ([`super::Confinement::hidden_now`]) and the writable paths that existed. A call checks
//! both again, and a jail that no longer matches (a `.env` written since, say) is thrown
//! away for a fresh one. Should the process made ahead have died, or fail at any step,
//! the call starts fresh too, and meets whatever error there is as before.

use super::Links;
use super::bounds::{RLIMIT_WORDS, Rlimits};
use super::namespaces::Jail;
use crate::process::ProcessGroup;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The largest command message a jail made ahead takes (the working directory, the
/// arguments and the environment); a larger call starts fresh, and the jail waits for the
/// next.
const MAX_MESSAGE: usize = 256 * 1024;
/// The most arguments and variables, together, it takes.
const MAX_STRINGS: usize = 4096;
/// How long a call waits for a jail being made (its fork, not its set-up) before it
/// starts fresh.
const MAKING_WAIT: Duration = Duration::from_millis(100);

/// A jail made ahead, its process waiting for the command.
pub struct Standby {
    /// The waiter (see [`super::namespaces`]), the process group's leader; dropped first,
    /// so that the group is killed before the links (its cgroup) go.
    group: ProcessGroup,
    /// Where the command message goes.
    go: std::fs::File,
    /// Its end of file is the exec; 4 bytes, the errno of the step that failed.
    report: std::fs::File,
    /// What it covers and which writable paths it has, as they were when it was made.
    hidden: Vec<PathBuf>,
    writable: Vec<bool>,
    links: Links,
}

impl Standby {
    /// Forks the process that enters `jail` and waits for its command, on a thread that
    /// lives as long as the jail may wait (its death signal follows the forking thread).
    pub fn make(
        mut jail: Jail,
        links: Links,
        hidden: Vec<PathBuf>,
        writable: Vec<bool>,
    ) -> io::Result<Standby> {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (go_r, go_w) = pipe()?;
        let (report_r, report_w) = pipe()?;
        let null = std::fs::File::open("/dev/null")?;
        let mut message = vec![0u8; MAX_MESSAGE];
        let mut strings: Vec<usize> = Vec::with_capacity(MAX_STRINGS + 2);
        let fork = move || {
            let fds = [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
            let (go, report) = (go_r.as_raw_fd(), report_w.as_raw_fd());
            let group = ProcessGroup::fork(out_r, err_r, || {
                // SAFETY: in the child: syscalls on memory allocated before fork.
                unsafe { child(&mut jail, fds, go, report, &mut message, &mut strings) }
            });
            // Our copies of the child's ends close here.
            drop((null, out_w, err_w, go_r, report_w, jail));
            group
        };
        let group = match links.cgroup.as_ref().filter(|c| c.forks_inside()) {
            Some(c) => c.spawn_inside(fork)??,
            None => crate::process::on_lasting_thread(fork)??,
        };
        Ok(Standby {
            group,
            go: go_w.into(),
            report: report_r.into(),
            hidden,
            writable,
            links,
        })
    }

    /// True when it covers what a fresh jail would now (`hidden`) and has the writable
    /// paths that exist now (`writable`).
    pub fn matches(&self, hidden: &[PathBuf], writable: &[bool]) -> bool {
        self.hidden == hidden && self.writable == writable
    }

    /// The call's cgroup, if it has one (its rlimits depend on it).
    pub fn has_cgroup(&self) -> bool {
        self.links.cgroup.is_some()
    }

    /// Runs `cmd` (its program, arguments, environment and working directory: nothing
    /// else of it is read) under `rlimits`; returns its process group once it exec'd, and
    /// the jail's links to serve. Refused, it did not exec: start the call fresh.
    pub fn start(
        self,
        cmd: &Command,
        rlimits: Option<Rlimits>,
    ) -> Result<(ProcessGroup, Links), Refused> {
        let Some(message) = encode(cmd, rlimits) else {
            return Err(Refused::TooLarge(Box::new(self)));
        };
        self.exec(&message).map_err(Refused::Failed)
    }

    /// Hands `message` to the waiting process; returns once it exec'd.
    fn exec(mut self, message: &[u8]) -> io::Result<(ProcessGroup, Links)> {
        self.go.write_all(message)?;
        let mut errno = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.report.read(&mut errno[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        match got {
            0 => {
                let Standby { group, links, .. } = self;
                Ok((group, links))
            }
            4 => Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno))),
            _ => Err(io::Error::other("a short report from the jail made ahead")),
        }
    }
}

/// Why a jail made ahead did not take a command.
pub enum Refused {
    /// The command is larger than the message it reads (`MAX_MESSAGE`): the jail is
    /// untouched and serves the next call.
    TooLarge(Box<Standby>),
    /// It failed at some step (its errno).
    Failed(io::Error),
}

/// Where a session keeps its jail made ahead. Dropped at the session's end, it waits for a
/// jail still being made, which then goes at once: the jail's cgroup is removed with the
/// session's, even when the session ends while the next jail is being made.
#[derive(Default)]
pub struct Shelf {
    /// The thread making the next jail; it holds the shelf weakly, so that the session's
    /// end drops the shelf and joins it.
    maker: Mutex<Option<std::thread::JoinHandle<()>>>,
    state: Mutex<State>,
    made: Condvar,
}

#[derive(Default)]
enum State {
    #[default]
    Empty,
    Making,
    Ready(Box<Standby>),
    /// One could not be made or did not start: this session starts every call fresh.
    Off,
}

impl std::fmt::Debug for Shelf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shelf")
    }
}

impl Shelf {
    /// The jail made ahead, if one is there or being made (waited for briefly).
    pub fn take(&self) -> Option<Standby> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, State::Making) {
            state = self
                .made
                .wait_timeout_while(state, MAKING_WAIT, |s| matches!(s, State::Making))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        match std::mem::take(&mut *state) {
            State::Ready(s) => Some(*s),
            other => {
                *state = other;
                None
            }
        }
    }

    /// Puts back a jail taken but not used, unless another is there by now.
    pub fn put_back(&self, standby: Box<Standby>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, State::Empty) {
            *state = State::Ready(standby);
        }
    }

    /// No more jails made ahead in this session (one failed: each call starts fresh, and
    /// meets the error itself).
    pub fn switch_off(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Off;
    }

    /// Has the next jail made by `make` on a thread of its own, unless one is there or
    /// being made.
    pub fn refill(
        self: &std::sync::Arc<Self>,
        make: impl FnOnce() -> io::Result<Standby> + Send + 'static,
    ) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !matches!(*state, State::Empty) {
                return;
            }
            *state = State::Making;
        }
        let shelf = std::sync::Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("awf-jail-ahead".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let made = make();
                if let Err(e) = &made {
                    tracing::debug!("no jail made ahead for the next Bash call: {e}");
                }
                // The session ended meanwhile: the jail goes here and now.
                let Some(shelf) = shelf.upgrade() else {
                    return;
                };
                let mut state = shelf.state.lock().unwrap_or_else(|e| e.into_inner());
                *state = match made {
                    Ok(s) => State::Ready(Box::new(s)),
                    Err(_) => State::Off,
                };
                shelf.made.notify_all();
            });
        match spawned {
            Ok(maker) => {
                let done = self
                    .maker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .replace(maker);
                // The one before has put its jail here already (the shelf was empty).
                if let Some(done) = done {
                    let _ = done.join();
                }
            }
            Err(_) => *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Empty,
        }
    }
}

impl Drop for Shelf {
    fn drop(&mut self) {
        let maker = self
            .maker
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Not when the maker itself held the last reference (it is ending).
        if let Some(maker) = maker.filter(|m| m.thread().id() != std::thread::current().id()) {
            let _ = maker.join();
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors of ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The command message: its length (u32), then whether there are rlimits and their words
/// (u64 each), the counts of arguments (the program first) and variables (u32 each), then
/// the working directory, the arguments and the variables (`K=V`), each NUL-terminated.
/// None: no working directory set, or too large.
fn encode(cmd: &Command, rlimits: Option<Rlimits>) -> Option<Vec<u8>> {
    let cwd = cmd.get_current_dir()?;
    let args: Vec<&OsStr> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .collect();
    let vars: Vec<(&OsStr, &OsStr)> = cmd.get_envs().filter_map(|(k, v)| Some((k, v?))).collect();
    if args.len() + vars.len() > MAX_STRINGS {
        return None;
    }
    let mut m = vec![0u8; 4];
    m.extend_from_slice(&u64::from(rlimits.is_some()).to_ne_bytes());
    for w in rlimits.map(|r| r.to_words()).unwrap_or([0; RLIMIT_WORDS]) {
        m.extend_from_slice(&w.to_ne_bytes());
    }
    m.extend_from_slice(&(args.len() as u32).to_ne_bytes());
    m.extend_from_slice(&(vars.len() as u32).to_ne_bytes());
    let mut push = |bytes: &[&[u8]]| {
        for b in bytes {
            m.extend_from_slice(b);
        }
        m.push(0);
    };
    push(&[cwd.as_os_str().as_bytes()]);
    for a in &args {
        push(&[a.as_bytes()]);
    }
    for (k, v) in &vars {
        push(&[k.as_bytes(), b"=", v.as_bytes()]);
    }
    if m.len() - 4 > MAX_MESSAGE {
        return None;
    }
    let len = (m.len() - 4) as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    Some(m)
}

/// In the forked child: stdio, the jail, then (in the process that will exec) the
/// command message, its working directory and rlimits, and the exec. Returns only on
/// failure, its errno written to `report`.
///
/// # Safety
/// Only in a forked child; syscalls on memory allocated before fork.
unsafe fn child(
    jail: &mut Jail,
    stdio: [RawFd; 3],
    go: RawFd,
    report: RawFd,
    message: &mut [u8],
    strings: &mut Vec<usize>,
) -> i32 {
    let failed = |e: io::Error| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes();
        // SAFETY: a write of 4 bytes from the stack.
        unsafe { libc::write(report, errno.as_ptr().cast(), 4) };
        127
    };
    for (to, &from) in stdio.iter().enumerate() {
        // SAFETY: descriptors of this process.
        if unsafe { libc::dup2(from, to as RawFd) } < 0 {
            return failed(io::Error::last_os_error());
        }
    }
    if let Err(e) = jail.enter_ahead() {
        return failed(e);
    }
    // SAFETY: as this function's.
    match unsafe { exec_message(go, message, strings) } {
        Err(e) => failed(e),
        Ok(never) => match never {},
    }
}

/// Reads the command message from `go` into `message` and execs it. Syscalls only.
unsafe fn exec_message(
    go: RawFd,
    message: &mut [u8],
    strings: &mut Vec<usize>,
) -> io::Result<std::convert::Infallible> {
    let too_big = || io::Error::from_raw_os_error(libc::E2BIG);
    let mut len = [0u8; 4];
    // SAFETY: reads into buffers we own.
    unsafe { read_exact(go, &mut len)? };
    let len = u32::from_ne_bytes(len) as usize;
    if len > message.len() {
        return Err(too_big());
    }
    let message = &mut message[..len];
    // SAFETY: as above.
    unsafe { read_exact(go, message)? };
    let word = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&message[i * 8..i * 8 + 8]);
        u64::from_ne_bytes(b)
    };
    let header = 8 * (1 + RLIMIT_WORDS) + 8;
    if len < header {
        return Err(too_big());
    }
    let with_rlimits = word(0) != 0;
    let mut words = [0u64; RLIMIT_WORDS];
    for (i, w) in words.iter_mut().enumerate() {
        *w = word(1 + i);
    }
    let count = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&message[at..at + 4]);
        u32::from_ne_bytes(b) as usize
    };
    let at = 8 * (1 + RLIMIT_WORDS);
    let (argc, envc) = (count(at), count(at + 4));
    if argc == 0 || argc + envc > MAX_STRINGS {
        return Err(too_big());
    }
    // The NUL-terminated strings: the working directory, then argc + envc more.
    strings.clear();
    let base = message.as_ptr() as usize;
    let mut start = header;
    let mut cwd = None;
    for (i, &b) in message.iter().enumerate().skip(header) {
        if b == 0 {
            if strings.len() > argc + envc {
                return Err(too_big());
            }
            match cwd {
                None => cwd = Some(base + start),
                Some(_) => {
                    strings.push(base + start);
                    if strings.len() == argc {
                        strings.push(0);
                    }
                }
            }
            start = i + 1;
        }
    }
    let (Some(cwd), true) = (cwd, strings.len() == argc + 1 + envc) else {
        return Err(too_big());
    };
    strings.push(0);
    // SAFETY: NUL-terminated strings inside `message`; pointer arrays ended by a null.
    unsafe {
        if libc::chdir(cwd as *const libc::c_char) != 0 {
            return Err(io::Error::last_os_error());
        }
        if with_rlimits {
            Rlimits::from_words(&words).apply()?;
        }
        let argv = strings.as_ptr() as *const *const libc::c_char;
        let envp = argv.add(argc + 1);
        libc::execve(*argv, argv, envp);
    }
    Err(io::Error::last_os_error())
}

/// Reads exactly `buf.len()` bytes from `fd`. Syscalls only.
unsafe fn read_exact(fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the rest of a buffer we own.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EPIPE));
        }
        got += n as usize;
    }
    Ok(())
}
