//! A third-party server as the config states it: `servers.<name>` of the `awf mcp-serve`
//! config (and, through `awf run`, of a workflow's `mcp_proxy.servers`): a `command` awf
//! starts in a jail, or the `url` of a remote server awf speaks to over HTTPS.

use crate::confine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Seconds a server has to answer `initialize` and `tools/list` unless
/// `start_timeout_seconds` says otherwise.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One server: how to start or reach it, what its jail holds, which of its tools are
/// offered.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// argv, run without a shell; the first word is looked up in the server's PATH. Empty
    /// for a remote server.
    #[serde(default)]
    pub command: Vec<String>,
    /// A remote server's MCP endpoint (Streamable HTTP): `https://`, or `http://` with
    /// `allow_private` (a server on this machine or the local network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with each request to a remote server; `${VAR}` in a value is the
    /// variable of [`ServerSpec::env`], else of awf's environment. The values never reach
    /// the agent: whatever the server sends back has them masked.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A remote server may be at a loopback, private or link-local address (refused
    /// otherwise, after DNS resolution and at every redirect), and over plain `http://`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_private: bool,
    /// Variables set in the server's environment (literal values); for a remote server,
    /// the values its headers' `${VAR}` take.
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
    /// What its tools send back and say, scanned: over the step's `scan`.
    #[serde(default, skip_serializing_if = "crate::scan::Scan::is_unset")]
    pub scan: crate::scan::Scan,
}

impl ServerSpec {
    /// How the server is reached, for messages: its command, or its URL without a query
    /// or credentials.
    pub fn describe(&self) -> String {
        match &self.url {
            Some(url) => super::remote::display_url(url),
            None => self.command.join(" "),
        }
    }
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
