//! Tools: their definitions, their results, and the handlers behind them.

use std::fmt::Display;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::context::CallContext;

/// A tool as clients see it in `tools/list`.
///
/// ```
/// use mcpserver::Tool;
/// let tool = Tool::new(
///     "echo",
///     "Echo the text back",
///     serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}}),
/// );
/// assert_eq!(tool.name(), "echo");
/// ```
#[derive(Debug, Clone)]
pub struct Tool {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    pub(crate) title: Option<String>,
    pub(crate) annotations: Option<Value>,
    pub(crate) output_schema: Option<Value>,
}

impl Tool {
    /// A tool with its name (`^[a-zA-Z0-9_-]{1,64}$`), a description for the model, and
    /// the JSON Schema of its arguments (an object schema). Checked at `build()`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Tool {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema,
            title: None,
            annotations: None,
            output_schema: None,
        }
    }

    /// A human-readable title (sent to clients of revisions 2025-06-18 and later).
    pub fn title(mut self, title: impl Into<String>) -> Tool {
        self.title = Some(title.into());
        self
    }

    /// Behaviour hints such as `{"readOnlyHint": true}` (revisions 2025-06-18 and later).
    pub fn annotations(mut self, annotations: Value) -> Tool {
        self.annotations = Some(annotations);
        self
    }

    /// The JSON Schema of the handler's structured output (revisions 2025-06-18 and later).
    pub fn output_schema(mut self, schema: Value) -> Tool {
        self.output_schema = Some(schema);
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the tool's arguments.
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The tool as a `tools/list` entry, borrowed (nothing is cloned to serialize it);
    /// `newer` adds the fields of revisions after 2024-11-05.
    pub(crate) fn listed(&self, newer: bool) -> ListedTool<'_> {
        ListedTool {
            name: &self.name,
            title: self.title.as_deref().filter(|_| newer),
            description: &self.description,
            input_schema: &self.input_schema,
            output_schema: self.output_schema.as_ref().filter(|_| newer),
            annotations: self.annotations.as_ref().filter(|_| newer),
        }
    }
}

/// A `tools/list` entry.
#[derive(Serialize)]
pub(crate) struct ListedTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
    description: &'a str,
    #[serde(rename = "inputSchema")]
    input_schema: &'a Value,
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a Value>,
}

/// A `tools/list` result: one page of tools, and the cursor of the next if any.
#[derive(Serialize)]
pub(crate) struct ToolPage<'a> {
    pub tools: Vec<ListedTool<'a>>,
    #[serde(rename = "nextCursor", skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The shape of a result: what the revision a request was served under puts in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// 2024-11-05: content and `isError`; tools with name, description, input schema.
    Legacy = 0,
    /// 2025-06-18 and 2025-11-25: also structured content, tool titles, annotations and
    /// output schemas.
    Newer = 1,
    /// 2026-07-28: as `Newer`, and every result ends with `resultType` and `_meta`
    /// (and a list with its cache hints): the tail the server keeps.
    Stateless = 2,
}

impl Shape {
    /// The shape of a request served under `version`.
    pub(crate) fn of(version: &str) -> Shape {
        if version == crate::PROTOCOL_VERSION {
            Shape::Legacy
        } else if version == crate::REVISION_2026_07_28 {
            Shape::Stateless
        } else {
            Shape::Newer
        }
    }
}

/// The whole `tools/list` result of `tools` on one page, in each [`Shape`]; `tail` is
/// what a stateless result ends with.
pub(crate) fn list_results<'a>(
    tools: impl Iterator<Item = &'a Tool> + Clone,
    tail: &str,
) -> [String; 3] {
    let [legacy, newer] = [false, true].map(|newer| {
        let page = ToolPage {
            tools: tools.clone().map(|t| t.listed(newer)).collect(),
            next_cursor: None,
        };
        serde_json::to_string(&page).expect("a tool list serializes")
    });
    let stateless = with_tail(&newer, tail);
    [legacy, newer, stateless]
}

/// A JSON object's text with `tail` (`,"key":value…`) put before its closing brace.
pub(crate) fn with_tail(object: &str, tail: &str) -> String {
    let open = object.strip_suffix('}').unwrap_or(object);
    let mut text = String::with_capacity(open.len() + tail.len() + 1);
    text.push_str(open);
    text.push_str(tail);
    text.push('}');
    text
}

/// One item of a tool result's `content`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Content {
    /// Text for the model.
    Text {
        /// The text.
        text: String,
    },
    /// A base64-encoded image.
    Image {
        /// Base64 data.
        data: String,
        /// For example `image/png`.
        mime_type: String,
    },
    /// An embedded resource (`{"uri": …, "text": …}` or `{"uri": …, "blob": …}`).
    Resource {
        /// The resource object.
        resource: Value,
    },
    /// Base64-encoded audio (revision 2025-03-26 and later: a client of 2024-11-05 may
    /// not know it).
    Audio {
        /// Base64 data.
        data: String,
        /// For example `audio/wav`.
        mime_type: String,
    },
}

impl Content {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Content {
        Content::Text { text: text.into() }
    }

    /// A base64-encoded image, `mime_type` such as `image/png`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Content {
        Content::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An embedded resource (`{"uri": …, "text": …}` or `{"uri": …, "blob": …}`).
    pub fn resource(resource: Value) -> Content {
        Content::Resource { resource }
    }

    /// Base64-encoded audio, `mime_type` such as `audio/wav`.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Content {
        Content::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self {
            Content::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Content::Image { data, mime_type } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("data", data)?;
                map.serialize_entry("mimeType", mime_type)?;
            }
            Content::Resource { resource } => {
                map.serialize_entry("type", "resource")?;
                map.serialize_entry("resource", resource)?;
            }
            Content::Audio { data, mime_type } => {
                map.serialize_entry("type", "audio")?;
                map.serialize_entry("data", data)?;
                map.serialize_entry("mimeType", mime_type)?;
            }
        }
        map.end()
    }
}

/// The result of a tool call: content for the model, and whether the tool failed.
///
/// A failed tool is not a protocol error: the model reads `isError` and the text, and
/// can correct itself.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ToolResult {
    /// What the tool produced.
    pub content: Vec<Content>,
    /// True when the tool failed; `content` says why.
    pub is_error: bool,
    /// Structured output matching the tool's output schema (revisions 2025-06-18 and later;
    /// clients of 2024-11-05 get the content only).
    pub structured_content: Option<Value>,
}

impl ToolResult {
    /// A successful result with one text item.
    pub fn text(text: impl Into<String>) -> ToolResult {
        ToolResult::new(vec![Content::text(text)])
    }

    /// A failed result (`isError: true`) with one text item saying why.
    pub fn error(text: impl Into<String>) -> ToolResult {
        ToolResult {
            content: vec![Content::text(text)],
            is_error: true,
            structured_content: None,
        }
    }

    /// A successful result with the given content.
    pub fn new(content: Vec<Content>) -> ToolResult {
        ToolResult {
            content,
            is_error: false,
            structured_content: None,
        }
    }

    /// Adds structured output.
    pub fn with_structured(mut self, value: Value) -> ToolResult {
        self.structured_content = Some(value);
        self
    }

    /// The first text item, if any.
    pub fn first_text(&self) -> Option<&str> {
        self.content.iter().find_map(|c| match c {
            Content::Text { text } => Some(text.as_str()),
            _ => None,
        })
    }

    /// Writes the result as `shape` has it; `server_meta` is a stateless result's
    /// `_meta`.
    pub(crate) fn write_json(
        &self,
        out: &mut impl std::io::Write,
        shape: Shape,
        server_meta: &RawValue,
    ) -> std::io::Result<()> {
        struct Wire<'a>(&'a ToolResult, Shape, &'a RawValue);
        impl Serialize for Wire<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("content", &self.0.content)?;
                if self.0.is_error {
                    map.serialize_entry("isError", &true)?;
                }
                if self.1 != Shape::Legacy
                    && let Some(v) = &self.0.structured_content
                {
                    map.serialize_entry("structuredContent", v)?;
                }
                if self.1 == Shape::Stateless {
                    map.serialize_entry("resultType", "complete")?;
                    map.serialize_entry("_meta", self.2)?;
                }
                map.end()
            }
        }
        let newer = shape != Shape::Legacy;
        if self
            .content
            .iter()
            .all(|c| matches!(c, Content::Text { .. }))
            && !(newer && self.structured_content.is_some())
        {
            out.write_all(b"{\"content\":[")?;
            for (i, c) in self.content.iter().enumerate() {
                if let Content::Text { text } = c {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    out.write_all(b"{\"type\":\"text\",\"text\":")?;
                    write_json_str(out, text)?;
                    out.write_all(b"}")?;
                }
            }
            out.write_all(b"]")?;
            if self.is_error {
                out.write_all(b",\"isError\":true")?;
            }
            if shape == Shape::Stateless {
                out.write_all(b",\"resultType\":\"complete\",\"_meta\":")?;
                out.write_all(server_meta.get().as_bytes())?;
            }
            return out.write_all(b"}");
        }
        serde_json::to_writer(out, &Wire(self, shape, server_meta)).map_err(std::io::Error::from)
    }
}

/// Why a handler did not produce a result.
///
/// Handlers return `Err("why")`, `Err(format!(…))`, a `CallError`, or use `?` on an
/// `std::io::Error`, a `serde_json::Error` or a boxed error: each converts into
/// [`CallError::Failed`]. Other errors convert with `.map_err(CallError::failed)`.
/// A handler that checks its arguments itself (a host's router, say) returns
/// [`CallError::InvalidArguments`] to get the protocol's -32602 answer.
///
/// ```
/// use mcpserver::CallError;
/// let e: CallError = "the disk is on fire".into();
/// assert_eq!(e.to_string(), "the disk is on fire");
/// let e = CallError::invalid_arguments("`n` must be positive");
/// assert_eq!(e.to_string(), "invalid arguments: `n` must be positive");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// The arguments do not fit the tool: answered with JSON-RPC error -32602 (or, under
    /// revision 2025-11-25, an `isError` result).
    InvalidArguments(String),
    /// The tool ran and failed: answered with a result with `isError: true` and this text.
    Failed(String),
}

impl CallError {
    /// Arguments that do not fit the tool.
    pub fn invalid_arguments(why: impl Into<String>) -> CallError {
        CallError::InvalidArguments(why.into())
    }

    /// A tool failure; takes any `Display` error, so `.map_err(CallError::failed)` works
    /// on every error type.
    pub fn failed(why: impl Display) -> CallError {
        CallError::Failed(why.to_string())
    }
}

impl Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::InvalidArguments(why) => write!(f, "invalid arguments: {why}"),
            CallError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for CallError {}

impl From<String> for CallError {
    fn from(why: String) -> CallError {
        CallError::Failed(why)
    }
}

impl From<&str> for CallError {
    fn from(why: &str) -> CallError {
        CallError::Failed(why.to_owned())
    }
}

impl From<std::io::Error> for CallError {
    fn from(e: std::io::Error) -> CallError {
        CallError::failed(e)
    }
}

impl From<serde_json::Error> for CallError {
    fn from(e: serde_json::Error) -> CallError {
        CallError::failed(e)
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for CallError {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> CallError {
        CallError::failed(e)
    }
}

impl From<CallError> for Outcome {
    fn from(e: CallError) -> Outcome {
        match e {
            CallError::InvalidArguments(why) => Outcome::BadArguments(why),
            CallError::Failed(why) => Outcome::Failed(why),
        }
    }
}

/// What a handler produced, before the server turns it into an answer.
pub(crate) enum Outcome {
    Done(ToolResult),
    Failed(String),
    BadArguments(String),
}

/// A tool's handler, given the JSON text of the call's arguments (an object).
pub(crate) type Handler = Box<dyn Fn(&str, &CallContext) -> Outcome + Send + Sync>;

pub(crate) fn typed<A, E, F>(f: F) -> Handler
where
    A: DeserializeOwned,
    E: Into<CallError>,
    F: Fn(A, &CallContext) -> Result<ToolResult, E> + Send + Sync + 'static,
{
    Box::new(move |raw, ctx| match serde_json::from_str::<A>(raw) {
        Ok(args) => match f(args, ctx) {
            Ok(result) => Outcome::Done(result),
            Err(e) => e.into().into(),
        },
        Err(e) => Outcome::BadArguments(e.to_string()),
    })
}

/// Plain text is written on in runs of at most this many bytes, so that a long text
/// reaches the client while the rest is still being scanned.
const WRITE_RUN: usize = 16 * 1024;

/// A JSON string, escaped as serde_json does, skipping 8 plain bytes at a time.
fn write_json_str(out: &mut impl std::io::Write, s: &str) -> std::io::Result<()> {
    let b = s.as_bytes();
    out.write_all(b"\"")?;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        if i + 8 <= b.len() {
            let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            if crate::swar::string_special(w) == 0 {
                i += 8;
                if i - start >= WRITE_RUN {
                    out.write_all(&b[start..i])?;
                    start = i;
                }
                continue;
            }
        }
        let c = b[i];
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            c if c < 0x20 => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.write_all(&b[start..i])?;
        if esc.is_empty() {
            write!(out, "\\u{:04x}", c)?;
        } else {
            out.write_all(esc)?;
        }
        i += 1;
        start = i;
    }
    out.write_all(&b[start..])?;
    out.write_all(b"\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, s).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn string_escaping_matches_serde_json_at_every_offset() {
        let specials = [
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}', 'é', '€',
            '\u{2028}', '😀', ' ', '~',
        ];
        for len in 0..20 {
            for at in 0..len {
                for c in specials {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    assert_eq!(ours(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
                }
            }
        }
        let all: String = (0u32..0x80).filter_map(char::from_u32).collect();
        assert_eq!(ours(&all), serde_json::to_string(&all).unwrap());
    }

    /// Long plain text leaves in runs of `WRITE_RUN` bytes (so the client reads while the
    /// rest is scanned); escapes before, on and after a run's end still come out right.
    #[test]
    fn long_text_is_written_in_runs_and_escaped_as_serde_would() {
        struct Writes(Vec<usize>, Vec<u8>);
        impl std::io::Write for Writes {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.push(b.len());
                self.1.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let plain = "a".repeat(3 * WRITE_RUN + 5);
        let mut w = Writes(Vec::new(), Vec::new());
        write_json_str(&mut w, &plain).unwrap();
        assert_eq!(w.1, serde_json::to_vec(&plain).unwrap());
        assert!(w.0.iter().all(|&n| n <= WRITE_RUN), "{:?}", w.0);
        for at in [
            1,
            WRITE_RUN - 1,
            WRITE_RUN,
            WRITE_RUN + 1,
            2 * WRITE_RUN + 7,
        ] {
            let mut s = plain.clone().into_bytes();
            s[at] = b'"';
            s[at + 3] = b'\n';
            let s = String::from_utf8(s).unwrap();
            assert_eq!(
                ours(&s),
                serde_json::to_string(&s).unwrap(),
                "escape at {at}"
            );
        }
    }

    #[test]
    fn text_results_are_written_as_serde_would() {
        for result in [
            ToolResult::text("a\"b"),
            ToolResult::error("bad\nthing"),
            ToolResult::new(vec![Content::text("x"), Content::text("y")]),
            ToolResult::new(vec![]),
            ToolResult::text("s").with_structured(serde_json::json!({"k": 1})),
        ] {
            let meta = RawValue::from_string(r#"{"k":"v"}"#.into()).unwrap();
            for shape in [Shape::Legacy, Shape::Newer, Shape::Stateless] {
                let mut fast = Vec::new();
                result.write_json(&mut fast, shape, &meta).unwrap();
                let v: Value = serde_json::from_slice(&fast).unwrap();
                let mut want = serde_json::json!({"content": result.content});
                if result.is_error {
                    want["isError"] = true.into();
                }
                if shape != Shape::Legacy
                    && let Some(s) = &result.structured_content
                {
                    want["structuredContent"] = s.clone();
                }
                if shape == Shape::Stateless {
                    want["resultType"] = "complete".into();
                    want["_meta"] = serde_json::json!({"k": "v"});
                }
                assert_eq!(v, want, "{shape:?}");
            }
        }
    }
}
