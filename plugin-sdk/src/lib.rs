//! plugin-sdk (work in progress).
