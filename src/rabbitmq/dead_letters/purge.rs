//! The RabbitMQ engine of `dlq purge` ([`crate::dlq::purge`]): each message is read with
//! `basic.get` and held; the ones the filter takes are acknowledged (removed), every other
//! one is given back by the inspection rule.

use lapin::options::{BasicAckOptions, BasicGetOptions};
use lapin::Connection;
use tokio_util::sync::CancellationToken;

use super::{keep, open_for_reading, prepare_channel, requeue_all, Held};
use crate::broker::message::Properties;
use crate::broker::BrokerError;
use crate::broker::QueueLimits;
use crate::dlq::browse::{guard, Access};
use crate::dlq::filter::Filter;
use crate::dlq::purge::PurgeReport;
use crate::dlq::DeadLetter;
use crate::rabbitmq::amqp::map_error;
use crate::rabbitmq::RabbitMq;
use crate::topology::DesiredTopology;

/// What a purge takes: the filter, the time it reads at (`now_ms`, ms since epoch) and
/// the token that stops it.
struct Request<'a> {
    filter: &'a Filter,
    now_ms: u64,
    cancel: &'a CancellationToken,
}

/// Removes the messages of `topology`'s dead-letter queues that `filter` takes (none
/// with `dry_run`) on `broker`, counting into `report` as it goes; `cancel` is checked
/// before each message.
///
/// # Errors
/// As [`DeadLetterOps::purge`](crate::broker::DeadLetterOps::purge).
pub async fn purge(
    broker: &RabbitMq,
    topology: &DesiredTopology,
    (filter, dry_run): (&Filter, bool),
    now_ms: u64,
    cancel: &CancellationToken,
    report: &mut PurgeReport,
) -> Result<(), BrokerError> {
    *report = PurgeReport::start(topology, dry_run);
    // Every dead-letter queue looked up first: a missing one is an error before anything
    // is removed.
    let Some((queues, connection)) =
        open_for_reading(broker, topology, Access::Write, cancel).await?
    else {
        report.interrupted = true;
        return Ok(());
    };
    let request = Request {
        filter,
        now_ms,
        cancel,
    };
    let result = async {
        for (queue, limits) in queues {
            if cancel.is_cancelled() {
                report.interrupted = true;
                break;
            }
            purge_queue(broker, &connection, (queue, limits), &request, report).await?;
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result
}

/// Purges one dead-letter queue on a channel of its own.
async fn purge_queue(
    broker: &RabbitMq,
    connection: &Connection,
    (queue, limits): (&str, QueueLimits),
    request: &Request<'_>,
    report: &mut PurgeReport,
) -> Result<(), BrokerError> {
    let conn = broker.mgmt.connection();
    let amqp = |e: lapin::Error| map_error(conn, &e);
    let facts = (limits.quorum, limits.delivery_limit);
    let ch = connection.create_channel().await.map_err(amqp)?;
    let count = prepare_channel(&ch, queue).await.map_err(amqp)?;
    guard(queue, &limits, count)?;
    report.total += count;
    let mut requeue = Vec::new();
    for _ in 0..count {
        if request.cancel.is_cancelled() {
            report.interrupted = true;
            break;
        }
        let Some(m) = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(amqp)?
        else {
            break;
        };
        let d = &m.delivery;
        let letter =
            DeadLetter::from_properties(queue, &Properties::from(&d.properties), &d.data, 0);
        if report.take(&letter, request.filter, request.now_ms) {
            ch.basic_ack(d.delivery_tag, BasicAckOptions::default())
                .await
                .map_err(amqp)?;
            report.removed_one();
            continue;
        }
        let held = Held {
            tag: d.delivery_tag,
            count: letter.delivery_count,
            properties: &d.properties,
            body: &d.data,
        };
        keep(conn, &ch, queue, facts, held, &mut requeue).await?;
    }
    requeue_all(&ch, requeue).await.map_err(amqp)?;
    let _ = ch.close(200, "purged".into()).await;
    Ok(())
}
