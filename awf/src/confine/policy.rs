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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

/// A step's sandbox as the config states it.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Confine with Landlock at all (`landlock: false` turns writes, reads and network
    /// confinement off; secret locations stay hidden).
    pub landlock: bool,
    /// None: confined where Landlock is on, host where it is switched off.
    pub read: Option<ReadMode>,
    pub network: Option<Network>,
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    /// Covered besides the built-in secret locations (`hidden:`, awf's own directories).
    pub hidden: Vec<PathBuf>,
    /// The host's unix sockets Bash may connect to (`unix_sockets:`); none by default.
    pub unix_sockets: Vec<PathBuf>,
    /// Processes and threads one call may have alive at once (`processes:`); None:
    /// [`DEFAULT_PROCESSES`].
    pub processes: Option<u32>,
    /// What the kernel allows, when it was probed already (by `awf run`); None: probed
    /// here.
    pub support: Option<Support>,
    /// The root is readable, not writable (a third-party server's jail; Bash's root is
    /// writable).
    pub root_read_only: bool,
    /// The child serves a unix socket of its own (a plugin's gRPC socket): its unix
    /// sockets are supervised (its own `bind`/`listen` work; every `connect` goes through
    /// awf, to the grants only) rather than refused.
    pub serves_unix_socket: bool,
    /// Bash's per-call bounds (memory, CPU, files, TMPDIR); None: a long-lived child (a
    /// server, a plugin), which gets none.
    pub bounds: Option<bounds::Bounds>,
    /// The guarantees the step refuses to run without (`require:`).
    pub require: Vec<Guarantee>,
}

impl Policy {
    /// The read mode in force: the one stated, else confined where Landlock is on.
    pub fn read_mode(&self) -> Result<ReadMode, String> {
        match (self.read, self.landlock) {
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
        roots.extend(self.readable.iter().cloned());
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
        let writable: Vec<PathBuf> = self.writable.iter().map(|p| real_path(p)).collect();
        let hidden = covers(
            secrets::present(&readable::homes(home), &self.hidden),
            read,
            &readable,
            &writable,
        );
        serde_json::json!({
            "landlock": self.landlock,
            "read": read.name(),
            "readable": readable,
            "writable": self.writable,
            "hidden": hidden,
            "network": self.network.clone().unwrap_or(Network::Deny).to_json(),
            "processes": self.processes.unwrap_or(DEFAULT_PROCESSES),
            "bounds": self.bounds.map(|b| serde_json::json!({
                "memory": b.memory(),
                "cpu_seconds": b.cpu_seconds,
                "tmp_size": b.tmp_size(),
                "file_size": b.file_size,
                "open_files": b.open_files,
            })),
            "require": self.require,
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
