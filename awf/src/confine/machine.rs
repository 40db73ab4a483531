//! Why a layer of the sandbox is missing on this machine: the settings that decide whether
//! an unprivileged process may make namespaces (the sysctls, AppArmor's restriction, a
//! container runtime's seccomp filter), read without starting anything, so that `awf
//! sandbox check` can name the cause and the command that lifts it.

use std::path::Path;

/// What this machine says about itself.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restricts_userns: Option<bool>,
    /// awf's own AppArmor label, when it runs under a profile (`unconfined` else).
    pub apparmor_label: Option<String>,
    /// `kernel.unprivileged_userns_clone` (Debian's older knob).
    pub userns_clone: Option<bool>,
    /// `user.max_user_namespaces` (of this user namespace).
    pub max_user_namespaces: Option<u64>,
    /// This process runs under a seccomp filter (`Seccomp: 2`): a container runtime's.
    pub seccomp_filtered: bool,
    /// Inside a container (and which kind, if told).
    pub container: Option<String>,
    /// WSL's kernel.
    pub wsl: bool,
    /// `uname -r`.
    pub kernel: String,
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn flag(p: &str) -> Option<bool> {
    read(p).and_then(|v| v.parse::<u64>().ok()).map(|v| v != 0)
}

impl Machine {
    pub fn read() -> Machine {
        let status = read("/proc/self/status").unwrap_or_default();
        let seccomp_filtered = status
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp:"))
            .is_some_and(|v| v.trim() == "2");
        let container = if Path::new("/.dockerenv").exists() {
            Some("docker".to_string())
        } else if Path::new("/run/.containerenv").exists() {
            Some("podman".to_string())
        } else {
            std::env::var("container").ok().filter(|v| !v.is_empty())
        };
        let label =
            read("/proc/self/attr/apparmor/current").or_else(|| read("/proc/self/attr/current"));
        Machine {
            apparmor_restricts_userns: flag(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            apparmor_label: label.filter(|l| !l.is_empty()),
            userns_clone: flag("/proc/sys/kernel/unprivileged_userns_clone"),
            max_user_namespaces: read("/proc/sys/user/max_user_namespaces")
                .and_then(|v| v.parse().ok()),
            seccomp_filtered,
            container,
            wsl: read("/proc/sys/kernel/osrelease")
                .is_some_and(|r| r.to_lowercase().contains("microsoft")),
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
        }
    }

    /// Why no user namespace with working mounts could be had, and the fix: (degraded — a
    /// namespace is made but holds no capability — or missing, why, fix).
    pub fn why_no_userns(&self, probe_error: &str) -> (bool, String, String) {
        if self.max_user_namespaces == Some(0) {
            return (
                false,
                "user.max_user_namespaces is 0: no user namespace may be made".into(),
                "sudo sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)"
                    .into(),
            );
        }
        if self.userns_clone == Some(false) {
            return (
                false,
                "kernel.unprivileged_userns_clone is 0: unprivileged user namespaces are off".into(),
                "sudo sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/ to keep it)"
                    .into(),
            );
        }
        if self.apparmor_restricts_userns == Some(true) {
            return (
                true,
                "kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor): a user namespace \
                 is made but holds no capability, so no mount works in it"
                    .into(),
                "awf sandbox apparmor-profile | sudo tee /etc/apparmor.d/awf && sudo \
                 apparmor_parser -r /etc/apparmor.d/awf (or, for the whole machine, sudo sysctl \
                 -w kernel.apparmor_restrict_unprivileged_userns=0)"
                    .into(),
            );
        }
        if self.seccomp_filtered {
            let inside = self
                .container
                .as_deref()
                .map_or(String::new(), |c| format!(" ({c} container)"));
            return (
                false,
                format!(
                    "a seccomp filter on awf{inside} refuses what the namespaces need \
                     ({probe_error})"
                ),
                "run the container with --security-opt seccomp=unconfined --security-opt \
                 apparmor=unconfined, or a seccomp profile that allows unshare and clone with \
                 CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID and CLONE_NEWNET, and mount"
                    .into(),
            );
        }
        (
            false,
            format!("the kernel refused ({probe_error})"),
            "check that the kernel allows unprivileged user namespaces (CONFIG_USER_NS) and \
             that no security module refuses them to awf"
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_names_its_own_fix() {
        let m = Machine {
            max_user_namespaces: Some(0),
            ..Machine::default()
        };
        let (degraded, why, fix) = m.why_no_userns("x");
        assert!(!degraded && why.contains("max_user_namespaces") && fix.contains("sysctl"));
        let m = Machine {
            apparmor_restricts_userns: Some(true),
            ..Machine::default()
        };
        let (degraded, _, fix) = m.why_no_userns("x");
        assert!(degraded && fix.contains("apparmor-profile"));
        let m = Machine {
            seccomp_filtered: true,
            container: Some("docker".into()),
            ..Machine::default()
        };
        let (_, why, fix) = m.why_no_userns("Operation not permitted");
        assert!(why.contains("docker container") && fix.contains("seccomp=unconfined"));
        assert!(!Machine::read().kernel.is_empty());
    }
}
