//! Every door holds: the daemon's binary, under its file limit of 1,024, against one
//! hostile client of its monitor port or its control socket at a time, while 20
//! honest nodes boot on a real nats-server. For each attack: the daemon lives, the
//! 20 nodes are provisioned, `/metrics` answers within a second during the attack
//! and after it, the resident memory grows by less than 16 MB, and SIGTERM sent
//! during the attack stops the daemon within its `shutdown_timeout`.
#![cfg(feature = "sim")]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::rig::{sim, wait_provisioned, wait_until};
use support::{free_port, wait_for_port, NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// The daemon's `shutdown_timeout` in these tests.
const SHUTDOWN: Duration = Duration::from_secs(3);

/// The daemon's binary with the example helper, a monitor port and a control
/// socket, under a file limit of 1,024 (soft and hard: systemd's default soft
/// limit, which the daemon then cannot raise).
struct Daemon {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl Daemon {
    fn start(url: &str, tag: &str) -> Daemon {
        Daemon::start_with_files(url, tag, 1024)
    }

    /// [`Daemon::start`] under a file limit of `files`.
    fn start_with_files(url: &str, tag: &str, files: u32) -> Daemon {
        let dir = TempDir::new(tag);
        let port = free_port();
        let yaml = format!(
            "helper: {}\nworkers: 4\nreply_grace: 300ms\nshutdown_timeout: 3s\n\
             monitor_host: 127.0.0.1\nmonitor_port: {port}\ncontrol_socket: {}\n",
            support::daemon::example_helper().display(),
            dir.path().join("control.sock").display(),
        );
        let (cfg, yaml) = support::daemon::files(&dir, "doors.test", url, &yaml);
        let child = Command::new("sh")
            .args([
                "-c",
                &format!("ulimit -n {files} && exec \"$0\" \"$@\""),
                BIN,
            ])
            .args(["--config", &yaml.display().to_string()])
            .args(["--choria-config", &cfg.display().to_string()])
            .spawn()
            .unwrap();
        assert!(wait_for_port(port, Duration::from_secs(20)), "monitor up");
        let socket = dir.path().join("control.sock");
        wait_until("control socket", Duration::from_secs(10), || {
            socket.exists()
        });
        Daemon {
            child: Some(child),
            port,
            dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Resident memory now, in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        kb * 1024
    }

    /// The open file limit the daemon runs under, as it logged it.
    fn logged(&self, what: &str) -> bool {
        std::fs::read_to_string(self.dir.path().join("p.log"))
            .unwrap_or_default()
            .contains(what)
    }

    /// A scrape of `/metrics`: its text, having checked it came within a second.
    fn scrape(&self) -> String {
        let started = Instant::now();
        let (status, body) = get(self.port, "/metrics");
        let took = started.elapsed();
        assert_eq!(status, 200, "a scrape failed after {took:?}");
        assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
        body
    }

    /// SIGTERM; asserts the daemon ended cleanly within its shutdown_timeout (and a
    /// second for the process to go).
    fn terminate(&mut self) -> Duration {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0), "a clean stop");
                return started.elapsed();
            }
            if started.elapsed() > SHUTDOWN + Duration::from_secs(1) {
                let _ = child.kill();
                panic!("SIGTERM did not stop the daemon within {SHUTDOWN:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A GET on 127.0.0.1:`port`: status and body (0 when there was no answer).
fn get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// A value of `connections_refused{door, reason}` in a scrape.
fn refused(scrape: &str, door: &str, reason: &str) -> u64 {
    let series = format!(
        "choria_provisioner_connections_refused{{door=\"{door}\",reason=\"{reason}\",site=\"\"}} "
    );
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape"))
}

/// An attack running on threads of its own until [`Attack::stop`] (or 60 s).
struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// How many connections or requests it made.
    made: Arc<AtomicU64>,
}

/// What each of an attack's threads is handed: whether to go on, and where to count
/// what it made.
struct Attacker {
    stop: Arc<AtomicBool>,
    since: Instant,
    made: Arc<AtomicU64>,
}

impl Attacker {
    /// Until told to stop, or for 60 s at most.
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Acquire) && self.since.elapsed() < Duration::from_secs(60)
    }

    /// Counts one connection or request made.
    fn made_one(&self) {
        self.made.fetch_add(1, Ordering::Relaxed);
    }
}

impl Attack {
    /// Runs `f` on `threads` threads.
    fn start(threads: usize, f: impl Fn(&Attacker) + Send + Sync + 'static) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicU64::new(0));
        let f = Arc::new(f);
        let threads = (0..threads)
            .map(|_| {
                let attacker = Attacker {
                    stop: Arc::clone(&stop),
                    since: Instant::now(),
                    made: Arc::clone(&made),
                };
                let f = Arc::clone(&f);
                std::thread::spawn(move || f(&attacker))
            })
            .collect();
        Attack {
            stop,
            threads,
            made,
        }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().unwrap();
        }
        self.made.load(Ordering::Acquire)
    }
}

/// Runs `attack` against a fresh daemon while 20 nodes boot, for `hold` at least;
/// checks every promise of the module's doc (SIGTERM is sent during a second run
/// of the attack, after a scrape between the two) and returns the scrape taken
/// after the first.
fn under_attack(tag: &str, hold: Duration, attack: impl Fn(u16) -> Attack) -> String {
    let server = NatsServer::start();
    let mut daemon = Daemon::start(&server.url(), tag);
    assert!(
        daemon.logged("Open file limit: 1024 (hard limit 1024)"),
        "the limit is logged"
    );
    daemon.scrape();
    let rss_before = daemon.rss();
    let attack_of = attack;
    let attack = attack_of(daemon.port);
    std::thread::sleep(Duration::from_millis(500));
    let fleet = sim(&server.url(), 20, |_| {});
    let booted = Instant::now();
    let mut peak = daemon.rss();
    while fleet.progress().provisioned < 20 && booted.elapsed() < Duration::from_secs(30) {
        daemon.scrape();
        peak = peak.max(daemon.rss());
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_provisioned(&fleet, 20, Duration::from_secs(1));
    let took = booted.elapsed();
    while booted.elapsed() < hold {
        daemon.scrape();
        peak = peak.max(daemon.rss());
        std::thread::sleep(Duration::from_millis(100));
    }
    let grown = peak.saturating_sub(rss_before);
    println!(
        "{tag}: 20 nodes in {took:?}, RSS {} -> peak {} KB (+{} KB), {} attacking connections or requests",
        rss_before / 1024,
        peak / 1024,
        grown / 1024,
        attack.made.load(Ordering::Acquire)
    );
    assert!(grown < 16 << 20, "RSS grew by {grown} bytes");
    attack.stop();
    let after = daemon.scrape();
    // Stopped while the attack runs again.
    let again = attack_of(daemon.port);
    std::thread::sleep(Duration::from_millis(500));
    daemon.scrape();
    let stopped_in = daemon.terminate();
    println!("{tag}: stopped {stopped_in:?} after SIGTERM");
    again.stop();
    after
}

#[test]
fn a_request_announcing_a_huge_body_is_refused_and_kills_nothing() {
    let scrape = under_attack("doors-huge-body", Duration::ZERO, |port| {
        Attack::start(2, move |a| {
            while a.running() {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = s.write_all(
                        b"GET /healthz HTTP/1.1\r\nContent-Length: 1152921504606846976\r\n\r\n",
                    );
                    let mut answer = [0u8; 64];
                    // Nothing at all once the daemon is stopping (its port closes).
                    let n = s.read(&mut answer).unwrap_or(0);
                    if n > 0 {
                        assert!(
                            answer[..n].starts_with(b"HTTP/1.1 413"),
                            "{:?}",
                            &answer[..n]
                        );
                        a.made_one();
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    });
    assert!(refused(&scrape, "monitor", "body_too_large") > 10);
}

#[test]
fn bodies_that_never_come_hold_nothing_past_their_deadline() {
    // Held past the 5 s deadline of a request's head and body.
    let scrape = under_attack("doors-no-body", Duration::from_secs(7), |port| {
        // 40 connections at a time, each announcing 1,000 bytes that never come
        // (under the body cap, so the server waits for them), opened again as the
        // server drops them.
        Attack::start(40, move |a| {
            while a.running() {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nContent-Length: 1000\r\n\r\n");
                a.made_one();
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 64];
                while a.running() {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        _ => break,
                    }
                }
            }
        })
    });
    let dropped =
        refused(&scrape, "monitor", "head_timeout") + refused(&scrape, "monitor", "evicted");
    assert!(dropped >= 40, "{dropped}");
}

#[test]
fn five_hundred_idle_connections_starve_neither_helpers_nor_scrapes() {
    let scrape = under_attack("doors-idle", Duration::ZERO, |port| {
        // 510 connections held open and silent; those the server closes are opened
        // again, so 510 are always there or on their way.
        Attack::start(10, move |a| {
            let mut held: Vec<TcpStream> = Vec::new();
            while a.running() {
                held.retain(|s| {
                    let _ = s.set_nonblocking(true);
                    let mut buf = [0u8; 1];
                    !matches!((&*s).read(&mut buf), Ok(0))
                });
                while held.len() < 51 {
                    match TcpStream::connect(("127.0.0.1", port)) {
                        Ok(s) => {
                            held.push(s);
                            a.made_one();
                        }
                        Err(_) => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    assert!(refused(&scrape, "monitor", "evicted") > 400);
}

#[test]
fn an_endless_header_line_costs_8_kib_not_200_mb() {
    let scrape = under_attack("doors-endless-head", Duration::ZERO, |port| {
        Attack::start(1, move |a| {
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = 0u64;
            // 200 MB of one header line, over as many connections as it takes.
            while a.running() && sent < 200 << 20 {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                a.made_one();
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nX-Endless: ");
                while a.running() && s.write_all(&chunk).is_ok() {
                    sent += chunk.len() as u64;
                }
            }
        })
    });
    assert!(refused(&scrape, "monitor", "head_too_large") >= 1);
}

#[test]
fn the_control_socket_drops_a_dripping_client_and_refuses_another_uid() {
    let server = NatsServer::start();
    let mut daemon = Daemon::start(&server.url(), "doors-control");
    let socket = daemon.dir.path().join("control.sock");
    // One byte every 1.9 s: each read is quick, the request never ends.
    let drip = {
        let stream = UnixStream::connect(&socket).unwrap();
        std::thread::spawn(move || {
            let started = Instant::now();
            for byte in br#"{"command":"pause"}"#.iter().take(10) {
                if (&stream).write_all(&[*byte]).is_err() {
                    return started.elapsed();
                }
                std::thread::sleep(Duration::from_millis(1900));
            }
            started.elapsed()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // Root's pause meanwhile.
    let config = daemon.dir.path().join("p.yaml");
    let asked = Instant::now();
    let out = Command::new(BIN)
        .args([
            "pause",
            "--reason",
            "doors",
            "--config",
            &config.display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    let dropped_after = drip.join().unwrap();
    assert!(
        dropped_after < Duration::from_secs(6),
        "the dripping client was dropped after {dropped_after:?}"
    );
    // Another uid, on a socket an operator made world-writable by mistake: refused
    // by its credentials, not by the file's mode.
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    // setpriv must be able to switch (not in a user namespace that maps root alone).
    let setpriv = support::on_path("setpriv")
        && Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if is_root && setpriv {
        use std::os::unix::fs::PermissionsExt;
        for path in [daemon.dir.path(), socket.as_path()] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(["resume", "--config", &config.display().to_string()])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "another uid may not resume");
        assert!(said.contains("no answer from the provisioner"), "{said}");
        let scrape = daemon.scrape();
        assert_eq!(refused(&scrape, "control", "peer"), 1);
        assert!(daemon.logged("The control socket refused uid 65534"));
        let health = get(daemon.port, "/healthz").1;
        assert!(
            health.contains("\"reason\":\"doors\""),
            "still paused: {health}"
        );
    } else {
        println!("not root, or setpriv cannot switch uid here: another uid's refusal is not tried");
    }
    let scrape = daemon.scrape();
    assert_eq!(refused(&scrape, "control", "timeout"), 1);
    // A held connection delays no stop.
    let _held = UnixStream::connect(&socket).unwrap();
    let stopped_in = daemon.terminate();
    println!("stopped {stopped_in:?} after SIGTERM with a control client connected");
}

#[test]
fn a_failed_accept_is_waited_out_and_the_port_answers_again() {
    // Under a file limit of 64 the monitor runs out of descriptors before it reaches
    // its cap of connections: accept fails with EMFILE. The accept loop used to end
    // on the first failure, and the port never answered again.
    let server = NatsServer::start();
    let mut daemon = Daemon::start_with_files(&server.url(), "doors-emfile", 64);
    daemon.scrape();
    let port = daemon.port;
    let held: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    drop(held);
    // Waited out (at most 1 s between tries), then served again.
    let mut answered = None;
    let started = Instant::now();
    while answered.is_none() && started.elapsed() < Duration::from_secs(10) {
        let (status, body) = get(port, "/metrics");
        if status == 200 {
            answered = Some(body);
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let scrape = answered.expect("the port answers again once descriptors are free");
    assert!(
        refused(&scrape, "monitor", "accept_failed") > 0,
        "the failed accepts were counted"
    );
    assert!(daemon.logged("HTTP accept failed"), "and logged");
    daemon.terminate();
}
