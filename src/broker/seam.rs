//! The broker seam: what the drivers (the controller, the standalone runner, the `dlq`
//! commands) need from a broker, as object-safe traits held as `Arc<dyn …>`, and the
//! factory that builds a client from connection settings — a narrow client interface
//! built by a factory, like the RabbitMQ messaging-topology-operator's.
//!
//! - [`BrokerTopology`]: apply and remove a plan, read queue depths and limits, the
//!   cluster name, delete a queue only if empty.
//! - [`DeadLetterOps`] ([`crate::dlq::ops`], beside the neutral types it names): the
//!   dead-letter operations (inspect, replay, purge) and the reads they and the
//!   DeadLetterReplay controller need (passive queue counts, an exchange's bindings).
//! - [`BrokerClient`]: both, for one broker.
//! - [`BrokerFactory`]: [`BrokerConnection`] → [`BrokerClient`].
//!
//! Implementations, each an adapter above the seam: RabbitMQ ([`crate::rabbitmq`]) and,
//! in the unit tests, the in-memory fake (`crate::fake`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{
    ApplyReport, BrokerConnection, BrokerError, DeleteOutcome, QueueDepth, QueueLimits,
    RemovalReport, RequestCounts,
};
use crate::dlq::DeadLetterOps;
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
