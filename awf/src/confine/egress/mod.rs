//! Egress by host name. Under `network: {allow: [hosts]}` each Bash call runs in a network
//! namespace with loopback only; its one way out is this session's proxy, which allows a
//! connection by the host it names ([`rules`]), resolves the name itself and connects to
//! the address it checked ([`proxy`]).
//!
//! The bridge between the two: in the call's namespace, before the shell starts, the jail
//! creates a listener on 127.0.0.1:[`PROXY_PORT`] and sends it over a socketpair to awf
//! ([`Bridge`]), which accepts the call's connections on it from outside the namespace. So
//! the proxy is reachable from that call only, each connection is known to be the call's
//! (its audit record and span event name the call), and a tool that ignores the proxy
//! variables finds no route at all.

pub mod body;
pub mod proxy;
pub mod rules;
pub mod socks;

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The proxy's port on the call's own loopback (the namespace is the call's: no other
/// server is there unless the call starts one).
pub const PROXY_PORT: u16 = 3128;

/// The session's allow list and proxy, shared by every call.
pub struct Egress {
    proxy: proxy::Proxy,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Egress {
    /// The allow list as written; an error names the entry and the fix.
    pub fn new(hosts: &[String]) -> Result<Egress, String> {
        Ok(Egress {
            proxy: proxy::Proxy::new(rules::AllowList::parse(hosts)?),
        })
    }

    /// The hosts, for the tool description.
    pub fn describe(&self) -> String {
        let list: Vec<&str> = self
            .proxy
            .allow
            .rules
            .iter()
            .map(|r| r.text.as_str())
            .collect();
        if list.is_empty() {
            "no host (the allow list is empty)".into()
        } else {
            list.join(", ")
        }
    }
}

/// The variables that point Bash's tools at the proxy (both cases: tools differ).
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut vars = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        vars.push((name.to_string(), url.clone()));
        vars.push((name.to_lowercase(), url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        vars.push((name.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    vars
}

/// awf's end of one call's socketpair, until the call's listener arrives over it.
pub struct Bridge {
    sock: OwnedFd,
}

impl Bridge {
    /// A socketpair: awf's end, and the end the jail sends the listener over.
    pub fn pair() -> io::Result<(Bridge, OwnedFd)> {
        let (ours, theirs) = super::fd_pass::pair()?;
        Ok((Bridge { sock: ours }, theirs))
    }

    /// Once the command is spawned (its jail sent the listener before the shell started):
    /// serves the call's connections until [`Serving::stop`]. `report` gets each attempt.
    pub fn serve(self, egress: Arc<Egress>, report: Reporter) -> io::Result<Serving> {
        let fd = super::fd_pass::recv_fd(self.sock.as_raw_fd(), "listener for the egress proxy")?;
        // SAFETY: a listening TCP socket just received, owned from here on.
        let listener = Arc::new(unsafe { TcpListener::from_raw_fd(fd) });
        let open = Arc::new((Mutex::new(0usize), Condvar::new()));
        let thread = {
            let (listener, open) = (listener.clone(), open.clone());
            std::thread::Builder::new()
                .name("awf-egress".into())
                .spawn(move || accept_loop(&listener, &egress, &report, &open))?
        };
        Ok(Serving {
            listener,
            thread,
            open,
        })
    }
}

/// What the proxy tells of each connection attempt.
pub type Reporter = Arc<dyn Fn(proxy::Attempt) + Send + Sync>;

fn accept_loop(
    listener: &TcpListener,
    egress: &Arc<Egress>,
    report: &Reporter,
    open: &Arc<(Mutex<usize>, Condvar)>,
) {
    loop {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Shut down by `stop` (EINVAL), or the namespace is gone.
            Err(_) => return,
        };
        *open.0.lock().unwrap() += 1;
        let (egress, report, done) = (egress.clone(), report.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("awf-egress-conn".into())
            .spawn(move || {
                egress.proxy.serve(client, &|a| report(a));
                let mut n = done.0.lock().unwrap();
                *n -= 1;
                done.1.notify_all();
            });
        if spawned.is_err() {
            // No thread to be had: the connection is dropped (the client sees it close).
            let mut n = open.0.lock().unwrap();
            *n -= 1;
        }
    }
}

/// One call's proxy at work.
pub struct Serving {
    listener: Arc<TcpListener>,
    thread: std::thread::JoinHandle<()>,
    open: Arc<(Mutex<usize>, Condvar)>,
}

impl Serving {
    /// After the call's processes are gone: no new connection is accepted, and the open
    /// ones (whose clients are dead, so they end) are waited for, at most `grace`, so
    /// their records come before the call's result.
    pub fn stop(self, grace: Duration) {
        // SAFETY: shutdown of a socket this value owns; it wakes the blocked accept.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        let _ = self.thread.join();
        let (lock, cv) = &*self.open;
        let n = lock.lock().unwrap();
        let _ = cv.wait_timeout_while(n, grace, |n| *n > 0);
    }
}

impl proxy::Attempt {
    /// The `net.connect` audit record's fields (besides ts, type, call_id).
    pub fn record(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("host".into(), self.host.clone().into());
        m.insert("port".into(), self.port.into());
        m.insert(
            "address".into(),
            self.address.map(|a| a.ip().to_string()).into(),
        );
        m.insert("method".into(), self.method.into());
        m.insert("decision".into(), self.decision_name().into());
        if let Some(r) = &self.rule {
            m.insert("rule".into(), r.clone().into());
        }
        if let Some(r) = &self.reason {
            m.insert("reason".into(), r.clone().into());
        }
        m.insert("bytes_up".into(), self.bytes_up.into());
        m.insert("bytes_down".into(), self.bytes_down.into());
        if self.bytes_dropped > 0 {
            m.insert("bytes_dropped".into(), self.bytes_dropped.into());
        }
        m.insert(
            "duration_ms".into(),
            serde_json::json!((self.duration.as_secs_f64() * 1e6).round() / 1000.0),
        );
        m
    }

    pub fn decision_name(&self) -> &'static str {
        match self.decision {
            proxy::Decision::Allowed => "allowed",
            proxy::Decision::Denied => "denied",
        }
    }
}
