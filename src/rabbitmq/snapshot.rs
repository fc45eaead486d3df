//! What is on the broker for one plan, read before an apply decides anything: the
//! [`Snapshot`] of its objects ([`RabbitMq::snapshot`]) and the few [`Facts`] some rules
//! need on top (the broker's version, queues' ready counts), read only when a rule of the
//! diff asks for them (read by `RabbitMq::facts` in module `execute`, which asks the diff).

use std::collections::{BTreeMap, BTreeSet};

use super::management::{encode_segment as enc, BindingInfo, ExchangeInfo, PolicyInfo, QueueInfo};
use super::{ownership, RabbitMq};
use crate::broker::BrokerError;
use crate::topology::DesiredTopology;

/// What exists on the broker for one plan (see [`RabbitMq::snapshot`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The planned exchanges and the source exchange that exist.
    pub exchanges: Vec<ExchangeInfo>,
    /// The planned queues that exist, and the queues that may be obsolete retry tiers of
    /// the source queue (`RabbitMq::tier_candidates`).
    pub queues: Vec<QueueInfo>,
    /// Every policy of the vhost (shadowing and merging need them all).
    pub policies: Vec<PolicyInfo>,
    /// Bindings between each planned exchange/queue pair, and the bindings of the
    /// unplanned queues of [`Snapshot::queues`].
    pub bindings: Vec<BindingInfo>,
}

impl Snapshot {
    /// The existing queue named `name`, if any.
    pub fn queue(&self, name: &str) -> Option<&QueueInfo> {
        self.queues.iter().find(|q| q.name == name)
    }

    /// The existing exchange named `name`, if any.
    pub fn exchange(&self, name: &str) -> Option<&ExchangeInfo> {
        self.exchanges.iter().find(|x| x.name == name)
    }
}

/// What some apply rules need beyond the [`Snapshot`], read after it and only when a rule
/// needs it (`RabbitMq::facts`, module `execute`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The broker's RabbitMQ version (e.g. `4.0.5`), read when a quorum dead-letter queue's
    /// policy sets no delivery limit (`diff::needs_broker_version`); `None` otherwise.
    pub broker_version: Option<String>,
    /// Ready messages by queue, from an AMQP passive declare (immediate, unlike the
    /// statistics), for the existing queues whose policy write would set a `max-length`
    /// with `overflow: drop-head` (`diff::ready_counts_needed`). A queue that is gone by
    /// then has no entry.
    pub ready: BTreeMap<String, u64>,
}

/// Page size of filtered queue listings.
const PAGE_SIZE: u32 = 500;

/// Columns read of a queue.
const QUEUE_COLUMNS: &str =
    "columns=name,type,durable,arguments,messages,messages_ready,messages_unacknowledged,policy";

/// Columns read of a binding.
const BINDING_COLUMNS: &str =
    "columns=source,destination,destination_type,routing_key,properties_key";

impl RabbitMq {
    /// Reads what the broker has for `plan`, with requests whose cost does not grow with
    /// the number of objects in the vhost (the management API's listings of queues and
    /// bindings take tens of milliseconds per thousand queues, and an apply of 1,000
    /// resources would otherwise cost O(n²)): `GET /api/vhosts` ([`RabbitMq::ensure_vhost`]); one GET per
    /// planned exchange, queue and exchange/queue binding pair; the vhost's policies; and
    /// the queues that may be obsolete tiers (`RabbitMq::tier_candidates`: those bound to
    /// the retry exchange or kept in its record, nothing on a first apply) plus their
    /// bindings. Every tier the operator makes is bound to the retry exchange and recorded,
    /// so without either there is no tier of ours to retire — a first apply, which is what
    /// a thousand new resources are. (An earlier version listed every queue named like a
    /// tier through the filtered listing `name=…&use_regex=true`, whose cost grows with the
    /// vhost — about 0.2 s of broker CPU per call at 4,000 queues on 3.10, the broker lists
    /// the whole vhost to filter it: docs/BENCHMARKS.md, "Controller reconcile of many
    /// DeadLetterQueues". It is kept for a retry exchange without a record or a record without
    /// its exchange.)
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost; transport/authentication errors.
    pub async fn snapshot(&self, plan: &DesiredTopology) -> Result<Snapshot, BrokerError> {
        self.ensure_vhost(&plan.vhost).await?;
        let mut snap = Snapshot {
            exchanges: self.existing_exchanges(plan).await?,
            queues: self.existing_queues(plan).await?,
            ..Snapshot::default()
        };
        for info in self.tier_candidates(plan, &snap).await? {
            if snap.queue(&info.name).is_none() {
                snap.queues.push(info);
            }
        }
        snap.policies = self.list("policies", &plan.vhost, "").await?;
        snap.bindings = self.existing_bindings(plan, &snap.queues).await?;
        Ok(snap)
    }

    /// The queues that may be obsolete retry tiers of `plan`: the unplanned queues bound to
    /// the retry exchange (`GET …/bindings/source`) and those its ownership record lists as
    /// kept (`retired`: unbound, still draining or retained), one GET each — requests whose
    /// cost does not grow with the vhost. None when neither the retry exchange nor its
    /// record exists (a first apply). Every queue named like a tier is listed instead
    /// ([`RabbitMq::tier_like_queues`]) when only one of the two exists: an exchange made
    /// by a version before ownership records, or a record whose exchange someone deleted
    /// (its tiers were unbound with it).
    async fn tier_candidates(
        &self,
        plan: &DesiredTopology,
        snap: &Snapshot,
    ) -> Result<Vec<QueueInfo>, BrokerError> {
        let vhost = plan.vhost.as_str();
        let retry = plan.routes.retry_exchange.as_str();
        let record = self.owner_record(vhost, ownership::EXCHANGE, retry).await?;
        let record = match (snap.exchange(retry).is_some(), record) {
            (false, None) => return Ok(Vec::new()),
            (true, Some(record)) => record,
            (true, None) | (false, Some(_)) => return self.tier_like_queues(plan).await,
        };
        let path = format!(
            "exchanges/{}/{}/bindings/source?{BINDING_COLUMNS}",
            enc(vhost),
            enc(retry)
        );
        let bound: Vec<BindingInfo> = self.get_opt(&path).await?.unwrap_or_default();
        let names: BTreeSet<String> = bound
            .into_iter()
            .filter(|b| b.destination_type == "queue")
            .map(|b| b.destination)
            .chain(record.retired)
            .filter(|n| !plan.queues.iter().any(|q| &q.name == n))
            .collect();
        let mut found = Vec::new();
        for name in names {
            let path = format!("queues/{}/{}?{QUEUE_COLUMNS}", enc(vhost), enc(&name));
            found.extend(self.get_opt::<QueueInfo>(&path).await?);
        }
        Ok(found)
    }

    /// The planned exchanges and the source exchange that exist, one GET each.
    async fn existing_exchanges(
        &self,
        plan: &DesiredTopology,
    ) -> Result<Vec<ExchangeInfo>, BrokerError> {
        let v = enc(&plan.vhost);
        let names = plan
            .exchanges
            .iter()
            .map(|x| x.name.as_str())
            .chain(plan.source_exchange.as_deref());
        let mut found = Vec::new();
        for name in names {
            let path = format!("exchanges/{v}/{}?columns=name,type", enc(name));
            found.extend(self.get_opt::<ExchangeInfo>(&path).await?);
        }
        Ok(found)
    }

    /// The planned queues that exist, one GET each.
    async fn existing_queues(&self, plan: &DesiredTopology) -> Result<Vec<QueueInfo>, BrokerError> {
        let v = enc(&plan.vhost);
        let mut found = Vec::new();
        for q in &plan.queues {
            let path = format!("queues/{v}/{}?{QUEUE_COLUMNS}", enc(&q.name));
            found.extend(self.get_opt::<QueueInfo>(&path).await?);
        }
        Ok(found)
    }

    /// Every queue named `<retry exchange>.…` (the tier-like queues of this source,
    /// planned or not), through the filtered listing, page by page.
    async fn tier_like_queues(
        &self,
        plan: &DesiredTopology,
    ) -> Result<Vec<QueueInfo>, BrokerError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            items: Vec<QueueInfo>,
            #[serde(default)]
            page_count: u32,
        }
        let vhost = plan.vhost.as_str();
        let pattern = format!("^{}\\.", regex::escape(&plan.routes.retry_exchange));
        let mut found = Vec::new();
        let mut page = 1;
        loop {
            let path = format!(
                "queues/{}?page={page}&page_size={PAGE_SIZE}&name={}&use_regex=true&{QUEUE_COLUMNS}",
                enc(vhost),
                enc(&pattern)
            );
            let p: Page = self
                .mgmt
                .get_json(&path, &format!("vhost {vhost:?}"))
                .await?;
            found.extend(p.items);
            if page >= p.page_count {
                return Ok(found);
            }
            page += 1;
        }
    }

    /// The bindings between each planned exchange/queue pair, then those of every queue
    /// of `queues` the plan does not have (obsolete tiers), one GET each.
    async fn existing_bindings(
        &self,
        plan: &DesiredTopology,
        queues: &[QueueInfo],
    ) -> Result<Vec<BindingInfo>, BrokerError> {
        let v = enc(&plan.vhost);
        let pairs = plan
            .binding_pairs()
            .into_iter()
            .map(|(x, q)| format!("bindings/{v}/e/{}/q/{}?{BINDING_COLUMNS}", enc(x), enc(q)));
        let unplanned = queues
            .iter()
            .filter(|q| !plan.queues.iter().any(|p| p.name == q.name))
            .map(|q| format!("queues/{v}/{}/bindings?{BINDING_COLUMNS}", enc(&q.name)));
        let mut found = Vec::new();
        for path in pairs.chain(unplanned) {
            let bindings: Option<Vec<BindingInfo>> = self.get_opt(&path).await?;
            found.extend(bindings.unwrap_or_default());
        }
        Ok(found)
    }
}
