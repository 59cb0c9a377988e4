//! 20,000 connections to the monitor port reset right after connecting: a binary
//! of its own, so that the flood never shares the machine with `tests/doors.rs`'
//! timed scrapes and file-limit runs.
#![cfg(feature = "sim")]

mod support;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{free_port, http_get, wait_for_port, NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// `choria_provisioner_connections_refused{door="monitor",reason}` in a scrape.
fn refused(scrape: &str, reason: &str) -> u64 {
    scrape
        .lines()
        .find(|l| {
            l.starts_with("choria_provisioner_connections_refused{")
                && l.contains("door=\"monitor\"")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {reason} refusals in the scrape"))
}

/// One connection closed with `SO_LINGER` 0: the close is a TCP RST.
fn connect_and_reset(port: u16) -> bool {
    let Ok(s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) on a socket we own, with a linger of its size.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    true
}

/// Some connections are reset before the daemon could read their address: nothing
/// on the daemon's stderr (no panic message), `connections_refused{reason="reset"}`
/// counts them, and the port answers after.
#[test]
fn twenty_thousand_connections_reset_at_once_cost_a_counter_not_a_panic_message() {
    let server = NatsServer::start();
    let dir = TempDir::new("doors-reset");
    let port = free_port();
    let yaml = format!(
        "helper: {}\nshutdown_timeout: 3s\nmonitor_host: 127.0.0.1\nmonitor_port: {port}\n",
        support::daemon::example_helper().display(),
    );
    let (cfg, yaml) = support::daemon::files(&dir, "doors.test", &server.url(), &yaml);
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut child = Command::new(BIN)
        .args(["--config", &yaml.display().to_string()])
        .args(["--choria-config", &cfg.display().to_string()])
        .stderr(stderr)
        .spawn()
        .unwrap();
    assert!(wait_for_port(port, Duration::from_secs(20)), "monitor up");
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                (0..10_000)
                    .take_while(|_| started.elapsed() < Duration::from_secs(60))
                    .filter(|_| connect_and_reset(port))
                    .count()
            })
        })
        .collect();
    let made: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    std::thread::sleep(Duration::from_millis(500));
    let (status, scrape) = http_get(port, "/metrics");
    assert_eq!(status, 200);
    let reset = refused(&scrape, "reset");
    println!("{made} connections reset; {reset} counted as reset");
    assert!(made >= 19_000, "{made} made");
    assert!(reset > 0, "counted");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let printed = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(!printed.contains("panicked"), "{printed}");
    assert!(printed.trim().is_empty(), "nothing on stderr: {printed}");
}
