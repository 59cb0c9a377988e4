//! tokens
