//! Everything that happens to one server: the provisioning sequence and its crypto.

pub mod crypto;
pub mod helper;
pub mod outcome;
pub mod pem;
pub mod tokens;
pub mod version;
