//! The message header contract (docs/ARCHITECTURE.md, "Message header contract"): header names,
//! reading the failure state a message already carries, and stamping the properties of
//! the copy that is republished to a retry tier or to the dead-letter exchange.
//!
//! All times are **milliseconds since the Unix epoch**, all delays **milliseconds**, and
//! every numeric header is written as an AMQP `long` (`LongLongInt`, signed 64 bit).
//! Strings are written as AMQP long strings.
//!
//! Broker-owned `x-` headers (`x-death`, `x-first-death-*`, `x-delivery-count` …) are
//! copied **unchanged**: this module never creates, edits or removes an `x-` header.
//! RabbitMQ 4.0 (and 3.13.0–3.13.2) ignores a client-supplied `x-death`, 3.10 keeps
//! extending it;
//! either way the history the broker wrote stays readable by tools, and the contract's own
//! `dlq-` headers are the authoritative retry state.

use std::collections::BTreeMap;

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

use crate::backoff::DeadLetterReason;
use crate::crd::ErrorClass;

pub use crate::wire::headers::truncate_utf8;
pub use crate::wire::headers::{
    ERROR_CLASS, FIRST_FAILED_AT, LAST_DELAY_MS, LAST_ERROR, LAST_FAILED_AT, MAX_LAST_ERROR_BYTES,
    ORIGINAL_EXCHANGE, ORIGINAL_QUEUE, ORIGINAL_ROUTING_KEY, REASON, RETRY_COUNT,
};

/// AMQP delivery mode "persistent".
pub const PERSISTENT: u8 = 2;

/// Retry state read from a delivered message's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailureState {
    /// `dlq-retry-count` (0 when absent or not a non-negative integer; saturates at
    /// `u32::MAX`).
    pub retry_count: u32,
    /// `dlq-first-failed-at`, ms since epoch (`None` when absent: first failure).
    pub first_failed_at_ms: Option<u64>,
    /// `dlq-last-delay-ms`, ms (`None` when absent).
    pub last_delay_ms: Option<u64>,
}

impl FailureState {
    /// Reads the state from message properties. Integers of any AMQP integer type (and
    /// AMQP timestamps, and decimal strings) are accepted, since other clients may write
    /// them differently; anything else counts as absent.
    pub fn from_properties(props: &BasicProperties) -> Self {
        let Some(headers) = props.headers().as_ref() else {
            return Self::default();
        };
        let map = headers.inner();
        let get = |name: &str| map.get(name).and_then(as_u64);
        FailureState {
            retry_count: get(RETRY_COUNT)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .unwrap_or(0),
            first_failed_at_ms: get(FIRST_FAILED_AT),
            last_delay_ms: get(LAST_DELAY_MS),
        }
    }
}

/// A non-negative integer header value, if it is one.
pub(crate) fn as_u64(v: &AMQPValue) -> Option<u64> {
    let signed = |n: i64| u64::try_from(n).ok();
    match v {
        AMQPValue::ShortShortInt(n) => signed(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortInt(n) => signed(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongInt(n) => signed(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongLongInt(n) => signed(*n),
        AMQPValue::Timestamp(n) => Some(*n),
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok()?.trim().parse().ok(),
        AMQPValue::ShortString(s) => s.as_str().trim().parse().ok(),
        _ => None,
    }
}

/// What happens to the republished copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Retry number `attempt` (1-based) after a computed delay of `delay_ms` ms.
    Retry {
        /// New `dlq-retry-count`.
        attempt: u32,
        /// Computed delay, ms (written to `dlq-last-delay-ms`).
        delay_ms: u64,
    },
    /// Dead-letter with this `dlq-reason`.
    DeadLetter(DeadLetterReason),
}

/// Everything stamped on a republished copy besides the original properties.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// Class of this failure (`None`: unclassified, and a stale `dlq-error-class` of an
    /// earlier failure is removed).
    pub class: Option<ErrorClass>,
    /// Description of this failure (truncated to [`MAX_LAST_ERROR_BYTES`]).
    pub error: &'a str,
    /// Now, ms since epoch (`dlq-last-failed-at`, and `dlq-first-failed-at` if absent).
    pub now_ms: u64,
    /// Exchange of the failed delivery (`dlq-original-exchange` if absent).
    pub exchange: &'a str,
    /// Routing key of the failed delivery (`dlq-original-routing-key` if absent).
    pub routing_key: &'a str,
    /// Source queue (`dlq-original-queue` if absent).
    pub queue: &'a str,
    /// Retry or dead-letter.
    pub action: Action,
}

fn long(n: u64) -> AMQPValue {
    AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX))
}

fn string(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// Properties of the republished copy: every original property (message id, correlation
/// id, content type, timestamp, user headers, `x-` headers …) is kept, delivery mode is
/// forced to persistent (2), and the contract headers are set:
/// - always: `dlq-error-class` (removed for an unclassified failure), `dlq-last-error`,
///   `dlq-last-failed-at`;
/// - only when absent (first failure): `dlq-first-failed-at` (= now),
///   `dlq-original-exchange`, `dlq-original-routing-key`, `dlq-original-queue`;
/// - retry: `dlq-retry-count` = `attempt`, `dlq-last-delay-ms` = `delay_ms`, and a stale
///   `dlq-reason` (from a message replayed out of a DLQ) is removed;
/// - dead-letter: `dlq-reason`; `dlq-retry-count` is left as it was (written as 0 when
///   absent, so the dead letter always carries it).
pub fn republish_properties(original: &BasicProperties, stamp: &Stamp<'_>) -> BasicProperties {
    let mut map: BTreeMap<ShortString, AMQPValue> = original
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    let key = |name: &'static str| ShortString::from(name);

    match stamp.class {
        Some(class) => map.insert(key(ERROR_CLASS), string(class.name())),
        None => map.remove(ERROR_CLASS),
    };
    map.insert(
        key(LAST_ERROR),
        string(truncate_utf8(stamp.error, MAX_LAST_ERROR_BYTES)),
    );
    map.insert(key(LAST_FAILED_AT), long(stamp.now_ms));
    map.entry(key(FIRST_FAILED_AT))
        .or_insert_with(|| long(stamp.now_ms));
    map.entry(key(ORIGINAL_EXCHANGE))
        .or_insert_with(|| string(stamp.exchange));
    map.entry(key(ORIGINAL_ROUTING_KEY))
        .or_insert_with(|| string(stamp.routing_key));
    map.entry(key(ORIGINAL_QUEUE))
        .or_insert_with(|| string(stamp.queue));
    match stamp.action {
        Action::Retry { attempt, delay_ms } => {
            map.insert(key(RETRY_COUNT), long(u64::from(attempt)));
            map.insert(key(LAST_DELAY_MS), long(delay_ms));
            map.remove(REASON);
        }
        Action::DeadLetter(reason) => {
            map.entry(key(RETRY_COUNT)).or_insert_with(|| long(0));
            map.insert(key(REASON), string(reason.as_str()));
        }
    }
    original
        .clone()
        .with_headers(FieldTable::from(map))
        .with_delivery_mode(PERSISTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(p: &'a BasicProperties, name: &str) -> Option<&'a AMQPValue> {
        p.headers().as_ref().and_then(|h| h.inner().get(name))
    }

    fn text(p: &BasicProperties, name: &str) -> Option<String> {
        match header(p, name)? {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            _ => None,
        }
    }

    fn num(p: &BasicProperties, name: &str) -> Option<i64> {
        match header(p, name)? {
            AMQPValue::LongLongInt(n) => Some(*n),
            _ => None,
        }
    }

    fn stamp(now_ms: u64, action: Action) -> Stamp<'static> {
        Stamp {
            class: Some(ErrorClass::Timeout),
            error: "upstream timed out",
            now_ms,
            exchange: "orders-in",
            routing_key: "orders.created",
            queue: "orders",
            action,
        }
    }

    fn user_message() -> BasicProperties {
        let mut h = BTreeMap::new();
        h.insert(ShortString::from("tenant"), string("acme"));
        h.insert(ShortString::from("x-custom"), AMQPValue::LongLongInt(7));
        BasicProperties::default()
            .with_message_id("m-1".into())
            .with_correlation_id("c-1".into())
            .with_content_type("application/json".into())
            .with_timestamp(1_700_000_000)
            .with_delivery_mode(1)
            .with_headers(FieldTable::from(h))
    }

    #[test]
    fn first_failure_sets_everything_and_keeps_user_properties() {
        let orig = user_message();
        assert_eq!(
            FailureState::from_properties(&orig),
            FailureState::default()
        );
        let p = republish_properties(
            &orig,
            &stamp(
                1_000,
                Action::Retry {
                    attempt: 1,
                    delay_ms: 180,
                },
            ),
        );
        assert_eq!(num(&p, RETRY_COUNT), Some(1));
        assert_eq!(num(&p, FIRST_FAILED_AT), Some(1_000));
        assert_eq!(num(&p, LAST_FAILED_AT), Some(1_000));
        assert_eq!(num(&p, LAST_DELAY_MS), Some(180));
        assert_eq!(text(&p, ERROR_CLASS).as_deref(), Some("Timeout"));
        assert_eq!(text(&p, LAST_ERROR).as_deref(), Some("upstream timed out"));
        assert_eq!(text(&p, ORIGINAL_EXCHANGE).as_deref(), Some("orders-in"));
        assert_eq!(
            text(&p, ORIGINAL_ROUTING_KEY).as_deref(),
            Some("orders.created")
        );
        assert_eq!(text(&p, ORIGINAL_QUEUE).as_deref(), Some("orders"));
        assert_eq!(header(&p, REASON), None);
        // User properties and headers (including x- ones) are kept.
        assert_eq!(text(&p, "tenant").as_deref(), Some("acme"));
        assert_eq!(num(&p, "x-custom"), Some(7));
        assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
        assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("c-1"));
        assert_eq!(
            p.content_type().as_ref().map(|s| s.as_str()),
            Some("application/json")
        );
        assert_eq!(*p.timestamp(), Some(1_700_000_000));
        assert_eq!(*p.delivery_mode(), Some(PERSISTENT));
    }

    #[test]
    fn later_failures_increment_and_preserve_origin() {
        let first = republish_properties(
            &user_message(),
            &stamp(
                1_000,
                Action::Retry {
                    attempt: 1,
                    delay_ms: 200,
                },
            ),
        );
        let state = FailureState::from_properties(&first);
        assert_eq!(
            state,
            FailureState {
                retry_count: 1,
                first_failed_at_ms: Some(1_000),
                last_delay_ms: Some(200),
            }
        );
        // Second failure: delivered back from the tier through the default exchange.
        let second_stamp = Stamp {
            class: Some(ErrorClass::Overload),
            error: "busy",
            now_ms: 5_000,
            exchange: "",
            routing_key: "orders",
            queue: "orders",
            action: Action::Retry {
                attempt: state.retry_count + 1,
                delay_ms: 400,
            },
        };
        let second = republish_properties(&first, &second_stamp);
        assert_eq!(num(&second, RETRY_COUNT), Some(2));
        assert_eq!(num(&second, FIRST_FAILED_AT), Some(1_000));
        assert_eq!(num(&second, LAST_FAILED_AT), Some(5_000));
        assert_eq!(num(&second, LAST_DELAY_MS), Some(400));
        assert_eq!(text(&second, ERROR_CLASS).as_deref(), Some("Overload"));
        assert_eq!(text(&second, LAST_ERROR).as_deref(), Some("busy"));
        assert_eq!(
            text(&second, ORIGINAL_EXCHANGE).as_deref(),
            Some("orders-in")
        );
        assert_eq!(
            text(&second, ORIGINAL_ROUTING_KEY).as_deref(),
            Some("orders.created")
        );
        assert_eq!(text(&second, "tenant").as_deref(), Some("acme"));

        // Dead-lettering keeps the count and adds the reason.
        let dead = republish_properties(
            &second,
            &Stamp {
                action: Action::DeadLetter(DeadLetterReason::MaxRetriesExceeded),
                now_ms: 9_000,
                ..second_stamp
            },
        );
        assert_eq!(num(&dead, RETRY_COUNT), Some(2));
        assert_eq!(text(&dead, REASON).as_deref(), Some("MaxRetriesExceeded"));
        assert_eq!(num(&dead, FIRST_FAILED_AT), Some(1_000));
        assert_eq!(num(&dead, LAST_FAILED_AT), Some(9_000));
        assert_eq!(num(&dead, LAST_DELAY_MS), Some(400));

        // A replayed dead letter that is retried loses its stale reason.
        let retried = republish_properties(
            &dead,
            &stamp(
                10_000,
                Action::Retry {
                    attempt: 3,
                    delay_ms: 1,
                },
            ),
        );
        assert_eq!(header(&retried, REASON), None);
    }

    #[test]
    fn dead_letter_on_first_failure_writes_zero_count() {
        let p = republish_properties(
            &BasicProperties::default(),
            &stamp(1, Action::DeadLetter(DeadLetterReason::NonRetryable)),
        );
        assert_eq!(num(&p, RETRY_COUNT), Some(0));
        assert_eq!(text(&p, REASON).as_deref(), Some("NonRetryable"));
        assert_eq!(header(&p, LAST_DELAY_MS), None);
        assert_eq!(*p.delivery_mode(), Some(PERSISTENT));
    }

    #[test]
    fn last_error_is_truncated_on_a_char_boundary() {
        // 'é' is 2 bytes, '€' 3, '😀' 4: 4096 is not a boundary for any offset below.
        for (prefix, ch) in [("", 'é'), ("a", '€'), ("ab", '😀'), ("abc", '😀')] {
            let long_error: String = prefix
                .chars()
                .chain(std::iter::repeat_n(ch, 3000))
                .collect();
            let p = republish_properties(
                &BasicProperties::default(),
                &Stamp {
                    error: &long_error,
                    ..stamp(1, Action::DeadLetter(DeadLetterReason::NonRetryable))
                },
            );
            let got = text(&p, LAST_ERROR).unwrap_or_default();
            assert!(got.len() <= MAX_LAST_ERROR_BYTES, "{}", got.len());
            assert!(got.len() > MAX_LAST_ERROR_BYTES - ch.len_utf8());
            assert!(long_error.starts_with(&got));
            // Valid UTF-8 all the way (lossy decoding would have inserted U+FFFD).
            assert!(!got.contains('\u{FFFD}'));
        }
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("short", 4096), "short");
        assert_eq!(truncate_utf8("", 0), "");
    }

    #[test]
    fn parsing_is_lenient_about_integer_types() {
        let mut h = BTreeMap::new();
        h.insert(ShortString::from(RETRY_COUNT), AMQPValue::LongInt(2));
        h.insert(ShortString::from(FIRST_FAILED_AT), AMQPValue::Timestamp(42));
        h.insert(ShortString::from(LAST_DELAY_MS), string("300"));
        let p = BasicProperties::default().with_headers(FieldTable::from(h));
        assert_eq!(
            FailureState::from_properties(&p),
            FailureState {
                retry_count: 2,
                first_failed_at_ms: Some(42),
                last_delay_ms: Some(300),
            }
        );
        let mut bad = BTreeMap::new();
        bad.insert(ShortString::from(RETRY_COUNT), AMQPValue::LongLongInt(-5));
        bad.insert(ShortString::from(FIRST_FAILED_AT), string("yesterday"));
        let p = BasicProperties::default().with_headers(FieldTable::from(bad));
        assert_eq!(FailureState::from_properties(&p), FailureState::default());
    }
}
