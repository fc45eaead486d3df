//! [`References`] in manifest files ([`Manifests`]), and the planning of every
//! DeadLetterQueue of a set of files ([`load_and_plan`]) that `apply`, `run --standalone`,
//! `render` and the `dlq` commands' `--standalone` share. Every error names the file, the
//! document, the resource and the field ([`ManifestError`]).

use std::future::{ready, Future};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;

use super::{Found, References, ResolveError};
use crate::broker::BrokerError;
use crate::crd::{BrokerType, DeadLetterQueue, FieldError, InvalidSpec, RetryPolicy};
use crate::manifest::{
    self, namespace_of, object_key, Loaded, ManifestError, Manifests, SourceRef,
};
use crate::ownership::Claim;
use crate::reconcile::{PlanError, Prepared, RedisPlan, ResourceKind};

/// The manifests answer every lookup at once (the futures are ready).
impl References for Manifests {
    fn read_dead_letter_queue(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<DeadLetterQueue>, ResolveError>> + Send {
        let key = format!("{namespace}/{name}");
        ready(Ok(self
            .dead_letter_queues
            .iter()
            .find(|d| object_key(&d.object.metadata) == key)
            .map(|d| Ok(d.object.clone()))))
    }

    fn read_retry_policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<RetryPolicy>, ResolveError>> + Send {
        ready(Ok(self
            .retry_policy(namespace, name)
            .map(|p| Ok(p.object.clone()))))
    }

    fn read_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, ResolveError>> + Send {
        ready(Ok(self.secret(namespace, name).map(|s| s.object.clone())))
    }
}

/// A DeadLetterQueue from the files, validated and planned.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Where the DeadLetterQueue was read from.
    pub source: SourceRef,
    /// The plan.
    pub prepared: Prepared,
    /// The DeadLetterQueue as read (for its alert rules).
    pub object: DeadLetterQueue,
    /// Its RetryPolicy as read (for the maturity score).
    pub retry_policy: crate::crd::RetryPolicy,
}

/// Loads manifests and validates and plans every DeadLetterQueue, without any network.
///
/// Every RetryPolicy in the files is validated, referenced or not; then each
/// DeadLetterQueue is resolved ([`plan_loaded`]) and the set is checked for two resources
/// claiming one name ([`check_ownership`]).
///
/// # Errors
/// The first problem as a [`ManifestError`] naming file, document, resource and field:
/// syntax, unknown or mistyped fields, invalid values, a missing RetryPolicy or Secret,
/// an unusable Secret, a name claimed twice, or no DeadLetterQueue at all
/// ([`ManifestError::NoDeadLetterQueue`]).
pub fn load_and_plan(paths: &[PathBuf]) -> Result<(Manifests, Vec<Planned>), ManifestError> {
    let m = load_checked(paths)?;
    let planned = m
        .dead_letter_queues
        .iter()
        .map(|d| plan_loaded(&m, d))
        .collect::<Result<Vec<_>, _>>()?;
    check_ownership(&planned)?;
    Ok((m, planned))
}

/// A Redis DeadLetterQueue from the files, validated and planned.
#[derive(Debug, Clone)]
pub struct RedisPlanned {
    /// Where the DeadLetterQueue was read from.
    pub source: SourceRef,
    /// The plan.
    pub plan: RedisPlan,
}

/// [`load_and_plan`] for files that may hold Redis DeadLetterQueues too (the retry
/// router's): the RabbitMQ ones planned as [`load_and_plan`] does, the Redis ones by
/// [`crate::reconcile::plan_redis`]; two Redis DeadLetterQueues on one stream of one
/// Secret are refused.
///
/// # Errors
/// As [`load_and_plan`].
pub fn load_and_plan_all(
    paths: &[PathBuf],
) -> Result<(Vec<Planned>, Vec<RedisPlanned>), ManifestError> {
    let m = load_checked(paths)?;
    let (redis, rabbitmq): (Vec<_>, Vec<_>) = m
        .dead_letter_queues
        .iter()
        .partition(|d| d.object.spec.broker.type_ == BrokerType::Redis);
    let planned = rabbitmq
        .into_iter()
        .map(|d| plan_loaded(&m, d))
        .collect::<Result<Vec<_>, _>>()?;
    check_ownership(&planned)?;
    let mut redis_planned: Vec<RedisPlanned> = Vec::new();
    for d in redis {
        let namespace = namespace_of(&d.object.metadata);
        // The manifests' lookups are ready futures: this returns at once.
        let plan =
            futures::executor::block_on(super::resolve_redis(&m, namespace, d.object.clone()))
                .map_err(|e| manifest_error(&m, d, e))?;
        if let Some((field, message)) = redis_overlap(&redis_planned, &plan) {
            return Err(ManifestError::Field {
                at: d.source.clone(),
                kind: ResourceKind::DeadLetterQueue.as_str(),
                name: plan.key.clone(),
                field: field.into(),
                message,
            });
        }
        redis_planned.push(RedisPlanned {
            source: d.source.clone(),
            plan,
        });
    }
    Ok((planned, redis_planned))
}

/// The field of `plan` and why, when one of its keys is a key of an `earlier` Redis
/// DeadLetterQueue on the same deployment: the same stream, or one's dead-letter stream
/// the other's source (its router would trim the other's entries).
fn redis_overlap(earlier: &[RedisPlanned], plan: &RedisPlan) -> Option<(&'static str, String)> {
    let keys = &plan.source.keys;
    earlier
        .iter()
        .filter(|p| p.plan.connection.redacted() == plan.connection.redacted())
        .find_map(|p| {
            let other = &p.plan.source.keys;
            let owner = &p.plan.key;
            if other.source() == keys.source() {
                Some(("spec.source.stream", format!("stream {:?} is already routed by DeadLetterQueue {owner}; each stream belongs to one DeadLetterQueue", keys.source())))
            } else if other.dead_letters() == keys.source() {
                Some(("spec.source.stream", format!("stream {:?} is the dead-letter stream of DeadLetterQueue {owner}", keys.source())))
            } else if other.source() == keys.dead_letters() || other.dead_letters() == keys.dead_letters() {
                Some(("spec.deadLetter.queue", format!("{:?} is a stream of DeadLetterQueue {owner}", keys.dead_letters())))
            } else {
                None
            }
        })
}

/// Loads manifests and validates every RetryPolicy in them; at least one DeadLetterQueue
/// must be there.
///
/// # Errors
/// As [`load_and_plan`].
fn load_checked(paths: &[PathBuf]) -> Result<Manifests, ManifestError> {
    let m = manifest::load_paths(paths)?;
    for p in &m.retry_policies {
        crate::backoff::ResolvedPolicy::from_spec(&p.object.spec).map_err(|e| {
            ManifestError::from_invalid(
                &p.source,
                ResourceKind::RetryPolicy.as_str(),
                &object_key(&p.object.metadata),
                &e,
            )
        })?;
    }
    if m.dead_letter_queues.is_empty() {
        return Err(ManifestError::NoDeadLetterQueue(described(paths)));
    }
    Ok(m)
}

/// `paths` for a message: `standard input` for [`manifest::STDIN`], joined by `, `.
fn described(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| {
            if p == Path::new(manifest::STDIN) {
                "standard input".to_string()
            } else {
                p.display().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves the DeadLetterQueue `d` of `m` ([`super::resolve`] over the manifests).
///
/// # Errors
/// The resolve error as a [`ManifestError`] ([`manifest_error`]).
pub fn plan_loaded(m: &Manifests, d: &Loaded<DeadLetterQueue>) -> Result<Planned, ManifestError> {
    let namespace = namespace_of(&d.object.metadata);
    // The manifests' lookups are ready futures: this returns at once, never parking.
    let resolved = futures::executor::block_on(super::resolve(m, namespace, d.object.clone()))
        .map_err(|e| manifest_error(m, d, e))?;
    Ok(Planned {
        source: d.source.clone(),
        prepared: resolved.prepared,
        object: resolved.dead_letter_queue,
        retry_policy: resolved.retry_policy,
    })
}

/// A resolve error of the DeadLetterQueue `d` of `m` as a [`ManifestError`] on the file
/// and document at fault: the RetryPolicy's or Secret's own document for what is wrong in
/// it, the DeadLetterQueue's otherwise (a missing reference names the referencing field).
pub fn manifest_error(
    m: &Manifests,
    d: &Loaded<DeadLetterQueue>,
    e: ResolveError,
) -> ManifestError {
    let dlq = &d.object;
    let ns = namespace_of(&dlq.metadata);
    let key = object_key(&dlq.metadata);
    let field = |field: &str, message: String| ManifestError::Field {
        at: d.source.clone(),
        kind: ResourceKind::DeadLetterQueue.as_str(),
        name: key.clone(),
        field: field.into(),
        message,
    };
    let policy_source = || {
        m.retry_policy(ns, &dlq.spec.retry_policy_ref.name)
            .map(|p| p.source.clone())
    };
    let secret_source = || {
        m.secret(ns, &dlq.spec.broker.secret_ref.name)
            .map(|s| s.source.clone())
    };
    let source = match e {
        ResolveError::Plan { source, .. } => source,
        // Not from the manifests' lookups: they neither fail nor look a DeadLetterQueue up.
        e @ ResolveError::NoVerdict(_) => return field("spec", e.to_string()),
    };
    match source {
        PlanError::InvalidSpec { kind, name, source } => {
            let origin = match kind {
                ResourceKind::RetryPolicy => policy_source(),
                ResourceKind::Secret => secret_source(),
                ResourceKind::DeadLetterQueue => None,
            };
            ManifestError::from_invalid(
                origin.as_ref().unwrap_or(&d.source),
                kind.as_str(),
                &name,
                &source,
            )
        }
        PlanError::RetryPolicyNotFound(name) => field(
            "spec.retryPolicyRef.name",
            format!("RetryPolicy {name} not found in the manifests"),
        ),
        PlanError::SecretNotFound(name) => field(
            "spec.broker.secretRef.name",
            format!("Secret {name} not found in the manifests"),
        ),
        PlanError::Secret(BrokerError::InvalidSecret {
            key: data_key,
            reason,
            ..
        }) => ManifestError::from_invalid(
            secret_source().as_ref().unwrap_or(&d.source),
            ResourceKind::Secret.as_str(),
            &format!("{ns}/{}", dlq.spec.broker.secret_ref.name),
            &InvalidSpec(vec![FieldError {
                field: format!("data.{data_key}"),
                message: reason,
            }]),
        ),
        // Not from a Secret's reading today: said on the resource as it is.
        PlanError::Secret(source) => field("spec", source.to_string()),
    }
}

/// Every queue and exchange the operator declares belongs to exactly one DeadLetterQueue
/// per broker (management endpoint) and vhost, by the claims of [`crate::ownership`]
/// (the retry tiers' `<retry exchange>.` prefix included): two resources claiming one
/// name would overwrite each other's policies (e.g. one's dead-letter queue being
/// another's source queue). The resource read first owns the name.
///
/// # Errors
/// [`ManifestError::Field`] on the later resource, naming the field that makes the name,
/// the shared name and the first owner.
pub fn check_ownership(planned: &[Planned]) -> Result<(), ManifestError> {
    let claimed: Vec<Claimed<'_>> = planned
        .iter()
        .map(|p| Claimed {
            endpoint: p.prepared.connection.redacted_management_uris(),
            claims: crate::ownership::claims(&p.object),
            planned: p,
        })
        .collect();
    for (i, c) in claimed.iter().enumerate() {
        let p = c.planned;
        let earlier: Vec<&Claimed<'_>> = claimed[..i]
            .iter()
            .filter(|q| {
                q.planned.prepared.topology.vhost == p.prepared.topology.vhost
                    && q.endpoint == c.endpoint
            })
            .collect();
        if let Some((field, message)) = first_overlap(c, &earlier) {
            return Err(ManifestError::Field {
                at: p.source.clone(),
                kind: ResourceKind::DeadLetterQueue.as_str(),
                name: p.prepared.key.clone(),
                field: field.into(),
                message: format!(
                    "{message}; each queue and exchange belongs to one DeadLetterQueue"
                ),
            });
        }
    }
    Ok(())
}

/// A planned resource with its broker (management endpoint) and its claims.
struct Claimed<'a> {
    planned: &'a Planned,
    endpoint: String,
    claims: Vec<Claim>,
}

/// The first claim of `c` (in [`crate::ownership::claims`] order; a retry-tier prefix
/// tries the tiers `c` plans first) that a resource of `earlier` also claims, as the field
/// and what is shared.
fn first_overlap(c: &Claimed<'_>, earlier: &[&Claimed<'_>]) -> Option<(&'static str, String)> {
    for claim in &c.claims {
        // The names the claim stands for in the plan, then the claim itself.
        let tiers = claim.prefix.then(|| planned_names(c.planned, claim.kind));
        for name in tiers
            .into_iter()
            .flatten()
            .filter(|n| claim.covers(claim.kind, n))
        {
            for q in earlier {
                if let Some(theirs) = q.claims.iter().find(|t| t.covers(claim.kind, &name)) {
                    let message = shared_name(claim.kind, &name, q.planned, theirs);
                    return Some((claim.field, message));
                }
            }
        }
        for q in earlier {
            if let Some(theirs) = q.claims.iter().find(|t| t.overlaps(claim)) {
                return Some((claim.field, shared_claim(claim, q.planned, theirs)));
            }
        }
    }
    None
}

/// The names of `kind` (`queue` or `exchange`) that `p`'s plan holds.
fn planned_names(p: &Planned, kind: &str) -> Vec<String> {
    let t = &p.prepared.topology;
    if kind == crate::ownership::QUEUE {
        t.queues.iter().map(|q| q.name.clone()).collect()
    } else {
        t.exchanges.iter().map(|x| x.name.clone()).collect()
    }
}

/// The message for `name` (of `p`'s plan), which `q`'s claim `theirs` covers.
fn shared_name(kind: &str, name: &str, q: &Planned, theirs: &Claim) -> String {
    let owner = format!("DeadLetterQueue {} ({})", q.prepared.key, q.source);
    if planned_names(q, kind).iter().any(|n| n == name) {
        format!("{kind} {name:?} is also planned by {owner}")
    } else if theirs.prefix {
        format!(
            "{kind} {name:?} is named like a retry tier of {owner}, whose retry tiers are the queues {}*",
            theirs.name
        )
    } else {
        format!(
            "{kind} {name:?} is also claimed by {owner} ({})",
            theirs.field
        )
    }
}

/// The message for `p`'s claim `mine`, which overlaps `q`'s claim `theirs`.
fn shared_claim(mine: &Claim, q: &Planned, theirs: &Claim) -> String {
    if mine.prefix {
        format!(
            "{} (the retry tiers of this DeadLetterQueue) overlaps {} of DeadLetterQueue {} ({})",
            mine.describe(),
            theirs.describe(),
            q.prepared.key,
            q.source
        )
    } else {
        shared_name(mine.kind, &mine.name, q, theirs)
    }
}
