//! Runs the example plugins as real processes, the way a host does: builds them, starts
//! them with the cookie, reads the handshake line and connects over gRPC.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
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

/// Not a timing assertion: only keeps a broken plugin from hanging the test run forever.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Path of a built example, building all examples once per test binary. `cargo test`
/// already builds them, but `cargo test --test plugins` alone does not.
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        // <target>/<profile>/deps/<this test>: build into the same target directory.
        let exe = std::env::current_exe().unwrap();
        let target_dir = exe.ancestors().nth(3).unwrap().to_path_buf();
        let output = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "plugin-sdk",
                "--examples",
                "--message-format=json",
            ])
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo to build the example plugins");
        assert!(
            output.status.success(),
            "building the example plugins failed"
        );
        let mut found = HashMap::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let is_example = message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "example"));
            if let (true, Some(path)) = (is_example, message["executable"].as_str()) {
                let name = message["target"]["name"].as_str().unwrap().to_string();
                found.insert(name, PathBuf::from(path));
            }
        }
        found
    });
    built
        .get(name)
        .unwrap_or_else(|| panic!("cargo built no example named {name}: {built:?}"))
        .clone()
}

/// The manifest that ships next to an example.
pub fn manifest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
        .join("plugin.yaml")
}

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
