//! `dlq replay`: sends dead-lettered messages back to where they failed, at least once.
//!
//! Each dead-letter queue is read like [`super::browse::inspect`] reads it (`basic.get`,
//! held until the end). A message the [`Filter`] takes is published — a copy with the
//! retry state reset and the replay stamped ([`replay_properties`]) — with `mandatory`
//! and a publisher confirm, and the original is acked only after the broker confirmed the
//! copy: a crash in between leaves a duplicate, never a loss (at-least-once; consumers
//! deduplicate on `message_id` + `dlq-replay-id`). Up to [`CONFIRM_WINDOW`] copies are in
//! flight at once. Every other message goes back to its queue by the inspection rule
//! ([`release_for`]): skipped and failed ones stay in the dead-letter queue.
//!
//! Targets: by default the DeadLetterQueue's own source queue through the default
//! exchange, so a message that failed in one of several queues bound to a fanout or topic
//! exchange reaches that queue only; with [`Target::OriginalExchange`] the exchange and
//! routing key it was first published with. A message whose original queue is another
//! queue is skipped, never sent elsewhere.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions};
use lapin::types::FieldTable;
use lapin::PublisherConfirm;
use lapin::{Channel, Confirmation};
use serde::Serialize;

use super::browse::{guard, keep, prepare_channel, requeue_all, Held};
use super::filter::Filter;
use super::{replay_properties, DeadLetter};
use crate::broker::rabbitmq::amqp::{connect_vhost, map_error};
use crate::broker::rabbitmq::{QueueLimits, RabbitMq};
use crate::broker::{BrokerConnection, BrokerError};
use crate::topology::DesiredTopology;

/// The longest pause between two copies that `--rate` can ask for (a day).
const MAX_PAUSE: Duration = Duration::from_secs(86_400);

/// Copies awaiting their publisher confirm at most, per dead-letter queue.
pub const CONFIRM_WINDOW: usize = 64;

/// What a replay reports to its driver while it runs: progress after each message (the
/// CLI's progress bar), and a checkpoint before each batch of copies is published (the
/// DeadLetterReplay controller writes its status there, so that an operator crash leaves
/// at most one batch "in doubt"). Any `FnMut(&ReplayReport)` is an observer that keeps no
/// checkpoint.
pub trait Observer: Send {
    /// Called after each message read, and once at the end of each dead-letter queue.
    fn progress(&mut self, report: &ReplayReport);

    /// Called before up to `batch` copies are published, with the report so far (every
    /// earlier copy settled: replayed or failed). The replay waits for it; an error stops
    /// the replay like `stop` does (the copies in flight are settled, the rest stays;
    /// [`Outcome::Partial`]). Default: nothing kept.
    ///
    /// # Errors
    /// Why the progress could not be kept (the replay then stops).
    fn checkpoint<'a>(
        &'a mut self,
        report: &'a ReplayReport,
        batch: u64,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        let _ = (report, batch);
        Box::pin(async { Ok(()) })
    }
}

impl<F: FnMut(&ReplayReport) + Send> Observer for F {
    fn progress(&mut self, report: &ReplayReport) {
        self(report)
    }
}

/// Where replayed messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The DeadLetterQueue's source queue, through the default exchange.
    OriginalQueue,
    /// The exchange and routing key of the first failed delivery (`dlq-original-*`, else
    /// `x-death`); only for messages whose original queue is the DeadLetterQueue's source
    /// queue, like the default.
    OriginalExchange,
}

/// What a replay takes and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Which messages.
    pub filter: Filter,
    /// Replay at most this many (`None`: all that match).
    pub limit: Option<u64>,
    /// Messages per second at most (`None`: as fast as confirms come).
    pub rate: Option<f64>,
    /// Count what would be replayed, publish nothing.
    pub dry_run: bool,
    /// Where to.
    pub target: Target,
    /// Skip a message already replayed this many times (a message that keeps failing is
    /// not looped forever).
    pub max_replays: u64,
    /// The id stamped in `dlq-replay-id`.
    pub replay_id: String,
}

/// How a replay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every matching message was replayed (or, dry run, would be).
    Succeeded,
    /// Interrupted: what was replayed is replayed, the rest is still in the dead-letter
    /// queue.
    Partial,
    /// Some message could not be replayed (it stays in the dead-letter queue).
    Failed,
}

/// The final report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// `dlq-replay-id` of this run.
    pub replay_id: String,
    /// Nothing was published.
    pub dry_run: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// Messages in the dead-letter queues when it started.
    pub total: u64,
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Replayed (confirmed by the broker and removed from the dead-letter queue); in a
    /// dry run, how many would be.
    pub replayed: u64,
    /// Matched but not replayed, by reason (they stay).
    pub skipped: BTreeMap<String, u64>,
    /// Not replayed because publishing failed, by reason (they stay).
    pub failed: BTreeMap<String, u64>,
}

impl ReplayReport {
    /// Skipped messages in all.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Failed messages in all.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// Where `m` goes under `target` for a resource whose source queue is `source`, or why it
/// is skipped.
pub fn route_for(m: &DeadLetter, target: Target, source: &str) -> Result<(String, String), String> {
    if m.original_queue != source && m.original_queue != "unknown" {
        return Err(format!(
            "original queue {} is not this DeadLetterQueue's source queue {source}",
            m.original_queue
        ));
    }
    match target {
        Target::OriginalQueue => Ok((String::new(), source.to_string())),
        Target::OriginalExchange => match (&m.original_exchange, &m.original_routing_key) {
            (Some(x), Some(k)) => Ok((x.clone(), k.clone())),
            _ => Err("no original exchange and routing key recorded".to_string()),
        },
    }
}

/// Replays the matching messages of the dead-letter queues of `topology` (module doc).
/// `stop` is checked before each message: once set, the copies in flight are settled, the
/// rest given back, and the report says [`Outcome::Partial`]. `progress` is called after
/// each message read.
///
/// # Errors
/// [`BrokerError::NotFound`] for a missing dead-letter queue; connection and AMQP errors
/// (held messages return to their queue; copies already confirmed are replayed; at most
/// the copies in flight are duplicated).
pub async fn replay(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    stop: &AtomicBool,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    let broker = RabbitMq::new(conn)?;
    let mut report = ReplayReport {
        resource: topology.owner.clone(),
        replay_id: opts.replay_id.clone(),
        dry_run: opts.dry_run,
        outcome: Outcome::Succeeded,
        total: 0,
        scanned: 0,
        matched: 0,
        replayed: 0,
        skipped: BTreeMap::new(),
        failed: BTreeMap::new(),
    };
    let source = topology.routes.source_queue.clone();
    let queues: Vec<&str> = topology.dead_letter_queues().collect();
    let connection = connect_vhost(conn, &topology.vhost).await?;
    let result = async {
        for queue in &queues {
            let limits = broker.queue_limits(&topology.vhost, queue).await?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| map_error(conn, &e))?;
            let run = Run {
                conn,
                connection: &connection,
                channel: &channel,
                queue,
                source: &source,
                limits,
                opts,
                now_ms,
                stop,
            };
            let done = run.queue(&mut report, observer).await;
            let _ = channel.close(200, "replayed".into()).await;
            done?;
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result?;
    if stop.load(Ordering::SeqCst) {
        report.outcome = Outcome::Partial;
    } else if report.failed_total() > 0 {
        report.outcome = Outcome::Failed;
    }
    Ok(report)
}

/// One dead-letter queue's replay.
struct Run<'a> {
    conn: &'a BrokerConnection,
    connection: &'a lapin::Connection,
    channel: &'a Channel,
    queue: &'a str,
    source: &'a str,
    limits: QueueLimits,
    opts: &'a ReplayOptions,
    now_ms: u64,
    stop: &'a AtomicBool,
}

/// A copy awaiting its confirm, and the original's delivery tag, delivery count,
/// properties and body (to give it back if the copy fails).
struct InFlight {
    confirm: PublisherConfirm,
    tag: u64,
    count: u64,
    properties: lapin::BasicProperties,
    body: Vec<u8>,
}

impl Run<'_> {
    async fn queue(
        &self,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
    ) -> Result<(), BrokerError> {
        let amqp = |e: lapin::Error| map_error(self.conn, &e);
        let ch = self.channel;
        let count = prepare_channel(ch, self.queue).await.map_err(amqp)?;
        guard(self.queue, &self.limits, count)?;
        report.total += count;
        // Between two copies: 1 / rate seconds, at most a day (a rate is validated > 0).
        let pause = self.opts.rate.map(|r| {
            Duration::try_from_secs_f64(1.0 / r)
                .unwrap_or(MAX_PAUSE)
                .min(MAX_PAUSE)
        });
        // Delivery tags of the messages that stay, requeued at the end.
        let mut requeue: Vec<u64> = Vec::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // Exchanges already checked (name → exists).
        let mut exchanges: BTreeMap<String, bool> = BTreeMap::new();
        for _ in 0..count {
            if self.stop.load(Ordering::SeqCst) || self.limit_reached(report, in_flight.len()) {
                break;
            }
            let Some(message) = ch
                .basic_get(self.queue.into(), BasicGetOptions { no_ack: false })
                .await
                .map_err(amqp)?
            else {
                break;
            };
            let delivery = &message.delivery;
            let letter = DeadLetter::read(self.queue, &delivery.properties, &delivery.data, 0);
            report.scanned += 1;
            let route = match self.decide(&letter, report) {
                Some((exchange, _)) if !self.exchange_exists(&exchange, &mut exchanges).await? => {
                    *report
                        .skipped
                        .entry(format!("exchange {exchange:?} does not exist"))
                        .or_default() += 1;
                    None
                }
                route => route,
            };
            match route {
                None => {
                    self.stays(
                        delivery.delivery_tag,
                        letter.delivery_count,
                        &delivery.properties,
                        &delivery.data,
                        &mut requeue,
                    )
                    .await?
                }
                Some((exchange, routing_key)) => {
                    let copy =
                        replay_properties(&delivery.properties, &self.opts.replay_id, self.now_ms);
                    let confirm = ch
                        .basic_publish(
                            exchange.as_str().into(),
                            routing_key.as_str().into(),
                            BasicPublishOptions {
                                mandatory: true,
                                immediate: false,
                            },
                            &delivery.data,
                            copy,
                        )
                        .await
                        .map_err(amqp)?;
                    in_flight.push_back(InFlight {
                        confirm,
                        tag: delivery.delivery_tag,
                        count: letter.delivery_count,
                        properties: delivery.properties.clone(),
                        body: delivery.data.clone(),
                    });
                    if in_flight.len() >= CONFIRM_WINDOW {
                        self.settle_oldest(&mut in_flight, &mut requeue, report)
                            .await?;
                    }
                    if let Some(p) = pause {
                        // At a limited rate the confirms are settled before each pause, so
                        // an interruption or a crash finds few copies unsettled.
                        while !in_flight.is_empty() {
                            self.settle_oldest(&mut in_flight, &mut requeue, report)
                                .await?;
                        }
                        self.pause(p).await;
                    }
                }
            }
            observer.progress(report);
        }
        while !in_flight.is_empty() {
            self.settle_oldest(&mut in_flight, &mut requeue, report)
                .await?;
        }
        observer.progress(report);
        requeue.sort_unstable();
        requeue_all(ch, requeue).await.map_err(amqp)
    }

    /// A message that stays in the dead-letter queue ([`keep`]).
    async fn stays(
        &self,
        tag: u64,
        count: u64,
        properties: &lapin::BasicProperties,
        body: &[u8],
        requeue: &mut Vec<u64>,
    ) -> Result<(), BrokerError> {
        let held = Held {
            tag,
            count,
            properties,
            body,
        };
        let facts = (self.limits.quorum, self.limits.delivery_limit);
        keep(self.conn, self.channel, self.queue, facts, held, requeue).await
    }

    /// Sleeps `p`, or less when `stop` is set meanwhile (checked every 100 ms).
    async fn pause(&self, p: Duration) {
        let until = tokio::time::Instant::now() + p;
        while !self.stop.load(Ordering::SeqCst) {
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
        }
    }

    /// Whether exchange `name` exists (the default exchange always does), from a passive
    /// declare on a channel of its own — a missing exchange closes the channel it is asked
    /// on, and must not close the one holding the messages. Remembered in `known`.
    async fn exchange_exists(
        &self,
        name: &str,
        known: &mut BTreeMap<String, bool>,
    ) -> Result<bool, BrokerError> {
        if name.is_empty() {
            return Ok(true);
        }
        if let Some(exists) = known.get(name) {
            return Ok(*exists);
        }
        let side = self
            .connection
            .create_channel()
            .await
            .map_err(|e| map_error(self.conn, &e))?;
        let exists = side
            .exchange_declare(
                name.into(),
                lapin::ExchangeKind::Direct,
                lapin::options::ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .is_ok();
        if exists {
            let _ = side.close(200, "checked".into()).await;
        }
        known.insert(name.to_string(), exists);
        Ok(exists)
    }

    /// Whether `--limit` is reached, counting the copies in flight.
    fn limit_reached(&self, report: &ReplayReport, in_flight: usize) -> bool {
        self.opts
            .limit
            .is_some_and(|l| report.replayed + in_flight as u64 >= l)
    }

    /// Where `m` goes, or `None` when it stays (not matched, skipped, or a dry run).
    fn decide(&self, m: &DeadLetter, report: &mut ReplayReport) -> Option<(String, String)> {
        if !self.opts.filter.matches(m, self.now_ms) {
            return None;
        }
        report.matched += 1;
        let skip = |report: &mut ReplayReport, why: String| {
            *report.skipped.entry(why).or_default() += 1;
            None
        };
        if m.replay_count >= self.opts.max_replays {
            return skip(
                report,
                format!(
                    "already replayed {} times (--max-replays)",
                    self.opts.max_replays
                ),
            );
        }
        match route_for(m, self.opts.target, self.source) {
            Err(why) => skip(report, why),
            Ok(_) if self.opts.dry_run => {
                report.replayed += 1;
                None
            }
            Ok(route) => Some(route),
        }
    }

    /// Waits for the oldest copy's confirm: acked, the original is acked (replayed);
    /// otherwise the original stays (failed).
    async fn settle_oldest(
        &self,
        in_flight: &mut VecDeque<InFlight>,
        requeue: &mut Vec<u64>,
        report: &mut ReplayReport,
    ) -> Result<(), BrokerError> {
        let Some(f) = in_flight.pop_front() else {
            return Ok(());
        };
        let failure = match f.confirm.await.map_err(|e| map_error(self.conn, &e))? {
            Confirmation::Ack(None) => None,
            Confirmation::Ack(Some(_)) => Some("unroutable: no queue is bound for the route"),
            Confirmation::Nack(_) => Some("the broker refused the copy (nack)"),
            Confirmation::NotRequested => Some("publisher confirms are off"),
        };
        match failure {
            None => {
                self.channel
                    .basic_ack(f.tag, BasicAckOptions::default())
                    .await
                    .map_err(|e| map_error(self.conn, &e))?;
                report.replayed += 1;
            }
            Some(why) => {
                *report.failed.entry(why.to_string()).or_default() += 1;
                self.stays(f.tag, f.count, &f.properties, &f.body, requeue)
                    .await?;
            }
        }
        Ok(())
    }
}
