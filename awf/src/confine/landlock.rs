//! Landlock by its three syscalls, so that the whole ruleset can be built in the child
//! after its mounts are in place (a rule binds to the inode a path names *there*: the
//! fresh `/proc` of a PID namespace exists only in the child). [`Plan`] is everything
//! that allocates, made in the parent; [`Plan::apply`] only makes syscalls, as is required
//! between fork and exec. The constants are the kernel's UAPI (`linux/landlock.h`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const EXECUTE: u64 = 1 << 0;
pub const WRITE_FILE: u64 = 1 << 1;
pub const READ_FILE: u64 = 1 << 2;
pub const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: links and renames across directories.
const REFER: u64 = 1 << 13;
/// ABI 3.
const TRUNCATE: u64 = 1 << 14;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// The first ABI with network rights (Linux 6.7) and with scopes (Linux 6.12).
pub const NET_ABI: i64 = 4;
pub const SCOPE_ABI: i64 = 6;

const RULE_PATH_BENEATH: libc::c_int = 1;
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Reading: open files, list directories, run programs.
pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
/// The rights that apply to a file (a rule on a file may only hold these).
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE;

/// Every right that changes the file system, for the kernel's ABI.
pub fn write_rights(abi: i64) -> u64 {
    let mut w = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        w |= REFER;
    }
    if abi >= 3 {
        w |= TRUNCATE;
    }
    w
}

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, via `landlock_create_ruleset(NULL, 0, VERSION)`.
pub fn kernel_abi() -> Result<i64, String> {
    // SAFETY: the documented version query takes no pointer and returns an integer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        Ok(v)
    } else {
        let err = io::Error::last_os_error();
        Err(match err.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel was built without Landlock".into(),
            Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot (lsm= parameter)".into(),
            _ => format!("Landlock probe failed: {err}"),
        })
    }
}

/// One domain to enter: what is handled (refused unless a rule grants it) and the rules.
#[derive(Debug, Clone)]
pub struct Plan {
    abi: i64,
    fs: u64,
    net: u64,
    scoped: u64,
    rules: Vec<(CString, u64)>,
}

impl Plan {
    /// Handles the write rights, the read rights too when `reads` is set, TCP connect and
    /// bind when `deny_tcp`, and the signal and abstract-socket scopes where the ABI has them.
    pub fn new(abi: i64, reads: bool, deny_tcp: bool) -> Plan {
        Plan {
            abi,
            fs: write_rights(abi) | if reads { READ } else { 0 },
            net: if deny_tcp {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= SCOPE_ABI {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
            rules: Vec::new(),
        }
    }

    /// True when signals to processes outside the domain are refused.
    pub fn scopes_signals(&self) -> bool {
        self.scoped & SCOPE_SIGNAL != 0
    }

    /// Grants `access` (of the handled rights) beneath `path`; a file gets the file rights
    /// of it only. A path that does not exist when the rule is applied is skipped.
    pub fn allow(&mut self, path: &Path, access: u64) {
        let access = if path.is_dir() {
            access
        } else {
            access & FILE_RIGHTS
        } & self.fs;
        if access == 0 {
            return;
        }
        if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
            self.rules.push((c, access));
        }
    }

    /// The paths ruled, for tests and descriptions.
    pub fn paths(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.rules
            .iter()
            .map(|(c, _)| PathBuf::from(std::ffi::OsStr::from_bytes(c.as_bytes())))
    }

    /// In the child, between fork and exec: builds the ruleset from the paths as this
    /// process sees them and restricts itself (no new privileges after). Syscalls only.
    pub fn apply(&self) -> io::Result<()> {
        let attr = RulesetAttr {
            handled_access_fs: self.fs,
            handled_access_net: self.net,
            scoped: self.scoped,
        };
        // The kernel reads only the fields its ABI knows; a shorter size for older ones.
        let size = match self.abi {
            ..NET_ABI => 8,
            NET_ABI..SCOPE_ABI => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: plain syscalls on a stack struct, NUL-terminated paths prepared before
        // fork and fds owned here; nothing allocates.
        unsafe {
            let ruleset = libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            );
            if ruleset < 0 {
                return Err(io::Error::last_os_error());
            }
            let ruleset = ruleset as libc::c_int;
            for (path, access) in &self.rules {
                let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if fd < 0 {
                    if *libc::__errno_location() == libc::ENOENT {
                        continue;
                    }
                    let e = io::Error::last_os_error();
                    libc::close(ruleset);
                    return Err(e);
                }
                let rule = PathBeneathAttr {
                    allowed_access: *access,
                    parent_fd: fd,
                };
                let r = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0u32,
                );
                libc::close(fd);
                if r < 0 {
                    let e = io::Error::last_os_error();
                    libc::close(ruleset);
                    return Err(e);
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                let e = io::Error::last_os_error();
                libc::close(ruleset);
                return Err(e);
            }
            let r = libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32);
            let e = io::Error::last_os_error();
            libc::close(ruleset);
            if r < 0 {
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_follow_the_abi() {
        assert_eq!(write_rights(1) & (REFER | TRUNCATE), 0);
        assert_eq!(write_rights(3) & (REFER | TRUNCATE), REFER | TRUNCATE);
        let p = Plan::new(5, false, true);
        assert_eq!(p.fs & READ, 0);
        assert_eq!(p.net, NET_BIND_TCP | NET_CONNECT_TCP);
        assert!(!p.scopes_signals());
        assert!(Plan::new(6, true, false).scopes_signals());
        assert_eq!(Plan::new(6, true, false).fs & READ, READ);
    }

    #[test]
    fn a_file_rule_keeps_only_file_rights() {
        let mut p = Plan::new(4, true, false);
        p.allow(Path::new("/etc/hostname"), READ | write_rights(4));
        p.allow(Path::new("/etc"), READ);
        assert_eq!(p.rules[0].1, (READ | WRITE_FILE | TRUNCATE) & FILE_RIGHTS);
        assert_eq!(p.rules[1].1, READ);
        // Under read: host reads are not handled, so a read rule adds nothing.
        let mut h = Plan::new(4, false, false);
        h.allow(Path::new("/etc"), READ);
        assert!(h.rules.is_empty());
    }
}
