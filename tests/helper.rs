//! The helper contract with real child processes: input on stdin, every failure mode
//! of §4.4, the timeout killing the whole process group, and the output cap.

mod support;

use std::time::{Duration, Instant};

use choria_provisioner::host::helper::{Helper, HelperError, HelperInput, MAX_OUTPUT};
use support::TempDir;

fn input() -> Vec<u8> {
    serde_json::to_vec(&HelperInput {
        identity: "n1.example.net",
        csr: None,
        ed25519_pubkey: None,
        inventory: r#"{"facts":{"role":"web"}}"#,
        jwt: None,
    })
    .unwrap()
}

fn helper(dir: &TempDir, body: &str) -> Helper {
    let path = dir.script("helper.sh", &format!("#!/bin/sh\n{body}\n"));
    Helper::new(&path.display().to_string(), Duration::from_secs(2))
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

#[test]
fn garbage_output_is_a_decode_error() {
    let dir = TempDir::new("helper");
    let e = helper(&dir, "echo 'this is not json'")
        .run("n1", &input(), false, &[], None)
        .unwrap_err();
    assert!(matches!(e, HelperError::Decode(..)), "{e:?}");
    assert!(
        e.to_string().starts_with("cannot decode output from "),
        "{e}"
    );
    let e = helper(&dir, "echo '{\"configuration\": {\"port\": 4222}}'")
        .run("n1", &input(), false, &[], None)
        .unwrap_err();
    assert!(
        e.to_string().contains("invalid type"),
        "a number where a string belongs: {e}"
    );
}

#[test]
fn no_output_is_zero_bytes() {
    let dir = TempDir::new("helper");
    let e = helper(&dir, "cat >/dev/null")
        .run("n1", &input(), false, &[], None)
        .unwrap_err();
    assert!(
        e.to_string().ends_with("output: zero bytes received"),
        "{e}"
    );
}

#[test]
fn non_zero_exit_is_reported_with_its_status() {
    let dir = TempDir::new("helper");
    let e = helper(&dir, "echo '{}'; echo 'boom s3cret' >&2; exit 3")
        .run("n1", &input(), false, &["s3cret"], None)
        .unwrap_err();
    assert!(e.to_string().ends_with(": exit status 3"), "{e}");
}

#[test]
fn a_hanging_helper_and_its_children_are_killed_at_the_timeout() {
    let dir = TempDir::new("helper");
    let pidfile = dir.path().join("grandchild.pid");
    // The grandchild keeps stdout open; only killing the process group ends the read.
    let h = Helper::new(
        &dir.script(
            "hang.sh",
            &format!(
                "#!/bin/sh\nsleep 30 &\necho $! > {}\nsleep 30\n",
                pidfile.display()
            ),
        )
        .display()
        .to_string(),
        Duration::from_millis(500),
    );
    let started = Instant::now();
    let e = h.run("n1", &input(), false, &[], None).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeout"
    );
    assert!(matches!(e, HelperError::Timeout(..)), "{e:?}");
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
    let dir = TempDir::new("helper");
    let h = helper(&dir, "head -c 50000000 /dev/zero");
    let e = h.run("n1", &input(), false, &[], None).unwrap_err();
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
    let h = Helper::new(
        &dir.script(
            "linger.sh",
            "#!/bin/sh\necho '{\"defer\": true}'\nexec >&- 2>&-\nsleep 30\n",
        )
        .display()
        .to_string(),
        Duration::from_millis(500),
    );
    let started = Instant::now();
    let e = h.run("n1", &input(), false, &[], None).unwrap_err();
    assert!(matches!(e, HelperError::Timeout(..)), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_helper_in_its_own_session_holding_the_pipes_cannot_hold_the_run() {
    let dir = TempDir::new("helper");
    // setsid moves the grandchild out of the process group: killing the group does
    // not close its copy of stdout, so the run must stop waiting on its own.
    let h = Helper::new(
        &dir.script("escape.sh", "#!/bin/sh\nsetsid sleep 5 &\nsleep 30\n")
            .display()
            .to_string(),
        Duration::from_millis(300),
    );
    let started = Instant::now();
    let e = h.run("n1", &input(), false, &[], None).unwrap_err();
    assert!(matches!(e, HelperError::Timeout(..)), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        started.elapsed()
    );
}
