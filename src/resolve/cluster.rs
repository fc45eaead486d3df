//! [`References`] in a Kubernetes cluster: one GET per object, in the resource's
//! namespace. The custom resources are read as untyped objects and decoded leniently
//! ([`crate::object::decode`]): one that does not decode is an invalid spec
//! naming the field, not a failed read.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::{Found, References, ResolveError, Resolved};
use crate::crd::{DeadLetterQueue, RetryPolicy};
use crate::manifest::object_key;
use crate::object::{api_resource, decode};
use crate::reconcile::{PlanError, ResourceKind};

/// The cluster behind `client`, read with the client's credentials.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
}

impl Cluster {
    /// Reads through `client`.
    pub fn new(client: Client) -> Self {
        Cluster { client }
    }

    /// GETs the custom resource `K` `namespace/name` and decodes it.
    async fn custom<K>(
        &self,
        kind: ResourceKind,
        namespace: &str,
        name: &str,
    ) -> Result<Found<K>, ResolveError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &api_resource::<K>());
        let found = api
            .get_opt(name)
            .await
            .map_err(|source| ResolveError::api(kind, format!("{namespace}/{name}"), source))?;
        Ok(found.map(|o| decode::<K>(&o)))
    }
}

impl References for Cluster {
    async fn read_dead_letter_queue(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Found<DeadLetterQueue>, ResolveError> {
        self.custom(ResourceKind::DeadLetterQueue, namespace, name)
            .await
    }

    async fn read_retry_policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Found<RetryPolicy>, ResolveError> {
        self.custom(ResourceKind::RetryPolicy, namespace, name)
            .await
    }

    async fn read_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Secret>, ResolveError> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| {
                ResolveError::api(ResourceKind::Secret, format!("{namespace}/{name}"), source)
            })
    }
}

/// Resolves the DeadLetterQueue `dlq` (already read and decoded, e.g. by a controller's
/// watch) of `namespace` in the cluster behind `client`: validates its spec, GETs its
/// RetryPolicy and its Secret in `namespace`, and plans it ([`super::resolve`]).
///
/// # Errors
/// [`ResolveError::Plan`]: [`PlanError::InvalidSpec`] (the DeadLetterQueue or its
/// RetryPolicy, naming the fields; a RetryPolicy that does not decode included),
/// `RetryPolicyNotFound`, `SecretNotFound`, `Secret`; or [`NoVerdict::Api`](super::NoVerdict::Api)
/// when a GET fails. [`ResolveError::into_reconcile`] gives the resource's reconcile error
/// for all but the last.
pub async fn in_cluster(
    client: Client,
    namespace: &str,
    dlq: DeadLetterQueue,
) -> Result<Resolved, ResolveError> {
    super::resolve(&Cluster::new(client), namespace, dlq).await
}

/// Resolves the DeadLetterQueue object `obj` of `namespace` as a controller holds it (from
/// its watch or a GET, not yet decoded): decodes it leniently
/// ([`crate::object::decode`]), then as [`in_cluster`].
///
/// # Errors
/// [`PlanError::InvalidSpec`] for the DeadLetterQueue (named by `obj`'s `namespace/name`)
/// when it does not decode, then as [`in_cluster`]; never
/// [`NoVerdict::DeadLetterQueueNotFound`](super::NoVerdict::DeadLetterQueueNotFound).
pub async fn object_in_cluster(
    client: Client,
    namespace: &str,
    obj: &DynamicObject,
) -> Result<Resolved, ResolveError> {
    let dlq = decode::<DeadLetterQueue>(obj).map_err(|source| {
        let key = object_key(&obj.metadata);
        ResolveError::from_plan(
            &key,
            PlanError::InvalidSpec {
                kind: ResourceKind::DeadLetterQueue,
                name: key.clone(),
                source,
            },
        )
    })?;
    in_cluster(client, namespace, dlq).await
}
