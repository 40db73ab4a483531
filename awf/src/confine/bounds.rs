//! What one call may use of the machine: memory, CPU time, open files, the size of any one
//! file it writes and of its private TMPDIR, and (with `processes`) how many processes and
//! threads. Each bound is enforced by the strongest mechanism the machine offers, chosen once
//! per process ([`Mechanism::detect`]):
//!
//! - a cgroup of the call's own ([`super::cgroup`]), where awf may make one below the cgroup
//!   it was started in: `memory` is the cgroup's memory limit (past it the kernel's OOM killer
//!   ends the call, and the call answers that it reached the limit) and `processes` its
//!   `pids.max` (threads count);
//! - else rlimits, per process: `memory` is each process's address space (`RLIMIT_AS`: an
//!   allocation past it fails; a total over several processes is not bounded).
//!
//! `cpu_seconds` (`RLIMIT_CPU`, each process's CPU time: SIGXCPU, then SIGKILL a second later),
//! `file_size` (`RLIMIT_FSIZE`: a write past it fails with EFBIG) and `open_files`
//! (`RLIMIT_NOFILE`) are rlimits everywhere; `tmp_size` is a size-limited tmpfs as the call's
//! TMPDIR where mounts work ([`super::namespaces`]). [`Bounds`] is what the step states;
//! [`Rlimits`] the part the child sets between fork and exec (syscalls only).

use serde::{Deserialize, Serialize};

/// Memory one call may use unless `memory:` says otherwise: room for a real build.
pub const DEFAULT_MEMORY: u64 = 4 << 30;
/// The private TMPDIR's size unless `tmp_size:` says otherwise.
pub const DEFAULT_TMP_SIZE: u64 = 1 << 30;
/// The least `memory:` (a shell and a small tool).
pub const MIN_MEMORY: u64 = 16 << 20;
/// The least `tmp_size:` and `file_size:`.
pub const MIN_SIZE: u64 = 1 << 20;
/// The least `open_files:` (stdio and a few more).
pub const MIN_OPEN_FILES: u64 = 16;

/// The bounds a step states (`mcp_proxy.sandbox`); None: the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// Bytes of memory (default [`DEFAULT_MEMORY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// CPU seconds of each process (default: the call's timeout times the cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Bytes of the private TMPDIR (default [`DEFAULT_TMP_SIZE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size: Option<u64>,
    /// Bytes of any one file written (default: no bound but the disk's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size: Option<u64>,
    /// Descriptors open at once in each process (default: awf's own limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

impl Bounds {
    pub fn memory(&self) -> u64 {
        self.memory.unwrap_or(DEFAULT_MEMORY)
    }

    pub fn tmp_size(&self) -> u64 {
        self.tmp_size.unwrap_or(DEFAULT_TMP_SIZE)
    }

    /// The CPU seconds of a call whose timeout is `timeout` seconds.
    pub fn cpu_seconds(&self, timeout: u64) -> u64 {
        self.cpu_seconds.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
            timeout.saturating_mul(cores).max(1)
        })
    }

    /// Checks each stated bound against its least value; the message names the key and a
    /// value that works.
    pub fn check(&self) -> Result<(), String> {
        let least = [
            ("memory", self.memory, MIN_MEMORY, "memory: 4GiB"),
            ("tmp_size", self.tmp_size, MIN_SIZE, "tmp_size: 1GiB"),
            ("file_size", self.file_size, MIN_SIZE, "file_size: 2GiB"),
            (
                "open_files",
                self.open_files,
                MIN_OPEN_FILES,
                "open_files: 4096",
            ),
            ("cpu_seconds", self.cpu_seconds, 1, "cpu_seconds: 600"),
        ];
        for (key, value, min, example) in least {
            if let Some(v) = value
                && v < min
            {
                let shown = if key == "open_files" || key == "cpu_seconds" {
                    min.to_string()
                } else {
                    show_size(min)
                };
                return Err(format!(
                    "{key} is {v}, below the least it can be ({shown}); write e.g. `{example}`"
                ));
            }
        }
        Ok(())
    }
}

/// Reads a size as a workflow writes it: a whole number of bytes, or one with a binary
/// suffix (`512KiB`, `100MiB`, `4GiB`, `1TiB`; `K`, `M`, `G`, `T` mean the same).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    if number.is_empty() {
        return Err(format!(
            "{text:?} is not a size; write e.g. `4GiB`, `100MiB` or bytes"
        ));
    }
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        other => {
            return Err(format!(
                "{text:?} has the unit {other:?}; write bytes or KiB, MiB, GiB, TiB \
                 (e.g. `4GiB`, `100MiB`)"
            ));
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size; write e.g. `4GiB`, `100MiB` or bytes"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large a size"))
}

/// A size in the largest binary unit that divides it.
pub fn show_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// How memory and the process cap are enforced on this machine.
#[derive(Debug, Clone)]
pub enum Mechanism {
    /// A cgroup per call below this one (see [`super::cgroup`]).
    Cgroup(super::cgroup::Home),
    /// Rlimits per process; why no cgroup could be had.
    Rlimits(String),
}

impl Mechanism {
    /// Found once per process.
    pub fn detect() -> &'static Mechanism {
        static FOUND: std::sync::OnceLock<Mechanism> = std::sync::OnceLock::new();
        FOUND.get_or_init(|| match super::cgroup::Home::find() {
            Ok(home) => Mechanism::Cgroup(home),
            Err(why) => Mechanism::Rlimits(why),
        })
    }

    /// One line for `awf sandbox check` and the WARN.
    pub fn describe(&self) -> String {
        match self {
            Mechanism::Cgroup(home) => format!(
                "a cgroup per call ({}): memory is a limit over all its processes (the call is \
                 killed past it), processes and threads capped by pids.max",
                home.describe()
            ),
            Mechanism::Rlimits(why) => format!(
                "rlimits per process ({why}): memory bounds each process's address space \
                 (RLIMIT_AS), not the call's total"
            ),
        }
    }
}

/// The length of [`Rlimits::to_words`].
pub const RLIMIT_WORDS: usize = 13;

/// The rlimits a call's child sets on itself, between fork and exec.
#[derive(Debug, Clone, Copy)]
pub struct Rlimits {
    /// (resource, soft, hard)
    limits: [(libc::__rlimit_resource_t, u64, u64); 4],
    count: usize,
}

impl Rlimits {
    /// The rlimits of a call under `bounds` with a `timeout` of that many seconds; memory
    /// as address space only when `address_space` (no cgroup holds it).
    pub fn new(bounds: &Bounds, timeout: u64, address_space: bool) -> Rlimits {
        let mut r = Rlimits {
            limits: [(libc::RLIMIT_CPU, 0, 0); 4],
            count: 0,
        };
        let cpu = bounds.cpu_seconds(timeout);
        // SIGXCPU at the bound, SIGKILL one second later for a process that ignores it.
        r.push(libc::RLIMIT_CPU, cpu, cpu.saturating_add(1));
        if address_space {
            let m = bounds.memory();
            r.push(libc::RLIMIT_AS, m, m);
        }
        if let Some(f) = bounds.file_size {
            r.push(libc::RLIMIT_FSIZE, f, f);
        }
        if let Some(n) = bounds.open_files {
            r.push(libc::RLIMIT_NOFILE, n, n);
        }
        r
    }

    /// As plain words, for a jail made ahead of its command to read from a pipe
    /// ([`super::standby`]): the count, then resource, soft and hard of each.
    pub fn to_words(&self) -> [u64; RLIMIT_WORDS] {
        let mut w = [0u64; RLIMIT_WORDS];
        w[0] = self.count as u64;
        for (i, &(resource, soft, hard)) in self.limits[..self.count].iter().enumerate() {
            w[1 + 3 * i] = u64::from(resource);
            w[2 + 3 * i] = soft;
            w[3 + 3 * i] = hard;
        }
        w
    }

    /// Back from [`Rlimits::to_words`] (in the child: no allocation).
    pub fn from_words(w: &[u64; RLIMIT_WORDS]) -> Rlimits {
        let mut r = Rlimits {
            limits: [(libc::RLIMIT_CPU, 0, 0); 4],
            count: 0,
        };
        for i in 0..(w[0] as usize).min(4) {
            r.push(
                w[1 + 3 * i] as libc::__rlimit_resource_t,
                w[2 + 3 * i],
                w[3 + 3 * i],
            );
        }
        r
    }

    fn push(&mut self, resource: libc::__rlimit_resource_t, soft: u64, hard: u64) {
        self.limits[self.count] = (resource, soft, hard);
        self.count += 1;
    }

    /// In the child: lowers each limit (never raises one above the hard limit it has).
    /// Syscalls only.
    pub fn apply(&self) -> std::io::Result<()> {
        for &(resource, soft, hard) in &self.limits[..self.count] {
            let mut now = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit/setrlimit on a stack struct.
            unsafe {
                if libc::getrlimit(resource, &mut now) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let hard = hard.min(now.rlim_max);
                let new = libc::rlimit {
                    rlim_cur: soft.min(hard),
                    rlim_max: hard,
                };
                if libc::setrlimit(resource, &new) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_written_and_bad_ones_name_the_fix() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("100MiB"), Ok(100 << 20));
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("4GB").unwrap_err().contains("GiB"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert_eq!(show_size(1 << 30), "1GiB");
        assert_eq!(show_size(1536), "1536 bytes");
    }

    #[test]
    fn bounds_below_their_least_are_refused() {
        let b = Bounds {
            memory: Some(1 << 20),
            ..Bounds::default()
        };
        assert!(b.check().unwrap_err().contains("memory"));
        assert!(Bounds::default().check().is_ok());
        assert_eq!(Bounds::default().memory(), DEFAULT_MEMORY);
        let cpu = Bounds::default().cpu_seconds(10);
        assert!(cpu >= 10, "{cpu}");
    }

    #[test]
    fn rlimits_are_lowered_in_a_child() {
        let b = Bounds {
            open_files: Some(64),
            file_size: Some(1 << 20),
            ..Bounds::default()
        };
        let r = Rlimits::new(&b, 5, true);
        // SAFETY: the child only makes syscalls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = r.apply().is_ok();
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
            let code = if ok && l.rlim_cur == 64 { 0 } else { 1 };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
