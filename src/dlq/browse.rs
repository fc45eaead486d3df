//! `dlq inspect`: reading a dead-letter queue without losing, dead-lettering or durably
//! reordering a message.
//!
//! Every message is read and held until the whole scan is done, so nothing is read twice;
//! then each is given back by the rule of [`release_for`](super::release_for): requeued,
//! in read order, so the queue keeps its order, or, on a quorum queue whose delivery limit
//! a return could reach, rotated — an exact copy (body, properties, headers;
//! `x-delivery-count` left out) published to the same queue with a publisher confirm, and
//! only then the original acknowledged. A crash before the ack leaves the original and the
//! copy: a duplicate, never a loss. The RabbitMQ engine is
//! `rabbitmq::dead_letters::browse`; this module holds the request type, the
//! checks every engine makes before reading, and the entry points.

use tokio_util::sync::CancellationToken;

use super::DeadLetterOps;
use super::Inspection;
use crate::topology::DesiredTopology;
use crate::wire::{BrokerError, QueueLimits};

/// How much an inspection reads and shows.
#[derive(Debug, Clone, Copy)]
pub struct InspectOptions {
    /// Read at most this many messages over all the resource's dead-letter queues.
    pub max_messages: u64,
    /// Messages kept whole in [`Inspection::sample`].
    pub sample_size: usize,
    /// Body bytes kept per sampled message (`usize::MAX`: the whole body).
    pub preview_bytes: usize,
}

/// Summarises the dead-letter queues of `topology` on any broker client (module doc: how
/// no message is lost; `now_ms`, ms since epoch, dates the ages), stopped by `cancel` (the `dlq inspect` command
/// cancels it on Ctrl-C, SIGTERM or SIGHUP): the message in hand is settled first (a
/// message near its delivery limit is rotated with a publisher confirm, not left to a
/// crash), every held message is given back, and the summary covers what was read, with
/// [`Inspection::interrupted`] set.
///
/// # Errors
/// As [`DeadLetterOps::inspect`].
pub async fn inspect_with(
    broker: &dyn DeadLetterOps,
    topology: &DesiredTopology,
    opts: InspectOptions,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<Inspection, BrokerError> {
    broker.inspect(topology, opts, now_ms, cancel).await
}

/// What a `dlq` command does to the messages it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads and gives every message back (`inspect`): works for a user that may not
    /// read the ownership records.
    Read,
    /// Moves or removes messages (`replay`, `purge`): never on a dead-letter queue or
    /// source queue another DeadLetterQueue owns.
    Write,
}

/// Refuses to read `queue` (holding `count` messages) when that could push a message past
/// its delivery limit ([`QueueLimits::unsafe_to_read`]).
///
/// # Errors
/// [`BrokerError::Amqp`] saying why and what to do; nothing has been read.
pub fn guard(queue: &str, limits: &QueueLimits, count: u64) -> Result<(), BrokerError> {
    match limits.unsafe_to_read(count) {
        None => Ok(()),
        Some(why) => Err(BrokerError::Amqp {
            reason: format!(
                "queue {queue:?} not read: a quorum queue with a delivery limit of {}, and {why}; \
                 reading it could push a message past the limit (a message near it is moved by \
                 publishing a copy first). Make room, or lift the length limit, then retry",
                limits.delivery_limit.unwrap_or_default()
            ),
        }),
    }
}

/// How many messages an inspection reads from a queue of `count` messages when it has
/// read `scanned` so far, of at most `max_messages` in all.
pub fn budget(max_messages: u64, scanned: u64, count: u64) -> u64 {
    max_messages.saturating_sub(scanned).min(count)
}
