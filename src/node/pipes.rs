//! Talking to a helper process on one thread: its stdin is written and its stdout
//! and stderr are read with poll(2) on non-blocking pipes, and the same loop enforces
//! the time limit and the daemon's stop. A run therefore costs no extra threads
//! (three thread creations per helper were a large share of the daemon's CPU per
//! node), and no pipe can block it: stderr beyond its cap is drained and dropped.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::spawn::Process;
use crate::sys::{self, PollFd};

/// How often the loop looks at the stop flag while nothing happens.
const TICK: Duration = Duration::from_millis(50);

/// How long the pipes may stay open after the helper's processes were killed: the
/// kill finds the pipes' holders, so they close at once unless a holder could not be
/// killed (another user's process); the run then ends anyway.
const AFTER_KILL: Duration = Duration::from_secs(1);

/// When the pipes are still open this long after the kill, the sweep runs again (for
/// a process that appeared too late to be found the first time).
const SECOND_SWEEP: Duration = Duration::from_millis(300);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The helper exited by itself.
    Finished,
    /// It outlived its time limit and its processes were killed.
    TimedOut,
    /// The daemon is stopping; its processes were killed.
    Stopped,
}

/// Everything a run produced. `Debug` shows sizes only: stdout holds the helper's
/// answer (private keys) and stderr may echo its input (the token).
pub(crate) struct Pumped {
    /// How it ended.
    pub end: End,
    /// Standard output (at most the cap), or the error reading it.
    pub stdout: std::io::Result<Vec<u8>>,
    /// Whether stdout went over its cap (its processes were then killed).
    pub stdout_over: bool,
    /// Standard error, at most its cap.
    pub stderr: Vec<u8>,
    /// Whether stderr went over its cap (the rest was read and dropped).
    pub stderr_over: bool,
    /// Why the input could not be written in full, if it could not.
    pub write_error: Option<std::io::Error>,
    /// The exit status.
    pub status: std::io::Result<ExitStatus>,
}

impl std::fmt::Debug for Pumped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pumped")
            .field("end", &self.end)
            .field(
                "stdout",
                &self.stdout.as_ref().map(|b| format!("<{} bytes>", b.len())),
            )
            .field("stdout_over", &self.stdout_over)
            .field("stderr", &format_args!("<{} bytes>", self.stderr.len()))
            .field("stderr_over", &self.stderr_over)
            .field("write_error", &self.write_error)
            .field("status", &self.status)
            .finish()
    }
}

/// The pipes and limits of one run.
pub(crate) struct Run<'a> {
    /// The helper's stdin, closed once `input` is written.
    pub stdin: File,
    /// Its stdout, borrowed: the caller's kill may look at it while the run goes on.
    pub stdout: &'a File,
    /// Its stderr, borrowed likewise.
    pub stderr: &'a File,
    /// What to write.
    pub input: &'a [u8],
    /// Most stdout bytes kept.
    pub stdout_cap: usize,
    /// Most stderr bytes kept.
    pub stderr_cap: usize,
    /// When the helper must be done.
    pub deadline: Instant,
    /// Set when the daemon stops.
    pub stopping: Option<&'a AtomicBool>,
}

/// Kills the helper's processes once (and once more if the pipes stay open), and
/// remembers why and when.
struct Killer<'a> {
    kill_tree: &'a dyn Fn(),
    at: Option<Instant>,
    swept_again: bool,
    end: End,
}

impl Killer<'_> {
    fn kill(&mut self, end: End) {
        if self.at.is_none() {
            (self.kill_tree)();
            self.at = Some(Instant::now());
            self.end = end;
        }
    }

    fn sweep_again(&mut self) {
        if !self.swept_again {
            self.swept_again = true;
            (self.kill_tree)();
        }
    }
}

/// Most bytes one read(2) takes.
const CHUNK: usize = 16 * 1024;

/// Reads what is there on `pipe` into `kept` (at most `cap` bytes kept); false at EOF
/// or on an error other than "would block". Each read(2) lands in a stack chunk and
/// only the bytes kept are copied into `kept`: the usual helper's empty stderr costs
/// no allocation and its stdout one of its own size (reserving a whole chunk in
/// `kept` per pipe was two 16 KiB allocations per run, and glibc consolidates its
/// free lists on each).
fn drain(
    mut pipe: &File,
    kept: &mut Vec<u8>,
    cap: usize,
    over: &mut bool,
) -> std::io::Result<bool> {
    let mut chunk = [0u8; CHUNK];
    loop {
        let room = cap.saturating_sub(kept.len());
        // Past the cap the bytes are read all the same (the pipe must not fill) and
        // dropped.
        match pipe.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n.min(room)]);
                *over |= n > room;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes what `stdin` takes of `input` from `written` on; closes it (the helper sees
/// EOF) once all is written or on an error other than "would block", kept in `error`.
fn feed(
    stdin: &mut Option<File>,
    input: &[u8],
    written: &mut usize,
    error: &mut Option<std::io::Error>,
) {
    let Some(s) = stdin.as_mut() else { return };
    match s.write(&input[*written..]) {
        Ok(n) => *written += n,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
        Err(e) => {
            *error = Some(e);
            *stdin = None;
        }
    }
    if *written >= input.len() {
        *stdin = None; // dropping closes it: the helper sees EOF
    }
}

/// Runs the exchange with `child` until its pipes close and it exits, it times out,
/// or the daemon stops; `kill_tree` kills it and every process it started
/// (`proctree`). The child is always reaped before this returns.
pub(crate) fn pump(child: &mut Process, run: Run<'_>, kill_tree: &dyn Fn()) -> Pumped {
    let Run {
        stdin,
        stdout,
        stderr,
        input,
        stdout_cap,
        stderr_cap,
        deadline,
        stopping,
    } = run;
    let mut result = Pumped {
        end: End::Finished,
        stdout: Ok(Vec::new()),
        stdout_over: false,
        stderr: Vec::new(),
        stderr_over: false,
        write_error: None,
        status: Err(std::io::Error::other("not waited for")),
    };
    let mut stdin = (!input.is_empty()).then_some(stdin);
    for fd in [stdout.as_fd(), stderr.as_fd()]
        .into_iter()
        .chain(stdin.as_ref().map(|s| s.as_fd()))
    {
        if let Err(e) = sys::set_nonblocking(fd) {
            result.stdout = Err(e);
            kill_tree();
            result.status = child.wait();
            return result;
        }
    }
    let (mut out, mut err, mut stderr_over) = (Vec::new(), Vec::new(), false);
    let (mut out_open, mut err_open, mut written) = (true, true, 0usize);
    let mut killer = Killer {
        kill_tree,
        at: None,
        swept_again: false,
        end: End::Finished,
    };
    // The pipe is empty: the usual input fits at once, without a poll(2) first.
    feed(&mut stdin, input, &mut written, &mut result.write_error);
    // Once its input is written, the usual helper's answer fits in its pipes and they
    // close as it exits: waiting for that (POLLHUP alone) wakes the worker once, where
    // waiting for the first bytes woke it twice. A helper that fills a pipe and waits
    // for it to be read is read from after one quiet TICK.
    let mut quiet = true;
    while out_open || err_open || stdin.is_some() {
        let now = Instant::now();
        match killer.at {
            Some(at) if now.duration_since(at) >= AFTER_KILL => break,
            Some(at) if now.duration_since(at) >= SECOND_SWEEP => killer.sweep_again(),
            Some(_) => {}
            None if now >= deadline => killer.kill(End::TimedOut),
            None if stopping.is_some_and(|s| s.load(Ordering::Relaxed)) => {
                killer.kill(End::Stopped)
            }
            None => {}
        }
        let output = if quiet && stdin.is_none() && killer.at.is_none() {
            0 // only POLLHUP and POLLERR, which poll(2) always reports
        } else {
            PollFd::IN
        };
        let mut polled = [PollFd::UNUSED; 3];
        let mut count = 0;
        let mut watch = |p: PollFd| {
            polled[count] = p;
            count += 1;
        };
        if out_open {
            watch(PollFd::new(stdout.as_fd(), output));
        }
        if err_open {
            watch(PollFd::new(stderr.as_fd(), output));
        }
        if let Some(s) = &stdin {
            watch(PollFd::new(s.as_fd(), PollFd::OUT));
        }
        let fds = &mut polled[..count];
        let wait = deadline
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), TICK);
        match sys::poll(fds, wait) {
            Ok(0) => {
                quiet = false;
                continue;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                result.stdout = Err(e);
                killer.kill(End::Finished);
                break;
            }
        }
        for p in fds.iter().filter(|p| p.ready()) {
            if out_open && p.fd() == stdout.as_raw_fd() {
                let mut over = false;
                match drain(stdout, &mut out, stdout_cap, &mut over) {
                    Ok(open) => out_open = open && !over,
                    Err(e) => {
                        result.stdout = Err(e);
                        out_open = false;
                    }
                }
                if over {
                    // Over the cap: stop the helper rather than buffer without bound.
                    result.stdout_over = true;
                    killer.kill(End::Finished);
                }
            } else if err_open && p.fd() == stderr.as_raw_fd() {
                err_open = matches!(
                    drain(stderr, &mut err, stderr_cap, &mut stderr_over),
                    Ok(true)
                );
            } else if stdin.as_ref().is_some_and(|s| s.as_raw_fd() == p.fd()) {
                feed(&mut stdin, input, &mut written, &mut result.write_error);
            }
        }
    }
    drop(stdin);
    if result.stdout.is_ok() {
        result.stdout = Ok(out);
    }
    result.stderr = err;
    result.stderr_over = stderr_over;
    result.status = wait(child, deadline, stopping, &mut killer);
    result.end = killer.end;
    result
}

/// Waits for the exit after the pipes closed: the usual helper has already exited
/// (its pipes close as it does) and one `waitpid` reaps it. One that lingers (it
/// closed its pipes, or handed them to a process that exited, and went on) is waited
/// for with its pidfd in poll(2), woken by its exit, the deadline or the stop tick,
/// and killed at the deadline or stop; without pidfds (Linux < 5.3) by polling its
/// status at growing intervals.
fn wait(
    child: &mut Process,
    deadline: Instant,
    stopping: Option<&AtomicBool>,
    killer: &mut Killer<'_>,
) -> std::io::Result<ExitStatus> {
    if killer.at.is_some() {
        return child.wait();
    }
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let exit = child.exit_fd().ok();
    linger(child, exit, deadline, stopping, killer)
}

/// Waits for a child that outlived its pipes, with its pidfd `exit` when there is one.
fn linger(
    child: &mut Process,
    mut exit: Option<std::os::fd::OwnedFd>,
    deadline: Instant,
    stopping: Option<&AtomicBool>,
    killer: &mut Killer<'_>,
) -> std::io::Result<ExitStatus> {
    let mut pause = Duration::from_micros(50);
    loop {
        let now = Instant::now();
        if now >= deadline {
            killer.kill(End::TimedOut);
            return child.wait();
        }
        if stopping.is_some_and(|s| s.load(Ordering::Relaxed)) {
            killer.kill(End::Stopped);
            return child.wait();
        }
        let wait = deadline.saturating_duration_since(now).min(TICK);
        match &exit {
            Some(fd) => match sys::poll(&mut [PollFd::new(fd.as_fd(), PollFd::IN)], wait) {
                Ok(0) => {}
                Ok(_) => return child.wait(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => exit = None, // poll(2) refused it: look at the status instead
            },
            None => {
                std::thread::sleep(pause.min(wait));
                pause = (pause * 2).min(TICK);
                if let Some(status) = child.try_wait()? {
                    return Ok(status);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::spawn::SpawnCommand;
    use std::cell::Cell;
    use std::os::unix::process::ExitStatusExt;

    /// Starts `sh -c script`, its pipes dropped at once (the child gets EOF/EPIPE).
    fn start(script: &str) -> Process {
        let words = ["sh", "-c", script].map(String::from);
        let spawned = SpawnCommand::new(&words, "X")
            .unwrap()
            .spawn(("X", "1"))
            .unwrap();
        spawned.process
    }

    #[test]
    fn a_child_that_outlives_its_pipes_is_reaped_when_it_exits_with_or_without_pidfd() {
        for with_pidfd in [true, false] {
            let mut child = start("sleep 0.2; exit 4");
            let exit = with_pidfd.then(|| child.exit_fd().unwrap());
            let kills = Cell::new(0);
            let kill = || kills.set(kills.get() + 1);
            let mut killer = Killer {
                kill_tree: &kill,
                at: None,
                swept_again: false,
                end: End::Finished,
            };
            let started = Instant::now();
            let deadline = started + Duration::from_secs(5);
            let status = linger(&mut child, exit, deadline, None, &mut killer).unwrap();
            assert_eq!(status.code(), Some(4), "pidfd {with_pidfd}");
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(150) && took < Duration::from_secs(2),
                "pidfd {with_pidfd}: {took:?}"
            );
            assert_eq!((kills.get(), killer.end), (0, End::Finished));
            assert!(child.exit_fd().is_err(), "reaped: no pidfd any more");
        }
    }

    #[test]
    fn a_lingering_child_is_killed_at_the_deadline_and_at_stop() {
        for stop in [false, true] {
            let mut child = start("exec sleep 30");
            let exit = child.exit_fd().ok();
            let pid = child.id() as libc::pid_t;
            // Our own child, not yet reaped.
            let kill = || crate::sys::kill(pid, libc::SIGKILL).unwrap();
            let mut killer = Killer {
                kill_tree: &kill,
                at: None,
                swept_again: false,
                end: End::Finished,
            };
            let stopping = AtomicBool::new(stop);
            let started = Instant::now();
            let deadline = started + Duration::from_millis(if stop { 5000 } else { 200 });
            let status = linger(&mut child, exit, deadline, Some(&stopping), &mut killer).unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL));
            let expected = if stop { End::Stopped } else { End::TimedOut };
            assert_eq!(killer.end, expected);
            assert!(started.elapsed() < Duration::from_secs(2), "{stop}");
        }
    }

    #[test]
    fn debug_shows_sizes_not_what_the_helper_wrote() {
        let answer = br#"{"key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecret"}"#.to_vec();
        let size = answer.len();
        let pumped = Pumped {
            end: End::Finished,
            stdout: Ok(answer),
            stdout_over: false,
            stderr: b"token tok-3f9a".to_vec(),
            stderr_over: true,
            write_error: None,
            status: Err(std::io::Error::other("not waited for")),
        };
        let shown = format!("{pumped:?}");
        assert!(
            !shown.contains("MIIEsecret") && !shown.contains("tok-3f9a"),
            "{shown}"
        );
        assert!(
            shown.contains(&format!("stdout: Ok(\"<{size} bytes>\")")),
            "{shown}"
        );
        assert!(
            shown.contains("stderr: <14 bytes>, stderr_over: true"),
            "{shown}"
        );
    }

    /// Pumps `sh -c script` with `input`, a 10 s deadline.
    fn pump_script(script: &str, input: &[u8]) -> Pumped {
        let words = ["sh", "-c", script].map(String::from);
        let spawned = SpawnCommand::new(&words, "X")
            .unwrap()
            .spawn(("X", "1"))
            .unwrap();
        let mut child = spawned.process;
        let run = Run {
            stdin: spawned.stdin,
            stdout: &spawned.stdout,
            stderr: &spawned.stderr,
            input,
            stdout_cap: 1 << 20,
            stderr_cap: 1 << 20,
            deadline: Instant::now() + Duration::from_secs(10),
            stopping: None,
        };
        pump(&mut child, run, &|| {})
    }

    #[test]
    fn output_larger_than_a_pipe_is_read_after_the_quiet_wait_and_small_output_at_exit() {
        // 256 KiB on stdout and 128 KiB on stderr: the helper blocks on full pipes
        // until the quiet wait gives way to reading.
        let started = Instant::now();
        let pumped = pump_script(
            "cat >/dev/null; head -c 262144 /dev/zero; head -c 131072 /dev/zero >&2",
            b"input",
        );
        assert_eq!(pumped.end, End::Finished);
        assert_eq!(pumped.stdout.as_ref().map(Vec::len).unwrap(), 262_144);
        assert_eq!(pumped.stderr.len(), 131_072);
        assert!(pumped.status.unwrap().success());
        assert!(started.elapsed() < Duration::from_secs(5));
        // The usual helper: its input read, a small answer, both pipes closed at exit.
        let pumped = pump_script(
            "read -r line; printf '{\"in\":\"%s\"}' \"$line\"; echo note >&2",
            b"hi\n",
        );
        assert_eq!(pumped.stdout.unwrap(), br#"{"in":"hi"}"#);
        assert_eq!(pumped.stderr, b"note\n");
        assert!(pumped.write_error.is_none());
        // Output left behind by a helper that exits at once is all read.
        let pumped = pump_script("printf abc; printf def >&2", b"");
        assert_eq!(pumped.stdout.unwrap(), b"abc");
        assert_eq!(pumped.stderr, b"def");
    }
}
