//! The retry router seen from outside (pure): the `RouterReady` condition of a
//! DeadLetterQueue in router mode from its inbox's depth and consumers
//! ([`router_condition`]), setting or removing it ([`set_router_condition`]), and the
//! Events of a change ([`router_events`]). Used by the controller's backlog monitor (status
//! and Events) and by `run --standalone` (its log lines).
//!
//! Nothing is lost while no router runs: the source dead-letters into the inbox, which
//! keeps the messages until a router consumes them. The condition makes that visible.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::reading::Reading;
use crate::collector::ObservedInbox;
use crate::status::conditions::{self, ConditionStatus, Desired, ROUTER_READY};
use crate::status::Note;

/// Reason of the Normal Event when `RouterReady` turns `True` again.
pub const ROUTER_CONSUMING_EVENT: &str = "RouterConsuming";

/// How long (ms) an inbox may have no consumer before `RouterReady` says `NoConsumer`:
/// 60 s, so that a router that restarts or reconnects (its pauses grow to 30 s), a new
/// router still connecting after the first apply, or a leader failover does not flap the
/// condition and send Events. Meanwhile the condition stays as it was (or absent).
pub const NO_CONSUMER_GRACE_MS: u64 = 60_000;

/// How to start a retry router, for the condition messages.
const START_ONE: &str = "start one: `dlq-operator router` (reads the cluster's DeadLetterQueues), `dlq-operator router --standalone -f DIR`, or an operator with --embedded-router=true (docs/TROUBLESHOOTING.md, \"The router inbox backs up\")";

/// The `RouterReady` condition for one inbox reading, or `None` while the inbox has had
/// no consumer for less than [`NO_CONSUMER_GRACE_MS`] (the condition stays as it was).
/// Its messages carry no live number but the configured threshold, so a steady state does
/// not change it.
///
/// - `True`, `Consuming`: at least one consumer and a depth ≤ `backlog_threshold`.
/// - `False`, `NoConsumer`: the inbox exists with no consumer, for at least
///   [`NO_CONSUMER_GRACE_MS`] (it may hold messages: they wait there, nothing is lost);
///   `InboxBackedUp`: consumed, but its depth is above
///   `backlog_threshold` (`spec.router.backlogThreshold`); `InboxMissing`: the broker does
///   not have the inbox, so the source's dead letters cannot reach it.
/// - `Unknown`: the depths cannot be read (the reading's reason, as for `BacklogHigh`), or
///   the listing has no consumer count for the inbox yet (`ConsumersUnknown`).
pub fn router_condition(reading: Reading<'_>, backlog_threshold: u64) -> Option<Desired> {
    let (status, reason, message) = match reading {
        Reading::Unknown { reason, message } => (
            ConditionStatus::Unknown,
            reason,
            format!("queue depths cannot be read: {message}"),
        ),
        Reading::Observed { inbox, .. } => {
            let in_grace = inbox.is_some_and(|i| {
                i.consumers == Some(0)
                    && !i.missing
                    && i.no_consumer_for_ms.unwrap_or(0) < NO_CONSUMER_GRACE_MS
            });
            if in_grace {
                return None;
            }
            inbox_verdict(inbox, backlog_threshold)
        }
    };
    Some(Desired {
        type_: ROUTER_READY,
        status,
        reason,
        message,
    })
}

/// Status, reason and message of an observed inbox (`None`: the plan has none, which
/// router mode never plans: reported as missing).
fn inbox_verdict(
    inbox: Option<&ObservedInbox>,
    threshold: u64,
) -> (ConditionStatus, &'static str, String) {
    let Some(inbox) = inbox.filter(|i| !i.missing) else {
        let name = inbox.map_or("<source>.router", |i| i.name.as_str());
        return (
            ConditionStatus::False,
            "InboxMissing",
            format!(
                "the router inbox {name} does not exist on the broker, so the source queue's dead letters cannot reach it; the reconcile declares it (see the Ready condition)"
            ),
        );
    };
    let name = &inbox.name;
    match inbox.consumers {
        None => (
            ConditionStatus::Unknown,
            "ConsumersUnknown",
            format!(
                "the broker reports no consumer count for the router inbox {name} yet (a new queue has statistics after the broker's statistics interval, 5 s by default)"
            ),
        ),
        Some(0) => (
            ConditionStatus::False,
            "NoConsumer",
            format!(
                "no retry router consumes {name}; failed messages wait there, nothing is lost; {START_ONE}"
            ),
        ),
        Some(_) if inbox.depth > threshold => (
            ConditionStatus::False,
            "InboxBackedUp",
            format!(
                "the router inbox {name} holds more than spec.router.backlogThreshold ({threshold}) messages although a retry router consumes it: the routers do not keep up or cannot publish (dlq_router_publish_failures_total); nothing is lost; add router replicas, raise spec.router.prefetch, or act on the publish errors"
            ),
        ),
        Some(_) => (
            ConditionStatus::True,
            "Consuming",
            format!(
                "a retry router consumes {name} and it holds at most spec.router.backlogThreshold ({threshold}) messages"
            ),
        ),
    }
}

/// Sets `RouterReady` for `reading` when `router` (`spec.router.backlogThreshold` of a
/// resource in router mode) is given (leaves it as it is within the no-consumer grace
/// period), or removes it otherwise (router mode turned off); returns whether
/// `conditions` changed.
pub fn set_router_condition(
    conditions: &mut Vec<Condition>,
    router: Option<u64>,
    reading: Reading<'_>,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    match router {
        Some(threshold) => router_condition(reading, threshold)
            .is_some_and(|desired| conditions::set(conditions, &desired, generation, now)),
        None => conditions::remove(conditions, ROUTER_READY),
    }
}

/// Events for a change of `RouterReady` from `before` to `after` (only on a status
/// change): a Warning with the reason when it becomes `False` or changes its `False`
/// reason (e.g. `NoConsumer` → `InboxBackedUp`), a Normal [`ROUTER_CONSUMING_EVENT`] when it
/// becomes `True` after `False` or `Unknown`. `Unknown` itself makes no Event: the
/// `BacklogHigh` Warning already reports an unreadable broker. Pure.
pub fn router_events(before: &[Condition], after: &[Condition]) -> Vec<Note> {
    let find = |cs: &[Condition]| cs.iter().find(|c| c.type_ == ROUTER_READY).cloned();
    let (Some(new), old) = (find(after), find(before)) else {
        return Vec::new();
    };
    let old = old.as_ref().map(|c| (c.status.as_str(), c.reason.as_str()));
    match new.status.as_str() {
        "False" if old != Some(("False", new.reason.as_str())) => {
            vec![Note::warning(&new.reason, "Monitor", new.message)]
        }
        "True" if matches!(old, Some(("False" | "Unknown", _))) => {
            vec![Note::normal(ROUTER_CONSUMING_EVENT, "Monitor", new.message)]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;
    use crate::crd::DepthStatus;
    use crate::monitor::{Evaluation, Evaluator, Params};

    /// An inbox seen with `consumers`; when it has none, for the whole grace period.
    fn inbox(depth: u64, consumers: Option<u64>) -> ObservedInbox {
        ObservedInbox {
            name: "orders.router".into(),
            depth,
            consumers,
            missing: false,
            no_consumer_for_ms: (consumers == Some(0)).then_some(NO_CONSUMER_GRACE_MS),
        }
    }

    fn evaluation() -> Evaluation {
        Evaluator::new(Params::from_spec(&Default::default()).expect("params")).observe(0, 0)
    }

    /// `RouterReady` for `inbox` against a threshold of 1000 (`None` within the grace
    /// period).
    fn desired(inbox: Option<&ObservedInbox>) -> Option<Desired> {
        let (eval, depth) = (evaluation(), DepthStatus::default());
        let reading = Reading::Observed {
            depth: &depth,
            eval: &eval,
            inbox,
            via: "the in-memory broker",
        };
        router_condition(reading, 1000)
    }

    /// Its status and reason.
    fn verdict(inbox: Option<&ObservedInbox>) -> Option<(ConditionStatus, &'static str)> {
        desired(inbox).map(|d| {
            assert_eq!(d.type_, ROUTER_READY);
            (d.status, d.reason)
        })
    }

    #[test]
    fn the_condition_follows_consumers_and_depth() {
        use ConditionStatus::*;
        let v = |depth, consumers| verdict(Some(&inbox(depth, consumers)));
        assert_eq!(v(0, Some(1)), Some((True, "Consuming")));
        assert_eq!(
            v(1000, Some(3)),
            Some((True, "Consuming")),
            "at the threshold"
        );
        assert_eq!(v(1001, Some(3)), Some((False, "InboxBackedUp")));
        assert_eq!(
            v(0, Some(0)),
            Some((False, "NoConsumer")),
            "an empty inbox without a consumer: the next failure would wait"
        );
        assert_eq!(
            v(5000, Some(0)),
            Some((False, "NoConsumer")),
            "no consumer comes before backed up: it is the cause"
        );
        // Within the grace period nothing is said yet.
        let mut brief = inbox(5000, Some(0));
        brief.no_consumer_for_ms = Some(NO_CONSUMER_GRACE_MS - 1);
        assert_eq!(verdict(Some(&brief)), None);
        brief.no_consumer_for_ms = None;
        assert_eq!(verdict(Some(&brief)), None, "not tracked yet: a first poll");
        assert_eq!(v(7, None), Some((Unknown, "ConsumersUnknown")));
        let mut gone = inbox(0, None);
        gone.missing = true;
        assert_eq!(verdict(Some(&gone)), Some((False, "InboxMissing")));
        assert_eq!(verdict(None), Some((False, "InboxMissing")));
        let unknown = router_condition(
            Reading::Unknown {
                reason: "BrokerUnreachable",
                message: "connection refused",
            },
            1000,
        )
        .expect("a verdict");
        assert_eq!(
            (unknown.status, unknown.reason),
            (Unknown, "BrokerUnreachable")
        );
    }

    #[test]
    fn the_no_consumer_message_says_nothing_is_lost_and_how_to_start_one() {
        let message = |i: ObservedInbox| desired(Some(&i)).expect("a verdict").message;
        let m = message(inbox(40, Some(0)));
        assert!(
            m.starts_with("no retry router consumes orders.router; failed messages wait there, nothing is lost; start one: `dlq-operator router`"),
            "{m}"
        );
        // No live number: the same message at another depth, so no status write.
        assert_eq!(m, message(inbox(41, Some(0))));
        assert_eq!(message(inbox(5, Some(1))), message(inbox(6, Some(2))));
        assert!(message(inbox(2000, Some(1))).contains("backlogThreshold (1000)"));
    }

    /// The conditions after `set_router_condition` of `inbox` on `conditions` at `t` s, and
    /// whether they changed.
    fn step(
        conditions: &[Condition],
        router: Option<u64>,
        inbox: ObservedInbox,
        t: i64,
    ) -> (Vec<Condition>, bool) {
        let (eval, depth) = (evaluation(), DepthStatus::default());
        let mut next = conditions.to_vec();
        let reading = Reading::Observed {
            depth: &depth,
            eval: &eval,
            inbox: Some(&inbox),
            via: "the in-memory broker",
        };
        let changed = set_router_condition(&mut next, router, reading, Some(1), &at(t));
        (next, changed)
    }

    #[test]
    fn events_on_each_transition_to_false_and_back_to_true_only() {
        let mut conds: Vec<Condition> = Vec::new();
        let mut events = Vec::new();
        let mut changes = Vec::new();
        let mut brief = inbox(0, Some(0));
        brief.no_consumer_for_ms = Some(1_000);
        for (t, i) in [
            (0, brief.clone()),          // no consumer, just now: nothing said
            (60, inbox(0, Some(0))),     // for the grace period: NoConsumer
            (70, inbox(30, Some(0))),    // messages wait: same condition
            (80, inbox(30, Some(1))),    // a router: Consuming
            (90, brief.clone()),         // it restarts: still Consuming
            (100, inbox(0, Some(1))),    // back: steady
            (110, inbox(5000, Some(2))), // backed up
            (120, inbox(6000, Some(0))), // router gone too: another False reason
            (130, inbox(7, None)),       // count unknown
            (140, inbox(0, Some(1))),    // Consuming again
        ] {
            let (next, changed) = step(&conds, Some(1000), i, t);
            changes.push(changed);
            events.extend(router_events(&conds, &next).into_iter().map(|n| {
                let warning = n.type_ == kube::runtime::events::EventType::Warning;
                (warning, n.reason)
            }));
            conds = next;
        }
        assert_eq!(
            changes,
            [false, true, false, true, false, false, true, true, true, true]
        );
        let warning = |r: &str| (true, r.to_string());
        let normal = |r: &str| (false, r.to_string());
        assert_eq!(
            events,
            [
                warning("NoConsumer"),
                normal(ROUTER_CONSUMING_EVENT),
                warning("InboxBackedUp"),
                warning("NoConsumer"),
                normal(ROUTER_CONSUMING_EVENT),
            ]
        );
        // The transition time moved with the status only.
        assert_eq!(conds[0].last_transition_time, at(140));
        // Router mode turned off: the condition goes, once, without an Event.
        let (off, changed) = step(&conds, None, inbox(0, Some(1)), 150);
        assert!(changed && off.is_empty());
        assert!(router_events(&conds, &off).is_empty());
        assert!(!step(&off, None, inbox(0, Some(1)), 160).1);
    }
}
