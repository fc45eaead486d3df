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

use crate::broker::BrokerError;
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
    /// [`ResolveError::Api`] when it cannot be read.
    fn read_dead_letter_queue(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<DeadLetterQueue>, ResolveError>> + Send;

    /// The RetryPolicy `name` of `namespace`.
    ///
    /// # Errors
    /// [`ResolveError::Api`] when it cannot be read.
    fn read_retry_policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Found<RetryPolicy>, ResolveError>> + Send;

    /// The Secret `name` of `namespace` (`None` when it does not exist).
    ///
    /// # Errors
    /// [`ResolveError::Api`] when it cannot be read.
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

/// Why a DeadLetterQueue cannot be resolved: which object is at fault (the resource, its
/// RetryPolicy or its Secret) and how (missing, invalid with the field errors, an unusable
/// broker Secret, or the read failed). The messages are the `dlq` commands' (`cannot read
/// …`, `DeadLetterQueue ns/name: …`).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The DeadLetterQueue asked for by name does not exist.
    #[error("DeadLetterQueue {name} not found")]
    DeadLetterQueueNotFound {
        /// `namespace/name`.
        name: String,
    },
    /// `spec.retryPolicyRef` names a RetryPolicy that does not exist.
    #[error("DeadLetterQueue {dead_letter_queue}: spec.retryPolicyRef.name: RetryPolicy {name} not found")]
    RetryPolicyNotFound {
        /// The DeadLetterQueue's `namespace/name`.
        dead_letter_queue: String,
        /// The RetryPolicy's `namespace/name`.
        name: String,
    },
    /// `spec.broker.secretRef` names a Secret that does not exist.
    #[error(
        "DeadLetterQueue {dead_letter_queue}: spec.broker.secretRef.name: Secret {name} not found"
    )]
    SecretNotFound {
        /// The DeadLetterQueue's `namespace/name`.
        dead_letter_queue: String,
        /// The Secret's `namespace/name`.
        name: String,
    },
    /// The DeadLetterQueue or its RetryPolicy fails validation, or does not decode.
    #[error("DeadLetterQueue {dead_letter_queue}: {kind} {name}: invalid spec: {source}")]
    Invalid {
        /// The DeadLetterQueue's `namespace/name`.
        dead_letter_queue: String,
        /// Which object is invalid.
        kind: ResourceKind,
        /// Its `namespace/name`.
        name: String,
        /// The invalid fields.
        source: InvalidSpec,
    },
    /// The Secret does not make a broker connection
    /// ([`BrokerError::InvalidSecret`] naming the key and what is wrong).
    #[error("DeadLetterQueue {dead_letter_queue}: {source}")]
    InvalidSecret {
        /// The DeadLetterQueue's `namespace/name`.
        dead_letter_queue: String,
        /// Why.
        source: BrokerError,
    },
    /// An object could not be read (the Kubernetes API server's error).
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

impl ResolveError {
    /// The error of [`reconcile::plan`] for the DeadLetterQueue `dead_letter_queue`
    /// (`namespace/name`).
    pub fn from_plan(dead_letter_queue: &str, e: PlanError) -> Self {
        let dead_letter_queue = dead_letter_queue.to_string();
        match e {
            PlanError::InvalidSpec { kind, name, source } => ResolveError::Invalid {
                dead_letter_queue,
                kind,
                name,
                source,
            },
            PlanError::RetryPolicyNotFound(name) => ResolveError::RetryPolicyNotFound {
                dead_letter_queue,
                name,
            },
            PlanError::SecretNotFound(name) => ResolveError::SecretNotFound {
                dead_letter_queue,
                name,
            },
            PlanError::Secret(source) => ResolveError::InvalidSecret {
                dead_letter_queue,
                source,
            },
        }
    }

    /// The resource's reconcile error (its conditions' reason and message, as the
    /// controller writes them) when the failure is the DeadLetterQueue's or what it
    /// references; [`NoVerdict`] when it is not a verdict on the resource: it does not exist
    /// ([`ResolveError::DeadLetterQueueNotFound`]) or could not be read
    /// ([`ResolveError::Api`], to retry).
    ///
    /// # Errors
    /// [`NoVerdict`], for those two.
    pub fn into_reconcile(self) -> Result<ReconcileError, NoVerdict> {
        match self {
            ResolveError::RetryPolicyNotFound { name, .. } => {
                Ok(ReconcileError::RetryPolicyNotFound(name))
            }
            ResolveError::SecretNotFound { name, .. } => Ok(ReconcileError::SecretNotFound(name)),
            ResolveError::Invalid {
                kind, name, source, ..
            } => Ok(ReconcileError::InvalidSpec { kind, name, source }),
            ResolveError::InvalidSecret { source, .. } => Ok(ReconcileError::Broker(source)),
            ResolveError::DeadLetterQueueNotFound { name } => {
                Err(NoVerdict::DeadLetterQueueNotFound { name })
            }
            ResolveError::Api { kind, name, source } => Err(NoVerdict::Api { kind, name, source }),
        }
    }
}

/// A [`ResolveError`] that is no verdict on the DeadLetterQueue
/// ([`ResolveError::into_reconcile`]): nothing to write to its conditions. The variants and
/// messages are [`ResolveError`]'s of the same name.
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
/// [`ResolveError::Invalid`] (the DeadLetterQueue or its RetryPolicy, naming the fields),
/// [`ResolveError::RetryPolicyNotFound`], [`ResolveError::SecretNotFound`],
/// [`ResolveError::InvalidSecret`], or [`ResolveError::Api`] from a read.
pub async fn resolve<R: References + ?Sized>(
    refs: &R,
    namespace: &str,
    dlq: DeadLetterQueue,
) -> Result<Resolved, ResolveError> {
    let key = object_key(&dlq.metadata);
    let invalid = |kind, name: String, source| ResolveError::Invalid {
        dead_letter_queue: key.clone(),
        kind,
        name,
        source,
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
    let prepared = reconcile::plan(&dlq, policy.as_ref(), secret.as_ref())
        .map_err(|e| ResolveError::from_plan(&key, e))?;
    // `plan` refuses a missing reference, so both are here; said again without a panic.
    match (policy, secret) {
        (Some(retry_policy), Some(secret)) => Ok(Resolved {
            dead_letter_queue: dlq,
            retry_policy,
            secret,
            prepared,
        }),
        (None, _) => Err(ResolveError::RetryPolicyNotFound {
            dead_letter_queue: key,
            name: format!("{namespace}/{policy_name}"),
        }),
        (Some(_), None) => Err(ResolveError::SecretNotFound {
            name: format!("{namespace}/{}", dlq.spec.broker.secret_ref.name),
            dead_letter_queue: key,
        }),
    }
}

/// Reads the DeadLetterQueue `namespace/name` from `refs` and [`resolve`]s it.
///
/// # Errors
/// [`ResolveError::DeadLetterQueueNotFound`], [`ResolveError::Invalid`] for one that does
/// not decode, [`ResolveError::Api`] when it cannot be read, then as [`resolve`].
pub async fn by_name<R: References + ?Sized>(
    refs: &R,
    namespace: &str,
    name: &str,
) -> Result<Resolved, ResolveError> {
    let key = format!("{namespace}/{name}");
    match refs.read_dead_letter_queue(namespace, name).await? {
        None => Err(ResolveError::DeadLetterQueueNotFound { name: key }),
        Some(Err(source)) => Err(ResolveError::Invalid {
            dead_letter_queue: key.clone(),
            kind: ResourceKind::DeadLetterQueue,
            name: key,
            source,
        }),
        Some(Ok(dlq)) => resolve(refs, namespace, dlq).await,
    }
}

#[cfg(test)]
mod tests;
