//! Every Kubernetes API call the operator makes, as RBAC rules, in one place.
//!
//! docs/RBAC.md is generated from [`RULES`] (`dlq-operator rbac --format markdown`; a test
//! fails when it differs), and the Helm chart's ClusterRole is held to the same list
//! (`dlq-operator rbac --format yaml` prints it). When the code starts calling another
//! verb or resource, add it here first.

use std::fmt::Write as _;

/// One RBAC rule: verbs on resources of an API group, and why the operator needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// API group (`""` is the core group).
    pub api_group: &'static str,
    /// Resources (plural names; `x/status` for a subresource).
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// What the operator does with them.
    pub why: &'static str,
}

/// The rules the operator needs, namespaced or cluster-wide alike (Role or ClusterRole).
pub const RULES: &[Rule] = &[
    Rule {
        api_group: "dlqoperator.io",
        resources: &["deadletterqueues"],
        verbs: &["get", "list", "watch", "patch"],
        why: "watch DeadLetterQueues; add and remove the finalizer dlqoperator.io/cleanup (JSON patch)",
    },
    Rule {
        api_group: "dlqoperator.io",
        resources: &["deadletterqueues/status"],
        verbs: &["patch"],
        why: "write status (server-side apply: field manager dlq-operator for the reconcile's part, dlq-operator-monitor for the backlog part)",
    },
    Rule {
        api_group: "dlqoperator.io",
        resources: &["retrypolicies"],
        verbs: &["get", "list", "watch"],
        why: "watch RetryPolicies; read the one a DeadLetterQueue references",
    },
    Rule {
        api_group: "dlqoperator.io",
        resources: &["retrypolicies/status"],
        verbs: &["patch"],
        why: "write status (server-side apply, field manager dlq-operator)",
    },
    Rule {
        api_group: "dlqoperator.io",
        resources: &["deadletterreplays"],
        verbs: &["get", "list", "watch"],
        why: "watch DeadLetterReplays (each one runs once)",
    },
    Rule {
        api_group: "dlqoperator.io",
        resources: &["deadletterreplays/status"],
        verbs: &["get", "patch"],
        why: "read the checkpoint a previous run left in status (resume after a restart); write status (server-side apply)",
    },
    Rule {
        api_group: "",
        resources: &["secrets"],
        verbs: &["get", "list", "watch"],
        why: "read the broker Secret; watch Secret metadata so a credential rotation re-reconciles",
    },
    Rule {
        api_group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        why: "record Events (a repeated Event is patched into a series)",
    },
    Rule {
        api_group: "monitoring.coreos.com",
        resources: &["prometheusrules"],
        verbs: &["get", "create", "patch", "delete"],
        why: "write each DeadLetterQueue's PrometheusRule (server-side apply: patch, and create for a new one); delete it when alerting is disabled",
    },
    Rule {
        api_group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "create", "patch"],
        why: "leader election on the Lease (--leader-election)",
    },
];

/// `true` when [`RULES`] grant `verb` on `resource` of `api_group`.
pub fn allows(api_group: &str, resource: &str, verb: &str) -> bool {
    RULES.iter().any(|r| {
        r.api_group == api_group && r.resources.contains(&resource) && r.verbs.contains(&verb)
    })
}

/// docs/RBAC.md: a Markdown table of [`RULES`].
pub fn markdown() -> String {
    let mut out = String::from(
        "# RBAC: what the operator calls\n\n\
         Generated from `src/rbac.rs` by `dlq-operator rbac --format markdown`;\n\
         a test fails when this file differs. `dlq-operator rbac --format yaml` prints them\n\
         as a ClusterRole to bind to the operator's user or ServiceAccount; a Role with the\n\
         same rules is enough when the operator watches one namespace (`--namespace`).\n\n\
         | API group | Resources | Verbs | Why |\n|---|---|---|---|\n",
    );
    for r in RULES {
        let group = if r.api_group.is_empty() {
            "\"\" (core)"
        } else {
            r.api_group
        };
        let _ = writeln!(
            out,
            "| `{group}` | {} | {} | {} |",
            r.resources
                .iter()
                .map(|x| format!("`{x}`"))
                .collect::<Vec<_>>()
                .join(", "),
            r.verbs.join(", "),
            r.why
        );
    }
    out
}

/// [`RULES`] as a ClusterRole manifest named `name` (YAML).
pub fn cluster_role_yaml(name: &str) -> String {
    let mut out = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\nrules:\n"
    );
    for r in RULES {
        let list = |items: &[&str]| {
            items
                .iter()
                .map(|x| format!("\"{x}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            out,
            "  # {}\n  - apiGroups: [\"{}\"]\n    resources: [{}]\n    verbs: [{}]\n",
            r.why,
            r.api_group,
            list(r.resources),
            list(r.verbs)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_only_listed_verbs() {
        assert!(allows("dlqoperator.io", "deadletterqueues/status", "patch"));
        assert!(allows("", "secrets", "get"));
        assert!(allows("dlqoperator.io", "deadletterreplays", "watch"));
        assert!(allows("dlqoperator.io", "deadletterreplays/status", "get"));
        assert!(allows(
            "dlqoperator.io",
            "deadletterreplays/status",
            "patch"
        ));
        // A replay's spec is never written by the operator: no patch of the object.
        assert!(!allows("dlqoperator.io", "deadletterreplays", "patch"));
        assert!(!allows("", "secrets", "update"));
        assert!(!allows("", "configmaps", "get"));
    }

    #[test]
    fn cluster_role_is_valid_yaml_with_every_rule() {
        let yaml = cluster_role_yaml("dlq-operator");
        let v: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("valid YAML");
        let rules = v["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), RULES.len());
        let secrets = RULES
            .iter()
            .position(|r| r.resources == ["secrets"])
            .expect("a secrets rule");
        assert_eq!(rules[secrets]["apiGroups"][0], "");
        assert_eq!(rules[secrets]["resources"][0], "secrets");
        for (rule, yaml) in RULES.iter().zip(rules) {
            assert_eq!(yaml["apiGroups"][0], rule.api_group);
            assert_eq!(
                yaml["resources"].as_array().map(Vec::len),
                Some(rule.resources.len())
            );
            assert_eq!(
                yaml["verbs"].as_array().map(Vec::len),
                Some(rule.verbs.len())
            );
        }
    }
}
