//! Egress by host name through the real server and real tools (curl, git, pip, python's
//! sockets and TLS): under `network: {allow: [...]}` Bash has its own network namespace
//! with loopback only and reaches the listed hosts through awf's proxy alone; every
//! attempt is a `net.connect` audit record and an event on the Bash call's span. The
//! servers are local: a static HTTP site and a TLS site on the host's loopback, named
//! `host.awf.internal` inside the sandbox.

use crate::common;
use crate::otlp_receiver;
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A static HTTP/1.1 site on the host's loopback: serves the files of a directory (the
/// query string ignored, as a plain file server does), one request per connection, and
/// records every request line it receives.
struct Site {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn start(dir: &Path) -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (dir, log) = (dir.to_path_buf(), seen.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (dir, log) = (dir.clone(), log.clone());
                std::thread::spawn(move || serve_file(conn, &dir, &log));
            }
        });
        Site { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_file(conn: TcpStream, dir: &Path, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    log.lock().unwrap().push(line.trim_end().to_string());
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
    }
    let target = line.split(' ').nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap().trim_start_matches('/');
    let mut file = dir.join(path);
    if file.is_dir() {
        file = file.join("index.html");
    }
    let mut conn = conn;
    match std::fs::read(&file) {
        Ok(body) if file.is_file() && !path.contains("..") => {
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: {}\r\nConnection: close\r\n\r\n",
                body.len(),
                if path.ends_with(".html") || path.ends_with('/') {
                    "text/html"
                } else {
                    "application/octet-stream"
                }
            );
            let _ = conn.write_all(&body);
        }
        _ => {
            let _ = conn.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

/// A TLS site on the host's loopback with a fresh self-signed certificate for
/// `host.awf.internal`; answers every request with `tls-ok`. Counts the connections it
/// accepted (at the TCP level, before any handshake).
struct TlsSite {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl TlsSite {
    fn start() -> TlsSite {
        let cert = rcgen::generate_simple_self_signed(vec!["host.awf.internal".into()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let config = config.clone();
                std::thread::spawn(move || {
                    let tls = rustls::ServerConnection::new(config).unwrap();
                    let mut s = rustls::StreamOwned::new(tls, conn);
                    let mut head = Vec::new();
                    let mut byte = [0u8];
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ntls-ok",
                    );
                    s.conn.send_close_notify();
                    let _ = s.flush();
                });
            }
        });
        TlsSite { port, accepted }
    }
}

/// A site holding a text file, a git repository served the "dumb" HTTP way, and a
/// PEP 503 index with one wheel.
fn site_dir(base: &Path) -> PathBuf {
    let dir = base.join("site");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello from the allowed site\n").unwrap();
    let git = |args: &[&str], cwd: &Path| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let work = base.join("repo-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q"], &work);
    std::fs::write(work.join("README"), "cloned through the proxy\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-qm", "one"], &work);
    git(
        &[
            "clone",
            "-q",
            "--bare",
            ".",
            dir.join("repo.git").to_str().unwrap(),
        ],
        &work,
    );
    git(&["update-server-info"], &dir.join("repo.git"));
    // A wheel is a zip with its metadata; pip download fetches and checks its name only.
    let simple = dir.join("simple/awfprobe");
    std::fs::create_dir_all(&simple).unwrap();
    let wheel = "awfprobe-0.1-py3-none-any.whl";
    let script = format!(
        "import zipfile\n\
         z = zipfile.ZipFile({:?}, 'w')\n\
         z.writestr('awfprobe/__init__.py', '')\n\
         z.writestr('awfprobe-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: awfprobe\\nVersion: 0.1\\n')\n\
         z.writestr('awfprobe-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
         z.writestr('awfprobe-0.1.dist-info/RECORD', '')\n\
         z.close()\n",
        simple.join(wheel).to_str().unwrap()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(
        simple.join("index.html"),
        format!("<html><body><a href=\"{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("simple")).unwrap();
    dir
}

/// `awf mcp-serve` over `root` with `network`, an audit file, and `envs`; initialized.
fn serve(base: &Path, root: &Path, network: Value, envs: &[(&str, &str)]) -> (Server, PathBuf) {
    let audit = base.join("audit").join("audit.jsonl");
    std::fs::create_dir_all(audit.parent().unwrap()).unwrap();
    let cfg = write_config(
        base,
        &json!({"root": root, "network": network, "audit_path": audit}),
    );
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut env = vec![("TMPDIR", tmp.to_str().unwrap())];
    env.extend_from_slice(envs);
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &env);
    s.initialize();
    (s, audit)
}

/// Whether this machine gives Bash a network namespace (the description says which).
fn isolated(s: &mut Server) -> bool {
    let a = s.request("tools/list", json!({}));
    let desc = a["result"]["tools"][3]["description"]
        .as_str()
        .unwrap()
        .to_string();
    let ok = desc.contains("through the proxy at http://127.0.0.1:3128")
        || desc.contains("namespace of the session's own with loopback only");
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no network namespace for Bash in CI: {desc}"
        );
        eprintln!("skipping: no network namespace for Bash here ({desc})");
    }
    ok
}

fn bash(s: &mut Server, command: &str) -> String {
    s.call("Bash", json!({ "command": command, "timeout_seconds": 60 }))
        .0
}

fn net_records(audit: &Path) -> Vec<Value> {
    audit_lines(audit)
        .into_iter()
        .filter(|r| r["type"] == "net.connect")
        .collect()
}

/// The first `net.connect` record of the call `call_id`.
fn record_of<'a>(records: &'a [Value], call_id: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no net.connect of {call_id}: {records:#?}"))
}

/// The call id of the last `tool.call` record of Bash.
fn last_bash_call_id(audit: &Path) -> String {
    audit_lines(audit)
        .iter()
        .rev()
        .find(|r| r["type"] == "tool.call" && r["tool"] == "Bash")
        .map(|r| r["call_id"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn curl_git_and_pip_reach_the_listed_server_and_another_port_is_refused_unseen() {
    if !python_available() {
        return;
    }
    let receiver = otlp_receiver::Receiver::start();
    let (base, root, _o) = workspace("egress-tools");
    let dir = site_dir(&base);
    let allowed = Site::start(&dir);
    let other = Site::start(&dir);
    let rule = format!("host.awf.internal:{}", allowed.port);
    let (mut s, audit) = serve(
        &base,
        &root,
        json!({"allow": [rule]}),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)],
    );
    if !isolated(&mut s) {
        return;
    }
    let a = allowed.port;

    let out = bash(
        &mut s,
        &format!("curl -sS http://host.awf.internal:{a}/hello.txt"),
    );
    assert!(out.contains("hello from the allowed site"), "{out}");
    let curl_call = last_bash_call_id(&audit);

    let out = bash(
        &mut s,
        &format!("git clone -q http://host.awf.internal:{a}/repo.git cloned && cat cloned/README"),
    );
    assert!(out.contains("cloned through the proxy"), "{out}");

    let out = bash(
        &mut s,
        &format!(
            "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
             --index-url http://host.awf.internal:{a}/simple --trusted-host host.awf.internal \
             -d wheels awfprobe && ls wheels"
        ),
    );
    assert!(out.contains("awfprobe-0.1-py3-none-any.whl"), "{out}");

    let o = other.port;
    let out = bash(
        &mut s,
        &format!(
            "curl -sS -w '\\nstatus %{{http_code}}\\n' http://host.awf.internal:{o}/hello.txt"
        ),
    );
    assert!(out.contains("status 403"), "{out}");
    assert!(out.contains(&format!("host.awf.internal:{o}")), "{out}");
    assert!(out.contains("mcp_proxy.sandbox.network.allow"), "{out}");
    let denied_call = last_bash_call_id(&audit);
    assert!(other.seen().is_empty(), "{:?}", other.seen());
    assert!(
        allowed
            .seen()
            .iter()
            .any(|l| l.starts_with("GET /hello.txt ")),
        "the site saw origin-form requests: {:?}",
        allowed.seen()
    );
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");

    let records = net_records(&audit);
    let curl = record_of(&records, &curl_call);
    assert_eq!(curl["decision"], "allowed", "{curl}");
    assert_eq!(curl["host"], "host.awf.internal");
    assert_eq!(curl["port"], a);
    assert_eq!(curl["rule"], rule.as_str());
    assert_eq!(curl["address"], "127.0.0.1");
    assert!(curl["bytes_down"].as_u64().unwrap() > 0, "{curl}");
    assert!(curl["duration_ms"].is_number(), "{curl}");
    // git and pip made several connections each, all allowed.
    let allowed_n = records
        .iter()
        .filter(|r| r["decision"] == "allowed")
        .count();
    assert!(allowed_n >= 4, "{records:#?}");
    let denied: Vec<&Value> = records
        .iter()
        .filter(|r| r["decision"] == "denied")
        .collect();
    assert_eq!(denied.len(), 1, "{records:#?}");
    assert_eq!(denied[0]["call_id"], denied_call.as_str());
    assert_eq!(denied[0]["port"], o);
    assert!(
        denied[0]["reason"].as_str().unwrap().contains("allow list"),
        "{:?}",
        denied[0]
    );

    // Each attempt is an event of its Bash call's span.
    let spans = receiver.spans();
    let span_of = |call: &str| {
        spans
            .iter()
            .find(|sp| otlp_receiver::attr(sp, "awf.call_id").as_deref() == Some(call))
            .unwrap_or_else(|| panic!("no span of {call}"))
    };
    let ev = &span_of(&denied_call).events;
    assert_eq!(ev.len(), 1, "{ev:#?}");
    assert_eq!(ev[0].name, "net.connect");
    let ev_attr = |e: &opentelemetry_proto::tonic::trace::v1::span::Event, k: &str| {
        e.attributes
            .iter()
            .find(|kv| kv.key == k)
            .and_then(|kv| kv.value.as_ref())
            .map(|v| format!("{:?}", v.value))
    };
    assert!(
        ev_attr(&ev[0], "awf.net.decision")
            .unwrap()
            .contains("denied")
    );
    assert!(
        ev_attr(&ev[0], "server.address")
            .unwrap()
            .contains("host.awf.internal")
    );
    assert!(
        ev_attr(&ev[0], "server.port")
            .unwrap()
            .contains(&o.to_string())
    );
    let ev = &span_of(&curl_call).events;
    assert_eq!(ev.len(), 1, "{ev:#?}");
    assert!(
        ev_attr(&ev[0], "awf.net.decision")
            .unwrap()
            .contains("allowed")
    );
}

/// A Python probe run in Bash: a direct TCP connect to the host's site (ignoring the
/// proxy), a UDP datagram to the host's listener, a DNS lookup, and a server of its own
/// on 127.0.0.1 that it reaches. Prints one line per probe.
fn probe(site: u16, udp: u16) -> String {
    let script = format!(
        r#"
import socket
try:
    socket.create_connection(("127.0.0.1", {site}), timeout=5); print("tcp reached")
except OSError as e: print("tcp refused", e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"leak", ("127.0.0.1", {udp})); print("udp sent")
except OSError as e: print("udp refused", e)
try:
    socket.getaddrinfo("crates.io", 443); print("dns resolved")
except OSError as e: print("dns failed", e)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname(), timeout=5); s.accept(); print("own server reached")
"#
    );
    format!("python3 -c '{script}'")
}

#[test]
fn only_the_proxy_leads_out_under_a_host_list_and_nothing_under_deny() {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("egress-closed");
    let dir = base.join("site");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "x\n").unwrap();
    let site = Site::start(&dir);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    for network in [
        json!({"allow": [format!("host.awf.internal:{}", site.port)]}),
        json!("deny"),
    ] {
        let (mut s, _audit) = serve(&base, &root, network.clone(), &[]);
        if !isolated(&mut s) {
            return;
        }
        let out = bash(&mut s, &probe(site.port, udp_port));
        assert!(out.contains("tcp refused"), "{network}: {out}");
        assert!(out.contains("dns failed"), "{network}: {out}");
        assert!(out.contains("own server reached"), "{network}: {out}");
        // Sent into the call's own loopback, if at all: nothing reaches the host's.
        let mut buf = [0u8; 16];
        assert!(
            udp.recv(&mut buf).is_err(),
            "{network}: a datagram arrived: {out}"
        );
        let env = bash(&mut s, "env | grep -i _proxy= | sort");
        if network == json!("deny") {
            assert!(!env.contains("3128"), "{env}");
        } else {
            assert!(env.contains("HTTPS_PROXY=http://127.0.0.1:3128"), "{env}");
            assert!(env.contains("NO_PROXY=localhost,127.0.0.1,::1"), "{env}");
        }
        s.finish();
    }
    assert!(site.seen().is_empty(), "{:?}", site.seen());
}

/// A name (not `localhost`, which the allow list refuses: inside the sandbox it is the
/// call's own) that this machine resolves to one of its own addresses, none public: one
/// of /etc/hosts' loopback names, else the machine's host name. With the address.
fn name_of_this_machine() -> Option<(String, String)> {
    use std::net::ToSocketAddrs;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    for name in ["ip6-localhost", "ip6-loopback", hostname.trim()] {
        let Ok(addrs) = (name, 80).to_socket_addrs() else {
            continue;
        };
        let addrs: Vec<_> = addrs.map(|a| a.ip()).collect();
        let own = |ip: &std::net::IpAddr| match ip {
            std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
            std::net::IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        };
        if !addrs.is_empty() && addrs.iter().all(own) {
            return Some((name.to_string(), addrs[0].to_string()));
        }
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no name of this machine resolves to its own address"
    );
    eprintln!("skipping: no name of this machine resolves to its own address");
    None
}

#[test]
fn a_mismatched_tls_name_and_a_name_resolving_to_this_machine_are_refused() {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("egress-sni");
    let dir = base.join("site");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "x\n").unwrap();
    let site = Site::start(&dir);
    let tls = TlsSite::start();
    let t = tls.port;
    let Some((near, address)) = name_of_this_machine() else {
        return;
    };
    let (mut s, audit) = serve(
        &base,
        &root,
        json!({"allow": [format!("host.awf.internal:{t}"), format!("{near}:{}", site.port)]}),
        &[],
    );
    if !isolated(&mut s) {
        return;
    }
    // The right name: through.
    let out = bash(&mut s, &format!("curl -sSk https://host.awf.internal:{t}/"));
    assert!(out.contains("tls-ok"), "{out}");
    assert_eq!(tls.accepted.load(Ordering::SeqCst), 1);

    // A tunnel to the allowed host whose TLS names another: closed before the upstream.
    let script = format!(
        r#"
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT host.awf.internal:{t} HTTP/1.1\r\nHost: host.awf.internal:{t}\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(s, server_hostname="evil.example"); print("tls through")
except (OSError, ssl.SSLError) as e: print("tls refused", type(e).__name__)
"#
    );
    let out = bash(&mut s, &format!("python3 -c '{script}'"));
    assert!(out.contains("tls refused"), "{out}");
    assert!(!out.contains("tls through"), "{out}");
    assert_eq!(
        tls.accepted.load(Ordering::SeqCst),
        1,
        "the upstream saw the tunnel"
    );

    // A name allowed by a rule, resolving to this machine: refused, not reached.
    let out = bash(
        &mut s,
        &format!(
            "curl -sS -w '\\nstatus %{{http_code}}\\n' http://{near}:{}/hello.txt",
            site.port
        ),
    );
    assert!(out.contains("status 403"), "{out}");
    assert!(out.contains(&address), "{out}");
    assert!(site.seen().is_empty(), "{:?}", site.seen());
    s.finish();

    let records = net_records(&audit);
    let denied: Vec<&Value> = records
        .iter()
        .filter(|r| r["decision"] == "denied")
        .collect();
    assert_eq!(denied.len(), 2, "{records:#?}");
    assert!(
        denied[0]["reason"]
            .as_str()
            .unwrap()
            .contains("evil.example"),
        "{:?}",
        denied[0]
    );
    assert_eq!(denied[1]["host"], near.as_str());
    assert!(
        denied[1]["reason"].as_str().unwrap().contains(&address),
        "{:?}",
        denied[1]
    );
}

#[test]
fn awf_run_shows_the_hosts_a_step_reached_and_what_it_was_refused() {
    if !python_available() {
        return;
    }
    let dir = scratch("egress-run");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("input.txt"), "the input text\n").unwrap();
    let site_files = dir.join("site");
    std::fs::create_dir_all(&site_files).unwrap();
    std::fs::write(site_files.join("hello.txt"), "hello\n").unwrap();
    let allowed = Site::start(&site_files);
    let other = Site::start(&site_files);
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: egress
states:
  initial: build
  build:
    type: agent
    provider: claude
    prompt: Fetch it
    options:
      command: {agent}
    mcp_proxy:
      enable: true
      sandbox:
        network:
          allow: ["host.awf.internal:{a}"]
    on_success: done
  done:
    type: terminal
"#,
            agent = fake_agent().display(),
            a = allowed.port
        ),
    )
    .unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let command = format!(
        "curl -sS http://host.awf.internal:{a}/hello.txt; curl -sS http://host.awf.internal:{a}/hello.txt; \
         curl -sS http://host.awf.internal:{o}/hello.txt",
        a = allowed.port,
        o = other.port
    );
    let run = |output: &str| {
        common::awf(&work)
            .arg("run")
            .arg(&wf)
            .args(["--output", output, "--audit-dir"])
            .arg(dir.join("audit").join(output))
            .env("TMPDIR", &tmp)
            .env("XDG_STATE_HOME", dir.join("state"))
            .env("FAKE_AGENT_MODE", "bash")
            .env("FAKE_AGENT_BASH", &command)
            .env("FAKE_AGENT_PIDS", dir.join("pids"))
            .output()
            .unwrap()
    };
    let out = run("json");
    let summary = run_summary(&out);
    let build = summary_state(&summary, "build");
    let net = &build["proxy"]["net"];
    if net.is_null() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no network report: {summary:#}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("skipping: no network namespace for Bash here");
        return;
    }
    let a = format!("host.awf.internal:{}", allowed.port);
    let o = format!("host.awf.internal:{}", other.port);
    assert_eq!(net["contacted"][&a], 2, "{net:#}");
    assert_eq!(net["denied"][&o]["attempts"], 1, "{net:#}");
    assert!(
        net["denied"][&o]["reason"]
            .as_str()
            .unwrap()
            .contains("allow list"),
        "{net:#}"
    );
    let human = run("human");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains(&format!("network: {a}×2")), "{text}");
    assert!(text.contains(&format!("network denied: {o} ×1")), "{text}");
}

/// An upload site on the host's loopback: reads one request per connection, its body
/// framed by Content-Length or chunked, records the request line and the body, answers
/// with the body's length, and then reads on until the proxy closes, so anything else
/// sent on the connection is recorded as a request too.
struct UploadSite {
    port: u16,
    seen: Arc<Mutex<Vec<Received>>>,
}

/// A request line and the body that came with it.
type Received = (String, Vec<u8>);

impl UploadSite {
    fn start() -> UploadSite {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut conn = conn;
                    while let Some((line, body)) = read_request(&mut reader) {
                        let reply = format!("got {} bytes\n", body.len());
                        log.lock().unwrap().push((line, body));
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{reply}",
                            reply.len()
                        );
                    }
                });
            }
        });
        UploadSite { port, seen }
    }
}

/// One request from `r`: its request line and its body; None at the end of input.
fn read_request(r: &mut impl BufRead) -> Option<Received> {
    let line = |r: &mut dyn BufRead| {
        let mut l = String::new();
        (r.read_line(&mut l).ok()? > 0).then(|| l.trim_end().to_string())
    };
    let request = line(r)?;
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let h = line(r)?;
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if !chunked {
        body.resize(length, 0);
        r.read_exact(&mut body).ok()?;
        return Some((request, body));
    }
    loop {
        let size_line = line(r)?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            while !line(r)?.is_empty() {}
            return Some((request, body));
        }
        let start = body.len();
        body.resize(start + size + 2, 0);
        r.read_exact(&mut body[start..]).ok()?;
        body.truncate(start + size);
    }
}

#[test]
fn uploads_pass_whole_and_a_request_pipelined_behind_one_is_dropped_and_recorded() {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("egress-uploads");
    let site = UploadSite::start();
    let p = site.port;
    let (mut s, audit) = serve(
        &base,
        &root,
        json!({"allow": [format!("host.awf.internal:{p}")]}),
        &[],
    );
    if !isolated(&mut s) {
        return;
    }
    let data: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(root.join("data.txt"), &data).unwrap();

    // Content-Length (curl --data-binary), and chunked (curl -T - reads standard input).
    let out = bash(
        &mut s,
        &format!(
            "curl -sS --data-binary @data.txt http://host.awf.internal:{p}/cl && \
             cat data.txt | curl -sS -T - http://host.awf.internal:{p}/chunked"
        ),
    );
    let want = format!("got {} bytes\n", data.len());
    assert_eq!(out.matches(&want).count(), 2, "{out}");

    // A client that sends a second request behind the first on one connection, then
    // half-closes (the site reads on until its client does: it would answer a second
    // request if one came).
    let script = format!(
        "import socket\n\
         c = socket.create_connection(('127.0.0.1', 3128))\n\
         c.sendall(b'GET http://host.awf.internal:{p}/first HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'\n\
                   b'GET http://elsewhere.example/second HTTP/1.1\\r\\nHost: elsewhere.example\\r\\n\\r\\n')\n\
         c.shutdown(socket.SHUT_WR)\n\
         reply = b''\n\
         while True:\n\
         \x20   b = c.recv(65536)\n\
         \x20   if not b: break\n\
         \x20   reply += b\n\
         print(reply.decode())\n"
    );
    std::fs::write(root.join("pipeline.py"), script).unwrap();
    let out = bash(&mut s, "python3 pipeline.py");
    assert!(out.contains("got 0 bytes"), "{out}");
    let call = last_bash_call_id(&audit);
    s.finish();

    let seen = site.seen.lock().unwrap().clone();
    let lines: Vec<&str> = seen.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "POST /cl HTTP/1.1",
            "PUT /chunked HTTP/1.1",
            "GET /first HTTP/1.1"
        ],
        "the site saw exactly these requests"
    );
    assert!(seen[0].1 == data.as_bytes() && seen[1].1 == data.as_bytes());

    let records = net_records(&audit);
    let piped = record_of(&records, &call);
    assert_eq!(piped["decision"], "allowed", "{piped}");
    let second = "GET http://elsewhere.example/second HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n";
    assert_eq!(piped["bytes_dropped"], second.len() as u64, "{piped}");
    let uploads: Vec<&Value> = records
        .iter()
        .filter(|r| r["call_id"] != call.as_str())
        .collect();
    assert_eq!(uploads.len(), 2, "{records:#?}");
    for r in uploads {
        assert!(r["bytes_up"].as_u64().unwrap() > data.len() as u64, "{r}");
        assert!(r.get("bytes_dropped").is_none(), "{r}");
    }
}

#[test]
fn curl_through_socks5_reaches_the_listed_server_and_is_refused_another_port() {
    let (base, root, _o) = workspace("egress-socks");
    let dir = base.join("site");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello over socks\n").unwrap();
    let (allowed, other) = (Site::start(&dir), Site::start(&dir));
    let (mut s, audit) = serve(
        &base,
        &root,
        json!({"allow": [format!("host.awf.internal:{}", allowed.port)]}),
        &[],
    );
    if !isolated(&mut s) {
        return;
    }
    let socks = "curl -sS --proxy socks5h://127.0.0.1:3128";
    let out = bash(
        &mut s,
        &format!(
            "{socks} http://host.awf.internal:{}/hello.txt; {socks} http://host.awf.internal:{}/hello.txt; echo exit $?",
            allowed.port, other.port
        ),
    );
    assert!(out.contains("hello over socks"), "{out}");
    assert!(
        out.contains("exit 97"),
        "curl's code for a refused SOCKS request: {out}"
    );
    s.finish();
    assert_eq!(allowed.seen(), ["GET /hello.txt HTTP/1.1"]);
    assert!(other.seen().is_empty(), "{:?}", other.seen());
    let records = net_records(&audit);
    let summary: Vec<(String, u64, String)> = records
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_string(),
                r["port"].as_u64().unwrap(),
                r["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("SOCKS5".into(), allowed.port as u64, "allowed".into()),
            ("SOCKS5".into(), other.port as u64, "denied".into()),
        ],
        "{records:#?}"
    );
}
