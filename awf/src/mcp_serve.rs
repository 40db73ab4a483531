//! `awf mcp-serve`: the per-step MCP server an agent CLI spawns, its stdio front. Reads the
//! step's config ([`ServeConfig`]: written by the parent, or made from `--root`), has the
//! step's tool server assembled ([`crate::tool_server`]: builtins, plugin operations and
//! third-party servers in one `mcpserver::Server` observed by the telemetry's hooks), and
//! serves stdio until end of input, `shutdown`, or SIGTERM/SIGINT, answering everything read
//! and flushing telemetry before it exits 0.

use crate::confine;
use crate::error::{AwfError, codes};
use crate::process;
use crate::telemetry::Transport;
use crate::tool_server::ServeConfig;
use crate::tool_server::assembly::{build_server, prepare};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// `--serve-in-child`: the process the client started forks at once and only waits; the
/// child serves. Codex ends its MCP server with SIGTERM to the server's process group and,
/// in the same instant, SIGKILL to the pid it started (tokio's kill-on-drop; its own 2 s
/// grace runs in a thread that dies with Codex), with no setting to change either. The
/// SIGKILL then hits this waiter: the serving child, still in the group, has the SIGTERM
/// and ends its session as on any signal, and if the serving child itself dies, the
/// session ends without `session.end`, a crash as before. Its death signal is SIGTERM, so
/// killing the waiter alone (without a group SIGTERM) ends it gracefully too. The waiter
/// costs a process (its memory is shared copy-on-write with the child's) for each step, so
/// only the clients that kill their server without grace ask for it.
///
/// Call it while the process has one thread. Returns in the serving child; the waiter exits
/// with the child's status (128 + the signal when a signal ended it).
pub fn serve_in_child() -> Result<(), AwfError> {
    // A fork copies only the calling thread: with another thread, a lock it held would stay
    // held in the child for ever.
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .map_err(|e| {
            AwfError::new(
                codes::SERVER_FAILED,
                format!(
                    "--serve-in-child: cannot count this process's threads in /proc/self/task \
                     ({e}); mount /proc, or start the server without --serve-in-child"
                ),
            )
        })?;
    if threads != 1 {
        return Err(AwfError::new(
            codes::SERVER_FAILED,
            format!(
                "--serve-in-child: the process already runs {threads} threads, so it cannot \
                 fork safely (a bug in awf: the fork must come first); start the server \
                 without --serve-in-child"
            ),
        ));
    }
    let waiter = std::process::id() as libc::pid_t;
    // SAFETY: the process has a single thread (checked above), so the child is a complete
    // copy in which no lock is held by a thread that does not exist there.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(AwfError::new(
            codes::SERVER_FAILED,
            format!(
                "--serve-in-child: cannot fork: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    if child == 0 {
        // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and touch no memory.
        let orphaned = unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            libc::getppid() != waiter
        };
        if orphaned {
            // The waiter died before its death signal was armed: nobody is left to serve.
            std::process::exit(0);
        }
        return Ok(());
    }
    // The waiter keeps no end of the client's pipes, so that the client sees end of output
    // when the serving child ends.
    // SAFETY: closing the standard input and output, which this process no longer uses.
    unsafe {
        libc::close(0);
        libc::close(1);
    }
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child; status is a valid int.
        if unsafe { libc::waitpid(child, &mut status, 0) } == child {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            eprintln!("awf: --serve-in-child: cannot wait for the serving child {child}: {e}");
            std::process::exit(1);
        }
    }
    std::process::exit(if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    })
}

/// `awf mcp-serve` from its flags: `--config FILE`, `--root DIR` or both (the root over the
/// config's), and `--audit FILE` (overrides the config's audit_path).
pub fn run_from_flags(
    config: Option<PathBuf>,
    root: Option<PathBuf>,
    audit: Option<PathBuf>,
) -> Result<(), AwfError> {
    let mut cfg = match (config, root) {
        (Some(c), root) => ServeConfig::load_with_root(&c, root)?,
        (None, Some(r)) => {
            let cfg = ServeConfig::for_root(r);
            cfg.check("--root")?;
            cfg
        }
        (None, None) => {
            return Err(AwfError::new(
                codes::CONFIG_MISSING,
                "awf mcp-serve needs --config FILE or --root DIR",
            ));
        }
    };
    if audit.is_some() {
        cfg.audit_path = audit;
    }
    run(cfg)
}

/// The exact argument shapes agent CLIs use to start the server
/// (`[--log-format F] mcp-serve (--config F | --root D) [--audit F] [--serve-in-child]`),
/// parsed without clap: building the whole CLI definition costs start-up time and memory
/// on every agent step.
/// Anything else (help, typos, other commands) returns None and goes through clap.
pub struct FastServeArgs {
    pub log_format: crate::telemetry::LogFormat,
    pub config: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub audit: Option<PathBuf>,
    /// See [`serve_in_child`].
    pub serve_in_child: bool,
}

pub fn fast_serve_args(args: &[std::ffi::OsString]) -> Option<FastServeArgs> {
    let mut out = FastServeArgs {
        log_format: Default::default(),
        config: None,
        root: None,
        audit: None,
        serve_in_child: false,
    };
    let mut it = args.iter();
    let mut seen_command = false;
    while let Some(a) = it.next() {
        match a.to_str()? {
            "mcp-serve" if !seen_command => seen_command = true,
            "--log-format" => {
                out.log_format = match it.next()?.to_str()? {
                    "human" => crate::telemetry::LogFormat::Human,
                    "json" => crate::telemetry::LogFormat::Json,
                    _ => return None,
                }
            }
            "--config" if seen_command && out.config.is_none() => {
                out.config = Some(it.next()?.into())
            }
            "--root" if seen_command && out.root.is_none() => out.root = Some(it.next()?.into()),
            "--audit" if seen_command && out.audit.is_none() => out.audit = Some(it.next()?.into()),
            "--serve-in-child" if seen_command && !out.serve_in_child => out.serve_in_child = true,
            _ => return None,
        }
    }
    // A source; clap reports the other cases with its usual messages.
    (seen_command && (out.config.is_some() || out.root.is_some())).then_some(out)
}

/// Registers this server in its step's registry ([`crate::step_servers`]); refused when the
/// step has ended already.
fn register(dir: &Path, origin: &str) -> Result<(), AwfError> {
    let open = crate::step_servers::register(dir).map_err(|e| {
        AwfError::new(
            codes::IO,
            format!(
                "cannot register in the step's server directory {} ({e}): {} was written \
                 by `awf run` for one step; start the server while that step runs",
                dir.display(),
                origin
            ),
        )
    })?;
    if !open {
        return Err(AwfError::new(
            codes::SERVER_FAILED,
            format!(
                "the step {} was written for has ended: nothing to serve",
                origin
            ),
        ));
    }
    Ok(())
}

/// Runs `awf mcp-serve` to completion. Returns Ok on every clean stop.
pub fn run(cfg: ServeConfig) -> Result<(), AwfError> {
    if cfg.intercept_builtins {
        // Off the way to `initialize`'s answer as far as it can be: what follows overlaps it.
        confine::namespaces::prefetch(
            Path::new(crate::builtins::bash::shell()),
            &cfg.root,
            cfg.confine_support.is_none(),
        );
    }
    if let Some(dir) = &cfg.servers_dir {
        register(dir, &cfg.origin)?;
    }
    // Processes that escape a Bash command's group are re-parented here, to be killed.
    process::become_subreaper();
    let prepared = prepare(&cfg)?;
    let server = build_server(&prepared, Transport::Pipe)?;
    let stop = server.stop_handle();
    let signal = Arc::new(AtomicI32::new(0));
    // Set in the handler itself, at delivery: a signal that came before end of input was
    // read is told even when the thread below had not run yet (a loaded machine).
    let delivered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_usize(sig, delivered.clone(), sig as usize).map_err(|e| {
            AwfError::new(codes::IO, format!("cannot install signal handlers: {e}"))
        })?;
    }
    {
        let signal = signal.clone();
        let shutdown = prepared.shutdown.clone();
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])
        .map_err(|e| AwfError::new(codes::IO, format!("cannot install signal handlers: {e}")))?;
        std::thread::Builder::new()
            .name("awf-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    signal.store(sig, Ordering::SeqCst);
                    // Running commands are killed so their calls are answered at once;
                    // the server then stops reading, answers what it read and returns.
                    shutdown.begin();
                    stop.stop();
                }
            })
            .map_err(|e| {
                AwfError::new(codes::IO, format!("cannot start the signal thread: {e}"))
            })?;
    }
    let tools = prepared.tools.offered();
    prepared
        .telemetry
        .session_start(&prepared.root.display().to_string(), tools);
    tracing::debug!(root = %prepared.root.display(), tools = ?tools, "serving");
    let result = server.serve_stdio();
    // Every call has ended; whatever escaped and was re-parented here goes too.
    process::kill_orphans();
    let sig = match signal.load(Ordering::SeqCst) {
        0 => delivered.load(Ordering::SeqCst) as i32,
        sig => sig,
    };
    match result {
        Ok(reason) => {
            let (reason, detail) = if sig != 0 {
                ("signal", Some(process::signal_name(sig)))
            } else {
                (reason.as_str(), None)
            };
            prepared.telemetry.session_end(reason, detail);
            tracing::debug!(reason, "stopped");
            Ok(())
        }
        Err(e) => {
            prepared
                .telemetry
                .session_end("error", Some(&e.to_string()));
            Err(AwfError::new(
                codes::SERVER_FAILED,
                format!("serving stdio failed: {e}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_takes_only_the_exact_serve_shapes() {
        let v = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let f = fast_serve_args(&v(&["mcp-serve", "--root", "/w"])).unwrap();
        assert_eq!(f.root.unwrap(), PathBuf::from("/w"));
        let f = fast_serve_args(&v(&[
            "--log-format",
            "json",
            "mcp-serve",
            "--config",
            "c.json",
            "--audit",
            "a",
        ]))
        .unwrap();
        assert!(
            f.config.is_some()
                && f.audit.is_some()
                && f.log_format == crate::telemetry::LogFormat::Json
                && !f.serve_in_child
        );
        let f = fast_serve_args(&v(&["mcp-serve", "--config", "c", "--serve-in-child"])).unwrap();
        assert!(f.serve_in_child);
        // Both: the root over the config's.
        let f = fast_serve_args(&v(&["mcp-serve", "--root", "a", "--config", "b"])).unwrap();
        assert!(f.root.is_some() && f.config.is_some());
        for bad in [
            &["mcp-serve"][..],
            &["mcp-serve", "--help"],
            &["mcp-serve", "--root"],
            &["tools", "list"],
            &["mcp-serve", "--root", "a", "--root", "b"],
            &["--log-format", "xml", "mcp-serve", "--root", "a"],
            &["--serve-in-child", "mcp-serve", "--root", "a"],
            &[
                "mcp-serve",
                "--root",
                "a",
                "--serve-in-child",
                "--serve-in-child",
            ],
        ] {
            assert!(fast_serve_args(&v(bad)).is_none(), "{bad:?}");
        }
    }
}
