//! `notify.send`, as AWF defines it: `backend` (`webhook` or `desktop`), `message`,
//! `title` (default `AWF Workflow`), `priority` (`low`, `default`, `high`), `webhook_url`
//! (for the webhook backend); outputs `backend`, `status` and `response`. A webhook is a
//! JSON POST (`title`, `message`, `priority`) through the state's network; a desktop
//! notification is `notify-send`'s, when the machine has it.

use super::Outcome;
use crate::https::Reach;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// `notify.send`.
pub fn send(inputs: &Map<String, Value>, reach: &Reach, timeout: Duration) -> Outcome {
    let text = |k: &str| inputs.get(k).and_then(Value::as_str).unwrap_or("");
    let backend = text("backend");
    let message = text("message");
    if message.is_empty() {
        return Outcome::failed("notify.send: message is required");
    }
    let title = Some(text("title"))
        .filter(|t| !t.is_empty())
        .unwrap_or("AWF Workflow");
    let priority = Some(text("priority"))
        .filter(|p| !p.is_empty())
        .unwrap_or("default");
    if !["low", "default", "high"].contains(&priority) {
        return Outcome::failed("notify.send: priority must be one of: low, default, high");
    }
    let mut outputs = Map::new();
    outputs.insert("backend".into(), json!(backend));
    match backend {
        "webhook" => {
            let url = text("webhook_url");
            if url.is_empty() {
                return Outcome::failed(
                    "notify.send: webhook_url is required for the webhook backend",
                );
            }
            let body =
                json!({"title": title, "message": message, "priority": priority}).to_string();
            let headers = [("Content-Type".to_string(), "application/json".to_string())];
            match super::http::send(reach, "POST", url, &headers, Some(&body), timeout) {
                Ok(r) => {
                    outputs.insert("status".into(), json!(r.status));
                    outputs.insert("response".into(), json!(r.body));
                    let error = (!(200..300).contains(&r.status))
                        .then(|| "notify.send: webhook returned non-2xx status code".to_string());
                    Outcome { outputs, error }
                }
                Err(why) => Outcome::failed(format!("notify.send: {why}")),
            }
        }
        "desktop" => {
            let urgency = match priority {
                "high" => "critical",
                "low" => "low",
                _ => "normal",
            };
            match std::process::Command::new("notify-send")
                .args(["--urgency", urgency, title, message])
                .output()
            {
                Ok(o) if o.status.success() => {
                    outputs.insert("status".into(), json!("sent"));
                    outputs.insert("response".into(), json!(""));
                    Outcome::ok(outputs)
                }
                Ok(o) => Outcome::failed(format!(
                    "notify.send: notify-send failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => Outcome::failed(format!(
                    "notify.send: no desktop notifier here (notify-send: {e}); use the webhook \
                     backend"
                )),
            }
        }
        other => Outcome::failed(format!(
            "notify.send: backend {other:?} is unknown; use desktop or webhook"
        )),
    }
}
