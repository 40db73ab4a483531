//! A third-party server as the config states it: `servers.<name>` of the `awf mcp-serve`
//! config (and, through `awf run`, of a workflow's `mcp_proxy.servers`).

use crate::confine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Seconds a server has to answer `initialize` and `tools/list` unless
/// `start_timeout_seconds` says otherwise.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One server: how to start it, what its jail holds, which of its tools are offered.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// argv, run without a shell; the first word is looked up in the server's PATH.
    pub command: Vec<String>,
    /// Variables set in the server's environment (literal values).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables of awf's environment passed to the server (NAME or PREFIX*).
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// The server's jail; every key means what it means for Bash, the defaults are tighter
    /// (see [`SandboxSpec`]).
    #[serde(default)]
    pub sandbox: SandboxSpec,
    /// Which of the server's tools are offered, by the server's own names.
    #[serde(default)]
    pub tools: ServerTools,
    /// Upstream name → the name after the prefix (`<server>_<this>`), for names too long.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Seconds one call may take; absent: Bash's default timeout.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Seconds for `initialize` and `tools/list` at start; absent: 30.
    #[serde(default)]
    pub start_timeout_seconds: Option<u64>,
    /// A server that fails to start is a WARN and its tools are absent, not a failed step.
    #[serde(default)]
    pub optional: bool,
}

/// A server's `sandbox:`, the keys of Bash's. Defaults: the workspace readable, nothing
/// writable but the server's private TMPDIR and HOME, `network: deny`, reads confined.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    #[serde(default)]
    pub readable: Vec<PathBuf>,
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
    #[serde(default)]
    pub unix_sockets: Vec<PathBuf>,
    #[serde(default)]
    pub read: Option<confine::ReadMode>,
    /// Absent: deny.
    #[serde(default)]
    pub network: Option<confine::Network>,
    /// Absent: true.
    #[serde(default)]
    pub landlock: Option<bool>,
    #[serde(default)]
    pub processes: Option<u32>,
    /// As the server's own `env` (merged; the server's wins).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// As the server's own `env_passthrough` (merged).
    #[serde(default)]
    pub env_passthrough: Vec<String>,
}

/// `tools: {allow: [...]}` or `tools: {deny: [...]}`, by upstream names.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTools {
    /// Only these are offered (absent: all).
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
}
