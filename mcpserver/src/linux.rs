//! Direct system calls on Linux (x86_64 and aarch64), where the C library's wrappers cost
//! more than the server needs:
//!
//! - `read`/`write` of the protocol's descriptors: once a process has a second thread
//!   (the server's monitor), the C library wraps each in thread-cancellation bookkeeping
//!   the server never uses, and a round trip is only a few microseconds.
//! - a futex with a relative timeout for the monitor's sleep (see `doorbell`): std's
//!   timed park reads the clock for a deadline, and the C library's clock code sits in
//!   pages nothing else touches.

use std::ffi::c_long;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: std::ffi::c_long = 0;
    pub const WRITE: std::ffi::c_long = 1;
    pub const FUTEX: std::ffi::c_long = 202;
}
#[cfg(target_arch = "aarch64")]
mod nr {
    pub const READ: std::ffi::c_long = 63;
    pub const WRITE: std::ffi::c_long = 64;
    pub const FUTEX: std::ffi::c_long = 98;
}

const FUTEX_WAIT_PRIVATE: c_long = 128;
const FUTEX_WAKE_PRIVATE: c_long = 129;

unsafe extern "C" {
    fn syscall(number: c_long, ...) -> c_long;
}

fn check(n: c_long) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A descriptor read and written with direct system calls.
pub(crate) struct Fd(OwnedFd);

impl From<OwnedFd> for Fd {
    fn from(fd: OwnedFd) -> Fd {
        Fd(fd)
    }
}

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        check(unsafe { syscall(nr::READ, self.as_raw_fd(), buf.as_mut_ptr(), buf.len()) })
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        check(unsafe { syscall(nr::WRITE, self.as_raw_fd(), buf.as_ptr(), buf.len()) })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[repr(C)]
struct Timespec {
    tv_sec: c_long,
    tv_nsec: c_long,
}

/// Sleeps while `*word == expected`, at most `timeout` (relative: no clock is read).
/// Returns on a wake, the timeout, a signal, or at once if the value differs: callers
/// re-check their state.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().min(c_long::MAX as u64) as c_long,
        tv_nsec: t.subsec_nanos() as c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const Timespec);
    // SAFETY: `word` is a live 32-bit atomic and `ts_ptr` null or a valid timespec for
    // the duration of the call.
    unsafe {
        syscall(
            nr::FUTEX,
            word.as_ptr(),
            FUTEX_WAIT_PRIVATE,
            expected,
            ts_ptr,
        )
    };
}

/// Wakes one thread sleeping in `futex_wait` on `word`.
pub(crate) fn futex_wake_one(word: &AtomicU32) {
    // SAFETY: `word` is a live 32-bit atomic.
    unsafe { syscall(nr::FUTEX, word.as_ptr(), FUTEX_WAKE_PRIVATE, 1 as c_long) };
}
