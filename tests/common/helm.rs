//! The real Helm engine and kubernetes-validate, through tests/helm/chart_tool.py (PyPI
//! `helm-python-sdk` and `kubernetes-validate` in `.venv`, installed by `.ci/run` from
//! requirements-dev.txt).
//!
//! Without the tools a test reports itself as skipped — unless `DLQ_REQUIRE_TOOLS=1`
//! (set by `.ci/run`), where their absence fails the test instead of hiding it.
//!
//! Also what the chart tests (tests/helm_*.rs) share: the release they render, the
//! documented variants of the values, and readers of the rendered objects (containers,
//! selectors, RBAC rules).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use dlq_operator::rbac::{Rule, RULES};
use serde_json::{json, Value};

use super::root;

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    root().join("charts/dlq-operator")
}

/// A handle on the Python bridge.
pub struct Helm {
    python: PathBuf,
    script: PathBuf,
}

/// Whether a missing tool must fail the test (`DLQ_REQUIRE_TOOLS=1`).
pub fn tools_required() -> bool {
    std::env::var("DLQ_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// Reports `test` as skipped for `why`, or panics when the tools are required.
pub fn skip(test: &str, why: &str) {
    assert!(!tools_required(), "{test}: {why} (DLQ_REQUIRE_TOOLS=1)");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

impl Helm {
    /// The bridge, or `None` after reporting `test` as skipped: `.venv/bin/python` of the
    /// repository if present, else `python3` on PATH, provided both packages import.
    pub fn new(test: &str) -> Option<Helm> {
        let venv = root().join(".venv/bin/python");
        let python = if venv.exists() {
            venv
        } else {
            PathBuf::from("python3")
        };
        let helm = Helm {
            python,
            script: root().join("tests/helm/chart_tool.py"),
        };
        match helm.call(&["check"], None) {
            Ok(_) => Some(helm),
            Err(e) => {
                skip(
                    test,
                    &format!(
                        "the Helm engine / kubernetes-validate are not installed ({}; .ci/run installs requirements-dev.txt into .venv)",
                        e.trim()
                    ),
                );
                None
            }
        }
    }

    /// Runs a bridge command; its JSON answer, or its error message (stderr).
    pub fn call(&self, args: &[&str], stdin: Option<&str>) -> Result<Value, String> {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script).args(args);
        cmd.stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
        cmd.stdout(std::process::Stdio::piped());
        cmd.stderr(std::process::Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.python.display()))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin piped");
            pipe.write_all(input.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("bridge output");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "bridge answered no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `helm template` of the chart with `values` as release `name` in `namespace`: every
    /// rendered object (NOTES.txt and empty templates left out), or the engine's error.
    pub fn template(
        &self,
        values: &Value,
        name: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, String> {
        let rendered = self.rendered(values, name, namespace)?;
        let mut objects = Vec::new();
        let files = rendered.as_object().expect("template answers an object");
        for (path, text) in files {
            if path.ends_with("NOTES.txt") {
                continue;
            }
            let text = text.as_str().expect("manifest text");
            for doc in serde_yaml_ng::Deserializer::from_str(text) {
                let v = Value::deserialize(doc)
                    .map_err(|e| format!("{path} is not YAML: {e}\n{text}"))?;
                if !v.is_null() {
                    objects.push(v);
                }
            }
        }
        Ok(objects)
    }

    /// The engine's answer to `template`: every template path and its rendered text.
    fn rendered(&self, values: &Value, name: &str, namespace: &str) -> Result<Value, String> {
        self.call(
            &[
                "template",
                &chart_dir().display().to_string(),
                &values.to_string(),
                name,
                namespace,
            ],
            None,
        )
    }

    /// NOTES.txt as rendered for `values`.
    pub fn notes(&self, values: &Value, name: &str, namespace: &str) -> String {
        let rendered = self.rendered(values, name, namespace).expect("render");
        rendered["dlq-operator/templates/NOTES.txt"]
            .as_str()
            .expect("NOTES.txt rendered")
            .to_string()
    }
}

use serde::Deserialize as _;

/// The object of `kind` named `name` among `objects` (panics naming what is there).
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", kinds(objects)))
}

/// `Kind/name` of every object, for messages.
pub fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// Release name the chart tests render with.
pub const RELEASE: &str = "dlq";
/// Namespace the chart tests render in.
pub const NS: &str = "dlq-system";
/// Full name (`<release>-dlq-operator`) of the operator's objects for [`RELEASE`].
pub const FULLNAME: &str = "dlq-dlq-operator";

/// Name of the router's Deployment, ServiceAccount, PodDisruptionBudget, ServiceMonitor
/// and NetworkPolicy for release [`RELEASE`].
pub const ROUTER: &str = "dlq-dlq-operator-router";

/// Name of the console's Deployment, ServiceAccount, Service and NetworkPolicy for release
/// [`RELEASE`].
pub const CONSOLE: &str = "dlq-dlq-operator-console";

/// The values of each documented variant, by name.
pub fn scenarios() -> Vec<(&'static str, Value)> {
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
                   "serviceAccount": {"name": "dlq-sa", "annotations": {"a": "b"}},
                   "maturity": {"weights": {"retry": 0.5, "deadLetter": 0.3, "monitoring": 0.2}}}),
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

/// Every object `helm template` renders for `values` as release [`RELEASE`] in [`NS`]
/// (panics with the engine's error).
pub fn render(helm: &Helm, values: &Value) -> Vec<Value> {
    helm.template(values, RELEASE, NS)
        .unwrap_or_else(|e| panic!("helm template {values}: {e}"))
}

/// The container's arguments.
pub fn args_of(c: &Value) -> Vec<&str> {
    c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The literal value of the container's environment variable `name`.
pub fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

/// The operator's container (of Deployment [`FULLNAME`]) among `objects`.
pub fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
}

/// Whether every label of `selector` (a matchLabels map) is among `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .expect("selector map")
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

/// The RBAC rules of `objects` as (group, resource, verb), with the namespace each is
/// granted in (`None`: cluster-wide).
pub fn granted(objects: &[Value]) -> BTreeSet<(Option<String>, String, String, String)> {
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
pub fn code_rules() -> BTreeSet<(String, String, String)> {
    flat_rules(RULES)
}

/// Every (group, resource, verb) of `rules`.
pub fn flat_rules(rules: &[Rule]) -> BTreeSet<(String, String, String)> {
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

/// The rules of the Roles and ClusterRoles bound to ServiceAccount `sa` of the release
/// namespace, as in [`granted`].
pub fn granted_to(
    objects: &[Value],
    sa: &str,
) -> BTreeSet<(Option<String>, String, String, String)> {
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

/// Asserts that every Role and ClusterRole of `objects` is bound by exactly one binding of
/// its kind (same name, kind and namespace), to one of the ServiceAccounts `sas` of the
/// release namespace (`scenario` names the failure).
pub fn assert_each_role_bound_once(objects: &[Value], sas: &[&str], scenario: &str) {
    let subjects: Vec<Value> = sas
        .iter()
        .map(|sa| serde_json::json!([{"kind": "ServiceAccount", "name": sa, "namespace": NS}]))
        .collect();
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
        assert_eq!(
            bound.len(),
            1,
            "{scenario}: bindings of {}",
            role["metadata"]["name"]
        );
        assert!(
            subjects.contains(&bound[0]["subjects"]),
            "{scenario}: {}",
            bound[0]
        );
    }
}
