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
