//! Each controller's own context, over what they share ([`Context`], re-exported from
//! [`crate::controller::shared`] with the rest of its items):
//!
//! - [`DeadLetterQueueContext`]: its Event recorder and error backoff, the resync
//!   interval, the store of watched DeadLetterQueues, and the backlog monitor's
//!   [`Targets`] (the monitor takes its part with [`DeadLetterQueueContext::monitor`]).
//! - [`RetryPolicyContext`]: its Event recorder and error backoff.
//! - [`DeadLetterReplayContext`]: its Event recorder and error backoff, and the replays
//!   running in this process ([`Replays`]).
//!
//! Each controller keeps its own error backoff: its keys are `namespace/name`, so a
//! DeadLetterQueue and a RetryPolicy of the same name count their failures apart.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller::backlog::{self, Targets};
use crate::lock::Locked;

pub use crate::controller::shared::{
    BrokerClients, Context, ErrorBackoff, FIELD_MANAGER, REPORTING_CONTROLLER,
};

/// What the controllers' error policy ([`crate::controller::error_policy`]) needs of a
/// controller's context.
pub trait ControllerContext {
    /// The controller's per-object error backoff.
    fn backoff(&self) -> &ErrorBackoff;
}

/// How often a healthy DeadLetterQueue is reconciled by default (re-checks the broker
/// for drift): 5 min.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(300);

/// The DeadLetterQueue controller's context (the backlog monitor works with part of it).
pub struct DeadLetterQueueContext {
    /// What the controllers share.
    pub shared: Arc<Context>,
    /// The controller's Event recorder (also the backlog monitor's).
    pub recorder: Recorder,
    /// Per-object error backoff.
    pub backoff: ErrorBackoff,
    /// Requeue interval of a healthy object (re-checks the broker for drift).
    pub resync: Duration,
    /// The controller's store (every watched DeadLetterQueue), set once the controller
    /// starts; used to refuse names another resource already manages, and by the backlog
    /// monitor to drop what left the watch.
    pub dead_letter_queues: Arc<OnceLock<Store<DynamicObject>>>,
    /// The DeadLetterReplay controller's store, set once it starts; used by the backlog
    /// monitor for the maturity score (which resources had a replay).
    pub dead_letter_replays: Arc<OnceLock<Store<DynamicObject>>>,
    /// The RetryPolicies the controller watches (for its mappers), set once it starts;
    /// used by the backlog monitor for the maturity score.
    pub retry_policies: Arc<OnceLock<Store<DynamicObject>>>,
    /// What the backlog monitor watches, set by the reconcile.
    pub backlog: Arc<Targets>,
    /// The retry routers this process runs for DeadLetterQueues in router mode
    /// (`--embedded-router`; `None` when `dlq-operator router` runs them elsewhere): set
    /// by the reconcile after each apply, stopped on deletion.
    pub routers: Option<Arc<crate::router::Fleet>>,
}

impl DeadLetterQueueContext {
    /// A context over `shared` with its own recorder and backoff, resync
    /// [`DEFAULT_RESYNC`], no store yet and no backlog target.
    pub fn new(shared: Arc<Context>) -> Self {
        DeadLetterQueueContext {
            recorder: shared.recorder(),
            shared,
            backoff: ErrorBackoff::default(),
            resync: DEFAULT_RESYNC,
            dead_letter_queues: Arc::default(),
            dead_letter_replays: Arc::default(),
            retry_policies: Arc::default(),
            backlog: Arc::default(),
            routers: None,
        }
    }

    /// Runs, restarts or stops the embedded retry router of the DeadLetterQueue `key`
    /// (`namespace/name`): `target` is its router target after a successful apply
    /// (`None`: not in router mode, or its names belong to another owner). Does nothing
    /// without embedded routers.
    pub fn sync_router(&self, key: &str, target: Option<crate::router::Target>) {
        let Some(fleet) = &self.routers else { return };
        match target {
            Some(t) => {
                if fleet.ensure(t) {
                    tracing::info!(dead_letter_queue = key, "retry router started");
                }
            }
            None => fleet.stop(key),
        }
    }

    /// The backlog monitor's part: the shared context, this controller's recorder, store
    /// and targets.
    pub fn monitor(&self) -> backlog::MonitorContext {
        backlog::MonitorContext {
            shared: self.shared.clone(),
            recorder: self.recorder.clone(),
            dead_letter_queues: self.dead_letter_queues.clone(),
            dead_letter_replays: self.dead_letter_replays.clone(),
            retry_policies: self.retry_policies.clone(),
            targets: self.backlog.clone(),
        }
    }
}

impl ControllerContext for DeadLetterQueueContext {
    fn backoff(&self) -> &ErrorBackoff {
        &self.backoff
    }
}

/// The RetryPolicy controller's context.
pub struct RetryPolicyContext {
    /// What the controllers share.
    pub shared: Arc<Context>,
    /// The controller's Event recorder.
    pub recorder: Recorder,
    /// Per-object error backoff.
    pub backoff: ErrorBackoff,
}

impl RetryPolicyContext {
    /// A context over `shared` with its own recorder and backoff.
    pub fn new(shared: Arc<Context>) -> Self {
        RetryPolicyContext {
            recorder: shared.recorder(),
            shared,
            backoff: ErrorBackoff::default(),
        }
    }
}

impl ControllerContext for RetryPolicyContext {
    fn backoff(&self) -> &ErrorBackoff {
        &self.backoff
    }
}

/// The DeadLetterReplay controller's context.
pub struct DeadLetterReplayContext {
    /// What the controllers share.
    pub shared: Arc<Context>,
    /// The controller's Event recorder (also its runs').
    pub recorder: Recorder,
    /// Per-object error backoff.
    pub backoff: ErrorBackoff,
    /// The DeadLetterReplays running in this process.
    pub replays: Arc<Replays>,
}

impl DeadLetterReplayContext {
    /// A context over `shared` with its own recorder and backoff, and no replay running.
    pub fn new(shared: Arc<Context>) -> Self {
        DeadLetterReplayContext {
            recorder: shared.recorder(),
            shared,
            backoff: ErrorBackoff::default(),
            replays: Arc::default(),
        }
    }
}

impl ControllerContext for DeadLetterReplayContext {
    fn backoff(&self) -> &ErrorBackoff {
        &self.backoff
    }
}

/// The DeadLetterReplays running in this process (background tasks of the
/// DeadLetterReplay controller), by object UID: a second reconcile of a running replay
/// does not start it twice, and a graceful shutdown stops and awaits them
/// ([`Replays::shutdown`]). Each task gets a child of the registry's stop token.
#[derive(Debug, Default)]
pub struct Replays {
    inner: Mutex<ReplaysInner>,
    /// Parent of every task's stop token; cancelled by [`Replays::shutdown`].
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct ReplaysInner {
    /// The task of each running replay.
    running: HashMap<String, JoinHandle<()>>,
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
        let inner = self.inner.locked();
        inner.running.get(uid).is_some_and(|h| !h.is_finished())
    }

    /// `true` when a task of this process ended the replay `uid` for good.
    pub fn is_over(&self, uid: &str) -> bool {
        let inner = self.inner.locked();
        inner.over.contains(uid)
    }

    /// Spawns the task `task(stop)` makes for the replay `uid` (`stop`: its own child of
    /// the registry's token, cancelled by [`Replays::shutdown`]), unless one is running,
    /// it is over, or shutdown began; returns whether it was started. The entry is
    /// removed when the task ends; a task that returns `true` (the replay is over) marks
    /// it [over](Replays::is_over), `false` lets a later reconcile resume it.
    pub fn start<T, F>(self: &Arc<Self>, uid: &str, task: T) -> bool
    where
        T: FnOnce(CancellationToken) -> F,
        F: Future<Output = bool> + Send + 'static,
    {
        let mut inner = self.inner.locked();
        if inner.closed
            || inner.over.contains(uid)
            || inner.running.get(uid).is_some_and(|h| !h.is_finished())
        {
            return false;
        }
        let task = task(self.stop.child_token());
        let registry = Arc::clone(self);
        let key = uid.to_string();
        // The task removes its own entry; it cannot do so before the insert below, which
        // happens under the same lock.
        let handle = tokio::spawn(async move {
            let over = task.await;
            let mut inner = registry.inner.locked();
            inner.running.remove(&key);
            if over {
                inner.over.insert(key);
            }
        });
        inner.running.insert(uid.to_string(), handle);
        true
    }

    /// Replays running now.
    pub fn len(&self) -> usize {
        let inner = self.inner.locked();
        inner.running.values().filter(|h| !h.is_finished()).count()
    }

    /// `true` when no replay runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graceful shutdown: refuses new starts, cancels every running replay's stop token
    /// (the engine settles the copies in flight and gives the rest back; the task writes
    /// its counts with phase `Running`, to be resumed) and waits for the tasks to end.
    /// The caller bounds the wait
    /// ([`SHUTDOWN_GRACE`](crate::controller::SHUTDOWN_GRACE)).
    pub async fn shutdown(&self) {
        let handles: Vec<JoinHandle<()>> = {
            let mut inner = self.inner.locked();
            inner.closed = true;
            self.stop.cancel();
            inner.running.drain().map(|(_, h)| h).collect()
        };
        for handle in handles {
            if let Err(e) = handle.await {
                tracing::warn!(error = %e, "replay task failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_controller_has_its_own_backoff_over_one_shared_context() {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let shared = Arc::new(Context::new(
            kube::Client::new(service, "default"),
            "test-instance",
            crate::metrics::Metrics::new(),
            Arc::default(),
        ));
        let contexts =
            crate::controller::Contexts::new(shared.clone(), Duration::from_secs(60), false);
        assert_eq!(contexts.dead_letter_queue.resync, Duration::from_secs(60));
        for ctx in [
            &contexts.dead_letter_queue.shared,
            &contexts.retry_policy.shared,
            &contexts.dead_letter_replay.shared,
        ] {
            assert!(Arc::ptr_eq(ctx, &shared), "one shared context");
        }
        // A DeadLetterQueue and a RetryPolicy of the same name: separate failure counts.
        contexts.dead_letter_queue.backoff.next_delay("ns/orders");
        assert_eq!(
            contexts.dead_letter_queue.backoff().failures("ns/orders"),
            1
        );
        assert_eq!(contexts.retry_policy.backoff().failures("ns/orders"), 0);
        assert_eq!(
            contexts.dead_letter_replay.backoff().failures("ns/orders"),
            0
        );
        // The monitor works with the DeadLetterQueue controller's targets.
        let monitor = contexts.dead_letter_queue.monitor();
        assert!(Arc::ptr_eq(
            &monitor.targets,
            &contexts.dead_letter_queue.backlog
        ));
        assert!(Arc::ptr_eq(
            &monitor.dead_letter_queues,
            &contexts.dead_letter_queue.dead_letter_queues
        ));
    }

    #[tokio::test]
    async fn a_replay_starts_once_and_shutdown_stops_and_awaits_it() {
        let replays = Arc::new(Replays::default());
        // Two replays that run until their stop token is cancelled.
        let mut done = Vec::new();
        for uid in ["uid-1", "uid-2"] {
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let task = |stop: CancellationToken| async move {
                stop.cancelled().await;
                let _ = done_tx.send(());
                false
            };
            assert!(replays.start(uid, task));
            done.push(done_rx);
        }
        assert!(replays.is_running("uid-1"));
        assert!(
            !replays.start("uid-1", |_| async { true }),
            "a running replay is not started twice"
        );
        assert_eq!(replays.len(), 2);
        replays.shutdown().await;
        for done_rx in done {
            assert!(
                done_rx.await.is_ok(),
                "the task saw its token cancelled and ended before shutdown returned"
            );
        }
        assert!(replays.is_empty());
        assert!(
            !replays.start("uid-3", |_| async { true }),
            "nothing starts after shutdown"
        );
    }

    #[tokio::test]
    async fn an_ended_task_leaves_the_registry_and_one_that_is_over_stays_over() {
        let replays = Arc::new(Replays::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(replays.start("u", |_| async move {
            let _ = rx.await;
            false
        }));
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
        assert!(replays.start("u", |_| async move {
            let _ = tx.send(());
            true
        }));
        let _ = rx.await;
        for _ in 0..1000 {
            if replays.is_over("u") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(replays.is_over("u"), "ended for good");
        assert!(
            !replays.start("u", |_| async { true }),
            "an ended replay is never started again"
        );
    }
}
