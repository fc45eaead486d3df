//! The Kubernetes operator (`dlq-operator run`): three kube-runtime controllers over the
//! same reconcile core as the standalone runner (docs/ARCHITECTURE.md, "Reconcile stages" and "Modules").
//!
//! - [`dead_letter_queue`]: DeadLetterQueues — finalizer, broker topology, status, Events;
//!   re-reconciled when a RetryPolicy or Secret they reference changes.
//! - [`retry_policy`]: RetryPolicies — computed schedule, tiers and `Ready`.
//! - [`dead_letter_replay`]: DeadLetterReplays — one replay of a DeadLetterQueue's
//!   dead-lettered messages each, run in a background task, resumed after a restart.
//! - [`conditions`]: status conditions (Kubernetes API conventions).
//! - [`object`]: lenient decoding of watched objects (one bad object never stops a watch).
//! - [`shared`]: what the controllers share (client, metrics, broker clients, clock).
//! - [`context`]: each controller's own context (recorder, backoff, and what only it
//!   uses) over the shared one.
//! - [`rbac`]: every API call the operator makes, as RBAC rules.
//! - [`run`]: waits for the CRDs, takes the leader Lease, runs the controllers until
//!   SIGTERM (draining in-flight reconciles and running replays) or until the lease is
//!   lost.

pub mod alert_rules;
pub mod backlog;
pub mod conditions;
pub mod context;
pub mod dead_letter_queue;
pub mod dead_letter_replay;
pub mod object;
pub mod ownership;
pub mod rbac;
pub mod retry_policy;
pub mod shared;

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

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{predicates, watcher, Predicate, WatchStreamExt};
use kube::{Client, Resource};
use tokio::sync::watch;
use tracing::{info, warn, Instrument};

use crate::controller::context::{
    BrokerClients, Context, ControllerContext, DeadLetterQueueContext, DeadLetterReplayContext,
    RetryPolicyContext,
};
use crate::controller::object::{api_resource, referencing};
use crate::crd::{DeadLetterQueue, DeadLetterReplay, RetryPolicy};
use crate::metrics::{Metrics, Readiness};
use crate::reconcile::ReconcileError;

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
            Error::Kube(_) => "kube_api",
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
        matches!(
            self.root(),
            Error::Reconcile(ReconcileError::InvalidSpec { .. })
        )
    }
}

/// One Event to record about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (e.g. `TopologyApplied`, `BrokerUnreachable`).
    pub reason: String,
    /// What the controller was doing (`Apply`, `Delete`, `Validate`).
    pub action: String,
    /// Human-readable detail (cut to 1 KiB, the API's limit for `note`).
    pub note: String,
}

impl Note {
    /// A Normal Event.
    pub fn normal(reason: &str, action: &str, note: String) -> Self {
        Note {
            type_: EventType::Normal,
            reason: reason.into(),
            action: action.into(),
            note,
        }
    }

    /// A Warning Event.
    pub fn warning(reason: &str, action: &str, note: String) -> Self {
        Note {
            type_: EventType::Warning,
            reason: reason.into(),
            action: action.into(),
            note,
        }
    }
}

/// Most bytes of an Event's `note` (events.k8s.io/v1 validation: 1 KiB).
pub const MAX_NOTE_BYTES: usize = 1024;

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn truncate_note(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Records `note` about `obj` (a resource of `resource`) with a controller's `recorder`.
/// A failure to record is logged (Events are informational; the status carries the same
/// facts) and does not fail the reconcile.
pub async fn publish(recorder: &Recorder, obj: &DynamicObject, resource: &ApiResource, note: Note) {
    let reference = obj.object_ref(resource);
    let event = Event {
        type_: note.type_,
        reason: note.reason.clone(),
        // kubectl prints notes to terminals; they may quote messages (a replay's skip
        // reasons) or the broker.
        note: Some(truncate_note(
            &crate::printable::escape(&note.note),
            MAX_NOTE_BYTES,
        )),
        action: note.action,
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        warn!(reason = %note.reason, error = %e, "could not record Event");
    }
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

/// The controllers' error policy: per-object exponential backoff (5 s doubling to 5 min,
/// equal jitter; [`context::ErrorBackoff`]); an invalid spec waits for a change instead.
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
    /// Label selector on DeadLetterQueues and RetryPolicies, to shard resources across
    /// several operator deployments (e.g. `dlqoperator.io/shard=a`).
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
    /// Requeue interval of healthy DeadLetterQueues (drift repair), seconds.
    pub resync: Duration,
    /// Reconciles running at once per controller.
    pub concurrency: u16,
}

/// Why `run` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics server could not bind.
    #[error("{0}")]
    Bind(std::io::Error),
    /// The Lease could not be set up.
    #[error("leader election on Lease {lease}: {reason}")]
    Lease {
        /// `namespace/name` of the Lease.
        lease: String,
        /// What failed.
        reason: String,
    },
    /// The API server refused the label selector (`--selector`).
    #[error("--selector {selector:?}: {reason}")]
    Selector {
        /// The selector as given.
        selector: String,
        /// The API server's reason.
        reason: String,
    },
    /// Another replica took the lease; this process stops so it restarts as a standby.
    #[error("lost the leader Lease {0}: stopping")]
    LostLeadership(String),
}

/// A shutdown signal shared by every task: `true` once shutdown was requested.
pub type Shutdown = watch::Receiver<bool>;

/// Resolves when `shutdown` is (or already was) requested.
pub async fn until_shutdown(mut shutdown: Shutdown) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Runs the operator until `shutdown` (SIGTERM drains in-flight reconciles and running
/// replays, and releases the Lease) or until the Lease is lost. Serves `/metrics`,
/// `/healthz`, `/readyz`; `/readyz` fails until the three CRDs are installed.
///
/// # Errors
/// [`RunError`]: the metrics address cannot be bound, the Lease cannot be used, or the
/// lease was lost.
pub async fn run(client: Client, opts: Options, shutdown: Shutdown) -> Result<(), RunError> {
    let metrics = Metrics::new();
    let readiness = Readiness::new("starting");
    // The HTTP server stops on shutdown, or as soon as the operator itself stops (an
    // error must not wait for a signal to be reported).
    let (stopped_tx, stopped_rx) = watch::channel(false);
    let server_shutdown = {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                _ = until_shutdown(shutdown) => {}
                _ = until_shutdown(stopped_rx) => {}
            }
        }
    };
    let (addr, server) = crate::metrics::bind(
        opts.metrics_addr,
        metrics.clone(),
        readiness.clone(),
        server_shutdown,
    )
    .await
    .map_err(RunError::Bind)?;
    info!(%addr, "serving /metrics, /healthz, /readyz");
    let server = tokio::spawn(server);

    let result = run_inner(client, &opts, metrics, readiness, shutdown).await;
    let _ = stopped_tx.send(true);
    match server.await {
        Ok(Err(e)) => warn!(error = %e, "metrics server failed"),
        Err(e) => warn!(error = %e, "metrics server task failed"),
        Ok(Ok(())) => {}
    }
    result
}

async fn run_inner(
    client: Client,
    opts: &Options,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: Shutdown,
) -> Result<(), RunError> {
    if !wait_for_crds(
        &client,
        opts.namespace.as_deref(),
        opts.selector.as_deref(),
        &readiness,
        shutdown.clone(),
    )
    .await?
    {
        return Ok(());
    }
    let shared = Arc::new(Context::new(
        client.clone(),
        &opts.identity,
        metrics,
        Arc::new(BrokerClients::default()),
    ));
    let contexts = Contexts::new(shared, opts.resync);

    if !opts.leader_election {
        readiness.set_ready();
        info!("leader election disabled: starting controllers");
        controllers(client, opts, contexts, until_shutdown(shutdown)).await;
        return Ok(());
    }

    let lease_ns = opts
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let lease = format!("{lease_ns}/{}", opts.lease_name);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &opts.lease_name)
        .with_namespace(&lease_ns)
        .with_identity(&opts.identity)
        .with_duration(opts.lease_duration_s)
        .with_grace(opts.lease_duration_s.div_ceil(3).max(1))
        .with_field_manager(context::FIELD_MANAGER)
        .build()
        .await
        .map_err(|e| RunError::Lease {
            lease: lease.clone(),
            reason: match e {
                // The API's own message (e.g. `namespaces "x" not found`), not its debug dump.
                kube_lease_manager::LeaseManagerError::KubeError(kube::Error::Api(s)) => {
                    format!(
                        "{} (HTTP {}; set --lease-namespace or POD_NAMESPACE)",
                        s.message, s.code
                    )
                }
                other => other.to_string(),
            },
        })?;
    let (mut leader, handle) = manager.watch().await;
    readiness.set_ready();
    info!(%lease, identity = %opts.identity, "waiting to acquire the leader Lease");
    loop {
        let leading = *leader.borrow_and_update();
        if leading {
            break;
        }
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    return Err(RunError::Lease { lease, reason: "lease manager stopped".into() });
                }
            }
            _ = until_shutdown(shutdown.clone()) => {
                drop(leader);
                release(handle, &lease).await;
                return Ok(());
            }
        }
    }
    info!(%lease, identity = %opts.identity, "acquired the leader Lease: starting controllers");

    // Stop on shutdown or when the lease is lost, whichever comes first.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut lost_rx = leader.clone();
    let watch_lease = async move {
        let lost = tokio::select! {
            lost = async { lost_rx.wait_for(|l| !*l).await.is_ok() } => lost,
            _ = until_shutdown(shutdown) => false,
        };
        let _ = stop_tx.send(true);
        lost
    };
    let (lost, ()) = tokio::join!(
        watch_lease,
        controllers(client, opts, contexts, until_shutdown(stop_rx))
    );
    drop(leader);
    release(handle, &lease).await;
    if lost {
        Err(RunError::LostLeadership(lease))
    } else {
        Ok(())
    }
}

/// Waits for the lease manager's task to release the Lease (it does when its channel
/// closes).
async fn release(
    handle: tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
    lease: &str,
) {
    match tokio::time::timeout(Duration::from_secs(10), handle).await {
        Ok(Ok(Ok(_))) => info!(%lease, "released the leader Lease"),
        Ok(Ok(Err(e))) => warn!(%lease, error = %e, "could not release the leader Lease"),
        Ok(Err(e)) => warn!(%lease, error = %e, "lease task failed"),
        Err(_) => warn!(%lease, "timed out releasing the leader Lease"),
    }
}

/// Waits until the three CRDs are served, logging what to do while they are not; the probe
/// lists with the label selector, so a selector the API server refuses stops the
/// operator at once. Returns `false` when shutdown was requested first.
///
/// # Errors
/// [`RunError::Selector`] when the API server answers 400 to the selector.
async fn wait_for_crds(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
    readiness: &Readiness,
    shutdown: Shutdown,
) -> Result<bool, RunError> {
    for ar in [
        api_resource::<DeadLetterQueue>(),
        api_resource::<RetryPolicy>(),
        api_resource::<DeadLetterReplay>(),
    ] {
        let crd = format!("{}.{}", ar.plural, ar.group);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let mut logged = false;
        let mut params = ListParams::default().limit(1);
        if let Some(sel) = selector {
            params = params.labels(sel);
        }
        loop {
            match api.list_metadata(&params).await {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.code == 400 && selector.is_some() => {
                    return Err(RunError::Selector {
                        selector: selector.unwrap_or_default().to_string(),
                        reason: status.message,
                    });
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    let reason = format!(
                        "CRD {crd} is not installed: waiting for it (install: kubectl create -f crds/, with --validate=false before Kubernetes 1.25)"
                    );
                    if !logged {
                        warn!("{reason}");
                        logged = true;
                    }
                    readiness.set_not_ready(&reason);
                }
                Err(e) => {
                    warn!(crd = %crd, error = %e, "cannot list the resource: retrying");
                    readiness.set_not_ready(&format!("cannot list {crd}: {e}"));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                _ = until_shutdown(shutdown.clone()) => return Ok(false),
            }
        }
        if logged {
            info!(crd = %crd, "CRD installed");
        }
    }
    Ok(true)
}

/// Hash of "deletion requested", so the generation-filtered main stream still passes the
/// update that sets `deletionTimestamp`.
fn deletion_requested(obj: &DynamicObject) -> Option<u64> {
    Some(u64::from(obj.metadata.deletion_timestamp.is_some()))
}

/// How long in-flight reconciles may take to finish after a stop request (SIGTERM, lost
/// Lease) before the controllers are dropped. Below Kubernetes' default 30 s grace period.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// The context of each controller, over one shared [`Context`].
#[derive(Clone)]
pub struct Contexts {
    /// The DeadLetterQueue controller's (the backlog monitor works with part of it).
    pub dead_letter_queue: Arc<DeadLetterQueueContext>,
    /// The RetryPolicy controller's.
    pub retry_policy: Arc<RetryPolicyContext>,
    /// The DeadLetterReplay controller's (it holds the running replays).
    pub dead_letter_replay: Arc<DeadLetterReplayContext>,
}

impl Contexts {
    /// The three contexts over `shared`; healthy DeadLetterQueues are reconciled again
    /// every `resync`.
    pub fn new(shared: Arc<Context>, resync: Duration) -> Self {
        let mut dead_letter_queue = DeadLetterQueueContext::new(shared.clone());
        dead_letter_queue.resync = resync;
        Contexts {
            dead_letter_queue: Arc::new(dead_letter_queue),
            retry_policy: Arc::new(RetryPolicyContext::new(shared.clone())),
            dead_letter_replay: Arc::new(DeadLetterReplayContext::new(shared)),
        }
    }
}

/// Runs the three controllers and the backlog monitor until `stop` resolves, then lets
/// in-flight reconciles finish and running replays stop (settling their copies and
/// writing their counts), at most [`SHUTDOWN_GRACE`] in all.
pub async fn controllers(
    client: Client,
    opts: &Options,
    contexts: Contexts,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let Contexts {
        dead_letter_queue: dlq_ctx,
        retry_policy: rp_ctx,
        dead_letter_replay: replay_ctx,
    } = contexts;
    let stop = futures::FutureExt::shared(Box::pin(stop));
    let stop_after = stop.clone();
    let stop_monitor = stop.clone();
    let stop_replays = stop.clone();
    let dlq_ar = api_resource::<DeadLetterQueue>();
    let rp_ar = api_resource::<RetryPolicy>();
    let replay_ar = api_resource::<DeadLetterReplay>();
    let all_or_ns = |ar: &ApiResource| -> Api<DynamicObject> {
        match &opts.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        }
    };
    let selected = || {
        let wc = watcher::Config::default();
        match &opts.selector {
            Some(s) => wc.labels(s),
            None => wc,
        }
    };
    let config = ControllerConfig::default().concurrency(opts.concurrency);

    // DeadLetterQueues: reflected into a store (for the mappers), filtered so that our
    // own status writes do not trigger reconciles.
    let writer = Writer::<DynamicObject>::new(dlq_ar.clone());
    let reader = writer.as_reader();
    let _ = dlq_ctx.dead_letter_queues.set(reader.clone());
    let dlq_stream = watcher(all_or_ns(&dlq_ar), selected())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation
                .combine(predicates::finalizers)
                .combine(deletion_requested),
            Default::default(),
        );
    let policies = watcher(all_or_ns(&rp_ar), watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default());
    // Secrets: metadata only (no credentials held by the watch), for rotations.
    let secrets_api: Api<PartialObjectMeta<Secret>> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let secrets = watcher(secrets_api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default());
    let (store_rp, store_secret) = (reader.clone(), reader.clone());
    let (ar_rp, ar_secret) = (dlq_ar.clone(), dlq_ar.clone());
    let dlq_controller = Controller::for_stream_with(dlq_stream, reader, dlq_ar.clone())
        .with_config(config.clone())
        .watches_stream_with(
            policies,
            move |rp: DynamicObject| {
                let name = rp.metadata.name.clone().unwrap_or_default();
                referencing(
                    &store_rp.state(),
                    &ar_rp,
                    rp.metadata.namespace.as_deref(),
                    "/spec/retryPolicyRef/name",
                    &name,
                )
            },
            rp_ar.clone(),
        )
        .watches_stream(secrets, move |s| {
            let name = s.metadata.name.clone().unwrap_or_default();
            referencing(
                &store_secret.state(),
                &ar_secret,
                s.metadata.namespace.as_deref(),
                "/spec/broker/secretRef/name",
                &name,
            )
        })
        .graceful_shutdown_on(stop.clone())
        .run(dead_letter_queue::reconcile, error_policy, dlq_ctx.clone())
        .for_each(|r| async move { log_result("DeadLetterQueue", r) });

    let rp_writer = Writer::<DynamicObject>::new(rp_ar.clone());
    let rp_reader = rp_writer.as_reader();
    let rp_stream = watcher(all_or_ns(&rp_ar), selected())
        .default_backoff()
        .reflect(rp_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let rp_controller = Controller::for_stream_with(rp_stream, rp_reader, rp_ar)
        .with_config(config.clone())
        .graceful_shutdown_on(stop.clone())
        .run(retry_policy::reconcile, error_policy, rp_ctx)
        .for_each(|r| async move { log_result("RetryPolicy", r) });

    // DeadLetterReplays: filtered by generation, so the runs' status writes do not
    // trigger reconciles (a running replay is re-checked every RUNNING_RECHECK).
    let replay_writer = Writer::<DynamicObject>::new(replay_ar.clone());
    let replay_reader = replay_writer.as_reader();
    let replay_stream = watcher(all_or_ns(&replay_ar), selected())
        .default_backoff()
        .reflect(replay_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let replay_controller = Controller::for_stream_with(replay_stream, replay_reader, replay_ar)
        .with_config(config)
        .graceful_shutdown_on(stop)
        .run(
            dead_letter_replay::reconcile,
            error_policy,
            replay_ctx.clone(),
        )
        .for_each(|r| async move { log_result("DeadLetterReplay", r) });
    // On stop, running replays settle their copies and write their counts (phase
    // Running: the next leader resumes them).
    let replays = async move {
        stop_replays.await;
        let running = replay_ctx.replays.len();
        if running > 0 {
            info!(running, "stopping running replays");
        }
        replay_ctx.replays.shutdown().await;
    };

    let monitor = backlog::run(dlq_ctx.monitor(), stop_monitor);
    let both = futures::future::join5(
        dlq_controller.instrument(tracing::info_span!("controller", kind = "DeadLetterQueue")),
        rp_controller.instrument(tracing::info_span!("controller", kind = "RetryPolicy")),
        replay_controller.instrument(tracing::info_span!("controller", kind = "DeadLetterReplay")),
        replays.instrument(tracing::info_span!("replays")),
        monitor.instrument(tracing::info_span!("monitor")),
    );
    // In-flight reconciles finish after the stop request; a reconcile stuck on an
    // unresponsive endpoint must not keep the process (and its Lease) forever.
    let grace = async move {
        stop_after.await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        _ = both => info!("controllers stopped"),
        _ = grace => warn!(
            "controllers did not stop within {} s of the stop request: stopping anyway",
            SHUTDOWN_GRACE.as_secs()
        ),
    }
}

fn log_result<T: std::fmt::Debug, E: std::fmt::Display>(kind: &str, r: Result<T, E>) {
    match r {
        Ok(o) => tracing::debug!(kind, object = ?o, "reconciled"),
        Err(e) => tracing::debug!(kind, error = %e, "reconcile error"),
    }
}
