//! The Helm chart against a real Kubernetes API server (`DLQ_E2E_KUBECONFIG`; `.ci/run`
//! starts a local v1.20.2) through the real Helm engine: `helm install` is accepted object
//! by object, the CRDs are Established, the upgrade path of the CRDs works, and the
//! operator — run as a local process with the Deployment's own arguments and environment,
//! as the chart's ServiceAccount (impersonation of
//! `system:serviceaccount:NAMESPACE:NAME`, so only the chart's RBAC applies) — does its
//! whole job: leader Lease, CRD wait, Secrets, status, finalizers, Events and the
//! PrometheusRule. A missing RBAC rule fails here instead of in a user's install. Then
//! `helm uninstall` removes every object it created.
//!
//! Without `DLQ_E2E_KUBECONFIG` or the Python tools the tests report themselves skipped.
//! No Pod ever runs: the local control plane has no scheduler or kubelet.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, Scope};
use kube::Client;
use serde_json::{json, Value};

use common::e2e::{
    client, create_examples, dlqs, ensure_monitoring_crd, namespace, ready, rps, wait_for, Operator,
};
use common::helm::{chart_dir, Helm};
use common::{cleanup, unique};

/// The objects of a release manifest (YAML stream).
fn manifest_objects(manifest: &str) -> Vec<Value> {
    use serde::Deserialize as _;
    serde_yaml_ng::Deserializer::from_str(manifest)
        .map(|d| Value::deserialize(d).expect("manifest YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The server's copy of `object` (looked up by its apiVersion and kind), if it exists.
async fn server_copy(client: &Client, object: &Value) -> Option<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("kind"));
    let (resource, caps) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{gvk:?} is not served: {e}"));
    let name = object["metadata"]["name"].as_str().expect("name");
    let api: Api<DynamicObject> = match (&caps.scope, object["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => panic!("namespaced {gvk:?} {name} without a namespace"),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    api.get_opt(name).await.expect("get")
}

/// A copy of `kubeconfig` whose user acts as `system:serviceaccount:NS:NAME` (the API
/// server then adds the groups system:serviceaccounts, system:serviceaccounts:NS and
/// system:authenticated, as for the real token).
fn impersonating_kubeconfig(kubeconfig: &str, ns: &str, sa: &str, dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let mut config: serde_json::Value = serde_yaml_ng::from_str(&text).expect("kubeconfig YAML");
    for user in config["users"].as_array_mut().expect("users") {
        user["user"]["as"] = json!(format!("system:serviceaccount:{ns}:{sa}"));
    }
    let path = dir.join("kubeconfig-as-sa");
    std::fs::write(&path, serde_yaml_ng::to_string(&config).expect("yaml")).expect("write");
    path.display().to_string()
}

/// The container of the release's Deployment, as the API server stored it.
async fn deployment_container(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), ns);
    let d = api.get(name).await.expect("Deployment installed");
    serde_json::to_value(
        &d.spec
            .expect("spec")
            .template
            .spec
            .expect("pod spec")
            .containers[0],
    )
    .expect("container JSON")
}

/// The Deployment's arguments and literal environment, fieldRefs resolved as the kubelet
/// would for a Pod `pod` in `ns`; the metrics address moved to a free local port by the
/// caller (the argument is dropped here).
fn as_local_process(
    container: &Value,
    ns: &str,
    pod: &str,
) -> (Vec<String>, Vec<(String, String)>) {
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .filter(|a| a != "run" && !a.starts_with("--metrics-bind-address"))
        .collect();
    let env = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("env name").to_string();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod.to_string(),
                Some("metadata.namespace") => ns.to_string(),
                Some(other) => panic!("unexpected fieldRef {other}"),
                None => e["value"].as_str().expect("literal env").to_string(),
            };
            (name, value)
        })
        .collect();
    (args, env)
}

async fn established(client: &Client, name: &str) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
}

/// Installs the chart (release `release` in a fresh namespace) with `values`, runs the
/// operator as the chart's ServiceAccount with the Deployment's configuration, checks it
/// does its whole job on the examples in `dlq_ns` (created when `None`: cluster-wide
/// mode), then uninstalls.
async fn install_and_operate(test: &str, values: Value, watch: bool) {
    let Some(kubeconfig) = common::e2e::kubeconfig(test) else {
        return;
    };
    let Some(helm) = Helm::new(test) else {
        return;
    };
    let client = client(test).await.expect("client");
    ensure_monitoring_crd(&client, "PrometheusRule", "prometheusrules").await;
    ensure_monitoring_crd(&client, "ServiceMonitor", "servicemonitors").await;
    let release_ns = unique("chart");
    let release = unique("dlqc");
    let dlq_ns = namespace(&client, "chart-dlqs").await;
    let mut values = values;
    if watch {
        values["watchNamespace"] = json!(dlq_ns);
    }
    let crds_before = (
        established(&client, "deadletterqueues.dlqoperator.io").await,
        established(&client, "retrypolicies.dlqoperator.io").await,
    );

    // helm install: every object accepted. Helm 4 applies server-side by default; before
    // Kubernetes 1.25 the server refuses that for CRDs with validation rules, so there the
    // install is client-side, as `helm install --server-side=false` (README) or Helm 3 does.
    let minor: u32 = client
        .apiserver_version()
        .await
        .expect("server version")
        .minor
        .trim_end_matches('+')
        .parse()
        .expect("minor version");
    let apply = if minor < 25 {
        "client-side"
    } else {
        "server-side"
    };
    println!("Kubernetes 1.{minor}: helm install with {apply} apply");
    let installed = helm
        .call(
            &[
                "install",
                &kubeconfig,
                &chart_dir().display().to_string(),
                &values.to_string(),
                &release,
                &release_ns,
                apply,
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("helm install: {e}"));
    assert_eq!(
        (&installed["status"], &installed["revision"]),
        (&json!("deployed"), &json!(1)),
        "helm install"
    );
    let objects = manifest_objects(installed["manifest"].as_str().expect("manifest"));
    assert!(objects.len() >= 5, "{} objects", objects.len());
    for o in &objects {
        assert!(
            server_copy(&client, o).await.is_some(),
            "{} {} not on the server after install",
            o["kind"],
            o["metadata"]["name"]
        );
    }
    println!("CRDs established before the install: {crds_before:?} (Helm skips existing CRDs)");
    for crd in dlq_operator::crd::all_crds() {
        let crd = crd.metadata.name.unwrap_or_default();
        let mut ok = false;
        for _ in 0..100 {
            if established(&client, &crd).await {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(ok, "CRD {crd} not Established after helm install");
    }
    // The documented CRD upgrade step works against this server (NOTES.txt; kubectl 1.20's
    // client-side validation predates x-kubernetes-validations, hence --validate=false).
    if let Ok(kubectl) = std::env::var("DLQ_E2E_KUBECTL") {
        let out = std::process::Command::new(kubectl)
            .args([
                "--kubeconfig",
                &kubeconfig,
                "replace",
                "--validate=false",
                "-f",
            ])
            .arg(chart_dir().join("crds"))
            .output()
            .expect("kubectl replace");
        assert!(
            out.status.success(),
            "kubectl replace -f charts/dlq-operator/crds/: {}",
            common::text(&out)
        );
    }

    // The operator as the chart's ServiceAccount, configured as the Deployment says.
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let deployment_name = deployment["metadata"]["name"].as_str().expect("name");
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("sa")
        .to_string();
    let container = deployment_container(&client, &release_ns, deployment_name).await;
    let pod = format!("{deployment_name}-local");
    let (args, env) = as_local_process(&container, &release_ns, &pod);
    let dir = tempfile::tempdir().expect("tempdir");
    let sa_kubeconfig = impersonating_kubeconfig(&kubeconfig, &release_ns, &sa, dir.path());

    // The identity really is confined by RBAC: it may not list Pods.
    let sa_client = {
        let kc = kube::config::Kubeconfig::read_from(&sa_kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        Client::try_from(config).expect("client")
    };
    match Api::<Pod>::all(sa_client.clone())
        .list(&ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the chart's ServiceAccount can list Pods: {other:?}"),
    }

    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let op = Operator::start_with_env(&sa_kubeconfig, &args, &env);
    let prefix = unique("chart");
    let names = create_examples(&client, &kubeconfig, &dlq_ns, &prefix).await;

    // Leader election: the Lease in the release namespace, held by this process.
    let lease_name = args
        .iter()
        .find_map(|a| a.strip_prefix("--lease-name="))
        .map(str::to_string);
    if let Some(lease_name) = &lease_name {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &release_ns);
        wait_for(Duration::from_secs(60), "the leader Lease", &op, || async {
            let l = leases.get_opt(lease_name).await.ok()??;
            (l.spec?.holder_identity? == pod).then_some(())
        })
        .await;
    }

    // Status, finalizers, Secrets: every DeadLetterQueue and RetryPolicy Ready.
    let api = dlqs(&client, &dlq_ns);
    for name in &names {
        let (status, reason, message) = wait_for(
            Duration::from_secs(90),
            &format!("{name} Ready"),
            &op,
            || async { ready(&api, name).await.filter(|(s, _, _)| s == "True") },
        )
        .await;
        assert_eq!(status, "True", "{name}: {reason}: {message}");
        let o = api.get(name).await.expect("dlq");
        assert!(
            o.metadata
                .finalizers
                .unwrap_or_default()
                .iter()
                .any(|f| f == "dlqoperator.io/cleanup"),
            "{name}: finalizer"
        );
    }
    let policies = rps(&client, &dlq_ns)
        .list(&ListParams::default())
        .await
        .expect("rps");
    for p in policies.items {
        let ok = p.data["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        assert!(
            ok,
            "RetryPolicy {:?} not Ready: {}",
            p.metadata.name, p.data["status"]
        );
    }
    // The PrometheusRule of each DeadLetterQueue with alerting.
    let rule_resource = dlq_operator::controller::alert_rules::api_resource();
    let rules: Api<DynamicObject> = Api::namespaced_with(client.clone(), &dlq_ns, &rule_resource);
    wait_for(Duration::from_secs(60), "a PrometheusRule", &op, || async {
        let list = rules.list(&ListParams::default()).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    // Events, recorded by the operator.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &dlq_ns);
    let evs = events.list(&ListParams::default()).await.expect("events");
    assert!(
        evs.items.iter().any(|e| e
            .reporting_controller
            .as_deref()
            .is_some_and(|c| c.contains("dlq"))),
        "no Event from the operator: {:?}",
        evs.items
            .iter()
            .map(|e| (&e.reason, &e.reporting_controller))
            .collect::<Vec<_>>()
    );
    // Deletion: the finalizer is processed and the object goes.
    for name in &names {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete dlq");
    }
    for name in &names {
        wait_for(
            Duration::from_secs(60),
            &format!("{name} deleted"),
            &op,
            || async {
                api.get_opt(name)
                    .await
                    .ok()
                    .and_then(|o| o.is_none().then_some(()))
            },
        )
        .await;
    }
    let log = op.log();
    for needle in ["forbidden", "Forbidden", " 403"] {
        assert!(
            !log.contains(needle),
            "the operator was refused something under the chart's RBAC:\n{log}"
        );
    }
    drop(op);

    // helm upgrade with changed values; then uninstall removes every object.
    let mut upgraded = values.clone();
    upgraded["concurrency"] = json!(2);
    let up = helm
        .call(
            &[
                "upgrade",
                &kubeconfig,
                &chart_dir().display().to_string(),
                &upgraded.to_string(),
                &release,
                &release_ns,
                apply,
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("helm upgrade: {e}"));
    assert_eq!(
        (&up["status"], &up["revision"]),
        (&json!("deployed"), &json!(2)),
        "helm upgrade"
    );
    let container = deployment_container(&client, &release_ns, deployment_name).await;
    assert!(container["args"]
        .as_array()
        .expect("args")
        .contains(&json!("--concurrency=2")));
    helm.call(&["uninstall", &kubeconfig, &release, &release_ns], None)
        .unwrap_or_else(|e| panic!("helm uninstall: {e}"));
    for o in &objects {
        let mut gone = false;
        for _ in 0..50 {
            if server_copy(&client, o).await.is_none() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            gone,
            "{} {} left after helm uninstall",
            o["kind"], o["metadata"]["name"]
        );
    }
    // CRDs stay (Helm never deletes crds/), and with them every resource.
    assert!(established(&client, "deadletterqueues.dlqoperator.io").await);
    cleanup(&prefix).await;
}

/// Both RBAC modes, one after the other: a cluster-wide operator would also reconcile the
/// namespaced run's resources if they ran at once.
#[tokio::test]
async fn chart_installs_and_the_operator_works_under_its_rbac() {
    const TEST: &str = "chart_installs_and_the_operator_works_under_its_rbac";
    // Cluster-wide (ClusterRole), two replicas' configuration, every optional object.
    install_and_operate(
        TEST,
        json!({"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true},
               "dashboard": {"enabled": true}, "networkPolicy": {"enabled": true},
               "logging": {"format": "text"}}),
        false,
    )
    .await;
    // One namespace (Role), one replica without leader election.
    install_and_operate(
        TEST,
        json!({"replicaCount": 1, "leaderElection": {"enabled": false}, "logging": {"format": "text"}}),
        true,
    )
    .await;
}
