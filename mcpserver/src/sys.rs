//! Standard input and output for `serve_stdio` (Unix).
//!
//! Output: the protocol writes to a private duplicate of fd 1, and fd 1 itself points
//! at stderr while serving, so a stray print can never corrupt the message stream.
//! Input: when the host holds a [`crate::StopHandle`], reads first wait on stdin and on a
//! wake-up pipe together (`epoll` on Linux, `poll` elsewhere), so a stop is seen even
//! while no message arrives.
//!
//! On Linux the two descriptors are read and written with direct system calls
//! (`crate::linux`).

use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

unsafe extern "C" {
    fn dup2(old: i32, new: i32) -> i32;
}

/// What `serve_stdio` changed about the process's standard output, to put it back.
pub(crate) struct Stdio {
    /// The original fd 1, put back by `restore`.
    saved_stdout: Option<OwnedFd>,
}

/// A duplicate of `fd`, closed on `exec`: a process a handler starts must not inherit
/// the client's pipes, or the client would wait for that process to see end of output.
fn dup_owned(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the descriptor is only borrowed for the duplication (an `fcntl` that
    // fails cleanly if it is not open).
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

impl Stdio {
    /// The protocol's input and output (duplicates of fds 0 and 1, taken straight from
    /// the descriptors: std's `stdin()`/`stdout()` would allocate buffers the server
    /// never uses), with fd 1 pointed at stderr until `restore`.
    pub(crate) fn take() -> io::Result<(Stdio, Fd, Fd)> {
        let input = Fd::from(dup_owned(0)?);
        let output = Fd::from(dup_owned(1)?);
        let saved_stdout = dup_owned(1).ok();
        if saved_stdout.is_some() {
            // SAFETY: plain descriptor duplication; fd 1 now writes to stderr.
            unsafe { dup2(2, 1) };
        }
        Ok((Stdio { saved_stdout }, input, output))
    }

    pub(crate) fn restore(self) {
        if let Some(saved) = &self.saved_stdout {
            // SAFETY: plain descriptor duplication back onto fd 1.
            unsafe { dup2(saved.as_raw_fd(), 1) };
        }
    }
}

/// The protocol's descriptors: read and written with direct system calls on Linux
/// (`crate::linux::Fd`), through `File` elsewhere.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) use crate::linux::Fd;
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(crate) type Fd = std::fs::File;

/// Waits until standard input or the wake-up pipe is readable: one `epoll_wait` per wait
/// on Linux (registered once; `poll` re-registers both descriptors on every call).
#[cfg(target_os = "linux")]
mod wait {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    #[cfg_attr(target_arch = "x86_64", repr(C, packed))]
    #[cfg_attr(not(target_arch = "x86_64"), repr(C))]
    struct EpollEvent {
        events: u32,
        data: u64,
    }

    const EPOLLIN: u32 = 0x1;
    const EPOLL_CTL_ADD: i32 = 1;
    const EPOLL_CLOEXEC: i32 = 0o2000000;
    const EPERM: i32 = 1;
    const WAKE: u64 = 1;

    unsafe extern "C" {
        fn epoll_create1(flags: i32) -> i32;
        fn epoll_ctl(epfd: i32, op: i32, fd: i32, event: *mut EpollEvent) -> i32;
        fn epoll_wait(epfd: i32, events: *mut EpollEvent, max: i32, timeout: i32) -> i32;
    }

    pub(super) struct Waiter(OwnedFd);

    impl Waiter {
        /// `None` when standard input cannot be waited on (a regular file, `/dev/null`):
        /// its reads never block, so the server sees a stop between lines anyway.
        pub(super) fn new(input: RawFd, wake: RawFd) -> io::Result<Option<Waiter>> {
            // SAFETY: plain system call; a new descriptor or -1.
            let fd = unsafe { epoll_create1(EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor owned by nobody else.
            let waiter = Waiter(unsafe { OwnedFd::from_raw_fd(fd) });
            for (watched, data) in [(input, 0), (wake, WAKE)] {
                let mut ev = EpollEvent {
                    events: EPOLLIN,
                    data,
                };
                // SAFETY: `ev` is a valid epoll_event for the duration of the call.
                if unsafe { epoll_ctl(fd, EPOLL_CTL_ADD, watched, &mut ev) } < 0 {
                    let e = io::Error::last_os_error();
                    if watched == input && e.raw_os_error() == Some(EPERM) {
                        return Ok(None);
                    }
                    return Err(e);
                }
            }
            Ok(Some(waiter))
        }

        /// True when woken for a stop.
        pub(super) fn wait(&self) -> io::Result<bool> {
            let mut ev = EpollEvent { events: 0, data: 0 };
            loop {
                // SAFETY: room for one event at `ev`.
                let n = unsafe { epoll_wait(self.0.as_raw_fd(), &mut ev, 1, -1) };
                if n > 0 {
                    let data = ev.data;
                    return Ok(data == WAKE);
                }
                let e = io::Error::last_os_error();
                if n < 0 && e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Waits until standard input or the wake-up pipe is readable (`poll`).
#[cfg(not(target_os = "linux"))]
mod wait {
    use std::io;
    use std::os::fd::RawFd;

    #[repr(C)]
    struct PollFd {
        fd: i32,
        events: i16,
        revents: i16,
    }

    const POLLIN: i16 = 0x1;

    unsafe extern "C" {
        fn poll(fds: *mut PollFd, nfds: std::ffi::c_ulong, timeout: i32) -> i32;
    }

    pub(super) struct Waiter {
        input: RawFd,
        wake: RawFd,
    }

    impl Waiter {
        pub(super) fn new(input: RawFd, wake: RawFd) -> io::Result<Option<Waiter>> {
            Ok(Some(Waiter { input, wake }))
        }

        /// True when woken for a stop.
        pub(super) fn wait(&self) -> io::Result<bool> {
            let mut fds = [
                PollFd {
                    fd: self.input,
                    events: POLLIN,
                    revents: 0,
                },
                PollFd {
                    fd: self.wake,
                    events: POLLIN,
                    revents: 0,
                },
            ];
            loop {
                // SAFETY: `fds` is a valid array of two pollfd structures.
                let n = unsafe { poll(fds.as_mut_ptr(), 2, -1) };
                if n >= 0 {
                    return Ok(fds[1].revents != 0);
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

pub(crate) struct StdinReader {
    input: Fd,
    /// With a stop handle: the wake-up pipe (kept open) and the waiter on both.
    wake: Option<(io::PipeReader, wait::Waiter)>,
}

impl StdinReader {
    pub(crate) fn new(input: Fd, wake: Option<io::PipeReader>) -> io::Result<StdinReader> {
        let wake = match wake {
            Some(pipe) => {
                wait::Waiter::new(input.as_raw_fd(), pipe.as_raw_fd())?.map(|waiter| (pipe, waiter))
            }
            None => None,
        };
        Ok(StdinReader { input, wake })
    }
}

impl Read for StdinReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((_, waiter)) = &self.wake
            && waiter.wait()?
        {
            // Stopped: report end of input; the server reads the stop flag.
            return Ok(0);
        }
        self.input.read(buf)
    }
}
