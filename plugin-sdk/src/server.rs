//! The plugin side: checks the cookie, serves a [`Plugin`] over gRPC on a private Unix
//! socket, prints the handshake line, and tears everything down on shutdown.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use crate::host::Endpoint;
use crate::proto::operation_service_server::{OperationService, OperationServiceServer};
use crate::proto::plugin_service_server::{PluginService, PluginServiceServer};
use crate::{DRAIN_GRACE, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, Plugin, STDIN_LIFELINE_KEY, proto};

/// Runs `plugin` as an awf plugin until the host stops it, then exits the process.
///
/// Exits with status 1 and a message on stderr when the process was not started by awf
/// (no handshake cookie) or cannot serve (bad operation list, no socket); with status 0
/// after a shutdown. See the crate docs for the handshake.
///
/// Call it from a plain `fn main`, not from inside an async runtime: it runs its own.
/// A plugin whose operations are async keeps its own runtime and `block_on`s in
/// [`Plugin::execute`], which runs on a blocking thread where that is allowed.
pub fn serve<P: Plugin>(plugin: P) -> ! {
    let name = std::env::args_os()
        .next()
        .map(|arg0| PathBuf::from(arg0).display().to_string())
        .unwrap_or_else(|| "this plugin".to_string());
    if std::env::var_os(MAGIC_COOKIE_KEY).is_none_or(|v| v != MAGIC_COOKIE_VALUE) {
        log(&format!(
            "{name} is an awf plugin: it must be started by awf, not run directly. Put it in a \
             plugin directory (with its plugin.yaml) and use it through awf, e.g. `awf plugins \
             list`. ({MAGIC_COOKIE_KEY} is missing or wrong.)"
        ));
        std::process::exit(1);
    }
    let code = match run(plugin) {
        Ok(()) => 0,
        Err(message) => {
            log(&format!("{name}: {message}"));
            1
        }
    };
    let _ = std::io::stdout().flush();
    // Exit without dropping the runtime: dropping it would wait for an operation still
    // running on a blocking thread, which is exactly what DRAIN_GRACE gave up on.
    std::process::exit(code)
}

/// Writes a line to stderr, ignoring failure: a host that closed our stderr must not turn
/// a log line into a panic.
fn log(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn run<P: Plugin>(plugin: P) -> Result<(), String> {
    let info = plugin.info();
    let operations = plugin.operations();
    check_operations(&operations)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let (stop, stop_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        wire_operations: operations.iter().map(proto::Operation::from).collect(),
        plugin,
        info,
        stop,
    });
    let result = runtime.block_on(serve_until_stopped(shared, stop_rx));
    // Keep the runtime alive (not dropped) until exit; see `serve`.
    std::mem::forget(runtime);
    result
}

fn check_operations(operations: &[crate::Operation]) -> Result<(), String> {
    let mut seen = HashSet::new();
    for op in operations {
        let valid = !op.name.is_empty()
            && op
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!(
                "operation name {:?} is invalid: use letters, digits, `_` and `-` only, so that \
                 awf can expose it as a tool",
                op.name
            ));
        }
        if !seen.insert(op.name.as_str()) {
            return Err(format!(
                "operation {:?} is listed twice by Plugin::operations; names must be unique",
                op.name
            ));
        }
    }
    Ok(())
}

/// Why the plugin stops; logged so the host's log shows it.
#[derive(Debug)]
enum StopReason {
    ShutdownCall,
    HostGone,
}

struct Shared<P> {
    plugin: P,
    info: crate::Info,
    wire_operations: Vec<proto::Operation>,
    /// Asks `serve_until_stopped` to stop (from the Shutdown rpc or the stdin watcher).
    stop: mpsc::UnboundedSender<StopReason>,
}

async fn serve_until_stopped<P: Plugin>(
    shared: Arc<Shared<P>>,
    mut stop_rx: mpsc::UnboundedReceiver<StopReason>,
) -> Result<(), String> {
    // Signal handlers first: a SIGTERM arriving once the socket exists must run our cleanup
    // rather than the default action.
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;

    // Absolute even when TMPDIR is relative: the host resolves the path from its own
    // working directory, not ours.
    let temp = std::env::current_dir()
        .map(|cwd| cwd.join(std::env::temp_dir()))
        .map_err(|e| format!("cannot read the working directory: {e}"))?;
    let socket = SocketDir::create(&temp)?;
    let listener = UnixListener::bind(&socket.socket).map_err(|e| {
        format!(
            "cannot listen on the Unix socket {}: {e}",
            socket.socket.display()
        )
    })?;

    if std::env::var_os(STDIN_LIFELINE_KEY).is_some_and(|v| v == "1") {
        watch_stdin(shared.stop.clone());
    }

    let service = Service(shared.clone());
    let (drain_tx, drain_rx) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(PluginServiceServer::new(service.clone()))
        .add_service(OperationServiceServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
            let _ = drain_rx.await;
        });
    tokio::pin!(server);

    // The socket is bound, so the host may connect as soon as it reads this line: the
    // kernel queues connections until the server polls the listener.
    let line = Endpoint::unix(socket.utf8_path()?).handshake_line();
    announce(&line)?;

    let reason = tokio::select! {
        reason = stop_rx.recv() => format!("{:?}", reason.unwrap_or(StopReason::HostGone)),
        _ = sigterm.recv() => "SIGTERM".to_string(),
        _ = sigint.recv() => "SIGINT".to_string(),
        result = &mut server => {
            return Err(match result {
                Ok(()) => "the gRPC server stopped by itself".to_string(),
                Err(e) => format!("the gRPC server failed: {e}"),
            });
        }
    };
    log(&format!("{}: stopping ({reason})", shared.info.name));
    let _ = drain_tx.send(());
    if tokio::time::timeout(DRAIN_GRACE, &mut server)
        .await
        .is_err()
    {
        log(&format!(
            "{}: calls still running after {:?}; exiting without them",
            shared.info.name, DRAIN_GRACE
        ));
    }
    drop(socket);
    Ok(())
}

/// Prints the handshake line, then points stdout at stderr for the rest of the process.
fn announce(line: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot print the handshake line on stdout: {e}"))?;
    // SAFETY: dup2 on two descriptors this process owns; no Rust object owns fd 1 itself
    // (std's Stdout writes to the raw descriptor), so nothing is invalidated.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } == -1 {
        return Err(format!(
            "cannot redirect stdout to stderr after the handshake: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Stops the plugin at end of file on stdin: the host holds the other end, so EOF means it
/// is gone. A plain thread, because tokio's stdin is a blocking thread underneath anyway.
fn watch_stdin(stop: mpsc::UnboundedSender<StopReason>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 256];
        // Anything the host writes is ignored; only EOF (or a broken stdin) matters.
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = stop.send(StopReason::HostGone);
    });
}

/// The private directory with the socket in it; removed when dropped, on every path out of
/// `serve_until_stopped` (clean stop or error).
struct SocketDir {
    dir: PathBuf,
    socket: PathBuf,
}

/// `sun_path` holds 108 bytes including the terminating NUL on Linux.
const MAX_SOCKET_PATH: usize = 107;

/// Attempts at a fresh directory name before giving up (`awf-plugin-<pid>-0` to `-99`).
const ATTEMPTS: u32 = 100;

/// Where the socket directory goes when the temporary directory's path is too long for a
/// socket path: the default temporary directory itself, short on every Linux system. The
/// directory is as private there as in TMPDIR (created exclusively, mode 0700), and a
/// same-user process that may not write `/tmp` (the agent's confined Bash) cannot
/// replace it.
const SHORT_BASE: &str = "/tmp";

impl SocketDir {
    /// Creates the socket directory in `temp`, or in [`SHORT_BASE`] when a socket path
    /// under `temp` could exceed [`MAX_SOCKET_PATH`].
    fn create(temp: &Path) -> Result<Self, String> {
        Self::create_in(temp, Path::new(SHORT_BASE))
    }

    fn create_in(temp: &Path, short_base: &Path) -> Result<Self, String> {
        let pid = std::process::id();
        let name = |attempt: u32| format!("awf-plugin-{pid}-{attempt}");
        // The longest path any attempt can produce: decide once, so that every attempt goes
        // in the same parent.
        let longest = |parent: &Path| {
            parent
                .join(name(ATTEMPTS - 1))
                .join("plugin.sock")
                .as_os_str()
                .len()
        };
        let parent = if longest(temp) <= MAX_SOCKET_PATH {
            temp
        } else if longest(short_base) <= MAX_SOCKET_PATH {
            short_base
        } else {
            return Err(too_long(temp, short_base, None));
        };
        for attempt in 0..ATTEMPTS {
            let dir = parent.join(name(attempt));
            // `create`, not `create_all`: it fails on an existing path, so we never reuse a
            // directory (or follow a symlink) someone else put there.
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) if parent != temp => return Err(too_long(temp, &dir, Some(e))),
                Err(e) => {
                    return Err(format!(
                        "cannot create the socket directory {}: {e}; set TMPDIR to a writable \
                         directory",
                        dir.display()
                    ));
                }
            }
            let this = SocketDir {
                socket: dir.join("plugin.sock"),
                dir,
            };
            // The umask may have taken bits from 0700 (never added any); make it exactly 0700.
            std::fs::set_permissions(&this.dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot set mode 0700 on {}: {e}", this.dir.display()))?;
            return Ok(this);
        }
        Err(format!(
            "cannot create a fresh socket directory in {}: {} to -{} all exist; remove the \
             stale ones",
            parent.display(),
            name(0),
            ATTEMPTS - 1
        ))
    }

    fn utf8_path(&self) -> Result<&str, String> {
        self.socket.to_str().ok_or_else(|| {
            format!(
                "the socket path {} is not UTF-8 and cannot go in the handshake line; set \
                 TMPDIR to a UTF-8 path",
                self.socket.display()
            )
        })
    }
}

/// The error when TMPDIR is too long for a socket path and `fallback` (the short base, or
/// the directory tried in it) could not be used either.
fn too_long(temp: &Path, fallback: &Path, error: Option<std::io::Error>) -> String {
    let suffix = format!(
        "/awf-plugin-{}-{}/plugin.sock",
        std::process::id(),
        ATTEMPTS - 1
    );
    let why = error.map_or_else(String::new, |e| format!(": {e}"));
    format!(
        "the temporary directory {} is too long for a Unix socket path (at most \
         {MAX_SOCKET_PATH} bytes with {suffix:?} after it), and {} cannot be used instead{why}; \
         set TMPDIR to a writable directory whose path is at most {} bytes",
        temp.display(),
        fallback.display(),
        MAX_SOCKET_PATH.saturating_sub(suffix.len())
    )
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Both gRPC services over one shared plugin.
struct Service<P>(Arc<Shared<P>>);

impl<P> Clone for Service<P> {
    fn clone(&self) -> Self {
        Service(self.0.clone())
    }
}

impl<P: Plugin> Service<P> {
    fn find(&self, name: &str) -> Result<&proto::Operation, Status> {
        self.0
            .wire_operations
            .iter()
            .find(|op| op.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self
                    .0
                    .wire_operations
                    .iter()
                    .map(|op| op.name.as_str())
                    .collect();
                Status::not_found(format!(
                    "plugin {} has no operation {name:?}; its operations are: {}",
                    self.0.info.name,
                    known.join(", ")
                ))
            })
    }
}

#[tonic::async_trait]
impl<P: Plugin> PluginService for Service<P> {
    async fn info(
        &self,
        _: Request<proto::InfoRequest>,
    ) -> Result<Response<proto::InfoResponse>, Status> {
        let info = &self.0.info;
        Ok(Response::new(proto::InfoResponse {
            name: info.name.clone(),
            version: info.version.clone(),
            description: info.description.clone(),
        }))
    }

    async fn init(
        &self,
        request: Request<proto::InitRequest>,
    ) -> Result<Response<proto::InitResponse>, Status> {
        let config: HashMap<String, String> = request.into_inner().config;
        let shared = self.0.clone();
        match tokio::task::spawn_blocking(move || shared.plugin.init(&config)).await {
            Ok(Ok(())) => Ok(Response::new(proto::InitResponse {})),
            Ok(Err(reason)) => Err(Status::invalid_argument(format!(
                "plugin {} rejected its configuration: {reason}",
                self.0.info.name
            ))),
            Err(join) => Err(Status::internal(format!(
                "plugin {} failed in init: {}",
                self.0.info.name,
                panic_message(join)
            ))),
        }
    }

    async fn shutdown(
        &self,
        _: Request<proto::ShutdownRequest>,
    ) -> Result<Response<proto::ShutdownResponse>, Status> {
        // The answer still goes out: the server drains calls in flight, this one included.
        let _ = self.0.stop.send(StopReason::ShutdownCall);
        Ok(Response::new(proto::ShutdownResponse {}))
    }
}

#[tonic::async_trait]
impl<P: Plugin> OperationService for Service<P> {
    async fn list_operations(
        &self,
        _: Request<proto::ListOperationsRequest>,
    ) -> Result<Response<proto::ListOperationsResponse>, Status> {
        Ok(Response::new(proto::ListOperationsResponse {
            operations: self.0.wire_operations.clone(),
        }))
    }

    async fn get_operation(
        &self,
        request: Request<proto::GetOperationRequest>,
    ) -> Result<Response<proto::GetOperationResponse>, Status> {
        let op = self.find(&request.into_inner().name)?;
        Ok(Response::new(proto::GetOperationResponse {
            operation: Some(op.clone()),
        }))
    }

    async fn execute(
        &self,
        request: Request<proto::ExecuteRequest>,
    ) -> Result<Response<proto::ExecuteResponse>, Status> {
        let request = request.into_inner();
        let operation = self.find(&request.operation)?.name.clone();
        let args: Value = if request.arguments_json.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&request.arguments_json).map_err(|e| {
                Status::invalid_argument(format!(
                    "arguments for operation {operation:?} are not valid JSON ({e}); send them \
                     as JSON text, e.g. {{\"key\": \"value\"}}"
                ))
            })?
        };
        let shared = self.0.clone();
        let op = operation.clone();
        let outcome = tokio::task::spawn_blocking(move || shared.plugin.execute(&op, args)).await;
        let response = match outcome {
            Ok(Ok(output)) => proto::ExecuteResponse {
                success: true,
                output: output.text,
                data_json: output.data.map(|d| d.to_string()).unwrap_or_default(),
                error: String::new(),
            },
            Ok(Err(error)) => proto::ExecuteResponse {
                success: false,
                error,
                ..Default::default()
            },
            Err(join) => proto::ExecuteResponse {
                success: false,
                error: format!("operation {operation} failed: {}", panic_message(join)),
                ..Default::default()
            },
        };
        Ok(Response::new(response))
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    if !join.is_panic() {
        return "it was cancelled because the plugin is stopping".to_string();
    }
    let payload = join.into_panic();
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string());
    format!("it panicked: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary directory whose path alone is 100 bytes: any socket directory in it
    /// would give a socket path over the limit. It need not exist: it is never used.
    fn long_temp() -> PathBuf {
        let path = PathBuf::from(format!("/{}", "t".repeat(99)));
        assert_eq!(path.as_os_str().len(), 100);
        path
    }

    #[test]
    fn a_temp_dir_too_long_for_a_socket_path_gives_way_to_the_short_base() {
        let socket = SocketDir::create(&long_temp()).unwrap();
        assert!(
            socket.dir.starts_with(SHORT_BASE),
            "{}",
            socket.dir.display()
        );
        assert!(socket.socket.as_os_str().len() <= MAX_SOCKET_PATH);
        let mode = std::fs::metadata(&socket.dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let dir = socket.dir.clone();
        drop(socket);
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }

    #[test]
    fn no_usable_short_base_is_an_error_naming_the_limit_and_the_fix() {
        let missing = Path::new("/nonexistent-awf-socket-base");
        let error = SocketDir::create_in(&long_temp(), missing)
            .map(|_| ())
            .unwrap_err();
        assert!(
            error.contains(&long_temp().display().to_string()),
            "{error}"
        );
        assert!(error.contains("at most 107 bytes"), "{error}");
        assert!(error.contains("/nonexistent-awf-socket-base"), "{error}");
        assert!(
            error.contains("set TMPDIR to a writable directory whose path is at most"),
            "{error}"
        );
    }
}
