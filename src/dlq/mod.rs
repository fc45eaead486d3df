//! Dead-letter operations — inspect, replay, purge — on the broker-neutral side of the
//! broker seam ([`crate::broker::seam`]).
//!
//! What lives here, pure and shared by every broker implementation: what a dead-lettered
//! message says about its failure ([`DeadLetter`], [`letter`]), the summary of a
//! dead-letter queue ([`Inspection`]), the rule that keeps reading from losing a message
//! ([`release_for`]), the request and report types of each operation and their
//! per-message decisions ([`browse`], [`replay`], [`purge`]), the `--filter` language
//! ([`filter`]), where a replayed copy would go, resolved over neutral binding data
//! ([`route`]), and the repair of one message ([`repair`]) with what it rewrites
//! ([`rewrite`]). The operations themselves run behind [`DeadLetterOps`] ([`ops`], named in
//! this module's types, so that every adapter uses this logic without a circle): the
//! RabbitMQ engines (AMQP 0-9-1, publisher confirms, consumers) are
//! `rabbitmq::dead_letters`, the in-memory one the unit tests' `crate::fake`. The `*_with`
//! forms take any [`DeadLetterOps`] and a
//! [`CancellationToken`](tokio_util::sync::CancellationToken); nothing here builds a
//! client: the drivers choose the broker (`rabbitmq::dlq` runs these on the RabbitMQ
//! broker of a Secret's connection settings).
//!
//! A message dead-lettered through the consumer helper carries the contract's `dlq-`
//! headers (docs/ARCHITECTURE.md, "Broker topology"); one the broker dead-lettered itself
//! (a reject, the delivery limit, a TTL) carries RabbitMQ's `x-death` instead (RabbitMQ
//! docs, "Dead Letter Exchanges": an array of tables, the most recent first, with
//! `reason`, `queue`, `time` in seconds, `count`, `exchange`, `routing-keys`).
//! [`DeadLetter`] reads both, the contract first.

pub mod browse;
pub mod filter;
pub mod inspection;
pub mod letter;
pub mod ops;
pub mod purge;
pub mod repair;
pub mod replay;
pub mod rewrite;
pub mod route;

pub use inspection::Inspection;
pub use letter::{
    canonical_class, dead_lettered_at, replay_headers, replay_properties, DeadLetter,
};
pub use ops::DeadLetterOps;

use crate::wire::headers::{FIRST_FAILED_AT, LAST_DELAY_MS, LAST_FAILED_AT, REASON, RETRY_COUNT};

/// `dlq-replayed-at` (long, ms since epoch): when the message was last replayed.
pub const REPLAYED_AT: &str = "dlq-replayed-at";
/// `dlq-replay-id` (string): the replay run that sent it back (one id per run), for
/// consumers that deduplicate with `message_id`.
pub const REPLAY_ID: &str = "dlq-replay-id";
/// `dlq-replay-count` (long): how many times it has been replayed.
pub const REPLAY_COUNT: &str = "dlq-replay-count";
/// `dlq-repaired-at` (long, ms since epoch): when the message was last repaired — its
/// copy replayed with a new body or edited headers ([`repair`]).
pub const REPAIRED_AT: &str = "dlq-repaired-at";

/// Headers a replay removes: the retry state of the failure it recovers from (so the
/// consumer starts the message's retries over: retry count, retry window, last delay,
/// reason) and the broker's per-delivery `x-delivery-count`. Everything else stays — the
/// body, `message_id`, user headers, the origin (`dlq-original-*`), the last error and
/// `x-death` (broker-owned: never edited).
pub const RESET_ON_REPLAY: [&str; 6] = [
    RETRY_COUNT,
    FIRST_FAILED_AT,
    LAST_FAILED_AT,
    LAST_DELAY_MS,
    REASON,
    "x-delivery-count",
];

/// How inspection gives a message back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// `basic.nack` with requeue: the message keeps its place.
    Requeue,
    /// Publish an exact copy to the same queue (publisher confirm first), then ack the
    /// original: the copy goes to the tail with a fresh delivery count.
    Rotate,
}

/// Whether a message read by inspection may be requeued, or must be rotated.
///
/// Every return to a quorum queue — a `nack` with requeue, or a channel that closes with
/// the message unacknowledged — counts as a delivery attempt before RabbitMQ 4.3
/// (rabbitmq-server discussion #18226; seen on 3.10.8: four returns under a
/// `delivery-limit` of 3 drop the message), and a message returned more than
/// `delivery-limit` times is dead-lettered or dropped. So a quorum-queue message is
/// requeued only while `delivery_count + 2 <= limit` — this return plus one spare for a
/// crash of the inspecting process, whose held messages the broker returns too — and
/// rotated otherwise. `limit` is the queue's effective delivery limit (`None`: the queue
/// has none, so returns are harmless; RabbitMQ 4.0–4.2 apply 20 when none is set, which
/// the caller passes — [`BrokerTopology::queue_limits`](crate::broker::BrokerTopology::queue_limits)).
/// Classic queues have no delivery limit: always requeue.
pub fn release_for(quorum: bool, limit: Option<u64>, delivery_count: u64) -> Release {
    match (quorum, limit) {
        (false, _) | (true, None) => Release::Requeue,
        (true, Some(l)) if delivery_count.checked_add(2).is_some_and(|n| n <= l) => {
            Release::Requeue
        }
        (true, Some(_)) => Release::Rotate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspection_requeues_only_while_a_crash_could_not_reach_the_limit() {
        assert_eq!(release_for(false, None, 1_000), Release::Requeue);
        assert_eq!(release_for(true, None, 1_000), Release::Requeue);
        assert_eq!(release_for(true, Some(3), 0), Release::Requeue);
        assert_eq!(release_for(true, Some(3), 1), Release::Requeue);
        assert_eq!(release_for(true, Some(3), 2), Release::Rotate);
        assert_eq!(release_for(true, Some(1), 0), Release::Rotate);
        assert_eq!(release_for(true, Some(u64::MAX), u64::MAX), Release::Rotate);
    }
}
