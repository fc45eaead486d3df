//! Reading a dead-letter queue without losing, dead-lettering or durably reordering a
//! message ([`inspect`]).
//!
//! Every message is read with `basic.get` (no auto-ack) and held unacknowledged until the
//! whole scan is done, so nothing is read twice; then each is given back by the rule of
//! [`release_for`]: requeued (`basic.nack`, in read order, so the queue keeps its order)
//! or, on a quorum queue whose delivery limit a return could reach, rotated — an exact
//! copy (body, properties, headers; `x-delivery-count` left out) published to the same
//! queue with a publisher confirm, and only then the original acknowledged. A crash
//! before the ack leaves the original and the copy: a duplicate, never a loss.

use std::sync::atomic::{AtomicBool, Ordering};

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation};

use super::{release_for, DeadLetter, Inspection, Release};
use crate::broker::rabbitmq::amqp::{connect_vhost, map_error};
use crate::broker::rabbitmq::{QueueLimits, RabbitMq};
use crate::broker::{BrokerConnection, BrokerError};
use crate::topology::DesiredTopology;

/// How much an inspection reads and shows.
#[derive(Debug, Clone, Copy)]
pub struct InspectOptions {
    /// Read at most this many messages over all the resource's dead-letter queues.
    pub max_messages: u64,
    /// Messages kept whole in [`Inspection::sample`].
    pub sample_size: usize,
    /// Body bytes kept per sampled message (`usize::MAX`: the whole body).
    pub preview_bytes: usize,
}

/// Summarises the dead-letter queues of `topology` on the broker of `conn` (module doc:
/// how no message is lost). `now_ms` (ms since epoch) dates the ages.
///
/// # Errors
/// [`BrokerError::NotFound`] naming a dead-letter queue that does not exist; connection,
/// authentication and AMQP errors (every held message then returns to its queue when the
/// channel closes, within the spare return [`release_for`] keeps for that).
pub async fn inspect(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: InspectOptions,
    now_ms: u64,
) -> Result<Inspection, BrokerError> {
    inspect_until(conn, topology, opts, now_ms, &AtomicBool::new(false)).await
}

/// [`inspect`] that stops reading once `stop` is set (checked before each message; the CLI
/// sets it on Ctrl-C, SIGTERM or SIGHUP): the message in hand is settled first (a message
/// near its delivery limit is rotated with a publisher confirm, not left to a crash), every
/// held message is given back, and the summary covers what was read, with
/// [`Inspection::interrupted`] set.
///
/// # Errors
/// As [`inspect`]. Every dead-letter queue is looked up before any is read, so a missing
/// one is an error with nothing read.
pub async fn inspect_until(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: InspectOptions,
    now_ms: u64,
    stop: &AtomicBool,
) -> Result<Inspection, BrokerError> {
    let broker = RabbitMq::new(conn)?;
    let mut out = Inspection {
        resource: topology.owner.clone(),
        ..Inspection::default()
    };
    let Some((queues, connection)) =
        open_for_reading(conn, &broker, topology, Access::Read, stop).await?
    else {
        out.interrupted = true;
        return Ok(out);
    };
    let result = async {
        for (queue, limits) in queues {
            if stop.load(Ordering::SeqCst) {
                out.interrupted = true;
                break;
            }
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| map_error(conn, &e))?;
            let scanned = scan(conn, &channel, queue, limits, opts, now_ms, stop, &mut out).await;
            let _ = channel.close(200, "inspected".into()).await;
            scanned?;
            out.queues.push(queue.to_string());
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result.map(|()| out)
}

/// Reads up to the remaining budget of `queue` into `out` (less once `stop` is set), then
/// gives every message back.
#[allow(clippy::too_many_arguments)]
async fn scan(
    conn: &BrokerConnection,
    channel: &Channel,
    queue: &str,
    limits: QueueLimits,
    opts: InspectOptions,
    now_ms: u64,
    stop: &AtomicBool,
    out: &mut Inspection,
) -> Result<(), BrokerError> {
    let amqp = |e: lapin::Error| map_error(conn, &e);
    let count = prepare_channel(channel, queue).await.map_err(amqp)?;
    guard(queue, &limits, count)?;
    let (quorum, limit) = (limits.quorum, limits.delivery_limit);
    out.total += count;
    let budget = opts.max_messages.saturating_sub(out.scanned).min(count);
    let mut requeue = Vec::new();
    for _ in 0..budget {
        if stop.load(Ordering::SeqCst) {
            out.interrupted = true;
            break;
        }
        let Some(message) = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(amqp)?
        else {
            break;
        };
        let delivery = &message.delivery;
        let letter = DeadLetter::read(
            queue,
            &delivery.properties,
            &delivery.data,
            opts.preview_bytes,
        );
        let count = letter.delivery_count;
        if release_for(quorum, limit, count) == Release::Rotate {
            out.rotated += 1;
        }
        out.add(letter, now_ms, opts.sample_size);
        let held = Held {
            tag: delivery.delivery_tag,
            count,
            properties: &delivery.properties,
            body: &delivery.data,
        };
        keep(conn, channel, queue, (quorum, limit), held, &mut requeue).await?;
    }
    requeue_all(channel, requeue).await.map_err(amqp)
}

/// Requeues the held messages `tags` one by one, in read order (`basic.nack`): the queue
/// keeps its order.
pub(super) async fn requeue_all(channel: &Channel, tags: Vec<u64>) -> Result<(), lapin::Error> {
    for tag in tags {
        channel
            .basic_nack(
                tag,
                BasicNackOptions {
                    multiple: false,
                    requeue: true,
                },
            )
            .await?;
    }
    Ok(())
}

/// Puts `channel` in confirm mode (for rotations and copies) and returns how many messages
/// `queue` holds (a passive declare: current, unlike the management statistics).
pub(super) async fn prepare_channel(channel: &Channel, queue: &str) -> Result<u64, lapin::Error> {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(u64::from(declared.message_count()))
}

/// What a `dlq` command does to the messages it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Reads and gives every message back (`inspect`).
    Read,
    /// Moves or removes messages (`replay`, `purge`).
    Write,
}

/// Each dead-letter queue of `topology` with its [`QueueLimits`], all looked up before any
/// is touched, so that a command that reads them (inspect, replay, purge) finds a missing
/// one before it has done anything, not after it replayed or removed messages of the
/// others.
///
/// # Errors
/// [`BrokerError::NameOwned`] when `access` is [`Access::Write`] and another
/// DeadLetterQueue's ownership record holds one of these dead-letter queues or the
/// source queue; [`BrokerError::NotFound`] naming the
/// first missing dead-letter queue; the management API's errors.
pub(super) async fn limits_of_all<'t>(
    broker: &RabbitMq,
    topology: &'t DesiredTopology,
    access: Access,
) -> Result<Vec<(&'t str, QueueLimits)>, BrokerError> {
    // A command that moves or removes messages never acts on queues another
    // DeadLetterQueue owns (its record on the broker): the dead-letter queues read, and
    // the source queue replay writes to. Inspection gives every message back, and must
    // work for a user without the tag that reads the records.
    if access == Access::Write {
        broker
            .check_claims_where(topology, |c| {
                use crate::broker::rabbitmq::ownership::{QUEUE, SOURCE_ROLE};
                c.kind == QUEUE && (c.field == "spec.deadLetter.queue" || c.role == SOURCE_ROLE)
            })
            .await?;
    }
    let mut all = Vec::new();
    for queue in topology.dead_letter_queues() {
        let limits = broker.queue_limits(&topology.vhost, queue).await?;
        if let Some(why) = limits.slow_reading(queue) {
            tracing::warn!("{}", crate::printable::escape(&why));
        }
        all.push((queue, limits));
    }
    Ok(all)
}

/// What a reading command (inspect, replay, purge) needs before it reads: each
/// dead-letter queue with its limits ([`limits_of_all`]) and a connection to the vhost —
/// or `None` when `stop` is set first ([`super::stopped`]). Nothing has been read then,
/// so giving up is safe, and a signal during a slow or hung lookup ends the command at
/// once instead of after the connect timeout.
///
/// # Errors
/// As [`limits_of_all`] and [`connect_vhost`].
pub(super) async fn open_for_reading<'t>(
    conn: &BrokerConnection,
    broker: &RabbitMq,
    topology: &'t DesiredTopology,
    access: Access,
    stop: &AtomicBool,
) -> Result<Option<(Vec<(&'t str, QueueLimits)>, lapin::Connection)>, BrokerError> {
    let open = async {
        let queues = limits_of_all(broker, topology, access).await?;
        let connection = connect_vhost(conn, &topology.vhost).await?;
        Ok((queues, connection))
    };
    tokio::select! {
        opened = open => opened.map(Some),
        () = super::stopped(stop) => Ok(None),
    }
}

/// Refuses to read `queue` (holding `count` messages) when that could push a message past
/// its delivery limit ([`QueueLimits::unsafe_to_read`]).
///
/// # Errors
/// [`BrokerError::Amqp`] saying why and what to do; nothing has been read.
pub(super) fn guard(queue: &str, limits: &QueueLimits, count: u64) -> Result<(), BrokerError> {
    match limits.unsafe_to_read(count) {
        None => Ok(()),
        Some(why) => Err(BrokerError::Amqp {
            reason: format!(
                "queue {queue:?} not read: a quorum queue with a delivery limit of {}, and {why}; \
                 reading it could push a message past the limit (a message near it is moved by \
                 publishing a copy first). Make room, or lift the length limit, then retry",
                limits.delivery_limit.unwrap_or_default()
            ),
        }),
    }
}

/// A message read and not yet acknowledged.
pub(super) struct Held<'a> {
    /// Its delivery tag.
    pub tag: u64,
    /// Its `x-delivery-count`.
    pub count: u64,
    /// Its properties.
    pub properties: &'a BasicProperties,
    /// Its body.
    pub body: &'a [u8],
}

/// A held message of `queue` that stays: its tag joins `requeue` (given back at the end,
/// in read order), or, where a return could reach the delivery limit, it is rotated now
/// ([`release_for`] with the queue's `(quorum, limit)`).
///
/// # Errors
/// A failed rotation (the original then stays held, and returns to the queue when the
/// channel closes).
pub(super) async fn keep(
    conn: &BrokerConnection,
    channel: &Channel,
    queue: &str,
    (quorum, limit): (bool, Option<u64>),
    held: Held<'_>,
    requeue: &mut Vec<u64>,
) -> Result<(), BrokerError> {
    match release_for(quorum, limit, held.count) {
        Release::Requeue => requeue.push(held.tag),
        Release::Rotate => {
            rotate(channel, queue, held.properties, held.body)
                .await
                .map_err(|e| rotation_error(conn, queue, e))?;
            channel
                .basic_ack(held.tag, BasicAckOptions::default())
                .await
                .map_err(|e| map_error(conn, &e))?;
        }
    }
    Ok(())
}

/// The error of a failed rotation of a message of `queue`.
fn rotation_error(conn: &BrokerConnection, queue: &str, e: Rotation) -> BrokerError {
    match e {
        Rotation::Amqp(e) => map_error(conn, &e),
        Rotation::Refused(why) => BrokerError::Amqp {
            reason: format!(
                "queue {queue:?}: the copy to rotate {why}; the original stays in the queue"
            ),
        },
    }
}

/// Why a rotation failed.
enum Rotation {
    /// The channel failed.
    Amqp(lapin::Error),
    /// The broker did not take the copy (what happened).
    Refused(&'static str),
}

/// Publishes a copy of a message to `queue` through the default exchange and waits for
/// the broker's confirm.
///
/// # Errors
/// A refused (nacked) or unroutable copy is an error: the original is then not acked.
async fn rotate(
    channel: &Channel,
    queue: &str,
    props: &BasicProperties,
    body: &[u8],
) -> Result<(), Rotation> {
    let mut headers = props.headers().clone().unwrap_or_default();
    let mut inner = headers.inner().clone();
    inner.remove("x-delivery-count");
    headers = FieldTable::from(inner);
    let copy = props.clone().with_headers(headers);
    let confirmation = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions {
                mandatory: true,
                immediate: false,
            },
            body,
            copy,
        )
        .await
        .map_err(Rotation::Amqp)?
        .await
        .map_err(Rotation::Amqp)?;
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err(Rotation::Refused("was unroutable")),
        Confirmation::Nack(_) => Err(Rotation::Refused("was refused by the broker")),
        Confirmation::NotRequested => Err(Rotation::Refused("was not confirmed")),
    }
}
