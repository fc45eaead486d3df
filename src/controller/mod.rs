//! The Kubernetes operator (`dlq-operator run`): three kube-runtime controllers over the
//! same reconcile core as the standalone runner (docs/ARCHITECTURE.md, "Reconcile stages" and "Modules").
//!
//! - [`dead_letter_queue`]: DeadLetterQueues — finalizer, broker topology, status, Events;
//!   re-reconciled when a RetryPolicy or Secret they reference changes.
//! - [`retry_policy`]: RetryPolicies — computed schedule, tiers and `Ready`.
//! - [`dead_letter_replay`]: DeadLetterReplays — one replay of a DeadLetterQueue's
//!   dead-lettered messages each, run in a background task, resumed after a restart.
//! - [`shared`]: what the controllers share (client, metrics, broker clients, clock).
//! - [`context`]: each controller's own context (recorder, backoff, and what only it
//!   uses) over the shared one.
//! - [`backlog`]: the backlog monitor beside the controllers (depths, `BacklogHigh`).
//! - [`alert_rules`]: the PrometheusRule of a DeadLetterQueue.
//! - [`ownership`]: one owner per broker name.
//! - [`controllers`](mod@controllers): the three controllers and the backlog monitor, run
//!   together until a stop token is cancelled.
//! - [`operator`]: `dlq-operator run` ([`run`]): waits for the CRDs, takes the leader
//!   Lease, runs the controllers until its stop token is cancelled (SIGTERM: draining
//!   in-flight reconciles and running replays) or until the lease is lost.

pub mod alert_rules;
pub mod backlog;
pub mod context;
pub mod controllers;
pub mod dead_letter_queue;
pub mod dead_letter_replay;
#[cfg(test)]
pub(crate) mod mock_api;
pub mod operator;
pub mod ownership;
pub mod retry_policy;
pub mod shared;

pub use controllers::{controllers, Contexts, SHUTDOWN_GRACE};
pub use operator::{run, RunError};

/// Fixtures shared by the controller's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::broker::{Action, ApplyReport, ObjectKind, Outcome};

    /// The time `secs` seconds after the epoch.
    pub fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

    /// A report with one queue `q<i>` per outcome.
    pub fn report(outcomes: Vec<Outcome>) -> ApplyReport {
        ApplyReport {
            actions: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, outcome)| Action {
                    kind: ObjectKind::Queue,
                    name: format!("q{i}"),
                    outcome,
                })
                .collect(),
        }
    }
}

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use tracing::{info, warn, Instrument};

use crate::controller::context::{Context, ControllerContext};
use crate::reconcile::ReconcileError;
use crate::resolve::{NoVerdict, ResolveError};
use crate::status::{publish, Note};

/// Why a reconcile failed. Each variant has a metric label ([`Error::metric_label`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The reconcile core failed (invalid spec, missing reference, broker error); already
    /// written to the object's status.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// Resolving a DeadLetterQueue gave no verdict on it: a read of it or of what it
    /// references failed (the Kubernetes API error, nested), or it is not there.
    #[error(transparent)]
    Resolve(NoVerdict),
    /// `deletionPolicy: Delete` cannot proceed: a queue still holds messages or has
    /// consumers. The finalizer is kept.
    #[error("deletion blocked: {0}")]
    DeletionBlocked(String),
    /// Adding or removing the finalizer failed, or the apply/cleanup inside it did.
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The object has no namespace (the resources are namespaced).
    #[error("object has no namespace")]
    NoNamespace,
    /// The object has no `metadata.uid` (every object the API server sends has one).
    #[error("object has no metadata.uid")]
    NoUid,
}

impl Error {
    /// The error inside [`Error::Finalizer`]'s apply or cleanup, or `self`.
    pub fn root(&self) -> &Error {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Finalizer(inner) => match inner.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.root(),
                _ => self,
            },
            _ => self,
        }
    }

    /// `result` label of `dlq_operator_reconcile_total` (snake_case, one per variant;
    /// reconcile-core errors use [`ReconcileError::metric_label`]).
    pub fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self.root() {
            // A DeadLetterQueue not there is the API server's 404 for it.
            Error::Kube(_) | Error::Resolve(_) => "kube_api",
            Error::Reconcile(e) => e.metric_label(),
            Error::DeletionBlocked(_) => "deletion_blocked",
            Error::NoNamespace => "no_namespace",
            Error::NoUid => "no_uid",
            Error::Finalizer(inner) => match inner.as_ref() {
                F::AddFinalizer(_) | F::RemoveFinalizer(_) => "finalizer_patch",
                F::UnnamedObject => "unnamed_object",
                F::InvalidFinalizer => "invalid_finalizer",
                F::ApplyFailed(_) | F::CleanupFailed(_) => "finalizer",
            },
        }
    }

    /// `true` when adding or removing the finalizer was refused because the object
    /// changed under the patch (422 from the patch's `test` operation, or 409): the
    /// reconcile worked on a stale cached copy and a prompt retry fixes it.
    pub fn is_stale_finalizer_patch(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Finalizer(inner) => matches!(
                inner.as_ref(),
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s))
                    if s.code == 422 || s.code == 409
            ),
            _ => false,
        }
    }

    /// `true` when removing the finalizer failed because the object is already gone (404):
    /// another writer released it first (e.g. its CRD is being deleted, or a finalizer was
    /// removed by hand). Nothing is left to do: not an error.
    pub fn is_removal_from_gone_object(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Finalizer(inner) => matches!(
                inner.as_ref(),
                F::RemoveFinalizer(kube::Error::Api(s)) if s.code == 404
            ),
            _ => false,
        }
    }

    /// `true` for errors a retry cannot fix (an invalid spec): the object waits for a
    /// change instead of being retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self.root(), Error::Reconcile(e) if e.is_invalid_spec())
    }
}

/// A failed resolve of a DeadLetterQueue ([`crate::resolve::object_in_cluster`]) as the
/// controllers report it: `Ok` the verdict on the resource (its conditions' reason and
/// message), `Err` the error to retry with backoff ([`Error::Resolve`]: a failed read, or a
/// DeadLetterQueue that is not there).
///
/// # Errors
/// [`Error::Resolve`], for those two.
pub(crate) fn resolve_verdict(e: ResolveError) -> Result<ReconcileError, Error> {
    e.into_reconcile().map_err(Error::Resolve)
}

/// Writes `status` of `obj` (a resource of `resource`) with `shared`'s client by
/// server-side apply: field manager [`context::FIELD_MANAGER`], forced (the operator owns
/// the status).
///
/// # Errors
/// The API server's error.
pub async fn apply_status<S: serde::Serialize>(
    shared: &Context,
    resource: &ApiResource,
    obj: &DynamicObject,
    status: &S,
) -> Result<(), Error> {
    apply_status_as(shared, resource, obj, status, context::FIELD_MANAGER).await
}

/// [`apply_status`] under the field manager `manager` (the backlog monitor owns its own
/// status fields: [`backlog::FIELD_MANAGER`]).
///
/// # Errors
/// Kubernetes API errors.
pub async fn apply_status_as<S: serde::Serialize>(
    shared: &Context,
    resource: &ApiResource,
    obj: &DynamicObject,
    status: &S,
    manager: &str,
) -> Result<(), Error> {
    apply_status_body(shared, resource, obj, status, manager, None).await?;
    Ok(())
}

/// [`apply_status`] as an optimistic write, for writers that outlive a reconcile (the
/// DeadLetterReplay runs): the apply carries `resource_version`, so the API server refuses
/// it with 409 Conflict when the object changed since — in particular when it was deleted
/// and re-created under the same name, which must not receive this object's status.
/// (A `metadata.uid` in the apply body would not do: v1.20 accepts a wrong one.) Returns
/// the object's new `resourceVersion`.
///
/// # Errors
/// Kubernetes API errors: 404 when the object is gone, 409 when it changed.
pub async fn apply_status_at<S: serde::Serialize>(
    shared: &Context,
    resource: &ApiResource,
    obj: &DynamicObject,
    status: &S,
    resource_version: &str,
) -> Result<String, Error> {
    let written = apply_status_body(
        shared,
        resource,
        obj,
        status,
        context::FIELD_MANAGER,
        Some(resource_version),
    )
    .await?;
    Ok(written.metadata.resource_version.unwrap_or_default())
}

async fn apply_status_body<S: serde::Serialize>(
    shared: &Context,
    resource: &ApiResource,
    obj: &DynamicObject,
    status: &S,
    manager: &str,
    resource_version: Option<&str>,
) -> Result<DynamicObject, Error> {
    let ns = obj
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::NoNamespace)?;
    let api: Api<DynamicObject> = Api::namespaced_with(shared.client.clone(), ns, resource);
    let mut body = serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "status": status,
    });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    Ok(api
        .patch_status(
            obj.metadata.name.as_deref().unwrap_or_default(),
            &kube::api::PatchParams::apply(manager).force(),
            &kube::api::Patch::Apply(&body),
        )
        .await?)
}

/// Records `note` about `obj` with `recorder` and releases it (the finalizer's cleanup is
/// done).
async fn release_with(
    recorder: &Recorder,
    obj: &DynamicObject,
    resource: &ApiResource,
    note: Note,
) -> Result<Action, Error> {
    publish(recorder, obj, resource, note).await;
    Ok(Action::await_change())
}

/// Runs one reconcile `fut` of the `kind` resource `obj` inside a `reconcile` tracing span
/// (fields `kind`, `namespace`, `name`), recording its duration and result in the
/// metrics of `shared` and logging the outcome.
pub async fn instrumented<F>(
    kind: &'static str,
    obj: &DynamicObject,
    shared: &Context,
    fut: F,
) -> Result<Action, Error>
where
    F: Future<Output = Result<Action, Error>>,
{
    let span = tracing::info_span!(
        "reconcile",
        kind,
        namespace = obj.metadata.namespace.as_deref().unwrap_or_default(),
        name = obj.metadata.name.as_deref().unwrap_or_default(),
    );
    async move {
        let start = Instant::now();
        let result = fut.await;
        let elapsed = start.elapsed();
        let label = match &result {
            Ok(_) => "success",
            Err(e) => e.metric_label(),
        };
        shared
            .metrics
            .record_reconcile(kind, label, elapsed.as_secs_f64());
        tracing::debug!(
            result = label,
            ms = elapsed.as_millis() as u64,
            "reconciled"
        );
        result
    }
    .instrument(span)
    .await
}

/// The controllers' error policy for `obj` after `err`: the controller's own per-object
/// exponential backoff (`ctx`'s [`ErrorBackoff`](context::ErrorBackoff): 5 s doubling to
/// 5 min, equal jitter); a finalizer patch on a stale copy is retried after 1 s; an
/// invalid spec waits for a change instead.
pub fn error_policy<C: ControllerContext>(
    obj: Arc<DynamicObject>,
    err: &Error,
    ctx: Arc<C>,
) -> Action {
    let key = crate::manifest::object_key(&obj.metadata);
    if err.is_permanent() {
        info!(object = %key, error = %err, "invalid spec: waiting for a change");
        return Action::await_change();
    }
    if err.is_stale_finalizer_patch() {
        // The finalizer patch was computed from a cached copy that is one write behind
        // (the object already has its finalizer): the next reconcile sees the new copy.
        tracing::debug!(object = %key, error = %err, "finalizer patch on a stale copy; retrying");
        return Action::requeue(Duration::from_secs(1));
    }
    let (delay, failures) = ctx.backoff().next_delay(&key);
    warn!(object = %key, error = %err, failures, retry_in_ms = delay.as_millis() as u64, "reconcile failed");
    Action::requeue(delay)
}

/// Settings of `dlq-operator run`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Label selector on DeadLetterQueues, RetryPolicies and DeadLetterReplays, to shard
    /// resources across several operator deployments (e.g. `dlqoperator.io/shard=a`).
    pub selector: Option<String>,
    /// Take the Lease before reconciling.
    pub leader_election: bool,
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace (`None`: the client's default namespace).
    pub lease_namespace: Option<String>,
    /// This process's identity in the Lease and in Events.
    pub identity: String,
    /// Lease duration, seconds: how long a dead leader keeps the lease.
    pub lease_duration_s: u64,
    /// Where `/metrics`, `/healthz`, `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Requeue interval of healthy DeadLetterQueues (drift repair).
    pub resync: Duration,
    /// Reconciles running at once per controller.
    pub concurrency: u16,
    /// Run the retry routers of DeadLetterQueues in router mode in this process (only
    /// while leading); `false` when `dlq-operator router` runs them elsewhere.
    pub embedded_router: bool,
    /// Weights of the maturity score (`--maturity-weights`).
    pub maturity_weights: crate::maturity::Weights,
}
