//! Facts about this process that libc would give through a call, read from `/proc`
//! instead (safe code, and the same values: the kernel is the source of both).

/// The fields after the command name of a `/proc/.../stat` text, the first being
/// field 3 (the command name, field 2, may hold spaces and parentheses, so the fields
/// are counted from its last `)`).
pub(crate) fn stat_fields(text: &str) -> Vec<&str> {
    text.rsplit_once(") ")
        .map(|(_, rest)| rest.split_ascii_whitespace().collect())
        .unwrap_or_default()
}

/// Field `n` (numbered as in proc(5)) of a stat text, parsed.
pub(crate) fn stat_field<T: std::str::FromStr>(fields: &[&str], n: usize) -> Option<T> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

/// The effective user id (`geteuid`): the second `Uid:` field of
/// `/proc/self/status`; `None` without `/proc`.
pub(crate) fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    effective_uid_in(&status)
}

fn effective_uid_in(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Clock ticks a second in `/proc`'s times (`sysconf(_SC_CLK_TCK)`): the `AT_CLKTCK`
/// entry of the auxiliary vector the kernel gave this process, else Linux's usual
/// 100.
pub(crate) fn clock_ticks() -> u64 {
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| auxv_entry(&auxv, AT_CLKTCK))
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// The auxiliary vector's tag for the clock tick.
const AT_CLKTCK: u64 = 17;

/// The value of `tag` in an auxiliary vector: native-endian word pairs (tag,
/// value), ended by a zero tag.
fn auxv_entry(auxv: &[u8], tag: u64) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |b: &[u8]| usize::from_ne_bytes(b.try_into().unwrap_or([0; WORD])) as u64;
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .take_while(|&(t, _)| t != 0)
        .find_map(|(t, v)| (t == tag).then_some(v))
}

/// Whether the calling thread runs under the normal policy (`SCHED_OTHER`, field 41
/// of `/proc/thread-self/stat`); `None` when that cannot be read.
pub(crate) fn thread_has_normal_policy() -> Option<bool> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let policy: i32 = stat_field(&stat_fields(&stat), 41)?;
    Some(policy == libc::SCHED_OTHER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_uid_is_the_second_uid_field() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(effective_uid_in(status), Some(0));
        assert_eq!(effective_uid_in("Name:\tx\n"), None);
        assert!(effective_uid().is_some());
    }

    #[test]
    fn the_clock_tick_comes_from_the_auxiliary_vector() {
        let mut auxv = Vec::new();
        for (t, v) in [(6u64, 4096u64), (17, 250), (0, 0), (17, 1)] {
            auxv.extend_from_slice(&(t as usize).to_ne_bytes());
            auxv.extend_from_slice(&(v as usize).to_ne_bytes());
        }
        assert_eq!(auxv_entry(&auxv, AT_CLKTCK), Some(250));
        assert_eq!(auxv_entry(&auxv, 99), None, "nothing past the end");
        assert_eq!(clock_ticks(), 100, "Linux's USER_HZ on this machine");
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let fields = stat_fields("12 (a) b) (c) S 1 12 12 0");
        assert_eq!(stat_field::<i32>(&fields, 4), Some(1));
        assert_eq!(stat_field::<i32>(&fields, 5), Some(12));
        assert_eq!(stat_field::<i32>(&fields, 99), None);
        assert!(thread_has_normal_policy().is_some());
    }
}
