//! The wire as the other side sees it: what a client (or a proxy in front of another
//! MCP server) needs to speak to a server over a byte stream, built from the pieces the
//! server itself reads and writes with.
//!
//! - [`LineReader`] splits the server's output into lines ([`Frame`]), with the same
//!   size bound and `\r\n` handling as the server's own input;
//! - [`classify_incoming`] says what a line from a server is ([`Incoming`]): the answer
//!   to a request, an error answer, a request or a notification of the server's own, or
//!   not a valid message (and why);
//! - [`write_request`], [`write_notification`], [`write_result`] and [`write_error`]
//!   write one message each as one compact, `\n`-terminated line;
//! - the error codes are in [`codes`](crate::codes), the ids are [`RequestId`].
//!
//! Nothing here keeps state: matching answers to requests, timeouts and the `initialize`
//! handshake are the client's. A complete exchange with a [`Server`](crate::Server) over
//! [`memory::pair`](crate::memory::pair):
//!
//! ```
//! use mcpserver::wire::{self, Frame, Incoming, LineReader};
//! use mcpserver::{RequestId, Server, memory};
//! use serde_json::json;
//!
//! let server = Server::builder("demo", "1").build().unwrap();
//! let (client, server_end) = memory::pair();
//! let serving = std::thread::spawn(move || {
//!     let (reader, writer) = server_end.split();
//!     server.serve(reader, writer)
//! });
//! let (from_server, mut to_server) = client.split();
//! let mut lines = LineReader::new(from_server, 1 << 20);
//!
//! let init = json!({
//!     "protocolVersion": "2024-11-05",
//!     "capabilities": {},
//!     "clientInfo": {"name": "demo-client", "version": "1"}
//! });
//! wire::write_request(&mut to_server, &RequestId::Number(1), "initialize", Some(&init))?;
//! let Frame::Line(line) = lines.read_frame()? else { panic!("the server answers") };
//! match wire::classify_incoming(line) {
//!     Incoming::Response { id, result } => {
//!         assert_eq!(id, RequestId::Number(1));
//!         let result: serde_json::Value = serde_json::from_str(result.get()).unwrap();
//!         assert_eq!(result["protocolVersion"], "2024-11-05");
//!     }
//!     other => panic!("not an answer: {other:?}"),
//! }
//! wire::write_notification(&mut to_server, "notifications/initialized", wire::NO_PARAMS)?;
//!
//! wire::write_request(&mut to_server, &RequestId::Number(2), "nope", wire::NO_PARAMS)?;
//! let Frame::Line(line) = lines.read_frame()? else { panic!("the server answers") };
//! assert!(matches!(
//!     wire::classify_incoming(line),
//!     Incoming::ErrorResponse { id: Some(RequestId::Number(2)), code: mcpserver::codes::METHOD_NOT_FOUND, .. }
//! ));
//!
//! drop(to_server); // end of the server's input: it drains and returns
//! serving.join().unwrap()?;
//! assert_eq!(lines.read_frame()?, Frame::Eof);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::borrow::Cow;
use std::io::{self, Write};

use serde::Serialize;
use serde_json::value::RawValue;

pub use crate::framing::{Frame, LineReader};
use crate::jsonrpc::{self, ErrorObject, INVALID_REQUEST, Malformed, RequestId};

/// What one line from a server is, read by [`classify_incoming`]. Members are borrowed
/// from the line (`params`, `result` and `data` as their JSON text, to be read into
/// whatever type the caller expects).
#[derive(Debug, Clone)]
pub enum Incoming<'a> {
    /// The answer to request `id`: `result` is its JSON text (`null` included).
    Response {
        /// The id of the request answered, with its type (`1` and `"1"` differ).
        id: RequestId,
        /// The result's JSON text.
        result: &'a RawValue,
    },
    /// An error answer. `id` is `None` when the server could not read the request's id
    /// (it sent `"id": null`, as JSON-RPC asks for a line it could not parse).
    ErrorResponse {
        /// The id of the request refused, when the server could read it.
        id: Option<RequestId>,
        /// The error code: see [`codes`](crate::codes) for the ones JSON-RPC and MCP define.
        code: i64,
        /// The error's text.
        message: String,
        /// The error's `data`, when it has any (not `null`).
        data: Option<&'a RawValue>,
    },
    /// A request of the server's own (`ping`, `roots/list`, `sampling/createMessage`, …),
    /// to be answered with [`write_result`] or [`write_error`] under the same `id`.
    Request {
        /// The id to answer with.
        id: RequestId,
        /// The method.
        method: Cow<'a, str>,
        /// The params' JSON text (an object or an array), `None` when absent or `null`.
        params: Option<&'a RawValue>,
    },
    /// A notification (`notifications/tools/list_changed`, `notifications/progress`,
    /// `notifications/message`, …): nothing to answer.
    Notification {
        /// The method.
        method: Cow<'a, str>,
        /// The params' JSON text (an object or an array), `None` when absent or `null`.
        params: Option<&'a RawValue>,
    },
    /// Not a JSON-RPC 2.0 message: not UTF-8, not JSON, not an object, no
    /// `"jsonrpc":"2.0"`, an id that is neither a string nor an integer, a result
    /// without an id, an error without an integer code and a string message, … The text
    /// says which, in a sentence fit for a log line or an error shown to a user.
    Invalid(String),
}

/// Reads one line from a server (a final `\n` or `\r\n` is allowed) as a client sees it.
///
/// A line with `method` is a request (with an id) or a notification (without); a line
/// without one is an answer: `result` with the id of the request it answers, or
/// `error` with an integer `code` and a string `message` (and the id, or `null` when the
/// server could not read it). Anything else is [`Incoming::Invalid`], saying what is
/// wrong. The envelope, the version, the ids, the method and the params are read and
/// checked by the same code as the server's own input, and worded alike.
///
/// ```
/// use mcpserver::RequestId;
/// use mcpserver::wire::{Incoming, classify_incoming};
///
/// match classify_incoming(br#"{"jsonrpc":"2.0","id":"a","result":{"tools":[]}}"#) {
///     Incoming::Response { id, result } => {
///         assert_eq!(id, RequestId::String("a".into()));
///         assert_eq!(result.get(), r#"{"tools":[]}"#);
///     }
///     other => panic!("{other:?}"),
/// }
/// match classify_incoming(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n") {
///     Incoming::Notification { method, params } => {
///         assert_eq!(method, "notifications/tools/list_changed");
///         assert!(params.is_none());
///     }
///     other => panic!("{other:?}"),
/// }
/// match classify_incoming(br#"{"id":1,"result":{}}"#) {
///     Incoming::Invalid(why) => assert_eq!(why, r#"invalid message: "jsonrpc" must be "2.0""#),
///     other => panic!("{other:?}"),
/// }
/// ```
pub fn classify_incoming(line: &[u8]) -> Incoming<'_> {
    match read_incoming(line) {
        Ok(incoming) => incoming,
        Err(malformed) => Incoming::Invalid(malformed.into_text()),
    }
}

fn read_incoming(line: &[u8]) -> Result<Incoming<'_>, Malformed> {
    let text = jsonrpc::object_text(line)?;
    let env = jsonrpc::envelope(text)?;
    if let Some(method) = env.method {
        let id = env.id.map(jsonrpc::parse_id).transpose()?;
        env.check_version(&id)?;
        let (method, params) = env.method_and_params(method, &id)?;
        return Ok(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        });
    }
    // An answer; only an error answer may have a null id.
    let id = match env.id {
        Some(raw) if raw.get() != "null" => Some(jsonrpc::parse_id(raw)?),
        _ => None,
    };
    env.check_version(&id)?;
    let invalid = |id, detail: String| Malformed {
        id,
        code: INVALID_REQUEST,
        detail: detail.into(),
    };
    match (env.result, env.error) {
        (Some(_), Some(_)) => Err(invalid(
            id,
            "an answer has both \"result\" and \"error\"; it must have one".into(),
        )),
        (Some(result), None) => match id {
            Some(id) => Ok(Incoming::Response { id, result }),
            None => Err(invalid(
                None,
                "a \"result\" needs the \"id\" of the request it answers (a string or an integer)"
                    .into(),
            )),
        },
        (None, Some(error)) => match serde_json::from_str::<ErrorObject<'_>>(error.get()) {
            Ok(e) => Ok(Incoming::ErrorResponse {
                id,
                code: e.code,
                message: e.message,
                data: e.data.filter(|d| d.get() != "null"),
            }),
            Err(e) => Err(invalid(
                id,
                format!(
                    "the \"error\" of an answer must be an object with an integer \"code\" and a string \"message\" ({e}), got {}",
                    error.get()
                ),
            )),
        },
        (None, None) => Err(invalid(
            id,
            "\"method\" is missing: a message is a request or a notification (with \"method\") or an answer (with \"result\" or \"error\")"
                .into(),
        )),
    }
}

/// No params, for [`write_request`] and [`write_notification`]: the line has no
/// `params` member.
pub const NO_PARAMS: Option<&'static ()> = None;

/// Writes a request: `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` and `\n`, one
/// compact line, with one `write_all` to `out` (a partial line is never written by
/// this function: an error while serializing `params` writes nothing). Without
/// `params` ([`NO_PARAMS`]) the line has no `params` member.
///
/// `params` must serialize to a JSON object or array (JSON-RPC allows nothing else);
/// anything else is an [`io::ErrorKind::InvalidInput`] error naming the method, and
/// nothing is written. Whitespace line breaks a [`RawValue`] may carry are written as
/// spaces, so the message stays on one line.
///
/// ```
/// use mcpserver::{RequestId, wire};
/// let mut out = Vec::new();
/// let params = serde_json::json!({"name": "echo"});
/// wire::write_request(&mut out, &RequestId::Number(7), "tools/call", Some(&params)).unwrap();
/// assert_eq!(
///     out,
///     b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n"
/// );
/// let err = wire::write_request(&mut out, &RequestId::Number(8), "x", Some(&5)).unwrap_err();
/// assert!(err.to_string().contains("\"x\""), "{err}");
/// ```
pub fn write_request<W, P>(
    out: &mut W,
    id: &RequestId,
    method: &str,
    params: Option<&P>,
) -> io::Result<()>
where
    W: Write + ?Sized,
    P: Serialize + ?Sized,
{
    let mut line = Vec::with_capacity(128);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    id.write_json(&mut line)?;
    line.extend_from_slice(b",\"method\":");
    serde_json::to_writer(&mut line, method)?;
    write_params(&mut line, method, params)?;
    finish(out, line)
}

/// Writes a notification: `{"jsonrpc":"2.0","method":…,"params":…}` and `\n`, as
/// [`write_request`] writes a request (one line, one `write_all`, `params` an object or
/// an array or [`NO_PARAMS`]).
///
/// ```
/// use mcpserver::wire;
/// let mut out = Vec::new();
/// wire::write_notification(&mut out, "notifications/initialized", wire::NO_PARAMS).unwrap();
/// assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
/// ```
pub fn write_notification<W, P>(out: &mut W, method: &str, params: Option<&P>) -> io::Result<()>
where
    W: Write + ?Sized,
    P: Serialize + ?Sized,
{
    let mut line = Vec::with_capacity(96);
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    serde_json::to_writer(&mut line, method)?;
    write_params(&mut line, method, params)?;
    finish(out, line)
}

/// Writes the answer to a server's request `id`: `{"jsonrpc":"2.0","id":…,"result":…}`
/// and `\n` (one line, one `write_all`; an error while serializing `result` writes
/// nothing). `&serde_json::json!({})` answers a `ping`.
///
/// ```
/// use mcpserver::{RequestId, wire};
/// let mut out = Vec::new();
/// wire::write_result(&mut out, &RequestId::String("p1".into()), &serde_json::json!({})).unwrap();
/// assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"id\":\"p1\",\"result\":{}}\n");
/// ```
pub fn write_result<W, T>(out: &mut W, id: &RequestId, result: &T) -> io::Result<()>
where
    W: Write + ?Sized,
    T: Serialize + ?Sized,
{
    let mut line = Vec::with_capacity(96);
    jsonrpc::write_result_head(&mut line, id)?;
    serde_json::to_writer(&mut line, result)
        .map_err(|e| invalid_input(format!("the result does not serialize to JSON: {e}")))?;
    finish(out, line)
}

/// Writes an error answer to a server's request: `{"jsonrpc":"2.0","id":…,"error":
/// {"code":…,"message":…}}` and `\n`, with `"id": null` when `id` is `None` (the
/// request's id could not be read). One line, one `write_all`. The codes JSON-RPC
/// defines are in [`codes`](crate::codes): a request this client does not handle is
/// answered with [`METHOD_NOT_FOUND`](crate::codes::METHOD_NOT_FOUND).
///
/// ```
/// use mcpserver::{RequestId, codes, wire};
/// let mut out = Vec::new();
/// wire::write_error(&mut out, Some(&RequestId::Number(3)), codes::METHOD_NOT_FOUND, "no sampling here").unwrap();
/// assert_eq!(
///     out,
///     b"{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"no sampling here\"}}\n"
/// );
/// ```
pub fn write_error<W>(
    out: &mut W,
    id: Option<&RequestId>,
    code: i64,
    message: &str,
) -> io::Result<()>
where
    W: Write + ?Sized,
{
    let mut line = Vec::with_capacity(64 + message.len());
    jsonrpc::write_error_parts(&mut line, id, code, message, None)?;
    out.write_all(&line)
}

/// Appends `,"params":…` (params that serialize to an object or an array) or nothing.
fn write_params<P: Serialize + ?Sized>(
    line: &mut Vec<u8>,
    method: &str,
    params: Option<&P>,
) -> io::Result<()> {
    let Some(params) = params else {
        return Ok(());
    };
    line.extend_from_slice(b",\"params\":");
    let at = line.len();
    serde_json::to_writer(&mut *line, params).map_err(|e| {
        invalid_input(format!(
            "the params of \"{method}\" do not serialize to JSON: {e}"
        ))
    })?;
    if !matches!(line.get(at), Some(b'{' | b'[')) {
        let got = String::from_utf8_lossy(&line[at..]);
        return Err(invalid_input(format!(
            "the params of \"{method}\" must be a JSON object or array, got {got}"
        )));
    }
    Ok(())
}

/// Closes the message, keeps it on one line, and writes it whole.
fn finish<W: Write + ?Sized>(out: &mut W, mut line: Vec<u8>) -> io::Result<()> {
    // Only a `RawValue` can bring a raw line break, and only as whitespace between
    // tokens (JSON strings escape theirs): a space means the same.
    for byte in &mut line {
        if matches!(*byte, b'\n' | b'\r') {
            *byte = b' ';
        }
    }
    line.extend_from_slice(b"}\n");
    out.write_all(&line)
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{METHOD_NOT_FOUND, Message, classify};
    use serde_json::json;

    fn invalid(line: &[u8]) -> String {
        match classify_incoming(line) {
            Incoming::Invalid(why) => why,
            other => panic!(
                "{} should be invalid, got {other:?}",
                String::from_utf8_lossy(line)
            ),
        }
    }

    #[test]
    fn answers_keep_their_id_type_and_result_text() {
        for (line, want) in [
            (
                &br#"{"jsonrpc":"2.0","id":7,"result":{"a":[1]}}"#[..],
                RequestId::Number(7),
            ),
            (
                br#"{"jsonrpc":"2.0","id":"7","result":{"a":[1]}}"#,
                RequestId::String("7".into()),
            ),
            (
                b" {\"result\":{\"a\":[1]},\"id\":-1,\"jsonrpc\":\"2.0\"}\r\n",
                RequestId::Number(-1),
            ),
        ] {
            match classify_incoming(line) {
                Incoming::Response { id, result } => {
                    assert_eq!(id, want);
                    assert_eq!(result.get(), r#"{"a":[1]}"#);
                }
                other => panic!("{other:?}"),
            }
        }
        match classify_incoming(br#"{"jsonrpc":"2.0","id":1,"result":null}"#) {
            Incoming::Response { result, .. } => assert_eq!(result.get(), "null"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_answers_with_and_without_id_and_data() {
        match classify_incoming(
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"unknown tool \"x\"","data":{"k":1}}}"#,
        ) {
            Incoming::ErrorResponse { id, code, message, data } => {
                assert_eq!(id, Some(RequestId::Number(3)));
                assert_eq!(code, -32602);
                assert_eq!(message, "unknown tool \"x\"");
                assert_eq!(data.map(RawValue::get), Some(r#"{"k":1}"#));
            }
            other => panic!("{other:?}"),
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":null}}"#[..],
            br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}}"#,
        ] {
            match classify_incoming(line) {
                Incoming::ErrorResponse { id, code, data, .. } => {
                    assert_eq!((id, code), (None, -32700));
                    assert!(data.is_none());
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn requests_and_notifications_of_the_server() {
        match classify_incoming(
            br#"{"jsonrpc":"2.0","id":"s-1","method":"roots/list","params":{}}"#,
        ) {
            Incoming::Request { id, method, params } => {
                assert_eq!(id, RequestId::String("s-1".into()));
                assert_eq!(method, "roots/list");
                assert_eq!(params.map(RawValue::get), Some("{}"));
            }
            other => panic!("{other:?}"),
        }
        match classify_incoming(br#"{"jsonrpc":"2.0","id":9,"method":"ping","params":null}"#) {
            Incoming::Request { method, params, .. } => {
                assert_eq!(method, "ping");
                assert!(params.is_none());
            }
            other => panic!("{other:?}"),
        }
        match classify_incoming(
            br#"{"jsonrpc":"2.0","method":"notifications\/progress","params":{"progress":1}}"#,
        ) {
            Incoming::Notification { method, params } => {
                assert_eq!(method, "notifications/progress");
                assert_eq!(params.map(RawValue::get), Some(r#"{"progress":1}"#));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_is_not_a_message_is_said_in_words() {
        for (line, want) in [
            (&b"not json"[..], "parse error: the line is not valid JSON"),
            (
                b"{\"jsonrpc\":\"2.0\",",
                "parse error: the line is not valid JSON",
            ),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\"}",
                "parse error: the line is not valid UTF-8",
            ),
            (
                b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]",
                "invalid message: batches (JSON arrays) are not supported",
            ),
            (b"42", "invalid message: a message must be a JSON object"),
            (
                br#"{"id":1,"result":{}}"#,
                r#"invalid message: "jsonrpc" must be "2.0""#,
            ),
            (
                br#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
                r#"invalid message: "jsonrpc" must be "2.0""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
                "invalid message: id 1.5 is not a string or an integer",
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                "invalid message: id null is not a string or an integer",
            ),
            (
                br#"{"jsonrpc":"2.0","result":{}}"#,
                r#"invalid message: a "result" needs the "id""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
                r#"invalid message: a "result" needs the "id""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
                r#"both "result" and "error""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":"bad","message":"x"}}"#,
                r#"must be an object with an integer "code" and a string "message""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":"oops"}"#,
                r#"got "oops""#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1}"#,
                r#"invalid message: "method" is missing"#,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":5}"#,
                r#"invalid message: "method" must be a string"#,
            ),
            (
                br#"{"jsonrpc":"2.0","method":"x","params":3}"#,
                r#"invalid message: "params" must be an object or an array"#,
            ),
        ] {
            let why = invalid(line);
            assert!(
                why.starts_with(want) || why.contains(want),
                "{}: {why}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn requests_written_are_read_back_by_the_server_and_the_client() {
        let mut out = Vec::new();
        let id = RequestId::String("a\"b".into());
        write_request(
            &mut out,
            &id,
            "tools/call",
            Some(&json!({"name": "echo", "arguments": {"text": "x\ny"}})),
        )
        .unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(out.ends_with(b"}\n"));
        // The server's reader takes it as a request (an escaped id is for its careful path).
        match classify(&out) {
            Message::Request {
                id: got,
                method,
                params,
            } => {
                assert_eq!((&got, &*method), (&id, "tools/call"));
                assert!(params.is_some_and(|p| p.get().contains(r#""text":"x\ny""#)));
            }
            _ => panic!("{}", String::from_utf8_lossy(&out)),
        }
        match classify_incoming(&out) {
            Incoming::Request {
                id: got, method, ..
            } => assert_eq!((got, &*method), (id, "tools/call")),
            other => panic!("{other:?}"),
        }

        // A plain call is read by its fast path.
        out.clear();
        let call = json!({"name": "echo", "arguments": {"text": "x"}});
        write_request(&mut out, &RequestId::Number(3), "tools/call", Some(&call)).unwrap();
        match classify(&out) {
            Message::Call { id, call } => {
                assert_eq!(id, RequestId::Number(3));
                assert_eq!(
                    (&*call.name, call.arguments),
                    ("echo", Some(r#"{"text":"x"}"#))
                );
            }
            _ => panic!("{}", String::from_utf8_lossy(&out)),
        }

        out.clear();
        write_notification(
            &mut out,
            "notifications/cancelled",
            Some(&json!({"requestId": 4})),
        )
        .unwrap();
        assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":4}}\n");
        assert!(matches!(classify(&out), Message::Notification { .. }));
    }

    #[test]
    fn answers_written_are_read_back_as_answers() {
        let mut out = Vec::new();
        write_result(&mut out, &RequestId::Number(5), &json!({"roots": []})).unwrap();
        match classify_incoming(&out) {
            Incoming::Response { id, result } => {
                assert_eq!(id, RequestId::Number(5));
                assert_eq!(result.get(), r#"{"roots":[]}"#);
            }
            other => panic!("{other:?}"),
        }
        out.clear();
        write_error(&mut out, None, METHOD_NOT_FOUND, "line\nbreak").unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        match classify_incoming(&out) {
            Incoming::ErrorResponse {
                id,
                code,
                message,
                data,
            } => {
                assert_eq!(
                    (id, code, message.as_str()),
                    (None, METHOD_NOT_FOUND, "line\nbreak")
                );
                assert!(data.is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_raw_value_with_line_breaks_still_makes_one_line() {
        let pretty = RawValue::from_string("{\r\n  \"text\": \"a\\nb\"\n}".into()).unwrap();
        let mut out = Vec::new();
        write_request(&mut out, &RequestId::Number(1), "x", Some(&pretty)).unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n' || b == b'\r').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["params"]["text"], "a\nb");
        out.clear();
        write_result(&mut out, &RequestId::Number(1), &pretty).unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n' || b == b'\r').count(), 1);
    }

    #[test]
    fn params_that_cannot_be_sent_write_nothing_and_name_the_method() {
        let mut out = Vec::new();
        for params in [json!(5), json!("text"), json!(null)] {
            let err = write_request(&mut out, &RequestId::Number(1), "tools/list", Some(&params))
                .unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(
                err.to_string().contains("\"tools/list\"")
                    && err.to_string().contains("object or array"),
                "{err}"
            );
            let err = write_notification(&mut out, "n", Some(&params)).unwrap_err();
            assert!(err.to_string().contains("\"n\""), "{err}");
        }
        // A map whose keys are not strings fails half-way through serializing.
        let bad: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let err = write_request(
            &mut out,
            &RequestId::Number(1),
            "m",
            Some(&json!({})).map(|_| &bad),
        )
        .unwrap_err();
        assert!(err.to_string().contains("do not serialize"), "{err}");
        let err = write_result(&mut out, &RequestId::Number(1), &bad).unwrap_err();
        assert!(err.to_string().contains("does not serialize"), "{err}");
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        // Arrays are params too.
        write_request(&mut out, &RequestId::Number(1), "m", Some(&[1, 2])).unwrap();
        assert_eq!(
            out,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[1,2]}\n"
        );
    }

    #[test]
    fn a_failing_writer_is_reported() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let id = RequestId::Number(1);
        assert_eq!(
            write_request(&mut Closed, &id, "ping", NO_PARAMS)
                .unwrap_err()
                .kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(
            write_notification(&mut Closed, "n", NO_PARAMS)
                .unwrap_err()
                .kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(
            write_result(&mut Closed, &id, &()).unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(
            write_error(&mut Closed, None, 1, "x").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
