//! Helpers of the end-to-end tests against a real Kubernetes API server
//! (`DLQ_E2E_KUBECONFIG`; `.ci/run` starts a local v1.20.2 with scripts/kube-apiserver.sh).

use std::io::Write;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::Client;

use dlq_operator::crd::all_crds;

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

/// Installs a stand-in for the Prometheus Operator's PrometheusRule CRD (real group,
/// version, kind and plural; a schema that keeps every field) if none is served, and
/// waits until it is Established.
pub async fn ensure_prometheus_rule_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "prometheusrules.monitoring.coreos.com";
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList",
                      "plural": "prometheusrules", "singular": "prometheusrule"},
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
        Err(e) => panic!("PrometheusRule CRD rejected: {e}"),
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
        assert!(
            Instant::now() < deadline,
            "PrometheusRule CRD not Established"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
