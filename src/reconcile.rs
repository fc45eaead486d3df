//! The reconcile core shared by every driver (`apply`, `run --standalone` and the
//! Kubernetes controller), in the stages of docs/ARCHITECTURE.md, "Reconcile stages": read
//! (done by the driver) → validate → plan
//! (pure: [`prepare`]) → apply to the broker ([`apply`]) → status (the driver writes
//! [`Outcome`](crate::broker::Outcome)'s conditions its own way).

use k8s_openapi::api::core::v1::Secret;

use crate::backoff::ResolvedPolicy;
use crate::broker::{ApplyReport, BrokerConnection, BrokerError, BrokerTopology, RedisConnection};
use crate::crd::{BrokerType, DeadLetterQueue, FieldError, InvalidSpec, RetryPolicy};
use crate::manifest::{object_key, secret_data};
use crate::redis::stream::StreamSource;
use crate::redis_keys::Keys;
use crate::topology::{self, DesiredTopology};

/// Why a DeadLetterQueue could not be reconciled. Each variant has a condition reason
/// ([`ReconcileError::reason`], CamelCase per Kubernetes API conventions) and a metric
/// label ([`ReconcileError::metric_label`]).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Validating or planning failed ([`plan`]): an invalid spec, a missing reference or
    /// an unusable Secret.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Another DeadLetterQueue already manages a queue or exchange this one plans (on the
    /// same broker Secret and vhost): applying both would make them overwrite each other's
    /// policies.
    #[error("{field}: {message}")]
    NameConflict {
        /// The field that names the shared object (e.g. `spec.source.queue`).
        field: &'static str,
        /// Which object, and who manages it.
        message: String,
    },
    /// The broker refused or could not be reached.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl ReconcileError {
    /// Condition reason for this error (e.g. `InvalidSpec`, `BrokerUnreachable`).
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Plan(e) => e.reason(),
            ReconcileError::NameConflict { .. } => "NameConflict",
            ReconcileError::Broker(e) => broker_reason(e),
        }
    }

    /// Metric label (`result` of `dlq_operator_reconcile_total`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Plan(e) => e.metric_label(),
            ReconcileError::NameConflict { .. } => "name_conflict",
            ReconcileError::Broker(e) => e.metric_label(),
        }
    }

    /// `true` for an error a retry cannot fix: an invalid spec waits for a change.
    pub fn is_invalid_spec(&self) -> bool {
        matches!(self, ReconcileError::Plan(PlanError::InvalidSpec { .. }))
    }
}

/// The condition reason of a broker error (e.g. `BrokerUnreachable`, `InvalidSecret`).
pub fn broker_reason(e: &BrokerError) -> &'static str {
    match e {
        BrokerError::Unreachable { .. } => "BrokerUnreachable",
        BrokerError::AuthFailed { .. } => "BrokerAuthFailed",
        BrokerError::ArgumentConflict { .. } => "ArgumentConflict",
        BrokerError::InvalidSecret { .. } => "InvalidSecret",
        BrokerError::Tls { .. } => "BrokerTlsError",
        BrokerError::NotFound { .. } => "BrokerNotFound",
        BrokerError::NameOwned { .. } => "NameConflict",
        BrokerError::Api { .. } | BrokerError::Amqp { .. } => "BrokerError",
    }
}

/// The kind of a resource a DeadLetterQueue's reconcile reads: the resource itself and
/// what it references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// `dlqoperator.io/v1alpha1` DeadLetterQueue.
    DeadLetterQueue,
    /// `dlqoperator.io/v1alpha1` RetryPolicy (`spec.retryPolicyRef`).
    RetryPolicy,
    /// `v1` Secret (`spec.broker.secretRef`).
    Secret,
}

impl ResourceKind {
    /// The Kubernetes kind (`DeadLetterQueue`, `RetryPolicy`, `Secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::DeadLetterQueue => "DeadLetterQueue",
            ResourceKind::RetryPolicy => "RetryPolicy",
            ResourceKind::Secret => "Secret",
        }
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a DeadLetterQueue cannot be planned ([`plan`]): what it or its references hold,
/// found without any network.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The DeadLetterQueue or its RetryPolicy fails validation.
    #[error("{kind} {name}: invalid spec: {source}")]
    InvalidSpec {
        /// Kind of the invalid resource.
        kind: ResourceKind,
        /// `namespace/name`.
        name: String,
        /// The invalid fields.
        source: InvalidSpec,
    },
    /// `spec.retryPolicyRef` names a RetryPolicy that does not exist (`namespace/name`).
    #[error("spec.retryPolicyRef.name: RetryPolicy {0} not found")]
    RetryPolicyNotFound(String),
    /// `spec.broker.secretRef` names a Secret that does not exist (`namespace/name`).
    #[error("spec.broker.secretRef.name: Secret {0} not found")]
    SecretNotFound(String),
    /// The Secret does not make a broker connection
    /// ([`BrokerConnection::from_secret_data`]: [`BrokerError::InvalidSecret`] naming the
    /// key).
    #[error(transparent)]
    Secret(BrokerError),
}

impl PlanError {
    /// Condition reason (`InvalidSpec`, `RetryPolicyNotFound`, `SecretNotFound`, or the
    /// Secret's broker error's: `InvalidSecret`).
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::InvalidSpec { .. } => "InvalidSpec",
            PlanError::RetryPolicyNotFound(_) => "RetryPolicyNotFound",
            PlanError::SecretNotFound(_) => "SecretNotFound",
            PlanError::Secret(e) => broker_reason(e),
        }
    }

    /// Metric label (`result` of `dlq_operator_reconcile_total`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            PlanError::InvalidSpec { .. } => "invalid_spec",
            PlanError::RetryPolicyNotFound(_) => "retry_policy_not_found",
            PlanError::SecretNotFound(_) => "secret_not_found",
            PlanError::Secret(e) => e.metric_label(),
        }
    }
}

/// A validated and planned DeadLetterQueue, ready to apply.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// `namespace/name` of the DeadLetterQueue.
    pub key: String,
    /// The resolved RetryPolicy.
    pub policy: ResolvedPolicy,
    /// The desired broker topology.
    pub topology: DesiredTopology,
    /// Broker connection settings from the Secret.
    pub connection: BrokerConnection,
    /// `spec.monitoring.interval` in milliseconds.
    pub monitoring_interval_ms: Option<u64>,
    /// `spec.monitoring`, validated, for the backlog evaluator.
    pub monitoring: crate::monitor::Params,
}

/// Validates a DeadLetterQueue and what it references, then plans its topology: [`plan`]
/// with its error as the [`ReconcileError`] a driver reports. Pure: no network.
///
/// # Errors
/// [`plan`]'s [`PlanError`] as [`ReconcileError::Plan`]: `InvalidSpec` (naming the fields),
/// `RetryPolicyNotFound`, `SecretNotFound`, or `Secret(InvalidSecret)` for an unusable Secret.
pub fn prepare(
    dlq: &DeadLetterQueue,
    policy: Option<&RetryPolicy>,
    secret: Option<&Secret>,
) -> Result<Prepared, ReconcileError> {
    plan(dlq, policy, secret).map_err(ReconcileError::from)
}

/// Validates a DeadLetterQueue and what it references, then plans its topology (the
/// validate and plan stages). Pure: no network. `policy` and `secret` are what the driver
/// found for `spec.retryPolicyRef` and `spec.broker.secretRef` in the resource's
/// namespace (`None` when missing).
///
/// The checks run in this order, and the first failure is returned: the DeadLetterQueue's
/// own spec (so an invalid object never reaches a broker whatever its references are),
/// the RetryPolicy (missing, then invalid), the Secret (missing, then unusable), then
/// `spec.monitoring`.
///
/// # Errors
/// [`PlanError::InvalidSpec`] naming the resource and its fields,
/// [`PlanError::RetryPolicyNotFound`], [`PlanError::SecretNotFound`], or
/// [`PlanError::Secret`] for a Secret that does not make a broker connection.
pub fn plan(
    dlq: &DeadLetterQueue,
    policy: Option<&RetryPolicy>,
    secret: Option<&Secret>,
) -> Result<Prepared, PlanError> {
    let checked = check(dlq, policy, secret)?;
    if dlq.spec.broker.type_ == BrokerType::Redis {
        return Err(checked.invalid(InvalidSpec(vec![FieldError {
            field: "spec.broker.type".into(),
            message: REDIS_ONLY_ROUTED.into(),
        }])));
    }
    let connection = BrokerConnection::from_secret_data(
        &dlq.spec.broker.secret_ref.name,
        &secret_data(checked.secret),
    )
    .map_err(PlanError::Secret)?;
    let monitoring = checked.monitoring(dlq)?;
    let topology = topology::plan(&checked.key, &dlq.spec, &checked.policy);
    Ok(Prepared {
        monitoring,
        key: checked.key,
        policy: checked.policy,
        topology,
        connection,
        monitoring_interval_ms: dlq.spec.monitoring.interval.as_ms().ok(),
    })
}

/// Why a Redis DeadLetterQueue is refused by the drivers that plan RabbitMQ topology only
/// in this version (the `spec.broker.type` error of [`plan`]).
pub const REDIS_ONLY_ROUTED: &str = "Redis DeadLetterQueues are applied by `dlq-operator apply -f` and run by `dlq-operator router --standalone -f` in this version (docs/REDIS.md); the controller, run --standalone and this command do not handle them yet";

/// A Redis DeadLetterQueue, validated and planned: what its retry router needs
/// ([`plan_redis`]).
#[derive(Debug, Clone)]
pub struct RedisPlan {
    /// `namespace/name` of the DeadLetterQueue.
    pub key: String,
    /// The Redis deployment, from the Secret.
    pub connection: RedisConnection,
    /// The stream, its group and keys, the visibility timeout.
    pub source: StreamSource,
    /// The resolved RetryPolicy.
    pub policy: ResolvedPolicy,
}

/// Default `spec.source.visibilityTimeout`, ms.
pub const DEFAULT_VISIBILITY_TIMEOUT_MS: u64 = 30_000;

/// Validates a Redis DeadLetterQueue and what it references, then plans its source
/// (docs/REDIS.md): the checks and their order of [`plan`].
///
/// # Errors
/// As [`plan`]; [`PlanError::InvalidSpec`] naming `spec.broker.type` for a RabbitMQ
/// DeadLetterQueue; [`PlanError::Secret`] for a Secret without a Redis `uri`.
pub fn plan_redis(
    dlq: &DeadLetterQueue,
    policy: Option<&RetryPolicy>,
    secret: Option<&Secret>,
) -> Result<RedisPlan, PlanError> {
    let checked = check(dlq, policy, secret)?;
    let spec = &dlq.spec;
    let (Some(stream), Some(group), BrokerType::Redis) =
        (&spec.source.stream, &spec.source.group, spec.broker.type_)
    else {
        return Err(checked.invalid(InvalidSpec(vec![FieldError {
            field: "spec.broker.type".into(),
            message: "not Redis: this DeadLetterQueue is planned as a RabbitMQ one".into(),
        }])));
    };
    let connection = RedisConnection::from_secret_data(
        &spec.broker.secret_ref.name,
        &secret_data(checked.secret),
    )
    .map_err(PlanError::Secret)?;
    checked.monitoring(dlq)?;
    let keys = Keys::new(stream, spec.dead_letter.queue.as_deref(), None).map_err(|e| {
        checked.invalid(InvalidSpec(vec![FieldError {
            field: "spec.source.stream".into(),
            message: e.to_string(),
        }]))
    })?;
    let visibility_timeout_ms = spec
        .source
        .visibility_timeout
        .as_ref()
        .and_then(|d| d.as_ms().ok())
        .unwrap_or(DEFAULT_VISIBILITY_TIMEOUT_MS);
    Ok(RedisPlan {
        source: StreamSource {
            keys,
            group: group.clone(),
            visibility_timeout_ms,
            dead_letter_max_length: spec.dead_letter.max_length,
        },
        key: checked.key,
        connection,
        policy: checked.policy,
    })
}

/// What every plan checks first ([`check`]).
struct Checked<'a> {
    key: String,
    policy: ResolvedPolicy,
    secret: &'a Secret,
}

impl Checked<'_> {
    /// The DeadLetterQueue's invalid spec `source`.
    fn invalid(&self, source: InvalidSpec) -> PlanError {
        PlanError::InvalidSpec {
            kind: ResourceKind::DeadLetterQueue,
            name: self.key.clone(),
            source,
        }
    }

    /// `spec.monitoring` of `dlq`, checked: the last check of [`plan`], after the Secret.
    fn monitoring(&self, dlq: &DeadLetterQueue) -> Result<crate::monitor::Params, PlanError> {
        crate::monitor::Params::from_spec(&dlq.spec.monitoring).map_err(|e| self.invalid(e))
    }
}

/// The checks of [`plan`] common to every broker, in its order: the DeadLetterQueue's
/// spec, the RetryPolicy (missing, then invalid), the Secret (missing); the Secret's
/// content and `spec.monitoring` follow in each plan.
///
/// # Errors
/// As [`plan`], but for the Secret's content.
fn check<'a>(
    dlq: &DeadLetterQueue,
    policy: Option<&RetryPolicy>,
    secret: Option<&'a Secret>,
) -> Result<Checked<'a>, PlanError> {
    let key = object_key(&dlq.metadata);
    let namespace = crate::manifest::namespace_of(&dlq.metadata);
    let invalid_dlq = |source| PlanError::InvalidSpec {
        kind: ResourceKind::DeadLetterQueue,
        name: key.clone(),
        source,
    };
    dlq.spec.validate().map_err(invalid_dlq)?;
    let policy = policy.ok_or_else(|| {
        PlanError::RetryPolicyNotFound(format!("{namespace}/{}", dlq.spec.retry_policy_ref.name))
    })?;
    let resolved =
        ResolvedPolicy::from_spec(&policy.spec).map_err(|source| PlanError::InvalidSpec {
            kind: ResourceKind::RetryPolicy,
            name: object_key(&policy.metadata),
            source,
        })?;
    let secret = secret.ok_or_else(|| {
        PlanError::SecretNotFound(format!("{namespace}/{}", dlq.spec.broker.secret_ref.name))
    })?;
    Ok(Checked {
        key,
        policy: resolved,
        secret,
    })
}

/// Applies a prepared plan to the broker (stage 4). Idempotent: a second call with the
/// same plan makes no write calls.
///
/// # Errors
/// [`ReconcileError::NameConflict`] when another DeadLetterQueue's ownership record on
/// the broker holds a planned name (nothing is written then);
/// [`ReconcileError::Broker`] when the broker cannot be reached or refuses a read or
/// write; per-object conflicts are reported in the [`ApplyReport`], not as errors.
pub async fn apply(
    broker: &dyn BrokerTopology,
    prepared: &Prepared,
) -> Result<ApplyReport, ReconcileError> {
    broker.apply(&prepared.topology).await.map_err(|e| match e {
        // Another owner's record on the broker: the same verdict as a conflict found
        // among the resources themselves.
        BrokerError::NameOwned { field, message } => {
            ReconcileError::NameConflict { field, message }
        }
        other => other.into(),
    })
}
