//! The generated `PrometheusRule` (`monitoring.coreos.com/v1`, Prometheus Operator) of a
//! DeadLetterQueue ([`crate::alerts::prometheus_rule`]): written by server-side apply
//! with the operator's field manager, owned by the resource (so Kubernetes deletes it
//! with it), and reported as the `AlertRulesReady` condition.
//!
//! Without the PrometheusRule CRD the API answers 404 for the resource type: the
//! condition says `PrometheusOperatorMissing` and nothing else changes (the metrics are
//! served all the same; `dlq-operator render` prints the rules for a plain Prometheus).

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::controller::context::{Context, FIELD_MANAGER};
use crate::crd::DeadLetterQueue;
use crate::monitor::Params;
use crate::status::conditions::{ConditionStatus, Desired, ALERT_RULES_READY};

/// The `PrometheusRule` resource type.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PrometheusRule"),
        "prometheusrules",
    )
}

/// Name of the PrometheusRule of the DeadLetterQueue `name` (`dlq-<name>`).
pub fn rule_name(name: &str) -> String {
    format!("dlq-{name}")
}

/// `true` when a 404's message says the object is missing (`prometheusrules... "x" not
/// found`), `false` when the resource type itself is not served ("the server could not
/// find the requested resource": the CRD is not installed).
fn is_object_not_found(message: &str) -> bool {
    !message.contains("could not find the requested resource")
}

/// `true` when `existing` already has the `spec`, labels and owner references of `desired`.
fn in_place(existing: &DynamicObject, desired: &serde_json::Value) -> bool {
    let spec_same = existing.data.get("spec") == desired.get("spec");
    let labels_same = desired["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| {
            existing
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .is_some_and(|have| Some(have.as_str()) == v.as_str())
        });
    let owners_same = match desired["metadata"].get("ownerReferences") {
        None => true,
        Some(want) => {
            serde_json::to_value(
                existing
                    .metadata
                    .owner_references
                    .clone()
                    .unwrap_or_default(),
            )
            .ok()
            .as_ref()
                == Some(want)
        }
    };
    spec_same && labels_same && owners_same
}

/// Puts `dlq`'s PrometheusRule in place (or, with
/// `spec.alerting.prometheusRule.enabled: false`, deletes the one it owns) and returns
/// the `AlertRulesReady` condition, `None` when alerting is disabled (the condition is
/// then removed).
///
/// - `True`, `RulesApplied`: applied.
/// - `False`, `PrometheusOperatorMissing`: the PrometheusRule CRD is not installed.
/// - `False`, `RulesApplyFailed`: any other API error (e.g. RBAC), with its message.
///
/// `had_rules`: whether the last status has an `AlertRulesReady` condition (only then is a
/// delete attempted when alerting is disabled, so a disabled resource costs no call).
pub async fn apply(
    ctx: &Context,
    namespace: &str,
    dlq: &DeadLetterQueue,
    params: &Params,
    had_rules: bool,
) -> Option<Desired> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &api_resource());
    let name = rule_name(dlq.metadata.name.as_deref().unwrap_or_default());
    if !dlq.spec.alerting.prometheus_rule.enabled {
        if had_rules {
            if let Ok(Some(existing)) = api.get_opt(&name).await {
                let ours = existing
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == dlq.metadata.uid.as_ref());
                if ours {
                    if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                        tracing::warn!(rule = %name, error = %e, "could not delete the PrometheusRule");
                    }
                }
            }
        }
        return None;
    }
    let rule = crate::alerts::prometheus_rule(dlq, params);
    let groups = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .map_or(0, Vec::len);
    // Read first: an unchanged rule is not written again (a steady state writes nothing).
    let written = match api.get(&name).await {
        Ok(existing) if in_place(&existing, &rule) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 && !is_object_not_found(&s.message) => {
            Err(kube::Error::Api(s))
        }
        _ => api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&rule),
            )
            .await
            .map(|_| ()),
    };
    let (status, reason, message) = match written {
        Ok(()) => (
            ConditionStatus::True,
            "RulesApplied",
            format!("PrometheusRule {name} holds {groups} alert rule(s)"),
        ),
        Err(kube::Error::Api(s)) if s.code == 404 => (
            ConditionStatus::False,
            "PrometheusOperatorMissing",
            "the PrometheusRule CRD (monitoring.coreos.com/v1) is not installed: install the Prometheus Operator (e.g. kube-prometheus-stack) to get the generated alerts, or load the rule file `dlq-operator render --rules -f PATH` prints into Prometheus; metrics are served either way".to_string(),
        ),
        Err(kube::Error::Api(s)) => (
            ConditionStatus::False,
            "RulesApplyFailed",
            format!("PrometheusRule {name}: {} (HTTP {})", s.message, s.code),
        ),
        Err(e) => (
            ConditionStatus::False,
            "RulesApplyFailed",
            format!("PrometheusRule {name}: {e}"),
        ),
    };
    Some(Desired {
        type_: ALERT_RULES_READY,
        status,
        reason,
        message,
    })
}
