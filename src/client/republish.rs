//! The one retry decision and republish, shared by [`super::RetryHandler`] (a Rust
//! consumer's own failures) and the retry router ([`crate::router`], failures of consumers
//! in any language): read the failure state a message carries, ask the RetryPolicy
//! ([`ResolvedPolicy::decide`]), stamp the header contract ([`super::headers`]) and
//! publish the copy with `mandatory` and a publisher confirm; then settle the original —
//! ack only after the confirm, otherwise nack with `requeue = true` (nothing is lost).
//!
//! A copy never carries what would route it where the decision did not send it, or crash
//! the queue it goes to ([`without_hazards`]): `CC` and `BCC` (sender-selected
//! distribution would route it by more keys than its tier's or dead-letter queue's) and an
//! `x-death` RabbitMQ could not have written (RabbitMQ 3.x crashes a queue that
//! dead-letters it). A copy whose properties would not fit in one AMQP frame is never
//! sent ([`check_frame`]): the broker would close the whole connection.
//!
//! Times are milliseconds since the Unix epoch and delays milliseconds.

use std::sync::Mutex;

use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions};
use lapin::protocol::basic::gen_properties;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::headers::{self, Action, FailureState, Stamp};
use super::{ClientError, Clock, NotConfirmed, Outcome, SystemClock};
use crate::backoff::{DeadLetterReason, Decision, ResolvedPolicy};
use crate::crd::ErrorClass;
use crate::lock::Locked;
use crate::topology::Routes;

/// What happened to a message: the input of the retry decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure<'a> {
    /// Processing failed with `class` (`None`: unclassified, decided by the
    /// RetryPolicy's `classification.default`) and description `error`: the RetryPolicy
    /// decides between a retry tier and the dead-letter exchange.
    Failed {
        /// Error class, if known.
        class: Option<ErrorClass>,
        /// What went wrong (`dlq-last-error`).
        error: &'a str,
    },
    /// The message was never processed (it expired, or a full source queue dropped it):
    /// dead-lettered at once with `reason`, never retried.
    NotProcessed {
        /// `Expired` or `MaxLength`.
        reason: DeadLetterReason,
        /// What happened (`dlq-last-error`).
        error: &'a str,
    },
}

impl Failure<'_> {
    /// The error class, if any.
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            Failure::Failed { class, .. } => *class,
            Failure::NotProcessed { .. } => None,
        }
    }

    /// The description written to `dlq-last-error`.
    pub fn error(&self) -> &str {
        match self {
            Failure::Failed { error, .. } | Failure::NotProcessed { error, .. } => error,
        }
    }
}

/// Where the failed message was first published: `dlq-original-exchange` and
/// `dlq-original-routing-key` when the message does not carry them yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    /// Exchange it was published to (`""`: the default exchange).
    pub exchange: &'a str,
    /// Routing key it was published with.
    pub routing_key: &'a str,
}

/// A copy ready to publish: where to, its properties, and what it means once confirmed.
#[derive(Debug, Clone)]
pub struct Copy {
    /// Retry exchange or dead-letter exchange.
    pub exchange: ShortString,
    /// Tier name, or the dead-letter routing key of the failure's class.
    pub routing_key: ShortString,
    /// The original properties with the contract headers stamped.
    pub properties: BasicProperties,
    /// What the copy does once the broker confirms it.
    pub outcome: Outcome,
}

/// Decides and builds republished copies for one source queue's [`Routes`] and
/// [`ResolvedPolicy`]. Shareable (`&self`); the jitter generator is behind a mutex.
pub struct Republisher {
    routes: Routes,
    policy: ResolvedPolicy,
    rng: Mutex<StdRng>,
    clock: Box<dyn Clock>,
}

impl std::fmt::Debug for Republisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Republisher")
            .field("routes", &self.routes)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// `name` as an AMQP short string.
///
/// # Errors
/// [`ClientError::InvalidName`] when it is longer than 255 bytes.
pub(crate) fn short(name: &str) -> Result<ShortString, ClientError> {
    ShortString::try_new(name).map_err(|_| ClientError::InvalidName {
        name: name.to_string(),
    })
}

impl Republisher {
    /// Checks that `routes` (from [`crate::topology::plan`]) serve `policy`; uses an
    /// OS-seeded [`StdRng`] and the [`SystemClock`].
    ///
    /// # Errors
    /// [`ClientError::UnknownTier`] when a policy tier has no route,
    /// [`ClientError::InvalidName`] when a route's exchange or routing key is not a valid
    /// AMQP short string.
    pub fn new(routes: Routes, policy: ResolvedPolicy) -> Result<Self, ClientError> {
        if let Some(&tier_ms) = policy.tiers_ms.iter().find(|&&t| routes.tier(t).is_none()) {
            return Err(ClientError::UnknownTier { tier_ms });
        }
        short(&routes.retry_exchange)?;
        short(&routes.dead_letter_exchange)?;
        short(&routes.dead_letter_routing_key)?;
        for name in routes
            .tiers
            .iter()
            .map(|t| &t.name)
            .chain(routes.partitions.values())
        {
            short(name)?;
        }
        Ok(Republisher {
            routes,
            policy,
            rng: Mutex::new(StdRng::from_os_rng()),
            clock: Box::new(SystemClock),
        })
    }

    /// Replaces the random generator (reproducible jitter in tests).
    pub fn set_rng(&mut self, rng: StdRng) {
        self.rng = Mutex::new(rng);
    }

    /// Replaces the clock (ms since the Unix epoch).
    pub fn set_clock(&mut self, clock: Box<dyn Clock>) {
        self.clock = clock;
    }

    /// The routes copies go to.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// The policy deciding retries.
    pub fn policy(&self) -> &ResolvedPolicy {
        &self.policy
    }

    /// The copy of a message with `properties` that met `failure`, first delivered from
    /// `origin`: reads `dlq-retry-count`, `dlq-first-failed-at` and `dlq-last-delay-ms`
    /// ([`FailureState`]), decides ([`ResolvedPolicy::decide`], or dead-letter at once
    /// for [`Failure::NotProcessed`]) and stamps the headers
    /// ([`headers::republish_properties`]), without `CC`, `BCC` or a malformed `x-death`
    /// ([`without_hazards`]).
    ///
    /// # Errors
    /// [`ClientError::UnknownTier`] when the decided tier has no route (cannot happen
    /// with routes checked by [`Republisher::new`]).
    pub fn copy(
        &self,
        properties: &BasicProperties,
        failure: &Failure<'_>,
        origin: Origin<'_>,
    ) -> Result<Copy, ClientError> {
        let now_ms = self.clock.now_ms();
        let decision = match failure {
            Failure::Failed { class, .. } => {
                self.decide(*class, &FailureState::from_properties(properties), now_ms)
            }
            Failure::NotProcessed { reason, .. } => Decision::DeadLetter(*reason),
        };
        let class = failure.class();
        let (exchange, routing_key, action, outcome) = self.route(decision, class)?;
        let properties = without_hazards(headers::republish_properties(
            properties,
            &Stamp {
                class,
                error: failure.error(),
                now_ms,
                exchange: origin.exchange,
                routing_key: origin.routing_key,
                queue: &self.routes.source_queue,
                action,
            },
        ));
        Ok(Copy {
            exchange: short(exchange)?,
            routing_key: short(routing_key)?,
            properties,
            outcome,
        })
    }

    /// What the policy decides for a failure of `class` in `state` at `now_ms`.
    fn decide(&self, class: Option<ErrorClass>, state: &FailureState, now_ms: u64) -> Decision {
        let elapsed_ms = now_ms.saturating_sub(state.first_failed_at_ms.unwrap_or(now_ms));
        let mut rng = self.rng.locked();
        self.policy.decide(
            class,
            state.retry_count,
            elapsed_ms,
            state.last_delay_ms,
            &mut *rng,
        )
    }

    /// Exchange, routing key, header action and outcome of `decision` for a failure of
    /// `class`.
    ///
    /// # Errors
    /// [`ClientError::UnknownTier`] when the decided tier has no route.
    fn route(
        &self,
        decision: Decision,
        class: Option<ErrorClass>,
    ) -> Result<(&str, &str, Action, Outcome), ClientError> {
        Ok(match decision {
            Decision::Retry {
                attempt,
                delay_ms,
                tier_ms,
            } => {
                let tier = self
                    .routes
                    .tier(tier_ms)
                    .ok_or(ClientError::UnknownTier { tier_ms })?;
                (
                    self.routes.retry_exchange.as_str(),
                    tier.name.as_str(),
                    Action::Retry { attempt, delay_ms },
                    Outcome::Retried {
                        attempt,
                        tier: tier.name.clone(),
                        delay_ms,
                    },
                )
            }
            Decision::DeadLetter(reason) => (
                self.routes.dead_letter_exchange.as_str(),
                self.routes.dead_letter_key(class),
                Action::DeadLetter(reason),
                Outcome::DeadLettered { reason },
            ),
        })
    }
}

/// Headers that make RabbitMQ route a message by more routing keys than the one it is
/// published with (sender-selected distribution, RabbitMQ docs "Sender-selected
/// Distribution"): a copy goes only where the decision sends it.
pub const ROUTING_HEADERS: [&str; 2] = ["CC", "BCC"];

/// `properties` without [`ROUTING_HEADERS`] and without an `x-death` header RabbitMQ could
/// not have written: one that is not an array of tables whose `count`s are numbers.
/// RabbitMQ 3.x crashes the queue that dead-letters such a message (`rabbit_dead_letter`:
/// `function_clause` on an entry that is not a table, `badarith` on a `count` that is
/// not a number; a persistent message crashes it again at each restart, measured on
/// 3.10.8), and a copy goes to a tier that dead-letters it. 4.x ignores a client's
/// `x-death`. The retry state is in the contract's own headers, never in `x-death`.
pub fn without_hazards(properties: BasicProperties) -> BasicProperties {
    let Some(headers) = properties.headers().as_ref() else {
        return properties;
    };
    let map = headers.inner();
    let hazard = ROUTING_HEADERS.iter().any(|h| map.contains_key(*h))
        || map.get("x-death").is_some_and(|v| !x_death_well_formed(v));
    if !hazard {
        return properties;
    }
    let mut map = map.clone();
    for name in ROUTING_HEADERS {
        map.remove(name);
    }
    if map.get("x-death").is_some_and(|v| !x_death_well_formed(v)) {
        map.remove("x-death");
    }
    properties.with_headers(FieldTable::from(map))
}

/// An `x-death` value as RabbitMQ writes it: an array of tables, each `count` a number.
fn x_death_well_formed(value: &AMQPValue) -> bool {
    let AMQPValue::FieldArray(entries) = value else {
        return false;
    };
    entries.as_slice().iter().all(|entry| match entry {
        AMQPValue::FieldTable(t) => t.inner().get("count").is_none_or(|c| {
            matches!(
                c,
                AMQPValue::ShortShortInt(_)
                    | AMQPValue::ShortShortUInt(_)
                    | AMQPValue::ShortInt(_)
                    | AMQPValue::ShortUInt(_)
                    | AMQPValue::LongInt(_)
                    | AMQPValue::LongUInt(_)
                    | AMQPValue::LongLongInt(_)
                    | AMQPValue::Float(_)
                    | AMQPValue::Double(_)
                    | AMQPValue::Timestamp(_)
            )
        }),
        _ => false,
    })
}

/// Bytes of the AMQP content header frame that carries `properties`: the frame header
/// (type, channel, size: 7), class id, weight and body size (12), the encoded properties
/// and the frame end (1) (AMQP 0-9-1, sections 4.2.3 and 4.2.6.1). `None` when lapin
/// cannot encode them.
pub fn header_frame_bytes(properties: &BasicProperties) -> Option<usize> {
    const FRAME_OVERHEAD: usize = 7 + 12 + 1;
    let written = gen_properties(properties)(Vec::new().into()).ok()?;
    usize::try_from(written.position)
        .ok()
        .map(|n| n + FRAME_OVERHEAD)
}

/// Whether `copy` can be sent on a connection whose negotiated `frame_max` is `frame_max`
/// bytes (0: no limit). AMQP puts all properties in one content header frame, and a frame
/// larger than `frame_max` makes RabbitMQ close the whole connection (`FRAME_ERROR`),
/// with every other message in flight on it; so such a copy is not sent at all. Its
/// original is given back like any copy that could not be published: a message whose
/// headers come within a few hundred bytes of `frame_max` (128 KiB by default) cannot
/// be republished with the contract's headers.
///
/// # Errors
/// [`ClientError::TooLarge`] when the content header frame would exceed `frame_max`.
pub fn check_frame(copy: &Copy, frame_max: u32) -> Result<(), ClientError> {
    let Some(bytes) = header_frame_bytes(&copy.properties) else {
        return Ok(());
    };
    let limit = usize::try_from(frame_max).unwrap_or(usize::MAX);
    if frame_max != 0 && bytes > limit {
        return Err(ClientError::TooLarge { bytes, frame_max });
    }
    Ok(())
}

/// Publishes `copy` with `body` on `channel` (which must be in confirm mode), with
/// `mandatory`, and waits for the broker's confirm.
///
/// Returns the copy's [`Outcome`] when the broker acked it without returning it.
///
/// # Errors
/// [`ClientError::Publish`] (channel error), [`ClientError::Unroutable`] (returned),
/// [`ClientError::NotConfirmed`] (nacked, or confirms off).
pub async fn publish_confirmed(
    channel: &Channel,
    copy: Copy,
    body: &[u8],
) -> Result<Outcome, ClientError> {
    let confirmation = channel
        .basic_publish(
            copy.exchange.clone(),
            copy.routing_key.clone(),
            BasicPublishOptions {
                mandatory: true,
                immediate: false,
            },
            body,
            copy.properties,
        )
        .await
        .map_err(ClientError::Publish)?
        .await
        .map_err(ClientError::Publish)?;
    confirmed(
        copy.exchange.as_str(),
        copy.routing_key.as_str(),
        copy.outcome,
        confirmation,
    )
}

/// The outcome when the broker acked the copy without returning it.
///
/// # Errors
/// [`ClientError::Unroutable`] for a returned copy, [`ClientError::NotConfirmed`] for a
/// nack or a channel without publisher confirms.
pub(crate) fn confirmed(
    exchange: &str,
    routing_key: &str,
    outcome: Outcome,
    confirmation: Confirmation,
) -> Result<Outcome, ClientError> {
    match confirmation {
        Confirmation::Ack(None) => {
            tracing::debug!(
                ?outcome,
                exchange,
                routing_key,
                "failed message republished"
            );
            Ok(outcome)
        }
        Confirmation::Ack(Some(_)) => Err(ClientError::Unroutable {
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
        }),
        Confirmation::Nack(returned) => Err(ClientError::NotConfirmed {
            reason: match returned {
                Some(r) => NotConfirmed::NackedAfterReturn {
                    reply_code: r.reply_code,
                    reply_text: r.reply_text.to_string(),
                },
                None => NotConfirmed::Nacked,
            },
        }),
        Confirmation::NotRequested => Err(ClientError::NotConfirmed {
            reason: NotConfirmed::ConfirmsOff,
        }),
    }
}

/// Settles the original `delivery` after its copy's `published` result: ack when the
/// copy was confirmed, otherwise nack with `requeue = true` so the broker delivers it
/// again (a failed nack is logged: the broker redelivers it when its channel closes).
///
/// Returns the outcome once the original is acked.
///
/// # Errors
/// The publish error (the original was nacked), or [`ClientError::Ack`] /
/// [`ClientError::AckNotSent`] when the copy is on its way but the original will be
/// redelivered too (at-least-once).
pub async fn settle(
    delivery: &lapin::message::Delivery,
    published: Result<Outcome, ClientError>,
) -> Result<Outcome, ClientError> {
    match published {
        Ok(outcome) => match delivery.acker.ack(BasicAckOptions::default()).await {
            Ok(true) => Ok(outcome),
            Ok(false) => Err(ClientError::AckNotSent),
            Err(e) => Err(ClientError::Ack(e)),
        },
        Err(e) => {
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            match delivery.acker.nack(requeue).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "could not nack the original delivery (channel closed?); the broker redelivers it"
                ),
                Err(nack) => tracing::warn!(
                    error = %nack,
                    "nacking the original delivery failed; the broker redelivers it when its channel closes"
                ),
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::{AMQPValue, FieldTable};

    use super::*;

    fn outcome() -> Outcome {
        Outcome::DeadLettered {
            reason: DeadLetterReason::NonRetryable,
        }
    }

    /// A republisher for source `orders` with one tier of 1 s, `maxRetries: 2` and
    /// `classification.default` = `default`, on a fixed clock and seed.
    fn republisher(default: &str) -> Republisher {
        let spec: crate::crd::RetryPolicySpec = serde_json::from_value(serde_json::json!({
            "maxRetries": 2,
            "tiers": ["1s"],
            "classification": {"default": default},
        }))
        .expect("spec");
        let policy = ResolvedPolicy::from_spec(&spec).expect("policy");
        let routes = Routes {
            source_queue: "orders".into(),
            retry_exchange: "orders.retry".into(),
            tiers: vec![crate::topology::TierRoute {
                delay_ms: 1000,
                name: "1s".into(),
                queue: "orders.retry.1s".into(),
            }],
            dead_letter_exchange: "orders.dlx".into(),
            dead_letter_routing_key: "orders".into(),
            partitions: [(ErrorClass::Timeout, "orders.dlq.timeout".to_string())].into(),
            inbox: Some("orders.router".into()),
        };
        let mut r = Republisher::new(routes, policy).expect("routes serve the policy");
        r.set_rng(StdRng::seed_from_u64(7));
        r.set_clock(Box::new(|| 5_000u64));
        r
    }

    const ORIGIN: Origin<'static> = Origin {
        exchange: "shop",
        routing_key: "orders.created",
    };

    fn header(p: &BasicProperties, name: &str) -> Option<lapin::types::AMQPValue> {
        p.headers()
            .as_ref()
            .and_then(|h| h.inner().get(name).cloned())
    }

    /// A message that already failed once with class Timeout.
    fn retried_once() -> BasicProperties {
        let first = republisher("Retry")
            .copy(
                &BasicProperties::default(),
                &Failure::Failed {
                    class: Some(ErrorClass::Timeout),
                    error: "timed out",
                },
                ORIGIN,
            )
            .expect("copy");
        first.properties
    }

    #[test]
    fn an_unclassified_failure_follows_the_classification_default() {
        let failure = Failure::Failed {
            class: None,
            error: "rejected",
        };
        let retried = republisher("Retry")
            .copy(&retried_once(), &failure, ORIGIN)
            .expect("copy");
        assert_eq!(retried.exchange.as_str(), "orders.retry");
        assert_eq!(retried.routing_key.as_str(), "1s");
        assert!(matches!(
            retried.outcome,
            Outcome::Retried { attempt: 2, .. }
        ));
        // The stale class of the earlier failure is gone.
        assert_eq!(
            header(&retried.properties, super::headers::ERROR_CLASS),
            None
        );

        let dead = republisher("DeadLetter")
            .copy(&BasicProperties::default(), &failure, ORIGIN)
            .expect("copy");
        assert_eq!(dead.exchange.as_str(), "orders.dlx");
        assert_eq!(
            dead.routing_key.as_str(),
            "orders",
            "unclassified: the default dead-letter queue"
        );
        assert_eq!(
            dead.outcome,
            Outcome::DeadLettered {
                reason: DeadLetterReason::NonRetryable
            }
        );
    }

    #[test]
    fn a_message_never_processed_is_dead_lettered_at_once_with_its_reason() {
        let copy = republisher("Retry")
            .copy(
                &BasicProperties::default(),
                &Failure::NotProcessed {
                    reason: DeadLetterReason::Expired,
                    error: "expired",
                },
                ORIGIN,
            )
            .expect("copy");
        assert_eq!(copy.exchange.as_str(), "orders.dlx");
        assert_eq!(
            copy.outcome,
            Outcome::DeadLettered {
                reason: DeadLetterReason::Expired
            }
        );
        assert_eq!(
            header(&copy.properties, super::headers::REASON),
            Some(lapin::types::AMQPValue::LongString("Expired".into()))
        );
        assert_eq!(
            header(&copy.properties, super::headers::ORIGINAL_EXCHANGE),
            Some(lapin::types::AMQPValue::LongString("shop".into()))
        );
    }

    /// Properties with `headers` (name, value).
    fn with_headers(pairs: Vec<(&str, AMQPValue)>) -> BasicProperties {
        let map: std::collections::BTreeMap<ShortString, AMQPValue> = pairs
            .into_iter()
            .map(|(k, v)| (ShortString::from(k), v))
            .collect();
        BasicProperties::default().with_headers(FieldTable::from(map))
    }

    fn array(values: Vec<AMQPValue>) -> AMQPValue {
        AMQPValue::FieldArray(values.into())
    }

    fn entry(count: AMQPValue) -> AMQPValue {
        AMQPValue::FieldTable(FieldTable::from(std::collections::BTreeMap::from([
            (
                ShortString::from("queue"),
                AMQPValue::LongString("q".into()),
            ),
            (
                ShortString::from("reason"),
                AMQPValue::LongString("expired".into()),
            ),
            (ShortString::from("count"), count),
        ])))
    }

    #[test]
    fn a_copy_carries_neither_cc_nor_bcc_nor_a_malformed_x_death() {
        let keys = array(vec![AMQPValue::LongString("2s".into())]);
        let malformed = [
            array(vec![AMQPValue::LongLongInt(1)]),
            array(vec![
                entry(AMQPValue::LongLongInt(1)),
                AMQPValue::LongString("x".into()),
            ]),
            array(vec![entry(AMQPValue::LongString("7".into()))]),
            AMQPValue::LongString("a string".into()),
        ];
        let failure = Failure::Failed {
            class: Some(ErrorClass::Timeout),
            error: "timed out",
        };
        for x_death in malformed {
            let original = with_headers(vec![
                ("CC", keys.clone()),
                ("BCC", keys.clone()),
                ("x-death", x_death.clone()),
                ("tenant", AMQPValue::LongString("acme".into())),
            ]);
            let copy = republisher("Retry")
                .copy(&original, &failure, ORIGIN)
                .expect("copy");
            for gone in ["CC", "BCC", "x-death"] {
                assert_eq!(
                    header(&copy.properties, gone),
                    None,
                    "{gone} of {x_death:?}"
                );
            }
            assert!(header(&copy.properties, "tenant").is_some());
            assert!(header(&copy.properties, super::headers::RETRY_COUNT).is_some());
        }
        // What RabbitMQ writes is kept as it is, with any integer or float count.
        for count in [
            AMQPValue::LongLongInt(3),
            AMQPValue::LongInt(3),
            AMQPValue::ShortShortUInt(3),
            AMQPValue::Double(3.0),
        ] {
            let x_death = array(vec![entry(count), entry(AMQPValue::LongLongInt(1))]);
            let original = with_headers(vec![("x-death", x_death.clone())]);
            let copy = republisher("Retry")
                .copy(&original, &failure, ORIGIN)
                .expect("copy");
            assert_eq!(header(&copy.properties, "x-death"), Some(x_death));
        }
    }

    #[test]
    fn a_copy_larger_than_one_frame_is_refused_before_it_is_sent() {
        let blob =
            |n: usize| with_headers(vec![("blob", AMQPValue::LongString("b".repeat(n).into()))]);
        // flags (2) + headers table (4 + key 1 + 4 + type 1 + length 4) + n, + 20.
        assert_eq!(header_frame_bytes(&blob(100)), Some(136));
        assert_eq!(header_frame_bytes(&BasicProperties::default()), Some(22));
        let copy = |properties| Copy {
            exchange: "orders.dlx".into(),
            routing_key: "orders".into(),
            properties,
            outcome: outcome(),
        };
        assert!(check_frame(&copy(blob(131_072 - 36)), 131_072).is_ok());
        let err = check_frame(&copy(blob(131_072 - 35)), 131_072).expect_err("too large");
        assert!(matches!(
            err,
            ClientError::TooLarge {
                bytes: 131_073,
                frame_max: 131_072
            }
        ));
        assert_eq!(err.metric_label(), "too_large");
        assert!(err.to_string().contains("131073 bytes"), "{err}");
        // frame_max 0: no limit was negotiated.
        assert!(check_frame(&copy(blob(200_000)), 0).is_ok());
    }

    #[test]
    fn unconfirmed_copies_say_why() {
        let check = |c| confirmed("orders.dlx", "orders", outcome(), c);
        assert_eq!(check(Confirmation::Ack(None)).expect("acked"), outcome());
        let text = |c| check(c).expect_err("not confirmed").to_string();
        assert_eq!(
            text(Confirmation::Nack(None)),
            "the broker did not confirm the copy: broker nacked the publish"
        );
        assert_eq!(
            text(Confirmation::NotRequested),
            "the broker did not confirm the copy: publisher confirms are not enabled on the channel"
        );
        let returned = NotConfirmed::NackedAfterReturn {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
        };
        assert_eq!(returned.to_string(), "nack after return: 312 NO_ROUTE");
    }
}
