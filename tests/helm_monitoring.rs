//! The chart's monitoring objects through the real Helm engine: the ServiceMonitor scrapes
//! the operator's metrics Service with the operator's labels, the Grafana dashboard
//! ConfigMap ships docs/grafana's dashboard, and the operator-health PrometheusRule passes
//! `promtool check rules` and its alerts fire (`promtool test rules`) when they should.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};

use common::helm::{find, render, skip, Helm, FULLNAME, NS};

#[test]
fn dashboard_configmap_ships_the_dashboard() {
    let root = common::root();
    let top =
        std::fs::read_to_string(root.join("dashboards/dlq-overview.json")).expect("dashboard");
    let copy =
        std::fs::read_to_string(root.join("charts/dlq-operator/dashboards/dlq-overview.json"))
            .expect("chart copy");
    assert!(top == copy, "charts/dlq-operator/dashboards/dlq-overview.json differs: cp dashboards/dlq-overview.json charts/dlq-operator/dashboards/");
    let Some(helm) = Helm::new("dashboard_configmap_ships_the_dashboard") else {
        return;
    };
    let off = render(&helm, &json!({}));
    assert!(
        !off.iter().any(|o| o["kind"] == "ConfigMap"),
        "no dashboard unless enabled"
    );
    let objects = render(
        &helm,
        &json!({"dashboard": {"enabled": true, "namespace": "grafana", "labels": {"x": "y"}}}),
    );
    let cm = find(&objects, "ConfigMap", &format!("{FULLNAME}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["labels"]["x"], "y");
    let shipped: Value =
        serde_json::from_str(cm["data"]["dlq-overview.json"].as_str().expect("json key"))
            .expect("dashboard JSON");
    let original: Value = serde_json::from_str(&top).expect("dashboard JSON");
    assert_eq!(shipped, original);
}

#[test]
fn service_monitor_scrapes_the_metrics_service_with_the_operators_labels() {
    let Some(helm) =
        Helm::new("service_monitor_scrapes_the_metrics_service_with_the_operators_labels")
    else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"serviceMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "kps"}}}),
    );
    let sm = find(&objects, "ServiceMonitor", FULLNAME);
    let svc = find(&objects, "Service", &format!("{FULLNAME}-metrics"));
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "kps");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "selector {k} matches the Service"
        );
    }
    // The Deployment's Pods carry no `component: metrics` label, so only the Service matches.
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!([NS]));
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], svc["spec"]["ports"][0]["name"]);
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["interval"], "15s");
    assert_eq!(
        ep["honorLabels"], true,
        "the series' namespace label is the DeadLetterQueue's"
    );
    let allowed: BTreeSet<&str> =
        ["port", "path", "interval", "scrapeTimeout", "honorLabels"].into();
    for k in ep.as_object().expect("endpoint").keys() {
        assert!(
            allowed.contains(k.as_str()),
            "unexpected endpoint field {k}"
        );
    }
}

/// `promtool` on PATH, or `None` after reporting `test` as skipped.
fn promtool(test: &str) -> Option<()> {
    if Command::new("promtool").arg("--version").output().is_ok() {
        Some(())
    } else {
        skip(
            test,
            "promtool is not installed (Debian package prometheus; .ci/run installs it)",
        );
        None
    }
}

fn promtool_run(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    (out.status.success(), common::text(&out))
}

#[test]
fn operator_health_rules_pass_promtool_and_fire_when_they_should() {
    let test = "operator_health_rules_pass_promtool_and_fire_when_they_should";
    let Some(helm) = Helm::new(test) else {
        return;
    };
    let Some(()) = promtool(test) else {
        return;
    };
    let objects = render(
        &helm,
        &json!({"serviceMonitor": {"enabled": true},
                "prometheusRule": {"enabled": true, "downFor": "5m", "reconcileErrorsFor": "10m",
                                   "alertLabels": {"team": "messaging"}}}),
    );
    let rule = find(&objects, "PrometheusRule", FULLNAME);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rule["spec"]).expect("yaml"),
    )
    .expect("write");
    let (ok, out) = promtool_run(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules:\n{out}");

    let job = format!("{FULLNAME}-metrics");
    let test_file = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {   // Down for 10 minutes: fires after downFor (5m), not before.
                "interval": "1m",
                "input_series": [
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"a\"}}"), "values": "0x10"},
                    {"series": format!("dlq_operator_reconcile_total{{job=\"{job}\",namespace=\"{NS}\",kind=\"DeadLetterQueue\",result=\"success\"}}"), "values": "0+1x20"}
                ],
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "DlqOperatorDown", "exp_alerts": []},
                    {"eval_time": "6m", "alertname": "DlqOperatorDown", "exp_alerts": [
                        {"exp_labels": {"severity": "critical", "team": "messaging", "namespace": NS, "job": job},
                         "exp_annotations": {
                            "summary": "dlq-operator is down",
                            "description": rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]}}]},
                    {"eval_time": "15m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": []}
                ]
            },
            {   // One replica up (the other down), errors for 20 minutes: not down; errors fire after 10m.
                "interval": "1m",
                "input_series": [
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"a\"}}"), "values": "1x20"},
                    {"series": format!("up{{job=\"{job}\",namespace=\"{NS}\",pod=\"b\"}}"), "values": "0x20"},
                    {"series": format!("dlq_operator_reconcile_total{{job=\"{job}\",namespace=\"{NS}\",kind=\"DeadLetterQueue\",result=\"unreachable\"}}"), "values": "0+3x20"}
                ],
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "DlqOperatorDown", "exp_alerts": []},
                    {"eval_time": "8m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": []},
                    {"eval_time": "18m", "alertname": "DlqOperatorReconcileErrors", "exp_alerts": [
                        {"exp_labels": {"severity": "warning", "team": "messaging", "namespace": NS, "job": job, "kind": "DeadLetterQueue", "result": "unreachable"},
                         "exp_annotations": {
                            "summary": "dlq-operator reconciles of DeadLetterQueue fail: unreachable",
                            "description": rule["spec"]["groups"][0]["rules"][1]["annotations"]["description"].as_str().expect("description")
                                .replace("{{ $labels.kind }}", "DeadLetterQueue").replace("{{ $labels.result }}", "unreachable")}}]}
                ]
            },
            {   // No target at all (never scraped): absent() makes it fire.
                "interval": "1m",
                "input_series": [
                    {"series": "up{job=\"something-else\",namespace=\"x\"}", "values": "1x10"}
                ],
                "alert_rule_test": [
                    {"eval_time": "6m", "alertname": "DlqOperatorDown", "exp_alerts": [
                        {"exp_labels": {"severity": "critical", "team": "messaging", "namespace": NS, "job": job},
                         "exp_annotations": {
                            "summary": "dlq-operator is down",
                            "description": rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]}}]}
                ]
            }
        ]
    });
    std::fs::write(
        dir.path().join("test.yaml"),
        serde_yaml_ng::to_string(&test_file).expect("yaml"),
    )
    .expect("write");
    let (ok, out) = promtool_run(dir.path(), &["test", "rules", "test.yaml"]);
    assert!(ok, "promtool test rules:\n{out}");
}
