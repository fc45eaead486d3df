//! `dlq-operator run` as a process: serves `/metrics`, `/healthz` and `/readyz`, waits
//! for the CRDs, takes the leader Lease (unless leader election is off), then runs the
//! controllers ([`crate::controller::controllers()`]) until the stop token is cancelled
//! (SIGTERM) or the Lease is lost, and releases the Lease.
//!
//! One cancellation type: a [`CancellationToken`] for the operator ([`run`]); the
//! controllers get a child token, cancelled on the operator's stop or when the Lease is
//! lost. The CLI's signal handler cancels the operator's token.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::controller::context::{self, BrokerClients, Context};
use crate::controller::controllers::{controllers, Contexts};
use crate::controller::Options;
use crate::crd::{DeadLetterQueue, DeadLetterReplay, RetryPolicy};
use crate::metrics::{Metrics, Readiness};
use crate::object::api_resource;

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

/// Runs the operator until `stop` is cancelled (SIGTERM: drains in-flight reconciles and
/// running replays, and releases the Lease) or until the Lease is lost. Serves
/// `/metrics`, `/healthz`, `/readyz`; `/readyz` fails until the three CRDs are installed.
///
/// # Errors
/// [`RunError`]: the metrics address cannot be bound, the Lease cannot be used, the API
/// server refused the selector, or the lease was lost.
pub async fn run(client: Client, opts: Options, stop: CancellationToken) -> Result<(), RunError> {
    let metrics = Metrics::new();
    let readiness = Readiness::new("starting");
    // The HTTP server stops on `stop`, or as soon as the operator itself stops (an error
    // must not wait for a signal to be reported).
    let server = crate::serve::start(opts.metrics_addr, metrics.clone(), readiness.clone(), &stop)
        .await
        .map_err(RunError::Bind)?;
    let result = run_inner(client, &opts, metrics, readiness, stop).await;
    server.stop().await;
    result
}

/// Waits for the CRDs, then runs the controllers: at once without leader election, else
/// once this process holds the Lease ([`lead`]).
async fn run_inner(
    client: Client,
    opts: &Options,
    metrics: Metrics,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let crds = wait_for_crds(
        &client,
        opts.namespace.as_deref(),
        opts.selector.as_deref(),
        &readiness,
        &stop,
    );
    if !crds.await? {
        return Ok(());
    }
    let mut shared = Context::new(
        client.clone(),
        &opts.identity,
        metrics,
        Arc::new(BrokerClients::default()),
    );
    shared.maturity_weights = opts.maturity_weights;
    let contexts = Contexts::new(Arc::new(shared), opts.resync, opts.embedded_router);
    if !opts.leader_election {
        readiness.set_ready();
        info!("leader election disabled: starting controllers");
        controllers(client, opts, contexts, stop).await;
        return Ok(());
    }
    lead(client, opts, contexts, &readiness, stop).await
}

/// Takes the Lease, runs the controllers while this process holds it, and releases it.
///
/// # Errors
/// [`RunError::Lease`] when the Lease cannot be used, [`RunError::LostLeadership`] when
/// another replica took it.
async fn lead(
    client: Client,
    opts: &Options,
    contexts: Contexts,
    readiness: &Readiness,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let lease_ns = opts
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let lease = format!("{lease_ns}/{}", opts.lease_name);
    let manager = lease_manager(&client, opts, &lease_ns)
        .await
        .map_err(|e| RunError::Lease {
            lease: lease.clone(),
            reason: lease_error_reason(e),
        })?;
    let (mut leader, handle) = manager.watch().await;
    readiness.set_ready();
    info!(%lease, identity = %opts.identity, "waiting to acquire the leader Lease");
    let lost = match acquire(&mut leader, &stop).await {
        Acquired::ManagerStopped => {
            return Err(RunError::Lease {
                lease,
                reason: "lease manager stopped".into(),
            })
        }
        Acquired::Stopped => false,
        Acquired::Leading => {
            info!(%lease, identity = %opts.identity, "acquired the leader Lease: starting controllers");
            while_leading(client, opts, contexts, &leader, &stop).await
        }
    };
    drop(leader);
    release(handle, &lease).await;
    if lost {
        Err(RunError::LostLeadership(lease))
    } else {
        Ok(())
    }
}

/// The lease manager of `opts`' Lease in `lease_ns`: held for `lease_duration_s`, renewed
/// a third of it before it ends, written with the operator's field manager.
async fn lease_manager(
    client: &Client,
    opts: &Options,
    lease_ns: &str,
) -> Result<LeaseManager, LeaseManagerError> {
    kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &opts.lease_name)
        .with_namespace(lease_ns)
        .with_identity(&opts.identity)
        .with_duration(opts.lease_duration_s)
        .with_grace(opts.lease_duration_s.div_ceil(3).max(1))
        .with_field_manager(context::FIELD_MANAGER)
        .build()
        .await
}

/// Why the lease manager could not be built: the API's own message (e.g. `namespaces
/// "x" not found`), not its debug dump.
fn lease_error_reason(e: LeaseManagerError) -> String {
    match e {
        LeaseManagerError::KubeError(kube::Error::Api(s)) => format!(
            "{} (HTTP {}; set --lease-namespace or POD_NAMESPACE)",
            s.message, s.code
        ),
        other => other.to_string(),
    }
}

/// How waiting for the Lease ended.
enum Acquired {
    /// This process holds the Lease.
    Leading,
    /// `stop` was cancelled first.
    Stopped,
    /// The lease manager stopped (its channel closed).
    ManagerStopped,
}

/// Waits until `leader` says this process holds the Lease, or `stop` is cancelled, or
/// the lease manager stops.
async fn acquire(leader: &mut watch::Receiver<bool>, stop: &CancellationToken) -> Acquired {
    loop {
        if *leader.borrow_and_update() {
            return Acquired::Leading;
        }
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    return Acquired::ManagerStopped;
                }
            }
            _ = stop.cancelled() => return Acquired::Stopped,
        }
    }
}

/// Runs the controllers until `stop` is cancelled or the Lease is lost, whichever comes
/// first; returns whether the Lease was lost.
async fn while_leading(
    client: Client,
    opts: &Options,
    contexts: Contexts,
    leader: &watch::Receiver<bool>,
    stop: &CancellationToken,
) -> bool {
    let controllers_stop = stop.child_token();
    let mut lost_rx = leader.clone();
    let stop_on_loss = controllers_stop.clone();
    let watch_lease = async move {
        let lost = tokio::select! {
            lost = async { lost_rx.wait_for(|l| !*l).await.is_ok() } => lost,
            _ = stop.cancelled() => false,
        };
        stop_on_loss.cancel();
        lost
    };
    let (lost, ()) = tokio::join!(
        watch_lease,
        controllers(client, opts, contexts, controllers_stop)
    );
    lost
}

/// Waits for the lease manager's task to release the Lease (it does when its channel
/// closes).
async fn release(
    handle: tokio::task::JoinHandle<Result<LeaseManager, LeaseManagerError>>,
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
/// operator at once. Returns `false` when `stop` was cancelled first.
///
/// # Errors
/// [`RunError::Selector`] when the API server answers 400 to the selector.
async fn wait_for_crds(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
    readiness: &Readiness,
    stop: &CancellationToken,
) -> Result<bool, RunError> {
    for ar in [
        api_resource::<DeadLetterQueue>(),
        api_resource::<RetryPolicy>(),
        api_resource::<DeadLetterReplay>(),
    ] {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let crd = format!("{}.{}", ar.plural, ar.group);
        if !wait_for_crd(&api, &crd, selector, readiness, stop).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// [`wait_for_crds`] for one CRD `crd`, probed by listing one object of `api`: every 5 s
/// until it answers. Returns `false` when `stop` was cancelled first.
///
/// # Errors
/// [`RunError::Selector`] when the API server answers 400 to the selector.
async fn wait_for_crd(
    api: &Api<DynamicObject>,
    crd: &str,
    selector: Option<&str>,
    readiness: &Readiness,
    stop: &CancellationToken,
) -> Result<bool, RunError> {
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
            _ = stop.cancelled() => return Ok(false),
        }
    }
    if logged {
        info!(crd = %crd, "CRD installed");
    }
    Ok(true)
}
