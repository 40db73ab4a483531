//! awf's integration tests, one binary: the harnesses (`common`: a real `awf mcp-serve` spoken
//! to over MCP, `awf run` and its summaries, restricted machines; `fake_model`: a model API on
//! 127.0.0.1 and the agents' harness, with the plugin examples; `otlp_receiver`: a real OTLP
//! receiver) and the tests, by subject, in `suite/`.
//!
//! `cargo test -p awf --test all` runs them; `cargo test -p awf --test all -- escapes::` one
//! subject.

mod common;
mod fake_model;
#[path = "fake_model/agent_harness.rs"]
mod harness;
mod otlp_receiver;
mod suite;
