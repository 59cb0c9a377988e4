//! The helper contract with real child processes: input on stdin, every failure mode
//! of §4.4, the timeout killing the whole process group, and the output cap.

mod support;

use std::time::{Duration, Instant};

use choria_provisioner::choria::identity::Identity;
use choria_provisioner::node::helper::{Helper, HelperError, HelperInput, MAX_OUTPUT};
use support::TempDir;

fn input() -> Vec<u8> {
    serde_json::to_vec(&HelperInput {
        identity: &Identity::parse("n1.example.net").unwrap(),
        csr: None,
        ed25519_pubkey: None,
        inventory: r#"{"facts":{"role":"web"}}"#,
        jwt: None,
    })
    .unwrap()
}

fn helper(dir: &TempDir, body: &str) -> Helper {
    script_helper(
        dir,
        "helper.sh",
        &format!("#!/bin/sh\n{body}\n"),
        Duration::from_secs(2),
    )
}

/// A helper running the script `name`, written into `dir` with `text`.
fn script_helper(dir: &TempDir, name: &str, text: &str, timeout: Duration) -> Helper {
    Helper::new(&dir.script(name, text).display().to_string(), timeout)
}

/// Runs `body` as a helper script with `timeout`, checks that the run ended in a
/// timeout, and returns its error and how long it took.
fn timed_out(dir: &TempDir, body: &str, timeout: Duration) -> (HelperError, Duration) {
    let h = script_helper(dir, "helper.sh", &format!("#!/bin/sh\n{body}\n"), timeout);
    let started = Instant::now();
    let e = h.run("n1", &input(), false, &[], None).unwrap_err();
    assert!(matches!(e, HelperError::Timeout(..)), "{e:?}");
    (e, started.elapsed())
}

#[test]
fn receives_the_input_and_returns_the_configuration() {
    let dir = TempDir::new("helper");
    let seen = dir.path().join("seen.json");
    let h = helper(
        &dir,
        &format!(
            "cat > {}\necho '{{\"defer\":false,\"msg\":\"ok\",\"configuration\":{{\"identity\":\"n1.example.net\",\"plugin.choria.server.provision\":\"false\"}}}}'",
            seen.display()
        ),
    );
    let run = h.run("n1.example.net", &input(), false, &[], None).unwrap();
    assert_eq!(run.output.msg, "ok");
    assert_eq!(
        run.output.configuration["plugin.choria.server.provision"],
        "false"
    );
    let seen: serde_json::Value = serde_json::from_slice(&std::fs::read(seen).unwrap()).unwrap();
    assert_eq!(seen["identity"], "n1.example.net");
    assert!(
        seen["inventory"].is_string(),
        "inventory travels as a JSON string"
    );
}

#[test]
fn arguments_are_split_shell_style_and_found_on_path() {
    let h = Helper::new(
        r#"sh -c 'echo "{\"defer\": true, \"msg\": \"$0\"}"' 'with space'"#,
        Duration::from_secs(2),
    );
    let run = h.run("n1", &input(), false, &[], None).unwrap();
    assert!(run.output.defer);
    assert_eq!(run.output.msg, "with space");
}

#[test]
fn defer_is_an_answer_not_an_error() {
    let dir = TempDir::new("helper");
    let h = helper(
        &dir,
        "echo '{\"defer\": true, \"shutdown\": true, \"msg\": \"not in CMDB\"}'",
    );
    let out = h.run("n1", &input(), false, &[], None).unwrap().output;
    assert!(out.defer && out.shutdown);
    assert_eq!(out.msg, "not in CMDB");
}

#[test]
fn paused_refuses_to_start() {
    let h = Helper::new("/bin/true", Duration::from_secs(1));
    let e = h.run("n1", &input(), true, &[], None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "provisioning is paused, cannot perform /bin/true"
    );
}

#[test]
fn bad_quoting_and_missing_programs() {
    let e = Helper::new("helper 'x", Duration::from_secs(1))
        .run("n1", &input(), false, &[], None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot parse helper command: unterminated ' quote"
    );
    let e = Helper::new("/no/such/helper --x", Duration::from_secs(1))
        .run("n1", &input(), false, &[], None)
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot start /no/such/helper --x: "),
        "{e}"
    );
}

/// How a helper with `body` fails for node n1, with `secrets` to hide.
fn failure(body: &str, secrets: &[&str]) -> HelperError {
    let dir = TempDir::new("helper");
    helper(&dir, body)
        .run("n1", &input(), false, secrets, None)
        .unwrap_err()
}

#[test]
fn garbage_output_is_a_decode_error() {
    let e = failure("echo 'this is not json'", &[]);
    assert!(matches!(e, HelperError::Decode(..)), "{e:?}");
    assert!(
        e.to_string().starts_with("cannot decode output from "),
        "{e}"
    );
    let e = failure("echo '{\"configuration\": {\"port\": 4222}}'", &[]);
    assert!(
        e.to_string().contains("invalid type"),
        "a number where a string belongs: {e}"
    );
}

#[test]
fn no_output_is_zero_bytes_and_a_non_zero_exit_is_reported_with_its_status() {
    let e = failure("cat >/dev/null", &[]);
    assert!(
        e.to_string().ends_with("output: zero bytes received"),
        "{e}"
    );
    let e = failure("echo '{}'; echo 'boom s3cret' >&2; exit 3", &["s3cret"]);
    assert!(e.to_string().ends_with(": exit status 3"), "{e}");
}

#[test]
fn a_hanging_helper_and_its_children_are_killed_at_the_timeout() {
    let dir = TempDir::new("helper");
    let pidfile = dir.path().join("grandchild.pid");
    // The grandchild keeps stdout open; only killing the process group ends the read.
    let body = format!("sleep 30 &\necho $! > {}\nsleep 30", pidfile.display());
    let (e, took) = timed_out(&dir, &body, Duration::from_millis(500));
    assert!(took < Duration::from_secs(5), "bounded by the timeout");
    assert!(e.to_string().contains("signal: killed"), "{e}");
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Dead means gone or a zombie waiting for init to reap it.
    let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, r)| r.chars().next().unwrap_or('?'))
        });
    assert!(
        matches!(state, None | Some('Z')),
        "the grandchild was killed with the group: {state:?}"
    );
}

#[test]
fn huge_output_is_refused_without_buffering_it_all() {
    let e = failure("head -c 50000000 /dev/zero", &[]);
    assert!(matches!(e, HelperError::TooLarge(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("more than {MAX_OUTPUT} bytes")),
        "{e}"
    );
}

#[test]
fn a_helper_that_ignores_its_input_still_counts() {
    let dir = TempDir::new("helper");
    let big = vec![b' '; 1 << 20];
    let out = helper(&dir, "echo '{\"defer\": true}'")
        .run("n1", &big, false, &[], None)
        .unwrap()
        .output;
    assert!(out.defer);
}

#[test]
fn a_flood_on_stderr_neither_blocks_the_helper_nor_is_kept() {
    let dir = TempDir::new("helper");
    // 1 MiB on stderr fills the pipe many times over before the answer is written.
    let h = helper(
        &dir,
        "head -c 1048576 /dev/zero | tr '\\0' x >&2\necho '{\"defer\": true, \"msg\": \"after the flood\"}'",
    );
    let started = Instant::now();
    let run = h.run("n1", &input(), false, &[], None).unwrap();
    assert!(run.output.defer);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not held up until the timeout"
    );
}

#[test]
fn a_helper_that_closes_its_output_but_lingers_is_killed_at_the_timeout() {
    let dir = TempDir::new("helper");
    let body = "echo '{\"defer\": true}'\nexec >&- 2>&-\nsleep 30";
    let (_, took) = timed_out(&dir, body, Duration::from_millis(500));
    assert!(took < Duration::from_secs(3), "bounded: {took:?}");
}

#[test]
fn a_helper_in_its_own_session_holding_the_pipes_cannot_hold_the_run() {
    let dir = TempDir::new("helper");
    // setsid moves the grandchild out of the process group: killing the group does
    // not close its copy of stdout, so the run must stop waiting on its own.
    let body = "setsid sleep 5 &\nsleep 30";
    let (_, took) = timed_out(&dir, body, Duration::from_millis(300));
    assert!(took < Duration::from_secs(3), "bounded: {took:?}");
}

/// True while `pid` runs: its `/proc` entry exists and is not a zombie (a killed
/// grandchild is a zombie until init reaps it).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// The pid a script wrote to `name` (waiting up to 2 s for it to appear).
fn pid_in(dir: &TempDir, name: &str) -> i32 {
    let path = dir.path().join(name);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "{name} was never written");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `script` with a 500 ms timeout and checks the run ended in a timeout with
/// Go's text, and that every pid the script wrote to `pids` is dead within the
/// timeout + 1 s of the start.
fn killed_within_the_bound(dir: &TempDir, script: &str, pids: &[&str]) {
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    let body = format!("cd '{}'\n{script}", dir.path().display());
    let (e, returned) = timed_out(dir, &body, timeout);
    assert_eq!(
        e.to_string(),
        format!(
            "could not wait for {}: signal: killed (it ran longer than 0.5s)",
            dir.path().join("helper.sh").display()
        )
    );
    assert!(
        returned < timeout + Duration::from_secs(1),
        "the run returned after {returned:?}"
    );
    let pids: Vec<i32> = pids.iter().map(|p| pid_in(dir, p)).collect();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            started.elapsed() < timeout + Duration::from_secs(1),
            "still running after {:?}: {:?}",
            started.elapsed(),
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_helper_that_setsids_itself_and_hangs_is_killed_with_its_session() {
    let dir = TempDir::new("helper");
    // The helper leads its process group, so setsid(1) forks: the helper exits and
    // its copy carries on in a new session, holding the pipes, no longer our child.
    let script = "exec setsid sh -c 'echo $$ > session.pid; exec sleep 30'";
    killed_within_the_bound(&dir, script, &["session.pid"]);
}

#[test]
fn a_helper_whose_child_moves_to_a_new_process_group_is_killed_with_it() {
    let dir = TempDir::new("helper");
    let script = "perl -e 'setpgrp(0, 0) or die; open(my $f, \">\", \"group.pid\") or die; print $f $$; close $f; sleep 30' &\n\
                  echo $$ > helper.pid\n\
                  sleep 30";
    killed_within_the_bound(&dir, script, &["group.pid", "helper.pid"]);
    // The child really was in another group, so killing the helper's group alone
    // would have missed it (checked after the fact from what it wrote: its pid is
    // not the helper's).
    assert_ne!(pid_in(&dir, "group.pid"), pid_in(&dir, "helper.pid"));
}

#[test]
fn a_child_that_escapes_with_setsid_and_holds_stdout_is_killed_after_the_helper_answered() {
    let dir = TempDir::new("helper");
    let script = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 30' &\n\
                  echo '{\"defer\": true}'\n\
                  exit 0";
    killed_within_the_bound(&dir, script, &["escaped.pid"]);
}

#[test]
fn a_daemonised_grandchild_without_the_pipes_is_found_by_the_run_marker() {
    let dir = TempDir::new("helper");
    // Double fork into a new session with the pipes closed: its parent exits, so no
    // ppid, group, session or pipe links it to the helper; only its environment does.
    let script = "setsid sh -c 'sh -c \"echo \\$\\$ > daemon.pid; exec sleep 30\" </dev/null >/dev/null 2>&1 & exit 0' </dev/null >/dev/null 2>&1 &\n\
                  sleep 30";
    killed_within_the_bound(&dir, script, &["daemon.pid"]);
}

#[test]
fn a_timeout_kills_only_the_processes_of_its_own_run() {
    let dir = TempDir::new("helper");
    let d = dir.path().display();
    // Another run at the same time, with a background child of its own.
    let script = format!(
        "#!/bin/sh\nsleep 2 &\necho $! > {d}/other.pid\nwait\necho '{{\"defer\": true, \"msg\": \"other\"}}'\n"
    );
    let other = script_helper(&dir, "other.sh", &script, Duration::from_secs(10));
    let other = std::thread::spawn(move || other.run("n2", &input(), false, &[], None));
    let other_child = pid_in(&dir, "other.pid");
    let script = "sleep 30 &\necho $! > mine.pid\nsleep 30";
    killed_within_the_bound(&dir, script, &["mine.pid"]);
    assert!(alive(other_child), "the other run's child was left alone");
    let out = other.join().unwrap().unwrap().output;
    assert_eq!(out.msg, "other");
}

#[test]
fn helpers_started_while_another_run_is_killed_are_left_alone() {
    let dir = TempDir::new("helper");
    // Between fork and exec a new helper holds copies of every descriptor of the
    // daemon, the killed run's pipes among them: it must not be taken for a holder.
    let honest = script_helper(
        &dir,
        "honest.sh",
        "#!/bin/sh\necho '{\"defer\": true}'\n",
        Duration::from_secs(5),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawners: Vec<_> = (0..3)
        .map(|_| {
            let (honest, stop) = (honest.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut runs = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    runs.push(honest.run("n2", &input(), false, &[], None).map(|_| ()));
                }
                runs
            })
        })
        .collect();
    for round in 0..3 {
        let script = format!("setsid sleep 30 &\necho $! > mine{round}.pid\nsleep 30");
        killed_within_the_bound(&dir, &script, &[&format!("mine{round}.pid")]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs: Vec<_> = spawners
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(runs.len() > 30, "helpers kept starting: {}", runs.len());
    let failed: Vec<_> = runs.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}",
        failed.len(),
        runs.len(),
        failed.first()
    );
}
