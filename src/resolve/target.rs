//! Which DeadLetterQueue a `dlq` command works on, and its plan: read from the cluster
//! (`NAMESPACE/NAME`) or from manifest files (`--standalone -f PATH --name NAME`), then
//! resolved by the same [`crate::resolve`] step as the controller and the standalone
//! runner.

use std::path::PathBuf;

use kube::Client;

use crate::manifest::ManifestError;
use crate::reconcile::Prepared;
use crate::resolve::{self, ResolveError};

/// Why a `dlq` command has no DeadLetterQueue to work on.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The reference is not `NAMESPACE/NAME`.
    #[error("{0:?}: expected NAMESPACE/NAME of a DeadLetterQueue")]
    Reference(String),
    /// The DeadLetterQueue of the cluster cannot be found, read or planned.
    #[error(transparent)]
    Cluster(#[from] ResolveError),
    /// The manifest files name no usable DeadLetterQueue.
    #[error(transparent)]
    Files(#[from] FilesError),
}

/// Splits `NAMESPACE/NAME`.
///
/// # Errors
/// [`TargetError::Reference`] when it is not two non-empty parts.
pub fn split_ref(reference: &str) -> Result<(&str, &str), TargetError> {
    match reference.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(TargetError::Reference(reference.to_string())),
    }
}

/// The DeadLetterQueue `namespace/name` of the cluster behind `client`, with its
/// RetryPolicy and Secret, validated and planned ([`resolve::by_name`]).
///
/// # Errors
/// [`ResolveError`] naming what is missing or invalid (the DeadLetterQueue, its
/// RetryPolicy or Secret, a field), or the API server's error.
pub async fn in_cluster(
    client: Client,
    namespace: &str,
    name: &str,
) -> Result<Prepared, ResolveError> {
    resolve::by_name(&resolve::Cluster::new(client), namespace, name)
        .await
        .map(|r| r.prepared)
}

/// Why `--standalone -f PATH --name NAME` names no usable DeadLetterQueue.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The manifests' first problem (file, document, resource, field).
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// No DeadLetterQueue of the manifests has that name.
    #[error("no DeadLetterQueue {name:?} in {} (they have: {})", paths_shown(.paths), .have.join(", "))]
    NotFound {
        /// The name asked for.
        name: String,
        /// The manifest paths, as given.
        paths: Vec<PathBuf>,
        /// The DeadLetterQueues they hold (`namespace/name`).
        have: Vec<String>,
    },
    /// `NAME` is the name of DeadLetterQueues in several namespaces.
    #[error("{name:?} names several DeadLetterQueues: {}; give NAMESPACE/NAME", .matches.join(", "))]
    Ambiguous {
        /// The name asked for.
        name: String,
        /// The DeadLetterQueues of that name (`namespace/name`).
        matches: Vec<String>,
    },
}

/// `paths` as given, joined by `, `.
fn paths_shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The DeadLetterQueue `name` (`NAME`, or `NAMESPACE/NAME` when several namespaces have
/// one of that name) of the manifest files, validated and planned
/// ([`resolve::manifests::load_and_plan`]).
///
/// # Errors
/// [`FilesError::Manifest`] for the manifests' first problem, [`FilesError::NotFound`]
/// or [`FilesError::Ambiguous`] when `name` matches none or several DeadLetterQueues.
pub fn in_files(paths: &[PathBuf], name: &str) -> Result<Prepared, FilesError> {
    let (_, planned) = resolve::manifests::load_and_plan(paths)?;
    let mut matches: Vec<Prepared> = planned
        .iter()
        .filter(|p| {
            p.prepared.key == name
                || p.prepared
                    .key
                    .rsplit_once('/')
                    .is_some_and(|(_, n)| n == name)
        })
        .map(|p| p.prepared.clone())
        .collect();
    match matches.len() {
        1 => Ok(matches.remove(0)),
        0 => Err(FilesError::NotFound {
            name: name.to_string(),
            paths: paths.to_vec(),
            have: planned.iter().map(|p| p.prepared.key.clone()).collect(),
        }),
        _ => Err(FilesError::Ambiguous {
            name: name.to_string(),
            matches: matches.into_iter().map(|p| p.key).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_namespace_slash_name() {
        assert_eq!(
            split_ref("orders/order-events").ok(),
            Some(("orders", "order-events"))
        );
        assert_eq!(
            split_ref("x").map_err(|e| e.to_string()).err().as_deref(),
            Some("\"x\": expected NAMESPACE/NAME of a DeadLetterQueue")
        );
        for bad in ["order-events", "/x", "x/", "a/b/c", ""] {
            assert!(split_ref(bad).is_err(), "{bad}");
        }
    }
}
