//! The model relay: one local HTTP server per run (127.0.0.1, started with the first CLI
//! agent step) between each agent CLI and its model endpoint. A step gets a `Lease`: a
//! route `/s/<id>/` that its CLI's base URL points at, and, when the workflow names a key
//! (`api_key_env`), a placeholder key that only this route accepts. The relay forwards each
//! request to the real endpoint (the step's `base_url`, else the provider's), over HTTPS
//! where the endpoint is, with the real key in the header the provider's API expects; the
//! CLI never holds the key. The response streams back as it arrives (event by event), while
//! [`usage`] reads the model, the tokens and the finish reasons out of it: each request is
//! a `chat <model>` span under the step's span and a `model.request` + `model.response`
//! pair in the step's audit file, and counts toward the step's budget. The status of an
//! error answer and the wait its `Retry-After` asks are kept in the step's figures
//! ([`ModelStats`]): what an agent's `retry` classes a failure by.
//!
//! A request is judged by its head before any of its body is read: a route no step has
//! (404), a key that is not the step's placeholder (401) or a body over 32 MiB
//! (413) is answered at once and its body read and dropped, never held. A body let
//! through streams upstream as the upstream reads it; the model it names is seen in
//! passing. One thread reads every head (`accept`); only a request let through gets one.
//!
//! Where each part lives: `lease` (a step's route, placeholder key and books), `admission`
//! (a request judged by its head; the refusals in the provider's shape), `forwarding` (sent
//! upstream, streamed back, the turn recorded), `accept` and `workers` (the threads),
//! `body` (the request body streamed upstream), `routes` (the routes of the leases alive)
//! and [`usage`] (the model, tokens and finish reasons read from a response).

mod accept;
mod admission;
mod body;
mod forwarding;
mod lease;
mod routes;
pub mod usage;
mod workers;

use crate::telemetry::audit::{AuditLog, now_rfc3339};
use crate::telemetry::otel::{OtelExporter, parse_traceparent};
use admission::*;
use body::UpstreamBody;
use forwarding::*;
use lease::*;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use usage::{UsageReader, Wire};

/// The largest request head the relay reads.
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body the relay passes on: the most the providers' model endpoints
/// take (Anthropic's Messages API refuses a request over 32 MB; Gemini's and OpenAI's
/// inline limits are lower), so a bigger body could only be refused upstream. The body
/// streams through; this bounds what one request may send, not what the relay holds.
const MAX_BODY: u64 = 32 * 1024 * 1024;
/// How long a refused request's remaining bytes are read and dropped before the close.
const LINGER: Duration = Duration::from_secs(2);

/// The relay's bounds on its clients.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// The time a connection has to send its whole request head.
    head_deadline: Duration,
    /// Connections waiting for their head (or answered, their rest being dropped) at
    /// once: under the 1,024 descriptors a process commonly may open.
    open: usize,
    /// Requests in flight on one step's route: far more than an agent CLI runs at once
    /// (its subagents included); each is a thread.
    per_route: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_deadline: Duration::from_secs(10),
            open: 512,
            per_route: 32,
        }
    }
}

/// How a provider's API takes its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `x-api-key: KEY` (Anthropic).
    XApiKey,
    /// `Authorization: Bearer KEY` (OpenAI and compatible).
    Bearer,
    /// `x-goog-api-key: KEY` (Gemini; a `key=` query parameter is taken too).
    Goog,
}

/// What a step's lease is made of.
pub struct LeaseSpec {
    /// The real endpoint's base URL (no trailing slash): the CLI's paths are appended.
    pub upstream: String,
    /// The real key and how to send it; None: the CLI's own credentials pass through.
    pub key: Option<(KeyHeader, String)>,
    /// `gen_ai.provider.name` of the chat spans.
    pub provider: &'static str,
    /// The step span's context: chat spans are its children.
    pub traceparent: Option<String>,
    /// The step's audit file, when it has one.
    pub audit: Option<std::path::PathBuf>,
    pub budget: Budget,
    /// Record the prompt and the answer on the chat spans (`telemetry: {model_content:
    /// true}`), masked and cut to [`CONTENT_BYTES`]; off by default.
    pub model_content: bool,
}

/// The header on every answer the relay gives itself (a request refused, a model it could
/// not reach), never on one it passes back: a client tells awf's words from the model's.
pub const OWN_ANSWER_HEADER: &str = "x-awf-relay";

/// The most of a prompt or an answer a chat span holds when content is recorded.
pub const CONTENT_BYTES: usize = 64 * 1024;

/// A step's limits on the model (`budget:` of the agent state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub requests: Option<u64>,
    pub tokens: Option<u64>,
}

impl Budget {
    /// What is left once `used` is spent (a limit it has not: none).
    pub fn less(self, used: &ModelStats) -> Budget {
        Budget {
            requests: self.requests.map(|n| n.saturating_sub(used.requests)),
            tokens: self.tokens.map(|n| n.saturating_sub(used.tokens())),
        }
    }

    /// The limit with nothing left, if one has: "requests" or "tokens".
    pub fn spent(self) -> Option<&'static str> {
        if self.requests == Some(0) {
            Some("requests")
        } else if self.tokens == Some(0) {
            Some("tokens")
        } else {
            None
        }
    }
}

/// What a step's model requests came to.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ModelStats {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// Time from each request to the end of its answer, summed.
    pub model_ms: u64,
    /// The limit the step ran into, when it did: "requests" or "tokens".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_exhausted: Option<&'static str>,
    /// The HTTP status of the latest model answer that was an error (400 and above), the
    /// relay's own 502 when it could not reach the endpoint included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_status: Option<u16>,
    /// The wait that answer asked for (`retry-after-ms`, else `retry-after` in seconds),
    /// in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Whether the latest model answer was that error (a later success clears it): what
    /// an agent's `retry` classes its failure by. Not reported.
    #[serde(skip)]
    pub last_answer_failed: bool,
}

impl ModelStats {
    /// The tokens the budget counts: input and output.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds the figures of a later lease of the same state (another attempt): counts
    /// summed, the latest error and limit those of `later` when it has them.
    pub fn add(&mut self, later: &ModelStats) {
        self.requests += later.requests;
        self.input_tokens += later.input_tokens;
        self.output_tokens += later.output_tokens;
        self.cache_read_tokens += later.cache_read_tokens;
        self.model_ms += later.model_ms;
        if later.budget_exhausted.is_some() {
            self.budget_exhausted = later.budget_exhausted;
        }
        if later.last_error_status.is_some() {
            self.last_error_status = later.last_error_status;
            self.retry_after_ms = later.retry_after_ms;
        }
        if later.requests > 0 || later.last_error_status.is_some() {
            self.last_answer_failed = later.last_answer_failed;
        }
    }
}

/// The run's relay.
pub struct Relay {
    addr: SocketAddr,
    limits: Limits,
    leases: Arc<Mutex<HashMap<String, Arc<Lease>>>>,
}

/// A step's route through the relay; ends when dropped.
pub struct LeaseHandle {
    id: String,
    lease: Arc<Lease>,
    leases: Arc<Mutex<HashMap<String, Arc<Lease>>>>,
    base_url: String,
}

impl Relay {
    /// Listens on a free port of 127.0.0.1; `exporter` takes the chat spans.
    pub fn start(exporter: Option<Arc<OtelExporter>>) -> io::Result<Relay> {
        Relay::start_with(exporter, Limits::default())
    }

    fn start_with(exporter: Option<Arc<OtelExporter>>, limits: Limits) -> io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let leases: Arc<Mutex<HashMap<String, Arc<Lease>>>> = Arc::default();
        let routes = leases.clone();
        let exporter = Arc::new(exporter);
        std::thread::Builder::new()
            .name("awf-relay".into())
            .spawn(move || accept::run(listener, routes, exporter, limits))?;
        Ok(Relay {
            addr,
            limits,
            leases,
        })
    }

    /// Opens a step's route.
    pub fn lease(&self, spec: LeaseSpec) -> io::Result<LeaseHandle> {
        let id = random_hex(16);
        let audit = match &spec.audit {
            Some(p) => Some(AuditLog::open(p)?),
            None => None,
        };
        let placeholder = spec
            .key
            .is_some()
            .then(|| format!("awf-relay-{}", random_hex(24)));
        let masker = spec
            .model_content
            .then(|| crate::telemetry::audit::Masker::from_env(CONTENT_BYTES));
        let lease = Arc::new(Lease {
            placeholder,
            masker,
            spec,
            audit,
            books: Mutex::default(),
            refused: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            per_route: self.limits.per_route,
        });
        self.leases
            .lock()
            .unwrap()
            .insert(id.clone(), lease.clone());
        Ok(LeaseHandle {
            base_url: format!("http://{}/s/{id}", self.addr),
            id,
            lease,
            leases: self.leases.clone(),
        })
    }
}

impl LeaseHandle {
    /// The base URL the step's CLI is given (the provider's own path goes after it).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The key the CLI is given in place of the real one, when a key is configured.
    pub fn placeholder(&self) -> Option<&str> {
        self.lease.placeholder.as_deref()
    }

    pub fn stats(&self) -> ModelStats {
        self.lease.books.lock().unwrap().stats.clone()
    }

    /// Waits (up to `bound`) until no request of the step is in flight, so that the
    /// record of the last answer is in the audit file before the step's audit head is read
    /// (a client has the whole answer a moment before the relay records it).
    pub fn settle(&self, bound: std::time::Duration) {
        let end = std::time::Instant::now() + bound;
        while self.lease.active.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        self.leases.lock().unwrap().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_with(budget: Budget) -> (Relay, LeaseHandle) {
        let relay = Relay::start(None).unwrap();
        let lease = relay
            .lease(LeaseSpec {
                upstream: "http://127.0.0.1:9".into(),
                key: None,
                provider: "anthropic",
                traceparent: None,
                audit: None,
                budget,
                model_content: false,
            })
            .unwrap();
        (relay, lease)
    }

    fn answered(lease: &Lease, claim: Claim, sent: bool, input: u64, output: u64) {
        let turn = Turn {
            wire: Some(Wire::AnthropicMessages),
            sent,
            claim: Some(claim),
            started: Instant::now(),
        };
        let used = usage::Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            ..Default::default()
        };
        finish(lease, None, &turn, Some(used), 200, None, None);
    }

    #[test]
    fn a_token_claim_holds_its_estimate_until_the_answer_tells_the_real_figure() {
        let (_relay, handle) = lease_with(Budget {
            requests: None,
            tokens: Some(1000),
        });
        let lease = &handle.lease;
        // 4 bytes a token: a 2,000-byte body holds 500, two of them the whole budget.
        let first = lease.claim(2000).unwrap();
        let second = lease.claim(2000).unwrap();
        assert_eq!(lease.claim(10).err(), Some("tokens"));
        // The answers say far fewer: the estimates go back, the real figures count.
        answered(lease, first, true, 30, 10);
        answered(lease, second, true, 50, 10);
        assert_eq!(
            handle.stats().input_tokens + handle.stats().output_tokens,
            100
        );
        assert!(lease.claim(10).is_ok());
    }

    #[test]
    fn a_request_the_upstream_never_got_whole_gives_its_claim_back() {
        let (_relay, handle) = lease_with(Budget {
            requests: Some(1),
            tokens: None,
        });
        let lease = &handle.lease;
        let c = lease.claim(100).unwrap();
        assert_eq!(lease.claim(100).err(), Some("requests"));
        answered(lease, c, false, 0, 0);
        let c = lease.claim(100).unwrap();
        answered(lease, c, true, 1, 1);
        assert_eq!(lease.claim(100).err(), Some("requests"));
        assert_eq!(handle.stats().requests, 1);
    }

    #[test]
    fn retry_after_is_read_in_milliseconds_or_seconds() {
        use ureq::http::{HeaderMap, HeaderValue};
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "2")])),
            Some(2000)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "0.5")])),
            Some(500)
        );
        assert_eq!(
            retry_after_ms(&headers(&[
                ("retry-after-ms", "1234"),
                ("retry-after", "2")
            ])),
            Some(1234)
        );
        assert_eq!(
            retry_after_ms(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(retry_after_ms(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(retry_after_ms(&headers(&[])), None);
    }

    #[test]
    fn errors_are_noted_and_a_success_clears_the_latest() {
        let (_relay, handle) = lease_with(Budget::default());
        handle.lease.answered(529, Some(1000));
        let s = handle.stats();
        assert_eq!(
            (s.last_error_status, s.retry_after_ms, s.last_answer_failed),
            (Some(529), Some(1000), true)
        );
        handle.lease.answered(200, None);
        let s = handle.stats();
        assert_eq!(
            (s.last_error_status, s.retry_after_ms, s.last_answer_failed),
            (Some(529), Some(1000), false)
        );
        handle.lease.answered(502, None);
        assert_eq!(handle.stats().retry_after_ms, None);
    }

    #[test]
    fn a_budget_less_what_was_used() {
        let used = ModelStats {
            requests: 2,
            input_tokens: 30,
            output_tokens: 10,
            ..ModelStats::default()
        };
        let b = Budget {
            requests: Some(3),
            tokens: Some(100),
        };
        assert_eq!(
            b.less(&used),
            Budget {
                requests: Some(1),
                tokens: Some(60)
            }
        );
        assert_eq!(b.less(&used).spent(), None);
        let b = Budget {
            requests: Some(2),
            tokens: None,
        };
        assert_eq!(b.less(&used).spent(), Some("requests"));
        assert_eq!(Budget::default().less(&used), Budget::default());
        assert_eq!(
            Budget {
                requests: None,
                tokens: Some(40)
            }
            .less(&used)
            .spent(),
            Some("tokens")
        );
    }

    #[test]
    fn a_head_is_bounded_by_one_deadline_however_often_its_bytes_come() {
        use std::io::{Read, Write};
        let limits = Limits {
            head_deadline: Duration::from_millis(400),
            ..Limits::default()
        };
        let relay = Relay::start_with(None, limits).unwrap();
        let mut conn = TcpStream::connect(relay.addr).unwrap();
        let mut reading = conn.try_clone().unwrap();
        // A byte every 50 ms: no single read ever waits long, the head never ends.
        let dribble = std::thread::spawn(move || {
            for b in b"GET /s/x/v1/models HTTP/1.1\r\nX-Pad: ".iter().cycle() {
                if conn.write_all(&[*b]).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        reading
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut got = Vec::new();
        let end = reading.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        assert!(end.is_ok(), "{end:?} {text}");
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("within 0.4 s"), "{text}");
        assert!(
            dribble.join().unwrap(),
            "the relay kept reading the slow head"
        );
    }
}
