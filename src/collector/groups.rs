//! The depth sources of manifest files: their resources grouped by broker and vhost, one
//! listing each, through a client made from the group's connection settings. Used by every
//! driver that polls without a cluster (`run --standalone`, the console, `dlq-operator
//! report` on files).

use std::collections::BTreeMap;

use super::{DepthSource, Group, Listing, Member, Required};
use crate::broker::{BrokerConnection, BrokerFactory};
use crate::reconcile;

/// The broker of a group of the manifests: a client made for each listing from the
/// connection settings of the group's first resource (a client that cannot be made fails
/// the listing).
pub struct Endpoint<'a>(&'a dyn BrokerFactory, &'a BrokerConnection);

impl DepthSource for Endpoint<'_> {
    async fn depths_covering(&self, vhost: &str, required: &Required) -> Listing {
        self.0
            .client(self.1)?
            .queue_depths_and_consumers(vhost, &required.queues, &required.consumers)
            .await
    }
}

/// The resources of `planned` grouped by broker (management endpoint, credentials not
/// shown) and vhost: one listing each (`run --standalone`, the console, `report` on files).
/// `spacing_ms`: the poll interval, ms.
pub fn groups<'a>(
    brokers: &'a dyn BrokerFactory,
    prepared: impl IntoIterator<Item = &'a reconcile::Prepared>,
    spacing_ms: u64,
) -> Vec<(String, Group<'a, Endpoint<'a>>)> {
    let mut groups: BTreeMap<(String, &str), Group<'_, Endpoint<'_>>> = BTreeMap::new();
    for prep in prepared {
        let endpoint = prep.connection.redacted_management_uris();
        groups
            .entry((endpoint, prep.topology.vhost.as_str()))
            .or_insert_with(|| Group {
                broker: Endpoint(brokers, &prep.connection),
                vhost: &prep.topology.vhost,
                spacing_ms,
                members: Vec::new(),
            })
            .members
            .push(Member {
                key: &prep.key,
                topology: &prep.topology,
                params: &prep.monitoring,
            });
    }
    groups
        .into_iter()
        .map(|((endpoint, _), g)| (endpoint, g))
        .collect()
}
