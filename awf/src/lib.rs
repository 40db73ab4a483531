//! awf: the host side of AWF's tool interception (ADR 017). The `awf mcp-serve` subprocess
//! serves the builtin tools and exposed plugin operations over MCP to an agent CLI; every
//! call is routed by [`tools::ToolRouter`], confined by [`builtins::sandbox`], bounded, and
//! observed by [`telemetry`] (log line, audit records, OpenTelemetry span).
//!
//! Layout (hexagonal): `tools` is the application core (ports: `ToolProvider`,
//! `CallObserver`); `builtins`, `plugins` (the gRPC plugin host) and `telemetry` are
//! adapters behind those ports;
//! `mcp_serve` adapts the router to the `mcpserver` library; `client` and `cli` are the
//! command-line front.

pub mod builtins;
pub mod child_env;
pub mod cli;
pub mod client;
pub mod error;
pub mod mcp_serve;
pub mod plugins;
pub mod private_files;
pub mod process;
pub mod providers;
pub mod proxy;
pub mod run;
pub mod telemetry;
pub mod tools;
pub mod workflow;
