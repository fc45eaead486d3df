//! The Helm chart `charts/dlq-operator` through the real Helm engine (Helm v4's Go SDK,
//! PyPI `helm-python-sdk`) and `kubernetes-validate`, for the default values and the
//! documented variants: `helm lint --strict` is clean; every rendered object is valid for a
//! current Kubernetes (strict: an unknown field fails); the RBAC grants exactly the API
//! calls of `src/rbac.rs`; the operator's Deployment is hardened, probed and
//! configured from values, and every Deployment (operator, router, console) passes
//! arguments the binary accepts; the values schema refuses wrong values with a clear
//! message; the CRDs are the repository's; NOTES.txt and names follow the values.
//!
//! The router's objects are checked in tests/helm_router.rs, the console's in
//! tests/helm_console.rs, the monitoring objects in tests/helm_monitoring.rs; the shared
//! helpers are in tests/common/helm.rs.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};

use common::helm::{
    args_of, code_rules, container, env, find, granted, kinds, render, scenarios, Helm, FULLNAME,
    NS, RELEASE,
};

#[test]
fn lint_is_clean_for_every_variant() {
    let Some(helm) = Helm::new("lint_is_clean_for_every_variant") else {
        return;
    };
    let chart = common::helm::chart_dir().display().to_string();
    for (name, values) in scenarios() {
        let report = helm
            .call(&["lint", &chart, &values.to_string()], None)
            .unwrap_or_else(|e| panic!("{name}: lint failed to run: {e}"));
        assert_eq!(report["errors"], json!([]), "{name}: {report}");
        let findings: Vec<&Value> = report["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["severity"].as_i64().unwrap_or(3) >= 2)
            .collect();
        assert!(
            findings.is_empty(),
            "{name}: lint warnings or errors: {findings:?}"
        );
    }
}

/// Strict kubernetes-validate of `objects` for `version`; the CRD-defined kinds it has no
/// schema for are returned for their own checks.
fn validate(helm: &Helm, objects: &[Value], version: &str, scenario: &str) -> BTreeSet<String> {
    let stream: String = objects
        .iter()
        .map(|o| format!("---\n{}", serde_yaml_ng::to_string(o).expect("yaml")))
        .collect();
    let results = helm
        .call(&["validate", version], Some(&stream))
        .unwrap_or_else(|e| panic!("{scenario}: kubernetes-validate failed to run: {e}"));
    let mut unvalidated = BTreeSet::new();
    for r in results.as_array().expect("results") {
        match r["result"].as_str() {
            Some("valid") => {}
            Some("no-schema") => {
                unvalidated.insert(r["kind"].as_str().unwrap_or("?").to_string());
            }
            _ => panic!(
                "{scenario}: {} {} is invalid for Kubernetes {}: {}",
                r["kind"], r["name"], r["version"], r["error"]
            ),
        }
    }
    assert_eq!(
        results.as_array().map(Vec::len),
        Some(objects.len()),
        "{scenario}: every object validated"
    );
    unvalidated
}

#[test]
fn every_rendered_object_is_valid_for_current_and_oldest_schemas() {
    let Some(helm) = Helm::new("every_rendered_object_is_valid_for_current_and_oldest_schemas")
    else {
        return;
    };
    for (name, values) in scenarios() {
        let objects = render(&helm, &values);
        for version in ["latest", "1.25.0"] {
            let unvalidated = validate(&helm, &objects, version, name);
            // Only the Prometheus Operator's kinds have no schema in kubernetes-validate;
            // they get their own checks (ServiceMonitor below, PrometheusRule by promtool).
            let allowed: BTreeSet<String> = ["ServiceMonitor", "PrometheusRule"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            assert!(
                unvalidated.is_subset(&allowed),
                "{name}: no schema for {unvalidated:?}"
            );
        }
    }
    // The check bites: an unknown field in a Deployment is refused.
    let mut objects = render(&helm, &json!({}));
    let deployment = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .expect("deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = json!("Always");
    let stream = format!(
        "---\n{}",
        serde_yaml_ng::to_string(deployment).expect("yaml")
    );
    let results = helm
        .call(&["validate", "latest"], Some(&stream))
        .expect("validate");
    assert_eq!(results[0]["result"], "invalid", "{results}");
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("imagePullPolicyy"),
        "{results}"
    );
}

/// Every binding grants its role to the Deployment's ServiceAccount.
fn assert_bindings(objects: &[Value], scenario: &str) {
    let deployment = find(objects, "Deployment", FULLNAME);
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("sa");
    let roles: BTreeSet<(String, String, Option<String>)> = objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or("").to_string(),
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                o["metadata"]["namespace"].as_str().map(str::to_string),
            )
        })
        .collect();
    let bindings: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .collect();
    assert_eq!(
        bindings.len(),
        roles.len(),
        "{scenario}: one binding per role"
    );
    for b in bindings {
        let ns = b["metadata"]["namespace"].as_str().map(str::to_string);
        let role = (
            b["roleRef"]["kind"].as_str().unwrap_or("").to_string(),
            b["roleRef"]["name"].as_str().unwrap_or("").to_string(),
            ns,
        );
        assert!(
            roles.contains(&role),
            "{scenario}: binding {} refers to {role:?}, not a rendered role",
            b["metadata"]["name"]
        );
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": NS}]),
            "{scenario}: binding {} subject",
            b["metadata"]["name"]
        );
    }
}

#[test]
fn rbac_grants_exactly_the_operators_api_calls() {
    let Some(helm) = Helm::new("rbac_grants_exactly_the_operators_api_calls") else {
        return;
    };
    let lease = ("coordination.k8s.io".to_string(), "leases".to_string());
    for (name, values, watch) in [
        ("cluster-wide", json!({}), None),
        (
            "namespaced",
            json!({"watchNamespace": "apps"}),
            Some("apps"),
        ),
    ] {
        let objects = render(&helm, &values);
        let granted = granted(&objects);
        let flat: BTreeSet<(String, String, String)> = granted
            .iter()
            .map(|(_, g, r, v)| (g.clone(), r.clone(), v.clone()))
            .collect();
        let expected = code_rules();
        assert_eq!(
            flat,
            expected,
            "{name}: chart grants (left) differ from src/rbac.rs (right)\nmissing: {:?}\nextra: {:?}",
            expected.difference(&flat).collect::<Vec<_>>(),
            flat.difference(&expected).collect::<Vec<_>>()
        );
        for (ns, g, r, v) in &granted {
            if (g.clone(), r.clone()) == lease {
                assert_eq!(
                    ns.as_deref(),
                    Some(NS),
                    "{name}: {v} leases only in the release namespace"
                );
            } else {
                assert_eq!(
                    ns.as_deref(),
                    watch,
                    "{name}: {g}/{r} {v} granted in {ns:?}"
                );
            }
        }
        if watch.is_some() {
            assert!(
                !objects.iter().any(|o| o["kind"] == "ClusterRole"),
                "{name}: no ClusterRole"
            );
            let env = &find(&objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
                ["containers"][0]["env"];
            assert!(
                env.as_array()
                    .expect("env")
                    .contains(&json!({"name": "WATCH_NAMESPACE", "value": "apps"})),
                "{name}: WATCH_NAMESPACE: {env}"
            );
        }
        assert_bindings(&objects, name);
    }
    // Without leader election there is no Lease to grant.
    let objects = render(
        &helm,
        &json!({"replicaCount": 1, "leaderElection": {"enabled": false}}),
    );
    assert!(
        !granted(&objects)
            .iter()
            .any(|(_, g, r, _)| (g.clone(), r.clone()) == lease),
        "no lease rule without leader election: {:?}",
        kinds(&objects)
    );
    assert_bindings(&objects, "single-replica");
}

#[test]
fn deployment_is_hardened_probed_and_configured_from_values() {
    let Some(helm) = Helm::new("deployment_is_hardened_probed_and_configured_from_values") else {
        return;
    };
    let objects = render(&helm, &json!({}));
    let deployment = find(&objects, "Deployment", FULLNAME);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
    let c = container(&objects);
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{sc}");
    for kind in ["requests", "limits"] {
        for res in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][res].is_string(),
                "resources.{kind}.{res}: {}",
                c["resources"]
            );
        }
    }
    let port = c["ports"][0]["name"].as_str().expect("named port");
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": port})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": port})
    );
    let args = args_of(c);
    assert!(
        args.contains(&"--log-format=json") && args.contains(&"--leader-election=true"),
        "{args:?}"
    );
    assert!(args.contains(&"--maturity-weights=0.4,0.4,0.2"), "{args:?}");
    assert_eq!(env(c, "RUST_LOG"), Some("info"));
    // The Service reaches the container's port.
    let svc = find(&objects, "Service", &format!("{FULLNAME}-metrics"));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], port);
    assert_eq!(
        svc["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // Values reach the Pod.
    let custom = scenarios()
        .into_iter()
        .find(|(n, _)| *n == "customised")
        .expect("customised")
        .1;
    let objects = render(&helm, &custom);
    let pod = &find(&objects, "Deployment", FULLNAME)["spec"]["template"];
    let spec = &pod["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["image"], "registry.example/dlq-operator:v9");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "pull"}]));
    assert_eq!(spec["serviceAccountName"], "dlq-sa");
    assert_eq!(spec["priorityClassName"], custom["priorityClassName"]);
    assert_eq!(spec["nodeSelector"], custom["nodeSelector"]);
    assert_eq!(spec["tolerations"], custom["tolerations"]);
    assert_eq!(spec["affinity"], custom["affinity"]);
    assert_eq!(pod["metadata"]["labels"]["tier"], "ops");
    assert_eq!(pod["metadata"]["labels"]["team"], "messaging");
    assert_eq!(pod["metadata"]["annotations"]["owner"], "platform");
    let args = args_of(c);
    assert!(
        args.contains(&"--log-format=text") && args.contains(&"--selector=dlqoperator.io/shard=a"),
        "{args:?}"
    );
    assert!(args.contains(&"--maturity-weights=0.5,0.3,0.2"), "{args:?}");
    assert_eq!(env(c, "RUST_LOG"), Some("debug"));
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["team"], "messaging",
            "commonLabels on {}",
            o["metadata"]["name"]
        );
        assert_eq!(
            o["metadata"]["annotations"]["owner"], "platform",
            "commonAnnotations on {}",
            o["metadata"]["name"]
        );
    }
}

/// Every Deployment's arguments (the operator's `run`, the router's `router`, the
/// console's `console`) are accepted by the real binary: with a kubeconfig that does not exist it gets past argument parsing
/// and fails on the kubeconfig, never with a usage error (clap exits 2) — so a renamed
/// flag breaks this test, not a user's install.
#[test]
fn deployment_arguments_are_accepted_by_the_binary() {
    let Some(helm) = Helm::new("deployment_arguments_are_accepted_by_the_binary") else {
        return;
    };
    let mut commands = BTreeSet::new();
    for (scenario, values) in scenarios() {
        let objects = render(&helm, &values);
        for deployment in objects.iter().filter(|o| o["kind"] == "Deployment") {
            let name = format!("{scenario}: {}", deployment["metadata"]["name"]);
            let c = &deployment["spec"]["template"]["spec"]["containers"][0];
            commands.insert(args_of(c)[0].to_string());
            binary_accepts(c, &name);
        }
    }
    assert_eq!(
        commands,
        [
            "console".to_string(),
            "router".to_string(),
            "run".to_string()
        ]
        .into(),
        "every command was tried"
    );
}

/// Runs the binary with the container `c`'s arguments (metrics and the console on a free
/// local port) and no kubeconfig: it must fail on the kubeconfig, not on its arguments.
fn binary_accepts(c: &Value, name: &str) {
    let args: Vec<String> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                "--metrics-bind-address=127.0.0.1:0".into()
            } else if a.starts_with("--bind-address=") {
                "--bind-address=127.0.0.1:0".into()
            } else {
                a
            }
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(&args)
        .env("KUBECONFIG", dir.path().join("missing-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", dir.path())
        .env("POD_NAMESPACE", NS)
        .output()
        .expect("run dlq-operator");
    let text = common::text(&out);
    assert_ne!(
        out.status.code(),
        Some(2),
        "{name}: {args:?} refused as usage:\n{text}"
    );
    assert!(
        !out.status.success(),
        "{name}: ran without a cluster?\n{text}"
    );
    assert!(
        text.to_lowercase().contains("kubeconfig"),
        "{name}: failed for another reason:\n{text}"
    );
}

#[test]
fn schema_refuses_wrong_values_with_a_clear_message() {
    let Some(helm) = Helm::new("schema_refuses_wrong_values_with_a_clear_message") else {
        return;
    };
    let chart = common::helm::chart_dir().display().to_string();
    for (values, needle) in [
        (json!({"replicaCount": "two"}), "replicaCount"),
        (json!({"replicas": 2}), "replicas"),
        (json!({"image": {"tagg": "v1"}}), "tagg"),
        (json!({"logging": {"format": "xml"}}), "format"),
        (
            json!({"leaderElection": {"leaseDuration": 1}}),
            "leaseDuration",
        ),
        (
            json!({"watchNamespace": "Not_A_Namespace"}),
            "watchNamespace",
        ),
        (json!({"resync": "5 minutes"}), "resync"),
        (json!({"resync": "1234567890s"}), "resync"),
        (json!({"serviceMonitor": {"enabled": "yes"}}), "enabled"),
        (json!({"prometheusRule": {"downFor": "1m5h"}}), "downFor"),
        (json!({"serviceMonitor": {"interval": "1s1s"}}), "interval"),
        (
            json!({"leaderElection": {"leaseName": "Bad Name"}}),
            "leaseName",
        ),
        (json!({"serviceAccount": {"name": "Bad_Name"}}), "name"),
        (json!({"nameOverride": "Dlq.Op"}), "nameOverride"),
        (
            json!({"labelSelector": "a=b\n- --namespace=x"}),
            "labelSelector",
        ),
        (
            json!({"commonLabels": {"app.kubernetes.io/instance": "x"}}),
            "commonLabels",
        ),
        (
            json!({"podLabels": {"team": "a value with spaces"}}),
            "podLabels",
        ),
        (json!({"image": {"repository": "reg/x:1.0"}}), "repository"),
        (json!({"image": {"repository": " "}}), "repository"),
        (json!({"resources": {"limits": {"cpu": "lots"}}}), "cpu"),
        (json!({"metrics": {"port": 80}}), "port"),
        (json!({"replicaCount": 2147483648_u64}), "replicaCount"),
        (json!({"router": {"replicas": -1}}), "/router/replicas"),
        (json!({"router": {"replicas": "2"}}), "/router/replicas"),
        (json!({"router": {"replicas": 1001}}), "/router/replicas"),
        (json!({"router": {"replica": 2}}), "replica"),
        (
            json!({"router": {"resync": "30 seconds"}}),
            "/router/resync",
        ),
        (
            json!({"router": {"terminationGracePeriodSeconds": -1}}),
            "/router/terminationGracePeriodSeconds",
        ),
        (
            json!({"router": {"podDisruptionBudget": {"minAvailable": "150%"}}}),
            "/router/podDisruptionBudget/minAvailable",
        ),
        (
            json!({"router": {"podDisruptionBudget": {"minAvailable": -1}}}),
            "/router/podDisruptionBudget/minAvailable",
        ),
        (
            json!({"router": {"podDisruptionBudget": {"enabled": "yes"}}}),
            "/router/podDisruptionBudget/enabled",
        ),
        (
            json!({"router": {"resources": {"limits": {"memory": "much"}}}}),
            "/router/resources/limits/memory",
        ),
        (
            json!({"router": {"serviceAccount": {"name": "Bad_Name"}}}),
            "/router/serviceAccount/name",
        ),
        (
            json!({"router": {"nodeSelector": {"disk": "a b"}}}),
            "/router/nodeSelector",
        ),
        (
            json!({"maturity": {"weights": {"retry": 1.5}}}),
            "/maturity/weights/retry",
        ),
        (
            json!({"maturity": {"weights": {"monitoring": "0.2"}}}),
            "/maturity/weights/monitoring",
        ),
        (json!({"maturity": {"weight": {"retry": 0.4}}}), "weight"),
    ] {
        let err = helm
            .call(&["schema", &chart, &values.to_string()], None)
            .expect_err(&format!("schema accepted {values}"));
        assert!(
            err.contains(needle),
            "{values}: the message does not name {needle}: {err}"
        );
        // And the render (helm install / template) refuses them the same way.
        let err = helm
            .template(&values, RELEASE, NS)
            .expect_err(&format!("rendered {values}"));
        assert!(err.contains(needle), "{values}: {err}");
    }
    for (name, values) in scenarios() {
        helm.call(&["schema", &chart, &values.to_string()], None)
            .unwrap_or_else(|e| panic!("{name}: schema refused documented values: {e}"));
    }
    // Values the schema cannot judge, refused by the templates with a message.
    for (values, needle) in [
        (json!({"resync": "5s"}), "under 10s"),
        (json!({"resync": "0m"}), "under 10s"),
        (
            json!({"prometheusRule": {"enabled": true}}),
            "serviceMonitor.enabled",
        ),
        (
            json!({"router": {"replicas": 1, "resync": "0s"}}),
            "router.resync \"0s\" must be greater than 0",
        ),
        (
            json!({"router": {"replicas": 2, "podDisruptionBudget": {"minAvailable": 2}}}),
            "minAvailable (2) must be less than router.replicas (2)",
        ),
        (
            json!({"router": {"replicas": 3, "podDisruptionBudget": {"minAvailable": "100%"}}}),
            "minAvailable 100%",
        ),
        (
            json!({"router": {"replicas": 1, "serviceAccount": {"create": false}}}),
            "router.serviceAccount.name is required",
        ),
        (
            json!({"maturity": {"weights": {"retry": 0.5}}}),
            "deadLetter 0.4 and monitoring 0.2 sum to 1.1, not 1",
        ),
        (
            json!({"maturity": {"weights": null}}),
            "maturity.weights is required",
        ),
        (
            json!({"maturity": {"weights": {"monitoring": 0.2000001}}}),
            "sum to 1.0000001, not 1",
        ),
    ] {
        let err = helm
            .template(&values, RELEASE, NS)
            .expect_err(&format!("rendered {values}"));
        assert!(err.contains(needle), "{values}: {err}");
    }
    // A legal Helm release name that is no legal Service name.
    let err = helm
        .template(&json!({}), "1rel", NS)
        .expect_err("release 1rel rendered");
    assert!(err.contains("DNS-1035"), "{err}");
    // Two replicas without leader election would reconcile at once: refused by the chart.
    let err = helm
        .template(&json!({"leaderElection": {"enabled": false}}), RELEASE, NS)
        .expect_err("2 replicas without leader election rendered");
    assert!(err.contains("leaderElection.enabled"), "{err}");
}

#[test]
fn single_replica_without_leader_election() {
    let Some(helm) = Helm::new("single_replica_without_leader_election") else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"replicaCount": 1, "leaderElection": {"enabled": false}}),
    );
    assert_eq!(
        find(&objects, "Deployment", FULLNAME)["spec"]["replicas"],
        1
    );
    let args = &container(&objects)["args"];
    assert!(
        args.as_array()
            .expect("args")
            .contains(&json!("--leader-election=false")),
        "{args}"
    );
    assert!(!args.to_string().contains("--lease-name"), "{args}");
}

#[test]
fn chart_crds_are_the_generated_crds() {
    let root = common::root();
    let names = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(root.join(dir))
            .expect("crd dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names("crds"),
        names("charts/dlq-operator/crds"),
        "same CRD files"
    );
    for name in names("crds") {
        let top = std::fs::read_to_string(root.join("crds").join(&name)).expect("read");
        let chart = std::fs::read_to_string(root.join("charts/dlq-operator/crds").join(&name))
            .expect("read");
        assert!(top == chart, "charts/dlq-operator/crds/{name} differs from crds/{name}: cp crds/*.yaml charts/dlq-operator/crds/");
    }
    // What the Helm engine will install is those files.
    let Some(helm) = Helm::new("chart_crds_are_the_generated_crds (Helm engine part)") else {
        return;
    };
    let crds = helm
        .call(
            &["crds", &common::helm::chart_dir().display().to_string()],
            None,
        )
        .expect("crds");
    let crds = crds.as_object().expect("object");
    assert_eq!(crds.len(), names("crds").len(), "{:?}", crds.keys());
    for (path, text) in crds {
        let name = path.trim_start_matches("crds/");
        let top = std::fs::read_to_string(root.join("crds").join(name)).expect("read");
        assert_eq!(text.as_str(), Some(top.as_str()), "{path}");
    }
}

#[test]
fn notes_tell_the_user_what_to_do_next() {
    let Some(helm) = Helm::new("notes_tell_the_user_what_to_do_next") else {
        return;
    };
    let notes = helm.notes(&json!({"watchNamespace": "apps"}), RELEASE, NS);
    for needle in [
        "namespace apps only",
        "kubectl -n dlq-system get deploy,pods -l app.kubernetes.io/instance=dlq",
        "kubectl -n apps create secret generic",
        "kubectl get retrypolicies,deadletterqueues -A",
        "dlq-dlq-operator-metrics:8080",
        "honor_labels: true",
        "charts/dlq-operator/crds/",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
}

#[test]
fn string_values_reach_the_pod_verbatim_and_cluster_names_carry_the_namespace() {
    let Some(helm) =
        Helm::new("string_values_reach_the_pod_verbatim_and_cluster_names_carry_the_namespace")
    else {
        return;
    };
    // YAML-significant characters in a string value stay one argument, unchanged.
    let objects = render(
        &helm,
        &json!({"labelSelector": "env in (prod, stage),tier: a #b"}),
    );
    let args = &container(&objects)["args"];
    assert!(
        args.as_array()
            .expect("args")
            .contains(&json!("--selector=env in (prod, stage),tier: a #b")),
        "{args}"
    );
    // Two releases of the same name in two namespaces do not share a ClusterRole.
    let names = |ns: &str| -> BTreeSet<String> {
        helm.template(&json!({}), RELEASE, ns)
            .expect("render")
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding")
            .map(|o| o["metadata"]["name"].as_str().expect("name").to_string())
            .collect()
    };
    let (a, b) = (names("shard-a"), names("shard-b"));
    assert_eq!(a.len(), 1, "{a:?}");
    assert!(a.is_disjoint(&b), "{a:?} {b:?}");
    // A long release name keeps the metrics Service's suffix, and the name a DNS label.
    let release = "a-release-name-of-fifty-three-characters-long-xxxxxxx";
    assert_eq!(release.len(), 53);
    let objects = helm.template(&json!({}), release, NS).expect("render");
    let svc = objects
        .iter()
        .find(|o| o["kind"] == "Service")
        .expect("service");
    let name = svc["metadata"]["name"].as_str().expect("name");
    assert!(name.ends_with("-metrics") && name.len() <= 63, "{name}");
}
