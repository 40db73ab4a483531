//! A remote server, spoken to over MCP's Streamable HTTP in either era: each message the
//! [`super::client::Client`] writes is POSTed to the server's URL by awf's own HTTP client
//! (ureq, TLS by rustls), and every message of the answer (one JSON object, or the events
//! of an SSE stream) is handed back as a line, so the client, the probe and the link are
//! those of a stdio server.
//!
//! - **Both eras.** A 2026-07-28 request carries `MCP-Protocol-Version` (from its `_meta`),
//!   `Mcp-Method` and `Mcp-Name`; the handshake era's `initialize` answer gives the session
//!   (`Mcp-Session-Id`, sent on every later request and ended with `DELETE` at close) and the
//!   version sent from then on. An HTTP error whose body is a JSON-RPC error reaches the
//!   client as that error (the probe reads a modern server's `-32022` from it); any other is
//!   an error naming the status, so a legacy server's `400` to `server/discover` makes it
//!   legacy, as the transport's backward-compatibility section says.
//! - **Public addresses only** unless the entry has `allow_private: true`: every address the
//!   host resolves to is checked where the connection is made ([`crate::https::Reach`], at each request
//!   and each redirect), so a name that resolves to 127.0.0.1 or 169.254.169.254 is refused
//!   as the literal is. Plain `http://` needs `allow_private` too. Redirects: 307 and 308
//!   are followed (three at most, each checked again); any other is an error naming where.
//! - **Secrets stay out.** Header values (with `${VAR}` from the entry's `env`, else awf's
//!   environment) are sent and never written anywhere; each, and each variable's value in
//!   it, is masked in every message the server sends back (results, errors, descriptions).
//! - **Bounds**: a message over [`MAX_LINE`] fails its request; connecting has 10 s; a
//!   request gives up when its call's deadline does (the client's), its thread when the
//!   server ends the answer or the step ends.
//!
//! Not done: the handshake era's optional GET stream (a legacy remote server's tool list
//! changes are seen at its next start); `x-mcp-header` parameters of 2026-07-28 tools; an
//! HTTP proxy (awf connects directly, so that the address checked is the server's).

use super::client::{MAX_LINE, Pipes};
use crate::confine::egress::rules::is_public;
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ureq::http::Uri;

/// Redirects (307 and 308 only) followed for one POST.
const MAX_REDIRECTS: usize = 3;
/// Time to connect (DNS, TCP and TLS).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the `DELETE` that ends a handshake-era session has.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of an HTTP error's body read for its message.
const ERROR_BODY: u64 = 64 << 10;
/// The JSON-RPC code of an answer awf makes up for a request the server did not answer
/// (unreachable, an HTTP error without a JSON-RPC body, a stream cut short).
const TRANSPORT_ERROR: i64 = -32000;

/// `url` without credentials, query or fragment: what messages show of it.
pub fn display_url(url: &str) -> String {
    match url.parse::<Uri>() {
        Ok(u) => {
            let host = u.host().unwrap_or("");
            let port = u.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{}://{host}{port}{}",
                u.scheme_str().unwrap_or("?"),
                u.path()
            )
        }
        Err(_) => "(an invalid URL)".into(),
    }
}

/// Why `url` cannot be a remote server's endpoint, if it cannot: its scheme, its host, its
/// credentials, and an address literal that is not public without `allow_private`.
pub fn url_problem(url: &str, allow_private: bool) -> Option<String> {
    let uri = match url.parse::<Uri>() {
        Ok(u) => u,
        Err(e) => return Some(format!("url {url:?} is not a URL ({e})")),
    };
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if allow_private => {}
        Some("http") => {
            return Some(format!(
                "url {} is plain http: awf sends a remote server's headers over HTTPS only; \
                 use https://, or set allow_private: true for a server on this machine or \
                 the local network",
                display_url(url)
            ));
        }
        _ => return Some(format!("url {url:?} is not an https:// URL")),
    }
    let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
        return Some(format!("url {url:?} has no host"));
    };
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Some(format!(
            "url {} holds credentials before its host: put them in headers (e.g. \
             Authorization: \"Bearer ${{TOKEN}}\"), where awf masks them",
            display_url(url)
        ));
    }
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>()
        && !allow_private
        && !is_public(ip)
    {
        return Some(refusal(ip, &display_url(url)));
    }
    None
}

/// What a refused address's message tells to do.
const SET_ALLOW_PRIVATE: &str = "awf reaches remote servers at public addresses only; set \
     allow_private: true on the entry if this server is meant to be on this machine or the \
     local network";

fn refusal(ip: IpAddr, url: &str) -> String {
    crate::https::not_public(ip, url, SET_ALLOW_PRIVATE)
}

/// The variables `${VAR}` of a header value names, in order.
pub fn header_vars(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

/// A header value with its `${VAR}`s replaced (from `env`, else awf's environment), and
/// the values that replaced them (to be masked).
fn expand(
    header: &str,
    value: &str,
    env: &BTreeMap<String, String>,
) -> Result<(String, Vec<String>), String> {
    let mut out = String::new();
    let mut secrets = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!(
                "header {header} has a `${{` without its `}}`: write ${{NAME}}"
            ));
        };
        let name = &after[..end];
        let found = env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
            .ok_or_else(|| {
                format!(
                    "header {header} uses ${{{name}}}, which is not set in awf's environment; \
                     export it before awf runs"
                )
            })?;
        out.push_str(&found);
        secrets.push(found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, secrets))
}

/// What every request to one server shares.
struct Shared {
    name: String,
    url: String,
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
    /// Each secret as it appears in JSON text, and what replaces it.
    masks: Vec<(String, String)>,
    /// The handshake era's session, once `initialize` gave one.
    session: Mutex<Option<String>>,
    /// The handshake era's revision, once `initialize` answered.
    version: Mutex<Option<String>>,
    /// Where answers go, as lines, until the link closes.
    out: Mutex<Option<std::io::PipeWriter>>,
}

/// The client's side of the link: each line written to it is one message, POSTed.
struct Outbound {
    shared: Arc<Shared>,
    buf: Vec<u8>,
}

/// Where a remote server is and what goes with each request (a server entry's `url`,
/// `headers`, `env` and `allow_private`).
pub struct Endpoint<'a> {
    pub url: &'a str,
    pub headers: &'a BTreeMap<String, String>,
    /// The values of the headers' `${VAR}`s, before awf's environment.
    pub env: &'a BTreeMap<String, String>,
    pub allow_private: bool,
}

/// Opens the link to server `name` at `endpoint`: the writer the client's messages go to
/// and the reader its answers come from. Nothing is sent until the client writes.
pub fn open(name: &str, endpoint: &Endpoint<'_>) -> Result<Pipes, String> {
    let url = endpoint.url.to_string();
    if let Some(why) = url_problem(&url, endpoint.allow_private) {
        return Err(why);
    }
    let mut headers = Vec::new();
    let mut masks = Vec::new();
    for (header, template) in endpoint.headers {
        let (value, secrets) = expand(header, template, endpoint.env)?;
        let marker = format!("[masked: header {header}]");
        for s in secrets.into_iter().chain([value.clone()]) {
            // Too short to tell from ordinary text: masking it would garble answers.
            if s.len() >= 6 {
                let quoted = serde_json::to_string(&s).expect("a string");
                masks.push((quoted[1..quoted.len() - 1].to_string(), marker.clone()));
            }
        }
        headers.push((header.clone(), value));
    }
    // The longest first: a header's whole value before the variable inside it.
    masks.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .tls_config(crate::https::tls_config().clone())
        .user_agent(format!("awf/{}", env!("CARGO_PKG_VERSION")))
        .build();
    let reach = if endpoint.allow_private {
        crate::https::Reach::Any
    } else {
        crate::https::Reach::Public(SET_ALLOW_PRIVATE)
    };
    let agent = crate::https::agent(config, reach);
    let (reader, writer) =
        std::io::pipe().map_err(|e| format!("cannot make the link's pipe: {e}"))?;
    let shared = Arc::new(Shared {
        name: name.to_string(),
        url,
        agent,
        headers,
        masks,
        session: Mutex::new(None),
        version: Mutex::new(None),
        out: Mutex::new(Some(writer)),
    });
    Ok((
        Box::new(Outbound {
            shared,
            buf: Vec::new(),
        }),
        Box::new(reader),
    ))
}

impl Write for Outbound {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            dispatch(&self.shared, &line[..end]);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Outbound {
    /// The client closed the link: the answers' pipe ends (the client's reader sees its
    /// end), and a handshake-era session is ended as the revision asks (DELETE).
    fn drop(&mut self) {
        self.shared
            .out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let session = self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(session) = session {
            // Waited for (briefly): the step's end follows, and with it the process.
            let shared = &self.shared;
            let mut req =
                ureq::http::Request::delete(&shared.url).header("Mcp-Session-Id", session);
            for (k, v) in &shared.headers {
                req = req.header(k, v);
            }
            if let Ok(req) = req.body(()) {
                let req = shared
                    .agent
                    .configure_request(req)
                    .timeout_global(Some(CLOSE_TIMEOUT))
                    .build();
                let _ = shared.agent.run(req);
            }
        }
    }
}

/// One message from the client: POSTed on a thread of its own (a call may take long, and
/// others go on meanwhile).
fn dispatch(shared: &Arc<Shared>, line: &[u8]) {
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    let id = message.get("id").cloned();
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let modern = message
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    if method.as_deref() == Some("notifications/cancelled") && modern_link(shared) {
        // 2026-07-28 over HTTP: closing the answer's stream is the cancellation, and no
        // notification is expected; the stream ends with its thread.
        return;
    }
    let shared = shared.clone();
    let body = line.to_vec();
    let _ = std::thread::Builder::new()
        .name(format!("awf-remote-{}", shared.name))
        .spawn(move || {
            let request = match (&id, &method) {
                (Some(id), Some(m)) => Some((id.clone(), m.clone())),
                _ => None,
            };
            let name = message
                .pointer("/params/name")
                .or_else(|| message.pointer("/params/uri"))
                .and_then(Value::as_str);
            let sent = Sent {
                body,
                method: method.as_deref(),
                name,
                version: modern.as_deref(),
            };
            if let Err(why) = post(&shared, &sent, request.as_ref().map(|(id, _)| id))
                && let Some((id, _)) = &request
            {
                answer_error(&shared, id, &why);
            }
        });
}

/// Whether the link speaks 2026-07-28: no handshake-era revision was ever agreed.
fn modern_link(shared: &Shared) -> bool {
    shared
        .version
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_none()
}

/// A message as sent, with what its headers mirror.
struct Sent<'a> {
    body: Vec<u8>,
    method: Option<&'a str>,
    name: Option<&'a str>,
    /// The revision its `_meta` names (2026-07-28 requests).
    version: Option<&'a str>,
}

/// POSTs `sent` (following 307 and 308) and hands back what the server answers; the
/// error, for a request (`id`), when it answered nothing usable.
fn post(shared: &Shared, sent: &Sent<'_>, id: Option<&Value>) -> Result<(), String> {
    let mut url = shared.url.clone();
    for _ in 0..=MAX_REDIRECTS {
        let request =
            build(shared, &url, sent).map_err(|e| format!("cannot build the request: {e}"))?;
        let mut response = shared.agent.run(request).map_err(|e| {
            format!(
                "cannot reach server {} at {}: {}",
                shared.name,
                display_url(&url),
                mask(shared, &e.to_string())
            )
        })?;
        let status = response.status().as_u16();
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let next = join_location(&url, location);
            if !matches!(status, 307 | 308) {
                return Err(format!(
                    "{} answered with a redirect ({status}) to {}, which would turn the POST \
                     into a GET; put that URL in the entry",
                    display_url(&url),
                    display_url(&next)
                ));
            }
            if next.starts_with("http://") && url.starts_with("https://") {
                return Err(format!(
                    "{} redirected to plain http ({}): refused, the headers would go \
                     unencrypted",
                    display_url(&url),
                    display_url(&next)
                ));
            }
            url = next;
            continue;
        }
        if sent.method == Some("initialize")
            && let Some(session) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            *shared.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.to_string());
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let Some(id) = id else {
            // A notification or an answer: accepted (202) or not, nothing comes back.
            if status >= 300 {
                tracing::debug!(server = %shared.name, status, "the server refused a notification");
            }
            return Ok(());
        };
        if !(200..300).contains(&status) {
            return match http_error(shared, &url, status, response.body_mut(), id) {
                None => Ok(()),
                Some(why) => Err(why),
            };
        }
        let answered = if content_type.starts_with("text/event-stream") {
            read_events(shared, response.body_mut().as_reader(), id)?
        } else {
            let text = response
                .body_mut()
                .with_config()
                .limit(MAX_LINE as u64)
                .read_to_string()
                .map_err(|e| format!("cannot read its answer: {e}"))?;
            deliver(shared, &text, Some(id), sent.method)
        };
        return if answered {
            Ok(())
        } else {
            Err(format!(
                "server {} ended its answer to {} without a JSON-RPC response",
                shared.name,
                sent.method.unwrap_or("the request")
            ))
        };
    }
    Err(format!(
        "{} redirected more than {MAX_REDIRECTS} times",
        display_url(&shared.url)
    ))
}

fn build(
    shared: &Shared,
    url: &str,
    sent: &Sent<'_>,
) -> Result<ureq::http::Request<Vec<u8>>, ureq::http::Error> {
    let mut req = ureq::http::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    let version = sent.version.map(str::to_string).or_else(|| {
        shared
            .version
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    });
    if let Some(v) = version
        && sent.method != Some("initialize")
    {
        req = req.header("mcp-protocol-version", v);
    }
    if let Some(m) = sent.method {
        req = req.header("mcp-method", m);
        if let Some(name) = sent.name
            && matches!(m, "tools/call" | "resources/read" | "prompts/get")
        {
            req = req.header("mcp-name", header_value(name));
        }
    }
    if let Some(s) = shared
        .session
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        req = req.header("mcp-session-id", s.as_str());
    }
    for (k, v) in &shared.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    req.body(sent.body.clone())
}

/// A value as 2026-07-28 writes it in a header: as it is when it is plain ASCII, else in
/// the `=?base64?…?=` form.
fn header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        value.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

/// A redirect's `Location` against the URL that gave it.
fn join_location(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let Ok(uri) = base.parse::<Uri>() else {
        return location.to_string();
    };
    let origin = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("https"),
        uri.authority().map(|a| a.as_str()).unwrap_or("")
    );
    if location.starts_with('/') {
        format!("{origin}{location}")
    } else {
        let dir = uri.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{origin}{dir}/{location}")
    }
}

/// An HTTP error to a request: its JSON-RPC error when the body is one (with the request's
/// id: a modern server's `-32022` or `-32601` is read by the probe; None, as it is handed
/// back), else why, naming its status.
fn http_error(
    shared: &Shared,
    url: &str,
    status: u16,
    body: &mut ureq::Body,
    id: &Value,
) -> Option<String> {
    let text = body
        .with_config()
        .limit(ERROR_BODY)
        .read_to_string()
        .unwrap_or_default();
    if let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(&text)
        && m.get("error").is_some_and(Value::is_object)
    {
        m.insert("id".into(), id.clone());
        m.insert("jsonrpc".into(), json!("2.0"));
        if deliver(shared, &Value::Object(m).to_string(), Some(id), None) {
            return None;
        }
    }
    let hint = match status {
        401 | 403 => "; the server refused the credentials: check the entry's headers",
        404 => "; check the entry's url (the server's MCP endpoint)",
        _ => "",
    };
    let excerpt: String = mask(shared, text.trim()).chars().take(300).collect();
    Some(format!(
        "server {} at {} answered HTTP {status}{}{hint}",
        shared.name,
        display_url(url),
        if excerpt.is_empty() {
            String::new()
        } else {
            format!(" ({excerpt})")
        }
    ))
}

/// Each event of an SSE answer handed back; whether the response to `id` was among them.
fn read_events(shared: &Shared, body: impl Read, id: &Value) -> Result<bool, String> {
    let mut reader = BufReader::new(body);
    let mut data = String::new();
    let mut answered = false;
    let mut line = String::new();
    loop {
        // The link closed (the step ended): a stream held open (`subscriptions/listen`)
        // is let go at its next line (keep-alives come every few seconds).
        if shared
            .out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return Ok(answered);
        }
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .map_err(|e| format!("its event stream broke: {e}"))?;
        if n == 0 {
            return Ok(answered);
        }
        if data.len() + line.len() > MAX_LINE {
            return Err(format!(
                "server {} sent an event over {} MiB",
                shared.name,
                MAX_LINE >> 20
            ));
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.is_empty() {
            if !data.is_empty() {
                answered |= deliver(shared, &data, Some(id), None);
                data.clear();
            }
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
        // `event:`, `id:`, `retry:` and `:` comments carry no message.
    }
}

/// Hands one JSON-RPC message (or a batch) back to the client as a line, masked; whether
/// it was the response to `id`. An `initialize` answer's revision is kept for later
/// requests.
fn deliver(shared: &Shared, text: &str, id: Option<&Value>, method: Option<&str>) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        tracing::debug!(server = %shared.name, "the server sent something that is not JSON");
        return false;
    };
    let messages = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    let mut answered = false;
    for message in messages {
        let is_answer =
            message.get("method").is_none() && id.is_some_and(|id| message.get("id") == Some(id));
        if is_answer
            && method == Some("initialize")
            && let Some(v) = message
                .pointer("/result/protocolVersion")
                .and_then(Value::as_str)
        {
            *shared.version.lock().unwrap_or_else(|e| e.into_inner()) = Some(v.to_string());
        }
        answered |= is_answer;
        let mut line = mask(shared, &message.to_string());
        line.push('\n');
        let mut out = shared.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = out.as_mut() {
            let _ = w.write_all(line.as_bytes());
        }
    }
    answered
}

/// A made-up error answer to a request the server did not answer.
fn answer_error(shared: &Shared, id: &Value, why: &str) {
    let message = json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": TRANSPORT_ERROR, "message": why}});
    deliver(shared, &message.to_string(), Some(id), None);
}

/// `text` with every header secret replaced by its marker.
fn mask(shared: &Shared, text: &str) -> String {
    let mut out = text.to_string();
    for (secret, marker) in &shared.masks {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), marker);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_https_at_a_public_host_unless_the_entry_allows_private() {
        assert_eq!(url_problem("https://api.example.com/mcp", false), None);
        for (url, word) in [
            ("http://api.example.com/mcp", "plain http"),
            ("https://127.0.0.1:8443/mcp", "127.0.0.1"),
            ("https://169.254.169.254/latest", "169.254.169.254"),
            ("https://[::1]/mcp", "::1"),
            ("https://10.1.2.3/mcp", "10.1.2.3"),
            ("https://user:pw@api.example.com/mcp", "credentials"),
            ("ftp://api.example.com/", "not an https"),
            ("not a url", "not"),
        ] {
            let why = url_problem(url, false).unwrap_or_default();
            assert!(why.contains(word), "{url}: {why}");
        }
        assert_eq!(url_problem("https://127.0.0.1:8443/mcp", true), None);
        assert_eq!(url_problem("http://localhost:8080/mcp", true), None);
    }

    #[test]
    fn header_variables_come_from_the_entry_then_awf_and_unset_ones_are_named() {
        let env = BTreeMap::from([("AWF_T_TOKEN".to_string(), "s3cr3t-value".to_string())]);
        let (value, secrets) = expand("Authorization", "Bearer ${AWF_T_TOKEN}", &env).unwrap();
        assert_eq!(value, "Bearer s3cr3t-value");
        assert_eq!(secrets, ["s3cr3t-value"]);
        assert_eq!(header_vars("a ${X} b ${Y_2}"), ["X", "Y_2"]);
        let why = expand("X-Key", "${AWF_SURELY_UNSET_VAR}", &BTreeMap::new()).unwrap_err();
        assert!(
            why.contains("AWF_SURELY_UNSET_VAR") && why.contains("X-Key"),
            "{why}"
        );
        let why = expand("X-Key", "${OPEN", &BTreeMap::new()).unwrap_err();
        assert!(why.contains("without its"), "{why}");
    }

    #[test]
    fn urls_are_shown_without_credentials_or_query() {
        assert_eq!(
            display_url("https://u:p@h.example:8443/mcp?token=abc#x"),
            "https://h.example:8443/mcp"
        );
        assert_eq!(
            join_location("https://h.example/a/mcp", "/b/mcp"),
            "https://h.example/b/mcp"
        );
        assert_eq!(
            join_location("https://h.example/a/mcp", "next"),
            "https://h.example/a/next"
        );
    }

    #[test]
    fn header_values_outside_plain_ascii_are_base64() {
        assert_eq!(header_value("get_weather"), "get_weather");
        assert_eq!(
            header_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(
            header_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }
}
