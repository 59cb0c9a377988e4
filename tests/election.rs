//! Leader election against a broker that exposes only the two election subjects.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use choria_provisioner::choria::bus::Bus;
use choria_provisioner::hosts::election::{Callbacks, Election, ElectionOptions, ElectionState};
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::{bounded, Sender};
use parking_lot::Mutex;
use support::{create_election_bucket, election_broker, NatsServer};

struct Candidate {
    won: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
    state: Arc<Mutex<ElectionState>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    nc: nats::Connection,
    metrics: Arc<Metrics>,
}

impl Candidate {
    fn start(server: &NatsServer, identity: &str) -> Candidate {
        #[allow(deprecated)]
        let nc = nats::Options::with_user_pass("provisioner", "s3cret")
            .connect(server.url())
            .expect("connect as provisioner");
        let metrics = Arc::new(Metrics::new("t").unwrap());
        let election = Election::new(
            Bus::new(nc.clone()),
            identity,
            ElectionOptions {
                startup_spread: Duration::ZERO,
                request_timeout: Duration::from_secs(2),
                ..ElectionOptions::default()
            },
            Arc::clone(&metrics),
        )
        .unwrap();
        let state = election.state();
        let (won, lost) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (w, l) = (Arc::clone(&won), Arc::clone(&lost));
        let (stop, stop_rx) = bounded::<()>(0);
        let thread = std::thread::spawn(move || {
            election.run(
                Callbacks {
                    won: Box::new(move || {
                        w.fetch_add(1, Ordering::SeqCst);
                    }),
                    lost: Box::new(move || {
                        l.fetch_add(1, Ordering::SeqCst);
                    }),
                },
                &stop_rx,
            )
        });
        Candidate {
            won,
            lost,
            state,
            stop: Some(stop),
            thread: Some(thread),
            nc,
            metrics,
        }
    }

    fn is_leader(&self) -> bool {
        *self.state.lock() == ElectionState::Leader
    }

    fn stop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if f() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn exactly_one_candidate_leads_and_a_clean_stop_hands_over_within_two_seconds() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(30));
    let mut a = Candidate::start(&server, "a.example.net");
    let mut b = Candidate::start(&server, "b.example.net");
    wait_until(Duration::from_secs(10), || a.is_leader() || b.is_leader()).expect("a leader");
    std::thread::sleep(Duration::from_secs(2));
    assert!(a.is_leader() ^ b.is_leader(), "exactly one leader");
    let (leader, standby) = if a.is_leader() {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(leader.won.load(Ordering::SeqCst), 1);
    assert_eq!(standby.won.load(Ordering::SeqCst), 0);
    assert_eq!(*standby.state.lock(), ElectionState::Standby);
    assert!(
        leader.metrics.render().contains("choria_election_leader{"),
        "leader gauge exported"
    );

    leader.stop();
    let took = wait_until(Duration::from_secs(5), || standby.is_leader())
        .expect("standby takes over after a clean stop");
    assert!(took < Duration::from_secs(2), "handover took {took:?}");
    assert_eq!(standby.won.load(Ordering::SeqCst), 1);
    standby.stop();
}

#[test]
fn a_dead_leader_is_replaced_after_the_bucket_ttl() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(4));
    let mut a = Candidate::start(&server, "a.example.net");
    wait_until(Duration::from_secs(10), || a.is_leader()).expect("a leads");
    let mut b = Candidate::start(&server, "b.example.net");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!b.is_leader());
    // Kill a's connection without a clean stop: its refreshes fail, it pauses.
    a.nc.clone().close();
    let took = wait_until(Duration::from_secs(15), || b.is_leader()).expect("b takes over");
    assert!(took <= Duration::from_secs(4 + 8), "took {took:?}");
    wait_until(Duration::from_secs(5), || {
        a.lost.load(Ordering::SeqCst) == 1
    })
    .expect("the old leader noticed it lost");
    assert!(!a.is_leader());
    a.stop();
    b.stop();
}

#[test]
fn a_missing_bucket_is_reported_and_retried() {
    let server = election_broker();
    let mut a = Candidate::start(&server, "a.example.net");
    wait_until(Duration::from_secs(5), || {
        matches!(&*a.state.lock(), ElectionState::Unavailable(why) if why.contains("cannot access KV Bucket CHORIA_LEADER_ELECTION"))
    })
    .expect("unavailable state with a reason");
    create_election_bucket(&server, Duration::from_secs(10));
    wait_until(Duration::from_secs(15), || a.is_leader()).expect("leads once the bucket exists");
    a.stop();
}

#[test]
fn a_bad_ttl_is_reported_not_fatal() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(7200));
    let mut a = Candidate::start(&server, "a.example.net");
    wait_until(Duration::from_secs(5), || {
        matches!(&*a.state.lock(), ElectionState::Unavailable(why) if why.contains("less than or equal to 1 hour"))
    })
    .expect("the TTL problem is visible");
    a.stop();
}
