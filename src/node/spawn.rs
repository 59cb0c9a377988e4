//! Starting a helper with `std::process::Command`: its stdin, stdout and stderr on
//! pipes (close-on-exec on our side), in a process group of its own, with the daemon's
//! environment and the run's marker variable (`proctree::MARKER_VAR`, by which its
//! processes are found when it must be killed). std starts it with `posix_spawnp(3)`
//! (glibc's `clone(CLONE_VM|CLONE_VFORK)` and exec: no copy of the daemon's memory),
//! with no signal blocked and `SIGPIPE` back to its default; the program is looked
//! for on `PATH` as `execvp` does.
//!
//! What std cannot do is kept small and apart: the child's pidfd (`pidfd_open`, Linux
//! 5.3+), so a lingering helper's exit can be waited for with a timeout in poll(2).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A command ready to be spawned: its program and arguments. `Debug` shows them
/// (the environment, which may hold secrets, is not kept here).
#[derive(Debug)]
pub(crate) struct SpawnCommand {
    program: OsString,
    args: Vec<OsString>,
}

/// A started child, reaped by [`Process::wait`] or [`Process::try_wait`].
#[derive(Debug)]
pub(crate) struct Process {
    child: Child,
}

/// A started child and our ends of its pipes.
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The child.
    pub process: Process,
    /// Its stdin.
    pub stdin: File,
    /// Its stdout.
    pub stdout: File,
    /// Its stderr.
    pub stderr: File,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// The waits before each new try when the program is busy (`ETXTBSY`: open for
/// writing); about a third of a second in all, then the error is returned.
const TEXT_BUSY_WAITS: [Duration; 5] = [
    Duration::from_millis(5),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
];

impl SpawnCommand {
    /// `words`: the program (looked up on `PATH` when it has no `/`) and its
    /// arguments. `_marker` names the variable each run sets (kept for the caller's
    /// symmetry with [`SpawnCommand::spawn`]).
    pub(crate) fn new(words: &[String], _marker: &str) -> io::Result<SpawnCommand> {
        let (program, args) = words
            .split_first()
            .ok_or_else(|| invalid("empty command"))?;
        if words.iter().any(|w| w.contains('\0')) {
            return Err(invalid("nul byte found in provided data"));
        }
        Ok(SpawnCommand {
            program: program.into(),
            args: args.iter().map(OsString::from).collect(),
        })
    }

    /// Starts the command with `marker` (name, value) added to its environment.
    pub(crate) fn spawn(&self, marker: (&str, &str)) -> io::Result<Spawned> {
        let mut busy_waits = TEXT_BUSY_WAITS.iter();
        let mut child = loop {
            let started = Command::new(&self.program)
                .args(&self.args)
                .env(marker.0, marker.1)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn();
            match (started, busy_waits.next()) {
                (Ok(child), _) => break child,
                // The program is open for writing somewhere: being replaced by a
                // package or configuration manager, or held for an instant by a
                // process forked elsewhere before its exec. Try again shortly.
                (Err(e), Some(wait)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(*wait)
                }
                (Err(e), _) => return Err(e),
            }
        };
        let piped = |fd: Option<OwnedFd>| fd.map(File::from).ok_or_else(|| invalid("no pipe"));
        let stdin = piped(child.stdin.take().map(OwnedFd::from))?;
        let stdout = piped(child.stdout.take().map(OwnedFd::from))?;
        let stderr = piped(child.stderr.take().map(OwnedFd::from))?;
        Ok(Spawned {
            process: Process { child },
            stdin,
            stdout,
            stderr,
        })
    }
}

impl Process {
    /// The child's process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// A pidfd for the child (Linux ≥ 5.3): readable once it has exited, so its exit
    /// can be polled for with a timeout instead of slept for. It is taken before the
    /// child is reaped (std reaps only in `wait`/`try_wait`, and we ask only while it
    /// has not been), so the pid cannot have been reused. Fails with the OS error
    /// (`ENOSYS` on older kernels, `EPERM` under some seccomp filters): the caller then
    /// falls back to [`Process::try_wait`].
    pub(crate) fn exit_fd(&mut self) -> io::Result<OwnedFd> {
        if self.child.try_wait()?.is_some() {
            return Err(io::Error::other("already reaped"));
        }
        let pid = libc::pid_t::try_from(self.child.id()).map_err(|_| invalid("pid"))?;
        crate::sys::pidfd_open(pid)
    }

    /// Waits for the child to exit.
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait()
    }

    /// The child's status if it has exited.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::strings;
    use std::io::{Read, Write};
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_child_gets_its_pipes_the_environment_and_its_own_group() {
        let prepared = SpawnCommand::new(
            &strings(&[
                "sh",
                "-c",
                "cat; echo \"m=$SPAWN_TEST_MARK\" >&2; cut -d' ' -f5 /proc/$$/stat >&2; exit 3",
            ]),
            "SPAWN_TEST_MARK",
        )
        .unwrap();
        let mut spawned = prepared.spawn(("SPAWN_TEST_MARK", "run-1")).unwrap();
        spawned.stdin.write_all(b"hello").unwrap();
        drop(spawned.stdin);
        let (mut out, mut err) = (String::new(), String::new());
        spawned.stdout.read_to_string(&mut out).unwrap();
        spawned.stderr.read_to_string(&mut err).unwrap();
        let status = spawned.process.wait().unwrap();
        assert_eq!(out, "hello");
        assert_eq!(status.code(), Some(3));
        let mut lines = err.lines();
        assert_eq!(lines.next(), Some("m=run-1"));
        let pgid = lines.next().unwrap_or_default();
        assert_eq!(pgid, spawned.process.id().to_string(), "its own group");
        assert_eq!(spawned.process.wait().unwrap().code(), Some(3), "kept");
    }

    #[test]
    fn sigpipe_is_back_to_its_default_in_the_child() {
        // A child whose stdout reader is gone dies of SIGPIPE, as under Go or a shell.
        let prepared =
            SpawnCommand::new(&strings(&["sh", "-c", "sleep 0.2; echo x"]), "X").unwrap();
        let mut spawned = prepared.spawn(("X", "1")).unwrap();
        drop(spawned.stdout);
        let status = spawned.process.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
    }

    #[test]
    fn a_missing_program_and_bad_words_are_errors_not_panics() {
        let prepared = SpawnCommand::new(&strings(&["/nonexistent/helper"]), "X").unwrap();
        let e = prepared.spawn(("X", "1")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let prepared = SpawnCommand::new(&strings(&["no-such-helper-on-path-3f9a"]), "X").unwrap();
        assert_eq!(
            prepared.spawn(("X", "1")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(SpawnCommand::new(&[], "X").is_err());
        assert!(SpawnCommand::new(&strings(&["a\0b"]), "X").is_err());
    }

    #[test]
    fn a_program_open_for_writing_is_tried_again_until_it_is_closed_or_the_waits_run_out() {
        let dir = std::env::temp_dir().join(format!("spawn-txtbsy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("helper.sh");
        let write = |path: &std::path::Path| {
            let mut f = std::fs::File::create(path).unwrap();
            f.write_all(b"#!/bin/sh\necho ran\n").unwrap();
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            f
        };
        // Closed 30 ms after the spawn began: a retry starts it.
        let held = write(&script);
        let prepared = SpawnCommand::new(&[script.display().to_string()], "X").unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(held);
        });
        let mut spawned = prepared.spawn(("X", "1")).unwrap();
        closer.join().unwrap();
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out).unwrap();
        assert_eq!(out, "ran\n");
        assert!(spawned.process.wait().unwrap().success());
        // Held open throughout: the error after the waits, not a hang.
        let other = dir.join("held.sh");
        let _held = write(&other);
        let prepared = SpawnCommand::new(&[other.display().to_string()], "X").unwrap();
        let started = std::time::Instant::now();
        let e = prepared.spawn(("X", "1")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ETXTBSY), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked_and_sigpipe_not_ignored() {
        let prepared = SpawnCommand::new(
            // grep reads its own status (a shell blocks signals around its forks).
            &strings(&["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"]),
            "X",
        )
        .unwrap();
        let mut spawned = prepared.spawn(("X", "1")).unwrap();
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out).unwrap();
        assert!(spawned.process.wait().unwrap().success());
        let mask = |name: &str| {
            let line = out.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{out}");
        assert_eq!(mask("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }
}
