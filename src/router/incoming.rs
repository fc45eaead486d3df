//! What a delivery from the router inbox says about its failure: pure, no I/O
//! (docs/ROUTER.md, "What the router reads").
//!
//! Two ways into the inbox:
//! - **Dead-lettered by RabbitMQ** from the source queue (through the default exchange,
//!   so the delivery's exchange is `""`): the newest death — `x-last-death-reason` where
//!   the broker writes it (3.13 and later), else the first entry of `x-death` (RabbitMQ
//!   keeps the newest death first) — says why:
//!   - `rejected`: a consumer rejected or nacked it with `requeue = false`: a processing
//!     failure of no known class, decided by the RetryPolicy's `classification.default`;
//!   - `delivery_limit`: a quorum source redelivered it more than its delivery limit
//!     (each consumer requeued it or crashed on it): class `Poison`;
//!   - `expired`: its TTL ran out before a consumer got it: dead-lettered at once with
//!     `dlq-reason: Expired`, never retried;
//!   - `maxlen`: a full source queue (`drop-head`) dropped it: dead-lettered at once with
//!     `dlq-reason: MaxLength`;
//!   - anything else (a reason a later RabbitMQ adds, or no death at all): a failure of
//!     no known class.
//! - **Reported by the consumer**: published to the inbox exchange `<source>.router` with
//!   `dlq-error-class` (an error class name) and `dlq-last-error`, then acked. The class
//!   is used as given (an unknown name counts as no class).
//!
//! The retry count is never read from `x-death`: RabbitMQ 4.x ignores an `x-death` a
//! client publishes, so the count would restart at every retry; the contract's own
//! `dlq-retry-count` is authoritative ([`crate::client::headers`]).

use lapin::types::{AMQPValue, FieldArray, FieldTable};

use crate::backoff::DeadLetterReason;
use crate::client::headers::{ERROR_CLASS, LAST_ERROR};
use crate::client::{Failure, Origin};
use crate::crd::ErrorClass;

/// The parts of an inbox delivery the router reads.
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'a> {
    /// Exchange it was delivered from (`""` for the default exchange).
    pub exchange: &'a str,
    /// Routing key it was delivered with.
    pub routing_key: &'a str,
    /// Its headers, if any.
    pub headers: Option<&'a FieldTable>,
}

/// The failure and origin of an inbox delivery, with owned texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Class, if known (`None` for an unclassified failure or a message never processed).
    pub class: Option<ErrorClass>,
    /// `Some` for a message that was never processed: dead-letter it at once.
    pub not_processed: Option<DeadLetterReason>,
    /// What happened (`dlq-last-error`).
    pub error: String,
    /// Exchange of the failed delivery (`dlq-original-exchange` on its first failure).
    pub origin_exchange: String,
    /// Routing key of the failed delivery (`dlq-original-routing-key` on its first
    /// failure).
    pub origin_routing_key: String,
    /// `true` when the consumer published it to the inbox exchange itself.
    pub reported: bool,
    /// The `x-death` reason RabbitMQ gave, if it dead-lettered the message.
    pub death_reason: Option<String>,
}

impl Incoming {
    /// The [`Failure`] to hand to [`crate::client::Republisher::copy`].
    pub fn failure(&self) -> Failure<'_> {
        match self.not_processed {
            Some(reason) => Failure::NotProcessed {
                reason,
                error: &self.error,
            },
            None => Failure::Failed {
                class: self.class,
                error: &self.error,
            },
        }
    }

    /// The [`Origin`] to hand to [`crate::client::Republisher::copy`].
    pub fn origin(&self) -> Origin<'_> {
        Origin {
            exchange: &self.origin_exchange,
            routing_key: &self.origin_routing_key,
        }
    }
}

/// Reads an inbox delivery of source queue `source` whose inbox exchange is
/// `inbox_exchange` (rules in the module documentation).
pub fn read(delivered: &Delivered<'_>, inbox_exchange: &str, source: &str) -> Incoming {
    if delivered.exchange == inbox_exchange {
        return reported(delivered);
    }
    let death = newest_death(delivered.headers);
    let death_reason = death.as_ref().map(|d| d.reason.clone());
    let reason = death_reason.as_deref();
    let (class, not_processed, error) = match reason {
        Some("rejected") => (
            None,
            None,
            format!("rejected by a consumer of {source:?} (basic.reject or basic.nack with requeue=false)"),
        ),
        Some("delivery_limit") => (
            Some(ErrorClass::Poison),
            None,
            format!("redelivered more often than the delivery limit of {source:?}: every consumer requeued it or crashed on it"),
        ),
        Some("expired") => (
            None,
            Some(DeadLetterReason::Expired),
            format!("its time-to-live ran out in {source:?} before a consumer got it"),
        ),
        Some("maxlen") => (
            None,
            Some(DeadLetterReason::MaxLength),
            format!("{source:?} was full (max-length, overflow drop-head) and dropped it"),
        ),
        Some(other) => (
            None,
            None,
            format!("dead-lettered from {source:?} with reason {other:?}"),
        ),
        None => (
            None,
            None,
            "arrived in the router inbox without a dead-letter reason".to_string(),
        ),
    };
    let (origin_exchange, origin_routing_key) = match death {
        Some(d) => (d.exchange, d.routing_key),
        None => (String::new(), delivered.routing_key.to_string()),
    };
    Incoming {
        class,
        not_processed,
        error,
        origin_exchange,
        origin_routing_key,
        reported: false,
        death_reason,
    }
}

/// A failure the consumer published to the inbox exchange with its class and error.
fn reported(delivered: &Delivered<'_>) -> Incoming {
    let text = |name: &str| {
        delivered
            .headers
            .and_then(|h| h.inner().get(name))
            .and_then(as_text)
    };
    let given = text(ERROR_CLASS);
    let class = given
        .as_deref()
        .and_then(|c| ErrorClass::from_name(c.trim()));
    let mut error = text(LAST_ERROR)
        .unwrap_or_else(|| "reported to the router inbox without dlq-last-error".to_string());
    if let (Some(given), None) = (&given, class) {
        // A misspelt class must leave a trace: it is decided as unclassified.
        error = format!("{error} (unknown dlq-error-class {given:?}: decided as unclassified)");
    }
    Incoming {
        class,
        not_processed: None,
        error,
        origin_exchange: String::new(),
        origin_routing_key: delivered.routing_key.to_string(),
        reported: true,
        death_reason: None,
    }
}

/// The newest death RabbitMQ recorded on a message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Death {
    reason: String,
    exchange: String,
    routing_key: String,
}

/// The newest death in `headers`: `x-death`'s first entry (exchange and first routing
/// key), its reason overridden by `x-last-death-reason` when present.
fn newest_death(headers: Option<&FieldTable>) -> Option<Death> {
    let map = headers?.inner();
    let first = match map.get("x-death") {
        Some(AMQPValue::FieldArray(entries)) => first_table(entries),
        _ => None,
    };
    let field = |name: &str| first.and_then(|t| t.inner().get(name)).and_then(as_text);
    let reason = map
        .get("x-last-death-reason")
        .and_then(as_text)
        .or_else(|| field("reason"))?;
    let routing_key = match first.and_then(|t| t.inner().get("routing-keys")) {
        Some(AMQPValue::FieldArray(keys)) => keys.as_slice().first().and_then(as_text),
        _ => None,
    };
    Some(Death {
        reason,
        exchange: field("exchange").unwrap_or_default(),
        routing_key: routing_key.unwrap_or_default(),
    })
}

fn first_table(entries: &FieldArray) -> Option<&FieldTable> {
    match entries.as_slice().first()? {
        AMQPValue::FieldTable(t) => Some(t),
        _ => None,
    }
}

/// A header's text (long or short string, lossy UTF-8).
fn as_text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use lapin::types::{LongString, ShortString};

    use super::*;

    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let map: BTreeMap<ShortString, AMQPValue> = pairs
            .iter()
            .map(|(k, v)| (ShortString::from(*k), v.clone()))
            .collect();
        FieldTable::from(map)
    }

    /// Headers of a message RabbitMQ dead-lettered from `orders` with `reason`, first
    /// published to `shop` with key `orders.created`.
    fn dead(reason: &str, last_reason: Option<&str>) -> FieldTable {
        let entry = table(&[
            ("reason", s(reason)),
            ("queue", s("orders")),
            ("exchange", s("shop")),
            (
                "routing-keys",
                AMQPValue::FieldArray(FieldArray::from(vec![s("orders.created")])),
            ),
            ("count", AMQPValue::LongLongInt(1)),
        ]);
        let older = table(&[("reason", s("expired")), ("queue", s("orders.retry.1s"))]);
        let mut pairs = vec![(
            "x-death",
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::FieldTable(entry),
                AMQPValue::FieldTable(older),
            ])),
        )];
        if let Some(r) = last_reason {
            pairs.push(("x-last-death-reason", s(r)));
        }
        // A stale class from an earlier failure must not be taken for this one.
        pairs.push((ERROR_CLASS, s("Timeout")));
        table(&pairs)
    }

    fn read_dead(headers: &FieldTable) -> Incoming {
        read(
            &Delivered {
                exchange: "",
                routing_key: "orders.router",
                headers: Some(headers),
            },
            "orders.router",
            "orders",
        )
    }

    #[test]
    fn each_broker_reason_has_its_meaning() {
        let rejected = read_dead(&dead("rejected", None));
        assert_eq!(
            rejected.failure(),
            Failure::Failed {
                class: None,
                error: &rejected.error
            }
        );
        assert_eq!(
            rejected.origin(),
            Origin {
                exchange: "shop",
                routing_key: "orders.created"
            }
        );
        assert_eq!(rejected.death_reason.as_deref(), Some("rejected"));
        assert!(!rejected.reported);

        let limit = read_dead(&dead("delivery_limit", None));
        assert_eq!(limit.class, Some(ErrorClass::Poison));
        assert_eq!(limit.not_processed, None);

        let expired = read_dead(&dead("expired", None));
        assert_eq!(expired.not_processed, Some(DeadLetterReason::Expired));
        let full = read_dead(&dead("maxlen", None));
        assert_eq!(full.not_processed, Some(DeadLetterReason::MaxLength));
        assert!(full.error.contains("\"orders\" was full"), "{}", full.error);

        let unknown = read_dead(&dead("some_future_reason", None));
        assert_eq!((unknown.class, unknown.not_processed), (None, None));
        assert!(unknown.error.contains("some_future_reason"));
    }

    #[test]
    fn x_last_death_reason_wins_where_the_broker_writes_it() {
        // RabbitMQ 3.13+ writes it; it names the newest death even if x-death was
        // reordered.
        let incoming = read_dead(&dead("expired", Some("rejected")));
        assert_eq!(incoming.death_reason.as_deref(), Some("rejected"));
        assert_eq!(incoming.not_processed, None);
    }

    #[test]
    fn a_consumer_report_gives_class_and_error() {
        let headers = table(&[
            (ERROR_CLASS, s("Validation")),
            (LAST_ERROR, s("amount is negative")),
        ]);
        let incoming = read(
            &Delivered {
                exchange: "orders.router",
                routing_key: "orders.created",
                headers: Some(&headers),
            },
            "orders.router",
            "orders",
        );
        assert!(incoming.reported);
        assert_eq!(incoming.class, Some(ErrorClass::Validation));
        assert_eq!(incoming.error, "amount is negative");
        assert_eq!(incoming.origin_routing_key, "orders.created");

        let unknown_class = table(&[(ERROR_CLASS, s("Cosmic rays"))]);
        let incoming = read(
            &Delivered {
                exchange: "orders.router",
                routing_key: "k",
                headers: Some(&unknown_class),
            },
            "orders.router",
            "orders",
        );
        assert_eq!(incoming.class, None);
        assert!(incoming.error.contains("without dlq-last-error"));
        assert!(
            incoming
                .error
                .contains("unknown dlq-error-class \"Cosmic rays\""),
            "{}",
            incoming.error
        );
    }

    #[test]
    fn hostile_death_headers_read_as_an_unclassified_failure() {
        let huge: Vec<AMQPValue> = (0..20_000)
            .map(|i| {
                AMQPValue::FieldTable(table(&[
                    ("reason", s("expired")),
                    ("queue", s(&format!("q{i}"))),
                ]))
            })
            .collect();
        let shapes = [
            table(&[("x-death", s("a string"))]),
            table(&[("x-death", AMQPValue::FieldArray(FieldArray::default()))]),
            table(&[(
                "x-death",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongLongInt(1)])),
            )]),
            table(&[(
                "x-death",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(table(&[
                    ("reason", AMQPValue::FieldArray(FieldArray::default())),
                    ("routing-keys", s("not an array")),
                ]))])),
            )]),
            table(&[("x-last-death-reason", AMQPValue::LongLongInt(42))]),
            table(&[(ERROR_CLASS, s("\u{1b}[31mValidation\u{1b}[0m"))]),
        ];
        for headers in shapes {
            let incoming = read_dead(&headers);
            assert_eq!(
                (incoming.class, incoming.not_processed),
                (None, None),
                "{headers:?}"
            );
        }
        // The newest death is the first entry, however many there are.
        let many = table(&[("x-death", AMQPValue::FieldArray(FieldArray::from(huge)))]);
        assert_eq!(
            read_dead(&many).not_processed,
            Some(DeadLetterReason::Expired)
        );
        // A reason of any length ends up in dlq-last-error, where the republisher cuts it.
        let long = "r".repeat(1 << 20);
        let incoming = read_dead(&table(&[("x-last-death-reason", s(&long))]));
        assert!(incoming.error.len() > long.len());
    }

    #[test]
    fn no_death_and_no_headers_is_an_unclassified_failure() {
        let incoming = read(
            &Delivered {
                exchange: "",
                routing_key: "orders.router",
                headers: None,
            },
            "orders.router",
            "orders",
        );
        assert_eq!((incoming.class, incoming.not_processed), (None, None));
        assert_eq!(incoming.origin_routing_key, "orders.router");
        assert_eq!(incoming.death_reason, None);
    }
}
