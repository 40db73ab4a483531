//! Admission: a request judged by its head before any of its body is read (its route, its
//! key, its size, the step's budget), and the answers of a refusal in the provider's own shape.

use super::*;

/// A request's head from a CLI, checked before any of its body is read.
pub(super) struct Head {
    pub(super) method: String,
    /// The path after `/s/<id>`, with its query.
    pub(super) rest: String,
    /// Names lowercase.
    pub(super) headers: Vec<(String, String)>,
    /// The body's length (Content-Length; 0 without one).
    pub(super) len: u64,
    /// The bytes of the body that came with the head.
    pub(super) early: Vec<u8>,
}

impl Head {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A request head as it came, before it is checked.
pub(super) struct RawHead {
    pub(super) method: String,
    target: String,
    /// Names lowercase.
    pub(super) headers: Vec<(String, String)>,
    /// The bytes of the body that came with the head.
    pub(super) early: Vec<u8>,
}

/// The head in `buf` once it is whole.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<RawHead>, (u16, String)> {
    let mut hs = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut hs);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            Ok(Some(RawHead {
                method: req.method.unwrap_or("GET").to_string(),
                target: req.path.unwrap_or("/").to_string(),
                headers,
                early: buf[len..].to_vec(),
            }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            Err((431, "the request has more than 128 header fields".into()))
        }
        Err(e) => Err((400, format!("not an HTTP request: {e}"))),
    }
}

/// What the head says is let through: the step's lease and the request, or the answer
/// that refuses it. Nothing of the body has been read yet.
fn admit(
    raw: RawHead,
    routes: &Mutex<HashMap<String, Arc<Lease>>>,
) -> Result<(Arc<Lease>, Head), (u16, Value)> {
    let RawHead {
        method,
        target,
        headers,
        early,
    } = raw;
    let plain = |why: String| json!({"error": {"message": format!("awf relay: {why}")}});
    let Some(after) = target.strip_prefix("/s/") else {
        return Err((404, plain(format!("{target} is not a step's route"))));
    };
    let (id, rest) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let Some(lease) = routes.lock().unwrap().get(id).cloned() else {
        return Err((
            404,
            plain("no step has this route (the step ended?)".into()),
        ));
    };
    let mut head = Head {
        method,
        rest: if rest.starts_with('/') || rest.is_empty() {
            rest.to_string()
        } else {
            format!("/{rest}")
        },
        headers,
        len: 0,
        early,
    };
    let provider = lease.spec.provider;
    let refuse = |status: u16, kind: &str, why: String| {
        (
            status,
            provider_error(provider, status, kind, &format!("awf relay: {why}")),
        )
    };
    if let Some(p) = &lease.placeholder
        && !sent_key(&head).is_some_and(|k| same(&k, p))
    {
        return Err(refuse(
            401,
            "authentication_error",
            "this key is not the step's; the relay takes only the key awf gave the step".into(),
        ));
    }
    if head.header("transfer-encoding").is_some() {
        return Err(refuse(
            411,
            "invalid_request_error",
            "send the request with a Content-Length".into(),
        ));
    }
    head.len = match head
        .header("content-length")
        .map(|v| v.trim().parse::<u64>())
    {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return Err(refuse(
                400,
                "invalid_request_error",
                "a bad Content-Length".into(),
            ));
        }
    };
    if head.len > MAX_BODY {
        return Err(refuse(
            413,
            "request_too_large",
            format!(
                "the request body is {} bytes, over the {} MiB a model request may be",
                head.len,
                MAX_BODY >> 20
            ),
        ));
    }
    Ok((lease, head))
}

/// The relay's own answer (see [`super::OWN_ANSWER_HEADER`]).
pub(super) fn reply(mut conn: &TcpStream, status: u16, body: &Value) {
    let text = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}: 1\r\nConnection: close\r\n\r\n{text}",
        reason(status),
        text.len(),
        super::OWN_ANSWER_HEADER
    );
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "",
    }
}

/// An error in the shape the provider's own API uses, so the CLI reports it as such.
pub(super) fn provider_error(provider: &str, status: u16, kind: &str, message: &str) -> Value {
    match provider {
        "anthropic" => json!({"type": "error", "error": {"type": kind, "message": message}}),
        "gcp.gemini" => json!({"error": {"code": status, "message": message, "status": kind}}),
        _ => json!({"error": {"message": message, "type": kind, "code": kind}}),
    }
}

/// Whether two keys are equal, in a time that does not tell how much of them matched.
pub(super) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The key the CLI sent, in whichever form its provider takes.
fn sent_key(req: &Head) -> Option<String> {
    let header = |name: &str| req.header(name).map(|v| v.trim().to_string());
    header("x-api-key")
        .or_else(|| {
            header("authorization").and_then(|v| v.strip_prefix("Bearer ").map(String::from))
        })
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            let query = req.rest.split_once('?')?.1;
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix("key=").map(String::from))
        })
}

pub(super) const KEY_HEADERS: &[&str] = &["x-api-key", "authorization", "x-goog-api-key"];

/// A request let through by its head, with what it holds: its claim on the budget and
/// its place among the route's requests in flight.
pub(super) struct Admitted {
    pub(super) lease: Arc<Lease>,
    pub(super) head: Head,
    pub(super) wire: Option<(Wire, Option<String>)>,
    pub(super) claim: Option<Claim>,
    pub(super) slot: Slot,
}

/// Everything the relay decides from a request's head, before any of its body is read:
/// the route, the key, the size, the path's cost, the route's requests in flight, the
/// budget. A refusal is the status and the body to answer.
pub(super) fn judge(
    raw: RawHead,
    routes: &Mutex<HashMap<String, Arc<Lease>>>,
) -> Result<Admitted, (u16, Value)> {
    let (lease, head) = admit(raw, routes)?;
    let provider = lease.spec.provider;
    let path = head.rest.split('?').next().unwrap_or("").to_string();
    let wire = match routes::route(provider, &head.rest) {
        routes::Route::Billable(w, m) => Some((w, m)),
        // A token count or a model list passes quietly.
        routes::Route::Free => None,
        routes::Route::Unlisted if lease.spec.budget == Budget::default() => {
            lease.note(json!({"type": "model.unlisted", "method": head.method, "path": path}));
            None
        }
        routes::Route::Unlisted => {
            let (billable, free) = routes::listed(provider);
            let message = format!(
                "awf relay: {} {path} is not a path whose cost the relay can count, so with \
                 a model budget set it is not sent; the step's budget lets through model \
                 turns ({billable}) and free calls ({free})",
                head.method
            );
            lease.note(
                json!({"type": "model.refused", "method": head.method, "path": path,
                              "reason": message}),
            );
            return Err((
                403,
                provider_error(provider, 403, "permission_error", &message),
            ));
        }
    };
    // Only this thread lets requests in, so the count cannot pass the cap between the
    // check and the add.
    if lease.active.load(Ordering::SeqCst) >= lease.per_route {
        let message = format!(
            "awf relay: the step already has {} model requests in flight; try again when \
             one has ended",
            lease.per_route
        );
        return Err((
            429,
            provider_error(provider, 429, "rate_limit_error", &message),
        ));
    }
    lease.active.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(lease.clone());
    // Only model turns count and are seen.
    let claim = match wire {
        None => None,
        Some(_) => match lease.claim(head.len) {
            Ok(c) => Some(c),
            Err(limit) => {
                lease.refused.store(true, Ordering::SeqCst);
                lease.books.lock().unwrap().stats.budget_exhausted = Some(limit);
                let message = format!(
                    "awf: the step's model budget is spent ({limit}: {}); no further request \
                     is sent",
                    match limit {
                        "requests" => lease.spec.budget.requests.unwrap_or(0),
                        _ => lease.spec.budget.tokens.unwrap_or(0),
                    }
                );
                return Err((
                    400,
                    provider_error(provider, 400, "invalid_request_error", &message),
                ));
            }
        },
    };
    Ok(Admitted {
        lease,
        head,
        wire,
        claim,
        slot,
    })
}
