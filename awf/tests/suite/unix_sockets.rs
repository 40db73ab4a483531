//! The host's unix sockets, tried as an attacker would: a server on a pathname socket the
//! test starts outside every path the sandbox may read or write (as `docker.sock`, an
//! ssh-agent or the D-Bus session bus lie) must be unreachable from Bash under every
//! network and read mode, by the real `curl --unix-socket` and by Python's socket module,
//! while pipes between processes (socketpair) and the shell's ordinary work go on. Each
//! test speaks MCP to a real `awf mcp-serve`.

use crate::common;

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

#[test]
fn a_granted_socket_is_reached_by_its_inode_and_every_connection_is_audited() {
    let (base, root, _) = common::workspace("unix-grant");
    let run_dir = base.join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let granted = SocketServer::start(run_dir.join("db.sock"));
    let other = SocketServer::start(run_dir.join("docker.sock"));
    // Links in the workspace: to the granted socket (fine: it is the same inode) and to
    // the other one (refused: a name is not a grant).
    std::os::unix::fs::symlink(&granted.path, root.join("db-link")).unwrap();
    std::os::unix::fs::symlink(&other.path, root.join("docker-link")).unwrap();
    let audit = base.join("audit").join("audit.jsonl");
    std::fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let curl = |p: &str, tag: &str| {
        format!(
            "curl -s --max-time 5 --unix-socket {p} http://host/ 2>&1 | sed 's/^/{tag}: /'; \
             echo {tag}-rc=${{PIPESTATUS[0]}}; "
        )
    };
    let probe = format!(
        "{}{}{}{}cd {} && {}cd - >/dev/null; \
         python3 -c 'import socket\ntry:\n s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); print(\"dgram made\")\nexcept OSError as e: print(\"dgram refused\", e)'; \
         python3 -c 'import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(\"\\0awf-abstract\"); print(\"abstract reached\")\nexcept OSError as e: print(\"abstract refused\", e)'; \
         python3 -c 'import socket\nl=socket.socket(); l.bind((\"127.0.0.1\",0)); l.listen()\nc=socket.create_connection(l.getsockname()); a,_=l.accept(); c.sendall(b\"tcp-\"); print(a.recv(9).decode()+\"ok\")'; \
         echo end-$((6*7))",
        curl(&granted.path.display().to_string(), "granted"),
        curl(&other.path.display().to_string(), "other"),
        curl("db-link", "granted-link"),
        curl("docker-link", "other-link"),
        run_dir.display(),
        curl("db.sock", "granted-relative"),
    );
    for network in [json!("deny"), json!("allow")] {
        let _ = std::fs::remove_file(&audit);
        let mut s = serve(
            &base,
            &root,
            json!({"network": network, "unix_sockets": [granted.path], "audit_path": audit}),
        );
        let (out, _) = s.call("Bash", json!({ "command": probe }));
        assert!(out.contains("end-42"), "{network}: {out}");
        for tag in ["granted", "granted-link", "granted-relative"] {
            assert!(
                out.contains(&format!("{tag}: {REACHED}")),
                "{network}: {tag} not reached: {out}"
            );
        }
        for tag in ["other", "other-link"] {
            assert!(
                !out.contains(&format!("{tag}: {REACHED}"))
                    && !out.contains(&format!("{tag}-rc=0")),
                "{network}: {tag} reached: {out}"
            );
        }
        assert!(out.contains("dgram refused"), "{network}: {out}");
        assert!(out.contains("abstract refused"), "{network}: {out}");
        assert!(out.contains("tcp-ok"), "{network}: TCP broke: {out}");
        s.finish();
        let records = common::audit_lines(&audit);
        let unix: Vec<&Value> = records
            .iter()
            .filter(|r| r["type"] == "net.connect" && r["family"] == "unix")
            .collect();
        let allowed = unix.iter().filter(|r| r["decision"] == "allowed").count();
        let denied: Vec<&&Value> = unix.iter().filter(|r| r["decision"] == "denied").collect();
        assert_eq!(allowed, 3, "{network}: {unix:#?}");
        assert_eq!(denied.len(), 3, "{network}: {unix:#?}");
        assert!(
            denied
                .iter()
                .any(|r| r["path"] == other.path.display().to_string().as_str()),
            "{unix:#?}"
        );
        assert!(unix.iter().all(|r| r["call_id"].is_string()), "{unix:#?}");
    }
    assert_eq!(
        other.accepted.load(Ordering::SeqCst),
        0,
        "the other socket was reached"
    );
    assert_eq!(granted.accepted.load(Ordering::SeqCst), 6);
}
