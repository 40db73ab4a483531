//! A step's tool server: its config ([`ServeConfig`]: what one step serves, read from the
//! file the parent writes or made from `--root`, checked as a whole) and its assembly
//! ([`assembly`]: the builtins in their jail, the plugin operations and the third-party
//! servers as one `mcpserver::Server` observed by the telemetry's hooks). `awf mcp-serve`
//! ([`crate::mcp_serve`]) serves it over stdio; the HTTP provider
//! ([`crate::providers::openai`]) calls it in-process.

pub mod assembly;
pub mod config;

pub use config::ServeConfig;
