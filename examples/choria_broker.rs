//! A Choria broker for `make demo BROKER=issuer|mtls`: the tests' broker front end
//! (`tests/support/broker.rs`) before its own nats-server, with credentials from
//! `choria-fleet-sim keys`. It writes into OUT_DIR:
//!
//! * `broker.env`: `BROKER_URL` (the front end) and `BROKER_KEYS` (the keys directory,
//!   for `choria-fleet-sim --keys`);
//! * `broker-security.cfg`: the provisioner's `plugin.security.*` lines;
//! * `broker.yaml`: the provisioner's YAML lines (password, token, TLS on);
//!
//! then serves until SIGINT or SIGTERM, and prints what it let in and refused.
//!
//! Usage: `choria_broker issuer|mtls OUT_DIR` (needs `NATS_SERVER` or a nats-server on
//! `PATH`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;

use support::broker::{ChoriaBroker, Landing, Network};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let network = match args.first().map(String::as_str) {
        Some("issuer") => Network::Issuer,
        Some("mtls") => Network::MutualTls,
        _ => {
            eprintln!("usage: choria_broker issuer|mtls OUT_DIR");
            std::process::exit(2);
        }
    };
    let Some(out) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: choria_broker issuer|mtls OUT_DIR");
        std::process::exit(2);
    };
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]);
    let mut signals = match signals {
        Ok(s) => s,
        Err(e) => {
            eprintln!("choria_broker: signals: {e}");
            std::process::exit(1);
        }
    };
    let broker = ChoriaBroker::start(network);
    let write = |name: &str, text: String| {
        if let Err(e) = std::fs::write(out.join(name), text) {
            eprintln!("choria_broker: cannot write {name}: {e}");
            std::process::exit(1);
        }
    };
    write("broker-security.cfg", broker.choria_cfg());
    write("broker.yaml", broker.yaml());
    // Written last: its presence says the others are there.
    write(
        "broker.env",
        format!(
            "BROKER_URL={}\nBROKER_KEYS={}\n",
            broker.url(),
            broker.dir().display()
        ),
    );
    eprintln!(
        "choria_broker: {network:?} broker on {} before nats-server on 127.0.0.1:{}",
        broker.url(),
        broker.backend.port
    );
    let _ = signals.forever().next();
    let admitted = broker.front.admitted();
    let count = |l| admitted.iter().filter(|a| a.landing == l).count();
    eprintln!(
        "choria_broker: let in {} provisioner and {} provisioning-mode connections; refused {}: {:?}",
        count(Landing::Provisioner),
        count(Landing::ProvisioningServer),
        broker.front.refusals().len(),
        broker.front.refusals()
    );
}
