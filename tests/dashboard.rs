//! The Grafana dashboard `dashboards/dlq-overview.json` against the operator's metrics:
//! every PromQL query in it (panel targets and the `label_values(…)` selectors of query
//! variables), once Grafana's variables are substituted, parses with `promql-parser` and
//! selects only metrics that `Metrics::exported_names` says `/metrics` exports, and passes
//! `promtool check rules` (Debian package `prometheus`, installed by `.ci/run`; skipped
//! when absent). It also checks what users of the dashboard rely on: its uid, the
//! `namespace` and `name` variables, the `${datasource}` datasource everywhere, unique
//! panel ids, the threshold line at 1 on the ratio panel, the alert-state names, and that
//! every per-resource query filters on both variables. A renamed or removed metric, or a
//! typo in a query, fails here instead of showing an empty panel.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector};
use serde_json::{json, Value};

use dlq_operator::metrics::Metrics;
use dlq_operator::monitor::AlertState;

/// The datasource every panel, target and query variable uses.
const DATASOURCE_UID: &str = "${datasource}";

/// Grafana's built-in variables, replaced by a value of the kind PromQL expects there.
const BUILTIN_VARIABLES: &[(&str, &str)] = &[
    ("__rate_interval", "5m"),
    ("__interval", "1m"),
    ("__interval_ms", "60000"),
    ("__range", "1h"),
    ("__range_s", "3600"),
    ("__range_ms", "3600000"),
];

/// The dashboard's variables as "All" selects them: used in regex matchers (`=~`).
const ALL_VALUES: &[(&str, &str)] = &[("namespace", ".*"), ("name", ".*")];

/// The dashboard's variables replaced by markers, to see which matcher uses which variable.
const MARKERS: &[(&str, &str)] = &[("namespace", "VAR_namespace"), ("name", "VAR_name")];

fn dashboard_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("dashboards/dlq-overview.json")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(dashboard_path()).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel, rows and the panels nested in (collapsed) rows included.
fn all_panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for p in panels.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

fn is_row(panel: &Value) -> bool {
    panel["type"] == "row"
}

fn variables(dashboard: &Value) -> &Vec<Value> {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
}

fn targets(panel: &Value) -> &[Value] {
    panel["targets"].as_array().map_or(&[], |t| t.as_slice())
}

/// The PromQL expressions of `panel`'s targets.
fn panel_exprs(panel: &Value) -> Vec<String> {
    targets(panel)
        .iter()
        .map(|t| t["expr"].as_str().expect("target expr").to_string())
        .collect()
}

/// The query of a query variable: a plain string, or `{"query": …}` as newer Grafana saves it.
fn variable_query(variable: &Value) -> &str {
    let q = &variable["query"];
    q.as_str()
        .or_else(|| q["query"].as_str())
        .expect("variable query")
}

/// The PromQL inside a variable query: the selector of `label_values(SELECTOR, label)`,
/// the expression of `query_result(EXPR)`, `None` for `label_values(label)` and others
/// without one.
fn variable_promql(query: &str) -> Option<String> {
    let query = query.trim();
    if let Some(inner) = query
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return inner
            .rsplit_once(',')
            .map(|(selector, _label)| selector.trim().to_string());
    }
    query
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
        .map(|e| e.trim().to_string())
}

/// Every PromQL expression of the dashboard, with where it is, unsubstituted.
fn all_exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in all_panels(dashboard) {
        for e in panel_exprs(p) {
            out.push((format!("panel {}", p["title"]), e));
        }
    }
    for v in variables(dashboard).iter().filter(|v| v["type"] == "query") {
        if let Some(e) = variable_promql(variable_query(v)) {
            out.push((format!("variable {}", v["name"]), e));
        }
    }
    out
}

/// `expr` with Grafana's variables (`$x`, `${x}`, `${x:format}`, `[[x]]`) replaced by
/// `values` or the built-in ones; panics on a variable it does not know.
fn substitute(expr: &str, values: &[(&str, &str)]) -> String {
    let re = regex::Regex::new(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]").expect("regex");
    re.replace_all(expr, |c: &regex::Captures| {
        let name = c.iter().skip(1).flatten().next().expect("a name").as_str();
        values
            .iter()
            .chain(BUILTIN_VARIABLES)
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("unknown Grafana variable ${name} in {expr}"))
            .1
            .to_string()
    })
    .into_owned()
}

/// Every vector selector of `expr` (those inside range selectors included).
fn selectors(expr: &Expr) -> Vec<&VectorSelector> {
    let mut out = Vec::new();
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        match e {
            Expr::VectorSelector(vs) => out.push(vs),
            Expr::MatrixSelector(ms) => out.push(&ms.vs),
            Expr::Aggregate(a) => {
                stack.push(&a.expr);
                stack.extend(a.param.as_deref());
            }
            Expr::Unary(u) => stack.push(&u.expr),
            Expr::Binary(b) => stack.extend([&*b.lhs, &*b.rhs]),
            Expr::Paren(p) => stack.push(&p.expr),
            Expr::Subquery(s) => stack.push(&s.expr),
            Expr::Call(c) => stack.extend(c.args.args.iter().map(|a| &**a)),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }
    out
}

/// The metric a selector selects: its name, or its `__name__="…"` matcher.
fn metric_name(vs: &VectorSelector) -> Option<String> {
    vs.name.clone().or_else(|| {
        vs.matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.clone())
    })
}

/// The metrics `expr` selects that are not in `exported` (`<no metric name>` for a
/// selector without one), or the parse error.
fn unknown_metrics(expr: &str, exported: &[String]) -> Result<Vec<String>, String> {
    let ast = parser::parse(expr)?;
    Ok(selectors(&ast)
        .into_iter()
        .map(|vs| metric_name(vs).unwrap_or_else(|| "<no metric name>".into()))
        .filter(|n| !exported.contains(n))
        .collect())
}

/// Per-resource metrics: their series carry the DeadLetterQueue's `namespace` and `name`
/// (the replay families too: a replay is counted under the DeadLetterQueue it replays;
/// and the retry router's, counted under the DeadLetterQueue whose inbox it consumes).
fn is_per_resource(metric: &str) -> bool {
    metric == "dlq_queue_depth"
        || metric == "dlq_growth_per_minute"
        || metric.starts_with("dlq_backlog_")
        || metric == "dlq_replayed_messages_total"
        || metric == "dlq_compensation_success_ratio"
        || metric.starts_with("dlq_router_")
        || metric.starts_with("dlq_maturity_")
}

/// The labels of the `by` clause of aggregation `expr` (panics when it is not one).
fn by_labels(expr: &Expr, panel: &str) -> Vec<String> {
    let Expr::Aggregate(agg) = expr else {
        panic!("{panel}: not an aggregation: {expr:?}")
    };
    match &agg.modifier {
        Some(parser::LabelModifier::Include(labels)) => labels.labels.clone(),
        other => panic!("{panel}: no `by` clause: {other:?}"),
    }
}

/// Whether `vs` has the regex matcher `label=~"VALUE"`.
fn has_regex_matcher(vs: &VectorSelector, label: &str, value: &str) -> bool {
    vs.matchers
        .matchers
        .iter()
        .any(|m| m.name == label && m.value == value && matches!(m.op, MatchOp::Re(_)))
}

/// `promtool` on PATH or in /usr/bin, or `None`.
fn promtool() -> Option<String> {
    ["promtool", "/usr/bin/promtool"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .map(str::to_string)
}

/// `promtool check rules` on one recording rule per expression: success and its output.
fn promtool_check(promtool: &str, exprs: &[String]) -> (bool, String) {
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("dashboard_query_{i}"), "expr": e}))
        .collect();
    let file = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&file).expect("yaml")).expect("write");
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn every_query_parses_and_selects_only_exported_metrics() {
    let exported = Metrics::new().exported_names();
    let exprs = all_exprs(&dashboard());
    assert!(exprs.len() >= 10, "{exprs:?}");
    for (place, raw) in &exprs {
        let expr = substitute(raw, ALL_VALUES);
        match unknown_metrics(&expr, &exported) {
            Ok(unknown) => assert!(
                unknown.is_empty(),
                "{place}: {raw} selects {unknown:?}, not exported (exported: {exported:?})"
            ),
            Err(e) => panic!("{place}: {expr} does not parse: {e}"),
        }
    }
}

#[test]
fn the_metric_check_reports_an_unknown_metric() {
    let exported = Metrics::new().exported_names();
    let unknown = unknown_metrics("rate(dlq_not_a_metric_total[5m])", &exported);
    assert_eq!(unknown, Ok(vec!["dlq_not_a_metric_total".to_string()]));
    let bare_histogram = "sum(rate(dlq_operator_reconcile_duration_seconds[5m]))";
    assert_eq!(
        unknown_metrics(bare_histogram, &exported),
        Ok(vec!["dlq_operator_reconcile_duration_seconds".to_string()])
    );
    assert_eq!(
        unknown_metrics("rate(dlq_operator_reconcile_total[5m])", &exported),
        Ok(vec![])
    );
    assert!(unknown_metrics("sum(", &exported).is_err());
}

#[test]
fn every_query_passes_promtool_check() {
    let Some(promtool) = promtool() else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED dashboard promtool check: promtool not found"
        );
        return;
    };
    let exprs: Vec<String> = all_exprs(&dashboard())
        .iter()
        .map(|(_, e)| substitute(e, ALL_VALUES))
        .collect();
    let (ok, out) = promtool_check(&promtool, &exprs);
    assert!(
        ok && out.contains("SUCCESS"),
        "promtool check rules:\n{out}"
    );
    // A broken query must fail the same check, so the check is proven to bite.
    let (ok, _) = promtool_check(&promtool, &["sum(rate(x[5m])".to_string()]);
    assert!(!ok, "promtool accepted a broken expression");
}

#[test]
fn uid_variables_and_datasources() {
    let d = dashboard();
    assert_eq!(d["uid"], "dlq-overview");
    assert_eq!(d["editable"], true);
    let vars = variables(&d);
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for name in ["namespace", "name"] {
        let v = var(name);
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(
            (&v["multi"], &v["includeAll"]),
            (&json!(true), &json!(true))
        );
        assert_eq!(v["datasource"]["uid"], DATASOURCE_UID, "{name}");
        // Grafana shows `definition` in the editor: it must be the query that runs.
        assert_eq!(v["definition"], variable_query(v), "{name}");
    }
    let name_query = variable_query(var("name"));
    assert!(
        name_query.contains(r#"namespace=~"$namespace""#),
        "{name_query}"
    );
    for p in all_panels(&d).into_iter().filter(|p| !is_row(p)) {
        assert_eq!(p["datasource"]["type"], "prometheus", "{}", p["title"]);
        assert_eq!(p["datasource"]["uid"], DATASOURCE_UID, "{}", p["title"]);
        for t in targets(p) {
            assert_eq!(t["datasource"]["uid"], DATASOURCE_UID, "{}", p["title"]);
        }
    }
}

#[test]
fn panels_have_unique_ids_and_targets() {
    let d = dashboard();
    let panels = all_panels(&d);
    let ids: Vec<u64> = panels
        .iter()
        .map(|p| p["id"].as_u64().expect("panel id"))
        .collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate panel ids: {ids:?}");
    for p in panels.iter().filter(|p| !is_row(p)) {
        assert!(!targets(p).is_empty(), "panel {} has no target", p["title"]);
        let refs: BTreeSet<&str> = targets(p)
            .iter()
            .map(|t| t["refId"].as_str().expect("refId"))
            .collect();
        assert_eq!(refs.len(), targets(p).len(), "refIds of {}", p["title"]);
    }
}

/// The first non-row panel one of whose queries contains `text`.
fn panel_querying<'a>(d: &'a Value, text: &str) -> &'a Value {
    all_panels(d)
        .into_iter()
        .find(|p| panel_exprs(p).iter().any(|e| e.contains(text)))
        .unwrap_or_else(|| panic!("no panel queries {text}"))
}

#[test]
fn ratio_panel_draws_the_threshold_at_one() {
    let d = dashboard();
    let defaults = &panel_querying(&d, "dlq_backlog_ratio")["fieldConfig"]["defaults"];
    let steps = defaults["thresholds"]["steps"].as_array().expect("steps");
    assert!(
        steps.iter().any(|s| s["value"].as_f64() == Some(1.0)),
        "{steps:?}"
    );
    let style = defaults["custom"]["thresholdsStyle"]["mode"]
        .as_str()
        .expect("thresholdsStyle");
    assert!(style.starts_with("line"), "{style}");
}

#[test]
fn alert_state_panel_names_the_operators_states() {
    let d = dashboard();
    let mappings = &panel_querying(&d, "dlq_backlog_alert_state")["fieldConfig"]["defaults"]
        ["mappings"][0]["options"];
    for state in [
        AlertState::Inactive,
        AlertState::Pending { since: 0 },
        AlertState::Firing { since: 0 },
    ] {
        assert_eq!(
            mappings[state.code().to_string()]["text"],
            state.name(),
            "{mappings}"
        );
    }
}

#[test]
fn replay_panels_show_outcomes_and_the_ratio() {
    let d = dashboard();
    let replayed = panel_querying(&d, "dlq_replayed_messages_total");
    assert_eq!(replayed["title"], "Replayed messages");
    let ast = parser::parse(&substitute(&panel_exprs(replayed)[0], ALL_VALUES)).expect("parses");
    // A counter is shown as a rate, split by outcome (replayed, skipped, failed).
    let Expr::Aggregate(sum) = &ast else {
        panic!("Replayed messages: not an aggregation: {ast:?}")
    };
    let by: Vec<&str> = match &sum.modifier {
        Some(parser::LabelModifier::Include(labels)) => {
            labels.labels.iter().map(String::as_str).collect()
        }
        other => panic!("Replayed messages: no `by` clause: {other:?}"),
    };
    assert!(by.contains(&"outcome"), "{by:?}");
    assert!(
        matches!(&*sum.expr, Expr::Call(c) if c.func.name == "rate"),
        "{:?}",
        sum.expr
    );
    let ratio = panel_querying(&d, "dlq_compensation_success_ratio");
    assert_eq!(ratio["title"], "Compensation success ratio");
    assert_eq!(ratio["fieldConfig"]["defaults"]["unit"], "percentunit");
}

#[test]
fn router_panels_show_the_inbox_its_consumers_and_what_the_routers_do() {
    let d = dashboard();
    let depth = panel_querying(&d, "role=\"inbox\"");
    assert_eq!(depth["title"], "Router inbox depth");
    let consumers = panel_querying(&d, "dlq_router_inbox_consumers");
    assert_eq!(consumers["title"], "Router inbox consumers");
    // 0 consumers is the alarm: drawn red below 1.
    let steps = consumers["fieldConfig"]["defaults"]["thresholds"]["steps"]
        .as_array()
        .expect("steps");
    assert_eq!(steps[0]["color"], "red");
    assert_eq!(steps[1]["value"].as_f64(), Some(1.0));
    for (metric, title, split) in [
        (
            "dlq_router_messages_total",
            "Routed messages",
            &["namespace", "name", "decision", "tier"][..],
        ),
        (
            "dlq_router_publish_failures_total",
            "Router publish failures",
            &["namespace", "name", "error"][..],
        ),
    ] {
        let p = panel_querying(&d, metric);
        assert_eq!(p["title"], title);
        let ast = parser::parse(&substitute(&panel_exprs(p)[0], ALL_VALUES)).expect("parses");
        assert_eq!(by_labels(&ast, title), split, "{title}");
        let Expr::Aggregate(sum) = &ast else {
            unreachable!("by_labels checked it")
        };
        assert!(
            matches!(&*sum.expr, Expr::Call(c) if c.func.name == "rate"),
            "{title}: a counter shown as a rate: {:?}",
            sum.expr
        );
    }
}

#[test]
fn maturity_panels_show_the_score_worst_first_and_each_area() {
    let d = dashboard();
    let score = panel_querying(&d, "dlq_maturity_score");
    let expr = &panel_exprs(score)[0];
    assert!(expr.starts_with("sort("), "lowest (worst) first: {expr}");
    let defaults = &score["fieldConfig"]["defaults"];
    assert_eq!((&defaults["min"], &defaults["max"]), (&json!(0), &json!(1)));
    assert_eq!(targets(score)[0]["legendFormat"], "{{namespace}}/{{name}}");
    let area = panel_querying(&d, "dlq_maturity_area_score");
    assert!(
        targets(area)[0]["legendFormat"]
            .as_str()
            .is_some_and(|l| l.contains("{{area}}")),
        "{area}"
    );
    // The metrics the panels show are the ones the operator exports.
    let exported = Metrics::new().exported_names();
    for name in ["dlq_maturity_score", "dlq_maturity_area_score"] {
        assert!(exported.contains(&name.to_string()), "{exported:?}");
    }
}

#[test]
fn per_resource_queries_filter_on_namespace_and_name() {
    let d = dashboard();
    let mut checked = 0;
    for p in all_panels(&d) {
        for raw in panel_exprs(p) {
            let ast = parser::parse(&substitute(&raw, MARKERS)).expect("parses");
            for vs in selectors(&ast) {
                let metric = metric_name(vs).unwrap_or_default();
                if !is_per_resource(&metric) {
                    continue;
                }
                for (label, marker) in MARKERS {
                    assert!(
                        has_regex_matcher(vs, label, marker),
                        "panel {}: {metric} in {raw} lacks {label}=~\"${label}\"",
                        p["title"]
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} per-resource selectors");
}

#[test]
fn file_is_pretty_printed_with_two_spaces() {
    let text = std::fs::read_to_string(dashboard_path()).expect("read");
    assert!(text.ends_with("}\n") && !text.ends_with("\n\n"));
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("  \"")));
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        assert!(
            indent % 2 == 0 && !line.starts_with('\t'),
            "bad indent: {line}"
        );
    }
}
