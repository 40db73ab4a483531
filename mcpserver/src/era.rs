//! Which revisions a server serves, and which era a request is in.
//!
//! MCP has two eras. The handshake era (2024-11-05 to 2025-11-25) agrees a revision in
//! `initialize` and judges every later request by it. The stateless era (2026-07-28)
//! has no handshake: each request names its revision in
//! `_meta["io.modelcontextprotocol/protocolVersion"]` and is served by itself. A server
//! serves both by default: a request whose `_meta` names a revision is judged here;
//! any other request goes the handshake way, exactly as before there was a second era.

use std::sync::Arc;

use crate::context::ClientInfo;
use crate::id::RequestId;
use crate::jsonrpc::{self, ErrorAnswer};
pub(crate) use crate::meta::{
    MetaRead, NamedClient, VERSION_KEY, meta_beyond_protocol, params_meta,
};
use crate::{PROTOCOL_VERSION, REVISION_2025_06_18, REVISION_2025_11_25, REVISION_2026_07_28};

/// Every revision this library knows, oldest first, with its era.
const KNOWN: [(&str, Era); 4] = [
    (PROTOCOL_VERSION, Era::Handshake),
    (REVISION_2025_06_18, Era::Handshake),
    (REVISION_2025_11_25, Era::Handshake),
    (REVISION_2026_07_28, Era::Stateless),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Handshake,
    Stateless,
}

/// The revisions a server serves: some of each era, or of one only.
#[derive(Debug, Clone)]
pub(crate) struct Revisions {
    /// Handshake revisions, oldest first: what `initialize` may agree.
    pub handshake: Vec<&'static str>,
    /// Stateless revisions, oldest first: what a request's `_meta` may name.
    pub stateless: Vec<&'static str>,
}

impl Revisions {
    /// Today's default: 2024-11-05 (with 2025-06-18 and 2025-11-25 when the host
    /// accepts newer handshake revisions) and 2026-07-28.
    pub(crate) fn default_with(accept_newer: bool) -> Revisions {
        let handshake = if accept_newer {
            vec![PROTOCOL_VERSION, REVISION_2025_06_18, REVISION_2025_11_25]
        } else {
            vec![PROTOCOL_VERSION]
        };
        Revisions {
            handshake,
            stateless: vec![REVISION_2026_07_28],
        }
    }

    /// The revisions named, or what is wrong with the list.
    pub(crate) fn named(names: &[String]) -> Result<Revisions, String> {
        let mut revisions = Revisions {
            handshake: Vec::new(),
            stateless: Vec::new(),
        };
        for name in names {
            let Some((known, era)) = KNOWN.iter().find(|(k, _)| k == name) else {
                return Err(format!(
                    "unknown protocol revision {name:?}: this library serves {}",
                    KNOWN.map(|(k, _)| k).join(", ")
                ));
            };
            let list = match era {
                Era::Handshake => &mut revisions.handshake,
                Era::Stateless => &mut revisions.stateless,
            };
            if !list.contains(known) {
                list.push(known);
            }
        }
        if revisions.handshake.is_empty() && revisions.stateless.is_empty() {
            return Err("no protocol revision to serve: name at least one".into());
        }
        revisions.handshake.sort_unstable();
        revisions.stateless.sort_unstable();
        Ok(revisions)
    }

    /// What `initialize` agrees when the client asks for `asked`: that revision when it
    /// is served, else the oldest served (2024-11-05, the wire contract, by default);
    /// `None` for a server of the stateless era only.
    pub(crate) fn agree(&self, asked: &str) -> Option<&'static str> {
        self.handshake
            .iter()
            .find(|v| **v == asked)
            .or(self.handshake.first())
            .copied()
    }

    /// The revisions a request may name, newest first: `server/discover`'s
    /// `supportedVersions` and the `supported` list of error -32022. The handshake
    /// revisions are not among them: they are agreed in `initialize`, not named per
    /// request (as the official TypeScript SDK answers too).
    pub(crate) fn supported(&self) -> Vec<&'static str> {
        self.stateless.iter().rev().copied().collect()
    }

    /// The stateless revision `version` names, if this server serves it.
    fn stateless(&self, version: &str) -> Option<&'static str> {
        self.stateless.iter().find(|v| **v == version).copied()
    }
}

/// A request of the stateless era that this server serves: its revision and client.
#[derive(Debug)]
pub(crate) struct Stateless<'a> {
    pub version: &'static str,
    pub client: Option<NamedClient<'a>>,
    /// `_meta` has members beyond the revision, capabilities and client.
    pub other_meta: bool,
}

impl NamedClient<'_> {
    /// The shared [`ClientInfo`], reusing `last` when the client named itself the same
    /// way (a client names itself on every request: one allocation per client, not per
    /// call).
    pub(crate) fn share(self, last: &mut Option<Arc<ClientInfo>>) -> Arc<ClientInfo> {
        if let Some(info) = last
            && info.name == self.name
            && info.version == self.version
        {
            return info.clone();
        }
        let info = Arc::new(ClientInfo {
            name: self.name.into_owned(),
            version: self.version.into_owned(),
        });
        *last = Some(info.clone());
        info
    }
}

/// How a request is to be served.
pub(crate) enum Judged<'a> {
    /// The handshake way: `_meta` names no revision (or this server serves no stateless
    /// revision, or names the one the session agreed in `initialize`).
    Handshake,
    /// Statelessly, as the revision its `_meta` names.
    Stateless(Stateless<'a>),
    /// Refused before any method: an unknown revision (-32022) or a required `_meta`
    /// field missing (-32602).
    Refused(ErrorAnswer),
}

/// Judges a request by its `_meta` text. `agreed` is the revision the session agreed in
/// `initialize`, if it did.
pub(crate) fn judge<'a>(
    revisions: &Revisions,
    id: &RequestId,
    meta: Option<&'a str>,
    agreed: Option<&str>,
) -> Judged<'a> {
    let Some(meta) = meta else {
        return Judged::Handshake;
    };
    if revisions.stateless.is_empty() || !meta.contains(VERSION_KEY) {
        return Judged::Handshake;
    }
    let Ok(read) = serde_json::from_str::<MetaRead<'_>>(meta) else {
        return Judged::Handshake;
    };
    judge_read(revisions, id, read, agreed)
}

/// [`judge`] of a `_meta` already read (by the scanner).
pub(crate) fn judge_read<'a>(
    revisions: &Revisions,
    id: &RequestId,
    read: MetaRead<'a>,
    agreed: Option<&str>,
) -> Judged<'a> {
    if revisions.stateless.is_empty() {
        return Judged::Handshake;
    }
    let Some(asked) = read.version else {
        return Judged::Handshake;
    };
    let Some(version) = revisions.stateless(&asked) else {
        if agreed == Some(&*asked) {
            return Judged::Handshake;
        }
        return Judged::Refused(unsupported(revisions, Some(id.clone()), &asked));
    };
    if !read.capabilities_object {
        return Judged::Refused(ErrorAnswer::new(
            Some(id.clone()),
            jsonrpc::INVALID_PARAMS,
            format!(
                "invalid params: a {version} request needs \"_meta\".\"io.modelcontextprotocol/clientCapabilities\" (an object, {{}} when the client declares none)"
            ),
        ));
    }
    Judged::Stateless(Stateless {
        version,
        client: read.client_info,
        other_meta: read.others,
    })
}

/// Error -32022: `asked` is not served; `data` lists what is.
pub(crate) fn unsupported(
    revisions: &Revisions,
    id: Option<RequestId>,
    asked: &str,
) -> ErrorAnswer {
    let supported = revisions.supported();
    let data = serde_json::json!({ "supported": supported, "requested": asked });
    ErrorAnswer::new(
        id,
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version: {asked:?} is not served here; this server serves {}",
            supported.join(", ")
        ),
    )
    .with_data(data.to_string())
}

/// From 2025-11-25 on, arguments that do not fit a tool are an `isError` result the
/// model can read and fix, not a protocol error.
pub(crate) fn misfit_arguments_are_results(version: &str) -> bool {
    version == REVISION_2025_11_25 || version == REVISION_2026_07_28
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> RequestId {
        RequestId::Number(1)
    }

    #[test]
    fn requests_without_a_revision_in_meta_go_the_handshake_way() {
        let r = Revisions::default_with(false);
        for meta in [
            None,
            Some("{}"),
            Some(r#"{"traceparent":"00-x"}"#),
            Some("["),
        ] {
            assert!(
                matches!(judge(&r, &id(), meta, None), Judged::Handshake),
                "{meta:?}"
            );
        }
    }

    #[test]
    fn a_served_stateless_revision_needs_client_capabilities() {
        let r = Revisions::default_with(false);
        let ok = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"9"}}"#;
        match judge(&r, &id(), Some(ok), None) {
            Judged::Stateless(s) => {
                assert_eq!(s.version, "2026-07-28");
                assert_eq!(s.client.unwrap().name, "c");
            }
            _ => panic!("served"),
        }
        let missing = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
        match judge(&r, &id(), Some(missing), None) {
            Judged::Refused(e) => {
                assert_eq!(e.code, jsonrpc::INVALID_PARAMS);
                assert!(e.message.contains("clientCapabilities"), "{}", e.message);
            }
            _ => panic!("refused"),
        }
    }

    #[test]
    fn an_unknown_revision_is_refused_with_the_served_ones() {
        let r = Revisions::default_with(true);
        let meta = r#"{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}"#;
        match judge(&r, &id(), Some(meta), None) {
            Judged::Refused(e) => {
                assert_eq!(e.code, -32022);
                let data: serde_json::Value =
                    serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
                assert_eq!(
                    data,
                    serde_json::json!({
                        "supported": ["2026-07-28"],
                        "requested": "1900-01-01"
                    })
                );
            }
            _ => panic!("refused"),
        }
        // The revision the session agreed in `initialize`, named in `_meta` too.
        let agreed = r#"{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}"#;
        assert!(matches!(
            judge(&r, &id(), Some(agreed), Some("2025-11-25")),
            Judged::Handshake
        ));
        assert!(matches!(
            judge(&r, &id(), Some(agreed), None),
            Judged::Refused(_)
        ));
    }

    #[test]
    fn a_server_of_the_handshake_era_only_ignores_meta() {
        let r = Revisions::named(&["2024-11-05".into()]).unwrap();
        let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        assert!(matches!(
            judge(&r, &id(), Some(meta), None),
            Judged::Handshake
        ));
        assert_eq!(r.agree("2025-11-25"), Some("2024-11-05"));
    }

    #[test]
    fn revisions_are_checked_and_agreed() {
        assert!(Revisions::named(&[]).is_err());
        let e = Revisions::named(&["2025-03-26".into()]).unwrap_err();
        assert!(e.contains("2025-03-26") && e.contains("2026-07-28"), "{e}");
        let r = Revisions::named(&["2026-07-28".into(), "2025-11-25".into()]).unwrap();
        assert_eq!(r.agree("2024-11-05"), Some("2025-11-25"));
        assert_eq!(r.supported(), ["2026-07-28"]);
        let modern = Revisions::named(&["2026-07-28".into()]).unwrap();
        assert_eq!(modern.agree("2025-11-25"), None);
    }
}
