//! The few syscall wrappers the jail's code uses between fork and exec: no allocation, an
//! `io::Error` from errno.

use std::ffi::CStr;
use std::io;

pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Writes one short value to a /proc file, by syscalls only.
pub unsafe fn write_proc(path: &CStr, value: &CStr) -> io::Result<()> {
    // SAFETY: both pointers are NUL-terminated strings that outlive the calls.
    unsafe {
        let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let bytes = value.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
