//! Stand-in for mcpserver::wire until it lands (same names).
#![allow(dead_code)]
use mcpserver::RequestId;
use serde::Serialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::io::{self, BufRead, BufReader, Read, Write};

pub enum Frame<'a> {
    Line(&'a [u8]),
    TooLong,
    Eof,
}
pub struct LineReader<R> {
    r: BufReader<R>,
    max: usize,
    buf: Vec<u8>,
}
impl<R: Read> LineReader<R> {
    pub fn new(r: R, max: usize) -> Self {
        LineReader {
            r: BufReader::new(r),
            max,
            buf: Vec::new(),
        }
    }
    pub fn next_frame(&mut self, _b: &mut dyn FnMut() -> io::Result<()>) -> io::Result<Frame<'_>> {
        self.buf.clear();
        let n = self.r.read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(Frame::Eof);
        }
        if self.buf.len() > self.max {
            return Ok(Frame::TooLong);
        }
        while self.buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            self.buf.pop();
        }
        Ok(Frame::Line(&self.buf))
    }
}
pub enum Incoming<'a> {
    Response {
        id: RequestId,
        result: &'a RawValue,
    },
    ErrorResponse {
        id: Option<RequestId>,
        code: i64,
        message: String,
        data: Option<&'a RawValue>,
    },
    Request {
        id: RequestId,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Invalid(String),
}
#[derive(serde::Deserialize)]
struct Env<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<serde_json::Value>,
}
fn id_of(raw: Option<&RawValue>) -> Option<RequestId> {
    let t = raw?.get();
    if t.starts_with('"') {
        serde_json::from_str(t).ok().map(RequestId::String)
    } else {
        t.parse().ok().map(RequestId::Number)
    }
}
pub fn classify_incoming(line: &[u8]) -> Incoming<'_> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Incoming::Invalid("not UTF-8".into());
    };
    let env: Env = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => return Incoming::Invalid(e.to_string()),
    };
    let id = id_of(env.id);
    match (env.method, env.result, env.error) {
        (Some(m), _, _) => match id {
            Some(id) => Incoming::Request {
                id,
                method: m,
                params: env.params,
            },
            None => Incoming::Notification {
                method: m,
                params: env.params,
            },
        },
        (None, Some(r), _) if id.is_some() => Incoming::Response {
            id: id.unwrap(),
            result: r,
        },
        (None, _, Some(e)) => Incoming::ErrorResponse {
            id,
            code: e["code"].as_i64().unwrap_or(0),
            message: e["message"].as_str().unwrap_or("").to_string(),
            data: None,
        },
        _ => Incoming::Invalid("not a message".into()),
    }
}
fn id_json(id: &RequestId) -> serde_json::Value {
    match id {
        RequestId::Number(n) => (*n).into(),
        RequestId::String(s) => s.clone().into(),
    }
}
pub fn write_request(
    out: &mut impl Write,
    id: &RequestId,
    method: &str,
    params: Option<&impl Serialize>,
) -> io::Result<()> {
    let mut m = serde_json::json!({"jsonrpc": "2.0", "id": id_json(id), "method": method});
    if let Some(p) = params {
        m["params"] = serde_json::to_value(p)?;
    }
    writeln!(out, "{m}")
}
pub fn write_notification(
    out: &mut impl Write,
    method: &str,
    params: Option<&impl Serialize>,
) -> io::Result<()> {
    let mut m = serde_json::json!({"jsonrpc": "2.0", "method": method});
    if let Some(p) = params {
        m["params"] = serde_json::to_value(p)?;
    }
    writeln!(out, "{m}")
}
pub fn write_result(
    out: &mut impl Write,
    id: &RequestId,
    result: &impl Serialize,
) -> io::Result<()> {
    let m = serde_json::json!({"jsonrpc": "2.0", "id": id_json(id), "result": serde_json::to_value(result)?});
    writeln!(out, "{m}")
}
pub fn write_error(
    out: &mut impl Write,
    id: Option<&RequestId>,
    code: i64,
    message: &str,
) -> io::Result<()> {
    let m = serde_json::json!({"jsonrpc": "2.0", "id": id.map(id_json), "error": {"code": code, "message": message}});
    writeln!(out, "{m}")
}
