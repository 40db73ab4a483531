//! JSON-RPC 2.0 as MCP uses it: message classification, ids, error codes and the
//! compact one-line encoding of answers. The checks of a message's members (envelope,
//! version, id, method, params) serve the server's classification here and a client's
//! in `wire.rs`.

use std::borrow::Cow;
use std::io::{self, Write};

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

pub use crate::id::RequestId;

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters: unknown tool, arguments that do not fit, bad cursor.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// A request other than `initialize` or `ping` came before `initialize`.
pub const SERVER_NOT_INITIALIZED: i64 = -32002;
/// A tool call came while `max_concurrency` calls were running; retry it later.
pub const SERVER_BUSY: i64 = -32001;
/// As [`SERVER_BUSY`], for a request of revision 2026-07-28, which keeps
/// implementation-defined codes out of the JSON-RPC reserved range.
pub const SERVER_BUSY_STATELESS: i64 = -31001;
/// The revision a request names is not served (revision 2026-07-28); `data` has
/// `supported` (every revision served) and `requested`.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// A request needs a client capability it did not declare (revision 2026-07-28).
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;

/// Every member of a message, kept as raw JSON so that a bad member can be reported
/// against the id when the id itself is fine.
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub error: Option<&'a RawValue>,
}

/// The params of `tools/call`, as the careful path reads them.
#[derive(Deserialize)]
pub(crate) struct CallParams<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub arguments: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<&'a RawValue>,
}

/// A `tools/call` whose params are read: the tool's name and JSON texts of its members.
pub(crate) struct Call<'a> {
    pub name: Cow<'a, str>,
    pub arguments: Option<&'a str>,
    pub meta: Option<&'a str>,
    /// `_meta` as the era is judged by it, when the scanner read it already.
    pub meta_read: Option<crate::meta::MetaRead<'a>>,
}

impl<'a> From<CallParams<'a>> for Call<'a> {
    fn from(p: CallParams<'a>) -> Call<'a> {
        Call {
            name: p.name,
            arguments: p.arguments.map(RawValue::get),
            meta: p.meta.map(RawValue::get),
            meta_read: None,
        }
    }
}

/// Deserializes a member that is present (even `null`) as `Some(raw)`.
fn raw_keep_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// What one input line turned out to be.
pub(crate) enum Message<'a> {
    Request {
        id: RequestId,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    /// A `tools/call` request whose params are already read.
    Call { id: RequestId, call: Call<'a> },
    /// An answer from the client; this server sends no requests, so it is dropped.
    Response,
    /// Not a valid message: answer with this error (id when it could be read).
    Invalid(ErrorAnswer),
}

/// An error to answer with.
#[derive(Debug)]
pub(crate) struct ErrorAnswer {
    pub id: Option<RequestId>,
    pub code: i64,
    pub message: String,
    /// The error's `data`, as JSON text.
    pub data: Option<String>,
}

impl ErrorAnswer {
    pub(crate) fn new(id: Option<RequestId>, code: i64, message: impl Into<String>) -> Self {
        ErrorAnswer {
            id,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` (JSON text).
    pub(crate) fn with_data(mut self, data: String) -> Self {
        self.data = Some(data);
        self
    }
}

/// Why a line is not a JSON-RPC message: the error code and what is wrong, without the
/// words that say who reads it (the server answers "invalid request: …", a client reads
/// "invalid message: …"), and the id when it could be read.
pub(crate) struct Malformed {
    pub id: Option<RequestId>,
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    pub detail: Cow<'static, str>,
}

impl Malformed {
    #[cold]
    fn new(id: Option<RequestId>, code: i64, detail: impl Into<Cow<'static, str>>) -> Self {
        Malformed {
            id,
            code,
            detail: detail.into(),
        }
    }

    /// The server's answer to the line.
    #[cold]
    pub(crate) fn into_answer(self) -> ErrorAnswer {
        let kind = match self.code {
            PARSE_ERROR => "parse error",
            _ => "invalid request",
        };
        ErrorAnswer::new(self.id, self.code, format!("{kind}: {}", self.detail))
    }

    /// What a client is told about a line its server sent.
    #[cold]
    pub(crate) fn into_text(self) -> String {
        let kind = match self.code {
            PARSE_ERROR => "parse error",
            _ => "invalid message",
        };
        format!("{kind}: {}", self.detail)
    }
}

/// The line as the text of a JSON object: it starts with `{` and is valid UTF-8 (whether
/// it is valid JSON is for the parse to say).
#[inline]
pub(crate) fn object_text(line: &[u8]) -> Result<&str, Malformed> {
    if !starts_an_object(line) {
        return Err(not_an_object(line));
    }
    std::str::from_utf8(line).map_err(|_| not_utf8())
}

/// A derived struct would also accept a JSON array (positionally): refuse it first.
#[inline]
fn starts_an_object(line: &[u8]) -> bool {
    line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// serde_json does not check the UTF-8 of members it skips: the whole line is checked.
#[cold]
fn not_utf8() -> Malformed {
    Malformed::new(None, PARSE_ERROR, "the line is not valid UTF-8")
}

#[cold]
fn not_an_object(line: &[u8]) -> Malformed {
    // serde_json does not check the UTF-8 of strings it skips: check the line first.
    let (code, what) = match std::str::from_utf8(line) {
        Err(_) => (PARSE_ERROR, "the line is not valid UTF-8"),
        Ok(text) => match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) if text.trim_ascii_start().starts_with('[') => (
                INVALID_REQUEST,
                "batches (JSON arrays) are not supported; send one message per line",
            ),
            Ok(_) => (INVALID_REQUEST, "a message must be a JSON object"),
            Err(_) => (PARSE_ERROR, "the line is not valid JSON"),
        },
    };
    Malformed::new(None, code, what)
}

/// Reads the members of an object's text; the version and the id are the caller's to
/// check (a client accepts a `null` id in an error answer, the server no `null` id).
pub(crate) fn envelope(text: &str) -> Result<Envelope<'_>, Malformed> {
    serde_json::from_str(text).map_err(|e| {
        let (code, what) = match e.classify() {
            serde_json::error::Category::Data => (
                INVALID_REQUEST,
                "a message must be a single JSON object (batches are not supported)",
            ),
            _ => (PARSE_ERROR, "the line is not valid JSON"),
        };
        Malformed::new(None, code, format!("{what} ({e})"))
    })
}

impl<'a> Envelope<'a> {
    /// Checks `"jsonrpc":"2.0"`; `id` is the message's, for the error.
    pub(crate) fn check_version(&self, id: &Option<RequestId>) -> Result<(), Malformed> {
        if self.jsonrpc.map(RawValue::get) == Some("\"2.0\"") {
            return Ok(());
        }
        Err(Malformed::new(
            id.clone(),
            INVALID_REQUEST,
            "\"jsonrpc\" must be \"2.0\"",
        ))
    }

    /// The request's method and params (`null` params count as none): a string, and an
    /// object or an array.
    pub(crate) fn method_and_params(
        &self,
        method: &'a RawValue,
        id: &Option<RequestId>,
    ) -> Result<(Cow<'a, str>, Option<&'a RawValue>), Malformed> {
        let method = serde_json::from_str::<Cow<'a, str>>(method.get()).map_err(|_| {
            Malformed::new(id.clone(), INVALID_REQUEST, "\"method\" must be a string")
        })?;
        let params = self.params.filter(|p| p.get() != "null");
        if let Some(p) = params
            && !(p.get().starts_with('{') || p.get().starts_with('['))
        {
            return Err(Malformed::new(
                id.clone(),
                INVALID_REQUEST,
                "\"params\" must be an object or an array",
            ));
        }
        Ok((method, params))
    }
}

/// Reads an id: MCP allows strings and integers only.
pub(crate) fn parse_id(raw: &RawValue) -> Result<RequestId, Malformed> {
    RequestId::from_raw(raw).ok_or_else(|| {
        Malformed::new(
            None,
            INVALID_REQUEST,
            format!("id {} is not a string or an integer", raw.get()),
        )
    })
}

pub(crate) fn classify(line: &[u8]) -> Message<'_> {
    // `object_text`, spelled out: returning a `Result` of a `Malformed` from here cost
    // the fast path 7 instructions per call (measured).
    if !starts_an_object(line) {
        return Message::Invalid(not_an_object(line).into_answer());
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Message::Invalid(not_utf8().into_answer());
    };
    // Fast path: a well-formed tools/call, params included, in one pass.
    if let Some(c) = crate::scan::tools_call(text) {
        return Message::Call {
            id: c.id,
            call: Call {
                name: Cow::Borrowed(c.name),
                arguments: c.arguments,
                meta: c.meta,
                meta_read: c.meta_read,
            },
        };
    }
    match classify_members(text) {
        Ok(message) => message,
        Err(malformed) => Message::Invalid(malformed.into_answer()),
    }
}

/// The careful path: every member read by serde, every problem worded.
fn classify_members(text: &str) -> Result<Message<'_>, Malformed> {
    let env = envelope(text)?;
    let id = env.id.map(parse_id).transpose()?;
    env.check_version(&id)?;
    let Some(method) = env.method else {
        if id.is_some() && (env.result.is_some() || env.error.is_some()) {
            return Ok(Message::Response);
        }
        return Err(Malformed::new(id, INVALID_REQUEST, "\"method\" is missing"));
    };
    let (method, params) = env.method_and_params(method, &id)?;
    Ok(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method, params },
    })
}

/// Writes `{"jsonrpc":"2.0","id":…,"result":` — the caller writes the result and `}\n`.
pub(crate) fn write_result_head(out: &mut impl Write, id: &RequestId) -> io::Result<()> {
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
    id.write_json(out)?;
    out.write_all(b",\"result\":")
}

pub(crate) fn write_error(out: &mut impl Write, err: &ErrorAnswer) -> io::Result<()> {
    write_error_parts(
        out,
        err.id.as_ref(),
        err.code,
        &err.message,
        err.data.as_deref(),
    )
}

/// Writes `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…,"data":…}}` and its
/// `\n` (`data`, JSON text, when given).
pub(crate) fn write_error_parts(
    out: &mut impl Write,
    id: Option<&RequestId>,
    code: i64,
    message: &str,
    data: Option<&str>,
) -> io::Result<()> {
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
    match id {
        Some(id) => id.write_json(out)?,
        None => out.write_all(b"null")?,
    }
    write!(out, ",\"error\":{{\"code\":{code},\"message\":")?;
    serde_json::to_writer(&mut *out, message)?;
    if let Some(data) = data {
        out.write_all(b",\"data\":")?;
        out.write_all(data.as_bytes())?;
    }
    out.write_all(b"}}\n")
}

/// The `error` member of an error answer, as a client reads it.
#[derive(Deserialize)]
pub(crate) struct ErrorObject<'a> {
    pub code: i64,
    pub message: String,
    #[serde(borrow, default, deserialize_with = "raw_keep_null")]
    pub data: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_written_back_as_json() {
        for (id, json) in [
            (RequestId::Number(0), "0"),
            (RequestId::Number(-7), "-7"),
            (RequestId::Number(i64::MAX), "9223372036854775807"),
            (RequestId::Number(i64::MIN), "-9223372036854775808"),
            (RequestId::String("a\"b\n".into()), r#""a\"b\n""#),
        ] {
            let mut out = Vec::new();
            id.write_json(&mut out).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), json);
        }
    }

    fn invalid(line: &str) -> ErrorAnswer {
        match classify(line.as_bytes()) {
            Message::Invalid(e) => e,
            _ => panic!("{line} should be invalid"),
        }
    }

    #[test]
    fn ids_keep_their_type() {
        match classify(br#"{"jsonrpc":"2.0","id":"7","method":"ping"}"#) {
            Message::Request { id, .. } => assert_eq!(id, RequestId::String("7".into())),
            _ => panic!(),
        }
        match classify(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#) {
            Message::Request { id, .. } => assert_eq!(id, RequestId::Number(7)),
            _ => panic!(),
        }
    }

    #[test]
    fn classifies_bad_messages() {
        assert_eq!(invalid("{").code, PARSE_ERROR);
        assert_eq!(invalid("[]").code, INVALID_REQUEST);
        assert_eq!(invalid("42").code, INVALID_REQUEST);
        assert_eq!(
            invalid(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).code,
            INVALID_REQUEST
        );
        let e = invalid(r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#);
        assert_eq!(
            (e.code, e.id),
            (INVALID_REQUEST, Some(RequestId::Number(3)))
        );
        for id in ["null", "1.5", "true", "{}"] {
            let e = invalid(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
            assert_eq!((e.code, e.id), (INVALID_REQUEST, None), "id {id}");
        }
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).code,
            INVALID_REQUEST
        );
        assert_eq!(
            invalid(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#).code,
            INVALID_REQUEST
        );
        assert_eq!(invalid("\"\u{fffd}\"").code, INVALID_REQUEST);
        let bad_utf8_string: &[u8] = b"\"o{\xfe\"";
        assert!(matches!(
            classify(bad_utf8_string),
            Message::Invalid(ErrorAnswer {
                code: PARSE_ERROR,
                ..
            })
        ));
        assert!(matches!(
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"),
            Message::Invalid(ErrorAnswer {
                code: PARSE_ERROR,
                ..
            })
        ));
    }

    #[test]
    fn responses_and_notifications() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Message::Response
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Message::Notification { .. }
        ));
    }

    #[test]
    fn error_lines_are_compact_json() {
        let mut out = Vec::new();
        let e = ErrorAnswer::new(Some(RequestId::String("a\nb".into())), -1, "x\ny");
        write_error(&mut out, &e).unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "a\nb");
    }
}
