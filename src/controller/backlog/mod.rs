//! The controller's backlog monitor (docs/ARCHITECTURE.md, "Monitoring and alerting"): a
//! task beside the controllers that polls the depths of every managed queue — one management-API listing per broker
//! Secret and vhost per interval, shared by every DeadLetterQueue on it
//! ([`crate::collector`]) — evaluates each resource's dead-letter backlog, records the
//! metrics, and writes the backlog part of the status, the `BacklogHigh` condition and, in
//! router mode, the `RouterReady` condition (the router inbox's consumers and depth:
//! [`crate::status::router`]).
//!
//! - Targets are registered by the DeadLetterQueue reconcile once a resource is planned
//!   ([`Targets::watch`]) and dropped once the resource is gone from the watch (its finalizer released; a
//!   deletion blocked by messages keeps it watched).
//! - Status is written by server-side apply under its own field manager
//!   ([`FIELD_MANAGER`]), so it never overwrites what the reconcile owns and vice versa
//!   (the conditions list is a map keyed by `type`). It is written only when something
//!   changed ([`backlog_status`]): a condition or the alert state at once, the figures at
//!   most every [`STATUS_INTERVAL`]. A steady state writes nothing.
//! - A broker that cannot be read makes the backlog unknown, not zero: `BacklogHigh`
//!   becomes `Unknown` with reason `BrokerUnreachable`, `BrokerReachable` becomes `False`
//!   with the error (every address tried), the resource's depth series are removed and
//!   `dlq_broker_up` is 0 (the alert rules hold a firing backlog alert meanwhile:
//!   [`crate::alerts`]), and the monitor keeps polling. `BrokerReachable` names the
//!   address the depths are read through while it is `True`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::broker::{BrokerClient, BrokerError};
use crate::collector::{self, Collector, DepthSource, Listing, Member, Required};
use crate::controller::shared::Context;
use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus};
use crate::monitor::Params;
use crate::object::{api_resource, status_of};
use crate::status::{publish, Note};
use crate::topology::DesiredTopology;

#[cfg(test)]
mod fast_tests;
use crate::lock::Locked;
use crate::status::maturity;
pub use crate::status::{
    backlog_condition, backlog_events, backlog_status, reachable_condition, reachable_events,
    resumed_evaluator, router_condition, router_events, set_router_condition, Reading,
};

/// Field manager of the monitor's status writes (the reconcile's is
/// [`shared::FIELD_MANAGER`](crate::controller::shared::FIELD_MANAGER)).
pub const FIELD_MANAGER: &str = "dlq-operator-monitor";

/// Least time between two status writes that only update figures (depth, baseline,
/// ratio, growth): docs/ARCHITECTURE.md, "Monitoring and alerting", `statusInterval`, 1 min. Condition and alert-state
/// changes are written at once.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(60);

/// Most depth listings in flight at once (one per broker Secret and vhost).
const POLL_CONCURRENCY: usize = 8;

/// Most status writes in flight at once.
const WRITE_CONCURRENCY: usize = 4;

/// A shared listing: broker Secret (`namespace/name@resourceVersion`) and vhost.
type Group = (String, String);

/// What the monitor watches for one DeadLetterQueue.
#[derive(Debug, Clone)]
pub struct Target {
    /// The resource's UID (a re-created resource of the same name starts afresh).
    pub uid: String,
    /// Its planned topology (the queues to read).
    pub topology: Arc<DesiredTopology>,
    /// Its validated `spec.monitoring`.
    pub params: Params,
    /// The broker client of its Secret version.
    pub broker: Arc<dyn BrokerClient>,
    /// The listing it shares: `namespace/secret@resourceVersion` and vhost.
    pub group: Group,
    /// In router mode (the plan has a router inbox): `spec.router.backlogThreshold`
    /// (messages), for the `RouterReady` condition; `None` otherwise.
    pub router: Option<u64>,
    /// Its spec as planned, for the maturity score.
    pub spec: Arc<crate::crd::DeadLetterQueueSpec>,
}

/// The monitor's targets by `namespace/name`, set by the reconcile.
#[derive(Debug, Default)]
pub struct Targets {
    targets: Mutex<BTreeMap<String, Target>>,
    changed: tokio::sync::Notify,
}

impl Targets {
    /// Watches `key` as `target` (replacing what was there) and wakes the monitor.
    pub fn set(&self, key: &str, target: Target) {
        self.targets.locked().insert(key.to_string(), target);
        self.changed.notify_one();
    }

    /// The reconcile's hook: watches `obj` (planned as `topology` with `params`, on
    /// `broker`, whose Secret is `secret_key` = `namespace/name@resourceVersion`; its
    /// validated `spec`).
    pub fn watch(
        &self,
        obj: &DynamicObject,
        topology: &DesiredTopology,
        params: &Params,
        broker: Arc<dyn BrokerClient>,
        secret_key: String,
        spec: crate::crd::DeadLetterQueueSpec,
    ) {
        let key = crate::manifest::object_key(&obj.metadata);
        let target = Target {
            uid: obj.metadata.uid.clone().unwrap_or_default(),
            topology: Arc::new(topology.clone()),
            params: params.clone(),
            broker,
            group: (secret_key, topology.vhost.clone()),
            router: router_threshold(&spec, topology),
            spec: Arc::new(spec),
        };
        self.set(&key, target);
    }

    /// Stops watching `key`.
    pub fn remove(&self, key: &str) {
        let removed = self.targets.locked().remove(key);
        if removed.is_some() {
            self.changed.notify_one();
        }
    }

    /// The keys watched.
    pub fn keys(&self) -> Vec<String> {
        self.targets.locked().keys().cloned().collect()
    }

    fn snapshot(&self) -> BTreeMap<String, Target> {
        self.targets.locked().clone()
    }
}

/// `spec.router.backlogThreshold` of `spec` when `topology` is in router mode (it plans a
/// router inbox).
fn router_threshold(
    spec: &crate::crd::DeadLetterQueueSpec,
    topology: &DesiredTopology,
) -> Option<u64> {
    topology.routes.inbox.as_ref()?;
    Some(spec.router.backlog_threshold)
}

/// The condition reason for a failed depth listing.
fn unknown_reason(e: &BrokerError) -> &'static str {
    crate::reconcile::ReconcileError::Broker(e.clone()).reason()
}

/// What the monitor works with: the shared context (client, metrics, clock) and, of the
/// DeadLetterQueue controller, its Event recorder, its store of watched
/// DeadLetterQueues and the targets its reconcile registers
/// ([`DeadLetterQueueContext::monitor`](crate::controller::context::DeadLetterQueueContext::monitor)).
#[derive(Clone)]
pub struct MonitorContext {
    /// What the controllers share.
    pub shared: Arc<Context>,
    /// The DeadLetterQueue controller's Event recorder.
    pub recorder: Recorder,
    /// The DeadLetterQueue controller's store, set once it starts.
    pub dead_letter_queues: Arc<OnceLock<Store<DynamicObject>>>,
    /// The DeadLetterReplay controller's store, set once it starts (which resources had
    /// a replay, for the maturity score).
    pub dead_letter_replays: Arc<OnceLock<Store<DynamicObject>>>,
    /// The DeadLetterQueue controller's store of RetryPolicies, set once it starts (for
    /// the maturity score).
    pub retry_policies: Arc<OnceLock<Store<DynamicObject>>>,
    /// What to watch.
    pub targets: Arc<Targets>,
}

/// One listing per group, then evaluation and status of each member.
struct Monitor {
    ctx: MonitorContext,
    collector: Collector,
    /// Backlog part last written, by UID (the watch may lag behind our own writes).
    written: HashMap<String, DeadLetterQueueStatus>,
    /// Last poll of each group.
    polled: HashMap<Group, tokio::time::Instant>,
}

/// Runs the backlog monitor of the controller until `stop` is cancelled.
pub async fn run(ctx: MonitorContext, stop: CancellationToken) {
    let mut m = Monitor {
        collector: Collector::new(ctx.shared.metrics.clone()),
        ctx,
        written: HashMap::new(),
        polled: HashMap::new(),
    };
    info!("backlog monitor started");
    loop {
        let wait = m.tick().await;
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
            _ = m.ctx.targets.changed.notified() => {}
        }
    }
    info!("backlog monitor stopped");
}

/// One group's poll, due now: the group, the broker client of its first member, and the
/// real spacing of its polls.
struct Due {
    group: Group,
    broker: Arc<dyn BrokerClient>,
    spacing: Duration,
}

/// A status write of the monitor: the object, its backlog part, and the Events of the
/// change.
type Write = (Arc<DynamicObject>, DeadLetterQueueStatus, Vec<Note>);

/// The targets by group (one listing each), members in key order.
fn by_group(targets: &BTreeMap<String, Target>) -> BTreeMap<Group, Vec<(&String, &Target)>> {
    let mut groups: BTreeMap<Group, Vec<(&String, &Target)>> = BTreeMap::new();
    for (k, t) in targets {
        groups.entry(t.group.clone()).or_default().push((k, t));
    }
    groups
}

/// The watched DeadLetterQueue `key` (`namespace/name`) in `store`.
fn watched(store: &Store<DynamicObject>, key: &str) -> Option<Arc<DynamicObject>> {
    let (ns, name) = crate::collector::split_key(key);
    store.get(&ObjectRef::new_with(name, api_resource::<DeadLetterQueue>()).within(ns))
}

/// A broker client as the poll's depth source, its listing a future that owns what it
/// reads (so the monitor's poll stays `Send` in its spawned task).
struct Lister(Arc<dyn BrokerClient>);

impl DepthSource for Lister {
    fn depths_covering(
        &self,
        vhost: &str,
        required: &Required,
    ) -> impl std::future::Future<Output = Listing> + Send {
        let (broker, vhost, required) = (self.0.clone(), vhost.to_string(), required.clone());
        async move {
            broker
                .queue_depths_and_consumers(&vhost, &required.queues, &required.consumers)
                .await
        }
    }
}

/// A due group's member whose watched object is the target's (same UID): the key, the
/// target, the object, and the backlog part it starts from (last written, else its
/// status).
struct Polled<'a> {
    key: &'a str,
    target: &'a Target,
    obj: Arc<DynamicObject>,
    current: DeadLetterQueueStatus,
}

impl Monitor {
    /// Polls the groups that are due ([`Monitor::due`]) through [`collector::poll`] (one
    /// listing each, every member recorded in the collector), then writes each member's
    /// status when it changed ([`Monitor::evaluate`], [`Monitor::write`]). Returns how
    /// long to wait for the next poll.
    async fn tick(&mut self) -> Duration {
        let store = self.ctx.dead_letter_queues.get().cloned();
        let targets = self.prune(store.as_ref());
        let groups = by_group(&targets);
        self.polled.retain(|g, _| groups.contains_key(g));
        let (due, wait) = self.due(&groups);
        if due.is_empty() {
            return wait;
        }
        // Samples are dated at the start of the poll, so their spacing is the polls'
        // spacing whatever each listing takes.
        let now = self.ctx.shared.now();
        let now_ms = crate::clock::epoch_ms(&now);
        let members: Vec<Vec<Polled<'_>>> = due
            .iter()
            .map(|d| self.members(store.as_ref(), groups.get(&d.group)))
            .collect();
        let poll_groups: Vec<collector::Group<'_, Lister>> = due
            .iter()
            .zip(&members)
            .map(|(d, members)| collector::Group {
                broker: Lister(d.broker.clone()),
                vhost: &d.group.1,
                spacing_ms: u64::try_from(d.spacing.as_millis()).unwrap_or(u64::MAX),
                members: members
                    .iter()
                    .map(|m| Member {
                        key: m.key,
                        topology: &m.target.topology,
                        params: &m.target.params,
                    })
                    .collect(),
            })
            .collect();
        // A new evaluator (a restart, a new leader) resumes from status: the baseline,
        // and the alert state, so a firing alert is not resolved and re-pended by the
        // restart.
        let polls = collector::poll(
            &mut self.collector,
            &poll_groups,
            now_ms,
            POLL_CONCURRENCY,
            |key, params| {
                let m = members.iter().flatten().find(|m| m.key == key)?;
                Some(resumed_evaluator(params, &m.current, now_ms))
            },
        )
        .await;
        // Scored only once both stores have their first listing: before, a RetryPolicy or a
        // replay not listed yet would lower the score for a poll (and write it twice).
        let replays = self.ctx.dead_letter_replays.get();
        let replayed = (maturity::synced(replays)
            && maturity::synced(self.ctx.retry_policies.get()))
        .then(|| maturity::replayed(replays));
        let mut writes = Vec::new();
        for ((d, members), poll) in due.iter().zip(&members).zip(&polls) {
            if let Err(e) = &poll.depths {
                warn!(secret = %d.group.0, vhost = %d.group.1, error = %e, "depth poll failed; backlog unknown");
            }
            for (m, reading) in members.iter().zip(&poll.readings) {
                writes.extend(self.evaluate(m, reading, &poll.depths, &now, replayed.as_ref()));
            }
        }
        self.write(writes).await;
        debug!(targets = targets.len(), "backlog poll done");
        wait
    }

    /// The members of a due group to poll: those watched as the target's object (same
    /// UID; a resource being deleted is still watched: a blocked deletion still holds dead
    /// letters), each with the backlog part it starts from.
    fn members<'a>(
        &self,
        store: Option<&Store<DynamicObject>>,
        group: Option<&Vec<(&'a String, &'a Target)>>,
    ) -> Vec<Polled<'a>> {
        let Some(store) = store else {
            return Vec::new();
        };
        group
            .into_iter()
            .flatten()
            .filter_map(|(key, target)| {
                let obj = watched(store, key)?;
                if obj.metadata.uid.as_deref() != Some(target.uid.as_str()) {
                    return None;
                }
                let current = self
                    .written
                    .get(&target.uid)
                    .cloned()
                    .unwrap_or_else(|| status_of::<DeadLetterQueueStatus>(&obj).backlog_part());
                Some(Polled {
                    key: key.as_str(),
                    target,
                    obj,
                    current,
                })
            })
            .collect()
    }

    /// The targets still watched: those gone from the watch (deleted without our
    /// finalizer, or out of the selector) are dropped with their series, evaluators and
    /// last written status.
    fn prune(&mut self, store: Option<&Store<DynamicObject>>) -> BTreeMap<String, Target> {
        let targets = self.ctx.targets.snapshot();
        let gone: Vec<String> = match store {
            Some(store) => targets
                .keys()
                .filter(|k| watched(store, k).is_none())
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        for k in &gone {
            self.ctx.targets.remove(k);
            // Deleted: its replay counters go with its other series.
            self.collector.forget(k);
        }
        let targets: BTreeMap<String, Target> = targets
            .into_iter()
            .filter(|(k, _)| !gone.contains(k))
            .collect();
        self.collector.retain(|k| targets.contains_key(k));
        let uids: Vec<&str> = targets.values().map(|t| t.uid.as_str()).collect();
        self.written.retain(|uid, _| uids.contains(&uid.as_str()));
        targets
    }

    /// The groups due for a poll now (each group every shortest `interval` of its
    /// members), marked polled; and how long until the next one is due (at most 15 s).
    fn due(&mut self, groups: &BTreeMap<Group, Vec<(&String, &Target)>>) -> (Vec<Due>, Duration) {
        let now = tokio::time::Instant::now();
        let mut wait = Duration::from_secs(15);
        let mut due = Vec::new();
        for (group, members) in groups {
            let interval = Duration::from_millis(
                members
                    .iter()
                    .map(|(_, t)| t.params.interval_ms)
                    .min()
                    .unwrap_or(15_000),
            );
            let last = self.polled.get(group).copied();
            let next = last.map_or(now, |last| last + interval);
            if next <= now {
                // The real spacing of this group's polls (longer than the interval when a
                // listing is slow): the evaluator's gap tolerance counts missed polls,
                // not slow ones, or a slow broker would keep resetting `Pending`.
                let spacing = last.map_or(interval, |l| now - l).max(interval);
                due.push(Due {
                    group: group.clone(),
                    broker: members[0].1.broker.clone(),
                    spacing,
                });
                wait = wait.min(interval);
            } else {
                wait = wait.min(next - now);
            }
        }
        for d in &due {
            self.polled.insert(d.group.clone(), now);
        }
        (due, wait)
    }

    /// The member `m`'s status after its `reading` of the poll (its group's listing
    /// `depths`) at `now`: its status write when the backlog part changed
    /// ([`backlog_status`]) or its maturity did ([`Monitor::maturity`]; `replayed`: the
    /// resources with a replay, `None` before the stores are synced), with the Events of
    /// the change ([`backlog_events`], [`router_events`]).
    fn evaluate(
        &mut self,
        m: &Polled<'_>,
        reading: &collector::Reading,
        depths: &Listing,
        now: &Time,
        replayed: Option<&std::collections::HashSet<String>>,
    ) -> Option<Write> {
        let error_text;
        let via = m.target.broker.address_in_use();
        let reading = match (reading, depths) {
            (collector::Reading::Observed(r), _) => Reading::Observed {
                depth: &r.observed.depth,
                eval: &r.eval,
                inbox: r.observed.inbox.as_ref(),
                via: &via,
            },
            (collector::Reading::Unknown, Err(e)) => {
                error_text = e.to_string();
                Reading::Unknown {
                    reason: unknown_reason(e),
                    message: &error_text,
                }
            }
            // A member is unknown only when its listing failed.
            (collector::Reading::Unknown, Ok(_)) => return None,
        };
        let backlog = backlog_status(
            &m.current,
            m.obj.metadata.generation,
            reading,
            &m.target.params,
            m.target.router,
            now,
            STATUS_INTERVAL,
        );
        let router_ready = backlog
            .as_ref()
            .unwrap_or(&m.current)
            .conditions
            .iter()
            .any(|c| c.type_ == crate::status::conditions::ROUTER_READY && c.status == "True");
        let maturity = self.maturity(m, reading, router_ready, now, replayed);
        if backlog.is_none() && maturity.is_none() {
            return None;
        }
        let mut next = backlog.unwrap_or_else(|| m.current.clone());
        if maturity.is_some() {
            next.maturity = maturity;
        }
        let mut notes = backlog_events(&m.current, &next);
        notes.extend(reachable_events(&m.current.conditions, &next.conditions));
        notes.extend(router_events(&m.current.conditions, &next.conditions));
        self.written.insert(m.target.uid.clone(), next.clone());
        Some((m.obj.clone(), next, notes))
    }

    /// The maturity of member `m` after an observed `reading` at `now` (`router_ready`:
    /// its `RouterReady` condition is `True`; `replayed`: the resources with a replay):
    /// records its metrics, and returns its `status.maturity` when that changed
    /// ([`maturity::maturity_status`]). An unknown reading, or stores not synced yet
    /// (`replayed` is `None`), change nothing: what was seen before still holds.
    fn maturity(
        &self,
        m: &Polled<'_>,
        reading: Reading<'_>,
        router_ready: bool,
        now: &Time,
        replayed: Option<&std::collections::HashSet<String>>,
    ) -> Option<crate::crd::MaturityStatus> {
        let (Reading::Observed { depth, inbox, .. }, Some(replayed)) = (reading, replayed) else {
            return None;
        };
        // A router consumes now, or RouterReady still says so (a restart within its grace
        // period does not change the score).
        let consumers = inbox.and_then(|i| i.consumers).is_some_and(|c| c > 0);
        let seen = maturity::Seen {
            depth,
            router_consuming: consumers || router_ready,
            replayed: replayed.contains(m.key),
            alert_rules: maturity::alert_rules_applied(&m.obj),
        };
        let (ns, name) = crate::collector::split_key(m.key);
        let spec = &m.target.spec;
        let policy = maturity::policy_in(
            self.ctx.retry_policies.get(),
            ns,
            &spec.retry_policy_ref.name,
        );
        let (score, status) = maturity::maturity_status(
            m.current.maturity.as_ref(),
            spec,
            maturity::as_policy(policy.as_ref()),
            &seen,
            &self.ctx.shared.maturity_weights,
            now,
        );
        self.ctx.shared.metrics.maturity().record(ns, name, &score);
        status
    }

    /// Writes the backlog parts of `writes` (under [`FIELD_MANAGER`], a few at once) and
    /// records their Events; a failed write is retried on the next poll.
    async fn write(&mut self, writes: Vec<Write>) {
        let ctx = &self.ctx;
        let failed: Vec<String> = futures::stream::iter(writes)
            .map(|(obj, status, notes)| async move {
                let ar = api_resource::<DeadLetterQueue>();
                let result = crate::controller::apply_status_as(
                    &ctx.shared,
                    &ar,
                    &obj,
                    &status,
                    FIELD_MANAGER,
                )
                .await;
                for note in notes {
                    publish(&ctx.recorder, &obj, &ar, note).await;
                }
                match result {
                    Ok(()) => None,
                    Err(e) => {
                        warn!(name = ?obj.metadata.name, error = %e, "could not write backlog status");
                        obj.metadata.uid.clone()
                    }
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .filter_map(|x| async move { x })
            .collect()
            .await;
        for uid in failed {
            self.written.remove(&uid);
        }
    }
}
