//! Write confinement for Bash with Landlock: the command may read anything but write only
//! beneath the root, the temp directory, `/dev/null` and the paths the config adds. The
//! ruleset is built in the parent (allocation and path opening are not safe after fork)
//! and only `restrict_self` runs in the child, between fork and exec.

use landlock::{
    ABI, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr,
};
use std::path::{Path, PathBuf};

/// The write rights we handle. ABI v4's set (no IoctlDev, no ResolveUnix): confining
/// writes is the goal; terminal ioctls and Unix-socket connects stay as they were.
const HANDLED_ABI: ABI = ABI::V4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Writes are confined; the kernel's Landlock ABI version.
    On(i64),
    /// Switched off in the config.
    Off,
    /// Wanted but the kernel does not offer it (why).
    Unavailable(String),
}

#[derive(Debug, Clone)]
pub struct Confinement {
    status: Status,
    writable: Vec<PathBuf>,
}

impl Confinement {
    /// Probes the kernel once (one syscall) when enabled.
    pub fn new(enabled: bool, root: &Path, extra: &[PathBuf]) -> Confinement {
        let mut writable = vec![
            root.to_path_buf(),
            std::env::temp_dir(),
            PathBuf::from("/dev/null"),
        ];
        writable.extend(extra.iter().cloned());
        let status = if !enabled {
            Status::Off
        } else {
            match kernel_abi() {
                Ok(v) => Status::On(v),
                Err(why) => Status::Unavailable(why),
            }
        };
        Confinement { status, writable }
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// One sentence for the Bash tool's description.
    pub fn describe(&self) -> String {
        match &self.status {
            Status::On(_) => format!(
                "Writes are confined (Landlock) to the root, the temp directory and /dev/null{}; \
                 reads are not restricted.",
                if self.writable.len() > 3 {
                    " and the configured extra paths"
                } else {
                    ""
                }
            ),
            Status::Off => "Writes are NOT confined (Landlock switched off in the config).".into(),
            Status::Unavailable(_) => {
                "Writes are NOT confined (Landlock is not available on this kernel).".into()
            }
        }
    }

    /// Builds the ruleset for one command, or None when not confining.
    pub fn prepare(&self) -> Result<Option<RulesetCreated>, String> {
        if !matches!(self.status, Status::On(_)) {
            return Ok(None);
        }
        let write = AccessFs::from_write(HANDLED_ABI);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(write)
            .map_err(|e| format!("Landlock: {e}"))?
            .create()
            .map_err(|e| format!("Landlock: {e}"))?;
        for path in &self.writable {
            // A configured path that does not exist cannot be written anyway; skip it.
            let Ok(fd) = PathFd::new(path) else { continue };
            let access = if path.is_dir() {
                write
            } else {
                write & AccessFs::from_file(HANDLED_ABI)
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("Landlock rule for {}: {e}", path.display()))?;
        }
        Ok(Some(ruleset))
    }
}

/// The kernel's Landlock ABI version, via `landlock_create_ruleset(NULL, 0, VERSION)`.
fn kernel_abi() -> Result<i64, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query takes no pointer and returns an integer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        Ok(v)
    } else {
        let err = std::io::Error::last_os_error();
        Err(match err.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel was built without Landlock".into(),
            Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot (lsm= parameter)".into(),
            _ => format!("Landlock probe failed: {err}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_no_ruleset_and_says_so() {
        let c = Confinement::new(false, Path::new("/"), &[]);
        assert_eq!(c.status(), &Status::Off);
        assert!(c.prepare().unwrap().is_none());
        assert!(c.describe().contains("NOT confined"));
    }

    #[test]
    fn writable_holds_root_tmp_devnull_and_extras() {
        let c = Confinement::new(false, Path::new("/r"), &[PathBuf::from("/x")]);
        let w: Vec<_> = c
            .writable()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(w[0], "/r");
        assert!(w.contains(&"/dev/null".to_string()) && w.contains(&"/x".to_string()));
    }
}
