//! The trivial compiled helper `make bench` uses: reads the request, answers a fixed
//! configuration for the node, so the benchmark measures the provisioner, not a
//! script interpreter. `scripts/bench.sh` links it statically (no dynamic loader per
//! run).

use std::io::{Read, Write};

fn main() {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    // The request starts with {"identity":"<name>", (key order is part of the contract).
    let identity = input
        .strip_prefix("{\"identity\":\"")
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("");
    let _ = write!(
        std::io::stdout(),
        "{{\"defer\":false,\"msg\":\"bench\",\"configuration\":{{\"identity\":\"{identity}\",\"plugin.choria.server.provision\":\"false\",\"plugin.choria.middleware_hosts\":\"nats://broker.example.net:4222\"}}}}"
    );
}
