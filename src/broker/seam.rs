//! The broker seam: what the drivers (the controller, the standalone runner, the `dlq`
//! commands) need from a broker, as object-safe traits held as `Arc<dyn …>`, and the
//! factory that builds a client from connection settings — a narrow client interface
//! built by a factory, like the RabbitMQ messaging-topology-operator's.
//!
//! - [`BrokerTopology`]: apply and remove a plan, read queue depths and limits, the
//!   cluster name, delete a queue only if empty.
//! - [`DeadLetterOps`]: the dead-letter operations (inspect, replay, purge) and the reads
//!   they and the DeadLetterReplay controller need (passive queue counts, an exchange's
//!   bindings).
//! - [`BrokerClient`]: both, for one broker.
//! - [`BrokerFactory`]: [`BrokerConnection`] → [`BrokerClient`].
//!
//! Implementations: RabbitMQ (`rabbitmq::RabbitMq`, `rabbitmq::RabbitMqFactory`) and the
//! in-memory [`fake`](super::fake) for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{
    ApplyReport, BrokerConnection, BrokerError, DeleteOutcome, QueueDepth, QueueLimits,
    RemovalReport, RequestCounts,
};
use crate::dlq::browse::InspectOptions;
use crate::dlq::filter::Filter;
use crate::dlq::purge::PurgeReport;
use crate::dlq::replay::{Observer, ReplayOptions, ReplayReport};
use crate::dlq::route::ExchangeRoute;
use crate::dlq::Inspection;
use crate::topology::DesiredTopology;

/// The topology part of a broker client, object-safe (`Arc<dyn BrokerTopology>`).
#[async_trait::async_trait]
pub trait BrokerTopology: Send + Sync {
    /// Applies a plan: refuses it when another DeadLetterQueue owns one of its names
    /// (nothing written), records its ownership, declares what is missing, updates
    /// operator-owned policies that differ, reports conflicts without touching the
    /// conflicting objects, drains obsolete retry tiers and retires dead-letter queues
    /// the plan no longer has (docs/ARCHITECTURE.md, "Broker topology"). Idempotent: a
    /// second apply of the same plan writes nothing.
    ///
    /// # Errors
    /// Transport, authentication and vhost errors, [`BrokerError::NameOwned`] for another
    /// owner's name; per-object problems are reported as [`Outcome`](super::Outcome)s in
    /// the [`ApplyReport`] instead.
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError>;

    /// Removes the operator-owned objects of `plan` (`deletionPolicy: Delete`,
    /// docs/REFERENCE.md): the operator's policies, the retry and dead-letter exchanges,
    /// the retry tier queues (planned and obsolete ones) and the dead-letter queues. The
    /// source queue is never deleted (only our policy on it is removed). Nothing is
    /// removed unless every queue to delete is idle: no message (ready or unacknowledged)
    /// and no consumer; otherwise [`RemovalReport::blocked`] says why and the broker is
    /// left untouched. A missing vhost means there is nothing to remove.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError>;

    /// Depths of every queue of `vhost`, by queue name, read in one call.
    ///
    /// # Errors
    /// Transport, authentication and vhost errors.
    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError>;

    /// [`BrokerTopology::queue_depths`] that must cover `required` (the queues whose depths
    /// the caller will judge): a cheaper source that lacks one of them is not used.
    ///
    /// # Errors
    /// As [`BrokerTopology::queue_depths`].
    async fn queue_depths_covering(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError>;

    /// [`BrokerTopology::queue_depths_covering`] that also counts the consumers
    /// ([`QueueDepth::consumers`]) of the queues in `consumers_of` (a subset of
    /// `required`), still in one listing. A client that has nothing cheaper lists as
    /// [`BrokerTopology::queue_depths_covering`] does (the default).
    ///
    /// # Errors
    /// As [`BrokerTopology::queue_depths`].
    async fn queue_depths_and_consumers(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
        consumers_of: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        let _ = consumers_of;
        self.queue_depths_covering(vhost, required).await
    }

    /// Deletes queue `name` of `vhost` only if it holds no messages; the broker itself
    /// enforces the condition.
    ///
    /// # Errors
    /// Transport, authentication and other API errors.
    async fn delete_queue_if_empty(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<DeleteOutcome, BrokerError>;

    /// The broker's cluster name: two clients reach the same broker exactly when their
    /// names are equal.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn cluster_name(&self) -> Result<String, BrokerError>;

    /// What reading queue `name` of `vhost` without losing a message must know of it
    /// ([`QueueLimits`]: type, delivery and length limits).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing queue; transport and authentication errors.
    async fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError>;

    /// Requests this client made so far (reads and writes), for the metrics.
    fn request_counts(&self) -> RequestCounts;

    /// The address this client reaches the broker's API through now, without
    /// credentials, with its place when the Secret lists several
    /// (`http://node-2:15672/ (address 2 of 3)`): for status and logs, which name the node
    /// in use.
    fn address_in_use(&self) -> String;
}

/// Ready messages and consumers of one queue, as a passive declare reports them (current,
/// unlike statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Messages ready for delivery.
    pub ready: u64,
    /// Consumers attached.
    pub consumers: u64,
}

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

/// Everything a driver needs from one broker: [`BrokerTopology`] and [`DeadLetterOps`].
/// Implemented by every type that implements both.
pub trait BrokerClient: BrokerTopology + DeadLetterOps {}

impl<T: BrokerTopology + DeadLetterOps + ?Sized> BrokerClient for T {}

/// A client shows as its kind only: its settings hold credentials.
impl std::fmt::Debug for dyn BrokerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerClient")
    }
}

/// A factory shows as its kind only.
impl std::fmt::Debug for dyn BrokerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerFactory")
    }
}

/// Builds the client of a broker from its connection settings.
pub trait BrokerFactory: Send + Sync {
    /// A client for the broker of `conn`. No request is made: unreachable brokers and
    /// refused credentials show on the first call.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the CA or the client certificate cannot be used.
    fn client(&self, conn: &BrokerConnection) -> Result<Arc<dyn BrokerClient>, BrokerError>;
}
