//! The broker-neutral values that cross the broker seam, below everything that uses them:
//! a message as broker-neutral code sees it ([`message`]), the names of the header
//! contract's `dlq-` headers ([`headers`]), what is known of a queue
//! ([`QueueCounts`], [`QueueLimits`]) and the one broker error ([`BrokerError`]). The seam's
//! traits ([`crate::broker`], [`crate::dlq::DeadLetterOps`]), the neutral dead-letter logic
//! ([`crate::dlq`]) and every adapter name these; none of them is named here.

mod error;
pub mod headers;
pub mod message;
mod queue;

pub use error::BrokerError;
pub use queue::{QueueCounts, QueueLimits};
