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
pub mod republish;

use lapin::options::ConfirmSelectOptions;
use lapin::Channel;
use rand::rngs::StdRng;

use crate::backoff::{DeadLetterReason, ResolvedPolicy};
use crate::crd::ErrorClass;
use crate::topology::Routes;

pub use classify::{classify, classify_http_status, classify_io, classify_message};
pub use republish::{publish_confirmed, settle, Copy, Failure, Origin, Republisher};

/// Source of the current time in milliseconds since the Unix epoch. Implemented by
/// [`SystemClock`] and by any `Fn() -> u64 + Send + Sync` (handy in tests).
pub trait Clock: Send + Sync {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system wall clock ([`crate::clock::now_ms`], the crate's one clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        crate::clock::now_ms()
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
    /// The copy's properties (its headers with the contract's) do not fit in one AMQP
    /// frame: the broker would close the whole connection (`FRAME_ERROR`), so it was not
    /// published ([`republish::check_frame`]).
    #[error("the copy's content header frame would be {bytes} bytes, more than the connection's frame_max of {frame_max} bytes (AMQP puts all properties and headers in one frame); not published")]
    TooLarge {
        /// Size of the copy's content header frame, bytes.
        bytes: usize,
        /// The connection's negotiated `frame_max`, bytes.
        frame_max: u32,
    },
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
            ClientError::TooLarge { .. } => "too_large",
        }
    }
}

/// Republishes failed messages to their retry tier or to the dead-letter exchange
/// (docs/ARCHITECTURE.md, "Broker topology"). Cheap to share behind an `Arc`;
/// `handle_failure` takes `&self`. The decision and the copy are [`Republisher`]'s, the
/// same code the retry router ([`crate::router`]) runs.
#[derive(Debug)]
pub struct RetryHandler {
    channel: Channel,
    republisher: Republisher,
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
        let republisher = Republisher::new(routes, policy)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(ClientError::ConfirmSelect)?;
        Ok(RetryHandler {
            channel,
            republisher,
        })
    }

    /// Replaces the random generator (e.g. `StdRng::seed_from_u64(7)` for reproducible
    /// jitter).
    pub fn with_rng(mut self, rng: StdRng) -> Self {
        self.republisher.set_rng(rng);
        self
    }

    /// Replaces the clock (ms since the Unix epoch), e.g. `|| 1_000` in tests.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.republisher.set_clock(Box::new(clock));
        self
    }

    /// The routes messages are republished to.
    pub fn routes(&self) -> &Routes {
        self.republisher.routes()
    }

    /// The policy deciding retries.
    pub fn policy(&self) -> &ResolvedPolicy {
        self.republisher.policy()
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
        let failure = Failure::Failed {
            class: Some(class),
            error,
        };
        let origin = Origin {
            exchange: delivery.exchange.as_str(),
            routing_key: delivery.routing_key.as_str(),
        };
        let published = match self
            .republisher
            .copy(&delivery.properties, &failure, origin)
        {
            Ok(copy) => publish_confirmed(&self.channel, copy, &delivery.data).await,
            Err(e) => Err(e),
        };
        settle(delivery, published).await
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
    fn closures_are_clocks() {
        let clock = || 42u64;
        assert_eq!(Clock::now_ms(&clock), 42);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
