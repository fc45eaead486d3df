//! The RabbitMQ engine of `dlq inspect` ([`crate::dlq::browse`]: how no message is lost).
//!
//! Every message is read with `basic.get` (no auto-ack) and held unacknowledged until the
//! whole scan is done; then each is requeued (`basic.nack`, in read order) or, on a quorum
//! queue whose delivery limit a return could reach, rotated — an exact copy published to
//! the same queue with a publisher confirm, and only then the original acknowledged.

use lapin::options::BasicGetOptions;
use lapin::Channel;
use tokio_util::sync::CancellationToken;

use super::{keep, open_for_reading, prepare_channel, requeue_all, Held};
use crate::broker::message::Properties;
use crate::broker::rabbitmq::amqp::map_error;
use crate::broker::rabbitmq::{QueueLimits, RabbitMq};
use crate::broker::{BrokerConnection, BrokerError};
use crate::dlq::browse::{budget, guard, Access, InspectOptions};
use crate::dlq::{release_for, DeadLetter, Inspection, Release};
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
            let scanned = scan.run(&mut out).await;
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

impl Scan<'_> {
    /// Reads up to the remaining budget of the queue into `out` (less once `cancel`
    /// fires), then gives every message back.
    async fn run(&self, out: &mut Inspection) -> Result<(), BrokerError> {
        let (conn, channel, queue) = (self.conn, self.channel, self.queue);
        let amqp = |e: lapin::Error| map_error(conn, &e);
        let count = prepare_channel(channel, queue).await.map_err(amqp)?;
        guard(queue, &self.limits, count)?;
        let (quorum, limit) = (self.limits.quorum, self.limits.delivery_limit);
        out.total += count;
        let mut requeue = Vec::new();
        for _ in 0..budget(self.opts.max_messages, out.scanned, count) {
            if self.cancel.is_cancelled() {
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
            let letter = DeadLetter::from_properties(
                queue,
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
            keep(conn, channel, queue, (quorum, limit), held, &mut requeue).await?;
        }
        requeue_all(channel, requeue).await.map_err(amqp)
    }
}
