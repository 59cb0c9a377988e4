//! The test rig itself: a real nats-server on 127.0.0.1 that tests can start, kill and
//! restart, reached with the synchronous `nats` client the daemon uses.

mod support;

use std::time::Duration;
use support::NatsServer;

#[test]
fn nats_server_round_trip_and_restart() {
    let mut server = NatsServer::start();
    let nc = nats::Options::new()
        .max_reconnects(None)
        .reconnect_delay_callback(|n| Duration::from_millis(if n == 0 { 0 } else { 50 }))
        .connect(server.url())
        .expect("connect to the test nats-server");
    let sub = nc.subscribe("rig.test").unwrap();
    nc.publish("rig.test", "hello").unwrap();
    let msg = sub
        .next_timeout(Duration::from_secs(5))
        .expect("message back");
    assert_eq!(msg.data, b"hello");

    server.restart();
    // The client reconnects and re-subscribes by itself.
    let mut got = None;
    for _ in 0..100 {
        nc.publish("rig.test", "again").unwrap();
        if let Ok(m) = sub.next_timeout(Duration::from_millis(100)) {
            got = Some(m);
            break;
        }
    }
    assert_eq!(got.expect("message after restart").data, b"again");
}
