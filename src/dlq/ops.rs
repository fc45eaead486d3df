//! The dead-letter part of the broker seam: the operations every broker adapter runs for
//! the neutral logic of [`crate::dlq`] ([`DeadLetterOps`]), named in this module's own
//! request and report types. A whole broker client is this and the topology part
//! ([`crate::broker::BrokerClient`]).

use tokio_util::sync::CancellationToken;

use super::browse::InspectOptions;
use super::filter::Filter;
use super::purge::PurgeReport;
use super::replay::{Observer, ReplayOptions, ReplayReport};
use super::route::ExchangeRoute;
use super::Inspection;
use crate::topology::DesiredTopology;
use crate::wire::{BrokerError, QueueCounts};

/// The dead-letter part of a broker client, object-safe (`Arc<dyn DeadLetterOps>`). The
/// rules every implementation keeps (module docs of [`crate::dlq`] and its submodules):
/// no message is lost (a copy is confirmed before its original goes), a message is never
/// pushed past its delivery limit by being read ([`crate::dlq::release_for`]), every
/// dead-letter queue is looked up before any is read, and `cancel` stops an operation
/// between two messages with the message in hand settled.
#[async_trait::async_trait]
pub trait DeadLetterOps: Send + Sync {
    /// Summarises the dead-letter queues of `topology`, giving every message back;
    /// `now_ms` (ms since epoch) dates the ages. Once `cancel` fires, the summary covers
    /// what was read, with [`Inspection::interrupted`] set.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] naming a missing dead-letter queue (nothing read then);
    /// connection, authentication and protocol errors.
    async fn inspect(
        &self,
        topology: &DesiredTopology,
        opts: InspectOptions,
        now_ms: u64,
        cancel: &CancellationToken,
    ) -> Result<Inspection, BrokerError>;

    /// Replays the messages of `topology`'s dead-letter queues that `opts` takes
    /// ([`crate::dlq::replay`]); `observer` sees the progress and keeps the checkpoints.
    /// Once `cancel` fires, the copies in flight are settled and the report says
    /// [`crate::dlq::replay::Outcome::Partial`].
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing dead-letter queue (nothing replayed then),
    /// [`BrokerError::NameOwned`] for a queue another DeadLetterQueue owns; connection and
    /// protocol errors (copies already confirmed stay replayed).
    async fn replay(
        &self,
        topology: &DesiredTopology,
        opts: &ReplayOptions,
        now_ms: u64,
        cancel: &CancellationToken,
        observer: &mut dyn Observer,
    ) -> Result<ReplayReport, BrokerError>;

    /// Removes the messages of `topology`'s dead-letter queues that `filter` takes (none
    /// with `dry_run`), counting into `report` as it goes, so that after an error the
    /// caller still knows what was removed ([`crate::dlq::purge`]).
    ///
    /// # Errors
    /// As [`DeadLetterOps::replay`].
    async fn purge(
        &self,
        topology: &DesiredTopology,
        filter: &Filter,
        dry_run: bool,
        now_ms: u64,
        cancel: &CancellationToken,
        report: &mut PurgeReport,
    ) -> Result<(), BrokerError>;

    /// Ready messages and consumers of queue `name` of `vhost`; `None` when there is no
    /// such queue.
    ///
    /// # Errors
    /// Connection and authentication errors.
    async fn passive_queue_counts(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<QueueCounts>, BrokerError>;

    /// Exchange `name` of `vhost`: its type and its bindings as a source (where a replayed
    /// copy published there would go, [`crate::dlq::route`]); `None` when it does not
    /// exist.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn exchange_route(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<ExchangeRoute>, BrokerError>;
}
