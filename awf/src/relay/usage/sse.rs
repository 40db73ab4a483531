//! Incremental SSE framing of a streamed model response, with bounded memory.

use super::{BOM, EVENT_LIMIT, bounded_extend, shrink};

/// Incremental SSE framing: lines (LF, CRLF or CR), `data:`/`event:` fields,
/// events ended by a blank line.
#[derive(Default)]
pub(super) struct SseParser {
    /// The current, unfinished line.
    pub(super) line: Vec<u8>,
    /// The current event's data lines, joined by `\n`.
    pub(super) data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
    /// The last line ended in CR, so a leading LF in the next chunk belongs to it.
    after_cr: bool,
    /// The current line pushed its event over the limit; drop bytes until its end.
    skipping_line: bool,
    /// The current event went over the limit; ignore it up to the blank line.
    oversized: bool,
    seen_line: bool,
}

impl SseParser {
    pub(super) fn feed<F: FnMut(Option<&str>, &[u8])>(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut F,
    ) {
        while let Some((&first, rest)) = chunk.split_first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                chunk = rest;
                continue;
            }
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.push(&chunk[..end]);
                    self.after_cr = chunk[end] == b'\r';
                    chunk = &chunk[end + 1..];
                    self.end_line(on_event);
                }
                None => {
                    self.push(chunk);
                    break;
                }
            }
        }
    }

    /// A stream cut off without its final blank line still counts: the usage
    /// is often in that last event.
    pub(super) fn finish<F: FnMut(Option<&str>, &[u8])>(&mut self, on_event: &mut F) {
        if !self.line.is_empty() || self.skipping_line {
            self.end_line(on_event);
        }
        self.dispatch(on_event);
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.skipping_line || bytes.is_empty() {
            return;
        }
        let room = EVENT_LIMIT.saturating_sub(self.data.len());
        if !bounded_extend(&mut self.line, bytes, room) {
            self.skipping_line = true;
            self.oversized = true;
            self.line = Vec::new();
            self.data = Vec::new();
        }
    }

    fn end_line<F: FnMut(Option<&str>, &[u8])>(&mut self, on_event: &mut F) {
        if !std::mem::replace(&mut self.seen_line, true) && self.line.starts_with(BOM) {
            self.line.drain(..BOM.len());
        }
        if std::mem::take(&mut self.skipping_line) {
            // The skipped line was not blank, so the event goes on.
            return;
        }
        if self.line.is_empty() {
            self.dispatch(on_event);
            return;
        }
        if !self.oversized {
            self.field();
        }
        self.line.clear();
        shrink(&mut self.line);
    }

    fn field(&mut self) {
        let line = &self.line[..];
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return, // comment, e.g. a keep-alive
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                // Cannot pass the limit: `push` counted this whole line against it.
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }

    fn dispatch<F: FnMut(Option<&str>, &[u8])>(&mut self, on_event: &mut F) {
        if self.has_data && !self.oversized {
            on_event(self.event.as_deref(), &self.data);
        }
        self.data.clear();
        shrink(&mut self.data);
        self.has_data = false;
        self.event = None;
        self.oversized = false;
    }
}
