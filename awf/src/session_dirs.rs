//! The directories a session makes for itself under the temp directory (Bash's private
//! temp directory, a plugin's socket directory): named after the process that owns them,
//! removed by descriptor (never following a symlink), and swept by the next session when
//! their owner died without removing them (SIGKILL, a crash, a power cut).
//!
//! A name is `<prefix><pid>-<start>-<pidns>-<n>`: the owner's pid, its start time (field 22
//! of `/proc/<pid>/stat`, in clock ticks since boot, so a pid reused by a later process is
//! told apart), its pid namespace (a pid of another namespace means another process, or
//! none, here: such entries are left alone) and a counter. A name of any other form is not
//! swept (an older awf's, someone else's).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// A process as a leftover's name records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    start: u64,
    pidns: u64,
}

/// This process, if `/proc` tells its start time and pid namespace (and is the `/proc` of
/// that namespace: its pids are ours).
fn this_process() -> Option<Owner> {
    static OWN: OnceLock<Option<Owner>> = OnceLock::new();
    *OWN.get_or_init(|| {
        let pid = std::process::id();
        let seen: u32 = std::fs::read_link("/proc/self")
            .ok()?
            .to_str()?
            .parse()
            .ok()?;
        if seen != pid {
            return None;
        }
        let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let pidns = ns
            .to_str()?
            .strip_prefix("pid:[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        let start = start_time(&std::fs::read("/proc/self/stat").ok()?)?;
        Some(Owner { pid, start, pidns })
    })
}

/// The start time of process `pid` (as `start_time` reads it), if it runs; a zombie (killed, not
/// yet reaped) does not.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    if stat.get(close + 2) == Some(&b'Z') {
        return None;
    }
    start_time(&stat)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The second field, the command name
/// in parentheses, may hold spaces and parentheses itself: fields are counted after its
/// last `)`.
fn start_time(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After the name come field 3 (state) onwards: field 22 is the 20th.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// A fresh name for this process's `n`th directory of a kind (`prefix`). Without `/proc`
/// the name has no start time, and no sweep will ever take it for a leftover.
pub fn fresh_name(prefix: &str, n: u32) -> String {
    match this_process() {
        Some(o) => format!("{prefix}{}-{}-{}-{n}", o.pid, o.start, o.pidns),
        None => format!("{prefix}{}-{n}", std::process::id()),
    }
}

/// The owner a name of this kind records; None for a name of another form.
fn owner_of(name: &OsStr, prefix: &str) -> Option<Owner> {
    let rest = name.to_str()?.strip_prefix(prefix)?;
    let fields: Vec<&str> = rest.split('-').collect();
    let [pid, start, pidns, n] = fields[..] else {
        return None;
    };
    // Digits only: `parse` would take a leading `+`, which awf never writes.
    if [pid, start, pidns, n]
        .iter()
        .any(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some(Owner {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
        pidns: pidns.parse().ok()?,
    })
}

/// What `/proc` says of a pid: its start time, or that it is gone (None).
fn start_time_of(pid: u32) -> Option<u64> {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        // An unreadable line: taken as running (u64::MAX matches no recorded start below).
        Ok(stat) => Some(start_time(&stat).unwrap_or(u64::MAX)),
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            None
        }
        // No permission or the like: taken as running.
        Err(_) => Some(u64::MAX),
    }
}

/// Whether the process `owner` names still runs: its pid is there with the same start time
/// (when `/proc` does not say, it is taken as running). `seen` keeps what `/proc` said of
/// each pid during one sweep.
fn is_running(owner: &Owner, seen: &mut std::collections::HashMap<u32, Option<u64>>) -> bool {
    match *seen
        .entry(owner.pid)
        .or_insert_with(|| start_time_of(owner.pid))
    {
        None => false,
        Some(u64::MAX) => true,
        Some(start) => start == owner.start,
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Opens the directory `name` (relative to the directory `at`, or to the working directory
/// for `libc::AT_FDCWD`) without following a symlink in its place.
pub fn open_dir(at: libc::c_int, name: &Path) -> io::Result<OwnedFd> {
    open_dir_flags(at, name, libc::O_NOFOLLOW)
}

fn open_dir_flags(at: libc::c_int, name: &Path, extra: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(name.as_os_str())?;
    // SAFETY: a NUL-terminated path; the fd returned is owned by the OwnedFd.
    let fd = unsafe {
        libc::openat(
            at,
            c.as_ptr(),
            libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_RDONLY | extra,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat` without following a symlink (`name` empty: the descriptor itself).
fn stat_at(at: libc::c_int, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    // SAFETY: zeroed is a valid `stat`; the pointers live through the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(at, c.as_ptr(), &mut st, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Removes everything in the directory `dir` (entries by `unlinkat` relative to it,
/// directories opened without following a symlink), down to `max_depth` levels beneath it:
/// what lies deeper stays (the bound keeps a hostile tree from exhausting descriptors or
/// the stack).
pub fn clear(dir: &OwnedFd, max_depth: usize) -> io::Result<()> {
    // The listing of the directory the descriptor holds, whatever its name is now.
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let c = cstr(&name)?;
        // SAFETY: a NUL-terminated name relative to an open directory descriptor.
        let r = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
        if r == 0 {
            continue;
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EISDIR) || max_depth == 0 {
            continue;
        }
        if let Ok(sub) = open_dir(dir.as_raw_fd(), Path::new(&name)) {
            let _ = clear(&sub, max_depth - 1);
        }
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
    }
    Ok(())
}

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Leftovers of dead owners, removed.
    pub removed: usize,
    /// Entries of this kind's name kept: their owner runs, or is of another pid namespace,
    /// or the entry is no directory of ours (a symlink, another user's).
    pub kept: usize,
}

/// Removes the directories under `parent` named `<prefix>...` by a process that no longer
/// runs (see the module's doc), if they are real directories owned by our uid. Each is
/// opened without following a symlink, emptied by descriptor and removed only while its
/// name still names the directory emptied; a symlink of such a name is left alone, and so is
/// where it points.
pub fn sweep(parent: &Path, prefix: &str, max_depth: usize) -> io::Result<Swept> {
    let mut swept = Swept::default();
    let Some(me) = this_process() else {
        // Without our own start time and namespace no owner can be judged dead.
        return Ok(swept);
    };
    // The temp directory itself may be reached through a symlink the user set up.
    let dir = open_dir_flags(libc::AT_FDCWD, parent, 0)?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut seen = std::collections::HashMap::new();
    for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?.flatten() {
        let name = entry.file_name();
        let Some(owner) = owner_of(&name, prefix) else {
            continue;
        };
        if owner.pidns != me.pidns || is_running(&owner, &mut seen) {
            swept.kept += 1;
            continue;
        }
        match remove_leftover(&dir, &name, uid, max_depth) {
            Ok(true) => swept.removed += 1,
            Ok(false) => swept.kept += 1,
            Err(e) => {
                swept.kept += 1;
                tracing::warn!(
                    "cannot remove {}, left by a session that no longer runs: {e}",
                    parent.join(&name).display()
                );
            }
        }
    }
    Ok(swept)
}

/// Runs [`sweep`] over each of `parents` on a thread of its own, so that a session's start
/// does not wait for it (a temp directory may hold thousands of entries); what it removed
/// is logged (`what`: the kind of directory, for the log). A sweep cut short by the end of
/// the process is taken up by the next session's.
pub fn sweep_in_background(
    what: &'static str,
    parents: Vec<std::path::PathBuf>,
    prefix: &'static str,
    max_depth: usize,
) {
    let spawned = std::thread::Builder::new()
        .name("awf-sweep".into())
        .spawn(move || {
            // Housekeeping: it yields the CPU to the session's own work.
            // SAFETY: setpriority on this thread's own id.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
            for parent in parents {
                match sweep(&parent, prefix, max_depth) {
                    Ok(s) => {
                        if s.removed > 0 {
                            tracing::info!(
                                "removed {} {what} under {} left by sessions that no longer run",
                                s.removed,
                                parent.display()
                            );
                        }
                        tracing::debug!(
                            "swept {what} under {}: {} removed, {} kept",
                            parent.display(),
                            s.removed,
                            s.kept
                        );
                    }
                    Err(e) => tracing::debug!("cannot sweep {}: {e}", parent.display()),
                }
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("cannot start the sweep of {what}: {e}");
    }
}

/// Removes `name` in `parent` if it is a directory owned by `uid`; false if it is not.
fn remove_leftover(parent: &OwnedFd, name: &OsStr, uid: u32, max_depth: usize) -> io::Result<bool> {
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    // Another session's sweep may remove the same leftover at the same time.
    let st = match stat_at(parent.as_raw_fd(), name) {
        Err(e) if gone(&e) => return Ok(false),
        r => r?,
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_uid != uid {
        return Ok(false);
    }
    let dir = match open_dir(parent.as_raw_fd(), Path::new(name)) {
        Ok(d) => d,
        // Replaced by a symlink or a file since: not ours to remove.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) || gone(&e) => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let opened = stat_at(dir.as_raw_fd(), OsStr::new(""))?;
    if opened.st_uid != uid {
        return Ok(false);
    }
    clear(&dir, max_depth)?;
    // The name is removed only while it still names the directory emptied.
    let now = match stat_at(parent.as_raw_fd(), name) {
        Err(e) if gone(&e) => return Ok(false),
        r => r?,
    };
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino) {
        return Ok(false);
    }
    let c = cstr(name)?;
    // SAFETY: a NUL-terminated name relative to an open directory descriptor.
    if unsafe { libc::unlinkat(parent.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
        let e = io::Error::last_os_error();
        return if gone(&e) { Ok(false) } else { Err(e) };
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_even_with_a_parenthesis_in_the_name() {
        let line =
            b"42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(start_time(line), Some(987654));
        assert_eq!(start_time(b"42 (short) S 1"), None);
    }

    #[test]
    fn only_names_of_the_four_field_form_have_an_owner() {
        let o = |s: &str| owner_of(OsStr::new(s), "awf-tmp-");
        assert_eq!(
            o("awf-tmp-12-345-4026531836-0"),
            Some(Owner {
                pid: 12,
                start: 345,
                pidns: 4026531836
            })
        );
        // An older awf's name (pid, clock in hex, counter) and others are not ours to judge.
        assert_eq!(o("awf-tmp-12-18a2b3c4d5e6f-0"), None);
        assert_eq!(o("awf-tmp-12-345-678"), None);
        assert_eq!(o("awf-tmp-12-345-678-1-2"), None);
        assert_eq!(o("awf-tmp-+12-345-678-1"), None);
        assert_eq!(o("awf-p-12-345-678-1"), None);
    }

    #[test]
    fn this_process_is_running_and_its_fresh_names_name_it() {
        let me = this_process().expect("/proc tells this process's start time");
        assert!(is_running(&me, &mut Default::default()));
        assert!(!is_running(
            &Owner {
                start: me.start + 1,
                ..me
            },
            &mut Default::default()
        ));
        assert_eq!(owner_of(OsStr::new(&fresh_name("k-", 3)), "k-"), Some(me));
    }
}
