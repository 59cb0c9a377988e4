//! Everything a helper started, found and killed, even what left its process group.
//!
//! The helper runs in a process group of its own, but any process may leave a group
//! (`setpgid`) or its session (`setsid`), and one whose parent died is adopted by
//! init, losing its `ppid` link to us. (The helper itself leads its group and so
//! cannot call `setsid`; a helper that wants to leave forks, as `setsid(1)` does,
//! and the copy carries on while the original exits.) So when a run must end (timeout, output over
//! its cap, daemon stopping) [`HelperTree::kill`] looks for the run's processes in
//! `/proc` by four independent marks:
//!
//! 1. the helper and its descendants, following `ppid` links from the helper;
//! 2. members of a process group or session *led by* one of those (the helper's
//!    original group; a group or session a descendant created with `setpgid` or
//!    `setsid`), never the provisioner's own group or session;
//! 3. processes whose environment holds this run's marker (`CHORIA_PROVISIONER_HELPER_RUN`,
//!    a random value set for the helper and inherited by everything it starts), which
//!    finds an escaped process even after its parent died;
//! 4. processes holding one of this run's pipes (by inode, in `/proc/<pid>/fd`), which
//!    finds whatever keeps the run waiting for end-of-file — except the provisioner's
//!    own children: between fork and exec, a helper another worker is starting holds
//!    copies of all our descriptors, this run's pipes among them (a helper's own
//!    descendants are never our children, unless the provisioner runs as a container's
//!    init, where the marker still finds them).
//!
//! Each round stops what it found (`SIGSTOP`, so nothing forks or escapes while we
//! look) and looks again, until a round finds nothing new; then everything found gets
//! `SIGKILL`. Signals go through a pidfd opened while the process was known to be the
//! one found (its start time is checked), so a recycled pid is never hit. No
//! process-wide state is used (no `PR_SET_CHILD_SUBREAPER`): two provisioners in one
//! process sweep only their own runs, told apart by the marker.
//!
//! Reaping: the helper is our child and the caller reaps it (`waitpid`). Its
//! descendants are not our children: once the helper is gone they are adopted by
//! init (or the nearest subreaper), which reaps them after they die.
//!
//! What this cannot find: a process that left the group and session, cleared its
//! environment, closed the pipes and lost its parent before the kill — short of a
//! cgroup per run or a subreaper, nothing on Linux links it to the helper.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;

use crate::proc_self::{stat_field, stat_fields};
use crate::sys;

/// The environment variable that marks every process of one helper run.
pub(crate) const MARKER_VAR: &str = "CHORIA_PROVISIONER_HELPER_RUN";

/// Most rounds of stop-and-look before the kill (a fork bomb cannot keep us busy).
const MAX_ROUNDS: usize = 6;

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: libc::pid_t,
    ppid: libc::pid_t,
    pgid: libc::pid_t,
    sid: libc::pid_t,
    /// Start time in clock ticks since boot: with the pid, names one process.
    start: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted from its last `)`.
fn parse_stat(pid: libc::pid_t, text: &str) -> Option<Stat> {
    let fields = stat_fields(text);
    // ppid is field 4, pgrp 5, session 6, starttime 22.
    Some(Stat {
        pid,
        ppid: stat_field(&fields, 4)?,
        pgid: stat_field(&fields, 5)?,
        sid: stat_field(&fields, 6)?,
        start: stat_field(&fields, 22)?,
    })
}

fn stat(pid: libc::pid_t) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Every process (thread-group leader) in `/proc`.
fn pids() -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// True when the environment of `pid` holds `entry` (`NAME=value`) as a whole entry.
fn environ_has(pid: libc::pid_t, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|e| e == entry))
        .unwrap_or(false)
}

/// The inode of the pipe behind `file`, if it is one.
pub(crate) fn pipe_inode(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = file.metadata().ok()?;
    meta.file_type().is_fifo().then(|| meta.ino())
}

/// True when `pid` has one of the pipes `inodes` open.
fn holds_pipe(pid: libc::pid_t, inodes: &[u64]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|link| {
            link.to_str()?
                .strip_prefix("pipe:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
        .any(|ino| inodes.contains(&ino))
}

/// A process to signal: a pidfd when the kernel has them (5.3+), else the pid with
/// its start time checked before each signal.
struct Handle {
    found: Stat,
    pidfd: Option<OwnedFd>,
}

impl Handle {
    /// A handle on the process `found` describes, or `None` if it is gone (or the
    /// pid already names another process).
    fn open(found: Stat) -> Option<Handle> {
        let pidfd = match sys::pidfd_open(found.pid) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
            Err(_) => None, // no pidfds here: the start time is checked per signal
        };
        // The pidfd (if any) now pins one process: make sure it is the one we found.
        (stat(found.pid).map(|s| s.start) == Some(found.start)).then_some(Handle { found, pidfd })
    }

    fn signal(&self, sig: libc::c_int) {
        // A process that is gone cannot be signalled: nothing to do about it.
        let _ = match &self.pidfd {
            Some(fd) => sys::pidfd_send_signal(fd, sig),
            None if stat(self.found.pid).map(|s| s.start) == Some(self.found.start) => {
                sys::kill(self.found.pid, sig)
            }
            None => Ok(()),
        };
    }
}

/// The processes of one helper run, for killing.
#[derive(Debug, Clone)]
pub(crate) struct HelperTree {
    helper: libc::pid_t,
    marker: Vec<u8>,
    pipes: Vec<u64>,
}

/// The daemon's own process, group and session ids, read when a tree is killed (not
/// on every run: they never change, and most runs kill nothing).
struct Own {
    pid: libc::pid_t,
    pgid: libc::pid_t,
    sid: libc::pid_t,
}

impl Own {
    fn now() -> Own {
        let pid = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
        // Without /proc the sweep finds nothing anyway; 0 is no process's group.
        let (pgid, sid) = stat(pid).map_or((0, 0), |s| (s.pgid, s.sid));
        Own { pid, pgid, sid }
    }
}

/// A fresh marker value for one run: 128 random bits in hex.
pub(crate) fn new_marker() -> String {
    hex::encode(crate::crypto::ids::id_bytes())
}

impl HelperTree {
    /// The tree of the helper `helper` (started in its own process group, with
    /// [`MARKER_VAR`]` = marker` in its environment), whose pipes are `pipes`
    /// (inodes, from [`pipe_inode`]).
    pub(crate) fn new(helper: u32, marker: &str, pipes: Vec<u64>) -> HelperTree {
        HelperTree {
            helper: helper as libc::pid_t,
            marker: format!("{MARKER_VAR}={marker}").into_bytes(),
            pipes,
        }
    }

    /// Stops and kills every process of the run that can be found (see the module
    /// documentation); returns how many were signalled. The helper itself is not
    /// reaped here.
    pub(crate) fn kill(&self) -> usize {
        let own = Own::now();
        let mut found: HashMap<libc::pid_t, Handle> = HashMap::new();
        let mut looked: HashSet<(libc::pid_t, u64)> = HashSet::new();
        let mut marked: HashSet<(libc::pid_t, u64)> = HashSet::new();
        for _ in 0..MAX_ROUNDS {
            let procs: Vec<Stat> = pids()
                .into_iter()
                .filter(|&p| p != own.pid && p > 1)
                .filter_map(stat)
                .collect();
            // The marks that cost a read are taken once per process.
            for p in &procs {
                let ours = p.ppid == own.pid && p.pid != self.helper;
                if looked.insert((p.pid, p.start))
                    && (environ_has(p.pid, &self.marker)
                        || (!ours && holds_pipe(p.pid, &self.pipes)))
                {
                    marked.insert((p.pid, p.start));
                }
            }
            let new = self.close_over(&own, &procs, &found, &marked);
            if new.is_empty() {
                break;
            }
            for p in new {
                if let Some(h) = Handle::open(p) {
                    h.signal(libc::SIGSTOP);
                    found.insert(p.pid, h);
                }
            }
        }
        for h in found.values() {
            h.signal(libc::SIGKILL);
        }
        // The helper and its own group, whatever /proc showed (it may not be
        // mounted): the helper is our unreaped child, so neither id can have been
        // reused.
        if self.helper != own.pid && self.helper != own.pgid {
            // Either may be gone already: nothing to do about it.
            let _ = sys::kill(self.helper, libc::SIGKILL);
            let _ = sys::kill(-self.helper, libc::SIGKILL);
        }
        found.len()
    }

    /// The processes of `procs` not in `known` that belong to the run: the helper,
    /// `marked` ones, and (to a fixed point) children of members and members of a
    /// group or session that a member leads.
    fn close_over(
        &self,
        own: &Own,
        procs: &[Stat],
        known: &HashMap<libc::pid_t, Handle>,
        marked: &HashSet<(libc::pid_t, u64)>,
    ) -> Vec<Stat> {
        let mut members: HashSet<libc::pid_t> = known.keys().copied().collect();
        // Relations through the helper hold even when it no longer shows in /proc.
        members.insert(self.helper);
        let mut listed: HashSet<libc::pid_t> = known.keys().copied().collect();
        let mut new = Vec::new();
        loop {
            let before = new.len();
            for p in procs {
                if listed.contains(&p.pid) {
                    continue;
                }
                let belongs = p.pid == self.helper
                    || marked.contains(&(p.pid, p.start))
                    || members.contains(&p.ppid)
                    || (p.pgid != own.pgid && members.contains(&p.pgid))
                    || (p.sid != own.sid && members.contains(&p.sid));
                if belongs {
                    members.insert(p.pid);
                    listed.insert(p.pid);
                    new.push(*p);
                }
            }
            if new.len() == before {
                break;
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_hostile_command_names() {
        let line =
            "4242 (a) b (c) 0 1) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(
            parse_stat(4242, line),
            Some(Stat {
                pid: 4242,
                ppid: 17,
                pgid: 4242,
                sid: 4242,
                start: 987654
            })
        );
        assert_eq!(parse_stat(1, "1 (x) S 0 1"), None, "too short");
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn our_own_process_reads_back() {
        let me = stat(std::process::id() as libc::pid_t).unwrap();
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        // 0 where the group or session was made outside our PID namespace, as in a
        // container started from a shell.
        assert!(me.pgid >= 0 && me.sid >= 0);
        assert!(pids().contains(&me.pid));
        let mut child = sleeper(None, std::process::Stdio::null());
        let them = stat(child.id() as libc::pid_t).unwrap();
        assert_eq!(them.ppid, me.pid);
        assert_eq!(them.pgid, them.pid, "a group of its own");
        assert_eq!(them.sid, me.sid, "our session");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn pipes_are_recognised_by_inode() {
        let (read, write) = std::io::pipe().unwrap();
        let read = std::fs::File::from(OwnedFd::from(read));
        let write = std::fs::File::from(OwnedFd::from(write));
        let ino = pipe_inode(&read).unwrap();
        assert_eq!(pipe_inode(&write), Some(ino), "both ends, one inode");
        let me = std::process::id() as libc::pid_t;
        assert!(holds_pipe(me, &[ino]));
        assert!(!holds_pipe(me, &[ino + 1_000_000]));
        drop((read, write));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(pipe_inode(&file), None);
    }

    #[test]
    fn markers_differ_per_run() {
        let (a, b) = (new_marker(), new_marker());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }

    /// A child of ours, in a group of its own, running `sleep 5`, with `stdout`.
    fn sleeper(marker: Option<&str>, stdout: std::process::Stdio) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("5").stdout(stdout).process_group(0);
        if let Some(m) = marker {
            cmd.env(MARKER_VAR, m);
        }
        cmd.spawn().unwrap()
    }

    fn running(child: &mut std::process::Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    #[test]
    fn our_other_children_holding_the_pipes_are_not_taken_for_the_run_s() {
        let (read, write) = std::io::pipe().unwrap();
        let read = std::fs::File::from(OwnedFd::from(read));
        let write = OwnedFd::from(write);
        let ino = pipe_inode(&read).unwrap();
        let marker = new_marker();
        let mut helper = sleeper(
            Some(&marker),
            std::process::Stdio::from(write.try_clone().unwrap()),
        );
        // Another child of ours holding the run's pipe, as a helper being started by
        // another worker does between fork and exec.
        let mut other = sleeper(None, std::process::Stdio::from(write));
        let tree = HelperTree::new(helper.id(), &marker, vec![ino]);
        assert!(tree.kill() >= 1);
        let status = helper.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(running(&mut other), "another child of ours is left alone");
        other.kill().unwrap();
        other.wait().unwrap();
        drop(read);
    }

    #[test]
    fn a_process_marked_for_another_run_is_left_alone() {
        let mine = new_marker();
        let mut helper = sleeper(Some(&mine), std::process::Stdio::null());
        let mut other = sleeper(Some(&new_marker()), std::process::Stdio::null());
        HelperTree::new(helper.id(), &mine, Vec::new()).kill();
        helper.wait().unwrap();
        assert!(running(&mut other));
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
