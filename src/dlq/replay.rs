//! `dlq replay`: sends dead-lettered messages back to where they failed, at least once.
//!
//! Each dead-letter queue is read by a consumer (manual acknowledgements, a prefetch
//! window of [`PREFETCH`]) until the messages there at the start are read. A message the
//! [`Filter`] takes is published — a copy with the retry state reset and the replay
//! stamped ([`replay_properties`]) — with `mandatory` and a publisher confirm, and the
//! original is acked only after the broker confirmed the copy: a crash in between leaves
//! a duplicate, never a loss (at-least-once; consumers deduplicate on `message_id` +
//! `dlq-replay-id`). Up to [`CONFIRM_WINDOW`] copies are in flight at once, in batches of
//! [`CHECKPOINT_BATCH`] with an [`Observer::checkpoint`] before each; a crash duplicates
//! at most [`crash_bound`] copies (`max_in_flight`, 1,000 by default). Every other message
//! is held unacknowledged like [`super::browse::inspect`] holds it, and given back at the
//! end by the inspection rule ([`release_for`]): skipped and failed ones stay in the
//! dead-letter queue. Held messages fill the prefetch window; when they fill half of it,
//! the consumer is cancelled and a new one started — RabbitMQ keeps a cancelled
//! consumer's unacknowledged messages with the channel (checked on 3.10.8 for classic and
//! quorum queues), so they stay held and the new consumer gets a fresh window. A message
//! that carries this replay's own `dlq-replay-id` (it failed again after being replayed,
//! or a resumed replay reads it) is skipped.
//!
//! Targets: by default the DeadLetterQueue's own source queue through the default
//! exchange, so a message that failed in one of several queues bound to a fanout or topic
//! exchange reaches that queue only; with [`Target::OriginalExchange`] the exchange and
//! routing key it was first published with. A message whose original queue is another
//! queue is skipped, never sent elsewhere; so is a copy whose route — resolved from the
//! broker's bindings before it is published ([`super::route`]), `CC`/`BCC` headers
//! included — would reach any queue but the source queue, or cannot be resolved for
//! certain.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation};
use serde::Serialize;

use super::browse::{guard, keep, open_for_reading, prepare_channel, requeue_all, Access, Held};
use super::filter::Filter;
use super::route::Routes;
use super::{release_for, replay_properties, DeadLetter, Release};
use crate::broker::rabbitmq::amqp::{connect_vhost, map_error};
use crate::broker::rabbitmq::management::ManagementClient;
use crate::broker::rabbitmq::{QueueLimits, RabbitMq};
use crate::broker::{BrokerConnection, BrokerError};
use crate::printable::{shown, PREVIEW_BYTES};
use crate::topology::DesiredTopology;

/// The longest pause between two copies that `--rate` can ask for (a day).
const MAX_PAUSE: Duration = Duration::from_secs(86_400);

/// Copies awaiting their publisher confirm at most, per dead-letter queue.
pub const CONFIRM_WINDOW: usize = 1000;

/// The consumer's prefetch window (messages delivered and not yet acknowledged) at full
/// speed; at a limited rate, twice the rate per second, at least 100. The messages kept
/// (held until the end) fill it: at half of it the consumer is replaced by a fresh one.
/// Half of it + [`CONFIRM_WINDOW`] + the deferred acks stay below it, so the window never
/// closes on the scan.
pub const PREFETCH: u16 = 3000;

/// Copies per checkpoint ([`Observer::checkpoint`]) at full speed; at a limited rate,
/// one second's worth.
pub const CHECKPOINT_BATCH: u64 = 1000;

/// The crash window a replay keeps by default (`--max-in-flight`, `spec.maxInFlight`), and
/// the largest it takes: [`crate::crd::MAX_IN_FLIGHT`], the [`CONFIRM_WINDOW`].
pub const MAX_IN_FLIGHT: usize = crate::crd::MAX_IN_FLIGHT as usize;
const _: () = assert!(MAX_IN_FLIGHT == CONFIRM_WINDOW);

/// Copies in flight at most when a queue is read one message at a time (a quorum queue
/// with a delivery limit): their originals are exposed to a crash like the message in
/// hand.
pub const CONFIRM_WINDOW_ONE_AT_A_TIME: usize = 16;

/// Replayed originals acknowledged at once by one `basic.ack` with `multiple`, where no
/// held message lies below them.
const ACK_EVERY: usize = 250;

/// The shortest pause between copies (`1 / --rate`) before which every copy is settled.
const SETTLE_EACH_PAUSE: Duration = Duration::from_millis(10);

/// How long without a delivery before the scan checks whether the queue is empty.
const IDLE: Duration = Duration::from_millis(250);

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
    /// queue, like the default, and only when that exchange routes the copy to the source
    /// queue and no other ([`super::route`]).
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
    /// The crash window, 1 to [`MAX_IN_FLIGHT`] (the default): at most this many copies
    /// are published whose originals the broker has not yet been seen to remove, so a
    /// crash duplicates at most this many ([`crash_bound`]). Smaller is slower: at 1, each
    /// original's removal is confirmed by a round trip before the next copy goes out.
    pub max_in_flight: usize,
}

/// Copies per checkpoint for `rate` (messages per second; `None`: as fast as confirms
/// come): [`CHECKPOINT_BATCH`], or one second's worth at a limited rate (at least 1).
pub fn checkpoint_batch(rate: Option<f64>) -> u64 {
    rate.map_or(CHECKPOINT_BATCH, |r| {
        (r.ceil() as u64).clamp(1, CHECKPOINT_BATCH)
    })
}

/// The most copies a crash of a replay with `max_in_flight`, `rate` and `limit` can
/// duplicate (a SIGKILL, a lost connection: copies that arrived while their originals
/// went back to the dead-letter queue, to be replayed again). A copy counts from its
/// publish until a reply of the broker on the consuming channel shows its original's ack
/// handled (a channel handles its methods in order); before more than `max_in_flight`
/// copies would count, the copies in flight are settled, the acks written (also the
/// deferred `multiple` one) and that reply awaited. The same happens before each
/// checkpoint batch ([`checkpoint_batch`]), and a replay sends at most `limit` copies. So
/// the bound is the least of the three. The prefetch window adds nothing: a delivered
/// message without a copy returns to the queue on a crash, undecided, and is not
/// duplicated.
pub fn crash_bound(max_in_flight: usize, rate: Option<f64>, limit: Option<u64>) -> u64 {
    let window = u64::try_from(max_in_flight).unwrap_or(u64::MAX);
    window
        .min(checkpoint_batch(rate))
        .min(limit.unwrap_or(u64::MAX))
        .max(1)
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
/// is skipped (a reason quoting the message's text escaped and cut:
/// [`crate::printable::shown`]).
pub fn route_for(m: &DeadLetter, target: Target, source: &str) -> Result<(String, String), String> {
    if m.original_queue != source && m.original_queue != "unknown" {
        return Err(format!(
            "original queue {} is not this DeadLetterQueue's source queue {}",
            shown(&m.original_queue, PREVIEW_BYTES),
            shown(source, PREVIEW_BYTES)
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
/// rest given back, and the report says [`Outcome::Partial`] (so it does when a
/// checkpoint of `observer` fails). `observer` sees the progress after each message read
/// and keeps a checkpoint before each batch of copies.
///
/// # Errors
/// [`BrokerError::NotFound`] for a missing dead-letter queue (every one is looked up
/// before anything is read, so nothing is replayed then); connection and AMQP errors
/// (held messages return to their queue; copies already confirmed are replayed; at most
/// [`crash_bound`] copies are duplicated).
pub async fn replay(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    stop: &AtomicBool,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    let broker = RabbitMq::new(conn)?;
    // Where each copy goes is resolved from the broker's bindings (`route`), once per
    // (exchange, routing key) for the whole replay.
    let mgmt = ManagementClient::new(conn)?;
    let mut routes = Routes::default();
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
    // Every dead-letter queue looked up first: a missing one is an error before anything
    // is replayed.
    let Some((queues, connection)) =
        open_for_reading(conn, &broker, topology, Access::Write, stop).await?
    else {
        report.outcome = Outcome::Partial;
        return Ok(report);
    };
    let interrupted = AtomicBool::new(false);
    let result = async {
        for (queue, limits) in queues {
            if stop.load(Ordering::SeqCst) || interrupted.load(Ordering::SeqCst) {
                break;
            }
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| map_error(conn, &e))?;
            let run = Run {
                conn,
                mgmt: &mgmt,
                vhost: &topology.vhost,
                channel: &channel,
                queue,
                source: &source,
                limits,
                opts,
                now_ms,
                stop,
                interrupted: &interrupted,
            };
            let done = run.queue(&mut report, observer, &mut routes).await;
            let _ = channel.close(200, "replayed".into()).await;
            done?;
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result?;
    if stop.load(Ordering::SeqCst) || interrupted.load(Ordering::SeqCst) {
        report.outcome = Outcome::Partial;
    } else if report.failed_total() > 0 {
        report.outcome = Outcome::Failed;
    }
    Ok(report)
}

/// One dead-letter queue's replay.
struct Run<'a> {
    conn: &'a BrokerConnection,
    /// The management API (where copies would go: [`Routes`]).
    mgmt: &'a ManagementClient,
    /// The vhost (for the publishing connection and the routes).
    vhost: &'a str,
    channel: &'a Channel,
    queue: &'a str,
    source: &'a str,
    limits: QueueLimits,
    opts: &'a ReplayOptions,
    now_ms: u64,
    stop: &'a AtomicBool,
    /// Set when a checkpoint failed: the replay stops like on `stop`.
    interrupted: &'a AtomicBool,
}

/// An AMQP operation already sent (polled once), awaited later.
type Pending<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, lapin::Error>> + Send>>;

/// Why the broker did not take a copy, from its publisher confirm (`None`: taken).
fn copy_failure(c: &Confirmation) -> Option<String> {
    match c {
        Confirmation::Ack(None) => None,
        Confirmation::Ack(Some(_)) => Some("unroutable: no queue is bound for the route".into()),
        Confirmation::Nack(_) => Some("the broker refused the copy (nack)".into()),
        Confirmation::NotRequested => Some("publisher confirms are off".into()),
    }
}

/// An operation polled once: finished already, or still to await.
enum Sent<T> {
    /// Finished on its first poll.
    Done(Result<T, lapin::Error>),
    /// To await (never polled again after completing).
    Waiting(Pending<T>),
}

impl<T> Sent<T> {
    /// Its result.
    async fn wait(self) -> Result<T, lapin::Error> {
        match self {
            Sent::Done(r) => r,
            Sent::Waiting(f) => f.await,
        }
    }
}

/// A copy awaiting its confirm, its route, and the original's delivery tag, delivery count,
/// properties and body (to give it back if the copy fails).
struct InFlight {
    confirm: Sent<Confirmation>,
    tag: u64,
    count: u64,
    properties: lapin::BasicProperties,
    body: Vec<u8>,
    /// `(exchange, routing key)` of the copy.
    route: (String, String),
}

impl InFlight {
    /// Its confirm (awaited once), leaving a placeholder.
    fn take_confirm(&mut self) -> Sent<Confirmation> {
        std::mem::replace(
            &mut self.confirm,
            Sent::Done(Ok(Confirmation::NotRequested)),
        )
    }
}

impl Run<'_> {
    /// Replays this dead-letter queue; `routes` holds the routes resolved so far in this
    /// replay, and those resolved here on return.
    async fn queue(
        &self,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
        routes: &mut Routes,
    ) -> Result<(), BrokerError> {
        let amqp = |e: lapin::Error| map_error(self.conn, &e);
        let ch = self.channel;
        let count = prepare_channel(ch, self.queue).await.map_err(amqp)?;
        guard(self.queue, &self.limits, count)?;
        report.total += count;
        if count == 0 {
            observer.progress(report);
            return Ok(());
        }
        // Between two copies: 1 / rate seconds, at most a day (a rate is validated > 0).
        let pause = self.opts.rate.map(|r| {
            Duration::try_from_secs_f64(1.0 / r)
                .unwrap_or(MAX_PAUSE)
                .min(MAX_PAUSE)
        });
        // At a limited rate, a checkpoint about once a second; otherwise every batch.
        let batch = checkpoint_batch(self.opts.rate);
        let prefetch = self.opts.rate.map_or(PREFETCH, |r| {
            let window = (r.ceil() as u64).saturating_mul(2);
            u16::try_from(window.clamp(100, u64::from(PREFETCH))).unwrap_or(PREFETCH)
        });
        // A quorum queue with a delivery limit is read one `basic.get` at a time: every
        // message delivered and not yet decided would return to it with a delivery counted
        // if the process died, and a prefetch window holds many; one read at a time keeps
        // that to the single message in hand (ARCHITECTURE "Replay").
        let one_at_a_time = self.limits.quorum && self.limits.delivery_limit.is_some();
        let consumer = if one_at_a_time {
            None
        } else {
            ch.basic_qos(prefetch, BasicQosOptions { global: false })
                .await
                .map_err(amqp)?;
            Some(self.consume().await?)
        };
        let mut state = Scan {
            consumer,
            one_at_a_time,
            publisher: None,
            publishing: None,
            pending: VecDeque::new(),
            held_here: 0,
            in_flight: VecDeque::new(),
            acks: futures::stream::FuturesUnordered::new(),
            min_held: None,
            ack_upto: None,
            deferred: 0,
            requeue: Vec::new(),
            routes: std::mem::take(routes),
            // The messages there at the start: copies rotated on the way go behind them
            // and are not read again (nor is a failed one retried in the same run).
            to_read: count,
            read: 0,
            next_slot: None,
            batch_left: 0,
            unproven: 0,
        };
        let result = self
            .scan(&mut state, report, observer, pause, batch, prefetch)
            .await;
        // Whatever happened: stop consuming, then give back what was delivered and not
        // taken (nothing is left to the channel's close but after an error).
        let result = match result {
            Ok(()) => self.finish(&mut state, report, observer).await,
            Err(e) => Err(e),
        };
        *routes = std::mem::take(&mut state.routes);
        if let Some(p) = state.publisher.take() {
            let _ = p.close(200, "replayed".into()).await;
        }
        if let Some(c) = state.publishing.take() {
            let _ = c.close(200, "replayed".into()).await;
        }
        result
    }

    /// The end of a scan: the copies in flight settled and their acks written, then the
    /// consumer cancelled, the deliveries not taken kept, every held message given back.
    ///
    /// The acks go before the cancel because, on a quorum queue, the cancel is what gets
    /// them through: once 32 of a channel's commands await their Raft commit, the channel
    /// keeps further acks and nacks back until commits are reported, and a channel closed
    /// before then drops them (RabbitMQ 3.10; replayed originals stayed beside their
    /// copies). The cancel waits for its own commit, which the queue reports after those
    /// of every command before it, so the channel sends what it kept before it reads the
    /// next frame. Read one at a time, each `basic.get` waits the same way, and at most
    /// [`CONFIRM_WINDOW_ONE_AT_A_TIME`] acks follow the last one.
    async fn finish(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
    ) -> Result<(), BrokerError> {
        while !state.in_flight.is_empty() {
            self.settle_oldest(state, report).await?;
        }
        self.flush_acks(state).await?;
        self.stop_consuming(state).await?;
        while let Some(d) = state.pending.pop_front() {
            let letter = DeadLetter::read(self.queue, &d.properties, &d.data, 0);
            self.keep_in(
                state,
                d.delivery_tag,
                letter.delivery_count,
                &d.properties,
                &d.data,
            )
            .await?;
        }
        self.flush_acks(state).await?;
        observer.progress(report);
        state.requeue.sort_unstable();
        requeue_all(self.channel, std::mem::take(&mut state.requeue))
            .await
            .map_err(|e| map_error(self.conn, &e))
    }

    /// The scan proper: reads (consumer deliveries), decides, publishes and settles until
    /// every message there at the start was read, the queue is empty, `--limit` is
    /// reached, or `stop` is set (or a checkpoint failed).
    async fn scan(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
        pause: Option<Duration>,
        batch: u64,
        prefetch: u16,
    ) -> Result<(), BrokerError> {
        loop {
            if self.stop.load(Ordering::SeqCst)
                || self.interrupted.load(Ordering::SeqCst)
                || self.limit_reached(report, state.in_flight.len())
                || state.read >= state.to_read
            {
                return Ok(());
            }
            // Kept messages fill the consumer's prefetch window: a fresh consumer gets a
            // fresh window while the old one's messages stay held (RabbitMQ keeps a
            // cancelled consumer's unacknowledged messages with the channel).
            if !state.one_at_a_time && state.held_here >= usize::from(prefetch) / 2 {
                self.stop_consuming(state).await?;
                state.consumer = Some(self.consume().await?);
                state.held_here = 0;
            }
            let delivery = match state.pending.pop_front() {
                Some(d) => d,
                None => match self.next_delivery(state).await? {
                    Next::Delivery(d) => d,
                    Next::Empty => {
                        while !state.in_flight.is_empty() {
                            self.settle_oldest(state, report).await?;
                        }
                        return Ok(());
                    }
                    Next::Idle => {
                        // Nothing came: settle what is in flight; the scan is over when
                        // the queue has no ready message left (others may have taken
                        // some of those counted at the start).
                        while !state.in_flight.is_empty() {
                            self.settle_oldest(state, report).await?;
                        }
                        self.flush_acks(state).await?;
                        if self.stop.load(Ordering::SeqCst) || self.ready().await? == 0 {
                            return Ok(());
                        }
                        continue;
                    }
                },
            };
            let letter = DeadLetter::read(self.queue, &delivery.properties, &delivery.data, 0);
            state.read += 1;
            report.scanned += 1;
            let route = match self.decide(&letter, report) {
                Some(route) => {
                    let headers = delivery.properties.headers().as_ref();
                    let reach = (route.0.as_str(), route.1.as_str());
                    match state
                        .routes
                        .check(self.mgmt, self.vhost, reach, headers, self.source)
                        .await?
                    {
                        Err(why) => {
                            // Never sent where it does not belong: skipped, it stays.
                            *report.skipped.entry(why).or_default() += 1;
                            None
                        }
                        Ok(()) if self.opts.dry_run => {
                            // Would be replayed: counted, and it stays.
                            report.replayed += 1;
                            None
                        }
                        Ok(()) => Some(route),
                    }
                }
                None => None,
            };
            match route {
                None => {
                    self.keep_in(
                        state,
                        delivery.delivery_tag,
                        letter.delivery_count,
                        &delivery.properties,
                        &delivery.data,
                    )
                    .await?
                }
                Some((exchange, routing_key)) => {
                    if state.batch_left == 0 {
                        // Every earlier copy settled, then the checkpoint, then the batch.
                        self.settle_all(state, report).await?;
                        // Never more than `--limit` still allows: the batch is what a crash
                        // may leave in doubt, and a resume subtracts it from the limit.
                        let this_batch = self
                            .opts
                            .limit
                            .map_or(batch, |l| batch.min(l.saturating_sub(report.replayed)))
                            .max(1);
                        if let Err(why) = observer.checkpoint(report, this_batch).await {
                            tracing::warn!(queue = self.queue, reason = %why, "checkpoint failed: stopping the replay");
                            self.interrupted.store(true, Ordering::SeqCst);
                            state.pending.push_front(delivery);
                            state.read -= 1;
                            report.scanned -= 1;
                            report.matched -= 1;
                            return Ok(());
                        }
                        state.batch_left = this_batch;
                    }
                    if state.unproven >= self.opts.max_in_flight.max(1) {
                        // The crash window is full ([`crash_bound`]).
                        self.settle_all(state, report).await?;
                    }
                    state.batch_left -= 1;
                    state.unproven += 1;
                    let route = (exchange, routing_key);
                    let confirm = self
                        .publish_copy(state, &route, &delivery.properties, &delivery.data)
                        .await?;
                    state.in_flight.push_back(InFlight {
                        confirm,
                        tag: delivery.delivery_tag,
                        count: letter.delivery_count,
                        properties: delivery.properties,
                        body: delivery.data,
                        route,
                    });
                    // Read one at a time (a quorum queue with a delivery limit), an original
                    // whose copy is in flight is as exposed as the message in hand: a
                    // crash returns it with a delivery counted. One that a single return
                    // could push past the limit is settled at once; the others (like the
                    // held ones, [`release_for`]) keep a spare return, and at most
                    // [`CONFIRM_WINDOW_ONE_AT_A_TIME`] are in flight.
                    let window = if state.one_at_a_time {
                        CONFIRM_WINDOW_ONE_AT_A_TIME
                    } else {
                        CONFIRM_WINDOW
                    };
                    let at_risk = state.one_at_a_time
                        && release_for(
                            self.limits.quorum,
                            self.limits.delivery_limit,
                            letter.delivery_count,
                        ) == Release::Rotate;
                    if at_risk {
                        while !state.in_flight.is_empty() {
                            self.settle_oldest(state, report).await?;
                        }
                        self.flush_acks(state).await?;
                    } else if state.in_flight.len() >= window {
                        self.settle_oldest(state, report).await?;
                    }
                    if let Some(p) = pause {
                        // At a limited rate the copies are settled before each pause of
                        // 10 ms or more, so an interruption or a crash finds few unsettled;
                        // above 100/s, once a tenth of a second's worth is in flight (a
                        // settle per copy would cap the rate at one round trip each).
                        let in_flight_max = if p >= SETTLE_EACH_PAUSE {
                            0
                        } else {
                            (0.1 / p.as_secs_f64()) as usize
                        };
                        while state.in_flight.len() > in_flight_max {
                            self.settle_oldest(state, report).await?;
                        }
                        if state.in_flight.is_empty() {
                            self.flush_acks(state).await?;
                        }
                        // Paced from the last slot, not from now: the settling above
                        // counts as part of the pause (else `--rate 1000` gave ~270/s).
                        let now = tokio::time::Instant::now();
                        // Late wake-ups are made up for, up to a tenth of a second's worth.
                        let floor = now
                            .checked_sub(p.max(Duration::from_millis(100)))
                            .unwrap_or(now);
                        let slot = state.next_slot.map_or(now + p, |t| t.max(floor) + p);
                        state.next_slot = Some(slot);
                        self.pause_until(slot).await;
                    }
                }
            }
            observer.progress(report);
        }
    }

    /// Starts a consumer on the queue (manual acknowledgements).
    async fn consume(&self) -> Result<lapin::Consumer, BrokerError> {
        self.channel
            .basic_consume(
                self.queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| map_error(self.conn, &e))
    }

    /// Cancels the current consumer and keeps the deliveries it still had in
    /// [`Scan::pending`] (they are held: read later, or given back).
    async fn stop_consuming(&self, state: &mut Scan) -> Result<(), BrokerError> {
        let Some(mut consumer) = state.consumer.take() else {
            return Ok(());
        };
        self.channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await
            .map_err(|e| map_error(self.conn, &e))?;
        // After cancel-ok the stream yields what it had buffered, then ends.
        while let Some(d) = consumer.next().await {
            state
                .pending
                .push_back(d.map_err(|e| map_error(self.conn, &e))?);
        }
        Ok(())
    }

    /// The next delivery: from the consumer, or [`Next::Idle`] after [`IDLE`] without
    /// one; one at a time, by `basic.get`, or [`Next::Empty`].
    ///
    /// # Errors
    /// The channel's error, or the broker cancelling the consumer (the queue deleted).
    async fn next_delivery(&self, state: &mut Scan) -> Result<Next, BrokerError> {
        if state.one_at_a_time {
            let got = self
                .channel
                .basic_get(self.queue.into(), BasicGetOptions { no_ack: false })
                .await
                .map_err(|e| map_error(self.conn, &e))?;
            return Ok(got.map_or(Next::Empty, |m| Next::Delivery(m.delivery)));
        }
        let Some(consumer) = state.consumer.as_mut() else {
            return Ok(Next::Idle);
        };
        match tokio::time::timeout(IDLE, consumer.next()).await {
            Ok(Some(d)) => d
                .map(Next::Delivery)
                .map_err(|e| map_error(self.conn, &e)),
            Ok(None) => Err(BrokerError::Amqp {
                reason: format!(
                    "queue {:?}: the broker cancelled the replay's consumer (was the queue deleted?)",
                    self.queue
                ),
            }),
            Err(_idle) => Ok(Next::Idle),
        }
    }

    /// Messages ready in the queue (a passive declare: current, not the statistics).
    async fn ready(&self) -> Result<u64, BrokerError> {
        let declared = self
            .channel
            .queue_declare(
                self.queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| map_error(self.conn, &e))?;
        Ok(u64::from(declared.message_count()))
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

    /// Sleeps until `until`, or less when `stop` is set meanwhile (checked every 100 ms).
    async fn pause_until(&self, until: tokio::time::Instant) {
        while !self.stop.load(Ordering::SeqCst) {
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
        }
    }

    /// Whether `--limit` is reached, counting the copies in flight.
    fn limit_reached(&self, report: &ReplayReport, in_flight: usize) -> bool {
        self.opts
            .limit
            .is_some_and(|l| report.replayed + in_flight as u64 >= l)
    }

    /// Where `m` goes, or `None` when it stays (not matched, or skipped: counted).
    fn decide(&self, m: &DeadLetter, report: &mut ReplayReport) -> Option<(String, String)> {
        if !self.opts.filter.matches(m, self.now_ms) {
            return None;
        }
        report.matched += 1;
        let skip = |report: &mut ReplayReport, why: String| {
            *report.skipped.entry(why).or_default() += 1;
            None
        };
        if m.headers.get(super::REPLAY_ID).and_then(|v| v.as_str()) == Some(&self.opts.replay_id) {
            // Replayed by this very replay and dead-lettered again since (or read again
            // after a resume): sending it back again would loop.
            return skip(report, "already replayed by this replay".to_string());
        }
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
            Ok(route) => Some(route),
        }
    }

    /// Waits for the oldest copy's confirm: acked, the original is acked (replayed);
    /// otherwise the original stays (failed).
    async fn settle_oldest(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
    ) -> Result<(), BrokerError> {
        let Some(mut f) = state.in_flight.pop_front() else {
            return Ok(());
        };
        let failure = match f.take_confirm().wait().await {
            Ok(c) => copy_failure(&c),
            Err(e) => {
                // The publishing channel failed. If the channel holding the messages is
                // fine, the broker refused one publish by closing the publishing channel
                // (an internal exchange, no write permission), which lost every copy in
                // flight with it; otherwise the connection is gone: an error.
                if !self.channel.status().connected() {
                    return Err(map_error(self.conn, &e));
                }
                return self.isolate_refused(state, report, f).await;
            }
        };
        match failure {
            None => {
                self.ack_replayed(state, f.tag).await?;
                report.replayed += 1;
            }
            Some(why) => {
                *report.failed.entry(why.to_string()).or_default() += 1;
                self.keep_in(state, f.tag, f.count, &f.properties, &f.body)
                    .await?;
            }
        }
        Ok(())
    }

    /// Publishes the copy of a message (`properties`, `body`) along `route` on the
    /// publishing channel. Its frames are queued on the first poll; its write and its
    /// confirm are awaited later, in order, by `settle_oldest` (one wait per message would
    /// cap the rate at one round trip each).
    ///
    /// # Errors
    /// The publishing channel cannot be opened.
    async fn publish_copy(
        &self,
        state: &mut Scan,
        route: &(String, String),
        properties: &lapin::BasicProperties,
        body: &[u8],
    ) -> Result<Sent<Confirmation>, BrokerError> {
        let copy = replay_properties(properties, &self.opts.replay_id, self.now_ms);
        let channel = self.publisher(state).await?;
        let body = body.to_vec();
        let (exchange, routing_key) = route.clone();
        let mut confirm: Pending<Confirmation> = Box::pin(async move {
            channel
                .basic_publish(
                    exchange.as_str().into(),
                    routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    &body,
                    copy,
                )
                .await?
                .await
        });
        Ok(match futures::poll!(confirm.as_mut()) {
            std::task::Poll::Ready(done) => Sent::Done(done),
            std::task::Poll::Pending => Sent::Waiting(confirm),
        })
    }

    /// After the broker closed the publishing channel on `first` (the oldest copy in
    /// flight): settles the rest of the window — confirmed copies are replayed, the
    /// others were lost with the channel — then publishes each copy lost with it again,
    /// alone, on a new channel: the one the broker refuses again fails with its reason,
    /// the others are replayed. No deferred multiple ack may cover an unsettled original
    /// meanwhile: every ack here is single.
    async fn isolate_refused(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        first: InFlight,
    ) -> Result<(), BrokerError> {
        state.publisher = None;
        self.send_deferred(state).await?;
        let mut lost = vec![first];
        while let Some(mut f) = state.in_flight.pop_front() {
            match f.take_confirm().wait().await {
                Ok(Confirmation::Ack(None)) => {
                    self.send_ack(state, f.tag, false).await?;
                    report.replayed += 1;
                }
                Ok(_) | Err(_) => lost.push(f),
            }
        }
        for mut f in lost {
            f.confirm = self
                .publish_copy(state, &f.route, &f.properties, &f.body)
                .await?;
            let why = match f.take_confirm().wait().await {
                Ok(c) => copy_failure(&c),
                Err(e) => {
                    if !self.channel.status().connected() {
                        return Err(map_error(self.conn, &e));
                    }
                    state.publisher = None;
                    Some(format!(
                        "the broker refused the copy: {}",
                        map_error(self.conn, &e)
                    ))
                }
            };
            match why {
                None => {
                    self.send_ack(state, f.tag, false).await?;
                    report.replayed += 1;
                }
                Some(why) => {
                    *report.failed.entry(why).or_default() += 1;
                    self.keep_in(state, f.tag, f.count, &f.properties, &f.body)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// The channel copies are published on (confirm mode), on a connection of its own,
    /// both opened on first use and again after the broker closed them. Copies never go
    /// out on the connection holding the messages: a publish the broker refuses closes
    /// its channel, and a copy pipelined behind it can reach the broker after the close
    /// and close the whole connection (`504 CHANNEL_ERROR - expected 'channel.open'`);
    /// either would return every held message with a delivery counted.
    ///
    /// That close can still be on its way when a new channel is asked for (the connection
    /// looks connected, then fails the channel's opening): the channel is then opened
    /// once more, on a new connection.
    async fn publisher(&self, state: &mut Scan) -> Result<Channel, BrokerError> {
        if let Some(p) = state.publisher.as_ref().filter(|p| p.status().connected()) {
            return Ok(p.clone());
        }
        let p = match self.open_publisher(state).await {
            Ok(p) => p,
            Err(_) => {
                state.publishing = None;
                self.open_publisher(state).await?
            }
        };
        state.publisher = Some(p.clone());
        Ok(p)
    }

    /// A channel in confirm mode on the publishing connection, which is (re)opened when
    /// there is none or it is no longer connected.
    async fn open_publisher(&self, state: &mut Scan) -> Result<Channel, BrokerError> {
        let amqp = |e: lapin::Error| map_error(self.conn, &e);
        if !state
            .publishing
            .as_ref()
            .is_some_and(|c| c.status().connected())
        {
            state.publishing = Some(connect_vhost(self.conn, self.vhost).await?);
        }
        let Some(connection) = state.publishing.as_ref() else {
            return Err(BrokerError::Amqp {
                reason: "no publishing connection".into(),
            });
        };
        let p = connection.create_channel().await.map_err(amqp)?;
        p.confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .map_err(amqp)?;
        Ok(p)
    }

    /// A message that stays ([`Run::stays`]), with the scan's bookkeeping: a held one
    /// fills the consumer's window.
    async fn keep_in(
        &self,
        state: &mut Scan,
        tag: u64,
        count: u64,
        properties: &lapin::BasicProperties,
        body: &[u8],
    ) -> Result<(), BrokerError> {
        let before = state.requeue.len();
        self.stays(tag, count, properties, body, &mut state.requeue)
            .await?;
        // Rotated (acked, its copy behind the messages still to read), or held.
        if state.requeue.len() > before {
            state.held_here += 1;
            state.min_held = Some(state.min_held.map_or(tag, |m| m.min(tag)));
        }
        Ok(())
    }

    /// Acknowledges the original of a confirmed copy. While no message held for the
    /// final requeue has a lower delivery tag, acks are deferred and sent as one
    /// `basic.ack` with `multiple` every [`ACK_EVERY`] (every lower unacknowledged tag
    /// is then a replayed original: the copies settle in delivery order); otherwise one by
    /// one. Each ack's write is checked later ([`Scan::acks`]).
    async fn ack_replayed(&self, state: &mut Scan, tag: u64) -> Result<(), BrokerError> {
        // Read one at a time, every original is acked at once: a crash must not return
        // (with a delivery counted) originals whose copies were confirmed long ago.
        if !state.one_at_a_time && state.min_held.is_none_or(|m| m > tag) {
            state.ack_upto = Some(tag);
            state.deferred += 1;
            if state.deferred >= ACK_EVERY {
                self.send_deferred(state).await?;
            }
            return Ok(());
        }
        self.send_deferred(state).await?;
        self.send_ack(state, tag, false).await
    }

    /// Settles every copy in flight, writes every ack and waits for the broker's reply to
    /// a passive declare on the consuming channel: the broker has then handled every ack
    /// sent before it (a channel handles its methods in order), so no copy published so
    /// far can be duplicated by a crash any more ([`crash_bound`]).
    async fn settle_all(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
    ) -> Result<(), BrokerError> {
        while !state.in_flight.is_empty() {
            self.settle_oldest(state, report).await?;
        }
        self.flush_acks(state).await?;
        self.ready().await?;
        state.unproven = 0;
        Ok(())
    }

    /// Sends the deferred multiple ack, if any.
    async fn send_deferred(&self, state: &mut Scan) -> Result<(), BrokerError> {
        if let Some(upto) = state.ack_upto.take() {
            state.deferred = 0;
            self.send_ack(state, upto, true).await?;
        }
        Ok(())
    }

    /// Sends the deferred ack and waits until every ack is written.
    async fn flush_acks(&self, state: &mut Scan) -> Result<(), BrokerError> {
        self.send_deferred(state).await?;
        while let Some(r) = state.acks.next().await {
            r.map_err(|e| map_error(self.conn, &e))?;
        }
        Ok(())
    }

    /// Queues `basic.ack` for `tag` (`multiple`: and every lower tag); its write is
    /// awaited later, with the finished ones checked now.
    async fn send_ack(
        &self,
        state: &mut Scan,
        tag: u64,
        multiple: bool,
    ) -> Result<(), BrokerError> {
        let channel = self.channel.clone();
        let mut ack: Pending<()> =
            Box::pin(async move { channel.basic_ack(tag, BasicAckOptions { multiple }).await });
        if let std::task::Poll::Ready(r) = futures::poll!(ack.as_mut()) {
            r.map_err(|e| map_error(self.conn, &e))?;
        } else {
            state.acks.push(ack);
        }
        while let Some(Some(r)) = futures::FutureExt::now_or_never(state.acks.next()) {
            r.map_err(|e| map_error(self.conn, &e))?;
        }
        Ok(())
    }
}

/// What [`Run::next_delivery`] got (short-lived: one per message, never stored).
#[allow(clippy::large_enum_variant)]
enum Next {
    /// A message.
    Delivery(Delivery),
    /// Nothing for [`IDLE`].
    Idle,
    /// `basic.get` found the queue empty.
    Empty,
}

/// The state of one dead-letter queue's scan.
struct Scan {
    /// The current consumer (`None` once cancelled, and when reading one at a time).
    consumer: Option<lapin::Consumer>,
    /// Reading by `basic.get`, one message at a time (a quorum queue with a delivery
    /// limit).
    one_at_a_time: bool,
    /// The channel copies are published on ([`Run::publisher`]).
    publisher: Option<Channel>,
    /// Its connection.
    publishing: Option<lapin::Connection>,
    /// Deliveries a cancelled consumer still had: read first, or given back.
    pending: VecDeque<Delivery>,
    /// Messages kept (held for the final requeue) since the current consumer started:
    /// they fill its prefetch window.
    held_here: usize,
    /// Acks sent and not yet written to the socket (checked as they complete, all at the
    /// end of the scan).
    acks: futures::stream::FuturesUnordered<Pending<()>>,
    /// The lowest delivery tag held for the final requeue.
    min_held: Option<u64>,
    /// The highest replayed original whose ack is deferred (see [`Run::ack_replayed`]).
    ack_upto: Option<u64>,
    /// Acks deferred into `ack_upto`.
    deferred: usize,
    /// Copies awaiting their confirm, oldest first.
    in_flight: VecDeque<InFlight>,
    /// Delivery tags of the messages that stay, requeued at the end in read order.
    requeue: Vec<u64>,
    /// Routes resolved in this replay ([`Routes`]).
    routes: Routes,
    /// Messages to read: those there at the start.
    to_read: u64,
    /// Messages read so far.
    read: u64,
    /// When the next copy may go, at a limited rate.
    next_slot: Option<tokio::time::Instant>,
    /// Copies this batch may still publish before the next checkpoint.
    batch_left: u64,
    /// Copies published since the broker last showed every ack before handled
    /// ([`Run::settle_all`]): what a crash could duplicate now.
    unproven: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_duplicates_at_most_the_window_the_batch_or_the_limit() {
        // The default: the confirm window, which is also the checkpoint batch.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, None, None), 1000);
        assert_eq!(MAX_IN_FLIGHT as u64, CHECKPOINT_BATCH);
        assert_eq!(crash_bound(1, None, None), 1);
        assert_eq!(crash_bound(5, None, None), 5);
        // At a limited rate, one second's worth is settled before each checkpoint.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(2.0), None), 2);
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(0.5), None), 1);
        assert_eq!(crash_bound(10, Some(300.0), None), 10);
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(1e9), None), 1000);
        // No more than the limit is ever sent.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, None, Some(20)), 20);
        assert_eq!(crash_bound(0, None, None), 1, "a window of 0 acts as 1");
    }
}
