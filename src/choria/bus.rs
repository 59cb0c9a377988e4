//! The only door to the NATS connection: every publish, request and subscription of
//! the daemon goes through a [`Bus`], which takes validated [`Subject`]s,
//! [`SubjectFilter`]s and `Headers` only. Code that holds a `Bus` cannot write a
//! string it did not check into the connection's control lines.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::io;
use std::time::Duration;

use super::subject::{Headers, QueueGroup, Subject, SubjectFilter};

/// A message handed to a subscriber.
#[derive(Debug)]
pub struct Delivered {
    /// The subject it was published on.
    pub subject: String,
    /// Its payload.
    pub data: Vec<u8>,
    /// True for nats-server's "no responders" status (nobody subscribes to the subject
    /// a request was published to).
    pub no_responders: bool,
    /// Its header block was larger than the NATS client parses (8 KiB) and was read
    /// past: nothing of Choria's carries one, so the message is a publisher's flood.
    pub oversized_headers: bool,
}

impl From<nats::Message> for Delivered {
    fn from(m: nats::Message) -> Delivered {
        let no_responders = m.is_no_responders();
        let oversized_headers = m
            .headers
            .as_ref()
            .is_some_and(|h| h.get(nats::header::OVERSIZED).is_some());
        Delivered {
            subject: m.subject,
            data: m.data,
            no_responders,
            oversized_headers,
        }
    }
}

/// A live subscription; dropping it unsubscribes.
pub struct Subscription {
    _inner: nats::Subscription,
}

/// The checked face of one NATS connection.
#[derive(Clone)]
pub struct Bus {
    nc: nats::Connection,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bus")
    }
}

impl Bus {
    /// Wraps `nc` (the connector, the simulator and tests make one).
    pub fn new(nc: nats::Connection) -> Bus {
        Bus { nc }
    }

    /// Publishes `data` on `subject`.
    pub fn publish(&self, subject: &Subject, data: &[u8]) -> io::Result<()> {
        self.nc.publish(subject.as_str(), data)
    }

    /// Publishes `data` on `subject` with a NATS reply subject (so that nats-server
    /// answers "no responders" at once when nobody listens) and optional headers.
    pub(crate) fn publish_request(
        &self,
        subject: &Subject,
        reply: &Subject,
        headers: Option<&Headers>,
        data: &[u8],
    ) -> io::Result<()> {
        self.nc.publish_with_reply_or_headers(
            subject.as_str(),
            Some(reply.as_str()),
            headers.map(|h| &h.0),
            data,
        )
    }

    /// A request with a fresh inbox, waiting at most `timeout` for the first reply.
    pub(crate) fn request(
        &self,
        subject: &Subject,
        headers: Option<&Headers>,
        data: &[u8],
        timeout: Duration,
    ) -> io::Result<Delivered> {
        self.nc
            .request_with_headers_or_timeout(
                subject.as_str(),
                headers.map(|h| &h.0),
                Some(timeout),
                data,
            )
            .map(Delivered::from)
    }

    /// Subscribes to `filter` (in `queue` when given); `deliver` takes each message on
    /// the connection's reader thread. It must return at once and must not use this
    /// connection (`patches/nats/README.md`): hand the message on through a bounded
    /// channel or a counter.
    pub fn subscribe(
        &self,
        filter: &SubjectFilter,
        queue: Option<&QueueGroup>,
        deliver: impl Fn(Delivered) + Send + Sync + 'static,
    ) -> io::Result<Subscription> {
        let inner = self.nc.subscribe_with_delivery(
            filter.as_str(),
            queue.map(QueueGroup::as_str),
            move |m| deliver(Delivered::from(m)),
        )?;
        Ok(Subscription { _inner: inner })
    }

    /// Flushes what is buffered, waiting at most `timeout` for the server's PONG.
    pub fn flush(&self, timeout: Duration) -> io::Result<()> {
        self.nc.flush_timeout(timeout)
    }
}
