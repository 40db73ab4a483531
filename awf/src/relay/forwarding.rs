//! Forwarding: an admitted request sent to the real endpoint with the real key, its response
//! streamed back as it arrives while its usage is read, and the turn recorded (span, audit,
//! figures).

use super::*;

/// The path and query for upstream: a `key=` parameter (the placeholder) dropped.
fn upstream_path(rest: &str) -> String {
    let Some((path, query)) = rest.split_once('?') else {
        return rest.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("key="))
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// Headers never forwarded: hop-by-hop ones, the framing (the relay frames anew), the
/// encoding (the answer comes back as it is, readable), and every form of key.
const DROPPED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "accept-encoding",
];

/// Forwards one admitted request upstream and its answer back, and records the turn.
pub(super) fn forward(
    conn: TcpStream,
    lease: &Lease,
    mut req: Head,
    wire: Option<(Wire, Option<String>)>,
    claim: Option<Claim>,
    exporter: Option<&Arc<OtelExporter>>,
) {
    let url = format!("{}{}", lease.spec.upstream, upstream_path(&req.rest));
    let started = Instant::now();
    let provider = lease.spec.provider;
    let (host, port) = server_of(&lease.spec.upstream);
    let (wire, path_model) = match wire {
        Some((w, m)) => (Some(w), m),
        None => (None, None),
    };
    // The span starts with the request; the model it names is known once its body is
    // sent (the body streams upstream, so it is read only as the upstream takes it).
    let mut span = wire.and(exporter).map(|e| chat_span(e, lease, &host, port));
    let sent = send_upstream(&conn, lease, &mut req, &url);
    let model = wire.and_then(|w| usage::requested_model(w, path_model, sent.scanned));
    if let Some(span) = span.as_mut() {
        if let Some(m) = &model {
            span.update_name(format!("chat {m}"));
            span.set_attribute(KeyValue::new("gen_ai.request.model", m.clone()));
        }
        if let (Some(masker), Some(p)) = (&lease.masker, &sent.prefix) {
            span.set_attribute(KeyValue::new(
                "gen_ai.input.messages",
                masker.mask_text(&cut(&String::from_utf8_lossy(p))),
            ));
        }
    }
    if wire.is_some() {
        audit_request(
            lease,
            model.as_deref(),
            &host,
            &req.rest,
            sent.request_bytes,
        );
    }
    let turn = Turn {
        wire,
        sent: sent.whole,
        claim,
        started,
    };
    let resp = match sent.outcome {
        Ok(r) if sent.whole => r,
        Ok(_) | Err(_) if sent.broken.is_some() => {
            // The agent is gone before its request was whole: no answer to give, and no
            // model turn happened.
            let _ = conn.shutdown(Shutdown::Both);
            finish(lease, span, &turn, None, 400, None, sent.broken.as_deref());
            return;
        }
        Ok(r) => r,
        Err(e) => {
            let message = format!("awf relay: cannot reach {url}: {e}");
            if wire.is_some() {
                lease.answered(502, None);
            }
            reply(
                &conn,
                502,
                &provider_error(provider, 502, "api_error", &message),
            );
            let _ = conn.shutdown(Shutdown::Both);
            finish(lease, span, &turn, None, 502, None, Some(&message));
            return;
        }
    };
    let status = resp.status().as_u16();
    if wire.is_some() {
        lease.answered(status, retry_after_ms(resp.headers()));
    }
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let mut reader = wire.map(|w| UsageReader::new(w, content_type.as_deref()));
    let mut content = lease.masker.as_ref().map(|_| Vec::new());
    let (first_byte, failed) = stream_back(&conn, resp, started, &mut reader, &mut content);
    let _ = conn.shutdown(Shutdown::Both);
    let used = reader.map(UsageReader::finish);
    if let (Some(span), Some(c), Some(masker)) = (span.as_mut(), &content, &lease.masker) {
        span.set_attribute(KeyValue::new(
            "gen_ai.output.messages",
            masker.mask_text(&cut(&String::from_utf8_lossy(c))),
        ));
    }
    finish(
        lease,
        span,
        &turn,
        used,
        status,
        first_byte,
        failed.as_deref(),
    );
}

/// The `model.request` audit record of a request sent upstream.
fn audit_request(lease: &Lease, model: Option<&str>, host: &str, rest: &str, bytes: u64) {
    if let Some(a) = &lease.audit {
        let _ = a.append(&json!({
            "ts": now_rfc3339(), "type": "model.request", "provider": lease.spec.provider,
            "model": model, "server": host, "path": rest.split('?').next().unwrap_or(""),
            "request_bytes": bytes,
        }));
    }
}

/// The `chat` span of a model request, under the step's span.
fn chat_span(
    exporter: &OtelExporter,
    lease: &Lease,
    host: &str,
    port: u16,
) -> opentelemetry_sdk::trace::Span {
    let parent = lease
        .spec
        .traceparent
        .as_deref()
        .and_then(parse_traceparent);
    exporter.start_span(
        "chat".to_string(),
        SpanKind::Client,
        parent.as_ref(),
        vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", lease.spec.provider),
            KeyValue::new("server.address", host.to_string()),
            KeyValue::new("server.port", i64::from(port)),
        ],
    )
}

/// A request as sent upstream: the answer's head (or why there is none), and what its
/// body was.
struct Sent {
    outcome: Result<ureq::http::Response<ureq::Body>, String>,
    /// The whole body went up.
    whole: bool,
    request_bytes: u64,
    /// The agent's connection failed or ended inside the body.
    broken: Option<String>,
    /// The body's first bytes, when content is recorded.
    prefix: Option<Vec<u8>>,
    /// The model the body names, seen in passing.
    scanned: Option<String>,
}

/// Sends `req` to `url` with the real key in place of the placeholder, its body streamed
/// from the agent's connection (in one write with the head when it came whole).
fn send_upstream(conn: &TcpStream, lease: &Lease, req: &mut Head, url: &str) -> Sent {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(30)))
        .tls_config(crate::https::tls_config().clone())
        .build()
        .into();
    let mut builder = ureq::http::Request::builder()
        .method(req.method.as_str())
        .uri(url);
    for (k, v) in &req.headers {
        if DROPPED.contains(&k.as_str())
            || (lease.placeholder.is_some() && KEY_HEADERS.contains(&k.as_str()))
        {
            continue;
        }
        builder = builder.header(k.as_str(), v.as_str());
    }
    if req.header("content-length").is_some() {
        builder = builder.header("content-length", req.len.to_string());
    }
    if let Some((how, key)) = &lease.spec.key {
        builder = match how {
            KeyHeader::XApiKey => builder.header("x-api-key", key.as_str()),
            KeyHeader::Bearer => builder.header("authorization", format!("Bearer {key}")),
            KeyHeader::Goog => builder.header("x-goog-api-key", key.as_str()),
        };
    }
    // A body that came whole with its head goes up in one write with the head: the
    // time to first byte of a small request is not spent on a second packet.
    let came_whole = req.len <= req.early.len() as u64;
    let mut body = UpstreamBody::new(
        std::mem::take(&mut req.early),
        conn,
        req.len,
        lease.masker.as_ref().map(|_| CONTENT_BYTES),
    );
    let outcome = if req.len == 0 {
        send(&agent, builder.body(()))
    } else if came_whole {
        let mut bytes = Vec::new();
        let _ = body.read_to_end(&mut bytes);
        send(&agent, builder.body(&bytes[..]))
    } else {
        send(&agent, builder.body(ureq::SendBody::from_reader(&mut body)))
    };
    Sent {
        outcome,
        whole: body.complete(),
        request_bytes: body.sent,
        broken: body.broken.take(),
        prefix: body.prefix.take(),
        scanned: std::mem::take(&mut body.scan).model(),
    }
}

/// The answer's head and body written to the agent as they arrive, read on the way by
/// `reader` (the usage) and into `content` (when recorded); the time to its first byte
/// and why it broke off, if it did.
fn stream_back(
    conn: &TcpStream,
    resp: ureq::http::Response<ureq::Body>,
    started: Instant,
    reader: &mut Option<UsageReader>,
    content: &mut Option<Vec<u8>>,
) -> (Option<Duration>, Option<String>) {
    let status = resp.status();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (k, v) in resp.headers() {
        let k = k.as_str();
        if DROPPED.contains(&k) || k == "content-encoding" {
            continue;
        }
        head.push_str(&format!(
            "{k}: {}\r\n",
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    // The answer ends when the connection does: no framing to hold a stream back.
    head.push_str("Connection: close\r\n\r\n");
    let mut first_byte = None;
    let mut out = conn;
    if out.write_all(head.as_bytes()).is_err() {
        return (None, None);
    }
    let mut body = resp.into_body().into_reader();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match body.read(&mut buf) {
            Ok(0) => return (first_byte, None),
            Ok(n) => {
                first_byte.get_or_insert_with(|| started.elapsed());
                if let Some(r) = reader.as_mut() {
                    r.feed(&buf[..n]);
                }
                if let Some(c) = content.as_mut() {
                    let room = CONTENT_BYTES.saturating_sub(c.len());
                    c.extend_from_slice(&buf[..n.min(room)]);
                }
                if out.write_all(&buf[..n]).is_err() {
                    return (
                        first_byte,
                        Some("the agent closed the connection".to_string()),
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (first_byte, Some(format!("the answer broke off: {e}"))),
        }
    }
}

/// The wait an answer asks for, in milliseconds: `retry-after-ms` (milliseconds), else
/// `retry-after` in seconds (whole or not); an HTTP date is not read.
pub(super) fn retry_after_ms(headers: &ureq::http::HeaderMap) -> Option<u64> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    number("retry-after-ms")
        .or_else(|| number("retry-after").map(|s| s * 1000.0))
        .map(|ms| ms.round() as u64)
}

pub(super) fn send(
    agent: &ureq::Agent,
    request: Result<ureq::http::Request<impl ureq::AsSendBody>, ureq::http::Error>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    agent
        .run(request.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// `text` cut to [`CONTENT_BYTES`] on a character boundary.
pub(super) fn cut(text: &str) -> String {
    let end = crate::text::floor_char_boundary(text, CONTENT_BYTES);
    text[..end].to_string()
}

/// The endpoint's host and port, for `server.address` and `server.port`.
fn server_of(base: &str) -> (String, u16) {
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or("");
    let default = if scheme == "https" { 443 } else { 80 };
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
            h.trim_matches(['[', ']']).to_string(),
            p.parse().unwrap_or(default),
        ),
        _ => (authority.to_string(), default),
    }
}

/// One request on its way: what it speaks, and whether the upstream got it whole.
pub(super) struct Turn {
    pub(super) wire: Option<Wire>,
    /// The whole body went upstream: a model turn happened (or was refused by the model).
    pub(super) sent: bool,
    pub(super) claim: Option<Claim>,
    pub(super) started: Instant,
}

/// Records one model turn: the step's counts, its span, its audit record.
pub(super) fn finish(
    lease: &Lease,
    span: Option<opentelemetry_sdk::trace::Span>,
    turn: &Turn,
    used: Option<usage::Usage>,
    status: u16,
    first_byte: Option<Duration>,
    failed: Option<&str>,
) {
    if turn.wire.is_none() {
        return;
    }
    let elapsed = turn.started.elapsed();
    let u = used.unwrap_or_default();
    {
        let mut b = lease.books.lock().unwrap();
        // The answer's figures replace the estimate; a request the upstream never got
        // whole gives its claim back.
        if let Some(c) = &turn.claim {
            b.held_tokens -= c.tokens;
            if !turn.sent {
                b.admitted -= 1;
            }
        }
        let s = &mut b.stats;
        s.requests += u64::from(turn.sent);
        s.input_tokens += u.input_tokens.unwrap_or(0);
        s.output_tokens += u.output_tokens.unwrap_or(0);
        s.cache_read_tokens += u.cache_read_tokens.unwrap_or(0);
        s.model_ms += elapsed.as_millis() as u64;
    }
    if let Some(span) = span {
        end_chat_span(span, &u, status, first_byte, failed);
    }
    if let Some(a) = &lease.audit {
        let _ = a.append(&json!({
            "ts": now_rfc3339(), "type": "model.response", "provider": lease.spec.provider,
            "model": u.response_model, "status": status,
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "finish_reasons": u.finish_reasons,
            "duration_ms": (elapsed.as_secs_f64() * 1e6).round() / 1000.0,
            "time_to_first_byte_ms": first_byte.map(|t| (t.as_secs_f64() * 1e6).round() / 1000.0),
            "error": failed,
        }));
    }
}

/// A model turn's span ended with what its answer said: the model, the usage, the finish
/// reasons, the status, the time to the first byte, and the error if there was one.
fn end_chat_span(
    mut span: opentelemetry_sdk::trace::Span,
    u: &usage::Usage,
    status: u16,
    first_byte: Option<Duration>,
    failed: Option<&str>,
) {
    let mut attrs = Vec::new();
    if let Some(m) = &u.response_model {
        attrs.push(KeyValue::new("gen_ai.response.model", m.clone()));
    }
    if let Some(id) = &u.response_id {
        attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
    }
    for (k, v) in [
        ("gen_ai.usage.input_tokens", u.input_tokens),
        ("gen_ai.usage.output_tokens", u.output_tokens),
        ("gen_ai.usage.cache_read.input_tokens", u.cache_read_tokens),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            u.cache_creation_tokens,
        ),
    ] {
        if let Some(n) = v {
            attrs.push(KeyValue::new(k, n as i64));
        }
    }
    if !u.finish_reasons.is_empty() {
        attrs.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                u.finish_reasons
                    .iter()
                    .map(|r| opentelemetry::StringValue::from(r.clone()))
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ));
    }
    attrs.push(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    if let Some(t) = first_byte {
        attrs.push(KeyValue::new(
            "awf.model.time_to_first_byte_ms",
            t.as_secs_f64() * 1000.0,
        ));
    }
    span.set_attributes(attrs);
    if status >= 400 || failed.is_some() {
        span.set_attribute(KeyValue::new(
            "error.type",
            if status >= 400 {
                status.to_string()
            } else {
                "stream_error".into()
            },
        ));
        span.set_status(SpanStatus::error(
            failed
                .unwrap_or("the model answered with an error")
                .to_string(),
        ));
    }
    span.end();
}
