//! The OS facts the benchmark needs: CPU affinity (to pin a latency run to one core)
//! and a process's memory from `/proc/PID/status`, `smaps_rollup` and `smaps`.

use std::collections::BTreeMap;
use std::io;

/// A CPU set, as `sched_getaffinity` returns it.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The set holding just `cpu`.
    pub fn single(cpu: usize) -> CpuSet {
        // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU_SET only writes inside `set` (it ignores out-of-range CPUs).
        unsafe { libc::CPU_SET(cpu, &mut set) };
        CpuSet(set)
    }

    /// The affinity of the calling thread.
    pub fn current() -> io::Result<CpuSet> {
        // SAFETY: as above.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CpuSet(set))
    }

    /// Applies the set to the calling thread (pid 0 = this thread). Also used in a
    /// forked child before `exec`, so every thread the server starts inherits it.
    pub fn apply_to_current_thread(&self) -> io::Result<()> {
        // SAFETY: `self.0` is a valid cpu_set_t of the size passed; a plain syscall,
        // safe between fork and exec.
        let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Pins the calling thread to one CPU until dropped, then restores its affinity.
pub struct Pinned(CpuSet);

impl Pinned {
    pub fn to(cpu: usize) -> io::Result<Pinned> {
        let before = CpuSet::current()?;
        CpuSet::single(cpu).apply_to_current_thread().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot pin to CPU {cpu} ({e}); pick another with --cpu"),
            )
        })?;
        Ok(Pinned(before))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.0.apply_to_current_thread();
    }
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status has no {field} line"),
            )
        })
}

/// Every `kB` field of `/proc/PID/smaps_rollup` (`Pss`, `Pss_Anon`, `Private_Dirty`...),
/// in KiB: one read gives figures taken at the same moment.
pub fn rollup(pid: u32) -> io::Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let kib = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some((name.to_string(), kib))
        })
        .collect())
}

/// Resident KiB of each mapping of a process (`/proc/PID/smaps`), keyed by file name and
/// permissions; the process's own executable is named `(binary)` so that servers can
/// be compared mapping by mapping.
pub fn resident_by_mapping(pid: u32) -> io::Result<BTreeMap<String, u64>> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut out = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            let perms = fields.next().unwrap_or_default();
            let path = fields.nth(3).unwrap_or("[anon]");
            let name = if std::path::Path::new(path) == exe {
                "(binary)".to_string()
            } else {
                path.rsplit('/').next().unwrap_or(path).to_string()
            };
            current = format!("{name} {perms}");
        } else if first == "Rss:" {
            let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            *out.entry(current.clone()).or_default() += kib;
        }
    }
    Ok(out)
}
