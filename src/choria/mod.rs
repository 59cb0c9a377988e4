//! The Choria wire: the only module that knows NATS subjects and Choria envelopes.
//!
//! It knows nothing of provisioning: it encodes and decodes the protocol layers,
//! parses the Choria client configuration, and (later) connects and routes replies.

pub mod client_config;
pub mod connector;
pub mod lifecycle;
pub mod protocol;
pub mod router;
