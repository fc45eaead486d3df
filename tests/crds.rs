//! The committed CRDs are what the types generate, and their schemas are structural by
//! Kubernetes rules ("Specifying a structural schema", Kubernetes docs: every node typed,
//! no untyped anyOf/oneOf/allOf/not, no `$ref`, `nullable` only beside a `type`, no
//! `enum` holding null — the v1.20 trap of docs/DEVELOPMENT.md, "Testing").

use std::path::Path;

use serde_json::Value;

use dlq_operator::crd::{all_crds, crd_file_name, crd_yaml};

#[test]
fn committed_crds_match_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    for crd in all_crds() {
        let name = crd_file_name(&crd);
        let want = crd_yaml(&crd).expect("serialise");
        let got = std::fs::read_to_string(dir.join(&name)).unwrap_or_else(|e| {
            panic!("crds/{name}: {e}; run `dlq-operator crdgen --out-dir crds`")
        });
        assert!(
            got == want,
            "crds/{name} differs from what the types generate; run `cargo run -- crdgen --out-dir crds`"
        );
    }
    let files = std::fs::read_dir(&dir).expect("crds/").count();
    assert_eq!(files, all_crds().len(), "stray files in crds/");
}

/// Returns every structural-schema violation under `node` (path-prefixed).
fn violations(path: &str, node: &Value, out: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        out.push(format!("{path}: schema node is not an object"));
        return;
    };
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    for k in [
        "$ref",
        "definitions",
        "$defs",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$schema",
    ] {
        if obj.contains_key(k) {
            out.push(format!(
                "{path}: `{k}` is not allowed in a structural schema here"
            ));
        }
    }
    let ty = obj.get("type").and_then(Value::as_str);
    if ty.is_none() && !preserve && !int_or_string {
        out.push(format!("{path}: node has no `type`"));
    }
    if let Some(t) = ty {
        if !["object", "array", "string", "integer", "number", "boolean"].contains(&t) {
            out.push(format!("{path}: unknown type {t}"));
        }
    }
    if obj.contains_key("nullable") && ty.is_none() {
        out.push(format!("{path}: `nullable` without `type`"));
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        for v in values {
            let ok = match ty {
                Some("string") => v.is_string(),
                Some("integer") => v.is_i64() || v.is_u64(),
                Some("number") => v.is_number(),
                _ => false,
            };
            if !ok {
                out.push(format!("{path}: enum value {v} does not match type {ty:?}"));
            }
        }
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        out.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        if ty != Some("object") {
            out.push(format!("{path}: properties on a non-object"));
        }
        for (k, v) in props {
            violations(&format!("{path}.{k}"), v, out);
        }
    }
    if let Some(ap) = obj.get("additionalProperties") {
        if ap.is_object() {
            violations(&format!("{path}.*"), ap, out);
        }
    }
    if let Some(items) = obj.get("items") {
        if ty != Some("array") {
            out.push(format!("{path}: items on a non-array"));
        }
        violations(&format!("{path}[]"), items, out);
    } else if ty == Some("array") {
        out.push(format!("{path}: array without items"));
    }
}

#[test]
fn schemas_are_structural() {
    for crd in all_crds() {
        let json = serde_json::to_value(&crd).expect("serialise");
        for (i, version) in json["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .enumerate()
        {
            let schema = &version["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object", "root must be an object");
            let mut out = Vec::new();
            violations(
                &format!("{}[{i}]", crd.metadata.name.clone().unwrap_or_default()),
                schema,
                &mut out,
            );
            assert!(out.is_empty(), "non-structural schema:\n{}", out.join("\n"));
            assert!(
                version["subresources"]["status"].is_object(),
                "status subresource"
            );
        }
    }
}

/// Every `format` value anywhere under `node`, with its path.
fn formats(path: &str, node: &Value, out: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "format" {
                    if let Some(f) = v.as_str() {
                        out.push((path.to_string(), f.to_string()));
                    }
                } else {
                    formats(&format!("{path}.{k}"), v, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                formats(&format!("{path}[{i}]"), v, out);
            }
        }
        _ => {}
    }
}

/// A current API server warns `unrecognized format "uint64"` on every create of a CRD and
/// of each resource (seen on Kubernetes 1.36): only formats it knows (kube-openapi's
/// format registry, as the API server validates them) may appear.
#[test]
fn schemas_use_only_formats_the_api_server_knows() {
    const KNOWN: [&str; 8] = [
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "date",
        "date-time",
        "password",
    ];
    let mut found = Vec::new();
    for crd in all_crds() {
        let json = serde_json::to_value(&crd).expect("serialise");
        formats(
            &crd.metadata.name.clone().unwrap_or_default(),
            &json["spec"]["versions"],
            &mut found,
        );
    }
    assert!(
        found.iter().any(|(_, f)| f == "int64"),
        "the walk finds formats: {found:?}"
    );
    let unknown: Vec<_> = found
        .iter()
        .filter(|(_, f)| !KNOWN.contains(&f.as_str()))
        .collect();
    assert!(unknown.is_empty(), "unknown formats: {unknown:?}");
}

#[test]
fn structural_check_catches_the_known_traps() {
    // The checker itself must fail on what v1.20 rejects, or the test above proves nothing.
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "level": {"enum": ["Debug", null], "nullable": true, "type": "string"},
            "untyped": {"description": "no type"},
            "choice": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "n": {"nullable": true}
        }
    });
    let mut out = Vec::new();
    violations("bad", &bad, &mut out);
    let joined = out.join("\n");
    for needle in [
        "bad.level: enum value null",
        "bad.untyped: node has no `type`",
        "bad.choice: `anyOf`",
        "bad.n: `nullable` without `type`",
    ] {
        assert!(joined.contains(needle), "missing {needle:?} in:\n{joined}");
    }
}

#[test]
fn crds_carry_names_columns_and_validation() {
    let crds = all_crds();
    let by_kind = |k: &str| {
        crds.iter()
            .find(|c| c.spec.names.kind == k)
            .map(|c| serde_json::to_value(c).expect("serialise"))
            .expect("crd")
    };
    let dlq = by_kind("DeadLetterQueue");
    assert_eq!(
        dlq["spec"]["names"]["shortNames"],
        serde_json::json!(["dlq"])
    );
    assert_eq!(dlq["spec"]["scope"], "Namespaced");
    let columns: Vec<&str> = dlq["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Ready",
            "DLQ depth",
            "Baseline",
            "Ratio",
            "Alert",
            "Maturity",
            "Age"
        ]
    );
    let rp = by_kind("RetryPolicy");
    assert_eq!(rp["spec"]["names"]["shortNames"], serde_json::json!(["rp"]));
    let spec = &rp["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["maxRetries"]["maximum"], 100.0);
    assert_eq!(spec["properties"]["maxRetries"]["default"], 3);
    let backoff = &spec["properties"]["backoff"];
    assert_eq!(
        backoff["properties"]["initialDelay"]["pattern"],
        dlq_operator::duration::DURATION_PATTERN
    );
    assert_eq!(backoff["properties"]["multiplier"]["minimum"], 1.0);
    let rules: Vec<&str> = backoff["x-kubernetes-validations"]
        .as_array()
        .expect("CEL rules")
        .iter()
        .filter_map(|r| r["rule"].as_str())
        .collect();
    assert!(
        rules
            .iter()
            .any(|r| r.contains("duration(self.maxDelay) >= duration(self.initialDelay)")),
        "{rules:?}"
    );
    let strategies = backoff["properties"]["strategy"]["enum"]
        .as_array()
        .expect("enum");
    assert_eq!(strategies.len(), 6);

    let replay = by_kind("DeadLetterReplay");
    assert_eq!(
        replay["spec"]["names"]["shortNames"],
        serde_json::json!(["dlqr"])
    );
    assert_eq!(replay["spec"]["scope"], "Namespaced");
    let version = &replay["spec"]["versions"][0];
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["DLQ", "Phase", "Matched", "Replayed", "Skipped", "Failed", "Age"]
    );
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let rules: Vec<&str> = spec["x-kubernetes-validations"]
        .as_array()
        .expect("CEL rules")
        .iter()
        .filter_map(|r| r["rule"].as_str())
        .collect();
    assert_eq!(rules, ["self == oldSelf"], "the whole spec is immutable");
    assert_eq!(spec["properties"]["maxReplays"]["default"], 3);
    assert_eq!(spec["properties"]["target"]["default"], "OriginalQueue");
    assert_eq!(
        spec["required"],
        serde_json::json!(["deadLetterQueueRef"]),
        "{spec}"
    );
}

/// examples/replay/ holds DeadLetterReplays (kept out of examples/ itself, whose
/// `kubectl apply -f` must not start a replay): each one decodes, validates, and replays a
/// DeadLetterQueue of examples/ in its namespace.
#[test]
fn replay_examples_are_valid_and_name_an_example_dead_letter_queue() {
    use dlq_operator::crd::DeadLetterReplay;
    use dlq_operator::manifest::{load_paths, namespace_of};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let examples = load_paths(&[root.join("examples")]).expect("examples/ loads");
    let dlqs: Vec<(String, String)> = examples
        .dead_letter_queues
        .iter()
        .map(|d| {
            (
                namespace_of(&d.object.metadata).to_string(),
                d.object.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    let mut found = 0;
    for entry in std::fs::read_dir(root.join("examples/replay")).expect("examples/replay/") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let value: Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(value["apiVersion"], "dlqoperator.io/v1alpha1", "{path:?}");
        assert_eq!(value["kind"], "DeadLetterReplay", "{path:?}");
        let replay: DeadLetterReplay =
            serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        // No field is lost in decoding (a misspelt field would be dropped silently).
        let back = serde_json::to_value(&replay).expect("serialise");
        for (field, v) in value["spec"].as_object().expect("spec") {
            assert_eq!(&back["spec"][field], v, "{path:?}: spec.{field} round trip");
        }
        replay
            .spec
            .validate()
            .unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let key = (
            namespace_of(&replay.metadata).to_string(),
            replay.spec.dead_letter_queue_ref.name.clone(),
        );
        assert!(dlqs.contains(&key), "{path:?}: {key:?} is not in {dlqs:?}");
        found += 1;
    }
    assert!(found > 0, "no example in examples/replay/");
}
