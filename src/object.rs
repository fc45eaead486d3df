//! Lenient reading of watched objects.
//!
//! The controllers watch [`DynamicObject`]s instead of the typed resources, so that one
//! object the types cannot decode (written by an older CRD version, or by a client that
//! bypassed the schema) does not stop the watch for everyone (docs/ARCHITECTURE.md, "Reconcile stages": "wrap watched
//! types"). Each object is decoded here, in its own reconcile, and an undecodable one is
//! reported on its own status as `InvalidSpec` naming the field.

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::crd::{FieldError, InvalidSpec};

/// The `ApiResource` of a typed resource (group, version, kind, plural).
pub fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Decodes the metadata and spec of `obj` into `K` (its status is left empty; read it
/// with [`status_of`]).
///
/// # Errors
/// [`InvalidSpec`] with one [`FieldError`] naming the path of the first field that does
/// not decode (e.g. `spec.source.deliveryLimit`) and the decoder's reason.
pub fn decode<K>(obj: &DynamicObject) -> Result<K, InvalidSpec>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let mut value = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": obj.metadata,
        "spec": obj.data.get("spec").cloned().unwrap_or(Value::Null),
    });
    if value["spec"].is_null() {
        // `spec` is required; a missing one decodes as an empty object so that every
        // defaulted field gets its default and required ones are named.
        value["spec"] = Value::Object(Default::default());
    }
    serde_path_to_error::deserialize::<_, K>(value).map_err(|e| {
        let path = e.path().to_string();
        InvalidSpec(vec![FieldError {
            field: if path == "." { "spec".into() } else { path },
            message: e.into_inner().to_string(),
        }])
    })
}

/// The object's `status` decoded as `S`, or `S::default()` when it is absent or does not
/// decode (the controller then rewrites it).
pub fn status_of<S: DeserializeOwned + Default>(obj: &DynamicObject) -> S {
    obj.data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default()
}

/// The string at JSON pointer `pointer` (e.g. `/spec/retryPolicyRef/name`) of `obj`.
pub fn string_at<'a>(obj: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    obj.data.pointer(pointer).and_then(Value::as_str)
}

/// References to the objects of `store` in `namespace` whose string at `pointer` equals
/// `name`: the DeadLetterQueues to reconcile when the RetryPolicy or Secret `name`
/// changes.
pub fn referencing(
    store: &[std::sync::Arc<DynamicObject>],
    resource: &ApiResource,
    namespace: Option<&str>,
    pointer: &str,
    name: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    store
        .iter()
        .filter(|o| o.metadata.namespace.as_deref() == namespace)
        .filter(|o| string_at(o, pointer) == Some(name))
        .filter_map(|o| {
            let n = o.metadata.name.as_deref()?;
            let r = ObjectRef::new_with(n, resource.clone());
            Some(match namespace {
                Some(ns) => r.within(ns),
                None => r,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{DeadLetterQueue, RetryPolicy};
    use std::sync::Arc;

    fn dynamic(kind_ar: &ApiResource, name: &str, spec: Value) -> DynamicObject {
        let mut o = DynamicObject::new(name, kind_ar).within("default");
        o.data = serde_json::json!({ "spec": spec });
        o
    }

    #[test]
    fn undecodable_field_is_named() {
        let ar = api_resource::<DeadLetterQueue>();
        let o = dynamic(
            &ar,
            "orders",
            serde_json::json!({
                "broker": {"secretRef": {"name": "rabbit"}},
                "source": {"queue": "orders", "deliveryLimit": "twenty"},
                "retryPolicyRef": {"name": "p"}
            }),
        );
        let err = decode::<DeadLetterQueue>(&o).expect_err("string delivery limit");
        assert_eq!(err.0[0].field, "spec.source.deliveryLimit");
        assert!(err.0[0].message.contains("invalid type"), "{err}");
    }

    #[test]
    fn valid_object_decodes_with_defaults() {
        let ar = api_resource::<RetryPolicy>();
        let o = dynamic(&ar, "p", serde_json::json!({"maxRetries": 4}));
        let rp = decode::<RetryPolicy>(&o).expect("decodes");
        assert_eq!(rp.spec.max_retries, 4);
        assert_eq!(rp.metadata.name.as_deref(), Some("p"));
        // A missing spec decodes with every default.
        let mut empty = o.clone();
        empty.data = serde_json::json!({});
        assert_eq!(
            decode::<RetryPolicy>(&empty)
                .expect("defaults")
                .spec
                .max_retries,
            3
        );
    }

    #[test]
    fn references_are_matched_by_namespace_and_name() {
        let ar = api_resource::<DeadLetterQueue>();
        let a = dynamic(
            &ar,
            "a",
            serde_json::json!({"retryPolicyRef": {"name": "p"}}),
        );
        let b = dynamic(
            &ar,
            "b",
            serde_json::json!({"retryPolicyRef": {"name": "q"}}),
        );
        let c = dynamic(
            &ar,
            "c",
            serde_json::json!({"retryPolicyRef": {"name": "p"}}),
        )
        .within("other");
        let store = vec![Arc::new(a), Arc::new(b), Arc::new(c)];
        let refs = referencing(
            &store,
            &ar,
            Some("default"),
            "/spec/retryPolicyRef/name",
            "p",
        );
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].name, "a");
        assert_eq!(refs[0].namespace.as_deref(), Some("default"));
    }
}
