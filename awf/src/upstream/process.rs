//! One server's process: started in the jail Bash's calls get ([`crate::confine`]), with
//! the server's own private TMPDIR and HOME, a clean environment, the workspace readable
//! and nothing else writable unless its `sandbox` says so. It dies with `awf mcp-serve`
//! (parent-death signal; in a PID namespace of its own whatever it started goes with it)
//! and when this value is dropped.

use super::config::ServerSpec;
use crate::confine;
use crate::process::ProcessGroup;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Lines of a server's stderr kept for the message of a failed start.
const STDERR_TAIL_LINES: usize = 20;
/// Bytes of one stderr line that reach the log (the rest is cut, with a mark).
const STDERR_LINE_BYTES: usize = 2048;
/// Bytes of stderr that reach the log in all; the rest is dropped, once said.
const STDERR_LOG_BYTES: u64 = 1 << 20;

/// What every server of a step shares.
pub struct StartContext {
    /// The workspace: the server's working directory, readable, not writable.
    pub root: PathBuf,
    /// The kernel's support, when `awf run` probed it.
    pub support: Option<confine::Support>,
    /// The step's process cap, when it sets one.
    pub processes: Option<u32>,
    /// Where the server's connections and stderr are reported.
    pub report: confine::child::Reporter,
}

/// A running server: its pipes, and what keeps its jail's links alive.
pub struct ServerProcess {
    group: Mutex<ProcessGroup>,
    /// The server's last stderr lines (bounded).
    tail: Arc<Mutex<VecDeque<String>>>,
    /// Kept to the end: its proxy under a host list, its unix-socket supervisor.
    links: confine::child::Links,
    _tmp: confine::PrivateTmp,
}

/// Where a server's stderr lines go.
pub type StderrSink = Arc<dyn Fn(&str) + Send + Sync>;

impl ServerProcess {
    /// Starts `spec`'s command in its jail; returns the process with its stdin and stdout.
    pub fn start(
        name: &str,
        spec: &ServerSpec,
        cx: &StartContext,
        stderr_sink: StderrSink,
    ) -> Result<(ServerProcess, ChildStdin, ChildStdout), String> {
        let tmp = confine::PrivateTmp::create()
            .map_err(|e| format!("cannot create its private temp directory: {e}"))?;
        let home = tmp.path().join("home");
        std::fs::create_dir(&home)
            .map_err(|e| format!("cannot create its private HOME {}: {e}", home.display()))?;
        let sb = &spec.sandbox;
        let mut set: Vec<(String, String)> = sb.env.clone().into_iter().collect();
        for (k, v) in &spec.env {
            set.retain(|(n, _)| n != k);
            set.push((k.clone(), v.clone()));
        }
        let mut passthrough = spec.env_passthrough.clone();
        passthrough.extend(sb.env_passthrough.iter().cloned());
        let env = crate::child_env::ChildEnv { passthrough, set };
        let mut vars = env.vars();
        vars.retain(|(k, _)| k != "HOME" && k != "TMPDIR");
        vars.push(("HOME".into(), home.display().to_string()));
        vars.push(("TMPDIR".into(), tmp.path().display().to_string()));
        let path_var = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let program =
            resolve_program(&spec.command[0], path_var.as_deref(), &cx.root).ok_or_else(|| {
                format!(
                    "its command {:?} is not an executable file here nor on its PATH ({}); \
                     install it, or give its absolute path in command",
                    spec.command[0],
                    path_var.as_deref().unwrap_or("unset")
                )
            })?;
        let mut sandbox = sb.clone();
        sandbox.readable.extend(confine::child::package_trees(
            &program,
            &spec.command[1..],
            &cx.root,
        ));
        sandbox.processes = sandbox.processes.or(cx.processes);
        let policy = confine::Policy::new(sandbox, confine::Role::Server, cx.support);
        // HOME for the toolchain roots is the user's (where their node or python lives);
        // the server's own HOME is the private one.
        let user_home = std::env::var_os("HOME").map(PathBuf::from);
        let confinement = confine::Confinement::new(
            &policy,
            &cx.root,
            tmp.path(),
            Path::new(crate::builtins::bash::shell()),
            path_var.as_deref(),
            user_home.as_deref(),
            &|n| std::env::var(n).ok(),
        )?;
        let mut cmd = Command::new(&program);
        cmd.args(&spec.command[1..])
            .env_clear()
            .envs(vars)
            .current_dir(&cx.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let confine::child::Spawned {
            mut group, links, ..
        } = confine::child::spawn(
            cmd,
            &confinement,
            &cx.root,
            confine::child::Lifetime::Session,
            cx.report.clone(),
        )?;
        let stdin = group.take_stdin().expect("piped stdin");
        let stdout = group.take_stdout().expect("piped stdout");
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stderr) = group.take_stderr() {
            let tail = tail.clone();
            let thread = format!("awf-server-{name}-stderr");
            let _ = std::thread::Builder::new()
                .name(thread)
                .spawn(move || forward_stderr(stderr, &tail, &*stderr_sink));
        }
        Ok((
            ServerProcess {
                group: Mutex::new(group),
                tail,
                links,
                _tmp: tmp,
            },
            stdin,
            stdout,
        ))
    }

    /// The last lines of its stderr, for a message.
    pub fn stderr_tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        if tail.is_empty() {
            return "(its stderr was empty)".into();
        }
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!("the last lines of its stderr:\n  {}", lines.join("\n  "))
    }

    /// Its exit status, once it has exited (waiting up to `wait` for it).
    pub fn exit_status(&self, wait: Duration) -> Option<ExitStatus> {
        self.group
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .wait_timeout(wait)
    }

    /// Ends the server: SIGTERM to its group, SIGKILL after `grace`; its jail's links go.
    pub fn stop(&self, grace: Duration) {
        self.group
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .terminate(grace);
        self.links.stop(Duration::from_millis(200));
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop(Duration::from_millis(500));
    }
}

/// `exit code N`, `killed by signal N`, for messages.
pub fn describe_status(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "exit status unknown".into(),
        },
        None => "still running".into(),
    }
}

/// Sends each stderr line (cut to [`STDERR_LINE_BYTES`]) to `sink` until
/// [`STDERR_LOG_BYTES`] went there, and keeps the last lines for messages.
fn forward_stderr(
    stderr: std::process::ChildStderr,
    tail: &Mutex<VecDeque<String>>,
    sink: &(dyn Fn(&str) + Send + Sync),
) {
    let mut reader = BufReader::new(stderr);
    let mut logged = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line without an end is bounded by the reader below: take at most a few
        // lines' worth at once.
        let n = match std::io::Read::take(&mut reader, STDERR_LINE_BYTES as u64 * 4)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let cut = crate::text::floor_char_boundary(text, STDERR_LINE_BYTES);
        let shown = if cut < text.len() {
            format!("{} [line cut at {STDERR_LINE_BYTES} bytes]", &text[..cut])
        } else {
            text.to_string()
        };
        {
            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(shown.clone());
        }
        if logged < STDERR_LOG_BYTES {
            logged += n as u64;
            sink(&shown);
            if logged >= STDERR_LOG_BYTES {
                sink(&format!(
                    "[further stderr is not logged: {STDERR_LOG_BYTES} bytes were]"
                ));
            }
        }
    }
}

/// The program `word` names: a path (relative to `root`) when it holds a `/`, else the
/// first executable file of that name on `path`.
fn resolve_program(word: &str, path: Option<&str>, root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if word.contains('/') {
        let p = root.join(word);
        return executable(&p).then_some(p);
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(word))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_on_the_path_or_as_paths() {
        let sh = resolve_program("sh", Some("/nonexistent:/bin:/usr/bin"), Path::new("/")).unwrap();
        assert!(sh.ends_with("sh"));
        assert!(resolve_program("no-such-program-here", Some("/bin"), Path::new("/")).is_none());
        assert!(resolve_program("sh", None, Path::new("/")).is_none());
        assert_eq!(
            resolve_program("./bin/sh", None, Path::new("/")),
            Some(PathBuf::from("/./bin/sh"))
        );
        // Not executable: refused.
        assert!(resolve_program("/etc/passwd", None, Path::new("/")).is_none());
    }
}
