//! Output bounds: every text a tool returns fits a byte budget, and when something was cut
//! the last line says what and how to get the rest. Agents cannot recover from a silently
//! truncated answer, and clients refuse oversized results (Claude Code at ~25k tokens,
//! the TypeScript SDK closes the connection on a line over 10 MiB).

/// Cuts `text` to at most `limit` bytes (on a line boundary when one is near, else on a
/// char boundary) and appends a note naming what was shown and `hint` (how to get the
/// rest). The note itself is not counted, so a bound result is `limit` + a short line.
pub fn bound_text(text: String, limit: usize, hint: &str) -> String {
    if text.len() <= limit {
        return text;
    }
    let total = text.len();
    let mut cut = crate::text::floor_char_boundary(&text, limit);
    // Prefer ending on a whole line unless that would throw away most of the budget.
    if let Some(nl) = text[..cut].rfind('\n')
        && nl + 1 >= cut / 2
    {
        cut = nl + 1;
    }
    let mut out = text;
    out.truncate(cut);
    if !out.ends_with('\n') && !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!(
        "[output cut: showing the first {cut} of {total} bytes; {hint}]"
    ));
    out
}

/// A byte sink that keeps the first `cap` bytes and counts the rest, so a process's output
/// can be drained completely (the child never blocks on a full pipe) in bounded memory.
#[derive(Debug, Default)]
pub struct HeadBuffer {
    cap: usize,
    kept: Vec<u8>,
    total: u64,
}

impl HeadBuffer {
    pub fn new(cap: usize) -> Self {
        HeadBuffer {
            cap,
            kept: Vec::new(),
            total: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The kept bytes as text (lossy: a command may print anything), with a note when cut.
    pub fn into_text(self, what: &str, hint: &str) -> String {
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        if self.total > self.kept.len() as u64 {
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!(
                "[{what} cut: showing the first {} of {} bytes; {hint}]",
                self.kept.len(),
                self.total
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(bound_text("abc".into(), 10, "h"), "abc");
    }

    #[test]
    fn long_text_is_cut_on_a_line_with_a_note() {
        let text = "line1\nline2\nline3\n".to_string();
        let out = bound_text(text, 14, "use offset");
        assert!(out.starts_with("line1\nline2\n"), "{out}");
        assert!(!out.contains("line3"));
        assert!(
            out.ends_with("[output cut: showing the first 12 of 18 bytes; use offset]"),
            "{out}"
        );
    }

    #[test]
    fn cut_never_splits_a_char() {
        let text = "ééééé".to_string(); // 10 bytes
        let out = bound_text(text, 3, "h");
        assert!(out.starts_with("é\n["), "{out}");
    }

    #[test]
    fn head_buffer_keeps_head_and_counts_all() {
        let mut b = HeadBuffer::new(4);
        b.push(b"abc");
        b.push(b"defg");
        assert_eq!(b.total(), 7);
        let t = b.into_text("stdout", "redirect to a file");
        assert_eq!(
            t,
            "abcd\n[stdout cut: showing the first 4 of 7 bytes; redirect to a file]"
        );
    }
}
