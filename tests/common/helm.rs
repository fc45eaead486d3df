//! The real Helm engine and kubernetes-validate, through tests/helm/chart_tool.py (PyPI
//! `helm-python-sdk` and `kubernetes-validate` in `.venv`, installed by `.ci/run` from
//! requirements-dev.txt).
//!
//! Without the tools a test reports itself as skipped — unless `DLQ_REQUIRE_TOOLS=1`
//! (set by `.ci/run`), where their absence fails the test instead of hiding it.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

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
