//! Topology planning (docs/ARCHITECTURE.md, "Broker topology"): reviewed YAML snapshots of two realistic plans, and
//! plain assertions of the rules every plan must follow.

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::crd::{DeadLetterQueueSpec, QueueType, RetryPolicySpec};
use dlq_operator::duration::parse_ms;
use dlq_operator::topology::{plan, DesiredTopology, QueueRole};
use regex::Regex;
use serde_json::{json, Value};

const ORDER_EVENTS_DLQ: &str = r#"
broker:
  secretRef:
    name: rabbitmq
source:
  queue: order-events
  exchange: orders
  routingKey: order.created
  queueType: Quorum
retryPolicyRef:
  name: order-events
deadLetter:
  retention: 7d
  maxLength: 100000
"#;

const ORDER_EVENTS_POLICY: &str = r#"
maxRetries: 5
backoff:
  strategy: Exponential
  initialDelay: 2s
  multiplier: 3
  maxDelay: 5m
tiers: [5s, 15s, 60s, 300s]
"#;

fn order_events() -> (DeadLetterQueueSpec, ResolvedPolicy) {
    let spec: DeadLetterQueueSpec = serde_yaml_ng::from_str(ORDER_EVENTS_DLQ).expect("dlq yaml");
    let rp: RetryPolicySpec = serde_yaml_ng::from_str(ORDER_EVENTS_POLICY).expect("rp yaml");
    spec.validate().expect("valid dlq");
    (spec, ResolvedPolicy::from_spec(&rp).expect("valid rp"))
}

fn payment_callback() -> (DeadLetterQueueSpec, ResolvedPolicy) {
    let spec: DeadLetterQueueSpec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}, "vhost": "payments"},
        "source": {"queue": "payment-callback", "queueType": "Classic"},
        "retryPolicyRef": {"name": "payment-callback"},
        "deadLetter": {"partitionBy": "ErrorClass"}
    }))
    .expect("dlq json");
    let rp: RetryPolicySpec = serde_json::from_value(json!({
        "maxRetries": 3,
        "backoff": {
            "strategy": "ExponentialJitter",
            "initialDelay": "1s",
            "multiplier": 2,
            "jitterRatio": 0.2
        }
    }))
    .expect("rp json");
    spec.validate().expect("valid dlq");
    (spec, ResolvedPolicy::from_spec(&rp).expect("valid rp"))
}

fn order_events_plan() -> DesiredTopology {
    let (spec, rp) = order_events();
    plan("shop/order-events", &spec, &rp)
}

fn payment_callback_plan() -> DesiredTopology {
    let (spec, rp) = payment_callback();
    plan("payments/payment-callback", &spec, &rp)
}

#[test]
fn order_events_snapshot() {
    insta::assert_yaml_snapshot!("order_events", order_events_plan());
}

#[test]
fn payment_callback_snapshot() {
    insta::assert_yaml_snapshot!("payment_callback", payment_callback_plan());
}

fn all_plans() -> Vec<(DesiredTopology, QueueType)> {
    vec![
        (order_events_plan(), QueueType::Quorum),
        (payment_callback_plan(), QueueType::Classic),
    ]
}

#[test]
fn tiers_are_what_the_policy_says() {
    let ms = |s: &str| parse_ms(s).expect("duration");
    let tiers = |t: &DesiredTopology| -> Vec<u64> {
        t.queues
            .iter()
            .filter_map(|q| match q.role {
                QueueRole::Retry { delay_ms } => Some(delay_ms),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        tiers(&order_events_plan()),
        vec![ms("5s"), ms("15s"), ms("60s"), ms("300s")]
    );
    // No explicit tiers: the nominal schedule 1s, 2s, 4s.
    assert_eq!(
        tiers(&payment_callback_plan()),
        vec![ms("1s"), ms("2s"), ms("4s")]
    );
}

#[test]
fn tier_queues_expire_back_to_the_source() {
    for (t, qtype) in all_plans() {
        let source = &t.routes.source_queue;
        let mut seen = 0;
        for q in &t.queues {
            let QueueRole::Retry { delay_ms } = q.role else {
                continue;
            };
            seen += 1;
            let tier = q
                .name
                .strip_prefix(&format!("{source}.retry."))
                .unwrap_or_else(|| panic!("{} is not named {source}.retry.<tier>", q.name));
            assert_eq!(parse_ms(tier), Ok(delay_ms), "{}", q.name);
            assert_eq!(q.queue_type, qtype, "{}", q.name);
            let args = q.declare_arguments();
            assert_eq!(
                args.get("x-message-ttl"),
                Some(&json!(delay_ms)),
                "{}",
                q.name
            );
            assert_eq!(
                args.get("x-dead-letter-exchange"),
                Some(&json!("")),
                "{}",
                q.name
            );
            assert_eq!(
                args.get("x-dead-letter-routing-key"),
                Some(&json!(source)),
                "{}",
                q.name
            );
            assert!(
                !args.contains_key("x-expires") && !args.contains_key("expiration"),
                "{}: per-queue TTL only",
                q.name
            );
            // Bound on the retry exchange with the tier name as routing key.
            assert!(
                t.bindings
                    .iter()
                    .any(|b| b.exchange == t.routes.retry_exchange
                        && b.queue == q.name
                        && b.routing_key == tier),
                "{} is not bound on {}",
                q.name,
                t.routes.retry_exchange
            );
        }
        assert_eq!(seen, t.routes.tiers.len());
        assert!(seen > 0);
    }
}

#[test]
fn source_queue_arguments_hold_only_the_queue_type() {
    for (t, qtype) in all_plans() {
        let source: Vec<_> = t
            .queues
            .iter()
            .filter(|q| q.role == QueueRole::Source)
            .collect();
        assert_eq!(source.len(), 1);
        let args = source[0].declare_arguments();
        let want: std::collections::BTreeMap<String, Value> =
            [("x-queue-type".to_string(), json!(qtype.argument()))].into();
        assert_eq!(args, want, "{}", source[0].name);
        assert_eq!(source[0].name, t.routes.source_queue);
    }
}

#[test]
fn source_policy_routes_dead_letters_and_sets_quorum_limits() {
    for (t, qtype) in all_plans() {
        let q = &t.routes.source_queue;
        let policies: Vec<_> = t.policies.iter().filter(|p| &p.queue == q).collect();
        assert_eq!(policies.len(), 1, "one policy for {q}");
        let def = &policies[0].definition;
        assert_eq!(
            def.get("dead-letter-exchange"),
            Some(&json!(format!("{q}.dlx")))
        );
        assert_eq!(def.get("dead-letter-routing-key"), Some(&json!(q)));
        match qtype {
            QueueType::Quorum => {
                assert_eq!(def.get("delivery-limit"), Some(&json!(20)));
                assert_eq!(
                    def.get("dead-letter-strategy"),
                    Some(&json!("at-least-once"))
                );
                assert_eq!(def.get("overflow"), Some(&json!("reject-publish")));
            }
            QueueType::Classic => {
                assert!(!def.contains_key("dead-letter-strategy"), "{def:?}");
                assert!(!def.contains_key("delivery-limit"), "{def:?}");
            }
        }
    }
}

#[test]
fn dead_letter_queue_policies_carry_retention_and_capacity() {
    let t = order_events_plan();
    let p = t
        .policies
        .iter()
        .find(|p| p.queue == "order-events.dlq")
        .expect("dlq policy");
    assert_eq!(
        p.definition.get("message-ttl"),
        Some(&json!(604_800_000u64))
    );
    assert_eq!(p.definition.get("max-length"), Some(&json!(100_000)));
    assert_eq!(p.definition.get("overflow"), Some(&json!("reject-publish")));

    // Partitioned: the default dead-letter queue plus one per class, each with a policy.
    let t = payment_callback_plan();
    let dead: Vec<_> = t
        .queues
        .iter()
        .filter(|q| matches!(q.role, QueueRole::DeadLetter { .. }))
        .collect();
    assert_eq!(dead.len(), 1 + 9);
    for q in dead {
        let p = t
            .policies
            .iter()
            .find(|p| p.queue == q.name)
            .unwrap_or_else(|| panic!("no policy for {}", q.name));
        // Default retention 168h.
        assert_eq!(
            p.definition.get("message-ttl"),
            Some(&json!(604_800_000u64))
        );
    }
}

#[test]
fn policy_patterns_match_exactly_their_queue() {
    let mut plans: Vec<DesiredTopology> = all_plans().into_iter().map(|(t, _)| t).collect();
    // Queue names full of regex metacharacters.
    let (spec, rp) = order_events();
    for name in [
        "orders.v1+eu",
        "a*b?",
        "q(1)|x",
        "[x]{2}^$",
        "tab\\slash-~#&",
    ] {
        let mut s = spec.clone();
        s.source.queue = name.to_string();
        s.validate().expect("valid");
        plans.push(plan("ns/x", &s, &rp));
    }
    for t in &plans {
        let mut names: Vec<String> = t.queues.iter().map(|q| q.name.clone()).collect();
        names.extend(t.exchanges.iter().map(|e| e.name.clone()));
        let near_misses: Vec<String> = t
            .queues
            .iter()
            .flat_map(|q| {
                let n = &q.name;
                vec![
                    format!("{n}x"),
                    format!("x{n}"),
                    format!("{n}\n"),
                    n.replace('.', "X"),
                    n.to_uppercase(),
                    n[..n.len() - 1].to_string(),
                ]
            })
            .filter(|m| !names.contains(m))
            .collect();
        assert_eq!(t.policies.len(), t.queues.len() - t.routes.tiers.len());
        for p in &t.policies {
            assert!(
                p.pattern.starts_with('^') && p.pattern.ends_with('$'),
                "{}",
                p.pattern
            );
            let re = Regex::new(&p.pattern).expect("pattern compiles");
            for n in names.iter().chain(&near_misses) {
                assert_eq!(
                    re.is_match(n),
                    *n == p.queue,
                    "policy {} pattern {} vs {n:?}",
                    p.name,
                    p.pattern
                );
            }
            assert!(t.queues.iter().any(|q| q.name == p.queue));
        }
    }
}

#[test]
fn dead_letter_route_comes_before_the_source_queue() {
    for (t, _) in all_plans() {
        let q = &t.routes.source_queue;
        let dlx = &t.routes.dead_letter_exchange;
        assert_eq!(
            &t.exchanges[0].name, dlx,
            "dead-letter exchange declared first"
        );
        let pos = |name: &str| {
            t.queues
                .iter()
                .position(|x| x.name == name)
                .unwrap_or_else(|| panic!("no queue {name}"))
        };
        let source = pos(q);
        for (i, x) in t.queues.iter().enumerate() {
            if matches!(x.role, QueueRole::DeadLetter { .. }) {
                assert!(i < source, "{} after source queue", x.name);
            }
        }
        assert!(pos(&format!("{q}.dlq")) < source);
        // The dead-letter binding precedes any binding that feeds the source queue.
        let dl_binding = t
            .bindings
            .iter()
            .position(|b| {
                &b.exchange == dlx && b.queue == format!("{q}.dlq") && &b.routing_key == q
            })
            .expect("dlx -> dlq binding");
        for (i, b) in t.bindings.iter().enumerate() {
            if &b.queue == q || b.exchange == t.routes.retry_exchange {
                assert!(dl_binding < i, "{b:?} before the dead-letter binding");
            }
        }
    }
}

#[test]
fn source_exchange_binding_is_planned_but_not_declared() {
    let t = order_events_plan();
    assert_eq!(t.source_exchange.as_deref(), Some("orders"));
    assert!(t.exchanges.iter().all(|e| e.name != "orders"));
    assert!(t.bindings.iter().any(|b| b.exchange == "orders"
        && b.queue == "order-events"
        && b.routing_key == "order.created"));
}

#[test]
fn planning_is_deterministic() {
    for _ in 0..3 {
        assert_eq!(order_events_plan(), order_events_plan());
        assert_eq!(payment_callback_plan(), payment_callback_plan());
    }
    let a = serde_yaml_ng::to_string(&payment_callback_plan()).expect("yaml");
    let b = serde_yaml_ng::to_string(&payment_callback_plan()).expect("yaml");
    assert_eq!(a, b);
    // A plan wants none of its own tier queues removed, and flags only queues that carry
    // a tier's signature (name, TTL, dead-letter target) of this source queue.
    let t = order_events_plan();
    let own: Vec<(&str, &std::collections::BTreeMap<String, Value>)> = t
        .queues
        .iter()
        .map(|q| (q.name.as_str(), &q.arguments))
        .collect();
    assert!(t.obsolete_tier_queues(own.iter().copied()).is_empty());
    let tier = |ttl: u64, key: &str| -> std::collections::BTreeMap<String, Value> {
        serde_json::from_value(json!({
            "x-queue-type": "quorum",
            "x-message-ttl": ttl,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": key,
        }))
        .expect("args")
    };
    let ours = tier(30_000, "order-events");
    let wrong_ttl = tier(7_000, "order-events");
    let wrong_target = tier(30_000, "elsewhere");
    let plain = std::collections::BTreeMap::new();
    assert_eq!(
        t.obsolete_tier_queues([
            ("order-events.retry.30s", &ours),
            ("order-events.retry.notatier", &ours),
            ("other.retry.30s", &ours),
            ("order-events.retry.7s", &plain),
            ("order-events.retry.9s", &wrong_ttl),
            ("order-events.retry.30000ms", &wrong_target),
        ]),
        vec!["order-events.retry.30s".to_string()]
    );
}

#[test]
fn apply_steps_complete_the_dead_letter_route_before_pointing_the_source_at_it() {
    use dlq_operator::topology::Step;
    for (p, _) in all_plans() {
        let steps = p.steps();
        // Every object exactly once.
        let count = p.exchanges.len() + p.policies.len() + p.queues.len() + p.bindings.len();
        assert_eq!(steps.len(), count);
        let pos = |pred: &dyn Fn(&Step) -> bool| steps.iter().position(pred);
        let source = &p.routes.source_queue;
        let source_policy = pos(&|s| matches!(s, Step::Policy(x) if &x.queue == source))
            .expect("source policy step");
        let source_queue =
            pos(&|s| matches!(s, Step::Queue(q) if &q.name == source)).expect("source queue step");
        assert!(source_policy < source_queue, "policy before its queue");
        let dlx = &p.routes.dead_letter_exchange;
        let is_dead_letter_queue = |name: &str| {
            p.queues
                .iter()
                .any(|q| q.name == name && matches!(q.role, QueueRole::DeadLetter { .. }))
        };
        for (i, s) in steps.iter().enumerate() {
            let part_of_route = match s {
                Step::Exchange(x) => &x.name == dlx,
                Step::Queue(q) => is_dead_letter_queue(&q.name),
                Step::Policy(x) => is_dead_letter_queue(&x.queue),
                Step::Binding(b) => &b.exchange == dlx,
            };
            if part_of_route {
                assert!(i < source_policy, "{s:?} comes after the source policy");
            }
        }
        // Tier queues (which dead-letter into the source) come after the source queue.
        for (i, s) in steps.iter().enumerate() {
            if let Step::Queue(q) = s {
                if matches!(q.role, QueueRole::Retry { .. }) {
                    assert!(i > source_queue, "{} before the source queue", q.name);
                }
            }
        }
    }
}

#[test]
fn partition_routing_keys_never_equal_the_default_key() {
    let p = payment_callback_plan();
    assert_eq!(p.routes.partitions.len(), 9);
    for key in p.routes.partitions.values() {
        assert_ne!(key, &p.routes.dead_letter_routing_key);
        // The key routes to exactly one queue on the dead-letter exchange.
        let targets: Vec<_> = p
            .bindings
            .iter()
            .filter(|b| b.exchange == p.routes.dead_letter_exchange && &b.routing_key == key)
            .collect();
        assert_eq!(targets.len(), 1, "{key}");
    }
}

#[test]
fn colliding_names_are_rejected() {
    let (mut spec, _) = payment_callback();
    spec.source.queue = "x.dlq.timeout".into();
    spec.dead_letter.queue = Some("x.dlq".into());
    let err = spec
        .validate()
        .expect_err("partition named like the source");
    assert!(err.to_string().contains("spec.deadLetter.queue"), "{err}");

    let (mut spec, _) = order_events();
    spec.dead_letter.queue = Some(spec.source.queue.clone());
    assert!(spec.validate().is_err());

    let (mut spec, _) = order_events();
    spec.dead_letter.exchange = Some(format!("{}.retry", spec.source.queue));
    let err = spec
        .validate()
        .expect_err("dlx named like the retry exchange");
    assert!(
        err.to_string().contains("spec.deadLetter.exchange"),
        "{err}"
    );
}
