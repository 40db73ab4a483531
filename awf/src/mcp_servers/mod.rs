//! Third-party MCP servers behind the proxy: each started in its own jail (built by
//! [`crate::confine`], the one Bash's calls and plugins get), spoken to as an MCP client,
//! its tools re-exported as `<server>_<tool>`, every tool pinned by a hash of what an
//! agent reads of it.

pub mod config;

pub use config::{SandboxSpec, ServerSpec, ServerTools};
