//! The three kube-runtime controllers and the backlog monitor, each with its own context
//! ([`Contexts`]), run together until a stop token is cancelled ([`controllers`]).
//!
//! - DeadLetterQueues: reflected into a store (for the mappers and the name-ownership
//!   rule), reconciled on generation, finalizer and deletion changes, and when a
//!   RetryPolicy or Secret they reference changes.
//! - RetryPolicies and DeadLetterReplays: reconciled on generation changes, so the
//!   controllers' own status writes do not trigger reconciles.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{predicates, watcher, Predicate, WatchStreamExt};
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::controller::context::{
    Context, DeadLetterQueueContext, DeadLetterReplayContext, RetryPolicyContext,
};
use crate::controller::{backlog, dead_letter_queue, dead_letter_replay, retry_policy};
use crate::controller::{error_policy, Options};
use crate::crd::{DeadLetterQueue, DeadLetterReplay, RetryPolicy};
use crate::object::{api_resource, referencing};

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
    /// every `resync`; with `embedded_router` the DeadLetterQueue controller runs the
    /// retry routers of those in router mode.
    pub fn new(shared: Arc<Context>, resync: Duration, embedded_router: bool) -> Self {
        let mut dead_letter_queue = DeadLetterQueueContext::new(shared.clone());
        dead_letter_queue.resync = resync;
        dead_letter_queue.routers = embedded_router
            .then(|| Arc::new(crate::router::Fleet::new(shared.metrics.router().clone())));
        Contexts {
            dead_letter_queue: Arc::new(dead_letter_queue),
            retry_policy: Arc::new(RetryPolicyContext::new(shared.clone())),
            dead_letter_replay: Arc::new(DeadLetterReplayContext::new(shared)),
        }
    }
}

/// Where and what the controllers watch (from [`Options`]).
struct Watched<'a> {
    client: &'a Client,
    opts: &'a Options,
    config: ControllerConfig,
}

impl Watched<'_> {
    /// The API of `ar` in the watched namespace (or all namespaces).
    fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        match &self.opts.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        }
    }

    /// The watcher settings of the controlled resources: the label selector, if any.
    fn selected(&self) -> watcher::Config {
        let wc = watcher::Config::default();
        match &self.opts.selector {
            Some(s) => wc.labels(s),
            None => wc,
        }
    }

    /// Secrets of the watched namespace, metadata only (the watch holds no credentials).
    fn secrets(&self) -> Api<PartialObjectMeta<Secret>> {
        match &self.opts.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }
}

/// Runs the three controllers and the backlog monitor until `stop` is cancelled, then
/// lets in-flight reconciles finish and running replays stop (settling their copies and
/// writing their counts), at most [`SHUTDOWN_GRACE`] in all; then drains the embedded
/// retry routers (at most [`SHUTDOWN_GRACE`] more).
pub async fn controllers(
    client: Client,
    opts: &Options,
    contexts: Contexts,
    stop: CancellationToken,
) {
    let watched = Watched {
        client: &client,
        opts,
        config: ControllerConfig::default().concurrency(opts.concurrency),
    };
    let dlq_ctx = contexts.dead_letter_queue;
    let replay_ctx = contexts.dead_letter_replay;
    let all = futures::future::join5(
        dead_letter_queue_controller(&watched, dlq_ctx.clone(), &stop)
            .instrument(tracing::info_span!("controller", kind = "DeadLetterQueue")),
        retry_policy_controller(&watched, contexts.retry_policy, &stop)
            .instrument(tracing::info_span!("controller", kind = "RetryPolicy")),
        dead_letter_replay_controller(
            &watched,
            replay_ctx.clone(),
            dlq_ctx.dead_letter_replays.clone(),
            &stop,
        )
        .instrument(tracing::info_span!("controller", kind = "DeadLetterReplay")),
        stop_replays(replay_ctx, stop.clone()).instrument(tracing::info_span!("replays")),
        backlog::run(dlq_ctx.monitor(), stop.clone()).instrument(tracing::info_span!("monitor")),
    );
    // In-flight reconciles finish after the stop request; a reconcile stuck on an
    // unresponsive endpoint must not keep the process (and its Lease) forever.
    let grace = async move {
        stop.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        _ = all => info!("controllers stopped"),
        _ = grace => warn!(
            "controllers did not stop within {} s of the stop request: stopping anyway",
            SHUTDOWN_GRACE.as_secs()
        ),
    }
    if let Some(fleet) = &dlq_ctx.routers {
        // Messages in hand are finished (copy confirmed, original acked); the rest stay
        // in the inboxes for the next leader or router.
        if tokio::time::timeout(SHUTDOWN_GRACE, fleet.drain())
            .await
            .is_err()
        {
            warn!(
                "the retry routers did not drain within {} s: stopping anyway",
                SHUTDOWN_GRACE.as_secs()
            );
        }
    }
}

/// The DeadLetterQueue controller: its objects reflected into a store (set in `ctx` for
/// the mappers, the ownership rule and the monitor), filtered so that our own status
/// writes do not trigger reconciles, and mapped from the RetryPolicies and Secrets they
/// reference.
fn dead_letter_queue_controller(
    watched: &Watched<'_>,
    ctx: Arc<DeadLetterQueueContext>,
    stop: &CancellationToken,
) -> impl Future<Output = ()> + Send {
    let dlq_ar = api_resource::<DeadLetterQueue>();
    let rp_ar = api_resource::<RetryPolicy>();
    let writer = Writer::<DynamicObject>::new(dlq_ar.clone());
    let reader = writer.as_reader();
    let _ = ctx.dead_letter_queues.set(reader.clone());
    let dlq_stream = watcher(watched.api(&dlq_ar), watched.selected())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation
                .combine(predicates::finalizers)
                .combine(deletion_requested),
            Default::default(),
        );
    // Every RetryPolicy and Secret (not only the selected ones): a selected
    // DeadLetterQueue may reference any.
    let rp_writer = Writer::<DynamicObject>::new(rp_ar.clone());
    let _ = ctx.retry_policies.set(rp_writer.as_reader());
    let policies = watcher(watched.api(&rp_ar), watcher::Config::default())
        .default_backoff()
        .reflect(rp_writer)
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default());
    let secrets = watcher(watched.secrets(), watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default());
    let (store_rp, store_secret) = (reader.clone(), reader.clone());
    let (ar_rp, ar_secret) = (dlq_ar.clone(), dlq_ar.clone());
    Controller::for_stream_with(dlq_stream, reader, dlq_ar)
        .with_config(watched.config.clone())
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
            rp_ar,
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
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(dead_letter_queue::reconcile, error_policy, ctx)
        .for_each(|r| async move { log_result("DeadLetterQueue", r) })
}

/// A controller of the watched objects of `ar`, reconciled on generation changes only
/// (so the controller's own status writes do not trigger reconciles), drained on `stop`.
fn on_generation(
    watched: &Watched<'_>,
    ar: ApiResource,
    stop: &CancellationToken,
) -> Controller<DynamicObject> {
    let writer = Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let stream = watcher(watched.api(&ar), watched.selected())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream_with(stream, reader, ar)
        .with_config(watched.config.clone())
        .graceful_shutdown_on(stop.clone().cancelled_owned())
}

/// The RetryPolicy controller ([`on_generation`]).
fn retry_policy_controller(
    watched: &Watched<'_>,
    ctx: Arc<RetryPolicyContext>,
    stop: &CancellationToken,
) -> impl Future<Output = ()> + Send {
    on_generation(watched, api_resource::<RetryPolicy>(), stop)
        .run(retry_policy::reconcile, error_policy, ctx)
        .for_each(|r| async move { log_result("RetryPolicy", r) })
}

/// The DeadLetterReplay controller ([`on_generation`]: a running replay is re-checked
/// every [`RUNNING_RECHECK`](dead_letter_replay::RUNNING_RECHECK) instead). Its store is
/// set in `store` (the backlog monitor's, for the maturity score).
fn dead_letter_replay_controller(
    watched: &Watched<'_>,
    ctx: Arc<DeadLetterReplayContext>,
    store: Arc<std::sync::OnceLock<kube::runtime::reflector::Store<DynamicObject>>>,
    stop: &CancellationToken,
) -> impl Future<Output = ()> + Send {
    let controller = on_generation(watched, api_resource::<DeadLetterReplay>(), stop);
    let _ = store.set(controller.store());
    controller
        .run(dead_letter_replay::reconcile, error_policy, ctx)
        .for_each(|r| async move { log_result("DeadLetterReplay", r) })
}

/// Once `stop` is cancelled, stops the running replays: they settle their copies and
/// write their counts (phase `Running`: the next leader resumes them).
async fn stop_replays(ctx: Arc<DeadLetterReplayContext>, stop: CancellationToken) {
    stop.cancelled().await;
    let running = ctx.replays.len();
    if running > 0 {
        info!(running, "stopping running replays");
    }
    ctx.replays.shutdown().await;
}

/// Hash of "deletion requested", so the generation-filtered main stream still passes the
/// update that sets `deletionTimestamp`.
fn deletion_requested(obj: &DynamicObject) -> Option<u64> {
    Some(u64::from(obj.metadata.deletion_timestamp.is_some()))
}

/// Logs the result of one reconcile of a `kind` object (debug level; failures are
/// logged by the error policy).
fn log_result<T: std::fmt::Debug, E: std::fmt::Display>(kind: &str, r: Result<T, E>) {
    match r {
        Ok(o) => tracing::debug!(kind, object = ?o, "reconciled"),
        Err(e) => tracing::debug!(kind, error = %e, "reconcile error"),
    }
}
