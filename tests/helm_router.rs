//! The retry router's Deployment in the chart (`router.replicas` above 0) through the real
//! Helm engine: off by default (the operator runs the routers itself); when on, it runs
//! `dlq-operator router` hardened and probed with its own ServiceAccount, follows
//! watchNamespace, labelSelector and resync, keeps a PodDisruptionBudget, is granted only
//! the API calls the router makes, and is scraped and fenced like the operator.

mod common;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use common::helm::{
    args_of, assert_each_role_bound_once, code_rules, container, env, find, granted_to, kinds,
    render, selects, Helm, FULLNAME, NS, RELEASE, ROUTER,
};

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
        assert_each_role_bound_once(&objects, &[FULLNAME, ROUTER], name);
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
