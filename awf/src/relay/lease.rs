//! Leases: a step's route and placeholder key, and the books each request is charged to
//! (its budget of requests and tokens, its slot among the route's requests in flight).

use super::*;

pub(super) struct Lease {
    pub(super) placeholder: Option<String>,
    pub(super) spec: LeaseSpec,
    /// Masks secrets in recorded content (awf's secret-looking variables, key shapes).
    pub(super) masker: Option<crate::telemetry::audit::Masker>,
    pub(super) audit: Option<AuditLog>,
    pub(super) books: Mutex<Books>,
    pub(super) refused: AtomicBool,
    /// Requests in flight on this route, each on its thread.
    pub(super) active: AtomicUsize,
    pub(super) per_route: usize,
}

pub(super) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut buf);
    }
    crate::text::hex(&buf)
}

/// A place among a route's requests in flight, given back when dropped.
pub(super) struct Slot(pub(super) Arc<Lease>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a step's model requests came to, and what the requests in flight hold of its
/// budget: one budget check and one claim under one lock, so however many requests
/// arrive at once, no more pass than the budget allows.
#[derive(Default)]
pub(super) struct Books {
    pub(super) stats: ModelStats,
    /// Model requests let through: those answered and those in flight.
    pub(super) admitted: u64,
    /// The token estimates of the requests in flight.
    pub(super) held_tokens: u64,
}

/// A model request's claim on the step's budget, taken when its head is let through: a
/// request, and an estimate of its tokens that its answer's own figure replaces.
pub(super) struct Claim {
    pub(super) tokens: u64,
}

/// A request's tokens until its answer tells: its input at 4 bytes a token (the usual
/// rule of thumb for text and code; the JSON around a conversation makes it an
/// overestimate, which errs toward refusing), at least one. Its output cannot be known
/// before it is written, so the last request let through may go over a token budget, by
/// its own answer only.
fn token_estimate(body_len: u64) -> u64 {
    body_len.div_ceil(4).max(1)
}

impl Lease {
    /// Notes the status of a model answer (and the wait it asks for): an error's is the
    /// step's latest error, a success clears `last_answer_failed`.
    pub(super) fn answered(&self, status: u16, retry_after_ms: Option<u64>) {
        let s = &mut self.books.lock().unwrap().stats;
        s.last_answer_failed = status >= 400;
        if status >= 400 {
            s.last_error_status = Some(status);
            s.retry_after_ms = retry_after_ms;
        }
    }

    /// Appends a record about this step's model traffic to its audit, when it has one.
    pub(super) fn note(&self, mut record: Value) {
        if let Some(a) = &self.audit {
            record["ts"] = json!(now_rfc3339());
            record["provider"] = json!(self.spec.provider);
            let _ = a.append(&record);
        }
    }

    /// Takes a claim for a model request with a body of `body_len` bytes, or names the
    /// limit it would pass: a request is let through while the requests admitted are
    /// under `requests`, and the tokens used and held under `tokens`.
    pub(super) fn claim(&self, body_len: u64) -> Result<Claim, &'static str> {
        let mut b = self.books.lock().unwrap();
        let budget = self.spec.budget;
        if budget.requests.is_some_and(|n| b.admitted >= n) {
            return Err("requests");
        }
        let used = b.stats.input_tokens + b.stats.output_tokens;
        if budget.tokens.is_some_and(|n| used + b.held_tokens >= n) {
            return Err("tokens");
        }
        let tokens = token_estimate(body_len);
        b.admitted += 1;
        b.held_tokens += tokens;
        Ok(Claim { tokens })
    }
}
