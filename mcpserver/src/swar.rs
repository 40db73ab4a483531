//! Eight bytes at a time: the byte tests shared by the line splitter and the string
//! escaper. Each returns a word with the high bit set in flagged bytes; the lowest flag
//! is exact (higher ones may be false positives), so callers act on the lowest or on "any".

const fn splat(byte: u8) -> u64 {
    u64::from_ne_bytes([byte; 8])
}

/// Flags the bytes of `word` below `n` (`n` at most 0x80).
pub(crate) fn below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(splat(n)) & !word & splat(0x80)
}

/// Flags the bytes of `word` equal to `byte`.
pub(crate) fn equal(word: u64, byte: u8) -> u64 {
    below(word ^ splat(byte), 1)
}

/// Flags the bytes of `word` a JSON string cannot hold as they are: `"`, `\` and
/// control characters.
pub(crate) fn string_special(word: u64) -> u64 {
    below(word, 0x20) | equal(word, b'"') | equal(word, b'\\')
}

/// The index of the first byte of `bytes[from..]` (counted from the start of `bytes`)
/// that a JSON string cannot hold as it is, or `bytes.len()`.
pub(crate) fn find_string_special(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i + 8 <= bytes.len() {
        let word = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let flags = string_special(word);
        if flags != 0 {
            return i + (flags.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !matches!(bytes[i], b'"' | b'\\' | 0..0x20) {
        i += 1;
    }
    i
}
