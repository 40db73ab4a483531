//! A session's confinement in words: the Bash tool's description (so what an agent and
//! `awf tools list` read) and the JSON `awf sandbox check` and the audit show.

use super::*;

/// Paths as a comma-separated list.
fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Confinement {
    /// The bounds in words, for the description.
    fn describe_bounds(&self) -> Option<String> {
        let b = self.bounds?;
        let memory = match self.cgroups {
            Some(_) => format!(
                "at most {} of memory over all its processes (a cgroup: past it the call is \
                 killed)",
                bounds::show_size(b.memory())
            ),
            None => format!(
                "at most {} of address space per process (RLIMIT_AS: an allocation past it \
                 fails)",
                bounds::show_size(b.memory())
            ),
        };
        let cpu = match b.cpu_seconds {
            Some(n) => format!("{n} CPU seconds per process"),
            None => "CPU seconds per process up to its timeout times the cores".into(),
        };
        let mut out = format!("each call has {memory}, {cpu}");
        if self.session.is_some() {
            out.push_str(&format!(
                ", a TMPDIR of at most {} (No space left on device past it; kept for the \
                 session's next calls)",
                bounds::show_size(b.tmp_size())
            ));
        }
        if let Some(f) = b.file_size {
            out.push_str(&format!(
                ", files of at most {} (a longer write fails with EFBIG)",
                bounds::show_size(f)
            ));
        }
        if let Some(n) = b.open_files {
            out.push_str(&format!(", {n} open files per process"));
        }
        if self.cgroups.is_some() && !(self.support.pids && self.support.pid_max) {
            out.push_str(&format!(
                ", at most {} processes and threads at once (the cgroup's pids.max)",
                self.processes
            ));
        }
        Some(out)
    }

    /// The policy in words, for the Bash tool's description (and so `awf tools list`).
    pub fn describe(&self) -> String {
        let (writes, reads, procs) = (self.say_writes(), self.say_reads(), self.say_processes());
        let (net, unix) = (self.say_network(), self.say_unix_sockets());
        let bounds = self
            .describe_bounds()
            .map_or(String::new(), |b| format!("; {b}"));
        let degraded = if self.degraded.is_empty() {
            String::new()
        } else {
            format!("; on this machine: {}", self.degraded.join("; "))
        };
        format!(
            "Sandbox: {writes}; {reads}; {procs}; {net}{unix}{bounds}{degraded}; the environment holds only PATH, HOME, \
             locale, TERM, USER, SHELL, TZ, TMPDIR, proxy and CA-bundle variables plus those \
             the workflow names (never a key, secret, token or password it does not name)."
        )
    }

    /// Where the command may write.
    fn say_writes(&self) -> String {
        match &self.status {
            Status::On(_) => {
                let extra = &self.writable[self.fixed_writable..];
                format!(
                    "writes are confined (Landlock) to the root, a private temp directory \
                     ($TMPDIR), /dev/null{}; the rest, /tmp and $HOME included, is read-only",
                    if extra.is_empty() {
                        String::new()
                    } else {
                        format!(" and {}", list(extra))
                    }
                )
            }
            Status::Off => "writes are NOT confined (Landlock switched off in the config)".into(),
            Status::Unavailable(_) => {
                "writes are NOT confined (Landlock is not available on this kernel)".into()
            }
        }
    }

    /// What the command may read, and what it cannot however it reads.
    fn say_reads(&self) -> String {
        let hidden = if self.support.mounts {
            "secret locations (~/.ssh, ~/.aws, cloud, registry and agent CLI logins, \
             /etc/shadow, ...) read as empty"
        } else if self.plan.is_some() {
            "secret locations (~/.ssh, ~/.aws, cloud, registry and agent CLI logins, \
             /etc/shadow, ...) present at the start are not readable (Landlock grants reads \
             around them; no mount namespace covers them)"
        } else {
            "secret locations are NOT hidden (no user namespace)"
        };
        match self.read {
            ReadMode::Confined => {
                let extra = if self.readable_extra.is_empty() {
                    String::new()
                } else {
                    format!(", {}", list(&self.readable_extra))
                };
                format!(
                    "reads are confined (read: confined) to the writable paths, the system \
                     (/usr, /etc, /opt, ...), the toolchains on PATH, ~/.gitconfig{extra}; \
                     anything else (the rest of $HOME, /tmp, other repositories) fails with \
                     Permission denied by this policy; {hidden}"
                )
            }
            ReadMode::Host => format!("reads are not confined (read: host) but {hidden}"),
        }
    }

    /// The command's processes: apart, capped, signals kept in.
    fn say_processes(&self) -> String {
        if self.support.pids {
            let signals = if self.plan.as_ref().is_some_and(|p| p.scopes_signals()) {
                "; signals to processes outside the call are refused"
            } else {
                ""
            };
            let cap = if self.support.pid_max {
                format!(
                    ", at most {} processes and threads at once (its pid_max; a fork beyond \
                     fails with Resource temporarily unavailable)",
                    self.processes
                )
            } else {
                ", processes NOT capped (no pid_max per PID namespace before Linux 6.14)".into()
            };
            format!(
                "each command runs in its own PID namespace: ps shows only its own processes, \
                 and none outlives it{cap}{signals}"
            )
        } else {
            "other processes of the user are visible and processes are NOT capped (no PID \
             namespace)"
                .into()
        }
    }

    /// The command's network.
    fn say_network(&self) -> String {
        match &self.net {
            NetStatus::Allowed => "network allowed".to_string(),
            NetStatus::Isolated => "network denied: the command has a network namespace of \
                 the session's own with loopback only (no route out, no UDP, no DNS); servers \
                 it starts on 127.0.0.1 are the session's, not the host's"
                .into(),
            NetStatus::DeniedTcp => {
                "network denied: TCP connect and bind are refused on every port (Landlock), UDP \
                 and raw sockets too (seccomp); no network namespace, so servers on 127.0.0.1 \
                 cannot be started either"
                    .into()
            }
            NetStatus::Hosts => format!(
                "network: only {}, through the proxy at http://127.0.0.1:{} (HTTP_PROXY, \
                 HTTPS_PROXY and ALL_PROXY are set; SOCKS5 on the same port as socks5h://; a tool \
                 that ignores them has no network; \
                 the host's own loopback is {} with a listed port); anything else is refused \
                 with 403, and every connection is audited",
                self.egress.as_ref().map_or(String::new(), |e| e.describe()),
                egress::PROXY_PORT,
                egress::rules::INTERNAL_HOST
            ),
            NetStatus::Unenforced(why) => format!("network NOT restricted ({why})"),
        }
    }

    /// The unix sockets the command may reach (after a `;`), if the filter is on.
    fn say_unix_sockets(&self) -> String {
        match &self.unix_filter {
            Some(f) if f.supervised() => format!(
                "; unix sockets: it may connect to {} and no other pathname socket (the host's \
                 docker.sock, ssh-agent, D-Bus fail with Permission denied); each connection \
                 is audited",
                list(&self.unix_grants)
            ),
            Some(_) => "; no unix socket of its own: socket(AF_UNIX) fails with Permission \
                 denied, so the host's (docker.sock, ssh-agent, D-Bus) are out of reach (pipes \
                 and stream socketpairs work)"
                .to_string(),
            None => String::new(),
        }
    }

    /// The policy as data, for `awf validate --format json` and tests.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "read": self.read.name(),
            "readable": self.readable,
            "writable": self.writable,
            "pid_namespace": self.support.pids,
            "processes": (self.support.pids && self.support.pid_max).then_some(self.processes),
            "hidden_by_mounts": self.support.mounts,
            "degraded": self.degraded,
            "bounds": self.bounds.map(|b| serde_json::json!({
                "memory": b.memory(),
                "memory_by": if self.cgroups.is_some() { "cgroup" } else { "rlimit" },
                "cpu_seconds": b.cpu_seconds,
                "tmp_size": b.tmp_size(),
                "file_size": b.file_size,
                "open_files": b.open_files,
            })),
            "unix_sockets": match &self.unix_filter {
                Some(f) if f.supervised() => serde_json::json!(self.unix_grants.as_slice()),
                Some(_) => "refused".into(),
                None => "allowed".into(),
            },
        })
    }
}
