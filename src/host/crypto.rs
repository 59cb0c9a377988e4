//! crypto
