//! `choria-provisioner check`: everything `run` checks, without starting anything.

use super::args::Invocation;
use super::{fail, prepare, usage};

/// Prints the effective configuration (secrets as `***`) and returns 0, or lists
/// every problem and returns 1.
pub(crate) fn check(inv: &Invocation) -> i32 {
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
            // Credentials written into the URLs are never printed.
            let brokers = p.client.brokers();
            for lookup in brokers.lookups() {
                println!("lookup: {lookup}");
            }
            println!(
                "brokers: {} ({})",
                brokers.urls.join(", "),
                brokers.describe()
            );
            if let crate::choria::client_config::BrokersFoundBy::Fallback(_) = brokers.found_by {
                eprintln!(
                    "warning: no broker is configured or found by SRV records: run would try {} \
                     (go-choria's default); set plugin.choria.middleware_hosts or SRV records",
                    brokers.urls.join(", ")
                );
            }
            println!("security_provider: {}", p.client.security_provider.as_str());
            println!("tls: {}", if p.client.insecure { "off" } else { "on" });
            if let Some(user) = p.client.broker_user() {
                println!("nats_user: {user}");
            }
            if let Some(jwt) = &p.client_jwt {
                let claims = jwt.claims();
                println!("client_jwt: {}", jwt.path());
                println!("caller_id: {}", jwt.caller_id());
                let granted = claims.granted();
                println!(
                    "permissions: {}",
                    if granted.is_empty() {
                        "(none)".to_string()
                    } else {
                        granted.join(", ")
                    }
                );
                if let Some(exp) = claims.exp {
                    println!("client_jwt_expires: {}", crate::clock::rfc3339(exp as f64));
                }
            }
            if p.config.active_active || p.config.approval {
                // What `run` makes at start: a seal it cannot make stops it.
                match crate::choria::peers::Seal::for_client(&p.client, &p.config.peer_signers) {
                    Ok(seal) => println!("peer_messages: {}", seal.describe()),
                    Err(e) => {
                        fail(format!(
                            "the instances of this site cannot share their tables: {e}"
                        ));
                        return 1;
                    }
                }
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
