//! Round trip and CPU cost of one direct RPC on loopback, measured against
//! `choria-fleet-sim` running in another process:
//!
//! ```sh
//! choria-fleet-sim --nats nats://127.0.0.1:4222 --nodes 100 --quiet &
//! cargo run --release --example rpc_latency -- nats://127.0.0.1:4222 5000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::choria::connector::Connector;
use choria_provisioner::choria::identity::Identity;
use choria_provisioner::choria::rpc::RpcClient;
use choria_provisioner::metrics::{Metrics, ProcessStats};

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(5000);
    let dir = std::env::temp_dir().join(format!("rpc-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("choria.cfg");
    std::fs::write(
        &cfg,
        format!("identity = bench.local\nplugin.choria.middleware_hosts = {url}\n"),
    )
    .unwrap();
    let mut client = ClientConfig::load(&cfg).unwrap();
    client.insecure = true;
    let metrics = Arc::new(Metrics::new("bench").unwrap());
    let (_stop, shutdown) = crossbeam_channel::bounded::<()>(0);
    let conn = Connector::connect(&client, &metrics, &shutdown).unwrap();
    let rpc = RpcClient::new(&conn, &client, Arc::clone(&metrics)).unwrap();
    let data = serde_json::json!({});
    let mut times = Vec::with_capacity(calls);
    let cpu_before = ProcessStats::read().cpu_seconds;
    for n in 0..calls {
        let node = Identity::parse(&format!("sim-{:05}.example.net", n % 100)).unwrap();
        let started = Instant::now();
        rpc.call(&node, "rpcutil", "inventory", &data, Duration::from_secs(4))
            .expect("reply");
        times.push(started.elapsed());
    }
    let cpu = ProcessStats::read().cpu_seconds - cpu_before;
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!(
        "{calls} sequential rpcutil#inventory calls: median {:.2} ms, p99 {:.2} ms, CPU {:.1} µs per call (this process)",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        cpu / calls as f64 * 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
