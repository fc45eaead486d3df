//! Where the console learns its DeadLetterQueues: manifest files (standalone, validated
//! and planned as `apply` does, without a network) or the cluster (listed from the API
//! server and resolved with their RetryPolicies and Secrets, as the retry router does:
//! [`crate::router::sources::in_cluster`]). Files are read again every poll; the cluster
//! every [`CLUSTER_RESYNC_S`] seconds (each read lists the DeadLetterQueues and GETs the
//! RetryPolicy and Secret of each one: not at every depth poll).

use std::path::PathBuf;

use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::crd::DeadLetterQueue;
use crate::manifest::object_key;
use crate::reconcile::Prepared;

/// How often the cluster's DeadLetterQueues are read again (s), as the retry router's
/// default `--resync`.
pub const CLUSTER_RESYNC_S: u64 = 30;

/// One DeadLetterQueue the console shows.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its plan: broker connection, topology, monitoring.
    pub prepared: Prepared,
    /// The object as the API server gave it (the audit's Events go on it); `None` when
    /// read from files.
    pub object: Option<DynamicObject>,
}

impl From<crate::resolve::manifests::Planned> for Target {
    /// A DeadLetterQueue read from manifest files (no API object).
    fn from(p: crate::resolve::manifests::Planned) -> Self {
        Target {
            prepared: p.prepared,
            object: None,
        }
    }
}

/// Where the DeadLetterQueues come from.
#[derive(Clone)]
pub enum Source {
    /// Manifest files or directories (re-read every poll).
    Files(Vec<PathBuf>),
    /// The cluster: every DeadLetterQueue of `namespace` (all namespaces when `None`).
    Cluster {
        /// The console's own client (its ServiceAccount).
        client: Client,
        /// Only this namespace.
        namespace: Option<String>,
    },
}

impl Source {
    /// Whether the DeadLetterQueues are to be read again, the last read `since` ago
    /// (`None`: never read by the poll loop): files at every poll, the cluster every
    /// [`CLUSTER_RESYNC_S`] seconds.
    pub fn due(&self, since: Option<std::time::Duration>) -> bool {
        match (self, since) {
            (Source::Files(_), _) | (_, None) => true,
            (Source::Cluster { .. }, Some(age)) => {
                age >= std::time::Duration::from_secs(CLUSTER_RESYNC_S)
            }
        }
    }

    /// The DeadLetterQueues now, in `namespace/name` order. In a cluster, one that does
    /// not resolve this time (a missing Secret, an invalid spec) keeps its entry of
    /// `last`, if any, and is logged; one being deleted is listed (its dead letters may
    /// still be drained).
    ///
    /// # Errors
    /// Files: the first invalid manifest's error. Cluster: the API server's error when
    /// the DeadLetterQueues cannot be listed (for a watched namespace, whether the
    /// console's ServiceAccount may list them).
    pub async fn read(&self, last: &[Target]) -> Result<Vec<Target>, String> {
        let mut targets = match self {
            Source::Files(paths) => {
                let paths = paths.clone();
                let read = tokio::task::spawn_blocking(move || {
                    crate::resolve::manifests::load_and_plan(&paths)
                })
                .await
                .map_err(|e| format!("reading the manifests failed: {e}"))?;
                read.map_err(|e| e.to_string())?
                    .1
                    .into_iter()
                    .map(Target::from)
                    .collect()
            }
            Source::Cluster { client, namespace } => {
                in_cluster(client, namespace.as_deref(), last).await?
            }
        };
        targets.sort_by(|a, b| a.prepared.key.cmp(&b.prepared.key));
        Ok(targets)
    }
}

/// The cluster's DeadLetterQueues, each resolved ([`crate::resolve::object_in_cluster`]).
async fn in_cluster(
    client: &Client,
    namespace: Option<&str>,
    last: &[Target],
) -> Result<Vec<Target>, String> {
    let resource = crate::object::api_resource::<DeadLetterQueue>();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let listed = api.list(&ListParams::default()).await.map_err(|e| {
        format!(
            "cannot list the DeadLetterQueues{}: {e}",
            namespace.map_or(String::new(), |ns| format!(" of namespace {ns}"))
        )
    })?;
    let mut targets = Vec::new();
    // One being deleted stays: the operator keeps its dead-letter queue while it holds
    // messages, and they are drained (replayed, purged) here.
    for obj in listed.items {
        let key = object_key(&obj.metadata);
        let ns = obj.metadata.namespace.clone().unwrap_or_default();
        match crate::resolve::object_in_cluster(client.clone(), &ns, &obj).await {
            Ok(r) => targets.push(Target {
                prepared: r.prepared,
                object: Some(obj),
            }),
            Err(e) => {
                tracing::warn!(dead_letter_queue = %key, error = %e, "console: cannot resolve a DeadLetterQueue; it is shown as last resolved, if ever");
                targets.extend(last.iter().find(|t| t.prepared.key == key).cloned());
            }
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn files_are_read_every_poll_the_cluster_every_resync() {
        let files = Source::Files(vec![]);
        assert!(files.due(None) && files.due(Some(Duration::ZERO)));
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("uri"));
        let cluster = Source::Cluster {
            client: Client::try_from(config).expect("client"),
            namespace: None,
        };
        assert!(cluster.due(None), "never read: now");
        assert!(!cluster.due(Some(Duration::from_secs(CLUSTER_RESYNC_S - 1))));
        assert!(cluster.due(Some(Duration::from_secs(CLUSTER_RESYNC_S))));
    }
}
