//! Consumer helper for app-assisted retries (docs/ARCHITECTURE.md, "Message header contract").
//!
//! A consumer that fails a message hands it to [`RetryHandler::handle_failure`] with an
//! [`ErrorClass`] (its own, or one from [`classify()`]). The handler asks the
//! [`ResolvedPolicy`] what to do, republishes a copy — body untouched, every property
//! kept, delivery mode persistent, contract headers stamped (see [`headers`]) — either to
//! the retry exchange with the tier's name as routing key or to the dead-letter exchange,
//! waits for the publisher confirm, and only then acks the original delivery. When the
//! copy is not confirmed (nack, unroutable, channel error) the original is nacked with
//! `requeue = true` instead, so a message is never lost; it may be duplicated (for
//! example when the ack after a confirmed publish fails), so consumers must be
//! idempotent (`message_id` is kept).
//!
//! Times are milliseconds since the Unix epoch and delays milliseconds throughout.
//!
//! ```no_run
//! # async fn demo(
//! #     channel: lapin::Channel,
//! #     routes: dlq_operator::topology::Routes,
//! #     policy: dlq_operator::backoff::ResolvedPolicy,
//! #     delivery: lapin::message::Delivery,
//! # ) -> Result<(), dlq_operator::client::ClientError> {
//! use dlq_operator::client::RetryHandler;
//! use dlq_operator::crd::ErrorClass;
//!
//! let handler = RetryHandler::new(channel, routes, policy).await?;
//! // … processing `delivery` failed with a timeout:
//! let outcome = handler
//!     .handle_failure(&delivery, ErrorClass::Timeout, "billing call timed out")
//!     .await?;
//! println!("{outcome:?}");
//! # Ok(())
//! # }
//! ```

mod classify;
pub mod headers;

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use lapin::options::{
    BasicAckOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
};
use lapin::types::ShortString;
use lapin::Channel;
use lapin::Confirmation;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::backoff::{DeadLetterReason, Decision, ResolvedPolicy};
use crate::crd::ErrorClass;
use crate::topology::Routes;

pub use classify::{classify, classify_http_status, classify_io, classify_message};
use headers::{Action, FailureState, Stamp};

/// Source of the current time in milliseconds since the Unix epoch. Implemented by
/// [`SystemClock`] and by any `Fn() -> u64 + Send + Sync` (handy in tests).
pub trait Clock: Send + Sync {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

impl<F: Fn() -> u64 + Send + Sync> Clock for F {
    fn now_ms(&self) -> u64 {
        self()
    }
}

/// What [`RetryHandler::handle_failure`] did with a message (the copy is confirmed by the
/// broker and the original acked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Republished to the retry exchange.
    Retried {
        /// Retry number, 1-based (the new `dlq-retry-count`).
        attempt: u32,
        /// Tier name, e.g. `5s` (the routing key on the retry exchange).
        tier: String,
        /// Computed delay in ms (the message waits the tier's delay, ≥ this unless it is
        /// the last tier).
        delay_ms: u64,
    },
    /// Republished to the dead-letter exchange.
    DeadLettered {
        /// Why (the `dlq-reason` header).
        reason: DeadLetterReason,
    },
}

/// Why [`RetryHandler`] could not do its job. Unless stated otherwise the original
/// delivery was nacked with `requeue = true` (it will be redelivered; nothing is lost).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `confirm.select` failed when building the handler.
    #[error("cannot put the channel in confirm mode: {0}")]
    ConfirmSelect(#[source] lapin::Error),
    /// The policy has a tier (ms) with no route in [`Routes`] (routes and policy do not
    /// belong together, or the plan is stale).
    #[error("tier of {tier_ms} ms has no route in the topology")]
    UnknownTier {
        /// Tier delay, ms.
        tier_ms: u64,
    },
    /// An exchange name or routing key is longer than AMQP's 255 bytes.
    #[error("{name:?} is longer than 255 bytes")]
    InvalidName {
        /// The offending name.
        name: String,
    },
    /// The delivery was already acked/nacked or its channel is closed: nothing was
    /// published (the broker redelivers it if it was not acknowledged).
    #[error("the delivery was already acknowledged or its channel is closed")]
    DeliveryUnusable,
    /// Publishing or waiting for the confirm failed on the channel.
    #[error("publishing the copy failed: {0}")]
    Publish(#[source] lapin::Error),
    /// The broker did not confirm the copy (nack, e.g. a full queue with
    /// `reject-publish`), or confirms are off.
    #[error("the broker did not confirm the copy: {reason}")]
    NotConfirmed {
        /// What happened.
        reason: NotConfirmed,
    },
    /// The copy was returned: no queue is bound for it.
    #[error("the copy was unroutable: exchange {exchange:?}, routing key {routing_key:?}")]
    Unroutable {
        /// Exchange published to.
        exchange: String,
        /// Routing key used.
        routing_key: String,
    },
    /// The copy was confirmed but acking the original failed: the original will be
    /// redelivered, so the message now exists twice (at-least-once).
    #[error("the copy was published but acking the original failed: {0}")]
    Ack(#[source] lapin::Error),
    /// The copy was confirmed but the original could no longer be acked (its channel
    /// closed meanwhile): it will be redelivered, so the message exists twice.
    #[error("the copy was published but the original could no longer be acked")]
    AckNotSent,
}

/// Why the broker did not confirm a copy ([`ClientError::NotConfirmed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotConfirmed {
    /// The broker nacked the publish (e.g. a full queue with `reject-publish`).
    #[error("broker nacked the publish")]
    Nacked,
    /// The broker returned the copy, then nacked it.
    #[error("nack after return: {reply_code} {reply_text}")]
    NackedAfterReturn {
        /// AMQP reply code of the return (e.g. 312 `NO_ROUTE`).
        reply_code: u16,
        /// Its reply text.
        reply_text: String,
    },
    /// Publisher confirms are not enabled on the channel.
    #[error("publisher confirms are not enabled on the channel")]
    ConfirmsOff,
}

impl ClientError {
    /// Short, stable label for metrics (`error` label values).
    pub fn metric_label(&self) -> &'static str {
        match self {
            ClientError::ConfirmSelect(_) => "confirm_select",
            ClientError::UnknownTier { .. } => "unknown_tier",
            ClientError::InvalidName { .. } => "invalid_name",
            ClientError::DeliveryUnusable => "delivery_unusable",
            ClientError::Publish(_) => "publish",
            ClientError::NotConfirmed { .. } => "not_confirmed",
            ClientError::Unroutable { .. } => "unroutable",
            ClientError::Ack(_) => "ack",
            ClientError::AckNotSent => "ack_not_sent",
        }
    }
}

/// Republishes failed messages to their retry tier or to the dead-letter exchange
/// (docs/ARCHITECTURE.md, "Broker topology"). Cheap to share behind an `Arc`; `handle_failure` takes `&self`.
pub struct RetryHandler {
    channel: Channel,
    routes: Routes,
    policy: ResolvedPolicy,
    rng: Mutex<StdRng>,
    clock: Box<dyn Clock>,
}

impl std::fmt::Debug for RetryHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryHandler")
            .field("routes", &self.routes)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

fn short(name: &str) -> Result<ShortString, ClientError> {
    ShortString::try_new(name).map_err(|_| ClientError::InvalidName {
        name: name.to_string(),
    })
}

impl RetryHandler {
    /// Builds a handler publishing on `channel`, which it puts in confirm mode
    /// (`confirm.select`; use a channel of its own or one that is only used for confirmed
    /// publishing). `routes` come from [`crate::topology::plan`] for the same `policy`.
    /// Uses an OS-seeded [`StdRng`] and the [`SystemClock`]; see
    /// [`RetryHandler::with_rng`] and [`RetryHandler::with_clock`].
    ///
    /// # Errors
    /// [`ClientError::UnknownTier`] when a policy tier has no route,
    /// [`ClientError::InvalidName`] when a route's exchange or routing key is not a valid
    /// AMQP short string, [`ClientError::ConfirmSelect`] when `confirm.select` fails.
    pub async fn new(
        channel: Channel,
        routes: Routes,
        policy: ResolvedPolicy,
    ) -> Result<Self, ClientError> {
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
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(ClientError::ConfirmSelect)?;
        Ok(RetryHandler {
            channel,
            routes,
            policy,
            rng: Mutex::new(StdRng::from_os_rng()),
            clock: Box::new(SystemClock),
        })
    }

    /// Replaces the random generator (e.g. `StdRng::seed_from_u64(7)` for reproducible
    /// jitter).
    pub fn with_rng(mut self, rng: StdRng) -> Self {
        self.rng = Mutex::new(rng);
        self
    }

    /// Replaces the clock (ms since the Unix epoch), e.g. `|| 1_000` in tests.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// The routes messages are republished to.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// The policy deciding retries.
    pub fn policy(&self) -> &ResolvedPolicy {
        &self.policy
    }

    /// The publishing channel (in confirm mode).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Handles a failed `delivery` whose processing failed with `class` and description
    /// `error`.
    ///
    /// Reads `dlq-retry-count` (0 if absent), `dlq-first-failed-at` (now if absent) and
    /// `dlq-last-delay-ms` from the delivery, asks
    /// [`ResolvedPolicy::decide`], and republishes (mandatory, with publisher confirm):
    /// - retry → retry exchange, routing key = tier name, `dlq-retry-count` + 1 and
    ///   `dlq-last-delay-ms` set;
    /// - dead-letter → dead-letter exchange, routing key
    ///   [`Routes::dead_letter_key`]`(Some(class))`, `dlq-reason` set.
    ///
    /// Headers are built by [`headers::republish_properties`]. Only when the broker acks
    /// the copy and did not return it is the original acked.
    ///
    /// Returns the [`Outcome`] once the copy is confirmed and the original acked.
    ///
    /// # Errors
    /// [`ClientError::Publish`], [`ClientError::NotConfirmed`],
    /// [`ClientError::Unroutable`], [`ClientError::UnknownTier`] or
    /// [`ClientError::InvalidName`]: the original was nacked with `requeue = true` (not
    /// acked). [`ClientError::DeliveryUnusable`]: nothing was done.
    /// [`ClientError::Ack`] / [`ClientError::AckNotSent`]: the copy is on its way but the
    /// original will be redelivered too.
    pub async fn handle_failure(
        &self,
        delivery: &lapin::message::Delivery,
        class: ErrorClass,
        error: &str,
    ) -> Result<Outcome, ClientError> {
        if !delivery.acker.usable() {
            return Err(ClientError::DeliveryUnusable);
        }
        match self.republish(delivery, class, error).await {
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

    /// Decides, publishes and waits for the confirm; never acks or nacks.
    async fn republish(
        &self,
        delivery: &lapin::message::Delivery,
        class: ErrorClass,
        error: &str,
    ) -> Result<Outcome, ClientError> {
        let now_ms = self.clock.now_ms();
        let state = FailureState::from_properties(&delivery.properties);
        let route = self.route(self.decide(class, &state, now_ms), class)?;
        let properties = headers::republish_properties(
            &delivery.properties,
            &Stamp {
                class,
                error,
                now_ms,
                exchange: delivery.exchange.as_str(),
                routing_key: delivery.routing_key.as_str(),
                queue: &self.routes.source_queue,
                action: route.action,
            },
        );
        let confirmation = self
            .channel
            .basic_publish(
                short(route.exchange)?,
                short(route.routing_key)?,
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                &delivery.data,
                properties,
            )
            .await
            .map_err(ClientError::Publish)?
            .await
            .map_err(ClientError::Publish)?;
        route.confirmed(confirmation)
    }

    /// What the policy decides for a failure of `class` in `state` at `now_ms`.
    fn decide(&self, class: ErrorClass, state: &FailureState, now_ms: u64) -> Decision {
        let elapsed_ms = now_ms.saturating_sub(state.first_failed_at_ms.unwrap_or(now_ms));
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        self.policy.decide(
            class,
            state.retry_count,
            elapsed_ms,
            state.last_delay_ms,
            &mut *rng,
        )
    }

    /// Where `decision` sends the copy of a failure of `class`.
    ///
    /// # Errors
    /// [`ClientError::UnknownTier`] when the decided tier has no route.
    fn route(&self, decision: Decision, class: ErrorClass) -> Result<Route<'_>, ClientError> {
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
                Route {
                    exchange: self.routes.retry_exchange.as_str(),
                    routing_key: tier.name.as_str(),
                    action: Action::Retry { attempt, delay_ms },
                    outcome: Outcome::Retried {
                        attempt,
                        tier: tier.name.clone(),
                        delay_ms,
                    },
                }
            }
            Decision::DeadLetter(reason) => Route {
                exchange: self.routes.dead_letter_exchange.as_str(),
                routing_key: self.routes.dead_letter_key(Some(class)),
                action: Action::DeadLetter(reason),
                outcome: Outcome::DeadLettered { reason },
            },
        })
    }
}

/// Where a copy goes and what that means: the exchange and routing key it is published
/// with, the headers' [`Action`], and the [`Outcome`] once confirmed.
struct Route<'a> {
    exchange: &'a str,
    routing_key: &'a str,
    action: Action,
    outcome: Outcome,
}

impl Route<'_> {
    /// The outcome when the broker acked the copy without returning it.
    ///
    /// # Errors
    /// [`ClientError::Unroutable`] for a returned copy, [`ClientError::NotConfirmed`] for
    /// a nack or a channel without publisher confirms.
    fn confirmed(self, confirmation: Confirmation) -> Result<Outcome, ClientError> {
        let Route {
            exchange,
            routing_key,
            outcome,
            ..
        } = self;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handler can be shared across tasks and its future spawned on tokio.
    #[allow(dead_code)]
    fn handler_and_future_are_send(h: &RetryHandler, d: &lapin::message::Delivery) {
        fn is_send_sync<T: Send + Sync>(_: &T) {}
        fn is_send<T: Send>(_: &T) {}
        is_send_sync(h);
        is_send(&h.handle_failure(d, ErrorClass::Timeout, "e"));
    }

    #[test]
    fn metric_labels_are_distinct() {
        let errors = [
            ClientError::UnknownTier { tier_ms: 1 },
            ClientError::InvalidName { name: "n".into() },
            ClientError::DeliveryUnusable,
            ClientError::NotConfirmed {
                reason: NotConfirmed::Nacked,
            },
            ClientError::Unroutable {
                exchange: "x".into(),
                routing_key: "k".into(),
            },
            ClientError::AckNotSent,
        ];
        let mut labels: Vec<&str> = errors.iter().map(ClientError::metric_label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), errors.len());
    }

    #[test]
    fn unconfirmed_copies_say_why() {
        let route = || Route {
            exchange: "orders.dlx",
            routing_key: "orders",
            action: Action::DeadLetter(DeadLetterReason::NonRetryable),
            outcome: Outcome::DeadLettered {
                reason: DeadLetterReason::NonRetryable,
            },
        };
        assert_eq!(
            route().confirmed(Confirmation::Ack(None)).expect("acked"),
            Outcome::DeadLettered {
                reason: DeadLetterReason::NonRetryable
            }
        );
        let text = |c| route().confirmed(c).expect_err("not confirmed").to_string();
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

    #[test]
    fn closures_are_clocks() {
        let clock = || 42u64;
        assert_eq!(Clock::now_ms(&clock), 42);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
