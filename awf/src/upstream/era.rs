//! The revision a third-party server's requests are written in, as the client writes and
//! reads them: the handshake era or revision 2026-07-28, the `_meta` every request of the
//! latter carries, and what its `input_required` result asks for. How a server's era is
//! told and remembered is `probe.rs`'s.

use serde_json::{Value, json};

/// The modern revision awf speaks.
pub const REVISION: &str = mcpserver::REVISION_2026_07_28;

/// The revision a server's requests are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` and `notifications/initialized` first, then requests without `_meta`.
    Handshake,
    /// Revision 2026-07-28: each request carries [`meta`]; results carry `resultType`.
    Stateless,
}

/// `params._meta` of every modern request: the revision, awf's (empty) capabilities and
/// its name.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "awf", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What an `input_required` result asks for, in words for the agent: each of its
/// `inputRequests` (method, and the message an elicitation shows), or that it only
/// asks to be called again.
pub fn asked_for(result: &Value) -> String {
    let asks: Vec<String> = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(key, req)| {
                    let method = req.get("method").and_then(Value::as_str).unwrap_or("?");
                    let message = req
                        .get("params")
                        .and_then(|p| p.get("message"))
                        .and_then(Value::as_str)
                        .map(|m| {
                            let cut = crate::text::floor_char_boundary(m, 300);
                            format!(": {:?}", &m[..cut])
                        })
                        .unwrap_or_default();
                    format!("{key} ({method}{message})")
                })
                .collect()
        })
        .unwrap_or_default();
    if asks.is_empty() {
        "to be called again with the state it returned".into()
    } else {
        asks.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_input_required_result_asks_for_is_named() {
        let asked = asked_for(&json!({"resultType": "input_required", "inputRequests": {
            "login": {"method": "elicitation/create", "params": {"message": "Your GitHub user?"}},
            "roots": {"method": "roots/list"}}}));
        assert!(
            asked.contains("login (elicitation/create: \"Your GitHub user?\")"),
            "{asked}"
        );
        assert!(asked.contains("roots (roots/list)"), "{asked}");
        let again = asked_for(&json!({"resultType": "input_required", "requestState": "x"}));
        assert!(again.contains("called again"), "{again}");
    }
}
