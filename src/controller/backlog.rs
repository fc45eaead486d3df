//! The controller's backlog monitor (docs/ARCHITECTURE.md, "Monitoring and alerting"): a task beside the controllers that
//! polls the depths of every managed queue — one management-API listing per broker
//! Secret and vhost per interval, shared by every DeadLetterQueue on it
//! ([`crate::collector`]) — evaluates each resource's dead-letter backlog, records the
//! metrics, and writes the backlog part of the status and the `BacklogHigh` condition.
//!
//! - Targets are registered by the reconcile once a resource is planned ([`Targets::set`])
//!   and dropped once the resource is gone from the watch (its finalizer released; a
//!   deletion blocked by messages keeps it watched).
//! - Status is written by server-side apply under its own field manager
//!   ([`FIELD_MANAGER`]), so it never overwrites what the reconcile owns and vice versa
//!   (the conditions list is a map keyed by `type`). It is written only when something
//!   changed ([`backlog_status`]): a condition or the alert state at once, the figures at
//!   most every [`STATUS_INTERVAL`]. A steady state writes nothing.
//! - A broker that cannot be read makes the backlog unknown, not zero: `BacklogHigh`
//!   becomes `Unknown` with reason `BrokerUnreachable`, the resource's series are removed
//!   (the `absent` alert rule covers them), and the monitor keeps polling.

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

use crate::broker::rabbitmq::RabbitMq;
use crate::broker::{BrokerError, QueueDepth};
use crate::collector::{observe, Collector};
use crate::controller::conditions::{self, ConditionStatus, Desired, BACKLOG_HIGH};
use crate::controller::object::{api_resource, status_of};
use crate::controller::shared::Context;
use crate::controller::{publish, Note};
use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus, DepthStatus};
use crate::monitor::{AlertState, Evaluation, Params};
use crate::topology::DesiredTopology;

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

/// One vhost's depths by queue name, or why they could not be read.
type Listing = Result<BTreeMap<String, QueueDepth>, BrokerError>;

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
    pub broker: Arc<RabbitMq>,
    /// The listing it shares: `namespace/secret@resourceVersion` and vhost.
    pub group: Group,
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
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), target);
        self.changed.notify_one();
    }

    /// The reconcile's hook: watches `obj` (planned as `topology` with `params`, on
    /// `broker`, whose Secret is `secret_key` = `namespace/name@resourceVersion`).
    pub fn watch(
        &self,
        obj: &DynamicObject,
        topology: &DesiredTopology,
        params: &Params,
        broker: Arc<RabbitMq>,
        secret_key: String,
    ) {
        let key = crate::manifest::object_key(&obj.metadata);
        let target = Target {
            uid: obj.metadata.uid.clone().unwrap_or_default(),
            topology: Arc::new(topology.clone()),
            params: params.clone(),
            broker,
            group: (secret_key, topology.vhost.clone()),
        };
        self.set(&key, target);
    }

    /// Stops watching `key`.
    pub fn remove(&self, key: &str) {
        let removed = self
            .targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if removed.is_some() {
            self.changed.notify_one();
        }
    }

    /// The keys watched.
    pub fn keys(&self) -> Vec<String> {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    fn snapshot(&self) -> BTreeMap<String, Target> {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What one poll says about one resource.
#[derive(Debug, Clone, Copy)]
pub enum Reading<'a> {
    /// The depths were read and evaluated.
    Observed {
        /// Depths.
        depth: &'a DepthStatus,
        /// Evaluation of the dead-letter depth.
        eval: &'a Evaluation,
    },
    /// The depths could not be read: the condition's reason (`BrokerUnreachable`,
    /// `BrokerAuthFailed`, …) and the error.
    Unknown {
        /// CamelCase reason.
        reason: &'static str,
        /// The error, as text.
        message: &'a str,
    },
}

/// RFC 3339 time of `ms` (ms since the Unix epoch).
fn time_of(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_string())
}

/// `x` rounded to `decimals` places (so a figure that only jitters in its last digits
/// does not count as a change).
fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

/// The `BacklogHigh` condition for a reading. Its message does not carry live numbers
/// (those are in the status fields and the metrics), so a steady state does not change
/// it.
///
/// - `True`, reason `BacklogHigh`: the backlog alert fires (`R ≥ 1` held for `for`);
///   reason `GrowthHigh`: the growth alert fires (growth ≥ `growthPerMinute` for `for`).
/// - `False`, reason `BacklogPending` (`R ≥ 1`, not yet for `for`), `BacklogNormal`, or
///   `NoThreshold` (neither `threshold` nor `thresholdFactor` set).
/// - `Unknown`, with the reading's reason, when the broker cannot be read.
pub fn backlog_condition(reading: Reading<'_>, params: &Params) -> Desired {
    let for_ = crate::duration::format_ms(params.for_ms);
    let (status, reason, message) = match reading {
        Reading::Unknown { reason, message } => (
            ConditionStatus::Unknown,
            reason,
            format!("queue depths cannot be read: {message}"),
        ),
        Reading::Observed { eval, .. } => match (eval.state, eval.growth_state) {
            (AlertState::Firing { .. }, _) => (
                ConditionStatus::True,
                "BacklogHigh",
                format!(
                    "the dead-letter backlog ratio has been at or above 1 for {for_} since {}",
                    eval.breaching_since
                        .and_then(time_of)
                        .unwrap_or_else(|| "an unknown time".into())
                ),
            ),
            (_, AlertState::Firing { .. }) => (
                ConditionStatus::True,
                "GrowthHigh",
                format!(
                    "the dead-letter queue has grown by at least {} messages per minute for {for_}",
                    params.growth_per_minute.unwrap_or_default()
                ),
            ),
            (AlertState::Pending { .. }, _) => (
                ConditionStatus::False,
                "BacklogPending",
                format!(
                    "the dead-letter backlog ratio is at or above 1 since {}; BacklogHigh after {for_}",
                    eval.breaching_since
                        .and_then(time_of)
                        .unwrap_or_else(|| "an unknown time".into())
                ),
            ),
            (AlertState::Inactive, _) if eval.threshold.is_none() => (
                ConditionStatus::False,
                "NoThreshold",
                "no spec.monitoring.threshold or thresholdFactor: the backlog ratio is not computed"
                    .to_string(),
            ),
            (AlertState::Inactive, _) => (
                ConditionStatus::False,
                "BacklogNormal",
                "the dead-letter backlog ratio is below 1".to_string(),
            ),
        },
    };
    Desired {
        type_: BACKLOG_HIGH,
        status,
        reason,
        message,
    }
}

/// The backlog part of the status after a reading, or `None` when nothing needs writing.
/// Pure.
///
/// `current` is the backlog part last written (or read). The result is written when the
/// `BacklogHigh` condition or the alert state changed, or when a figure (depths,
/// baseline, threshold, ratio to 3 decimals, growth to 2) changed and the last write
/// (`lastObservedTime`) is at least `status_interval` old. `lastObservedTime` is the
/// reading's time (`now`) on every write of an observed reading. An unknown reading
/// clears the ratio, growth and `breachingSince` (unknown, not zero) and sets
/// `alertState: Unknown`; the depths stay as last observed, dated by the unchanged
/// `lastObservedTime`, and the baseline is kept.
pub fn backlog_status(
    current: &DeadLetterQueueStatus,
    generation: Option<i64>,
    reading: Reading<'_>,
    params: &Params,
    now: &Time,
    status_interval: Duration,
) -> Option<DeadLetterQueueStatus> {
    let mut next = current.backlog_part();
    let condition_changed = conditions::set(
        &mut next.conditions,
        &backlog_condition(reading, params),
        generation,
        now,
    );
    match reading {
        Reading::Observed { depth, eval } => {
            next.depth = Some(depth.clone());
            next.baseline = Some(round(eval.baseline, 2));
            next.threshold = eval.threshold.map(|t| round(t, 2));
            next.backlog_ratio = eval.ratio.map(|r| round(r, 3));
            next.alert_state = Some(eval.state.name().to_string());
            next.breaching_since = eval.breaching_since.and_then(time_of);
            next.growth_per_minute = eval.growth_per_minute.map(|g| round(g, 2));
        }
        Reading::Unknown { .. } => {
            // Depths stay as last observed (dated by lastObservedTime, which an unknown
            // reading does not move); what is computed from live data goes.
            next.backlog_ratio = None;
            next.alert_state = Some("Unknown".to_string());
            next.breaching_since = None;
            next.growth_per_minute = None;
        }
    }
    let state_changed = next.alert_state != current.alert_state;
    let figures_changed = next != current.backlog_part();
    let last_write = current
        .last_observed_time
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let interval_passed = last_write
        .is_none_or(|t| now.0.duration_since(t).as_secs_f64() >= status_interval.as_secs_f64());
    if condition_changed || state_changed || (figures_changed && interval_passed) {
        if let Reading::Observed { .. } = reading {
            next.last_observed_time = Some(now.0.to_string());
        }
        Some(next)
    } else {
        None
    }
}

/// An evaluator resumed from the backlog part of a status: its rolling baseline and its
/// alert state (`alertState`, `breachingSince`, and `BacklogHigh`'s transition time as
/// the firing time). Pure.
pub fn resumed_evaluator(
    params: &Params,
    status: &DeadLetterQueueStatus,
    now_ms: u64,
) -> crate::monitor::Evaluator {
    let mut e = match (params.baseline, status.baseline) {
        (crate::monitor::Baseline::Rolling { .. }, Some(b)) => {
            crate::monitor::Evaluator::resume(params.clone(), b, now_ms)
        }
        _ => crate::monitor::Evaluator::new(params.clone()),
    };
    let ms = |t: &str| {
        t.parse::<k8s_openapi::jiff::Timestamp>()
            .ok()
            .and_then(|t| u64::try_from(t.as_millisecond()).ok())
    };
    let breaching = status.breaching_since.as_deref().and_then(ms);
    let fired = status
        .conditions
        .iter()
        .find(|c| c.type_ == BACKLOG_HIGH && c.status == "True")
        .and_then(|c| u64::try_from(c.last_transition_time.0.as_millisecond()).ok());
    let state = match (status.alert_state.as_deref(), breaching) {
        (Some("Firing"), Some(b)) => Some(AlertState::Firing {
            since: fired.unwrap_or(b),
        }),
        (Some("Pending"), Some(b)) => Some(AlertState::Pending { since: b }),
        _ => None,
    };
    if let Some(state) = state {
        e.resume_state(state, breaching);
    }
    e
}

/// The condition reason for a failed depth listing.
fn unknown_reason(e: &BrokerError) -> &'static str {
    crate::reconcile::ReconcileError::Broker(e.clone()).reason()
}

/// Events for a change of the `BacklogHigh` condition from `before` to `after` (only on
/// a status change): Warning `BacklogHigh` / `GrowthHigh` when it becomes `True`, Normal
/// `BacklogResolved` when it leaves `True`, Warning with the reason when it becomes
/// `Unknown`. Pure.
pub fn backlog_events(before: &DeadLetterQueueStatus, after: &DeadLetterQueueStatus) -> Vec<Note> {
    let find = |s: &DeadLetterQueueStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .cloned()
    };
    let (Some(new), old) = (find(after), find(before)) else {
        return Vec::new();
    };
    let old_status = old.as_ref().map(|c| c.status.as_str());
    if old_status == Some(new.status.as_str()) {
        return Vec::new();
    }
    match new.status.as_str() {
        "True" => vec![Note::warning(&new.reason, "Monitor", new.message)],
        "Unknown" => vec![Note::warning(&new.reason, "Monitor", new.message)],
        _ if old_status == Some("True") => vec![Note::normal(
            "BacklogResolved",
            "Monitor",
            format!("{} ({})", new.message, new.reason),
        )],
        _ => Vec::new(),
    }
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
    polled: HashMap<(String, String), tokio::time::Instant>,
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

impl Monitor {
    /// Polls the groups that are due; returns how long to wait for the next one.
    async fn tick(&mut self) -> Duration {
        let targets = self.ctx.targets.snapshot();
        let store = self.ctx.dead_letter_queues.get().cloned();
        // Gone from the watch (deleted without our finalizer, or out of the selector).
        let gone: Vec<String> = match &store {
            Some(store) => targets
                .keys()
                .filter(|k| {
                    let (ns, name) = crate::collector::split_key(k);
                    store
                        .get(
                            &ObjectRef::new_with(name, api_resource::<DeadLetterQueue>())
                                .within(ns),
                        )
                        .is_none()
                })
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

        let mut groups: BTreeMap<(String, String), Vec<(&String, &Target)>> = BTreeMap::new();
        for (k, t) in &targets {
            groups.entry(t.group.clone()).or_default().push((k, t));
        }
        self.polled.retain(|g, _| groups.contains_key(g));
        let now = tokio::time::Instant::now();
        let mut wait = Duration::from_secs(15);
        let mut due = Vec::new();
        for (group, members) in &groups {
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
                let required: std::collections::BTreeSet<String> = members
                    .iter()
                    .flat_map(|(_, t)| t.topology.queues.iter().map(|q| q.name.clone()))
                    .collect();
                due.push((
                    group.clone(),
                    members[0].1.broker.clone(),
                    spacing,
                    required,
                ));
                wait = wait.min(interval);
            } else {
                wait = wait.min(next - now);
            }
        }
        if due.is_empty() {
            return wait;
        }
        for (group, _, _, _) in &due {
            self.polled.insert(group.clone(), now);
        }
        // Samples are dated at the start of the poll, so their spacing is the polls'
        // spacing whatever each listing takes.
        let now_time = self.ctx.shared.now();
        let now_ms = u64::try_from(now_time.0.as_millisecond()).unwrap_or(0);
        let results: Vec<(Group, Listing, Duration)> = futures::stream::iter(due)
            .map(|(group, broker, spacing, required)| async move {
                let depths = broker.queue_depths_covering(&group.1, &required).await;
                (group, depths, spacing)
            })
            .buffer_unordered(POLL_CONCURRENCY)
            .collect()
            .await;
        let mut writes = Vec::new();
        for (group, depths, spacing) in results {
            let spacing_ms = u64::try_from(spacing.as_millis()).unwrap_or(u64::MAX);
            let Some(members) = groups.get(&group) else {
                continue;
            };
            if let Err(e) = &depths {
                warn!(secret = %group.0, vhost = %group.1, error = %e, "depth poll failed; backlog unknown");
            }
            for (key, target) in members {
                let Some(obj) = store.as_ref().and_then(|s| {
                    let (ns, name) = crate::collector::split_key(key);
                    s.get(&ObjectRef::new_with(name, api_resource::<DeadLetterQueue>()).within(ns))
                }) else {
                    continue;
                };
                // A resource being deleted is still watched: a blocked deletion still holds
                // dead letters.
                if obj.metadata.uid.as_deref() != Some(target.uid.as_str()) {
                    continue;
                }
                let current = self
                    .written
                    .get(&target.uid)
                    .cloned()
                    .unwrap_or_else(|| status_of::<DeadLetterQueueStatus>(&obj).backlog_part());
                let observed;
                let eval;
                let error_text;
                let reading = match &depths {
                    Ok(depths) => {
                        observed = observe(&target.topology, depths);
                        let mut params = target.params.clone();
                        params.interval_ms = params.interval_ms.max(spacing_ms);
                        // A new evaluator (a restart, a new leader) resumes from status: the
                        // baseline, and the alert state, so a firing alert is not resolved
                        // and re-pended by the restart.
                        if !self.collector.contains(key) {
                            self.collector
                                .insert(key, resumed_evaluator(&params, &current, now_ms));
                        }
                        eval = self.collector.record(key, &params, &observed, now_ms).0;
                        Reading::Observed {
                            depth: &observed.depth,
                            eval: &eval,
                        }
                    }
                    Err(e) => {
                        self.collector.unknown(key);
                        error_text = e.to_string();
                        Reading::Unknown {
                            reason: unknown_reason(e),
                            message: &error_text,
                        }
                    }
                };
                if let Some(next) = backlog_status(
                    &current,
                    obj.metadata.generation,
                    reading,
                    &target.params,
                    &now_time,
                    STATUS_INTERVAL,
                ) {
                    let notes = backlog_events(&current, &next);
                    self.written.insert(target.uid.clone(), next.clone());
                    writes.push((obj, next, notes));
                }
            }
        }
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
        // A failed write is retried on the next poll.
        for uid in failed {
            self.written.remove(&uid);
        }
        debug!(targets = targets.len(), "backlog poll done");
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;

    fn params() -> Params {
        let spec: crate::crd::MonitoringSpec = serde_json::from_value(serde_json::json!({
            "interval": "10s", "baseline": {"mode": "Static", "value": 100},
            "threshold": 1100, "for": "30s"}))
        .expect("spec");
        Params::from_spec(&spec).expect("params")
    }

    /// Feeds `(t in s, depth)` samples through an evaluator and `backlog_status`, as the
    /// monitor does; returns, per sample, the written status (if any).
    fn run(samples: &[(i64, u64)]) -> Vec<Option<DeadLetterQueueStatus>> {
        let p = params();
        let mut e = crate::monitor::Evaluator::new(p.clone());
        let mut current = DeadLetterQueueStatus::default();
        samples
            .iter()
            .map(|&(t, d)| {
                let eval = e.observe(t as u64 * 1000, d);
                let depth = DepthStatus {
                    dead_letter: d,
                    ..Default::default()
                };
                let next = backlog_status(
                    &current,
                    Some(1),
                    Reading::Observed {
                        depth: &depth,
                        eval: &eval,
                    },
                    &p,
                    &at(t),
                    STATUS_INTERVAL,
                );
                if let Some(n) = &next {
                    current = n.clone();
                }
                next
            })
            .collect()
    }

    fn condition(s: &DeadLetterQueueStatus) -> (String, String) {
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .expect("BacklogHigh");
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn writes_on_state_changes_and_figures_at_most_every_status_interval() {
        // Steady 0, then a breach held past `for` (30 s), then recovery.
        let out = run(&[
            (0, 0),
            (10, 0),
            (20, 5),
            (80, 7),
            (90, 2000),
            (100, 2000),
            (120, 2000),
            (130, 50),
        ]);
        let written: Vec<bool> = out.iter().map(Option::is_some).collect();
        assert_eq!(
            written,
            [true, false, false, true, true, false, true, true],
            "first sample; steady; figure change within 1 min; figure change after 1 min; Pending; still Pending; Firing; resolved"
        );
        let first = out[0].as_ref().expect("written");
        assert_eq!(condition(first), ("False".into(), "BacklogNormal".into()));
        assert_eq!(first.backlog_ratio, Some(-0.1));
        assert_eq!(first.alert_state.as_deref(), Some("Inactive"));
        assert_eq!(first.last_observed_time, Some(at(0).0.to_string()));
        let pending = out[4].as_ref().expect("written");
        assert_eq!(
            condition(pending),
            ("False".into(), "BacklogPending".into())
        );
        assert_eq!(pending.backlog_ratio, Some(1.9));
        assert_eq!(pending.breaching_since, Some(at(90).0.to_string()));
        let firing = out[6].as_ref().expect("written");
        assert_eq!(condition(firing), ("True".into(), "BacklogHigh".into()));
        assert_eq!(firing.alert_state.as_deref(), Some("Firing"));
        assert_eq!(firing.breaching_since, Some(at(90).0.to_string()));
        // The condition's transition time is the Firing evaluation; the message has no
        // live numbers.
        let c = firing
            .conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .expect("condition");
        assert_eq!(c.last_transition_time, at(120));
        assert!(!c.message.contains("2000"), "{}", c.message);
        let resolved = out[7].as_ref().expect("written");
        assert_eq!(
            condition(resolved),
            ("False".into(), "BacklogNormal".into())
        );
        assert_eq!(resolved.breaching_since, None);
        // Only the backlog part is written: nothing the reconcile owns.
        assert!(resolved.topology.is_none() && resolved.observed_generation.is_none());
    }

    #[test]
    fn an_unknown_reading_clears_the_figures_and_keeps_the_baseline() {
        let p = params();
        let eval = crate::monitor::Evaluator::new(p.clone()).observe(0, 600);
        let depth = DepthStatus {
            dead_letter: 600,
            ..Default::default()
        };
        let observed = backlog_status(
            &DeadLetterQueueStatus::default(),
            Some(3),
            Reading::Observed {
                depth: &depth,
                eval: &eval,
            },
            &p,
            &at(0),
            STATUS_INTERVAL,
        )
        .expect("first write");
        assert_eq!(observed.backlog_ratio, Some(0.5));
        let unknown = backlog_status(
            &observed,
            Some(3),
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            &p,
            &at(5),
            STATUS_INTERVAL,
        )
        .expect("a condition change is written at once");
        assert_eq!(
            condition(&unknown),
            ("Unknown".into(), "BrokerUnreachable".into())
        );
        assert_eq!(unknown.backlog_ratio, None, "unknown, not zero");
        assert_eq!(unknown.depth, observed.depth, "last observed, dated");
        assert_eq!(unknown.last_observed_time, observed.last_observed_time);
        assert_eq!(unknown.baseline, Some(100.0));
        assert_eq!(unknown.alert_state.as_deref(), Some("Unknown"));
        let events = backlog_events(&observed, &unknown);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "BrokerUnreachable");
        // Still unreachable: nothing new to write.
        assert!(backlog_status(
            &unknown,
            Some(3),
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            &p,
            &at(200),
            STATUS_INTERVAL,
        )
        .is_none());
    }

    #[test]
    fn events_on_firing_and_resolution_only() {
        let out = run(&[(0, 2000), (10, 2000), (20, 2000), (30, 2000), (40, 0)]);
        let statuses: Vec<DeadLetterQueueStatus> = out.into_iter().flatten().collect();
        let mut reasons = Vec::new();
        let mut before = DeadLetterQueueStatus::default();
        for s in &statuses {
            reasons.extend(backlog_events(&before, s).into_iter().map(|n| n.reason));
            before = s.clone();
        }
        assert_eq!(reasons, ["BacklogHigh", "BacklogResolved"]);
    }

    #[test]
    fn a_restart_resumes_a_firing_alert_without_a_false_resolution() {
        // Fire, as before a restart.
        let out = run(&[(0, 2000), (10, 2000), (20, 2000), (30, 2000)]);
        let before = out.into_iter().flatten().last().expect("written");
        assert_eq!(before.alert_state.as_deref(), Some("Firing"));
        // A new process: the evaluator comes from status; the next poll is still firing,
        // so nothing is written and no Event says it resolved.
        let p = params();
        let mut e = resumed_evaluator(&p, &before, 300_000);
        let eval = e.observe(300_000, 2000);
        assert_eq!(eval.state.name(), "Firing");
        let depth = DepthStatus {
            dead_letter: 2000,
            ..Default::default()
        };
        let next = backlog_status(
            &before,
            Some(1),
            Reading::Observed {
                depth: &depth,
                eval: &eval,
            },
            &p,
            &at(300),
            STATUS_INTERVAL,
        );
        if let Some(n) = &next {
            assert!(backlog_events(&before, n).is_empty(), "{n:?}");
            assert_eq!(n.alert_state.as_deref(), Some("Firing"));
        }
    }
}
