//! Backlog evaluation (docs/ARCHITECTURE.md, "Domain" and "Monitoring and alerting"): from depth samples `(t, depth)` of a
//! dead-letter queue and its `spec.monitoring`, the baseline `B`, the threshold `T`, the
//! backlog ratio `R = (D − B) / (T − B)`, the alert state (`Inactive` → `Pending` →
//! `Firing`) and the growth per minute. Pure: time is passed in (milliseconds since the
//! epoch), nothing is read or written.
//!
//! Rules, and where they come from:
//! - **Ratio.** The denominator is `max(T − B, minHeadroom)` (`minHeadroom ≥ 1`), so a
//!   threshold at or below the baseline (possible with `thresholdFactor` on a small
//!   learned baseline) never divides by zero or gives ±∞/NaN. Without `threshold` or
//!   `thresholdFactor` there is no ratio and no alert.
//! - **Baseline.** `Static`: `baseline.value`. `Rolling`: the **median** of the samples of
//!   the last `window` that were not breaching when they were taken. The median is robust:
//!   a short burst or a single outlier does not move it (an EWMA would follow every sample
//!   a little, and a long incident would drag it up); samples taken while `R ≥ 1` are never
//!   learned, so an incident never raises its own baseline. With nothing learned yet, the
//!   baseline is the first sample's depth. [`Evaluator::resume`] seeds it from the value
//!   persisted in status, so a restart does not forget it.
//! - **Sustained duration** (like a Prometheus alerting rule's `for:`): `Pending` from the
//!   first evaluation with `R ≥ 1`, `Firing` at the first evaluation at or after `for`
//!   later; an evaluation with `R < 1` resets `Pending` to `Inactive`. A missed poll — a
//!   gap of up to two intervals between samples — does not reset `Pending`; a longer gap
//!   does (the data in between is unknown). `keepFiringFor` (like Prometheus'
//!   `keep_firing_for`) keeps a firing alert firing until the condition has been false that
//!   long, so a single dip does not resolve it.
//! - **Growth.** `(D(t) − D(t₀)) / ((t − t₀) / 60 s)` over the samples of the last
//!   [`GROWTH_WINDOW_MS`] (at least two samples). With `growthPerMinute` set, a growth at or
//!   above it is its own alert condition with the same `for` / `keepFiringFor` rules,
//!   independent of the ratio.

use std::collections::VecDeque;

use crate::crd::{BaselineMode, InvalidSpec, MonitoringSpec};

/// Window of the growth rate, ms (5 minutes, like a `delta(x[5m]) / 5` rule).
pub const GROWTH_WINDOW_MS: u64 = 300_000;

/// Default rolling-baseline window when `baseline.window` is unset, ms (1 hour).
pub const DEFAULT_WINDOW_MS: u64 = 3_600_000;

/// How the baseline is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Baseline {
    /// A fixed depth.
    Static(f64),
    /// The median of the non-breaching samples of the last `window_ms`.
    Rolling {
        /// Window, ms.
        window_ms: u64,
    },
}

/// How the threshold is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// A fixed depth.
    Absolute(f64),
    /// This factor times the baseline.
    Factor(f64),
}

/// `spec.monitoring`, validated, in milliseconds and messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Poll interval, ms (> 0).
    pub interval_ms: u64,
    /// Baseline.
    pub baseline: Baseline,
    /// Threshold, if any (no ratio and no alert without it).
    pub threshold: Option<Threshold>,
    /// Smallest denominator `T − B` (≥ 1).
    pub min_headroom: f64,
    /// `for`, ms.
    pub for_ms: u64,
    /// `keepFiringFor`, ms (0: none).
    pub keep_firing_for_ms: u64,
    /// `growthPerMinute`, messages per minute.
    pub growth_per_minute: Option<f64>,
}

impl Params {
    /// Reads `spec.monitoring`.
    ///
    /// # Errors
    /// [`InvalidSpec`] naming the field: the `spec.monitoring` checks of
    /// [`crate::crd::DeadLetterQueueSpec::validate`] (`MonitoringSpec::check`: durations,
    /// `threshold` above a static baseline, `minHeadroom ≥ 1`, one threshold form).
    pub fn from_spec(m: &MonitoringSpec) -> Result<Self, InvalidSpec> {
        let mut errs = crate::crd::Errors::default();
        m.check(&mut errs);
        errs.finish()?;
        // Checked above: every duration parses and every number is in range.
        let ms = |d: &crate::duration::Duration| d.as_ms().unwrap_or(0);
        let baseline = match m.baseline.mode {
            BaselineMode::Static => Baseline::Static(m.baseline.value.unwrap_or(0) as f64),
            BaselineMode::Rolling => Baseline::Rolling {
                window_ms: m
                    .baseline
                    .window
                    .as_ref()
                    .map_or(DEFAULT_WINDOW_MS, ms)
                    .max(1),
            },
        };
        let threshold = match (m.threshold, m.threshold_factor) {
            (Some(t), _) => Some(Threshold::Absolute(t as f64)),
            (None, Some(f)) => Some(Threshold::Factor(f)),
            (None, None) => None,
        };
        Ok(Params {
            interval_ms: ms(&m.interval).max(1),
            baseline,
            threshold,
            min_headroom: m.min_headroom.max(1) as f64,
            for_ms: ms(&m.for_),
            keep_firing_for_ms: m.keep_firing_for.as_ref().map_or(0, ms),
            growth_per_minute: m.growth_per_minute,
        })
    }
}

/// State of one alert condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertState {
    /// The condition does not hold.
    Inactive,
    /// The condition holds since `since` (ms), for less than `for`.
    Pending {
        /// First evaluation (ms) of this run of the condition.
        since: u64,
    },
    /// The condition has held for `for`; firing since `since` (ms).
    Firing {
        /// Evaluation (ms) at which it started firing.
        since: u64,
    },
}

impl AlertState {
    /// `dlq_backlog_alert_state`: 0 inactive, 1 pending, 2 firing (docs/ARCHITECTURE.md, "Monitoring and alerting").
    pub fn code(self) -> u8 {
        match self {
            AlertState::Inactive => 0,
            AlertState::Pending { .. } => 1,
            AlertState::Firing { .. } => 2,
        }
    }

    /// `Inactive`, `Pending` or `Firing` (status `alertState`).
    pub fn name(self) -> &'static str {
        match self {
            AlertState::Inactive => "Inactive",
            AlertState::Pending { .. } => "Pending",
            AlertState::Firing { .. } => "Firing",
        }
    }
}

/// The sustained-duration state machine of one condition (`for`, gap tolerance,
/// `keepFiringFor`).
#[derive(Debug, Clone)]
struct Sustained {
    state: AlertState,
    /// First evaluation of the current dip while firing.
    dip_since: Option<u64>,
    /// First evaluation of the current run of the condition (Pending or Firing).
    active_since: Option<u64>,
}

impl Sustained {
    fn new() -> Self {
        Sustained {
            state: AlertState::Inactive,
            dip_since: None,
            active_since: None,
        }
    }

    /// Advances to time `t` where the condition `holds`; `gap_too_long` when more than two
    /// intervals passed since the previous sample.
    fn step(&mut self, p: &Params, t: u64, holds: bool, gap_too_long: bool) -> AlertState {
        if gap_too_long {
            if let AlertState::Pending { .. } = self.state {
                self.state = AlertState::Inactive;
            }
        }
        self.state = match (self.state, holds) {
            (AlertState::Inactive, true) => {
                if p.for_ms == 0 {
                    AlertState::Firing { since: t }
                } else {
                    AlertState::Pending { since: t }
                }
            }
            (AlertState::Inactive, false) => AlertState::Inactive,
            (AlertState::Pending { since }, true) => {
                if t.saturating_sub(since) >= p.for_ms {
                    AlertState::Firing { since: t }
                } else {
                    AlertState::Pending { since }
                }
            }
            (AlertState::Pending { .. }, false) => AlertState::Inactive,
            (AlertState::Firing { since }, true) => {
                self.dip_since = None;
                AlertState::Firing { since }
            }
            (AlertState::Firing { since }, false) => {
                let dip = *self.dip_since.get_or_insert(t);
                if p.keep_firing_for_ms > 0 && t.saturating_sub(dip) < p.keep_firing_for_ms {
                    AlertState::Firing { since }
                } else {
                    self.dip_since = None;
                    AlertState::Inactive
                }
            }
        };
        self.active_since = match self.state {
            AlertState::Inactive => None,
            AlertState::Pending { since } => Some(since),
            AlertState::Firing { since } => Some(self.active_since.unwrap_or(since)),
        };
        self.state
    }
}

/// The result of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Time of the sample, ms.
    pub t: u64,
    /// Depth of the sample (messages).
    pub depth: u64,
    /// Baseline `B` (messages).
    pub baseline: f64,
    /// Threshold `T` (messages), if configured.
    pub threshold: Option<f64>,
    /// Backlog ratio `R`, if a threshold is configured; always finite.
    pub ratio: Option<f64>,
    /// State of the backlog alert (`R ≥ 1` for `for`).
    pub state: AlertState,
    /// First evaluation (ms) of the current Pending-or-Firing run of the backlog alert
    /// (status `breachingSince`); `None` while `Inactive`.
    pub breaching_since: Option<u64>,
    /// Growth, messages per minute, once two samples of the growth window exist.
    pub growth_per_minute: Option<f64>,
    /// State of the growth alert (`growthPerMinute`), `Inactive` when unset.
    pub growth_state: AlertState,
}

/// Evaluates the samples of one dead-letter queue in time order.
#[derive(Debug, Clone)]
pub struct Evaluator {
    params: Params,
    /// Non-breaching samples of the rolling window: (t, depth).
    learned: VecDeque<(u64, u64)>,
    /// Samples of the growth window: (t, depth).
    recent: VecDeque<(u64, u64)>,
    last_t: Option<u64>,
    backlog: Sustained,
    growth: Sustained,
}

impl Evaluator {
    /// A fresh evaluator.
    pub fn new(params: Params) -> Self {
        Evaluator {
            params,
            learned: VecDeque::new(),
            recent: VecDeque::new(),
            last_t: None,
            backlog: Sustained::new(),
            growth: Sustained::new(),
        }
    }

    /// An evaluator whose rolling baseline starts from `baseline` (the value persisted in
    /// status) as if it had been learned at time `t` (ms).
    pub fn resume(params: Params, baseline: f64, t: u64) -> Self {
        let mut e = Evaluator::new(params);
        if baseline.is_finite() && baseline >= 0.0 {
            e.learned.push_back((t, baseline.round() as u64));
        }
        e
    }

    /// Replaces the parameters (an edited `spec.monitoring`), keeping the learned
    /// baseline samples, the growth window and both alert states — as Prometheus keeps an
    /// active alert across a rule reload. The next sample is judged by the new parameters
    /// (a `Pending` state fires once it has held for the new `for`; samples outside a
    /// shorter window are dropped).
    pub fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    /// Restores the backlog alert state written to status before a restart (`state`, and
    /// `breaching_since` in ms), so an alert that was firing is not resolved and
    /// re-pended by the restart — as Prometheus restores its alerts' `for` state
    /// (`--rules.alert.for-outage-tolerance`). The next sample is judged from there.
    pub fn resume_state(&mut self, state: AlertState, breaching_since: Option<u64>) {
        self.backlog.state = state;
        self.backlog.active_since = match state {
            AlertState::Inactive => None,
            AlertState::Pending { since } => Some(breaching_since.unwrap_or(since)),
            AlertState::Firing { since } => Some(breaching_since.unwrap_or(since)),
        };
    }

    /// The backlog alert state after the last sample (`Inactive` before any).
    pub fn last_state(&self) -> AlertState {
        self.backlog.state
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The current baseline, without a new sample (`None` for a rolling baseline that has
    /// learned nothing yet).
    pub fn baseline(&self) -> Option<f64> {
        match self.params.baseline {
            Baseline::Static(b) => Some(b),
            Baseline::Rolling { .. } => median(self.learned.iter().map(|&(_, d)| d)),
        }
    }

    /// Evaluates the sample `depth` taken at `t` (ms). Samples must come in time order; a
    /// sample older than the previous one is evaluated at the previous time.
    pub fn observe(&mut self, t: u64, depth: u64) -> Evaluation {
        let t = self.last_t.map_or(t, |last| t.max(last));
        let gap_too_long = self
            .last_t
            .is_some_and(|last| t - last > 2 * self.params.interval_ms);
        self.last_t = Some(t);

        // Baseline from what was learned before this sample (a sample never judges
        // itself); the first sample of a rolling baseline is its own baseline.
        if let Baseline::Rolling { window_ms } = self.params.baseline {
            while self
                .learned
                .front()
                .is_some_and(|&(ts, _)| t.saturating_sub(ts) > window_ms)
            {
                self.learned.pop_front();
            }
        }
        let baseline = self.baseline().unwrap_or(depth as f64);
        let threshold = self.params.threshold.map(|th| match th {
            Threshold::Absolute(v) => v,
            Threshold::Factor(f) => f * baseline,
        });
        let ratio = threshold.map(|th| {
            let denominator = (th - baseline).max(self.params.min_headroom);
            (depth as f64 - baseline) / denominator
        });
        let breaching = ratio.is_some_and(|r| r >= 1.0);
        if let Baseline::Rolling { .. } = self.params.baseline {
            if !breaching {
                self.learned.push_back((t, depth));
            }
        }
        let state = self.backlog.step(&self.params, t, breaching, gap_too_long);

        while self
            .recent
            .front()
            .is_some_and(|&(ts, _)| t.saturating_sub(ts) > GROWTH_WINDOW_MS)
        {
            self.recent.pop_front();
        }
        self.recent.push_back((t, depth));
        let growth = match (self.recent.front(), self.recent.back()) {
            (Some(&(t0, d0)), Some(&(t1, d1))) if t1 > t0 => {
                Some((d1 as f64 - d0 as f64) / ((t1 - t0) as f64 / 60_000.0))
            }
            _ => None,
        };
        let growing = match (self.params.growth_per_minute, growth) {
            (Some(limit), Some(g)) => g >= limit,
            _ => false,
        };
        let growth_state = self.growth.step(&self.params, t, growing, gap_too_long);

        Evaluation {
            t,
            depth,
            baseline,
            threshold,
            ratio,
            state,
            breaching_since: self.backlog.active_since,
            growth_per_minute: growth,
            growth_state,
        }
    }
}

/// The median of `values` (the mean of the two middle ones for an even count).
fn median(values: impl Iterator<Item = u64>) -> Option<f64> {
    let mut v: Vec<u64> = values.collect();
    if v.is_empty() {
        return None;
    }
    let mid = v.len() / 2;
    let (_, upper, _) = v.select_nth_unstable(mid);
    let upper = *upper as f64;
    if v.len() % 2 == 1 {
        Some(upper)
    } else {
        let lower = v[..mid].iter().copied().max().unwrap_or(0) as f64;
        Some((lower + upper) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000;

    fn params(json: serde_json::Value) -> Params {
        let spec: MonitoringSpec = serde_json::from_value(json).expect("spec");
        Params::from_spec(&spec).expect("valid")
    }

    /// Runs `(t in s, depth)` samples and returns every evaluation.
    fn run(p: Params, samples: &[(u64, u64)]) -> Vec<Evaluation> {
        let mut e = Evaluator::new(p);
        samples.iter().map(|&(t, d)| e.observe(t * S, d)).collect()
    }

    fn states(evals: &[Evaluation]) -> Vec<&'static str> {
        evals.iter().map(|e| e.state.name()).collect()
    }

    #[test]
    fn ratio_from_baseline_and_threshold() {
        // baseline 100, threshold 1100: R = (D − 100) / 1000.
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Static", "value": 100},
                                          "threshold": 1100, "for": "1m"}),
        );
        for (depth, want) in [(100, 0.0), (600, 0.5), (1100, 1.0), (2100, 2.0), (0, -0.1)] {
            let e = Evaluator::new(p.clone()).observe(0, depth);
            assert_eq!(e.ratio, Some(want), "depth {depth}");
            assert_eq!(e.baseline, 100.0);
            assert_eq!(e.threshold, Some(1100.0));
        }
    }

    #[test]
    fn min_headroom_bounds_the_denominator() {
        // thresholdFactor 1 on a learned baseline: T = B, the denominator is minHeadroom.
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Rolling", "window": "1h"},
                                          "thresholdFactor": 1.0, "minHeadroom": 5, "for": "0s"}),
        );
        let evals = run(p, &[(0, 10), (10, 10), (20, 20)]);
        assert_eq!(evals[0].ratio, Some(0.0));
        assert_eq!(evals[2].baseline, 10.0);
        assert_eq!(evals[2].ratio, Some(2.0), "(20 − 10) / max(0, 5)");
        assert!(evals.iter().all(|e| e.ratio.is_some_and(f64::is_finite)));
        // Empty queue, zero baseline, factor threshold: 0 / 1, not NaN.
        let p = params(
            serde_json::json!({"baseline": {"mode": "Static", "value": 0}, "thresholdFactor": 3.0}),
        );
        assert_eq!(Evaluator::new(p).observe(0, 0).ratio, Some(0.0));
    }

    #[test]
    fn a_static_threshold_at_or_below_the_baseline_is_invalid() {
        for t in [100, 50] {
            let spec: MonitoringSpec = serde_json::from_value(serde_json::json!({
                "baseline": {"mode": "Static", "value": 100}, "threshold": t}))
            .expect("spec");
            let err = Params::from_spec(&spec).expect_err("invalid");
            assert_eq!(err.0[0].field, "spec.monitoring.threshold");
        }
    }

    fn breach_params() -> Params {
        params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Static", "value": 100},
                                  "threshold": 1100, "for": "30s"}),
        )
    }

    #[test]
    fn a_spike_shorter_than_for_never_fires() {
        let evals = run(
            breach_params(),
            &[(0, 0), (10, 5000), (20, 5000), (30, 5000), (40, 0), (50, 0)],
        );
        assert_eq!(
            states(&evals),
            ["Inactive", "Pending", "Pending", "Pending", "Inactive", "Inactive"]
        );
    }

    #[test]
    fn a_breach_held_for_for_fires_at_the_first_evaluation_at_or_after_for_and_resolves() {
        let evals = run(
            breach_params(),
            &[
                (0, 0),
                (10, 2000),
                (20, 2000),
                (30, 2000),
                (40, 2000),
                (50, 2000),
                (60, 50),
            ],
        );
        assert_eq!(
            states(&evals),
            ["Inactive", "Pending", "Pending", "Pending", "Firing", "Firing", "Inactive"]
        );
        // Pending since 10 s; 40 s is the first evaluation ≥ 10 + 30.
        assert_eq!(evals[1].state, AlertState::Pending { since: 10 * S });
        assert_eq!(evals[4].state, AlertState::Firing { since: 40 * S });
        assert_eq!(evals[4].state.code(), 2);
        // breachingSince: the start of the run, through Pending and Firing; cleared after.
        let since: Vec<Option<u64>> = evals.iter().map(|e| e.breaching_since).collect();
        assert_eq!(
            since,
            [
                None,
                Some(10 * S),
                Some(10 * S),
                Some(10 * S),
                Some(10 * S),
                Some(10 * S),
                None
            ]
        );
        // With an uneven poll the first evaluation after `for` fires.
        let evals = run(
            breach_params(),
            &[(10, 2000), (25, 2000), (38, 2000), (41, 2000)],
        );
        assert_eq!(states(&evals), ["Pending", "Pending", "Pending", "Firing"]);
    }

    #[test]
    fn a_missed_poll_does_not_reset_pending_but_a_long_gap_does() {
        // Interval 10 s: a gap of 20 s (one missed poll) keeps Pending.
        let evals = run(breach_params(), &[(0, 2000), (20, 2000), (30, 2000)]);
        assert_eq!(states(&evals), ["Pending", "Pending", "Firing"]);
        // A gap of 30 s (> two intervals) resets it: Pending starts again.
        let evals = run(breach_params(), &[(0, 2000), (30, 2000), (40, 2000)]);
        assert_eq!(evals[1].state, AlertState::Pending { since: 30 * S });
        assert_eq!(states(&evals), ["Pending", "Pending", "Pending"]);
    }

    #[test]
    fn keep_firing_for_rides_out_a_single_dip() {
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Static", "value": 100},
                                          "threshold": 1100, "for": "10s", "keepFiringFor": "20s"}),
        );
        let evals = run(
            p,
            &[
                (0, 2000),
                (10, 2000),
                (20, 50),
                (30, 2000),
                (40, 50),
                (50, 50),
                (60, 50),
            ],
        );
        assert_eq!(
            states(&evals),
            ["Pending", "Firing", "Firing", "Firing", "Firing", "Firing", "Inactive"]
        );
        // Without keepFiringFor the dip resolves it.
        let evals = run(
            params(
                serde_json::json!({"interval": "10s", "baseline": {"mode": "Static", "value": 100},
                                      "threshold": 1100, "for": "10s"}),
            ),
            &[(0, 2000), (10, 2000), (20, 50)],
        );
        assert_eq!(states(&evals), ["Pending", "Firing", "Inactive"]);
    }

    #[test]
    fn the_rolling_baseline_does_not_learn_from_a_breach() {
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Rolling", "window": "10m"},
                                          "thresholdFactor": 2.0, "minHeadroom": 10, "for": "20s"}),
        );
        let mut samples: Vec<(u64, u64)> = (0..6).map(|i| (i * 10, 100)).collect();
        samples.extend((6..30).map(|i| (i * 10, 1000)));
        let evals = run(p, &samples);
        assert!(
            evals[5..].iter().all(|e| e.baseline == 100.0),
            "baseline moved during the breach"
        );
        assert_eq!(evals[7].state.name(), "Pending");
        assert_eq!(evals[8].state.name(), "Firing");
        assert_eq!(evals.last().map(|e| e.state.name()), Some("Firing"));
        // The median ignores one outlier below the threshold too.
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Rolling", "window": "10m"},
                                          "thresholdFactor": 10.0}),
        );
        let evals = run(p, &[(0, 100), (10, 100), (20, 150), (30, 100), (40, 100)]);
        assert_eq!(evals[4].baseline, 100.0);
    }

    #[test]
    fn the_rolling_baseline_forgets_outside_its_window_and_resumes_from_status() {
        let p = params(
            serde_json::json!({"interval": "10s", "baseline": {"mode": "Rolling", "window": "1m"},
                                          "thresholdFactor": 100.0}),
        );
        let evals = run(
            p.clone(),
            &[(0, 10), (30, 10), (60, 50), (90, 50), (130, 50)],
        );
        assert_eq!(evals[2].baseline, 10.0);
        assert_eq!(evals[4].baseline, 50.0, "the 10s are older than 1 minute");
        let mut resumed = Evaluator::resume(p, 42.0, 0);
        assert_eq!(resumed.baseline(), Some(42.0));
        assert_eq!(resumed.observe(10 * S, 42).baseline, 42.0);
    }

    #[test]
    fn growth_alerts_on_its_own() {
        let p = params(
            serde_json::json!({"interval": "30s", "baseline": {"mode": "Static", "value": 0},
                                          "threshold": 1000000, "for": "1m", "growthPerMinute": 100.0}),
        );
        // +60 messages per 30 s = 120 per minute, far below the ratio threshold; growth is
        // measured from the oldest sample of the last 5 minutes, so when the depth stops
        // rising it falls below 100/min (t = 150 s: 240 / 2.5 min = 96) and resolves.
        let evals = run(
            p,
            &[
                (0, 0),
                (30, 60),
                (60, 120),
                (90, 180),
                (120, 240),
                (150, 240),
                (180, 240),
            ],
        );
        assert_eq!(evals[0].growth_per_minute, None);
        assert_eq!(evals[1].growth_per_minute, Some(120.0));
        let growth: Vec<&str> = evals.iter().map(|e| e.growth_state.name()).collect();
        assert_eq!(
            growth,
            ["Inactive", "Pending", "Pending", "Firing", "Firing", "Inactive", "Inactive"],
            "{evals:?}"
        );
        assert!(evals.iter().all(|e| e.state == AlertState::Inactive));
    }

    #[test]
    fn no_threshold_means_no_ratio_and_no_alert() {
        let evals = run(
            params(serde_json::json!({"interval": "10s"})),
            &[(0, 0), (10, 1_000_000)],
        );
        assert!(evals
            .iter()
            .all(|e| e.ratio.is_none() && e.state == AlertState::Inactive));
    }

    #[test]
    fn an_edited_spec_keeps_the_learned_baseline_and_the_alert_state() {
        let rolling = |for_: &str, growth: f64| {
            params(
                serde_json::json!({"interval": "10s", "baseline": {"mode": "Rolling", "window": "1h"},
                "thresholdFactor": 2.0, "minHeadroom": 10, "for": for_, "growthPerMinute": growth}),
            )
        };
        let mut e = Evaluator::new(rolling("20s", 1000.0));
        for t in 0..5 {
            e.observe(t * 10 * S, 40);
        }
        for t in 5..8 {
            e.observe(t * 10 * S, 500);
        }
        assert_eq!(e.last_state().name(), "Firing");
        // `for` and growthPerMinute edited during the incident.
        e.set_params(rolling("40s", 2000.0));
        let next = e.observe(80 * S, 500);
        assert_eq!(next.state.name(), "Firing", "still firing");
        assert_eq!(
            next.baseline, 40.0,
            "the incident did not become the baseline"
        );
        assert_eq!(next.breaching_since, Some(50 * S));
    }

    #[test]
    fn a_resumed_firing_state_keeps_firing_and_resolves_normally() {
        let mut e = Evaluator::new(breach_params());
        e.resume_state(AlertState::Firing { since: 40 * S }, Some(10 * S));
        // First sample after a restart, long after the last one: still firing.
        let next = e.observe(400 * S, 2000);
        assert_eq!(next.state, AlertState::Firing { since: 40 * S });
        assert_eq!(next.breaching_since, Some(10 * S));
        assert_eq!(e.observe(410 * S, 0).state, AlertState::Inactive);
    }
}
