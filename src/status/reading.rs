//! What one poll says about one resource ([`Reading`]): the input of the backlog verdicts
//! ([`super::backlog`]) and of the `RouterReady` condition ([`super::router`]).

use crate::collector::ObservedInbox;
use crate::crd::DepthStatus;
use crate::monitor::Evaluation;

/// What one poll says about one resource.
#[derive(Debug, Clone, Copy)]
pub enum Reading<'a> {
    /// The depths were read and evaluated.
    Observed {
        /// Depths.
        depth: &'a DepthStatus,
        /// Evaluation of the dead-letter depth.
        eval: &'a Evaluation,
        /// The router inbox with its consumers (router mode).
        inbox: Option<&'a ObservedInbox>,
        /// The broker address the depths were read through
        /// ([`BrokerTopology::address_in_use`](crate::broker::BrokerTopology::address_in_use)).
        via: &'a str,
    },
    /// The depths could not be read: the condition's reason (`BrokerUnreachable`,
    /// `BrokerAuthFailed`, …) and the error.
    Unknown {
        /// CamelCase reason.
        reason: &'static str,
        /// The error, as text.
        message: &'a str,
    },
}
