//! Write awf plugins in Rust, and talk to them from awf.
//!
//! An awf plugin is a separate process that offers *operations* (a name, a description and a
//! JSON Schema of the input) which awf exposes to agents as tools named `<plugin>_<operation>`.
//! This crate holds both sides of that contract, so they cannot drift apart:
//!
//! - [`serve`] is the whole plugin side: handshake, gRPC server, lifecycle. A plugin author
//!   implements [`Plugin`] (three methods) and calls `serve` from `main`.
//! - [`host`] is what awf needs to talk to a plugin it started: [`host::parse_handshake`] and
//!   [`host::connect`].
//! - [`proto`] is the gRPC code generated from the wire contract
//!   `proto/awf/plugin/v1/plugin.proto` (clients and servers of `PluginService` and
//!   `OperationService`).
//!
//! # Writing a plugin
//!
//! ```no_run
//! use plugin_sdk::{Info, Operation, Output, Plugin};
//! use serde_json::{Value, json};
//!
//! struct Greeter;
//!
//! impl Plugin for Greeter {
//!     fn info(&self) -> Info {
//!         Info::new("greeter", "0.1.0", "Greets people")
//!     }
//!
//!     fn operations(&self) -> Vec<Operation> {
//!         vec![Operation::new("greet", "Greets someone by name").input_schema(json!({
//!             "type": "object",
//!             "properties": { "name": { "type": "string" } },
//!             "required": ["name"]
//!         }))]
//!     }
//!
//!     // Called on a blocking thread: slow or blocking code is fine here.
//!     fn execute(&self, operation: &str, args: Value) -> Result<Output, String> {
//!         match operation {
//!             "greet" => {
//!                 let name = args["name"].as_str().ok_or("`name` must be a string")?;
//!                 Ok(Output::text(format!("Hello, {name}!")))
//!             }
//!             // The SDK answers unknown operations itself; this arm is never reached.
//!             other => Err(format!("unknown operation {other}")),
//!         }
//!     }
//! }
//!
//! fn main() {
//!     plugin_sdk::serve(Greeter)
//! }
//! ```
//!
//! To install it, put the built executable and a manifest `plugin.yaml` (`name`, `version`,
//! `description`, flat `key: value` lines) together in a directory of its own under one of
//! awf's plugin directories, e.g. `.awf/plugins/greeter/{greeter,plugin.yaml}`. The examples
//! keep their manifests beside their sources: `examples/notes/plugin.yaml`.
//!
//! [`Plugin::init`] optionally receives the plugin's configuration. A panic inside
//! [`Plugin::execute`] becomes a failed result, not a dead plugin. Log to stderr.
//!
//! # The handshake
//!
//! 1. The host starts the executable with the environment variable
//!    [`MAGIC_COOKIE_KEY`]`=`[`MAGIC_COOKIE_VALUE`]. Without it the plugin writes a message
//!    saying it must be started by awf to stderr and exits with status 1, so that running a
//!    plugin by hand does not leave a server nobody talks to.
//! 2. The plugin creates a private directory (mode 0700) in the temporary directory
//!    (`$TMPDIR`, else `/tmp`), and serves gRPC (HTTP/2 without TLS) on the Unix socket
//!    `plugin.sock` inside it. Only the user who started it can connect. When `$TMPDIR` is
//!    too long for a socket path (107 bytes on Linux), the directory goes in `/tmp`.
//! 3. It prints exactly one line on stdout:
//!    `CORE|APP|NETWORK|ADDRESS|PROTOCOL`, for example
//!    `1|1|unix|/tmp/awf-plugin-4242-0/plugin.sock|grpc`. `CORE` is the version of this
//!    handshake ([`CORE_PROTOCOL_VERSION`]), `APP` that of the wire contract
//!    ([`APP_PROTOCOL_VERSION`], 1 = `awf.plugin.v1`), `NETWORK` is always `unix`, `ADDRESS`
//!    the socket path, `PROTOCOL` always `grpc`. After that line the plugin's stdout is
//!    redirected to its stderr: a stray `println!` in plugin code can neither corrupt the
//!    handshake nor block on a pipe the host no longer reads. Stderr is the plugin's log.
//! 4. It serves until the `Shutdown` rpc, SIGTERM or SIGINT, or — when the host sets
//!    [`STDIN_LIFELINE_KEY`]`=1` and keeps the plugin's stdin open — end of file on stdin,
//!    which is how a plugin notices that its host died even by SIGKILL. It then stops
//!    accepting calls, gives calls in flight up to [`DRAIN_GRACE`] to finish, removes its
//!    socket and directory, and exits with status 0.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

pub mod host;
mod server;

pub use server::serve;

/// The gRPC messages, clients and servers generated from `awf/plugin/v1/plugin.proto`.
///
/// The host uses [`proto::plugin_service_client::PluginServiceClient`] and
/// [`proto::operation_service_client::OperationServiceClient`] over the channel that
/// [`host::connect`] returns.
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("awf.plugin.v1");
}

/// Name of the environment variable the host sets so the plugin knows awf started it.
pub const MAGIC_COOKIE_KEY: &str = "AWF_PLUGIN_MAGIC_COOKIE";
/// Value the host gives [`MAGIC_COOKIE_KEY`]. Not a secret: it only tells a plugin started by
/// hand to stop and say so.
pub const MAGIC_COOKIE_VALUE: &str = "awf-plugin-3f9b2c6e8d1a4705";
/// When the host sets this variable to `1`, the plugin shuts down at end of file on its stdin.
/// The host keeps the write end of a pipe to the plugin's stdin open; when the host dies, even
/// by SIGKILL, the kernel closes it and the plugin follows.
pub const STDIN_LIFELINE_KEY: &str = "AWF_PLUGIN_STDIN_LIFELINE";
/// Version of the handshake itself: the first field of the handshake line.
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// Version of the wire contract (`awf.plugin.v1`): the second field of the handshake line.
pub const APP_PROTOCOL_VERSION: u32 = 1;
/// How long a stopping plugin waits for calls in flight before it exits anyway. Kept well
/// under the host's 5 s between SIGTERM and SIGKILL so a clean exit wins that race.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What a plugin implements. One value serves all calls, possibly several at once, hence
/// `&self` and `Sync`: keep mutable state behind a `Mutex`.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's identity; should match its `plugin.yaml`.
    fn info(&self) -> Info;

    /// The operations the plugin offers. Read once at start-up.
    fn operations(&self) -> Vec<Operation>;

    /// Runs `operation` (always one of [`Plugin::operations`]) with its JSON arguments.
    /// Runs on a blocking thread, so it may block or take its time. `Err` is a failed
    /// result the agent sees, with the text as the reason; so is a panic.
    fn execute(&self, operation: &str, args: Value) -> Result<Output, String>;

    /// Receives the plugin's configuration before the first call. `Err` rejects it; the
    /// text should name the key and say what is expected.
    fn init(&self, config: &HashMap<String, String>) -> Result<(), String> {
        let _ = config;
        Ok(())
    }
}

/// A plugin's identity: what `Info` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub name: String,
    pub version: String,
    pub description: String,
}

impl Info {
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Info {
            name: name.into(),
            version: version.into(),
            description: description.into(),
        }
    }
}

/// An operation a plugin offers: awf exposes it to agents as the tool `<plugin>_<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// Letters, digits, `_` and `-` only, so that the tool name is valid MCP.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments. Any schema works; agents expect an object at the top.
    pub input_schema: Value,
    /// JSON Schema of [`Output::data`], when the operation declares one.
    pub output_schema: Option<Value>,
}

impl Operation {
    /// An operation whose input is any object; set a real schema with
    /// [`Operation::input_schema`].
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Operation {
            name: name.into(),
            description: description.into(),
            input_schema: serde_json::json!({ "type": "object" }),
            output_schema: None,
        }
    }

    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }
}

/// A successful result: text for the agent to read, and optionally structured data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub text: String,
    pub data: Option<Value>,
}

impl Output {
    pub fn text(text: impl Into<String>) -> Self {
        Output {
            text: text.into(),
            data: None,
        }
    }

    /// Adds structured data (sent as JSON text in `ExecuteResponse.data_json`).
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

// Helpers on the generated types, so the host reads JSON fields without knowing how they
// are encoded on the wire.
impl proto::Operation {
    /// The input schema, parsed.
    pub fn input_schema(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.input_schema_json)
    }

    /// The output schema, parsed, when the operation declares one.
    pub fn output_schema(&self) -> Option<Result<Value, serde_json::Error>> {
        self.output_schema_json.as_deref().map(serde_json::from_str)
    }
}

impl proto::ExecuteResponse {
    /// The structured data, parsed, when the operation returned some.
    pub fn data(&self) -> Option<Result<Value, serde_json::Error>> {
        (!self.data_json.is_empty()).then(|| serde_json::from_str(&self.data_json))
    }
}

impl From<&Operation> for proto::Operation {
    fn from(op: &Operation) -> Self {
        proto::Operation {
            name: op.name.clone(),
            description: op.description.clone(),
            input_schema_json: op.input_schema.to_string(),
            output_schema_json: op.output_schema.as_ref().map(Value::to_string),
        }
    }
}
