//! Choria Server Provisioner.
//!
//! Layers, each importing only those below it (see `ARCHITECTURE.md`):
//! `cli` → `fleet` → `node` → `choria` → `config`, `metrics`.
//!
//! `unsafe` code is denied everywhere but in `sys`, the few system calls std has no
//! API for.
#![deny(unsafe_code)]

pub(crate) mod backoff;
pub(crate) mod budget;
pub mod choria;
pub mod cli;
pub mod clock;
pub mod config;
pub mod crypto;
// The fuzz targets' entry points: they live with the targets in `fuzz/`, and are
// compiled into the library only with the `fuzzing` feature (never into the daemon
// built for packages), so that they can reach items the library keeps to itself.
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
#[path = "../fuzz/entries.rs"]
pub mod fuzzing;
mod json_text;
pub(crate) mod logging;
pub mod metrics;
pub mod node;
pub(crate) mod proc_self;
#[cfg(feature = "sim")]
pub mod sim;
mod sys;
// A real nats-server on 127.0.0.1 for the unit tests that need a broker: the file
// the integration tests use, so that both start it alike.
#[cfg(test)]
#[path = "../tests/support/nats_server.rs"]
mod test_nats_server;
#[cfg(test)]
mod test_rng;
#[cfg(test)]
mod test_support;
pub(crate) mod throttle;
pub(crate) mod untrusted;

/// The version printed by `--version` and sent in the startup event; it comes from
/// `Cargo.toml` only, and the RPM spec reads the same value.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
