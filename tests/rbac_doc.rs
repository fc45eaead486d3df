//! docs/RBAC.md is generated from the operator's own list of API calls
//! (`src/rbac.rs`), and every call the controller makes is in that list.

use dlq_operator::rbac::{allows, markdown, RULES};

#[test]
fn rbac_doc_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/RBAC.md");
    let committed = std::fs::read_to_string(&path).expect("docs/RBAC.md");
    assert_eq!(
        committed,
        markdown(),
        "docs/RBAC.md is stale: regenerate with `cargo run -- rbac --format markdown > docs/RBAC.md`"
    );
}

#[test]
fn every_call_of_the_controller_is_granted() {
    // (group, resource, verb) of each call the controllers make; the fake-API tests
    // assert these exact calls (tests/controller_fake_api.rs).
    let calls = [
        ("dlqoperator.io", "deadletterqueues", "list"),
        ("dlqoperator.io", "deadletterqueues", "watch"),
        ("dlqoperator.io", "deadletterqueues", "patch"), // finalizer
        ("dlqoperator.io", "deadletterqueues/status", "patch"),
        ("dlqoperator.io", "retrypolicies", "get"),
        ("dlqoperator.io", "retrypolicies", "list"),
        ("dlqoperator.io", "retrypolicies", "watch"),
        ("dlqoperator.io", "retrypolicies/status", "patch"),
        ("dlqoperator.io", "deadletterreplays", "get"),
        ("dlqoperator.io", "deadletterreplays", "list"),
        ("dlqoperator.io", "deadletterreplays", "watch"),
        ("dlqoperator.io", "deadletterreplays/status", "get"), // checkpoint on resume
        ("dlqoperator.io", "deadletterreplays/status", "patch"),
        ("", "secrets", "get"),
        ("", "secrets", "list"),
        ("", "secrets", "watch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("monitoring.coreos.com", "prometheusrules", "get"),
        ("monitoring.coreos.com", "prometheusrules", "create"), // apply of a new rule
        ("monitoring.coreos.com", "prometheusrules", "patch"),
        ("monitoring.coreos.com", "prometheusrules", "delete"), // alerting disabled
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "patch"),
    ];
    for (group, resource, verb) in calls {
        assert!(allows(group, resource, verb), "{verb} {group}/{resource}");
    }
    // Nothing broader than needed: no wildcard, no update of anything, and delete only
    // of the PrometheusRules the operator itself generates.
    for r in RULES {
        assert!(
            !r.verbs
                .iter()
                .any(|v| ["*", "update", "deletecollection"].contains(v)),
            "{r:?}"
        );
        if r.verbs.contains(&"delete") {
            assert_eq!(
                (r.api_group, r.resources),
                ("monitoring.coreos.com", &["prometheusrules"][..]),
                "{r:?}"
            );
        }
        assert!(!r.resources.contains(&"*"), "{r:?}");
    }
}
