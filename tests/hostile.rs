//! Hostile inputs over a real nats-server (issue #11).
//!
//! Temporary root of the `hostile` test binary: the full suite declares its own
//! modules here; `hostile/helper.rs` covers hostile helpers.
#![cfg(feature = "sim")]

mod support;

#[path = "hostile/helper.rs"]
mod helper;
