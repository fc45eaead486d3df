//! What a dead-lettered message says about its failure ([`DeadLetter`]), and the
//! properties of its replayed copy ([`replay_properties`]). Pure, over the broker-neutral
//! message types of [`crate::wire::message`].

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use super::{REPLAYED_AT, REPLAY_COUNT, REPLAY_ID, RESET_ON_REPLAY};
use crate::wire::headers::{
    ERROR_CLASS, LAST_ERROR, LAST_FAILED_AT, ORIGINAL_EXCHANGE, ORIGINAL_QUEUE,
    ORIGINAL_ROUTING_KEY, REASON, RETRY_COUNT,
};
use crate::wire::message::{HeaderValue, Headers, Properties};

/// The headers of the replayed copy of a message with headers `original`: the retry
/// state reset ([`RESET_ON_REPLAY`]), [`REPLAYED_AT`] = `now_ms`, [`REPLAY_ID`] =
/// `replay_id`, [`REPLAY_COUNT`] one more than before; every other header unchanged.
pub fn replay_headers(original: Option<&Headers>, replay_id: &str, now_ms: u64) -> Headers {
    let mut map = original.cloned().unwrap_or_default();
    let count = map
        .get(REPLAY_COUNT)
        .and_then(HeaderValue::as_u64)
        .unwrap_or(0);
    for name in RESET_ON_REPLAY {
        map.remove(name);
    }
    let long = |n: u64| HeaderValue::I64(i64::try_from(n).unwrap_or(i64::MAX));
    map.insert(REPLAYED_AT.to_string(), long(now_ms));
    map.insert(REPLAY_ID.to_string(), HeaderValue::text(replay_id));
    map.insert(REPLAY_COUNT.to_string(), long(count.saturating_add(1)));
    map
}

/// The properties of the replayed copy of a message with `original` properties (the
/// neutral ones, or a broker adapter's own type that converts into them): the headers of
/// [`replay_headers`], every other property unchanged.
pub fn replay_properties(
    original: impl Into<Properties>,
    replay_id: &str,
    now_ms: u64,
) -> Properties {
    let mut copy = original.into();
    copy.headers = Some(replay_headers(copy.headers.as_ref(), replay_id, now_ms));
    copy
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
    /// Reads a delivered message (`props`: the neutral properties, or a broker adapter's
    /// own type that converts into them; `body`) from `queue`; the body preview keeps at
    /// most `preview_bytes` bytes (on a UTF-8 character boundary).
    pub fn read(
        queue: &str,
        props: impl Into<Properties>,
        body: &[u8],
        preview_bytes: usize,
    ) -> Self {
        Self::from_properties(queue, &props.into(), body, preview_bytes)
    }

    /// [`DeadLetter::read`] of borrowed neutral properties.
    pub fn from_properties(
        queue: &str,
        props: &Properties,
        body: &[u8],
        preview_bytes: usize,
    ) -> Self {
        let empty = Headers::new();
        let headers = props.headers.as_ref().unwrap_or(&empty);
        let text = |name: &str| headers.get(name).and_then(HeaderValue::as_text);
        let count = |name: &str| headers.get(name).and_then(HeaderValue::as_u64);
        // The latest dead-lettering: the first table of `x-death`.
        let death = match headers.get("x-death") {
            Some(HeaderValue::Array(a)) => match a.first() {
                Some(HeaderValue::Table(t)) => Some(t),
                _ => None,
            },
            _ => None,
        };
        let death_value = |name: &str| death.and_then(|d| d.get(name));
        let death_text = |name: &str| death_value(name).and_then(HeaderValue::as_text);
        // RabbitMQ 4.0 also sets x-last-death-reason, -queue and -exchange: the latest
        // dead-lettering without walking x-death (RabbitMQ 4.0 release notes).
        let last_death = |name: &str| text(&format!("x-last-death-{name}"));
        let (preview, truncated) = preview(body, preview_bytes);
        DeadLetter {
            queue: queue.to_string(),
            message_id: props.message_id.clone(),
            error_class: text(ERROR_CLASS)
                .map(|c| canonical_class(&c))
                .unwrap_or_else(|| "unclassified".into()),
            reason: text(REASON)
                .or_else(|| last_death("reason"))
                .or_else(|| death_text("reason"))
                .unwrap_or_else(|| "unknown".into()),
            retry_count: count(RETRY_COUNT).unwrap_or(0),
            original_queue: text(ORIGINAL_QUEUE)
                .or_else(|| last_death("queue"))
                .or_else(|| death_text("queue"))
                .unwrap_or_else(|| "unknown".into()),
            original_exchange: text(ORIGINAL_EXCHANGE)
                .or_else(|| last_death("exchange"))
                .or_else(|| death_text("exchange")),
            original_routing_key: text(ORIGINAL_ROUTING_KEY).or_else(|| {
                match death_value("routing-keys") {
                    Some(HeaderValue::Array(a)) => a.first().and_then(HeaderValue::as_text),
                    _ => None,
                }
            }),
            replay_count: count(REPLAY_COUNT).unwrap_or(0),
            dead_lettered_at_ms: dead_lettered_at(
                count(LAST_FAILED_AT),
                death_value("time").and_then(HeaderValue::as_u64),
                count(REPLAYED_AT),
                props.timestamp,
            ),
            delivery_count: count("x-delivery-count").unwrap_or(0),
            last_error: text(LAST_ERROR),
            headers: headers
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
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

pub use crate::error_class::canonical_class;

/// A header value as JSON.
fn to_json(v: &HeaderValue) -> Value {
    match v {
        HeaderValue::Bool(b) => json!(b),
        HeaderValue::I8(n) => json!(n),
        HeaderValue::U8(n) => json!(n),
        HeaderValue::I16(n) => json!(n),
        HeaderValue::U16(n) => json!(n),
        HeaderValue::I32(n) => json!(n),
        HeaderValue::U32(n) => json!(n),
        HeaderValue::I64(n) => json!(n),
        HeaderValue::F32(f) => json!(f),
        HeaderValue::F64(f) => json!(f),
        HeaderValue::Timestamp(t) => json!(t),
        HeaderValue::Decimal { scale, value } => {
            json!(format!("DecimalValue {{ scale: {scale}, value: {value} }}"))
        }
        HeaderValue::ShortString(s) => json!(s),
        HeaderValue::LongString(s) | HeaderValue::ByteArray(s) => {
            json!(String::from_utf8_lossy(s))
        }
        HeaderValue::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        HeaderValue::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
        HeaderValue::Void => Value::Null,
    }
}

/// At most `max` bytes of `body` as UTF-8 (lossy), cut on a character boundary
/// ([`crate::printable::cut`]), and whether it was cut.
fn preview(body: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(body);
    let (kept, cut) = crate::printable::cut(&text, max);
    (kept.to_string(), cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::headers::FIRST_FAILED_AT;

    fn table(pairs: &[(&str, HeaderValue)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> HeaderValue {
        HeaderValue::text(v)
    }

    fn with_headers(h: Headers) -> Properties {
        Properties {
            headers: Some(h),
            ..Properties::default()
        }
    }

    #[test]
    fn contract_headers_come_first() {
        let death = table(&[("reason", s("rejected")), ("queue", s("other"))]);
        let mut props = with_headers(table(&[
            (ERROR_CLASS, s("timeout")),
            (REASON, s("MaxRetriesExceeded")),
            (RETRY_COUNT, HeaderValue::I64(5)),
            (ORIGINAL_QUEUE, s("orders")),
            (LAST_FAILED_AT, HeaderValue::I64(1_000_000)),
            (
                "x-death",
                HeaderValue::Array(vec![HeaderValue::Table(death)]),
            ),
        ]));
        props.message_id = Some("m-1".into());
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
            ("time", HeaderValue::Timestamp(1_700_000_000)),
            ("routing-keys", HeaderValue::Array(vec![s("pay.eu")])),
        ]);
        let props = with_headers(table(&[
            (
                "x-death",
                HeaderValue::Array(vec![HeaderValue::Table(death)]),
            ),
            ("x-delivery-count", HeaderValue::I64(3)),
        ]));
        let d = DeadLetter::read("payments.dlq", &props, "héllo wörld".as_bytes(), 2);
        assert_eq!(d.reason, "delivery_limit");
        assert_eq!(d.original_queue, "payments");
        assert_eq!(d.original_routing_key.as_deref(), Some("pay.eu"));
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
        let props = with_headers(table(&[
            ("x-death", HeaderValue::Array(vec![HeaderValue::Table(old)])),
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
        let props = with_headers(table(&[("x-last-death-reason", s("rejected"))]));
        assert_eq!(DeadLetter::read("q", &props, b"", 0).reason, "rejected");
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
        let props = Properties {
            timestamp: Some(u64::MAX),
            ..Properties::default()
        };
        assert_eq!(
            DeadLetter::read("q", &props, b"", 0).dead_lettered_at_ms,
            None
        );
    }

    #[test]
    fn replay_resets_the_retry_state_and_stamps_the_replay() {
        let mut props = with_headers(table(&[
            (RETRY_COUNT, HeaderValue::I64(5)),
            (REASON, s("MaxRetriesExceeded")),
            (FIRST_FAILED_AT, HeaderValue::I64(1)),
            (LAST_FAILED_AT, HeaderValue::I64(2)),
            ("x-delivery-count", HeaderValue::I64(4)),
            (ERROR_CLASS, s("timeout")),
            (ORIGINAL_QUEUE, s("orders")),
            ("tenant", s("a")),
            (REPLAY_COUNT, HeaderValue::I64(1)),
        ]));
        props.message_id = Some("m-9".into());
        props.content_type = Some("application/json".into());
        let copy = replay_properties(&props, "run-1", 42);
        assert_eq!(copy.content_type.as_deref(), Some("application/json"));
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
        // A message without headers gets the stamps only.
        let bare = replay_properties(Properties::default(), "run-2", 7);
        assert_eq!(bare.headers.map(|h| h.len()), Some(3));
    }

    #[test]
    fn header_values_read_as_json() {
        let props = with_headers(table(&[
            ("d", HeaderValue::Decimal { scale: 2, value: 5 }),
            ("b", HeaderValue::ByteArray(b"xy".to_vec())),
            ("v", HeaderValue::Void),
            ("t", HeaderValue::Table(table(&[("n", HeaderValue::U8(1))]))),
        ]));
        let d = DeadLetter::read("q", &props, b"", 0);
        assert_eq!(d.headers["d"], "DecimalValue { scale: 2, value: 5 }");
        assert_eq!(d.headers["b"], "xy");
        assert_eq!(d.headers["v"], Value::Null);
        assert_eq!(d.headers["t"]["n"], 1);
    }
}
