//! The dead-letter console's Deployment in the chart (`console.enabled`) through the real
//! Helm engine: nothing of it renders unless enabled; its RBAC grants exactly the API calls
//! the console makes (reviews, reads, Events); it runs one hardened, probed `dlq-operator
//! console` with its own ServiceAccount, Service and NetworkPolicy; its values are checked
//! by the schema and the templates; NOTES.txt says how to reach it.

mod common;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use common::helm::{
    args_of, assert_each_role_bound_once, code_rules, env, find, flat_rules, granted_to, kinds,
    render, scenarios, selects, Helm, CONSOLE, FULLNAME, NS, RELEASE, ROUTER,
};
use dlq_operator::access::REVIEW_RULES;
use dlq_operator::rbac::RULES;

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
    // The console's Events use the operator's Event API (events.k8s.io) and, like the
    // operator's (kube's Recorder patches a repeated Event into a series), create and patch.
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
                ("events.k8s.io", "events", "patch"),
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
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
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
        assert_each_role_bound_once(&objects, &[FULLNAME, ROUTER, CONSOLE], name);
    }
}

#[test]
fn console_rbac_follows_its_service_account_and_rbac_create() {
    let Some(helm) = Helm::new("console_rbac_follows_its_service_account_and_rbac_create") else {
        return;
    };
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
    assert_eq!(granted_to(&objects, "viewers").len(), 8);
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
    // The Pod's name is the reporting instance of the console's Events.
    assert_eq!(
        c["env"],
        json!([{"name": "RUST_LOG", "value": "info"},
               {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    );
    // No Host header: in the cluster the console answers to any Host (the kubelet's is the
    // Pod IP).
    let probe = json!({"path": "/healthz", "port": "http"});
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
    // The Service reaches the port under the same number.
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
}

#[test]
fn console_deployment_takes_its_values() {
    let Some(helm) = Helm::new("console_deployment_takes_its_values") else {
        return;
    };
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
        c["readinessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "http"})
    );
    assert_eq!(
        c["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
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
    // Any local port will do: the console in the cluster answers to any Host.
    assert!(notes.contains("LOCAL:9000"), "{notes}");
    assert!(!notes.contains("Host"), "{notes}");
}
