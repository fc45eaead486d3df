//! One owner per broker name. Each queue and exchange the operator manages belongs to one
//! DeadLetterQueue, as `apply -f` enforces across files: two resources on one source
//! queue, one's dead-letter queue being another's source or retry tier, would overwrite
//! each other's policies and bindings on every resync, and deleting one would take the
//! other's topology with it.
//!
//! Rules ([`owner_of_overlap`], pure):
//! - A resource *claims* its source queue, its dead-letter queue(s), its retry and
//!   dead-letter exchanges, and every queue named `<retry exchange>.…` (its retry tiers,
//!   whatever its RetryPolicy says) — [`claims`].
//! - When two resources' claims overlap on the same vhost, the one that has the name in
//!   `status.topology` (it created or adopted it) owns it; when both or neither have, the
//!   older one (creation time, then namespace/name) does.
//! - Resources count as being on the same broker when they use the same Secret of the
//!   same namespace, or when their brokers report the same cluster name
//!   (`GET /api/overview`); a broker that cannot be asked counts as the same one, so a
//!   guess never leads to a write or a delete ([`same_broker`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};

use crate::broker::rabbitmq::RabbitMq;
use crate::controller::context::Context;
use crate::controller::object::{decode, status_of};
use crate::crd::{DeadLetterQueue, DeadLetterQueueStatus};
use crate::manifest::object_key;

/// One broker name a resource claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `queue` or `exchange`.
    pub kind: &'static str,
    /// The name, or with [`Claim::prefix`] the prefix of the names.
    pub name: String,
    /// Every name starting with [`Claim::name`] (retry tiers).
    pub prefix: bool,
    /// The field of the spec that makes the name.
    pub field: &'static str,
}

impl Claim {
    fn covers(&self, kind: &str, name: &str) -> bool {
        self.kind == kind
            && if self.prefix {
                name.starts_with(&self.name)
            } else {
                name == self.name
            }
    }

    fn overlaps(&self, other: &Claim) -> bool {
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
}

/// The names `dlq` claims, the source queue first. From the spec alone (the same name
/// helpers `topology::plan` uses): called for every other resource on each reconcile.
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
        "queue",
        spec.source.queue.clone(),
        false,
        "spec.source.queue",
    )];
    out.extend(
        spec.dead_letter_queue_names()
            .into_iter()
            .map(|(name, _)| claim("queue", name, false, "spec.deadLetter.queue")),
    );
    out.push(claim(
        "queue",
        format!("{retry}."),
        true,
        "spec.source.queue",
    ));
    out.push(claim(
        "exchange",
        spec.dead_letter_exchange_name(),
        false,
        "spec.deadLetter.exchange",
    ));
    out.push(claim("exchange", retry, false, "spec.source.queue"));
    out
}

/// Whether `status.topology` records a name `claims` covers.
fn records_any(status: &DeadLetterQueueStatus, claims: &[Claim]) -> bool {
    let Some(t) = &status.topology else {
        return false;
    };
    let hit = |kind: &str, names: &[String]| {
        names
            .iter()
            .any(|n| claims.iter().any(|c| c.covers(kind, n)))
    };
    hit("queue", &t.queues) || hit("exchange", &t.exchanges)
}

/// A resource whose claims overlap ours and that owns the overlap.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The other resource.
    pub other: DeadLetterQueue,
    /// Our claim it overlaps.
    pub claim: Claim,
    /// It has the name in `status.topology`.
    pub recorded: bool,
}

/// The other resources of `others` (any namespace, same vhost) that own a name `dlq`
/// (with status `mine`) claims, by the rules of the module documentation. Pure.
pub fn owner_of_overlap(
    dlq: &DeadLetterQueue,
    mine: &DeadLetterQueueStatus,
    others: &[Arc<DynamicObject>],
) -> Vec<Owner> {
    let my_claims = claims(dlq);
    let my_age = (
        dlq.metadata.creation_timestamp.clone().map(|t| t.0),
        object_key(&dlq.metadata),
    );
    let mut owners = Vec::new();
    for obj in others {
        if obj.metadata.uid.is_some() && obj.metadata.uid == dlq.metadata.uid {
            continue;
        }
        if object_key(&obj.metadata) == object_key(&dlq.metadata) {
            continue;
        }
        let Ok(other) = decode::<DeadLetterQueue>(obj) else {
            continue;
        };
        if other.spec.broker.vhost != dlq.spec.broker.vhost {
            continue;
        }
        let their_claims = claims(&other);
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
        let theirs: DeadLetterQueueStatus = status_of(obj);
        let they_recorded = records_any(&theirs, &overlap);
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
                other,
                claim: claim.clone(),
                recorded: they_recorded,
            });
        }
    }
    owners
}

/// The other resources of `others` (same vhost) whose `status.topology` records a name
/// that `dlq` claims: deleting `dlq`'s objects could take theirs away. Pure.
pub fn recorded_by_others(
    dlq: &DeadLetterQueue,
    others: &[Arc<DynamicObject>],
) -> Vec<DeadLetterQueue> {
    let my_claims = claims(dlq);
    others
        .iter()
        .filter(|o| object_key(&o.metadata) != object_key(&dlq.metadata))
        .filter_map(|o| {
            let other = decode::<DeadLetterQueue>(o).ok()?;
            let theirs: DeadLetterQueueStatus = status_of(o);
            (other.spec.broker.vhost == dlq.spec.broker.vhost && records_any(&theirs, &my_claims))
                .then_some(other)
        })
        .collect()
}

/// Whether `other` talks to the same broker as `dlq` (whose client is `mine`): same
/// namespace and Secret, or the same cluster name. Unknown counts as the same.
pub async fn same_broker(
    ctx: &Context,
    dlq: &DeadLetterQueue,
    mine: &RabbitMq,
    other: &DeadLetterQueue,
) -> bool {
    let ns = crate::manifest::namespace_of(&dlq.metadata);
    let other_ns = crate::manifest::namespace_of(&other.metadata);
    let secret_name = &other.spec.broker.secret_ref.name;
    if ns == other_ns && *secret_name == dlq.spec.broker.secret_ref.name {
        return true;
    }
    let Ok(Some(secret)) = Api::<Secret>::namespaced(ctx.client.clone(), other_ns)
        .get_opt(secret_name)
        .await
    else {
        return true;
    };
    let Ok(conn) = crate::broker::BrokerConnection::from_secret_data(
        secret_name,
        &crate::manifest::secret_data(&secret),
    ) else {
        return true;
    };
    let Ok(theirs) = ctx.brokers.get(other_ns, &secret, &conn) else {
        return true;
    };
    match (mine.cluster_name().await, theirs.cluster_name().await) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::at;

    fn dynamic(
        name: &str,
        created: i64,
        spec: serde_json::Value,
        recorded: &[&str],
    ) -> Arc<DynamicObject> {
        let mut o = serde_json::json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "DeadLetterQueue",
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "creationTimestamp": at(created)},
            "spec": spec,
        });
        if !recorded.is_empty() {
            o["status"] = serde_json::json!({"topology": {"queues": recorded}});
        }
        Arc::new(serde_json::from_value(o).expect("object"))
    }

    fn spec(queue: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut s = serde_json::json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": queue},
            "retryPolicyRef": {"name": "p"},
        });
        if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        s
    }

    fn typed(o: &Arc<DynamicObject>) -> DeadLetterQueue {
        decode::<DeadLetterQueue>(o).expect("decodes")
    }

    fn owners(o: &Arc<DynamicObject>, all: &[Arc<DynamicObject>]) -> Vec<String> {
        owner_of_overlap(&typed(o), &status_of(o), all)
            .into_iter()
            .map(|w| format!("{} {}", object_key(&w.other.metadata), w.claim.field))
            .collect()
    }

    #[test]
    fn the_older_keeps_a_name_nobody_recorded() {
        let a = dynamic("a", 10, spec("orders", serde_json::json!({})), &[]);
        let b = dynamic("b", 20, spec("orders", serde_json::json!({})), &[]);
        let all = vec![a.clone(), b.clone()];
        assert!(owners(&a, &all).is_empty());
        assert_eq!(owners(&b, &all), ["ns/a spec.source.queue"]);
    }

    #[test]
    fn the_one_that_recorded_it_keeps_it_even_when_younger() {
        // y (younger) created its source queue; o (older) is edited to use it as its
        // dead-letter queue: o must not take it over.
        let y = dynamic("y", 20, spec("young", serde_json::json!({})), &["young"]);
        let o = dynamic(
            "o",
            10,
            spec("old", serde_json::json!({"deadLetter": {"queue": "young"}})),
            &["old", "old.dlq"],
        );
        let all = vec![y.clone(), o.clone()];
        assert_eq!(owners(&o, &all), ["ns/y spec.deadLetter.queue"]);
        assert!(owners(&y, &all).is_empty());
    }

    #[test]
    fn retry_tiers_are_claimed_by_prefix() {
        let one = dynamic(
            "one",
            10,
            spec("q1", serde_json::json!({})),
            &["q1", "q1.retry.5s"],
        );
        let eight = dynamic(
            "eight",
            20,
            spec(
                "q8",
                serde_json::json!({"deadLetter": {"queue": "q1.retry.5s"}}),
            ),
            &[],
        );
        let all = vec![one.clone(), eight.clone()];
        assert_eq!(owners(&eight, &all), ["ns/one spec.deadLetter.queue"]);
        assert!(owners(&one, &all).is_empty());
    }

    #[test]
    fn other_vhosts_do_not_overlap() {
        let a = dynamic("a", 10, spec("orders", serde_json::json!({})), &[]);
        let b = dynamic(
            "b",
            20,
            spec(
                "orders",
                serde_json::json!({"broker": {"secretRef": {"name": "rabbit"}, "vhost": "other"}}),
            ),
            &[],
        );
        assert!(owners(&b, &[a, b.clone()]).is_empty());
    }
}
