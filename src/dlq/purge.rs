//! `dlq purge`: removes only the dead-lettered messages a filter takes (the CLI requires
//! `--older-than`), read like inspection reads (held until the end); every other message
//! goes back by the inspection rule ([`super::release_for`]).

use std::sync::atomic::{AtomicBool, Ordering};

use lapin::options::{BasicAckOptions, BasicGetOptions};
use serde::Serialize;

use super::browse::{guard, keep, open_for_reading, prepare_channel, requeue_all, Access, Held};
use super::filter::Filter;
use super::DeadLetter;
use crate::broker::rabbitmq::amqp::map_error;
use crate::broker::rabbitmq::RabbitMq;
use crate::broker::{BrokerConnection, BrokerError};
use crate::topology::DesiredTopology;

/// The purge report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PurgeReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// Nothing was removed.
    pub dry_run: bool,
    /// Stopped before the end (Ctrl-C).
    pub interrupted: bool,
    /// Messages in the dead-letter queues when it started.
    pub total: u64,
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Messages removed (0 in a dry run).
    pub removed: u64,
    /// Messages kept because they carry no dead-lettering time, so no age
    /// ([`super::dead_lettered_at`]): an age filter never takes them.
    pub unknown_age: u64,
}

/// Removes the messages of `topology`'s dead-letter queues that `filter` takes (none with
/// `dry_run`). `stop` is checked before each message.
///
/// # Errors
/// [`BrokerError::NotFound`] for a missing dead-letter queue (every one is looked up
/// before anything is read, so nothing is removed then); connection and AMQP errors
/// (held messages return to their queue; those already removed stay removed).
pub async fn purge(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    filter: &Filter,
    dry_run: bool,
    now_ms: u64,
    stop: &AtomicBool,
) -> Result<PurgeReport, BrokerError> {
    let mut report = PurgeReport::default();
    purge_into(conn, topology, filter, dry_run, now_ms, stop, &mut report).await?;
    Ok(report)
}

/// [`purge`] counting into `report` as it goes, so that after an error the caller still
/// knows what was removed before it (removed messages stay removed).
///
/// # Errors
/// As [`purge`].
pub async fn purge_into(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    filter: &Filter,
    dry_run: bool,
    now_ms: u64,
    stop: &AtomicBool,
    report: &mut PurgeReport,
) -> Result<(), BrokerError> {
    let broker = RabbitMq::new(conn)?;
    *report = PurgeReport {
        resource: topology.owner.clone(),
        dry_run,
        ..PurgeReport::default()
    };
    // Every dead-letter queue looked up first: a missing one is an error before anything
    // is removed.
    let Some((queues, connection)) =
        open_for_reading(conn, &broker, topology, Access::Write, stop).await?
    else {
        report.interrupted = true;
        return Ok(());
    };
    let amqp = |e: lapin::Error| map_error(conn, &e);
    let result = async {
        for (queue, limits) in queues {
            if stop.load(Ordering::SeqCst) {
                report.interrupted = true;
                break;
            }
            let facts = (limits.quorum, limits.delivery_limit);
            let ch = connection.create_channel().await.map_err(amqp)?;
            let count = prepare_channel(&ch, queue).await.map_err(amqp)?;
            guard(queue, &limits, count)?;
            report.total += count;
            let mut requeue = Vec::new();
            for _ in 0..count {
                if stop.load(Ordering::SeqCst) {
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
                let letter = DeadLetter::read(queue, &d.properties, &d.data, 0);
                report.scanned += 1;
                if letter.dead_lettered_at_ms.is_none() {
                    report.unknown_age += 1;
                }
                if filter.matches(&letter, now_ms) {
                    report.matched += 1;
                    if !dry_run {
                        ch.basic_ack(d.delivery_tag, BasicAckOptions::default())
                            .await
                            .map_err(amqp)?;
                        report.removed += 1;
                        continue;
                    }
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
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "bye".into()).await;
    result
}
