//! Everything that happens to one server: the provisioning sequence and its crypto.

pub mod helper;
pub mod keys;
pub mod outcome;
pub mod pipes;
mod proctree;
mod redact;
pub mod rpc;
pub mod sequence;
pub mod version;
