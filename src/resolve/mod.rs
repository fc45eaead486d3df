//! Resolve once: from a DeadLetterQueue (its `namespace/name`, or the object already
//! read) to everything a driver needs — the validated resource, its RetryPolicy, its
//! Secret and the plan ([`Resolved`]) — in the read → validate → plan stages of
//! docs/ARCHITECTURE.md, "Reconcile stages".
//!
//! Reading is behind [`References`], with two implementations: the cluster
//! ([`cluster::Cluster`], the Kubernetes API) and the manifest files
//! ([`Manifests`](crate::manifest::Manifests), see [`manifests`]). Validation and planning
//! are [`crate::reconcile::plan`], the same for every driver. Every failure is one
//! [`ResolveError`] naming the object and the field at fault.
//!
//! [`target`]: the DeadLetterQueue of a `dlq` command (cluster or files), resolved here.

pub mod cluster;
pub mod manifests;
pub mod target;

use std::future::Future;

use k8s_openapi::api::core::v1::Secret;

use crate::crd::{DeadLetterQueue, InvalidSpec, RetryPolicy};
use crate::manifest::object_key;
use crate::reconcile::{self, PlanError, Prepared, ReconcileError, ResourceKind};

pub use cluster::{in_cluster, object_in_cluster, Cluster};

/// What a lookup found: `None` when the object does not exist, `Some(Err)` when it exists
/// but does not decode as its kind (naming the field), `Some(Ok)` otherwise.
pub type Found<T> = Option<Result<T, InvalidSpec>>;

/// Where a driver reads a DeadLetterQueue and what it references. Each lookup is one
/// object of a namespace, by name.
pub trait References {
    /// The DeadLetterQueue `name` of `namespace`.
    ///
    /// # Errors
    /// [`NoVerdict::Api`] when it cannot be read.
    fn read_dead_letter_queue(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<DeadLetterQueue>, ResolveError>> + Send;

    /// The RetryPolicy `name` of `namespace`.
    ///
    /// # Errors
    /// [`NoVerdict::Api`] when it cannot be read.
    fn read_retry_policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<RetryPolicy>, ResolveError>> + Send;

    /// The Secret `name` of `namespace` (`None` when it does not exist).
    ///
    /// # Errors
    /// [`NoVerdict::Api`] when it cannot be read.
    fn read_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, ResolveError>> + Send;
}

/// A DeadLetterQueue resolved: the resource (its spec validated), what it references,
/// and its plan.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The DeadLetterQueue, as read.
    pub dead_letter_queue: DeadLetterQueue,
    /// Its RetryPolicy (`spec.retryPolicyRef`), as read.
    pub retry_policy: RetryPolicy,
    /// Its broker Secret (`spec.broker.secretRef`), as read; the connection made of it is
    /// [`Prepared::connection`].
    pub secret: Secret,
    /// The validated plan: resolved RetryPolicy, broker connection, topology, monitoring.
    pub prepared: Prepared,
}

/// Why a DeadLetterQueue cannot be resolved: a verdict on the resource ([`PlanError`]:
/// which object is at fault — the resource, its RetryPolicy or its Secret — and how), or no
/// verdict ([`NoVerdict`]: the resource is not there, or a read failed). The messages are
/// the `dlq` commands' (`cannot read …`, `DeadLetterQueue ns/name: …`).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Validating or planning the DeadLetterQueue failed ([`reconcile::plan`]).
    #[error("DeadLetterQueue {dead_letter_queue}: {source}")]
    Plan {
        /// The DeadLetterQueue's `namespace/name`.
        dead_letter_queue: String,
        /// Which object is at fault, and how.
        source: PlanError,
    },
    /// Nothing to say about the resource: it is missing, or an object could not be read.
    #[error(transparent)]
    NoVerdict(#[from] NoVerdict),
}

impl ResolveError {
    /// The error of [`reconcile::plan`] for the DeadLetterQueue `dead_letter_queue`
    /// (`namespace/name`).
    pub fn from_plan(dead_letter_queue: &str, source: PlanError) -> Self {
        ResolveError::Plan {
            dead_letter_queue: dead_letter_queue.to_string(),
            source,
        }
    }

    /// An object that could not be read (the API server's `source` error).
    pub fn api(kind: ResourceKind, name: String, source: kube::Error) -> Self {
        NoVerdict::Api { kind, name, source }.into()
    }

    /// What the controllers write to the DeadLetterQueue's conditions: `Ok` the verdict
    /// ([`ReconcileError::Plan`], the same reason and message as the reconcile core's), or
    /// `Err` when there is none: the DeadLetterQueue is not there
    /// ([`NoVerdict::DeadLetterQueueNotFound`]) or could not be read ([`NoVerdict::Api`],
    /// to retry).
    ///
    /// # Errors
    /// [`NoVerdict`], for those two.
    pub fn into_reconcile(self) -> Result<ReconcileError, NoVerdict> {
        match self {
            ResolveError::Plan { source, .. } => Ok(ReconcileError::Plan(source)),
            ResolveError::NoVerdict(e) => Err(e),
        }
    }
}

/// A [`ResolveError`] that is no verdict on the DeadLetterQueue
/// ([`ResolveError::into_reconcile`]): nothing to write to its conditions.
#[derive(Debug, thiserror::Error)]
pub enum NoVerdict {
    /// The DeadLetterQueue asked for by name does not exist.
    #[error("DeadLetterQueue {name} not found")]
    DeadLetterQueueNotFound {
        /// `namespace/name`.
        name: String,
    },
    /// An object could not be read (the Kubernetes API server's error): to retry.
    #[error("cannot read {kind} {name}: {source}")]
    Api {
        /// What was read.
        kind: ResourceKind,
        /// Its `namespace/name`.
        name: String,
        /// The API error.
        source: kube::Error,
    },
}

/// Resolves the DeadLetterQueue `dlq` of `namespace` (already read): validates its spec
/// first (an invalid resource is refused before anything it references is read), reads its
/// RetryPolicy and Secret from `refs` (both, whatever the first holds: the reads of the
/// controller since its first version), then validates and plans
/// ([`reconcile::plan`]).
///
/// # Errors
/// [`ResolveError::Plan`]: [`PlanError::InvalidSpec`] (the DeadLetterQueue or its
/// RetryPolicy, naming the fields), [`PlanError::RetryPolicyNotFound`],
/// [`PlanError::SecretNotFound`], [`PlanError::Secret`]; or [`NoVerdict::Api`] from a read.
pub async fn resolve<R: References + ?Sized>(
    refs: &R,
    namespace: &str,
    dlq: DeadLetterQueue,
) -> Result<Resolved, ResolveError> {
    let (dead_letter_queue, retry_policy, secret, prepared) =
        read_and_plan(refs, namespace, dlq, reconcile::plan).await?;
    Ok(Resolved {
        dead_letter_queue,
        retry_policy,
        secret,
        prepared,
    })
}

/// [`resolve`] for a Redis DeadLetterQueue: the same reads and checks, planned by
/// [`reconcile::plan_redis`].
///
/// # Errors
/// As [`resolve`].
pub async fn resolve_redis<R: References + ?Sized>(
    refs: &R,
    namespace: &str,
    dlq: DeadLetterQueue,
) -> Result<reconcile::RedisPlan, ResolveError> {
    let (.., plan) = read_and_plan(refs, namespace, dlq, reconcile::plan_redis).await?;
    Ok(plan)
}

/// The reads and checks of [`resolve`], planned by `planner`; returns the DeadLetterQueue,
/// its RetryPolicy and Secret, and the plan.
async fn read_and_plan<R, P>(
    refs: &R,
    namespace: &str,
    dlq: DeadLetterQueue,
    planner: impl Fn(&DeadLetterQueue, Option<&RetryPolicy>, Option<&Secret>) -> Result<P, PlanError>,
) -> Result<(DeadLetterQueue, RetryPolicy, Secret, P), ResolveError>
where
    R: References + ?Sized,
{
    let key = object_key(&dlq.metadata);
    let invalid = |kind, name: String, source| {
        ResolveError::from_plan(&key, PlanError::InvalidSpec { kind, name, source })
    };
    dlq.spec
        .validate()
        .map_err(|source| invalid(ResourceKind::DeadLetterQueue, key.clone(), source))?;
    let policy_name = &dlq.spec.retry_policy_ref.name;
    let policy = refs.read_retry_policy(namespace, policy_name).await?;
    let secret = refs
        .read_secret(namespace, &dlq.spec.broker.secret_ref.name)
        .await?;
    let policy = match policy {
        Some(Err(source)) => {
            let name = format!("{namespace}/{policy_name}");
            return Err(invalid(ResourceKind::RetryPolicy, name, source));
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    let plan = planner(&dlq, policy.as_ref(), secret.as_ref())
        .map_err(|e| ResolveError::from_plan(&key, e))?;
    // The planners refuse a missing reference, so both are here; said again without a
    // panic.
    match (policy, secret) {
        (Some(retry_policy), Some(secret)) => Ok((dlq, retry_policy, secret, plan)),
        (None, _) => Err(ResolveError::from_plan(
            &key,
            PlanError::RetryPolicyNotFound(format!("{namespace}/{policy_name}")),
        )),
        (Some(_), None) => Err(ResolveError::from_plan(
            &key,
            PlanError::SecretNotFound(format!("{namespace}/{}", dlq.spec.broker.secret_ref.name)),
        )),
    }
}

/// Reads the DeadLetterQueue `namespace/name` from `refs` and [`resolve`]s it.
///
/// # Errors
/// [`NoVerdict::DeadLetterQueueNotFound`], [`PlanError::InvalidSpec`] for one that does
/// not decode, [`NoVerdict::Api`] when it cannot be read, then as [`resolve`].
pub async fn by_name<R: References + ?Sized>(
    refs: &R,
    namespace: &str,
    name: &str,
) -> Result<Resolved, ResolveError> {
    let key = format!("{namespace}/{name}");
    match refs.read_dead_letter_queue(namespace, name).await? {
        None => Err(NoVerdict::DeadLetterQueueNotFound { name: key }.into()),
        Some(Err(source)) => Err(ResolveError::from_plan(
            &key,
            PlanError::InvalidSpec {
                kind: ResourceKind::DeadLetterQueue,
                name: key.clone(),
                source,
            },
        )),
        Some(Ok(dlq)) => resolve(refs, namespace, dlq).await,
    }
}

#[cfg(test)]
mod tests;
