//! The retry router for a Redis stream (docs/REDIS.md, "The router"): each sweep puts the
//! due retries back on the stream, then decides for every entry pending past the
//! visibility timeout with the RetryPolicy ([`crate::backoff::ResolvedPolicy::decide`])
//! and moves it to the retry set or the dead-letter stream. Every move is one script, and
//! each script checks on the server that its entry is still pending, so routers that
//! race, or a router killed and started again, never move an entry twice or lose one.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use redis::aio::ConnectionLike;
use redis::RedisError;
use tracing::warn;

use super::fields::{stamp, EntryState, Failure, Stamped};
use super::stream::{Moved, Pending, StreamSource};
use crate::backoff::{DeadLetterReason, Decision, ResolvedPolicy};

/// What a sweep did, by count of entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Due retries put back on the stream.
    pub released: u64,
    /// Due retries whose content was missing (never expected; logged).
    pub missing: u64,
    /// Failed entries scheduled for a retry.
    pub retried: u64,
    /// Failed entries dead-lettered.
    pub dead_lettered: u64,
    /// The retries by the tier (ms) their delay falls in ([`ResolvedPolicy::tier_for`]).
    pub retried_by_tier: BTreeMap<u64, u64>,
    /// The dead letters by reason.
    pub dead_lettered_by_reason: BTreeMap<&'static str, u64>,
    /// Entries acknowledged or moved by someone else between the read and the move.
    pub not_pending: u64,
    /// Pending entries trimmed from the stream before they could be copied.
    pub trimmed: u64,
}

impl Sweep {
    /// Entries moved or released by this sweep.
    pub fn moved(&self) -> u64 {
        self.released + self.retried + self.dead_lettered
    }
}

/// The router of one stream source.
#[derive(Debug, Clone)]
pub struct StreamRouter {
    /// The source, its keys and its visibility timeout.
    pub source: StreamSource,
    /// The resolved RetryPolicy.
    pub policy: ResolvedPolicy,
    /// The most entries read or released per step of a sweep.
    pub batch: usize,
}

impl StreamRouter {
    /// One sweep over `conn` at `now_ms` (ms since the epoch; written as the failure
    /// times), drawing jitter from `rng`.
    ///
    /// # Errors
    /// The first server error; what was moved before it stays moved.
    pub async fn sweep<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        rng: &mut StdRng,
        now_ms: u64,
    ) -> Result<Sweep, RedisError> {
        let mut sweep = Sweep::default();
        let (released, missing) = self.source.release_due(conn, self.batch).await?;
        sweep.released = released;
        sweep.missing = missing;
        if missing > 0 {
            warn!(source = %self.source.keys.source(), missing, "due retries without content in the retry entries hash");
        }
        let failed = self.source.failed(conn, self.batch).await?;
        let ids: Vec<&str> = failed.iter().map(|p| p.id.as_str()).collect();
        let contents = self.source.fields(conn, &ids).await?;
        for (pending, fields) in failed.iter().zip(contents) {
            let moved = self
                .move_failed(conn, pending, fields.as_deref(), rng, now_ms, &mut sweep)
                .await?;
            match moved {
                Moved::Moved => {}
                Moved::NotPending => sweep.not_pending += 1,
                Moved::Trimmed => sweep.trimmed += 1,
            }
        }
        Ok(sweep)
    }

    /// Decides for one failed entry and moves it, counting the decision in `sweep` when
    /// the move is made.
    async fn move_failed<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        pending: &Pending,
        fields: Option<&[(Vec<u8>, Vec<u8>)]>,
        rng: &mut StdRng,
        now_ms: u64,
        sweep: &mut Sweep,
    ) -> Result<Moved, RedisError> {
        let Some(fields) = fields else {
            // Trimmed: the retry script acknowledges it and reports it.
            return self
                .source
                .retry(conn, &pending.id, 0, &Stamped::default())
                .await;
        };
        let state = EntryState::from_fields(fields);
        let error = format!(
            "not acknowledged within {} ms (delivered {} time(s), last to consumer {:?})",
            self.source.visibility_timeout_ms, pending.deliveries, pending.consumer
        );
        let failure = Failure {
            class: None,
            error: &error,
            now_ms,
            source: self.source.keys.source(),
            id: &pending.id,
        };
        let decision = state.decide(&self.policy, None, now_ms, rng);
        let stamped = stamp(&state, &failure, &decision);
        let moved = match decision {
            Decision::Retry {
                delay_ms, tier_ms, ..
            } => {
                let moved = self
                    .source
                    .retry(conn, &pending.id, delay_ms, &stamped)
                    .await?;
                if moved == Moved::Moved {
                    sweep.retried += 1;
                    *sweep.retried_by_tier.entry(tier_ms).or_default() += 1;
                }
                moved
            }
            Decision::DeadLetter(reason) => {
                let moved = self.source.dead_letter(conn, &pending.id, &stamped).await?;
                if moved == Moved::Moved {
                    sweep.dead_lettered += 1;
                    *sweep
                        .dead_lettered_by_reason
                        .entry(DeadLetterReason::as_str(reason))
                        .or_default() += 1;
                }
                moved
            }
        };
        Ok(moved)
    }
}
