//! A small authoritative DNS server for the tests, on 127.0.0.1 over UDP and TCP: SRV
//! and A records from a fixed zone, an empty answer for AAAA of a known name, and
//! NXDOMAIN for anything else. It counts the questions it answered.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use simple_dns::rdata::{RData, A, SRV};
use simple_dns::{Name, Packet, PacketFlag, ResourceRecord, CLASS, QTYPE, RCODE, TYPE};

/// One SRV record: priority, weight, port, target.
pub type Srv = (u16, u16, u16, String);

/// The zone served.
#[derive(Default, Clone)]
pub struct Zone {
    /// SRV records by owner name (lower case, no final dot).
    pub srv: HashMap<String, Vec<Srv>>,
    /// A records by name.
    pub a: HashMap<String, Ipv4Addr>,
}

/// The running server; stopped when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
}

impl DnsServer {
    /// Serves `zone` on 127.0.0.1:`port` (0: any free port), UDP and TCP alike.
    pub fn start(zone: Zone, port: u16) -> DnsServer {
        let udp = UdpSocket::bind(("127.0.0.1", port)).expect("bind DNS over UDP");
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).expect("bind DNS over TCP");
        udp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        tcp.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let zone = Arc::new(zone);
        {
            let (zone, stop, answered) =
                (Arc::clone(&zone), Arc::clone(&stop), Arc::clone(&answered));
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = udp.recv_from(&mut buffer) {
                        if let Some(reply) = answer(&zone, &buffer[..n]) {
                            answered.fetch_add(1, Ordering::Relaxed);
                            let _ = udp.send_to(&reply, from);
                        }
                    }
                }
            });
        }
        {
            let (stop, answered) = (Arc::clone(&stop), Arc::clone(&answered));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut stream, _)) = tcp.accept() else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut length = [0u8; 2];
                    if stream.read_exact(&mut length).is_err() {
                        continue;
                    }
                    let mut query = vec![0u8; usize::from(u16::from_be_bytes(length))];
                    if stream.read_exact(&mut query).is_err() {
                        continue;
                    }
                    if let Some(reply) = answer(&zone, &query) {
                        answered.fetch_add(1, Ordering::Relaxed);
                        let _ = stream.write_all(&(reply.len() as u16).to_be_bytes());
                        let _ = stream.write_all(&reply);
                    }
                }
            });
        }
        DnsServer {
            addr,
            stop,
            answered,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many questions it answered.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The reply to one query, or `None` for bytes that are not one.
fn answer(zone: &Zone, query: &[u8]) -> Option<Vec<u8>> {
    let query = Packet::parse(query).ok()?;
    let question = query.questions.first()?;
    let name = question
        .qname
        .to_string()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut reply = Packet::new_reply(query.id());
    reply.set_flags(PacketFlag::AUTHORITATIVE_ANSWER | PacketFlag::RECURSION_AVAILABLE);
    if query.has_flags(PacketFlag::RECURSION_DESIRED) {
        reply.set_flags(PacketFlag::RECURSION_DESIRED);
    }
    reply.questions.push(question.clone());
    let known = zone.srv.contains_key(&name) || zone.a.contains_key(&name);
    if !known {
        *reply.rcode_mut() = RCODE::NameError;
        return reply.build_bytes_vec().ok();
    }
    let owner = question.qname.clone();
    match question.qtype {
        QTYPE::TYPE(TYPE::SRV) => {
            for (priority, weight, port, target) in zone.srv.get(&name).into_iter().flatten() {
                reply.answers.push(ResourceRecord::new(
                    owner.clone(),
                    CLASS::IN,
                    30,
                    RData::SRV(SRV {
                        priority: *priority,
                        weight: *weight,
                        port: *port,
                        target: Name::new_unchecked(target),
                    }),
                ));
            }
        }
        QTYPE::TYPE(TYPE::A) => {
            if let Some(ip) = zone.a.get(&name) {
                reply.answers.push(ResourceRecord::new(
                    owner,
                    CLASS::IN,
                    30,
                    RData::A(A {
                        address: u32::from(*ip),
                    }),
                ));
            }
        }
        _ => {}
    }
    reply.build_bytes_vec().ok()
}
