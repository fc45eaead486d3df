//! The resolve step over the manifests and over a fake cluster, and every mapping of its
//! error: to the `dlq` commands' messages, to a reconcile error, to a manifest error.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::broker::BrokerError;
use crate::crd::FieldError;
use crate::manifest::{load_str, Manifests};

const POLICY: &str = "apiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n  maxRetries: 2\n  backoff: {strategy: Exponential, initialDelay: 1s, maxDelay: 10s}\n";
const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: shop}\nstringData:\n  uri: amqp://u:pw@rabbit:5672/%2f\n  managementUri: http://rabbit:15672\n";

fn dlq_doc(name: &str, queue: &str, extra: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  broker: {{secretRef: {{name: s}}}}\n  source: {{queue: {queue}}}\n  retryPolicyRef: {{name: p}}\n{extra}"
    )
}

/// The manifests of `docs`, each read as a file of its own (`<i>.yaml`).
fn manifests(docs: &[&str]) -> Manifests {
    let mut m = Manifests::default();
    for (i, doc) in docs.iter().enumerate() {
        load_str(Path::new(&format!("{i}.yaml")), doc, &mut m).expect("reads");
    }
    m
}

fn first_dlq(m: &Manifests) -> DeadLetterQueue {
    m.dead_letter_queues[0].object.clone()
}

fn resolved(m: &Manifests) -> Result<Resolved, ResolveError> {
    futures::executor::block_on(resolve(m, "shop", first_dlq(m)))
}

fn invalid(field: &str) -> InvalidSpec {
    InvalidSpec(vec![FieldError {
        field: field.into(),
        message: "bad".into(),
    }])
}

/// A cluster that answers from fixed objects, or fails a read, and counts the reads.
#[derive(Default)]
struct Fake {
    dead_letter_queue: Option<Found<DeadLetterQueue>>,
    retry_policy: Option<Found<RetryPolicy>>,
    secret: Option<Secret>,
    fail_secret: bool,
    reads: AtomicUsize,
}

impl References for Fake {
    async fn read_dead_letter_queue(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Found<DeadLetterQueue>, ResolveError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.dead_letter_queue.clone().flatten())
    }

    async fn read_retry_policy(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Found<RetryPolicy>, ResolveError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.retry_policy.clone().flatten())
    }

    async fn read_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Secret>, ResolveError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.fail_secret {
            return Err(ResolveError::api(
                ResourceKind::Secret,
                format!("{namespace}/{name}"),
                kube::Error::LinesCodecMaxLineLengthExceeded,
            ));
        }
        Ok(self.secret.clone())
    }
}

#[test]
fn a_valid_resource_resolves_with_what_it_references() {
    let m = manifests(&[POLICY, SECRET, &dlq_doc("orders", "orders", "")]);
    let r = resolved(&m).expect("resolves");
    assert_eq!(r.prepared.key, "shop/orders");
    assert_eq!(r.retry_policy.metadata.name.as_deref(), Some("p"));
    assert_eq!(r.secret.metadata.name.as_deref(), Some("s"));
    assert_eq!(r.dead_letter_queue.spec.source.queue, "orders");
    let uri = r.prepared.connection.redacted_management_uri();
    assert!(
        uri.contains("@rabbit:15672") && !uri.contains("pw"),
        "{uri}"
    );
}

#[test]
fn each_failure_names_the_object_and_reads_as_the_dlq_commands_say_it() {
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![POLICY.into(), SECRET.into(), dlq_doc("d", "''", "")],
            "DeadLetterQueue shop/d: DeadLetterQueue shop/d: invalid spec: spec.source.queue:",
        ),
        (
            vec![SECRET.into(), dlq_doc("d", "q", "")],
            "DeadLetterQueue shop/d: spec.retryPolicyRef.name: RetryPolicy shop/p not found",
        ),
        (
            vec![
                POLICY.replace("initialDelay: 1s", "initialDelay: soon"),
                SECRET.into(),
                dlq_doc("d", "q", ""),
            ],
            "DeadLetterQueue shop/d: RetryPolicy shop/p: invalid spec: spec.backoff.initialDelay:",
        ),
        (
            vec![POLICY.into(), dlq_doc("d", "q", "")],
            "DeadLetterQueue shop/d: spec.broker.secretRef.name: Secret shop/s not found",
        ),
        (
            vec![
                POLICY.into(),
                SECRET.replace("amqp://", "http://"),
                dlq_doc("d", "q", ""),
            ],
            "DeadLetterQueue shop/d: secret \"s\": key \"uri\": not an amqp(s) URI",
        ),
    ];
    for (docs, message) in cases {
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let e = resolved(&manifests(&docs)).expect_err(message);
        assert!(e.to_string().starts_with(message), "{e}\nwanted: {message}");
    }
}

#[test]
fn an_invalid_resource_is_refused_before_anything_is_read() {
    let m = manifests(&[&dlq_doc("d", "''", "")]);
    let fake = Fake::default();
    let e =
        futures::executor::block_on(resolve(&fake, "shop", first_dlq(&m))).expect_err("invalid");
    assert!(matches!(
        e,
        ResolveError::Plan {
            source: PlanError::InvalidSpec {
                kind: ResourceKind::DeadLetterQueue,
                ..
            },
            ..
        }
    ));
    assert_eq!(fake.reads.load(Ordering::SeqCst), 0);
}

#[test]
fn an_undecodable_retry_policy_is_invalid_and_a_failed_read_is_an_api_error() {
    let m = manifests(&[SECRET, &dlq_doc("d", "q", "")]);
    let secret = m.secrets[0].object.clone();
    let fake = Fake {
        retry_policy: Some(Some(Err(invalid("spec.maxRetries")))),
        secret: Some(secret),
        ..Fake::default()
    };
    let e = futures::executor::block_on(resolve(&fake, "shop", first_dlq(&m))).expect_err("");
    assert_eq!(
        e.to_string(),
        "DeadLetterQueue shop/d: RetryPolicy shop/p: invalid spec: spec.maxRetries: bad"
    );
    assert_eq!(fake.reads.load(Ordering::SeqCst), 2, "both references read");

    let failing = Fake {
        fail_secret: true,
        ..fake
    };
    let e = futures::executor::block_on(resolve(&failing, "shop", first_dlq(&m))).expect_err("");
    assert!(matches!(
        e,
        ResolveError::NoVerdict(NoVerdict::Api {
            kind: ResourceKind::Secret,
            ..
        })
    ));
    assert_eq!(
        e.to_string(),
        "cannot read Secret shop/s: Error finding newline character"
    );
}

#[test]
fn by_name_says_a_missing_or_undecodable_resource() {
    let fake = Fake::default();
    let e = futures::executor::block_on(by_name(&fake, "shop", "x")).expect_err("");
    assert_eq!(e.to_string(), "DeadLetterQueue shop/x not found");
    let fake = Fake {
        dead_letter_queue: Some(Some(Err(invalid("spec.source")))),
        ..Fake::default()
    };
    let e = futures::executor::block_on(by_name(&fake, "shop", "x")).expect_err("");
    assert_eq!(
        e.to_string(),
        "DeadLetterQueue shop/x: DeadLetterQueue shop/x: invalid spec: spec.source: bad"
    );
    let m = manifests(&[POLICY, SECRET, &dlq_doc("orders", "orders", "")]);
    let r = futures::executor::block_on(by_name(&m, "shop", "orders")).expect("found");
    assert_eq!(r.prepared.key, "shop/orders");
}

/// One error of each variant, with the reconcile error it maps to (`None`: not one).
fn every_error() -> Vec<(ResolveError, Option<(&'static str, String)>)> {
    let dlq = || "shop/d".to_string();
    let broker = BrokerError::InvalidSecret {
        secret: "s".into(),
        key: "uri".into(),
        reason: "missing (required)".into(),
    };
    vec![
        (
            NoVerdict::DeadLetterQueueNotFound { name: dlq() }.into(),
            None,
        ),
        (
            ResolveError::from_plan(&dlq(), PlanError::RetryPolicyNotFound("shop/p".into())),
            Some((
                "RetryPolicyNotFound",
                "spec.retryPolicyRef.name: RetryPolicy shop/p not found".into(),
            )),
        ),
        (
            ResolveError::from_plan(&dlq(), PlanError::SecretNotFound("shop/s".into())),
            Some((
                "SecretNotFound",
                "spec.broker.secretRef.name: Secret shop/s not found".into(),
            )),
        ),
        (
            ResolveError::from_plan(
                &dlq(),
                PlanError::InvalidSpec {
                    kind: ResourceKind::RetryPolicy,
                    name: "shop/p".into(),
                    source: invalid("spec.tiers"),
                },
            ),
            Some((
                "InvalidSpec",
                "RetryPolicy shop/p: invalid spec: spec.tiers: bad".into(),
            )),
        ),
        (
            ResolveError::from_plan(&dlq(), PlanError::Secret(broker)),
            Some((
                "InvalidSecret",
                "secret \"s\": key \"uri\": missing (required)".into(),
            )),
        ),
        (
            ResolveError::api(
                ResourceKind::RetryPolicy,
                "shop/p".into(),
                kube::Error::LinesCodecMaxLineLengthExceeded,
            ),
            None,
        ),
    ]
}

#[test]
fn into_reconcile_keeps_the_conditions_reason_and_message() {
    for (e, want) in every_error() {
        let shown = e.to_string();
        match (e.into_reconcile(), want) {
            (Ok(r), Some((reason, message))) => {
                assert_eq!((r.reason(), r.to_string()), (reason, message.clone()));
                // The command's message is the DeadLetterQueue's, then the condition's.
                assert_eq!(shown, format!("DeadLetterQueue shop/d: {message}"));
            }
            (Err(back), None) => assert_eq!(back.to_string(), shown),
            (got, want) => panic!("{shown}: got {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn plan_errors_map_to_the_same_reconcile_and_resolve_errors() {
    let plan_errors = || {
        vec![
            PlanError::InvalidSpec {
                kind: ResourceKind::DeadLetterQueue,
                name: "shop/d".into(),
                source: invalid("spec.source.queue"),
            },
            PlanError::RetryPolicyNotFound("shop/p".into()),
            PlanError::SecretNotFound("shop/s".into()),
            PlanError::Secret(BrokerError::InvalidSecret {
                secret: "s".into(),
                key: "uri".into(),
                reason: "value is empty".into(),
            }),
        ]
    };
    let reasons = [
        "InvalidSpec",
        "RetryPolicyNotFound",
        "SecretNotFound",
        "InvalidSecret",
    ];
    for ((plan, again), reason) in plan_errors().into_iter().zip(plan_errors()).zip(reasons) {
        let message = plan.to_string();
        let reconcile = ReconcileError::from(plan);
        assert_eq!(
            (reconcile.reason(), reconcile.to_string()),
            (reason, message.clone())
        );
        let resolve = ResolveError::from_plan("shop/d", again);
        assert_eq!(
            resolve.to_string(),
            format!("DeadLetterQueue shop/d: {message}")
        );
        let back = resolve.into_reconcile().expect("a reconcile error");
        assert_eq!((back.reason(), back.to_string()), (reason, message));
    }
}

#[test]
fn manifest_errors_point_at_the_document_at_fault() {
    let m = manifests(&[POLICY, SECRET, &dlq_doc("d", "q", "")]);
    let d = &m.dead_letter_queues[0];
    let shown: Vec<String> = every_error()
        .into_iter()
        .map(|(e, _)| manifests::manifest_error(&m, d, e).to_string())
        .collect();
    assert_eq!(
        shown,
        [
            "2.yaml (document 1): DeadLetterQueue shop/d: spec: DeadLetterQueue shop/d not found",
            "2.yaml (document 1): DeadLetterQueue shop/d: spec.retryPolicyRef.name: RetryPolicy shop/p not found in the manifests",
            "2.yaml (document 1): DeadLetterQueue shop/d: spec.broker.secretRef.name: Secret shop/s not found in the manifests",
            "0.yaml (document 1): RetryPolicy shop/p: spec.tiers: bad",
            "1.yaml (document 1): Secret shop/s: data.uri: missing (required)",
            "2.yaml (document 1): DeadLetterQueue shop/d: spec: cannot read RetryPolicy shop/p: Error finding newline character",
        ]
    );
    let other = ResolveError::from_plan(
        "shop/d",
        PlanError::Secret(BrokerError::Unreachable {
            endpoint: "http://rabbit:15672/".into(),
            reason: "refused".into(),
        }),
    );
    let e = manifests::manifest_error(&m, d, other).to_string();
    assert!(
        e.starts_with("2.yaml (document 1): DeadLetterQueue shop/d: spec: "),
        "{e}"
    );
    assert!(
        !e.contains("spec: DeadLetterQueue shop/d"),
        "said once: {e}"
    );
}

/// Plans every DeadLetterQueue of `docs` (each its own file) and checks their ownership.
fn ownership_of(docs: &[&str]) -> Result<(), String> {
    let m = manifests(docs);
    let planned: Vec<manifests::Planned> = m
        .dead_letter_queues
        .iter()
        .map(|d| manifests::plan_loaded(&m, d).expect("plans"))
        .collect();
    manifests::check_ownership(&planned).map_err(|e| e.to_string())
}

#[test]
fn two_resources_on_one_name_are_refused_as_before() {
    let a = dlq_doc("a", "orders", "");
    let same_source = dlq_doc("b", "orders", "");
    assert_eq!(
        ownership_of(&[POLICY, SECRET, &a, &same_source]),
        Err("3.yaml (document 1): DeadLetterQueue shop/b: spec.source.queue: queue \"orders\" is also planned by DeadLetterQueue shop/a (2.yaml (document 1)); each queue and exchange belongs to one DeadLetterQueue".into())
    );
    let dead_letters_into_a = dlq_doc("b", "payments", "  deadLetter: {queue: orders}\n");
    assert_eq!(
        ownership_of(&[POLICY, SECRET, &a, &dead_letters_into_a]),
        Err("3.yaml (document 1): DeadLetterQueue shop/b: spec.deadLetter.queue: queue \"orders\" is also planned by DeadLetterQueue shop/a (2.yaml (document 1)); each queue and exchange belongs to one DeadLetterQueue".into())
    );
    let into_a_tier = dlq_doc("b", "payments", "  deadLetter: {queue: orders.retry.2s}\n");
    assert_eq!(
        ownership_of(&[POLICY, SECRET, &a, &into_a_tier]),
        Err("3.yaml (document 1): DeadLetterQueue shop/b: spec.deadLetter.queue: queue \"orders.retry.2s\" is also planned by DeadLetterQueue shop/a (2.yaml (document 1)); each queue and exchange belongs to one DeadLetterQueue".into())
    );
    let apart = dlq_doc("b", "payments", "");
    assert_eq!(ownership_of(&[POLICY, SECRET, &a, &apart]), Ok(()));
    let other_vhost = dlq_doc("b", "orders", "").replace("{name: s}}", "{name: s}, vhost: other}");
    assert_eq!(ownership_of(&[POLICY, SECRET, &a, &other_vhost]), Ok(()));
}

#[test]
fn a_source_named_like_anothers_retry_tier_is_refused_as_the_controller_refuses_it() {
    let a = dlq_doc("a", "orders", "");
    // `orders.retry.x` is no tier `a` plans today, but its retry exchange's prefix: a tier
    // its RetryPolicy may plan tomorrow.
    let b = dlq_doc("b", "orders.retry.x", "");
    assert_eq!(
        ownership_of(&[POLICY, SECRET, &a, &b]),
        Err("3.yaml (document 1): DeadLetterQueue shop/b: spec.source.queue: queue \"orders.retry.x\" is named like a retry tier of DeadLetterQueue shop/a (2.yaml (document 1)), whose retry tiers are the queues orders.retry.*; each queue and exchange belongs to one DeadLetterQueue".into())
    );
    assert_eq!(
        ownership_of(&[POLICY, SECRET, &b, &a]),
        Err("3.yaml (document 1): DeadLetterQueue shop/a: spec.source.queue: queue orders.retry.* (the retry tiers of this DeadLetterQueue) overlaps queue \"orders.retry.x\" of DeadLetterQueue shop/b (2.yaml (document 1)); each queue and exchange belongs to one DeadLetterQueue".into())
    );
    // The controller's rule on the same pair: the older owns it, the other is refused.
    let (mut older, mut younger) = (first_dlq(&manifests(&[&a])), first_dlq(&manifests(&[&b])));
    let at = |s| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(s).expect("time"),
        )
    };
    older.metadata.creation_timestamp = Some(at(10));
    younger.metadata.creation_timestamp = Some(at(20));
    let none = crate::crd::DeadLetterQueueStatus::default();
    let all = vec![
        (older.clone(), none.clone()),
        (younger.clone(), none.clone()),
    ];
    let owners = crate::ownership::owner_of_overlap(&younger, &none, &all);
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].claim.field, "spec.source.queue");
    assert!(crate::ownership::owner_of_overlap(&older, &none, &all).is_empty());
}
