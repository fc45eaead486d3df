//! Where a router process learns which inboxes to consume: manifest files (standalone)
//! or the cluster's DeadLetterQueues, and the loop that keeps its [`Fleet`] in step with
//! them every resync.

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::{Fleet, RedisTarget, RouterTarget, Target};
use crate::crd::DeadLetterQueue;
use crate::manifest::{object_key, ManifestError};
use crate::resolve::manifests::load_and_plan_all;

/// The router targets of the DeadLetterQueues in router mode in the manifest files
/// `paths` (validated and planned as `apply` does, without a network), and of every Redis
/// DeadLetterQueue in them (a Redis source is always routed: the router is what retries).
///
/// # Errors
/// The [`ManifestError`] of the first invalid manifest.
pub fn in_files(paths: &[PathBuf]) -> Result<Vec<RouterTarget>, ManifestError> {
    let (planned, redis) = load_and_plan_all(paths)?;
    Ok(planned
        .iter()
        .filter_map(|p| Target::of(&p.prepared, &p.object.spec.router))
        .map(RouterTarget::from)
        .chain(
            redis
                .into_iter()
                .map(|r| RouterTarget::from(RedisTarget::of(r.plan))),
        )
        .collect())
}

/// What a listing of the cluster found.
#[derive(Debug, Default)]
pub struct Found {
    /// Targets of the DeadLetterQueues in router mode that resolved.
    pub targets: Vec<RouterTarget>,
    /// Keys (`namespace/name`) of DeadLetterQueues in router mode that did not resolve
    /// this time (an API error, a missing Secret): their routers, if running, are kept.
    pub unresolved: Vec<String>,
}

/// The DeadLetterQueues in router mode in `namespace` (all namespaces when `None`)
/// matching label `selector`, each resolved with its RetryPolicy and Secret.
///
/// # Errors
/// The API server's error when the DeadLetterQueues cannot be listed.
pub async fn in_cluster(
    client: &Client,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Found, kube::Error> {
    let resource = crate::object::api_resource::<DeadLetterQueue>();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let mut params = ListParams::default();
    if let Some(s) = selector {
        params = params.labels(s);
    }
    let mut found = Found::default();
    for obj in api.list(&params).await?.items {
        let enabled = obj
            .data
            .pointer("/spec/router/enabled")
            .and_then(serde_json::Value::as_bool)
            == Some(true);
        if !enabled || obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = object_key(&obj.metadata);
        let ns = obj.metadata.namespace.clone().unwrap_or_default();
        match crate::resolve::object_in_cluster(client.clone(), &ns, &obj).await {
            Ok(r) => found.targets.extend(
                Target::of(&r.prepared, &r.dead_letter_queue.spec.router).map(RouterTarget::from),
            ),
            Err(e) => {
                tracing::warn!(dead_letter_queue = %key, error = %e, "cannot resolve a DeadLetterQueue in router mode; its router, if running, is kept");
                found.unresolved.push(key);
            }
        }
    }
    Ok(found)
}

/// Keeps `fleet` in step with `source` every `resync` until `stop`: each round runs the
/// routers `source` finds, keeps those it could not resolve, and stops the others; a
/// failed round (an API or manifest error) changes nothing and is logged once, not at
/// every resync while it lasts (again when the error changes), and the first good round
/// after it says so. Then drains the fleet ([`Fleet::drain`]).
pub async fn follow<F, Fut, E>(
    fleet: &Fleet,
    mut source: F,
    resync: Duration,
    stop: &CancellationToken,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Found, E>>,
    E: std::fmt::Display,
{
    let mut idle_said = false;
    let mut failing: Option<String> = None;
    loop {
        let round = tokio::select! {
            () = stop.cancelled() => break,
            round = source() => round,
        };
        match round {
            Ok(found) => {
                let idle = found.targets.is_empty() && found.unresolved.is_empty();
                if idle && !idle_said {
                    tracing::info!("no DeadLetterQueue in router mode (spec.router.enabled: true): nothing to route yet; looking again every resync");
                }
                idle_said = idle;
                if failing.take().is_some() {
                    tracing::info!("the DeadLetterQueues in router mode are read and valid again; the routers follow them");
                }
                let mut keep: std::collections::BTreeSet<String> =
                    found.unresolved.into_iter().collect();
                for target in found.targets {
                    keep.insert(target.key());
                    if fleet.ensure(target) {
                        tracing::info!(routers = fleet.keys().len(), "retry router started");
                    }
                }
                fleet.retain(|k| keep.contains(k));
            }
            Err(e) => {
                let error = e.to_string();
                if failing.as_ref() != Some(&error) {
                    tracing::error!(%error, "cannot read the DeadLetterQueues in router mode; the running routers go on as they are (logged once until the error changes or is fixed)");
                    failing = Some(error);
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(resync) => {}
        }
    }
    fleet.drain().await;
}
