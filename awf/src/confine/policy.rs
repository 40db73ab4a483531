//! The sandbox a step states, as the jail takes it: the network, the read mode, the
//! guarantees a step may require, and [`Policy`], from which a session's
//! [`Confinement`](super::Confinement) is resolved.

use super::namespaces::Support;
use super::{bounds, readable, secrets};
use crate::private_files::real_path;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Processes and threads one Bash call may have alive at once, unless `processes:` says
/// otherwise: room for a parallel build (the kernel counts every thread), not for a fork
/// bomb.
pub const DEFAULT_PROCESSES: u32 = 1024;
/// The least `processes:` (the kernel's least `pid_max` is 301).
pub const MIN_PROCESSES: u32 = 300;
/// The most `processes:` (the kernel's `PID_MAX_LIMIT` less one).
pub const MAX_PROCESSES: u32 = 4 * 1024 * 1024 - 1;

/// Bash's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    Allow,
    /// Nothing leaves the call: a network namespace with loopback only (UDP and DNS
    /// included), else Landlock's TCP rights (connect and bind; UDP is not covered).
    Deny,
    /// Only these hosts (`network: {allow: [...]}`, as written), through awf's egress
    /// proxy, the only way out of a network namespace with loopback only.
    Hosts(Vec<String>),
}

impl Network {
    /// The form the config file takes: `"allow"`, `"deny"`, `{"allow": [hosts]}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Network::Allow => "allow".into(),
            Network::Deny => "deny".into(),
            Network::Hosts(h) => serde_json::json!({ "allow": h }),
        }
    }
}

impl serde::Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Word(String),
            Hosts { allow: Vec<String> },
        }
        match Wire::deserialize(d)? {
            Wire::Word(w) if w == "allow" => Ok(Network::Allow),
            Wire::Word(w) if w == "deny" => Ok(Network::Deny),
            Wire::Word(w) => Err(serde::de::Error::custom(format!(
                "network must be \"allow\", \"deny\" or {{\"allow\": [hosts]}}, found {w:?}"
            ))),
            Wire::Hosts { allow } => Ok(Network::Hosts(allow)),
        }
    }
}

/// A guarantee a step may require (`sandbox.require`): the step refuses to run where the
/// machine cannot give it in full, rather than run with less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Guarantee {
    /// Reads confined by Landlock and secret locations covered by mounts (a mount namespace).
    Reads,
    /// Processes apart (a PID namespace) and capped (its pid_max, or a cgroup's pids.max).
    Processes,
    /// `network: deny` or a host list enforced by a network namespace of the call's own.
    Network,
}

impl Guarantee {
    pub const ALL: [Guarantee; 3] = [Guarantee::Reads, Guarantee::Processes, Guarantee::Network];

    pub fn name(self) -> &'static str {
        match self {
            Guarantee::Reads => "reads",
            Guarantee::Processes => "processes",
            Guarantee::Network => "network",
        }
    }
}

/// What Bash may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadMode {
    /// The workspace, its temp and writable paths, the system, the toolchains on PATH,
    /// git's configuration and the `readable:` paths; nothing else (Landlock).
    Confined,
    /// What the user can, but the secret locations and the `hidden:` paths.
    Host,
}

impl ReadMode {
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Confined => "confined",
            ReadMode::Host => "host",
        }
    }
}

/// A sandbox as it is written: a step's `mcp_proxy.sandbox`, a server's or a plugin's
/// `sandbox:`, the `sandbox` of `awf mcp-serve`'s config. The one shape from the workflow's
/// YAML (`workflow/parse/sandbox.rs`) and the config's JSON to the jail, which
/// [`Policy::new`] makes of it. Every key is optional; absent ones take the defaults of the
/// [`Role`] it confines.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sandbox {
    /// Paths writable besides the workspace (Bash's), its private temp dir and /dev/null.
    pub writable: Vec<PathBuf>,
    /// Paths readable under `read: confined` besides the defaults.
    pub readable: Vec<PathBuf>,
    /// Paths covered by empty mounts besides the built-in secret locations.
    pub hidden: Vec<PathBuf>,
    /// The host's unix sockets the jail may connect to; none by default.
    pub unix_sockets: Vec<PathBuf>,
    /// None: confined where Landlock is on, host where it is switched off.
    pub read: Option<ReadMode>,
    /// None: deny (where the kernel can enforce it, for Bash; always, for a server).
    pub network: Option<Network>,
    /// Confine with Landlock at all; None: true (`false` turns writes, reads and network
    /// confinement off; secret locations stay hidden).
    pub landlock: Option<bool>,
    /// Processes and threads alive at once; None: [`DEFAULT_PROCESSES`].
    pub processes: Option<u32>,
    /// Variables set in the jail's environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// Variables of awf's environment passed in (NAME or PREFIX*).
    pub env_passthrough: Vec<String>,
    /// Bash's per-call bounds (memory, CPU, files, TMPDIR); a long-lived child takes none.
    pub bounds: bounds::Bounds,
    /// The guarantees the jail refuses to start without.
    pub require: Vec<Guarantee>,
}

impl Sandbox {
    /// Landlock on unless `landlock: false`.
    pub fn landlock(&self) -> bool {
        self.landlock.unwrap_or(true)
    }

    /// What no sandbox can be, whatever its role: a count out of range, a bound that is
    /// not one, keys that contradict each other, a variable name or pattern that cannot
    /// be. The message names the key and the fix.
    pub fn check(&self) -> Result<(), String> {
        if let Some(n) = self.processes
            && !(MIN_PROCESSES..=MAX_PROCESSES).contains(&n)
        {
            return Err(format!(
                "processes is {n}; write a whole number from {MIN_PROCESSES} to \
                 {MAX_PROCESSES} (the default is {DEFAULT_PROCESSES})"
            ));
        }
        self.bounds.check()?;
        if !self.landlock() && self.read == Some(ReadMode::Confined) {
            return Err(
                "read is confined but landlock is false, and reads are confined \
                 through Landlock; drop one of them"
                    .into(),
            );
        }
        if !self.landlock() && matches!(self.network, Some(Network::Deny | Network::Hosts(_))) {
            return Err(
                "network is deny or a host list but landlock is false, which turns \
                 the sandbox off; drop one of them"
                    .into(),
            );
        }
        for p in &self.env_passthrough {
            crate::child_env::check_pattern(p).map_err(|e| format!("env_passthrough: {e}"))?;
        }
        for n in self.env.keys() {
            crate::child_env::check_name(n).map_err(|e| format!("env: {e}"))?;
        }
        Ok(())
    }
}

/// What a jail confines, which sets the defaults a [`Sandbox`] leaves open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    /// Bash's calls: the workspace writable, per-call bounds, a cgroup each.
    #[default]
    Bash,
    /// A third-party MCP server: the workspace read-only, no per-call bounds, the network
    /// denied unless its sandbox says otherwise.
    Server,
    /// A plugin: as a server, and it serves a unix socket of its own (its `bind`/`listen`
    /// work; every `connect` goes through awf, to the grants only).
    Plugin,
}

/// A sandbox with the role it confines: what [`Confinement::new`](super::Confinement::new)
/// resolves for a session.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub sandbox: Sandbox,
    pub role: Role,
    /// What the kernel allows, when it was probed already (by `awf run`); None: probed
    /// here.
    pub support: Option<Support>,
}

impl Policy {
    pub fn new(sandbox: Sandbox, role: Role, support: Option<Support>) -> Policy {
        Policy {
            sandbox,
            role,
            support,
        }
    }

    /// The network in force: a server's and a plugin's default is deny, whatever the
    /// machine (Bash's is deny where the kernel can enforce it).
    pub fn network(&self) -> Option<Network> {
        match self.role {
            Role::Bash => self.sandbox.network.clone(),
            Role::Server | Role::Plugin => {
                Some(self.sandbox.network.clone().unwrap_or(Network::Deny))
            }
        }
    }

    /// The root is readable, not writable (a server's or a plugin's jail).
    pub fn root_read_only(&self) -> bool {
        self.role != Role::Bash
    }

    /// The child serves a unix socket of its own (a plugin's gRPC socket).
    pub fn serves_unix_socket(&self) -> bool {
        self.role == Role::Plugin
    }

    /// Bash's per-call bounds; None for a long-lived child, which gets none (and whose
    /// sandbox is refused if it states any: [`Policy::check`]).
    pub fn bounds(&self) -> Option<bounds::Bounds> {
        (self.role == Role::Bash).then_some(self.sandbox.bounds)
    }

    /// What no jail can be ([`Sandbox::check`]), nor one of this role: a long-lived child
    /// with per-call bounds.
    pub fn check(&self) -> Result<(), String> {
        self.sandbox.check()?;
        if self.role != Role::Bash && self.sandbox.bounds != bounds::Bounds::default() {
            return Err("bounds (memory, cpu_seconds, tmp_size, file_size, open_files) bound                  each Bash call; a server's or plugin's sandbox does not take them: move them                  to the step's sandbox, or remove them"
                .into());
        }
        Ok(())
    }

    /// The read mode in force: the one stated, else confined where Landlock is on.
    pub fn read_mode(&self) -> Result<ReadMode, String> {
        match (self.sandbox.read, self.sandbox.landlock()) {
            (Some(ReadMode::Confined), false) => Err("read: confined needs Landlock, but \
                 landlock is false; remove `landlock: false`, or write `read: host`"
                .into()),
            (Some(r), _) => Ok(r),
            (None, true) => Ok(ReadMode::Confined),
            (None, false) => Ok(ReadMode::Host),
        }
    }

    /// Under `read: confined`, every root Bash may read besides its writable paths: the
    /// system, the toolchains, /proc (in a PID namespace, the call's own) and `readable:`.
    pub(super) fn read_roots(
        &self,
        read: ReadMode,
        path: Option<&str>,
        home: Option<&Path>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<PathBuf> {
        if read == ReadMode::Host {
            return Vec::new();
        }
        let mut roots = readable::roots(path, home, var);
        roots.push(PathBuf::from("/proc"));
        roots.extend(self.sandbox.readable.iter().cloned());
        roots.iter().map(|p| real_path(p)).collect()
    }

    /// The policy as it would be resolved for a Bash whose PATH and HOME are `path` and
    /// `home` (`var`: awf's environment), without probing the kernel: for `awf validate
    /// --format json`. The workspace, its temp dir and /dev/null come on top of `writable`.
    pub fn stated(
        &self,
        path: Option<&str>,
        home: Option<&Path>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> serde_json::Value {
        let read = self.read_mode().unwrap_or(ReadMode::Host);
        let readable = self.read_roots(read, path, home, var);
        let sb = &self.sandbox;
        let writable: Vec<PathBuf> = sb.writable.iter().map(|p| real_path(p)).collect();
        let hidden = covers(
            secrets::present(&readable::homes(home), &sb.hidden),
            read,
            &readable,
            &writable,
        );
        serde_json::json!({
            "landlock": sb.landlock(),
            "read": read.name(),
            "readable": readable,
            "writable": sb.writable,
            "hidden": hidden,
            "network": self.network().unwrap_or(Network::Deny).to_json(),
            "processes": sb.processes.unwrap_or(DEFAULT_PROCESSES),
            "bounds": self.bounds().map(|b| serde_json::json!({
                "memory": b.memory(),
                "cpu_seconds": b.cpu_seconds,
                "tmp_size": b.tmp_size(),
                "file_size": b.file_size,
                "open_files": b.open_files,
            })),
            "require": sb.require,
        })
    }
}

/// Which of the `present` secret locations get a cover: not one beneath another cover
/// (there it no longer exists), never one over a writable path (a secret name holding the
/// workspace), and under `read: confined` only those a read could reach.
pub(super) fn covers(
    mut present: Vec<PathBuf>,
    read: ReadMode,
    readable: &[PathBuf],
    writable: &[PathBuf],
) -> Vec<PathBuf> {
    let outer = present.clone();
    present.retain(|p| {
        !outer.iter().any(|q| q != p && p.starts_with(q))
            && !writable.iter().any(|w| w.starts_with(p))
            && (read == ReadMode::Host || readable.iter().chain(writable).any(|r| p.starts_with(r)))
    });
    present
}
