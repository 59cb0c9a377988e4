//! The `choria-provisioner` daemon binary: everything lives in the library.

fn main() {
    std::process::exit(choria_provisioner::cli::main());
}
