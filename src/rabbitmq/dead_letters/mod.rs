//! The RabbitMQ engines of the dead-letter operations ([`crate::dlq`]), over AMQP 0-9-1
//! (`lapin`) and the management API: [`browse`] (inspect), [`purge`], [`replay`], and
//! what they share here — looking every dead-letter queue up before any is read, a
//! channel in confirm mode, giving held messages back (requeue or rotation).
//!
//! The neutral side of each operation (options, reports, per-message decisions, the
//! delivery-limit rule) is in [`crate::dlq`]; `lapin`'s properties and headers become the
//! neutral ones in [`convert`]. `RabbitMq`'s
//! [`DeadLetterOps`](crate::broker::DeadLetterOps) runs these engines
//! (`rabbitmq::seam`).

pub mod browse;
pub mod convert;
pub mod purge;
pub mod replay;

use lapin::options::{
    BasicAckOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::amqp::{connect_vhost, map_error};
use super::management::encode_segment as enc;
use super::ownership::{Claim, QUEUE, SOURCE_ROLE};
use super::RabbitMq;
use crate::broker::QueueLimits;
use crate::broker::{BrokerConnection, BrokerError};
use crate::dlq::browse::Access;
use crate::dlq::route::{Binding, ExchangeRoute};
use crate::dlq::{release_for, Release};
use crate::topology::DesiredTopology;

/// Whether a command that moves or removes messages must own `claim`'s name: the
/// dead-letter queues it reads and the source queue replay writes to. A name another
/// DeadLetterQueue's ownership record holds is never acted on.
pub fn written_by_commands(claim: &Claim) -> bool {
    claim.kind == QUEUE && (claim.field == "spec.deadLetter.queue" || claim.role == SOURCE_ROLE)
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

/// Starts a consumer of `queue` on `channel` with manual acknowledgements (the broker
/// names it): every delivery stays held until acked, nacked, or the channel closes.
pub(super) async fn consume_held(
    channel: &Channel,
    queue: &str,
) -> Result<lapin::Consumer, lapin::Error> {
    channel
        .basic_consume(
            queue.into(),
            "".into(),
            lapin::options::BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Puts `channel` in confirm mode (for rotations and copies) and returns how many messages
/// `queue` holds (a passive declare: current, unlike the management statistics).
pub(super) async fn prepare_channel(channel: &Channel, queue: &str) -> Result<u64, lapin::Error> {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    ready_count(channel, queue).await
}

/// How many messages `queue` holds ready right now (a passive declare on `channel`:
/// current, unlike the management statistics; messages delivered and not yet settled
/// are not counted).
pub(super) async fn ready_count(channel: &Channel, queue: &str) -> Result<u64, lapin::Error> {
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
            .check_claims_where(topology, written_by_commands)
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

/// The dead-letter queues to read, each with its limits.
pub(super) type Queues<'t> = Vec<(&'t str, QueueLimits)>;

/// What a reading command (inspect, replay, purge) needs before it reads: each
/// dead-letter queue with its limits ([`limits_of_all`]) and a connection to the vhost —
/// or `None` when `cancel` fires first. Nothing has been read then, so giving up is safe,
/// and a signal during a slow or hung lookup ends the command at once instead of after
/// the connect timeout.
///
/// # Errors
/// As [`limits_of_all`] and [`connect_vhost`].
pub(super) async fn open_for_reading<'t>(
    broker: &RabbitMq,
    topology: &'t DesiredTopology,
    access: Access,
    cancel: &CancellationToken,
) -> Result<Option<(Queues<'t>, lapin::Connection)>, BrokerError> {
    let conn = broker.mgmt.connection();
    let open = async {
        let queues = limits_of_all(broker, topology, access).await?;
        let connection = connect_vhost(conn, &topology.vhost).await?;
        Ok((queues, connection))
    };
    tokio::select! {
        opened = open => opened.map(Some),
        () = cancel.cancelled() => Ok(None),
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

/// An exchange as `GET /api/exchanges/{vhost}/{name}` describes it (the fields used).
#[derive(Debug, Clone, Deserialize)]
struct ExchangeRecord {
    /// `direct`, `fanout`, `topic`, `headers`, or a plugin's type.
    #[serde(rename = "type")]
    kind: String,
}

impl RabbitMq {
    /// Exchange `name` of `vhost` and its bindings as a source, from
    /// `GET /api/exchanges/{vhost}/{name}` and `…/bindings/source`; `None` on 404.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn exchange_route(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<ExchangeRoute>, BrokerError> {
        let path = format!("exchanges/{}/{}", enc(vhost), enc(name));
        let what = format!("exchange {name:?} in vhost {vhost:?}");
        match self.mgmt.get_json::<ExchangeRecord>(&path, &what).await {
            Ok(record) => {
                let bindings: Vec<Binding> = self
                    .mgmt
                    .get_json(&format!("{path}/bindings/source"), &what)
                    .await?;
                Ok(Some(ExchangeRoute {
                    kind: record.kind,
                    bindings,
                }))
            }
            Err(BrokerError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
