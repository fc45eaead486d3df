//! Cached, bounded scans of a DeadLetterQueue's dead-letter queues for the console's
//! pages: [`crate::dlq::browse::inspect_with`] only (so reading never loses, reorders
//! durably or dead-letters a message: that function's rules), at most one running per
//! DeadLetterQueue (single flight), started in the background and never inside a
//! request, kept for a TTL. Each DeadLetterQueue also has one lock shared by its scans
//! and the console's actions, so a scan never holds messages a replay or purge of the
//! console wants.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker::BrokerClient;
use crate::dlq::browse::{inspect_with, InspectOptions};
use crate::dlq::Inspection;
use crate::lock::Locked;
use crate::topology::DesiredTopology;

/// One finished scan.
#[derive(Debug)]
pub struct Scan {
    /// When it finished.
    pub at: Instant,
    /// When it started, ms since the Unix epoch (the ages' reference).
    pub now_ms: u64,
    /// Its number, unique in this process: pages that point into a scan (a group, a
    /// message) carry it, and are refused once another scan replaced it.
    pub generation: u64,
    /// The summary, or the broker's error (escaped for display).
    pub result: Result<Inspection, String>,
}

#[derive(Default)]
struct Entry {
    last: Option<Arc<Scan>>,
    running: bool,
    lock: Arc<tokio::sync::Mutex<()>>,
}

/// The scans of every DeadLetterQueue (by `namespace/name`).
pub struct Scans {
    entries: Mutex<HashMap<String, Entry>>,
    tasks: TaskTracker,
    next: std::sync::atomic::AtomicU64,
    ttl: Duration,
    opts: InspectOptions,
}

/// What the cache has for a DeadLetterQueue.
#[derive(Debug, Clone)]
pub struct Cached {
    /// The last scan, if any (possibly older than the TTL while a new one runs).
    pub last: Option<Arc<Scan>>,
    /// A scan is running.
    pub running: bool,
}

impl Scans {
    /// Scans reading at most `max_messages` messages (all kept as the sample, bodies cut
    /// to `preview_bytes`), fresh for `ttl`, each run as a task of `tasks` (which the
    /// console waits for on shutdown).
    pub fn new(max_messages: u64, preview_bytes: usize, ttl: Duration, tasks: TaskTracker) -> Self {
        Scans {
            entries: Mutex::new(HashMap::new()),
            tasks,
            next: std::sync::atomic::AtomicU64::new(1),
            ttl,
            opts: InspectOptions {
                max_messages,
                sample_size: usize::try_from(max_messages).unwrap_or(usize::MAX),
                preview_bytes,
            },
        }
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.locked()
    }

    /// The lock of `key` shared by its scans and the console's actions on it.
    pub fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.lock_entries()
            .entry(key.to_string())
            .or_default()
            .lock
            .clone()
    }

    /// The cached scan of `key` (no broker call).
    pub fn cached(&self, key: &str) -> Cached {
        let entries = self.lock_entries();
        let e = entries.get(key);
        Cached {
            last: e.and_then(|e| e.last.clone()),
            running: e.is_some_and(|e| e.running),
        }
    }

    /// Forgets `key`'s scan (after an action changed its queues), so the next page
    /// view starts a new one.
    pub fn invalidate(&self, key: &str) {
        if let Some(e) = self.lock_entries().get_mut(key) {
            e.last = None;
        }
    }

    /// [`Scans::cached`], and starts a scan of `key` in the background when there is
    /// none, it is older than the TTL or `force`, and none is running. The scan waits
    /// for `key`'s lock and stops on `cancel` (every held message given back).
    pub fn refresh(
        self: &Arc<Self>,
        key: &str,
        client: Arc<dyn BrokerClient>,
        topology: DesiredTopology,
        force: bool,
        cancel: &CancellationToken,
    ) -> Cached {
        let lock = {
            let mut entries = self.lock_entries();
            let e = entries.entry(key.to_string()).or_default();
            let stale = e.last.as_ref().is_none_or(|s| s.at.elapsed() >= self.ttl);
            if e.running || !(stale || force) {
                return Cached {
                    last: e.last.clone(),
                    running: e.running,
                };
            }
            e.running = true;
            e.lock.clone()
        };
        let (scans, key_owned, cancel) = (Arc::clone(self), key.to_string(), cancel.clone());
        self.tasks.spawn(async move {
            let _held = lock.lock().await;
            let now_ms = crate::clock::now_ms();
            let result = inspect_with(client.as_ref(), &topology, scans.opts, now_ms, &cancel)
                .await
                .map_err(|e| crate::printable::escape_lines(&e.to_string()));
            let generation = scans
                .next
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut entries = scans.lock_entries();
            let e = entries.entry(key_owned).or_default();
            e.running = false;
            e.last = Some(Arc::new(Scan {
                at: Instant::now(),
                now_ms,
                generation,
                result,
            }));
        });
        self.cached(key)
    }
}
