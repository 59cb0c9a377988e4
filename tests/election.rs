//! Leader election against a broker that exposes only the two election subjects:
//! straight to the nats-server, and (with the `sim` feature) through a Choria broker
//! front end with the provisioner's own connector (`tests/support/broker.rs`).
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use choria_provisioner::choria::bus::Bus;
use choria_provisioner::fleet::election::{Callbacks, Election, ElectionOptions, ElectionState};
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::{bounded, Sender};
use parking_lot::Mutex;
#[cfg(feature = "sim")]
use support::broker::{ChoriaBroker, Network};
use support::{create_election_bucket, election_broker, NatsServer};

/// Where the candidates connect.
enum Rig {
    /// Straight to the nats-server, as user `provisioner`.
    Direct(NatsServer),
    /// Through a Choria broker with an organisation issuer: the `choria` provider's
    /// CONNECT (password, client JWT, signed nonce) made by our connector.
    #[cfg(feature = "sim")]
    Broker(ChoriaBroker),
}

impl Rig {
    fn direct() -> Rig {
        Rig::Direct(election_broker())
    }

    #[cfg(feature = "sim")]
    fn broker() -> Rig {
        Rig::Broker(ChoriaBroker::start(Network::Issuer))
    }

    /// The nats-server holding the bucket.
    fn server(&self) -> &NatsServer {
        match self {
            Rig::Direct(server) => server,
            #[cfg(feature = "sim")]
            Rig::Broker(broker) => &broker.backend,
        }
    }

    /// A connection for `identity`: its bus, and a way to kill it.
    fn connect(&self, identity: &str) -> (Bus, Box<dyn Fn() + Send>) {
        match self {
            Rig::Direct(server) => {
                let nc = nats::Options::with_user_pass("provisioner", "s3cret")
                    .with_name(identity)
                    .connect(server.url())
                    .expect("connect as provisioner");
                (Bus::new(nc.clone()), Box::new(move || nc.clone().close()))
            }
            #[cfg(feature = "sim")]
            Rig::Broker(broker) => {
                let metrics = Arc::new(Metrics::new("t").unwrap());
                let conn = choria_provisioner::choria::connector::Connector::connect_once(
                    &broker.client(identity),
                    &metrics,
                )
                .expect("let in by the broker");
                (
                    conn.bus().clone(),
                    Box::new(move || conn.close(Duration::from_secs(1))),
                )
            }
        }
    }
}

struct Candidate {
    won: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
    state: Arc<Mutex<ElectionState>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    kill: Box<dyn Fn() + Send>,
    metrics: Arc<Metrics>,
}

impl Candidate {
    fn start(rig: &Rig, identity: &str) -> Candidate {
        let (bus, kill) = rig.connect(identity);
        let metrics = Arc::new(Metrics::new("t").unwrap());
        let election = Election::new(
            bus,
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
            kill,
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

/// Runs each test straight to the nats-server (`direct::…`) and through a Choria
/// broker front end (`through_a_choria_broker::…`).
macro_rules! on_both_rigs {
    ($($test:ident),* $(,)?) => {
        mod direct {
            $(#[test]
            fn $test() {
                super::$test(super::Rig::direct());
            })*
        }

        #[cfg(feature = "sim")]
        mod through_a_choria_broker {
            $(#[test]
            fn $test() {
                super::$test(super::Rig::broker());
            })*
        }
    };
}

on_both_rigs!(
    exactly_one_candidate_leads_and_a_clean_stop_hands_over_within_two_seconds,
    a_dead_leader_is_replaced_after_the_bucket_ttl,
    a_missing_bucket_is_reported_and_retried,
    a_bad_ttl_is_reported_not_fatal,
);

fn exactly_one_candidate_leads_and_a_clean_stop_hands_over_within_two_seconds(rig: Rig) {
    create_election_bucket(rig.server(), Duration::from_secs(30));
    let mut a = Candidate::start(&rig, "a.example.net");
    let mut b = Candidate::start(&rig, "b.example.net");
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
    // On a loaded machine the standby's first bucket request may time out (2 s here);
    // it is `Unavailable` until its retry, then stands by.
    wait_until(Duration::from_secs(10), || {
        *standby.state.lock() == ElectionState::Standby
    })
    .unwrap_or_else(|| panic!("the other candidate stands by: {:?}", standby.state.lock()));
    assert!(
        !standby.is_leader() && leader.is_leader(),
        "still one leader"
    );
    assert!(
        leader.metrics.render().contains("choria_election_leader{"),
        "leader gauge exported"
    );

    leader.stop();
    let took = wait_until(Duration::from_secs(5), || standby.is_leader())
        .expect("standby takes over after a clean stop");
    assert!(took < Duration::from_secs(2), "handover took {took:?}");
    // The state says leader just before the `won` callback runs.
    wait_until(Duration::from_secs(1), || {
        standby.won.load(Ordering::SeqCst) == 1
    })
    .expect("the won callback ran once");
    standby.stop();
}

fn a_dead_leader_is_replaced_after_the_bucket_ttl(rig: Rig) {
    create_election_bucket(rig.server(), Duration::from_secs(4));
    let mut a = Candidate::start(&rig, "a.example.net");
    wait_until(Duration::from_secs(10), || a.is_leader()).expect("a leads");
    let mut b = Candidate::start(&rig, "b.example.net");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!b.is_leader());
    // Kill a's connection without a clean stop: its refreshes fail, it pauses.
    (a.kill)();
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

fn a_missing_bucket_is_reported_and_retried(rig: Rig) {
    let mut a = Candidate::start(&rig, "a.example.net");
    wait_until(Duration::from_secs(5), || {
        matches!(&*a.state.lock(), ElectionState::Unavailable(why) if why.contains("cannot access KV Bucket CHORIA_LEADER_ELECTION"))
    })
    .expect("unavailable state with a reason");
    create_election_bucket(rig.server(), Duration::from_secs(10));
    wait_until(Duration::from_secs(15), || a.is_leader()).expect("leads once the bucket exists");
    a.stop();
}

fn a_bad_ttl_is_reported_not_fatal(rig: Rig) {
    create_election_bucket(rig.server(), Duration::from_secs(7200));
    let mut a = Candidate::start(&rig, "a.example.net");
    wait_until(Duration::from_secs(5), || {
        matches!(&*a.state.lock(), ElectionState::Unavailable(why) if why.contains("less than or equal to 1 hour"))
    })
    .expect("the TTL problem is visible");
    a.stop();
}
