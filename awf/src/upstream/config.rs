//! A third-party server as the config states it: `servers.<name>` of the `awf mcp-serve`
//! config (and, through `awf run`, of a workflow's `mcp_proxy.servers`).

use crate::confine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Seconds a server has to answer `initialize` and `tools/list` unless
/// `start_timeout_seconds` says otherwise.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One server: how to start it, what its jail holds, which of its tools are offered.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
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
    /// The server's jail ([`confine::Sandbox`]): every key means what it means for Bash,
    /// the defaults are tighter (the workspace readable, nothing writable but the server's
    /// private TMPDIR and HOME, `network: deny`, reads confined; no per-call bounds).
    #[serde(default)]
    pub sandbox: confine::Sandbox,
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

/// `tools: {allow: [...]}` or `tools: {deny: [...]}`, by upstream names.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTools {
    /// Only these are offered (absent: all).
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
}
