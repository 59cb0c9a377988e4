//! Everything that happens to one server: the provisioning sequence and its crypto.

pub(crate) mod approval;
mod attempt;
pub mod driver;
pub(crate) mod failure;
pub mod helper;
pub(crate) mod key_material;
pub(crate) mod loop_check;
pub mod outcome;
pub(crate) mod pipes;
mod proctree;
pub(crate) mod progress;
mod redact;
mod replies;
mod requests;
pub(crate) mod retry;
pub(crate) mod sequence;
mod spawn;
pub(crate) mod upgrade_slots;
pub(crate) mod version;
