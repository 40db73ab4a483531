//! One running plugin: launch with the handshake, connect, info + init + list, calls, and
//! teardown.
//!
//! Launch: the executable gets the handshake environment ([`plugin_sdk::host::handshake_env`])
//! and a piped stdin whose write end only this struct holds (the *lifeline*: when awf dies,
//! even by SIGKILL, the kernel closes it and the plugin shuts itself down). It must print
//! its handshake line and accept the gRPC connection within [`START_TIMEOUT`], else it is
//! killed; and the kernel kills it when awf dies (a parent-death signal, armed from a thread
//! that lives as long as awf), should it ignore the lifeline. It runs in its own process
//! group, so a Ctrl-C meant for awf reaches awf only, and awf stops its plugins in order.
//! Its TMPDIR is a private directory awf made for it ([`SocketDir`]), and the socket it
//! announces is accepted only there.
//!
//! Teardown ([`PluginProcess::stop`], also on drop): the `Shutdown` rpc, then SIGTERM if it
//! has not exited after its drain grace, then SIGKILL after [`TERM_GRACE`]; finally the
//! private directory awf made for its socket is removed (never a path the plugin named).
//!
//! A call that loses the connection (the plugin crashed, aborted, was killed) marks the
//! plugin *down*: the reason is kept, the process is reaped, its socket removed, and every
//! later call fails at once with that reason instead of hanging on a dead socket.

use super::manifest::Manifest;
use super::runtime::{Interrupted, PluginRuntime};
use super::socket_dir::SocketDir;
use crate::error::{AwfError, codes};
use crate::process::{ProcessGroup, signal_name};
use plugin_sdk::host;
use plugin_sdk::proto::operation_service_client::OperationServiceClient;
use plugin_sdk::proto::plugin_service_client::PluginServiceClient;
use plugin_sdk::proto::{
    ExecuteRequest, ExecuteResponse, InfoRequest, InfoResponse, InitRequest, ListOperationsRequest,
    Operation, ShutdownRequest,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// From spawn to a connected gRPC channel.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);
/// For each set-up rpc (info, init, list) and for the shutdown rpc.
const SETUP_RPC_TIMEOUT: Duration = Duration::from_secs(5);
/// Between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(5);
/// After the shutdown rpc: the plugin's own drain grace plus a margin to exit.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long a lost connection waits for the process to be seen dead, to tell a crash
/// (with its exit status) from a connection lost to a live process.
const CRASH_REAP_WAIT: Duration = Duration::from_secs(1);
/// Longest handshake line read; a plugin printing endless garbage is cut off here.
const MAX_HANDSHAKE_LINE: u64 = 4096;

/// A started, connected plugin.
pub struct PluginProcess {
    manifest: Manifest,
    runtime: Arc<PluginRuntime>,
    child: Mutex<ProcessGroup>,
    pid: u32,
    /// The write end of the plugin's stdin; `None` once stopped.
    lifeline: Mutex<Option<ChildStdin>>,
    /// The private directory the plugin serves its socket in; removed at cleanup.
    socket_dir: SocketDir,
    channel: Channel,
    info: InfoResponse,
    operations: Vec<Operation>,
    /// Why the plugin is down, once it is.
    down: Mutex<Option<String>>,
    /// Its jail's links (its unix-socket supervisor, its proxy), when jailed.
    links: Option<crate::confine::child::Links>,
}

/// Why a call did not produce the plugin's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// The plugin was already down before this call.
    Down(String),
    /// The plugin died or the connection was lost during this call (now down).
    Crashed(String),
    /// The plugin answered with a gRPC error (unknown operation, arguments not JSON).
    Rejected(String),
    Cancelled,
    /// No answer within the call's deadline; the gRPC call was dropped, which tells the
    /// plugin to cancel.
    TimedOut(Duration),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data (plain values).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the supervisor's decisions on a plugin's unix connections go: log lines (a plugin
/// outlives any one call, so there is no call to record them in).
fn plugin_unix_reporter(plugin: &str) -> crate::confine::unix_grants::Reporter {
    let plugin = plugin.to_string();
    Arc::new(move |a: crate::confine::unix_grants::Attempt| {
        if a.allowed {
            tracing::info!(plugin = %plugin, path = %a.path, "net.connect allowed (unix)");
        } else {
            tracing::warn!(plugin = %plugin, path = %a.path, reason = %a.why, "net.connect denied (unix)");
        }
    })
}

impl PluginProcess {
    /// Starts the plugin of `manifest` and connects to it; fails with a message naming the
    /// plugin, its executable and what went wrong. Nothing is left running on failure.
    pub fn start(
        manifest: &Manifest,
        runtime: Arc<PluginRuntime>,
        config: HashMap<String, String>,
        jail: Option<&super::Jailed>,
    ) -> Result<PluginProcess, AwfError> {
        let name = &manifest.name;
        let exe = manifest.executable.display().to_string();
        let fail = |what: String| {
            AwfError::new(codes::PLUGIN_START, format!("plugin {name} ({exe}) {what}"))
        };
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        let socket_dir = SocketDir::create().map_err(|e| {
            fail(format!(
                "cannot get a private socket directory under {}: {e}; point TMPDIR at a \
                 writable directory",
                std::env::temp_dir().display()
            ))
        })?;
        let command = plugin_command(manifest, &socket_dir);
        let mut links = None;
        let spawned = match jail {
            Some(jail) => {
                let (child, l) =
                    jailed(manifest, command, socket_dir.path(), jail, name).map_err(&fail)?;
                links = Some(l);
                child
            }
            None => unjailed(command, name).map_err(&fail)?,
        };
        let mut child = spawned;
        let pid = child.pid();
        let lifeline = child.take_stdin();
        let stdout = child.take_stdout().expect("piped stdout");

        let line = read_handshake(&mut child, stdout, name).map_err(&fail)?;
        let (endpoint, channel) =
            connect(&mut child, &runtime, &socket_dir, &line, deadline).map_err(&fail)?;
        let (info, operations) = match set_up(&runtime, &channel, config) {
            Ok(v) => v,
            Err(why) => {
                child.kill();
                return Err(fail(why));
            }
        };
        if info.name != manifest.name {
            tracing::warn!(
                plugin = %name,
                "the plugin calls itself {:?} but its manifest {} says {:?}; its tools are named after the manifest",
                info.name,
                manifest.dir.join(super::manifest::MANIFEST_FILE).display(),
                manifest.name
            );
        }
        tracing::debug!(
            plugin = %name,
            pid,
            socket = %endpoint.socket_path().display(),
            operations = operations.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "plugin started"
        );
        Ok(PluginProcess {
            manifest: manifest.clone(),
            runtime,
            child: Mutex::new(child),
            pid,
            lifeline: Mutex::new(lifeline),
            socket_dir,
            channel,
            info,
            operations,
            down: Mutex::new(None),
            links,
        })
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the plugin said about itself over gRPC.
    pub fn info(&self) -> &InfoResponse {
        &self.info
    }

    /// The operations the plugin listed at start-up.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// Why the plugin is down, when it is.
    pub fn down_reason(&self) -> Option<String> {
        lock(&self.down).clone()
    }

    /// Executes `operation`; blocks until the plugin answers, dies, `timeout` passes or
    /// `cancelled` says so.
    pub fn execute(
        &self,
        operation: &str,
        arguments: &serde_json::Value,
        timeout: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ExecuteResponse, CallFailure> {
        if let Some(why) = self.down_reason() {
            return Err(CallFailure::Down(why));
        }
        let channel = self.channel.clone();
        let request = ExecuteRequest {
            operation: operation.to_string(),
            arguments_json: arguments.to_string(),
        };
        let answer = self.runtime.run(
            async move { OperationServiceClient::new(channel).execute(request).await },
            Some(Instant::now() + timeout),
            Some(cancelled),
        );
        match answer {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(self.classify(operation, status)),
            Err(Interrupted::Cancelled) => Err(CallFailure::Cancelled),
            Err(Interrupted::TimedOut) => Err(CallFailure::TimedOut(timeout)),
        }
    }

    /// Tells a refusal by a live plugin from a dead plugin, and marks the latter down.
    fn classify(&self, operation: &str, status: tonic::Status) -> CallFailure {
        use tonic::Code;
        let transport = matches!(
            status.code(),
            Code::Unavailable
                | Code::Unknown
                | Code::Internal
                | Code::Cancelled
                | Code::Aborted
                | Code::DataLoss
        );
        if !transport {
            return CallFailure::Rejected(format!("{:?}: {}", status.code(), status.message()));
        }
        let exited = {
            let mut child = lock(&self.child);
            child.wait_timeout(CRASH_REAP_WAIT)
        };
        let reason = match exited {
            Some(status) => format!("the plugin process {} {}", self.pid, describe_exit(status)),
            // Alive but answering with a transport error: only a lost connection does that.
            None if status.code() == Code::Unavailable => {
                lock(&self.child).kill();
                format!(
                    "the connection to the plugin was lost ({}); the process was killed",
                    status.message()
                )
            }
            None => {
                return CallFailure::Rejected(format!("{:?}: {}", status.code(), status.message()));
            }
        };
        self.socket_dir.remove();
        *lock(&self.down) = Some(reason.clone());
        tracing::error!(
            plugin = %self.name(),
            operation,
            pid = self.pid,
            "plugin {} is down: {reason}; its tools will fail until awf mcp-serve is restarted",
            self.name()
        );
        CallFailure::Crashed(reason)
    }

    /// Stops the plugin (idempotent): shutdown rpc, SIGTERM, SIGKILL, socket removed.
    pub fn stop(&self) {
        let Some(lifeline) = lock(&self.lifeline).take() else {
            return;
        };
        let mut child = lock(&self.child);
        if matches!(child.try_wait(), Ok(None)) {
            let channel = self.channel.clone();
            let _ = self.runtime.run(
                async move {
                    PluginServiceClient::new(channel)
                        .shutdown(ShutdownRequest {})
                        .await
                },
                Some(Instant::now() + SETUP_RPC_TIMEOUT),
                None,
            );
            if child.wait_timeout(SHUTDOWN_GRACE).is_none() {
                tracing::warn!(plugin = %self.name(), "plugin did not stop after Shutdown; sending SIGTERM");
                child.signal(libc::SIGTERM);
                if child.wait_timeout(TERM_GRACE).is_none() {
                    tracing::warn!(plugin = %self.name(), "plugin ignored SIGTERM for {} s; killing it", TERM_GRACE.as_secs());
                    child.kill();
                }
            }
        }
        drop(lifeline);
        if let Some(links) = &self.links {
            links.stop(Duration::from_millis(200));
        }
        self.socket_dir.remove();
        tracing::debug!(plugin = %self.name(), "plugin stopped");
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn setup_rpc<T: Send + 'static>(
    runtime: &PluginRuntime,
    rpc: &str,
    future: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>
    + Send
    + 'static,
) -> Result<T, String> {
    match runtime.run(future, Some(Instant::now() + SETUP_RPC_TIMEOUT), None) {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(format!(
            "refused {rpc} ({:?}: {}) and was stopped",
            status.code(),
            status.message()
        )),
        Err(_) => Err(format!(
            "did not answer {rpc} within {} s and was killed",
            SETUP_RPC_TIMEOUT.as_secs()
        )),
    }
}

/// The command that runs the plugin: its environment, its TMPDIR and its pipes.
fn plugin_command(manifest: &Manifest, socket_dir: &SocketDir) -> Command {
    let mut command = Command::new(&manifest.executable);
    // The allowlist and what the manifest names: awf's own environment holds the model
    // key and the user's credentials.
    command
        .env_clear()
        .envs(
            crate::child_env::ChildEnv {
                passthrough: manifest.env_passthrough.clone(),
                set: Vec::new(),
            }
            .vars(),
        )
        .envs(host::handshake_env())
        // Where the SDK makes its socket: the only place awf accepts it from.
        .env("TMPDIR", socket_dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Plugins log to stderr; sharing awf's keeps their lines where awf's go.
        .stderr(Stdio::inherit());
    command
}

/// Reads the plugin's handshake line within [`START_TIMEOUT`]; kills the plugin if it cannot.
fn read_handshake(
    child: &mut ProcessGroup,
    stdout: ChildStdout,
    name: &str,
) -> Result<String, String> {
    // Read the handshake on a thread so that a silent plugin cannot block us past the
    // deadline. The thread then keeps draining stdout (the SDK sends nothing more, but
    // a plugin written without it might) so such a plugin never blocks on a full pipe.
    let (tx, rx) = mpsc::channel();
    let plugin = name.to_string();
    let reader = std::thread::Builder::new()
        .name(format!("plugin-{name}-stdout"))
        .spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = Vec::new();
            let got = (&mut stdout)
                .take(MAX_HANDSHAKE_LINE)
                .read_until(b'\n', &mut line)
                .map(|_| line);
            let _ = tx.send(got);
            for line in stdout.lines() {
                match line {
                    Ok(l) => tracing::warn!(plugin = %plugin, "plugin wrote to stdout: {l}"),
                    Err(_) => break,
                }
            }
        });
    if let Err(e) = reader {
        child.kill();
        return Err(format!("cannot be watched: {e}"));
    }
    let line = match rx.recv_timeout(START_TIMEOUT) {
        Err(RecvTimeoutError::Timeout) => {
            child.kill();
            return Err(format!(
                "printed no handshake line within {} s and was killed; a plugin must \
                 announce its socket at start-up (plugin_sdk::serve does), so check that it \
                 is an awf plugin and does not block before serving",
                START_TIMEOUT.as_secs()
            ));
        }
        Err(RecvTimeoutError::Disconnected) => {
            child.kill();
            return Err("lost its stdout reader".into());
        }
        Ok(Err(e)) => {
            child.kill();
            return Err(format!("could not be read from: {e}"));
        }
        Ok(Ok(line)) if line.is_empty() => {
            let status = child
                .wait_timeout(CRASH_REAP_WAIT)
                .map(describe_exit)
                .unwrap_or_else(|| "closed its stdout".into());
            child.kill();
            return Err(format!(
                "exited before its handshake ({status}); its stderr above says why"
            ));
        }
        Ok(Ok(line)) => line,
    };
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Connects to the socket the handshake announces; kills the plugin if that fails.
fn connect(
    child: &mut ProcessGroup,
    runtime: &PluginRuntime,
    socket_dir: &SocketDir,
    line: &str,
    deadline: Instant,
) -> Result<(host::Endpoint, Channel), String> {
    let endpoint = match host::parse_handshake(line) {
        Ok(e) => e,
        Err(e) => {
            child.kill();
            return Err(format!("failed its handshake and was killed: {e}"));
        }
    };
    if let Err(why) = socket_dir.accept(endpoint.socket_path()) {
        child.kill();
        return Err(format!("{why}; it was killed"));
    }
    let connected = runtime.run(
        {
            let endpoint = endpoint.clone();
            async move { host::connect(&endpoint).await }
        },
        Some(deadline),
        None,
    );
    match connected {
        Ok(Ok(channel)) => Ok((endpoint, channel)),
        Ok(Err(e)) => {
            child.kill();
            Err(format!(
                "announced {} but cannot be connected to: {e}",
                endpoint.socket_path().display()
            ))
        }
        Err(_) => {
            child.kill();
            Err(format!(
                "did not accept a connection on {} within {} s and was killed",
                endpoint.socket_path().display(),
                START_TIMEOUT.as_secs()
            ))
        }
    }
}

/// The set-up rpcs in order: Info, Init with the plugin's config, then ListOperations.
fn set_up(
    runtime: &PluginRuntime,
    channel: &Channel,
    config: HashMap<String, String>,
) -> Result<(InfoResponse, Vec<Operation>), String> {
    let info = setup_rpc(runtime, "Info", {
        let c = channel.clone();
        async move { PluginServiceClient::new(c).info(InfoRequest {}).await }
    })?;
    setup_rpc(runtime, "Init", {
        let c = channel.clone();
        async move {
            PluginServiceClient::new(c)
                .init(InitRequest { config })
                .await
        }
    })?;
    let ops = setup_rpc(runtime, "ListOperations", {
        let c = channel.clone();
        async move {
            OperationServiceClient::new(c)
                .list_operations(ListOperationsRequest {})
                .await
        }
    })?;
    Ok((info, ops.operations))
}

/// `exited with status 1`, `was killed by signal 6 (SIGABRT)`.
fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        _ => format!("ended ({status})"),
    }
}

/// Spawns a plugin outside any jail (`awf plugins list`), under the supervised seccomp
/// filter alone: it serves its own socket but reaches none of the host's (docker.sock,
/// ssh-agent, D-Bus); its connect() calls go through awf.
fn unjailed(mut command: Command, name: &str) -> Result<ProcessGroup, String> {
    let unix = match crate::confine::unix_grants::supervisable() {
        Ok(()) => {
            let (unix, sock) = crate::confine::unix_grants::Pending::pair()
                .map_err(|e| format!("cannot be supervised: {e}"))?;
            crate::confine::unix_grants::install(&mut command, sock);
            Some(unix)
        }
        Err(why) => {
            tracing::warn!(plugin = %name, "the plugin may reach the host's unix sockets: {why}");
            None
        }
    };
    let mut child = crate::process::spawn_dying_with_awf(command, |_| {})
        .map_err(|e| format!("cannot be started: {e}"))?;
    // The supervisor ends by itself with the plugin's last process.
    if let Some(unix) = unix
        && let Err(e) = unix.serve(Arc::default(), plugin_unix_reporter(name))
    {
        child.kill();
        return Err(format!("cannot be supervised: {e}"));
    }
    Ok(child)
}

/// Spawns a plugin in the jail third-party servers and Bash get ([`crate::confine`]):
/// the workspace and the plugin's own directory readable, nothing writable but its
/// private directory (its TMPDIR, where it serves its socket, and its HOME inside),
/// network denied unless its `sandbox` says otherwise.
fn jailed(
    manifest: &Manifest,
    mut command: Command,
    private: &std::path::Path,
    jail: &super::Jailed,
    name: &str,
) -> Result<(ProcessGroup, crate::confine::child::Links), String> {
    use crate::confine;
    let sb = &jail.sandbox;
    let home = private.join("home");
    std::fs::create_dir_all(&home)
        .map_err(|e| format!("cannot get its private HOME {}: {e}", home.display()))?;
    command.env("HOME", &home).current_dir(&jail.at.root);
    for (k, v) in crate::child_env::named_from_process(&sb.env_passthrough) {
        command.env(k, v);
    }
    for (k, v) in &sb.env {
        command.env(k, v);
    }
    let mut sandbox = sb.clone();
    sandbox.readable.push(manifest.dir.clone());
    sandbox.readable.extend(confine::child::package_trees(
        &manifest.executable,
        &[],
        &jail.at.root,
    ));
    sandbox.processes = sandbox.processes.or(jail.at.processes);
    let policy = confine::Policy::new(sandbox, confine::Role::Plugin, jail.at.support);
    let path = command
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()));
    let user_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let confinement = confine::Confinement::new(
        &policy,
        &jail.at.root,
        private,
        std::path::Path::new(crate::builtins::bash::shell()),
        path.as_deref(),
        user_home.as_deref(),
        &|n| std::env::var(n).ok(),
    )?;
    let plugin = name.to_string();
    let report: confine::child::Reporter = Arc::new(move |r| match r {
        confine::child::Report::Unix(a) => {
            if a.allowed {
                tracing::info!(plugin = %plugin, path = %a.path, "net.connect allowed (unix)");
            } else {
                tracing::warn!(plugin = %plugin, path = %a.path, reason = %a.why, "net.connect denied (unix)");
            }
        }
        confine::child::Report::Egress(a) => {
            tracing::info!(plugin = %plugin, host = %a.host, port = a.port, decision = a.decision_name(), "net.connect");
        }
    });
    confine::child::spawn(
        command,
        &confinement,
        &jail.at.root,
        confine::child::Lifetime::Session,
        report,
    )
    .map(|s| (s.group, s.links))
}
