//! The depth collector shared by the drivers — the controller, `run --standalone`, the
//! console and `report` on files (docs/ARCHITECTURE.md, "Monitoring and alerting"):
//! one management-API listing per broker and vhost per interval
//! ([`BrokerTopology::queue_depths`](crate::broker::BrokerTopology::queue_depths)), shared by every
//! DeadLetterQueue on that vhost; from it, each resource's queue depths ([`observe`],
//! pure) and, in router mode, its router inbox's depth and consumers, its backlog
//! evaluation and its metrics ([`Collector`]).
//!
//! Why the management API and not the `rabbitmq_prometheus` plugin's
//! `/metrics/detailed?family=queue_coarse_metrics`: see docs/ARCHITECTURE.md
//! ("Depth collection") for the figures measured on RabbitMQ 3.10.8.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;

use crate::broker::{BrokerError, QueueDepth};
use crate::crd::DepthStatus;
use crate::metrics::{Metrics, QueueSample};
use crate::monitor::{AlertState, Evaluation, Evaluator, Params};
use crate::topology::{DesiredTopology, QueueRole};

mod groups;
pub use groups::{groups, Endpoint};

/// One planned queue's depth in a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedQueue {
    /// Queue name.
    pub name: String,
    /// `source`, `retry`, `dead_letter` or `inbox` (the metrics' `role` label).
    pub role: &'static str,
    /// Tier as a canonical duration (e.g. `5s`) for a retry queue, empty otherwise.
    pub tier: String,
    /// Messages (ready + unacknowledged); 0 for a queue missing on the broker.
    pub depth: u64,
}

/// The router inbox of a DeadLetterQueue in router mode, as one poll saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedInbox {
    /// The inbox queue's name (`<source>.router`).
    pub name: String,
    /// Messages (ready + unacknowledged); 0 when missing.
    pub depth: u64,
    /// Consumers (the retry routers consuming it); `None` when the listing has no count
    /// for it (missing, or no statistics yet).
    pub consumers: Option<u64>,
    /// The broker does not have the queue.
    pub missing: bool,
    /// How long (ms) the inbox has had no consumer, from the first of the consecutive
    /// polls that found `consumers: Some(0)` (0 at that poll); `None` otherwise. Set by
    /// [`Collector::record_listing`] (which remembers since when), not by [`observe`].
    pub no_consumer_for_ms: Option<u64>,
}

/// What one poll says about one DeadLetterQueue's topology.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Depths for status: source, each retry tier, and the dead-letter queues (all
    /// partitions summed).
    pub depth: DepthStatus,
    /// Every planned queue, in plan order.
    pub queues: Vec<ObservedQueue>,
    /// Planned queues the broker does not have.
    pub missing: Vec<String>,
    /// Retry tier queues of this source that the plan no longer has (retained quorum
    /// tiers, draining classic ones), as `(tier, depth)`: their depth tells when they can
    /// go.
    pub retired: Vec<(String, u64)>,
    /// The router inbox, in router mode (the plan has a [`QueueRole::Inbox`] queue).
    pub inbox: Option<ObservedInbox>,
}

/// The `role` label of a planned queue.
pub fn role_label(role: &QueueRole) -> &'static str {
    match role {
        QueueRole::Source => "source",
        QueueRole::Retry { .. } => "retry",
        QueueRole::DeadLetter { .. } => "dead_letter",
        QueueRole::Inbox => "inbox",
    }
}

/// Picks `topology`'s queues out of a vhost's `depths` (one listing of every queue of
/// the vhost). Pure. A planned queue the listing lacks counts 0 and is named in
/// [`Observed::missing`]. The router inbox (router mode) is also reported with its
/// consumers in [`Observed::inbox`]. Retired tiers are found by a range scan of the sorted listing
/// (`<retry exchange>.<duration>`), so the cost per resource does not grow with the
/// vhost's queue count.
pub fn observe(topology: &DesiredTopology, depths: &BTreeMap<String, QueueDepth>) -> Observed {
    let mut out = Observed::default();
    for q in &topology.queues {
        let listed = depths.get(&q.name);
        let depth = match listed {
            Some(d) => d.messages,
            None => {
                out.missing.push(q.name.clone());
                0
            }
        };
        let tier = match q.role {
            QueueRole::Retry { delay_ms } => {
                let tier = crate::duration::format_ms(delay_ms);
                out.depth.retry.insert(tier.clone(), depth);
                tier
            }
            QueueRole::DeadLetter { .. } => {
                out.depth.dead_letter = out.depth.dead_letter.saturating_add(depth);
                String::new()
            }
            QueueRole::Source => {
                out.depth.source = depth;
                String::new()
            }
            QueueRole::Inbox => {
                out.depth.inbox = Some(depth);
                out.inbox = Some(ObservedInbox {
                    name: q.name.clone(),
                    depth,
                    consumers: listed.and_then(|d| d.consumers),
                    missing: listed.is_none(),
                    no_consumer_for_ms: None,
                });
                String::new()
            }
        };
        out.queues.push(ObservedQueue {
            name: q.name.clone(),
            role: role_label(&q.role),
            tier,
            depth,
        });
    }
    let prefix = format!("{}.", topology.routes.retry_exchange);
    for (name, d) in depths
        .range(prefix.clone()..)
        .take_while(|(name, _)| name.starts_with(&prefix))
    {
        let tier = &name[prefix.len()..];
        if crate::duration::parse_ms(tier).is_ok()
            && !topology.queues.iter().any(|q| &q.name == name)
        {
            out.retired.push((tier.to_string(), d.messages));
        }
    }
    out
}

/// `namespace` and `name` of a `namespace/name` key.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// The backlog evaluators of every DeadLetterQueue (by `namespace/name`) and the metrics
/// they feed. One per driver.
#[derive(Debug)]
pub struct Collector {
    metrics: Metrics,
    evaluators: HashMap<String, Evaluator>,
    /// Since when (ms since the Unix epoch) each router inbox has had no consumer, by
    /// `namespace/name`.
    no_consumer_since: HashMap<String, u64>,
}

impl Collector {
    /// A collector recording into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Collector {
            metrics,
            evaluators: HashMap::new(),
            no_consumer_since: HashMap::new(),
        }
    }

    /// Evaluates the dead-letter depth of one poll of `key` taken at `now_ms` (ms since
    /// the Unix epoch) and records every queue's depth, the evaluation and, in router
    /// mode, the inbox's consumers (`dlq_router_inbox_consumers`, removed while unknown)
    /// in the metrics.
    /// The evaluator is created on first use (or given beforehand with [`Collector::insert`],
    /// e.g. resumed from status after a restart) and keeps its history and alert state
    /// when `params` change ([`Evaluator::set_params`]). Returns the evaluation and the
    /// alert state before it.
    pub fn record(
        &mut self,
        key: &str,
        params: &Params,
        observed: &Observed,
        now_ms: u64,
    ) -> (Evaluation, AlertState) {
        let evaluator = self
            .evaluators
            .entry(key.to_string())
            .and_modify(|e| {
                if e.params() != params {
                    e.set_params(params.clone());
                }
            })
            .or_insert_with(|| Evaluator::new(params.clone()));
        let before = evaluator.last_state();
        let eval = evaluator.observe(now_ms, observed.depth.dead_letter);
        let samples: Vec<QueueSample<'_>> = observed
            .queues
            .iter()
            .map(|q| QueueSample {
                queue: &q.name,
                role: q.role,
                tier: &q.tier,
                depth: q.depth,
            })
            .collect();
        let (ns, name) = split_key(key);
        self.metrics.record_backlog(ns, name, &samples, &eval);
        self.metrics.record_broker_up(ns, name, true);
        self.metrics.record_inbox_consumers(
            ns,
            name,
            observed.inbox.as_ref().and_then(|i| i.consumers),
        );
        self.metrics
            .record_dead_letter_depth(ns, name, now_ms, observed.depth.dead_letter);
        (eval, before)
    }

    /// Sets [`ObservedInbox::no_consumer_for_ms`] of `key`'s inbox in `observed` (a poll at
    /// `now_ms`), remembering since when it has had no consumer: a poll that finds a
    /// consumer, or no count, starts over.
    pub fn track_consumers(&mut self, key: &str, observed: &mut Observed, now_ms: u64) {
        let Some(inbox) = observed.inbox.as_mut() else {
            self.no_consumer_since.remove(key);
            return;
        };
        if inbox.consumers == Some(0) && !inbox.missing {
            let since = *self
                .no_consumer_since
                .entry(key.to_string())
                .or_insert(now_ms);
            inbox.no_consumer_for_ms = Some(now_ms.saturating_sub(since));
        } else {
            self.no_consumer_since.remove(key);
            inbox.no_consumer_for_ms = None;
        }
    }

    /// `true` when `key` has an evaluator.
    pub fn contains(&self, key: &str) -> bool {
        self.evaluators.contains_key(key)
    }

    /// Starts `key` with `evaluator` (e.g. one resumed from status after a restart);
    /// replaces any evaluator it had.
    pub fn insert(&mut self, key: &str, evaluator: Evaluator) {
        self.evaluators.insert(key.to_string(), evaluator);
    }

    /// The depths of `key` are unknown (the broker could not be read): its series are
    /// removed (unknown is not zero; the `absent` alert rule covers it) and
    /// `dlq_broker_up` is 0 (the backlog alert rule keeps a firing alert firing while it
    /// is: [`crate::alerts`]). The evaluator is
    /// kept, so a short outage (up to two intervals) does not reset a `Pending` state.
    pub fn unknown(&mut self, key: &str) {
        let (ns, name) = split_key(key);
        self.metrics.forget_backlog(ns, name);
        self.metrics.record_broker_up(ns, name, false);
    }

    /// Forgets every resource for which `keep` is false: its evaluator, its backlog and
    /// maturity series and its compensation window and ratio (its `dlq_replayed_messages_total`
    /// series stay: a resource not watched yet may already be replayed; [`Collector::forget`]
    /// removes them).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.evaluators.retain(|k, _| keep(k));
        self.no_consumer_since.retain(|k, _| keep(k));
        for (ns, name) in self.metrics.backlog_resources() {
            if !keep(&format!("{ns}/{name}")) {
                self.metrics.forget_backlog(&ns, &name);
            }
        }
        self.metrics.retain_compensation(&keep);
        self.metrics.retain_broker_up(&keep);
        self.metrics.maturity().retain(&keep);
    }

    /// Forgets `key`: its evaluator and every series of the resource, replay counters
    /// included (the resource was deleted).
    pub fn forget(&mut self, key: &str) {
        self.evaluators.remove(key);
        self.no_consumer_since.remove(key);
        let (ns, name) = split_key(key);
        self.metrics.forget_resource(ns, name);
    }

    /// Number of resources with an evaluator.
    pub fn len(&self) -> usize {
        self.evaluators.len()
    }

    /// `true` when no resource has an evaluator.
    pub fn is_empty(&self) -> bool {
        self.evaluators.is_empty()
    }
}

/// One listing of a vhost's queue depths: every queue by name, or why it failed.
pub type Listing = Result<BTreeMap<String, QueueDepth>, BrokerError>;

/// What one listing of a vhost must cover: the queues whose depths the poll judges, and
/// those whose consumers it counts (the router inboxes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Required {
    /// Every planned queue of the group's members.
    pub queues: BTreeSet<String>,
    /// The router inboxes among them (members in router mode).
    pub consumers: BTreeSet<String>,
}

/// Where a poll lists a vhost's queue depths: a broker client.
pub trait DepthSource {
    /// Depths of every queue of `vhost`, by name, in one listing that covers `required`
    /// (the queues the poll will judge, and the consumers of the inboxes among them:
    /// [`BrokerTopology::queue_depths_and_consumers`](crate::broker::BrokerTopology::queue_depths_and_consumers)).
    ///
    /// # Errors
    /// Transport, authentication and vhost errors ([`BrokerError`]).
    fn depths_covering(
        &self,
        vhost: &str,
        required: &Required,
    ) -> impl Future<Output = Listing> + Send;
}

/// A borrowed depth source lists as the source itself does.
impl<T: DepthSource + Sync + ?Sized> DepthSource for &T {
    fn depths_covering(
        &self,
        vhost: &str,
        required: &Required,
    ) -> impl Future<Output = Listing> + Send {
        (**self).depths_covering(vhost, required)
    }
}

/// One DeadLetterQueue of a polled group.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    /// Its planned topology.
    pub topology: &'a DesiredTopology,
    /// Its backlog evaluator's parameters (`spec.monitoring`).
    pub params: &'a Params,
}

/// The DeadLetterQueues on one broker and vhost, polled with one listing.
#[derive(Debug, Clone)]
pub struct Group<'a, B> {
    /// The broker client that lists the depths.
    pub broker: B,
    /// The vhost.
    pub vhost: &'a str,
    /// The real spacing of this group's polls in ms (the interval, or longer when a poll
    /// was late): each member's evaluator takes at least this as its interval, so its gap
    /// tolerance counts missed polls, not slow ones.
    pub spacing_ms: u64,
    /// The resources, each polled once.
    pub members: Vec<Member<'a>>,
}

/// What one poll says of one member whose depths were read.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The member's queues in the listing.
    pub observed: Observed,
    /// The backlog evaluation.
    pub eval: Evaluation,
    /// The alert state before it.
    pub before: AlertState,
}

/// What one poll says of one member.
#[derive(Debug, Clone)]
pub enum Reading {
    /// The depths were read, evaluated and recorded in the metrics.
    Observed(Box<Recorded>),
    /// The listing failed: the member's series were removed ([`Collector::unknown`]).
    Unknown,
}

/// One group's poll: its listing, and a [`Reading`] per member (in member order).
#[derive(Debug)]
pub struct GroupPoll {
    /// The listing.
    pub depths: Listing,
    /// The members' readings.
    pub readings: Vec<Reading>,
}

/// The queues the members of a group plan, and their router inboxes: what its listing
/// must cover.
pub fn required_queues(members: &[Member<'_>]) -> Required {
    Required {
        queues: members
            .iter()
            .flat_map(|m| m.topology.queues.iter().map(|q| q.name.clone()))
            .collect(),
        consumers: members
            .iter()
            .flat_map(|m| {
                m.topology
                    .queues
                    .iter()
                    .filter(|q| q.role == QueueRole::Inbox)
                    .map(|q| q.name.clone())
            })
            .collect(),
    }
}

/// Polls the depths of every group with one listing each ([`DepthSource::depths_covering`],
/// at most `concurrency` at a time), then feeds `collector` with every member's reading,
/// in group and member order ([`Collector::record_listing`]). `now_ms` (ms since the Unix
/// epoch) dates every sample: the start of the poll, so the samples' spacing is the
/// polls'. `resume` gives the evaluator a member starts with when the collector has none
/// (e.g. resumed from status after a restart; `None`: a new one).
///
/// Returns each group's poll, in `groups` order. A failed listing is not an error: its
/// members' readings are [`Reading::Unknown`].
pub async fn poll<B: DepthSource>(
    collector: &mut Collector,
    groups: &[Group<'_, B>],
    now_ms: u64,
    concurrency: usize,
    mut resume: impl FnMut(&str, &Params) -> Option<Evaluator>,
) -> Vec<GroupPoll> {
    use futures::StreamExt;
    // The listings are made before they are streamed (no closure in the stream's type),
    // so the poll stays `Send` inside a spawned task.
    let listings: Vec<_> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| async move {
            let required = required_queues(&g.members);
            (i, g.broker.depths_covering(g.vhost, &required).await)
        })
        .collect();
    let mut listings: Vec<(usize, Listing)> = futures::stream::iter(listings)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    listings.sort_by_key(|(i, _)| *i);
    listings
        .into_iter()
        .zip(groups)
        .map(|((_, depths), g)| GroupPoll {
            readings: collector.record_listing(g, &depths, now_ms, &mut resume),
            depths,
        })
        .collect()
}

impl Collector {
    /// Records one listing of `group` for each member: its queues' depths ([`observe`],
    /// with how long its router inbox has had no consumer: [`Collector::track_consumers`])
    /// and the evaluation ([`Collector::record`], with the member's interval raised to
    /// [`Group::spacing_ms`]), or, when the listing failed, [`Collector::unknown`]. A
    /// member without an evaluator starts with `resume`'s, if it gives one.
    pub fn record_listing<B>(
        &mut self,
        group: &Group<'_, B>,
        depths: &Listing,
        now_ms: u64,
        resume: &mut impl FnMut(&str, &Params) -> Option<Evaluator>,
    ) -> Vec<Reading> {
        let mut readings = Vec::with_capacity(group.members.len());
        for m in &group.members {
            let Ok(depths) = depths else {
                self.unknown(m.key);
                readings.push(Reading::Unknown);
                continue;
            };
            let mut observed = observe(m.topology, depths);
            self.track_consumers(m.key, &mut observed, now_ms);
            let mut params = m.params.clone();
            params.interval_ms = params.interval_ms.max(group.spacing_ms);
            if !self.contains(m.key) {
                if let Some(evaluator) = resume(m.key, &params) {
                    self.insert(m.key, evaluator);
                }
            }
            let (eval, before) = self.record(m.key, &params, &observed, now_ms);
            readings.push(Reading::Observed(Box::new(Recorded {
                observed,
                eval,
                before,
            })));
        }
        readings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology() -> DesiredTopology {
        planned("")
    }

    /// The plan of `shop/orders` with `extra` spec lines (e.g. router mode).
    fn planned(extra: &str) -> DesiredTopology {
        let dlq: crate::crd::DeadLetterQueue = serde_yaml_ng::from_str(&format!(
            r#"
apiVersion: dlqoperator.io/v1alpha1
kind: DeadLetterQueue
metadata: {{name: orders, namespace: shop}}
spec:
  broker: {{secretRef: {{name: s}}}}
  source: {{queue: orders}}
  retryPolicyRef: {{name: p}}
  deadLetter: {{partitionBy: ErrorClass}}
{extra}
"#
        ))
        .expect("dlq");
        let policy = crate::backoff::ResolvedPolicy::from_spec(&crate::crd::RetryPolicySpec {
            tiers: Some(vec![
                crate::duration::Duration("5s".into()),
                crate::duration::Duration("1m".into()),
            ]),
            ..Default::default()
        })
        .expect("policy");
        crate::topology::plan("shop/orders", &dlq.spec, &policy)
    }

    fn depth(messages: u64) -> QueueDepth {
        QueueDepth {
            messages,
            ready: messages,
            unacked: 0,
            consumers: None,
        }
    }

    #[test]
    fn observe_picks_the_resources_queues_sums_partitions_and_finds_retired_tiers() {
        let t = topology();
        let mut depths: BTreeMap<String, QueueDepth> = t
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.name.clone(), depth(i as u64 + 1)))
            .collect();
        // Another resource's queues, a retired tier, and a name that only looks like one.
        depths.insert("orders.retry.15s".into(), depth(7));
        depths.insert("orders.retry.notatier".into(), depth(9));
        depths.insert("ordersx.retry.5s".into(), depth(11));
        depths.insert("payments.dlq".into(), depth(1000));
        let missing = t
            .queues
            .iter()
            .find(|q| matches!(q.role, QueueRole::DeadLetter { .. }))
            .expect("a dead-letter queue")
            .name
            .clone();
        depths.remove(&missing);
        let o = observe(&t, &depths);
        assert_eq!(o.missing, vec![missing.clone()]);
        assert_eq!(o.queues.len(), t.queues.len());
        let want_dl: u64 = t
            .queues
            .iter()
            .filter(|q| matches!(q.role, QueueRole::DeadLetter { .. }))
            .map(|q| depths.get(&q.name).map_or(0, |d| d.messages))
            .sum();
        assert_eq!(o.depth.dead_letter, want_dl);
        assert_eq!(
            o.depth.retry.keys().cloned().collect::<Vec<_>>(),
            vec!["1m".to_string(), "5s".to_string()]
        );
        assert_eq!(
            o.depth.source,
            depths.get("orders").expect("source").messages
        );
        assert_eq!(o.retired, vec![("15s".to_string(), 7)]);
        let dl = o.queues.iter().find(|q| q.name == missing).expect("listed");
        assert_eq!((dl.depth, dl.role), (0, "dead_letter"));
        assert_eq!(o.inbox, None, "no inbox outside router mode");
        assert_eq!(o.depth.inbox, None);
    }

    #[test]
    fn observe_reports_the_router_inbox_with_its_consumers() {
        let t = planned("  router: {enabled: true}");
        let mut depths: BTreeMap<String, QueueDepth> = t
            .queues
            .iter()
            .map(|q| (q.name.clone(), depth(0)))
            .collect();
        depths.insert("orders.router".into(), depth(12).with_consumers(Some(0)));
        let o = observe(&t, &depths);
        assert_eq!(
            o.inbox,
            Some(ObservedInbox {
                name: "orders.router".into(),
                depth: 12,
                consumers: Some(0),
                missing: false,
                no_consumer_for_ms: None,
            })
        );
        assert_eq!(o.depth.inbox, Some(12));
        let inbox = o.queues.iter().find(|q| q.role == "inbox").expect("inbox");
        assert_eq!((inbox.name.as_str(), inbox.depth), ("orders.router", 12));
        // Listed without consumers (no statistics yet): unknown, not 0.
        depths.insert("orders.router".into(), depth(3));
        assert_eq!(observe(&t, &depths).inbox.and_then(|i| i.consumers), None);
        // Missing on the broker.
        depths.remove("orders.router");
        let o = observe(&t, &depths);
        let inbox = o.inbox.expect("inbox planned");
        assert!(inbox.missing && inbox.depth == 0 && inbox.consumers.is_none());
        assert_eq!(o.missing, ["orders.router"]);
        // Only the inbox's consumers are asked for.
        let params = Params::from_spec(&Default::default()).expect("params");
        let members = [Member {
            key: "shop/orders",
            topology: &t,
            params: &params,
        }];
        let required = required_queues(&members);
        assert_eq!(required.consumers, BTreeSet::from(["orders.router".into()]));
        assert!(required.queues.contains("orders.router") && required.queues.contains("orders"));
    }

    #[test]
    fn collector_exports_the_inbox_consumers_and_removes_them_when_unknown() {
        let metrics = Metrics::new();
        let mut c = Collector::new(metrics.clone());
        let t = planned("  router: {enabled: true}");
        let params = Params::from_spec(&Default::default()).expect("params");
        let mut depths: BTreeMap<String, QueueDepth> = t
            .queues
            .iter()
            .map(|q| (q.name.clone(), depth(0)))
            .collect();
        depths.insert("orders.router".into(), depth(5).with_consumers(Some(2)));
        c.record("shop/orders", &params, &observe(&t, &depths), 0);
        let text = metrics.render();
        assert!(
            text.contains(r#"dlq_router_inbox_consumers{name="orders",namespace="shop"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"dlq_queue_depth{name="orders",namespace="shop",queue="orders.router",role="inbox",tier=""} 5"#),
            "the inbox depth is the depth gauge's role=inbox: {text}"
        );
        // A listing without the count: the series goes (unknown is not 0).
        depths.insert("orders.router".into(), depth(5));
        c.record("shop/orders", &params, &observe(&t, &depths), 60_000);
        assert!(!metrics.render().contains("dlq_router_inbox_consumers{"));
        depths.insert("orders.router".into(), depth(5).with_consumers(Some(0)));
        c.record("shop/orders", &params, &observe(&t, &depths), 120_000);
        assert!(metrics
            .render()
            .contains(r#"dlq_router_inbox_consumers{name="orders",namespace="shop"} 0"#));
        // The broker cannot be read: every series of the resource goes.
        c.unknown("shop/orders");
        assert!(!metrics.render().contains("dlq_router_inbox_consumers{"));
        // Outside router mode: never written.
        c.record(
            "shop/orders",
            &params,
            &observe(&topology(), &depths),
            180_000,
        );
        assert!(!metrics.render().contains("dlq_router_inbox_consumers{"));
    }

    #[test]
    fn the_collector_counts_how_long_an_inbox_has_had_no_consumer() {
        let mut c = Collector::new(Metrics::new());
        let t = planned("  router: {enabled: true}");
        let idle = |c: &mut Collector, consumers: Option<u64>, now_ms| {
            let listing: BTreeMap<String, QueueDepth> = t
                .queues
                .iter()
                .map(|q| (q.name.clone(), depth(0).with_consumers(consumers)))
                .collect();
            let mut o = observe(&t, &listing);
            c.track_consumers("shop/orders", &mut o, now_ms);
            o.inbox.and_then(|i| i.no_consumer_for_ms)
        };
        assert_eq!(
            idle(&mut c, Some(0), 1_000),
            Some(0),
            "from the first poll without one"
        );
        assert_eq!(idle(&mut c, Some(0), 16_000), Some(15_000));
        assert_eq!(idle(&mut c, Some(2), 31_000), None, "a consumer: over");
        assert_eq!(idle(&mut c, Some(0), 46_000), Some(0), "starts over");
        assert_eq!(
            idle(&mut c, None, 61_000),
            None,
            "no count: not counted as none"
        );
        assert_eq!(idle(&mut c, Some(0), 76_000), Some(0));
        assert_eq!(idle(&mut c, Some(0), 80_000), Some(4_000));
        c.forget("shop/orders");
        assert_eq!(
            idle(&mut c, Some(0), 91_000),
            Some(0),
            "forgotten with the resource"
        );
    }

    #[test]
    fn collector_records_forgets_and_resumes_a_rolling_baseline() {
        let metrics = Metrics::new();
        let mut c = Collector::new(metrics.clone());
        let t = topology();
        let spec: crate::crd::MonitoringSpec = serde_json::from_value(serde_json::json!({
            "interval": "1s", "baseline": {"mode": "Rolling", "window": "1h"},
            "thresholdFactor": 2.0, "for": "0s"}))
        .expect("spec");
        let params = Params::from_spec(&spec).expect("params");
        let mut o = observe(&t, &BTreeMap::new());
        o.depth.dead_letter = 500;
        // A resumed baseline of 40: 500 is far above 2 × 40, so it fires at once.
        c.insert(
            "shop/orders",
            Evaluator::resume(params.clone(), 40.0, 1_000),
        );
        let (eval, before) = c.record("shop/orders", &params, &o, 1_000);
        assert_eq!(before, AlertState::Inactive);
        assert_eq!(eval.baseline, 40.0);
        assert_eq!(eval.state.code(), 2);
        assert_eq!(
            metrics.backlog_resources(),
            vec![("shop".into(), "orders".into())]
        );
        assert!(metrics
            .render()
            .contains("dlq_backlog_alert_state{name=\"orders\",namespace=\"shop\"} 2"));
        c.unknown("shop/orders");
        assert!(metrics.backlog_resources().is_empty());
        assert_eq!(c.len(), 1, "the evaluator outlives an unknown poll");
        c.retain(|k| k != "shop/orders");
        assert!(c.is_empty());
    }

    /// A broker that lists `depths` (or fails) and counts its listings.
    struct Listed {
        depths: Option<BTreeMap<String, QueueDepth>>,
        calls: std::sync::atomic::AtomicUsize,
        required: std::sync::Mutex<Vec<Required>>,
    }

    impl DepthSource for Listed {
        async fn depths_covering(&self, vhost: &str, required: &Required) -> Listing {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.required.lock().expect("lock").push(required.clone());
            self.depths.clone().ok_or_else(|| BrokerError::Unreachable {
                endpoint: vhost.to_string(),
                reason: "refused".into(),
            })
        }
    }

    fn listed(depths: Option<BTreeMap<String, QueueDepth>>) -> Listed {
        Listed {
            depths,
            calls: Default::default(),
            required: Default::default(),
        }
    }

    #[tokio::test]
    async fn poll_lists_each_group_once_and_feeds_the_collector() {
        let metrics = Metrics::new();
        let mut c = Collector::new(metrics.clone());
        let t = topology();
        let mut other = topology();
        other.queues.truncate(1);
        let spec: crate::crd::MonitoringSpec = serde_json::from_value(serde_json::json!({
            "interval": "1s", "baseline": {"mode": "Rolling", "window": "1h"},
            "thresholdFactor": 2.0, "for": "0s"}))
        .expect("spec");
        let params = Params::from_spec(&spec).expect("params");
        let depths: BTreeMap<String, QueueDepth> = t
            .queues
            .iter()
            .map(|q| (q.name.clone(), depth(3)))
            .collect();
        let (up, down) = (listed(Some(depths)), listed(None));
        let member = |key, topology| Member {
            key,
            topology,
            params: &params,
        };
        let groups = vec![
            Group {
                broker: &up,
                vhost: "/",
                spacing_ms: 60_000,
                members: vec![member("shop/orders", &t), member("shop/other", &other)],
            },
            Group {
                broker: &down,
                vhost: "v2",
                spacing_ms: 60_000,
                members: vec![member("shop/gone", &t)],
            },
        ];
        let mut resumed = Vec::new();
        let polls = poll(&mut c, &groups, 1_000, 2, |key, p| {
            resumed.push((key.to_string(), p.interval_ms));
            (key == "shop/orders").then(|| Evaluator::resume(p.clone(), 40.0, 0))
        })
        .await;
        assert_eq!(up.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(down.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        let wanted = Required {
            queues: t.queues.iter().map(|q| q.name.clone()).collect(),
            consumers: BTreeSet::new(),
        };
        assert_eq!(*up.required.lock().expect("lock"), vec![wanted]);
        // The interval is raised to the polls' spacing before an evaluator is made.
        assert_eq!(
            resumed,
            [
                ("shop/orders".to_string(), 60_000),
                ("shop/other".to_string(), 60_000)
            ]
        );
        assert_eq!(polls.len(), 2);
        let Reading::Observed(r) = &polls[0].readings[0] else {
            panic!("read: {:?}", polls[0].readings);
        };
        assert_eq!(r.eval.baseline, 40.0, "the resumed evaluator");
        assert_eq!(r.observed.depth.source, 3);
        assert!(matches!(polls[0].readings[1], Reading::Observed(_)));
        assert!(polls[1].depths.is_err());
        assert!(matches!(polls[1].readings[..], [Reading::Unknown]));
        assert_eq!(c.len(), 2, "no evaluator for the unknown one");
        let series = metrics.backlog_resources();
        assert!(series.contains(&("shop".into(), "orders".into())));
        assert!(!series.contains(&("shop".into(), "gone".into())));
    }
}
