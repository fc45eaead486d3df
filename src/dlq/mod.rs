//! Dead-letter operations (issue: inspect, replay, purge): what a dead-lettered message
//! says about its failure, a summary of a dead-letter queue, and the rule that keeps
//! inspection from losing a message.
//!
//! Pure: the network part (reading a queue over AMQP) is [`browse`].
//!
//! A message dead-lettered through the consumer helper carries the contract's `dlq-`
//! headers (docs/ARCHITECTURE.md, "Broker topology"); one the broker dead-lettered itself (a reject, the delivery
//! limit, a TTL) carries RabbitMQ's `x-death` instead (RabbitMQ docs, "Dead Letter
//! Exchanges": an array of tables, the most recent first, with `reason`, `queue`, `time`
//! in seconds, `count`, `exchange`, `routing-keys`). [`DeadLetter`] reads both, the
//! contract first.

pub mod browse;
pub mod filter;
pub mod purge;
pub mod replay;
pub mod route;
pub mod target;

use std::collections::BTreeMap;

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde::Serialize;
use serde_json::{json, Value};

use crate::printable::PREVIEW_BYTES;

use crate::client::headers::{
    as_u64, ERROR_CLASS, FIRST_FAILED_AT, LAST_DELAY_MS, LAST_ERROR, LAST_FAILED_AT,
    ORIGINAL_EXCHANGE, ORIGINAL_QUEUE, ORIGINAL_ROUTING_KEY, REASON, RETRY_COUNT,
};

/// `dlq-replayed-at` (long, ms since epoch): when the message was last replayed.
pub const REPLAYED_AT: &str = "dlq-replayed-at";
/// `dlq-replay-id` (string): the replay run that sent it back (one id per run), for
/// consumers that deduplicate with `message_id`.
pub const REPLAY_ID: &str = "dlq-replay-id";
/// `dlq-replay-count` (long): how many times it has been replayed.
pub const REPLAY_COUNT: &str = "dlq-replay-count";

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

/// The properties of the replayed copy of a message with `original` properties: the
/// retry state reset ([`RESET_ON_REPLAY`]), [`REPLAYED_AT`] = `now_ms`, [`REPLAY_ID`] =
/// `replay_id`, [`REPLAY_COUNT`] one more than before; every other property unchanged.
pub fn replay_properties(
    original: &BasicProperties,
    replay_id: &str,
    now_ms: u64,
) -> BasicProperties {
    use lapin::types::{LongString, ShortString};
    let mut map = original
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    let count = map.get(REPLAY_COUNT).and_then(as_u64).unwrap_or(0);
    for name in RESET_ON_REPLAY {
        map.remove(name);
    }
    let long = |n: u64| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
    map.insert(ShortString::from(REPLAYED_AT), long(now_ms));
    map.insert(
        ShortString::from(REPLAY_ID),
        AMQPValue::LongString(LongString::from(replay_id)),
    );
    map.insert(
        ShortString::from(REPLAY_COUNT),
        long(count.saturating_add(1)),
    );
    original.clone().with_headers(FieldTable::from(map))
}

/// What one dead-lettered message says about its failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// The queue it was read from.
    pub queue: String,
    /// `message_id` property.
    pub message_id: Option<String>,
    /// `dlq-error-class` ([`canonical_class`]), or `unclassified`.
    pub error_class: String,
    /// `dlq-reason`, else RabbitMQ 4's `x-last-death-reason`, else the latest `x-death`
    /// reason (`rejected`, `expired`, `maxlen`,
    /// `delivery_limit`), else `unknown`.
    pub reason: String,
    /// `dlq-retry-count` (0 when absent).
    pub retry_count: u64,
    /// `dlq-original-queue`, else `x-last-death-queue`, else the latest `x-death` queue,
    /// else `unknown`.
    pub original_queue: String,
    /// `dlq-original-exchange`, else `x-last-death-exchange`, else the latest `x-death`
    /// exchange.
    pub original_exchange: Option<String>,
    /// `dlq-original-routing-key`, else the latest `x-death` first routing key.
    pub original_routing_key: Option<String>,
    /// `dlq-replay-count` (0 when never replayed).
    pub replay_count: u64,
    /// When it was (last) dead-lettered, ms since epoch: see [`dead_lettered_at`].
    pub dead_lettered_at_ms: Option<u64>,
    /// `x-delivery-count` (returns to a quorum queue so far; 0 when absent).
    pub delivery_count: u64,
    /// `dlq-last-error`.
    pub last_error: Option<String>,
    /// Every header, as JSON (tables and arrays kept, byte strings as UTF-8, lossy).
    pub headers: BTreeMap<String, Value>,
    /// Body size in bytes.
    pub body_bytes: usize,
    /// The body as UTF-8 (lossy), cut to the preview length given to [`DeadLetter::read`].
    pub body_preview: String,
    /// `true` when the preview is shorter than the body.
    pub body_truncated: bool,
}

impl DeadLetter {
    /// Reads a delivered message (`props`, `body`) from `queue`; the body preview keeps at
    /// most `preview_bytes` bytes (on a UTF-8 character boundary).
    pub fn read(queue: &str, props: &BasicProperties, body: &[u8], preview_bytes: usize) -> Self {
        let headers = props
            .headers()
            .as_ref()
            .map(FieldTable::inner)
            .cloned()
            .unwrap_or_default();
        let text = |name: &str| headers.get(name).and_then(as_text);
        let death = headers
            .get("x-death")
            .and_then(|v| match v {
                AMQPValue::FieldArray(a) => a.as_slice().first().cloned(),
                _ => None,
            })
            .and_then(|v| match v {
                AMQPValue::FieldTable(t) => Some(t.inner().clone()),
                _ => None,
            })
            .unwrap_or_default();
        let death_text = |name: &str| death.get(name).and_then(as_text);
        // RabbitMQ 4.0 also sets x-last-death-reason, -queue and -exchange: the latest
        // dead-lettering without walking x-death (RabbitMQ 4.0 release notes).
        let last_death = |name: &str| text(&format!("x-last-death-{name}"));
        let (preview, truncated) = preview(body, preview_bytes);
        DeadLetter {
            queue: queue.to_string(),
            message_id: props.message_id().as_ref().map(|s| s.to_string()),
            error_class: text(ERROR_CLASS)
                .map(|c| canonical_class(&c))
                .unwrap_or_else(|| "unclassified".into()),
            reason: text(REASON)
                .or_else(|| last_death("reason"))
                .or_else(|| death_text("reason"))
                .unwrap_or_else(|| "unknown".into()),
            retry_count: headers.get(RETRY_COUNT).and_then(as_u64).unwrap_or(0),
            original_queue: text(ORIGINAL_QUEUE)
                .or_else(|| last_death("queue"))
                .or_else(|| death_text("queue"))
                .unwrap_or_else(|| "unknown".into()),
            original_exchange: text(ORIGINAL_EXCHANGE)
                .or_else(|| last_death("exchange"))
                .or_else(|| death_text("exchange")),
            original_routing_key: text(ORIGINAL_ROUTING_KEY).or_else(|| {
                match death.get("routing-keys") {
                    Some(AMQPValue::FieldArray(a)) => a.as_slice().first().and_then(as_text),
                    _ => None,
                }
            }),
            replay_count: headers.get(REPLAY_COUNT).and_then(as_u64).unwrap_or(0),
            dead_lettered_at_ms: dead_lettered_at(
                headers.get(LAST_FAILED_AT).and_then(as_u64),
                death.get("time").and_then(as_u64),
                headers.get(REPLAYED_AT).and_then(as_u64),
                *props.timestamp(),
            ),
            delivery_count: headers
                .get("x-delivery-count")
                .and_then(as_u64)
                .unwrap_or(0),
            last_error: text(LAST_ERROR),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), to_json(v)))
                .collect(),
            body_bytes: body.len(),
            body_preview: preview,
            body_truncated: truncated,
        }
    }
}

/// The latest time known of a message's dead-lettering, ms since epoch: the newest of
/// `dlq-last-failed-at` (ms), the latest `x-death` entry's `time` (s) and
/// `dlq-replayed-at` (ms) — a message in the dead-letter queue after a replay failed again
/// after it, while RabbitMQ keeps the *first* time of an `x-death` entry for a (queue,
/// reason) and only raises its `count` (RabbitMQ docs, "Dead Letter Exchanges") — else
/// the `timestamp` property (s). Taking the newest keeps `age>` filters (purge) from
/// treating a fresh dead letter as old. Seconds beyond `u64` milliseconds count as
/// unknown.
pub fn dead_lettered_at(
    last_failed_at_ms: Option<u64>,
    x_death_time_s: Option<u64>,
    replayed_at_ms: Option<u64>,
    timestamp_s: Option<u64>,
) -> Option<u64> {
    let ms = |s: u64| s.checked_mul(1000);
    [
        last_failed_at_ms,
        x_death_time_s.and_then(ms),
        replayed_at_ms,
    ]
    .into_iter()
    .flatten()
    .max()
    .or_else(|| timestamp_s.and_then(ms))
}

/// An error class in its canonical spelling (from [`crate::error_class`]).
pub use crate::error_class::canonical_class;

/// A header value as text, for string headers.
fn as_text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// An AMQP field value as JSON.
fn to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Float(f) => json!(f),
        AMQPValue::Double(f) => json!(f),
        AMQPValue::Timestamp(t) => json!(t),
        AMQPValue::DecimalValue(d) => json!(format!("{d:?}")),
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::LongString(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::ByteArray(b) => json!(String::from_utf8_lossy(b.as_slice())),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(to_json).collect()),
        AMQPValue::FieldTable(t) => Value::Object(
            t.inner()
                .iter()
                .map(|(k, v)| (k.to_string(), to_json(v)))
                .collect(),
        ),
        AMQPValue::Void => Value::Null,
    }
}

/// At most `max` bytes of `body` as UTF-8 (lossy), cut on a character boundary
/// ([`crate::printable::cut`]), and whether it was cut.
fn preview(body: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(body);
    let (kept, cut) = crate::printable::cut(&text, max);
    (kept.to_string(), cut)
}

/// How inspection gives a message back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// `basic.nack` with requeue: the message keeps its place.
    Requeue,
    /// Publish an exact copy to the same queue (publisher confirm first), then ack the
    /// original: the copy goes to the tail with a fresh delivery count.
    Rotate,
}

/// Completes once `stop` is set (checked every 50 ms): raced against work that may be
/// given up before any message is read (finding the DeadLetterQueue, connecting), so that
/// a signal ends a command at once instead of after a timeout.
pub async fn stopped(stop: &std::sync::atomic::AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
/// the caller passes — `RabbitMq::queue_limits`). Classic queues have no delivery
/// limit: always requeue.
pub fn release_for(quorum: bool, limit: Option<u64>, delivery_count: u64) -> Release {
    match (quorum, limit) {
        (false, _) | (true, None) => Release::Requeue,
        (true, Some(l)) if delivery_count.checked_add(2).is_some_and(|n| n <= l) => {
            Release::Requeue
        }
        (true, Some(_)) => Release::Rotate,
    }
}

/// A dead-letter queue's contents, summarised.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// The dead-letter queues read.
    pub queues: Vec<String>,
    /// Messages in them when the inspection started.
    pub total: u64,
    /// Messages read (at most the `--max-messages` limit).
    pub scanned: u64,
    /// Stopped before the end (Ctrl-C, SIGTERM, SIGHUP): the counts cover the messages
    /// read, all given back.
    pub interrupted: bool,
    /// Messages per error class.
    pub by_error_class: BTreeMap<String, u64>,
    /// Messages per reason.
    pub by_reason: BTreeMap<String, u64>,
    /// Messages per retry count.
    pub by_retry_count: BTreeMap<u64, u64>,
    /// Messages per original queue.
    pub by_original_queue: BTreeMap<String, u64>,
    /// Age of the oldest message, ms (from its dead-lettering time).
    pub oldest_age_ms: Option<u64>,
    /// Age of the newest message, ms.
    pub newest_age_ms: Option<u64>,
    /// Messages given back by [`Release::Rotate`] (moved to the tail, not lost).
    pub rotated: u64,
    /// The first messages read, up to the sample size.
    pub sample: Vec<DeadLetter>,
}

impl Inspection {
    /// Adds `message` (read at `now_ms`, ms since epoch) to the counts; it joins the sample
    /// while the sample has fewer than `sample_size` messages.
    pub fn add(&mut self, message: DeadLetter, now_ms: u64, sample_size: usize) {
        self.scanned += 1;
        *self
            .by_error_class
            .entry(message.error_class.clone())
            .or_default() += 1;
        *self.by_reason.entry(message.reason.clone()).or_default() += 1;
        *self.by_retry_count.entry(message.retry_count).or_default() += 1;
        *self
            .by_original_queue
            .entry(message.original_queue.clone())
            .or_default() += 1;
        if let Some(at) = message.dead_lettered_at_ms {
            let age = now_ms.saturating_sub(at);
            self.oldest_age_ms = Some(self.oldest_age_ms.map_or(age, |a| a.max(age)));
            self.newest_age_ms = Some(self.newest_age_ms.map_or(age, |a| a.min(age)));
        }
        if self.sample.len() < sample_size {
            self.sample.push(message);
        }
    }
}

impl Inspection {
    /// The report as a human-readable table: counts, ages, then the sample (headers and
    /// body preview). Every text that comes from a message or the broker (queue names,
    /// classes, reasons, message ids, header names and values, bodies) is escaped, and cut
    /// to [`PREVIEW_BYTES`] where it is not the body ([`crate::printable::shown`]): a
    /// header value as its JSON text, a string one as the string, quoted.
    pub fn table(&self) -> String {
        use crate::printable::{escape, shown};
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "DeadLetterQueue  {}",
            shown(&self.resource, PREVIEW_BYTES)
        );
        let queues: Vec<String> = self
            .queues
            .iter()
            .map(|q| shown(q, PREVIEW_BYTES))
            .collect();
        let _ = writeln!(out, "queues           {}", queues.join(", "));
        let _ = writeln!(
            out,
            "messages         {} (read {}{}{})",
            self.total,
            self.scanned,
            if self.interrupted {
                ", interrupted"
            } else {
                ""
            },
            if self.rotated > 0 {
                format!(
                    "; {} moved to the tail to stay under the delivery limit",
                    self.rotated
                )
            } else {
                String::new()
            }
        );
        let age = |ms: Option<u64>| ms.map_or("-".to_string(), crate::duration::format_ms);
        let _ = writeln!(out, "oldest           {}", age(self.oldest_age_ms));
        let _ = writeln!(out, "newest           {}", age(self.newest_age_ms));
        let section = |out: &mut String, title: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "\n{title}");
            for (k, n) in rows {
                let _ = writeln!(out, "  {n:>8}  {}", shown(&k, PREVIEW_BYTES));
            }
        };
        let rows = |m: &BTreeMap<String, u64>| m.iter().map(|(k, n)| (k.clone(), *n)).collect();
        section(&mut out, "BY ERROR CLASS", rows(&self.by_error_class));
        section(&mut out, "BY REASON", rows(&self.by_reason));
        section(
            &mut out,
            "BY RETRY COUNT",
            self.by_retry_count
                .iter()
                .map(|(k, n)| (k.to_string(), *n))
                .collect(),
        );
        section(&mut out, "BY ORIGINAL QUEUE", rows(&self.by_original_queue));
        for (i, m) in self.sample.iter().enumerate() {
            let _ = writeln!(
                out,
                "\nSAMPLE {} of {}: message_id {}  queue {}",
                i + 1,
                self.sample.len(),
                m.message_id
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |id| shown(id, PREVIEW_BYTES)),
                shown(&m.queue, PREVIEW_BYTES)
            );
            for (k, v) in &m.headers {
                let _ = writeln!(out, "  {}: {}", shown(k, PREVIEW_BYTES), header_shown(v));
            }
            let _ = writeln!(
                out,
                "  body ({} bytes{}): {}",
                m.body_bytes,
                if m.body_truncated { ", truncated" } else { "" },
                escape(&m.body_preview)
            );
        }
        out
    }
}

/// A header value for the table: a string quoted (JSON) and cut to [`PREVIEW_BYTES`]
/// before the quote, with `… (N bytes)` after it when cut; any other value as its JSON
/// text, cut the same way. Escaped ([`crate::printable`]).
fn header_shown(v: &Value) -> String {
    use crate::printable::{cut, escape, shown};
    match v {
        Value::String(s) => {
            let (kept, was_cut) = cut(s, PREVIEW_BYTES);
            let quoted = escape(&Value::String(kept.to_string()).to_string()).into_owned();
            if was_cut {
                format!("{quoted}… ({} bytes)", s.len())
            } else {
                quoted
            }
        }
        other => shown(&other.to_string(), PREVIEW_BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{FieldArray, LongString, ShortString};

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert(ShortString::from(*k), v.clone());
        }
        t
    }

    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    #[test]
    fn contract_headers_come_first() {
        let death = table(&[("reason", s("rejected")), ("queue", s("other"))]);
        let props = BasicProperties::default()
            .with_message_id(ShortString::from("m-1"))
            .with_headers(table(&[
                (ERROR_CLASS, s("timeout")),
                (REASON, s("MaxRetriesExceeded")),
                (RETRY_COUNT, AMQPValue::LongLongInt(5)),
                (ORIGINAL_QUEUE, s("orders")),
                (LAST_FAILED_AT, AMQPValue::LongLongInt(1_000_000)),
                (
                    "x-death",
                    AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
                ),
            ]));
        let d = DeadLetter::read("orders.dlq", &props, b"{\"id\":1}", 100);
        assert_eq!(d.message_id.as_deref(), Some("m-1"));
        assert_eq!(
            (
                d.error_class.as_str(),
                d.reason.as_str(),
                d.original_queue.as_str()
            ),
            ("Timeout", "MaxRetriesExceeded", "orders")
        );
        assert_eq!((d.retry_count, d.dead_lettered_at_ms), (5, Some(1_000_000)));
        assert_eq!(d.headers["x-death"][0]["reason"], "rejected");
        assert_eq!(
            (d.body_preview.as_str(), d.body_truncated),
            ("{\"id\":1}", false)
        );
    }

    #[test]
    fn broker_dead_letters_are_read_from_x_death() {
        let death = table(&[
            ("reason", s("delivery_limit")),
            ("queue", s("payments")),
            ("time", AMQPValue::Timestamp(1_700_000_000)),
        ]);
        let props = BasicProperties::default().with_headers(table(&[
            (
                "x-death",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
            ),
            ("x-delivery-count", AMQPValue::LongLongInt(3)),
        ]));
        let d = DeadLetter::read("payments.dlq", &props, "héllo wörld".as_bytes(), 2);
        assert_eq!(d.reason, "delivery_limit");
        assert_eq!(d.original_queue, "payments");
        assert_eq!(d.error_class, "unclassified");
        assert_eq!(d.dead_lettered_at_ms, Some(1_700_000_000_000));
        assert_eq!(d.delivery_count, 3);
        // Cut on a character boundary: "h" (1 byte), not half of "é".
        assert_eq!((d.body_preview.as_str(), d.body_truncated), ("h", true));
        assert_eq!(d.body_bytes, "héllo wörld".len());
    }

    #[test]
    fn rabbitmq_4_last_death_headers_come_before_x_death() {
        // RabbitMQ 4.0 sets x-last-death-* beside x-death; they name the latest
        // dead-lettering even where x-death holds older entries first.
        let old = table(&[("reason", s("expired")), ("queue", s("orders.retry.5s"))]);
        let props = BasicProperties::default().with_headers(table(&[
            (
                "x-death",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(old)])),
            ),
            ("x-last-death-reason", s("delivery_limit")),
            ("x-last-death-queue", s("orders")),
            ("x-last-death-exchange", s("orders-in")),
        ]));
        let d = DeadLetter::read("orders.dlq", &props, b"", 0);
        assert_eq!(
            (
                d.reason.as_str(),
                d.original_queue.as_str(),
                d.original_exchange.as_deref()
            ),
            ("delivery_limit", "orders", Some("orders-in"))
        );
        // Alone (no x-death at all) they are read too.
        let props = BasicProperties::default()
            .with_headers(table(&[("x-last-death-reason", s("rejected"))]));
        assert_eq!(DeadLetter::read("q", &props, b"", 0).reason, "rejected");
    }

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

    #[test]
    fn the_dead_lettering_time_is_the_newest_known_and_never_overflows() {
        assert_eq!(
            dead_lettered_at(Some(5_000), Some(9), None, Some(1)),
            Some(9_000)
        );
        assert_eq!(
            dead_lettered_at(Some(5_000), Some(1), Some(7_000), None),
            Some(7_000)
        );
        assert_eq!(dead_lettered_at(None, None, None, Some(3)), Some(3_000));
        assert_eq!(
            dead_lettered_at(None, Some(u64::MAX), None, Some(u64::MAX)),
            None
        );
        let props = BasicProperties::default().with_timestamp(u64::MAX);
        assert_eq!(
            DeadLetter::read("q", &props, b"", 0).dead_lettered_at_ms,
            None
        );
    }

    #[test]
    fn replay_resets_the_retry_state_and_stamps_the_replay() {
        let props = BasicProperties::default()
            .with_message_id(ShortString::from("m-9"))
            .with_headers(table(&[
                (RETRY_COUNT, AMQPValue::LongLongInt(5)),
                (REASON, s("MaxRetriesExceeded")),
                (FIRST_FAILED_AT, AMQPValue::LongLongInt(1)),
                (LAST_FAILED_AT, AMQPValue::LongLongInt(2)),
                ("x-delivery-count", AMQPValue::LongLongInt(4)),
                (ERROR_CLASS, s("timeout")),
                (ORIGINAL_QUEUE, s("orders")),
                ("tenant", s("a")),
                (REPLAY_COUNT, AMQPValue::LongLongInt(1)),
            ]));
        let copy = replay_properties(&props, "run-1", 42);
        let d = DeadLetter::read("x", &copy, b"", 0);
        for gone in RESET_ON_REPLAY {
            assert!(!d.headers.contains_key(gone), "{gone} kept");
        }
        assert_eq!(d.headers[REPLAYED_AT], 42);
        assert_eq!(d.headers[REPLAY_ID], "run-1");
        assert_eq!(d.replay_count, 2);
        assert_eq!(d.headers["tenant"], "a");
        assert_eq!(d.error_class, "Timeout");
        assert_eq!(d.original_queue, "orders");
        assert_eq!(d.message_id.as_deref(), Some("m-9"));
    }

    #[test]
    fn inspection_counts_ages_and_samples() {
        let mut i = Inspection::default();
        let at = |ms: u64, class: &str| {
            let props = BasicProperties::default().with_headers(table(&[
                (LAST_FAILED_AT, AMQPValue::LongLongInt(ms as i64)),
                (ERROR_CLASS, s(class)),
            ]));
            DeadLetter::read("q.dlq", &props, b"", 10)
        };
        i.add(at(1_000, "timeout"), 10_000, 1);
        i.add(at(4_000, "timeout"), 10_000, 1);
        i.add(at(9_000, "validation"), 10_000, 1);
        assert_eq!(i.scanned, 3);
        assert_eq!(i.by_error_class["Timeout"], 2);
        assert_eq!(i.by_error_class["Validation"], 1);
        assert_eq!(
            (i.oldest_age_ms, i.newest_age_ms),
            (Some(9_000), Some(1_000))
        );
        assert_eq!(i.sample.len(), 1);
        assert_eq!(i.by_reason["unknown"], 3);
    }
}
