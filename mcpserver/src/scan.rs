//! The hot path's reader: a strict scanner for the commonest line, a well-formed
//! `tools/call` request.
//!
//! It reads the envelope and `params` in one pass without allocating, validates every
//! value it skips (the tool's arguments included) to the JSON grammar, and hands back
//! slices of the line. It accepts only what it can prove well-formed and unambiguous;
//! anything else — an escape in a key or in the tool name, a `\u` escape anywhere, an id
//! that is not a plain integer or string, a repeated or unknown member, nesting deeper
//! than [`MAX_DEPTH`] — returns `None`, and the careful serde path reads the line (and
//! words the error, if there is one). So the scanner never decides an error.

use std::borrow::Cow;

use crate::id::RequestId;
use crate::meta::{CAPABILITIES_KEY, CLIENT_INFO_KEY, MetaRead, NamedClient, VERSION_KEY};
use crate::swar;

/// Nesting the scanner follows before it leaves the line to the careful path (which
/// has serde_json's own limit).
const MAX_DEPTH: usize = 64;

/// A `tools/call` request, as slices of its line.
#[derive(Debug, PartialEq)]
pub(crate) struct ScannedCall<'a> {
    pub id: RequestId,
    pub name: &'a str,
    /// The JSON text of `params.arguments`, when present.
    pub arguments: Option<&'a str>,
    /// The JSON text of `params._meta`, when present.
    pub meta: Option<&'a str>,
    /// `_meta` as the era is judged by it (read on the way), when present.
    pub meta_read: Option<MetaRead<'a>>,
}

/// Reads `text` as a `tools/call` request, or `None` when the careful path must.
pub(crate) fn tools_call(text: &str) -> Option<ScannedCall<'_>> {
    let mut s = Scanner {
        text,
        b: text.as_bytes(),
        i: 0,
    };
    let (mut jsonrpc, mut method) = (false, false);
    let mut id = None;
    let mut params = None;
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key = s.plain_str()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        match key {
            "jsonrpc" if !jsonrpc => {
                (s.plain_str()? == "2.0").then_some(())?;
                jsonrpc = true;
            }
            "method" if !method => {
                (s.plain_str()? == "tools/call").then_some(())?;
                method = true;
            }
            "id" if id.is_none() => id = Some(s.id()?),
            "params" if params.is_none() => params = Some(s.params()?),
            _ => return None,
        }
        s.ws();
        if s.eat(b',').is_none() {
            break;
        }
    }
    s.eat(b'}')?;
    s.ws();
    (s.i == s.b.len() && jsonrpc && method).then_some(())?;
    let (name, arguments, meta) = params?;
    let (meta, meta_read) = meta.unzip();
    Some(ScannedCall {
        id: id?,
        name,
        arguments,
        meta,
        meta_read,
    })
}

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

type Params<'a> = (&'a str, Option<&'a str>, Option<(&'a str, MetaRead<'a>)>);

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string without escapes: its content.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = swar::find_string_special(self.b, start);
        (self.b.get(end) == Some(&b'"')).then_some(())?;
        self.i = end + 1;
        self.text.get(start..end)
    }

    /// Any string; escapes other than `\u` are checked and skipped.
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i = swar::find_string_special(self.b, self.i);
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    match self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        _ => return None,
                    }
                    self.i += 2;
                }
                _ => return None,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    /// An integer in JSON's grammar: `-?(0|[1-9][0-9]*)`.
    fn integer(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        Some(())
    }

    fn number(&mut self) -> Option<()> {
        self.integer()?;
        if self.eat(b'.').is_some() {
            (self.digits() > 0).then_some(())?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            (self.digits() > 0).then_some(())?;
        }
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.i..]
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    /// Any JSON value, checked and skipped.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' => self.container(depth, b'}', true),
            b'[' => self.container(depth, b']', false),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    fn container(&mut self, depth: usize, close: u8, object: bool) -> Option<()> {
        (depth < MAX_DEPTH).then_some(())?;
        self.i += 1;
        self.ws();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            if object {
                self.string()?;
                self.ws();
                self.eat(b':')?;
                self.ws();
            }
            self.value(depth + 1)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                c if c == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A value, checked: its text.
    fn raw(&mut self) -> Option<&'a str> {
        let start = self.i;
        self.value(0)?;
        self.text.get(start..self.i)
    }

    /// An id the scanner takes as it is: a plain string or an integer that fits.
    fn id(&mut self) -> Option<RequestId> {
        if self.peek()? == b'"' {
            return Some(RequestId::String(self.plain_str()?.to_owned()));
        }
        let start = self.i;
        // A fraction or exponent after it fails at the member's end.
        self.integer()?;
        self.text[start..self.i].parse().ok().map(RequestId::Number)
    }

    /// An object whose keys are plain strings: `member` reads each member's value (the
    /// scanner is on it) or declines the line.
    #[inline]
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.plain_str()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `params._meta`, checked, and read for what judges its era: the revision, whether
    /// the client's capabilities are an object, the client's name. A member named twice,
    /// an escape in a name, a client that is not an object of plain strings: declined.
    fn meta(&mut self) -> Option<MetaRead<'a>> {
        let mut read = MetaRead::default();
        if self.peek()? != b'{' {
            self.value(0)?;
            return Some(read);
        }
        let mut capabilities = false;
        self.object(|s, key| {
            match key {
                VERSION_KEY if read.version.is_none() => {
                    read.version = Some(Cow::Borrowed(s.plain_str()?));
                }
                CAPABILITIES_KEY if !capabilities => {
                    capabilities = true;
                    read.capabilities_object = s.peek()? == b'{';
                    s.value(1)?;
                }
                CLIENT_INFO_KEY if read.client_info.is_none() => {
                    read.client_info = Some(s.client()?);
                }
                VERSION_KEY | CAPABILITIES_KEY | CLIENT_INFO_KEY => return None,
                _ => {
                    s.value(1)?;
                    read.others = true;
                }
            }
            Some(())
        })?;
        Some(read)
    }

    /// `_meta`'s clientInfo: an object whose `name` and `version` are plain strings.
    fn client(&mut self) -> Option<NamedClient<'a>> {
        let (mut name, mut version) = (None, None);
        self.object(|s, key| match key {
            "name" if name.is_none() => s.plain_str().map(|n| name = Some(n)),
            "version" if version.is_none() => s.plain_str().map(|v| version = Some(v)),
            "name" | "version" => None,
            _ => s.value(2),
        })?;
        Some(NamedClient {
            name: Cow::Borrowed(name.unwrap_or_default()),
            version: Cow::Borrowed(version.unwrap_or_default()),
        })
    }

    /// `params`: `name`, `arguments`, `_meta`, each at most once, nothing else.
    fn params(&mut self) -> Option<Params<'a>> {
        let (mut name, mut arguments, mut meta) = (None, None, None);
        self.object(|s, key| {
            match key {
                "name" if name.is_none() => name = Some(s.plain_str()?),
                "arguments" if arguments.is_none() => arguments = Some(s.raw()?),
                "_meta" if meta.is_none() => {
                    let start = s.i;
                    let read = s.meta()?;
                    meta = Some((s.text.get(start..s.i)?, read));
                }
                _ => return None,
            }
            Some(())
        })?;
        Some((name?, arguments, meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(line: &str) -> Option<ScannedCall<'_>> {
        tools_call(line)
    }

    #[test]
    fn reads_a_canonical_call() {
        let c = call(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#).unwrap();
        assert_eq!(c.id, RequestId::Number(7));
        assert_eq!(c.name, "echo");
        assert_eq!(c.arguments, Some(r#"{"text":"hi"}"#));
        assert_eq!(c.meta, None);
    }

    #[test]
    fn any_member_order_spacing_and_string_ids() {
        let c = call(
            " { \"params\" : { \"_meta\" : {\"traceparent\":\"00-a\"} , \"arguments\" : [1, -2.5e+3, true, false, null, \"a\\\"b\\n\", {}], \"name\":\"x\" } , \"method\":\"tools/call\", \"id\" : \"r-1\" ,\"jsonrpc\":\"2.0\" } ",
        )
        .unwrap();
        assert_eq!(c.id, RequestId::String("r-1".into()));
        assert_eq!(c.name, "x");
        assert_eq!(
            c.arguments,
            Some(r#"[1, -2.5e+3, true, false, null, "a\"b\n", {}]"#)
        );
        assert_eq!(c.meta, Some(r#"{"traceparent":"00-a"}"#));
    }

    /// Everything the scanner declines goes to the careful path, which reads it (or
    /// words its error): the scanner itself never answers.
    #[test]
    fn declines_what_it_cannot_prove() {
        let declined = [
            // not a tools/call request
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}"#,
            // ids
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":01,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"e"}}"#,
            // repeated, unknown or escaped members
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","name":"f"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"},"x":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","x":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\u0065"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"t":"\ud800"}}}"#,
            // malformed JSON anywhere
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"t":tru}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"t":1,}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"t" 1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":[1 2]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":-}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":1.}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":"a	b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"a":"\x"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"},}"#,
        ];
        for line in declined {
            assert_eq!(call(line), None, "{line}");
        }
    }

    /// What the scanner reads of `_meta` to judge the era is what serde reads, and what
    /// it cannot read alike it declines.
    #[test]
    fn reads_meta_as_serde_does_or_declines() {
        let metas = [
            r#"{}"#,
            r#"null"#,
            r#"{"traceparent":"00-a"}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/protocolVersion":"1900-01-01","x":[1]}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","title":"C","version":"1"}}"#,
            r#"{"io.modelcontextprotocol/clientInfo":{}}"#,
            r#"{"io.modelcontextprotocol/logLevel":"info"}"#,
        ];
        for meta in metas {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"e","_meta":{meta}}}}}"#
            );
            let c = call(&line).unwrap_or_else(|| panic!("declined {meta}"));
            assert_eq!(c.meta, Some(meta));
            let serde = serde_json::from_str::<MetaRead<'_>>(meta).unwrap_or_default();
            assert_eq!(c.meta_read.unwrap(), serde, "{meta}");
        }
        for meta in [
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/protocolVersion":"x"}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":7}"#,
            r#"{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}"#,
            r#"{"io.modelcontextprotocol/clientInfo":"c"}"#,
            r#"{"io.modelcontextprotocol/clientInfo":{"name":"a"b"}}"#,
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"e","_meta":{meta}}}}}"#
            );
            assert_eq!(call(&line), None, "{meta}");
        }
    }

    #[test]
    fn nesting_is_followed_to_a_limit() {
        let nested = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"e","arguments":{}{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(call(&nested(MAX_DEPTH)).is_some());
        assert!(call(&nested(MAX_DEPTH + 1)).is_none());
    }

    /// Whatever the scanner accepts, serde_json reads the same way.
    #[test]
    fn agrees_with_serde_json_on_what_it_accepts() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":-3,"method":"tools/call","params":{"name":"e","arguments":{"a":[1,{"b":"c\\d\/"}],"n":0.25e-1}}}"#,
            r#"{"id":"x","params":{"arguments":null,"name":"y-z"},"jsonrpc":"2.0","method":"tools/call"}"#,
        ];
        for line in lines {
            let c = call(line).expect(line);
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["params"]["name"], c.name);
            let args: serde_json::Value = serde_json::from_str(c.arguments.unwrap()).unwrap();
            assert_eq!(v["params"]["arguments"], args);
        }
    }
}
