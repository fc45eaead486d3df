//! Which policies apply to a queue, as RabbitMQ decides it, and how the operator compares
//! what the management API returns with what it plans.
//!
//! - A policy applies to a queue when its `apply-to` covers the queue's type and its
//!   pattern matches the queue's name (RabbitMQ docs, "Policies").
//! - Only one policy applies to a queue: the highest-priority matching one (RabbitMQ docs,
//!   "Policies": "Policy priorities").
//! - The management API may return a number written as a float (`1000.0`) where the
//!   operator sent an integer: values are compared numerically ([`json_equal`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::management::PolicyInfo;
use crate::topology::PolicyPlan;

/// Compares two JSON values, numbers numerically (`1000` equals `1000.0`).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(i), Some(j)) => i == j,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Whether two policy definitions (or argument tables) hold the same keys with
/// [`json_equal`] values.
pub(super) fn maps_equal(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
}

/// Whether a policy with this `apply-to` can apply to a queue of type `queue_type`.
pub(super) fn applies_to_queue(apply_to: &str, queue_type: &str) -> bool {
    match apply_to {
        "queues" | "all" | "" => true,
        "classic_queues" => queue_type == "classic",
        "quorum_queues" => queue_type == "quorum",
        "streams" => queue_type == "stream",
        _ => false,
    }
}

/// Whether policy pattern `pattern` matches object name `name` as RabbitMQ matches it, or
/// `None` when that cannot be told here. RabbitMQ runs the pattern with Erlang's `re`
/// (PCRE) on the name's bytes (RabbitMQ docs, "Policies": patterns are regular
/// expressions); the `regex` crate with Unicode off, on bytes, agrees with it on the
/// syntax both have (`.` is one byte, as in PCRE without the `u` option). PCRE features
/// `regex` lacks (look-around, backreferences, possessive quantifiers) give `None`.
pub fn pattern_matches(pattern: &str, name: &str) -> Option<bool> {
    regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .ok()
        .map(|re| re.is_match(name.as_bytes()))
}

/// Policies of the vhost other than `ours` that may match `ours.queue` (of type
/// `queue_type`): (higher-or-equal priority, lower priority), each sorted by descending
/// priority. A higher-or-equal one whose pattern cannot be evaluated here
/// ([`pattern_matches`]) counts as matching, so it is reported as possibly shadowing ours
/// rather than missed; a lower one counts only when it surely matches (its keys are
/// merged into ours).
pub(super) fn matching_policies<'a>(
    policies: &'a [PolicyInfo],
    ours: &PolicyPlan,
    queue_type: &str,
) -> (Vec<&'a PolicyInfo>, Vec<&'a PolicyInfo>) {
    let mut matching: Vec<&PolicyInfo> = policies
        .iter()
        .filter(|p| p.name != ours.name)
        .filter(|p| applies_to_queue(&p.apply_to, queue_type))
        .filter(|p| {
            pattern_matches(&p.pattern, &ours.queue)
                .unwrap_or(p.priority >= i64::from(ours.priority))
        })
        .collect();
    matching.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    matching
        .into_iter()
        .partition(|p| p.priority >= i64::from(ours.priority))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_numbers_compare_numerically() {
        assert!(json_equal(&json!(1000), &json!(1000.0)));
        assert!(json_equal(&json!({"a": [1, 2]}), &json!({"a": [1.0, 2]})));
        assert!(!json_equal(&json!(1000), &json!("1000")));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn patterns_match_as_rabbitmq_matches_them() {
        // PCRE on bytes: `.` is one byte, so two dots match the two bytes of "é".
        assert_eq!(pattern_matches("^q-u..$", "q-ué"), Some(true));
        assert_eq!(pattern_matches("^q-u.$", "q-ué"), Some(false));
        assert_eq!(pattern_matches("^orders$", "orders"), Some(true));
        assert_eq!(pattern_matches("^orders$", "orders.dlq"), Some(false));
        assert_eq!(pattern_matches("^ord\\.", "ord.x"), Some(true));
        // PCRE features the regex crate lacks cannot be told: counted as matching where
        // that is the safe side (a possible shadow).
        assert_eq!(pattern_matches("^q(?!zzz)", "q1"), None);
        assert_eq!(pattern_matches("^(a)\\1$", "aa"), None);
        let ours = PolicyPlan {
            name: "dlq-operator.q1".into(),
            queue: "q1".into(),
            pattern: "^q1$".into(),
            priority: 100,
            definition: BTreeMap::new(),
        };
        let policy = |name: &str, pattern: &str, priority: i64| PolicyInfo {
            name: name.into(),
            pattern: pattern.into(),
            apply_to: "all".into(),
            definition: BTreeMap::new(),
            priority,
        };
        let policies = [
            policy("lookahead", "^q(?!zzz)", 500),
            policy("low-lookahead", "^q(?!zzz)", 1),
            policy("other", "^x$", 500),
        ];
        let (higher, lower) = matching_policies(&policies, &ours, "quorum");
        let names = |v: &[&PolicyInfo]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&higher), ["lookahead"]);
        assert!(lower.is_empty(), "{:?}", names(&lower));
    }

    #[test]
    fn apply_to_filters_by_queue_type() {
        assert!(applies_to_queue("all", "quorum"));
        assert!(applies_to_queue("queues", "classic"));
        assert!(applies_to_queue("quorum_queues", "quorum"));
        assert!(!applies_to_queue("classic_queues", "quorum"));
        assert!(!applies_to_queue("exchanges", "quorum"));
    }

    #[test]
    fn definitions_compare_key_by_key_numerically() {
        let a: BTreeMap<String, Value> = [("max-length".to_string(), json!(10))].into();
        let b: BTreeMap<String, Value> = [("max-length".to_string(), json!(10.0))].into();
        assert!(maps_equal(&a, &b));
        let mut c = b.clone();
        c.insert("overflow".into(), json!("drop-head"));
        assert!(!maps_equal(&a, &c));
        assert!(!maps_equal(&c, &a));
    }
}
