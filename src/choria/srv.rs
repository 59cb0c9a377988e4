//! Brokers found by DNS SRV records, as go-choria's client finds them when
//! `plugin.choria.middleware_hosts` is empty and `plugin.choria.use_srv` is on (its
//! default): `_mcollective-server._tcp.<domain>`, then
//! `_x-puppet-mcollective._tcp.<domain>`; the first name with records gives the
//! brokers. The domain is `plugin.choria.srv_domain`, else the host's domain. Targets
//! are ordered as Go's `net.LookupSRV` orders them (RFC 2782: by priority, and by a
//! weighted random draw within a priority), and handed to the NATS client in that
//! order. The lookup is made for every connection attempt until one succeeds (go-choria
//! makes it once per connect); the client's own reconnects use the list it connected
//! with and the servers the broker cluster announces, as go-choria's do.
//!
//! A small synchronous stub resolver: it reads `/etc/resolv.conf` (`nameserver`,
//! `domain`, `search`, `options timeout:` and `attempts:`) and asks each name server
//! in turn over UDP, and over TCP when the answer is truncated. The DNS wire format is
//! `simple-dns`'s (no async runtime, one dependency). Every answer is hostile input:
//! it must answer our question with our id, and each target must be a host name
//! before it reaches a URL.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, RCODE, TYPE};

/// The record names go-choria looks up for its brokers, in its order.
pub(crate) const MIDDLEWARE_RECORDS: [&str; 2] =
    ["_mcollective-server._tcp", "_x-puppet-mcollective._tcp"];

/// The broker go-choria falls back to when nothing else names one.
pub(crate) const FALLBACK_BROKER: &str = "nats://puppet:4222";

/// The most targets kept from one answer.
const MAX_TARGETS: usize = 32;

/// The most datagrams read while waiting for the one that answers us.
const MAX_STRAY_DATAGRAMS: usize = 16;

/// One broker an SRV record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SrvTarget {
    /// Lower is tried first.
    pub priority: u16,
    /// Within a priority, the share of first places.
    pub weight: u16,
    /// The broker's port.
    pub port: u16,
    /// The broker's host name, without the final dot.
    pub target: String,
}

/// Why a lookup found nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrvError {
    /// No domain to look in: no `plugin.choria.srv_domain`, and none from the host.
    #[error("no domain to look in: set plugin.choria.srv_domain (the host has no domain)")]
    NoDomain,
    /// The name is not a valid DNS name.
    #[error("{} is not a valid DNS name", crate::untrusted::quoted(.0))]
    BadName(String),
    /// No name server is configured.
    #[error("no nameserver in /etc/resolv.conf")]
    NoServers,
    /// No name server answered; the last error.
    #[error("no name server answered: {0}")]
    Unanswered(String),
    /// A name server answered with an error code.
    #[error("the name server answered {0}")]
    Refused(String),
}

/// The name servers and their timing, as `/etc/resolv.conf` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    servers: Vec<SocketAddr>,
    timeout: Duration,
    attempts: usize,
    domain: Option<String>,
}

impl Resolver {
    /// The host's resolver, from `/etc/resolv.conf` (a missing file means a name
    /// server on 127.0.0.1, as in glibc).
    pub(crate) fn system() -> Resolver {
        Resolver::from_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
    }

    /// The resolver `text` (a `resolv.conf`) describes: at most 3 name servers (port
    /// 53), `timeout` (5 s, at most 30) and `attempts` (2, at most 5), and the domain
    /// from `domain` or the first `search` entry.
    pub(crate) fn from_resolv_conf(text: &str) -> Resolver {
        let mut servers = Vec::new();
        let mut timeout = Duration::from_secs(5);
        let mut attempts = 2;
        let mut domain = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    // A zone index (fe80::1%eth0) is not taken.
                    if let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) {
                        if servers.len() < 3 {
                            servers.push(SocketAddr::new(ip, 53));
                        }
                    }
                }
                Some("domain") => domain = words.next().map(str::to_string),
                Some("search") => domain = words.next().map(str::to_string),
                Some("options") => {
                    for option in words {
                        if let Some(n) =
                            option.strip_prefix("timeout:").and_then(|n| n.parse().ok())
                        {
                            timeout = Duration::from_secs(u64::clamp(n, 1, 30));
                        } else if let Some(n) = option
                            .strip_prefix("attempts:")
                            .and_then(|n| n.parse().ok())
                        {
                            attempts = usize::clamp(n, 1, 5);
                        }
                    }
                }
                _ => {}
            }
        }
        if servers.is_empty() {
            servers.push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53));
        }
        let domain = domain
            .map(|d| d.trim_end_matches('.').to_string())
            .filter(|d| !d.is_empty() && valid_host(d));
        Resolver {
            servers,
            timeout,
            attempts,
            domain,
        }
    }

    /// A resolver asking only `servers` (for tests: a DNS server on another port),
    /// once each, waiting `timeout`.
    pub fn with_servers(servers: Vec<SocketAddr>, timeout: Duration) -> Resolver {
        Resolver {
            servers,
            timeout,
            attempts: 1,
            domain: None,
        }
    }

    /// The domain `/etc/resolv.conf` names (`domain`, else the first `search`).
    pub(crate) fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The SRV records of `name`, in the order to try them. An empty list when the
    /// name does not exist or has none.
    pub(crate) fn lookup_srv(&self, name: &str) -> Result<Vec<SrvTarget>, SrvError> {
        let bad = || SrvError::BadName(name.to_string());
        if !valid_host(name.trim_end_matches('.')) {
            return Err(bad());
        }
        let qname = Name::new(name).map_err(|_| bad())?;
        if self.servers.is_empty() {
            return Err(SrvError::NoServers);
        }
        let mut last = SrvError::NoServers;
        for _ in 0..self.attempts {
            for server in &self.servers {
                match self.ask(*server, &qname) {
                    Ok(targets) => return Ok(order(targets, &mut random_u32)),
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }

    /// One question to one server: over UDP, again over TCP if truncated.
    fn ask(&self, server: SocketAddr, qname: &Name) -> Result<Vec<SrvTarget>, SrvError> {
        let id = (random_u32() & 0xffff) as u16;
        let mut query = Packet::new_query(id);
        query.set_flags(PacketFlag::RECURSION_DESIRED);
        query.questions.push(Question::new(
            qname.clone(),
            QTYPE::TYPE(TYPE::SRV),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        let bytes = query
            .build_bytes_vec()
            .map_err(|e| SrvError::BadName(format!("{qname}: {e}")))?;
        let unanswered = |e: std::io::Error| SrvError::Unanswered(format!("{server}: {e}"));
        let answer = udp_exchange(server, &bytes, id, self.timeout).map_err(unanswered)?;
        let targets = match answer_targets(&answer, id, qname)? {
            Answer::Targets(targets) => targets,
            Answer::Truncated => {
                let answer = tcp_exchange(server, &bytes, self.timeout).map_err(unanswered)?;
                match answer_targets(&answer, id, qname)? {
                    Answer::Targets(targets) => targets,
                    Answer::Truncated => {
                        return Err(SrvError::Unanswered(format!(
                            "{server}: truncated over TCP"
                        )))
                    }
                }
            }
        };
        Ok(targets)
    }
}

/// A random number from the system's generator.
fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    crate::crypto::ids::random_bytes(&mut bytes);
    u32::from_le_bytes(bytes)
}

/// Sends `query` and waits for the datagram that answers `id`, from `server` only.
fn udp_exchange(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    timeout: Duration,
) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.send(query)?;
    let deadline = Instant::now() + timeout;
    let mut buffer = vec![0u8; 65_535];
    for _ in 0..MAX_STRAY_DATAGRAMS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        socket.set_read_timeout(Some(left))?;
        let n = socket.recv(&mut buffer)?;
        if n >= 2 && u16::from_be_bytes([buffer[0], buffer[1]]) == id {
            buffer.truncate(n);
            return Ok(buffer);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer to our query",
    ))
}

/// Sends `query` over TCP (two length bytes first) and reads the answer.
fn tcp_exchange(server: SocketAddr, query: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&server, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let length = u16::try_from(query.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    stream.write_all(&length.to_be_bytes())?;
    stream.write_all(query)?;
    let mut length = [0u8; 2];
    stream.read_exact(&mut length)?;
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut answer)?;
    Ok(answer)
}

/// What an answer says.
enum Answer {
    Targets(Vec<SrvTarget>),
    Truncated,
}

/// The usable targets of an answer to our question `id` about `qname`. A name that
/// does not exist has none; other error codes, an answer to another question and
/// undecodable bytes are errors.
fn answer_targets(bytes: &[u8], id: u16, qname: &Name) -> Result<Answer, SrvError> {
    let bad = |why: &str| SrvError::Unanswered(why.to_string());
    let packet = Packet::parse(bytes).map_err(|_| bad("an answer that does not decode"))?;
    if packet.id() != id || !packet.has_flags(PacketFlag::RESPONSE) {
        return Err(bad("an answer to another query"));
    }
    if packet.has_flags(PacketFlag::TRUNCATION) {
        return Ok(Answer::Truncated);
    }
    match packet.rcode() {
        RCODE::NoError => {}
        RCODE::NameError => return Ok(Answer::Targets(Vec::new())),
        code => return Err(SrvError::Refused(format!("{code:?}"))),
    }
    let asked = qname.to_string().to_ascii_lowercase();
    let same = |name: &Name| name.to_string().to_ascii_lowercase() == asked;
    if !packet.questions.first().is_some_and(|q| same(&q.qname)) {
        return Err(bad("an answer to another question"));
    }
    let targets = packet
        .answers
        .iter()
        .filter(|record| same(&record.name))
        .filter_map(|record| match &record.rdata {
            RData::SRV(srv) => {
                let target = srv.target.to_string();
                let target = target.trim_end_matches('.');
                // "." means "no such service here"; port 0 names nothing.
                (srv.port != 0 && valid_host(target)).then(|| SrvTarget {
                    priority: srv.priority,
                    weight: srv.weight,
                    port: srv.port,
                    target: target.to_ascii_lowercase(),
                })
            }
            _ => None,
        })
        .take(MAX_TARGETS)
        .collect();
    Ok(Answer::Targets(targets))
}

/// A host name a URL may carry: 1 to 253 characters, labels of 1 to 63 letters,
/// digits, `-` and `_`, not starting or ending with `-`.
pub(crate) fn valid_host(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// RFC 2782's order: by priority; within one, repeatedly draw a target with a
/// chance proportional to its weight (a weight of 0 has a small chance, put first
/// as the RFC says), as Go's `net.LookupSRV` orders them. `random` gives the draws.
pub(crate) fn order(
    mut targets: Vec<SrvTarget>,
    random: &mut dyn FnMut() -> u32,
) -> Vec<SrvTarget> {
    targets.sort_by_key(|t| (t.priority, t.weight != 0));
    let mut ordered = Vec::with_capacity(targets.len());
    let mut start = 0;
    while start < targets.len() {
        let priority = targets[start].priority;
        let end = targets[start..]
            .iter()
            .position(|t| t.priority != priority)
            .map_or(targets.len(), |n| start + n);
        let mut group: Vec<SrvTarget> = targets[start..end].to_vec();
        while !group.is_empty() {
            let total: u32 = group.iter().map(|t| u32::from(t.weight)).sum();
            let pick = if total == 0 {
                0
            } else {
                let mut draw = random() % (total + 1);
                group
                    .iter()
                    .position(|t| {
                        let w = u32::from(t.weight);
                        if draw <= w {
                            true
                        } else {
                            draw -= w;
                            false
                        }
                    })
                    .unwrap_or(group.len() - 1)
            };
            ordered.push(group.remove(pick));
        }
        start = end;
    }
    ordered
}

/// What a search for brokers by SRV found, for the connection and for `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvSearch {
    /// Each name asked and what it gave (`Ok(n)`: n usable targets).
    pub lookups: Vec<(String, Result<usize, SrvError>)>,
    /// The brokers, as `nats://host:port` in the order to try them; empty when no
    /// name gave any.
    pub urls: Vec<String>,
}

/// Looks up [`MIDDLEWARE_RECORDS`] in `domain` and keeps the first that has targets.
pub(crate) fn find_brokers(resolver: &Resolver, domain: Option<&str>) -> SrvSearch {
    let mut search = SrvSearch {
        lookups: Vec::new(),
        urls: Vec::new(),
    };
    let Some(domain) = domain
        .map(|d| d.trim_end_matches('.'))
        .filter(|d| !d.is_empty())
    else {
        search
            .lookups
            .push((MIDDLEWARE_RECORDS.join(", "), Err(SrvError::NoDomain)));
        return search;
    };
    for record in MIDDLEWARE_RECORDS {
        let name = format!("{record}.{domain}");
        match resolver.lookup_srv(&name) {
            Ok(targets) if !targets.is_empty() => {
                search.lookups.push((name, Ok(targets.len())));
                search.urls = targets
                    .iter()
                    .map(|t| format!("nats://{}:{}", t.target, t.port))
                    .collect();
                return search;
            }
            result => search.lookups.push((name, result.map(|t| t.len()))),
        }
    }
    search
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(priority: u16, weight: u16, name: &str) -> SrvTarget {
        SrvTarget {
            priority,
            weight,
            port: 4222,
            target: name.into(),
        }
    }

    #[test]
    fn resolv_conf_gives_servers_timing_and_the_domain() {
        let r = Resolver::from_resolv_conf(
            "# comment\nnameserver 10.0.0.1\nnameserver ::1\nnameserver fe80::1%eth0\n\
             nameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example.net other.net\n\
             options timeout:99 attempts:0 rotate\n",
        );
        assert_eq!(
            r.servers,
            [
                "10.0.0.1:53".parse().unwrap(),
                "[::1]:53".parse().unwrap(),
                "10.0.0.2:53".parse().unwrap()
            ]
        );
        assert_eq!((r.timeout, r.attempts), (Duration::from_secs(30), 1));
        assert_eq!(r.domain(), Some("corp.example.net"));
        let empty = Resolver::from_resolv_conf("domain bad..name\n");
        assert_eq!(empty.servers, ["127.0.0.1:53".parse().unwrap()]);
        assert_eq!(
            (empty.timeout, empty.attempts, empty.domain()),
            (Duration::from_secs(5), 2, None)
        );
    }

    #[test]
    fn targets_are_ordered_by_priority_then_drawn_by_weight() {
        let targets = vec![
            target(20, 0, "late"),
            target(10, 0, "light"),
            target(10, 60, "heavy"),
            target(10, 40, "middle"),
        ];
        // Draws of 0 pick the first in each round: the zero weight first, then in
        // order of the sorted list.
        let mut zero = || 0;
        let names: Vec<String> = order(targets.clone(), &mut zero)
            .into_iter()
            .map(|t| t.target)
            .collect();
        assert_eq!(names, ["light", "heavy", "middle", "late"]);
        // Over many draws the heavier target comes first more often, and the
        // priority-20 one always last.
        let mut state = 12345u32;
        let mut lcg = move || {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            state >> 8
        };
        let (mut heavy, mut middle) = (0, 0);
        for _ in 0..2000 {
            let o = order(targets.clone(), &mut lcg);
            assert_eq!(o[3].target, "late");
            match o[0].target.as_str() {
                "heavy" => heavy += 1,
                "middle" => middle += 1,
                _ => {}
            }
        }
        assert!(heavy > middle && middle > 400, "{heavy} {middle}");
    }

    #[test]
    fn host_names_are_checked_before_they_reach_a_url() {
        for good in [
            "broker",
            "nats1.example.net",
            "a-b.c_d.net",
            &"a".repeat(63),
        ] {
            assert!(valid_host(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "a..b",
            "-a.net",
            "a-.net",
            "user@host",
            "host:1",
            "host/x",
            "h\u{e9}",
            &"a".repeat(64),
            &["a"; 128].join("."),
        ] {
            assert!(!valid_host(bad), "{bad}");
        }
    }

    /// An answer packet to `query` with `records` (name, rdata) and `rcode`.
    fn answer(id: u16, qname: &str, rcode: RCODE, srv: &[(&str, u16, &str)]) -> Vec<u8> {
        let mut p = Packet::new_reply(id);
        *p.rcode_mut() = rcode;
        let name = Name::new_unchecked(qname);
        p.questions.push(Question::new(
            name.clone(),
            QTYPE::TYPE(TYPE::SRV),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        for (owner, port, target) in srv {
            p.answers.push(simple_dns::ResourceRecord::new(
                Name::new_unchecked(owner),
                CLASS::IN,
                60,
                RData::SRV(simple_dns::rdata::SRV {
                    priority: 1,
                    weight: 1,
                    port: *port,
                    target: Name::new_unchecked(target),
                }),
            ));
        }
        p.build_bytes_vec().unwrap()
    }

    #[test]
    fn only_usable_answers_to_our_question_count() {
        let q = "_mcollective-server._tcp.example.net";
        let name = Name::new(q).unwrap();
        let targets = |bytes: &[u8]| match answer_targets(bytes, 7, &name) {
            Ok(Answer::Targets(t)) => Ok(t.into_iter().map(|t| t.target).collect::<Vec<_>>()),
            Ok(Answer::Truncated) => Err("truncated".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let good = answer(
            7,
            q,
            RCODE::NoError,
            &[
                (q, 4222, "Nats1.Example.Net."),
                (q, 0, "no-port.example.net"),
                (q, 4222, "."),
                (q, 4222, "bad_name-.x"),
                ("other.example.net", 4222, "stranger.example.net"),
            ],
        );
        assert_eq!(targets(&good), Ok(vec!["nats1.example.net".to_string()]));
        assert_eq!(targets(&answer(7, q, RCODE::NameError, &[])), Ok(vec![]));
        assert!(targets(&answer(8, q, RCODE::NoError, &[]))
            .unwrap_err()
            .contains("another query"));
        assert!(targets(&answer(7, "x.example.net", RCODE::NoError, &[]))
            .unwrap_err()
            .contains("another question"));
        assert!(targets(&answer(7, q, RCODE::ServerFailure, &[]))
            .unwrap_err()
            .contains("ServerFailure"));
        // Hostile bytes: never a panic, always an error.
        let mut seed = 99u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (seed >> 16) as u8
                })
                .collect();
            let _ = answer_targets(&bytes, 7, &name);
        }
        let mut cut = good.clone();
        cut.truncate(good.len() - 3);
        assert!(targets(&cut).is_err());
    }

    #[test]
    fn no_domain_is_said_and_not_looked_up() {
        let r = Resolver::with_servers(vec![], Duration::from_millis(10));
        let s = find_brokers(&r, None);
        assert!(s.urls.is_empty());
        assert_eq!(s.lookups[0].1, Err(SrvError::NoDomain));
        assert_eq!(
            r.lookup_srv("_x._tcp.example.net"),
            Err(SrvError::NoServers)
        );
        assert!(matches!(
            r.lookup_srv("bad..name"),
            Err(SrvError::BadName(_))
        ));
    }
}
