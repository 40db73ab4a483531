//! What a request's `_meta` says of its era, read without allocating: the revision it
//! names, whether the client's capabilities are there, the client's name, and whether
//! anything else is in it. Read by serde here, or by the scanner (`scan.rs`) on its way
//! through a `tools/call`; judged by `era.rs`. It imports nothing of the crate.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The `_meta` key that names a request's revision (stateless era).
pub(crate) const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// The client as a request's `_meta` names it, borrowed from the line.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct NamedClient<'a> {
    #[serde(borrow, default)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub version: Cow<'a, str>,
}

/// A request's `_meta` as the era is judged by it, borrowed from the line: read in one
/// pass without allocating (a stateless call pays no allocation for it), by serde here or,
/// for the common shape of a `tools/call`, by the scanner (`scan.rs`) as it reads the line.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct MetaRead<'a> {
    pub version: Option<Cow<'a, str>>,
    /// `clientCapabilities` is there, and an object.
    pub capabilities_object: bool,
    pub client_info: Option<NamedClient<'a>>,
    /// It has members other than these three (a `traceparent`, a vendor's key).
    pub others: bool,
}

/// A string, borrowed from the line unless it has escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

pub(crate) const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";

impl<'de> Deserialize<'de> for MetaRead<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = MetaRead<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut meta = MetaRead::default();
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        VERSION_KEY => meta.version = Some(map.next_value::<Text<'de>>()?.0),
                        CAPABILITIES_KEY => {
                            let value: &RawValue = map.next_value()?;
                            meta.capabilities_object = value.get().starts_with('{');
                        }
                        CLIENT_INFO_KEY => meta.client_info = map.next_value()?,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            meta.others = true;
                        }
                    }
                }
                Ok(meta)
            }
        }
        d.deserialize_map(Members)
    }
}

/// `_meta` without the members a stateless request's revision, capabilities and client
/// are read from ([`CallContext::meta`](crate::CallContext::meta) of such a call), or
/// `None` when nothing else is in it.
pub(crate) fn meta_beyond_protocol(text: &str, others: bool) -> Option<serde_json::Value> {
    if !others {
        return None;
    }
    let mut meta: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    for key in [VERSION_KEY, CAPABILITIES_KEY, CLIENT_INFO_KEY] {
        meta.remove(key);
    }
    Some(serde_json::Value::Object(meta))
}

#[derive(Deserialize)]
struct ParamsMeta<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// The `_meta` text of a request's params, when the params may name a revision (a quick
/// look for the key first: a handshake request pays one substring search).
pub(crate) fn params_meta(params: Option<&RawValue>) -> Option<&str> {
    let params = params?.get();
    if !params.contains(VERSION_KEY) {
        return None;
    }
    serde_json::from_str::<ParamsMeta<'_>>(params)
        .ok()?
        .meta
        .map(RawValue::get)
}
