//! The limits that decide whether a queue can be read without losing a message (its
//! delivery limit, length limits and overflow mode), and the RabbitMQ version rules
//! behind a quorum queue's delivery limit.
//!
//! - A quorum queue counts every return as a delivery and dead-letters (or drops) a
//!   message past its delivery limit (RabbitMQ docs, "Quorum Queues": "Poison Message
//!   Handling").
//! - RabbitMQ 4.0 to 4.2 give every quorum queue that sets none a delivery limit of 20
//!   (RabbitMQ 4.0 release notes); a negative limit means "none" on 4.x
//!   (rabbitmq-server PR #12250) but 0 on 3.x.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::management::encode_segment as enc;
use super::patterns::pattern_matches;
use super::RabbitMq;
use crate::broker::{BrokerError, QueueLimits};

/// The major number of a RabbitMQ version (`4` for `4.0.5`; 0 when unreadable).
pub(super) fn major_version(version: &str) -> u32 {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// The delivery limit a quorum queue has, from every `delivery-limit` that may apply to
/// it (`limits`: its `x-delivery-limit` argument and the policies' keys) on a broker of
/// `version`; `None` for none. Taken conservatively, the smallest:
/// - any limit of 0 or more: the smallest of those;
/// - else a negative one: no limit on RabbitMQ 4.x (rabbitmq-server PR #12250, tried on
///   4.0.5: 30 returns, none dead-lettered), but 0 on 3.x, which reads a negative limit as
///   0 ("dead-letter at the first return": NServiceBus.RabbitMQ issue #1828);
/// - else none set: 20 on RabbitMQ 4.0 to 4.2, their default (RabbitMQ 4.0 release notes;
///   tried on 4.0.5: the 21st delivery dead-letters), none before.
pub fn effective_delivery_limit(limits: &[i64], version: &str) -> Option<u64> {
    if let Some(smallest) = limits.iter().filter(|l| **l >= 0).min() {
        return u64::try_from(*smallest).ok();
    }
    if !limits.is_empty() {
        return (major_version(version) < 4).then_some(0);
    }
    ["4.0.", "4.1.", "4.2."]
        .iter()
        .any(|v| version.starts_with(v))
        .then_some(20)
}

/// On RabbitMQ 4.x (`version`), sets `delivery-limit: -1` (no limit) in the policy
/// `definition` of a quorum dead-letter queue that has none from any policy: 4.0 gives
/// every quorum queue a limit of 20 by default, which makes `dlq inspect` and `dlq replay`
/// read it one message at a time. A negative limit means "none" on 4.x (rabbitmq-server
/// PR #12250; tried on 4.0.5, also for a queue that existed before the policy), but 0 on
/// 3.x, whose policy validation refuses it anyway: nothing is added there. A policy
/// rather than a queue argument, so that a user's policy of lower priority that sets a
/// limit keeps it (its keys are merged first), and dead-letter queues made before this
/// version get it too.
pub(super) fn no_default_delivery_limit(definition: &mut BTreeMap<String, Value>, version: &str) {
    if !definition.contains_key("delivery-limit") && major_version(version) >= 4 {
        definition.insert("delivery-limit".into(), json!(-1));
    }
}

/// [`QueueLimits`] of queue `name` from what the management API returned: `queue` (its
/// `type`, `arguments` and `effective_policy_definition`), the vhost's `policies` and the
/// broker's `version` (read only for a quorum queue; any string otherwise). Every
/// definition that may apply counts: the effective one and every policy whose `apply-to`
/// covers queues and whose pattern matches `name` (a pattern that cannot be evaluated
/// here counts as matching, [`pattern_matches`]); the smallest limit wins.
pub(super) fn limits_of(
    name: &str,
    queue: &Value,
    policies: &[Value],
    version: &str,
) -> QueueLimits {
    let mut definitions = vec![queue["effective_policy_definition"].clone()];
    for p in policies {
        let applies = matches!(
            p["apply-to"].as_str().unwrap_or("all"),
            "all" | "queues" | "quorum_queues" | "classic_queues"
        );
        let matches = p["pattern"]
            .as_str()
            .and_then(|pat| pattern_matches(pat, name))
            .unwrap_or(true);
        if applies && matches {
            definitions.push(p["definition"].clone());
        }
    }
    let args = &queue["arguments"];
    let smallest = |arg: &str, key: &str| {
        definitions
            .iter()
            .filter_map(|d| d[key].as_u64())
            .chain(args[arg].as_u64())
            .min()
    };
    let quorum = queue["type"] == "quorum";
    let delivery_limits: Vec<i64> = definitions
        .iter()
        .filter_map(|d| d["delivery-limit"].as_i64())
        .chain(args["x-delivery-limit"].as_i64())
        .collect();
    let delivery_limit = quorum
        .then(|| effective_delivery_limit(&delivery_limits, version))
        .flatten();
    QueueLimits {
        quorum,
        delivery_limit,
        default_delivery_limit: delivery_limit.is_some() && delivery_limits.is_empty(),
        max_length: smallest("x-max-length", "max-length"),
        max_length_bytes: smallest("x-max-length-bytes", "max-length-bytes"),
        drops_head: definitions
            .iter()
            .map(|d| &d["overflow"])
            .chain(std::iter::once(&args["x-overflow"]))
            .any(|o| o == "drop-head"),
    }
}

impl RabbitMq {
    /// What reading queue `name` of `vhost` without losing a message must know
    /// ([`QueueLimits`]), taken conservatively — the smallest delivery and length limit
    /// any source could apply: the queue's arguments, its effective policy, and every
    /// policy and operator policy of the vhost whose pattern matches the name (read from
    /// the policy lists, which are current, while the queue's effective policy comes from
    /// statistics that lag by `collect_statistics_interval`). A pattern that cannot be evaluated here
    /// ([`pattern_matches`]) counts as matching. With no delivery limit set, a quorum queue gets 20 on RabbitMQ 4.0 to
    /// 4.2, which apply that default (RabbitMQ 4.0 release notes).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing queue; transport and authentication errors.
    pub async fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError> {
        let q: Value = self
            .mgmt
            .get_json(
                &format!(
                    "queues/{}/{}?columns=type,arguments,effective_policy_definition",
                    enc(vhost),
                    enc(name)
                ),
                &format!("queue {name:?} in vhost {vhost:?}"),
            )
            .await?;
        let mut policies: Vec<Value> = self
            .mgmt
            .get_json(
                &format!("policies/{}", enc(vhost)),
                &format!("vhost {vhost:?}"),
            )
            .await?;
        // Operator policies too: their limits apply alongside the policies' (the smaller
        // wins), and right after one is set the queue's effective definition in the
        // statistics does not show it yet (the break test lost messages on 4.0.5 that
        // way). A `policymaker` user may read them.
        let operator_policies: Vec<Value> = self
            .mgmt
            .get_json(
                &format!("operator-policies/{}", enc(vhost)),
                &format!("vhost {vhost:?}"),
            )
            .await?;
        policies.extend(operator_policies);
        // A record without its type or arguments must not read as "no delivery limit":
        // that would let inspection requeue a message past the limit.
        if !q["type"].is_string() || !q["arguments"].is_object() {
            return Err(BrokerError::Amqp {
                reason: format!(
                    "the management API returned queue {name:?} in vhost {vhost:?} without its \
                     type or arguments; its delivery limit is unknown, so it is not read (retry)"
                ),
            });
        }
        let version = if q["type"] == "quorum" {
            self.broker_version().await?
        } else {
            String::new()
        };
        Ok(limits_of(name, &q, &policies, &version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_limits_by_version() {
        // Set limits: the smallest of 0 or more.
        assert_eq!(effective_delivery_limit(&[5, 20], "3.10.8"), Some(5));
        assert_eq!(effective_delivery_limit(&[-1, 7], "4.0.5"), Some(7));
        // Only a negative one: none on 4.x, 0 on 3.x.
        assert_eq!(effective_delivery_limit(&[-1], "4.0.5"), None);
        assert_eq!(effective_delivery_limit(&[-1], "3.10.8"), Some(0));
        // None set: 4.0-4.2's default of 20, none before.
        assert_eq!(effective_delivery_limit(&[], "4.0.5"), Some(20));
        assert_eq!(effective_delivery_limit(&[], "4.2.1"), Some(20));
        assert_eq!(effective_delivery_limit(&[], "3.10.8"), None);
        assert_eq!(effective_delivery_limit(&[], "4.10.0"), None);
        let limits = QueueLimits {
            quorum: true,
            delivery_limit: Some(20),
            default_delivery_limit: true,
            ..Default::default()
        };
        let why = limits.slow_reading("q.dlq").expect("slow");
        assert!(why.contains("default"), "{why}");
        assert!(QueueLimits::default().slow_reading("q").is_none());
    }

    #[test]
    fn the_default_limit_is_lifted_only_on_4x_and_only_when_none_is_set() {
        let mut definition = BTreeMap::new();
        no_default_delivery_limit(&mut definition, "3.10.8");
        assert!(definition.is_empty());
        no_default_delivery_limit(&mut definition, "4.0.5");
        assert_eq!(definition["delivery-limit"], json!(-1));
        let mut set: BTreeMap<String, Value> = [("delivery-limit".to_string(), json!(5))].into();
        no_default_delivery_limit(&mut set, "4.0.5");
        assert_eq!(set["delivery-limit"], json!(5));
    }

    #[test]
    fn limits_take_the_smallest_of_every_source_that_may_apply() {
        let queue = json!({
            "type": "quorum",
            "arguments": {"x-max-length": 50},
            "effective_policy_definition": {"delivery-limit": 7, "max-length": 100},
        });
        let policies = [
            json!({"pattern": "^q\\.dlq$", "apply-to": "queues", "definition": {"delivery-limit": 3, "overflow": "drop-head"}}),
            json!({"pattern": "^other$", "apply-to": "all", "definition": {"delivery-limit": 1}}),
            json!({"pattern": "^q", "apply-to": "exchanges", "definition": {"max-length": 1}}),
            // Look-ahead: cannot be told here, counted as matching.
            json!({"pattern": "^q(?!zzz)", "definition": {"max-length-bytes": 4096}}),
        ];
        let limits = limits_of("q.dlq", &queue, &policies, "3.10.8");
        assert_eq!(
            limits,
            QueueLimits {
                quorum: true,
                delivery_limit: Some(3),
                default_delivery_limit: false,
                max_length: Some(50),
                max_length_bytes: Some(4096),
                drops_head: true,
            }
        );
        // A classic queue has no delivery limit, whatever the policies say.
        let classic =
            json!({"type": "classic", "arguments": {}, "effective_policy_definition": {}});
        assert_eq!(
            limits_of("q.dlq", &classic, &policies[..1], "").delivery_limit,
            None
        );
        // A quorum queue without any limit on 4.0: the default of 20.
        let bare = json!({"type": "quorum", "arguments": {}, "effective_policy_definition": null});
        let limits = limits_of("q.dlq", &bare, &[], "4.0.5");
        assert_eq!(limits.delivery_limit, Some(20));
        assert!(limits.default_delivery_limit);
    }
}
