//! The reference tables of the docs cannot drift from their sources.
//!
//! - docs/REFERENCE.md: every field path of each CRD's `openAPIV3Schema` under `spec` and
//!   `status` (objects' properties, arrays' items as `[]`, e.g.
//!   `status.conditions[].reason`) is written as a `` `spec.…` `` / `` `status.…` `` code
//!   span in that kind's section, and every such path written there exists in the
//!   schema, so the manual can neither miss a field nor invent one. Anywhere else in the
//!   prose of README.md and of every docs/*.md, a `spec.…` / `status.…` code span names a
//!   field some CRD has.
//! - docs/INSTALL.md, "Chart values": every key path of charts/dlq-operator/values.yaml
//!   (maps and leaves, e.g. `image` and `image.repository`) is in the first column of the
//!   values table, and every key in that column exists in values.yaml.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// The resource reference: one `## <kind>` section per CRD.
const REFERENCE_FILE: &str = "docs/REFERENCE.md";
/// Its title (the only level-1 heading: the section is the whole file).
const REFERENCE_HEADING: &str = "# Resource reference";
/// The install guide, which holds the Helm values table.
const VALUES_FILE: &str = "docs/INSTALL.md";
/// Heading of the section holding the Helm values table.
const VALUES_HEADING: &str = "## Chart values";
/// (kind, CRD file under crds/): every CRD of `crd::all_crds()`
/// (`every_crd_has_a_reference_subsection` holds the list to it).
const KINDS: [(&str, &str); 3] = [
    ("RetryPolicy", "retrypolicies.dlqoperator.io.yaml"),
    ("DeadLetterQueue", "deadletterqueues.dlqoperator.io.yaml"),
    ("DeadLetterReplay", "deadletterreplays.dlqoperator.io.yaml"),
];

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Whether `line` opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

/// The markdown heading level of `line` (`## X` → 2), 0 for any other line.
fn heading_level(line: &str) -> usize {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if hashes > 0 && line[hashes..].starts_with(' ') {
        hashes
    } else {
        0
    }
}

/// The prose lines (fenced code blocks left out) after the heading line that starts
/// with `heading`, up to the next heading of the same or a higher level. Panics when
/// no line starts with `heading`.
fn section(text: &str, heading: &str) -> String {
    let level = heading_level(heading);
    let (mut inside, mut in_code, mut found) = (false, false, false);
    let mut out = String::new();
    for line in text.lines() {
        if is_fence(line) {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let l = heading_level(line);
        if inside && l > 0 && l <= level {
            break;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        } else if line.starts_with(heading) {
            (inside, found) = (true, true);
        }
    }
    assert!(found, "no heading starting with {heading:?}");
    out
}

/// Contents of the inline code spans (single backticks) of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `span` is a field path such as `spec.backoff.strategy` or
/// `status.conditions[].type`.
fn is_field_path(span: &str) -> bool {
    let mut parts = span.split('.');
    matches!(parts.next(), Some("spec" | "status"))
        && parts.clone().next().is_some()
        && parts.all(|p| {
            let name = p.strip_suffix("[]").unwrap_or(p);
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric())
        })
}

/// Every property path below `node` (an openAPIV3Schema node) into `out`.
fn schema_paths(prefix: &str, node: &Value, out: &mut BTreeSet<String>) {
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            let path = format!("{prefix}.{name}");
            out.insert(path.clone());
            schema_paths(&path, child, out);
        }
    }
    if let Some(items) = node.get("items") {
        schema_paths(&format!("{prefix}[]"), items, out);
    }
}

/// The `spec` and `status` field paths of the CRD in `crds/<file>`.
fn crd_paths(file: &str) -> BTreeSet<String> {
    let crd: Value = serde_yaml_ng::from_str(&read(&format!("crds/{file}"))).expect(file);
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let mut out = BTreeSet::new();
    for top in ["spec", "status"] {
        assert!(schema[top].is_object(), "{file}: no {top} in the schema");
        schema_paths(top, &schema[top], &mut out);
    }
    out
}

/// Every key path of a values.yaml mapping (maps and leaves; list items are not keys).
fn value_paths(prefix: &str, node: &Value, out: &mut BTreeSet<String>) {
    if let Some(map) = node.as_object() {
        for (key, child) in map {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            out.insert(path.clone());
            value_paths(&path, child, out);
        }
    }
}

/// The code spans of the first cell of each table row of `text` (header and rule
/// rows carry none).
fn first_column_spans(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('|'))
        .filter_map(|rest| rest.split('|').next())
        .flat_map(|cell| code_spans(cell).into_iter().map(str::to_string))
        .collect()
}

/// Panics with both lists when either is non-empty.
fn assert_same(what: &str, missing: &[&String], unknown: &[&String]) {
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{what}:\n  missing from the docs ({}): {missing:?}\n  in the docs but not in the source ({}): {unknown:?}",
        missing.len(),
        unknown.len()
    );
}

#[test]
fn configuration_reference_matches_the_crd_schemas() {
    let reference = section(&read(REFERENCE_FILE), REFERENCE_HEADING);
    let mut any_kind = BTreeSet::new();
    for (kind, file) in KINDS {
        any_kind.extend(crd_paths(file));
        let documented: BTreeSet<String> = code_spans(&section(&reference, &format!("## {kind}")))
            .into_iter()
            .filter(|s| is_field_path(s))
            .map(str::to_string)
            .collect();
        let schema = crd_paths(file);
        let missing: Vec<&String> = schema.difference(&documented).collect();
        let unknown: Vec<&String> = documented.difference(&schema).collect();
        assert_same(
            &format!("{kind} fields (crds/{file}) vs {REFERENCE_FILE} \"## {kind}\""),
            &missing,
            &unknown,
        );
    }
    // Outside the kinds' subsections too, the section names only fields that exist.
    let unknown: Vec<String> = code_spans(&reference)
        .into_iter()
        .filter(|s| is_field_path(s) && !any_kind.contains(*s))
        .map(str::to_string)
        .collect();
    assert!(
        unknown.is_empty(),
        "{REFERENCE_FILE} names fields no CRD has: {unknown:?}"
    );
}

/// README.md and every docs/*.md file, relative to the crate root.
fn documents() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut docs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("docs/: {e}"))
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

#[test]
fn the_readme_and_the_docs_name_only_fields_that_exist() {
    let any_kind: BTreeSet<String> = KINDS.iter().flat_map(|(_, f)| crd_paths(f)).collect();
    let docs = documents();
    assert!(docs.iter().any(|d| d == REFERENCE_FILE), "{docs:?}");
    for doc in docs {
        let text = read(&doc);
        // Everything under the title (the only level-1 heading), fenced code left out.
        let title = text.lines().next().unwrap_or_default();
        assert!(
            title.starts_with("# "),
            "{doc} does not start with its title"
        );
        let prose = section(&text, title);
        let unknown: BTreeSet<&str> = code_spans(&prose)
            .into_iter()
            .filter(|s| is_field_path(s) && !any_kind.contains(*s))
            .collect();
        assert!(
            unknown.is_empty(),
            "{doc} names fields no CRD has: {unknown:?}"
        );
    }
}

#[test]
fn every_crd_has_a_reference_subsection() {
    let crds: BTreeSet<(String, String)> = dlq_operator::crd::all_crds()
        .iter()
        .map(|c| {
            (
                c.spec.names.kind.clone(),
                dlq_operator::crd::crd_file_name(c),
            )
        })
        .collect();
    let kinds: BTreeSet<(String, String)> = KINDS
        .iter()
        .map(|(k, f)| (k.to_string(), f.to_string()))
        .collect();
    assert_eq!(kinds, crds, "KINDS must list every CRD of crd::all_crds()");
}

#[test]
fn values_table_matches_values_yaml() {
    let table = first_column_spans(&section(&read(VALUES_FILE), VALUES_HEADING));
    let values: Value =
        serde_yaml_ng::from_str(&read("charts/dlq-operator/values.yaml")).expect("values.yaml");
    let mut keys = BTreeSet::new();
    value_paths("", &values, &mut keys);
    let missing: Vec<&String> = keys.difference(&table).collect();
    let unknown: Vec<&String> = table.difference(&keys).collect();
    assert_same(
        &format!(
            "charts/dlq-operator/values.yaml keys vs {VALUES_FILE} \"{VALUES_HEADING}\" table"
        ),
        &missing,
        &unknown,
    );
}

#[test]
fn helpers_find_what_they_should() {
    let text = "# A\n## Reference\nx `spec.a.b` `spec: {}` `status.c[].d`\n```yaml\n# comment, not a heading\nx: `spec.code`\n```\n### K\n`spec.k`\n## Next\n`spec.z`\n# B\n`spec.y`\n";
    let reference = section(text, "## Reference");
    assert!(reference.contains("`spec.k`") && !reference.contains("spec.z"));
    assert!(!reference.contains("spec.code"), "fenced code is not prose");
    assert_eq!(section(&reference, "### K").trim(), "`spec.k`");
    let whole = section(text, "# A");
    assert!(
        whole.contains("spec.z") && !whole.contains("spec.y"),
        "{whole}"
    );
    let paths: Vec<&str> = code_spans(&reference)
        .into_iter()
        .filter(|s| is_field_path(s))
        .collect();
    assert_eq!(paths, ["spec.a.b", "status.c[].d", "spec.k"]);
    let rows = "| key | default |\n|---|---|\n| `a.b`, `a.c` | `x` |\n";
    assert_eq!(
        first_column_spans(rows).into_iter().collect::<Vec<_>>(),
        ["a.b", "a.c"]
    );
}
