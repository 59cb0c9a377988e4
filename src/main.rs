//! The `choria-provisioner` daemon binary: everything lives in the library.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(choria_provisioner::cli::main());
}
