//! The Choria wire: the only module that knows NATS subjects and Choria envelopes.
//!
//! It knows nothing of provisioning: it parses the Choria client configuration,
//! connects, encodes and decodes the protocol layers, routes replies, and makes RPC
//! calls and broadcast discoveries.

mod broker_tls;
pub mod bus;
pub mod client_config;
pub mod client_jwt;
pub mod connector;
pub mod identity;
pub(crate) mod kv;
pub mod lifecycle;
pub(crate) mod peers;
pub mod protocol;
pub(crate) mod router;
pub(crate) mod rpc;
pub mod srv;
pub mod subject;
