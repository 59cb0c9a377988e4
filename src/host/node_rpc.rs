//! The seam under the sequence: "call this agent action on this node". The sequence
//! depends on this trait only; `choria::rpc::RpcClient` implements it on the wire, and
//! the sequence's unit tests implement it with a scripted fake node, so every rule of
//! the sequence is tested without a broker.

use std::time::{Duration, Instant};

use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::RequestData;
use crate::choria::rpc::{Answer, Asked, Contested, Flush, Reply, RpcClient, RpcError, Watch};

/// An accepted reply's request, still listening for a second reply in the node's name.
pub trait ReplyWatch {
    /// When the request was sent: its grace for a twin is counted from then.
    fn asked_at(&self) -> Instant;
    /// `Err` when a different valid reply in the node's name arrived by `until`.
    fn settle(&self, until: Instant) -> Result<(), Contested>;
}

/// A reply and the watch over its request.
pub struct Called<'a> {
    /// The reply.
    pub reply: Reply,
    /// Listens on until dropped.
    pub watch: Box<dyn ReplyWatch + 'a>,
}

/// A try sent to a node whose reply is awaited later ([`NodeRpc::ask`]).
pub trait AskedRpc<'a> {
    /// Waits for the try's first valid reply, at most its timeout from when it was
    /// sent.
    fn answer(self: Box<Self>) -> Result<Called<'a>, RpcError>;
}

/// One try of one action on one node.
pub trait NodeRpc: Send + Sync {
    /// Calls `agent#action` with `data` on `identity`, waiting at most `timeout`.
    fn call(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
    ) -> Result<Called<'_>, RpcError>;

    /// Sends `agent#action` with `data` to `identity` without waiting: the reply is
    /// kept for [`AskedRpc::answer`], so that requests that do not depend on each
    /// other travel together. `flush` says whether the request leaves at once or
    /// with the next one.
    fn ask(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
        flush: Flush,
    ) -> Result<Box<dyn AskedRpc<'_> + '_>, RpcError>;
}

impl<'a> From<Answer<'a>> for Called<'a> {
    fn from(answer: Answer<'a>) -> Called<'a> {
        Called {
            reply: answer.reply,
            watch: Box::new(answer.watch),
        }
    }
}

impl<'a> AskedRpc<'a> for Asked<'a> {
    fn answer(self: Box<Self>) -> Result<Called<'a>, RpcError> {
        Asked::answer(*self).map(Called::from)
    }
}

impl ReplyWatch for Watch<'_> {
    fn asked_at(&self) -> Instant {
        Watch::asked_at(self)
    }

    fn settle(&self, until: Instant) -> Result<(), Contested> {
        Watch::settle(self, until)
    }
}

impl NodeRpc for RpcClient {
    fn call(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
    ) -> Result<Called<'_>, RpcError> {
        RpcClient::call(self, identity, agent, action, data, timeout).map(Called::from)
    }

    fn ask(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
        flush: Flush,
    ) -> Result<Box<dyn AskedRpc<'_> + '_>, RpcError> {
        let asked = RpcClient::ask(self, identity, agent, action, data, timeout, flush)?;
        Ok(Box::new(asked))
    }
}
