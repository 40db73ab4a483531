//! A request body on its way upstream: read from the CLI's connection as the upstream
//! takes it (never held whole), with the two things the relay needs from it seen in
//! passing: the model the body names (a top-level `"model"` string, wherever it sits in
//! the object) and, when content is recorded, its first [`super::CONTENT_BYTES`].

use std::io::{self, Read};
use std::net::TcpStream;

/// The longest model name kept; a longer one is not a model name.
const MODEL_NAME_MAX: usize = 256;

/// Finds the top-level `"model"` string of a JSON object as its bytes stream past, in
/// constant memory: it follows strings, escapes and nesting, and keeps only the current
/// top-level key and the model's value.
#[derive(Default)]
pub(super) struct ModelScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key (after `{` or `,`).
    expect_key: bool,
    /// The string being read is a top-level key, or the model's value.
    capture: Option<Capture>,
    text: Vec<u8>,
    /// The last top-level key was `model`: its value, if a string, is the model.
    after_model_key: bool,
    found: Option<String>,
    /// The body is not a JSON object, or the model was found: nothing more to see.
    done: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Capture {
    Key,
    Model,
}

impl ModelScan {
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.done {
                return;
            }
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            if std::mem::take(&mut self.escaped) {
                self.keep(b);
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.end_string();
            } else {
                self.keep(b);
            }
            return;
        }
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => {}
            b'{' | b'[' => {
                if self.depth == 0 && b == b'[' {
                    self.done = true;
                }
                self.depth += 1;
                self.expect_key = self.depth == 1;
                self.after_model_key = false;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.done = true;
                }
            }
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.after_model_key = false;
            }
            b'"' => {
                self.in_string = true;
                self.text.clear();
                self.capture = match self.depth {
                    1 if self.expect_key => Some(Capture::Key),
                    1 if self.after_model_key => Some(Capture::Model),
                    _ => None,
                };
                self.expect_key = false;
            }
            _ if self.depth == 0 => self.done = true,
            // A number, `true`, a colon: the model key's value is then not a string.
            b':' => {}
            _ if self.depth == 1 => self.after_model_key = false,
            _ => {}
        }
    }

    fn keep(&mut self, b: u8) {
        if self.capture.is_some() && self.text.len() <= MODEL_NAME_MAX {
            self.text.push(b);
        }
    }

    fn end_string(&mut self) {
        match self.capture.take() {
            Some(Capture::Key) => self.after_model_key = self.text == b"model",
            Some(Capture::Model) => {
                self.after_model_key = false;
                if self.text.len() <= MODEL_NAME_MAX && !self.text.is_empty() {
                    self.found = Some(String::from_utf8_lossy(&self.text).into_owned());
                    self.done = true;
                }
            }
            None => {}
        }
    }

    pub(super) fn model(self) -> Option<String> {
        self.found
    }
}

/// The request body as the upstream reads it: the bytes that came with the head, then
/// the rest from the connection, `len` in all.
pub(super) struct UpstreamBody<'a> {
    early: io::Cursor<Vec<u8>>,
    conn: &'a TcpStream,
    left: u64,
    pub(super) sent: u64,
    pub(super) scan: ModelScan,
    /// The first bytes, when content is recorded.
    pub(super) prefix: Option<Vec<u8>>,
    prefix_max: usize,
    /// The CLI's connection failed or ended inside the body.
    pub(super) broken: Option<String>,
}

impl<'a> UpstreamBody<'a> {
    pub(super) fn new(
        early: Vec<u8>,
        conn: &'a TcpStream,
        len: u64,
        prefix_max: Option<usize>,
    ) -> UpstreamBody<'a> {
        UpstreamBody {
            early: io::Cursor::new(early),
            conn,
            left: len,
            sent: 0,
            scan: ModelScan::default(),
            prefix: prefix_max.map(|_| Vec::new()),
            prefix_max: prefix_max.unwrap_or(0),
            broken: None,
        }
    }

    pub(super) fn complete(&self) -> bool {
        self.left == 0 && self.broken.is_none()
    }
}

impl Read for UpstreamBody<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let room = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut n = self.early.read(&mut buf[..room])?;
        if n == 0 {
            n = match (&*self.conn).read(&mut buf[..room]) {
                Ok(0) => {
                    let why = "the agent's connection ended inside the request body";
                    self.broken = Some(why.into());
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, why));
                }
                Ok(n) => n,
                Err(e) => {
                    self.broken = Some(format!("cannot read the request body: {e}"));
                    return Err(e);
                }
            };
        }
        let bytes = &buf[..n];
        self.scan.feed(bytes);
        if let Some(p) = self.prefix.as_mut() {
            let take = n.min(self.prefix_max.saturating_sub(p.len()));
            p.extend_from_slice(&bytes[..take]);
        }
        self.left -= n as u64;
        self.sent += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(body: &[u8], chunk: usize) -> Option<String> {
        let mut s = ModelScan::default();
        for c in body.chunks(chunk.max(1)) {
            s.feed(c);
        }
        s.model()
    }

    #[test]
    fn the_top_level_model_is_found_wherever_it_is_and_however_split() {
        let rows: &[(&[u8], Option<&str>)] = &[
            (br#"{"model":"claude-sonnet-4-5","messages":[]}"#, Some("claude-sonnet-4-5")),
            (
                br#"{"messages":[{"role":"user","content":"{\"model\":\"no\"}"}],"model" : "gpt-5"}"#,
                Some("gpt-5"),
            ),
            (br#"{"input":{"model":"nested"},"stream":true}"#, None),
            (br#"{"a":"model","b":"x"}"#, None),
            (br#"{"model":7,"x":"y"}"#, None),
            (br#"{"model":"","x":"y"}"#, None),
            (br#"{"meta":["model","m"],"model":"m2"}"#, Some("m2")),
            (br#"{"we\"ird":1,"model":"a\"b"}"#, Some("a\"b")),
            (br#"["model","x"]"#, None),
            (b"not json", None),
            (b"", None),
        ];
        for (body, want) in rows {
            for chunk in [1, 3, 7, body.len()] {
                assert_eq!(
                    scan(body, chunk).as_deref(),
                    *want,
                    "{} in chunks of {chunk}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        let long = format!(r#"{{"model":"{}"}}"#, "m".repeat(MODEL_NAME_MAX + 1));
        assert_eq!(scan(long.as_bytes(), 64), None);
    }
}
