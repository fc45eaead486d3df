//! One owner per broker name, the rule both drivers enforce. Each queue and exchange the
//! operator manages belongs to one DeadLetterQueue: two resources on one source queue,
//! or one's dead-letter queue being another's source or retry tier, would overwrite each
//! other's policies and bindings on every resync, and deleting one would take the other's
//! topology with it.
//!
//! Rules (pure):
//! - A resource *claims* its source queue, its dead-letter queue(s), its retry and
//!   dead-letter exchanges, and every queue named `<retry exchange>.…` (its retry tiers,
//!   whatever its RetryPolicy says) — [`claims`]. Two claims of the same kind overlap
//!   when one covers a name the other does ([`Claim::overlaps`]).
//! - In a cluster ([`owner_of_overlap`]), when two resources' claims overlap on the same
//!   vhost, the one that has the name in `status.topology` (it created or adopted it)
//!   owns it; when both or neither have, the older one (creation time, then
//!   namespace/name) does. Which resources share a broker is the controller's to say
//!   (`controller::ownership`).
//! - In manifest files (`apply -f`, `run --standalone`), the resource read first owns an
//!   overlap on the same management endpoint and vhost, and the set is refused
//!   (`resolve::manifests`).

use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus};
use crate::manifest::object_key;

/// [`Claim::kind`] of a queue.
pub const QUEUE: &str = "queue";
/// [`Claim::kind`] of an exchange.
pub const EXCHANGE: &str = "exchange";

/// One broker name a resource claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// [`QUEUE`] or [`EXCHANGE`].
    pub kind: &'static str,
    /// The name, or with [`Claim::prefix`] the prefix of the names.
    pub name: String,
    /// Every name starting with [`Claim::name`] (retry tiers).
    pub prefix: bool,
    /// The field of the spec that makes the name.
    pub field: &'static str,
}

impl Claim {
    /// Whether the claim covers the object `kind` `name`.
    pub fn covers(&self, kind: &str, name: &str) -> bool {
        self.kind == kind
            && if self.prefix {
                name.starts_with(&self.name)
            } else {
                name == self.name
            }
    }

    /// Whether one name can be covered by both claims.
    pub fn overlaps(&self, other: &Claim) -> bool {
        self.kind == other.kind
            && match (self.prefix, other.prefix) {
                (false, false) => self.name == other.name,
                (true, false) => other.name.starts_with(&self.name),
                (false, true) => self.name.starts_with(&other.name),
                (true, true) => {
                    self.name.starts_with(&other.name) || other.name.starts_with(&self.name)
                }
            }
    }

    /// The claim for messages: `queue "orders"`, or `queue orders.retry.*` for a prefix.
    pub fn describe(&self) -> String {
        if self.prefix {
            format!("{} {}*", self.kind, self.name)
        } else {
            format!("{} {:?}", self.kind, self.name)
        }
    }
}

/// The names `dlq` claims, the source queue first, then its dead-letter queues, its retry
/// tiers (by prefix), its dead-letter exchange and its retry exchange. From the spec
/// alone (the same name helpers `topology::plan` uses): every name the plan holds is
/// covered, whatever the RetryPolicy.
pub fn claims(dlq: &DeadLetterQueue) -> Vec<Claim> {
    let spec = &dlq.spec;
    let claim = |kind, name, prefix, field| Claim {
        kind,
        name,
        prefix,
        field,
    };
    let retry = spec.retry_exchange_name();
    let mut out = vec![claim(
        QUEUE,
        spec.source.queue.clone(),
        false,
        "spec.source.queue",
    )];
    out.extend(
        spec.dead_letter_queue_names()
            .into_iter()
            .map(|(name, _)| claim(QUEUE, name, false, "spec.deadLetter.queue")),
    );
    out.push(claim(QUEUE, format!("{retry}."), true, "spec.source.queue"));
    out.push(claim(
        EXCHANGE,
        spec.dead_letter_exchange_name(),
        false,
        "spec.deadLetter.exchange",
    ));
    out.push(claim(EXCHANGE, retry, false, "spec.source.queue"));
    out
}

/// Whether `status.topology` records a name `claims` covers.
pub fn records_any(status: &DeadLetterQueueStatus, claims: &[Claim]) -> bool {
    let Some(t) = &status.topology else {
        return false;
    };
    let hit = |kind: &str, names: &[String]| {
        names
            .iter()
            .any(|n| claims.iter().any(|c| c.covers(kind, n)))
    };
    hit(QUEUE, &t.queues) || hit(EXCHANGE, &t.exchanges)
}

/// A resource whose claims overlap ours and that owns the overlap.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The other resource.
    pub other: DeadLetterQueue,
    /// Our claim it overlaps (the first, in [`claims`] order).
    pub claim: Claim,
    /// It has the name in `status.topology`.
    pub recorded: bool,
}

/// The resources of `others` (each with its status; any namespace) on the vhost of `dlq`
/// that own a name `dlq` (with status `mine`) claims, by the cluster rule of the module
/// documentation. `dlq` itself in `others` (same uid, or same namespace/name) is skipped.
/// Pure.
pub fn owner_of_overlap(
    dlq: &DeadLetterQueue,
    mine: &DeadLetterQueueStatus,
    others: &[(DeadLetterQueue, DeadLetterQueueStatus)],
) -> Vec<Owner> {
    let my_claims = claims(dlq);
    let my_age = (
        dlq.metadata.creation_timestamp.clone().map(|t| t.0),
        object_key(&dlq.metadata),
    );
    let mut owners = Vec::new();
    for (other, theirs) in others {
        if is_self(dlq, other) || other.spec.broker.vhost != dlq.spec.broker.vhost {
            continue;
        }
        let their_claims = claims(other);
        let Some(claim) = my_claims
            .iter()
            .find(|c| their_claims.iter().any(|t| t.overlaps(c)))
        else {
            continue;
        };
        let overlap: Vec<Claim> = their_claims
            .iter()
            .filter(|t| my_claims.iter().any(|c| c.overlaps(t)))
            .cloned()
            .collect();
        let they_recorded = records_any(theirs, &overlap);
        let i_recorded = records_any(mine, &overlap);
        let their_age = (
            other.metadata.creation_timestamp.clone().map(|t| t.0),
            object_key(&other.metadata),
        );
        let theirs_first = if they_recorded != i_recorded {
            they_recorded
        } else {
            their_age < my_age
        };
        if theirs_first {
            owners.push(Owner {
                other: other.clone(),
                claim: claim.clone(),
                recorded: they_recorded,
            });
        }
    }
    owners
}

/// The resources of `others` (each with its status) on the vhost of `dlq` whose
/// `status.topology` records a name that `dlq` claims: deleting `dlq`'s objects could
/// take theirs away. `dlq` itself (same namespace/name) is skipped. Pure.
pub fn recorded_by_others(
    dlq: &DeadLetterQueue,
    others: &[(DeadLetterQueue, DeadLetterQueueStatus)],
) -> Vec<DeadLetterQueue> {
    let my_claims = claims(dlq);
    others
        .iter()
        .filter(|(other, _)| object_key(&other.metadata) != object_key(&dlq.metadata))
        .filter(|(other, theirs)| {
            other.spec.broker.vhost == dlq.spec.broker.vhost && records_any(theirs, &my_claims)
        })
        .map(|(other, _)| other.clone())
        .collect()
}

/// Whether `other` is `dlq` itself: the same uid, or the same namespace/name.
fn is_self(dlq: &DeadLetterQueue, other: &DeadLetterQueue) -> bool {
    (other.metadata.uid.is_some() && other.metadata.uid == dlq.metadata.uid)
        || object_key(&other.metadata) == object_key(&dlq.metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dlq(name: &str, spec: serde_json::Value) -> DeadLetterQueue {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": spec,
        }))
        .expect("DeadLetterQueue")
    }

    fn spec(queue: &str) -> serde_json::Value {
        serde_json::json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": queue},
            "retryPolicyRef": {"name": "p"},
        })
    }

    #[test]
    fn a_resource_claims_every_name_of_its_plan() {
        let c = claims(&dlq("a", spec("orders")));
        let shown: Vec<(String, &str)> = c.iter().map(|c| (c.describe(), c.field)).collect();
        assert_eq!(
            shown,
            [
                ("queue \"orders\"".to_string(), "spec.source.queue"),
                ("queue \"orders.dlq\"".to_string(), "spec.deadLetter.queue"),
                ("queue orders.retry.*".to_string(), "spec.source.queue"),
                (
                    "exchange \"orders.dlx\"".to_string(),
                    "spec.deadLetter.exchange"
                ),
                ("exchange \"orders.retry\"".to_string(), "spec.source.queue"),
            ]
        );
    }

    #[test]
    fn claims_overlap_by_name_and_by_prefix() {
        let exact = |kind, name: &str| Claim {
            kind,
            name: name.into(),
            prefix: false,
            field: "f",
        };
        let prefix = |name: &str| Claim {
            prefix: true,
            ..exact(QUEUE, name)
        };
        assert!(exact(QUEUE, "a").overlaps(&exact(QUEUE, "a")));
        assert!(!exact(QUEUE, "a").overlaps(&exact(EXCHANGE, "a")));
        assert!(!exact(QUEUE, "a").overlaps(&exact(QUEUE, "b")));
        assert!(prefix("a.retry.").overlaps(&exact(QUEUE, "a.retry.x")));
        assert!(exact(QUEUE, "a.retry.x").overlaps(&prefix("a.retry.")));
        assert!(!exact(QUEUE, "a.retry").overlaps(&prefix("a.retry.")));
        assert!(prefix("a.retry.").overlaps(&prefix("a.retry.b.retry.")));
        assert!(!prefix("a.retry.").overlaps(&prefix("b.retry.")));
    }

    #[test]
    fn the_older_owns_an_overlap_nobody_recorded_and_self_is_skipped() {
        let mut a = dlq("a", spec("orders"));
        let mut b = dlq("b", spec("orders"));
        let at = |s| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(s).expect("time"),
            )
        };
        a.metadata.creation_timestamp = Some(at(10));
        b.metadata.creation_timestamp = Some(at(20));
        let none = DeadLetterQueueStatus::default();
        let all = vec![(a.clone(), none.clone()), (b.clone(), none.clone())];
        assert!(owner_of_overlap(&a, &none, &all).is_empty());
        let owners = owner_of_overlap(&b, &none, &all);
        assert_eq!(owners.len(), 1);
        assert_eq!(object_key(&owners[0].other.metadata), "ns/a");
        assert_eq!(owners[0].claim.field, "spec.source.queue");
        assert!(!owners[0].recorded);
    }

    #[test]
    fn recorded_names_are_found_on_the_same_vhost_only() {
        let a = dlq("a", spec("orders"));
        let mut elsewhere = spec("orders");
        elsewhere["broker"]["vhost"] = serde_json::json!("other");
        let b = dlq("b", elsewhere);
        let status: DeadLetterQueueStatus =
            serde_json::from_value(serde_json::json!({"topology": {"queues": ["orders"]}}))
                .expect("status");
        let others = vec![(a.clone(), status.clone()), (b, status)];
        let found = recorded_by_others(&dlq("c", spec("orders")), &others);
        let keys: Vec<String> = found.iter().map(|d| object_key(&d.metadata)).collect();
        assert_eq!(keys, ["ns/a"]);
        assert!(
            recorded_by_others(&a, &others[..1]).is_empty(),
            "self skipped"
        );
    }
}
