//! The Helm chart against a real Kubernetes API server (`DLQ_E2E_KUBECONFIG`; `.ci/run`
//! starts a local v1.20.2) through the real Helm engine: `helm install` is accepted object
//! by object, the CRDs are Established, the upgrade path of the CRDs works, and the
//! operator — run as a local process with the Deployment's own arguments and environment,
//! as the chart's ServiceAccount (impersonation of
//! `system:serviceaccount:NAMESPACE:NAME`, so only the chart's RBAC applies) — does its
//! whole job: leader Lease, CRD wait, Secrets, status, finalizers, Events and the
//! PrometheusRule. A missing RBAC rule fails here instead of in a user's install. With
//! `router.replicas` above 0 the router's Deployment, ServiceAccount, RBAC, Service and
//! PodDisruptionBudget are installed too, and `dlq-operator router`, run locally with that
//! Deployment's arguments as the router's ServiceAccount, consumes the inbox of a
//! DeadLetterQueue in router mode. Then `helm upgrade` (which turns the router Deployment
//! off again in one run) and `helm uninstall` removes every object it created.
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
        .find(|o| {
            o["kind"] == "Deployment"
                && o["spec"]["template"]["spec"]["containers"][0]["name"] == "operator"
        })
        .expect("the operator's Deployment");
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
    let router_replicas = values["router"]["replicas"].as_u64().unwrap_or(0);
    if router_replicas > 0 {
        let inbox = router_mode(&client, &dlq_ns, &names[0], &prefix, &op).await;
        let installed = RouterInstall {
            kubeconfig: &kubeconfig,
            release_ns: &release_ns,
            objects: &objects,
            replicas: router_replicas,
            minor,
        };
        router_works_under_its_rbac(&client, &installed, &dlq_ns, &names[0], &prefix, &inbox).await;
        let container = deployment_container(&client, &release_ns, deployment_name).await;
        assert!(
            container["args"]
                .as_array()
                .expect("args")
                .contains(&json!("--embedded-router=false")),
            "the operator leaves the routers to the router Deployment: {}",
            container["args"]
        );
    }

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
    // The namespaced run also takes the routers back into the operator (replicas 0).
    let router_off = watch && router_replicas > 0;
    if router_off {
        upgraded["router"]["replicas"] = json!(0);
    }
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
    if router_off {
        let args = container["args"].to_string();
        assert!(!args.contains("--embedded-router"), "{args}");
        for o in objects.iter().filter(|o| is_router_object(o)) {
            gone_within_10s(&client, o, "after helm upgrade with router.replicas=0").await;
        }
    }
    helm.call(&["uninstall", &kubeconfig, &release, &release_ns], None)
        .unwrap_or_else(|e| panic!("helm uninstall: {e}"));
    for o in &objects {
        gone_within_10s(&client, o, "after helm uninstall").await;
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
    // Cluster-wide (ClusterRole), two replicas' configuration, every optional object, two
    // router replicas (with their PodDisruptionBudget).
    install_and_operate(
        TEST,
        json!({"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true},
               "dashboard": {"enabled": true}, "networkPolicy": {"enabled": true},
               "logging": {"format": "text"}, "router": {"replicas": 2}}),
        false,
    )
    .await;
    // One namespace (Role), one replica without leader election, one router replica
    // (turned off again by the upgrade).
    install_and_operate(
        TEST,
        json!({"replicaCount": 1, "leaderElection": {"enabled": false}, "logging": {"format": "text"},
               "router": {"replicas": 1}}),
        true,
    )
    .await;
}

/// Whether `object` of a release manifest belongs to the router (its name label).
fn is_router_object(object: &Value) -> bool {
    object["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .is_some_and(|n| n.ends_with("-router"))
}

/// Waits up to 10 s for `object` to be gone from the server; panics naming `when`.
async fn gone_within_10s(client: &Client, object: &Value, when: &str) {
    for _ in 0..50 {
        if server_copy(client, object).await.is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{} {} left {when}",
        object["kind"], object["metadata"]["name"]
    );
}

/// Puts DeadLetterQueue `ns/name` in router mode and labels it `dlq-e2e-router=prefix`
/// (the local router selects it by that label alone); waits for the operator to declare
/// its inbox. The inbox's name.
async fn router_mode(client: &Client, ns: &str, name: &str, prefix: &str, op: &Operator) -> String {
    let api = dlqs(client, ns);
    let patch = json!({"metadata": {"labels": {"dlq-e2e-router": prefix}},
                       "spec": {"router": {"enabled": true}}});
    let patched = api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("patch the DeadLetterQueue into router mode");
    let source = patched.data["spec"]["source"]["queue"]
        .as_str()
        .expect("spec.source.queue");
    let inbox = format!("{source}.router");
    wait_for(
        Duration::from_secs(90),
        &format!("{name}'s inbox {inbox} declared"),
        op,
        || async {
            let o = api.get(name).await.ok()?;
            let queues = o.data["status"]["topology"]["queues"].as_array()?;
            queues.contains(&json!(inbox)).then_some(())
        },
    )
    .await;
    inbox
}

/// What the router part of a release needs from its install.
struct RouterInstall<'a> {
    kubeconfig: &'a str,
    release_ns: &'a str,
    /// The release manifest's objects.
    objects: &'a [Value],
    /// `router.replicas`.
    replicas: u64,
    /// The API server's minor version.
    minor: u32,
}

/// One `dlq-operator router` process with /metrics on a free local port, killed when
/// dropped.
struct LocalRouter {
    child: std::process::Child,
    metrics: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl LocalRouter {
    fn start(kubeconfig: &str, args: &[String], env: &[(String, String)]) -> LocalRouter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("router.log");
        let metrics = format!("127.0.0.1:{port}");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .arg("router")
            .arg(format!("--metrics-bind-address={metrics}"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start dlq-operator router");
        LocalRouter {
            child,
            metrics,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `dlq_router_consuming` of `namespace/name`, if exported.
    async fn consuming(&self, namespace: &str, name: &str) -> Option<f64> {
        let text = reqwest::get(format!("http://{}/metrics", self.metrics))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let (ns, n) = (
            format!("namespace=\"{namespace}\""),
            format!("name=\"{name}\""),
        );
        text.lines()
            .filter(|l| l.starts_with("dlq_router_consuming{"))
            .find(|l| l.contains(&ns) && l.contains(&n))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

impl Drop for LocalRouter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The router Deployment is on the server as rendered (replicas, its own ServiceAccount,
/// the PodDisruptionBudget of the server's policy version), and `dlq-operator router`, run
/// locally with its arguments and environment as that ServiceAccount (so only the chart's
/// router RBAC applies), consumes the inbox of DeadLetterQueue `dlq_ns/name`, is refused
/// nothing, and exits 0 on SIGTERM.
async fn router_works_under_its_rbac(
    client: &Client,
    installed: &RouterInstall<'_>,
    dlq_ns: &str,
    name: &str,
    prefix: &str,
    inbox: &str,
) {
    let deployment = installed
        .objects
        .iter()
        .find(|o| {
            o["kind"] == "Deployment"
                && o["spec"]["template"]["spec"]["containers"][0]["name"] == "router"
        })
        .expect("the router's Deployment in the release");
    let deployment_name = deployment["metadata"]["name"].as_str().expect("name");
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), installed.release_ns);
    let stored = api.get(deployment_name).await.expect("router Deployment");
    let spec = stored.spec.expect("spec");
    assert_eq!(spec.replicas, Some(installed.replicas as i32));
    let sa = spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.service_account_name.clone())
        .expect("the router's ServiceAccount");
    let pdb = installed
        .objects
        .iter()
        .find(|o| o["kind"] == "PodDisruptionBudget");
    match (installed.replicas, pdb) {
        (1, None) => {}
        (n, Some(pdb)) if n > 1 => {
            let expected = if installed.minor >= 21 {
                "policy/v1"
            } else {
                "policy/v1beta1"
            };
            assert_eq!(pdb["apiVersion"], expected, "the server's PDB version");
        }
        (n, pdb) => panic!("{n} router replicas, PodDisruptionBudget {pdb:?}"),
    }

    let container = deployment_container(client, installed.release_ns, deployment_name).await;
    let (args, env) = as_local_process(&container, installed.release_ns, "router-local");
    assert_eq!(container["args"][0], "router");
    let mut args: Vec<String> = args.into_iter().filter(|a| a != "router").collect();
    assert!(
        !args.iter().any(|a| a.starts_with("--selector")),
        "{args:?}"
    );
    // Only this test's DeadLetterQueue: a cluster-wide router would also take the inboxes
    // of other resources in router mode on this server. A list with a selector needs the
    // same right as one without.
    args.push(format!("--selector=dlq-e2e-router={prefix}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let sa_kubeconfig =
        impersonating_kubeconfig(installed.kubeconfig, installed.release_ns, &sa, dir.path());
    let sa_client = {
        let kc = kube::config::Kubeconfig::read_from(&sa_kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        Client::try_from(config).expect("client")
    };
    // Confined: it may get a Secret but not list them.
    match Api::<k8s_openapi::api::core::v1::Secret>::namespaced(sa_client, dlq_ns)
        .list(&ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the router's ServiceAccount can list Secrets: {other:?}"),
    }

    let mut router = LocalRouter::start(&sa_kubeconfig, &args, &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while router.consuming(dlq_ns, name).await != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the router does not consume {inbox} of {dlq_ns}/{name}; its log:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("router as {sa} ({args:?}) consumes {inbox}");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &router.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Ok(Some(s)) = router.child.try_wait() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the router did not stop within 30 s of SIGTERM:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = router.log();
    assert!(exit.success(), "router exit {exit:?} after SIGTERM:\n{log}");
    for needle in ["forbidden", "Forbidden", " 403"] {
        assert!(
            !log.contains(needle),
            "the router was refused something under the chart's RBAC:\n{log}"
        );
    }
}
