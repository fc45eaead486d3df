//! One router for one DeadLetterQueue's inbox: consume, decide, republish with a
//! publisher confirm, ack after the confirm; reconnect after a failure; drain on stop.
//!
//! The router consumes `<source>.router` only while the queue's ownership record names
//! its DeadLetterQueue (`check_owner`): a queue of that name that is another
//! DeadLetterQueue's (its source or dead-letter queue) is never taken, whatever process
//! runs the router and whether or not its apply succeeded.

use std::time::Duration;

use futures::StreamExt;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::Channel;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::incoming::{self, Delivered};
use super::metrics::RouterMetrics;
use crate::backoff::ResolvedPolicy;
use crate::broker::{BrokerConnection, BrokerError};
use crate::client::republish::check_frame;
use crate::client::{publish_confirmed, settle, ClientError, Republisher};
use crate::crd::RouterSpec;
use crate::rabbitmq::{amqp, ownership, RabbitMq};
use crate::reconcile::Prepared;
use crate::topology::Routes;

/// Longest pause between reconnection attempts (s): the pause doubles from 1 s after each
/// failed attempt up to this.
pub const MAX_RECONNECT_DELAY_S: u64 = 30;

/// Pause (ms) before a message that could not be moved is given back to the inbox: the
/// worker slot holds it meanwhile. Given back at once, the broker would redeliver it at
/// once to another idle slot, so a refused route would be tried up to `prefetch` times a
/// second; held, each such message is tried at most once per pause, whatever the
/// prefetch. A stop cuts the pause short.
pub const FAILURE_PAUSE_MS: u64 = 1_000;

/// Pause (ms) between the last ack of a drain and the closing of the channel. A quorum
/// inbox applies acks through its Raft log, and RabbitMQ's quorum-queue client holds
/// back the settlements beyond a small number not yet applied; those still held back
/// when the channel closes are dropped, so their messages would go back to the inbox and
/// be moved a second time (seen with prefetch 1,000 on RabbitMQ 3.10.8:
/// `tests/router_rabbitmq.rs`, `a_router_stopped_half_way…`). The pause lets them be
/// applied; a crash still gives at-least-once, never a loss.
pub const DRAIN_SETTLE_MS: u64 = 1_000;

/// Everything a router needs for one DeadLetterQueue in router mode.
#[derive(Clone)]
pub struct Target {
    /// The DeadLetterQueue's namespace.
    pub namespace: String,
    /// The DeadLetterQueue's name.
    pub name: String,
    /// Broker connection settings (from its Secret).
    pub connection: BrokerConnection,
    /// Virtual host.
    pub vhost: String,
    /// Where copies go; `routes.inbox` is the inbox consumed.
    pub routes: Routes,
    /// The resolved RetryPolicy.
    pub policy: ResolvedPolicy,
    /// AMQP prefetch on the inbox: deliveries worked on at once.
    pub prefetch: u16,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("inbox", &self.routes.inbox)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// The router target of a prepared DeadLetterQueue whose `spec.router` is `router`;
    /// `None` unless it is in router mode.
    pub fn of(prepared: &Prepared, router: &RouterSpec) -> Option<Target> {
        prepared.topology.routes.inbox.as_ref()?;
        let (namespace, name) = prepared
            .key
            .split_once('/')
            .unwrap_or(("", prepared.key.as_str()));
        Some(Target {
            namespace: namespace.to_string(),
            name: name.to_string(),
            connection: prepared.connection.clone(),
            vhost: prepared.topology.vhost.clone(),
            routes: prepared.topology.routes.clone(),
            policy: prepared.policy.clone(),
            prefetch: router.prefetch,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A digest of everything the router's behaviour depends on (connection with its
    /// credentials, vhost, routes, policy, prefetch): a running router is restarted only
    /// when it changes. Never shown (it covers the password).
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for uri in self
            .connection
            .amqp_uris_with_credentials_for_vhost(&self.vhost)
        {
            h.update(uri.as_bytes());
        }
        h.update(format!("{:?}", self.connection).as_bytes());
        h.update(format!("{:?}|{:?}|{}", self.routes, self.policy, self.prefetch).as_bytes());
        format!("{:x}", h.finalize())
    }

    fn inbox(&self) -> &str {
        self.routes.inbox.as_deref().unwrap_or_default()
    }
}

/// Why a router session ended (it reconnects after a pause unless stopped).
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// Connecting failed.
    #[error(transparent)]
    Connect(#[from] BrokerError),
    /// The channel, confirm mode, prefetch or consumer could not be set up, or the
    /// channel failed while consuming (e.g. the inbox does not exist yet: 404).
    #[error("{what}: {source}")]
    Channel {
        /// What was being done.
        what: &'static str,
        /// lapin's error.
        source: lapin::Error,
    },
    /// The routes do not serve the policy (a bug: they come from one plan).
    #[error(transparent)]
    Routes(#[from] ClientError),
    /// The inbox's ownership record could not be read (management API): not consumed
    /// until it can be.
    #[error("reading the ownership record of the inbox: {0}")]
    Ownership(#[source] BrokerError),
    /// The queue named like the inbox is not this DeadLetterQueue's (module documentation):
    /// what to do, in words.
    #[error("{0}")]
    NotOurInbox(String),
}

/// Runs the router of `target` until `stop` is cancelled: consumes the inbox, moves each
/// message, and after any failure reconnects with a pause of 1 s doubling up to
/// [`MAX_RECONNECT_DELAY_S`]. On stop it drains: the consumer is cancelled, messages in
/// hand are finished (copy confirmed, original acked), and after [`DRAIN_SETTLE_MS`] the
/// channel closes (anything prefetched but not started goes back to the inbox).
pub async fn run(target: Target, metrics: RouterMetrics, stop: CancellationToken) {
    let republisher = match Republisher::new(target.routes.clone(), target.policy.clone()) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(dead_letter_queue = %target.key(), error = %e, "retry router cannot start");
            return;
        }
    };
    let mut failures: u32 = 0;
    while !stop.is_cancelled() {
        match session(&target, &republisher, &metrics, &stop).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(dead_letter_queue = %target.key(), inbox = target.inbox(), error = %e, "retry router session ended; reconnecting");
            }
        }
        if stop.is_cancelled() {
            // Stopped for good or replaced: the fleet forgets (or the new router sets) the
            // series; writing 0 here would bring a forgotten one back.
            break;
        }
        metrics.set_consuming(&target.namespace, &target.name, false);
        // 1 s after a clean end or a first failure, doubling with each further failure.
        let doublings = failures.saturating_sub(1).min(5);
        let pause = Duration::from_secs((1u64 << doublings).min(MAX_RECONNECT_DELAY_S));
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
        }
    }
    tracing::info!(dead_letter_queue = %target.key(), "retry router stopped");
}

/// One connection: consume until the consumer ends (stop, broker cancel, channel error).
async fn session(
    target: &Target,
    republisher: &Republisher,
    metrics: &RouterMetrics,
    stop: &CancellationToken,
) -> Result<(), RouterError> {
    check_owner(target).await?;
    let connection = amqp::connect_vhost(&target.connection, &target.vhost).await?;
    let result = consume(&connection, target, republisher, metrics, stop).await;
    let _ = connection.close(200, "retry router stopping".into()).await;
    result
}

/// Refuses an inbox that is not `target`'s: `<source>.router` is consumed only while its
/// ownership record (docs/ARCHITECTURE.md, "Ownership on the broker"; written by the apply
/// that made the inbox, before the inbox) names `target`'s DeadLetterQueue. A queue of
/// that name that another DeadLetterQueue owns, or one no apply of `target` made, keeps
/// its messages: the router would otherwise move them into `target`'s tiers and source.
///
/// # Errors
/// [`RouterError::Ownership`] when the record cannot be read, [`RouterError::NotOurInbox`]
/// when it is missing or names another DeadLetterQueue.
async fn check_owner(target: &Target) -> Result<(), RouterError> {
    let inbox = target.inbox();
    let key = target.key();
    let broker = RabbitMq::new(&target.connection).map_err(RouterError::Ownership)?;
    let record = broker
        .owner_record(&target.vhost, ownership::QUEUE, inbox)
        .await
        .map_err(RouterError::Ownership)?;
    match record {
        Some(r) if r.owner == key => Ok(()),
        Some(r) => Err(RouterError::NotOurInbox(format!(
            "queue {inbox:?} belongs to DeadLetterQueue {owner} (its {role}; ownership record: global parameter {parameter}), not to {key}: not consumed. Give one of the two another source queue, or, if {owner} no longer exists, release the name (`rabbitmqctl clear_global_parameter {parameter}`) and apply {key}",
            owner = r.owner,
            role = r.role,
            parameter = r.parameter(),
        ))),
        None => Err(RouterError::NotOurInbox(format!(
            "queue {inbox:?} has no ownership record of DeadLetterQueue {key}: not consumed until an apply of {key} made it its router inbox (`dlq-operator apply`, or the operator)"
        ))),
    }
}

/// Sets up the channel (confirm mode, prefetch) and the consumer, then moves deliveries,
/// up to `prefetch` at once, until the consumer ends.
async fn consume(
    connection: &lapin::Connection,
    target: &Target,
    republisher: &Republisher,
    metrics: &RouterMetrics,
    stop: &CancellationToken,
) -> Result<(), RouterError> {
    let channel_error = |what| move |source| RouterError::Channel { what, source };
    let channel = connection
        .create_channel()
        .await
        .map_err(channel_error("opening a channel"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(channel_error("enabling publisher confirms"))?;
    channel
        .basic_qos(target.prefetch, BasicQosOptions::default())
        .await
        .map_err(channel_error("setting the prefetch"))?;
    let consumer = channel
        .basic_consume(
            target.inbox().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(channel_error("consuming the inbox"))?;
    metrics.set_consuming(&target.namespace, &target.name, true);
    tracing::info!(dead_letter_queue = %target.key(), inbox = target.inbox(), prefetch = target.prefetch, "retry router consuming");
    let tag = consumer.tag();
    let frame_max = connection.configuration().frame_max();
    let canceller = {
        let (channel, stop) = (channel.clone(), stop.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            if let Err(e) = channel
                .basic_cancel(tag, BasicCancelOptions::default())
                .await
            {
                tracing::debug!(error = %e, "cancelling the inbox consumer failed (channel closed?)");
            }
        })
    };
    let mut stream_error = None;
    consumer
        .take_while(|item| {
            let ok = item.is_ok();
            if let Err(e) = item {
                stream_error = Some(RouterError::Channel {
                    what: "consuming the inbox",
                    source: e.clone(),
                });
            }
            futures::future::ready(ok)
        })
        .filter_map(|item| futures::future::ready(item.ok()))
        .for_each_concurrent(usize::from(target.prefetch), |delivery| {
            let on = On {
                channel: &channel,
                target,
                republisher,
                metrics,
                frame_max,
                stop,
            };
            move_one(on, delivery)
        })
        .await;
    canceller.abort();
    if stop.is_cancelled() && stream_error.is_none() {
        tokio::time::sleep(Duration::from_millis(DRAIN_SETTLE_MS)).await;
    }
    let _ = channel.close(200, "retry router stopping".into()).await;
    match stream_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What [`move_one`] works with.
#[derive(Clone, Copy)]
struct On<'a> {
    channel: &'a Channel,
    target: &'a Target,
    republisher: &'a Republisher,
    metrics: &'a RouterMetrics,
    /// The connection's negotiated frame_max (bytes; 0: none).
    frame_max: u32,
    stop: &'a CancellationToken,
}

/// Moves one inbox delivery: reads its failure, builds the copy, checks that it fits in
/// a frame ([`check_frame`]), publishes it with a confirm and settles the original
/// ([`settle`]); counts the result. A copy that could not be published is given back
/// after [`FAILURE_PAUSE_MS`].
async fn move_one(on: On<'_>, delivery: lapin::message::Delivery) {
    let On {
        channel,
        target,
        republisher,
        metrics,
        ..
    } = on;
    let incoming = incoming::read(
        &Delivered {
            exchange: delivery.exchange.as_str(),
            routing_key: delivery.routing_key.as_str(),
            headers: delivery.properties.headers().as_ref(),
        },
        target.inbox(),
        &target.routes.source_queue,
    );
    let copy = republisher
        .copy(&delivery.properties, &incoming.failure(), incoming.origin())
        .and_then(|copy| check_frame(&copy, on.frame_max).map(|()| copy));
    let published = match copy {
        Ok(copy) => publish_confirmed(channel, copy, &delivery.data).await,
        Err(e) => Err(e),
    };
    if published.is_err() {
        tokio::select! {
            () = on.stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_millis(FAILURE_PAUSE_MS)) => {}
        }
    }
    match settle(&delivery, published).await {
        Ok(outcome) => metrics.record_routed(&target.namespace, &target.name, &outcome),
        Err(e) => {
            metrics.record_failure(&target.namespace, &target.name, &e);
            tracing::warn!(dead_letter_queue = %target.key(), error = %e, "retry router could not move a message; it was given back to the inbox");
        }
    }
}
