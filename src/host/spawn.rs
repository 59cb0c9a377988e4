//! Starting a helper with `posix_spawnp(3)` from an argv and an environment made once
//! per daemon, not once per run.
//!
//! `std::process::Command` copies the whole environment into a map, then into C
//! strings, whenever one variable is set, and the helper's run marker
//! (`proctree::MARKER_VAR`) is set on every run: about 100 allocations and a fifth of
//! a run's instructions in the daemon. Here the inherited environment is turned into C
//! strings when the [`Prepared`] command is made, and a run adds only its marker.
//! The child is set up as `Command` sets it up: stdin, stdout and stderr on pipes
//! (close-on-exec on our side), its own process group, an empty signal mask and
//! `SIGPIPE` back to its default (Rust ignores it in the daemon), and the same
//! `clone(CLONE_VM|CLONE_VFORK)` inside glibc: no copy of the daemon's memory.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

/// A command ready to be spawned: its argv and inherited environment as C strings.
/// `Debug` shows the argv only (the environment may hold secrets).
pub(crate) struct Prepared {
    argv: Vec<CString>,
    env: Vec<CString>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("argv", &self.argv)
            .field("env", &format_args!("<{} variables>", self.env.len()))
            .finish()
    }
}

/// A started child, reaped by [`Process::wait`] or [`Process::try_wait`].
#[derive(Debug)]
pub(crate) struct Process {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
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

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd`, moved above 0–2 if it is one of them: a `dup2` onto itself would leave it
/// close-on-exec (a daemon started with a closed stdin gets 0 from `pipe2`).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor; the new one is ours alone.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl succeeded: `new` is open and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Fails with the OS error a posix_spawn* call returned (they return it, not -1).
fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
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

/// The file actions and attributes of one spawn, destroyed when dropped.
struct SpawnSetup {
    actions: libc::posix_spawn_file_actions_t,
    attr: libc::posix_spawnattr_t,
}

impl Drop for SpawnSetup {
    fn drop(&mut self) {
        // SAFETY: both were initialised by `SpawnSetup::new` and are destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

impl SpawnSetup {
    /// `child_fds` become the child's 0, 1 and 2; own process group, empty signal
    /// mask, `SIGPIPE` at its default.
    fn new(child_fds: [libc::c_int; 3]) -> io::Result<Box<SpawnSetup>> {
        // SAFETY: zeroed storage for two C structures that the init calls below fill
        // in before any other use; boxed so that they never move once initialised.
        let mut setup: Box<SpawnSetup> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: init on our own storage; on failure nothing was allocated, and the
        // structure is forgotten so that Drop does not destroy it.
        unsafe {
            if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut setup.actions)) {
                std::mem::forget(setup);
                return Err(e);
            }
            if let Err(e) = check(libc::posix_spawnattr_init(&mut setup.attr)) {
                libc::posix_spawn_file_actions_destroy(&mut setup.actions);
                std::mem::forget(setup);
                return Err(e);
            }
        }
        for (target, fd) in child_fds.into_iter().enumerate() {
            // SAFETY: `actions` is initialised; the descriptors are open.
            check(unsafe {
                libc::posix_spawn_file_actions_adddup2(&mut setup.actions, fd, target as i32)
            })?;
        }
        // SAFETY: `attr` is initialised; the signal sets are initialised by
        // sigemptyset before they are read.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            check(libc::posix_spawnattr_setsigmask(&mut setup.attr, &mask))?;
            let mut default: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut default);
            libc::sigaddset(&mut default, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigdefault(
                &mut setup.attr,
                &default,
            ))?;
            check(libc::posix_spawnattr_setpgroup(&mut setup.attr, 0))?;
            let flags = libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut setup.attr,
                flags as libc::c_short,
            ))?;
        }
        Ok(setup)
    }
}

impl Prepared {
    /// `words` (program first, looked up on `PATH` when it has no `/`) with the
    /// daemon's environment as it is now, less the variable `skip`.
    pub fn new(words: &[String], skip: &str) -> io::Result<Prepared> {
        if words.is_empty() {
            return Err(invalid("empty command"));
        }
        let argv = words
            .iter()
            .map(|w| CString::new(w.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| invalid("nul byte found in provided data"))?;
        let env = std::env::vars_os()
            .filter(|(name, _)| name.as_bytes() != skip.as_bytes())
            .map(|(name, value)| {
                let mut entry = name.into_encoded_bytes();
                entry.push(b'=');
                entry.extend_from_slice(value.as_bytes());
                CString::new(entry)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| invalid("nul byte found in the environment"))?;
        Ok(Prepared { argv, env })
    }

    /// Starts the command with `extra` (`NAME=value`) added to its environment.
    pub fn spawn(&self, extra: &CStr) -> io::Result<Spawned> {
        let (stdin_child, stdin) = pipe()?;
        let (stdout, stdout_child) = pipe()?;
        let (stderr, stderr_child) = pipe()?;
        let child_ends = [
            above_stdio(stdin_child)?,
            above_stdio(stdout_child)?,
            above_stdio(stderr_child)?,
        ];
        let setup = SpawnSetup::new(child_ends.each_ref().map(|fd| fd.as_raw_fd()))?;
        let mut argv: Vec<*mut libc::c_char> = Vec::with_capacity(self.argv.len() + 1);
        argv.extend(self.argv.iter().map(|a| a.as_ptr().cast_mut()));
        argv.push(std::ptr::null_mut());
        let mut envp: Vec<*mut libc::c_char> = Vec::with_capacity(self.env.len() + 2);
        envp.extend(self.env.iter().map(|e| e.as_ptr().cast_mut()));
        envp.push(extra.as_ptr().cast_mut());
        envp.push(std::ptr::null_mut());
        let mut pid: libc::pid_t = 0;
        let mut busy_waits = TEXT_BUSY_WAITS.iter();
        loop {
            // SAFETY: every pointer is valid for the call: the C strings live in
            // `self` and `extra`, the arrays are NULL-terminated, `setup` is
            // initialised; the child does not write through argv or envp before exec.
            let spawned = check(unsafe {
                libc::posix_spawnp(
                    &mut pid,
                    self.argv[0].as_ptr(),
                    &setup.actions,
                    &setup.attr,
                    argv.as_ptr(),
                    envp.as_ptr(),
                )
            });
            match (spawned, busy_waits.next()) {
                (Ok(()), _) => break,
                // The program is open for writing somewhere: being replaced by a
                // package or configuration manager, or held for an instant by a
                // process forked elsewhere before its exec. Try again shortly.
                (Err(e), Some(wait)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(*wait)
                }
                (Err(e), _) => return Err(e),
            }
        }
        drop(child_ends); // the child has its own copies
        Ok(Spawned {
            process: Process { pid, status: None },
            stdin: File::from(stdin),
            stdout: File::from(stdout),
            stderr: File::from(stderr),
        })
    }
}

impl Process {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        loop {
            let mut raw = 0;
            // SAFETY: waitpid for our own child, with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
            if r == self.pid {
                let status = ExitStatus::from_raw(raw);
                self.status = Some(status);
                return Ok(Some(status));
            }
            if r == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// A pidfd for the child (Linux ≥ 5.3): readable once it has exited, so its exit
    /// can be polled for with a timeout instead of slept for. It is taken before the
    /// child is reaped, so the pid cannot have been reused. Fails with the OS error
    /// (`ENOSYS` on older kernels, `EPERM` under some seccomp filters): the caller then
    /// falls back to [`Process::try_wait`].
    pub fn exit_fd(&self) -> io::Result<OwnedFd> {
        if self.status.is_some() {
            return Err(io::Error::other("already reaped"));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the call succeeded: `fd` is open and ours alone (close-on-exec).
        Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }

    /// Waits for the child to exit.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        Ok(self.reap(0)?.expect("waitpid without WNOHANG waits"))
    }

    /// The child's status if it has exited.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_child_gets_its_pipes_the_environment_and_its_own_group() {
        let prepared = Prepared::new(
            &words(&[
                "sh",
                "-c",
                "cat; echo \"m=$SPAWN_TEST_MARK\" >&2; cut -d' ' -f5 /proc/$$/stat >&2; exit 3",
            ]),
            "SPAWN_TEST_MARK",
        )
        .unwrap();
        let mut spawned = prepared.spawn(c"SPAWN_TEST_MARK=run-1").unwrap();
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
        let prepared = Prepared::new(&words(&["sh", "-c", "sleep 0.2; echo x"]), "X").unwrap();
        let mut spawned = prepared.spawn(c"X=1").unwrap();
        drop(spawned.stdout);
        let status = spawned.process.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
    }

    #[test]
    fn a_missing_program_and_bad_words_are_errors_not_panics() {
        let prepared = Prepared::new(&words(&["/nonexistent/helper"]), "X").unwrap();
        let e = prepared.spawn(c"X=1").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let prepared = Prepared::new(&words(&["no-such-helper-on-path-3f9a"]), "X").unwrap();
        assert_eq!(
            prepared.spawn(c"X=1").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(Prepared::new(&[], "X").is_err());
        assert!(Prepared::new(&words(&["a\0b"]), "X").is_err());
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
        let prepared = Prepared::new(&[script.display().to_string()], "X").unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(held);
        });
        let mut spawned = prepared.spawn(c"X=1").unwrap();
        closer.join().unwrap();
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out).unwrap();
        assert_eq!(out, "ran\n");
        assert!(spawned.process.wait().unwrap().success());
        // Held open throughout: the error after the waits, not a hang.
        let other = dir.join("held.sh");
        let _held = write(&other);
        let prepared = Prepared::new(&[other.display().to_string()], "X").unwrap();
        let started = std::time::Instant::now();
        let e = prepared.spawn(c"X=1").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ETXTBSY), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn debug_does_not_show_the_environment() {
        let prepared = Prepared::new(&words(&["true"]), "X").unwrap();
        let shown = format!("{prepared:?}");
        assert!(
            shown.contains("variables") && !shown.contains("PATH="),
            "{shown}"
        );
    }
}
