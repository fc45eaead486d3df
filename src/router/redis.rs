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

/// Runs the router of `target` until `stop`: connects, sweeps every [`TICK_MS`] (at once
/// again after a sweep that filled a batch), counts what it moved in `metrics`, and after
/// an error logs it and connects again [`RECONNECT_PAUSE_MS`] later. A sweep cut off by
/// `stop` is harmless: every move is one script on the server.
pub async fn run(target: RedisTarget, metrics: RouterMetrics, stop: CancellationToken) {
    let router = StreamRouter {
        source: target.plan.source.clone(),
        policy: target.plan.policy.clone(),
        batch: BATCH,
    };
    let uris = target.plan.connection.uris_with_credentials();
    let mut rng = StdRng::from_os_rng();
    let (ns, name) = (target.namespace.as_str(), target.name.as_str());
    while !stop.is_cancelled() {
        let error = match Connection::open(&uris).await {
            Ok(mut conn) => {
                metrics.set_consuming(ns, name, true);
                tracing::info!(dead_letter_queue = %target.key(), stream = router.source.keys.source(), "retry router sweeping");
                let error =
                    sweep_until(&router, &mut conn, &mut rng, &target, &metrics, &stop).await;
                metrics.set_consuming(ns, name, false);
                error
            }
            Err(e) => Some(e),
        };
        if let Some(e) = error {
            tracing::warn!(dead_letter_queue = %target.key(), redis = %target.plan.connection.redacted(), error = %e, "Redis retry router: connecting again");
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)) => {}
            }
        }
    }
    tracing::info!(dead_letter_queue = %target.key(), "retry router stopped");
}

/// Sweeps over `conn` until `stop` (`None`) or the first error (`Some`).
async fn sweep_until(
    router: &StreamRouter,
    conn: &mut Connection,
    rng: &mut StdRng,
    target: &RedisTarget,
    metrics: &RouterMetrics,
    stop: &CancellationToken,
) -> Option<redis::RedisError> {
    while !stop.is_cancelled() {
        let sweep = match router.sweep(conn, rng, crate::clock::now_ms()).await {
            Ok(sweep) => sweep,
            Err(e) => return Some(e),
        };
        record(metrics, target, &sweep);
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

/// Counts a sweep's moves: retries by tier (its duration, e.g. `200ms`), dead letters by
/// reason.
fn record(metrics: &RouterMetrics, target: &RedisTarget, sweep: &Sweep) {
    let (ns, name) = (target.namespace.as_str(), target.name.as_str());
    for (tier_ms, n) in &sweep.retried_by_tier {
        metrics.record_moves(ns, name, "retry", &format_ms(*tier_ms), "", *n);
    }
    for (reason, n) in &sweep.dead_lettered_by_reason {
        metrics.record_moves(ns, name, "dead_letter", "", reason, *n);
    }
    if sweep.trimmed > 0 {
        tracing::warn!(dead_letter_queue = %target.key(), trimmed = sweep.trimmed, "pending entries were trimmed from the stream before they could be retried (MAXLEN or XDEL by someone else): acknowledged, nothing to copy");
    }
}
