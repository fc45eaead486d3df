//! What every reconcile shares: the Kubernetes client, one event [`Recorder`] per
//! controller, the metrics, the broker clients (one per Secret version), the clock, the
//! per-object error backoff, and the replays running in this process ([`Replays`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;

use crate::backoff::Backoff;
use crate::broker::rabbitmq::{RabbitMq, RequestCounts};
use crate::broker::{BrokerConnection, BrokerError};
use crate::crd::BackoffStrategy;
use crate::metrics::Metrics;

/// Field manager of every server-side apply and patch of the operator.
pub const FIELD_MANAGER: &str = "dlq-operator";

/// Name of the controller in Events (`reportingController`).
pub const REPORTING_CONTROLLER: &str = "dlqoperator.io/dlq-operator";

/// Broker clients, one per Secret version (`namespace/name@resourceVersion`), so that
/// HTTP connections are reused across reconciles and a rotated Secret gets a new client.
#[derive(Debug, Default)]
pub struct BrokerClients {
    clients: Mutex<HashMap<String, Arc<RabbitMq>>>,
    retired: Mutex<RequestCounts>,
}

impl BrokerClients {
    /// The client for `secret` (read from `namespace`) with settings `conn`; built on first
    /// use and replaced when the Secret's `resourceVersion` changes.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the Secret's CA or client certificate cannot be used.
    pub fn get(
        &self,
        namespace: &str,
        secret: &Secret,
        conn: &BrokerConnection,
    ) -> Result<Arc<RabbitMq>, BrokerError> {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let prefix = format!("{namespace}/{name}@");
        let key = format!(
            "{prefix}{}",
            secret
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default()
        );
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        // An older version of this Secret: forget its client (keep its request counts).
        let stale: Vec<String> = clients
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        for k in stale {
            if let Some(old) = clients.remove(&k) {
                let counts = old.request_counts();
                let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
                retired.reads += counts.reads;
                retired.writes += counts.writes;
            }
        }
        let client = Arc::new(RabbitMq::new(conn)?);
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Management-API requests made by every client so far (reads and writes).
    pub fn request_counts(&self) -> RequestCounts {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let retired = *self.retired.lock().unwrap_or_else(|p| p.into_inner());
        clients.values().fold(retired, |mut acc, c| {
            let n = c.request_counts();
            acc.reads += n.reads;
            acc.writes += n.writes;
            acc
        })
    }

    /// Number of clients held.
    pub fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// `true` when no client was built yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A clock returning the current time (injected so tests are deterministic).
pub type Clock = Arc<dyn Fn() -> Time + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| Time(k8s_openapi::jiff::Timestamp::now()))
}

/// Per-object exponential backoff after failed reconciles: 5 s, 10 s, 20 s … capped at
/// 300 s, with equal jitter (Brooker 2015, "Exponential Backoff And Jitter": half the delay
/// fixed, half random) so objects that failed together do not retry together. Reset by a
/// successful reconcile. Uses the same [`Backoff`] maths as retry policies.
#[derive(Debug)]
pub struct ErrorBackoff {
    backoff: Backoff,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for ErrorBackoff {
    fn default() -> Self {
        Self::new(Duration::from_secs(5), Duration::from_secs(300))
    }
}

impl ErrorBackoff {
    /// Backoff from `initial`, doubling, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial_ms = u64::try_from(initial.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        ErrorBackoff {
            backoff: Backoff {
                strategy: BackoffStrategy::EqualJitter,
                initial_ms,
                multiplier: 2.0,
                max_ms: u64::try_from(max.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(initial_ms),
                jitter: crate::backoff::Jitter::None,
            },
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records one more failure of `key` and returns how long to wait before the next
    /// attempt, with the failure count (1 for the first).
    pub fn next_delay(&self, key: &str) -> (Duration, u32) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let ms = self.backoff.delay_ms(*n, None, &mut rand::rng());
        (Duration::from_millis(ms), *n)
    }

    /// Upper bound of the delay after `failures` failures (ms).
    pub fn max_delay_ms(&self, failures: u32) -> u64 {
        self.backoff.nominal_ms(failures)
    }

    /// Forgets the failures of `key` (after a success).
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Failures of `key` so far.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// One replay running in this process: its stop flag and its task.
#[derive(Debug)]
struct RunningReplay {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<()>,
}

/// The DeadLetterReplays running in this process (background tasks of the
/// DeadLetterReplay controller), by object UID: a second reconcile of a running replay
/// does not start it twice, and a graceful shutdown stops and awaits them
/// ([`Replays::shutdown`]).
#[derive(Debug, Default)]
pub struct Replays {
    inner: Mutex<ReplaysInner>,
}

#[derive(Debug, Default)]
struct ReplaysInner {
    running: HashMap<String, RunningReplay>,
    /// Replays whose task ended them for good (final status written, or object gone):
    /// a reconcile working on a cached copy that still says `Running` must not start
    /// them again.
    over: std::collections::HashSet<String>,
    /// Set by [`Replays::shutdown`]: nothing starts any more.
    closed: bool,
}

impl Replays {
    /// `true` while the replay `uid` has a task in this process that has not ended.
    pub fn is_running(&self, uid: &str) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .running
            .get(uid)
            .is_some_and(|r| !r.handle.is_finished())
    }

    /// `true` when a task of this process ended the replay `uid` for good.
    pub fn is_over(&self, uid: &str) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.over.contains(uid)
    }

    /// Spawns `task` for the replay `uid` with its `stop` flag, unless one is running, it
    /// is over, or shutdown began; returns whether it was started. The entry is removed
    /// when the task ends; a task that returns `true` (the replay is over) marks it
    /// [over](Replays::is_over), `false` lets a later reconcile resume it.
    pub fn start<F>(self: &Arc<Self>, uid: &str, stop: Arc<AtomicBool>, task: F) -> bool
    where
        F: Future<Output = bool> + Send + 'static,
    {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.closed
            || inner.over.contains(uid)
            || inner
                .running
                .get(uid)
                .is_some_and(|r| !r.handle.is_finished())
        {
            return false;
        }
        let registry = Arc::clone(self);
        let key = uid.to_string();
        // The task removes its own entry; it cannot do so before the insert below, which
        // happens under the same lock.
        let handle = tokio::spawn(async move {
            let over = task.await;
            let mut inner = registry.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.running.remove(&key);
            if over {
                inner.over.insert(key);
            }
        });
        inner
            .running
            .insert(uid.to_string(), RunningReplay { stop, handle });
        true
    }

    /// Replays running now.
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .running
            .values()
            .filter(|r| !r.handle.is_finished())
            .count()
    }

    /// `true` when no replay runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graceful shutdown: refuses new starts, sets every running replay's stop flag (the
    /// engine settles the copies in flight and gives the rest back; the task writes its
    /// counts with phase `Running`, to be resumed) and waits for the tasks to end. The
    /// caller bounds the wait (`SHUTDOWN_GRACE`).
    pub async fn shutdown(&self) {
        let handles: Vec<tokio::task::JoinHandle<()>> = {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.closed = true;
            inner
                .running
                .drain()
                .map(|(_, r)| {
                    r.stop.store(true, Ordering::SeqCst);
                    r.handle
                })
                .collect()
        };
        for handle in handles {
            if let Err(e) = handle.await {
                tracing::warn!(error = %e, "replay task failed");
            }
        }
    }
}

/// Shared state of one controller's reconciles.
#[derive(Clone)]
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// The controller's event recorder (one per controller, docs/ARCHITECTURE.md, "Reconcile stages").
    pub recorder: Recorder,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Broker clients, shared by both controllers.
    pub brokers: Arc<BrokerClients>,
    /// Per-object error backoff.
    pub backoff: Arc<ErrorBackoff>,
    /// Current time.
    pub clock: Clock,
    /// Requeue interval of a healthy object (re-checks the broker for drift), seconds.
    pub resync: Duration,
    /// The DeadLetterQueue controller's store (every watched DeadLetterQueue), set once
    /// the controller starts; used to refuse names another resource already manages.
    pub dead_letter_queues:
        Arc<std::sync::OnceLock<kube::runtime::reflector::Store<kube::api::DynamicObject>>>,
    /// What the backlog monitor watches, set by the DeadLetterQueue reconcile.
    pub backlog: Arc<crate::controller::backlog::Targets>,
    /// The DeadLetterReplays running in this process.
    pub replays: Arc<Replays>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("resync", &self.resync)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context with a recorder reporting as `instance` (e.g. the Pod name).
    pub fn new(
        client: Client,
        instance: &str,
        metrics: Metrics,
        brokers: Arc<BrokerClients>,
    ) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: Some(instance.to_string()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            brokers,
            backoff: Arc::new(ErrorBackoff::default()),
            clock: system_clock(),
            resync: Duration::from_secs(300),
            dead_letter_queues: Arc::default(),
            backlog: Arc::default(),
            replays: Arc::default(),
        }
    }

    /// The current time from the context's clock.
    pub fn now(&self) -> Time {
        (self.clock)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replay_starts_once_and_shutdown_stops_and_awaits_it() {
        let replays = Arc::new(Replays::default());
        let stop = Arc::new(AtomicBool::new(false));
        let seen = stop.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let task = async move {
            while !seen.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = done_tx.send(());
            false
        };
        assert!(replays.start("uid-1", stop.clone(), task));
        assert!(replays.is_running("uid-1"));
        assert!(
            !replays.start("uid-1", Arc::new(AtomicBool::new(false)), async { true }),
            "a running replay is not started twice"
        );
        assert_eq!(replays.len(), 1);
        replays.shutdown().await;
        assert!(stop.load(Ordering::SeqCst));
        assert!(
            done_rx.await.is_ok(),
            "the task ended before shutdown returned"
        );
        assert!(replays.is_empty());
        assert!(
            !replays.start("uid-2", Arc::new(AtomicBool::new(false)), async { true }),
            "nothing starts after shutdown"
        );
    }

    #[tokio::test]
    async fn an_ended_task_leaves_the_registry_and_one_that_is_over_stays_over() {
        let replays = Arc::new(Replays::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(
            replays.start("u", Arc::new(AtomicBool::new(false)), async move {
                let _ = rx.await;
                false
            })
        );
        assert!(replays.is_running("u"));
        let _ = tx.send(());
        // Wait (up to 5 s) for the task to end and leave.
        for _ in 0..1000 {
            if !replays.is_running("u") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!replays.is_running("u"));
        assert!(!replays.is_over("u"));
        // A new run of the same replay may start (its status could not be written).
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(
            replays.start("u", Arc::new(AtomicBool::new(false)), async move {
                let _ = tx.send(());
                true
            })
        );
        let _ = rx.await;
        for _ in 0..1000 {
            if replays.is_over("u") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(replays.is_over("u"), "ended for good");
        assert!(
            !replays.start("u", Arc::new(AtomicBool::new(false)), async { true }),
            "an ended replay is never started again"
        );
    }

    #[test]
    fn error_backoff_grows_caps_and_resets() {
        let b = ErrorBackoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let mut highs = Vec::new();
        for n in 1..=8 {
            let (d, count) = b.next_delay("ns/a");
            assert_eq!(count, n);
            let high = b.max_delay_ms(n);
            // Equal jitter: between half and all of the nominal delay.
            assert!(d.as_millis() as u64 >= high / 2 && d.as_millis() as u64 <= high);
            highs.push(high);
        }
        assert_eq!(&highs[..4], &[5_000, 10_000, 20_000, 40_000]);
        assert_eq!(*highs.last().expect("8 delays"), 300_000);
        assert_eq!(b.failures("ns/b"), 0, "per object");
        b.reset("ns/a");
        assert_eq!(b.failures("ns/a"), 0);
        assert!(b.next_delay("ns/a").0 <= Duration::from_secs(5));
    }
}
