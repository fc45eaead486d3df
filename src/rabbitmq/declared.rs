//! Settings declared as queue arguments (`spec.broker.queueSettings: Arguments`;
//! docs/ARCHITECTURE.md, "A thousand queues per vhost"): a queue the operator declares
//! carries its policy's definition as `x-<key>` arguments, and the operator's exact-name
//! policy is written only where one is needed ([`policy_needed`]). Pure: no I/O.
//!
//! How RabbitMQ combines an argument with the same key of the policy that applies
//! ([`combine`]): RabbitMQ docs "Time-To-Live and Expiration" and "Queue Length Limit"
//! (the lower value), "Dead Letter Exchanges" (the argument overrides the policy);
//! rabbitmq-server `rabbit_amqqueue_process:process_args_policy` (classic) and
//! `rabbit_quorum_queue:gather_policy_config` (quorum: a policy's `overflow` wins;
//! `resolve_delivery_limit`: on 4.x a negative delivery limit, "none", loses to any
//! limit).

use std::collections::BTreeMap;

use serde_json::Value;

use super::management::{PolicyInfo, QueueInfo};
use super::patterns::{applies_to_queue, json_equal, pattern_matches};
use crate::topology::PolicyPlan;

/// How RabbitMQ combines a queue argument with the same key of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Combine {
    /// The lower number applies (`message-ttl`, `max-length`, `max-length-bytes`,
    /// `delivery-limit`, `expires`); a negative delivery limit counts as none (highest).
    Lowest,
    /// The argument applies whatever the policy says.
    Argument,
    /// The policy's value applies (`overflow` of a quorum queue).
    Policy,
}

/// How `key` of a queue of type `queue_type` (`classic`, `quorum`) is combined.
pub(super) fn combine(key: &str, queue_type: &str) -> Combine {
    match key {
        "message-ttl" | "max-length" | "max-length-bytes" | "delivery-limit" | "expires" => {
            Combine::Lowest
        }
        "overflow" if queue_type == "quorum" => Combine::Policy,
        _ => Combine::Argument,
    }
}

/// The queue arguments that declare `definition` (policy keys): `x-<key>` for each.
pub(super) fn arguments_of(definition: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    definition
        .iter()
        .map(|(k, v)| (format!("x-{k}"), v.clone()))
        .collect()
}

/// A number of a [`Combine::Lowest`] key as RabbitMQ orders it: a negative one (a
/// delivery limit of "none" on 4.x) above every limit; `None` when not a number.
fn rank(value: &Value) -> Option<f64> {
    let n = value.as_f64()?;
    Some(if n < 0.0 { f64::INFINITY } else { n })
}

/// Whether `have` (an argument, or a policy's key), combined with `want` by RabbitMQ,
/// leaves `want` in effect for a key combined as `how`.
fn keeps(how: Combine, have: &Value, want: &Value) -> bool {
    match how {
        Combine::Lowest => match (rank(have), rank(want)) {
            (Some(h), Some(w)) => h >= w,
            _ => json_equal(have, want),
        },
        Combine::Argument | Combine::Policy => json_equal(have, want),
    }
}

/// What a declared queue's arguments mean for the settings it must have.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Declared {
    /// Keys of the definition the queue has no argument for: only a policy can set them
    /// (a queue declared before `Arguments`, or by the application).
    pub missing: Vec<String>,
    /// Keys whose wanted value takes effect only through a policy: lower than the
    /// argument, or a quorum queue's `overflow`.
    pub by_policy: Vec<String>,
    /// Keys whose wanted value cannot take effect on this queue: `(key, argument, wanted)`
    /// — a number above the argument (RabbitMQ applies the lower), or a key whose
    /// argument wins over any policy.
    pub fixed: Vec<(String, Value, Value)>,
}

/// Compares the `arguments` of an existing queue of type `queue_type` with the
/// `definition` it must have.
pub(super) fn declared(
    arguments: &BTreeMap<String, Value>,
    definition: &BTreeMap<String, Value>,
    queue_type: &str,
) -> Declared {
    let mut out = Declared::default();
    for (key, want) in definition {
        let Some(have) = arguments.get(&format!("x-{key}")) else {
            out.missing.push(key.clone());
            continue;
        };
        if json_equal(have, want) {
            continue;
        }
        match combine(key, queue_type) {
            // The argument is above the wanted number: a policy brings it down.
            Combine::Lowest if keeps(Combine::Lowest, have, want) => {
                out.by_policy.push(key.clone())
            }
            Combine::Policy => out.by_policy.push(key.clone()),
            Combine::Lowest | Combine::Argument => {
                out.fixed.push((key.clone(), have.clone(), want.clone()))
            }
        }
    }
    out
}

/// Policy keys the operator never takes over from another policy, and masks with its own
/// wherever another policy sets them on its queues: `expires` deletes a queue that has been
/// unused for that long, with every message in it (a dead-letter queue nobody reads is
/// unused). RabbitMQ docs, "Time-To-Live and Expiration": "Queue TTL".
pub const NEVER_MERGED: &[&str] = &["expires"];

/// Whether a policy of the vhost other than `ours` that matches `ours.queue` needs ours
/// written over it: one of higher or equal priority (it takes precedence, and is then
/// reported shadowing ours, as in the `Policy` layout); a lower one that sets a key of
/// [`NEVER_MERGED`], a [`Combine::Lowest`] key of `definition` lower, or a
/// [`Combine::Policy`] key otherwise (ours masks it: RabbitMQ applies only the
/// highest-priority policy). A pattern that cannot be evaluated here counts as matching.
/// Keys the arguments do not hold that a lower policy sets apply as they would merged into
/// our policy in the `Policy` layout.
pub(super) fn changed_by_other(
    policies: &[PolicyInfo],
    ours: &PolicyPlan,
    definition: &BTreeMap<String, Value>,
    queue_type: &str,
) -> bool {
    policies
        .iter()
        .filter(|p| p.name != ours.name)
        .filter(|p| applies_to_queue(&p.apply_to, queue_type))
        .filter(|p| pattern_matches(&p.pattern, &ours.queue).unwrap_or(true))
        .any(|p| {
            p.priority >= i64::from(ours.priority)
                || NEVER_MERGED.iter().any(|k| p.definition.contains_key(*k))
                || definition.iter().any(|(key, want)| {
                    p.definition
                        .get(key)
                        .is_some_and(|theirs| match combine(key, queue_type) {
                            Combine::Lowest | Combine::Policy => {
                                !keeps(combine(key, queue_type), theirs, want)
                            }
                            Combine::Argument => false,
                        })
                })
        })
}

/// Whether the operator's policy `ours` must be written for its queue under
/// `Arguments`, with `definition` the settings the queue must have (the plan's, with
/// the broker's version applied): it exists already (it stays managed), the queue
/// exists without an argument for a key or with a value only a policy can change
/// ([`declared`]), or another policy would change a value ([`changed_by_other`]). A
/// queue still to be declared (`existing` is `None`) gets every key as an argument.
pub(super) fn policy_needed(
    ours: &PolicyPlan,
    definition: &BTreeMap<String, Value>,
    existing: Option<&QueueInfo>,
    policies: &[PolicyInfo],
    queue_type: &str,
) -> bool {
    if policies.iter().any(|p| p.name == ours.name) {
        return true;
    }
    if let Some(q) = existing {
        let d = declared(&q.arguments, definition, queue_type);
        if !d.missing.is_empty() || !d.by_policy.is_empty() {
            return true;
        }
    }
    changed_by_other(policies, ours, definition, queue_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(v).expect("map")
    }

    fn policy(name: &str, pattern: &str, priority: i64, definition: Value) -> PolicyInfo {
        serde_json::from_value(
            json!({"name": name, "pattern": pattern, "apply-to": "queues",
            "priority": priority, "definition": definition, "vhost": "/"}),
        )
        .expect("policy")
    }

    fn ours() -> PolicyPlan {
        PolicyPlan {
            name: "dlq-operator.orders.dlq".into(),
            queue: "orders.dlq".into(),
            pattern: "^orders\\.dlq$".into(),
            priority: 100,
            definition: map(
                json!({"message-ttl": 1000, "max-length": 10, "overflow": "reject-publish"}),
            ),
        }
    }

    #[test]
    fn arguments_carry_every_key_with_the_x_prefix() {
        let args = arguments_of(&ours().definition);
        assert_eq!(
            args,
            map(json!({"x-message-ttl": 1000, "x-max-length": 10, "x-overflow": "reject-publish"}))
        );
    }

    #[test]
    fn lower_numbers_need_a_policy_higher_ones_are_fixed() {
        let want = ours().definition;
        let same = arguments_of(&want);
        assert_eq!(declared(&same, &want, "classic"), Declared::default());
        let mut higher = same.clone();
        higher.insert("x-message-ttl".into(), json!(5000));
        let d = declared(&higher, &want, "classic");
        assert_eq!(d.by_policy, vec!["message-ttl".to_string()]);
        assert!(d.fixed.is_empty() && d.missing.is_empty());
        let mut lower = same.clone();
        lower.insert("x-max-length".into(), json!(3));
        let d = declared(&lower, &want, "classic");
        assert_eq!(
            d.fixed,
            vec![("max-length".to_string(), json!(3), json!(10))]
        );
        assert!(d.by_policy.is_empty());
    }

    #[test]
    fn overflow_is_fixed_on_classic_and_a_policy_key_on_quorum() {
        let want = ours().definition;
        let mut args = arguments_of(&want);
        args.insert("x-overflow".into(), json!("drop-head"));
        assert_eq!(declared(&args, &want, "classic").fixed.len(), 1);
        assert_eq!(
            declared(&args, &want, "quorum").by_policy,
            vec!["overflow".to_string()]
        );
    }

    #[test]
    fn a_negative_delivery_limit_is_none_and_loses_to_any_limit() {
        let want = map(json!({"delivery-limit": -1}));
        let d = declared(&map(json!({"x-delivery-limit": 5})), &want, "quorum");
        assert_eq!(
            d.fixed.len(),
            1,
            "a policy of -1 cannot lift an argument of 5"
        );
        let want = map(json!({"delivery-limit": 5}));
        let d = declared(&map(json!({"x-delivery-limit": -1})), &want, "quorum");
        assert_eq!(d.by_policy, vec!["delivery-limit".to_string()]);
    }

    #[test]
    fn missing_arguments_need_a_policy() {
        let want = ours().definition;
        let d = declared(&BTreeMap::new(), &want, "classic");
        assert_eq!(d.missing.len(), 3);
        let q: QueueInfo =
            serde_json::from_value(json!({"name": "orders.dlq", "arguments": {}})).expect("q");
        assert!(policy_needed(&ours(), &want, Some(&q), &[], "classic"));
        assert!(!policy_needed(&ours(), &want, None, &[], "classic"));
    }

    #[test]
    fn only_other_policies_that_change_a_value_need_ours() {
        let want = ours().definition;
        let harmless = [
            policy("cap", ".*", 0, json!({"max-length": 1_000_000})),
            policy("dlx", ".*", 0, json!({"dead-letter-exchange": "x"})),
            policy("other", "^payments$", 0, json!({"message-ttl": 1})),
            policy("lazy", ".*", 99, json!({"queue-mode": "lazy"})),
        ];
        assert!(!changed_by_other(&harmless, &ours(), &want, "classic"));
        // Higher or equal priority: ours is written, to be reported shadowed.
        let higher = [policy("lazy", ".*", 100, json!({"queue-mode": "lazy"}))];
        assert!(changed_by_other(&higher, &ours(), &want, "classic"));
        // A queue TTL is masked wherever it comes from.
        let expiring = [policy("gc", ".*", 0, json!({"expires": 20_000}))];
        assert!(changed_by_other(&expiring, &ours(), &want, "classic"));
        let shorter = [policy("ttl", "^orders\\.", 0, json!({"message-ttl": 500}))];
        assert!(changed_by_other(&shorter, &ours(), &want, "classic"));
        let overflow = [policy("of", ".*", 0, json!({"overflow": "drop-head"}))];
        assert!(!changed_by_other(&overflow, &ours(), &want, "classic"));
        assert!(changed_by_other(&overflow, &ours(), &want, "quorum"));
        assert!(policy_needed(&ours(), &want, None, &shorter, "classic"));
        let mine = [policy(&ours().name, "^orders\\.dlq$", 100, json!({}))];
        assert!(policy_needed(&ours(), &want, None, &mine, "classic"));
    }
}
