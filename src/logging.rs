//! Logging.
