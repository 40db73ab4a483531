//! `scan:` of a step's `mcp_proxy` or of one of its servers: what is done with a secret in
//! a tool's result and with a suspicious tool description ([`crate::scan`]).

use super::context::{Ctx, join};
use crate::error::codes;
use crate::workflow::yaml::{Kind, Node};

const SCAN_KEYS: &[&str] = &["results", "descriptions"];

/// `scan:` of a step or a server: `off|warn|redact|refuse`, or `{results: …,
/// descriptions: …}`.
pub(super) fn parse_scan(cx: &mut Ctx, node: &Node, path: &str) -> crate::scan::Scan {
    use crate::scan::{Mode, Scan};
    let mode = |cx: &mut Ctx, n: &Node, p: &str, description: bool| -> Option<Mode> {
        let word = cx.string(n, p)?;
        let m = match word.as_str() {
            "off" => Mode::Off,
            "warn" => Mode::Warn,
            "redact" if !description => Mode::Redact,
            "refuse" => Mode::Refuse,
            _ => {
                let allowed = if description {
                    "off, warn or refuse (a description is not redacted)"
                } else {
                    "off, warn, redact or refuse"
                };
                cx.push(
                    codes::INVALID_VALUE,
                    p,
                    n.line,
                    format!("{p} is {word:?}, which is no scan setting"),
                    format!("write one of {allowed}"),
                );
                return None;
            }
        };
        Some(m)
    };
    if !matches!(node.kind, Kind::Map(_)) {
        return mode(cx, node, path, false)
            .map(Scan::word)
            .unwrap_or_default();
    }
    let Some(fields) = cx.fields(node, path, SCAN_KEYS, codes::PROXY_UNKNOWN_KEY) else {
        return Scan::default();
    };
    let mut scan = Scan::default();
    for (key, value) in fields {
        let p = join(path, key);
        match key {
            "results" => scan.results = mode(cx, value, &p, false),
            _ => scan.descriptions = mode(cx, value, &p, true),
        }
    }
    scan
}
