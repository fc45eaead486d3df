//! Which DeadLetterQueue a `dlq` command works on, and its plan: read from the cluster
//! (`NAMESPACE/NAME`) or from manifest files (`--standalone -f PATH --name NAME`), then
//! validated and planned by the same [`reconcile::prepare`] the controller and the
//! standalone runner use.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::Client;

use crate::crd::{DeadLetterQueue, RetryPolicy};
use crate::reconcile::{self, Prepared};

/// Splits `NAMESPACE/NAME`.
///
/// # Errors
/// A message naming the argument when it is not two non-empty parts.
pub fn split_ref(reference: &str) -> Result<(&str, &str), String> {
    match reference.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(format!(
            "{reference:?}: expected NAMESPACE/NAME of a DeadLetterQueue"
        )),
    }
}

/// The DeadLetterQueue `namespace/name` of the cluster, its RetryPolicy and Secret,
/// validated and planned.
///
/// # Errors
/// A message naming what is missing or invalid (the DeadLetterQueue, its RetryPolicy or
/// Secret, a field), or the API server's error.
pub async fn from_cluster(client: Client, namespace: &str, name: &str) -> Result<Prepared, String> {
    let api_err = |what: &str, e: kube::Error| format!("cannot read {what}: {e}");
    let dlq = Api::<DeadLetterQueue>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| api_err(&format!("DeadLetterQueue {namespace}/{name}"), e))?
        .ok_or_else(|| format!("DeadLetterQueue {namespace}/{name} not found"))?;
    let policy_name = &dlq.spec.retry_policy_ref.name;
    let policy = Api::<RetryPolicy>::namespaced(client.clone(), namespace)
        .get_opt(policy_name)
        .await
        .map_err(|e| api_err(&format!("RetryPolicy {namespace}/{policy_name}"), e))?;
    let secret_name = &dlq.spec.broker.secret_ref.name;
    let secret = Api::<Secret>::namespaced(client, namespace)
        .get_opt(secret_name)
        .await
        .map_err(|e| api_err(&format!("Secret {namespace}/{secret_name}"), e))?;
    reconcile::prepare(&dlq, policy.as_ref(), secret.as_ref())
        .map_err(|e| format!("DeadLetterQueue {namespace}/{name}: {e}"))
}

/// The DeadLetterQueue `name` (`NAME`, or `NAMESPACE/NAME` when several namespaces have
/// one of that name) of the manifest files, validated and planned.
///
/// # Errors
/// The manifests' first problem (file, document, resource, field), or a message when
/// `name` matches none or several DeadLetterQueues (listing them).
pub fn from_files(paths: &[PathBuf], name: &str) -> Result<Prepared, String> {
    let (_, planned) = crate::standalone::load_and_plan(paths).map_err(|e| e.to_string())?;
    let matches: Vec<_> = planned
        .iter()
        .filter(|p| {
            p.prepared.key == name
                || p.prepared
                    .key
                    .rsplit_once('/')
                    .is_some_and(|(_, n)| n == name)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.prepared.clone()),
        [] => Err(format!(
            "no DeadLetterQueue {name:?} in {} (they have: {})",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            planned
                .iter()
                .map(|p| p.prepared.key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        several => Err(format!(
            "{name:?} names several DeadLetterQueues: {}; give NAMESPACE/NAME",
            several
                .iter()
                .map(|p| p.prepared.key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_namespace_slash_name() {
        assert_eq!(
            split_ref("orders/order-events"),
            Ok(("orders", "order-events"))
        );
        for bad in ["order-events", "/x", "x/", "a/b/c", ""] {
            assert!(split_ref(bad).is_err(), "{bad}");
        }
    }
}
