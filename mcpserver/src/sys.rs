//! Standard input and output for `serve_stdio` (Unix).
//!
//! Output: the protocol writes to a private duplicate of fd 1, and fd 1 itself points
//! at stderr while serving, so a stray print can never corrupt the message stream.
//! Input: when the host holds a [`crate::StopHandle`], reads wait in `poll` on stdin and
//! on a wake-up pipe, so a stop is seen even while no message arrives.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x1;

unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: std::ffi::c_ulong, timeout: i32) -> i32;
    fn dup(fd: i32) -> i32;
    fn dup2(old: i32, new: i32) -> i32;
}

pub(crate) struct Stdio {
    input: OwnedFd,
    output: OwnedFd,
    /// The original fd 1, put back by `restore`.
    saved_stdout: Option<OwnedFd>,
}

fn dup_owned(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: dup returns a new descriptor we own, or -1.
    let new = unsafe { dup(fd) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

impl Stdio {
    pub(crate) fn take() -> io::Result<Stdio> {
        let input = io::stdin().as_fd().try_clone_to_owned()?;
        let output = io::stdout().as_fd().try_clone_to_owned()?;
        let saved_stdout = dup_owned(1).ok();
        if saved_stdout.is_some() {
            // SAFETY: plain descriptor duplication; fd 1 now writes to stderr.
            unsafe { dup2(2, 1) };
        }
        Ok(Stdio {
            input,
            output,
            saved_stdout,
        })
    }

    pub(crate) fn input(&self) -> io::Result<File> {
        Ok(File::from(self.input.try_clone()?))
    }

    pub(crate) fn output(&self) -> io::Result<File> {
        Ok(File::from(self.output.try_clone()?))
    }

    pub(crate) fn restore(self) {
        if let Some(saved) = &self.saved_stdout {
            // SAFETY: plain descriptor duplication back onto fd 1.
            unsafe { dup2(saved.as_raw_fd(), 1) };
        }
    }
}

pub(crate) struct StdinReader {
    input: File,
    wake: Option<io::PipeReader>,
}

impl StdinReader {
    pub(crate) fn new(input: File, wake: Option<io::PipeReader>) -> StdinReader {
        StdinReader { input, wake }
    }
}

impl Read for StdinReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(wake) = &self.wake {
            let mut fds = [
                PollFd {
                    fd: self.input.as_raw_fd(),
                    events: POLLIN,
                    revents: 0,
                },
                PollFd {
                    fd: wake.as_raw_fd(),
                    events: POLLIN,
                    revents: 0,
                },
            ];
            loop {
                // SAFETY: `fds` is a valid array of two pollfd structures.
                let n = unsafe { poll(fds.as_mut_ptr(), 2, -1) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                break;
            }
            if fds[1].revents != 0 {
                // Stopped: report end of input; the server reads the stop flag.
                return Ok(0);
            }
        }
        self.input.read(buf)
    }
}
