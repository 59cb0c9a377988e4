//! The monitor port's limits against hostile clients on a real socket: each attack
//! is refused or dropped in its own way, counted, and never delays a scrape.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// Small limits, so that the deadlines pass within a test.
fn limits() -> tiny_http::Limits {
    tiny_http::Limits {
        max_connections: 8,
        head_timeout: Duration::from_millis(800),
        write_timeout: Duration::from_millis(800),
        ..tiny_http::Limits::default()
    }
}

struct Door {
    server: MetricsServer,
    metrics: Arc<Metrics>,
}

impl Door {
    fn open(nodes: NodeSource) -> Door {
        let metrics = Arc::new(Metrics::new("lon").unwrap());
        let server = MetricsServer::start_limited(
            Some("127.0.0.1"),
            0,
            Arc::clone(&metrics),
            Arc::new(|| serde_json::json!({"connected": true})),
            nodes,
            limits(),
        )
        .unwrap();
        Door { server, metrics }
    }

    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    fn refused(&self, reason: &str) -> u64 {
        self.metrics
            .connections_refused
            .with_label_values(&["monitor", reason])
            .get()
    }

    /// A scrape answers 200 within a second.
    fn assert_scrapes(&self) {
        let started = Instant::now();
        let (status, body) = exchange(self.addr(), b"GET /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("choria_provisioner_connections_refused"));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "scrape took {:?}",
            started.elapsed()
        );
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

/// Sends `request` and reads the answer to its end: status and text.
fn exchange(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = connect(addr);
    stream.write_all(request).unwrap();
    read_answer(&mut stream)
}

fn read_answer(stream: &mut TcpStream) -> (u16, String) {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// True once the server has closed `stream` (a read sees its end or a reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_huge_or_chunked_body_gets_413_before_anything_is_read_or_allocated() {
    let door = Door::open(Arc::new(LateNodes::default()));
    let (status, _) = exchange(
        door.addr(),
        b"GET /healthz HTTP/1.1\r\nContent-Length: 1152921504606846976\r\n\r\n",
    );
    assert_eq!(status, 413);
    let (status, _) = exchange(
        door.addr(),
        b"GET /healthz HTTP/1.1\r\nContent-Length: 4096\r\n\r\n",
    );
    assert_eq!(status, 413, "over the 1 KiB cap, announced only");
    let (status, _) = exchange(
        door.addr(),
        b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert_eq!(status, 413, "chunked");
    let (status, _) = exchange(
        door.addr(),
        b"GET /healthz HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
    );
    assert_eq!(status, 400, "a length that is no number");
    let (status, _) = exchange(
        door.addr(),
        b"GET /healthz HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(status, 200, "a small body is read and ignored");
    assert_eq!(door.refused("body_too_large"), 3);
    assert_eq!(door.refused("bad_request"), 1);
    door.assert_scrapes();
}

#[test]
fn a_head_over_8_kib_gets_431_however_long_the_client_goes_on() {
    let door = Door::open(Arc::new(LateNodes::default()));
    let mut stream = connect(door.addr());
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ")
        .unwrap();
    // An endless header line: the server answers after 8 KiB and closes, so the
    // writes soon fail; 4 MiB at most are tried.
    let chunk = [b'a'; 16 * 1024];
    for _ in 0..256 {
        if stream.write_all(&chunk).is_err() {
            break;
        }
    }
    let (status, _) = read_answer(&mut stream);
    assert!(
        status == 431 || status == 0,
        "431, or a reset when the unread rest reached the server: {status}"
    );
    // Many short headers add up the same way.
    let mut head = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..1000 {
        head.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let (status, _) = exchange(door.addr(), &head);
    assert_eq!(status, 431);
    assert_eq!(door.refused("head_too_large"), 2);
    door.assert_scrapes();
}

#[test]
fn a_body_that_never_comes_and_a_dripping_head_are_dropped_at_the_deadline() {
    let door = Door::open(Arc::new(LateNodes::default()));
    let mut waiting = connect(door.addr());
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nContent-Length: 1000\r\n\r\n")
        .unwrap();
    let mut dripping = connect(door.addr());
    let dripper = {
        let mut stream = dripping.try_clone().unwrap();
        std::thread::spawn(move || {
            // One byte every 100 ms: each read is quick, the head never ends.
            for _ in 0..40 {
                if stream.write_all(b"X").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    door.assert_scrapes();
    let started = Instant::now();
    assert!(closed_within(&mut waiting, Duration::from_secs(3)));
    assert!(closed_within(&mut dripping, Duration::from_secs(3)));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "dropped after {:?}",
        started.elapsed()
    );
    dripper.join().unwrap();
    assert_eq!(door.refused("head_timeout"), 2);
    door.assert_scrapes();
}

#[test]
fn idle_connections_beyond_the_cap_lose_their_place_and_a_scrape_always_gets_in() {
    let door = Door::open(Arc::new(LateNodes::default()));
    let idle: Vec<TcpStream> = (0..50).map(|_| connect(door.addr())).collect();
    door.assert_scrapes();
    // Connections open (served or being closed) never pass twice the cap.
    assert!(
        door.server.connections() <= 16,
        "{}",
        door.server.connections()
    );
    // 50 idle and one scrape through a cap of 8: at least 43 made room for others
    // (or, in a burst faster than they could be closed, were closed at once).
    std::thread::sleep(Duration::from_millis(200));
    let made_room = door.refused("evicted") + door.refused("overloaded");
    assert!(made_room >= 43, "{made_room}");
    // A keep-alive client that scrapes again on its connection is served too.
    let mut kept = connect(door.addr());
    for _ in 0..3 {
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = kept.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    }
    drop(idle);
}

/// A `/nodes` document of about 32 MiB: more than the kernel buffers between a
/// client that never reads and the server.
struct HugeNodes;

impl NodeStatus for HugeNodes {
    fn nodes(&self, _: &NodesQuery) -> serde_json::Value {
        serde_json::json!({"queued": "x".repeat(32 << 20)})
    }
    fn node(&self, _: &str) -> NodeLookup {
        NodeLookup::Unknown
    }
}

#[test]
fn a_client_that_never_reads_its_answer_is_dropped_at_the_write_deadline() {
    let door = Door::open(Arc::new(HugeNodes));
    let mut stalled = connect(door.addr());
    stalled.write_all(b"GET /nodes HTTP/1.0\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    door.assert_scrapes();
    let deadline = Instant::now() + Duration::from_secs(3);
    while door.refused("write_timeout") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(door.refused("write_timeout"), 1);
    door.assert_scrapes();
}

#[test]
fn stopping_waits_on_no_client_and_closes_the_port() {
    let door = Door::open(Arc::new(LateNodes::default()));
    let addr = door.addr();
    let mut held = connect(addr);
    held.write_all(b"GET /healthz HTTP/1.1\r\nContent-Length: 9")
        .unwrap();
    let mut idle = connect(addr);
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    door.server.stop();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "stop took {:?}",
        started.elapsed()
    );
    assert!(closed_within(&mut held, Duration::from_secs(1)));
    assert!(closed_within(&mut idle, Duration::from_secs(1)));
    let deadline = Instant::now() + Duration::from_secs(3);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the port is still open");
        std::thread::sleep(Duration::from_millis(50));
    }
}
