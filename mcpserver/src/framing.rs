//! Line framing: one JSON-RPC message per `\n`-terminated line, `\r\n` accepted.
//!
//! The reader owns its buffer so that it knows when the next read would block: the
//! server flushes its answers exactly then, which batches writes under a flood and
//! costs one write per call when calls come one at a time. Clients and proxies get the
//! same reader through [`wire`](crate::wire).

use std::fmt;
use std::io::{self, Read};

const INITIAL_BUFFER: usize = 8 * 1024;

/// How much a full buffer grows by: a pipe's capacity, so that one read can take all a
/// pipe holds.
const READ_STEP: usize = 64 * 1024;

/// What [`LineReader::next_frame`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete line, without its `\n` or `\r\n` (possibly empty: the reader does not
    /// judge what a line holds).
    Line(&'a [u8]),
    /// A line longer than the reader's `max_line`. It was read to its end and dropped
    /// without being kept (memory stays bounded by `max_line`); the next frame is the
    /// line after it.
    TooLong,
    /// End of input. A final line without a terminator comes first as a
    /// [`Frame::Line`] (unless it is only whitespace); every call after `Eof` returns
    /// `Eof` again.
    Eof,
}

/// Splits a byte stream into lines, one JSON-RPC message each, as MCP's stdio transport
/// frames them: `\n`-terminated, `\r\n` accepted, no line longer than `max_line` kept.
///
/// The reader buffers `inner` itself (pass a raw pipe or file, not a `BufReader`) and
/// lends each line out of its buffer, so a line costs no copy and no allocation. It is
/// the reader [`Server::serve`](crate::Server::serve) reads with; a client reads a
/// server's output with it:
///
/// ```
/// use mcpserver::wire::{Frame, LineReader};
/// let input: &[u8] = b"{\"a\":1}\r\n{\"b\":2}\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nlast";
/// let mut lines = LineReader::new(input, 16);
/// assert_eq!(lines.read_frame().unwrap(), Frame::Line(br#"{"a":1}"#));
/// assert_eq!(lines.read_frame().unwrap(), Frame::Line(br#"{"b":2}"#));
/// assert_eq!(lines.read_frame().unwrap(), Frame::TooLong);
/// assert_eq!(lines.read_frame().unwrap(), Frame::Line(b"last"));
/// assert_eq!(lines.read_frame().unwrap(), Frame::Eof);
/// ```
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of `buf[start..end]` already searched for a newline.
    scanned: usize,
    max_line: usize,
    skipping: bool,
    eof: bool,
}

impl<R> fmt::Debug for LineReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineReader")
            .field("max_line", &self.max_line)
            .field("buffered", &(self.end - self.start))
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl<R: Read> LineReader<R> {
    /// A reader of `inner` that keeps lines of up to `max_line` bytes (without the
    /// terminator); a longer line comes out as [`Frame::TooLong`]. The buffer starts at
    /// 8 KiB (less for a smaller `max_line`) and grows with the longest line, to at most
    /// `max_line` + 2 bytes.
    pub fn new(inner: R, max_line: usize) -> Self {
        let cap = INITIAL_BUFFER.min(max_line.saturating_add(2)).max(1024);
        LineReader {
            inner,
            buf: vec![0; cap],
            start: 0,
            end: 0,
            scanned: 0,
            max_line,
            skipping: false,
            eof: false,
        }
    }

    /// Reads the next frame. `before_block` runs before every read of `inner` (that is,
    /// when the buffer holds no complete line, so the read may block): the server
    /// flushes its answers there, and a client may flush what it has to send before it
    /// waits. An error from `before_block` or from `inner` is returned as is (a read
    /// interrupted by a signal is retried); the reader may be used again after it.
    ///
    /// The line borrows the reader's buffer: handle it (or copy it) before the next call.
    pub fn next_frame(
        &mut self,
        before_block: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<Frame<'_>> {
        loop {
            if let Some(pos) = find_newline(&self.buf[self.start + self.scanned..self.end]) {
                let line_end = self.start + self.scanned + pos;
                let line_start = self.start;
                self.start = line_end + 1;
                self.scanned = 0;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                if self.skipping {
                    self.skipping = false;
                    return Ok(Frame::TooLong);
                }
                let mut line = &self.buf[line_start..line_end];
                if let [rest @ .., b'\r'] = line {
                    line = rest;
                }
                if line.len() > self.max_line {
                    return Ok(Frame::TooLong);
                }
                return Ok(Frame::Line(line));
            }
            self.scanned = self.end - self.start;
            if self.eof {
                let line_start = self.start;
                let line_end = self.end;
                self.start = 0;
                self.end = 0;
                self.scanned = 0;
                if self.skipping {
                    self.skipping = false;
                    return Ok(Frame::TooLong);
                }
                if line_end == line_start {
                    return Ok(Frame::Eof);
                }
                let mut line = &self.buf[line_start..line_end];
                if let [rest @ .., b'\r'] = line {
                    line = rest;
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Frame::Eof);
                }
                return Ok(Frame::Line(line));
            }
            self.make_room();
            before_block()?;
            let n = loop {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }

    /// Reads the next frame, with nothing to do before a read blocks: the same as
    /// [`next_frame`](LineReader::next_frame) with a `before_block` that does nothing.
    pub fn read_frame(&mut self) -> io::Result<Frame<'_>> {
        self.next_frame(&mut || Ok(()))
    }

    /// True when a complete line is buffered: the next frame needs no read of `inner`
    /// (so it cannot block). A writer may hold its output back while this is true and
    /// flush once it is false, batching its writes under a flood.
    pub fn has_line(&mut self) -> bool {
        let from = self.start + self.scanned;
        if find_newline(&self.buf[from..self.end]).is_some() {
            return true;
        }
        self.scanned = self.end - self.start;
        false
    }

    /// Ensures free space after `end`: compacts, grows up to the limit, or, past the
    /// limit, drops the partial line and remembers to skip to its end.
    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end < self.buf.len() {
            return;
        }
        // +2: room for "\r\n" after a line of exactly the maximum size.
        let limit = self.max_line.saturating_add(2);
        if self.skipping || self.end >= limit {
            self.skipping = true;
            self.end = 0;
            self.scanned = 0;
            return;
        }
        // The length grows by one read's worth; the capacity under it doubles (`Vec`'s
        // amortized growth, a `realloc` that neither copies nor touches big blocks). Only
        // the zeros `resize` writes become resident, so a line of 1 MiB costs about 1 MiB
        // of buffer, not the 2 MiB of a doubled, zero-filled length.
        let new_len = (self.end + READ_STEP).min(limit);
        self.buf.resize(new_len, 0);
    }
}

/// The first `\n` in `hay`, a machine word at a time.
pub(crate) fn find_newline(hay: &[u8]) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        let found = crate::swar::equal(word, b'\n');
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|p| offset + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], max: usize) -> Vec<Option<Vec<u8>>> {
        // Feed one byte at a time to exercise every buffer boundary.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(out.len()).min(3);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut reader = LineReader::new(Trickle(input), max);
        let mut out = Vec::new();
        loop {
            match reader.next_frame(&mut || Ok(())).unwrap() {
                Frame::Line(l) => out.push(Some(l.to_vec())),
                Frame::TooLong => out.push(None),
                Frame::Eof => return out,
            }
        }
    }

    #[test]
    fn finds_newlines_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                let mut hay = vec![b'a'; len];
                hay[at] = b'\n';
                assert_eq!(find_newline(&hay), Some(at), "len {len} at {at}");
            }
            assert_eq!(find_newline(&vec![b'a'; len]), None);
        }
        // Bytes just around '\n' (0x0a) must not be mistaken for it.
        assert_eq!(find_newline(&[0x0b, 0x09, 0x8a, 0x0a]), Some(3));
    }

    #[test]
    fn splits_lines_and_strips_cr() {
        let got = frames(b"one\r\ntwo\n\nthree", 100);
        let want: Vec<Option<Vec<u8>>> = vec![
            Some(b"one".to_vec()),
            Some(b"two".to_vec()),
            Some(b"".to_vec()),
            Some(b"three".to_vec()),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn over_long_line_is_skipped_and_reading_goes_on() {
        let mut input = vec![b'x'; 5000];
        input.extend_from_slice(b"\nok\n");
        input.extend_from_slice(&[b'y'; 20]);
        input.extend_from_slice(b"\nfine\n");
        let got = frames(&input, 10);
        assert_eq!(
            got,
            vec![None, Some(b"ok".to_vec()), None, Some(b"fine".to_vec())]
        );
    }

    #[test]
    fn line_of_exactly_the_limit_passes_with_crlf() {
        let got = frames(b"0123456789\r\n", 10);
        assert_eq!(got, vec![Some(b"0123456789".to_vec())]);
    }

    #[test]
    fn a_long_line_grows_the_filled_buffer_by_steps_not_by_doubling() {
        // Only the bytes `resize` zeroed are resident; a doubled length would zero (and
        // make resident) up to twice the line.
        let line = 1 << 20;
        let mut input = vec![b'x'; line];
        input.push(b'\n');
        let mut reader = LineReader::new(&input[..], 4 << 20);
        match reader.next_frame(&mut || Ok(())).unwrap() {
            Frame::Line(l) => assert_eq!(l.len(), line),
            _ => panic!("expected the line"),
        }
        assert!(
            reader.buf.len() <= line + READ_STEP,
            "{} bytes zeroed for a line of {line}",
            reader.buf.len()
        );
    }
}
