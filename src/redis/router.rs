//! The retry router for a Redis stream (docs/REDIS.md, "The router"): each sweep puts the
//! due retries back on the stream, then decides for every entry pending past the
//! visibility timeout with the RetryPolicy ([`crate::backoff::ResolvedPolicy::decide`])
//! and moves it to the retry set or the dead-letter stream. Every move is one script (a
//! sweep's moves go out in one pipeline), and each script checks on the server that its
//! entry is still pending, so routers that race, or a router killed and started again,
//! never move an entry twice or lose one.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use redis::aio::ConnectionLike;
use redis::RedisError;
use tracing::warn;

use super::fields::{stamp, EntryState, Failure, Stamped};
use super::stream::{Move, Moved, Pending, StreamSource, To};
use crate::backoff::{Decision, ResolvedPolicy};

/// The most pages of [`StreamRouter::batch`] failed entries one sweep reads, when the
/// pages before held entries that could not be moved.
pub const MAX_PAGES: usize = 10;

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
    /// Ids of entries left pending because their copy would have too many fields for a
    /// script ([`Moved::Oversized`]).
    pub oversized: Vec<String>,
    /// Ids of entries the server refused to move, with its reason: each left as it was,
    /// the others moved.
    pub refused: Vec<(String, String)>,
}

impl Sweep {
    /// Counts one entry moved as `decision` says.
    fn count(&mut self, decision: &Decision) {
        match decision {
            Decision::Retry { tier_ms, .. } => {
                self.retried += 1;
                *self.retried_by_tier.entry(*tier_ms).or_default() += 1;
            }
            Decision::DeadLetter(reason) => {
                self.dead_lettered += 1;
                *self
                    .dead_lettered_by_reason
                    .entry(reason.as_str())
                    .or_default() += 1;
            }
        }
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
    /// A server error of a step of the sweep as a whole (the release, the listing, the
    /// read, the pipeline); a move the server refuses is only reported in
    /// [`Sweep::refused`].
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
            warn!(source = %crate::printable::escape(self.source.keys.source()), missing, "due retries without content in the retry entries hash");
        }
        // Entries left pending (refused, oversized) stay at the head of the listing: page
        // on past them, so that they never hold up the others.
        let mut start = "-".to_string();
        for _ in 0..MAX_PAGES {
            let page = self.source.failed(conn, &start, self.batch).await?;
            let Some(last) = page.last() else {
                break;
            };
            start = format!("({}", last.id);
            let full = page.len() >= self.batch;
            let stuck_before = sweep.oversized.len() + sweep.refused.len();
            self.move_page(conn, &page, rng, now_ms, &mut sweep).await?;
            if !full || sweep.oversized.len() + sweep.refused.len() == stuck_before {
                break;
            }
        }
        Ok(sweep)
    }

    /// Decides for every entry of `failed` and makes the moves, counting them in `sweep`.
    async fn move_page<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        failed: &[Pending],
        rng: &mut StdRng,
        now_ms: u64,
        sweep: &mut Sweep,
    ) -> Result<(), RedisError> {
        let ids: Vec<&str> = failed.iter().map(|p| p.id.as_str()).collect();
        let contents = self.source.fields(conn, &ids).await?;
        let decided: Vec<(Move, Option<Decision>)> = failed
            .iter()
            .zip(contents)
            .map(|(pending, fields)| self.decide(pending, fields.as_deref(), rng, now_ms))
            .collect();
        let moves: Vec<Move> = decided.iter().map(|(m, _)| m.clone()).collect();
        let done = self.source.make(conn, &moves).await?;
        for ((m, decision), moved) in decided.iter().zip(done) {
            match (moved, decision) {
                (Ok(Moved::Moved), Some(d)) => sweep.count(d),
                (Ok(Moved::Moved), None) | (Ok(Moved::Trimmed), _) => sweep.trimmed += 1,
                (Ok(Moved::NotPending), _) => sweep.not_pending += 1,
                (Ok(Moved::Oversized), _) => sweep.oversized.push(m.id.clone()),
                (Err(e), _) => sweep.refused.push((m.id.clone(), e.to_string())),
            }
        }
        Ok(())
    }

    /// The move of one failed entry: the RetryPolicy's decision and the copy's fields, or
    /// for an entry trimmed from the stream (`fields` `None`) a move that only
    /// acknowledges it (the retry script finds nothing to copy) and no decision.
    fn decide(
        &self,
        pending: &Pending,
        fields: Option<&[(Vec<u8>, Vec<u8>)]>,
        rng: &mut StdRng,
        now_ms: u64,
    ) -> (Move, Option<Decision>) {
        let Some(fields) = fields else {
            let ack = Move {
                id: pending.id.clone(),
                to: To::Retry { delay_ms: 0 },
                stamp: Stamped::default(),
            };
            return (ack, None);
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
        let to = match decision {
            Decision::Retry { delay_ms, .. } => To::Retry { delay_ms },
            Decision::DeadLetter(_) => To::DeadLetters,
        };
        let m = Move {
            id: pending.id.clone(),
            to,
            stamp: stamp(&state, &failure, &decision),
        };
        (m, Some(decision))
    }
}
