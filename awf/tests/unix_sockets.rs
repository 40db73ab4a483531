//! The host's unix sockets, tried as an attacker would: a server on a pathname socket the
//! test starts outside every path the sandbox may read or write (as `docker.sock`, an
//! ssh-agent or the D-Bus session bus lie) must be unreachable from Bash under every
//! network and read mode, by the real `curl --unix-socket` and by Python's socket module,
//! while pipes between processes (socketpair) and the shell's ordinary work go on. Each
//! test speaks MCP to a real `awf mcp-serve`.

mod common;

use common::{Server, write_config};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A tiny HTTP server on a unix socket: answers any request with a marker, counts the
/// connections it accepted.
struct SocketServer {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
}

const REACHED: &str = "HOST-SOCKET-REACHED";

impl SocketServer {
    fn start(path: PathBuf) -> SocketServer {
        let listener = UnixListener::bind(&path).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let body = format!("{REACHED}\n");
                let _ = write!(
                    conn,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        SocketServer { path, accepted }
    }
}

fn serve(base: &Path, root: &Path, sandbox: Value) -> Server {
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut config = json!({"root": root});
    for (k, v) in sandbox.as_object().unwrap() {
        config[k] = v.clone();
    }
    let cfg = write_config(base, &config);
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    s.initialize();
    s
}

#[test]
fn a_host_unix_socket_is_unreachable_from_bash_under_every_mode() {
    let (base, root, _) = common::workspace("unix-host");
    // Outside the workspace, the temp dir and every readable root: as /var/run is.
    let run_dir = base.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let server = SocketServer::start(run_dir.join("daemon.sock"));
    let sock = server.path.display().to_string();
    // The probe: the real curl, Python's socket module, and a pipe through socketpair
    // (Python's multiprocessing Pipe) that must keep working.
    let probe = format!(
        "curl -s --max-time 5 --unix-socket {sock} http://host/ 2>&1; echo curl-rc=$?; \
         python3 -c 'import socket\ntry:\n s=socket.socket(socket.AF_UNIX); s.connect(\"{sock}\"); \
         s.sendall(b\"GET / HTTP/1.0\\r\\n\\r\\n\"); print(s.recv(99))\nexcept OSError as e: print(\"py-refused\", e)'; \
         python3 -c 'from multiprocessing import Pipe\na,b=Pipe(); a.send(\"pair-ok\"); print(b.recv())'; \
         echo end-$((6*7))"
    );
    let modes = [
        json!({}),
        json!({"network": "allow"}),
        json!({"network": {"allow": ["example.com"]}}),
        json!({"read": "host"}),
        json!({"read": "host", "network": "allow", "readable_paths": [run_dir]}),
    ];
    for mode in modes {
        let mut s = serve(&base, &root, mode.clone());
        let (out, _) = s.call("Bash", json!({ "command": probe }));
        assert!(out.contains("end-42"), "{mode}: {out}");
        assert!(
            !out.contains(REACHED),
            "{mode}: the host socket answered: {out}"
        );
        assert!(out.contains("py-refused"), "{mode}: {out}");
        assert!(out.contains("Permission denied"), "{mode}: {out}");
        assert!(out.contains("pair-ok"), "{mode}: socketpair broke: {out}");
        s.finish();
    }
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        0,
        "a connection reached the host socket"
    );
    // The same socket from outside the sandbox answers: the probe would have seen it.
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            "--unix-socket",
            &sock,
            "http://host/",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(REACHED),
        "the test's own socket server does not answer"
    );
}

#[test]
fn the_tool_description_says_unix_sockets_are_refused() {
    let (base, root, _) = common::workspace("unix-desc");
    let mut s = serve(&base, &root, json!({}));
    let tools = s.request("tools/list", json!({}));
    let bash = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap()
        .clone();
    let desc = bash["description"].as_str().unwrap();
    assert!(desc.contains("unix socket"), "{desc}");
    s.finish();
}
