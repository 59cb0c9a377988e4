//! Two provisioners with leader election over a real nats-server (directly and
//! through a Choria broker front end): one provisions, the standby takes over on a
//! clean stop at once and after the key's TTL when the leader's connection dies.
#![cfg(feature = "sim")]

mod support;

use std::time::{Duration, Instant};

use choria_provisioner::fleet::election::ElectionState;
use support::broker::{ChoriaBroker, Network};
use support::rig::*;
use support::{create_election_bucket, election_broker};

#[test]
fn two_provisioners_with_leader_election_one_provisions_and_the_standby_takes_over() {
    two_provisioners_with_leader_election_on(Meeting::Election(election_broker()));
}

#[test]
fn two_provisioners_with_leader_election_through_a_choria_broker() {
    two_provisioners_with_leader_election_on(Meeting::Choria(ChoriaBroker::start(Network::Issuer)));
}

fn two_provisioners_with_leader_election_on(meeting: Meeting) {
    create_election_bucket(meeting.backend(), Duration::from_secs(30));
    let mut a = meeting.provisioner("a.test", "leader_election: true\n", electing());
    let mut b = meeting.provisioner("b.test", "leader_election: true\n", electing());
    let leader_of = |p: &Provisioner| {
        p.daemon()
            .election()
            .map(|s| *s.lock() == ElectionState::Leader)
            .unwrap_or(false)
    };
    wait_until("a leader", Duration::from_secs(15), || {
        leader_of(&a) || leader_of(&b)
    });
    let first = meeting.fleet(50, |o| o.prefix = "first-".into());
    wait_provisioned(&first, 50, Duration::from_secs(60));
    let (leader, standby) = if leader_of(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(leader.metrics.provisioned.get(), 50);
    assert_eq!(
        standby.metrics.provisioned.get(),
        0,
        "the standby provisions nothing"
    );
    assert_eq!(standby.metrics.paused.get(), 1);

    assert!(leader.stop(), "clean stop");
    let started = Instant::now();
    wait_until("standby leads", Duration::from_secs(10), || {
        leader_of(standby)
    });
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "handover took {:?}",
        started.elapsed()
    );
    let second = meeting.fleet(50, |o| o.prefix = "second-".into());
    wait_provisioned(&second, 50, Duration::from_secs(60));
    assert_eq!(standby.metrics.provisioned.get(), 50);
    assert_provisioned(&first.summary(), |_| 1);
    assert_provisioned(&second.summary(), |_| 1);
    meeting.assert_let_in(2);
}

#[test]
fn when_the_leader_s_connection_dies_the_standby_takes_over_after_the_ttl() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(4));
    let url = as_provisioner(&server.url());
    let node_url = as_node(&server.url());
    let a = Provisioner::start(&url, "a.test", "leader_election: true\n", electing());
    let leader_of = |p: &Provisioner| {
        p.daemon()
            .election()
            .map(|s| *s.lock() == ElectionState::Leader)
            .unwrap_or(false)
    };
    wait_until("a leads", Duration::from_secs(15), || leader_of(&a));
    let b = Provisioner::start(&url, "b.test", "leader_election: true\n", electing());
    std::thread::sleep(Duration::from_secs(1));
    assert!(!leader_of(&b));
    // The leader's broker connection dies: no resignation, its key must expire.
    a.daemon().connector().close(Duration::from_secs(1));
    let started = Instant::now();
    wait_until("b leads", Duration::from_secs(20), || leader_of(&b));
    assert!(
        started.elapsed() < Duration::from_secs(4 + 8),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(a.metrics.paused.get(), 1, "the old leader paused itself");
    let fleet = sim(&node_url, 30, |_| {});
    wait_provisioned(&fleet, 30, Duration::from_secs(60));
    assert_eq!(b.metrics.provisioned.get(), 30);
    assert_eq!(a.metrics.provisioned.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
}
