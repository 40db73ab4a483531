//! Runs the example plugins as real processes, the way a host does: builds them, starts
//! them with the cookie, reads the handshake line and connects over gRPC.

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plugin_sdk::host::{self, Endpoint};
use plugin_sdk::proto::operation_service_client::OperationServiceClient;
use plugin_sdk::proto::plugin_service_client::PluginServiceClient;
use plugin_sdk::proto::{ExecuteRequest, ExecuteResponse};
use plugin_sdk::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

mod examples;
pub use examples::{example, manifest};

/// Not a timing assertion: only keeps a broken plugin from hanging the test run forever.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A plugin process started with the handshake, connected over gRPC.
pub struct Running {
    pub child: Child,
    pub endpoint: Endpoint,
    pub channel: Channel,
    /// Stdout after the handshake line: must stay empty.
    stdout: BufReader<ChildStdout>,
    stderr: Stderr,
}

/// The plugin's stderr so far, filled as it arrives, so a test can wait for a log line.
struct Stderr {
    text: Arc<Mutex<String>>,
    grew: Arc<Notify>,
    reader: JoinHandle<()>,
}

/// What a stopped plugin left behind.
pub struct Exited {
    pub status: ExitStatus,
    pub stdout_after_handshake: String,
    pub stderr: String,
}

/// Starts example `name` with the cookie; `customize` may add environment or stdin.
pub async fn start(name: &str, customize: impl FnOnce(&mut Command)) -> Running {
    let mut command = Command::new(example(name));
    command
        .env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    customize(&mut command);
    let mut child = command.spawn().expect("cannot start the example plugin");
    let mut pipe = BufReader::new(child.stderr.take().unwrap());
    let text = Arc::new(Mutex::new(String::new()));
    let grew = Arc::new(Notify::new());
    let reader = tokio::spawn({
        let (text, grew) = (text.clone(), grew.clone());
        async move {
            let mut line = String::new();
            while matches!(pipe.read_line(&mut line).await, Ok(n) if n > 0) {
                text.lock().unwrap().push_str(&line);
                line.clear();
                grew.notify_waiters();
            }
        }
    });
    let stderr = Stderr { text, grew, reader };
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, stdout.read_line(&mut line))
        .await
        .expect("no handshake line")
        .expect("cannot read the handshake line");
    let endpoint = host::parse_handshake(&line).expect("bad handshake line");
    let channel = host::connect(&endpoint)
        .await
        .expect("cannot connect to the plugin");
    Running {
        child,
        endpoint,
        channel,
        stdout,
        stderr,
    }
}

impl Running {
    pub fn plugin(&self) -> PluginServiceClient<Channel> {
        PluginServiceClient::new(self.channel.clone())
    }

    pub fn operations(&self) -> OperationServiceClient<Channel> {
        OperationServiceClient::new(self.channel.clone())
    }

    pub async fn execute(
        &self,
        operation: &str,
        args: serde_json::Value,
    ) -> Result<ExecuteResponse, tonic::Status> {
        self.execute_raw(operation, &args.to_string()).await
    }

    pub async fn execute_raw(
        &self,
        operation: &str,
        arguments_json: &str,
    ) -> Result<ExecuteResponse, tonic::Status> {
        self.operations()
            .execute(ExecuteRequest {
                operation: operation.to_string(),
                arguments_json: arguments_json.to_string(),
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// Waits until the plugin has logged `needle` on stderr.
    pub async fn logged(&self, needle: &str) {
        let wait = async {
            loop {
                let grew = self.stderr.grew.notified();
                if self.stderr.text.lock().unwrap().contains(needle) {
                    return;
                }
                grew.await;
            }
        };
        if tokio::time::timeout(PATIENCE, wait).await.is_err() {
            panic!(
                "the plugin never logged {needle:?}; its stderr: {}",
                self.stderr.text.lock().unwrap()
            );
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id().expect("the plugin already exited") as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill failed");
    }

    /// Waits for the process to exit on its own.
    pub async fn wait(mut self) -> Exited {
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the plugin did not exit")
            .expect("cannot wait for the plugin");
        let mut stdout_after_handshake = String::new();
        self.stdout
            .read_to_string(&mut stdout_after_handshake)
            .await
            .unwrap();
        self.stderr.reader.await.unwrap();
        let stderr = self.stderr.text.lock().unwrap().clone();
        Exited {
            status,
            stdout_after_handshake,
            stderr,
        }
    }
}
