//! Bash: runs a command with `bash -c` (`sh -c` where bash is missing) in its own process
//! group, cwd inside the root, stdin from /dev/null, in the session's jail
//! ([`crate::confine`]: what it may write, read, see and reach). On timeout (default 120 s,
//! at most 600 s) or cancellation the whole group is killed, and when the shell exits
//! whatever it left running is killed too, in its group or not (the server is a subreaper:
//! see `crate::process`; in a PID namespace, its init takes the rest with it): nothing a
//! call started outlives the call. stdout and stderr are drained fully (the command never
//! blocks on a full pipe) but kept only up to the output bound.

use super::bound::HeadBuffer;
use super::{BuiltinEnv, resolve, schema};
use crate::confine::{child, egress};
use crate::process::{self, Ended, ProcessGroup};
use crate::telemetry::CallScope;
use mcpserver::{CancellationToken, Tool};
use opentelemetry::KeyValue;
use serde::Deserialize;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub command: String,
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub cwd: Option<String>,
}

pub fn shell() -> &'static str {
    static SHELL: OnceLock<&'static str> = OnceLock::new();
    SHELL.get_or_init(|| {
        if std::path::Path::new("/bin/bash").exists() {
            "/bin/bash"
        } else {
            "/bin/sh"
        }
    })
}

pub fn tool(env: &BuiltinEnv) -> Tool {
    Tool::new(
        "Bash",
        format!(
            "Run a shell command ({} -c) in the workspace root or in cwd (inside the root). \
             stdin is /dev/null. Default timeout {} s, at most {} s (timeout_seconds); on timeout \
             the command and all its children are killed, and background processes do not \
             outlive the call. Returns the exit code, stdout and stderr, each cut to about {} \
             bytes; a non-zero exit is reported as an error. {}",
            shell().rsplit('/').next().unwrap_or("sh"),
            env.limits.bash_timeout_seconds,
            env.limits.bash_max_timeout_seconds,
            env.limits.output_bytes / 2,
            env.confine.describe()
        ),
        schema(
            &[
                ("command", "string", "The shell command line"),
                (
                    "timeout_seconds",
                    "integer",
                    "Seconds before the command is killed",
                ),
                ("cwd", "string", "Working directory, relative to the root"),
            ],
            &["command"],
        ),
    )
    .annotations(
        serde_json::json!({"readOnlyHint": false, "destructiveHint": true, "openWorldHint": true}),
    )
}

/// Where the egress proxy's attempts go: a log line each, and an audit record and a span
/// event of the call this thread runs.
fn reporter() -> egress::Reporter {
    let scope = CallScope::current();
    Arc::new(move |a: egress::proxy::Attempt| {
        let why = a.rule.as_deref().or(a.reason.as_deref()).unwrap_or("");
        let why = scope
            .as_ref()
            .map_or_else(|| why.to_string(), |s| s.mask_text(why));
        let call_id = scope.as_ref().map_or("", |s| s.call_id());
        match a.decision {
            egress::proxy::Decision::Allowed => tracing::info!(
                call_id, host = %a.host, port = a.port, rule = %why,
                bytes_up = a.bytes_up, bytes_down = a.bytes_down, "net.connect allowed"
            ),
            egress::proxy::Decision::Denied => tracing::warn!(
                call_id, host = %a.host, port = a.port, reason = %why, "net.connect denied"
            ),
        }
        let Some(scope) = &scope else { return };
        let mut attributes = vec![
            KeyValue::new("server.address", a.host.clone()),
            KeyValue::new("server.port", i64::from(a.port)),
            KeyValue::new("awf.net.decision", a.decision_name()),
        ];
        if let Some(addr) = a.address {
            attributes.push(KeyValue::new("network.peer.address", addr.ip().to_string()));
        }
        match (&a.rule, &a.reason) {
            (Some(r), _) => attributes.push(KeyValue::new("awf.net.rule", r.clone())),
            (None, Some(r)) => attributes.push(KeyValue::new("awf.net.reason", r.clone())),
            _ => {}
        }
        scope.record("net.connect", a.record(), attributes);
    })
}

/// Where the unix-socket supervisor's decisions go: as the egress proxy's.
fn unix_reporter() -> crate::confine::unix_grants::Reporter {
    let scope = CallScope::current();
    Arc::new(move |a: crate::confine::unix_grants::Attempt| {
        let call_id = scope.as_ref().map_or("", |s| s.call_id());
        if a.allowed {
            tracing::info!(call_id, path = %a.path, rule = %a.why, "net.connect allowed (unix)");
        } else {
            tracing::warn!(call_id, path = %a.path, reason = %a.why, "net.connect denied (unix)");
        }
        let Some(scope) = &scope else { return };
        let attributes = vec![
            KeyValue::new("network.transport", "unix"),
            KeyValue::new("server.address", a.path.clone()),
            KeyValue::new("awf.net.decision", a.decision_name()),
        ];
        scope.record("net.connect", a.record(), attributes);
    })
}

/// Where a call's egress proxy and unix-socket supervisor report: as [`reporter`] and
/// [`unix_reporter`] say.
fn call_reporter() -> child::Reporter {
    let (egress, unix) = (reporter(), unix_reporter());
    Arc::new(move |r| match r {
        child::Report::Egress(a) => egress(a),
        child::Report::Unix(a) => unix(a),
    })
}

/// Runs one Bash call: the command built, started in its jail, supervised to its end, and
/// its end and output told.
pub fn run(env: &BuiltinEnv, args: Args, cancel: &CancellationToken) -> Result<String, String> {
    let (timeout, cwd) = checked(env, &args)?;
    let cmd = command(env, &args.command, &cwd);
    let started = Instant::now();
    // Where a jail was made ahead, only the exec is left; else the jail is made now.
    let ahead = env.confine.start_ahead(&cmd, timeout);
    let made_ahead = ahead.is_some();
    let spawned = match ahead {
        // Its own PID namespace: nothing it starts leaves it.
        Some((group, links)) => child::serve(
            group,
            Some(links),
            &env.confine,
            call_reporter(),
            started,
            false,
        ),
        None => child::spawn(
            cmd,
            &env.confine,
            &cwd,
            child::Lifetime::Call { timeout },
            call_reporter(),
        ),
    };
    let child::Spawned {
        mut group,
        links,
        mut cgroup,
        may_leave_orphans,
        jailed,
    } = spawned.inspect_err(|_| {
        process::kill_orphans();
    })?;
    let exec_done = Instant::now();
    let output = read_output(&mut group, (env.limits.output_bytes / 2).max(1024));
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let ended = group.supervise(Some(deadline), Duration::from_millis(50), &mut || {
        cancel.is_cancelled() || env.shutdown.is_set()
    });
    let exited = Instant::now();
    // Whatever the end, the group goes, and so does every process the command started
    // that left the group (re-parented to this server, a subreaper): pipes get closed.
    group.kill();
    if may_leave_orphans {
        process::kill_orphans();
    }
    links.stop(Duration::from_secs(2));
    let end = ended.map_err(|e| format!("waiting for the command failed: {e}"))?;
    let seen = cgroup.as_mut().map(|c| c.finish()).unwrap_or_default();
    // The next call's jail, once this one's processes are gone and its cgroup is back in
    // the pool (the next takes that one again).
    env.confine.make_next_ahead();
    let usage = group.usage().unwrap_or_default();
    let max_rss = seen.peak_bytes.unwrap_or(usage.max_rss_bytes);
    if let Some(scope) = CallScope::current() {
        scope.figure("awf.call.max_rss_bytes", max_rss as i64);
        scope.figure("awf.call.cpu_ms", usage.cpu_ms as i64);
        // Where the call's time went: its jail made (or taken, made ahead), the shell
        // started (fork to exec, or the command handed to the jail made ahead to its
        // exec), the command run, the jail taken down.
        let us = |from: Instant, to: Instant| to.duration_since(from).as_micros() as i64;
        scope.figure("awf.call.jail_ahead", i64::from(made_ahead));
        scope.figure("awf.call.jail_us", us(started, jailed));
        scope.figure("awf.call.spawn_us", us(jailed, exec_done));
        scope.figure("awf.call.run_us", us(exec_done, exited));
        scope.figure("awf.call.teardown_us", us(exited, Instant::now()));
    }
    let (stdout, stderr, incomplete) = collect(output);
    let mut text = String::new();
    let bounds = env.confine.bounds();
    if seen.oom_killed {
        text.push_str(&format!(
            "killed: the call reached its memory limit of {} (mcp_proxy.sandbox.memory; \
             peak {})\n",
            crate::confine::bounds::show_size(bounds.memory()),
            crate::confine::bounds::show_size(max_rss)
        ));
    }
    let cpu = bounds.cpu_seconds(timeout);
    if let Ended::Exited(status) = &end
        && (status.signal() == Some(libc::SIGXCPU)
            || status.code() == Some(128 + libc::SIGXCPU)
            || (status.signal() == Some(libc::SIGKILL) && usage.cpu_ms >= cpu * 1000))
    {
        text.push_str(&format!(
            "killed: a process of the call used its CPU time limit of {cpu} s \
             (mcp_proxy.sandbox.cpu_seconds)\n"
        ));
    }
    let max = env.limits.bash_max_timeout_seconds;
    let is_error = seen.oom_killed | tell_end(&end, timeout, max, &mut text);
    tell_output(&mut text, stdout, stderr, incomplete);
    if is_error { Err(text) } else { Ok(text) }
}

/// The call's timeout and working directory, checked; refused while the server stops.
fn checked(env: &BuiltinEnv, args: &Args) -> Result<(u64, std::path::PathBuf), String> {
    let max = env.limits.bash_max_timeout_seconds;
    let timeout = args
        .timeout_seconds
        .unwrap_or(env.limits.bash_timeout_seconds);
    if timeout == 0 || timeout > max {
        return Err(format!(
            "timeout_seconds must be between 1 and {max}; got {timeout}"
        ));
    }
    if args.command.trim().is_empty() {
        return Err("command is empty".into());
    }
    if env.shutdown.is_set() {
        return Err("the server is shutting down; command not started".into());
    }
    let cwd_input = args.cwd.as_deref().unwrap_or(".");
    let cwd = resolve(env, cwd_input)?;
    if !cwd.is_dir() {
        return Err(format!(
            "cwd \"{cwd_input}\" is not a directory inside the root"
        ));
    }
    Ok((timeout, cwd))
}

/// The shell running `command` in `cwd`, with the session's environment only.
fn command(env: &BuiltinEnv, command: &str, cwd: &std::path::Path) -> Command {
    let mut cmd = Command::new(shell());
    // A clean environment: the allowlist and what the workflow names, so no key or token
    // of awf's own reaches it.
    cmd.env_clear().envs(env.bash_env.vars());
    // The session's own temp dir: the shared one is not writable under Landlock.
    cmd.env("TMPDIR", env.confine.tmp_dir());
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Under a host list, the way out is the egress proxy in the command's namespace.
    if *env.confine.net() == crate::confine::NetStatus::Hosts {
        cmd.envs(egress::proxy_env());
    }
    cmd
}

/// Reads the command's stdout and stderr on a thread each, keeping the head and tail of
/// `half` bytes each; each buffer comes on the channel when its stream ends.
fn read_output(
    group: &mut ProcessGroup,
    half: usize,
) -> mpsc::Receiver<(&'static str, HeadBuffer)> {
    let (done_tx, done_rx) = mpsc::channel::<(&'static str, HeadBuffer)>();
    for (name, stream) in [
        (
            "stdout",
            group
                .take_stdout()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
        (
            "stderr",
            group
                .take_stderr()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
    ] {
        let tx = done_tx.clone();
        let Some(mut stream) = stream else { continue };
        std::thread::spawn(move || {
            let mut buf = HeadBuffer::new(half);
            let mut chunk = [0u8; 16 * 1024];
            loop {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.push(&chunk[..n]),
                }
            }
            let _ = tx.send((name, buf));
        });
    }
    done_rx
}

/// Both streams as read; true when one did not end within 2 s of the command's end.
fn collect(done: mpsc::Receiver<(&'static str, HeadBuffer)>) -> (HeadBuffer, HeadBuffer, bool) {
    let mut stdout = HeadBuffer::new(0);
    let mut stderr = HeadBuffer::new(0);
    for _ in 0..2 {
        // A process that left the group (setsid) may still hold a pipe: do not wait forever.
        match done.recv_timeout(Duration::from_secs(2)) {
            Ok(("stdout", b)) => stdout = b,
            Ok((_, b)) => stderr = b,
            Err(_) => return (stdout, stderr, true),
        }
    }
    (stdout, stderr, false)
}

/// How the command ended, in words; true when that is an error.
fn tell_end(end: &Ended, timeout: u64, max: u64, text: &mut String) -> bool {
    match end {
        Ended::Exited(status) => {
            match (status.code(), status.signal()) {
                (Some(code), _) => text.push_str(&format!("exit code: {code}\n")),
                (None, Some(sig)) => text.push_str(&format!("killed by signal {sig}\n")),
                _ => text.push_str("exit status unknown\n"),
            }
            !status.success()
        }
        Ended::TimedOut => {
            text.push_str(&format!(
                "timed out after {timeout} s: the command and its process group were killed \
             (raise timeout_seconds, at most {max})\n"
            ));
            true
        }
        Ended::Interrupted => {
            text.push_str("cancelled: the command and its process group were killed\n");
            true
        }
    }
}

/// Both streams, each cut to its head and tail with the hint to read the rest.
fn tell_output(text: &mut String, stdout: HeadBuffer, stderr: HeadBuffer, incomplete: bool) {
    let hint = "redirect the output to a file and Read it with offset/limit, or filter it (grep, head, tail)";
    for (name, buf) in [("stdout", stdout), ("stderr", stderr)] {
        if buf.total() == 0 {
            text.push_str(&format!("{name}: (empty)\n"));
        } else {
            let body = buf.into_text(name, hint);
            text.push_str(&format!("{name}:\n{body}"));
            if !body.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if incomplete {
        text.push_str("[output may be incomplete: a process that left the command's group still holds its output]\n");
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn bash(env: &BuiltinEnv, command: &str, timeout: Option<u64>) -> Result<String, String> {
        run(
            env,
            Args {
                command: command.into(),
                timeout_seconds: timeout,
                cwd: None,
            },
            &CancellationToken::new(),
        )
    }

    #[test]
    fn runs_in_root_with_exit_code_and_streams() {
        let (_tmp, root) = testutil::root("bash-basic");
        let env = testutil::env(&root);
        let out = bash(&env, "pwd; echo err >&2", None).unwrap();
        assert!(out.starts_with("exit code: 0\nstdout:\n"), "{out}");
        assert!(out.contains(&env.workspace.root().display().to_string()));
        assert!(out.contains("stderr:\nerr\n"), "{out}");
        let e = bash(&env, "exit 3", None).unwrap_err();
        assert!(e.starts_with("exit code: 3\n"), "{e}");
        assert!(bash(&env, "cat", None).unwrap().contains("stdout: (empty)"));
    }

    #[test]
    fn timeout_kills_the_group() {
        let (_tmp, root) = testutil::root("bash-timeout");
        let env = testutil::env(&root);
        // 3 s: on a loaded machine the shell must get to write bg.pid before the kill.
        let e = bash(&env, "sleep 1000 & echo $! > bg.pid; sleep 1000", Some(3)).unwrap_err();
        assert!(e.starts_with("timed out after 3 s"), "{e}");
        let pid: i32 = std::fs::read_to_string(root.join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep was in the group and got SIGKILL; it may linger as a
        // zombie until reaped by init, so check its state rather than its existence.
        // SIGKILL is delivered asynchronously: poll (bounded) until it took effect.
        let dead = |state: &str| state.is_empty() || state.contains(") Z");
        let mut state = String::new();
        for _ in 0..100 {
            state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if dead(&state) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(dead(&state), "still running: {state}");
    }

    #[test]
    fn a_cancelled_call_kills_the_command() {
        let (_tmp, root) = testutil::root("bash-cancel");
        let env = testutil::env(&root);
        let token = CancellationToken::new();
        let canceller = token.clone();
        let cancel = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            canceller.cancel();
        });
        let args = Args {
            command: "sleep 1000".into(),
            timeout_seconds: None,
            cwd: None,
        };
        let e = run(&env, args, &token).unwrap_err();
        assert!(e.starts_with("cancelled: "), "{e}");
        cancel.join().unwrap();
    }

    #[test]
    fn bad_timeouts_and_cwd_outside_are_refused() {
        let (_tmp, root) = testutil::root("bash-refuse");
        let env = testutil::env(&root);
        assert!(
            bash(&env, "true", Some(0))
                .unwrap_err()
                .contains("between 1 and 600")
        );
        assert!(bash(&env, "true", Some(601)).is_err());
        let e = run(
            &env,
            Args {
                command: "true".into(),
                timeout_seconds: None,
                cwd: Some("/".into()),
            },
            &CancellationToken::new(),
        )
        .unwrap_err();
        assert!(e.contains("outside the root"), "{e}");
    }

    #[test]
    fn output_is_bounded() {
        let (_tmp, root) = testutil::root("bash-bound");
        let mut env = testutil::env(&root);
        env.limits.output_bytes = 4096;
        let out = bash(&env, "head -c 100000 /dev/zero | tr '\\0' x", None).unwrap();
        assert!(
            out.contains("[stdout cut: showing the first 2048 of 100000 bytes"),
            "{out}"
        );
    }
}
