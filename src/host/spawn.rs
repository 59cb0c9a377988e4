//! Starting a helper from an argv and an environment made once per daemon, not once
//! per run, with the `clone(CLONE_VM|CLONE_VFORK)` and exec that glibc's
//! `posix_spawnp(3)` makes, on a stack kept per thread (see [`with_child_stack`]).
//!
//! `std::process::Command` copies the whole environment into a map, then into C
//! strings, whenever one variable is set, and the helper's run marker
//! (`proctree::MARKER_VAR`) is set on every run: about 100 allocations and a fifth of
//! a run's instructions in the daemon. Here the inherited environment is turned into C
//! strings when the [`Prepared`] command is made, and a run adds only its marker.
//! The child is set up as `Command` sets it up: stdin, stdout and stderr on pipes
//! (close-on-exec on our side), its own process group, an empty signal mask and
//! `SIGPIPE` back to its default (Rust ignores it in the daemon), every handler back to
//! its default, and no copy of the daemon's memory. The program is looked for on the
//! `PATH` of the daemon's start, as `execvp` does, with no shell fallback for a file
//! that is not an executable (as `posix_spawnp`).

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
    /// Where the program may be, in `PATH` order (itself alone when it has a `/`).
    candidates: Vec<CString>,
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

/// The waits before each new try when the program is busy (`ETXTBSY`: open for
/// writing); about a third of a second in all, then the error is returned.
const TEXT_BUSY_WAITS: [Duration; 5] = [
    Duration::from_millis(5),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
];

/// Bytes of the stack the child runs on until its exec: it calls a handful of system
/// call wrappers and nothing else (glibc's posix_spawn gives its child 32 KiB plus
/// room for argv).
const CHILD_STACK: usize = 64 * 1024;

/// Highest signal number plus one (`_NSIG` on Linux).
const NSIG: libc::c_int = 65;

/// What the child reads, and writes back, while it runs on the daemon's memory
/// (`CLONE_VM`): all of it made before the clone; the child allocates nothing.
#[repr(C)]
struct ChildArgs {
    /// Paths to try, in order, each NUL-terminated; a NULL ends the list.
    candidates: *const *const libc::c_char,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
    /// Become the child's 0, 1 and 2 (all above 2).
    fds: [libc::c_int; 3],
    /// The errno of the step that failed, written by the child before `_exit`.
    error: libc::c_int,
    /// The spawning thread runs under the daemon's own `SCHED_BATCH` (a worker,
    /// `hosts::workers::run_as_batch`): the child goes back to the normal policy, which
    /// the kernel's `SCHED_RESET_ON_FORK` does only for real-time policies.
    normal_policy: bool,
}

/// The child between `clone` and `exec`. It shares the daemon's memory, so it only
/// calls async-signal-safe wrappers of system calls, never allocates, never unwinds,
/// and ends in `execve` or `_exit`. The parent blocked every signal around the clone;
/// handlers go back to their defaults before the mask is cleared, so none of the
/// daemon's handlers can run here.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` of `Prepared::spawn`, alive until this child
    // has exec'd or exited (CLONE_VFORK suspends the spawning thread until then);
    // every call below is a system call wrapper on valid pointers.
    unsafe {
        let args = &mut *arg.cast::<ChildArgs>();
        let fail = |args: &mut ChildArgs| -> ! {
            args.error = *libc::__errno_location();
            libc::_exit(127)
        };
        for sig in 1..NSIG {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue; // glibc's own signals (32, 33): not ours to touch
            }
            let ignored = old.sa_sigaction == libc::SIG_IGN;
            if old.sa_sigaction == libc::SIG_DFL || (ignored && sig != libc::SIGPIPE) {
                continue; // kept across exec as it is; SIGPIPE back to its default
            }
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
        if libc::setpgid(0, 0) != 0 {
            fail(args);
        }
        if args.normal_policy {
            // A refusal leaves the helper a batch process, which is no reason not to
            // run it (the worker's own switch to batch was allowed).
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
        }
        for (target, fd) in args.fds.into_iter().enumerate() {
            // dup2 clears close-on-exec on the copy.
            if libc::dup2(fd, target as libc::c_int) < 0 {
                fail(args);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            fail(args);
        }
        // execvp's rule: go on past a directory where the program is not (ENOENT,
        // ENOTDIR) or not allowed (EACCES, reported if nothing else works).
        let mut denied = false;
        let mut next = args.candidates;
        while !(*next).is_null() {
            libc::execve(*next, args.argv.cast(), args.envp.cast());
            match *libc::__errno_location() {
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                libc::EACCES => denied = true,
                _ => fail(args),
            }
            next = next.add(1);
        }
        *libc::__errno_location() = if denied { libc::EACCES } else { libc::ENOENT };
        fail(args)
    }
}

/// The calling thread's stack for its children (see [`CHILD_STACK`]), made on its
/// first spawn and kept: glibc's posix_spawn maps a stack per spawn and unmaps it
/// after, and in a process of many threads the unmap is a TLB shoot-down on every
/// core (5 % of the daemon's CPU in `make bench`). Only this thread uses it, and only
/// while its child runs, which suspends the thread.
fn with_child_stack<R>(f: impl FnOnce(*mut libc::c_void) -> R) -> R {
    use std::cell::RefCell;
    thread_local! {
        static STACK: RefCell<Vec<u128>> = const { RefCell::new(Vec::new()) };
    }
    STACK.with_borrow_mut(|stack| {
        if stack.is_empty() {
            stack.resize(CHILD_STACK / std::mem::size_of::<u128>(), 0);
        }
        // The stack grows down from the end; u128 keeps it 16-byte aligned.
        let top = stack.as_mut_ptr_range().end;
        f(top.cast())
    })
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
        let candidates = candidates(&words[0], std::env::var_os("PATH").as_deref())?;
        Ok(Prepared {
            argv,
            env,
            candidates,
        })
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
        let mut argv: Vec<*mut libc::c_char> = Vec::with_capacity(self.argv.len() + 1);
        argv.extend(self.argv.iter().map(|a| a.as_ptr().cast_mut()));
        argv.push(std::ptr::null_mut());
        let mut envp: Vec<*mut libc::c_char> = Vec::with_capacity(self.env.len() + 2);
        envp.extend(self.env.iter().map(|e| e.as_ptr().cast_mut()));
        envp.push(extra.as_ptr().cast_mut());
        envp.push(std::ptr::null_mut());
        let mut candidates: Vec<*const libc::c_char> =
            Vec::with_capacity(self.candidates.len() + 1);
        candidates.extend(self.candidates.iter().map(|c| c.as_ptr()));
        candidates.push(std::ptr::null());
        // SAFETY: reads the calling thread's policy. Batch with SCHED_RESET_ON_FORK is
        // the workers' (an operator's batch policy for the whole service has the flag
        // only if they asked for its children to be reset as well).
        let normal_policy =
            unsafe { libc::sched_getscheduler(0) } == libc::SCHED_BATCH | libc::SCHED_RESET_ON_FORK;
        let mut busy_waits = TEXT_BUSY_WAITS.iter();
        let pid = loop {
            let mut args = ChildArgs {
                candidates: candidates.as_ptr(),
                argv: argv.as_ptr(),
                envp: envp.as_ptr(),
                fds: child_ends.each_ref().map(|fd| fd.as_raw_fd()),
                error: 0,
                normal_policy,
            };
            let started = clone_child(&mut args);
            match (started, busy_waits.next()) {
                (Ok(pid), _) => break pid,
                // The program is open for writing somewhere: being replaced by a
                // package or configuration manager, or held for an instant by a
                // process forked elsewhere before its exec. Try again shortly.
                (Err(e), Some(wait)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(*wait)
                }
                (Err(e), _) => return Err(e),
            }
        };
        drop(child_ends); // the child has its own copies
        Ok(Spawned {
            process: Process { pid, status: None },
            stdin: File::from(stdin),
            stdout: File::from(stdout),
            stderr: File::from(stderr),
        })
    }
}

/// The paths `program` is tried at: itself when it has a `/`, else each directory of
/// `path` (glibc's `/bin:/usr/bin` when there is none; an empty entry is the current
/// directory) joined with it, as `execvp` tries them.
fn candidates(program: &str, path: Option<&std::ffi::OsStr>) -> io::Result<Vec<CString>> {
    let nul = |_| invalid("nul byte found in provided data");
    if program.contains('/') {
        return Ok(vec![CString::new(program).map_err(nul)?]);
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = dir.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(program.as_bytes());
            CString::new(full).map_err(nul)
        })
        .collect()
}

/// Clones a child that runs [`child_main`] on this thread's child stack and waits
/// (CLONE_VFORK) until it has exec'd or failed; its pid, or the errno it failed with
/// (the failed child reaped).
fn clone_child(args: &mut ChildArgs) -> io::Result<libc::pid_t> {
    // SAFETY: sigset_t is plain data initialised by sigfillset; pthread_sigmask and
    // clone get valid pointers. The child runs on a stack no one else uses while
    // this thread is suspended, and `args` outlives it (see `child_main`).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let arg: *mut ChildArgs = args;
        let pid = with_child_stack(|stack| {
            libc::clone(
                child_main,
                stack,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                arg.cast(),
            )
        });
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        let error = std::ptr::read_volatile(&(*arg).error);
        if error != 0 {
            // The failed child has exited: reaped as any other child is.
            let _ = Process { pid, status: None }.wait();
            return Err(io::Error::from_raw_os_error(error));
        }
        Ok(pid)
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
    fn the_program_is_looked_for_on_path_as_execvp_does() {
        let path = |p: &str| Some(std::ffi::OsStr::new(p).to_owned());
        let shown = |c: Vec<CString>| -> Vec<String> {
            c.into_iter().map(|c| c.into_string().unwrap()).collect()
        };
        assert_eq!(
            shown(candidates("./h", path("/a").as_deref()).unwrap()),
            ["./h"]
        );
        assert_eq!(
            shown(candidates("h", path("/a::/b").as_deref()).unwrap()),
            ["/a/h", "h", "/b/h"],
            "an empty entry is the current directory"
        );
        assert_eq!(
            shown(candidates("h", None).unwrap()),
            ["/bin/h", "/usr/bin/h"]
        );
        // A directory where the program is not executable is passed over; if
        // nothing else is found, that is the error.
        let dir = std::env::temp_dir().join(format!("spawn-path-{}", std::process::id()));
        let (denied, good) = (dir.join("denied"), dir.join("good"));
        std::fs::create_dir_all(&denied).unwrap();
        std::fs::create_dir_all(&good).unwrap();
        let mode = |p: &std::path::Path, m| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
        };
        std::fs::write(denied.join("h-3f9a"), "#!/bin/sh\necho denied\n").unwrap();
        mode(&denied.join("h-3f9a"), 0o644);
        std::fs::write(good.join("h-3f9a"), "#!/bin/sh\necho good\n").unwrap();
        mode(&good.join("h-3f9a"), 0o755);
        let both = format!("{}:{}", denied.display(), good.display());
        let prepared = Prepared {
            candidates: candidates("h-3f9a", Some(std::ffi::OsStr::new(&both))).unwrap(),
            ..Prepared::new(&words(&["h-3f9a"]), "X").unwrap()
        };
        let mut spawned = prepared.spawn(c"X=1").unwrap();
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out).unwrap();
        assert_eq!(out, "good\n");
        assert!(spawned.process.wait().unwrap().success());
        let only_denied = Prepared {
            candidates: candidates("h-3f9a", Some(denied.as_os_str())).unwrap(),
            ..Prepared::new(&words(&["h-3f9a"]), "X").unwrap()
        };
        let e = only_denied.spawn(c"X=1").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked_and_sigpipe_not_ignored() {
        let prepared = Prepared::new(
            // grep reads its own status (a shell blocks signals around its forks).
            &words(&["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"]),
            "X",
        )
        .unwrap();
        let mut spawned = prepared.spawn(c"X=1").unwrap();
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

    /// The calls in `child_main`'s body (`name(` or `name::<T>(`), comments left out.
    fn child_main_calls() -> Vec<String> {
        let source = include_str!("spawn.rs");
        let start = source
            .find("extern \"C\" fn child_main")
            .expect("child_main is in spawn.rs");
        let body = &source[start..];
        let body = &body[..body.find("\n}\n").expect("child_main ends")];
        let code: String = body
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let bytes = code.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
        let mut calls = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if !word(bytes[i]) || (i > 0 && word(bytes[i - 1])) {
                i += 1;
                continue;
            }
            let begin = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let name = code[begin..i].trim_end_matches("::").to_string();
            let mut j = i;
            if code[j..].starts_with('<') {
                j += code[j..].find('>').map_or(0, |n| n + 1); // turbofish
            }
            match bytes.get(j) {
                Some(b'(') => calls.push(name),
                Some(b'!') => calls.push(format!("{name}!")),
                _ => {}
            }
        }
        calls
    }

    #[test]
    fn the_child_calls_only_async_signal_safe_functions_and_never_allocates() {
        // It shares the daemon's memory while other threads run: no allocator, no
        // lock, no panic, no formatting; system call wrappers and pointer steps only.
        const ALLOWED: &[&str] = &[
            "libc::__errno_location",
            "libc::_exit",
            "libc::dup2",
            "libc::execve",
            "libc::sched_setscheduler",
            "libc::setpgid",
            "libc::sigaction",
            "libc::sigemptyset",
            "libc::sigprocmask",
            "std::mem::zeroed",
            "std::ptr::null",
            "std::ptr::null_mut",
            "cast",
            "add",
            "is_null",
            "into_iter",
            "enumerate",
            "fail",
            "child_main",
            "for",
            "if",
            "while",
            "match",
        ];
        let calls = child_main_calls();
        assert!(calls.iter().any(|c| c == "libc::execve"), "{calls:?}");
        let others: Vec<&String> = calls
            .iter()
            .filter(|c| !ALLOWED.contains(&c.as_str()))
            .collect();
        assert!(others.is_empty(), "child_main calls {others:?}");
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
