//! What reaches a person's terminal: text from a model, a tool or a workflow may hold
//! control characters (a title or clipboard sequence, OSC 52, a screen clear), which a
//! terminal would obey. Human-readable output shows them escaped (`\x1b`); JSON output is
//! escaped by JSON itself. Newlines and tabs stay as they are.

use std::borrow::Cow;
use std::io::{self, Write};

fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || c == '\u{2028}' || c == '\u{2029}'
}

/// `text` with every control character but newline and tab written as `\xNN` (C0, DEL)
/// or `\u{NN}` (C1 and the Unicode line separators).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_control(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// Standard error with control characters escaped, for the human log format (whose
/// fields may quote a path or an error a model chose).
pub struct EscapedStderr;

impl Write for EscapedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().write_all(printable(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_are_shown_escaped_and_text_kept() {
        assert_eq!(
            printable("a\u{1b}]0;title\u{7}b\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J"),
            "a\\x1b]0;title\\x07b\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J"
        );
        assert_eq!(printable("\u{9b}31m x\u{7f}"), "\\u{9b}31m x\\x7f");
        assert_eq!(printable("line 1\n\tline 2 é"), "line 1\n\tline 2 é");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
    }
}
