//! The RabbitMQ engine of `dlq inspect` ([`crate::dlq::browse`]: how no message is lost).
//!
//! Every message read is held unacknowledged until the whole scan is done; then each is
//! requeued, in read order, or, on a quorum queue whose delivery limit a return could
//! reach, rotated — an exact copy published to the same queue with a publisher confirm,
//! and only then the original acknowledged.
//!
//! **How it reads.** A consumer (manual acknowledgements) with a prefetch window of the
//! scan's budget. It takes deliveries until the budget — never more than the queue held
//! at the start (its passive declare), so a message that arrives or returns meanwhile at
//! the tail is not read as a new one — or until nothing came for [`IDLE`] and the queue
//! has no ready message left (others took some of those counted), or `cancel` fires. One
//! `basic.get` per message was a synchronous round trip each, about 1 ms on a quorum queue
//! (a command through its Raft log) and 0.3 ms on a classic one; the window streams them
//! (docs/BENCHMARKS.md, "Dead-letter console").
//!
//! **How the consumer's messages go back.** The consumer is left consuming and the
//! channel closed (close-ok awaited): the broker then returns every message the channel
//! holds — read, or delivered and not read — to the head of the queue, in queue order,
//! with one delivery counted, as a requeue does. Not `basic.nack` one by one: on
//! RabbitMQ 3.10 a quorum queue without a delivery limit puts a nacked message at its
//! *tail* (measured: a scan of 10 of 30 left them behind the other 20 — with the consumer
//! after `basic.cancel`, and with the former `basic.get` reads too), and a message nacked
//! while the consumer still runs is delivered again at once, into the window it freed.
//! Nothing is rotated on this path: it only reads queues where a return cannot reach a
//! delivery limit ([`release_for`] requeues them all).
//!
//! **Where `basic.get` stays.** A quorum queue with a delivery limit is still read one
//! `basic.get` at a time, as `dlq replay` reads it: a message delivered and not yet
//! decided returns with a delivery counted if the process dies, and a prefetch window
//! holds many such — one of them already at its limit would then be dead-lettered by the
//! reading. One at a time keeps that to the single message in hand, and each read message
//! near the limit is rotated before the next is read ([`keep`]); the others are nacked in
//! read order at the end. So is a budget above 65,535 (the largest prefetch window), and a
//! queue whose consumer got nothing while messages were ready: another consumer holds it
//! (`x-single-active-consumer`), and `basic.get` is not held back by that. The
//! dead-letter queues `dlq-operator apply` manages have no delivery limit
//! (`delivery-limit: -1` in their policy), so they take the fast way.

use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicGetOptions, BasicQosOptions};
use lapin::{Channel, Consumer};
use tokio_util::sync::CancellationToken;

use super::{
    consume_held, keep, open_for_reading, prepare_channel, ready_count, requeue_all, Held,
};
use crate::broker::message::Properties;
use crate::broker::QueueLimits;
use crate::broker::{BrokerConnection, BrokerError};
use crate::dlq::browse::{budget, guard, Access, InspectOptions};
use crate::dlq::{release_for, DeadLetter, Inspection, Release};
use crate::rabbitmq::amqp::map_error;
use crate::rabbitmq::RabbitMq;
use crate::topology::DesiredTopology;

/// Summarises the dead-letter queues of `topology` on `broker`, stopping once `cancel`
/// fires (checked before each message): the message in hand is settled first, every held
/// message is given back, and the summary covers what was read, with
/// [`Inspection::interrupted`] set.
///
/// # Errors
/// As [`DeadLetterOps::inspect`](crate::broker::DeadLetterOps::inspect).
pub async fn inspect(
    broker: &RabbitMq,
    topology: &DesiredTopology,
    opts: InspectOptions,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<Inspection, BrokerError> {
    let conn = broker.mgmt.connection();
    let mut out = Inspection {
        resource: topology.owner.clone(),
        ..Inspection::default()
    };
    let Some((queues, connection)) =
        open_for_reading(broker, topology, Access::Read, cancel).await?
    else {
        out.interrupted = true;
        return Ok(out);
    };
    let result = async {
        for (queue, limits) in queues {
            if cancel.is_cancelled() {
                out.interrupted = true;
                break;
            }
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| map_error(conn, &e))?;
            let scan = Scan {
                conn,
                channel: &channel,
                queue,
                limits,
                opts,
                now_ms,
                cancel,
            };
            // A consumer stays until the channel is closed: its messages go back then.
            let mut consumer = None;
            let scanned = scan.run(&mut out, &mut consumer).await;
            let _ = channel.close(200, "inspected".into()).await;
            drop(consumer);
            scanned?;
            out.queues.push(queue.to_string());
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result.map(|()| out)
}

/// How long the consumer waits for a delivery before it looks whether the queue still has
/// ready messages (none: it had fewer than counted at the start, and the scan is over).
pub const IDLE: Duration = Duration::from_millis(250);

/// How many [`IDLE`] waits in a row end the scan although the queue still shows ready
/// messages (a broker that does not deliver them to this consumer).
const IDLE_ROUNDS: u32 = 8;

/// The scan of one dead-letter queue.
struct Scan<'a> {
    conn: &'a BrokerConnection,
    channel: &'a Channel,
    queue: &'a str,
    limits: QueueLimits,
    opts: InspectOptions,
    now_ms: u64,
    cancel: &'a CancellationToken,
}

/// What the consumer gave after a wait (short-lived: one per message, never stored).
#[allow(clippy::large_enum_variant)]
enum Next {
    /// A message.
    Delivery(Delivery),
    /// Nothing more to read: nothing came and the queue has no ready message left.
    Idle,
    /// `cancel` fired.
    Cancelled,
}

impl Scan<'_> {
    /// Reads up to the remaining budget of the queue into `out` (less once `cancel`
    /// fires), then gives every message back.
    async fn run(
        &self,
        out: &mut Inspection,
        consumer: &mut Option<Consumer>,
    ) -> Result<(), BrokerError> {
        let count = prepare_channel(self.channel, self.queue)
            .await
            .map_err(|e| self.amqp(e))?;
        guard(self.queue, &self.limits, count)?;
        out.total += count;
        let to_read = budget(self.opts.max_messages, out.scanned, count);
        if !(self.limits.quorum && self.limits.delivery_limit.is_some())
            && to_read <= u64::from(u16::MAX)
        {
            let before = out.scanned;
            self.consume(to_read, out, consumer).await?;
            if out.scanned > before || out.interrupted || to_read == 0 {
                return Ok(());
            }
            // Nothing came although the queue counted messages: another consumer holds
            // it (`x-single-active-consumer`). `basic.get` is not subject to that.
            if let Some(c) = consumer.take() {
                self.channel
                    .basic_cancel(c.tag(), BasicCancelOptions::default())
                    .await
                    .map_err(|e| self.amqp(e))?;
            }
        }
        let mut requeue = Vec::new();
        // On an error the held messages return to the queue when the channel closes.
        self.get_each(to_read, out, &mut requeue).await?;
        requeue_all(self.channel, requeue)
            .await
            .map_err(|e| self.amqp(e))
    }

    /// The error of a failed AMQP call.
    fn amqp(&self, e: lapin::Error) -> BrokerError {
        map_error(self.conn, &e)
    }

    /// Reads up to `to_read` messages one `basic.get` at a time (a quorum queue with a
    /// delivery limit: module doc), each kept ([`keep`]) before the next is read.
    async fn get_each(
        &self,
        to_read: u64,
        out: &mut Inspection,
        requeue: &mut Vec<u64>,
    ) -> Result<(), BrokerError> {
        for _ in 0..to_read {
            if self.cancel.is_cancelled() {
                out.interrupted = true;
                break;
            }
            let Some(message) = self
                .channel
                .basic_get(self.queue.into(), BasicGetOptions { no_ack: false })
                .await
                .map_err(|e| self.amqp(e))?
            else {
                break;
            };
            self.take(&message.delivery, out, requeue).await?;
        }
        Ok(())
    }

    /// Reads up to `to_read` messages (at most 65,535) with a consumer and a prefetch
    /// window of that many (module doc), left in `slot`: still consuming, it holds them
    /// until the channel closes, which gives them back.
    async fn consume(
        &self,
        to_read: u64,
        out: &mut Inspection,
        slot: &mut Option<Consumer>,
    ) -> Result<(), BrokerError> {
        if to_read == 0 {
            return Ok(());
        }
        let window = u16::try_from(to_read).unwrap_or(u16::MAX);
        self.channel
            .basic_qos(window, BasicQosOptions { global: false })
            .await
            .map_err(|e| self.amqp(e))?;
        let consumer = slot.insert(
            consume_held(self.channel, self.queue)
                .await
                .map_err(|e| self.amqp(e))?,
        );
        // Without a delivery limit every message read stays (no rotation): given back by
        // the channel's close, not one by one.
        let mut given_back_on_close = Vec::new();
        for _ in 0..window {
            if self.cancel.is_cancelled() {
                out.interrupted = true;
                break;
            }
            match self.next(consumer).await? {
                Next::Delivery(d) => self.take(&d, out, &mut given_back_on_close).await?,
                Next::Idle => break,
                Next::Cancelled => {
                    out.interrupted = true;
                    break;
                }
            }
        }
        Ok(())
    }

    /// The consumer's next delivery, [`Next::Idle`] once nothing came for [`IDLE`] and
    /// the queue has no ready message (or after [`IDLE_ROUNDS`] such waits), or
    /// [`Next::Cancelled`].
    ///
    /// # Errors
    /// The channel's, or the broker cancelling the consumer (the queue deleted).
    async fn next(&self, consumer: &mut Consumer) -> Result<Next, BrokerError> {
        for _ in 0..IDLE_ROUNDS {
            let waited = tokio::select! {
                waited = tokio::time::timeout(IDLE, consumer.next()) => waited,
                () = self.cancel.cancelled() => return Ok(Next::Cancelled),
            };
            match waited {
                Ok(Some(d)) => return d.map(Next::Delivery).map_err(|e| self.amqp(e)),
                Ok(None) => {
                    return Err(BrokerError::Amqp {
                        reason: format!(
                            "queue {:?}: the broker cancelled the inspection's consumer (was the queue deleted?)",
                            self.queue
                        ),
                    })
                }
                Err(_idle) => {
                    let ready = ready_count(self.channel, self.queue)
                        .await
                        .map_err(|e| self.amqp(e))?;
                    if ready == 0 {
                        return Ok(Next::Idle);
                    }
                }
            }
        }
        Ok(Next::Idle)
    }

    /// Adds `delivery` (just read) to `out` and keeps it ([`keep`]): its tag joins
    /// `requeue`, or it is rotated now.
    async fn take(
        &self,
        delivery: &Delivery,
        out: &mut Inspection,
        requeue: &mut Vec<u64>,
    ) -> Result<(), BrokerError> {
        let (quorum, limit) = (self.limits.quorum, self.limits.delivery_limit);
        let letter = DeadLetter::from_properties(
            self.queue,
            &Properties::from(&delivery.properties),
            &delivery.data,
            self.opts.preview_bytes,
        );
        let count = letter.delivery_count;
        if release_for(quorum, limit, count) == Release::Rotate {
            out.rotated += 1;
        }
        out.add(letter, self.now_ms, self.opts.sample_size);
        let held = Held {
            tag: delivery.delivery_tag,
            count,
            properties: &delivery.properties,
            body: &delivery.data,
        };
        keep(
            self.conn,
            self.channel,
            self.queue,
            (quorum, limit),
            held,
            requeue,
        )
        .await
    }
}
