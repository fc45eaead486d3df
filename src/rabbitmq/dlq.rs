//! The dead-letter operations on the RabbitMQ broker of a Secret's connection settings:
//! each makes a client ([`super::factory`]) and runs the broker-neutral operation of
//! [`crate::dlq`] on it. What the `dlq` commands and the tests call when they hold a
//! [`BrokerConnection`] rather than a client.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::broker::{BrokerConnection, BrokerError};
use crate::dlq::browse::{inspect_with, InspectOptions};
use crate::dlq::filter::Filter;
use crate::dlq::purge::{purge_with, PurgeReport};
use crate::dlq::replay::{replay_resuming, Observer, ReplayOptions, ReplayReport};
use crate::dlq::{DeadLetterOps, Inspection};
use crate::topology::DesiredTopology;

/// Summarises the dead-letter queues of `topology` on the broker of `conn` (module doc of
/// [`crate::dlq::browse`]: how no message is lost). `now_ms` (ms
/// since epoch) dates the ages.
///
/// # Errors
/// [`BrokerError::NotFound`] naming a dead-letter queue that does not exist; connection,
/// authentication and AMQP errors (every held message then returns to its queue when the
/// channel closes, within the spare return [`release_for`](crate::dlq::release_for) keeps for
/// that).
pub async fn inspect(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: InspectOptions,
    now_ms: u64,
) -> Result<Inspection, BrokerError> {
    let client = super::factory().client(conn)?;
    inspect_with(
        client.as_ref(),
        topology,
        opts,
        now_ms,
        &CancellationToken::new(),
    )
    .await
}

/// Removes the messages of `topology`'s dead-letter queues that `filter` takes (none with
/// `dry_run`) on the broker of `conn`, counting into `report` as it goes, so that after an
/// error the caller still knows what was removed before it (removed messages stay
/// removed). `cancel` is checked before each message.
///
/// # Errors
/// [`BrokerError::NotFound`] for a missing dead-letter queue (every one is looked up
/// before anything is read, so nothing is removed then); connection and AMQP errors
/// (held messages return to their queue).
pub async fn purge_into(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    filter: &Filter,
    dry_run: bool,
    now_ms: u64,
    cancel: &CancellationToken,
    report: &mut PurgeReport,
) -> Result<(), BrokerError> {
    let client = super::factory().client(conn)?;
    purge_with(
        client.as_ref(),
        topology,
        filter,
        dry_run,
        now_ms,
        cancel,
        report,
    )
    .await
}

/// Replays the matching messages of the dead-letter queues of `topology` on the broker of
/// `conn`, resuming a pass that lost the broker on the next address that answers
/// ([`replay_resuming`]: the rules, the report and the errors).
///
/// # Errors
/// As [`replay_resuming`].
pub async fn replay(
    conn: &BrokerConnection,
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    cancel: &CancellationToken,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    let connect = || -> Result<Arc<dyn DeadLetterOps>, BrokerError> {
        let client: Arc<dyn DeadLetterOps> = super::factory().client(conn)?;
        Ok(client)
    };
    replay_resuming(&connect, topology, opts, now_ms, cancel, observer).await
}
