//! Choria client configuration.
