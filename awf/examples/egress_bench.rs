//! Measures what the egress proxy costs on loopback: added latency per
//! request (a new connection each, as through the proxy every request is)
//! and throughput of one large download, each against going direct, taken
//! in turns (direct, proxied, direct, ...) so drift in the machine's load
//! falls on both alike. The download is measured twice: as fast as loopback
//! goes, and from a server that sends at 1 Gbit/s (125 MB/s), as a fast
//! network link would.
//!
//! On loopback with no limit the download is bound by CPU: through the proxy
//! the kernel carries the bytes over two TCP connections instead of one, and
//! on 2 cores three busy parties (server, proxy, client) share two, so the
//! ratio there says what the proxy costs in CPU, not what a user's download
//! loses; the paced one says that. A bare relay (accept, connect, copy; nothing
//! parsed or checked) is measured in the same turns as the yardstick for any
//! relay on this machine.
//!
//! The download is also measured over HTTPS, through a CONNECT tunnel (its ClientHello
//! checked) against direct: crates, packages and git come that way, and there the client's
//! decryption, not the relay, sets the pace.
//!
//! Interactive use is measured too: request and answer of 3000 bytes each, back and forth
//! on one CONNECT tunnel (as TLS handshakes, HTTP/2 and git's exchanges go), the median
//! round trip against the same exchange direct. A relay that holds back the tail of a
//! message (a partial segment waiting for more) shows here as a delay of the kernel's
//! cork ceiling, 200 ms per hop, where the throughput rows see nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use awf::confine::egress::proxy::Proxy;
use awf::confine::egress::rules::AllowList;

const REQUESTS: usize = 200;
const WARMUP: usize = 20;
const BIG: u64 = 100_000_000;
const DOWNLOADS: usize = 9;
/// Bytes per second of the paced download.
const PACED: f64 = 125e6;

/// A server on a loopback port that runs `handle` on each connection in a thread of its own.
fn listen(handle: fn(TcpStream)) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || handle(conn));
        }
    });
    port
}

/// An HTTP server: `/big` sends BIG bytes, anything else a short body.
fn server() -> u16 {
    listen(answer)
}

fn answer(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let paced = head.starts_with(b"GET /paced ");
    let big = paced || head.starts_with(b"GET /big ");
    let len = if big { BIG } else { 13 };
    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
    if conn.write_all(reply.as_bytes()).is_err() {
        return;
    }
    if !big {
        let _ = conn.write_all(b"Hello, world!");
        return;
    }
    let block = vec![b'x'; 64 * 1024];
    let mut left = BIG;
    let start = Instant::now();
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        if conn.write_all(&block[..n]).is_err() {
            return;
        }
        left -= n as u64;
        if paced {
            let due = Duration::from_secs_f64((BIG - left) as f64 / PACED);
            if let Some(ahead) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
}

/// The TLS server's settings: a certificate for host.awf.internal made for this run.
static TLS_SERVER: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();

/// An HTTPS server for host.awf.internal: every request gets BIG bytes. Returns its port and
/// a client configuration that trusts it.
fn tls_server() -> (u16, Arc<rustls::ClientConfig>) {
    let cert = rcgen::generate_simple_self_signed(vec!["host.awf.internal".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    TLS_SERVER.set(Arc::new(server)).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let port = listen(|conn| {
        let tls = rustls::ServerConnection::new(TLS_SERVER.get().unwrap().clone()).unwrap();
        let mut s = rustls::StreamOwned::new(tls, conn);
        let mut head = Vec::new();
        let mut byte = [0u8];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let reply =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\nConnection: close\r\n\r\n");
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
        let block = vec![b'x'; 64 * 1024];
        let mut left = BIG;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            if s.write_all(&block[..n]).is_err() {
                return;
            }
            left -= n as u64;
        }
        s.conn.send_close_notify();
        let _ = s.flush();
    });
    (port, Arc::new(client))
}

/// One GET over TLS on `conn` (direct, or a tunnel) to host.awf.internal, read to the
/// end; returns the bytes read.
fn get_tls(conn: TcpStream, client: &Arc<rustls::ClientConfig>) -> u64 {
    let name = rustls::pki_types::ServerName::try_from("host.awf.internal").unwrap();
    let tls = rustls::ClientConnection::new(client.clone(), name).unwrap();
    let mut s = rustls::StreamOwned::new(tls, conn);
    s.write_all(b"GET /big HTTP/1.1\r\nHost: host.awf.internal\r\n\r\n")
        .unwrap();
    drain(s)
}

/// Bytes of each message of the interactive exchange.
const EXCHANGE: usize = 3000;
/// Round trips of the interactive exchange, after a few unmeasured.
const EXCHANGES: usize = 50;

/// A server that sends back every message of EXCHANGE bytes it gets, on each connection.
fn echo_server() -> u16 {
    listen(|mut conn| {
        let _ = conn.set_nodelay(true);
        let mut buf = vec![0u8; EXCHANGE];
        while conn.read_exact(&mut buf).is_ok() && conn.write_all(&buf).is_ok() {}
    })
}

/// Median round trip of EXCHANGES messages on `s`, which leads to the echo server.
fn exchanges(mut s: TcpStream) -> Duration {
    s.set_nodelay(true).unwrap();
    let message = vec![b'm'; EXCHANGE];
    let mut back = vec![0u8; EXCHANGE];
    let mut times = Vec::new();
    for i in 0..EXCHANGES + 5 {
        let t = Instant::now();
        s.write_all(&message).unwrap();
        s.read_exact(&mut back).unwrap();
        if i >= 5 {
            times.push(t.elapsed());
        }
    }
    median(times)
}

/// A CONNECT tunnel through the proxy at `via` to host.awf.internal's `port`.
fn tunnel(via: SocketAddr, port: u16) -> TcpStream {
    let mut s = TcpStream::connect(via).unwrap();
    write!(
        s,
        "CONNECT host.awf.internal:{port} HTTP/1.1\r\nHost: host.awf.internal:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "CONNECT refused: {}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// The proxy on a loopback port, allowing the servers' `ports` through
/// host.awf.internal.
fn proxy(ports: &[u16]) -> SocketAddr {
    let allow = AllowList::parse(ports.iter().map(|p| format!("host.awf.internal:{p}"))).unwrap();
    let proxy = Arc::new(Proxy::new(allow));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let proxy = proxy.clone();
            std::thread::Builder::new()
                .name("egress-conn".into())
                .spawn(move || proxy.serve(client, &|_| {}))
                .unwrap();
        }
    });
    addr
}

/// The least a relay can do, as a yardstick: accept, connect to the server, copy both ways
/// (`std::io::copy`, which splices between sockets too); no request is read or checked.
fn bare_relay(server_port: u16) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            std::thread::spawn(move || {
                let upstream = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
                let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let up = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                let (mut c, mut u) = (client, upstream);
                let _ = std::io::copy(&mut u, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = up.join();
            });
        }
    });
    addr
}

/// One GET on a new connection, read to the end; returns the bytes read.
fn get(to: SocketAddr, target: &str, host: &str) -> u64 {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_nodelay(true).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    drain(s)
}

/// Reads `s` to the end; returns the bytes read.
fn drain(mut s: impl Read) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => total += n as u64,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// CPU seconds (user + system) of each live thread of this process whose name starts with
/// `egress-` (the proxy's connection and relay threads; unnamed threads carry this program's
/// name, `egress_bench`), by thread id.
fn proxy_cpu_by_thread() -> Vec<(String, f64)> {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("egress-") {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let utime: f64 = fields[11].parse().unwrap_or(0.0);
        let stime: f64 = fields[12].parse().unwrap_or(0.0);
        out.push((
            task.file_name().to_string_lossy().into_owned(),
            (utime + stime) / ticks,
        ));
    }
    out
}

/// Times one download of BIG bytes (and its head): MB/s.
fn mb_per_s(download: impl FnOnce() -> u64) -> f64 {
    let t = Instant::now();
    let n = download();
    assert!(n > BIG, "short download: {n} bytes");
    n as f64 / t.elapsed().as_secs_f64() / 1e6
}

/// The median of MB/s figures.
fn mid(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints downloads taken in turns, `(direct, other)` MB/s each: the medians of
/// each side and of the pairs' ratios.
fn print_pairs(title: &str, other: &str, pairs: &[(f64, f64)]) {
    println!("{title}");
    println!(
        "  direct {:>8.0} MB/s",
        mid(pairs.iter().map(|p| p.0).collect())
    );
    println!(
        "  {other:<6} {:>8.0} MB/s",
        mid(pairs.iter().map(|p| p.1).collect())
    );
    println!(
        "  ratio  {:>8.2} (median of the pairs' ratios)",
        mid(pairs.iter().map(|(d, o)| o / d).collect())
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let port = server();
    let direct: SocketAddr = ([127, 0, 0, 1], port).into();
    let echo = echo_server();
    let (tls_port, tls_client) = tls_server();
    let via = proxy(&[port, echo, tls_port]);
    let host = format!("host.awf.internal:{port}");
    let url = |path: &str| format!("http://{host}{path}");

    // (a) latency: direct and proxied requests interleaved, so drift in
    // the machine's load falls on both alike.
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + REQUESTS {
        let t = Instant::now();
        get(direct, "/small", &host);
        let dt = t.elapsed();
        let t = Instant::now();
        get(via, &url("/small"), &host);
        let pt = t.elapsed();
        if i >= WARMUP {
            d.push(dt);
            p.push(pt);
        }
    }
    let (dm, pm) = (median(d), median(p));
    println!("latency, median of {REQUESTS} GETs on new connections:");
    println!("  direct {:>8.1} us", dm.as_secs_f64() * 1e6);
    println!("  proxy  {:>8.1} us", pm.as_secs_f64() * 1e6);
    println!(
        "  added  {:>8.1} us",
        (pm.as_secs_f64() - dm.as_secs_f64()) * 1e6
    );

    // (b) interactive exchanges on one connection, direct and through a tunnel.
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        d.push(exchanges(TcpStream::connect(("127.0.0.1", echo)).unwrap()));
        p.push(exchanges(tunnel(via, echo)));
    }
    let (dm, pm) = (median(d), median(p));
    println!(
        "interactive: {EXCHANGE} bytes each way on one connection, median round trip of {EXCHANGES} (median of 3 connections):"
    );
    println!("  direct {:>8.1} us", dm.as_secs_f64() * 1e6);
    println!("  tunnel {:>8.1} us", pm.as_secs_f64() * 1e6);

    // (c) throughput of one large download, median of a few runs in turns.
    let once = |to: SocketAddr, target: &str| mb_per_s(|| get(to, target, &host));
    // Threads that ended are not in /proc/self/task: sample while the downloads run.
    let cpu = std::sync::Arc::new(std::sync::Mutex::new(0.0f64));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (cpu, done) = (cpu.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::HashMap::<String, f64>::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let now = proxy_cpu_by_thread();
                for (k, v) in now {
                    let e = seen.entry(k).or_insert(0.0);
                    if v > *e {
                        *e = v;
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            *cpu.lock().unwrap() = seen.values().sum();
        })
    };
    let bare = bare_relay(port);
    let (mut proxied, mut bare_runs) = (Vec::new(), Vec::new());
    let mut proxied_wall = 0.0;
    for _ in 0..DOWNLOADS {
        let d = once(direct, "/big");
        let t = Instant::now();
        let p = once(via, &url("/big"));
        proxied_wall += t.elapsed().as_secs_f64();
        let b = once(bare, "/big");
        proxied.push((d, p));
        bare_runs.push((d, b));
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    sampler.join().unwrap();
    let proxy_cpu = *cpu.lock().unwrap();
    print_pairs(
        &format!(
            "throughput, {} MB download as fast as loopback goes, median of {DOWNLOADS} in turns:",
            BIG / 1_000_000
        ),
        "proxy",
        &proxied,
    );
    println!(
        "  a bare relay (no parsing, no checks: the yardstick) {:.0} MB/s, ratio {:.2}",
        mid(bare_runs.iter().map(|p| p.1).collect()),
        mid(bare_runs.iter().map(|(d, b)| b / d).collect())
    );
    println!(
        "  the proxy's own CPU: {:.2} s for {} MB ({:.2} s per GB), {:.0}% of one core over the proxied downloads",
        proxy_cpu,
        DOWNLOADS as u64 * BIG / 1_000_000,
        proxy_cpu / (DOWNLOADS as f64 * BIG as f64 / 1e9),
        100.0 * proxy_cpu / proxied_wall
    );

    let tls_once = |conn: TcpStream| mb_per_s(|| get_tls(conn, &tls_client));
    let tls: Vec<(f64, f64)> = (0..DOWNLOADS)
        .map(|_| {
            let d = tls_once(TcpStream::connect(("127.0.0.1", tls_port)).unwrap());
            (d, tls_once(tunnel(via, tls_port)))
        })
        .collect();
    print_pairs(
        &format!(
            "throughput, {} MB download over HTTPS (TLS 1.3, rustls), through a CONNECT tunnel against direct, median of {DOWNLOADS} in turns:",
            BIG / 1_000_000
        ),
        "tunnel",
        &tls,
    );

    let paced: Vec<(f64, f64)> = (0..3)
        .map(|_| {
            let d = once(direct, "/paced");
            (d, once(via, &url("/paced")))
        })
        .collect();
    print_pairs(
        &format!(
            "throughput, {} MB download from a server sending at {:.0} MB/s (1 Gbit/s), median of 3 in turns:",
            BIG / 1_000_000,
            PACED / 1e6
        ),
        "proxy",
        &paced,
    );
}
