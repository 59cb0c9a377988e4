//! Buffers a thread keeps between the messages it encodes or decodes: a worker's
//! requests and replies reuse their memory instead of allocating and freeing blocks
//! of a KiB or more each (glibc's slow path, worse when one thread allocates and
//! another frees). Nothing in them outlives a use: every buffer is handed over empty.
//!
//! What it saves, measured on 2026-12-07 (#45) against fresh buffers for every use,
//! with the unit's malloc settings: `make bench` at 10,000 nodes, the two builds
//! run in turn four times, put the provisioner's CPU per node at 0.138-0.196 ms
//! (mean 0.174; ratio to the simulator 2.60-3.21, mean 2.93) with fresh buffers and
//! 0.132-0.183 ms (mean 0.162; ratio 2.37-3.10, mean 2.63) with these, each run of
//! them below the run of fresh buffers just before it: 7-10 % of the CPU per node.
//! It is not the instructions (callgrind counts 717,243 a node with fresh buffers,
//! 703,217 with these, 2 %) but what the allocator does with blocks of a KiB or
//! more freed by one thread and taken again. (Three runs the day before, not in
//! turn, had shown 5.3 % by CPU and nothing by ratio.)

use std::cell::RefCell;
use std::thread::LocalKey;

/// Most bytes a kept buffer may hold on to after a use: the usual messages fit many
/// times over, and one large configuration (certificates, policies) is not held on
/// to by every worker.
const KEPT: usize = 64 * 1024;

/// Runs `f` with this thread's `N` buffers of `key`, each empty; a buffer that grew
/// past [`KEPT`] is given back afterwards. A nested use (none today) gets fresh
/// buffers rather than a panic.
pub(crate) fn with<const N: usize, R>(
    key: &'static LocalKey<RefCell<[Vec<u8>; N]>>,
    f: impl FnOnce(&mut [Vec<u8>; N]) -> R,
) -> R {
    key.with(|cell| {
        let Ok(mut kept) = cell.try_borrow_mut() else {
            return f(&mut std::array::from_fn(|_| Vec::new()));
        };
        kept.iter_mut().for_each(Vec::clear);
        let result = f(&mut kept);
        for buffer in kept.iter_mut() {
            if buffer.capacity() > KEPT {
                *buffer = Vec::new();
            }
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static TWO: RefCell<[Vec<u8>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
    }

    #[test]
    fn buffers_come_empty_keep_their_memory_and_give_back_a_large_one() {
        with(&TWO, |[small, large]| {
            small.extend_from_slice(b"left over");
            large.resize(KEPT + 1, 7);
        });
        with(&TWO, |[small, large]| {
            assert!(small.is_empty() && large.is_empty());
            assert!(small.capacity() >= 9, "a small buffer is kept");
            assert_eq!(large.capacity(), 0, "a large one is given back");
            // Nested: fresh buffers, no panic, the outer ones untouched.
            small.push(1);
            with(&TWO, |[inner, _]| {
                assert!(inner.is_empty());
                inner.push(2);
            });
            assert_eq!(small, &[1]);
        });
    }
}
