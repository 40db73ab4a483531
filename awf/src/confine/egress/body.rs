//! One request per connection, enforced by the proxy: of the bytes a client sends after a
//! plain HTTP request's head, only that request's body goes upstream, framed as the head
//! says (RFC 9112 §6). Whatever follows it, such as a second request pipelined behind the
//! first and naming another host at the same address, is read and dropped, so no request
//! reaches the upstream that the allow list did not see, whatever the upstream makes of
//! `Connection: close`.
//!
//! A head whose framing two parties could read two ways (both `Content-Length` and
//! `Transfer-Encoding`, lengths that differ, a coding other than `chunked` last) is
//! refused before anything is sent. A chunked body is followed strictly (CRLF line ends,
//! hexadecimal sizes): where the proxy cannot tell where the body ends, the connection
//! ends.

/// Longest chunk-size line (size and extensions) followed.
const MAX_SIZE_LINE: usize = 4096;
/// Largest trailer section followed.
const MAX_TRAILERS: usize = 64 * 1024;

/// Where the body of one request ends, fed the client's bytes as they come.
#[derive(Debug)]
pub struct Body {
    left: Left,
}

#[derive(Debug)]
enum Left {
    /// Bytes still to come of a body of known length.
    Length(u64),
    Chunked(Chunked),
}

impl Body {
    /// The framing the request head declares, from its header fields; an error says
    /// why the head is refused (a 400).
    pub fn of(headers: &[(String, Vec<u8>)]) -> Result<Body, String> {
        let values = |name: &str| -> Vec<String> {
            headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .flat_map(|(_, v)| {
                    String::from_utf8_lossy(v)
                        .split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let codings = values("transfer-encoding");
        let lengths = values("content-length");
        if !codings.is_empty() {
            if !lengths.is_empty() {
                return Err(
                    "the request has both Content-Length and Transfer-Encoding, \
                     which parties may read two ways: send one of them"
                        .into(),
                );
            }
            if codings.last().map(String::as_str) != Some("chunked") {
                return Err(format!(
                    "the request's Transfer-Encoding \"{}\" does not end in chunked, so its \
                     end cannot be told: send chunked last, or Content-Length",
                    codings.join(", ")
                ));
            }
            return Ok(Body {
                left: Left::Chunked(Chunked::default()),
            });
        }
        let Some(first) = lengths.first() else {
            return Ok(Body {
                left: Left::Length(0),
            });
        };
        let length = first
            .parse::<u64>()
            .ok()
            .filter(|_| first.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("the request's Content-Length \"{first}\" is not a number"))?;
        if lengths.iter().any(|l| l != first) {
            return Err(format!(
                "the request has differing Content-Length values ({}): send one",
                lengths.join(", ")
            ));
        }
        Ok(Body {
            left: Left::Length(length),
        })
    }

    /// Of `bytes`, the next ones from the client, how many still belong to the body
    /// (all of them until it ends, then the part before its end, then none). An error
    /// says why the body cannot be followed.
    pub fn take(&mut self, bytes: &[u8]) -> Result<usize, String> {
        match &mut self.left {
            Left::Length(left) => {
                let n = (*left).min(bytes.len() as u64);
                *left -= n;
                Ok(n as usize)
            }
            Left::Chunked(c) => c.take(bytes),
        }
    }

    /// Whether the body has ended.
    pub fn ended(&self) -> bool {
        match &self.left {
            Left::Length(left) => *left == 0,
            Left::Chunked(c) => c.state == State::Done,
        }
    }
}

/// A chunked body (RFC 9112 §7.1), byte by byte outside chunk data.
#[derive(Debug, Default)]
struct Chunked {
    state: State,
    /// The size being read, or the data left of the current chunk.
    size: u64,
    /// Bytes of the current size line, or of the trailer section.
    line: usize,
}

#[derive(Debug, Default, PartialEq, Clone, Copy)]
enum State {
    /// The first hexadecimal digit of a chunk size.
    #[default]
    SizeStart,
    /// More digits, an extension, or the line's end.
    Size,
    /// An extension, up to the line's end.
    Extension,
    /// The LF ending a size line.
    SizeLf,
    /// Chunk data; `size` bytes left.
    Data,
    /// The CRLF after chunk data.
    DataCr,
    DataLf,
    /// The start of a trailer line, or the CR of the empty line ending the body.
    TrailerStart,
    Trailer,
    TrailerLf,
    /// The LF of the empty line ending the body.
    EndLf,
    Done,
}

impl Chunked {
    fn take(&mut self, bytes: &[u8]) -> Result<usize, String> {
        let mut i = 0;
        while i < bytes.len() && self.state != State::Done {
            if self.state == State::Data {
                let n = self.size.min((bytes.len() - i) as u64);
                self.size -= n;
                i += n as usize;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            self.step(bytes[i])?;
            i += 1;
        }
        Ok(i)
    }

    fn step(&mut self, b: u8) -> Result<(), String> {
        let bad = |what: &str| format!("the chunked request body is malformed: {what}");
        match self.state {
            State::SizeStart | State::Size => {
                self.line += 1;
                if self.line > MAX_SIZE_LINE {
                    return Err(bad("a chunk-size line longer than 4 KiB"));
                }
                if let Some(d) = (b as char).to_digit(16) {
                    self.size = self
                        .size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(u64::from(d)))
                        .ok_or_else(|| bad("a chunk size too large"))?;
                    self.state = State::Size;
                } else if self.state == State::SizeStart {
                    return Err(bad("a chunk size that is not hexadecimal"));
                } else if b == b'\r' {
                    self.state = State::SizeLf;
                } else if b == b'\n' {
                    return Err(bad("a bare LF ending a chunk-size line"));
                } else if b == b';' || b == b' ' || b == b'\t' {
                    self.state = State::Extension;
                } else {
                    return Err(bad("a chunk size that is not hexadecimal"));
                }
            }
            State::Extension => {
                self.line += 1;
                if self.line > MAX_SIZE_LINE {
                    return Err(bad("a chunk-size line longer than 4 KiB"));
                }
                match b {
                    b'\r' => self.state = State::SizeLf,
                    b'\n' => return Err(bad("a bare LF ending a chunk-size line")),
                    _ => {}
                }
            }
            State::SizeLf => {
                if b != b'\n' {
                    return Err(bad("a CR without LF ending a chunk-size line"));
                }
                self.line = 0;
                self.state = if self.size == 0 {
                    State::TrailerStart
                } else {
                    State::Data
                };
            }
            State::DataCr | State::DataLf => {
                let want = if self.state == State::DataCr {
                    b'\r'
                } else {
                    b'\n'
                };
                if b != want {
                    return Err(bad(
                        "chunk data longer than its size, or not followed by CRLF",
                    ));
                }
                if self.state == State::DataCr {
                    self.state = State::DataLf;
                } else {
                    self.state = State::SizeStart;
                }
            }
            State::TrailerStart | State::Trailer => {
                self.line += 1;
                if self.line > MAX_TRAILERS {
                    return Err(bad("trailer fields larger than 64 KiB"));
                }
                match b {
                    b'\r' if self.state == State::TrailerStart => self.state = State::EndLf,
                    b'\r' => self.state = State::TrailerLf,
                    b'\n' => return Err(bad("a bare LF in the trailer fields")),
                    _ => self.state = State::Trailer,
                }
            }
            State::TrailerLf => {
                if b != b'\n' {
                    return Err(bad("a CR without LF in the trailer fields"));
                }
                self.state = State::TrailerStart;
            }
            State::EndLf => {
                if b != b'\n' {
                    return Err(bad("a CR without LF ending the body"));
                }
                self.state = State::Done;
            }
            State::Data | State::Done => unreachable!("handled by take"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    /// The body's length within `bytes` fed in pieces of `step`, and whether it ended.
    fn feed(body: &mut Body, bytes: &[u8], step: usize) -> Result<(usize, bool), String> {
        let mut taken = 0;
        for piece in bytes.chunks(step) {
            let n = body.take(piece)?;
            taken += n;
            if n < piece.len() {
                assert!(body.ended());
                assert_eq!(body.take(&piece[n..])?, 0, "nothing after the end");
                break;
            }
        }
        Ok((taken, body.ended()))
    }

    #[test]
    fn no_framing_means_no_body() {
        let mut b = Body::of(&headers(&[("Host", "x")])).unwrap();
        assert!(b.ended());
        assert_eq!(b.take(b"GET http://other/ HTTP/1.1\r\n\r\n").unwrap(), 0);
    }

    #[test]
    fn content_length_takes_that_many_bytes_in_any_pieces() {
        for step in [1, 3, 100] {
            let mut b = Body::of(&headers(&[("content-length", "5")])).unwrap();
            assert!(!b.ended());
            assert_eq!(
                feed(&mut b, b"helloGET / HTTP/1.1\r\n\r\n", step).unwrap(),
                (5, true)
            );
        }
        // The same length repeated is one length.
        let mut b = Body::of(&headers(&[
            ("Content-Length", "2, 2"),
            ("Content-Length", "2"),
        ]));
        assert_eq!(b.as_mut().unwrap().take(b"abc").unwrap(), 2);
    }

    #[test]
    fn ambiguous_framing_is_refused_with_the_reason() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("Content-Length", "3"), ("Transfer-Encoding", "chunked")],
                "both Content-Length and Transfer-Encoding",
            ),
            (
                &[("Transfer-Encoding", "chunked, gzip")],
                "\"chunked, gzip\" does not end in chunked",
            ),
            (
                &[("Transfer-Encoding", "identity")],
                "does not end in chunked",
            ),
            (
                &[("Content-Length", "3"), ("Content-Length", "4")],
                "differing Content-Length values (3, 4)",
            ),
            (&[("Content-Length", "3, 4")], "differing"),
            (&[("Content-Length", "+3")], "\"+3\" is not a number"),
            (&[("Content-Length", "")], "\"\" is not a number"),
            (
                &[("Content-Length", "99999999999999999999")],
                "is not a number",
            ),
        ];
        for (fields, why) in cases {
            let err = Body::of(&headers(fields)).unwrap_err();
            assert!(err.contains(why), "{fields:?}: {err}");
        }
        // Codings before chunked are the server's to undo; the end is chunked's.
        assert!(Body::of(&headers(&[("Transfer-Encoding", "gzip, Chunked")])).is_ok());
    }

    /// A chunked body with extensions and trailers, then a pipelined request.
    const CHUNKED: &[u8] =
        b"5;name=\"v;x\"\r\nhello\r\n00A\r\n0123456789\r\n0 ; last\r\nDigest: x\r\nMore: y\r\n\r\n";

    #[test]
    fn a_chunked_body_ends_after_its_trailers_in_any_pieces() {
        let mut all = CHUNKED.to_vec();
        all.extend_from_slice(b"GET http://other.example/ HTTP/1.1\r\nHost: other\r\n\r\n");
        for step in [1, 2, 7, 64, all.len()] {
            let mut b = Body::of(&headers(&[("Transfer-Encoding", "chunked")])).unwrap();
            assert_eq!(
                feed(&mut b, &all, step).unwrap(),
                (CHUNKED.len(), true),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_chunked_body_without_trailers_and_one_cut_short() {
        let mut b = Body::of(&headers(&[("Transfer-Encoding", "chunked")])).unwrap();
        assert_eq!(
            feed(&mut b, b"3\r\nabc\r\n0\r\n\r\nX", 1).unwrap(),
            (13, true)
        );
        let mut b = Body::of(&headers(&[("Transfer-Encoding", "chunked")])).unwrap();
        assert_eq!(feed(&mut b, b"3\r\nab", 2).unwrap(), (5, false));
    }

    #[test]
    fn a_malformed_chunked_body_is_an_error_naming_the_fault() {
        let cases: &[(&[u8], &str)] = &[
            (b"\r\n", "not hexadecimal"),
            (b"g\r\n", "not hexadecimal"),
            (b"5x\r\n", "not hexadecimal"),
            (b"5\n", "bare LF ending a chunk-size line"),
            (b"5;a\nhello", "bare LF"),
            (b"5\rX", "CR without LF"),
            (b"3\r\nabcd\r\n", "longer than its size"),
            (b"3\r\nabc\n", "longer than its size"),
            (b"11111111111111111\r\n", "too large"),
            (b"0\r\nA: b\nC: d\r\n\r\n", "bare LF in the trailer"),
            (b"0\r\n\rX", "CR without LF ending the body"),
        ];
        for (bytes, why) in cases {
            let mut b = Body::of(&headers(&[("Transfer-Encoding", "chunked")])).unwrap();
            let err = feed(&mut b, bytes, 1).unwrap_err();
            assert!(
                err.contains(why),
                "{:?}: {err}",
                String::from_utf8_lossy(bytes)
            );
        }
        // An extension, or leading zeros (digits too): the line is bounded all the same.
        let mut long = b"1;".to_vec();
        long.resize(MAX_SIZE_LINE + 10, b'a');
        for line in [long, vec![b'0'; MAX_SIZE_LINE + 10]] {
            let mut b = Body::of(&headers(&[("Transfer-Encoding", "chunked")])).unwrap();
            let err = feed(&mut b, &line, 512).unwrap_err();
            assert!(err.contains("longer than 4 KiB"), "{err}");
        }
    }
}
