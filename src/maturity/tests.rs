//! Table tests of the maturity items, the score and the weights.

use super::*;
use crate::crd::{DeadLetterQueueSpec, RetryPolicySpec};

/// A DeadLetterQueue spec from JSON, with `over` merged into a minimal valid one.
fn dlq(over: serde_json::Value) -> DeadLetterQueueSpec {
    let mut base = serde_json::json!({
        "broker": {"secretRef": {"name": "s"}},
        "source": {"queue": "orders"},
        "retryPolicyRef": {"name": "orders-retry"},
    });
    merge(&mut base, over);
    serde_json::from_value(base).expect("DeadLetterQueue spec")
}

/// A RetryPolicy spec from JSON, merged into a minimal valid one.
fn policy(over: serde_json::Value) -> RetryPolicySpec {
    let mut base = serde_json::json!({"maxRetries": 3});
    merge(&mut base, over);
    serde_json::from_value(base).expect("RetryPolicy spec")
}

fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// The spec where nothing holds that the spec decides: a classic source, `DropHead`, no
/// partitions, no threshold, alert rules off, no growth rule.
fn bare_dlq() -> DeadLetterQueueSpec {
    dlq(serde_json::json!({
        "source": {"queueType": "Classic"},
        "deadLetter": {"overflow": "DropHead"},
        "alerting": {"prometheusRule": {"enabled": false}},
    }))
}

/// A policy where nothing holds: no jitter, every class retried, no retry window.
fn bare_policy() -> RetryPolicySpec {
    policy(serde_json::json!({
        "backoff": {"strategy": "Exponential"},
        "classification": {"retryable": [], "deadLetter": [], "default": "Retry"},
    }))
}

fn holding(checks: &[Check]) -> Vec<Item> {
    checks.iter().filter(|c| c.holds).map(|c| c.item).collect()
}

#[test]
fn nothing_holds_scores_zero_and_everything_holds_scores_one() {
    let spec = bare_dlq();
    let bare = Facts {
        spec: &spec,
        policy: Policy::Unusable,
        live: Live::default(),
    };
    let m = evaluate(&bare, &Weights::default());
    assert_eq!(holding(&m.checks), Vec::<Item>::new());
    assert_eq!(
        (m.score, m.retry, m.dead_letter, m.monitoring),
        (0.0, 0.0, 0.0, 0.0)
    );
    assert_eq!(m.missing(&Weights::default()).len(), Item::ALL.len());

    let spec = dlq(serde_json::json!({
        "deadLetter": {"partitionBy": "ErrorClass"},
        "monitoring": {"threshold": 100, "growthPerMinute": 10},
    }));
    let p = policy(serde_json::json!({
        "backoff": {"strategy": "FullJitter"}, "maxRetryDuration": "1h"}));
    let all = Facts {
        spec: &spec,
        policy: Policy::Found {
            spec: &p,
            ready: true,
        },
        live: Live {
            from_files: false,
            router_consuming: false,
            retries_seen: true,
            replayed: true,
            alert_rules: true,
        },
    };
    let m = evaluate(&all, &Weights::default());
    assert_eq!(holding(&m.checks), Item::ALL.to_vec());
    assert!((m.score - 1.0).abs() < 1e-12, "{}", m.score);
    assert!(m.missing(&Weights::default()).is_empty());
}

/// Each item's fix, applied to the bare facts: (item, DeadLetterQueue spec change,
/// RetryPolicy spec change, policy ready, what was seen).
#[allow(clippy::type_complexity)]
fn fixes() -> Vec<(Item, serde_json::Value, serde_json::Value, Live)> {
    let none = serde_json::json!({});
    let seen = Live::default();
    vec![
        (Item::RetryPolicyReady, none.clone(), none.clone(), seen),
        (
            Item::JitteredBackoff,
            none.clone(),
            serde_json::json!({"backoff": {"strategy": "DecorrelatedJitter"}}),
            seen,
        ),
        (
            Item::NonRetryableClasses,
            none.clone(),
            serde_json::json!({"classification": {"deadLetter": ["Poison"]}}),
            seen,
        ),
        (
            Item::RetryWindow,
            none.clone(),
            serde_json::json!({"maxRetryDuration": "30m"}),
            seen,
        ),
        (
            Item::LiveRetryPath,
            none.clone(),
            none.clone(),
            Live {
                router_consuming: true,
                ..seen
            },
        ),
        (
            Item::AtLeastOnce,
            serde_json::json!({"source": {"queueType": "Quorum"}}),
            none.clone(),
            seen,
        ),
        (
            Item::RetentionAndCapacity,
            serde_json::json!({"deadLetter": {"overflow": "RejectPublish"}}),
            none.clone(),
            seen,
        ),
        (
            Item::Partitioned,
            serde_json::json!({"deadLetter": {"partitionBy": "ErrorClass"}}),
            none.clone(),
            seen,
        ),
        (
            Item::Replayed,
            none.clone(),
            none.clone(),
            Live {
                replayed: true,
                ..seen
            },
        ),
        (
            Item::Threshold,
            serde_json::json!({"monitoring": {"thresholdFactor": 2.5}}),
            none.clone(),
            seen,
        ),
        (
            Item::AlertRules,
            none.clone(),
            none.clone(),
            Live {
                alert_rules: true,
                ..seen
            },
        ),
        (
            Item::GrowthRule,
            serde_json::json!({"monitoring": {"growthPerMinute": 5}}),
            none,
            seen,
        ),
    ]
}

#[test]
fn fixing_each_missing_item_raises_the_score_by_exactly_its_share() {
    let weightings = [
        Weights::default(),
        Weights::new(0.5, 0.3, 0.2).expect("weights"),
        Weights::new(0.0, 0.0, 1.0).expect("weights"),
    ];
    // From a policy that is found but not Ready, so the policy items are checked.
    let bare_spec = bare_dlq();
    let bare_p = bare_policy();
    let before = |w: &Weights| {
        evaluate(
            &Facts {
                spec: &bare_spec,
                policy: Policy::Found {
                    spec: &bare_p,
                    ready: false,
                },
                live: Live::default(),
            },
            w,
        )
    };
    assert_eq!(
        holding(&before(&Weights::default()).checks),
        Vec::<Item>::new()
    );
    let table = fixes();
    assert_eq!(
        table.iter().map(|f| f.0).collect::<Vec<_>>(),
        Item::ALL.to_vec(),
        "one fix per item"
    );
    for w in &weightings {
        let base = before(w);
        for (item, spec_fix, policy_fix, live) in &table {
            let mut s = serde_json::to_value(&bare_spec).expect("json");
            merge(&mut s, spec_fix.clone());
            let spec: DeadLetterQueueSpec = serde_json::from_value(s).expect("spec");
            let mut p = serde_json::to_value(&bare_p).expect("json");
            merge(&mut p, policy_fix.clone());
            let p: RetryPolicySpec = serde_json::from_value(p).expect("policy");
            let after = evaluate(
                &Facts {
                    spec: &spec,
                    policy: Policy::Found {
                        spec: &p,
                        ready: *item == Item::RetryPolicyReady,
                    },
                    live: *live,
                },
                w,
            );
            assert_eq!(holding(&after.checks), vec![*item], "{item:?} alone holds");
            let gain = after.score - base.score;
            assert!(
                (gain - share(*item, w)).abs() < 1e-12,
                "{item:?} under {w}: gained {gain}, its share is {}",
                share(*item, w)
            );
            assert_eq!(after.missing(w).len(), Item::ALL.len() - 1);
        }
    }
    // The default shares: 0.4/5 per retry item, 0.4/4 per dead-letter item, 0.2/3 per
    // monitoring item.
    let w = Weights::default();
    assert!((share(Item::RetryWindow, &w) - 0.08).abs() < 1e-12);
    assert!((share(Item::Replayed, &w) - 0.1).abs() < 1e-12);
    assert!((share(Item::GrowthRule, &w) - 0.2 / 3.0).abs() < 1e-12);
}

#[test]
fn jitter_counts_only_when_it_spreads_the_delays() {
    let cases = [
        (serde_json::json!({"strategy": "Fixed"}), false),
        (serde_json::json!({"strategy": "Exponential"}), false),
        (
            serde_json::json!({"strategy": "ExponentialJitter", "jitter": "2s"}),
            true,
        ),
        (
            serde_json::json!({"strategy": "ExponentialJitter", "jitter": "0s"}),
            false,
        ),
        (
            serde_json::json!({"strategy": "ExponentialJitter", "jitterRatio": 0.1}),
            true,
        ),
        (
            serde_json::json!({"strategy": "ExponentialJitter", "jitterRatio": 0.0}),
            false,
        ),
        (serde_json::json!({"strategy": "FullJitter"}), true),
        (serde_json::json!({"strategy": "EqualJitter"}), true),
        (serde_json::json!({"strategy": "DecorrelatedJitter"}), true),
    ];
    for (backoff, expected) in cases {
        let p = policy(serde_json::json!({ "backoff": backoff }));
        assert_eq!(jittered(&p), expected, "{backoff}");
    }
}

#[test]
fn classification_counts_when_some_class_is_dead_lettered_at_once() {
    let cases = [
        (serde_json::json!({}), true),
        (
            serde_json::json!({"retryable": [], "deadLetter": [], "default": "Retry"}),
            false,
        ),
        (
            serde_json::json!({"retryable": [], "deadLetter": [], "default": "DeadLetter"}),
            true,
        ),
        (
            serde_json::json!({"deadLetter": [], "default": "Retry"}),
            false,
        ),
        (
            serde_json::json!({"deadLetter": ["Parse"], "default": "Retry"}),
            true,
        ),
    ];
    for (classification, expected) in cases {
        let p = policy(serde_json::json!({ "classification": classification }));
        assert_eq!(classifies(&p), expected, "{classification}");
    }
}

#[test]
fn next_steps_name_the_field_and_come_largest_share_first() {
    let spec = bare_dlq();
    let p = bare_policy();
    let m = evaluate(
        &Facts {
            spec: &spec,
            policy: Policy::Found {
                spec: &p,
                ready: true,
            },
            live: Live::default(),
        },
        &Weights::default(),
    );
    let missing = m.missing(&Weights::default());
    // Dead-letter items (0.1 each) first, then retry (0.08), then monitoring (0.067).
    let areas: Vec<&str> = missing
        .iter()
        .map(|s| s.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        areas,
        [
            "deadLetter",
            "deadLetter",
            "deadLetter",
            "deadLetter",
            "retry",
            "retry",
            "retry",
            "retry",
            "monitoring",
            "monitoring",
            "monitoring"
        ]
    );
    assert!(
        missing[0].contains("spec.source.queueType: Quorum"),
        "{}",
        missing[0]
    );
    assert!(
        missing
            .iter()
            .any(|s| s.contains("maxRetryDuration in RetryPolicy orders-retry")),
        "{missing:?}"
    );
    assert!(
        missing
            .iter()
            .any(|s| s.contains("prometheusRule.enabled: true")),
        "{missing:?}"
    );
    // Under other weights, monitoring first.
    let w = Weights::new(0.1, 0.1, 0.8).expect("weights");
    assert!(
        m.missing(&w)[0].starts_with("monitoring:"),
        "{:?}",
        m.missing(&w)
    );
    // A missing RetryPolicy is named.
    let gone = evaluate(
        &Facts {
            spec: &spec,
            policy: Policy::Unusable,
            live: Live::default(),
        },
        &Weights::default(),
    );
    let gone = gone.missing(&Weights::default());
    assert!(
        gone.iter()
            .any(|s| s.contains("create RetryPolicy orders-retry")),
        "{gone:?}"
    );
    // Its other items say they were not checked, not how to change a policy that is not
    // there.
    assert!(
        gone.iter().any(|s| {
            s
            == "retry: jittered backoff not checked: RetryPolicy orders-retry is missing or invalid"
        }),
        "{gone:?}"
    );
    assert!(
        !gone.iter().any(|s| s.contains("spec.backoff.strategy")),
        "{gone:?}"
    );
    // In router mode, the live retry path is the router.
    let router = dlq(serde_json::json!({"router": {"enabled": true}}));
    let m = evaluate(
        &Facts {
            spec: &router,
            policy: Policy::Unusable,
            live: Live::default(),
        },
        &Weights::default(),
    );
    let missing = m.missing(&Weights::default());
    assert!(
        missing
            .iter()
            .any(|s| s.starts_with("retry: no retry router consumes the inbox orders.router")),
        "{missing:?}"
    );
    assert!(
        !missing
            .iter()
            .any(|s| s.contains("turn on spec.router.enabled")),
        "{missing:?}"
    );
    // From files the advice names the standalone commands, and says no replay can be known.
    let m = evaluate(
        &Facts {
            spec: &router,
            policy: Policy::Unusable,
            live: Live {
                from_files: true,
                ..Live::default()
            },
        },
        &Weights::default(),
    );
    let missing = m.missing(&Weights::default());
    assert!(
        missing
            .iter()
            .any(|s| s.contains("`dlq-operator router --standalone`")),
        "{missing:?}"
    );
    assert!(
        missing
            .iter()
            .any(|s| s.starts_with("deadLetter: no replay known: from files")),
        "{missing:?}"
    );
    assert!(
        !missing.iter().any(|s| s.contains("RouterReady")),
        "{missing:?}"
    );
}

#[test]
fn weights_are_three_shares_that_sum_to_one() {
    let ok = |s: &str| {
        s.parse::<Weights>()
            .map(|w| (w.retry, w.dead_letter, w.monitoring))
    };
    assert_eq!(ok("0.4,0.4,0.2"), Ok((0.4, 0.4, 0.2)));
    assert_eq!(ok(" 0.5, 0.3 ,0.2"), Ok((0.5, 0.3, 0.2)));
    assert_eq!(
        ok("0.7,0.2,0.1"),
        Ok((0.7, 0.2, 0.1)),
        "within the tolerance"
    );
    assert_eq!(ok("1,0,0"), Ok((1.0, 0.0, 0.0)));
    for bad in ["", "0.4,0.4", "0.4,0.4,0.1,0.1", "a,b,c", "0.4;0.4;0.2"] {
        assert!(
            matches!(bad.parse::<Weights>(), Err(WeightsError::Syntax(_))),
            "{bad:?}"
        );
    }
    for bad in ["-0.1,0.6,0.5", "1.5,-0.5,0", "nan,0.5,0.5", "inf,0,0"] {
        assert!(
            matches!(bad.parse::<Weights>(), Err(WeightsError::OutOfRange { .. })),
            "{bad:?}"
        );
    }
    let e = "0.5,0.5,0.5".parse::<Weights>().expect_err("sum 1.5");
    assert!(matches!(e, WeightsError::Sum { .. }));
    assert!(e.to_string().contains("sum to 1.5, not 1"), "{e}");
    assert_eq!(
        Weights::default().to_string().parse::<Weights>(),
        Ok(Weights::default())
    );
}
