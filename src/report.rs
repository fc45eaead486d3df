//! `dlq-operator report`: the maturity of every DeadLetterQueue, worst first, from the
//! cluster ([`in_cluster`]) or from manifest files and their brokers ([`in_files`]). The
//! facts ([`crate::maturity::Facts`]) are read through the helpers of
//! [`crate::status::maturity`]; the items and
//! the score are the same as in `status.maturity`.
//!
//! - **Cluster**: the spec, the RetryPolicy (found, valid, `Ready`), the status the
//!   operator wrote (`AlertRulesReady`, `RouterReady`, `status.maturity.retriesSeenTime`,
//!   the retry tier depths) and the DeadLetterReplays that replayed messages. Three list
//!   calls in all, no broker call.
//! - **Files**: the spec and RetryPolicy as read (a RetryPolicy in the files counts as
//!   Ready, files having no status), alert rules counted as in place when enabled (`render
//!   --rules` prints them for Prometheus), no replay known, and one depth listing per
//!   broker and vhost: a router consuming the inbox, a message in a retry tier.

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};
use serde::Serialize;

use crate::broker::BrokerFactory;
use crate::collector::{Collector, Reading};
use crate::crd::{
    DeadLetterQueue, DeadLetterQueueStatus, DeadLetterReplay, DepthStatus, RetryPolicy,
};
use crate::manifest::object_key;
use crate::maturity::{evaluate, Check, Facts, Live, Policy, Weights};
use crate::object::{api_resource, decode, status_of};
use crate::resolve::manifests::Planned;
use crate::status::conditions::{ALERT_RULES_READY, ROUTER_READY};
use crate::status::maturity::{condition_true, file_facts, policy_of, replayed_in};

/// One DeadLetterQueue in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The score `M`, 0..1 (3 decimals).
    pub score: f64,
    /// `R_retry`, 0..1.
    pub retry: f64,
    /// `R_dlq`, 0..1.
    pub dead_letter: f64,
    /// `R_monitor`, 0..1.
    pub monitoring: f64,
    /// What to do next, worth most first.
    pub missing: Vec<String>,
    /// Every item, whether it holds.
    pub checks: Vec<Check>,
}

impl Row {
    /// The row of `key` (`namespace/name`) for `facts` under `weights`.
    fn scored(key: &str, facts: &Facts<'_>, weights: &Weights) -> Self {
        let m = evaluate(facts, weights);
        let s = m.status(weights, None);
        let (namespace, name) = crate::collector::split_key(key);
        Row {
            namespace: namespace.to_string(),
            name: name.to_string(),
            score: s.score,
            retry: s.retry,
            dead_letter: s.dead_letter,
            monitoring: s.monitoring,
            missing: s.missing,
            checks: m.checks,
        }
    }

    /// The row of a DeadLetterQueue whose spec is invalid: nothing can be checked, score 0.
    fn invalid(namespace: &str, name: &str, problem: &str) -> Self {
        Row {
            namespace: namespace.to_string(),
            name: name.to_string(),
            score: 0.0,
            retry: 0.0,
            dead_letter: 0.0,
            monitoring: 0.0,
            missing: vec![format!(
                "fix the DeadLetterQueue's spec ({problem}); nothing else can be checked before"
            )],
            checks: Vec::new(),
        }
    }
}

/// `rows` worst first: lowest score first, then by `namespace/name`.
pub fn worst_first(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| {
        a.score
            .total_cmp(&b.score)
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    rows
}

/// Why the cluster could not be read for the report: which list failed, and how.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The kind's CRD is not installed (the API server answered 404).
    #[error("cannot list {plural}: the CRD {plural}.dlqoperator.io is not installed; install the CRDs (docs/INSTALL.md)")]
    NotInstalled {
        /// The kind's plural.
        plural: String,
    },
    /// The API server refused the list (e.g. 403).
    #[error("cannot list {plural}: {message} ({code}); whoever runs report needs list on deadletterqueues, retrypolicies and deadletterreplays")]
    Refused {
        /// The kind's plural.
        plural: String,
        /// The HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// The API server could not be reached or answered something else.
    #[error("cannot list {plural}: {source}")]
    Other {
        /// The kind's plural.
        plural: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// Every object of kind `K` in `namespace` (all namespaces when `None`).
async fn list<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<DynamicObject>, ListError> {
    let ar = api_resource::<K>();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let plural = ar.plural.clone();
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(ListError::NotInstalled { plural }),
        Err(kube::Error::Api(s)) => Err(ListError::Refused {
            plural,
            code: s.code,
            message: s.message.clone(),
        }),
        Err(source) => Err(ListError::Other { plural, source }),
    }
}

/// The report of the cluster's DeadLetterQueues (of `namespace`, or all), worst first
/// (module doc: the facts), each scored under `weights`, or without them under the weights
/// the operator used (`status.maturity.weights`), else the defaults.
///
/// # Errors
/// [`ListError`] when the DeadLetterQueues, RetryPolicies or DeadLetterReplays cannot be
/// listed.
pub async fn in_cluster(
    client: &Client,
    namespace: Option<&str>,
    weights: Option<&Weights>,
) -> Result<Vec<Row>, ListError> {
    let dlqs = list::<DeadLetterQueue>(client, namespace).await?;
    let policies: BTreeMap<String, Option<(RetryPolicy, bool)>> =
        list::<RetryPolicy>(client, namespace)
            .await?
            .iter()
            .map(|o| (object_key(&o.metadata), policy_of(o)))
            .collect();
    let replayed = replayed_in(&list::<DeadLetterReplay>(client, namespace).await?);
    let rows = dlqs
        .iter()
        .map(|obj| {
            let key = object_key(&obj.metadata);
            let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
            let name = obj.metadata.name.as_deref().unwrap_or_default();
            // Refused as the reconcile refuses it: nothing else to check.
            let dlq = match decode::<DeadLetterQueue>(obj)
                .and_then(|d| d.spec.validate().map(|()| d))
            {
                Ok(d) => d,
                Err(e) => return Row::invalid(ns, name, &crate::printable::escape(&e.to_string())),
            };
            let status: DeadLetterQueueStatus = status_of(obj);
            let policy_key = format!("{ns}/{}", dlq.spec.retry_policy_ref.name);
            let policy = match policies.get(&policy_key) {
                Some(Some((p, ready))) => Policy::Found {
                    spec: &p.spec,
                    ready: *ready,
                },
                _ => Policy::Unusable,
            };
            let retries_seen = status
                .maturity
                .as_ref()
                .is_some_and(|m| m.retries_seen_time.is_some())
                || status
                    .depth
                    .as_ref()
                    .is_some_and(DepthStatus::retries_waiting);
            let live = Live {
                from_files: false,
                router_consuming: condition_true(obj, ROUTER_READY),
                retries_seen,
                replayed: replayed.contains(&key),
                alert_rules: condition_true(obj, ALERT_RULES_READY),
            };
            let operators = status
                .maturity
                .as_ref()
                .and_then(|m| m.weights.as_ref())
                .and_then(Weights::from_status);
            let w = weights.copied().or(operators).unwrap_or_default();
            let facts = Facts {
                spec: &dlq.spec,
                policy,
                live,
            };
            Row::scored(&key, &facts, &w)
        })
        .collect();
    Ok(worst_first(rows))
}

/// The report of the DeadLetterQueues `planned` from files, worst first, after one depth
/// listing per broker and vhost (module doc: the facts); and one line per broker that
/// could not be read (its resources are then scored without what it would have shown).
pub async fn in_files(
    planned: &[Planned],
    brokers: &dyn BrokerFactory,
    weights: &Weights,
) -> (Vec<Row>, Vec<String>) {
    let mut collector = Collector::new(crate::metrics::Metrics::new());
    let (endpoints, groups): (Vec<String>, Vec<_>) =
        crate::collector::groups(brokers, planned.iter().map(|p| &p.prepared), 15_000)
            .into_iter()
            .unzip();
    let polls = crate::collector::poll(
        &mut collector,
        &groups,
        crate::clock::now_ms(),
        4,
        |_, _| None,
    )
    .await;
    let mut observed = BTreeMap::new();
    let mut errors = Vec::new();
    for ((endpoint, group), poll) in endpoints.iter().zip(&groups).zip(polls) {
        if let Err(e) = &poll.depths {
            errors.push(format!(
                "vhost {} of {endpoint}: {e}; the router and retry items of its DeadLetterQueues are not checked",
                group.vhost
            ));
        }
        for (member, reading) in group.members.iter().zip(poll.readings) {
            if let Reading::Observed(r) = reading {
                observed.insert(member.key.to_string(), r.observed);
            }
        }
    }
    let rows = planned
        .iter()
        .map(|p| {
            let facts = file_facts(p, observed.get(&p.prepared.key));
            Row::scored(&p.prepared.key, &facts, weights)
        })
        .collect();
    (worst_first(rows), errors)
}
