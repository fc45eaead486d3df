//! The RabbitMQ engine of `dlq replay` ([`crate::dlq::replay`]: what is replayed, where
//! to, and why no message is lost).
//!
//! Each dead-letter queue is read by a consumer (manual acknowledgements, a prefetch
//! window of [`PREFETCH`](crate::dlq::replay::PREFETCH)), or one `basic.get` at a time for a quorum queue with a
//! delivery limit. A copy goes out on a channel of its own connection (`mandatory`,
//! publisher confirms), up to [`CONFIRM_WINDOW`](crate::dlq::replay::CONFIRM_WINDOW) in flight, and its original is acked
//! only once the broker confirmed it; acks of replayed originals are deferred into one
//! `multiple` ack where no held message lies below them. Held messages fill the prefetch
//! window: at half of it the consumer is replaced by a fresh one (RabbitMQ keeps a
//! cancelled consumer's unacknowledged messages with the channel).
//!
//! The engine is split by concern: `scan.rs` reads and decides, `settle.rs` waits for
//! confirms and acknowledges, `channel.rs` holds the AMQP calls (consumer, publishing
//! channel, pacing).

mod channel;
mod scan;
mod settle;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicQosOptions;
use lapin::{BasicProperties, Channel, Confirmation};
use tokio_util::sync::CancellationToken;

use super::{open_for_reading, prepare_channel, requeue_all};
use crate::broker::QueueLimits;
use crate::broker::{BrokerConnection, BrokerError};
use crate::dlq::browse::{guard, Access};
use crate::dlq::replay::{
    checkpoint_batch, pause_for, prefetch_for, Observer, ReplayOptions, ReplayReport, NACKED,
    NOT_CONFIRMED, UNROUTABLE,
};
use crate::dlq::route::Routes;
use crate::dlq::DeadLetter;
use crate::rabbitmq::amqp::map_error;
use crate::rabbitmq::RabbitMq;
use crate::topology::DesiredTopology;

/// Replayed originals acknowledged at once by one `basic.ack` with `multiple`, where no
/// held message lies below them.
const ACK_EVERY: usize = 250;

/// The shortest pause between copies (`1 / --rate`) before which every copy is settled.
const SETTLE_EACH_PAUSE: Duration = Duration::from_millis(10);

/// How long without a delivery before the scan checks whether the queue is empty.
const IDLE: Duration = Duration::from_millis(250);

/// Replays the matching messages of the dead-letter queues of `topology` on `broker`
/// ([`crate::dlq::replay`]). `cancel` is checked before each message: once it fires, the
/// copies in flight are settled, the rest given back, and the report says
/// [`Outcome::Partial`](crate::dlq::replay::Outcome::Partial) (so it does when a
/// checkpoint of `observer` fails).
///
/// # Errors
/// As [`DeadLetterOps::replay`](crate::broker::DeadLetterOps::replay).
pub async fn replay(
    broker: &RabbitMq,
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    cancel: &CancellationToken,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    let conn = broker.mgmt.connection();
    // Where each copy goes is resolved from the broker's bindings (`route`), once per
    // (exchange, routing key) for the whole replay.
    let mut routes = Routes::default();
    let mut report = ReplayReport::start(topology, opts);
    let source = topology.routes.source_queue.clone();
    // Every dead-letter queue looked up first: a missing one is an error before anything
    // is replayed.
    let Some((queues, connection)) =
        open_for_reading(broker, topology, Access::Write, cancel).await?
    else {
        report.finish(true);
        return Ok(report);
    };
    let interrupted = AtomicBool::new(false);
    let result = async {
        for (queue, limits) in queues {
            if cancel.is_cancelled() || interrupted.load(Ordering::SeqCst) {
                break;
            }
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| map_error(conn, &e))?;
            let run = Run {
                broker,
                conn,
                vhost: &topology.vhost,
                channel: &channel,
                queue,
                source: &source,
                limits,
                opts,
                now_ms,
                cancel,
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
    report.finish(cancel.is_cancelled() || interrupted.load(Ordering::SeqCst));
    Ok(report)
}

/// How fast one queue's replay goes: the pause between copies, the copies per checkpoint
/// and the consumer's prefetch window.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// Between two copies (`None`: as fast as confirms come).
    pause: Option<Duration>,
    /// Copies per checkpoint.
    batch: u64,
    /// The consumer's prefetch window.
    prefetch: u16,
}

/// One dead-letter queue's replay.
struct Run<'a> {
    /// The broker (its connection settings; where copies would go: [`Routes`]).
    broker: &'a RabbitMq,
    conn: &'a BrokerConnection,
    /// The vhost (for the publishing connection and the routes).
    vhost: &'a str,
    /// The channel holding the messages read.
    channel: &'a Channel,
    queue: &'a str,
    /// The DeadLetterQueue's source queue.
    source: &'a str,
    limits: QueueLimits,
    opts: &'a ReplayOptions,
    now_ms: u64,
    cancel: &'a CancellationToken,
    /// Set when a checkpoint failed: the replay stops like on `cancel`.
    interrupted: &'a AtomicBool,
}

/// An AMQP operation already sent (polled once), awaited later.
type Pending<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, lapin::Error>> + Send>>;

/// Why the broker did not take a copy, from its publisher confirm (`None`: taken).
fn copy_failure(c: &Confirmation) -> Option<String> {
    match c {
        Confirmation::Ack(None) => None,
        Confirmation::Ack(Some(_)) => Some(UNROUTABLE.into()),
        Confirmation::Nack(_) => Some(NACKED.into()),
        Confirmation::NotRequested => Some(NOT_CONFIRMED.into()),
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
    properties: BasicProperties,
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
        let pace = Pace {
            // Between two copies: 1 / rate seconds, at most a day.
            pause: pause_for(self.opts.rate),
            // At a limited rate, a checkpoint about once a second; otherwise every batch.
            batch: checkpoint_batch(self.opts.rate),
            prefetch: prefetch_for(self.opts.rate),
        };
        // A quorum queue with a delivery limit is read one `basic.get` at a time: every
        // message delivered and not yet decided would return to it with a delivery counted
        // if the process died, and a prefetch window holds many; one read at a time keeps
        // that to the single message in hand (ARCHITECTURE "Replay").
        let one_at_a_time = self.limits.quorum && self.limits.delivery_limit.is_some();
        let consumer = if one_at_a_time {
            None
        } else {
            ch.basic_qos(pace.prefetch, BasicQosOptions { global: false })
                .await
                .map_err(amqp)?;
            Some(self.consume().await?)
        };
        // The messages there at the start: copies rotated on the way go behind them and
        // are not read again (nor is a failed one retried in the same run).
        let mut state = Scan::new(consumer, one_at_a_time, count, std::mem::take(routes));
        let result = self.scan(&mut state, report, observer, pace).await;
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
    /// [`CONFIRM_WINDOW_ONE_AT_A_TIME`](crate::dlq::replay::CONFIRM_WINDOW_ONE_AT_A_TIME) acks follow the last one.
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
    /// limit; or once the consumer got nothing while messages were ready: a single
    /// active consumer elsewhere).
    one_at_a_time: bool,
    /// Waits in a row without a delivery while the queue had ready messages.
    idle_rounds: u32,
    /// The channel copies are published on (`Run::publisher`).
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

impl Scan {
    /// The state at the start of a scan of a queue of `to_read` messages, with `consumer`
    /// (none when reading `one_at_a_time`) and the routes resolved so far.
    fn new(
        consumer: Option<lapin::Consumer>,
        one_at_a_time: bool,
        to_read: u64,
        routes: Routes,
    ) -> Self {
        Scan {
            consumer,
            one_at_a_time,
            idle_rounds: 0,
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
            routes,
            to_read,
            read: 0,
            next_slot: None,
            batch_left: 0,
            unproven: 0,
        }
    }
}
