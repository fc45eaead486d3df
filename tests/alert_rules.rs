//! The generated alert rules against the real `promtool` (Debian package `prometheus`,
//! installed by `.ci/run`): every rule file passes `promtool check rules`, and for several
//! depth series the operator's evaluator (`monitor::Evaluator`) and Prometheus (through
//! `promtool test rules`) say firing / not firing at the same evaluation times — the
//! expected alerts of each promtool test are computed by the evaluator, so any
//! disagreement fails the test.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use dlq_operator::alerts::{
    self, ABSENT_ALERT, BACKLOG_ALERT, BROKER_ALERT, GROWTH_ALERT, ROUTER_INBOX_ALERT,
};
use dlq_operator::crd::DeadLetterQueue;
use dlq_operator::monitor::{AlertState, Evaluator, Params};

/// `promtool` on PATH, or `None` after reporting `test` as skipped.
fn promtool(test: &str) -> Option<&'static str> {
    let ok = Command::new("promtool").arg("--version").output().is_ok();
    if !ok {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: promtool is not installed (Debian package prometheus; .ci/run installs it)"
        );
        return None;
    }
    Some("promtool")
}

fn run(promtool: &str, dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `promtool test rules` of rule group `group` with `input_series` and `alert_rule_test`
/// (1 minute series and evaluation intervals): success and promtool's output.
fn promtool_test(
    promtool: &str,
    group: &Value,
    input_series: Value,
    alert_rule_test: Value,
) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_yaml(dir.path(), "rules.yaml", &json!({"groups": [group]}));
    write_yaml(
        dir.path(),
        "test.yaml",
        &json!({
            "rule_files": ["rules.yaml"],
            "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series,
                       "alert_rule_test": alert_rule_test}],
        }),
    );
    run(promtool, dir.path(), &["test", "rules", "test.yaml"])
}

fn write_yaml(dir: &Path, name: &str, v: &Value) {
    std::fs::write(dir.join(name), serde_yaml_ng::to_string(v).expect("yaml")).expect("write");
}

fn resource(monitoring: Value) -> (DeadLetterQueue, Params) {
    resource_with(monitoring, json!({}))
}

/// [`resource`] with `spec.router` set to `router`.
fn resource_with(monitoring: Value, router: Value) -> (DeadLetterQueue, Params) {
    let spec = json!({
        "broker": {"secretRef": {"name": "rabbit"}},
        "source": {"queue": "orders"},
        "retryPolicyRef": {"name": "p"},
        "monitoring": monitoring,
        "router": router,
    });
    let mut d = DeadLetterQueue::new("orders", serde_json::from_value(spec).expect("spec"));
    d.metadata.namespace = Some("shop".into());
    let p = Params::from_spec(&d.spec.monitoring).expect("valid monitoring");
    (d, p)
}

#[test]
fn generated_rules_pass_promtool_check() {
    let Some(promtool) = promtool("generated_rules_pass_promtool_check") else {
        return;
    };
    let (_, planned) = dlq_operator::standalone::load_and_plan(&[common::root().join("examples")])
        .expect("examples");
    assert!(!planned.is_empty());
    let mut resources: Vec<(DeadLetterQueue, Params)> = Vec::new();
    let m = dlq_operator::manifest::load_paths(&[common::root().join("examples")]).expect("load");
    for d in &m.dead_letter_queues {
        let p = Params::from_spec(&d.object.spec.monitoring).expect("params");
        resources.push((d.object.clone(), p));
    }
    resources.push(resource(
        json!({"baseline": {"mode": "Rolling", "window": "2h"},
        "thresholdFactor": 3.0, "minHeadroom": 50, "for": "10m", "growthPerMinute": 20.5,
        "keepFiringFor": "15m"}),
    ));
    // Template syntax in what users write (queue name, severity, runbook URL) is text,
    // not template code: without escaping promtool refuses the file.
    let (mut weird, p) = resource(json!({"threshold": 10}));
    weird.metadata.name = Some("weird".into());
    weird.spec.source.queue = "q{{ x }}".into();
    weird.spec.alerting.prometheus_rule.severity = "{{ $labels.nope".into();
    weird.spec.alerting.prometheus_rule.runbook_url = Some("https://runbooks/{{y}}".into());
    resources.push((weird, p));
    // Router mode adds the inbox rules (two of one name, told apart by `reason`).
    let (mut routed, p) = resource_with(
        json!({"threshold": 10}),
        json!({"enabled": true, "backlogThreshold": 500}),
    );
    routed.metadata.name = Some("routed".into());
    resources.push((routed, p));
    let items: Vec<(&DeadLetterQueue, &Params)> = resources.iter().map(|(d, p)| (d, p)).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    write_yaml(dir.path(), "rules.yaml", &alerts::rule_file(&items));
    let (ok, out) = run(promtool, dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    // And a rule promtool must refuse, so the check itself is proven to bite.
    std::fs::write(
        dir.path().join("bad.yaml"),
        "groups:\n- name: x\n  rules:\n  - alert: X\n    expr: sum(\n",
    )
    .expect("write");
    let (ok, _) = run(promtool, dir.path(), &["check", "rules", "bad.yaml"]);
    assert!(!ok, "promtool accepted a broken expression");
}

/// Series values in promtool's notation (`_` for a missing sample).
fn series_values(values: &[Option<f64>]) -> String {
    values
        .iter()
        .map(|v| match v {
            Some(x) => format!("{x}"),
            None => "_".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Feeds `depths` (one per minute) to the evaluator and to promtool; the expected alerts
/// of the promtool test are the evaluator's states. Panics with promtool's output on any
/// disagreement.
fn agree(scenario: &str, monitoring: Value, depths: &[u64]) -> Vec<(AlertState, AlertState)> {
    let promtool = promtool(scenario).expect("checked by the caller");
    let (d, p) = resource(monitoring);
    let mut ev = Evaluator::new(p.clone());
    let evals: Vec<_> = depths
        .iter()
        .enumerate()
        .map(|(i, &depth)| ev.observe(i as u64 * 60_000, depth))
        .collect();
    let labels = r#"namespace="shop", name="orders""#;
    let mut input_series = vec![
        json!({"series": format!(r#"dlq_queue_depth{{{labels}, role="dead_letter", queue="orders.dlq"}}"#),
               "values": series_values(&depths.iter().map(|&x| Some(x as f64)).collect::<Vec<_>>())}),
        json!({"series": format!("dlq_backlog_baseline{{{labels}}}"),
               "values": series_values(&evals.iter().map(|e| Some(e.baseline)).collect::<Vec<_>>())}),
    ];
    if evals.iter().all(|e| e.threshold.is_some()) {
        input_series.push(
            json!({"series": format!("dlq_backlog_threshold{{{labels}}}"),
            "values": series_values(&evals.iter().map(|e| e.threshold).collect::<Vec<_>>())}),
        );
    }
    if p.growth_per_minute.is_some() {
        input_series.push(json!({"series": format!("dlq_growth_per_minute{{{labels}}}"),
            "values": series_values(&evals.iter().map(|e| e.growth_per_minute).collect::<Vec<_>>())}));
    }
    let group = alerts::rule_group(&d, &p);
    let annotations = |alert: &str| -> Value {
        group["rules"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["alert"] == alert))
            .map(|r| r["annotations"].clone())
            .expect("rule")
    };
    // One promtool alert test: at minute `i`, `alert` is expected firing (with its
    // annotations, `$value` printed with `format` rendered as `value`) or not.
    let alert_test = |i: usize, alert: &str, state: AlertState, format: &str, value: String| {
        let mut expected = Vec::new();
        if let AlertState::Firing { .. } = state {
            let mut ann = annotations(alert);
            let desc = ann["description"]
                .as_str()
                .unwrap_or_default()
                .replace(&format!("{{{{ printf \"{format}\" $value }}}}"), &value);
            ann["description"] = json!(desc);
            expected.push(json!({
                "exp_labels": {"severity": "warning", "namespace": "shop", "name": "orders"},
                "exp_annotations": ann,
            }));
        }
        json!({"eval_time": format!("{i}m"), "alertname": alert, "exp_alerts": expected})
    };
    let mut tests = Vec::new();
    // While an alert is kept firing by keep_firing_for, Prometheus reports the value of
    // the last evaluation where the expression held.
    let (mut last_ratio, mut last_growth) = (0.0, 0.0);
    for (i, e) in evals.iter().enumerate() {
        if let Some(r) = e.ratio.filter(|r| *r >= 1.0) {
            last_ratio = r;
        }
        if let (Some(g), Some(limit)) = (e.growth_per_minute, p.growth_per_minute) {
            if g >= limit {
                last_growth = g;
            }
        }
        tests.push(alert_test(
            i,
            BACKLOG_ALERT,
            e.state,
            "%.2f",
            format!("{last_ratio:.2}"),
        ));
        if p.growth_per_minute.is_some() {
            tests.push(alert_test(
                i,
                GROWTH_ALERT,
                e.growth_state,
                "%.1f",
                format!("{last_growth:.1}"),
            ));
        }
    }
    let (ok, out) = promtool_test(promtool, &group, json!(input_series), json!(tests));
    assert!(
        ok,
        "{scenario}: Prometheus and the evaluator disagree:\n{out}\nevaluator: {:?}",
        evals
            .iter()
            .map(|e| (e.state.name(), e.ratio))
            .collect::<Vec<_>>()
    );
    evals.iter().map(|e| (e.state, e.growth_state)).collect()
}

fn firing_minutes(states: &[(AlertState, AlertState)], growth: bool) -> Vec<usize> {
    states
        .iter()
        .enumerate()
        .filter(|(_, (b, g))| matches!(if growth { g } else { b }, AlertState::Firing { .. }))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn evaluator_and_prometheus_agree_on_every_scenario() {
    if promtool("evaluator_and_prometheus_agree_on_every_scenario").is_none() {
        return;
    }
    // Baseline 100, threshold 1100: R = (D − 100) / 1000; `for` 3m.
    let backlog = json!({"interval": "1m", "baseline": {"mode": "Static", "value": 100},
                         "threshold": 1100, "for": "3m"});
    let steady = agree("steady", backlog.clone(), &[100; 10]);
    assert!(firing_minutes(&steady, false).is_empty());

    let spike = agree(
        "short spike",
        backlog.clone(),
        &[100, 100, 2100, 2100, 2100, 100, 100, 100],
    );
    assert!(
        firing_minutes(&spike, false).is_empty(),
        "a spike shorter than for never fires"
    );

    let sustained = agree(
        "sustained breach",
        backlog.clone(),
        &[100, 2100, 2100, 2100, 2100, 2100, 2100],
    );
    assert_eq!(
        firing_minutes(&sustained, false),
        [4, 5, 6],
        "pending at 1m, firing from 1m + 3m"
    );

    let recovery = agree(
        "recovery",
        backlog.clone(),
        &[100, 1100, 1600, 2100, 2100, 2100, 600, 100, 100],
    );
    assert_eq!(
        firing_minutes(&recovery, false),
        [4, 5],
        "resolves at the first sample below"
    );

    let mut keep = backlog.clone();
    keep["keepFiringFor"] = json!("2m");
    let dip = agree(
        "dip with keepFiringFor",
        keep,
        &[2100, 2100, 2100, 2100, 100, 2100, 100, 100, 100, 100],
    );
    assert_eq!(
        firing_minutes(&dip, false),
        [3, 4, 5, 6, 7],
        "one dip does not resolve it"
    );

    // Growth: +60 messages a minute against a limit of 50/min, far below the threshold.
    let growth = json!({"interval": "1m", "baseline": {"mode": "Static", "value": 0},
                        "threshold": 1000000, "for": "2m", "growthPerMinute": 50.0});
    let depths: Vec<u64> = (0..6)
        .map(|i| i * 60)
        .chain([300, 300, 300, 300, 300, 300, 300])
        .collect();
    let g = agree("growth", growth, &depths);
    assert!(firing_minutes(&g, false).is_empty());
    assert!(
        !firing_minutes(&g, true).is_empty(),
        "growth fires on its own: {g:?}"
    );

    // A learned baseline: the threshold moves with it, and both sides still agree.
    let rolling = json!({"interval": "1m", "baseline": {"mode": "Rolling", "window": "30m"},
                         "thresholdFactor": 2.0, "minHeadroom": 10, "for": "2m"});
    let r = agree(
        "rolling baseline",
        rolling,
        &[40, 40, 40, 40, 500, 500, 500, 500, 40, 40],
    );
    assert_eq!(firing_minutes(&r, false), [6, 7]);
}

#[test]
fn absent_rule_fires_when_the_metrics_stop() {
    let Some(promtool) = promtool("absent_rule_fires_when_the_metrics_stop") else {
        return;
    };
    let (d, p) = resource(json!({"interval": "1m", "threshold": 100, "for": "2m"}));
    let group = alerts::rule_group(&d, &p);
    let ann = group["rules"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["alert"] == ABSENT_ALERT))
        .map(|r| r["annotations"].clone())
        .expect("absent rule");
    // absent() carries the selector's equality labels.
    let labels = json!({"severity": "warning", "namespace": "shop", "name": "orders",
                        "role": "dead_letter"});
    // Samples for 0–3m, then nothing: absent once the last sample leaves the 5m lookback
    // (after 8m), firing 2m later.
    let (ok, out) = promtool_test(
        promtool,
        &group,
        json!([{"series": r#"dlq_queue_depth{namespace="shop", name="orders", role="dead_letter", queue="orders.dlq"}"#,
                "values": "0 0 0 0"}]),
        json!([
            {"eval_time": "3m", "alertname": ABSENT_ALERT, "exp_alerts": []},
            {"eval_time": "8m", "alertname": ABSENT_ALERT, "exp_alerts": []},
            {"eval_time": "11m", "alertname": ABSENT_ALERT,
             "exp_alerts": [{"exp_labels": labels, "exp_annotations": ann}]},
        ]),
    );
    assert!(ok, "promtool test rules:\n{out}");
}

/// The backlog rule over a broker outage: the operator's series for one resource per
/// minute as it exports them — firing from 3m on (ratio 2, alert state 2), then at 6m the
/// broker cannot be read (its depth, baseline, threshold, ratio and alert state series are
/// removed: stale; `dlq_broker_up` 0), back at 12m with the backlog still high, resolved
/// at 14m. `pending_at_loss`: the outage starts while the alert is only pending (alert
/// state 1) instead.
fn outage_scenario(promtool: &str, pending_at_loss: bool) -> (bool, String) {
    let (d, p) = resource(
        json!({"interval": "1m", "baseline": {"mode": "Static", "value": 100},
                                 "threshold": 1100, "for": "3m"}),
    );
    let group = alerts::rule_group(&d, &p);
    let labels = r#"namespace="shop", name="orders""#;
    // Minutes 0-5 read, 6-11 unreadable, 12-15 read again.
    let depth = "2100 2100 2100 2100 2100 2100 stale _ _ _ _ _ 2100 2100 100 100";
    let fixed = |v: &str| format!("{v} {v} {v} {v} {v} {v} stale _ _ _ _ _ {v} {v} {v} {v}");
    let state = if pending_at_loss {
        "0 0 0 1 1 1 stale _ _ _ _ _ 1 1 0 0"
    } else {
        "1 1 1 2 2 2 stale _ _ _ _ _ 2 2 0 0"
    };
    let ratio = "2 2 2 2 2 2 stale _ _ _ _ _ 2 2 0 0";
    let series = json!([
        {"series": format!(r#"dlq_queue_depth{{{labels}, role="dead_letter", queue="orders.dlq"}}"#), "values": depth},
        {"series": format!("dlq_backlog_baseline{{{labels}}}"), "values": fixed("100")},
        {"series": format!("dlq_backlog_threshold{{{labels}}}"), "values": fixed("1100")},
        {"series": format!("dlq_backlog_ratio{{{labels}}}"), "values": ratio},
        {"series": format!("dlq_backlog_alert_state{{{labels}}}"), "values": state},
        {"series": format!("dlq_broker_up{{{labels}}}"), "values": "1 1 1 1 1 1 0 0 0 0 0 0 1 1 1 1"},
    ]);
    let rule = |alert: &str| {
        group["rules"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["alert"] == alert))
            .cloned()
            .expect("rule")
    };
    let firing = |alert: &str, value: &str| {
        let mut ann = rule(alert)["annotations"].clone();
        let desc = ann["description"]
            .as_str()
            .unwrap_or_default()
            .replace("{{ printf \"%.2f\" $value }}", value);
        ann["description"] = json!(desc);
        json!([{"exp_labels": {"severity": "warning", "namespace": "shop", "name": "orders"},
                "exp_annotations": ann}])
    };
    let mut tests = Vec::new();
    for minute in 0..16 {
        // The promtool series are pending from 0m (ratio 2 >= 1), firing from 3m.
        let backlog_fires = if pending_at_loss {
            // Held only when the operator said firing: nothing held from 6m; pending again
            // from 12m, so firing 3m later at the earliest (it resolves at 14m first).
            (3..6).contains(&minute)
        } else {
            (3..14).contains(&minute)
        };
        tests.push(
            json!({"eval_time": format!("{minute}m"), "alertname": BACKLOG_ALERT,
            "exp_alerts": if backlog_fires { firing(BACKLOG_ALERT, "2.00") } else { json!([]) }}),
        );
        // dlq_broker_up 0 from 6m: firing after `for` (3m), until it is 1 again at 12m.
        tests.push(json!({"eval_time": format!("{minute}m"), "alertname": BROKER_ALERT,
            "exp_alerts": if (9..12).contains(&minute) { firing(BROKER_ALERT, "") } else { json!([]) }}));
    }
    promtool_test(promtool, &group, series, json!(tests))
}

#[test]
fn a_firing_backlog_alert_stays_firing_while_the_broker_cannot_be_read() {
    let Some(promtool) =
        promtool("a_firing_backlog_alert_stays_firing_while_the_broker_cannot_be_read")
    else {
        return;
    };
    let (ok, out) = outage_scenario(promtool, false);
    assert!(ok, "firing at the loss: promtool test rules:\n{out}");
    let (ok, out) = outage_scenario(promtool, true);
    assert!(ok, "pending at the loss: promtool test rules:\n{out}");
}

/// The router inbox rules of a resource in router mode (`backlogThreshold` 100, `for`
/// 3m) over per-minute inbox depths and consumer counts (`None`: no sample), through
/// `promtool test rules`: at every minute, exactly the alerts expected are firing —
/// `reason="NoConsumer"` at the minutes `no_consumer`, `reason="InboxBackedUp"` at the
/// minutes `backed_up` — with their labels and annotations. Panics with promtool's output
/// otherwise.
fn router_scenario(
    scenario: &str,
    depths: &[f64],
    consumers: &[Option<f64>],
    no_consumer: &[usize],
    backed_up: &[usize],
) {
    let promtool = promtool(scenario).expect("checked by the caller");
    let (d, p) = resource_with(
        json!({"interval": "1m", "threshold": 1000, "for": "3m"}),
        json!({"enabled": true, "backlogThreshold": 100}),
    );
    let group = alerts::rule_group(&d, &p);
    let rule = |reason: &str| {
        group["rules"]
            .as_array()
            .and_then(|rs| {
                rs.iter()
                    .find(|r| r["alert"] == ROUTER_INBOX_ALERT && r["labels"]["reason"] == reason)
            })
            .cloned()
            .unwrap_or_else(|| panic!("rule {reason}"))
    };
    let labels = r#"namespace="shop", name="orders""#;
    let mut input_series = vec![json!({
        "series": format!(r#"dlq_queue_depth{{{labels}, role="inbox", queue="orders.router", tier=""}}"#),
        "values": series_values(&depths.iter().copied().map(Some).collect::<Vec<_>>()),
    })];
    if consumers.iter().any(Option::is_some) {
        input_series.push(json!({
            "series": format!("dlq_router_inbox_consumers{{{labels}}}"),
            "values": series_values(consumers),
        }));
    }
    let tests: Vec<Value> = (0..depths.len())
        .map(|i| {
            let mut expected = Vec::new();
            for (reason, minutes) in [("NoConsumer", no_consumer), ("InboxBackedUp", backed_up)] {
                if !minutes.contains(&i) {
                    continue;
                }
                let r = rule(reason);
                let mut ann = r["annotations"].clone();
                let desc = ann["description"].as_str().unwrap_or_default().replace(
                    r#"{{ printf "%.0f" $value }}"#,
                    &format!("{:.0}", depths[i]),
                );
                ann["description"] = json!(desc);
                expected.push(json!({"exp_labels": r["labels"], "exp_annotations": ann}));
            }
            json!({"eval_time": format!("{i}m"), "alertname": ROUTER_INBOX_ALERT,
                   "exp_alerts": expected})
        })
        .collect();
    let (ok, out) = promtool_test(promtool, &group, json!(input_series), json!(tests));
    assert!(ok, "{scenario}: promtool test rules:\n{out}");
}

#[test]
fn router_inbox_rules_fire_on_a_stuck_inbox_only() {
    if promtool("router_inbox_rules_fire_on_a_stuck_inbox_only").is_none() {
        return;
    }
    let none = |n: usize| vec![Some(0.0); n];
    let some = |n: usize, c: f64| vec![Some(c); n];
    // Messages wait from 2m and nothing consumes: firing 5m later, and on.
    let waiting: Vec<f64> = [0.0, 0.0].into_iter().chain([5.0; 9]).collect();
    router_scenario("no consumer", &waiting, &none(11), &[7, 8, 9, 10], &[]);
    // Nothing waits: no alert, even without a consumer.
    router_scenario("empty inbox", &[0.0; 10], &none(10), &[], &[]);
    // Consumed: no alert.
    router_scenario("consumed", &[5.0; 10], &some(10, 1.0), &[], &[]);
    // A router comes back at 8m: resolved at once.
    let back: Vec<Option<f64>> = none(8).into_iter().chain(some(3, 1.0)).collect();
    router_scenario("router back", &[5.0; 11], &back, &[5, 6, 7], &[]);
    // Above backlogThreshold (100) from 2m to 6m while consumed: firing after `for` (3m).
    let backlog = [50.0, 50.0, 150.0, 150.0, 150.0, 150.0, 150.0, 50.0, 50.0];
    router_scenario("backed up", &backlog, &some(9, 2.0), &[], &[5, 6]);
    // Shorter than `for`: never.
    let spike = [50.0, 150.0, 150.0, 50.0, 50.0, 50.0, 50.0];
    router_scenario("short backlog", &spike, &some(7, 2.0), &[], &[]);
    // Backed up without a consumer: the cause is reported, not both.
    router_scenario(
        "no consumer and backed up",
        &[150.0; 8],
        &none(8),
        &[5, 6, 7],
        &[],
    );
    // Consumer count unknown (no series): the backlog alone still alerts.
    router_scenario(
        "consumers unknown",
        &[150.0; 6],
        &[None; 6],
        &[],
        &[3, 4, 5],
    );
}

/// `dlq-operator render --rules -f examples/` prints a rule file that `promtool check
/// rules` accepts, with a group per example resource.
#[test]
fn render_rules_prints_a_valid_rule_file() {
    let Some(promtool) = promtool("render_rules_prints_a_valid_rule_file") else {
        return;
    };
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let out = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["render", "--rules", "-f"])
        .arg(&examples)
        .output()
        .expect("run dlq-operator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rules.yaml"), &out.stdout).expect("write");
    let (ok, log) = run(promtool, dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules: {log}");
    let file: Value = serde_yaml_ng::from_slice(&out.stdout).expect("yaml");
    let groups: Vec<&str> = file["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(
        groups,
        [
            "dlq-operator.default.order-events",
            "dlq-operator.default.payment-callback"
        ]
    );
}
