//! `choria-fleet-sim`: plays N go-choria servers in provisioning mode on a NATS
//! broker, for tests, the demo, the benchmark, and for trying a helper or a
//! configuration before real machines see it. `choria-fleet-sim keys --dir D`
//! writes the credentials and configuration snippets for such a trial.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use argh::FromArgs;
use choria_provisioner::config::parse_duration;
use choria_provisioner::sim::keygen::{write_keys, KeysOptions};
use choria_provisioner::sim::{CsrKey, Faults, Sim, SimOptions};

/// Writes an issuer, a provisioning JWT, a server-JWT signing key and token, a TLS CA
/// with broker and provisioner certificates, and the provisioner YAML, choria.cfg,
/// nats-server.conf and helper that use them.
#[derive(FromArgs)]
struct KeysArgs {
    /// directory to write into (created if missing)
    #[argh(option)]
    dir: String,
    /// provisioning token (default: random)
    #[argh(option)]
    token: Option<String>,
    /// provisioning broker URL (default nats://127.0.0.1:4222)
    #[argh(option, default = "String::from(\"nats://127.0.0.1:4222\")")]
    nats: String,
    /// nodes speak protocol v2 and the provisioner uses the choria security provider
    #[argh(switch)]
    v2: bool,
    /// nodes allow in-place upgrades (JWT update claim)
    #[argh(switch)]
    upgrades: bool,
    /// the provisioner's identity (default provisioner.example.net)
    #[argh(option, default = "String::from(\"provisioner.example.net\")")]
    identity: String,
    /// extra DNS name or IP for the broker certificate (repeatable)
    #[argh(option)]
    broker_name: Vec<String>,
    /// validity of tokens and certificates (default 365d)
    #[argh(option, default = "String::from(\"365d\")")]
    validity: String,
    /// replace existing files
    #[argh(switch)]
    force: bool,
}

/// Emulates a fleet of provisioning-mode Choria servers (`choria-fleet-sim keys --help`
/// for the credentials command).
#[derive(FromArgs)]
struct Args {
    /// NATS URL of the provisioning broker (default nats://127.0.0.1:4222)
    #[argh(option, default = "String::from(\"nats://127.0.0.1:4222\")")]
    nats: String,
    /// allow a broker that is not on this machine
    #[argh(switch)]
    allow_remote: bool,
    /// number of nodes (default 10)
    #[argh(option, default = "10")]
    nodes: usize,
    /// how long to run, e.g. 60s or 10m (default: until every node is provisioned, shut down or rejected, or a signal)
    #[argh(option)]
    duration: Option<String>,
    /// provisioning token the nodes expect (default: accept any)
    #[argh(option, default = "String::new()")]
    token: String,
    /// server version the nodes report (default 0.30.2)
    #[argh(option, default = "String::from(\"0.30.2\")")]
    version: String,
    /// nodes allow release_update
    #[argh(switch)]
    upgradable: bool,
    /// nodes booted per second (default: all at once)
    #[argh(option, default = "0.0")]
    boot_rate: f64,
    /// fraction of nodes that come back in provisioning mode after their restart
    #[argh(option, default = "0.0")]
    comeback: f64,
    /// fraction of nodes that ignore their first requests
    #[argh(option, default = "0.0")]
    fault_silent: f64,
    /// how many requests a silent node ignores (default 2)
    #[argh(option, default = "2")]
    silent_first: u32,
    /// fraction of nodes that answer slowly
    #[argh(option, default = "0.0")]
    fault_slow: f64,
    /// delay of a slow node's answers in milliseconds (default 1500)
    #[argh(option, default = "1500")]
    slow_ms: u64,
    /// fraction of nodes whose first answer is an error status
    #[argh(option, default = "0.0")]
    fault_error: f64,
    /// fraction of nodes whose first answer is garbage
    #[argh(option, default = "0.0")]
    fault_garbage: f64,
    /// fraction of nodes that reboot in the middle of being provisioned
    #[argh(option, default = "0.0")]
    fault_reboot: f64,
    /// hex ed25519 seed that signs the nodes' provisioning JWT (default: random); its
    /// public key then verifies server JWTs
    #[argh(option)]
    issuer_seed: Option<String>,
    /// node features, comma separated: v2 (protocol v2 only), upgrades (release_update
    /// allowed), no-lock (no provisioning lock, as servers older than go-choria v0.29)
    #[argh(option, default = "String::new()")]
    features: String,
    /// a directory written by `choria-fleet-sim keys`: its provisioning.jwt, issuer.public and ca.pem (TLS to the broker)
    #[argh(option)]
    keys: Option<String>,
    /// key type gencsr makes: rsa (as real nodes, default) or ec (cheap, for benchmarks)
    #[argh(option, default = "String::from(\"rsa\")")]
    csr_key: String,
    /// request-processing threads (default 2)
    #[argh(option, default = "2")]
    workers: usize,
    /// after a broker restart, each node reconnects a random number of seconds up
    /// to this later, as real servers do (default 0: all with the connection)
    #[argh(option, default = "0.0")]
    reconnect_spread: f64,
    /// write the per-node JSON summary here at the end (default: standard output)
    #[argh(option)]
    summary: Option<String>,
    /// no progress line
    #[argh(switch)]
    quiet: bool,
}

fn is_loopback(url: &str) -> bool {
    url.split(',').all(|u| {
        let host = choria_provisioner::choria::client_config::broker_host_port(u)
            .map(|(h, _)| h)
            .unwrap_or_default();
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("keys") {
        let rest: Vec<&str> = argv[2..].iter().map(String::as_str).collect();
        let code = match KeysArgs::from_args(&["choria-fleet-sim keys"], &rest) {
            Ok(args) => keys(args),
            Err(early) => {
                let failed = early.status.is_err();
                if failed {
                    eprintln!("{}", early.output);
                } else {
                    println!("{}", early.output);
                }
                i32::from(failed)
            }
        };
        std::process::exit(code);
    }
    let args: Args = argh::from_env();
    std::process::exit(run(args));
}

fn keys(args: KeysArgs) -> i32 {
    let validity = match parse_duration(&args.validity) {
        Ok(d) if d >= Duration::from_secs(3600) => d,
        Ok(_) => {
            eprintln!("choria-fleet-sim keys: --validity must be at least 1h");
            return 1;
        }
        Err(e) => {
            eprintln!("choria-fleet-sim keys: --validity: {e}");
            return 1;
        }
    };
    let token = args.token.unwrap_or_else(|| {
        let mut b = [0u8; 16];
        choria_provisioner::crypto::ids::random_bytes(&mut b);
        hex::encode(b)
    });
    let dir = std::fs::create_dir_all(&args.dir)
        .and_then(|_| std::fs::canonicalize(&args.dir))
        .unwrap_or_else(|_| PathBuf::from(&args.dir));
    let options = KeysOptions {
        dir,
        token,
        url: args.nats,
        v2: args.v2,
        upgrades: args.upgrades,
        identity: args.identity,
        broker_names: args.broker_name,
        validity,
        force: args.force,
    };
    match write_keys(&options) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            0
        }
        Err(e) => {
            eprintln!("choria-fleet-sim keys: {e}");
            1
        }
    }
}

/// Reads a hex ed25519 public key file.
fn read_public(path: &Path) -> Result<[u8; 32], String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    hex::decode(text.trim())
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .ok_or_else(|| format!("{} is not a hex ed25519 public key", path.display()))
}

fn run(args: Args) -> i32 {
    if !args.allow_remote && !is_loopback(&args.nats) {
        eprintln!(
            "choria-fleet-sim: refusing to flood {} with simulated servers: it is not on this machine (use --allow-remote)",
            args.nats
        );
        return 1;
    }
    let duration = match args.duration.as_deref().map(parse_duration) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => {
            eprintln!("choria-fleet-sim: --duration: {e}");
            return 1;
        }
    };
    let issuer_seed = match args.issuer_seed.as_deref() {
        None => None,
        Some(hex) => match hex::decode(hex.trim())
            .ok()
            .and_then(|s| <[u8; 32]>::try_from(s).ok())
        {
            Some(seed) => Some(seed),
            None => {
                eprintln!("choria-fleet-sim: --issuer-seed must be 64 hex characters");
                return 1;
            }
        },
    };
    let (mut v2, mut upgradable) = (false, args.upgradable);
    let mut lock_window = SimOptions::default().lock_window;
    for feature in args
        .features
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        match feature {
            "v2" => v2 = true,
            "upgrades" => upgradable = true,
            "no-lock" => lock_window = None,
            other => {
                eprintln!(
                    "choria-fleet-sim: --features: unknown feature {other:?} (known: v2, upgrades, no-lock)"
                );
                return 1;
            }
        }
    }
    let csr_key = match args.csr_key.as_str() {
        "rsa" => CsrKey::Rsa,
        "ec" => CsrKey::Ec,
        other => {
            eprintln!("choria-fleet-sim: --csr-key must be rsa or ec, not {other:?}");
            return 1;
        }
    };
    let (mut jwt, mut issuer_public, mut tls_ca) = (None, None, None);
    if let Some(dir) = &args.keys {
        let dir = Path::new(dir);
        let path = dir.join("provisioning.jwt");
        match std::fs::read_to_string(&path) {
            Ok(text) => jwt = Some(text),
            Err(e) => {
                eprintln!("choria-fleet-sim: --keys: {}: {e}", path.display());
                return 1;
            }
        }
        match read_public(&dir.join("issuer.public")) {
            Ok(k) => issuer_public = Some(k),
            Err(e) => {
                eprintln!("choria-fleet-sim: --keys: {e}");
                return 1;
            }
        }
        tls_ca = Some(dir.join("ca.pem"));
    }
    let options = SimOptions {
        issuer_seed,
        issuer_public,
        jwt,
        v2,
        csr_key,
        tls_ca,
        nodes: args.nodes,
        version: args.version,
        token: args.token,
        boot_rate: args.boot_rate,
        comeback: args.comeback,
        upgradable,
        workers: args.workers,
        faults: Faults {
            silent: args.fault_silent,
            silent_first: args.silent_first,
            slow: args.fault_slow,
            slow_by: Duration::from_millis(args.slow_ms),
            error: args.fault_error,
            garbage: args.fault_garbage,
            reboot: args.fault_reboot,
        },
        lock_window,
        reconnect_spread: (args.reconnect_spread > 0.0)
            .then(|| Duration::from_secs_f64(args.reconnect_spread.min(3600.0))),
        ..SimOptions::default()
    };
    let sim = match Sim::start(&args.nats, options) {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("choria-fleet-sim: cannot connect to {}: {e}", args.nats);
            return 1;
        }
    };
    let stop = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(mut signals) => {
            let (tx, rx) = crossbeam_channel::bounded::<()>(0);
            std::thread::spawn(move || {
                if signals.forever().next().is_some() {
                    drop(tx);
                }
            });
            rx
        }
        Err(e) => {
            eprintln!("choria-fleet-sim: cannot install signal handlers: {e}");
            return 1;
        }
    };
    let started = Instant::now();
    loop {
        let signalled = stop
            .recv_timeout(Duration::from_secs(1))
            .is_err_and(|e| e.is_disconnected());
        let p = sim.progress();
        if !args.quiet {
            eprintln!(
                "choria-fleet-sim: booted {}/{} discovery replies {} configured {} restarted {} provisioned {} shut down {} rejected {} failed {} dropped {}",
                p.booted, args.nodes, p.discovery_replies, p.configured, p.restarted, p.provisioned, p.shut_down, p.rejected, p.failed, p.dropped
            );
        }
        let timed_out = duration.is_some_and(|d| started.elapsed() >= d);
        let done = duration.is_none() && p.finished() as usize >= args.nodes;
        if signalled || timed_out || done {
            break;
        }
    }
    // Written node by node, before the nodes are let go (as the summary was taken).
    let written = match &args.summary {
        Some(path) => std::fs::File::create(path).and_then(|file| {
            sim.write_summary(&mut std::io::BufWriter::with_capacity(1 << 16, file))
        }),
        None => {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            sim.write_summary(&mut out)
                .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
                .and_then(|()| std::io::Write::flush(&mut out))
        }
    };
    sim.stop();
    if let Err(e) = written {
        let to = args.summary.as_deref().unwrap_or("standard output");
        eprintln!("choria-fleet-sim: cannot write the summary to {to}: {e}");
        return 1;
    }
    0
}
