//! The system calls std has no API for, and the only `unsafe` code of the daemon.
//!
//! The crate denies `unsafe_code` everywhere else (`lib.rs`), so an auditor reads
//! this file and nothing more. Each function wraps one call, takes and returns safe
//! types, and turns a failure into `io::Error`:
//!
//! | function | call | why std cannot |
//! |---|---|---|
//! | [`pidfd_open`] | `pidfd_open(2)` | std's `PidFd` is unstable; a pidfd is how a process is signalled and waited for without pid reuse races |
//! | [`pidfd_send_signal`] | `pidfd_send_signal(2)` | the same |
//! | [`kill`] | `kill(2)` | std kills only its own `Child`, never a group or a process it did not start |
//! | [`poll`] | `poll(2)` | std has no readiness API for pipes |
//! | [`set_nonblocking`] | `ioctl(FIONBIO)`, through std | no unsafe: std sets `O_NONBLOCK` only on its socket types, so a duplicate of the pipe is made one of those for the call |
//! | [`set_batch_policy`] | `sched_setscheduler(2)` | std has no scheduling API |
//! | [`canonical_name`] | `getaddrinfo(3)` with `AI_CANONNAME` | std resolves addresses, never names |
//!
//! What is read from `/proc` instead of a call (the effective uid, the clock tick,
//! the thread's policy) is in `proc_self.rs`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A process id as the kernel takes it.
pub(crate) type Pid = libc::pid_t;

/// `-1` from a call means `errno` holds the error.
fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A pidfd for `pid` (Linux ≥ 5.3), close-on-exec. Fails with `ESRCH` when no such
/// process exists, `ENOSYS` on older kernels, `EPERM` under some seccomp filters.
pub(crate) fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    // A descriptor it returns is open and referenced nowhere else, so owning it is
    // sound.
    unsafe {
        let fd = check(libc::syscall(libc::SYS_pidfd_open, pid, 0))?;
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
    }
}

/// Sends `signal` to the process `pidfd` refers to (which cannot have been reused).
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a pidfd we own, a signal number, no siginfo (a null pointer is the
    // documented "as kill(2) would"), flags 0.
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// Sends `signal` to `pid`, or to the process group `-pid` when it is negative
/// (`killpg`). The caller makes sure the id still names what it means to signal.
pub(crate) fn kill(pid: Pid, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    check(unsafe { libc::kill(pid, signal) }.into()).map(drop)
}

/// What [`poll`] watches on one descriptor and what it found.
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub(crate) struct PollFd(libc::pollfd);

impl PollFd {
    /// Readable input (`POLLIN`).
    pub(crate) const IN: libc::c_short = libc::POLLIN;
    /// Room to write (`POLLOUT`).
    pub(crate) const OUT: libc::c_short = libc::POLLOUT;
    /// A slot poll(2) skips (a negative descriptor), for filling an array.
    pub(crate) const UNUSED: PollFd = PollFd(libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    });

    /// Watches `fd` for `events` (0: only the hang-up and error poll(2) always
    /// reports).
    pub(crate) fn new(fd: BorrowedFd<'_>, events: libc::c_short) -> PollFd {
        PollFd(libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        })
    }

    /// The descriptor watched.
    pub(crate) fn fd(&self) -> RawFd {
        self.0.fd
    }

    /// Whether poll(2) reported anything on it.
    pub(crate) fn ready(&self) -> bool {
        self.0.revents != 0
    }
}

/// Waits up to `timeout` (rounded up to a millisecond, so that a short wait does not
/// spin) for one of `fds` to be ready; how many are. `Interrupted` is returned as an
/// error for the caller to loop on.
pub(crate) fn poll(fds: &mut [PollFd], timeout: Duration) -> io::Result<usize> {
    let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: PollFd is a transparent pollfd, so `fds` is a valid, writable array of
    // `fds.len()` pollfd structures for the length of the call.
    let ready = unsafe { libc::poll(fds.as_mut_ptr().cast(), fds.len() as libc::nfds_t, ms) };
    check(ready.into()).map(|n| n as usize)
}

/// Sets `O_NONBLOCK` on `fd` (a helper's pipe) without unsafe code. std sets it only
/// on its socket types, with `ioctl(FIONBIO)`, which works on any descriptor and
/// changes the open file description that every duplicate shares: so a duplicate is
/// made a `UnixStream` (never used as one), set, and closed, and the flag stays on
/// `fd`. Costs a `dup` and a `close` more than the bare call (about 1 µs).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let duplicate = fd.try_clone_to_owned()?;
    std::os::unix::net::UnixStream::from(duplicate).set_nonblocking(true)
}

/// Puts the calling thread under `SCHED_BATCH` (priority 0, which needs no
/// privilege).
pub(crate) fn set_batch_policy() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler(0, ..) sets the calling thread's policy and reads
    // one sched_param through a pointer to a live local.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) }.into()).map(drop)
}

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`) after raising the
/// soft one to the hard one, as Go programs do at start (Go ≥ 1.19): systemd gives
/// a unit a soft limit of 1,024 for `select(2)`'s sake, which a daemon that polls
/// outgrows. A soft limit already at the hard one is left alone.
pub(crate) fn raise_open_files_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write one rlimit through a pointer to
    // a live local, and nothing else. std has no API for resource limits.
    unsafe {
        check(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit).into())?;
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if check(libc::setrlimit(libc::RLIMIT_NOFILE, &raised).into()).is_ok() {
                limit = raised;
            }
        }
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// The uid and pid of the process at the other end of a Unix socket
/// (`SO_PEERCRED`: what the peer was when it connected, set by the kernel, so the
/// peer cannot forge it). std's `UnixStream::peer_cred` is not stable yet.
pub(crate) fn peer_credentials(socket: BorrowedFd<'_>) -> io::Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(SO_PEERCRED) writes at most `len` bytes (one ucred) through
    // a pointer to a live local of that size, and the new length through a pointer
    // to another live local. std's `UnixStream::peer_cred` would do it, but it is
    // not stable.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    check(ret.into())?;
    Ok(PeerCredentials {
        uid: cred.uid,
        pid: cred.pid,
    })
}

/// Who is at the other end of a Unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerCredentials {
    /// The peer's effective uid when it connected.
    pub uid: u32,
    /// The peer's pid when it connected.
    pub pid: i32,
}

/// The canonical DNS name of `host` through the system resolver (`getaddrinfo` with
/// `AI_CANONNAME`, what `hostname -f` does), if it has a dot.
pub(crate) fn canonical_name(host: &str) -> Option<String> {
    let c_host = std::ffi::CString::new(host).ok()?;
    // SAFETY: `hints` is a zeroed addrinfo (a valid value: integers and null
    // pointers) with only flags and family set; getaddrinfo allocates `res`, which is
    // freed with freeaddrinfo before the block ends; ai_canonname is a NUL-terminated
    // string owned by `res`, copied before the free.
    unsafe {
        let mut hints: libc::addrinfo = std::mem::zeroed();
        hints.ai_flags = libc::AI_CANONNAME;
        hints.ai_family = libc::AF_UNSPEC;
        let mut res: *mut libc::addrinfo = std::ptr::null_mut();
        if libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) != 0 {
            return None;
        }
        let name = if !res.is_null() && !(*res).ai_canonname.is_null() {
            std::ffi::CStr::from_ptr((*res).ai_canonname)
                .to_str()
                .ok()
                .map(|s| s.trim_end_matches('.').to_string())
        } else {
            None
        };
        libc::freeaddrinfo(res);
        name.filter(|n| n.contains('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_pidfd_signals_its_process_and_poll_sees_it_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pidfd = pidfd_open(child.id() as Pid).unwrap();
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFd::IN)];
        assert_eq!(poll(&mut fds, Duration::from_millis(1)).unwrap(), 0);
        pidfd_send_signal(&pidfd, libc::SIGKILL).unwrap();
        assert_eq!(poll(&mut fds, Duration::from_secs(5)).unwrap(), 1);
        assert!(fds[0].ready());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn errors_come_back_as_os_errors() {
        // No process has a pid that large (pid_max is at most 2^22).
        assert!(kill(i32::MAX, 0).is_err());
        let gone = pidfd_open(i32::MAX).unwrap_err();
        assert!(matches!(
            gone.raw_os_error(),
            Some(libc::ESRCH) | Some(libc::ENOSYS)
        ));
    }

    #[test]
    fn a_pipe_made_non_blocking_says_would_block() {
        use std::io::Read;
        let (mut read, _write) = std::io::pipe().unwrap();
        set_nonblocking(read.as_fd()).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            read.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn the_soft_file_limit_is_raised_to_the_hard_one() {
        let (soft, hard) = raise_open_files_limit().unwrap();
        assert_eq!(soft, hard);
        // Again: already there, unchanged.
        assert_eq!(raise_open_files_limit().unwrap(), (soft, hard));
    }

    #[test]
    fn a_unix_socket_s_peer_is_this_process() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let peer = peer_credentials(ours.as_fd()).unwrap();
        assert_eq!(peer.pid, std::process::id() as i32);
        // /proc/self belongs to the process's effective uid.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(peer.uid, std::fs::metadata("/proc/self").unwrap().uid());
        drop(theirs);
    }

    #[test]
    fn localhost_has_no_dotted_canonical_name_or_is_resolved_without_failing() {
        // Whatever the machine's resolver says, the call returns and never a name
        // without a dot.
        assert!(canonical_name("localhost").is_none_or(|n| n.contains('.')));
        assert_eq!(canonical_name("a\0b"), None);
    }
}
