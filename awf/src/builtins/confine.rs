//! Write and network confinement for Bash with Landlock: the command may read anything but
//! write only beneath the root, the session's private temp directory ([`PrivateTmp`],
//! Bash's TMPDIR), `/dev/null` and the paths the config adds. The shared system temp
//! directory is not writable: what one session leaves there another (or awf itself) could
//! pick up. With [`Network::Deny`] (the default) TCP connect and bind are refused too, so
//! the workspace cannot be sent anywhere by the agent's shell. The ruleset is built in the
//! parent (allocation and path opening are not safe after fork) and only `restrict_self`
//! runs in the child, between fork and exec.

use landlock::{
    ABI, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The write rights we handle. ABI v4's set (no IoctlDev, no ResolveUnix): confining
/// writes is the goal; terminal ioctls and Unix-socket connects stay as they were.
const HANDLED_ABI: ABI = ABI::V4;

/// The first Landlock ABI that can refuse TCP connect and bind (Linux 6.7).
const NET_ABI: i64 = 4;

/// Bash's TCP network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    Allow,
    /// TCP connect and bind refused (Landlock ABI 4); UDP, hence DNS, is not covered.
    Deny,
}

/// What Bash's network is, as enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetStatus {
    Allowed,
    Denied,
    /// Deny was the default but cannot be enforced (why).
    Unenforced(String),
}

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
        // pid, clock and a counter: unique among live and earlier sessions alike.
        static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "awf-tmp-{}-{nanos:x}-{}",
            std::process::id(),
            CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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
    net: NetStatus,
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
        let mut c = Confinement {
            status,
            net: NetStatus::Allowed,
            writable,
            tmp: tmp.to_path_buf(),
        };
        c.net = c.net_status(Network::Deny);
        c
    }

    /// Sets Bash's network policy. `network` None is the default, deny where the kernel can
    /// enforce it (a WARN and no restriction where it cannot); an explicit deny the kernel
    /// cannot enforce is an error, since the workflow asked for it.
    pub fn with_network(mut self, network: Option<Network>) -> Result<Confinement, String> {
        self.net = self.net_status(network.unwrap_or(Network::Deny));
        if let (Some(Network::Deny), NetStatus::Unenforced(why)) = (network, &self.net) {
            return Err(format!(
                "network: deny cannot be enforced: {why}; set network: allow, or run on a \
                 kernel with Landlock ABI {NET_ABI} or later (Linux 6.7+)"
            ));
        }
        Ok(self)
    }

    fn net_status(&self, want: Network) -> NetStatus {
        match (want, &self.status) {
            (Network::Allow, _) => NetStatus::Allowed,
            (Network::Deny, Status::On(v)) if *v >= NET_ABI => NetStatus::Denied,
            (Network::Deny, Status::On(v)) => NetStatus::Unenforced(format!(
                "the kernel's Landlock ABI {v} has no network rights (they need ABI {NET_ABI})"
            )),
            (Network::Deny, Status::Off) => {
                NetStatus::Unenforced("Landlock is switched off".into())
            }
            (Network::Deny, Status::Unavailable(why)) => NetStatus::Unenforced(why.clone()),
        }
    }

    pub fn net(&self) -> &NetStatus {
        &self.net
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

    /// The policy in words, for the Bash tool's description (and so `awf tools list`).
    pub fn describe(&self) -> String {
        let writes = match &self.status {
            Status::On(_) => {
                let extra: Vec<String> = self.writable[3..]
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                format!(
                    "writes are confined (Landlock) to the root, a private temp directory \
                     ($TMPDIR), /dev/null{}; the rest, /tmp and $HOME included, is read-only",
                    if extra.is_empty() {
                        String::new()
                    } else {
                        format!(" and {}", extra.join(", "))
                    }
                )
            }
            Status::Off => "writes are NOT confined (Landlock switched off in the config)".into(),
            Status::Unavailable(_) => {
                "writes are NOT confined (Landlock is not available on this kernel)".into()
            }
        };
        let net = match &self.net {
            NetStatus::Allowed => "network allowed".to_string(),
            NetStatus::Denied => {
                "network denied: TCP connect and bind are refused (Landlock; UDP is not)".into()
            }
            NetStatus::Unenforced(why) => format!("network NOT restricted ({why})"),
        };
        format!(
            "Sandbox: {writes}; {net}; the environment holds only PATH, HOME, locale, TERM, \
             USER, SHELL, TZ, TMPDIR, proxy and CA-bundle variables plus those the workflow \
             names (never a key, secret, token or password it does not name)."
        )
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
            .map_err(|e| format!("Landlock: {e}"))?;
        if self.net == NetStatus::Denied {
            // Handled with no port rule: every TCP connect and bind is refused. Never
            // silently weaker: the ABI was checked to have these rights.
            ruleset = ruleset
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(|e| format!("Landlock network rights: {e}"))?;
        }
        let mut ruleset = ruleset.create().map_err(|e| format!("Landlock: {e}"))?;
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
        assert!(matches!(c.net(), NetStatus::Unenforced(_)));
        let e = c.with_network(Some(Network::Deny)).unwrap_err();
        assert!(e.contains("set network: allow"), "{e}");
    }

    #[test]
    fn network_deny_needs_abi_4() {
        let mut c = Confinement::new(false, Path::new("/r"), Path::new("/t"), &[]);
        c.status = Status::On(3);
        assert!(matches!(
            c.net_status(Network::Deny),
            NetStatus::Unenforced(_)
        ));
        // The default degrades (with a WARN where it is used); an explicit deny is refused.
        let d = c.clone().with_network(None).unwrap();
        assert!(
            d.describe().contains("network NOT restricted"),
            "{}",
            d.describe()
        );
        assert!(c.clone().with_network(Some(Network::Deny)).is_err());
        c.status = Status::On(7);
        let d = c.with_network(None).unwrap();
        assert_eq!(d.net(), &NetStatus::Denied);
        assert!(d.describe().contains("TCP connect and bind are refused"));
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
