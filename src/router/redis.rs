//! The retry router of a Redis DeadLetterQueue (docs/REDIS.md, "The router"): sweeps of
//! [`crate::redis::router::StreamRouter`] every [`TICK_MS`], over a connection that is
//! opened again after an error, with the metrics of the RabbitMQ router
//! ([`RouterMetrics`]: `dlq_router_messages_total` by decision, tier and reason,
//! `dlq_router_consuming`).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::metrics::RouterMetrics;
use crate::duration::format_ms;
use crate::printable::escape;
use crate::reconcile::RedisPlan;
use crate::redis::connection::Connection;
use crate::redis::router::{StreamRouter, Sweep};

/// Time between two sweeps, ms: how late past its due time a retry goes back on the
/// stream, at most (plus the sweep itself).
pub const TICK_MS: u64 = 100;

/// The most entries a sweep reads or puts back per step.
pub const BATCH: usize = 500;

/// Pause before connecting again after an error, ms.
pub const RECONNECT_PAUSE_MS: u64 = 1_000;

/// Everything the router of one Redis DeadLetterQueue needs.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    /// The DeadLetterQueue's namespace.
    pub namespace: String,
    /// The DeadLetterQueue's name.
    pub name: String,
    /// Its plan.
    pub plan: RedisPlan,
}

impl RedisTarget {
    /// The target of `plan` (its key is `namespace/name`).
    pub fn of(plan: RedisPlan) -> RedisTarget {
        let (namespace, name) = plan.key.split_once('/').unwrap_or(("", plan.key.as_str()));
        RedisTarget {
            namespace: namespace.to_string(),
            name: name.to_string(),
            plan,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        self.plan.key.clone()
    }

    /// A digest of everything the router depends on (URIs with credentials, source,
    /// policy): a running router is restarted only when it changes. Never shown.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for uri in self.plan.connection.uris_with_credentials() {
            h.update(uri.as_bytes());
        }
        h.update(format!("{:?}|{:?}", self.plan.source, self.plan.policy).as_bytes());
        format!("{:x}", h.finalize())
    }
}

/// Runs the router of `target` until `stop`: connects, makes sure the stream is this
/// DeadLetterQueue's (its ownership record, written by `apply`: another owner's stream or
/// one never applied is not swept), sweeps every [`TICK_MS`] (at once again after a sweep
/// that filled a batch), counts what it moved in `metrics`, and after an error logs it and
/// connects again [`RECONNECT_PAUSE_MS`] later. A sweep cut off by `stop` is harmless:
/// every move is one script on the server.
pub async fn run(target: RedisTarget, metrics: RouterMetrics, stop: CancellationToken) {
    let router = StreamRouter {
        source: target.plan.source.clone(),
        policy: target.plan.policy.clone(),
        batch: BATCH,
    };
    let uris = target.plan.connection.uris_with_credentials();
    let mut rng = StdRng::from_os_rng();
    let mut reported = Reported::default();
    let mut said_sweeping = false;
    let (ns, name) = (target.namespace.as_str(), target.name.as_str());
    while !stop.is_cancelled() {
        let opened = tokio::select! {
            () = stop.cancelled() => break,
            opened = Connection::open(&uris) => opened,
        };
        let error = match opened {
            Ok(mut conn) => match owned(&mut conn, &target).await {
                Ok(()) => {
                    metrics.set_consuming(ns, name, true);
                    if !said_sweeping {
                        tracing::info!(dead_letter_queue = %target.key(), stream = %escape(router.source.keys.source()), "retry router sweeping");
                        said_sweeping = true;
                    }
                    let mut session = Session {
                        router: &router,
                        target: &target,
                        metrics: &metrics,
                        reported: &mut reported,
                    };
                    let error = session.sweep_until(&mut conn, &mut rng, &stop).await;
                    metrics.set_consuming(ns, name, false);
                    error.map(|e| e.to_string())
                }
                Err(why) => Some(why),
            },
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = error {
            tracing::warn!(dead_letter_queue = %target.key(), redis = %escape(&target.plan.connection.redacted()), error = %escape(&e), "Redis retry router: trying again");
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)) => {}
            }
        }
    }
    tracing::info!(dead_letter_queue = %target.key(), "retry router stopped");
}

/// `Ok` when the stream's ownership record names `target` (docs/REDIS.md, "Apply");
/// otherwise why the router does not sweep it.
async fn owned(conn: &mut Connection, target: &RedisTarget) -> Result<(), String> {
    let record = target.plan.source.keys.owner();
    let owner: Option<Vec<u8>> = redis::cmd("HGET")
        .arg(&record)
        .arg("owner")
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    match owner {
        Some(o) if o == target.key().as_bytes() => Ok(()),
        Some(o) => Err(format!(
            "stream {:?} belongs to DeadLetterQueue {} (ownership record {record:?}): not swept",
            target.plan.source.keys.source(),
            String::from_utf8_lossy(&o)
        )),
        None => Err(format!(
            "stream {:?} has no ownership record ({record:?}): run `dlq-operator apply -f` on this DeadLetterQueue first; not swept until then",
            target.plan.source.keys.source()
        )),
    }
}

/// The ids already reported as left pending, so that each is logged and counted once
/// (at most [`Reported::MAX`] remembered).
#[derive(Default)]
struct Reported(std::collections::HashSet<String>);

impl Reported {
    const MAX: usize = 10_000;

    /// `true` the first time `id` is seen.
    fn first(&mut self, id: &str) -> bool {
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        self.0.insert(id.to_string())
    }
}

/// One connection's sweeps of one router.
struct Session<'a> {
    router: &'a StreamRouter,
    target: &'a RedisTarget,
    metrics: &'a RouterMetrics,
    reported: &'a mut Reported,
}

impl Session<'_> {
    /// Sweeps over `conn` until `stop` (`None`) or the first error (`Some`).
    async fn sweep_until(
        &mut self,
        conn: &mut Connection,
        rng: &mut StdRng,
        stop: &CancellationToken,
    ) -> Option<redis::RedisError> {
        while !stop.is_cancelled() {
            let sweep = match self.router.sweep(conn, rng, crate::clock::now_ms()).await {
                Ok(sweep) => sweep,
                Err(e) => return Some(e),
            };
            self.record(&sweep);
            let full = sweep.released as usize >= BATCH
                || (sweep.retried + sweep.dead_lettered + sweep.not_pending) as usize >= BATCH;
            if !full {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(TICK_MS)) => {}
                }
            }
        }
        None
    }

    /// Counts a sweep's moves (retries by tier, its duration, e.g. `200ms`; dead letters by
    /// reason) and reports, once each, the entries left pending.
    fn record(&mut self, sweep: &Sweep) {
        let (ns, name) = (self.target.namespace.as_str(), self.target.name.as_str());
        let key = self.target.key();
        for (tier_ms, n) in &sweep.retried_by_tier {
            self.metrics
                .record_moves(ns, name, "retry", &format_ms(*tier_ms), "", *n);
        }
        for (reason, n) in &sweep.dead_lettered_by_reason {
            self.metrics
                .record_moves(ns, name, "dead_letter", "", reason, *n);
        }
        if sweep.trimmed > 0 {
            tracing::warn!(dead_letter_queue = %key, trimmed = sweep.trimmed, "pending entries were trimmed from the stream before they could be retried (MAXLEN or XDEL by someone else): acknowledged, nothing to copy");
        }
        for id in &sweep.oversized {
            if self.reported.first(id) {
                self.metrics.record_failures(ns, name, "oversized", 1);
                tracing::warn!(dead_letter_queue = %key, entry = %escape(id), "entry left pending: its copy would have more fields than a script can write (7,900 names and values); move or delete it yourself");
            }
        }
        for (id, error) in &sweep.refused {
            if self.reported.first(id) {
                self.metrics.record_failures(ns, name, "refused", 1);
                tracing::warn!(dead_letter_queue = %key, entry = %escape(id), error = %escape(error), "entry left pending: Redis refused its move (the others go on)");
            }
        }
    }
}
