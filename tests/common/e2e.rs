//! Helpers of the end-to-end tests against a real Kubernetes API server
//! (`DLQ_E2E_KUBECONFIG`; `.ci/run` starts a local v1.20.2 with scripts/kube-apiserver.sh).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::MGMT;
use dlq_operator::crd::{all_crds, DeadLetterQueue, RetryPolicy};
use dlq_operator::object::api_resource;

/// Path of the kubeconfig, or `None` after reporting `test` as skipped (written to the
/// process's stderr directly, past the test harness's capture, so the skip shows).
pub fn kubeconfig(test: &str) -> Option<String> {
    match std::env::var("DLQ_E2E_KUBECONFIG") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: DLQ_E2E_KUBECONFIG is not set (no Kubernetes API server; .ci/run starts one)"
            );
            None
        }
    }
}

/// A client for `DLQ_E2E_KUBECONFIG`, or `None` (after reporting the skip) when unset.
pub async fn client(test: &str) -> Option<Client> {
    let path = kubeconfig(test)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig usable");
    Some(Client::try_from(config).expect("client"))
}

/// Creates the CRDs, or replaces what is there, and waits until both are Established.
/// Not server-side apply: before 1.25 the server's typed patch does not know
/// `x-kubernetes-validations` and refuses the CEL rules ("field not declared in schema"),
/// while create/replace accept and drop them. Panics naming a rejected CRD.
pub async fn ensure_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        let name = crd.metadata.name.clone().expect("crd name");
        // Tests run in parallel: a replace can race with another test's (409 Conflict on
        // the resourceVersion); read again and retry.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let result = match crds.create(&PostParams::default(), &crd).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let mut replacement = crd.clone();
                    replacement.metadata.resource_version = crds
                        .get(&name)
                        .await
                        .expect("get crd")
                        .metadata
                        .resource_version;
                    crds.replace(&name, &PostParams::default(), &replacement)
                        .await
                        .map(|_| ())
                }
                other => other.map(|_| ()),
            };
            match result {
                Ok(()) => break,
                Err(kube::Error::Api(s)) if s.code == 409 && attempts < 10 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("CRD {name} rejected by the API server: {e}"),
            }
        }
    }
    for crd in all_crds() {
        let name = crd.metadata.name.clone().expect("crd name");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = crds.get(&name).await.expect("get crd");
            let conditions = got.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(
                !conditions
                    .iter()
                    .any(|c| c.type_ == "NonStructuralSchema" && c.status == "True"),
                "{name}: {conditions:?}"
            );
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never Established: {conditions:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Installs a stand-in for the Prometheus Operator's PrometheusRule CRD if none is served
/// (see [`ensure_monitoring_crd`]).
pub async fn ensure_prometheus_rule_crd(client: &Client) {
    ensure_monitoring_crd(client, "PrometheusRule", "prometheusrules").await;
}

/// Installs a stand-in for one of the Prometheus Operator's CRDs (`monitoring.coreos.com/v1`,
/// the real kind and plural; a schema that keeps every field) if none is served, and waits
/// until it is Established.
pub async fn ensure_monitoring_crd(client: &Client, kind: &str, plural: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = &format!("{plural}.monitoring.coreos.com");
    let singular = kind.to_lowercase();
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "listKind": format!("{kind}List"),
                      "plural": plural, "singular": singular},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("crd");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("{kind} CRD rejected: {e}"),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = crds.get(name).await.expect("get crd");
        let established = got
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "{kind} CRD not Established");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One `dlq-operator run` process, killed when dropped. Its log is in `log`.
pub struct Operator {
    pub child: Child,
    pub metrics: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts `dlq-operator run ARGS` with `KUBECONFIG=kubeconfig` and /metrics on a free
    /// local port.
    pub fn start(kubeconfig: &str, args: &[&str]) -> Operator {
        Operator::start_with_env(kubeconfig, args, &[])
    }

    /// [`Operator::start`] with extra environment variables (set last: they win).
    pub fn start_with_env(kubeconfig: &str, args: &[&str], env: &[(&str, &str)]) -> Operator {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("operator.log");
        let file = std::fs::File::create(&log).expect("log file");
        let metrics = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .arg("run")
            .args(["--metrics-bind-address", &metrics])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start dlq-operator run");
        Operator {
            child,
            metrics,
            log,
            _dir: dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics`, or empty when not answering.
    pub async fn metrics(&self) -> String {
        match reqwest::get(format!("http://{}/metrics", self.metrics)).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// `true` when `/healthz` answers 200.
    pub async fn healthy(&self) -> bool {
        reqwest::get(format!("http://{}/healthz", self.metrics))
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Sum of `dlq_operator_reconcile_total` over every label set.
    pub async fn reconciles(&self) -> u64 {
        self.metrics()
            .await
            .lines()
            .filter(|l| l.starts_with("dlq_operator_reconcile_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit (up to `timeout`); its exit status.
    pub async fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `timeout` with
/// `what` and the operator log.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, op: &Operator, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; operator log:\n{}",
            op.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = super::unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub fn dlqs(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource::<DeadLetterQueue>())
}

pub fn rps(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource::<RetryPolicy>())
}

/// The `Ready` condition of a DeadLetterQueue as (status, reason, message).
pub async fn ready(api: &Api<DynamicObject>, name: &str) -> Option<(String, String, String)> {
    let o = api.get_opt(name).await.ok()??;
    let c = o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Creates the examples' Secret, RetryPolicies and DeadLetterQueues in `ns`, with every
/// queue name prefixed by `prefix`: with `kubectl apply -f` of the rewritten manifests
/// when `DLQ_E2E_KUBECTL` names a kubectl (`.ci/run` sets it to the one built with the
/// API server), else through the API. Returns the DeadLetterQueue names.
pub async fn create_examples(
    client: &Client,
    kubeconfig: &str,
    ns: &str,
    prefix: &str,
) -> Vec<String> {
    let (docs, names) = prefixed_examples(ns, prefix);
    create_docs(client, kubeconfig, ns, docs).await;
    names
}

/// The examples' Secret, RetryPolicies and DeadLetterQueues as JSON documents in
/// namespace `ns`, every queue and exchange name prefixed by `prefix`, and the
/// DeadLetterQueue names.
pub fn prefixed_examples(ns: &str, prefix: &str) -> (Vec<Value>, Vec<String>) {
    let m = dlq_operator::manifest::load_paths(&[super::root().join("examples")])
        .expect("examples load");
    let mut docs: Vec<Value> = Vec::new();
    for s in &m.secrets {
        let mut secret: Secret = s.object.clone();
        secret.metadata.namespace = Some(ns.into());
        let mut v = json!(secret);
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Secret");
        docs.push(v);
    }
    for p in &m.retry_policies {
        let mut rp = p.object.clone();
        rp.metadata.namespace = Some(ns.into());
        docs.push(json!(rp));
    }
    let mut names = Vec::new();
    for d in &m.dead_letter_queues {
        let mut dlq = d.object.clone();
        dlq.metadata.namespace = Some(ns.into());
        dlq.spec.source.queue = format!("{prefix}-{}", dlq.spec.source.queue);
        dlq.spec.dead_letter.queue = dlq.spec.dead_letter.queue.map(|q| format!("{prefix}-{q}"));
        dlq.spec.dead_letter.exchange = dlq
            .spec
            .dead_letter
            .exchange
            .map(|x| format!("{prefix}-{x}"));
        names.push(dlq.metadata.name.clone().expect("name"));
        docs.push(json!(dlq));
    }
    (docs, names)
}

/// Creates `docs` in `ns`: with `kubectl apply -f` when `DLQ_E2E_KUBECTL` names a
/// kubectl, else through the API.
async fn create_docs(client: &Client, kubeconfig: &str, ns: &str, docs: Vec<Value>) {
    match std::env::var("DLQ_E2E_KUBECTL")
        .ok()
        .filter(|k| !k.is_empty())
    {
        Some(kubectl) => {
            let dir = tempfile::tempdir().expect("tempdir");
            let yaml: Vec<String> = docs
                .iter()
                .map(|d| serde_yaml_ng::to_string(d).expect("yaml"))
                .collect();
            let file = dir.path().join("examples.yaml");
            std::fs::write(&file, yaml.join("---\n")).expect("write manifests");
            // --validate=false: kubectl 1.20's client-side validation predates CEL fields.
            let out = Command::new(&kubectl)
                .args([
                    "--kubeconfig",
                    kubeconfig,
                    "apply",
                    "--validate=false",
                    "-f",
                ])
                .arg(&file)
                .output()
                .expect("run kubectl");
            assert!(
                out.status.success(),
                "kubectl apply -f: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        None => {
            for doc in docs {
                let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic");
                let kind = doc["kind"].as_str().unwrap_or_default().to_string();
                let result = match kind.as_str() {
                    "Secret" => {
                        let s: Secret = serde_json::from_value(doc).expect("secret");
                        Api::<Secret>::namespaced(client.clone(), ns)
                            .create(&PostParams::default(), &s)
                            .await
                            .map(|_| ())
                    }
                    "RetryPolicy" => rps(client, ns)
                        .create(&PostParams::default(), &obj)
                        .await
                        .map(|_| ()),
                    _ => dlqs(client, ns)
                        .create(&PostParams::default(), &obj)
                        .await
                        .map(|_| ()),
                };
                result.unwrap_or_else(|e| panic!("create {kind}: {e}"));
            }
        }
    }
}

/// What `kubectl get PLURAL` shows: the server-side Table (columns from the CRD's printer
/// columns) as (column names, rows of cells).
pub async fn table(client: &Client, ns: &str, plural: &str) -> (Vec<String>, Vec<Vec<Value>>) {
    let request = http::Request::get(format!(
        "/apis/dlqoperator.io/v1alpha1/namespaces/{ns}/{plural}"
    ))
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .expect("request");
    let text = client.request_text(request).await.expect("table");
    let t: Value = serde_json::from_str(&text).expect("table json");
    let columns = t["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let rows = t["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cells"].as_array().cloned().unwrap_or_default())
        .collect();
    (columns, rows)
}

/// Creates ServiceAccount `name` in `ns`, bound to a Role granting `rules` (none: no
/// binding), and returns a 10-minute token of it.
pub async fn account(client: &Client, ns: &str, name: &str, rules: serde_json::Value) -> String {
    let pp = PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&pp, &sa)
        .await
        .expect("create ServiceAccount");
    if rules.as_array().is_some_and(|r| !r.is_empty()) {
        let role: Role =
            serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))
                .expect("role");
        Api::<Role>::namespaced(client.clone(), ns)
            .create(&pp, &role)
            .await
            .expect("create Role");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        }))
        .expect("binding");
        Api::<RoleBinding>::namespaced(client.clone(), ns)
            .create(&pp, &binding)
            .await
            .expect("create RoleBinding");
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(name, &pp, &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
}

/// A new namespace (prefix `prefix`) with the broker Secret `rabbit` (AMQP URI `amqp`, the
/// local management API) and the RetryPolicy `policy` (1 retry, one 5 s tier).
pub async fn namespace_with_broker(client: &Client, prefix: &str, amqp: &str) -> String {
    let ns = namespace(client, prefix).await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "rabbit"},
        "stringData": {"uri": amqp, "managementUri": MGMT}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let rp = DynamicObject::new("policy", &api_resource::<RetryPolicy>())
        .data(json!({"spec": {"maxRetries": 1, "tiers": ["5s"]}}));
    rps(client, &ns)
        .create(&PostParams::default(), &rp)
        .await
        .expect("rp");
    ns
}

/// Creates the DeadLetterQueue `name` for source queue `queue` (classic queues; the
/// dead-letter queue is `<queue>.dlq`) with `monitoring`.
pub async fn create_dlq(client: &Client, ns: &str, name: &str, queue: &str, monitoring: Value) {
    let dlq = DynamicObject::new(name, &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
        "broker": {"secretRef": {"name": "rabbit"}},
        "source": {"queue": queue, "queueType": "Classic"},
        "retryPolicyRef": {"name": "policy"},
        "monitoring": monitoring,
    }}));
    dlqs(client, ns)
        .create(&PostParams::default(), &dlq)
        .await
        .expect("dlq");
}

/// What [`ready_orders`] set up.
pub struct Orders {
    /// The API client.
    pub client: Client,
    /// The kubeconfig's path.
    pub kubeconfig: String,
    /// The namespace.
    pub ns: String,
    /// The unique prefix of the queue names ([`super::cleanup`] it at the end).
    pub prefix: String,
    /// The source queue `<prefix>-orders`.
    pub q: String,
    /// Its dead-letter queue `<q>.dlq`.
    pub dlq: String,
    /// `dlq-operator run` on the namespace.
    pub op: Operator,
}

/// A namespace (`ns_prefix`…) with the broker Secret and the RetryPolicy
/// ([`namespace_with_broker`]), `dlq-operator run` on it, and its DeadLetterQueue `orders`
/// (source queue `<unique queue_prefix>-orders`, classic, depths polled every 1 s) Ready;
/// `None` after reporting `test` skipped without an API server.
pub async fn ready_orders(test: &str, ns_prefix: &str, queue_prefix: &str) -> Option<Orders> {
    let client = client(test).await?;
    let kubeconfig = kubeconfig(test)?;
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, ns_prefix, super::AMQP).await;
    let prefix = super::unique(queue_prefix);
    let q = format!("{prefix}-orders");
    let dlq = format!("{q}.dlq");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    create_dlq(&client, &ns, "orders", &q, json!({"interval": "1s"})).await;
    let api = dlqs(&client, &ns);
    wait_for(Duration::from_secs(60), "orders Ready", &op, || async {
        ready(&api, "orders").await.filter(|r| r.0 == "True")
    })
    .await;
    Some(Orders {
        client,
        kubeconfig,
        ns,
        prefix,
        q,
        dlq,
        op,
    })
}

/// The Events of `ns` about the object of `kind` named `name`, oldest first.
pub async fn events_about(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let mut events: Vec<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e: &k8s_openapi::api::events::v1::Event| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .collect();
    events.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    events
}

/// Holder of Lease `default/name`, if any.
pub async fn lease_holder(client: &Client, name: &str) -> Option<String> {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), "default")
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// The flags of an operator that takes Lease `default/lease` (held for `duration_s`
/// seconds) as `identity`.
pub fn lease_flags(lease: &str, duration_s: u64, identity: &str) -> Vec<String> {
    [
        "--lease-namespace",
        "default",
        "--lease-name",
        lease,
        "--lease-duration",
        &duration_s.to_string(),
        "--identity",
        identity,
    ]
    .map(String::from)
    .to_vec()
}
