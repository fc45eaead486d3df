//! Repair and replay of one dead-lettered message: its copy goes back to the source
//! queue with a new body and/or edited headers, and only then is the original removed.
//!
//! A repair is a replay, not a second engine: [`repair_with`] runs
//! [`replay_with`](super::replay::replay_with) with the filter `id=<message_id>`, a limit
//! of 1, a crash window of 1 and a [`Rewrite`] in [`ReplayOptions::rewrite`]. Every
//! engine builds the replayed copy through [`copy_content`] (one pure function), which
//! applies the rewrite on top of the replay's own headers
//! ([`replay_headers`](super::replay_headers)) and stamps [`REPAIRED_AT`]. The copy is
//! published with `mandatory` and a publisher confirm to the DeadLetterQueue's source
//! queue, and the original is acked only after the confirm — the replay engine's rule
//! (docs/ARCHITECTURE.md), so a crash leaves a duplicate, never a loss. The
//! `message_id` property is kept (consumers deduplicate on it and `dlq-replay-id`).
//!
//! Protected headers ([`protected`]) can be neither set nor removed:
//! - `x-*`: the broker's (`x-death`, `x-first-death-*`, `x-delivery-count`, …). They are
//!   the broker's record of what happened to the message; RabbitMQ owns them, and some
//!   change how it treats the message.
//! - `dlq-*`: the header contract (docs/ARCHITECTURE.md, "Broker topology") that the
//!   consumer helper, the replay and the repair maintain: the retry state the replay
//!   resets, the origin the replay routes by, the replay stamps its loop guard
//!   (`dlq-replay-id`, `--max-replays` on `dlq-replay-count`) reads, and
//!   `dlq-repaired-at` itself. An edit would falsify the message's history or defeat
//!   those guards.
//! - `CC` and `BCC`: they add routing keys, and the copy's route is checked against the
//!   original's headers before it is published ([`super::route`]).
//!
//! If several messages in the dead-letter queues share the `message_id`, the first one
//! read that the replay's rules accept is repaired; the others stay.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::filter::{Filter, Term};
use super::replay::{
    new_replay_id, replay_with, Observer, Outcome, ReplayOptions, ReplayReport, Target,
};
use super::DeadLetterOps;
use super::{replay_headers, REPAIRED_AT};
use crate::printable::{shown, PREVIEW_BYTES};
use crate::topology::DesiredTopology;
use crate::wire::message::{HeaderValue, Headers};
use crate::wire::BrokerError;

pub use super::rewrite::{check_json, protected, Rewrite, RewriteError, MAX_HEADER_NAME_BYTES};

/// What a repair that stopped on a broker error may have left, for the user (the CLI's
/// error, the console's page): its one copy may have been confirmed while the original's
/// removal was lost with the connection (at-least-once, [`repair_with`]).
pub const STOPPED_NOTE: &str = "the repaired copy may have reached the source queue while \
     the original went back to the dead-letter queue (at-least-once: check the source queue \
     before repairing again; deduplicate on message_id). Nothing is lost.";

/// The headers and body of the replayed copy of a message with `original` headers and
/// `body`, under `opts`, at `now_ms` (ms since epoch): the replay's headers
/// ([`replay_headers`]), then, with [`ReplayOptions::rewrite`], its header edits and new
/// body and [`REPAIRED_AT`] = `now_ms`. Every engine builds its copies with this; the
/// other properties (`message_id` included) are the original's.
pub fn copy_content(
    original: Option<&Headers>,
    body: &[u8],
    opts: &ReplayOptions,
    now_ms: u64,
) -> (Headers, Vec<u8>) {
    let mut headers = replay_headers(original, &opts.replay_id, now_ms);
    let Some(rewrite) = &opts.rewrite else {
        return (headers, body.to_vec());
    };
    rewrite.apply(&mut headers);
    headers.insert(
        REPAIRED_AT.to_string(),
        HeaderValue::I64(i64::try_from(now_ms).unwrap_or(i64::MAX)),
    );
    let body = rewrite.body().unwrap_or(body).to_vec();
    (headers, body)
}

/// How a repair ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome", content = "reason")]
pub enum RepairOutcome {
    /// The copy was confirmed in the source queue and the original removed.
    Repaired,
    /// No message with that `message_id` was read: nothing changed.
    NotFound,
    /// Found, but the replay's rules refused it (the reason, escaped); it stays.
    Skipped(String),
    /// The broker refused the copy (the reason); the original stays.
    Failed(String),
    /// Stopped (cancelled) before the message was repaired; nothing changed.
    Interrupted,
}

/// The result of [`repair_with`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// The `message_id` asked for.
    pub message_id: String,
    /// `dlq-replay-id` of the copy.
    pub replay_id: String,
    /// `dlq-repaired-at` of the copy (ms since epoch) when [`RepairOutcome::Repaired`].
    pub repaired_at_ms: Option<u64>,
    /// Messages read.
    pub scanned: u64,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: RepairOutcome,
}

impl RepairReport {
    /// The repair's outcome from the report of its replay, run at `now_ms`.
    pub fn from_replay(message_id: &str, replay: &ReplayReport, now_ms: u64) -> Self {
        let first = |m: &BTreeMap<String, u64>| m.keys().next().cloned().unwrap_or_default();
        let outcome = if replay.replayed > 0 {
            RepairOutcome::Repaired
        } else if !replay.failed.is_empty() {
            RepairOutcome::Failed(first(&replay.failed))
        } else if !replay.skipped.is_empty() {
            RepairOutcome::Skipped(first(&replay.skipped))
        } else if replay.outcome == Outcome::Partial {
            RepairOutcome::Interrupted
        } else {
            RepairOutcome::NotFound
        };
        RepairReport {
            resource: replay.resource.clone(),
            message_id: message_id.to_string(),
            replay_id: replay.replay_id.clone(),
            repaired_at_ms: (outcome == RepairOutcome::Repaired).then_some(now_ms),
            scanned: replay.scanned,
            outcome,
        }
    }
}

impl fmt::Display for RepairReport {
    /// Lines of text, every outside text escaped and cut ([`crate::printable::shown`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "DeadLetterQueue  {}",
            shown(&self.resource, PREVIEW_BYTES)
        )?;
        writeln!(
            f,
            "message_id       {}",
            shown(&self.message_id, PREVIEW_BYTES)
        )?;
        writeln!(
            f,
            "replay id        {}",
            shown(&self.replay_id, PREVIEW_BYTES)
        )?;
        writeln!(f, "read             {}", self.scanned)?;
        let line = match &self.outcome {
            RepairOutcome::Repaired => format!(
                "repaired: the copy is in the source queue (dlq-repaired-at {}), the original removed",
                self.repaired_at_ms.unwrap_or_default()
            ),
            RepairOutcome::NotFound => {
                "not found: no message with this message_id was read; nothing changed".into()
            }
            RepairOutcome::Skipped(why) => format!(
                "skipped: {}; the message stays in the dead-letter queue",
                shown(why, PREVIEW_BYTES)
            ),
            RepairOutcome::Failed(why) => format!(
                "failed: {}; the original stays in the dead-letter queue",
                shown(why, PREVIEW_BYTES)
            ),
            RepairOutcome::Interrupted => "interrupted: nothing changed".into(),
        };
        writeln!(f, "outcome          {line}")
    }
}

/// The replay a repair of `message_id` with `rewrite` runs (module doc): filter
/// `id=<message_id>` (built as a [`Term`], so any id works, commas included), limit 1,
/// crash window 1, to the source queue, with no `--max-replays` cap (a person chose this
/// message), a fresh replay id ([`new_replay_id`]).
pub fn repair_options(message_id: &str, rewrite: Rewrite, now_ms: u64) -> ReplayOptions {
    ReplayOptions {
        filter: Filter {
            terms: vec![Term::MessageId(message_id.to_string(), true)],
        },
        limit: Some(1),
        rate: None,
        dry_run: false,
        target: Target::OriginalQueue,
        max_replays: u64::MAX,
        replay_id: new_replay_id(now_ms),
        max_in_flight: 1,
        rewrite: Some(rewrite),
    }
}

/// Repairs the dead-lettered message `message_id` of `topology`'s dead-letter queues on
/// `broker`: publishes its copy with `rewrite` applied ([`copy_content`]) to the source
/// queue with a publisher confirm and `mandatory`, then removes the original. `now_ms`
/// (ms since epoch) is the replay's time and `dlq-repaired-at`. `cancel` stops it between
/// messages.
///
/// # Errors
/// [`RepairStopped`]: the error of [`DeadLetterOps::replay`] — a missing dead-letter
/// queue (nothing changed), a lost connection (messages held go back; a copy already
/// confirmed stays repaired) — and whether the message had been found by then.
pub async fn repair_with(
    broker: &dyn DeadLetterOps,
    topology: &DesiredTopology,
    message_id: &str,
    rewrite: Rewrite,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<RepairReport, RepairStopped> {
    let opts = repair_options(message_id, rewrite, now_ms);
    let mut found = Found(false);
    let report = replay_with(broker, topology, &opts, now_ms, cancel, &mut found)
        .await
        .map_err(|error| RepairStopped {
            error,
            found: found.0,
        })?;
    Ok(RepairReport::from_replay(message_id, &report, now_ms))
}

/// The observer of [`repair_with`]: whether the message was found. The replay keeps a
/// checkpoint right before it publishes a copy, with the message already counted as
/// matched, so a copy sent and lost with the connection is known here.
struct Found(bool);

impl Observer for Found {
    fn progress(&mut self, report: &ReplayReport) {
        self.0 |= report.matched > 0;
    }

    fn checkpoint<'a>(
        &'a mut self,
        report: &'a ReplayReport,
        _batch: u64,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        self.0 |= report.matched > 0;
        Box::pin(async { Ok(()) })
    }
}

/// A repair stopped by a broker error ([`repair_with`]).
#[derive(Debug)]
pub struct RepairStopped {
    /// The broker's error.
    pub error: BrokerError,
    /// Whether the message had been found before it: only then may its copy have been
    /// published.
    pub found: bool,
}

impl RepairStopped {
    /// What the stop may have left, for the user: [`STOPPED_NOTE`] once the message was
    /// found, else nothing (no copy was sent).
    pub fn note(&self) -> Option<&'static str> {
        self.found.then_some(STOPPED_NOTE)
    }
}

#[cfg(test)]
mod tests;
