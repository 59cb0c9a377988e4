//! CPU the provisioner spends per helper run, children excluded:
//! `cargo run --release --example helper_cost -- target/release/bench_helper 2000 8`
//! (the helper as `make bench` builds it)
//! runs the helper RUNS times from THREADS threads and prints this process's CPU
//! (getrusage RUSAGE_SELF), wall time per run, and the helper's own CPU per run.

use std::time::{Duration, Instant};

use choria_provisioner::node::helper::Helper;

/// User and system CPU seconds so far of this process (`RUSAGE_SELF`) or of its
/// reaped children (`RUSAGE_CHILDREN`).
fn cpu_seconds(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: see the call: plain libc call on values we own.
    unsafe { libc::getrusage(who, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(u.ru_utime), t(u.ru_stime))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let helper = args.get(1).expect("helper path");
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let helper = Helper::new(helper, Duration::from_secs(10));
    let input = br#"{"identity":"n1.example.net","csr":null,"inventory":"{\"facts\":{\"role\":\"web\"}}","jwt":null}"#;
    let (cpu0, wall0) = (cpu_seconds(libc::RUSAGE_SELF), Instant::now());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..runs / threads {
                    helper
                        .run("n1.example.net", input, false, &[], None)
                        .expect("helper run");
                }
            });
        }
    });
    let ((user, system), wall) = (
        cpu_seconds(libc::RUSAGE_SELF),
        wall0.elapsed().as_secs_f64(),
    );
    let (child_user, child_system) = cpu_seconds(libc::RUSAGE_CHILDREN);
    let per_run = |s: f64| s * 1000.0 / runs as f64;
    println!(
        "{runs} runs from {threads} threads: {:.3} ms CPU per run (this process: {:.3} user + {:.3} system), {:.3} ms wall per run; the helper itself {:.3} ms CPU",
        per_run(user + system - cpu0.0 - cpu0.1),
        per_run(user - cpu0.0),
        per_run(system - cpu0.1),
        per_run(wall),
        per_run(child_user + child_system)
    );
}
