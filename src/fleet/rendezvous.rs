//! Rendezvous (highest-random-weight) hashing: which live instance owns a node.
//!
//! Every instance computes, for a node, a weight per live member and the member with
//! the highest weight owns the node. All instances that see the same live set agree
//! without talking; when a member leaves only its own nodes move (each to the member
//! with its next-highest weight), and when one joins it takes about `1/n` of the
//! nodes, a little from everybody.
//!
//! The hash is specified here, not taken from `std` (whose `DefaultHasher` may change
//! between Rust releases), so instances built by different compilers agree: FNV-1a 64
//! of the bytes, then the `splitmix64` finaliser; a member's weight for a node is the
//! finaliser of the member's hash xor the node's hash. Ties (which need a 64-bit
//! collision) go to the greater identity.

use crate::choria::identity::Identity;

/// FNV-1a 64 of `bytes`, finalised with splitmix64 so that similar names spread.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// The splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A set of live members and their hashes, ready to answer "who owns this node".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Sorted by identity, each with its hash.
    members: Vec<(Identity, u64)>,
}

impl Members {
    /// The set of `members` (duplicates counted once).
    pub fn new(members: impl IntoIterator<Item = Identity>) -> Members {
        let mut members: Vec<(Identity, u64)> = members
            .into_iter()
            .map(|m| {
                let h = hash(m.as_str().as_bytes());
                (m, h)
            })
            .collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        members.dedup_by(|a, b| a.0 == b.0);
        Members { members }
    }

    /// How many members.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// True when `identity` is a member.
    pub(crate) fn contains(&self, identity: &Identity) -> bool {
        self.members
            .binary_search_by(|(m, _)| m.cmp(identity))
            .is_ok()
    }

    /// The members, sorted.
    pub(crate) fn identities(&self) -> impl Iterator<Item = &Identity> {
        self.members.iter().map(|(m, _)| m)
    }

    /// The member that owns `node`; `None` when there is no member.
    pub fn owner(&self, node: &str) -> Option<&Identity> {
        let n = hash(node.as_bytes());
        self.members
            .iter()
            .map(|(m, h)| (mix(h ^ n), m))
            .max()
            .map(|(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Identity {
        Identity::parse(s).unwrap()
    }

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("sim-{i}.example.net")).collect()
    }

    fn shares(members: &Members, nodes: &[String]) -> Vec<usize> {
        members
            .identities()
            .map(|m| nodes.iter().filter(|n| members.owner(n) == Some(m)).count())
            .collect()
    }

    #[test]
    fn the_hash_is_the_specified_one() {
        // Instances built apart must agree, so the function must never change: these
        // values come from an independent implementation of the formula in the
        // module comment (a few lines of Python), not from this code.
        assert_eq!(hash(b"a"), 0x5f29_c2aa_dd9b_8527);
        assert_eq!(hash(b"sim-1.example.net"), 0x644c_11df_d509_e5da);
        let m = Members::new([id("p1"), id("p2"), id("p3")]);
        let owners: Vec<&str> = ["n1", "n2", "n3", "n4", "n5", "n6"]
            .iter()
            .map(|n| m.owner(n).unwrap().as_str())
            .collect();
        assert_eq!(owners, ["p2", "p2", "p1", "p3", "p2", "p3"]);
    }

    #[test]
    fn shares_are_fair_within_three_percent() {
        let all = nodes(10_000);
        for n in [2usize, 3, 5] {
            let m = Members::new((0..n).map(|i| id(&format!("provisioner-{i}.lon.example.net"))));
            let s = shares(&m, &all);
            assert_eq!(s.iter().sum::<usize>(), all.len());
            let fair = all.len() / n;
            for share in &s {
                assert!(
                    share.abs_diff(fair) * 100 <= all.len() * 3,
                    "{n} members: shares {s:?}"
                );
            }
        }
    }

    #[test]
    fn only_the_leaver_s_nodes_move() {
        let all = nodes(10_000);
        let three = Members::new([id("a.x"), id("b.x"), id("c.x")]);
        let two = Members::new([id("a.x"), id("b.x")]);
        let mut moved = 0;
        for n in &all {
            let before = three.owner(n).unwrap();
            let after = two.owner(n).unwrap();
            if before.as_str() == "c.x" {
                moved += 1;
            } else {
                assert_eq!(before, after, "{n} moved although its owner stayed");
            }
        }
        // And the leaver's share spreads over both survivors.
        let c_nodes: Vec<String> = all
            .iter()
            .filter(|n| three.owner(n).unwrap().as_str() == "c.x")
            .cloned()
            .collect();
        assert_eq!(c_nodes.len(), moved);
        let s = shares(&two, &c_nodes);
        assert!(s.iter().all(|x| *x * 3 >= moved), "{s:?} of {moved}");
    }

    #[test]
    fn a_joiner_takes_only_its_own_share() {
        let all = nodes(5_000);
        let two = Members::new([id("a.x"), id("b.x")]);
        let three = Members::new([id("a.x"), id("b.x"), id("c.x")]);
        for n in &all {
            let after = three.owner(n).unwrap();
            if after.as_str() != "c.x" {
                assert_eq!(two.owner(n).unwrap(), after);
            }
        }
    }

    #[test]
    fn empty_duplicates_and_order() {
        assert_eq!(Members::default().owner("n1"), None);
        let a = Members::new([id("b"), id("a"), id("b")]);
        let b = Members::new([id("a"), id("b")]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert!(a.contains(&id("a")) && !a.contains(&id("c")));
        assert_eq!(Members::new([id("a")]).owner("anything"), Some(&id("a")));
    }
}
