//! What the broker-neutral code knows of one queue: its current counts ([`QueueCounts`])
//! and the limits that decide how it may be read without losing a message
//! ([`QueueLimits`]).

/// Ready messages and consumers of one queue, as a passive declare reports them (current,
/// unlike statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Messages ready for delivery.
    pub ready: u64,
    /// Consumers attached.
    pub consumers: u64,
}

/// What reading a queue without losing a message must know of it
/// (read by each adapter: `rabbitmq::RabbitMq::queue_limits`; used by
/// [`crate::dlq::release_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// A quorum queue (returns count as deliveries).
    pub quorum: bool,
    /// The smallest delivery limit that may apply.
    pub delivery_limit: Option<u64>,
    /// [`QueueLimits::delivery_limit`] is RabbitMQ 4.0–4.2's default (no limit is set).
    pub default_delivery_limit: bool,
    /// The smallest `max-length` that may apply.
    pub max_length: Option<u64>,
    /// The smallest `max-length-bytes` that may apply.
    pub max_length_bytes: Option<u64>,
    /// `overflow: drop-head` may apply (a copy published to a full queue drops its head).
    pub drops_head: bool,
}

impl QueueLimits {
    /// Why reading this queue is slower, for the user (`None` when it is not): a quorum
    /// queue with a delivery limit is read one message at a time by `dlq replay`, and
    /// `dlq inspect` rotates the messages near the limit, so that reading never
    /// dead-letters or drops one.
    pub fn slow_reading(&self, queue: &str) -> Option<String> {
        let limit = self.delivery_limit.filter(|_| self.quorum)?;
        let source = if self.default_delivery_limit {
            "RabbitMQ 4.0-4.2's default for a quorum queue that sets none; `dlq-operator apply` removes it from the dead-letter queues it manages (delivery-limit -1 in their policy)"
        } else {
            "set by a policy or a queue argument (a policy of higher priority than the operator's, or a queue declared with x-delivery-limit)"
        };
        Some(format!(
            "dead-letter queue {queue:?} has a delivery limit of {limit} ({source}): read the safe way (dlq replay one message at a time, dlq inspect rotating the messages near the limit) so that reading never dead-letters one, which is slower"
        ))
    }

    /// `Some(why)` when a scan of this queue, holding `count` messages, could push a
    /// message past its delivery limit: a quorum queue with a delivery limit whose
    /// rotation (a copy published before the original is acked) a length limit could
    /// refuse or answer by dropping the head — it is full, drops its head, or limits bytes
    /// (which the scan cannot check). `None`: safe to read.
    pub fn unsafe_to_read(&self, count: u64) -> Option<String> {
        if !self.quorum || self.delivery_limit.is_none() {
            return None;
        }
        let limited = self.max_length.is_some() || self.max_length_bytes.is_some();
        if limited && self.drops_head {
            return Some("its length limit drops the head when full".into());
        }
        if self.max_length_bytes.is_some() {
            return Some("it has a max-length-bytes limit".into());
        }
        match self.max_length {
            Some(max) if count >= max => Some(format!("it is full ({count} of max-length {max})")),
            _ => None,
        }
    }
}
