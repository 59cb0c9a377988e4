//! `choria-provisioner check`: everything `run` checks, without starting anything.

use super::args::Invocation;
use super::{fail, prepare, usage};

/// Prints the effective configuration (secrets as `***`) and returns 0, or lists
/// every problem and returns 1.
pub fn check(inv: &Invocation) -> i32 {
    match prepare(inv) {
        Ok(p) => {
            for w in &p.warnings {
                eprintln!("warning: {w}");
            }
            println!("# {} (effective configuration)", p.config.file.display());
            print!("{}", p.config.effective_yaml());
            println!(
                "# {} (Choria client configuration)",
                p.client.file.display()
            );
            println!("identity: {}", p.client.identity);
            println!("brokers: {}", p.client.middleware_hosts.join(", "));
            println!("security_provider: {}", p.client.security_provider.as_str());
            println!("tls: {}", if p.client.insecure { "off" } else { "on" });
            if !p.client.nats_user.is_empty() {
                println!("nats_user: {}", p.client.nats_user);
            }
            println!(
                "rpc_timeouts: choria_provision {}s, rpcutil {}s",
                p.client
                    .rpc_timeout(std::time::Duration::from_secs(20))
                    .as_secs(),
                p.client
                    .rpc_timeout(std::time::Duration::from_secs(2))
                    .as_secs()
            );
            println!("configuration is valid");
            0
        }
        Err(e) => {
            for line in &e.lines {
                fail(line);
            }
            if e.usage {
                eprintln!("{}", usage());
            }
            1
        }
    }
}
