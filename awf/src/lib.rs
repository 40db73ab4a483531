//! awf: the host side of AWF's tool interception (ADR 017). The `awf mcp-serve` subprocess
//! serves the builtin tools and exposed plugin operations over MCP to an agent CLI; every
//! call is an `mcpserver` call, confined by `builtins::paths` (the workspace) and [`confine`]
//! (Bash's writes, reads, processes and network), bounded, and observed by [`telemetry`]
//! (log line, audit records, OpenTelemetry span).
//!
//! Layout: one model of a tool call, `mcpserver`'s (`Tool`, typed handlers, `ToolResult`,
//! `CallContext`, `Hooks`). `builtins` and `plugins` (the gRPC plugin host) register their
//! tools as `tools::ToolSource`s; `tools::ToolSet` puts a step's sources in one name
//! space (names, collisions, tool policy) and builds the `mcpserver::Server`;
//! [`telemetry::CallHooks`] observes it; `tool_server` holds a step's config and assembles
//! its server, which `mcp_serve` serves over stdio and `providers::openai` calls in-process.
//! `workflow` is the domain of `awf run` (model, parse, checks; no printing, no process:
//! installed plugins come through its `PluginCatalog` port, which `plugins::catalog`
//! implements). `run` drives a workflow, using `providers` for agents and `tool_proxy` for
//! each step's tools (third-party servers behind it: `upstream`; the model's requests:
//! `relay`); `private_files` holds the files only awf may use, `https` what awf's own HTTPS requests trust, `scan` what tools send back (secrets, poisoned
//! descriptions), `session_dirs` the
//! directories a session makes under the temp directory (and the sweep of those a killed
//! session left), `step_servers` the registry through which a step's teardown finds every
//! `awf mcp-serve` it started; `text` cuts text without splitting a character. `cli`, `validate` and `client` are the
//! command-line front; only they and `run` (progress, summary) print.

pub(crate) mod builtins;
pub(crate) mod child_env;
pub mod cli;
pub(crate) mod client;
pub mod confine;
pub mod error;
pub(crate) mod https;
pub mod mcp_serve;
pub(crate) mod operations;
pub(crate) mod picture;
pub mod plugins;
pub(crate) mod private_files;
pub mod process;
pub mod providers;
pub mod relay;
pub mod run;
pub(crate) mod sandbox_check;
pub mod scan;
pub(crate) mod session_dirs;
pub(crate) mod step_servers;
pub mod telemetry;
pub mod terminal;
pub(crate) mod text;
pub(crate) mod tool_proxy;
pub mod tool_server;
pub(crate) mod tools;
pub(crate) mod tools_cli;
pub(crate) mod upstream;
pub(crate) mod validate;
pub mod workflow;
