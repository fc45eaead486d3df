//! `RabbitMq` behind the broker seam ([`crate::broker::seam`]): thin implementations of
//! [`BrokerTopology`] and [`DeadLetterOps`] that delegate to the existing methods and to
//! the dead-letter engines ([`super::dead_letters`]), and [`RabbitMqFactory`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::dead_letters::{browse, purge, replay};
use super::{amqp, RabbitMq};
use crate::broker::RequestCounts;
use crate::broker::{
    ApplyReport, BrokerClient, BrokerConnection, BrokerError, BrokerFactory, BrokerTopology,
    DeadLetterOps, DeleteOutcome, QueueCounts, QueueDepth, QueueLimits, RemovalReport,
};
use crate::dlq::browse::InspectOptions;
use crate::dlq::filter::Filter;
use crate::dlq::purge::PurgeReport;
use crate::dlq::replay::{Observer, ReplayOptions, ReplayReport};
use crate::dlq::route::ExchangeRoute;
use crate::dlq::Inspection;
use crate::topology::DesiredTopology;

#[async_trait::async_trait]
impl BrokerTopology for RabbitMq {
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        RabbitMq::apply(self, plan).await
    }

    async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError> {
        RabbitMq::remove(self, plan).await
    }

    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        RabbitMq::queue_depths(self, vhost).await
    }

    async fn queue_depths_covering(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        RabbitMq::queue_depths_covering(self, vhost, required).await
    }

    async fn queue_depths_and_consumers(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
        consumers_of: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        RabbitMq::queue_depths_and_consumers(self, vhost, required, consumers_of).await
    }

    async fn delete_queue_if_empty(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<DeleteOutcome, BrokerError> {
        RabbitMq::delete_queue_if_empty(self, vhost, name).await
    }

    async fn cluster_name(&self) -> Result<String, BrokerError> {
        RabbitMq::cluster_name(self).await
    }

    async fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError> {
        RabbitMq::queue_limits(self, vhost, name).await
    }

    fn request_counts(&self) -> RequestCounts {
        RabbitMq::request_counts(self)
    }

    fn address_in_use(&self) -> String {
        let conn = self.mgmt.connection();
        let addresses = conn.management_addresses();
        format!(
            "{}{}",
            conn.management_base(),
            addresses.position(addresses.in_use_index())
        )
    }
}

#[async_trait::async_trait]
impl DeadLetterOps for RabbitMq {
    async fn inspect(
        &self,
        topology: &DesiredTopology,
        opts: InspectOptions,
        now_ms: u64,
        cancel: &CancellationToken,
    ) -> Result<Inspection, BrokerError> {
        browse::inspect(self, topology, opts, now_ms, cancel).await
    }

    async fn replay(
        &self,
        topology: &DesiredTopology,
        opts: &ReplayOptions,
        now_ms: u64,
        cancel: &CancellationToken,
        observer: &mut dyn Observer,
    ) -> Result<ReplayReport, BrokerError> {
        replay::replay(self, topology, opts, now_ms, cancel, observer).await
    }

    async fn purge(
        &self,
        topology: &DesiredTopology,
        filter: &Filter,
        dry_run: bool,
        now_ms: u64,
        cancel: &CancellationToken,
        report: &mut PurgeReport,
    ) -> Result<(), BrokerError> {
        purge::purge(self, topology, (filter, dry_run), now_ms, cancel, report).await
    }

    /// An AMQP passive `queue.declare` ([`amqp::passive_queue_counts`]).
    async fn passive_queue_counts(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<QueueCounts>, BrokerError> {
        let found = amqp::passive_queue_counts(self.mgmt.connection(), vhost, name).await?;
        Ok(found.map(|(ready, consumers)| QueueCounts {
            ready: u64::from(ready),
            consumers: u64::from(consumers),
        }))
    }

    async fn exchange_route(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<ExchangeRoute>, BrokerError> {
        RabbitMq::exchange_route(self, vhost, name).await
    }
}

/// Builds a [`RabbitMq`] client per connection ([`RabbitMq::new`]: no request made).
#[derive(Debug, Clone, Copy, Default)]
pub struct RabbitMqFactory;

impl BrokerFactory for RabbitMqFactory {
    fn client(&self, conn: &BrokerConnection) -> Result<Arc<dyn BrokerClient>, BrokerError> {
        Ok(Arc::new(RabbitMq::new(conn)?))
    }
}
