//! How a run of a replay starts (pure): what earlier runs left ([`Base`], read from
//! status), the limit left for this run ([`remaining_limit`]), the engine's options
//! ([`options_for`]), and the counts of a run ([`Tally`]) with what a failed run leaves in
//! doubt ([`in_doubt_after_error`]).

use crate::crd::{
    DeadLetterReplaySpec, DeadLetterReplayStatus, FieldError, InvalidSpec, ReplayPhase,
    ReplayTarget,
};
use crate::dlq::filter::Filter;
use crate::dlq::replay::{ReplayOptions, ReplayReport, Target, MAX_IN_FLIGHT};
use crate::metrics::ReplayDelta;

/// What earlier runs of a replay left, read from its status when a run starts (zero for
/// a first run, and for a dry run, which changes nothing and starts over).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Base {
    /// Messages replayed by earlier runs (they left the dead-letter queues).
    pub replayed: u64,
    /// Copies earlier runs left in doubt (an operator crash, a broker error).
    pub in_doubt: u64,
}

impl Base {
    /// The base of the next run after one that replayed `replayed` messages and left
    /// `in_doubt` copies in doubt (a dry run stays at zero).
    pub fn then(self, replayed: u64, in_doubt: u64, dry_run: bool) -> Base {
        if dry_run {
            return Base::default();
        }
        Base {
            replayed: self.replayed.saturating_add(replayed),
            in_doubt: self.in_doubt.saturating_add(in_doubt),
        }
    }
}

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPlan {
    /// Counts of earlier runs.
    pub base: Base,
    /// `spec.limit` minus what earlier runs replayed or left in doubt ([`remaining_limit`]).
    pub limit: Option<u64>,
    /// `true` when an earlier run of this replay started (phase `Running`).
    pub resumed: bool,
}

/// The plan of a run of a replay with `spec` whose status is `status`: a first run, or
/// a resumed one when the phase is `Running` (an operator stopped or died while it ran).
pub fn plan_run(status: &DeadLetterReplayStatus, spec: &DeadLetterReplaySpec) -> RunPlan {
    let resumed = status.phase == ReplayPhase::Running;
    let base = if resumed && !spec.dry_run {
        Base {
            replayed: status.replayed,
            in_doubt: status.in_doubt,
        }
    } else {
        Base::default()
    };
    RunPlan {
        base,
        limit: remaining_limit(spec.limit, base),
        resumed,
    }
}

/// What is left of `limit` after earlier runs: copies in doubt count as sent, so a
/// replay never sends more than `limit` (it may send fewer when a crash left copies in
/// doubt that had not reached the broker).
pub fn remaining_limit(limit: Option<u64>, base: Base) -> Option<u64> {
    limit.map(|l| l.saturating_sub(base.replayed.saturating_add(base.in_doubt)))
}

/// The counts of one run (the engine's report), reasons as written to status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Copies confirmed, originals removed (dry run: would be).
    pub replayed: u64,
    /// Matched, kept on purpose.
    pub skipped: u64,
    /// Matched, copy refused or unroutable (kept).
    pub failed: u64,
}

impl From<&ReplayReport> for Tally {
    fn from(r: &ReplayReport) -> Self {
        Tally {
            scanned: r.scanned,
            matched: r.matched,
            replayed: r.replayed,
            skipped: r.skipped_total(),
            failed: r.failed_total(),
        }
    }
}

impl Tally {
    /// What `self` adds to `earlier` (a report of the same run taken before).
    pub fn since(self, earlier: Tally) -> ReplayDelta {
        ReplayDelta {
            replayed: self.replayed.saturating_sub(earlier.replayed),
            skipped: self.skipped.saturating_sub(earlier.skipped),
            failed: self.failed.saturating_sub(earlier.failed),
        }
    }
}

/// Copies of a run in doubt after the engine failed: those of the last checkpointed batch
/// (`(settled at the checkpoint, batch)`: replayed + failed, and the batch size) that no
/// later report shows settled (`progress`). Without a checkpoint, nothing was published
/// under this contract.
pub fn in_doubt_after_error(checkpoint: Option<(u64, u64)>, progress: Tally) -> u64 {
    match checkpoint {
        Some((settled_then, batch)) => {
            let settled_since = progress
                .replayed
                .saturating_add(progress.failed)
                .saturating_sub(settled_then);
            batch.saturating_sub(settled_since)
        }
        None => 0,
    }
}

/// The engine's options for `spec` (validated): filter, limit of this run, rate,
/// target, `maxReplays`, dry run, replay id, `maxInFlight` (default
/// [`MAX_IN_FLIGHT`]).
///
/// # Errors
/// [`InvalidSpec`] naming `spec.filter` when the filter does not parse.
pub fn options_for(
    spec: &DeadLetterReplaySpec,
    replay_id: &str,
    limit: Option<u64>,
) -> Result<ReplayOptions, InvalidSpec> {
    let filter = Filter::parse(&spec.filter).map_err(|e| {
        InvalidSpec(vec![FieldError {
            field: "spec.filter".into(),
            message: format!("{:?}: {}", e.term, e.reason),
        }])
    })?;
    Ok(ReplayOptions {
        filter,
        limit,
        rate: spec.rate.map(f64::from),
        dry_run: spec.dry_run,
        target: match spec.target {
            ReplayTarget::OriginalQueue => Target::OriginalQueue,
            ReplayTarget::OriginalExchange => Target::OriginalExchange,
        },
        max_replays: u64::from(spec.max_replays),
        replay_id: replay_id.to_string(),
        max_in_flight: spec.max_in_flight.map_or(MAX_IN_FLIGHT, |n| {
            usize::try_from(n).unwrap_or(MAX_IN_FLIGHT)
        }),
        rewrite: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::dead_letter_replay::fixtures::spec;

    #[test]
    fn first_run_and_resumed_run_plans() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}, "limit": 100}));
        let fresh = DeadLetterReplayStatus::default();
        assert_eq!(
            plan_run(&fresh, &s),
            RunPlan {
                base: Base::default(),
                limit: Some(100),
                resumed: false
            }
        );
        // Pending (never started) with stale figures: a first run.
        let pending = DeadLetterReplayStatus {
            replayed: 7,
            ..Default::default()
        };
        assert!(!plan_run(&pending, &s).resumed);
        // Running without a task: resumed from the status counts; the limit is lowered by
        // what was replayed and what is in doubt.
        let running = DeadLetterReplayStatus {
            phase: ReplayPhase::Running,
            replayed: 40,
            in_doubt: 5,
            scanned: 90,
            ..Default::default()
        };
        let p = plan_run(&running, &s);
        assert_eq!(
            p,
            RunPlan {
                base: Base {
                    replayed: 40,
                    in_doubt: 5
                },
                limit: Some(55),
                resumed: true
            }
        );
        // Limit already used up: 0, never negative.
        let over = DeadLetterReplayStatus {
            replayed: 98,
            in_doubt: 5,
            ..running.clone()
        };
        assert_eq!(plan_run(&over, &s).limit, Some(0));
        // No limit stays no limit.
        let unlimited = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        assert_eq!(plan_run(&running, &unlimited).limit, None);
        // A dry run changed nothing: it starts over.
        let dry = spec(
            serde_json::json!({"deadLetterQueueRef": {"name": "orders"}, "dryRun": true, "limit": 100}),
        );
        let p = plan_run(&running, &dry);
        assert!(p.resumed);
        assert_eq!((p.base, p.limit), (Base::default(), Some(100)));
        assert_eq!(Base::default().then(10, 2, true), Base::default());
        assert_eq!(
            Base {
                replayed: 1,
                in_doubt: 1
            }
            .then(10, 2, false),
            Base {
                replayed: 11,
                in_doubt: 3
            }
        );
    }

    #[test]
    fn in_doubt_after_an_engine_error_is_the_unsettled_rest_of_the_last_batch() {
        let t = |replayed, failed| Tally {
            replayed,
            failed,
            ..Default::default()
        };
        // Checkpoint at 10 settled with a batch of 8; 5 settled since: 3 in doubt.
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(14, 1)), 3);
        // All settled: none.
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(18, 0)), 0);
        assert_eq!(in_doubt_after_error(Some((10, 8)), t(30, 0)), 0);
        // No checkpoint: nothing was published.
        assert_eq!(in_doubt_after_error(None, t(0, 0)), 0);
    }

    #[test]
    fn options_follow_the_spec() {
        let s = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"},
            "filter": ["class=Timeout", "age>1h"], "rate": 20, "maxReplays": 2,
            "target": "OriginalExchange", "dryRun": true, "maxInFlight": 7}));
        let o = options_for(&s, "uid-1", Some(5)).expect("options");
        assert_eq!(o.max_in_flight, 7);
        assert_eq!(o.filter.terms.len(), 2);
        assert_eq!(o.limit, Some(5));
        assert_eq!(o.rate, Some(20.0));
        assert_eq!(o.max_replays, 2);
        assert_eq!(o.target, Target::OriginalExchange);
        assert!(o.dry_run);
        assert_eq!(o.replay_id, "uid-1");
        let default = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"}}));
        let o = options_for(&default, "u", None).expect("options");
        assert_eq!(o.max_in_flight, MAX_IN_FLIGHT);
        let bad = spec(serde_json::json!({"deadLetterQueueRef": {"name": "orders"},
            "filter": ["colour=red"]}));
        let err = options_for(&bad, "u", None).expect_err("bad filter");
        assert_eq!(err.0[0].field, "spec.filter");
    }

    #[test]
    fn metric_deltas_never_go_back() {
        let a = Tally {
            replayed: 5,
            skipped: 1,
            failed: 0,
            ..Default::default()
        };
        let b = Tally {
            replayed: 9,
            skipped: 1,
            failed: 2,
            ..Default::default()
        };
        assert_eq!(
            b.since(a),
            ReplayDelta {
                replayed: 4,
                skipped: 0,
                failed: 2
            }
        );
        assert_eq!(a.since(b), ReplayDelta::default());
    }
}
