//! Choria protocol v1 and v2 envelopes.
