//! The backlog part of a DeadLetterQueue's status after a reading (pure): the
//! `BacklogHigh` condition ([`backlog_condition`]), in router mode the `RouterReady`
//! condition ([`super::router`]), when to write ([`backlog_status`]),
//! the Events of a change ([`backlog_events`]), and the evaluator resumed from status
//! after a restart ([`resumed_evaluator`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub use super::reading::Reading;
use crate::crd::DeadLetterQueueStatus;
use crate::monitor::{AlertState, Params};
use crate::status::conditions::{self, ConditionStatus, Desired, BACKLOG_HIGH, BROKER_REACHABLE};
use crate::status::Note;

/// RFC 3339 time of `ms` (ms since the Unix epoch).
fn time_of(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_string())
}

/// `x` rounded to `decimals` places (so a figure that only jitters in its last digits
/// does not count as a change).
fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

/// The `BacklogHigh` condition for a reading. Its message does not carry live numbers
/// (those are in the status fields and the metrics), so a steady state does not change
/// it.
///
/// - `True`, reason `BacklogHigh`: the backlog alert fires (`R ≥ 1` held for `for`);
///   reason `GrowthHigh`: the growth alert fires (growth ≥ `growthPerMinute` for `for`).
/// - `False`, reason `BacklogPending` (`R ≥ 1`, not yet for `for`), `BacklogNormal`, or
///   `NoThreshold` (neither `threshold` nor `thresholdFactor` set).
/// - `Unknown`, with the reading's reason, when the broker cannot be read.
pub fn backlog_condition(reading: Reading<'_>, params: &Params) -> Desired {
    let for_ = crate::duration::format_ms(params.for_ms);
    let (status, reason, message) = match reading {
        Reading::Unknown { reason, message } => (
            ConditionStatus::Unknown,
            reason,
            format!("queue depths cannot be read: {message}"),
        ),
        Reading::Observed { eval, .. } => match (eval.state, eval.growth_state) {
            (AlertState::Firing { .. }, _) => (
                ConditionStatus::True,
                "BacklogHigh",
                format!(
                    "the dead-letter backlog ratio has been at or above 1 for {for_} since {}",
                    eval.breaching_since
                        .and_then(time_of)
                        .unwrap_or_else(|| "an unknown time".into())
                ),
            ),
            (_, AlertState::Firing { .. }) => (
                ConditionStatus::True,
                "GrowthHigh",
                format!(
                    "the dead-letter queue has grown by at least {} messages per minute for {for_}",
                    params.growth_per_minute.unwrap_or_default()
                ),
            ),
            (AlertState::Pending { .. }, _) => (
                ConditionStatus::False,
                "BacklogPending",
                format!(
                    "the dead-letter backlog ratio is at or above 1 since {}; BacklogHigh after {for_}",
                    eval.breaching_since
                        .and_then(time_of)
                        .unwrap_or_else(|| "an unknown time".into())
                ),
            ),
            (AlertState::Inactive, _) if eval.threshold.is_none() => (
                ConditionStatus::False,
                "NoThreshold",
                "no spec.monitoring.threshold or thresholdFactor: the backlog ratio is not computed"
                    .to_string(),
            ),
            (AlertState::Inactive, _) => (
                ConditionStatus::False,
                "BacklogNormal",
                "the dead-letter backlog ratio is below 1".to_string(),
            ),
        },
    };
    Desired {
        type_: BACKLOG_HIGH,
        status,
        reason,
        message,
    }
}

/// The `BrokerReachable` condition for a reading: `True`, reason `Reachable`, naming the
/// address the depths were read through (so a move to another node of the cluster shows
/// in status); `False` with the reading's reason and error (which names every address
/// tried) when they cannot be read.
pub fn reachable_condition(reading: Reading<'_>) -> Desired {
    let (status, reason, message) = match reading {
        Reading::Observed { via, .. } => (
            ConditionStatus::True,
            "Reachable",
            format!("queue depths read through {via}"),
        ),
        Reading::Unknown { reason, message } => (
            ConditionStatus::False,
            reason,
            format!("queue depths cannot be read: {message}"),
        ),
    };
    Desired {
        type_: BROKER_REACHABLE,
        status,
        reason,
        message,
    }
}

/// Events for a change of the `BrokerReachable` condition from `before` to `after`: Normal
/// `BrokerReachable` when the broker answers again after `False`, Normal
/// `BrokerAddressChanged` when the depths are read through another address (another node
/// of the cluster). The move to `False` is told once, by the `BacklogHigh` Event of the
/// same reason ([`backlog_events`]). Pure.
pub fn reachable_events(
    before: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    after: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Vec<Note> {
    let find = |cs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
        cs.iter().find(|c| c.type_ == BROKER_REACHABLE).cloned()
    };
    let (Some(new), Some(old)) = (find(after), find(before)) else {
        return Vec::new();
    };
    match (old.status.as_str(), new.status.as_str()) {
        ("False", "True") => vec![Note::normal("BrokerReachable", "Monitor", new.message)],
        ("True", "True") if old.message != new.message => vec![Note::normal(
            "BrokerAddressChanged",
            "Monitor",
            format!("{} (before: {})", new.message, old.message),
        )],
        _ => Vec::new(),
    }
}

/// The backlog part of the status after a reading, or `None` when nothing needs writing.
/// Pure.
///
/// `current` is the backlog part last written (or read). The result is written when the
/// `BacklogHigh` or `BrokerReachable` condition ([`reachable_condition`]), the `RouterReady` condition (set in router mode, i.e. with
/// `router` = `spec.router.backlogThreshold`, removed otherwise:
/// [`set_router_condition`](super::router::set_router_condition)) or the alert state
/// changed, or when a figure (depths,
/// baseline, threshold, ratio to 3 decimals, growth to 2) changed and the last write
/// (`lastObservedTime`) is at least `status_interval` old. `lastObservedTime` is the
/// reading's time (`now`) on every write of an observed reading. An unknown reading
/// clears the ratio, growth and `breachingSince` (unknown, not zero) and sets
/// `alertState: Unknown`; the depths stay as last observed, dated by the unchanged
/// `lastObservedTime`, and the baseline is kept.
pub fn backlog_status(
    current: &DeadLetterQueueStatus,
    generation: Option<i64>,
    reading: Reading<'_>,
    params: &Params,
    router: Option<u64>,
    now: &Time,
    status_interval: Duration,
) -> Option<DeadLetterQueueStatus> {
    let mut next = current.backlog_part();
    let backlog_changed = conditions::set(
        &mut next.conditions,
        &backlog_condition(reading, params),
        generation,
        now,
    );
    let reachable_changed = conditions::set(
        &mut next.conditions,
        &reachable_condition(reading),
        generation,
        now,
    );
    let router_changed =
        super::router::set_router_condition(&mut next.conditions, router, reading, generation, now);
    let condition_changed = backlog_changed || reachable_changed || router_changed;
    match reading {
        Reading::Observed { depth, eval, .. } => {
            next.depth = Some(depth.clone());
            next.baseline = Some(round(eval.baseline, 2));
            next.threshold = eval.threshold.map(|t| round(t, 2));
            next.backlog_ratio = eval.ratio.map(|r| round(r, 3));
            next.alert_state = Some(eval.state.name().to_string());
            next.breaching_since = eval.breaching_since.and_then(time_of);
            next.growth_per_minute = eval.growth_per_minute.map(|g| round(g, 2));
        }
        Reading::Unknown { .. } => {
            // Depths stay as last observed (dated by lastObservedTime, which an unknown
            // reading does not move); what is computed from live data goes.
            next.backlog_ratio = None;
            next.alert_state = Some("Unknown".to_string());
            next.breaching_since = None;
            next.growth_per_minute = None;
        }
    }
    let state_changed = next.alert_state != current.alert_state;
    let figures_changed = next != current.backlog_part();
    let last_write = current
        .last_observed_time
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let interval_passed = last_write
        .is_none_or(|t| now.0.duration_since(t).as_secs_f64() >= status_interval.as_secs_f64());
    if condition_changed || state_changed || (figures_changed && interval_passed) {
        if let Reading::Observed { .. } = reading {
            next.last_observed_time = Some(now.0.to_string());
        }
        Some(next)
    } else {
        None
    }
}

/// An evaluator resumed from the backlog part of a status: its rolling baseline and its
/// alert state (`alertState`, `breachingSince`, and `BacklogHigh`'s transition time as
/// the firing time). Pure.
pub fn resumed_evaluator(
    params: &Params,
    status: &DeadLetterQueueStatus,
    now_ms: u64,
) -> crate::monitor::Evaluator {
    let mut e = match (params.baseline, status.baseline) {
        (crate::monitor::Baseline::Rolling { .. }, Some(b)) => {
            crate::monitor::Evaluator::resume(params.clone(), b, now_ms)
        }
        _ => crate::monitor::Evaluator::new(params.clone()),
    };
    let ms = |t: &str| {
        t.parse::<k8s_openapi::jiff::Timestamp>()
            .ok()
            .and_then(|t| u64::try_from(t.as_millisecond()).ok())
    };
    let breaching = status.breaching_since.as_deref().and_then(ms);
    let fired = status
        .conditions
        .iter()
        .find(|c| c.type_ == BACKLOG_HIGH && c.status == "True")
        .and_then(|c| u64::try_from(c.last_transition_time.0.as_millisecond()).ok());
    let state = match (status.alert_state.as_deref(), breaching) {
        (Some("Firing"), Some(b)) => Some(AlertState::Firing {
            since: fired.unwrap_or(b),
        }),
        (Some("Pending"), Some(b)) => Some(AlertState::Pending { since: b }),
        _ => None,
    };
    if let Some(state) = state {
        e.resume_state(state, breaching);
    }
    e
}

/// Events for a change of the `BacklogHigh` condition from `before` to `after` (only on
/// a status change): Warning `BacklogHigh` / `GrowthHigh` when it becomes `True`, Normal
/// `BacklogResolved` when it leaves `True`, Warning with the reason when it becomes
/// `Unknown`. Pure.
pub fn backlog_events(before: &DeadLetterQueueStatus, after: &DeadLetterQueueStatus) -> Vec<Note> {
    let find = |s: &DeadLetterQueueStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .cloned()
    };
    let (Some(new), old) = (find(after), find(before)) else {
        return Vec::new();
    };
    let old_status = old.as_ref().map(|c| c.status.as_str());
    if old_status == Some(new.status.as_str()) {
        return Vec::new();
    }
    match new.status.as_str() {
        "True" => vec![Note::warning(&new.reason, "Monitor", new.message)],
        "Unknown" => vec![Note::warning(&new.reason, "Monitor", new.message)],
        _ if old_status == Some("True") => vec![Note::normal(
            "BacklogResolved",
            "Monitor",
            format!("{} ({})", new.message, new.reason),
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::backlog::STATUS_INTERVAL;
    use crate::controller::test_support::at;
    use crate::crd::DepthStatus;

    fn params() -> Params {
        let spec: crate::crd::MonitoringSpec = serde_json::from_value(serde_json::json!({
            "interval": "10s", "baseline": {"mode": "Static", "value": 100},
            "threshold": 1100, "for": "30s"}))
        .expect("spec");
        Params::from_spec(&spec).expect("params")
    }

    /// Feeds `(t in s, depth)` samples through an evaluator and `backlog_status`, as the
    /// monitor does; returns, per sample, the written status (if any).
    fn run(samples: &[(i64, u64)]) -> Vec<Option<DeadLetterQueueStatus>> {
        let p = params();
        let mut e = crate::monitor::Evaluator::new(p.clone());
        let mut current = DeadLetterQueueStatus::default();
        samples
            .iter()
            .map(|&(t, d)| {
                let eval = e.observe(t as u64 * 1000, d);
                let depth = DepthStatus {
                    dead_letter: d,
                    ..Default::default()
                };
                let next = backlog_status(
                    &current,
                    Some(1),
                    Reading::Observed {
                        depth: &depth,
                        eval: &eval,
                        inbox: None,
                        via: "http://node-1:15672/",
                    },
                    &p,
                    None,
                    &at(t),
                    STATUS_INTERVAL,
                );
                if let Some(n) = &next {
                    current = n.clone();
                }
                next
            })
            .collect()
    }

    fn condition(s: &DeadLetterQueueStatus) -> (String, String) {
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .expect("BacklogHigh");
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn writes_on_state_changes_and_figures_at_most_every_status_interval() {
        // Steady 0, then a breach held past `for` (30 s), then recovery.
        let out = run(&[
            (0, 0),
            (10, 0),
            (20, 5),
            (80, 7),
            (90, 2000),
            (100, 2000),
            (120, 2000),
            (130, 50),
        ]);
        let written: Vec<bool> = out.iter().map(Option::is_some).collect();
        assert_eq!(
            written,
            [true, false, false, true, true, false, true, true],
            "first sample; steady; figure change within 1 min; figure change after 1 min; Pending; still Pending; Firing; resolved"
        );
        let first = out[0].as_ref().expect("written");
        assert_eq!(condition(first), ("False".into(), "BacklogNormal".into()));
        assert_eq!(first.backlog_ratio, Some(-0.1));
        assert_eq!(first.alert_state.as_deref(), Some("Inactive"));
        assert_eq!(first.last_observed_time, Some(at(0).0.to_string()));
        let pending = out[4].as_ref().expect("written");
        assert_eq!(
            condition(pending),
            ("False".into(), "BacklogPending".into())
        );
        assert_eq!(pending.backlog_ratio, Some(1.9));
        assert_eq!(pending.breaching_since, Some(at(90).0.to_string()));
        let firing = out[6].as_ref().expect("written");
        assert_eq!(condition(firing), ("True".into(), "BacklogHigh".into()));
        assert_eq!(firing.alert_state.as_deref(), Some("Firing"));
        assert_eq!(firing.breaching_since, Some(at(90).0.to_string()));
        // The condition's transition time is the Firing evaluation; the message has no
        // live numbers.
        let c = firing
            .conditions
            .iter()
            .find(|c| c.type_ == BACKLOG_HIGH)
            .expect("condition");
        assert_eq!(c.last_transition_time, at(120));
        assert!(!c.message.contains("2000"), "{}", c.message);
        let resolved = out[7].as_ref().expect("written");
        assert_eq!(
            condition(resolved),
            ("False".into(), "BacklogNormal".into())
        );
        assert_eq!(resolved.breaching_since, None);
        // Only the backlog part is written: nothing the reconcile owns.
        assert!(resolved.topology.is_none() && resolved.observed_generation.is_none());
    }

    #[test]
    fn an_unknown_reading_clears_the_figures_and_keeps_the_baseline() {
        let p = params();
        let eval = crate::monitor::Evaluator::new(p.clone()).observe(0, 600);
        let depth = DepthStatus {
            dead_letter: 600,
            ..Default::default()
        };
        let observed = backlog_status(
            &DeadLetterQueueStatus::default(),
            Some(3),
            Reading::Observed {
                depth: &depth,
                eval: &eval,
                inbox: None,
                via: "http://node-1:15672/",
            },
            &p,
            None,
            &at(0),
            STATUS_INTERVAL,
        )
        .expect("first write");
        assert_eq!(observed.backlog_ratio, Some(0.5));
        let unknown = backlog_status(
            &observed,
            Some(3),
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            &p,
            None,
            &at(5),
            STATUS_INTERVAL,
        )
        .expect("a condition change is written at once");
        assert_eq!(
            condition(&unknown),
            ("Unknown".into(), "BrokerUnreachable".into())
        );
        assert_eq!(unknown.backlog_ratio, None, "unknown, not zero");
        assert_eq!(unknown.depth, observed.depth, "last observed, dated");
        assert_eq!(unknown.last_observed_time, observed.last_observed_time);
        assert_eq!(unknown.baseline, Some(100.0));
        assert_eq!(unknown.alert_state.as_deref(), Some("Unknown"));
        let events = backlog_events(&observed, &unknown);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "BrokerUnreachable");
        // Still unreachable: nothing new to write.
        assert!(backlog_status(
            &unknown,
            Some(3),
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            &p,
            None,
            &at(200),
            STATUS_INTERVAL,
        )
        .is_none());
    }

    #[test]
    fn events_on_firing_and_resolution_only() {
        let out = run(&[(0, 2000), (10, 2000), (20, 2000), (30, 2000), (40, 0)]);
        let statuses: Vec<DeadLetterQueueStatus> = out.into_iter().flatten().collect();
        let mut reasons = Vec::new();
        let mut before = DeadLetterQueueStatus::default();
        for s in &statuses {
            reasons.extend(backlog_events(&before, s).into_iter().map(|n| n.reason));
            before = s.clone();
        }
        assert_eq!(reasons, ["BacklogHigh", "BacklogResolved"]);
    }

    #[test]
    fn a_restart_resumes_a_firing_alert_without_a_false_resolution() {
        // Fire, as before a restart.
        let out = run(&[(0, 2000), (10, 2000), (20, 2000), (30, 2000)]);
        let before = out.into_iter().flatten().last().expect("written");
        assert_eq!(before.alert_state.as_deref(), Some("Firing"));
        // A new process: the evaluator comes from status; the next poll is still firing,
        // so nothing is written and no Event says it resolved.
        let p = params();
        let mut e = resumed_evaluator(&p, &before, 300_000);
        let eval = e.observe(300_000, 2000);
        assert_eq!(eval.state.name(), "Firing");
        let depth = DepthStatus {
            dead_letter: 2000,
            ..Default::default()
        };
        let next = backlog_status(
            &before,
            Some(1),
            Reading::Observed {
                depth: &depth,
                eval: &eval,
                inbox: None,
                via: "http://node-1:15672/",
            },
            &p,
            None,
            &at(300),
            STATUS_INTERVAL,
        );
        if let Some(n) = &next {
            assert!(backlog_events(&before, n).is_empty(), "{n:?}");
            assert_eq!(n.alert_state.as_deref(), Some("Firing"));
        }
    }

    #[test]
    fn router_ready_is_written_at_once_on_change_and_never_in_a_steady_state() {
        let p = params();
        let mut e = crate::monitor::Evaluator::new(p.clone());
        let mut current = DeadLetterQueueStatus::default();
        let mut written = Vec::new();
        let router_ready = |s: &DeadLetterQueueStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == crate::status::conditions::ROUTER_READY)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        // (t in s, inbox depth, consumers, router mode)
        for (t, inbox_depth, consumers, router) in [
            (0, 0, Some(1), true),    // first reading: written
            (10, 3, Some(1), true),   // figures within a minute: nothing
            (20, 0, Some(1), true),   // steady
            (30, 40, Some(0), true),  // router gone: written at once
            (40, 45, Some(0), true),  // still none: nothing
            (50, 45, Some(0), false), // router mode off: the condition goes at once
            (55, 45, Some(0), false), // steady without it
        ] {
            let eval = e.observe(t as u64 * 1000, 0);
            let depth = DepthStatus {
                inbox: router.then_some(inbox_depth),
                ..Default::default()
            };
            let inbox = crate::collector::ObservedInbox {
                name: "orders.router".into(),
                depth: inbox_depth,
                consumers,
                missing: false,
                // No consumer for the whole grace period (the grace itself: router.rs).
                no_consumer_for_ms: (consumers == Some(0))
                    .then_some(crate::status::router::NO_CONSUMER_GRACE_MS),
            };
            let next = backlog_status(
                &current,
                Some(1),
                Reading::Observed {
                    depth: &depth,
                    eval: &eval,
                    inbox: router.then_some(&inbox),
                    via: "http://node-1:15672/",
                },
                &p,
                router.then_some(1000),
                &at(t),
                STATUS_INTERVAL,
            );
            written.push(next.as_ref().map(router_ready));
            if let Some(n) = next {
                current = n;
            }
        }
        let ready = |s: &str, r: &str| Some(Some((s.to_string(), r.to_string())));
        assert_eq!(
            written,
            [
                ready("True", "Consuming"),
                None,
                None,
                ready("False", "NoConsumer"),
                None,
                Some(None),
                None
            ]
        );
        // Unknown while the broker cannot be read, in router mode.
        let unknown = backlog_status(
            &DeadLetterQueueStatus::default(),
            Some(1),
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            &p,
            Some(1000),
            &at(60),
            STATUS_INTERVAL,
        )
        .expect("written");
        assert_eq!(
            router_ready(&unknown),
            Some(("Unknown".into(), "BrokerUnreachable".into()))
        );
    }

    #[test]
    fn broker_reachable_names_the_address_in_use_and_is_written_only_when_it_changes() {
        let p = params();
        let mut e = crate::monitor::Evaluator::new(p.clone());
        let depth = DepthStatus::default();
        let mut current = DeadLetterQueueStatus::default();
        let mut step = |t: i64, via: Option<&str>| {
            let eval = e.observe(t as u64 * 1000, 0);
            let reading = match via {
                Some(via) => Reading::Observed {
                    depth: &depth,
                    eval: &eval,
                    inbox: None,
                    via,
                },
                None => Reading::Unknown {
                    reason: "BrokerUnreachable",
                    message: "broker at every address (http://a/, http://b/) is unreachable",
                },
            };
            let next = backlog_status(
                &current,
                Some(1),
                reading,
                &p,
                None,
                &at(t),
                STATUS_INTERVAL,
            );
            let notes = next
                .as_ref()
                .map(|n| reachable_events(&current.conditions, &n.conditions))
                .unwrap_or_default();
            if let Some(n) = &next {
                current = n.clone();
            }
            let c = current
                .conditions
                .iter()
                .find(|c| c.type_ == BROKER_REACHABLE)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
            (
                next.is_some(),
                c,
                notes.into_iter().map(|n| n.reason).collect::<Vec<_>>(),
            )
        };
        let a = "http://a/ (address 1 of 2)";
        let b = "http://b/ (address 2 of 2)";
        let (written, c, notes) = step(0, Some(a));
        assert!(written);
        assert_eq!(
            c,
            Some((
                "True".into(),
                "Reachable".into(),
                format!("queue depths read through {a}")
            ))
        );
        assert!(notes.is_empty(), "no Event for the first reading");
        assert!(!step(10, Some(a)).0, "a steady state writes nothing");
        let (written, c, notes) = step(20, Some(b));
        assert!(written, "another node in use is written at once");
        assert_eq!(
            c.map(|c| c.2),
            Some(format!("queue depths read through {b}"))
        );
        assert_eq!(notes, ["BrokerAddressChanged"]);
        let (written, c, notes) = step(30, None);
        assert!(written);
        let (status, reason, message) = c.expect("condition");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "BrokerUnreachable")
        );
        assert!(
            message.contains("every address (http://a/, http://b/)"),
            "{message}"
        );
        assert!(notes.is_empty(), "BacklogHigh's Event tells the loss once");
        assert!(!step(40, None).0, "still unreachable: nothing new");
        let (written, c, notes) = step(50, Some(a));
        assert!(written);
        assert_eq!(c.map(|c| c.0), Some("True".into()));
        assert_eq!(
            notes,
            ["BrokerReachable"],
            "recovered by itself, and said so"
        );
    }
}
