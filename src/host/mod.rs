//! Everything that happens to one server: the provisioning sequence and its crypto.

mod attempt;
pub mod driver;
pub mod failure;
mod folded_keys;
pub mod helper;
pub mod key_material;
pub mod loop_check;
pub mod outcome;
pub mod pipes;
mod proctree;
pub mod progress;
mod redact;
mod replies;
mod requests;
pub mod retry;
pub mod sequence;
mod spawn;
pub mod upgrade_slots;
pub mod version;
