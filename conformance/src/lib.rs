//! An independent MCP 2024-11-05 client over a child process's stdio, and a suite of
//! conformance checks that runs against any stdio server command.
//!
//! It deliberately shares no code with the `mcpserver` crate: the point is a second,
//! independent reading of the specification, so that a misunderstanding baked into a
//! shared type cannot hide on both sides of the wire.
//!
//! - [`session::ServerProcess`] spawns a server, sends raw bytes or JSON messages and
//!   receives answers against a deadline; it never hangs (the child is killed when the
//!   deadline passes or the session is dropped) and it keeps everything the server wrote
//!   to stdout and stderr.
//! - [`checks`] holds the checks and [`checks::run`] runs them, each in a fresh server
//!   process.
//!
//! ```no_run
//! use conformance::checks::{self, Config};
//! let config = Config::new(vec!["my-server".into(), "--stdio".into()]);
//! for result in checks::run(&config, &checks::Selection::default()) {
//!     println!("{}", result.line());
//! }
//! ```

pub mod checks;
pub mod session;
