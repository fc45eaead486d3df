//! The Helm chart `charts/dlq-operator` through the real Helm engine (Helm v4's Go SDK,
//! PyPI `helm-python-sdk`) and `kubernetes-validate`, for the default values and the
//! documented variants: `helm lint --strict` is clean; every rendered object is valid for a
//! current Kubernetes (strict: an unknown field fails); the RBAC grants exactly the API
//! calls of `src/controller/rbac.rs`; the Deployment is hardened, probed and passes
//! arguments the binary accepts; the values schema refuses wrong values with a clear
//! message; the CRDs and the dashboard are the repository's; the operator-health rules
//! pass `promtool`.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};

use common::helm::{find, kinds, skip, Helm};
use dlq_operator::access::REVIEW_RULES;
use dlq_operator::controller::rbac::{Rule, RULES};

const RELEASE: &str = "dlq";
const NS: &str = "dlq-system";
const FULLNAME: &str = "dlq-dlq-operator";

/// The values of each documented variant, by name.
fn scenarios() -> Vec<(&'static str, Value)> {
    vec![
        ("default", json!({})),
        ("namespaced", json!({"watchNamespace": "apps"})),
        (
            "monitoring",
            json!({"serviceMonitor": {"enabled": true, "labels": {"release": "kube-prometheus-stack"}},
                   "prometheusRule": {"enabled": true}, "dashboard": {"enabled": true},
                   "networkPolicy": {"enabled": true,
                       "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}}),
        ),
        (
            "single-replica",
            json!({"replicaCount": 1, "leaderElection": {"enabled": false}}),
        ),
        (
            "customised",
            json!({"image": {"repository": "registry.example/dlq-operator", "tag": "v9", "pullPolicy": "Always"},
                   "imagePullSecrets": [{"name": "pull"}], "commonLabels": {"team": "messaging"},
                   "commonAnnotations": {"owner": "platform"}, "podLabels": {"tier": "ops"},
                   "nodeSelector": {"kubernetes.io/os": "linux"},
                   "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
                   "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                       {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "dlq-operator"}}}}]}},
                   "priorityClassName": "system-cluster-critical",
                   "logging": {"level": "debug", "format": "text"}, "labelSelector": "dlqoperator.io/shard=a",
                   "serviceAccount": {"name": "dlq-sa", "annotations": {"a": "b"}}}),
        ),
        (
            "router",
            json!({"router": {"replicas": 2}, "serviceMonitor": {"enabled": true},
                   "networkPolicy": {"enabled": true}}),
        ),
        (
            "router-namespaced",
            json!({"router": {"replicas": 1, "resync": "1m"}, "watchNamespace": "apps",
                   "labelSelector": "dlqoperator.io/shard=a"}),
        ),
        (
            "console",
            json!({"console": {"enabled": true}, "networkPolicy": {"enabled": true}}),
        ),
        (
            "console-namespaced",
            json!({"console": {"enabled": true, "port": 9000, "scanMaxMessages": 500, "scanTtl": "2m",
                               "networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"name": "ingress"}}}]},
                               "nodeSelector": {"pool": "tools"}},
                   "watchNamespace": "apps", "networkPolicy": {"enabled": true},
                   "router": {"replicas": 1}}),
        ),
    ]
}

fn render(helm: &Helm, values: &Value) -> Vec<Value> {
    helm.template(values, RELEASE, NS)
        .unwrap_or_else(|e| panic!("helm template {values}: {e}"))
}

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

/// The RBAC rules of `objects` as (group, resource, verb), with the namespace each is
/// granted in (`None`: cluster-wide).
fn granted(objects: &[Value]) -> BTreeSet<(Option<String>, String, String, String)> {
    let mut out = BTreeSet::new();
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        let ns = role["metadata"]["namespace"].as_str().map(str::to_string);
        assert_eq!(
            ns.is_some(),
            role["kind"] == "Role",
            "a Role has a namespace, a ClusterRole none"
        );
        for rule in role["rules"].as_array().expect("rules") {
            for g in rule["apiGroups"].as_array().expect("apiGroups") {
                for r in rule["resources"].as_array().expect("resources") {
                    for v in rule["verbs"].as_array().expect("verbs") {
                        out.insert((
                            ns.clone(),
                            g.as_str().expect("group").to_string(),
                            r.as_str().expect("resource").to_string(),
                            v.as_str().expect("verb").to_string(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The operator's own list: every (group, resource, verb) of [`RULES`].
fn code_rules() -> BTreeSet<(String, String, String)> {
    flat_rules(RULES)
}

/// Every (group, resource, verb) of `rules`.
fn flat_rules(rules: &[Rule]) -> BTreeSet<(String, String, String)> {
    rules
        .iter()
        .flat_map(|r| {
            r.resources.iter().flat_map(move |res| {
                r.verbs
                    .iter()
                    .map(move |v| (r.api_group.to_string(), res.to_string(), v.to_string()))
            })
        })
        .collect()
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
            "{name}: chart grants (left) differ from src/controller/rbac.rs (right)\nmissing: {:?}\nextra: {:?}",
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

/// The container's arguments.
fn args_of(c: &Value) -> Vec<&str> {
    c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The literal value of the container's environment variable `name`.
fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
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
fn dashboard_configmap_ships_the_dashboard() {
    let root = common::root();
    let top =
        std::fs::read_to_string(root.join("dashboards/dlq-overview.json")).expect("dashboard");
    let copy =
        std::fs::read_to_string(root.join("charts/dlq-operator/dashboards/dlq-overview.json"))
            .expect("chart copy");
    assert!(top == copy, "charts/dlq-operator/dashboards/dlq-overview.json differs: cp dashboards/dlq-overview.json charts/dlq-operator/dashboards/");
    let Some(helm) = Helm::new("dashboard_configmap_ships_the_dashboard") else {
        return;
    };
    let off = render(&helm, &json!({}));
    assert!(
        !off.iter().any(|o| o["kind"] == "ConfigMap"),
        "no dashboard unless enabled"
    );
    let objects = render(
        &helm,
        &json!({"dashboard": {"enabled": true, "namespace": "grafana", "labels": {"x": "y"}}}),
    );
    let cm = find(&objects, "ConfigMap", &format!("{FULLNAME}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["labels"]["x"], "y");
    let shipped: Value =
        serde_json::from_str(cm["data"]["dlq-overview.json"].as_str().expect("json key"))
            .expect("dashboard JSON");
    let original: Value = serde_json::from_str(&top).expect("dashboard JSON");
    assert_eq!(shipped, original);
}

#[test]
fn service_monitor_scrapes_the_metrics_service_with_the_operators_labels() {
    let Some(helm) =
        Helm::new("service_monitor_scrapes_the_metrics_service_with_the_operators_labels")
    else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"serviceMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "kps"}}}),
    );
    let sm = find(&objects, "ServiceMonitor", FULLNAME);
    let svc = find(&objects, "Service", &format!("{FULLNAME}-metrics"));
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "kps");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "selector {k} matches the Service"
        );
    }
    // The Deployment's Pods carry no `component: metrics` label, so only the Service matches.
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!([NS]));
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], svc["spec"]["ports"][0]["name"]);
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["interval"], "15s");
    assert_eq!(
        ep["honorLabels"], true,
        "the series' namespace label is the DeadLetterQueue's"
    );
    let allowed: BTreeSet<&str> =
        ["port", "path", "interval", "scrapeTimeout", "honorLabels"].into();
    for k in ep.as_object().expect("endpoint").keys() {
        assert!(
            allowed.contains(k.as_str()),
            "unexpected endpoint field {k}"
        );
    }
}

/// `promtool` on PATH, or `None` after reporting `test` as skipped.
fn promtool(test: &str) -> Option<()> {
    if Command::new("promtool").arg("--version").output().is_ok() {
        Some(())
    } else {
        skip(
            test,
            "promtool is not installed (Debian package prometheus; .ci/run installs it)",
        );
        None
    }
}

fn promtool_run(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    (out.status.success(), common::text(&out))
}

#[test]
fn operator_health_rules_pass_promtool_and_fire_when_they_should() {
    let test = "operator_health_rules_pass_promtool_and_fire_when_they_should";
    let Some(helm) = Helm::new(test) else {
        return;
    };
    let Some(()) = promtool(test) else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"serviceMonitor": {"enabled": true},
                "prometheusRule": {"enabled": true, "downFor": "5m", "reconcileErrorsFor": "10m",
                                   "alertLabels": {"team": "messaging"}}}),
    );
    let rule = find(&objects, "PrometheusRule", FULLNAME);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rule["spec"]).expect("yaml"),
    )
    .expect("write");
    let (ok, out) = promtool_run(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules:\n{out}");

    let job = format!("{FULLNAME}-metrics");
    let test_file = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {   // Down for 10 minutes: fires after downFor (5m), not before.
                "interval": "1m",
                "input_series": [
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"a\"}}"), "values": "0x10"},
                    {"series": format!("dlq_operator_reconcile_total{{job=\"{job}\",namespace=\"{NS}\",kind=\"DeadLetterQueue\",result=\"success\"}}"), "values": "0+1x20"}
                ],
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "DlqOperatorDown", "exp_alerts": []},
                    {"eval_time": "6m", "alertname": "DlqOperatorDown", "exp_alerts": [
                        {"exp_labels": {"severity": "critical", "team": "messaging", "namespace": NS, "job": job},
                         "exp_annotations": {
                            "summary": "dlq-operator is down",
                            "description": rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]}}]},
                    {"eval_time": "15m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": []}
                ]
            },
            {   // One replica up (the other down), errors for 20 minutes: not down; errors fire after 10m.
                "interval": "1m",
                "input_series": [
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"a\"}}"), "values": "1x20"},
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"b\"}}"), "values": "0x20"},
                    {"series": format!("dlq_operator_reconcile_total{{job=\"{job}\",namespace=\"{NS}\",kind=\"DeadLetterQueue\",result=\"unreachable\"}}"), "values": "0+3x20"}
                ],
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "DlqOperatorDown", "exp_alerts": []},
                    {"eval_time": "8m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": []},
                    {"eval_time": "18m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": [
                        {"exp_labels": {"severity": "warning", "team": "messaging", "namespace": NS, "job": job, "kind": "DeadLetterQueue", "result": "unreachable"},
                         "exp_annotations": {
                            "summary": "dlq-operator reconciles of DeadLetterQueue fail: unreachable",
                            "description": rule["spec"]["groups"][0]["rules"][1]["annotations"]["description"].as_str().expect("description")
                                .replace("{{ $labels.kind }}", "DeadLetterQueue").replace("{{ $labels.result }}", "unreachable")}}]}
                ]
            },
            {   // No target at all (never scraped): absent() makes it fire.
                "interval": "1m",
                "input_series": [
                    {"series": "up{job=\"something-else\",namespace=\"x\"}", "values": "1x10"}
                ],
                "alert_rule_test": [
                    {"eval_time": "6m", "alertname": "DlqOperatorDown", "exp_alerts": [
                        {"exp_labels": {"severity": "critical", "team": "messaging", "namespace": NS, "job": job},
                         "exp_annotations": {
                            "summary": "dlq-operator is down",
                            "description": rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]}}]}
                ]
            }
        ]
    });
    std::fs::write(
        dir.path().join("test.yaml"),
        serde_yaml_ng::to_string(&test_file).expect("yaml"),
    )
    .expect("write");
    let (ok, out) = promtool_run(dir.path(), &["test", "rules", "test.yaml"]);
    assert!(ok, "promtool test rules:\n{out}");
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

/// Name of the router's Deployment, ServiceAccount, PodDisruptionBudget, ServiceMonitor
/// and NetworkPolicy for release [`RELEASE`].
const ROUTER: &str = "dlq-dlq-operator-router";

/// Whether every label of `selector` (a matchLabels map) is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .expect("selector map")
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

/// The rules of the Roles and ClusterRoles bound to ServiceAccount `sa` of the release
/// namespace, as in [`granted`].
fn granted_to(objects: &[Value], sa: &str) -> BTreeSet<(Option<String>, String, String, String)> {
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": NS}]);
    let bound: Vec<(&Value, &Value, &Value)> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .filter(|b| b["subjects"] == subject)
        .map(|b| {
            (
                &b["roleRef"]["kind"],
                &b["roleRef"]["name"],
                &b["metadata"]["namespace"],
            )
        })
        .collect();
    let roles: Vec<Value> = objects
        .iter()
        .filter(|o| {
            bound.contains(&(
                &o["kind"],
                &o["metadata"]["name"],
                &o["metadata"]["namespace"],
            ))
        })
        .cloned()
        .collect();
    granted(&roles)
}

#[test]
fn router_runs_inside_the_operator_by_default() {
    let Some(helm) = Helm::new("router_runs_inside_the_operator_by_default") else {
        return;
    };
    let objects = render(&helm, &json!({}));
    let deployments: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(deployments, [FULLNAME], "only the operator's Deployment");
    for o in &objects {
        let name = o["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            !name.contains("router") && o["kind"] != "PodDisruptionBudget",
            "{} {name} rendered without router.replicas",
            o["kind"]
        );
    }
    let args = args_of(container(&objects));
    assert!(
        !args.iter().any(|a| a.starts_with("--embedded-router")),
        "the operator runs the routers itself (--embedded-router defaults to true): {args:?}"
    );
    // router.replicas 0 spelled out is the default, whatever the other router values.
    let explicit = render(
        &helm,
        &json!({"router": {"replicas": 0, "resync": "1m", "podDisruptionBudget": {"enabled": true}}}),
    );
    assert_eq!(explicit, objects);
}

#[test]
fn router_deployment_runs_the_router_command_hardened_and_probed() {
    let Some(helm) = Helm::new("router_deployment_runs_the_router_command_hardened_and_probed")
    else {
        return;
    };
    let resources = json!({"requests": {"cpu": "200m", "memory": "128Mi"},
                           "limits": {"cpu": "2", "memory": "512Mi"}});
    let tolerations = json!([{"key": "dedicated", "operator": "Equal", "value": "routers", "effect": "NoSchedule"}]);
    let affinity = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "dlq-operator-router"}}}}]}});
    let values = json!({
        "router": {"replicas": 3, "resources": resources, "terminationGracePeriodSeconds": 90,
                   "nodeSelector": {"pool": "routers"}, "tolerations": tolerations,
                   "affinity": affinity},
        "image": {"repository": "registry.example/dlq-operator", "tag": "v9"},
        "imagePullSecrets": [{"name": "pull"}], "priorityClassName": "high",
        "logging": {"level": "debug", "format": "text"},
        "commonLabels": {"team": "messaging"}, "commonAnnotations": {"owner": "platform"},
        "podLabels": {"tier": "ops"}});
    let objects = render(&helm, &values);
    let operator = find(&objects, "Deployment", FULLNAME);
    let router = find(&objects, "Deployment", ROUTER);
    assert_eq!(router["spec"]["replicas"], 3);
    let (op_pod, pod) = (&operator["spec"]["template"], &router["spec"]["template"]);
    let (op_c, c) = (
        &op_pod["spec"]["containers"][0],
        &pod["spec"]["containers"][0],
    );
    assert_eq!(pod["spec"]["containers"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        args_of(c),
        [
            "router",
            "--log-format=text",
            "--metrics-bind-address=0.0.0.0:8080",
            "--resync=30s"
        ]
    );
    let op_args = args_of(op_c);
    assert_eq!(
        op_args
            .iter()
            .filter(|a| a.starts_with("--embedded-router"))
            .collect::<Vec<_>>(),
        [&"--embedded-router=false"],
        "{op_args:?}"
    );
    // The operator's image, hardening and Pod settings; the router's own resources,
    // grace period and scheduling.
    for key in ["image", "imagePullPolicy", "securityContext"] {
        assert_eq!(c[key], op_c[key], "{key}");
    }
    assert_eq!(c["image"], "registry.example/dlq-operator:v9");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    for key in ["securityContext", "imagePullSecrets", "priorityClassName"] {
        assert_eq!(pod["spec"][key], op_pod["spec"][key], "pod {key}");
    }
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], true);
    assert_eq!(c["resources"], resources);
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 90);
    assert_eq!(pod["spec"]["nodeSelector"], json!({"pool": "routers"}));
    assert_eq!(pod["spec"]["tolerations"], tolerations);
    assert_eq!(pod["spec"]["affinity"], affinity);
    assert_eq!(
        op_pod["spec"]["nodeSelector"],
        Value::Null,
        "not the operator's"
    );
    assert_eq!(env(c, "RUST_LOG"), Some("debug"));
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics"})
    );
    assert_eq!(pod["metadata"]["labels"]["tier"], "ops");
    assert_eq!(pod["metadata"]["annotations"]["owner"], "platform");
    for o in &objects {
        let name = &o["metadata"]["name"];
        assert_eq!(o["metadata"]["labels"]["team"], "messaging", "{name}");
        assert_eq!(o["metadata"]["annotations"]["owner"], "platform", "{name}");
    }
    // Its own ServiceAccount, not the operator's.
    assert_eq!(pod["spec"]["serviceAccountName"], ROUTER);
    assert_ne!(
        pod["spec"]["serviceAccountName"],
        op_pod["spec"]["serviceAccountName"]
    );
    find(&objects, "ServiceAccount", ROUTER);

    // Selectors: neither Deployment nor the operator's Service takes the other's Pods; the
    // router's Service selects the router Pods on their metrics port.
    let (op_sel, sel) = (
        &operator["spec"]["selector"]["matchLabels"],
        &router["spec"]["selector"]["matchLabels"],
    );
    assert!(selects(sel, &pod["metadata"]["labels"]));
    assert!(!selects(sel, &op_pod["metadata"]["labels"]));
    assert!(!selects(op_sel, &pod["metadata"]["labels"]));
    let op_svc = find(&objects, "Service", &format!("{FULLNAME}-metrics"));
    let svc = find(&objects, "Service", &format!("{ROUTER}-metrics"));
    assert!(!selects(
        &op_svc["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    assert!(selects(
        &svc["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");

    // The PodDisruptionBudget keeps one router through node drains.
    let pdb = find(&objects, "PodDisruptionBudget", ROUTER);
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *sel);
}

#[test]
fn router_follows_the_watched_namespace_selector_and_resync() {
    let Some(helm) = Helm::new("router_follows_the_watched_namespace_selector_and_resync") else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"router": {"replicas": 1, "resync": "2m"}, "watchNamespace": "apps",
                "labelSelector": "dlqoperator.io/shard=a"}),
    );
    let c = &find(&objects, "Deployment", ROUTER)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        args_of(c),
        [
            "router",
            "--log-format=json",
            "--metrics-bind-address=0.0.0.0:8080",
            "--resync=2m",
            "--namespace=apps",
            "--selector=dlqoperator.io/shard=a"
        ]
    );
    assert!(
        args_of(container(&objects)).contains(&"--embedded-router=false"),
        "one replica is enough to take the routers out of the operator"
    );
    // One replica: no PodDisruptionBudget (it would block every drain).
    assert!(!objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    // Disabled: none either; a percentage is passed as one.
    let off = render(
        &helm,
        &json!({"router": {"replicas": 2, "podDisruptionBudget": {"enabled": false}}}),
    );
    assert!(!off.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    let pct = render(
        &helm,
        &json!({"router": {"replicas": 4, "podDisruptionBudget": {"minAvailable": "50%"}}}),
    );
    assert_eq!(
        find(&pct, "PodDisruptionBudget", ROUTER)["spec"]["minAvailable"],
        "50%"
    );
    // A long release name: every router name is a DNS label, and none is another's.
    let release = "a-release-name-of-fifty-three-characters-long-xxxxxxx";
    let objects = helm
        .template(&json!({"router": {"replicas": 2}}), release, NS)
        .expect("render");
    let mut names = BTreeSet::new();
    for o in &objects {
        let name = o["metadata"]["name"].as_str().expect("name");
        if o["metadata"]["labels"]["app.kubernetes.io/name"] == "dlq-operator-router" {
            assert!(name.len() <= 63 && name.contains("-router"), "{name}");
        }
        assert!(
            names.insert((o["kind"].as_str().expect("kind"), name)),
            "two {} named {name}",
            o["kind"]
        );
    }
    let svc = names
        .iter()
        .filter(|(k, n)| *k == "Service" && n.ends_with("-router-metrics"))
        .count();
    assert_eq!(svc, 1, "{names:?}");
}

#[test]
fn router_rbac_grants_only_what_the_router_calls() {
    let Some(helm) = Helm::new("router_rbac_grants_only_what_the_router_calls") else {
        return;
    };
    for (name, values, watch) in [
        ("cluster-wide", json!({"router": {"replicas": 2}}), None),
        (
            "namespaced",
            json!({"router": {"replicas": 2}, "watchNamespace": "apps"}),
            Some("apps"),
        ),
    ] {
        let objects = render(&helm, &values);
        // src/router/sources.rs lists the DeadLetterQueues; src/resolve/cluster.rs GETs the
        // RetryPolicy and the Secret of each one in router mode. Nothing else.
        let ns = watch.map(str::to_string);
        let expected: BTreeSet<(Option<String>, String, String, String)> = [
            ("dlqoperator.io", "deadletterqueues", "list"),
            ("dlqoperator.io", "retrypolicies", "get"),
            ("", "secrets", "get"),
        ]
        .iter()
        .map(|(g, r, v)| (ns.clone(), g.to_string(), r.to_string(), v.to_string()))
        .collect();
        assert_eq!(granted_to(&objects, ROUTER), expected, "{name}");
        let kind = if watch.is_some() {
            "Role"
        } else {
            "ClusterRole"
        };
        let role = find(&objects, kind, &format!("{NS}-{ROUTER}"));
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": ["dlqoperator.io"], "resources": ["deadletterqueues"], "verbs": ["list"]},
                {"apiGroups": ["dlqoperator.io"], "resources": ["retrypolicies"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
            ]),
            "{name}"
        );
        if watch.is_some() {
            assert!(
                !objects.iter().any(|o| o["kind"] == "ClusterRole"),
                "{name}: no ClusterRole"
            );
        }
        // The operator keeps exactly its own rules.
        let operator: BTreeSet<(String, String, String)> = granted_to(&objects, FULLNAME)
            .into_iter()
            .map(|(_, g, r, v)| (g, r, v))
            .collect();
        assert_eq!(operator, code_rules(), "{name}: the operator's rules");
        // Every role is bound, by one binding, to one of the two ServiceAccounts.
        let sas = [FULLNAME, ROUTER]
            .map(|sa| json!([{"kind": "ServiceAccount", "name": sa, "namespace": NS}]));
        for role in objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        {
            let bound: Vec<&Value> = objects
                .iter()
                .filter(|b| {
                    b["kind"] == format!("{}Binding", role["kind"].as_str().expect("kind"))
                        && b["roleRef"]["name"] == role["metadata"]["name"]
                        && b["metadata"]["namespace"] == role["metadata"]["namespace"]
                })
                .collect();
            assert_eq!(
                bound.len(),
                1,
                "{name}: bindings of {}",
                role["metadata"]["name"]
            );
            assert!(sas.contains(&bound[0]["subjects"]), "{name}: {}", bound[0]);
        }
    }
    // An existing ServiceAccount: none created, the Deployment and the binding use it.
    let objects = render(
        &helm,
        &json!({"router": {"replicas": 1, "serviceAccount": {"create": false, "name": "routers"}}}),
    );
    assert!(!objects
        .iter()
        .any(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == "routers"));
    assert_eq!(
        find(&objects, "Deployment", ROUTER)["spec"]["template"]["spec"]["serviceAccountName"],
        "routers"
    );
    assert_eq!(granted_to(&objects, "routers").len(), 3);
    // rbac.create false: no role for the router either.
    let objects = render(
        &helm,
        &json!({"router": {"replicas": 1}, "rbac": {"create": false}}),
    );
    assert!(
        !objects.iter().any(|o| o["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("rbac."))),
        "{:?}",
        kinds(&objects)
    );
}

#[test]
fn router_metrics_are_scraped_and_its_pods_fenced_like_the_operators() {
    let Some(helm) = Helm::new("router_metrics_are_scraped_and_its_pods_fenced_like_the_operators")
    else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"router": {"replicas": 2}, "serviceMonitor": {"enabled": true, "labels": {"release": "kps"}},
                "networkPolicy": {"enabled": true}}),
    );
    let op_svc = find(&objects, "Service", &format!("{FULLNAME}-metrics"));
    let svc = find(&objects, "Service", &format!("{ROUTER}-metrics"));
    let op_sm = find(&objects, "ServiceMonitor", FULLNAME);
    let sm = find(&objects, "ServiceMonitor", ROUTER);
    let selector = &sm["spec"]["selector"]["matchLabels"];
    assert!(selects(selector, &svc["metadata"]["labels"]), "{selector}");
    assert!(
        !selects(selector, &op_svc["metadata"]["labels"]),
        "{selector}"
    );
    let op_selector = &op_sm["spec"]["selector"]["matchLabels"];
    assert!(
        !selects(op_selector, &svc["metadata"]["labels"]),
        "the operator's job stays the operator's (DlqOperatorDown selects it)"
    );
    assert_eq!(sm["metadata"]["labels"]["release"], "kps");
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!([NS]));
    assert_eq!(
        sm["spec"]["endpoints"],
        json!([{"port": "metrics", "path": "/metrics", "interval": "30s", "honorLabels": true}]),
        "dlq_router_* carry the DeadLetterQueue's namespace"
    );
    assert_eq!(svc["spec"]["ports"][0]["name"], "metrics");
    // The NetworkPolicy admits only the metrics port to the router Pods too.
    let pod_labels =
        &find(&objects, "Deployment", ROUTER)["spec"]["template"]["metadata"]["labels"];
    let np = find(&objects, "NetworkPolicy", ROUTER);
    assert!(selects(
        &np["spec"]["podSelector"]["matchLabels"],
        pod_labels
    ));
    assert_eq!(
        np["spec"]["ingress"],
        json!([{"ports": [{"port": "metrics", "protocol": "TCP"}]}])
    );
    let op_np = find(&objects, "NetworkPolicy", FULLNAME);
    assert!(!selects(
        &op_np["spec"]["podSelector"]["matchLabels"],
        pod_labels
    ));
    // NOTES.txt names the router Deployment and its Service.
    let notes = helm.notes(&json!({"router": {"replicas": 2}}), RELEASE, NS);
    for needle in [
        "run in Deployment\n   dlq-dlq-operator-router (2 replica(s)",
        "kubectl -n dlq-system logs deploy/dlq-dlq-operator-router",
        "Service dlq-dlq-operator-router-metrics:8080",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
}

/// Name of the console's Deployment, ServiceAccount, Service and NetworkPolicy for release
/// [`RELEASE`].
const CONSOLE: &str = "dlq-dlq-operator-console";

/// Whether `o` is one of the console's objects (by name or by its Pods' name label).
fn is_console(o: &Value) -> bool {
    o["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.contains("console"))
        || o["metadata"]["labels"]["app.kubernetes.io/name"] == "dlq-operator-console"
}

#[test]
fn console_renders_nothing_unless_enabled() {
    let Some(helm) = Helm::new("console_renders_nothing_unless_enabled") else {
        return;
    };
    for (name, values) in scenarios()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("console"))
    {
        let objects = render(&helm, &values);
        let console: Vec<String> = kinds(
            &objects
                .iter()
                .filter(|o| is_console(o))
                .cloned()
                .collect::<Vec<_>>(),
        );
        assert!(console.is_empty(), "{name}: {console:?}");
        let notes = helm.notes(&values, RELEASE, NS);
        assert!(!notes.contains("console"), "{name}:\n{notes}");
    }
    // The switch is console.enabled alone: its other values do not render anything.
    let objects = render(
        &helm,
        &json!({"console": {"port": 9000, "networkPolicy": {"from": [{"podSelector": {}}]}},
                "networkPolicy": {"enabled": true}}),
    );
    assert!(!objects.iter().any(is_console), "{:?}", kinds(&objects));
    // Enabled: the Deployment, ServiceAccount, Service, the two roles and bindings, and the
    // NetworkPolicy with networkPolicy.enabled.
    let objects = render(&helm, &json!({"console": {"enabled": true}}));
    let mut console: Vec<String> = kinds(
        &objects
            .iter()
            .filter(|o| is_console(o))
            .cloned()
            .collect::<Vec<_>>(),
    );
    console.sort();
    assert_eq!(
        console,
        [
            format!("ClusterRole/{NS}-{CONSOLE}"),
            format!("ClusterRole/{NS}-{CONSOLE}-reviews"),
            format!("ClusterRoleBinding/{NS}-{CONSOLE}"),
            format!("ClusterRoleBinding/{NS}-{CONSOLE}-reviews"),
            format!("Deployment/{CONSOLE}"),
            format!("Service/{CONSOLE}"),
            format!("ServiceAccount/{CONSOLE}"),
        ]
    );
}

#[test]
fn console_rbac_grants_only_what_the_console_calls() {
    let Some(helm) = Helm::new("console_rbac_grants_only_what_the_console_calls") else {
        return;
    };
    // The console's Events use the operator's Event API (events.k8s.io).
    let event_groups: Vec<&str> = RULES
        .iter()
        .filter(|r| r.resources.contains(&"events"))
        .map(|r| r.api_group)
        .collect();
    assert_eq!(event_groups, ["events.k8s.io"]);
    for (name, values, watch) in [
        ("cluster-wide", json!({"console": {"enabled": true}}), None),
        (
            "namespaced",
            json!({"console": {"enabled": true}, "watchNamespace": "apps", "router": {"replicas": 1}}),
            Some("apps"),
        ),
    ] {
        let objects = render(&helm, &values);
        let ns = watch.map(str::to_string);
        // The reviews are cluster-scoped calls: cluster-wide even with watchNamespace.
        let mut expected: BTreeSet<(Option<String>, String, String, String)> =
            flat_rules(REVIEW_RULES)
                .into_iter()
                .map(|(g, r, v)| (None, g, r, v))
                .collect();
        expected.extend(
            [
                ("dlqoperator.io", "deadletterqueues", "get"),
                ("dlqoperator.io", "deadletterqueues", "list"),
                ("dlqoperator.io", "retrypolicies", "get"),
                ("", "secrets", "get"),
                ("events.k8s.io", "events", "create"),
            ]
            .iter()
            .map(|(g, r, v)| (ns.clone(), g.to_string(), r.to_string(), v.to_string())),
        );
        assert_eq!(granted_to(&objects, CONSOLE), expected, "{name}");
        let reviews = find(&objects, "ClusterRole", &format!("{NS}-{CONSOLE}-reviews"));
        assert_eq!(
            reviews["rules"],
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
            ]),
            "{name}"
        );
        let kind = if watch.is_some() {
            "Role"
        } else {
            "ClusterRole"
        };
        let role = find(&objects, kind, &format!("{NS}-{CONSOLE}"));
        assert_eq!(role["metadata"]["namespace"].as_str(), watch, "{name}");
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": ["dlqoperator.io"], "resources": ["deadletterqueues"], "verbs": ["get", "list"]},
                {"apiGroups": ["dlqoperator.io"], "resources": ["retrypolicies"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}
            ]),
            "{name}"
        );
        if watch.is_some() {
            let cluster: Vec<&Value> = objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRole")
                .collect();
            assert_eq!(
                cluster,
                [reviews],
                "{name}: the reviews' is the only ClusterRole"
            );
        }
        // The operator (and the router) keep exactly their own rules.
        let operator: BTreeSet<(String, String, String)> = granted_to(&objects, FULLNAME)
            .into_iter()
            .map(|(_, g, r, v)| (g, r, v))
            .collect();
        assert_eq!(operator, code_rules(), "{name}: the operator's rules");
        // Every role is bound, by one binding, to one ServiceAccount of the release.
        let sas = [FULLNAME, ROUTER, CONSOLE]
            .map(|sa| json!([{"kind": "ServiceAccount", "name": sa, "namespace": NS}]));
        for role in objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        {
            let bound: Vec<&Value> = objects
                .iter()
                .filter(|b| {
                    b["kind"] == format!("{}Binding", role["kind"].as_str().expect("kind"))
                        && b["roleRef"]["name"] == role["metadata"]["name"]
                        && b["roleRef"]["kind"] == role["kind"]
                        && b["metadata"]["namespace"] == role["metadata"]["namespace"]
                })
                .collect();
            assert_eq!(bound.len(), 1, "{name}: {}", role["metadata"]["name"]);
            assert!(sas.contains(&bound[0]["subjects"]), "{name}: {}", bound[0]);
        }
    }
    // An existing ServiceAccount: none created; the Deployment and both bindings use it.
    let objects = render(
        &helm,
        &json!({"console": {"enabled": true, "serviceAccount": {"create": false, "name": "viewers"}}}),
    );
    assert!(!objects
        .iter()
        .any(|o| o["kind"] == "ServiceAccount" && is_console(o)));
    assert_eq!(
        find(&objects, "Deployment", CONSOLE)["spec"]["template"]["spec"]["serviceAccountName"],
        "viewers"
    );
    assert_eq!(granted_to(&objects, "viewers").len(), 7);
    // rbac.create false: no role for the console either.
    let objects = render(
        &helm,
        &json!({"console": {"enabled": true}, "rbac": {"create": false}}),
    );
    assert!(
        !objects.iter().any(|o| o["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("rbac."))),
        "{:?}",
        kinds(&objects)
    );
}

/// The console's Deployment, Pod template and container among `objects`.
fn console_pod(objects: &[Value]) -> (&Value, &Value, &Value) {
    let deployment = find(objects, "Deployment", CONSOLE);
    let pod = &deployment["spec"]["template"];
    (deployment, pod, &pod["spec"]["containers"][0])
}

#[test]
fn console_deployment_runs_one_hardened_probed_console() {
    let Some(helm) = Helm::new("console_deployment_runs_one_hardened_probed_console") else {
        return;
    };
    let objects = render(&helm, &json!({"console": {"enabled": true}}));
    let (deployment, pod, c) = console_pod(&objects);
    assert_eq!(deployment["spec"]["replicas"], 1, "sessions live in memory");
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(pod["spec"]["containers"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        args_of(c),
        [
            "console",
            "--log-format=json",
            "--bind-address=0.0.0.0:8081",
            "--scan-max-messages=2000",
            "--scan-ttl=60s"
        ]
    );
    assert_eq!(env(c, "RUST_LOG"), Some("info"));
    assert_eq!(
        c["ports"],
        json!([{"name": "http", "containerPort": 8081, "protocol": "TCP"}])
    );
    let probe = json!({"path": "/healthz", "port": "http",
                       "httpHeaders": [{"name": "Host", "value": "127.0.0.1:8081"}]});
    assert_eq!(c["livenessProbe"]["httpGet"], probe);
    assert_eq!(c["readinessProbe"]["httpGet"], probe);
    // The operator's image and hardening; the console's own ServiceAccount.
    let op_pod = &find(&objects, "Deployment", FULLNAME)["spec"]["template"];
    let op_c = &op_pod["spec"]["containers"][0];
    for key in ["image", "imagePullPolicy", "securityContext"] {
        assert_eq!(c[key], op_c[key], "{key}");
    }
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        pod["spec"]["securityContext"],
        op_pod["spec"]["securityContext"]
    );
    assert_eq!(pod["spec"]["automountServiceAccountToken"], true);
    assert_eq!(pod["spec"]["serviceAccountName"], CONSOLE);
    find(&objects, "ServiceAccount", CONSOLE);
    // The Service reaches the port under the same number (port-forward keeps the Host).
    let svc = find(&objects, "Service", CONSOLE);
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "http", "port": 8081, "targetPort": "http", "protocol": "TCP"}])
    );
    let sel = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(&svc["spec"]["selector"], sel);
    assert!(selects(sel, &pod["metadata"]["labels"]));
    // No other Deployment or Service of the chart takes the console's Pod, nor it theirs.
    for o in objects
        .iter()
        .filter(|o| (o["kind"] == "Deployment" || o["kind"] == "Service") && !is_console(o))
    {
        let other = if o["kind"] == "Deployment" {
            &o["spec"]["selector"]["matchLabels"]
        } else {
            &o["spec"]["selector"]
        };
        assert!(
            !selects(other, &pod["metadata"]["labels"]),
            "{}",
            o["metadata"]["name"]
        );
    }
    assert!(!selects(sel, &op_pod["metadata"]["labels"]));

    // Values reach it: watched namespace, scan limits, port, scheduling, Pod settings.
    let tolerations = json!([{"key": "dedicated", "operator": "Equal", "value": "tools", "effect": "NoSchedule"}]);
    let resources = json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}});
    let objects = render(
        &helm,
        &json!({"console": {"enabled": true, "port": 9000, "scanMaxMessages": 500, "scanTtl": "2m",
                            "resources": resources, "nodeSelector": {"pool": "tools"},
                            "tolerations": tolerations, "affinity": {"nodeAffinity": {}},
                            "service": {"type": "NodePort"},
                            "serviceAccount": {"annotations": {"a": "b"}}},
                "watchNamespace": "apps", "labelSelector": "dlqoperator.io/shard=a",
                "logging": {"level": "debug", "format": "text"}, "priorityClassName": "high",
                "imagePullSecrets": [{"name": "pull"}], "podLabels": {"tier": "ops"},
                "commonAnnotations": {"owner": "platform"}}),
    );
    let (_, pod, c) = console_pod(&objects);
    assert_eq!(
        args_of(c),
        [
            "console",
            "--log-format=text",
            "--bind-address=0.0.0.0:9000",
            "--scan-max-messages=500",
            "--scan-ttl=2m",
            "--namespace=apps"
        ],
        "no --selector: the console takes none"
    );
    assert_eq!(env(c, "RUST_LOG"), Some("debug"));
    assert_eq!(c["ports"][0]["containerPort"], 9000);
    assert_eq!(
        c["readinessProbe"]["httpGet"]["httpHeaders"],
        json!([{"name": "Host", "value": "127.0.0.1:9000"}])
    );
    assert_eq!(c["resources"], resources);
    let spec = &pod["spec"];
    assert_eq!(spec["nodeSelector"], json!({"pool": "tools"}));
    assert_eq!(spec["tolerations"], tolerations);
    assert_eq!(spec["affinity"], json!({"nodeAffinity": {}}));
    assert_eq!(spec["priorityClassName"], "high");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "pull"}]));
    assert_eq!(pod["metadata"]["labels"]["tier"], "ops");
    assert_eq!(pod["metadata"]["annotations"]["owner"], "platform");
    let svc = find(&objects, "Service", CONSOLE);
    assert_eq!(svc["spec"]["type"], "NodePort");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9000);
    let sa = find(&objects, "ServiceAccount", CONSOLE);
    assert_eq!(
        sa["metadata"]["annotations"],
        json!({"a": "b", "owner": "platform"})
    );
    for o in objects.iter().filter(|o| is_console(o)) {
        assert_eq!(
            o["metadata"]["annotations"]["owner"], "platform",
            "{}",
            o["metadata"]["name"]
        );
    }
    // The operator's own Pods and arguments are unchanged by the console.
    let without = render(
        &helm,
        &json!({"watchNamespace": "apps", "labelSelector": "dlqoperator.io/shard=a",
                "logging": {"level": "debug", "format": "text"}, "priorityClassName": "high",
                "imagePullSecrets": [{"name": "pull"}], "podLabels": {"tier": "ops"},
                "commonAnnotations": {"owner": "platform"}}),
    );
    assert_eq!(
        find(&objects, "Deployment", FULLNAME),
        find(&without, "Deployment", FULLNAME)
    );
}

#[test]
fn console_network_policy_admits_only_the_configured_peers() {
    let Some(helm) = Helm::new("console_network_policy_admits_only_the_configured_peers") else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"console": {"enabled": true}, "networkPolicy": {"enabled": true}}),
    );
    let (_, pod, _) = console_pod(&objects);
    let np = find(&objects, "NetworkPolicy", CONSOLE);
    assert!(selects(
        &np["spec"]["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        np["spec"]["ingress"],
        json!([]),
        "no peer by default: port-forward and the kubelet's probes only"
    );
    let op_np = find(&objects, "NetworkPolicy", FULLNAME);
    assert!(!selects(
        &op_np["spec"]["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    // Peers are admitted to the console port only; egress follows networkPolicy.egress.
    let from = json!([{"namespaceSelector": {"matchLabels": {"name": "ingress"}}}]);
    let egress = json!([{"ports": [{"port": 443, "protocol": "TCP"}]}]);
    let objects = render(
        &helm,
        &json!({"console": {"enabled": true, "networkPolicy": {"from": from}},
                "networkPolicy": {"enabled": true, "egress": egress}}),
    );
    let np = find(&objects, "NetworkPolicy", CONSOLE);
    assert_eq!(
        np["spec"]["ingress"],
        json!([{"ports": [{"port": "http", "protocol": "TCP"}], "from": from}])
    );
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(np["spec"]["egress"], egress);
}

#[test]
fn console_values_are_checked() {
    let Some(helm) = Helm::new("console_values_are_checked") else {
        return;
    };
    let chart = common::helm::chart_dir().display().to_string();
    for (values, needle) in [
        (json!({"console": {"replicas": 2}}), "replicas"),
        (json!({"console": {"enabled": "yes"}}), "/console/enabled"),
        (json!({"console": {"port": 80}}), "/console/port"),
        (
            json!({"console": {"scanMaxMessages": 0}}),
            "/console/scanMaxMessages",
        ),
        (
            json!({"console": {"scanMaxMessages": 100_001}}),
            "/console/scanMaxMessages",
        ),
        (
            json!({"console": {"scanTtl": "60 seconds"}}),
            "/console/scanTtl",
        ),
        (
            json!({"console": {"service": {"type": "ExternalName"}}}),
            "/console/service/type",
        ),
        (
            json!({"console": {"serviceAccount": {"name": "Bad_Name"}}}),
            "/console/serviceAccount/name",
        ),
        (
            json!({"console": {"networkPolicy": {"from": {"podSelector": {}}}}}),
            "/console/networkPolicy/from",
        ),
    ] {
        let err = helm
            .call(&["schema", &chart, &values.to_string()], None)
            .expect_err(&format!("schema accepted {values}"));
        assert!(err.contains(needle), "{values}: {err}");
    }
    for (values, needle) in [
        (
            json!({"console": {"enabled": true, "scanTtl": "0s"}}),
            "console.scanTtl \"0s\" must be greater than 0",
        ),
        (
            json!({"console": {"enabled": true, "serviceAccount": {"create": false}}}),
            "console.serviceAccount.name is required",
        ),
    ] {
        let err = helm
            .template(&values, RELEASE, NS)
            .expect_err(&format!("rendered {values}"));
        assert!(err.contains(needle), "{values}: {err}");
    }
}

#[test]
fn console_notes_say_how_to_reach_it_and_what_users_need() {
    let Some(helm) = Helm::new("console_notes_say_how_to_reach_it_and_what_users_need") else {
        return;
    };
    let notes = helm.notes(&json!({"console": {"enabled": true}}), RELEASE, NS);
    for needle in [
        "kubectl -n dlq-system port-forward svc/dlq-dlq-operator-console 8081",
        "http://127.0.0.1:8081/",
        "kubectl -n NAMESPACE create token SERVICEACCOUNT",
        "`get` on\n   deadletterqueues",
        "`create` on deadletterreplays",
        "one replica: sessions live",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
    let notes = helm.notes(
        &json!({"console": {"enabled": true, "port": 9000}}),
        RELEASE,
        NS,
    );
    assert!(
        notes.contains("port-forward svc/dlq-dlq-operator-console 9000"),
        "{notes}"
    );
}
