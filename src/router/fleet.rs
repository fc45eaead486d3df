//! The routers one process runs, one per DeadLetterQueue in router mode: started,
//! restarted when what they depend on changes, stopped, and drained on shutdown. The
//! controller, `run --standalone` and `dlq-operator router` all drive one [`Fleet`].

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::metrics::RouterMetrics;
use super::redis::{self, RedisTarget};
use super::worker::{self, Target};
use crate::lock::Locked;

/// What one router routes: a RabbitMQ DeadLetterQueue's inbox, or a Redis
/// DeadLetterQueue's stream.
#[derive(Debug, Clone)]
pub enum RouterTarget {
    /// A RabbitMQ DeadLetterQueue in router mode ([`worker::run`]).
    RabbitMq(Box<Target>),
    /// A Redis DeadLetterQueue ([`redis::run`]).
    Redis(Box<RedisTarget>),
}

impl RouterTarget {
    /// `namespace/name` of the DeadLetterQueue.
    pub fn key(&self) -> String {
        match self {
            RouterTarget::RabbitMq(t) => t.key(),
            RouterTarget::Redis(t) => t.key(),
        }
    }

    /// A digest of everything the router depends on; never shown.
    pub fn fingerprint(&self) -> String {
        match self {
            RouterTarget::RabbitMq(t) => t.fingerprint(),
            RouterTarget::Redis(t) => t.fingerprint(),
        }
    }

    /// Runs the router until `stop`.
    async fn run(self, metrics: RouterMetrics, stop: CancellationToken) {
        match self {
            RouterTarget::RabbitMq(t) => worker::run(*t, metrics, stop).await,
            RouterTarget::Redis(t) => redis::run(*t, metrics, stop).await,
        }
    }
}

impl From<Target> for RouterTarget {
    fn from(t: Target) -> Self {
        RouterTarget::RabbitMq(Box::new(t))
    }
}

impl From<RedisTarget> for RouterTarget {
    fn from(t: RedisTarget) -> Self {
        RouterTarget::Redis(Box::new(t))
    }
}

/// A running router: what it was started with, and how to stop it.
struct Running {
    fingerprint: String,
    stop: CancellationToken,
}

/// The routers of one process, keyed by `namespace/name`.
pub struct Fleet {
    metrics: RouterMetrics,
    running: Mutex<BTreeMap<String, Running>>,
    tasks: TaskTracker,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("routers", &self.keys())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// An empty fleet counting into `metrics`.
    pub fn new(metrics: RouterMetrics) -> Self {
        Fleet {
            metrics,
            running: Mutex::new(BTreeMap::new()),
            tasks: TaskTracker::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        self.running.locked()
    }

    /// Makes sure a router runs for `target`: starts one, or restarts it when the target
    /// changed (the old one drains while the new one starts: competing consumers on the
    /// inbox). Returns `true` when a router was (re)started. Must run inside a Tokio
    /// runtime.
    pub fn ensure(&self, target: impl Into<RouterTarget>) -> bool {
        let target = target.into();
        let key = target.key();
        let fingerprint = target.fingerprint();
        let mut running = self.lock();
        if running
            .get(&key)
            .is_some_and(|r| r.fingerprint == fingerprint)
        {
            return false;
        }
        if let Some(old) = running.remove(&key) {
            old.stop.cancel();
        }
        let stop = CancellationToken::new();
        self.tasks
            .spawn(target.run(self.metrics.clone(), stop.clone()));
        running.insert(key, Running { fingerprint, stop });
        true
    }

    /// Makes the fleet exactly `targets`: ensures each ([`Fleet::ensure`]) and stops
    /// every other router.
    pub fn sync(&self, targets: impl IntoIterator<Item = impl Into<RouterTarget>>) {
        let mut keep = std::collections::BTreeSet::new();
        for target in targets {
            let target = target.into();
            keep.insert(target.key());
            self.ensure(target);
        }
        self.retain(|key| keep.contains(key));
    }

    /// Stops (drains) the router of `key` (`namespace/name`), if any, and forgets its
    /// metric series.
    pub fn stop(&self, key: &str) {
        if let Some(r) = self.lock().remove(key) {
            r.stop.cancel();
            let (namespace, name) = key.split_once('/').unwrap_or(("", key));
            self.metrics.forget(namespace, name);
        }
    }

    /// Stops every router whose key `keep` rejects.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        for key in self.keys() {
            if !keep(&key) {
                self.stop(&key);
            }
        }
    }

    /// Keys (`namespace/name`) of the running routers, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Stops every router and waits until each has drained: messages in hand finished
    /// (copy confirmed, original acked), channels closed.
    pub async fn drain(&self) {
        for (_, r) in std::mem::take(&mut *self.lock()) {
            r.stop.cancel();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }
}
