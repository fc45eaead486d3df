//! The file-driven runner: `apply`, `run --standalone` and `render` read manifests from
//! files and drive a real RabbitMQ through the same [`crate::reconcile`] core as the
//! controller, with the manifests resolved by [`crate::resolve::manifests`] and depths
//! polled by [`crate::collector::poll`]. Nothing here plans or talks to the broker by
//! itself.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::broker::BrokerFactory;
use crate::collector::{groups, Collector, Endpoint, Group, GroupPoll, Member, Reading, Recorded};
use crate::manifest::{self, object_key, ManifestError, Manifests};
use crate::status::conditions;

pub use crate::resolve::manifests::{load_and_plan, Planned};

mod apply;
pub mod maturity;
pub use apply::{apply_all, apply_each, apply_redis_each, write_total, APPLY_CONCURRENCY};

/// Counts of one apply, for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// DeadLetterQueues whose topology is fully in place.
    pub ready: usize,
    /// DeadLetterQueues with a conflict, a shadowed policy, a failed object or a broker
    /// error.
    pub not_ready: usize,
}

/// What `render` prints for one DeadLetterQueue.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rendered<'a> {
    /// `namespace/name`.
    pub dead_letter_queue: &'a str,
    /// Nominal delay per retry.
    pub schedule: Vec<String>,
    /// The tier (delay queue) each retry's nominal delay waits in.
    pub waits: Vec<String>,
    /// Every tier.
    pub tiers: Vec<String>,
    /// Worst-case total retry wait.
    pub worst_case_retry_duration: String,
    /// The planned topology.
    pub topology: &'a crate::topology::DesiredTopology,
    /// The Prometheus alert rule group of the resource (what its `PrometheusRule` holds
    /// in a cluster; [`render_rules`] prints them as a rule file).
    pub alert_rules: serde_json::Value,
}

/// Renders the planned topology of every DeadLetterQueue as multi-document YAML.
///
/// # Errors
/// Serialisation errors (not expected).
pub fn render(planned: &[Planned]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for p in planned {
        let policy = &p.prepared.policy;
        let (schedule, tiers, worst) = policy.status_strings();
        let waits = policy
            .schedule_ms()
            .into_iter()
            .filter_map(|d| policy.tier_for(d))
            .map(crate::duration::format_ms)
            .collect();
        let doc = Rendered {
            dead_letter_queue: &p.prepared.key,
            schedule,
            waits,
            tiers,
            worst_case_retry_duration: worst,
            topology: &p.prepared.topology,
            alert_rules: crate::alerts::rule_group(&p.object, &p.prepared.monitoring),
        };
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&doc)?);
    }
    Ok(out)
}

/// The Prometheus rule file (`groups:`, for Prometheus's `rule_files` or
/// `promtool check rules`) of every DeadLetterQueue: the same rules the controller puts
/// in each resource's `PrometheusRule`.
///
/// # Errors
/// Serialisation errors (not expected).
pub fn render_rules(planned: &[Planned]) -> Result<String, serde_yaml_ng::Error> {
    let items: Vec<(&crate::crd::DeadLetterQueue, &crate::monitor::Params)> = planned
        .iter()
        .map(|p| (&p.object, &p.prepared.monitoring))
        .collect();
    serde_yaml_ng::to_string(&crate::alerts::rule_file(&items))
}

fn fingerprint(m: &Manifests) -> u64 {
    let mut h = DefaultHasher::new();
    for d in &m.dead_letter_queues {
        serde_json::to_string(&d.object.spec)
            .unwrap_or_default()
            .hash(&mut h);
        object_key(&d.object.metadata).hash(&mut h);
    }
    for p in &m.retry_policies {
        serde_json::to_string(&p.object.spec)
            .unwrap_or_default()
            .hash(&mut h);
        object_key(&p.object.metadata).hash(&mut h);
    }
    for s in &m.secrets {
        object_key(&s.object.metadata).hash(&mut h);
        manifest::secret_data(&s.object).hash(&mut h);
    }
    h.finish()
}

/// Options of `run --standalone`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Manifest files or directories.
    pub paths: Vec<PathBuf>,
    /// Poll interval; default: the smallest `spec.monitoring.interval` of the resources.
    pub interval: Option<StdDuration>,
    /// Re-apply unchanged manifests at least this often, to repair broker objects changed
    /// or deleted behind the operator's back (like a controller's periodic resync).
    pub resync: StdDuration,
    /// Where to serve `/metrics`, `/healthz` and `/readyz` (`None`: not served).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Makes the broker clients ([`crate::rabbitmq::factory`]: RabbitMQ).
    pub brokers: Arc<dyn BrokerFactory>,
    /// Run the retry router of every DeadLetterQueue in router mode in this process
    /// (`false`: `dlq-operator router` runs them elsewhere).
    pub routers: bool,
    /// Weights of the maturity score (`dlq_maturity_score`).
    pub maturity_weights: crate::maturity::Weights,
}

/// Keeps reconciling: re-reads the manifests every interval (on a blocking thread: a read
/// that is slow or blocked, such as a FIFO without a writer, delays no depth poll and no
/// metric; the polls go on with the last valid manifests, and no new read starts before
/// it ends) and applies them again when they changed, when the last apply was not ready,
/// when a poll finds a planned queue missing, or every `resync`; polls depths with one
/// listing per broker and vhost, logging a status line per DeadLetterQueue. Serves
/// `/metrics`, `/healthz` and `/readyz` on `metrics_addr` ([`crate::serve`]). Returns when
/// `shutdown` is cancelled.
///
/// Invalid manifests are logged and the last valid ones stay in force (the broker is not
/// touched for an invalid file). An apply of an unchanged, intact topology writes nothing.
///
/// # Errors
/// The metrics address cannot be bound; I/O errors writing to stdout (not a reader that
/// went away: the apply reports are then dropped and the operator goes on).
pub async fn run(opts: RunOptions, shutdown: CancellationToken) -> std::io::Result<()> {
    let metrics = crate::metrics::Metrics::new();
    let server = match opts.metrics_addr {
        Some(addr) => {
            let readiness = crate::metrics::Readiness::new("starting");
            readiness.set_ready();
            Some(crate::serve::start(addr, metrics.clone(), readiness, &shutdown).await?)
        }
        None => None,
    };
    let fleet = opts
        .routers
        .then(|| crate::router::Fleet::new(metrics.router().clone()));
    let scores = maturity::Scores::new(opts.maturity_weights, metrics.clone());
    let result = Runner::new(opts, Collector::new(metrics), scores, fleet.as_ref())
        .run(&shutdown)
        .await;
    if let Some(fleet) = fleet {
        fleet.drain().await;
    }
    if let Some(server) = server {
        server.stop().await;
    }
    result
}

/// The state of `run --standalone` between two rounds.
struct Runner<'f> {
    opts: RunOptions,
    /// The retry routers, when this process runs them.
    fleet: Option<&'f crate::router::Fleet>,
    collector: Collector,
    /// The maturity scores ([`maturity`]).
    scores: maturity::Scores,
    /// The manifests in force, validated and planned.
    planned: Vec<Planned>,
    /// The fingerprint of the manifests last applied (`None`: none yet).
    last_fingerprint: Option<u64>,
    /// The last apply made every resource ready.
    ready: bool,
    /// The last poll found a planned queue missing.
    missing: bool,
    /// The `RouterReady` verdict last logged per DeadLetterQueue in router mode.
    router_verdicts: RouterVerdicts,
    last_apply: tokio::time::Instant,
    last_poll: Option<tokio::time::Instant>,
    /// The read of the manifests in flight.
    reading: Option<ReadTask>,
    /// How long a round waits for the read ([`READ_GRACE`], at most half the interval).
    grace: StdDuration,
}

impl<'f> Runner<'f> {
    fn new(
        opts: RunOptions,
        collector: Collector,
        scores: maturity::Scores,
        fleet: Option<&'f crate::router::Fleet>,
    ) -> Self {
        Runner {
            opts,
            fleet,
            collector,
            scores,
            planned: Vec::new(),
            last_fingerprint: None,
            ready: false,
            missing: false,
            router_verdicts: RouterVerdicts::new(),
            last_apply: tokio::time::Instant::now(),
            last_poll: None,
            reading: None,
            grace: READ_GRACE,
        }
    }

    /// Rounds of read → apply when due → poll → sleep, until `shutdown`.
    async fn run(mut self, shutdown: &CancellationToken) -> std::io::Result<()> {
        loop {
            // The files are read on a blocking thread while the depth polls go on: a slow
            // or blocked read (a FIFO, a hung mount, a huge file) delays no poll and no
            // metric.
            let grace = (!self.planned.is_empty()).then_some(self.grace);
            let Some(read) = next_read(&mut self.reading, &self.opts.paths, grace, shutdown).await
            else {
                break;
            };
            // A shutdown does not wait for a broker that does not answer (the HTTP
            // timeouts are 10 s): the round is dropped. Every write is idempotent and made
            // in the plan's order, so a half-done apply is completed by the next run.
            let round = async {
                self.take(read).await?;
                let interval = self.interval();
                self.grace = READ_GRACE.min(interval / 2);
                self.poll(interval).await;
                Ok::<_, std::io::Error>(interval)
            };
            let interval = tokio::select! {
                () = shutdown.cancelled() => break,
                round = round => round?,
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
        tracing::info!("shutting down");
        Ok(())
    }

    /// Takes the result of a read: valid manifests are applied when due (changed, first,
    /// not ready, a queue missing, or the resync is due) and stay in force; invalid ones
    /// are logged.
    ///
    /// # Errors
    /// I/O errors writing the apply report to stdout, but a reader that went away.
    async fn take(&mut self, read: Read) -> std::io::Result<()> {
        let (m, planned) = match read {
            Read::Done(Ok(read)) => read,
            Read::Done(Err(e)) => {
                tracing::error!("{e} (keeping the last valid manifests)");
                return Ok(());
            }
            Read::Pending { first_time } => {
                if first_time {
                    tracing::warn!(
                        "the manifests are still being read (a slow or blocked file); polling with the last valid ones meanwhile"
                    );
                }
                return Ok(());
            }
        };
        let fp = fingerprint(&m);
        let changed = self.last_fingerprint.is_some_and(|last| last != fp);
        let due = self.last_apply.elapsed() >= self.opts.resync;
        if self.last_fingerprint.is_some() && !changed && self.ready && !self.missing && !due {
            return Ok(());
        }
        if changed {
            tracing::info!("manifests changed; reconciling");
        }
        let mut buf = Vec::new();
        let summary = apply_all(self.opts.brokers.as_ref(), &planned, &mut buf).await?;
        // A reader of stdout that went away (`| head`, a log shipper restarting) does not
        // stop the operator: the report is dropped.
        match std::io::stdout().write_all(&buf) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e),
            _ => {}
        }
        self.ready = summary.not_ready == 0;
        self.last_fingerprint = Some(fp);
        self.last_apply = tokio::time::Instant::now();
        self.planned = planned;
        if let Some(fleet) = self.fleet {
            fleet.sync(
                self.planned
                    .iter()
                    .filter_map(|p| crate::router::Target::of(&p.prepared, &p.object.spec.router)),
            );
        }
        Ok(())
    }

    /// The poll interval: `--interval`, or the smallest `spec.monitoring.interval` of the
    /// resources (15 s without any).
    fn interval(&self) -> StdDuration {
        self.opts.interval.unwrap_or_else(|| {
            self.planned
                .iter()
                .filter_map(|p| p.prepared.monitoring_interval_ms)
                .min()
                .map_or(StdDuration::from_secs(15), StdDuration::from_millis)
        })
    }

    /// Polls the depths of the manifests in force and remembers whether a planned queue
    /// is missing.
    async fn poll(&mut self, interval: StdDuration) {
        // The real spacing of the polls (applies and slow listings make it longer than
        // the interval): the evaluator's gap tolerance counts missed polls, not slow ones.
        let spacing = self
            .last_poll
            .map_or(interval, |l| l.elapsed().max(interval));
        self.last_poll = Some(tokio::time::Instant::now());
        let observed;
        (self.missing, observed) = poll_depths(
            self.opts.brokers.as_ref(),
            &self.planned,
            &mut self.collector,
            spacing,
            &mut self.router_verdicts,
        )
        .await;
        self.scores.record(&self.planned, &observed);
    }
}

/// The result of one read of the manifests (validated and planned), as the run loop
/// sees it.
enum Read {
    /// The read ended: the manifests, or why they cannot be used.
    Done(Result<(Manifests, Vec<Planned>), ManifestError>),
    /// Still reading; `first_time` on the first poll that finds it so.
    Pending {
        /// Whether this is the first time this read is found unfinished.
        first_time: bool,
    },
}

/// A read of the manifests in flight on a blocking thread, and whether the loop already
/// said it is slow.
type ReadTask = (
    tokio::task::JoinHandle<Result<(Manifests, Vec<Planned>), ManifestError>>,
    bool,
);

/// Longest wait of a poll for a manifest read before it goes on with the last valid
/// manifests (and says the read is pending); at most half the poll interval too.
const READ_GRACE: StdDuration = StdDuration::from_secs(2);

/// Starts a read of `paths` when none is in flight and takes its result when it has
/// ended. It waits at most `grace` for the read (a read of ordinary files ends within
/// milliseconds), so the polls go on behind a slow or blocked read; with `None` (nothing
/// to poll yet: no valid manifests so far) it waits for the read. Returns `None` when
/// `shutdown` is cancelled while it waits.
async fn next_read(
    reading: &mut Option<ReadTask>,
    paths: &[PathBuf],
    grace: Option<StdDuration>,
    shutdown: &CancellationToken,
) -> Option<Read> {
    let (handle, announced) = reading.get_or_insert_with(|| {
        let paths = paths.to_vec();
        (
            tokio::task::spawn_blocking(move || load_and_plan(&paths)),
            false,
        )
    });
    let joined = tokio::select! {
        joined = async {
            match grace {
                Some(g) => tokio::time::timeout(g, &mut *handle).await.ok(),
                None => Some((&mut *handle).await),
            }
        } => joined,
        () = shutdown.cancelled() => return None,
    };
    let Some(joined) = joined else {
        let first_time = !*announced;
        *announced = true;
        return Some(Read::Pending { first_time });
    };
    *reading = None;
    Some(Read::Done(joined.unwrap_or_else(|e| {
        Err(ManifestError::Unreadable {
            path: paths.first().cloned().unwrap_or_default(),
            reason: format!("reading the manifests failed: {e}"),
        })
    })))
}

/// Polls depths: one listing per (broker, vhost), shared by every resource on it
/// ([`crate::collector::poll`]), one at a time. Logs a line per DeadLetterQueue (tiers
/// shortest first; the router inbox and its consumers in router mode), a line when a
/// router inbox's `RouterReady` verdict changes ([`router_change`]), and returns whether a
/// planned queue is missing on the broker, and what was read of each resource (by
/// `namespace/name`; none of one whose broker could not be read).
async fn poll_depths(
    brokers: &dyn BrokerFactory,
    planned: &[Planned],
    collector: &mut Collector,
    poll_interval: StdDuration,
    verdicts: &mut RouterVerdicts,
) -> (bool, BTreeMap<String, crate::collector::Observed>) {
    // Resources no longer in the manifests: their series and evaluators go.
    let keys: Vec<&str> = planned.iter().map(|p| p.prepared.key.as_str()).collect();
    collector.retain(|k| keys.contains(&k));
    // `spec.router.backlogThreshold` of the resources in router mode.
    let routers: BTreeMap<&str, u64> = planned
        .iter()
        .filter(|p| p.prepared.topology.routes.inbox.is_some())
        .map(|p| {
            let threshold = p.object.spec.router.backlog_threshold;
            (p.prepared.key.as_str(), threshold)
        })
        .collect();
    verdicts.retain(|k, _| routers.contains_key(k.as_str()));
    // Samples come every poll interval, which `--interval` may set above the spec's: the
    // gap tolerance follows the real spacing, or a longer poll would reset every Pending
    // state.
    let spacing_ms = u64::try_from(poll_interval.as_millis()).unwrap_or(u64::MAX);
    let (endpoints, groups): (Vec<String>, Vec<_>) =
        groups(brokers, planned.iter().map(|p| &p.prepared), spacing_ms)
            .into_iter()
            .unzip();
    let polls =
        crate::collector::poll(collector, &groups, crate::clock::now_ms(), 1, |_, _| None).await;
    let mut any_missing = false;
    let mut observed = BTreeMap::new();
    for ((endpoint, group), poll) in endpoints.iter().zip(&groups).zip(&polls) {
        any_missing |= log_group(endpoint, group, poll);
        log_routers(group, poll, &routers, verdicts);
        for (member, reading) in group.members.iter().zip(&poll.readings) {
            if let crate::collector::Reading::Observed(r) = reading {
                observed.insert(member.key.to_string(), r.observed.clone());
            }
        }
    }
    (any_missing, observed)
}

/// The `RouterReady` verdict last logged per DeadLetterQueue (`namespace/name`): status
/// and reason.
type RouterVerdicts = BTreeMap<String, (conditions::ConditionStatus, &'static str)>;

/// Logs, for each member of `group` in router mode (`routers`: its
/// `spec.router.backlogThreshold`) whose depths were read, its `RouterReady` verdict when
/// it changed ([`router_change`]): a warning when it is not `True`.
fn log_routers(
    group: &Group<'_, Endpoint<'_>>,
    poll: &GroupPoll,
    routers: &BTreeMap<&str, u64>,
    verdicts: &mut RouterVerdicts,
) {
    for (m, reading) in group.members.iter().zip(&poll.readings) {
        let (Some(&threshold), Reading::Observed(r)) = (routers.get(m.key), reading) else {
            continue;
        };
        let reading = crate::status::Reading::Observed {
            depth: &r.observed.depth,
            eval: &r.eval,
            inbox: r.observed.inbox.as_ref(),
            via: "",
        };
        // Within the no-consumer grace period nothing is said yet.
        let Some(desired) = crate::status::router_condition(reading, threshold) else {
            continue;
        };
        match router_change(m.key, verdicts, &desired) {
            Some((true, line)) => tracing::info!("{line}"),
            Some((false, line)) => tracing::warn!("{line}"),
            None => {}
        }
    }
}

/// The log line of `key`'s `RouterReady` verdict `desired` when it differs from the one
/// last logged (recorded in `verdicts`), with whether it is good news (`True`); `None`
/// when unchanged. Pure but for `verdicts`.
fn router_change(
    key: &str,
    verdicts: &mut RouterVerdicts,
    desired: &conditions::Desired,
) -> Option<(bool, String)> {
    let verdict = (desired.status, desired.reason);
    if verdicts.get(key) == Some(&verdict) {
        return None;
    }
    verdicts.insert(key.to_string(), verdict);
    Some((
        desired.status == conditions::ConditionStatus::True,
        format!(
            "{key}: RouterReady {} ({}): {}",
            desired.status.as_str(),
            desired.reason,
            desired.message
        ),
    ))
}

/// Logs one group's poll: a warning for a failed listing, or a status line per resource
/// with a warning when its backlog state changed or a planned queue is missing. Returns
/// whether a planned queue is missing.
fn log_group(endpoint: &str, group: &Group<'_, Endpoint<'_>>, poll: &GroupPoll) -> bool {
    let depths = match &poll.depths {
        Ok(depths) => depths,
        Err(e) => {
            tracing::warn!(
                "depth poll of {endpoint} vhost {} failed: {e}; backlog unknown",
                group.vhost
            );
            return false;
        }
    };
    let mut any_missing = false;
    for (m, reading) in group.members.iter().zip(&poll.readings) {
        match reading {
            Reading::Observed(r) => {
                let Recorded {
                    observed,
                    eval,
                    before,
                } = r.as_ref();
                log_status(m, depths, observed);
                if eval.state.name() != before.name() {
                    tracing::warn!(
                        "{}: backlog {} (dead_letter={}, baseline={}, ratio={})",
                        m.key,
                        eval.state.name(),
                        observed.depth.dead_letter,
                        eval.baseline,
                        eval.ratio
                            .map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}"))
                    );
                }
                if !observed.missing.is_empty() {
                    any_missing = true;
                    tracing::warn!(
                        "{}: queue(s) missing on the broker: {}; re-applying",
                        m.key,
                        observed.missing.join(", ")
                    );
                }
            }
            Reading::Unknown => {}
        }
    }
    any_missing
}

/// The status line of one resource: the source queue's depth, each retry tier's, the
/// retired tiers', the dead-letter depth and, in router mode, the inbox's depth and
/// consumers (`unknown` when the listing has no count).
fn log_status(
    m: &Member<'_>,
    depths: &BTreeMap<String, crate::broker::QueueDepth>,
    observed: &crate::collector::Observed,
) {
    let shown = |name: &str| {
        depths
            .get(name)
            .map_or_else(|| "missing".to_string(), |d| d.messages.to_string())
    };
    let tiers: Vec<String> = observed
        .queues
        .iter()
        .filter(|q| q.role == "retry")
        .map(|q| format!("{}={}", q.tier, shown(&q.name)))
        .collect();
    let retired = if observed.retired.is_empty() {
        String::new()
    } else {
        let r: Vec<String> = observed
            .retired
            .iter()
            .map(|(tier, d)| format!("{tier}={d}"))
            .collect();
        format!(" retired[{}]", r.join(","))
    };
    let inbox = observed.inbox.as_ref().map_or_else(String::new, |i| {
        let consumers = i
            .consumers
            .map_or_else(|| "unknown".to_string(), |c| c.to_string());
        format!(" inbox={} consumers={consumers}", shown(&i.name))
    });
    tracing::info!(
        "{}: source={} retry[{}]{retired} dead_letter={}{inbox}",
        m.key,
        shown(&m.topology.routes.source_queue),
        tiers.join(","),
        observed.depth.dead_letter
    );
}

#[cfg(test)]
mod fast_tests;

#[cfg(test)]
mod router_line_tests {
    use super::*;
    use crate::status::conditions::{ConditionStatus, Desired, ROUTER_READY};

    fn desired(status: ConditionStatus, reason: &'static str) -> Desired {
        Desired {
            type_: ROUTER_READY,
            status,
            reason,
            message: format!("message of {reason}"),
        }
    }

    #[test]
    fn a_router_verdict_is_logged_once_per_change() {
        let mut v = RouterVerdicts::new();
        let none = desired(ConditionStatus::False, "NoConsumer");
        assert_eq!(
            router_change("shop/orders", &mut v, &none),
            Some((
                false,
                "shop/orders: RouterReady False (NoConsumer): message of NoConsumer".to_string()
            ))
        );
        assert_eq!(
            router_change("shop/orders", &mut v, &none),
            None,
            "unchanged"
        );
        assert!(
            router_change("shop/other", &mut v, &none).is_some(),
            "per resource"
        );
        let ok = desired(ConditionStatus::True, "Consuming");
        assert!(matches!(
            router_change("shop/orders", &mut v, &ok),
            Some((true, _))
        ));
        let backed = desired(ConditionStatus::False, "InboxBackedUp");
        assert!(matches!(
            router_change("shop/orders", &mut v, &backed),
            Some((false, l)) if l.contains("InboxBackedUp")
        ));
    }
}
