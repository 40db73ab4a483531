//! An independent MCP client over a child process's stdio, and a suite of conformance
//! checks, revision by revision (2024-11-05 to 2026-07-28), that runs against any stdio
//! server command.
//!
//! It deliberately shares no code with the `mcpserver` crate: the point is a second,
//! independent reading of the specification, so that a misunderstanding baked into a
//! shared type cannot hide on both sides of the wire.
//!
//! - [`session::ServerProcess`] spawns a server, sends raw bytes or JSON messages and
//!   receives answers against a deadline; it never hangs (the child is killed when the
//!   deadline passes or the session is dropped) and it keeps everything the server wrote
//!   to stdout and stderr.
//!   It speaks the handshake revisions, and 2026-07-28 with `_meta` on every request
//!   ([`session::ServerProcess::speak_modern`]).
//! - [`checks`] holds the checks of each [`checks::Revision`] and [`checks::run`] runs
//!   the selected ones, each in a fresh server process.
//! - [`schema`] validates structured tool output against a tool's output schema (the subset
//!   of JSON Schema that output schemas use).
//!
//! ```no_run
//! use conformance::checks::{self, Config};
//! let config = Config::new(vec!["my-server".into(), "--stdio".into()]);
//! let every_revision = checks::Selection {
//!     revisions: checks::Revision::ALL.to_vec(),
//!     ..checks::Selection::default()
//! };
//! for result in checks::run(&config, &every_revision) {
//!     println!("{}", result.line());
//! }
//! ```

pub mod checks;
pub mod schema;
pub mod session;
