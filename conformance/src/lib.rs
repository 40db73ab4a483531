//! conformance (work in progress).
