//! A request answered in the node's name by someone else, and how that showed.

use std::fmt;

use crate::choria::identity::Identity;

/// How a request's replies showed that someone else answers in the node's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contest {
    /// A valid reply in the node's name differs from the accepted one.
    Different,
    /// More replies came than a request keeps, and `dropped` of them were dropped
    /// unread: any of them may have been the node's own reply, different from the one
    /// accepted, so no reply to this request can be trusted.
    Flooded {
        /// Replies dropped unread.
        dropped: u64,
    },
}

/// A request answered in the node's name by someone else: two different replies, or
/// more replies than a node sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contested {
    /// The node whose name was used.
    pub identity: Identity,
    /// `agent#action`.
    pub rpc: String,
    /// What showed it.
    pub why: Contest,
}

impl fmt::Display for Contested {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.why {
            Contest::Different => write!(
                f,
                "{} was answered twice with different replies in the name of {}: another node is answering for it",
                self.rpc, self.identity
            ),
            Contest::Flooded { dropped } => write!(
                f,
                "{} was answered in the name of {} more often than a node answers ({dropped} replies dropped unread, any of which may have been its own): another node is answering for it",
                self.rpc, self.identity
            ),
        }
    }
}

impl std::error::Error for Contested {}
