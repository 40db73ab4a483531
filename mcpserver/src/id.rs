//! Request ids: what a request names itself with, echoed with its type in the answer.
//! Below everything that reads or writes a message (the scanner, the careful path, the
//! wire), so that none of them imports another for it.

use std::fmt;
use std::io::{self, Write};

use serde_json::value::RawValue;

/// The id of a request, echoed with its type in the answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => f.write_str(s),
        }
    }
}

impl RequestId {
    /// Parses an id from its JSON text; MCP allows strings and integers only.
    pub(crate) fn from_raw(raw: &RawValue) -> Option<RequestId> {
        let text = raw.get();
        if text.starts_with('"') {
            serde_json::from_str::<String>(text)
                .ok()
                .map(RequestId::String)
        } else {
            text.parse::<i64>().ok().map(RequestId::Number)
        }
    }

    pub(crate) fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        // serde_json writes integers without `core::fmt` (a quarter of the instructions).
        match self {
            RequestId::Number(n) => serde_json::to_writer(out, n),
            RequestId::String(s) => serde_json::to_writer(out, s),
        }
        .map_err(io::Error::from)
    }
}
