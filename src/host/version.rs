//! version
