//! `choria-provisioner run`: start-up in Go's order (configuration, logging,
//! `/metrics`, signals, pid file), then the daemon until a signal stops it.

use std::sync::Arc;

use crate::config::Pause;
use crate::metrics::{Metrics, MetricsServer};

use super::args::Invocation;
use super::{fail, prepare, signals, usage, PidFile};

/// Runs the daemon; returns the exit code.
pub fn run(inv: &Invocation) -> i32 {
    let prepared = match prepare(inv) {
        Ok(p) => p,
        Err(e) => {
            for line in &e.lines {
                fail(line);
            }
            if e.usage {
                eprintln!("{}", usage());
            }
            return 1;
        }
    };
    let config = &prepared.config;
    let log = match crate::logging::init(&config.logfile, config.loglevel, inv.debug) {
        Ok(h) => h,
        Err(e) => return fail(format!("Provisioning could not configure logging: {e}")),
    };
    for w in &prepared.warnings {
        log::warn!("{w}");
    }
    let metrics = match Metrics::new(&config.site) {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(format!("Could not create metrics: {e}")),
    };
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let _monitor = if config.monitor_port > 0 {
        let health_pause = Arc::clone(&pause);
        let site = config.site.clone();
        let health = Arc::new(move || {
            serde_json::json!({
                "version": crate::VERSION,
                "site": site,
                "paused": health_pause.paused(),
                "connected": false,
                "leader": serde_json::Value::Null,
            })
        });
        match MetricsServer::start(
            config.monitor_host.as_deref(),
            config.monitor_port,
            Arc::clone(&metrics),
            health,
        ) {
            Ok(server) => {
                log::info!("Serving /metrics and /healthz on {}", server.local_addr());
                Some(server)
            }
            Err(e) => return fail(e),
        }
    } else {
        None
    };
    let shutdown = match signals::install(log) {
        Ok(rx) => rx,
        Err(e) => return fail(format!("Could not install signal handlers: {e}")),
    };
    let _pid = match inv.pid.as_deref() {
        Some(path) => match PidFile::write(std::path::Path::new(path)) {
            Ok(p) => Some(p),
            Err(e) => return fail(format!("Could not write PID: {e}")),
        },
        None => None,
    };
    log::info!(
        "Choria Provisioner version {} starting with configuration file {} as {}",
        crate::VERSION,
        config.file.display(),
        prepared.client.identity
    );
    // Blocks until SIGINT/SIGTERM disconnects the channel.
    let _ = shutdown.recv();
    log::info!("Choria Provisioner stopped");
    0
}
