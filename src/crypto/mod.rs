//! The cryptography of provisioning, below the wire and the sequence: what a node's
//! keys, tokens and CSRs are checked with, and what the provisioner hands out.
//!
//! It knows nothing of NATS or of the provisioning steps; it reads key files, and
//! every decoder takes hostile bytes without panicking (each has a fuzz target).
//! `node` and the simulator both use it.

pub mod csr;
pub mod ids;
pub mod jwt;
pub mod key_transport;
pub mod nonce;
pub mod pem;
pub mod x509;
