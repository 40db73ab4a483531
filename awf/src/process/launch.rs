//! Starting a command without copying awf: `clone(CLONE_VM | CLONE_VFORK)`, as
//! `posix_spawn` does, for the commands `awf run` starts by the thousand (a for_each's
//! steps). A `fork` copies the page tables of the whole process — awf has many threads and
//! a large heap — then the copy is thrown away at `exec`, and every page the parent writes
//! meanwhile takes a copy-on-write fault and a TLB shootdown of its other threads; the
//! kernel also takes the parent's memory lock for the whole copy, so concurrent starts
//! wait for each other. Here the child borrows the parent's memory until its `execve`
//! (the calling thread waits that long), so a start costs about the same at any size of
//! awf.
//!
//! std's `Command` takes this path itself only without `pre_exec` steps, and the steps
//! awf needs — the parent-death signal of [`super::ProcessGroup::die_with_thread`], kept
//! descriptors — are `pre_exec` steps. The child below does them with system calls only,
//! on memory prepared before the clone, on a stack of its own; it writes nothing of the
//! parent's but the one error number it reports.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// A command to start: a program, its arguments, awf's environment with changes, a
/// directory, descriptors it keeps. Its stdin is /dev/null, its stdout and stderr pipes.
#[derive(Debug, Clone)]
pub struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
    env: BTreeMap<OsString, OsString>,
    cwd: Option<PathBuf>,
    keep: Vec<RawFd>,
}

impl Launch {
    /// `program` (a path: no PATH search) with `args`, in awf's environment.
    pub fn new(program: impl AsRef<Path>) -> Launch {
        Launch {
            program: program.as_ref().to_path_buf(),
            args: Vec::new(),
            // The audit key stays with awf.
            env: std::env::vars_os()
                .filter(|(k, _)| !crate::child_env::is_audit_key_var(k))
                .collect(),
            cwd: None,
            keep: Vec::new(),
        }
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Launch {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Launch {
        self.env
            .insert(k.as_ref().to_os_string(), v.as_ref().to_os_string());
        self
    }

    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Launch {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Launch {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    /// `fd` stays open in the command (it is close-on-exec here, and cleared there).
    pub fn keep_fd(&mut self, fd: RawFd) -> &mut Launch {
        self.keep.push(fd);
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }
}

fn cstring(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// What the child reads (prepared before the clone) and the one thing it writes.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [libc::c_int; 3],
    keep: *const libc::c_int,
    keep_len: usize,
    parent: libc::pid_t,
    /// The error number of the step that failed, 0 when the exec went through.
    errno: AtomicI32,
}

/// The child, on its own stack, in the parent's memory until `execve`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the ChildArgs the parent keeps alive until the clone returns (it
    // waits: CLONE_VFORK); everything called is a system call on memory prepared before.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        let fail = |a: &ChildArgs| -> libc::c_int {
            let e = *libc::__errno_location();
            a.errno
                .store(if e == 0 { libc::EINVAL } else { e }, Ordering::SeqCst);
            libc::_exit(127)
        };
        // No handler of awf's may run here (its memory is awf's): every caught signal
        // back to its default, SIGPIPE too (awf ignores it; a command expects it).
        for sig in 1..65 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(a);
        }
        // Dies with the thread that started it (which waits for it), SIGKILL of awf too.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(a);
        }
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            return fail(a);
        }
        for (target, &fd) in a.stdio.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                return fail(a);
            }
        }
        for i in 0..a.keep_len {
            if libc::fcntl(*a.keep.add(i), libc::F_SETFD, 0) != 0 {
                return fail(a);
            }
        }
        if !a.cwd.is_null() && libc::chdir(a.cwd) != 0 {
            return fail(a);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(a.program, a.argv, a.envp);
        fail(a)
    }
}

/// Starts `l` as the leader of a new process group, tied to the calling thread; returns its
/// pid and the parent's ends of its stdout and stderr. Call it under the lock of the owned
/// pids (see `ProcessGroup::start`).
pub(super) fn start(l: &Launch) -> io::Result<(libc::pid_t, OwnedFd, OwnedFd)> {
    let program = cstring(l.program.as_os_str().as_bytes().to_vec())?;
    let mut argv_c = vec![program.clone()];
    for a in &l.args {
        argv_c.push(cstring(a.clone().into_vec())?);
    }
    let mut env_c = Vec::with_capacity(l.env.len());
    for (k, v) in &l.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        env_c.push(cstring(kv)?);
    }
    let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv, envp) = (ptrs(&argv_c), ptrs(&env_c));
    let cwd = match &l.cwd {
        Some(d) => Some(cstring(d.as_os_str().as_bytes().to_vec())?),
        None => None,
    };
    let null = std::fs::File::open("/dev/null")?;
    let pipe = || -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two descriptors, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptors, owned once each.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let args = ChildArgs {
        program: program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        stdio: [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
        keep: l.keep.as_ptr(),
        keep_len: l.keep.len(),
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        errno: AtomicI32::new(0),
    };
    // The child's stack, 16-byte aligned at its top (it grows down).
    let mut stack = vec![0u128; 64 * 1024 / 16];
    // SAFETY: every signal is blocked around the clone, so none is delivered to the child
    // before it set its handlers to their defaults; the clone runs `child` on `stack` with
    // `args`, both alive until it returns (CLONE_VFORK: after the child's exec or exit).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(stack.len()) as *mut libc::c_void;
        let pid = libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &args as *const ChildArgs as *mut libc::c_void,
        );
        let e = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(e);
        }
        pid
    };
    drop(stack);
    let errno = args.errno.load(Ordering::SeqCst);
    if errno != 0 {
        // It exited without its exec: reap it, and say why.
        let mut st = 0;
        // SAFETY: our own child, exited.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok((pid, out_r, err_r))
}
