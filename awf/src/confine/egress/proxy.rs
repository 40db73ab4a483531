//! The egress proxy: the sandbox's only way out. It serves HTTP proxy
//! requests (CONNECT tunnels and absolute-form plain HTTP) and SOCKS5
//! CONNECT ([`socks`]) on one port, lets through those whose host the allow
//! list names, and reports every attempt.
//!
//! Checks happen before anything reaches the upstream: the proxy resolves
//! the name itself and connects to an address it has checked, and for a
//! tunnel it reads the TLS ClientHello first so the server name the client
//! asks for is the host the rules allowed.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::body::Body;
use super::rules::{self, AllowList, Host, is_public};
use super::socks;

/// Largest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;
/// Time the client has to send its request head, and later its ClientHello.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to open the upstream connection, per address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// On a tunnel to a port other than 443, how long the client may stay silent
/// before the proxy takes it for a protocol where the server speaks first
/// (SSH, SMTP) and opens the tunnel without a ClientHello to check.
const SERVER_FIRST_WAIT: Duration = Duration::from_secs(2);
/// Largest ClientHello the proxy waits for, as a handshake message.
const MAX_HELLO: usize = 16 * 1024;
/// Largest run of TLS records carrying that ClientHello.
const MAX_HELLO_RECORDS: usize = MAX_HELLO + 8 * 1024;
/// Relay buffer per direction, where bytes are copied (a request's body, or where the
/// kernel cannot splice): on the relay thread's stack, so a connection costs no heap.
const RELAY_BUFFER: usize = 16 * 1024;
/// Bytes one splice moves at most (the pipe's size, where the kernel grants it).
const SPLICE_PIPE: usize = 1024 * 1024;
/// The setting that holds the allow list, named in refusals.
const ALLOW_SETTING: &str = "mcp_proxy.sandbox.network.allow";

/// Turns a host name into addresses.
pub trait Resolve: Send + Sync {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The system resolver (getaddrinfo).
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok((host, port).to_socket_addrs()?.collect())
    }
}

/// Whether the allow list let the connection through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

/// What happened to one client connection.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The requested host, lowercase, without trailing dot or brackets;
    /// empty when the request could not be read.
    pub host: String,
    pub port: u16,
    /// The upstream address connected to, or refused.
    pub address: Option<SocketAddr>,
    pub decision: Decision,
    /// The text of the rule that allowed it.
    pub rule: Option<String>,
    /// Why it was denied, or why an allowed connection failed.
    pub reason: Option<String>,
    /// Bytes sent upstream (for plain HTTP, the rewritten head included).
    pub bytes_up: u64,
    /// Bytes relayed from upstream to the client.
    pub bytes_down: u64,
    /// Bytes the client sent after its plain HTTP request's body (a pipelined
    /// request, say), read and not sent upstream: one request per connection.
    pub bytes_dropped: u64,
    /// The whole client connection.
    pub duration: Duration,
    /// "CONNECT", "HTTP" or "SOCKS5".
    pub method: &'static str,
}

/// The proxy's settings; one value serves any number of connections, each
/// on its own thread.
pub struct Proxy {
    pub allow: AllowList,
    pub resolver: Box<dyn Resolve>,
    /// What `host.awf.internal` means: the host's loopback by default.
    pub internal: IpAddr,
}

impl Proxy {
    /// A proxy with the system resolver and `host.awf.internal` = 127.0.0.1.
    pub fn new(allow: AllowList) -> Proxy {
        Proxy {
            allow,
            resolver: Box::new(SystemResolver),
            internal: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Serves one client connection to the end (blocking), then reports one
    /// Attempt.
    pub fn serve(&self, client: TcpStream, report: &dyn Fn(Attempt)) {
        let started = Instant::now();
        let mut attempt = Attempt {
            host: String::new(),
            port: 0,
            address: None,
            decision: Decision::Denied,
            rule: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            bytes_dropped: 0,
            duration: Duration::ZERO,
            method: "HTTP",
        };
        if let Err(stop) = self.run(&client, &mut attempt) {
            match &stop.reply {
                Some((status, _)) if attempt.method == "SOCKS5" => {
                    let _ = (&client).write_all(&socks::reply_for(*status));
                }
                Some((status, body)) => refuse(&client, *status, body),
                None => {}
            }
            attempt.reason = Some(stop.reason);
        }
        let _ = client.shutdown(Shutdown::Both);
        attempt.duration = started.elapsed();
        report(attempt);
    }

    fn run(&self, client: &TcpStream, attempt: &mut Attempt) -> Result<(), Stop> {
        // Small writes (a request head, a ClientHello) must not wait for
        // Nagle: the proxy's added latency is mostly that.
        let _ = client.set_nodelay(true);
        let _ = client.set_write_timeout(Some(CLIENT_TIMEOUT));
        let deadline = Instant::now() + CLIENT_TIMEOUT;
        let (target, ask) = match read_head(client, deadline)? {
            Opening::Socks(first) => {
                attempt.method = "SOCKS5";
                let c = socks::handshake(client, first, deadline).map_err(Stop::quiet)?;
                let target = Target {
                    host: c.host,
                    port: c.port,
                    path: String::new(),
                };
                attempt.host = target.host.clone();
                attempt.port = target.port;
                let ask = Ask::Tunnel {
                    established: &socks::SUCCEEDED,
                    first: c.rest,
                };
                (target, ask)
            }
            Opening::Http(mut buf, head_len) => {
                let request = parse_request(&buf[..head_len])?;
                let extra = buf.split_off(head_len);
                let target = parse_target(&request)?;
                attempt.host = target.host.clone();
                attempt.port = target.port;
                let ask = if request.method == "CONNECT" {
                    attempt.method = "CONNECT";
                    Ask::Tunnel {
                        established: b"HTTP/1.1 200 Connection established\r\n\r\n",
                        first: extra,
                    }
                } else {
                    // A request's body is framed by its head; what came past it is dropped.
                    let mut body = Body::of(&request.headers).map_err(|why| Stop::bad(400, why))?;
                    let keep = body.take(&extra).map_err(|why| Stop::bad(400, why))?;
                    attempt.bytes_dropped = (extra.len() - keep) as u64;
                    let mut head = rewrite_head(&request, &target);
                    head.extend_from_slice(&extra[..keep]);
                    Ask::Forward { head, body }
                };
                (target, ask)
            }
        };

        let Some(rule) = self.allow.find(&target.host, target.port) else {
            let shown = host_port(&target.host, target.port);
            return Err(Stop::reply(
                403,
                format!("{shown} is not in {ALLOW_SETTING}; add it there to allow it."),
                "not in the allow list".to_string(),
            ));
        };
        attempt.rule = Some(rule.text.clone());
        let addresses = self.addresses(&rule.host, &target, attempt)?;
        attempt.decision = Decision::Allowed;

        match ask {
            Ask::Forward { head, body } => {
                let upstream =
                    connect(&addresses, attempt).map_err(|e| Stop::reply(502, e.clone(), e))?;
                relay(client, &upstream, &head, Some(body), attempt)
            }
            Ask::Tunnel { established, first } => {
                self.tunnel(client, &target, &addresses, established, first, attempt)
            }
        }
    }

    /// The addresses the connection may go to: the rule decides how the
    /// host is turned into addresses, and names may lead to public
    /// addresses only.
    fn addresses(
        &self,
        rule_host: &Host,
        target: &Target,
        attempt: &mut Attempt,
    ) -> Result<Vec<SocketAddr>, Stop> {
        let port = target.port;
        match rule_host {
            Host::Internal => Ok(vec![SocketAddr::new(self.internal, port)]),
            Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, port)]),
            Host::Name(_) | Host::Suffix(_) => {
                let found = self.resolver.resolve(&target.host, port).map_err(|e| {
                    let why = format!("cannot resolve {}: {e}", target.host);
                    Stop::reply(502, why.clone(), why)
                })?;
                // The port is the one the rules checked, whatever the
                // resolver said.
                let found: Vec<SocketAddr> = found
                    .iter()
                    .map(|a| SocketAddr::new(a.ip(), port))
                    .collect();
                let Some(first) = found.first() else {
                    let why = format!("{} has no address", target.host);
                    return Err(Stop::reply(502, why.clone(), why));
                };
                let public: Vec<SocketAddr> = found
                    .iter()
                    .copied()
                    .filter(|a| is_public(a.ip()))
                    .collect();
                if public.is_empty() {
                    attempt.address = Some(*first);
                    let ip = first.ip();
                    return Err(Stop::reply(
                        403,
                        format!(
                            "{} resolves to {ip}, a private address; a host name may only lead to public addresses: to reach a private address, list the address itself in {ALLOW_SETTING}, like 10.0.0.5:5000.",
                            target.host
                        ),
                        format!("{} resolves to {ip}, a private address", target.host),
                    ));
                }
                Ok(public)
            }
        }
    }

    /// A tunnel (HTTP CONNECT or SOCKS5): `established` (the protocol's
    /// success), then the client's first bytes are checked before the upstream
    /// is contacted at all.
    fn tunnel(
        &self,
        client: &TcpStream,
        target: &Target,
        addresses: &[SocketAddr],
        established: &[u8],
        mut first: Vec<u8>,
        attempt: &mut Attempt,
    ) -> Result<(), Stop> {
        (&*client)
            .write_all(established)
            .map_err(|e| Stop::quiet(format!("client gone: {e}")))?;

        let started = Instant::now();
        loop {
            match inspect(&target.host, target.port, &first) {
                Verdict::Pass => break,
                Verdict::Refuse(why) => {
                    attempt.decision = Decision::Denied;
                    return Err(Stop::quiet(why));
                }
                Verdict::NeedMore => {}
            }
            let wait = if first.is_empty() && target.port != 443 {
                SERVER_FIRST_WAIT
            } else {
                CLIENT_TIMEOUT
            };
            let Some(left) = wait.checked_sub(started.elapsed()).filter(|d| !d.is_zero()) else {
                if first.is_empty() && target.port != 443 {
                    break;
                }
                attempt.decision = Decision::Denied;
                return Err(Stop::quiet(if first.is_empty() {
                    "no TLS ClientHello came within 10 s on port 443".to_string()
                } else {
                    "the TLS ClientHello did not complete within 10 s".to_string()
                }));
            };
            let _ = client.set_read_timeout(Some(left));
            let mut chunk = [0u8; 4096];
            match (&*client).read(&mut chunk) {
                Ok(0) => {
                    return Err(Stop::quiet(if first.is_empty() {
                        "the client closed the tunnel before sending anything".to_string()
                    } else {
                        attempt.decision = Decision::Denied;
                        "the client closed the tunnel inside its TLS ClientHello".to_string()
                    }));
                }
                Ok(n) => {
                    first.extend_from_slice(&chunk[..n]);
                    if first.len() > MAX_HELLO_RECORDS {
                        attempt.decision = Decision::Denied;
                        return Err(Stop::quiet(
                            "the TLS ClientHello is larger than 16 KiB".to_string(),
                        ));
                    }
                }
                Err(e) if is_timeout(&e) || e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Stop::quiet(format!("client gone: {e}"))),
            }
        }

        let upstream = connect(addresses, attempt).map_err(Stop::quiet)?;
        relay(client, &upstream, &first, None, attempt)
    }
}

/// Why serving stopped early, and what to tell the client if anything.
struct Stop {
    reply: Option<(u16, String)>,
    reason: String,
}

impl Stop {
    fn reply(status: u16, body: String, reason: String) -> Stop {
        Stop {
            reply: Some((status, body)),
            reason,
        }
    }

    /// No reply: the client is gone, or inside a tunnel where only
    /// closing it is left.
    fn quiet(reason: String) -> Stop {
        Stop {
            reply: None,
            reason,
        }
    }

    /// A 4xx where the client's message is also the reason reported.
    fn bad(status: u16, why: String) -> Stop {
        Stop::reply(status, why.clone(), why)
    }
}

/// How a client opens: an HTTP request head (the bytes read and the head's
/// length; bytes past it are the start of a body or of a tunnel), or a SOCKS5
/// greeting (the bytes read so far).
enum Opening {
    Http(Vec<u8>, usize),
    Socks(Vec<u8>),
}

/// Reads the request head, or the first bytes of a SOCKS5 greeting.
fn read_head(client: &TcpStream, deadline: Instant) -> Result<Opening, Stop> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let timed_out = || Stop::bad(408, "the request head did not come within 10 s".into());
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(timed_out)?;
        let _ = client.set_read_timeout(Some(left));
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        let n = match (&*client).read(&mut chunk[..room]) {
            Ok(0) => {
                return Err(Stop::quiet(if buf.is_empty() {
                    "the client closed without sending a request".to_string()
                } else {
                    "the client closed inside its request head".to_string()
                }));
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => return Err(timed_out()),
            Err(e) => return Err(Stop::quiet(format!("client gone: {e}"))),
        };
        buf.extend_from_slice(&chunk[..n]);
        if buf[0] == socks::VERSION {
            return Ok(Opening::Socks(buf));
        }
        let mut headers = [httparse::EMPTY_HEADER; 128];
        match httparse::Request::new(&mut headers).parse(&buf) {
            Ok(httparse::Status::Complete(len)) => return Ok(Opening::Http(buf, len)),
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(Stop::bad(
                    431,
                    "the request head is larger than 64 KiB".to_string(),
                ));
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Stop::bad(
                    431,
                    "the request has more than 128 header fields".to_string(),
                ));
            }
            Err(e) => return Err(Stop::bad(400, not_http(&buf, e))),
        }
    }
}

/// A short explanation of bytes that are not an HTTP request.
fn not_http(buf: &[u8], e: httparse::Error) -> String {
    match buf.first() {
        Some(4) => "SOCKS4 is not served: use socks5h://127.0.0.1:3128, or an http:// proxy"
            .to_string(),
        Some(0x16) => "this proxy is reached over plain HTTP: use an http:// proxy URL (https targets still work, through CONNECT)".to_string(),
        _ => format!("not an HTTP request ({e})"),
    }
}

struct Request {
    method: String,
    target: String,
    minor_version: u8,
    headers: Vec<(String, Vec<u8>)>,
}

fn parse_request(head: &[u8]) -> Result<Request, Stop> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(Stop::bad(400, "the request head does not parse".into())),
    }
    Ok(Request {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        minor_version: req.version.unwrap_or(1),
        headers: req
            .headers
            .iter()
            .map(|h| (h.name.to_string(), h.value.to_vec()))
            .collect(),
    })
}

/// What a client asks for, once its head or greeting is read.
enum Ask {
    /// A tunnel (HTTP CONNECT or SOCKS5): `established` tells the client it is
    /// open; `first` are the bytes it sent after asking.
    Tunnel {
        established: &'static [u8],
        first: Vec<u8>,
    },
    /// A plain HTTP request: its head as sent upstream with the part of its body
    /// that came with it, and where the rest of that body ends.
    Forward { head: Vec<u8>, body: Body },
}

struct Target {
    /// Lowercase, no trailing dot, no brackets.
    host: String,
    port: u16,
    /// For plain HTTP: the origin-form target sent upstream.
    path: String,
}

fn parse_target(req: &Request) -> Result<Target, Stop> {
    let bad = |why: String| Stop::bad(400, why);
    if req.method == "CONNECT" {
        let (host, port) = parse_authority(&req.target, None).map_err(bad)?;
        return Ok(Target {
            host,
            port,
            path: String::new(),
        });
    }
    let t = req.target.as_str();
    let scheme_end = t
        .find("://")
        .filter(|&i| t[..i].bytes().all(|b| b.is_ascii_alphabetic()));
    let Some(scheme_end) = scheme_end else {
        return Err(bad(if t.starts_with('/') {
            format!(
                "this is a proxy: send the full URL (\"{} http://HOST{t}\") or CONNECT HOST:PORT",
                req.method
            )
        } else {
            format!("the request target \"{t}\" is not an http:// URL")
        }));
    };
    let scheme = t[..scheme_end].to_ascii_lowercase();
    if scheme == "https" {
        return Err(bad(
            "https:// URLs go through a tunnel: send CONNECT HOST:443 and speak TLS inside it"
                .to_string(),
        ));
    }
    if scheme != "http" {
        return Err(bad(format!(
            "only http:// URLs and CONNECT are served, not {scheme}://"
        )));
    }
    let rest = &t[scheme_end + 3..];
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(bad(
            "the URL carries a user name; credentials in proxy URLs are not passed on".to_string(),
        ));
    }
    let (host, port) = parse_authority(authority, Some(80)).map_err(bad)?;
    let path = match path.as_bytes().first() {
        None | Some(b'#') => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        _ => path.to_string(),
    };
    Ok(Target { host, port, path })
}

/// Splits `host:port` / `[v6]:port`; the port may be left out only when
/// there is a default.
fn parse_authority(authority: &str, default_port: Option<u16>) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(format!("\"{authority}\" opens \"[\" without closing it"));
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!(
                "\"{authority}\" is not an IPv6 address in brackets"
            ));
        }
        match after {
            "" => (v6, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (v6, Some(p)),
                None => return Err(format!("\"{authority}\" has text after \"]\"")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            Some(_) => {
                return Err(format!(
                    "\"{authority}\" has more than one \":\" (write IPv6 addresses in brackets)"
                ));
            }
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("\"{authority}\" names no host"));
    }
    let port = match (port, default_port) {
        (Some(text), _) if !text.is_empty() => match text.parse::<u16>() {
            Ok(p) if p != 0 && text.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(format!("\"{authority}\" has a bad port")),
        },
        (_, Some(d)) => d,
        (_, None) => return Err(format!("\"{authority}\" needs a port: HOST:PORT")),
    };
    let lower = host.to_ascii_lowercase();
    let host = lower.strip_suffix('.').unwrap_or(&lower).to_string();
    Ok((host, port))
}

/// `host:port`, with IPv6 addresses in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The request head as sent upstream: origin-form, hop-by-hop headers of
/// the proxy hop dropped, Host from the URL, and `Connection: close`: one
/// request per connection (the proxy passes on nothing after its body, see
/// [`Body`]), so later bytes cannot become a request to another host.
fn rewrite_head(req: &Request, target: &Target) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(format!(" HTTP/1.{}\r\n", req.minor_version).as_bytes());
    // The URL is authoritative for an absolute-form request; a different
    // Host header would reach another site at the same address.
    let authority = match target.port {
        80 if target.host.contains(':') => format!("[{}]", target.host),
        80 => target.host.clone(),
        port => host_port(&target.host, port),
    };
    out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    for (name, value) in &req.headers {
        let dropped = [
            "host",
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|d| name.eq_ignore_ascii_case(d));
        if dropped {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Connects to the first address that answers; the error names them all.
fn connect(addresses: &[SocketAddr], attempt: &mut Attempt) -> Result<TcpStream, String> {
    let mut errors = Vec::new();
    for addr in addresses {
        attempt.address = Some(*addr);
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    Err(format!("cannot connect to {}", errors.join("; ")))
}

/// Sends `first` upstream, then copies both ways until both sides have
/// ended, half-closing each direction as its source ends. With a request's
/// `body`, only the rest of that body goes upstream.
fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    first: &[u8],
    body: Option<Body>,
    attempt: &mut Attempt,
) -> Result<(), Stop> {
    let _ = client.set_read_timeout(None);
    let _ = client.set_write_timeout(None);
    if let Err(e) = (&*upstream).write_all(first) {
        let _ = upstream.shutdown(Shutdown::Both);
        return Err(Stop::quiet(format!("upstream closed: {e}")));
    }
    attempt.bytes_up = first.len() as u64;
    let (up, down) = std::thread::scope(|s| {
        let up = std::thread::Builder::new()
            .name("egress-up".into())
            .spawn_scoped(s, || pump(client, upstream, body));
        match up {
            Ok(up) => {
                let down = pump(upstream, client, None);
                (up.join().unwrap_or_default(), down)
            }
            Err(_) => Default::default(),
        }
    });
    attempt.bytes_up += up.bytes;
    attempt.bytes_dropped += up.dropped;
    attempt.bytes_down = down.bytes;
    if let Some(fault) = up.fault {
        attempt.reason = Some(fault);
    }
    let _ = upstream.shutdown(Shutdown::Both);
    Ok(())
}

/// What one direction of a relay moved.
#[derive(Default)]
struct Moved {
    bytes: u64,
    /// Read and not passed on: past the end of a request's body.
    dropped: u64,
    /// Why the request's body could not be followed.
    fault: Option<String>,
}

/// Copies one direction (with a request's `body`, that body and no more);
/// on a clean end passes the half-close on, on an error tears both sockets
/// down so the other direction ends too.
fn pump(from: &TcpStream, to: &TcpStream, body: Option<Body>) -> Moved {
    let spliced = match body {
        Some(_) => None,
        None => splice_all(from, to),
    };
    let (moved, clean) = match spliced {
        Some((bytes, clean)) => (
            Moved {
                bytes,
                ..Moved::default()
            },
            clean,
        ),
        None => copy_all(from, to, body),
    };
    if clean {
        let _ = to.shutdown(Shutdown::Write);
    } else {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    }
    moved
}

/// The copy through a buffer of ours (with a request's `body`, only what is
/// still that body is passed on; the rest is read and dropped): what moved,
/// and whether `from` ended cleanly.
fn copy_all(mut from: &TcpStream, mut to: &TcpStream, mut body: Option<Body>) -> (Moved, bool) {
    let mut buf = [0u8; RELAY_BUFFER];
    let mut moved = Moved::default();
    loop {
        match from.read(&mut buf) {
            Ok(0) => return (moved, true),
            Ok(n) => {
                let keep = match body.as_mut().map(|b| b.take(&buf[..n])) {
                    None => n,
                    Some(Ok(keep)) => keep,
                    Some(Err(why)) => {
                        moved.fault = Some(why);
                        return (moved, false);
                    }
                };
                if keep > 0 && to.write_all(&buf[..keep]).is_err() {
                    return (moved, false);
                }
                moved.bytes += keep as u64;
                moved.dropped += (n - keep) as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (moved, false),
        }
    }
}

/// The copy by the kernel, socket to pipe to socket (`splice`): the bytes never enter
/// this process, so a download through the proxy costs about what a direct one does.
/// None when the kernel cannot splice these (nothing was moved: copy instead).
fn splice_all(from: &TcpStream, to: &TcpStream) -> Option<(u64, bool)> {
    use std::os::fd::AsRawFd;
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two descriptors, closed below.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return None;
    }
    let [rx, tx] = pipe;
    // A larger pipe moves more per call (fewer syscalls); the default size where refused.
    // SAFETY: fcntl on the pipe just made.
    unsafe { libc::fcntl(tx, libc::F_SETPIPE_SZ, SPLICE_PIPE as libc::c_int) };
    let (src, dst) = (from.as_raw_fd(), to.as_raw_fd());
    // Never SPLICE_F_MORE: it corks the socket, so the tail of every message (a segment
    // short of full) would wait for more bytes up to the kernel's 200 ms ceiling, on each
    // hop of each exchange (a TLS handshake, an HTTP/2 request). The kernel sets MORE by
    // itself while the pipe still holds bytes for the socket.
    let flags = libc::SPLICE_F_MOVE;
    let null = std::ptr::null_mut();
    let mut total = 0u64;
    let outcome = 'copy: loop {
        // SAFETY: splice on descriptors owned by the caller and this frame.
        let n = unsafe { libc::splice(src, null, tx, null, SPLICE_PIPE, flags) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL | libc::ENOSYS) if total == 0 => break None,
                _ => break Some((total, false)),
            }
        }
        if n == 0 {
            break Some((total, true));
        }
        let mut left = n as usize;
        while left > 0 {
            // SAFETY: as above.
            let m = unsafe { libc::splice(rx, null, dst, null, left, flags) };
            if m <= 0 {
                if m < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break 'copy Some((total, false));
            }
            left -= m as usize;
            total += m as u64;
        }
    };
    // SAFETY: the pipe's two descriptors, opened above.
    unsafe {
        libc::close(rx);
        libc::close(tx);
    }
    outcome
}

/// Sends an error reply and lets the client read it: closing with unread
/// request bytes would reset the connection and lose the reply.
fn refuse(client: &TcpStream, status: u16, body: &str) {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Bad Gateway",
    };
    let reply = format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    if (&*client).write_all(reply.as_bytes()).is_err() {
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
    let mut sink = [0u8; 8192];
    let mut drained = 0;
    while drained < 256 * 1024 {
        match (&*client).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// What the first bytes of a tunnel say about it.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Open the tunnel.
    Pass,
    NeedMore,
    /// Close it, for this reason.
    Refuse(String),
}

/// Checks a tunnel's first bytes against its CONNECT host: TLS must name
/// that host, and port 443 must carry TLS. Other protocols on other ports
/// pass; their host was checked by address already.
fn inspect(host: &str, port: u16, first: &[u8]) -> Verdict {
    let Some(&kind) = first.first() else {
        return Verdict::NeedMore;
    };
    if kind != 0x16 {
        return if port == 443 {
            Verdict::Refuse(
                "port 443 carries TLS only, and the tunnel's first bytes are not a TLS ClientHello"
                    .to_string(),
            )
        } else {
            Verdict::Pass
        };
    }
    let hello = match gather_hello(first) {
        Ok(Some(hello)) => hello,
        Ok(None) => return Verdict::NeedMore,
        Err(why) => return Verdict::Refuse(why),
    };
    match server_name(&hello).and_then(|sni| check_sni(host, sni.as_deref())) {
        Ok(()) => Verdict::Pass,
        Err(why) => Verdict::Refuse(why),
    }
}

/// Joins the handshake records at the start of `raw` into the ClientHello
/// message; `None` while it is incomplete.
fn gather_hello(raw: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut message = Vec::new();
    let mut rest = raw;
    loop {
        if message.len() >= 4 {
            if message[0] != 1 {
                return Err("the first TLS handshake message is not a ClientHello".to_string());
            }
            let len = 4 + u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if len > MAX_HELLO {
                return Err("the TLS ClientHello is larger than 16 KiB".to_string());
            }
            if message.len() >= len {
                message.truncate(len);
                return Ok(Some(message));
            }
        }
        if rest.len() < 5 {
            return Ok(None);
        }
        if rest[0] != 0x16 || rest[1] != 3 {
            return Err(
                "the TLS ClientHello is broken off by a record of another kind".to_string(),
            );
        }
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        if len == 0 || len > 16 * 1024 {
            return Err(format!("a TLS record of {len} bytes is not a valid record"));
        }
        if rest.len() < 5 + len {
            return Ok(None);
        }
        message.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
}

/// The server name (SNI) a complete ClientHello message asks for.
fn server_name(message: &[u8]) -> Result<Option<String>, String> {
    let broken = || "the TLS ClientHello does not parse".to_string();
    let body = message.get(4..).ok_or_else(broken)?;
    let (rest, hello) = tls_parser::parse_tls_handshake_client_hello(body).map_err(|_| broken())?;
    if !rest.is_empty() {
        return Err(broken());
    }
    let Some(mut ext) = hello.ext else {
        return Ok(None);
    };
    // Walk the extensions' framing here, so an extension this parser does
    // not know can neither hide the server name nor refuse a sound hello.
    let mut name: Option<String> = None;
    let mut seen = false;
    while !ext.is_empty() {
        if ext.len() < 4 {
            return Err(broken());
        }
        let kind = u16::from_be_bytes([ext[0], ext[1]]);
        let len = u16::from_be_bytes([ext[2], ext[3]]) as usize;
        let data = ext.get(4..4 + len).ok_or_else(broken)?;
        ext = &ext[4 + len..];
        if kind != 0 {
            continue;
        }
        if seen {
            return Err("the TLS ClientHello has two server name extensions".to_string());
        }
        seen = true;
        let (left, parsed) =
            tls_parser::parse_tls_extension_sni_content(data).map_err(|_| broken())?;
        let tls_parser::TlsExtension::SNI(entries) = parsed else {
            return Err(broken());
        };
        if !left.is_empty() {
            return Err(broken());
        }
        for (kind, value) in entries {
            if kind != tls_parser::SNIType::HostName {
                continue;
            }
            if name.is_some() {
                return Err("the TLS ClientHello names more than one server".to_string());
            }
            let text = std::str::from_utf8(value)
                .map_err(|_| "the TLS server name is not text".to_string())?;
            name = Some(text.to_string());
        }
    }
    Ok(name)
}

/// The server name must be the CONNECT host; a tunnel to an address may
/// carry no name, or that same address.
fn check_sni(host: &str, sni: Option<&str>) -> Result<(), String> {
    let mismatch = |s: &str| format!("TLS server name \"{s}\" is not the CONNECT host \"{host}\"");
    if let Ok(ip) = host.parse::<IpAddr>() {
        return match sni {
            None => Ok(()),
            Some(s) => {
                let bare = s.trim_start_matches('[').trim_end_matches(']');
                match bare.parse::<IpAddr>() {
                    Ok(named) if rules::canonical(named) == rules::canonical(ip) => Ok(()),
                    _ => Err(mismatch(s)),
                }
            }
        };
    }
    match sni {
        None => Err(format!(
            "the TLS ClientHello names no server (SNI), but the CONNECT host is \"{host}\""
        )),
        Some(s) => {
            let lower = s.to_ascii_lowercase();
            if lower.strip_suffix('.').unwrap_or(&lower) == host {
                Ok(())
            } else {
                Err(mismatch(s))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc::{self, Receiver};
    use std::sync::{Arc, Mutex};

    /// A resolver that answers every name with one fixed address.
    struct FixedResolver(IpAddr);

    impl Resolve for FixedResolver {
        fn resolve(&self, _host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
            Ok(vec![SocketAddr::new(self.0, port)])
        }
    }

    fn proxy(allow: &[&str]) -> Proxy {
        Proxy::new(AllowList::parse(allow).unwrap())
    }

    /// Runs `proxy` on a loopback port; every connection's Attempt arrives
    /// on the receiver.
    fn start(proxy: Proxy) -> (SocketAddr, Receiver<Attempt>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let proxy = Arc::new(proxy);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (proxy, tx) = (proxy.clone(), tx.clone());
                std::thread::spawn(move || {
                    proxy.serve(client, &|a| {
                        let _ = tx.send(a);
                    })
                });
            }
        });
        (addr, rx)
    }

    /// An HTTP server that answers every request with `body` and records
    /// each request head it got.
    fn http_server(body: &'static str) -> (u16, Arc<Mutex<Vec<String>>>, TcpListener) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (serving, record) = (listener.try_clone().unwrap(), seen.clone());
        std::thread::spawn(move || {
            for conn in serving.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                record
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        (port, seen, listener)
    }

    /// A server that echoes back whatever it receives, counting connections.
    fn echo_server() -> (u16, TcpListener) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving = listener.try_clone().unwrap();
        std::thread::spawn(move || {
            for conn in serving.incoming() {
                let Ok(conn) = conn else { return };
                std::thread::spawn(move || {
                    let _ = io::copy(&mut &conn, &mut &conn);
                    let _ = conn.shutdown(Shutdown::Write);
                });
            }
        });
        (port, listener)
    }

    /// Whether anyone connected to `listener` (the kernel completes a
    /// connection before it is accepted, so a queued one shows here).
    fn was_contacted(listener: &TcpListener) -> bool {
        listener.set_nonblocking(true).unwrap();
        listener.accept().is_ok()
    }

    /// Reads to the end, then closes: the proxy ends a connection only
    /// when both sides have.
    fn read_all(stream: &mut TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        let _ = stream.shutdown(Shutdown::Both);
        out
    }

    /// A server_name extension naming `name`.
    fn sni_ext(name: &str) -> Vec<u8> {
        let name = name.as_bytes();
        let list_len = 3 + name.len();
        let mut ext = vec![0, 0]; // server_name
        ext.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(list_len as u16).to_be_bytes());
        ext.push(0); // host_name
        ext.extend_from_slice(&(name.len() as u16).to_be_bytes());
        ext.extend_from_slice(name);
        ext
    }

    /// supported_versions: TLS 1.3, TLS 1.2.
    const VERSIONS_EXT: [u8; 9] = [0, 43, 0, 5, 4, 3, 4, 3, 3];

    /// A minimal TLS 1.3-style ClientHello naming `sni`, cut into `records`
    /// handshake records.
    fn client_hello(sni: Option<&str>, records: usize) -> Vec<u8> {
        let mut ext = sni.map(sni_ext).unwrap_or_default();
        ext.extend_from_slice(&VERSIONS_EXT);
        hello_with(&ext, records)
    }

    /// A ClientHello carrying `ext` as its extension block.
    fn hello_with(ext: &[u8], records: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]); // random
        body.push(0); // session id
        body.extend_from_slice(&[0, 4, 0x13, 0x01, 0xc0, 0x2f]); // cipher suites
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(ext);
        let mut message = vec![1];
        message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend_from_slice(&body);
        let mut out = Vec::new();
        let step = message.len().div_ceil(records);
        for part in message.chunks(step) {
            out.extend_from_slice(&[0x16, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    fn connect_through(proxy: SocketAddr, target: &str) -> (TcpStream, String) {
        let mut s = TcpStream::connect(proxy).unwrap();
        write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        (s, String::from_utf8_lossy(&head).into_owned())
    }

    #[test]
    fn allowed_get_reaches_server_in_origin_form() {
        let (port, seen, _l) = http_server("hello");
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let mut c = TcpStream::connect(addr).unwrap();
        write!(
            c,
            "GET http://host.awf.internal:{port}/a/b?q=1 HTTP/1.1\r\nHost: host.awf.internal:{port}\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nKeep-Alive: 5\r\nConnection: keep-alive\r\nUser-Agent: t\r\n\r\n"
        )
        .unwrap();
        let reply = String::from_utf8(read_all(&mut c)).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.ends_with("\r\n\r\nhello"), "{reply}");

        let a = attempts.recv().unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let head = &seen[0];
        assert!(head.starts_with("GET /a/b?q=1 HTTP/1.1\r\n"), "{head}");
        assert!(
            head.contains(&format!("Host: host.awf.internal:{port}\r\n")),
            "{head}"
        );
        assert!(head.contains("User-Agent: t\r\n"), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
        for gone in [
            "Proxy-Connection",
            "Proxy-Authorization",
            "Keep-Alive",
            "keep-alive",
        ] {
            assert!(!head.contains(gone), "{head}");
        }

        assert_eq!(a.decision, Decision::Allowed);
        assert_eq!(a.method, "HTTP");
        assert_eq!(a.host, "host.awf.internal");
        assert_eq!(a.port, port);
        assert_eq!(
            a.rule.as_deref(),
            Some(format!("host.awf.internal:{port}").as_str())
        );
        assert_eq!(a.address, Some(SocketAddr::from(([127, 0, 0, 1], port))));
        assert_eq!(a.reason, None);
        assert_eq!(a.bytes_up, head.len() as u64);
        assert_eq!(a.bytes_down, reply.len() as u64);
    }

    #[test]
    fn host_header_is_set_from_the_url() {
        let (port, seen, _l) = http_server("x");
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let mut c = TcpStream::connect(addr).unwrap();
        write!(
            c,
            "GET http://HOST.awf.internal:{port} HTTP/1.0\r\nHost: elsewhere.example\r\n\r\n"
        )
        .unwrap();
        read_all(&mut c);
        attempts.recv().unwrap();
        let head = seen.lock().unwrap()[0].clone();
        assert!(head.starts_with("GET / HTTP/1.0\r\n"), "{head}");
        assert!(
            head.contains(&format!("Host: host.awf.internal:{port}\r\n")),
            "{head}"
        );
        assert!(!head.contains("elsewhere"), "{head}");
    }

    #[test]
    fn host_not_allowed_is_refused_and_never_contacted() {
        let (allowed, _, _l1) = http_server("a");
        let other_listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = other_listener.local_addr().unwrap().port();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{allowed}")]));
        let mut c = TcpStream::connect(addr).unwrap();
        write!(
            c,
            "GET http://host.awf.internal:{other}/ HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .unwrap();
        let reply = String::from_utf8(read_all(&mut c)).unwrap();
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        let body = reply.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(
            body,
            format!(
                "host.awf.internal:{other} is not in mcp_proxy.sandbox.network.allow; add it there to allow it.\n"
            )
        );
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Denied);
        assert_eq!(a.reason.as_deref(), Some("not in the allow list"));
        assert_eq!(a.rule, None);
        assert_eq!((a.bytes_up, a.bytes_down), (0, 0));
        assert!(!was_contacted(&other_listener));
    }

    #[test]
    fn connect_with_matching_sni_is_relayed_byte_exact() {
        let (port, _listener) = echo_server();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let (mut c, head) = connect_through(addr, &format!("host.awf.internal:{port}"));
        assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
        // Split over three records and two writes, as a ClientHello may be.
        let hello = client_hello(Some("Host.AWF.internal"), 3);
        let tail: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sent = [hello.clone(), tail.clone()].concat();
        let writer = c.try_clone().unwrap();
        let writing = std::thread::spawn(move || {
            let mut w = &writer;
            let cut = hello.len() / 2;
            w.write_all(&hello[..cut]).unwrap();
            w.flush().unwrap();
            w.write_all(&hello[cut..]).unwrap();
            w.write_all(&tail).unwrap();
            writer.shutdown(Shutdown::Write).unwrap();
        });
        let got = read_all(&mut c);
        writing.join().unwrap();
        assert!(
            got == sent,
            "echo differs: {} vs {} bytes",
            got.len(),
            sent.len()
        );

        let a = attempts.recv().unwrap();
        assert_eq!(a.method, "CONNECT");
        assert_eq!(a.decision, Decision::Allowed);
        assert_eq!(a.reason, None);
        assert_eq!(
            a.rule.as_deref(),
            Some(format!("host.awf.internal:{port}").as_str())
        );
        assert_eq!(a.bytes_up, sent.len() as u64);
        assert_eq!(a.bytes_down, sent.len() as u64);
    }

    #[test]
    fn connect_with_wrong_sni_is_closed_before_upstream() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let (mut c, head) = connect_through(addr, &format!("host.awf.internal:{port}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        c.write_all(&client_hello(Some("evil.example"), 1)).unwrap();
        assert!(read_all(&mut c).is_empty());
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Denied);
        assert_eq!(
            a.reason.as_deref(),
            Some("TLS server name \"evil.example\" is not the CONNECT host \"host.awf.internal\"")
        );
        assert_eq!(a.bytes_up, 0);
        assert!(!was_contacted(&listener));
    }

    #[test]
    fn name_resolving_to_loopback_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut p = proxy(&[&format!("internal.example:{port}")]);
        p.resolver = Box::new(FixedResolver(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let (addr, attempts) = start(p);
        let mut c = TcpStream::connect(addr).unwrap();
        write!(c, "GET http://internal.example:{port}/ HTTP/1.1\r\n\r\n").unwrap();
        let reply = String::from_utf8(read_all(&mut c)).unwrap();
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        assert!(
            reply.contains("resolves to 127.0.0.1, a private address"),
            "{reply}"
        );
        assert!(reply.contains("10.0.0.5:5000"), "{reply}");
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Denied);
        assert_eq!(
            a.rule.as_deref(),
            Some(format!("internal.example:{port}").as_str())
        );
        assert_eq!(a.address, Some(SocketAddr::from(([127, 0, 0, 1], port))));
        assert!(a.reason.unwrap().contains("private address"));
        assert!(!was_contacted(&listener));
    }

    #[test]
    fn plain_bytes_on_connect_443_are_refused() {
        // Nothing needs to listen on 443: the check comes before connecting,
        // and a connection attempt would show as a different reason.
        let (addr, attempts) = start(proxy(&["127.0.0.1:443"]));
        let (mut c, head) = connect_through(addr, "127.0.0.1:443");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        c.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        assert!(read_all(&mut c).is_empty());
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Denied);
        assert_eq!(a.rule.as_deref(), Some("127.0.0.1:443"));
        assert_eq!(a.address, None);
        assert!(a.reason.unwrap().contains("port 443 carries TLS only"));
    }

    #[test]
    fn plain_bytes_on_other_connect_ports_pass() {
        let (port, _listener) = echo_server();
        let (addr, attempts) = start(proxy(&[&format!("127.0.0.1:{port}")]));
        let (mut c, _) = connect_through(addr, &format!("127.0.0.1:{port}"));
        c.write_all(b"SSH-2.0-x\r\n").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_all(&mut c), b"SSH-2.0-x\r\n");
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Allowed);
        assert_eq!((a.bytes_up, a.bytes_down), (11, 11));
    }

    #[test]
    fn bad_requests_get_400() {
        let (addr, attempts) = start(proxy(&["crates.io"]));
        let cases: &[(&[u8], &str, &str)] = &[
            (
                b"GET / HTTP/1.1\r\nHost: crates.io\r\n\r\n",
                "400 Bad Request",
                "send the full URL",
            ),
            (
                b"GET https://crates.io/ HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "CONNECT",
            ),
            (
                b"GET ftp://crates.io/ HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "ftp://",
            ),
            (
                b"GET http://u@crates.io/ HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "user name",
            ),
            (
                b"CONNECT crates.io HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "needs a port",
            ),
            (
                b"\x04\x01\x00\x50",
                "400 Bad Request",
                "SOCKS4 is not served",
            ),
            (
                b"\x16\x03\x01\x00\x05hello",
                "400 Bad Request",
                "http:// proxy URL",
            ),
        ];
        for (bytes, status, words) in cases {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(bytes).unwrap();
            let reply = String::from_utf8_lossy(&read_all(&mut c)).into_owned();
            assert!(
                reply.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{reply}"
            );
            assert!(reply.contains(words), "{reply}");
            let a = attempts.recv().unwrap();
            assert_eq!(a.decision, Decision::Denied);
            assert!(a.reason.is_some());
        }
    }

    #[test]
    fn oversized_head_gets_431() {
        let (addr, attempts) = start(proxy(&["crates.io"]));
        let mut c = TcpStream::connect(addr).unwrap();
        let mut req = b"GET http://crates.io/ HTTP/1.1\r\nX: ".to_vec();
        req.resize(MAX_HEAD + 10, b'a');
        let _ = c.write_all(&req);
        let reply = String::from_utf8_lossy(&read_all(&mut c)).into_owned();
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
        let a = attempts.recv().unwrap();
        assert_eq!(
            a.reason.as_deref(),
            Some("the request head is larger than 64 KiB")
        );
    }

    /// Through the proxy to a server that reads everything it is sent until the proxy
    /// half-closes, then answers `ok`: the client writes each of `parts(port)` on its own
    /// (a pause between them, so later ones come after the head was read), then
    /// half-closes. Returns what the server got, the reply, and the attempt.
    fn through(parts: impl Fn(u16) -> Vec<String>) -> (String, String, Attempt) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let _ = conn.read_to_end(&mut got);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            String::from_utf8(got).unwrap()
        });
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        for part in parts(port) {
            c.write_all(part.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        c.shutdown(Shutdown::Write).unwrap();
        let reply = String::from_utf8_lossy(&read_all(&mut c)).into_owned();
        let upstream = server.join().unwrap();
        (upstream, reply, attempts.recv().unwrap())
    }

    /// The writes a client makes, given the upstream's port.
    type Parts<'a> = &'a dyn Fn(u16) -> Vec<String>;

    const ELSEWHERE: &str =
        "GET http://elsewhere.example/ HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n";

    #[test]
    fn a_request_pipelined_behind_an_allowed_one_never_reaches_the_upstream() {
        let get =
            |port| format!("GET http://host.awf.internal:{port}/a HTTP/1.1\r\nHost: x\r\n\r\n");
        // In the head's packet, and after it.
        let cases: [&dyn Fn(u16) -> Vec<String>; 2] =
            [&|port| vec![format!("{}{ELSEWHERE}", get(port))], &|port| {
                vec![get(port), ELSEWHERE.to_string()]
            }];
        for parts in cases {
            let (upstream, reply, a) = through(parts);
            assert!(upstream.starts_with("GET /a HTTP/1.1\r\n"), "{upstream}");
            assert!(
                upstream.ends_with("Connection: close\r\n\r\n"),
                "{upstream}"
            );
            assert!(!upstream.contains("elsewhere"), "{upstream}");
            assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
            assert_eq!(a.decision, Decision::Allowed);
            assert_eq!(a.bytes_up, upstream.len() as u64);
            assert_eq!(a.bytes_dropped, ELSEWHERE.len() as u64);
            assert_eq!(a.reason, None);
            assert_eq!(a.record()["bytes_dropped"], ELSEWHERE.len() as u64);
        }
    }

    #[test]
    fn a_request_body_goes_upstream_whole_and_nothing_after_it() {
        let post = |port: u16, framing: &str| {
            format!("POST http://host.awf.internal:{port}/up HTTP/1.1\r\nHost: x\r\n{framing}\r\n")
        };
        let chunked = "4;ext=1\r\nbody\r\n6\r\n more \r\n0\r\nTrailer: t\r\n\r\n";
        let cases: [(Parts, &str); 4] = [
            (
                &|port| {
                    vec![
                        format!("{}bo", post(port, "Content-Length: 5\r\n")),
                        format!("dy!{ELSEWHERE}"),
                    ]
                },
                "body!",
            ),
            (
                &|port| {
                    vec![
                        post(port, "Content-Length: 7\r\n"),
                        "body!".into(),
                        format!("!!{ELSEWHERE}"),
                    ]
                },
                "body!!!",
            ),
            (
                &|port| {
                    vec![
                        format!(
                            "{}4;ext=1\r\nbo",
                            post(port, "Transfer-Encoding: chunked\r\n")
                        ),
                        "dy\r\n6\r\n more \r\n0\r\nTrailer: t".into(),
                        format!("\r\n\r\n{ELSEWHERE}"),
                    ]
                },
                chunked,
            ),
            (
                &|port| {
                    vec![
                        post(port, "Transfer-Encoding: chunked\r\n"),
                        format!("{chunked}{ELSEWHERE}"),
                    ]
                },
                chunked,
            ),
        ];
        for (parts, body) in cases {
            let (upstream, reply, a) = through(parts);
            let (head, sent) = upstream.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("POST /up HTTP/1.1\r\n"), "{upstream}");
            assert_eq!(sent, body, "{upstream}");
            assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
            assert_eq!(a.bytes_dropped, ELSEWHERE.len() as u64, "{upstream}");
            assert_eq!(a.reason, None);
        }
    }

    #[test]
    fn a_malformed_chunked_body_ends_the_connection_where_it_goes_wrong() {
        let (upstream, _reply, a) = through(|port| {
            vec![
                format!(
                    "POST http://host.awf.internal:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
                ),
                format!("5\r\nabcdefgh\r\n0\r\n\r\n{ELSEWHERE}"),
            ]
        });
        assert!(upstream.ends_with("\r\n\r\n3\r\nabc\r\n"), "{upstream}");
        assert!(!upstream.contains("elsewhere"), "{upstream}");
        let why = a.reason.unwrap();
        assert!(why.contains("chunk data longer than its size"), "{why}");
    }

    #[test]
    fn a_head_framed_two_ways_gets_400_and_the_upstream_is_never_contacted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        for (framing, words) in [
            (
                "Content-Length: 3\r\nTransfer-Encoding: chunked",
                "both Content-Length and Transfer-Encoding",
            ),
            (
                "Transfer-Encoding: chunked, gzip",
                "does not end in chunked",
            ),
            (
                "Content-Length: 3\r\nContent-Length: 4",
                "differing Content-Length",
            ),
        ] {
            let mut c = TcpStream::connect(addr).unwrap();
            write!(
                c,
                "POST http://host.awf.internal:{port}/ HTTP/1.1\r\n{framing}\r\n\r\nabc"
            )
            .unwrap();
            let reply = String::from_utf8_lossy(&read_all(&mut c)).into_owned();
            assert!(reply.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{reply}");
            assert!(reply.contains(words), "{reply}");
            let a = attempts.recv().unwrap();
            assert_eq!(a.decision, Decision::Denied);
            assert!(a.reason.unwrap().contains(words));
        }
        assert!(!was_contacted(&listener));
    }

    /// A SOCKS5 CONNECT to `host:port` through `proxy`: the stream and the reply.
    fn socks_through(proxy: SocketAddr, host: &str, port: u16) -> (TcpStream, [u8; 10]) {
        let mut s = TcpStream::connect(proxy).unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        let mut method = [0u8; 2];
        s.read_exact(&mut method).unwrap();
        assert_eq!(method, [5, 0]);
        let mut request = vec![5, 1, 0, 3, host.len() as u8];
        request.extend_from_slice(host.as_bytes());
        request.extend_from_slice(&port.to_be_bytes());
        s.write_all(&request).unwrap();
        let mut reply = [0u8; 10];
        s.read_exact(&mut reply).unwrap();
        (s, reply)
    }

    #[test]
    fn socks5_connect_is_allowed_checked_and_relayed_as_a_tunnel() {
        let (port, _listener) = echo_server();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let (mut c, reply) = socks_through(addr, "Host.AWF.internal", port);
        assert_eq!(reply, socks::SUCCEEDED);
        c.write_all(b"ping over socks").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_all(&mut c), b"ping over socks");
        let a = attempts.recv().unwrap();
        assert_eq!(a.method, "SOCKS5");
        assert_eq!(a.decision, Decision::Allowed);
        assert_eq!((a.host.as_str(), a.port), ("host.awf.internal", port));
        assert_eq!(
            a.rule.as_deref(),
            Some(format!("host.awf.internal:{port}").as_str())
        );
        assert_eq!((a.bytes_up, a.bytes_down), (15, 15));
        assert_eq!(a.record()["method"], "SOCKS5");
    }

    #[test]
    fn socks5_to_a_host_not_listed_is_not_allowed_and_never_contacted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = listener.local_addr().unwrap().port();
        let (addr, attempts) = start(proxy(&["host.awf.internal:1"]));
        let (mut c, reply) = socks_through(addr, "host.awf.internal", other);
        assert_eq!(reply[..2], [5, socks::reply::NOT_ALLOWED]);
        assert!(read_all(&mut c).is_empty());
        let a = attempts.recv().unwrap();
        assert_eq!((a.method, a.decision), ("SOCKS5", Decision::Denied));
        assert_eq!(a.reason.as_deref(), Some("not in the allow list"));
        assert!(!was_contacted(&listener));
        // A name that resolves to this machine is refused as over HTTP.
        let mut p = proxy(&[&format!("internal.example:{other}")]);
        p.resolver = Box::new(FixedResolver(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let (addr, attempts) = start(p);
        let (_c, reply) = socks_through(addr, "internal.example", other);
        assert_eq!(reply[..2], [5, socks::reply::NOT_ALLOWED]);
        let why = attempts.recv().unwrap().reason.unwrap();
        assert!(why.contains("private address"), "{why}");
        assert!(!was_contacted(&listener));
    }

    #[test]
    fn unreachable_upstream_gets_502() {
        // Bind then drop, so the port is very likely closed.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (addr, attempts) = start(proxy(&[&format!("host.awf.internal:{port}")]));
        let mut c = TcpStream::connect(addr).unwrap();
        write!(c, "GET http://host.awf.internal:{port}/ HTTP/1.1\r\n\r\n").unwrap();
        let reply = String::from_utf8_lossy(&read_all(&mut c)).into_owned();
        assert!(reply.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{reply}");
        assert!(reply.contains("cannot connect to 127.0.0.1"), "{reply}");
        let a = attempts.recv().unwrap();
        assert_eq!(a.decision, Decision::Allowed);
        assert!(a.reason.unwrap().starts_with("cannot connect"));
    }

    #[test]
    fn tunnel_first_bytes_table() {
        let hello = |sni| client_hello(sni, 1);
        let cases: Vec<(&str, u16, Vec<u8>, &str)> = vec![
            ("a.example", 443, hello(Some("a.example")), ""),
            ("a.example", 443, hello(Some("A.Example.")), ""),
            ("a.example", 8443, hello(Some("a.example")), ""),
            ("a.example", 443, client_hello(Some("a.example"), 4), ""),
            (
                "a.example",
                443,
                hello(Some("evil.example")),
                "TLS server name \"evil.example\" is not the CONNECT host \"a.example\"",
            ),
            (
                "a.example",
                8443,
                hello(Some("evil.example")),
                "is not the CONNECT host",
            ),
            ("a.example", 443, hello(None), "names no server"),
            (
                "a.example",
                443,
                b"GET / HTTP/1.1\r\n\r\n".to_vec(),
                "port 443 carries TLS only",
            ),
            ("a.example", 22, b"SSH-2.0-x\r\n".to_vec(), ""),
            ("10.0.0.5", 443, hello(None), ""),
            ("10.0.0.5", 443, hello(Some("10.0.0.5")), ""),
            (
                "10.0.0.5",
                443,
                hello(Some("a.example")),
                "is not the CONNECT host",
            ),
            ("2001:db8::1", 443, hello(Some("[2001:db8:0::1]")), ""),
            (
                "a.example",
                443,
                vec![0x16, 3, 1, 0, 4, 2, 0, 0, 0],
                "not a ClientHello",
            ),
            (
                "a.example",
                443,
                vec![0x16, 3, 1, 0, 0],
                "not a valid record",
            ),
        ];
        for (host, port, bytes, want) in cases {
            let got = inspect(host, port, &bytes);
            match got {
                Verdict::Pass if want.is_empty() => {}
                Verdict::Refuse(why) if !want.is_empty() => {
                    assert!(why.contains(want), "{host}:{port}: {why}")
                }
                other => panic!("{host}:{port}: {other:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn incomplete_client_hello_needs_more() {
        let full = client_hello(Some("a.example"), 2);
        for cut in [1, 4, 5, 20, full.len() - 1] {
            assert_eq!(
                inspect("a.example", 443, &full[..cut]),
                Verdict::NeedMore,
                "{cut}"
            );
        }
        assert_eq!(inspect("a.example", 443, &[]), Verdict::NeedMore);
    }

    #[test]
    fn client_hello_extensions_are_read_strictly() {
        let refused =
            |ext: Vec<u8>, words: &str| match inspect("a.example", 443, &hello_with(&ext, 1)) {
                Verdict::Refuse(why) => assert!(why.contains(words), "{why}"),
                other => panic!("{other:?}"),
            };
        // An unknown extension before the name neither hides it nor fails.
        let mut ext = vec![0xfe, 0x0d, 0, 3, 1, 2, 3];
        ext.extend(sni_ext("a.example"));
        assert_eq!(
            inspect("a.example", 443, &hello_with(&ext, 1)),
            Verdict::Pass
        );
        // Extension framing that runs past the block.
        let mut ext = sni_ext("a.example");
        ext.extend_from_slice(&[0, 43, 0, 9, 4]);
        refused(ext, "does not parse");
        // Two server name extensions, or two names in one.
        let mut ext = sni_ext("a.example");
        ext.extend(sni_ext("evil.example"));
        refused(ext, "two server name extensions");
        let mut ext = vec![0, 0, 0, 26, 0, 24];
        for name in ["a.example", "b.example"] {
            ext.extend_from_slice(&[0, 0, 9]);
            ext.extend_from_slice(name.as_bytes());
        }
        refused(ext, "more than one server");
        // A name that is not text.
        refused(vec![0, 0, 0, 6, 0, 4, 0, 0, 1, 0xff], "not text");
    }
}
