//! Choria lifecycle events.
