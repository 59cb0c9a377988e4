//! Talking to a helper process on one thread: its stdin is written and its stdout
//! and stderr are read with poll(2) on non-blocking pipes, and the same loop enforces
//! the time limit and the daemon's stop. A run therefore costs no extra threads,
//! and no pipe can block it: stderr beyond its cap is drained and dropped.
//!
//! What the loop saves, measured on 2026-12-07 (#45; `make bench`, 10,000 nodes,
//! three runs each) against the plain version, one thread writing stdin, one
//! reading stderr and one for the deadline while the worker reads stdout: the
//! provisioner's CPU per node was 0.412-0.515 ms (ratio to the simulator 5.22-5.35)
//! with the threads and 0.145-0.183 ms (2.42-2.61) with this loop. It saves about
//! two thirds of the CPU per node, most of it system time (each thread's stack
//! mapped, touched and unmapped), and the plain version would break the 0.30 ms
//! budget.

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

/// One output pipe being read: what was kept, whether it went over its cap, whether
/// it is still open.
struct Output<'a> {
    pipe: &'a File,
    kept: Vec<u8>,
    cap: usize,
    over: bool,
    open: bool,
    error: Option<std::io::Error>,
}

impl<'a> Output<'a> {
    fn new(pipe: &'a File, cap: usize) -> Output<'a> {
        Output {
            pipe,
            kept: Vec::new(),
            cap,
            over: false,
            open: true,
            error: None,
        }
    }

    /// Reads what is there; closed at EOF, on an error, or (`close_when_over`) once
    /// over its cap.
    fn read(&mut self, close_when_over: bool) {
        match drain(self.pipe, &mut self.kept, self.cap, &mut self.over) {
            Ok(open) => self.open = open && !(close_when_over && self.over),
            Err(e) => {
                self.error = Some(e);
                self.open = false;
            }
        }
    }
}

/// The exchange with one helper as a state machine: [`Exchange::tick`] judges the
/// time (deadline, stop, the kill's grace), [`Exchange::interest`] says what poll(2)
/// waits for, [`Exchange::ready`] handles what it found. Its states:
///
/// | state | poll(2) waits for | leaves it |
/// |---|---|---|
/// | writing (`stdin` open) | stdin writable, outputs readable | all written, or a write error: waiting |
/// | waiting (`quiet`) | only the outputs' hang-up (the usual helper's answer fits its pipes, so it is woken once) | a quiet [`TICK`]: reading |
/// | reading | outputs readable | both outputs closed: done |
/// | killed (`killer.at`) | outputs readable | outputs closed, or [`AFTER_KILL`]: done |
struct Exchange<'a> {
    stdin: Option<File>,
    input: &'a [u8],
    written: usize,
    write_error: Option<std::io::Error>,
    stdout: Output<'a>,
    stderr: Output<'a>,
    quiet: bool,
    deadline: Instant,
    stopping: Option<&'a AtomicBool>,
    killer: Killer<'a>,
    poll_error: Option<std::io::Error>,
}

impl<'a> Exchange<'a> {
    /// Whether anything is left to read or write.
    fn open(&self) -> bool {
        self.stdout.open || self.stderr.open || self.stdin.is_some()
    }

    /// Judges the time `now`: the kill at the deadline or the stop, the second sweep,
    /// the end of the kill's grace (false: the exchange is over).
    fn tick(&mut self, now: Instant) -> bool {
        match self.killer.at {
            Some(at) if now.duration_since(at) >= AFTER_KILL => return false,
            Some(at) if now.duration_since(at) >= SECOND_SWEEP => self.killer.sweep_again(),
            Some(_) => {}
            None if now >= self.deadline => self.killer.kill(End::TimedOut),
            None if self.stopping.is_some_and(|s| s.load(Ordering::Relaxed)) => {
                self.killer.kill(End::Stopped)
            }
            None => {}
        }
        true
    }

    /// What poll(2) waits for now, in `polled`; how many entries.
    fn interest(&self, polled: &mut [PollFd; 3]) -> usize {
        let waiting = self.quiet && self.stdin.is_none() && self.killer.at.is_none();
        // Waiting: only POLLHUP and POLLERR, which poll(2) always reports.
        let output = if waiting { 0 } else { PollFd::IN };
        let mut count = 0;
        for out in [&self.stdout, &self.stderr].into_iter().filter(|o| o.open) {
            polled[count] = PollFd::new(out.pipe.as_fd(), output);
            count += 1;
        }
        if let Some(s) = &self.stdin {
            polled[count] = PollFd::new(s.as_fd(), PollFd::OUT);
            count += 1;
        }
        count
    }

    /// Handles the descriptors poll(2) found ready.
    fn ready(&mut self, fds: &[PollFd]) {
        for p in fds.iter().filter(|p| p.ready()) {
            if self.stdout.open && p.fd() == self.stdout.pipe.as_raw_fd() {
                self.stdout.read(true);
                if self.stdout.over {
                    // Over the cap: stop the helper rather than buffer without bound.
                    self.killer.kill(End::Finished);
                }
            } else if self.stderr.open && p.fd() == self.stderr.pipe.as_raw_fd() {
                // Past its cap stderr is read and dropped: the pipe must not fill.
                self.stderr.read(false);
            } else if self.stdin.as_ref().is_some_and(|s| s.as_raw_fd() == p.fd()) {
                self.feed();
            }
        }
    }

    fn feed(&mut self) {
        feed(
            &mut self.stdin,
            self.input,
            &mut self.written,
            &mut self.write_error,
        );
    }

    /// One round: the time, then a poll(2) of at most a [`TICK`]; false once the
    /// exchange is over.
    fn round(&mut self) -> bool {
        let now = Instant::now();
        if !self.tick(now) {
            return false;
        }
        let mut polled = [PollFd::UNUSED; 3];
        let count = self.interest(&mut polled);
        let fds = &mut polled[..count];
        let wait = self
            .deadline
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), TICK);
        match sys::poll(fds, wait) {
            Ok(0) => self.quiet = false,
            Ok(_) => self.ready(fds),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                self.poll_error = Some(e);
                self.killer.kill(End::Finished);
                return false;
            }
        }
        true
    }
}

/// Runs the exchange with `child` until its pipes close and it exits, it times out,
/// or the daemon stops; `kill_tree` kills it and every process it started
/// (`proctree`). The child is always reaped before this returns.
pub(crate) fn pump(child: &mut Process, run: Run<'_>, kill_tree: &dyn Fn()) -> Pumped {
    let stdin = (!run.input.is_empty()).then_some(run.stdin);
    let nonblocking = [run.stdout.as_fd(), run.stderr.as_fd()]
        .into_iter()
        .chain(stdin.as_ref().map(|s| s.as_fd()))
        .try_for_each(sys::set_nonblocking);
    let mut ex = Exchange {
        stdin,
        input: run.input,
        written: 0,
        write_error: None,
        stdout: Output::new(run.stdout, run.stdout_cap),
        stderr: Output::new(run.stderr, run.stderr_cap),
        quiet: true,
        deadline: run.deadline,
        stopping: run.stopping,
        killer: Killer {
            kill_tree,
            at: None,
            swept_again: false,
            end: End::Finished,
        },
        poll_error: None,
    };
    if let Err(e) = nonblocking {
        kill_tree();
        return Pumped {
            end: End::Finished,
            stdout: Err(e),
            stdout_over: false,
            stderr: Vec::new(),
            stderr_over: false,
            write_error: None,
            status: child.wait(),
        };
    }
    // The pipe is empty: the usual input fits at once, without a poll(2) first.
    ex.feed();
    while ex.open() && ex.round() {}
    drop(ex.stdin.take());
    let status = wait(child, ex.deadline, ex.stopping, &mut ex.killer);
    let stdout = match (ex.poll_error, ex.stdout.error) {
        (Some(e), _) | (None, Some(e)) => Err(e),
        (None, None) => Ok(ex.stdout.kept),
    };
    Pumped {
        end: ex.killer.end,
        stdout,
        stdout_over: ex.stdout.over,
        stderr: ex.stderr.kept,
        stderr_over: ex.stderr.over,
        write_error: ex.write_error,
        status,
    }
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
