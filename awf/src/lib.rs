//! awf: the host side of AWF's tool interception (ADR 017). The `awf mcp-serve` subprocess
//! serves the builtin tools and exposed plugin operations over MCP to an agent CLI; every
//! call is routed by [`tools::ToolRouter`], confined by [`builtins::sandbox`], bounded, and
//! observed by [`telemetry`] (log line, audit records, OpenTelemetry span).
//!
//! Layout (hexagonal): `tools` is the application core (ports: `ToolProvider`,
//! `CallObserver`); `builtins`, `plugins` (the gRPC plugin host) and `telemetry` are
//! adapters behind those ports; `mcp_serve` adapts the router to the `mcpserver` library.
//! `workflow` is the domain of `awf run` (model, parse, checks; no printing, no process:
//! installed plugins come through its `PluginCatalog` port, which `plugins::catalog`
//! implements). `run` drives a workflow, using `providers` for agents and `proxy` for each
//! step's tools; `private_files` holds the files only awf may use. `cli`, `validate` and
//! `client` are the command-line front; only they and `run` (progress, summary) print.

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
pub mod validate;
pub mod workflow;
