//! Write confinement for Bash with Landlock: the command may read anything but write only
//! beneath the root, the session's private temp directory ([`PrivateTmp`], Bash's TMPDIR),
//! `/dev/null` and the paths the config adds. The shared system temp directory is not
//! writable: what one session leaves there another (or awf itself) could pick up. The
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

/// A session's own temp directory: created fresh (0700, unique name) under the system
/// temp directory, removed with everything in it when dropped, i.e. at the session's end.
#[derive(Debug)]
pub struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    pub fn create() -> std::io::Result<PrivateTmp> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let path = std::env::temp_dir().join(format!(
            "awf-tmp-{}-{}",
            std::process::id(),
            crate::telemetry::new_session_id()
        ));
        // Not recursive: fails if the name exists (nothing planted there is reused).
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        // The umask may have taken bits off; the owner needs all three.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        Ok(PrivateTmp { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(
                "cannot remove the temp directory {}: {e}",
                self.path.display()
            );
        }
    }
}

#[derive(Debug, Clone)]
pub struct Confinement {
    status: Status,
    writable: Vec<PathBuf>,
    tmp: PathBuf,
}

impl Confinement {
    /// Probes the kernel once (one syscall) when enabled. `tmp` is the session's private
    /// temp directory (Bash's TMPDIR).
    pub fn new(enabled: bool, root: &Path, tmp: &Path, extra: &[PathBuf]) -> Confinement {
        let mut writable = vec![
            root.to_path_buf(),
            tmp.to_path_buf(),
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
        Confinement {
            status,
            writable,
            tmp: tmp.to_path_buf(),
        }
    }

    /// The directory Bash gets as TMPDIR.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
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
                "Writes are confined (Landlock) to the root, a private temp directory \
                 ($TMPDIR) and /dev/null{}; the rest, /tmp included, is read-only.",
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
        let c = Confinement::new(false, Path::new("/"), Path::new("/t"), &[]);
        assert_eq!(c.status(), &Status::Off);
        assert!(c.prepare().unwrap().is_none());
        assert!(c.describe().contains("NOT confined"));
    }

    #[test]
    fn writable_holds_root_tmp_devnull_and_extras() {
        let c = Confinement::new(
            false,
            Path::new("/r"),
            Path::new("/t"),
            &[PathBuf::from("/x")],
        );
        let w: Vec<_> = c
            .writable()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(w[..3], ["/r", "/t", "/dev/null"]);
        assert!(!w.contains(&std::env::temp_dir().display().to_string()));
        assert_eq!(w[3..], ["/x"]);
    }

    #[test]
    fn private_tmp_is_0700_and_goes_when_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let t = PrivateTmp::create().unwrap();
        let p = t.path().to_path_buf();
        assert_ne!(p, std::env::temp_dir());
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(p.join("f"), "x").unwrap();
        drop(t);
        assert!(!p.exists());
    }
}
