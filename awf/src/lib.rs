//! awf (work in progress).
