//! Custom resource types of the `dlqoperator.io/v1alpha1` API group (docs/REFERENCE.md) and
//! their validation.
//!
//! Types deserialise leniently (durations are strings, numbers are not range-checked), so
//! that an object the schema would reject can still be read and reported by
//! [`RetryPolicySpec::validate`] / [`DeadLetterQueueSpec::validate`] with the field's path.
//! The schema carries the same rules (minimum/maximum, enums, duration pattern, CEL).

mod dead_letter_queue;
mod dead_letter_replay;
mod retry_policy;

pub use dead_letter_queue::*;
pub use dead_letter_replay::*;
pub use retry_policy::*;

/// The error classes a RetryPolicy classifies, from their own module.
pub use crate::error_class::ErrorClass;

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every resource of the operator.
pub const API_GROUP: &str = "dlqoperator.io";
/// API version of every resource of the operator.
pub const API_VERSION: &str = "v1alpha1";

/// One invalid field: its path in the object (e.g. `spec.backoff.maxDelay`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field from the object's root, in the manifest's camelCase names.
    pub field: String,
    /// What is wrong with it, and what is expected.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All invalid fields of one object (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec(pub Vec<FieldError>);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        f.write_str(&parts.join("; "))
    }
}

/// A number as a person reads it in a message: plain for ordinary sizes (`0.5`, `1000`),
/// in exponent form beyond them (`1e308`, `1e-9`) instead of hundreds of digits, and
/// `.nan` / `.inf` / `-.inf` as YAML writes those.
pub fn readable_number(x: f64) -> String {
    if x.is_nan() {
        return ".nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e9).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// Where `x` lies against a range from `min` (`min_inclusive` or not) to `max`
/// (inclusive): `None` inside it, else `"is not a number"`, `"is too small"` or `"is too
/// large"` (infinities included), for a message that then states the range.
pub fn out_of_range(x: f64, min: f64, min_inclusive: bool, max: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("is not a number")
    } else if x < min || (x == min && !min_inclusive) {
        Some("is too small")
    } else if x > max {
        Some("is too large")
    } else {
        None
    }
}

/// Collects field errors during validation.
#[derive(Default)]
pub(crate) struct Errors(Vec<FieldError>);

impl Errors {
    pub(crate) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Parses a duration, recording an error for `field` when it is invalid.
    pub(crate) fn duration(&mut self, field: &str, d: &crate::duration::Duration) -> Option<u64> {
        match d.as_ms() {
            Ok(ms) => Some(ms),
            Err(e) => {
                self.push(field, e.to_string());
                None
            }
        }
    }

    pub(crate) fn finish(self) -> Result<(), InvalidSpec> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec(self.0))
        }
    }
}

/// Whether `label` is an RFC 1123 label as Kubernetes requires for a namespace (API
/// conventions, "Object names and IDs"): lower-case letters, digits and `-`, beginning and
/// ending with a letter or digit, at most 63 characters.
pub fn is_rfc1123_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// Whether `name` is an RFC 1123 subdomain as Kubernetes requires for an object name:
/// labels ([`is_rfc1123_label`]) joined by `.`, at most 253 characters.
pub fn is_rfc1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_rfc1123_label)
}

/// Every CRD of the operator, in a stable order (as written by `dlq-operator crdgen`),
/// with only the integer formats the Kubernetes API server knows ([`known_formats`]).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        DeadLetterQueue::crd(),
        DeadLetterReplay::crd(),
        RetryPolicy::crd(),
    ];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                known_formats(schema);
            }
        }
    }
    crds
}

/// Rewrites schemars' unsigned integer formats (`uint64`, `uint32`, `uint16`, `uint8`,
/// `uint`) as the OpenAPI formats the API server knows (`int64`, `int32`): a current
/// server (tried on 1.36) warns `unrecognized format "uint64"` on every create of the CRDs
/// and of each resource. The `minimum: 0` (or more) schemars writes with them keeps the
/// values unsigned. Walks every nested schema.
pub fn known_formats(
    schema: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    };
    schema.format = match schema.format.take().as_deref() {
        Some("uint64") | Some("uint") => Some("int64".into()),
        Some("uint32") | Some("uint16") | Some("uint8") => Some("int32".into()),
        other => other.map(str::to_string),
    };
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        known_formats(child);
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        for child in list.iter_mut().flatten() {
            known_formats(child);
        }
    }
    if let Some(not) = schema.not.as_mut() {
        known_formats(not);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(s)) => known_formats(s),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => list.iter_mut().for_each(known_formats),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = schema.additional_properties.as_mut() {
        known_formats(s);
    }
}

/// File name under `crds/` for a CRD (`<plural>.<group>.yaml`).
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!(
        "{}.yaml",
        crd.metadata.name.clone().unwrap_or_else(|| "crd".into())
    )
}

/// Renders a CRD as the YAML written to `crds/` (with a generated-file header).
///
/// # Errors
/// Serialisation errors of the YAML library (not expected for these types).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml_ng::Error> {
    Ok(format!(
        "# Generated by `dlq-operator crdgen` from src/crd/. Do not edit by hand.\n{}",
        serde_yaml_ng::to_string(crd)?
    ))
}
