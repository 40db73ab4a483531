//! `http.request`, as AWF defines it: `url` (http or https), `method` (GET, POST, PUT,
//! DELETE), `headers`, `body`, `timeout` (seconds, default 30), `retryable_status_codes`
//! (a status among them fails the operation, for `retry`); outputs `status_code`, `body`
//! (at most 1 MiB, `body_truncated` when cut) and `headers`. The request goes only where
//! the state's network lets it ([`crate::https::Reach`]).

use super::Outcome;
use crate::https::Reach;
use serde_json::{Map, Value, json};
use std::io::Read;
use std::time::Duration;

/// The most of a response's body kept (AWF's bound).
pub const MAX_BODY: u64 = 1 << 20;
/// Redirects followed, each checked against the state's network.
const MAX_REDIRECTS: u32 = 5;

/// What a response came to.
pub struct Response {
    pub status: u16,
    pub body: String,
    pub truncated: bool,
    pub headers: Map<String, Value>,
}

/// One request where `reach` allows it, bounded by `timeout`.
pub fn send(
    reach: &Reach,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Option<&str>,
    timeout: Duration,
) -> Result<Response, String> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(MAX_REDIRECTS)
        .proxy(None)
        .timeout_global(Some(timeout))
        .tls_config(crate::https::tls_config().clone())
        .user_agent(format!("awf/{}", env!("CARGO_PKG_VERSION")))
        .build();
    let agent = crate::https::agent(config, reach.clone());
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(body.unwrap_or("").as_bytes().to_vec())
        .map_err(|e| format!("the request is malformed: {e}"))?;
    let mut resp = agent.run(req).map_err(|e| match e {
        ureq::Error::Timeout(_) => format!("no answer within {} s", timeout.as_secs()),
        other => format!("cannot reach {url}: {other}"),
    })?;
    let headers = resp
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), json!(v.to_str().ok()?))))
        .collect();
    let mut bytes = Vec::new();
    resp.body_mut()
        .as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    let truncated = bytes.len() as u64 > MAX_BODY;
    bytes.truncate(MAX_BODY as usize);
    Ok(Response {
        status: resp.status().as_u16(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
        headers,
    })
}

/// `http.request`.
pub fn request(inputs: &Map<String, Value>, reach: &Reach, step_timeout: Duration) -> Outcome {
    let url = inputs.get("url").and_then(Value::as_str).unwrap_or("");
    if url.is_empty() {
        return Outcome::failed("http.request: url is required and must be a non-empty string");
    }
    if !url.starts_with("http://") && !url.starts_with("https://") {
        return Outcome::failed("http.request: url must start with http:// or https://");
    }
    let method = inputs
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_uppercase();
    if !["GET", "POST", "PUT", "DELETE"].contains(&method.as_str()) {
        return Outcome::failed("http.request: method must be one of: GET, POST, PUT, DELETE");
    }
    let headers: Vec<(String, String)> = inputs
        .get("headers")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
                .collect()
        })
        .unwrap_or_default();
    let timeout = inputs
        .get("timeout")
        .and_then(|t| t.as_u64().or_else(|| t.as_str()?.parse().ok()))
        .map_or(Duration::from_secs(30), Duration::from_secs)
        .min(step_timeout);
    let body = inputs.get("body").and_then(Value::as_str);
    let resp = match send(reach, &method, url, &headers, body, timeout) {
        Ok(r) => r,
        Err(why) => return Outcome::failed(format!("http.request: {why}")),
    };
    let mut outputs = Map::new();
    outputs.insert("status_code".into(), json!(resp.status));
    outputs.insert("body".into(), json!(resp.body));
    outputs.insert("headers".into(), Value::Object(resp.headers));
    outputs.insert("body_truncated".into(), json!(resp.truncated));
    let retryable = inputs
        .get("retryable_status_codes")
        .and_then(Value::as_array)
        .is_some_and(|codes| {
            codes
                .iter()
                .any(|c| c.as_u64() == Some(u64::from(resp.status)))
        });
    Outcome {
        outputs,
        error: retryable.then(|| format!("http.request: retryable status code {}", resp.status)),
    }
}
