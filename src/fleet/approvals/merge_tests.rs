//! The merge rule's properties, over random records and random histories of 2 to 5
//! instances: holds, decisions and forgets at random instances, messages delivered
//! in any order, duplicated, dropped and delayed, instances restarted from their
//! files (with or without the last changes written), clocks up to an hour apart.
//! After a whole-table exchange every instance holds the same table, and each
//! identity's decision is the one the ordering rule names: the highest clock, ties
//! to the stricter decision. A rule broken on purpose fails them.
//!
//! `APPROVALS_PROPERTY_CASES` sets the number of histories (`make stress` runs many
//! more); `APPROVALS_PROPERTY_SEED` replays one. Every failure names its seed.

use std::collections::HashMap;

use super::join;
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};
use crate::fleet::approvals::table::{Change, Table};
use crate::test_rng::Rng;

fn id(s: &str) -> Identity {
    Identity::parse(s).unwrap()
}

const DECISIONS: [Decision; 3] = [Decision::Approved, Decision::Denied, Decision::Forgotten];

/// A random record of one of a few identities, with few distinct values so that
/// ties are common.
fn random_record(rng: &mut Rng) -> ApprovalRecord {
    let identity = id(["a", "b"][rng.below(2)]);
    let mut r = ApprovalRecord::held(identity, (1 + rng.below(3) as u64) * 1_000_000_000);
    if rng.below(3) > 0 {
        r.clock = 1 + rng.below(3) as u64;
        r.decision = DECISIONS[rng.below(3)];
        r.at = rng.below(3) as u64;
        r.instance = ["p1", "p2"][rng.below(2)].into();
        r.by = ["alice", "bob"][rng.below(2)].into();
        r.reason = ["", "rack"][rng.below(2)].into();
        if rng.below(2) == 0 {
            r.operator = Some(crate::choria::peers::DecidedBy {
                uid: rng.below(2) as u32,
                user: [None, Some("alice".to_string())][rng.below(2)].clone(),
                pid: 7,
            });
        }
        if rng.below(2) == 0 {
            (r.held_at, r.first_seen, r.last_seen) = (0, 0, 0);
        }
    }
    r.last_seen += rng.below(3) as u64;
    r.version = ["", "0.29.4"][rng.below(2)].into();
    if rng.below(2) == 0 {
        r.facts = vec![("os.name".into(), ["Alma", "Rocky"][rng.below(2)].into())];
    }
    r
}

fn joined(a: &ApprovalRecord, b: &ApprovalRecord) -> ApprovalRecord {
    let mut out = a.clone();
    join(&mut out, b);
    out
}

fn cases(default: u64) -> std::ops::Range<u64> {
    if let Some(seed) = std::env::var("APPROVALS_PROPERTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed..seed + 1;
    }
    let n = std::env::var("APPROVALS_PROPERTY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    1..n + 1
}

#[test]
fn the_join_is_commutative_associative_and_idempotent() {
    for seed in cases(2_000) {
        let mut rng = Rng(seed);
        let (a, b, c) = (
            random_record(&mut rng),
            random_record(&mut rng),
            random_record(&mut rng),
        );
        if a.identity != b.identity || b.identity != c.identity {
            continue;
        }
        assert_eq!(joined(&a, &b), joined(&b, &a), "commutative, seed {seed}");
        assert_eq!(
            joined(&joined(&a, &b), &c),
            joined(&a, &joined(&b, &c)),
            "associative, seed {seed}"
        );
        assert_eq!(joined(&a, &a), a, "idempotent, seed {seed}");
        let mut again = joined(&a, &b);
        assert!(
            !join(&mut again, &b),
            "a second join changes nothing, seed {seed}"
        );
    }
}

/// One instance's table as the histories drive it: the real [`Table`], or a rule
/// broken on purpose.
trait Replica {
    fn fresh() -> Self;
    /// The table's digest, where it keeps one.
    fn digest(&self) -> Option<(u128, usize)> {
        None
    }
    fn merge(&mut self, record: ApprovalRecord) -> bool;
    fn get(&self, identity: &Identity) -> Option<ApprovalRecord>;
    fn all(&self) -> Vec<ApprovalRecord>;
    /// A hold of `identity` at `now_ns` with `version`: a sighting of its current
    /// decision.
    fn hold(&mut self, identity: &Identity, now_ns: u64, version: &str) -> bool;
}

impl Replica for Table {
    fn fresh() -> Table {
        Table::new(1_000)
    }
    fn digest(&self) -> Option<(u128, usize)> {
        Some(Table::digest(self))
    }
    fn merge(&mut self, record: ApprovalRecord) -> bool {
        Table::merge(self, record) != Change::None
    }
    fn get(&self, identity: &Identity) -> Option<ApprovalRecord> {
        Table::get(self, identity).cloned()
    }
    fn all(&self) -> Vec<ApprovalRecord> {
        self.records().cloned().collect()
    }
    fn hold(&mut self, identity: &Identity, now_ns: u64, version: &str) -> bool {
        Table::hold(self, identity, now_ns, version.into(), Vec::new()) != Change::None
    }
}

/// The rule broken on purpose: a hold beats a forget (the old table's "a forgotten
/// decision is undone by a later hold", with a hold's own clock of 0).
#[derive(Default)]
struct HoldBeatsForget(HashMap<Identity, ApprovalRecord>);

impl Replica for HoldBeatsForget {
    fn fresh() -> HoldBeatsForget {
        HoldBeatsForget::default()
    }
    fn merge(&mut self, record: ApprovalRecord) -> bool {
        match self.0.get_mut(&record.identity) {
            Some(old) if old.decision == Decision::Forgotten && record.clock == 0 => {
                *old = record;
                true
            }
            Some(old) => join(old, &record),
            None => {
                self.0.insert(record.identity.clone(), record);
                true
            }
        }
    }
    fn get(&self, identity: &Identity) -> Option<ApprovalRecord> {
        self.0.get(identity).cloned()
    }
    fn all(&self) -> Vec<ApprovalRecord> {
        self.0.values().cloned().collect()
    }
    fn hold(&mut self, identity: &Identity, now_ns: u64, version: &str) -> bool {
        if self
            .0
            .get(identity)
            .is_some_and(|r| matches!(r.standing(), Decision::Approved | Decision::Denied))
        {
            return false;
        }
        let mut r = ApprovalRecord::held(identity.clone(), now_ns);
        r.version = version.into();
        self.merge(r)
    }
}

/// One instance of a history: its table, its file, its clock's skew (seconds).
struct Instance<R> {
    name: String,
    table: R,
    file: Vec<ApprovalRecord>,
    skew: i64,
}

/// A history's world: the instances, the messages in flight, every decision
/// taken (each written to its instance's file before anything else, as
/// `Approvals::decide` does), every hold made.
struct World<R> {
    instances: Vec<Instance<R>>,
    in_flight: Vec<(usize, ApprovalRecord)>,
    decisions: Vec<ApprovalRecord>,
    holds: Vec<ApprovalRecord>,
    step: u64,
}

const IDENTITIES: [&str; 4] = ["n1.example.net", "n2.example.net", "n3.example.net", "n4"];

impl<R: Replica> World<R> {
    fn new(rng: &mut Rng) -> World<R> {
        let n = 2 + rng.below(4);
        let instances = (0..n)
            .map(|i| Instance {
                name: format!("p{i}.example.net"),
                table: R::fresh(),
                file: Vec::new(),
                skew: rng.below(7_201) as i64 - 3_600,
            })
            .collect();
        World {
            instances,
            in_flight: Vec::new(),
            decisions: Vec::new(),
            holds: Vec::new(),
            step: 0,
        }
    }

    /// Instance `i`'s clock, Unix nanoseconds.
    fn now_ns(&self, i: usize) -> u64 {
        let seconds = 100_000 + self.step as i64 + self.instances[i].skew;
        seconds as u64 * 1_000_000_000 + self.step
    }

    /// Sends `identity`'s record at `i` to every other instance.
    fn broadcast(&mut self, i: usize, identity: &Identity) {
        if let Some(record) = self.instances[i].table.get(identity) {
            for to in (0..self.instances.len()).filter(|&to| to != i) {
                self.in_flight.push((to, record.clone()));
            }
        }
    }

    fn save(&mut self, i: usize) {
        self.instances[i].file = self.instances[i].table.all();
    }

    fn step(&mut self, rng: &mut Rng) {
        self.step += 1;
        let i = rng.below(self.instances.len());
        let identity = id(IDENTITIES[rng.below(IDENTITIES.len())]);
        match rng.below(20) {
            0..=5 => {
                let now = self.now_ns(i);
                let version = ["0.29.4", "0.30.0"][rng.below(2)];
                if self.instances[i].table.hold(&identity, now, version) {
                    let mut hold = ApprovalRecord::held(identity.clone(), now);
                    hold.clock = self.instances[i]
                        .table
                        .get(&identity)
                        .map_or(0, |r| r.clock);
                    self.holds.push(hold);
                    self.broadcast(i, &identity);
                }
            }
            6..=9 => {
                let decision = DECISIONS[rng.below(3)];
                let old = self.instances[i].table.get(&identity);
                if old.as_ref().map(ApprovalRecord::standing) == Some(decision)
                    || (old.is_none() && decision == Decision::Forgotten)
                {
                    return;
                }
                let mut record = old.clone().unwrap_or_else(|| {
                    let mut r = ApprovalRecord::held(identity.clone(), 1);
                    (r.held_at, r.first_seen, r.last_seen) = (0, 0, 0);
                    r
                });
                record.clock = old.map_or(0, |o| o.clock) + 1;
                record.decision = decision;
                record.at = self.now_ns(i);
                record.instance = self.instances[i].name.clone();
                record.by = ["alice", "bob"][rng.below(2)].into();
                if decision == Decision::Forgotten {
                    (record.held_at, record.first_seen, record.last_seen) = (0, 0, 0);
                }
                assert!(self.instances[i].table.merge(record.clone()));
                self.decisions.push(record);
                self.save(i);
                self.broadcast(i, &identity);
            }
            10..=15 if !self.in_flight.is_empty() => {
                let k = rng.below(self.in_flight.len());
                let (to, record) = match rng.below(10) {
                    0 => {
                        self.in_flight.swap_remove(k);
                        return; // lost
                    }
                    1 => self.in_flight[k].clone(), // delivered, and again later
                    _ => self.in_flight.swap_remove(k),
                };
                self.instances[to].table.merge(record);
            }
            16 | 17 => self.save(i),
            18 => {
                // A clean restart writes its file first; a crash does not.
                if rng.below(2) == 0 {
                    self.save(i);
                }
                let mut table = R::fresh();
                for record in self.instances[i].file.clone() {
                    table.merge(record);
                }
                self.instances[i].table = table;
            }
            _ => {}
        }
    }

    /// Every instance sends its whole table to every other.
    fn exchange(&mut self) {
        let tables: Vec<Vec<ApprovalRecord>> =
            self.instances.iter().map(|i| i.table.all()).collect();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            for (j, records) in tables.iter().enumerate() {
                if i != j {
                    for record in records {
                        instance.table.merge(record.clone());
                    }
                }
            }
        }
    }

    /// What the ordering rule says of each identity: the greatest of its decisions
    /// by clock, then strictness, time, instance, operator, reason.
    fn expected_decision(&self, identity: &Identity) -> Option<&ApprovalRecord> {
        let rank = |d: Decision| match d {
            Decision::Pending => 0,
            Decision::Approved => 1,
            Decision::Forgotten => 2,
            Decision::Denied => 3,
        };
        self.decisions
            .iter()
            .filter(|d| d.identity == *identity)
            .max_by(|a, b| {
                (
                    a.clock,
                    rank(a.decision),
                    a.at,
                    &a.instance,
                    &a.by,
                    &a.reason,
                )
                    .cmp(&(
                        b.clock,
                        rank(b.decision),
                        b.at,
                        &b.instance,
                        &b.by,
                        &b.reason,
                    ))
            })
    }

    /// The properties after an exchange; `Err` says which failed.
    fn check(&self) -> Result<(), String> {
        let sorted = |r: &R| {
            let mut all = r.all();
            all.sort_by(|a, b| a.identity.cmp(&b.identity));
            all
        };
        let first = sorted(&self.instances[0].table);
        for other in &self.instances[1..] {
            if sorted(&other.table) != first {
                return Err(format!(
                    "{} and {} hold different tables",
                    self.instances[0].name, other.name
                ));
            }
            if other.table.digest() != self.instances[0].table.digest() {
                return Err(format!("{} has another digest", other.name));
            }
        }
        if let Some(digest) = self.instances[0].table.digest() {
            let mut rebuilt = Table::new(1_000);
            for record in first.iter().rev() {
                rebuilt.merge(record.clone());
            }
            if rebuilt.digest() != digest {
                return Err("the running digest is not the table's".into());
            }
        }
        for identity in IDENTITIES.map(id) {
            let got = self.instances[0].table.get(&identity);
            let want = self.expected_decision(&identity);
            let register =
                |r: &ApprovalRecord| (r.clock, r.decision, r.at, r.instance.clone(), r.by.clone());
            match (&got, want) {
                (Some(g), Some(w)) if register(g) != register(w) => {
                    return Err(format!(
                        "{identity}: {:?}, the rule says {:?}",
                        register(g),
                        register(w)
                    ))
                }
                (None, Some(w)) => return Err(format!("{identity}: lost {:?}", register(w))),
                (Some(g), None) if g.clock != 0 => {
                    return Err(format!("{identity}: a decision nobody took"))
                }
                _ => {}
            }
            if let Some(g) = &got {
                let approved = want.is_some_and(|w| w.decision == Decision::Approved);
                if (g.standing() == Decision::Approved) != approved {
                    return Err(format!("{identity}: approved is not the last decision"));
                }
                // An approval or denial keeps the sightings its instance had; a
                // forget starts them afresh.
                let held = self.holds.iter().any(|h| {
                    h.identity == identity && h.clock <= g.clock && h.held_at == g.held_at
                });
                if g.held_at != 0 && !held {
                    return Err(format!("{identity}: a hold nobody made"));
                }
            }
        }
        Ok(())
    }
}

/// Runs the history of `seed`; `Err` names the property that failed.
fn history<R: Replica>(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let mut world = World::<R>::new(&mut rng);
    for _ in 0..20 + rng.below(200) {
        world.step(&mut rng);
    }
    // Some messages never arrive; the exchange makes up for them.
    world.in_flight.retain(|_| rng.below(2) == 0);
    while let Some((to, record)) = world.in_flight.pop() {
        world.instances[to].table.merge(record);
    }
    world.exchange();
    world.check()
}

#[test]
fn random_histories_converge_on_what_the_ordering_rule_says() {
    for seed in cases(1_500) {
        if let Err(e) = history::<Table>(seed) {
            panic!("seed {seed} (APPROVALS_PROPERTY_SEED={seed} replays it): {e}");
        }
    }
}

#[test]
fn a_rule_where_a_hold_beats_a_forget_fails_the_properties() {
    let failed = (1..500).find(|&seed| history::<HoldBeatsForget>(seed).is_err());
    assert!(failed.is_some(), "the broken rule passed 500 histories");
}

/// The story on two instances, step by step: an approval ahead of time,
/// the second instance down, a forget, the node held, the second instance back
/// with its old approval from its file.
#[test]
fn a_forget_made_while_an_instance_was_down_is_not_undone_when_it_comes_back() {
    let n = id("late-node.example.net");
    let (mut a, mut b) = (Table::new(10), Table::new(10));
    let mut approval = ApprovalRecord::held(n.clone(), 1);
    (approval.held_at, approval.first_seen, approval.last_seen) = (0, 0, 0);
    (approval.clock, approval.decision, approval.at) = (1, Decision::Approved, 5);
    a.merge(approval.clone());
    b.merge(approval);
    let b_file: Vec<ApprovalRecord> = b.records().cloned().collect();
    // B is down. A forgets; the node boots and A holds it.
    let mut forget = a.get(&n).unwrap().clone();
    (forget.clock, forget.decision, forget.at) = (2, Decision::Forgotten, 1);
    a.merge(forget);
    a.hold(&n, 7_000_000_000, "0.29.4".into(), Vec::new());
    assert_eq!(a.standing(&n), Some(Decision::Pending));
    // B comes back from its file; the tables are exchanged in either order.
    let mut b = Table::new(10);
    for r in b_file {
        b.merge(r);
    }
    let (from_a, from_b) = (a.get(&n).unwrap().clone(), b.get(&n).unwrap().clone());
    a.merge(from_b);
    b.merge(from_a);
    assert_eq!(a.standing(&n), Some(Decision::Pending));
    assert_eq!(b.standing(&n), Some(Decision::Pending));
    assert_eq!(a.get(&n), b.get(&n));
}
