//! `mcp_proxy.sandbox`: what a step's Bash may do beyond the defaults (extra writable and
//! readable paths, read mode, hidden paths, network, Landlock off, process cap, environment);
//! also a third-party server's `sandbox`, which takes the same keys. Paths are checked here,
//! at validate time, so that a typo or a dangerous path stops `awf validate` and `awf run`
//! before any agent.

use super::context::{Ctx, join};
use crate::confine::Sandbox;
use crate::confine::bounds::Bounds;
use crate::confine::{Guarantee, Network, ReadMode};
use crate::error::codes;
use crate::workflow::yaml::{Kind, Node};
use std::path::{Path, PathBuf};

const SANDBOX_KEYS: &[&str] = &[
    "writable",
    "readable",
    "hidden",
    "unix_sockets",
    "read",
    "network",
    "landlock",
    "processes",
    "env",
    "env_passthrough",
    "require",
    "memory",
    "cpu_seconds",
    "tmp_size",
    "file_size",
    "open_files",
];

/// The keys that bound each Bash call, which a long-lived child's sandbox does not take.
const CALL_KEYS: &[&str] = &[
    "memory",
    "cpu_seconds",
    "tmp_size",
    "file_size",
    "open_files",
];

/// `bash`: the step's own sandbox (Bash's), which alone takes the per-call bounds.
pub(super) fn parse_sandbox(cx: &mut Ctx, node: &Node, path: &str, bash: bool) -> Sandbox {
    let mut out = Sandbox::default();
    if node.is_null() {
        return out;
    }
    let Some(fields) = cx.fields(node, path, SANDBOX_KEYS, codes::PROXY_UNKNOWN_KEY) else {
        return out;
    };
    for (key, v) in fields {
        let kpath = join(path, key);
        if !bash && CALL_KEYS.contains(&key) {
            cx.push(
                codes::INVALID_VALUE,
                &kpath,
                v.line,
                format!("{kpath}: {key} bounds each Bash call; a server's or plugin's sandbox does not take it"),
                "move it to the step's mcp_proxy.sandbox, or remove it",
            );
            continue;
        }
        match key {
            "require" => parse_require(cx, v, &kpath, &mut out.require),
            "memory" | "tmp_size" | "file_size" | "cpu_seconds" | "open_files" => {
                parse_bound(cx, key, v, &kpath, &mut out.bounds)
            }
            "writable" | "readable" | "hidden" | "unix_sockets" => {
                parse_paths(cx, key, v, &kpath, &mut out)
            }
            "read" => parse_read(cx, v, &kpath, &mut out),
            "network" => parse_network(cx, v, &kpath, &mut out),
            "landlock" => {
                if let Some(b) = cx.boolean(v, &kpath, codes::WRONG_TYPE) {
                    out.landlock = Some(b);
                }
            }
            "processes" => parse_processes(cx, v, &kpath, &mut out),
            "env" => out.env.extend(parse_env(cx, v, &kpath)),
            _ => out.env_passthrough.extend(parse_passthrough(cx, v, &kpath)),
        }
    }
    check_sandbox(cx, node, path, &out);
    out
}

/// `read: confined` or `read: host`.
fn parse_read(cx: &mut Ctx, v: &Node, kpath: &str, out: &mut Sandbox) {
    match v.as_str() {
        Some("confined") => out.read = Some(ReadMode::Confined),
        Some("host") => out.read = Some(ReadMode::Host),
        _ => cx.push(
            codes::INVALID_VALUE,
            kpath,
            v.line,
            format!("{kpath} must be confined or host, found {}", v.describe()),
            "write `read: confined` (the default: the workspace, the system and the \
             toolchains on PATH, nothing else of $HOME) or `read: host` (what the user \
             can read, secret locations hidden)",
        ),
    }
}

/// `network: allow`, `network: deny` or `network: {allow: [hosts]}`.
pub(super) fn parse_network(cx: &mut Ctx, v: &Node, kpath: &str, out: &mut Sandbox) {
    match v.as_str() {
        Some("allow") => out.network = Some(Network::Allow),
        Some("deny") => out.network = Some(Network::Deny),
        _ if matches!(v.kind, Kind::Map(_)) => {
            if let Some(hosts) = network_hosts(cx, v, kpath) {
                out.network = Some(Network::Hosts(hosts));
            }
        }
        _ => cx.push(
            codes::INVALID_VALUE,
            kpath,
            v.line,
            format!(
                "{kpath} must be allow, deny or a host list, found {}",
                v.describe()
            ),
            "write `network: deny` (the default: nothing leaves the call), `network: \
             allow`, or `network: {allow: [crates.io, \"*.crates.io\"]}`",
        ),
    }
}

/// `processes: N`: how many processes and threads may be alive at once.
fn parse_processes(cx: &mut Ctx, v: &Node, kpath: &str, out: &mut Sandbox) {
    use crate::confine::{DEFAULT_PROCESSES, MAX_PROCESSES, MIN_PROCESSES};
    match v.as_str().and_then(|s| s.parse::<u32>().ok()) {
        Some(n) if (MIN_PROCESSES..=MAX_PROCESSES).contains(&n) => out.processes = Some(n),
        _ => cx.push(
            codes::INVALID_VALUE,
            kpath,
            v.line,
            format!(
                "{kpath} must be a whole number from {MIN_PROCESSES} to \
                 {MAX_PROCESSES}, found {}",
                v.describe()
            ),
            format!(
                "write e.g. `processes: 2048` (processes and threads one Bash call, \
                 or one server, may have alive at once; the default is {DEFAULT_PROCESSES})"
            ),
        ),
    }
}

/// The keys read together: the bounds, and what `landlock: false` rules out.
fn check_sandbox(cx: &mut Ctx, node: &Node, path: &str, out: &Sandbox) {
    if let Err(e) = out.bounds.check() {
        cx.push(
            codes::INVALID_VALUE,
            path,
            node.line,
            format!("{path}: {e}"),
            "raise it, or remove it for the default",
        );
    }
    if !out.landlock() && out.read == Some(ReadMode::Confined) {
        cx.push(
            codes::INVALID_VALUE,
            &join(path, "read"),
            node.line,
            format!("{path}: read: confined needs Landlock, but landlock is false"),
            "remove `landlock: false`, or write `read: host`",
        );
    }
    if !out.landlock() && matches!(out.network, Some(Network::Deny | Network::Hosts(_))) {
        cx.push(
            codes::INVALID_VALUE,
            &join(path, "network"),
            node.line,
            format!("{path}: a network other than allow needs the sandbox, but landlock is false"),
            "remove `landlock: false`, or write `network: allow`",
        );
    }
}

/// `require: [reads, processes, network]`: the guarantees a step refuses to run without.
fn parse_require(cx: &mut Ctx, v: &Node, kpath: &str, require: &mut Vec<Guarantee>) {
    for (i, item) in list(cx, v, kpath, "require: [reads, processes, network]") {
        let ipath = format!("{kpath}[{i}]");
        let Some(text) = cx.string(item, &ipath) else {
            continue;
        };
        match crate::confine::Guarantee::ALL
            .iter()
            .find(|g| g.name() == text)
        {
            Some(g) if !require.contains(g) => require.push(*g),
            Some(_) => {}
            None => cx.push(
                codes::INVALID_VALUE,
                &ipath,
                item.line,
                format!("{ipath} is {text:?}, not a guarantee awf knows"),
                "write some of `require: [reads, processes, network]`: the step \
                 then refuses to run where the machine cannot give them in full",
            ),
        }
    }
}

/// A bound of each Bash call: a size (`memory`, `tmp_size`, `file_size`) or a count
/// (`cpu_seconds`, `open_files`).
fn parse_bound(cx: &mut Ctx, key: &str, v: &Node, kpath: &str, bounds: &mut Bounds) {
    if matches!(key, "cpu_seconds" | "open_files") {
        match v.as_str().and_then(|s| s.parse::<u64>().ok()) {
            Some(n) if n > 0 => {
                if key == "cpu_seconds" {
                    bounds.cpu_seconds = Some(n);
                } else {
                    bounds.open_files = Some(n);
                }
            }
            _ => cx.push(
                codes::INVALID_VALUE,
                kpath,
                v.line,
                format!(
                    "{kpath} must be a whole number above 0, found {}",
                    v.describe()
                ),
                if key == "cpu_seconds" {
                    "write e.g. `cpu_seconds: 600` (CPU seconds of each process of a call; \
                 the default is the call's timeout times the cores)"
                } else {
                    "write e.g. `open_files: 4096` (descriptors each process may hold open)"
                },
            ),
        };
        return;
    }
    let example = match key {
        "memory" => "memory: 4GiB",
        "tmp_size" => "tmp_size: 1GiB",
        _ => "file_size: 2GiB",
    };
    let parsed = match v.as_str() {
        Some(t) => crate::confine::bounds::parse_size(t),
        None => Err(format!("found {}", v.describe())),
    };
    match parsed {
        Ok(n) => {
            let slot = match key {
                "memory" => &mut bounds.memory,
                "tmp_size" => &mut bounds.tmp_size,
                _ => &mut bounds.file_size,
            };
            *slot = Some(n);
        }
        Err(e) => cx.push(
            codes::INVALID_VALUE,
            kpath,
            v.line,
            format!("{kpath} must be a size: {e}"),
            format!("write e.g. `{example}`"),
        ),
    }
}

/// `writable`, `readable`, `hidden` or `unix_sockets`: a list of paths, each checked for
/// what it grants.
fn parse_paths(cx: &mut Ctx, key: &str, v: &Node, kpath: &str, out: &mut Sandbox) {
    let example = match key {
        "writable" => "writable: [~/.cargo, /opt/cache]",
        "readable" => "readable: [~/src/shared-lib, /data/fixtures]",
        "unix_sockets" => "unix_sockets: [/var/run/postgresql/.s.PGSQL.5432]",
        _ => "hidden: [~/src/secret-project, /etc/app/token]",
    };
    for (i, item) in list(cx, v, kpath, example) {
        let ipath = format!("{kpath}[{i}]");
        // A bare `~` is YAML's null; here it can only mean the home directory.
        let home = matches!(&item.kind, Kind::Scalar(s, true) if s == "~");
        let text = if home {
            Some("~".to_string())
        } else {
            cx.string(item, &ipath)
        };
        let Some(text) = text else { continue };
        match key {
            "writable" => {
                if let Some(p) = writable_path(cx, &text, &ipath, item.line) {
                    out.writable.push(p);
                }
            }
            "readable" => {
                if let Some(p) = readable_path(cx, &text, &ipath, item.line) {
                    out.readable.push(p);
                }
            }
            "unix_sockets" => {
                if let Some(p) = socket_path(cx, &text, &ipath, item.line) {
                    out.unix_sockets.push(p);
                }
            }
            _ => {
                if let Some(p) = hidden_path(cx, &text, &ipath, item.line) {
                    out.hidden.push(p);
                }
            }
        }
    }
}

/// `env: {NAME: value}`: literal values, each name a shell variable name other than
/// TMPDIR (always the private temp directory awf makes).
pub(super) fn parse_env(cx: &mut Ctx, v: &Node, kpath: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if v.is_null() {
        return out;
    }
    let Some(vars) = cx.fields(v, kpath, &[], codes::PROXY_UNKNOWN_KEY) else {
        return out;
    };
    for (name, value) in vars {
        let vpath = join(kpath, name);
        if let Err(e) = crate::child_env::check_name(name) {
            cx.push(
                codes::INVALID_VALUE,
                &vpath,
                value.line,
                e,
                "use a shell variable name",
            );
        } else if name == "TMPDIR" {
            cx.push(
                codes::INVALID_VALUE,
                &vpath,
                value.line,
                format!("{vpath}: TMPDIR is always the session's private temp directory"),
                "remove it; add the directory you want to `writable:` and use it by name",
            );
        } else if let Some(val) = cx.string(value, &vpath) {
            out.push((name.to_string(), val));
        }
    }
    out
}

/// `env_passthrough: [NAME, PREFIX*]`: variables of awf's environment passed on.
pub(super) fn parse_passthrough(cx: &mut Ctx, v: &Node, kpath: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, item) in list(cx, v, kpath, "env_passthrough: [CARGO_HOME, NPM_*]") {
        let ipath = format!("{kpath}[{i}]");
        let Some(p) = cx.string(item, &ipath) else {
            continue;
        };
        match crate::child_env::check_pattern(&p) {
            Ok(()) => out.push(p),
            Err(e) => cx.push(
                codes::INVALID_VALUE,
                &ipath,
                item.line,
                e,
                "write a variable name (NPM_TOKEN) or a prefix with a trailing * (CARGO_*)",
            ),
        }
    }
    out
}

/// `network: {allow: [hosts]}`: each entry checked as the proxy will read it.
fn network_hosts(cx: &mut Ctx, node: &Node, path: &str) -> Option<Vec<String>> {
    let fields = cx.fields(node, path, &["allow"], codes::PROXY_UNKNOWN_KEY)?;
    let apath = join(path, "allow");
    let Some((_, allow)) = fields.into_iter().find(|(k, _)| *k == "allow") else {
        cx.push(
            codes::MISSING_FIELD,
            &apath,
            node.line,
            format!("{path} has no allow list"),
            "write `network: {allow: [crates.io, \"*.crates.io\", \"github.com:443\"]}`",
        );
        return None;
    };
    let mut hosts = Vec::new();
    let mut ok = true;
    for (i, item) in list(cx, allow, &apath, "allow: [crates.io, \"*.crates.io\"]") {
        let ipath = format!("{apath}[{i}]");
        let Some(text) = cx.string(item, &ipath) else {
            ok = false;
            continue;
        };
        match crate::confine::egress::rules::Rule::parse(&text) {
            Ok(_) => hosts.push(text),
            Err(e) => {
                ok = false;
                cx.push(
                    codes::INVALID_VALUE,
                    &ipath,
                    item.line,
                    format!("{ipath}: {e}"),
                    "write host, *.domain (its subdomains, not itself), host:port, an IP \
                     address with its port (10.0.0.5:5000), or host.awf.internal:PORT for a \
                     server on this machine",
                );
            }
        }
    }
    ok.then_some(hosts)
}

/// The items of a list node (a null node is an empty list).
pub(super) fn list<'a>(
    cx: &mut Ctx,
    node: &'a Node,
    path: &str,
    example: &str,
) -> Vec<(usize, &'a Node)> {
    match &node.kind {
        Kind::Seq(items) => items.iter().enumerate().collect(),
        _ if node.is_null() => Vec::new(),
        _ => {
            cx.push(
                codes::WRONG_TYPE,
                path,
                node.line,
                format!("{path} must be a list, found {}", node.describe()),
                format!("write `{example}`"),
            );
            Vec::new()
        }
    }
}

/// A path of the sandbox: `~` expanded, absolute.
fn expand(cx: &mut Ctx, text: &str, path: &str, line: usize) -> Option<PathBuf> {
    let mut bad = |message: String, hint: &str| {
        cx.push(codes::INVALID_VALUE, path, line, message, hint);
        None
    };
    let expanded = match text.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            match std::env::var_os("HOME").filter(|h| Path::new(h).is_absolute()) {
                Some(home) => PathBuf::from(format!("{}{rest}", Path::new(&home).display())),
                None => {
                    return bad(
                        format!("{path}: {text:?} starts with ~ but HOME is not set"),
                        "write the absolute path",
                    );
                }
            }
        }
        _ => PathBuf::from(text),
    };
    if !expanded.is_absolute() {
        return bad(
            format!("{path}: {text:?} is relative"),
            "write an absolute path or one starting with ~/ (the workspace itself is always \
             readable and writable)",
        );
    }
    Some(expanded)
}

/// A warning when an entry leads through a link: the kernel follows it, so awf computes
/// rules and covers where it leads, and says where that is.
fn note_link(cx: &mut Ctx, text: &str, path: &str, line: usize, expanded: &Path) {
    let real = crate::private_files::real_path(expanded);
    if real != expanded {
        cx.warn(
            codes::SANDBOX_PATH_LINK,
            path,
            line,
            format!(
                "{path}: {text:?} leads through a link to {}; the sandbox applies the entry \
                 there (secret locations in it stay covered)",
                real.display()
            ),
            format!(
                "write {} to say it plainly, or remove the link",
                real.display()
            ),
        );
    }
}

/// True when `real` is, holds or lies in awf's state directory (run files, audit trail).
fn overlaps_state(real: &Path) -> Option<PathBuf> {
    let state = crate::private_files::real_path(&crate::private_files::state_dir());
    (real.starts_with(&state) || state.starts_with(real)).then_some(state)
}

/// A `readable` entry: expanded, never `/` (that is `read: host`), apart from awf's state.
fn readable_path(cx: &mut Ctx, text: &str, path: &str, line: usize) -> Option<PathBuf> {
    let expanded = expand(cx, text, path, line)?;
    let real = crate::private_files::real_path(&expanded);
    let message = if real == Path::new("/") {
        Some((
            format!("{path}: {text:?} is the whole file system"),
            "write `read: host` to read what the user can, or name the directories that \
             need reading"
                .to_string(),
        ))
    } else {
        // A directory above it is fine: the state directory is hidden from Bash.
        let state = crate::private_files::real_path(&crate::private_files::state_dir());
        real.starts_with(&state).then(|| {
            (
                format!(
                    "{path}: {text:?} lies in awf's state directory {} (its run files and \
                     audit trail), which the agent must not read",
                    state.display()
                ),
                "remove it; the agent reads the audit trail through no tool".to_string(),
            )
        })
    };
    if let Some((message, hint)) = message {
        cx.push(codes::INVALID_VALUE, path, line, message, hint);
        return None;
    }
    note_link(cx, text, path, line, &expanded);
    Some(expanded)
}

/// A `unix_sockets` entry: expanded; where something other than a socket is there now, an
/// error (a daemon's socket may be absent until it starts: that is fine).
fn socket_path(cx: &mut Ctx, text: &str, path: &str, line: usize) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let expanded = expand(cx, text, path, line)?;
    if let Ok(meta) = std::fs::metadata(&expanded)
        && !meta.file_type().is_socket()
    {
        cx.push(
            codes::INVALID_VALUE,
            path,
            line,
            format!("{path}: {text:?} is not a unix socket"),
            "name the socket file itself (e.g. /var/run/postgresql/.s.PGSQL.5432), not its \
             directory",
        );
        return None;
    }
    Some(expanded)
}

/// A `hidden` entry: expanded, never `/` (it may not exist yet: covered once it does).
fn hidden_path(cx: &mut Ctx, text: &str, path: &str, line: usize) -> Option<PathBuf> {
    let expanded = expand(cx, text, path, line)?;
    if crate::private_files::real_path(&expanded) == Path::new("/") {
        cx.push(
            codes::INVALID_VALUE,
            path,
            line,
            format!("{path}: {text:?} is the whole file system"),
            "name the files or directories to hide",
        );
        return None;
    }
    note_link(cx, text, path, line, &expanded);
    Some(expanded)
}

/// A `writable` entry: `~` expanded, absolute, never `/`, existing or creatable, and apart
/// from awf's own state directory (the audit trail and run files live there).
fn writable_path(cx: &mut Ctx, text: &str, path: &str, line: usize) -> Option<PathBuf> {
    let expanded = expand(cx, text, path, line)?;
    let mut bad = |message: String, hint: &str| {
        cx.push(codes::INVALID_VALUE, path, line, message, hint);
        None
    };
    let real = crate::private_files::real_path(&expanded);
    if real == Path::new("/") {
        return bad(
            format!("{path}: {text:?} is the whole file system"),
            "name the directories that need writing, e.g. ~/.cargo or ~/.npm",
        );
    }
    // The nearest existing ancestor must be a directory we may create entries in.
    let mut probe = expanded.as_path();
    while !probe.exists() {
        probe = probe.parent().unwrap_or(Path::new("/"));
    }
    if probe != expanded && !(probe.is_dir() && writable_by_us(probe)) {
        return bad(
            format!(
                "{path}: {text:?} does not exist and cannot be created ({} is not a directory awf may write)",
                probe.display()
            ),
            "create it first, or fix the path",
        );
    }
    if let Some(state) = overlaps_state(&real) {
        return bad(
            format!(
                "{path}: {text:?} overlaps awf's state directory {} (its run files and audit \
                 trail), which the agent must not be able to write",
                state.display()
            ),
            "name a narrower directory (e.g. ~/.cargo rather than ~), or set XDG_STATE_HOME elsewhere",
        );
    }
    note_link(cx, text, path, line, &expanded);
    Some(expanded)
}

fn writable_by_us(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access has no other preconditions.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}
