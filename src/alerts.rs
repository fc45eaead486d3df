//! Prometheus alert rules for one DeadLetterQueue (docs/ARCHITECTURE.md, "Monitoring and alerting"), generated from its spec.
//! Pure.
//!
//! The rules are written over the metrics the operator exports (docs/ARCHITECTURE.md, "Monitoring and alerting"), so that
//! Prometheus and the operator's own evaluator ([`crate::monitor`]) reach the same verdict
//! on the same data (checked by `tests/alert_rules.rs` with `promtool test rules`):
//! - `DeadLetterBacklogHigh`: `(D − B) / clamp_min(T − B, minHeadroom) >= 1` for the spec's
//!   `for`, with `D` the sum of the resource's dead-letter queue depths; the denominator is
//!   bounded below like the evaluator's, so a broken threshold can never divide by zero,
//!   and a missing baseline or threshold series yields no result (the absent rule covers
//!   it). `keep_firing_for` when `keepFiringFor` is set (Prometheus ≥ 2.42). While the
//!   operator cannot read the broker (`dlq_broker_up == 0`, its depth series absent), an
//!   alert that was firing stays firing: the expression then holds the last ratio
//!   exported, as long as the operator's own last alert state (`dlq_backlog_alert_state`)
//!   was 2 (firing) within [`BROKER_DOWN_HOLD`]. Figures that stop never resolve it.
//! - `DeadLetterBrokerUnreachable`: `dlq_broker_up == 0` for the spec's `for`: the
//!   operator cannot read the queue depths (the `BrokerReachable` condition names every
//!   address tried).
//! - `DeadLetterGrowthHigh` (with `growthPerMinute`): `dlq_growth_per_minute >= G` for `for`.
//! - `DeadLetterMetricsAbsent`: `absent(dlq_queue_depth{…, role="dead_letter"})` for `for`,
//!   so missing data alerts instead of staying silent.
//! - `DeadLetterRouterInboxStuck` (router mode only, `spec.router.enabled`), two rules
//!   labelled `reason` like the `RouterReady` condition: `NoConsumer` when the router
//!   inbox holds messages and has no consumer for [`ROUTER_NO_CONSUMER_FOR`] (5m: failed
//!   messages wait, nothing is lost, but nothing retries them either), and
//!   `InboxBackedUp` when its depth stays above `spec.router.backlogThreshold` for the
//!   spec's `for` while it is consumed.
//!
//! Every alert carries `severity` (`spec.alerting.prometheusRule.severity`), `namespace`
//! and `name`, and annotations `summary`, `description` (with the live value) and, when
//! set, `runbook_url`.

use serde_json::{json, Value};

use crate::crd::DeadLetterQueue;
use crate::duration::format_ms;
use crate::monitor::Params;

/// Name of the backlog alert.
pub const BACKLOG_ALERT: &str = "DeadLetterBacklogHigh";
/// Name of the growth alert.
pub const GROWTH_ALERT: &str = "DeadLetterGrowthHigh";
/// Name of the missing-data alert.
pub const ABSENT_ALERT: &str = "DeadLetterMetricsAbsent";
/// Name of the alert on a broker the operator cannot read.
pub const BROKER_ALERT: &str = "DeadLetterBrokerUnreachable";
/// How far back (a Prometheus duration) the backlog rule looks for the operator's last
/// alert state and ratio while the broker cannot be read: a firing alert stays firing
/// through an outage of up to a day (`DeadLetterBrokerUnreachable` fires all along).
pub const BROKER_DOWN_HOLD: &str = "1d";
/// Name of the router inbox alert (router mode only).
pub const ROUTER_INBOX_ALERT: &str = "DeadLetterRouterInboxStuck";
/// How long a router inbox holding messages may go without a consumer before
/// [`ROUTER_INBOX_ALERT`] fires with `reason="NoConsumer"` (a Prometheus duration): long
/// enough for a router to restart or reconnect (its pauses grow to 30 s), short enough
/// that retries do not silently stop for long.
pub const ROUTER_NO_CONSUMER_FOR: &str = "5m";

/// `s` as literal text in a Prometheus alert template (annotations and labels are Go
/// `text/template`s): each `{{` and `}}` becomes an action printing it
/// (`{{"{{"}}`), so a queue name or URL holding them neither breaks the rule file nor
/// runs as template code.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("{{") {
            out.push_str(r#"{{"{{"}}"#);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("}}") {
            out.push_str(r#"{{"}}"}}"#);
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// A PromQL string literal for `s` (double-quoted, `\` and `"` escaped).
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The rule group of `dlq` (with validated monitoring `params`), as the `groups` entry
/// of a Prometheus rule file or a `PrometheusRule`'s `spec.groups`.
pub fn rule_group(dlq: &DeadLetterQueue, params: &Params) -> Value {
    let g = Group::new(dlq, params);
    let mut rules = vec![g.backlog_rule()];
    if let Some(limit) = params.growth_per_minute {
        rules.push(g.growth_rule(limit));
    }
    rules.push(g.absent_rule());
    rules.push(g.broker_rule());
    if dlq.spec.router.enabled {
        rules.push(g.no_consumer_rule(&dlq.spec.router_inbox_name()));
        rules.push(g.inbox_backlog_rule(
            &dlq.spec.router_inbox_name(),
            dlq.spec.router.backlog_threshold,
        ));
    }
    json!({"name": format!("dlq-operator.{}.{}", g.ns, g.name), "rules": rules})
}

/// What every rule of one DeadLetterQueue's group shares.
struct Group<'a> {
    /// The resource's namespace and name.
    ns: &'a str,
    name: &'a str,
    /// PromQL label matchers selecting the resource's series.
    sel: String,
    /// The spec's `for`, as a Prometheus duration.
    for_: String,
    /// `keep_firing_for` (the spec's `keepFiringFor`), when set.
    keep_firing_for: Option<String>,
    /// `severity` (template-literal), `namespace` and `name`: namespace and name also as
    /// rule labels, so every rule of the file is distinct (promtool lints identical alert
    /// names with identical labels as duplicates).
    labels: Value,
    /// The default dead-letter queue's name, template-literal, for descriptions.
    queue: String,
    /// The `runbook_url` annotation, template-literal, when set.
    runbook_url: Option<String>,
    /// The lower bound of the ratio's denominator, `minHeadroom` (messages).
    min_headroom: f64,
}

impl<'a> Group<'a> {
    fn new(dlq: &'a DeadLetterQueue, params: &Params) -> Self {
        let ns = crate::manifest::namespace_of(&dlq.metadata);
        let name = dlq.metadata.name.as_deref().unwrap_or_default();
        let alerting = &dlq.spec.alerting.prometheus_rule;
        Group {
            ns,
            name,
            sel: format!("namespace={}, name={}", quote(ns), quote(name)),
            for_: format_ms(params.for_ms),
            keep_firing_for: (params.keep_firing_for_ms > 0)
                .then(|| format_ms(params.keep_firing_for_ms)),
            labels: json!({"severity": literal(&alerting.severity), "namespace": ns, "name": name}),
            queue: literal(&dlq.spec.dead_letter_queue_name()),
            runbook_url: alerting.runbook_url.as_deref().map(literal),
            min_headroom: params.min_headroom,
        }
    }

    /// An alert rule `alert` on `expr` for the spec's `for`, with the group's labels and
    /// `summary` / `description` (plus `runbook_url` when set); `keep_firing_for` when
    /// `keep` and set.
    fn rule(
        &self,
        alert: &str,
        expr: String,
        summary: String,
        description: String,
        keep: bool,
    ) -> Value {
        let mut annotations = json!({"summary": summary, "description": description});
        if let Some(url) = &self.runbook_url {
            annotations["runbook_url"] = json!(url);
        }
        let mut rule = json!({
            "alert": alert,
            "expr": expr,
            "for": self.for_,
            "labels": self.labels,
            "annotations": annotations,
        });
        if let (true, Some(k)) = (keep, &self.keep_firing_for) {
            rule["keep_firing_for"] = json!(k);
        }
        rule
    }

    /// [`BACKLOG_ALERT`]: the backlog ratio `(D − B) / clamp_min(T − B, minHeadroom) >= 1`.
    fn backlog_rule(&self) -> Value {
        let (ns, name, sel, for_, queue) = (self.ns, self.name, &self.sel, &self.for_, &self.queue);
        let by = "by (namespace, name)";
        let baseline = format!("max {by} (dlq_backlog_baseline{{{sel}}})");
        let threshold = format!("max {by} (dlq_backlog_threshold{{{sel}}})");
        let depth = format!("sum {by} (dlq_queue_depth{{{sel}, role=\"dead_letter\"}})");
        let ratio = format!(
            "({depth} - on (namespace, name) {baseline}) / on (namespace, name) clamp_min({threshold} - on (namespace, name) {baseline}, {})",
            self.min_headroom
        );
        // While the broker cannot be read: the last ratio exported, if the operator's last
        // alert state was firing (so an outage neither resolves a firing alert nor
        // promotes a pending one).
        let held = format!(
            "(max {by} (last_over_time(dlq_backlog_ratio{{{sel}}}[{BROKER_DOWN_HOLD}])) and on (namespace, name) max {by} (last_over_time(dlq_backlog_alert_state{{{sel}}}[{BROKER_DOWN_HOLD}])) == 2 and on (namespace, name) max {by} (dlq_broker_up{{{sel}}}) == 0)"
        );
        self.rule(
            BACKLOG_ALERT,
            format!("{ratio} >= 1 or on (namespace, name) {held}"),
            format!("Dead-letter backlog of {ns}/{name} is above its threshold"),
            format!(
                "Backlog ratio {{{{ printf \"%.2f\" $value }}}} (>= 1 for {for_}) on dead-letter queue {queue} of DeadLetterQueue {ns}/{name}."
            ),
            true,
        )
    }

    /// [`GROWTH_ALERT`]: dead-letter growth of at least `limit` messages per minute. The
    /// evaluator applies keepFiringFor to the growth alert too.
    fn growth_rule(&self, limit: f64) -> Value {
        let (ns, name, sel, queue) = (self.ns, self.name, &self.sel, &self.queue);
        self.rule(
            GROWTH_ALERT,
            format!("max by (namespace, name) (dlq_growth_per_minute{{{sel}}}) >= {limit}"),
            format!("Dead letters of {ns}/{name} are piling up"),
            format!(
                "{{{{ printf \"%.1f\" $value }}}} dead letters per minute (>= {limit}) on dead-letter queue {queue} of DeadLetterQueue {ns}/{name}."
            ),
            true,
        )
    }

    /// The router inbox's depth and its consumers' filter (`== 0`), per resource.
    fn inbox_series(&self) -> (String, String) {
        let (sel, by) = (&self.sel, "by (namespace, name)");
        (
            format!("max {by} (dlq_queue_depth{{{sel}, role=\"inbox\"}})"),
            format!("max {by} (dlq_router_inbox_consumers{{{sel}}}) == 0"),
        )
    }

    /// [`ROUTER_INBOX_ALERT`] `reason="NoConsumer"`: the inbox holds messages and has no
    /// consumer, for [`ROUTER_NO_CONSUMER_FOR`].
    fn no_consumer_rule(&self, inbox: &str) -> Value {
        let (ns, name) = (self.ns, self.name);
        let (depth, no_consumer) = self.inbox_series();
        let inbox = literal(inbox);
        let mut rule = self.rule(
            ROUTER_INBOX_ALERT,
            format!("{depth} > 0 and on (namespace, name) {no_consumer}"),
            format!("No retry router consumes the inbox of {ns}/{name}"),
            format!(
                "{{{{ printf \"%.0f\" $value }}}} failed messages wait in router inbox {inbox} of DeadLetterQueue {ns}/{name}, which no retry router has consumed for {ROUTER_NO_CONSUMER_FOR}. Nothing is lost, but nothing is retried: start a router (dlq-operator router, or the operator with --embedded-router=true)."
            ),
            false,
        );
        rule["for"] = json!(ROUTER_NO_CONSUMER_FOR);
        rule["labels"]["reason"] = json!("NoConsumer");
        rule
    }

    /// [`ROUTER_INBOX_ALERT`] `reason="InboxBackedUp"`: the inbox's depth above
    /// `threshold` (`spec.router.backlogThreshold`) for the spec's `for`, while it has a
    /// consumer (without one, `NoConsumer` says why).
    fn inbox_backlog_rule(&self, inbox: &str, threshold: u64) -> Value {
        let (ns, name, for_) = (self.ns, self.name, &self.for_);
        let (depth, no_consumer) = self.inbox_series();
        let inbox = literal(inbox);
        let mut rule = self.rule(
            ROUTER_INBOX_ALERT,
            format!("{depth} > {threshold} unless on (namespace, name) {no_consumer}"),
            format!("The router inbox of {ns}/{name} backs up"),
            format!(
                "Router inbox {inbox} of DeadLetterQueue {ns}/{name} has held more than {threshold} messages (spec.router.backlogThreshold) for {for_}, now {{{{ printf \"%.0f\" $value }}}}: the retry routers do not keep up or cannot publish (dlq_router_publish_failures_total). Nothing is lost."
            ),
            false,
        );
        rule["labels"]["reason"] = json!("InboxBackedUp");
        rule
    }

    /// [`BROKER_ALERT`]: the operator could not read the broker for the spec's `for`.
    fn broker_rule(&self) -> Value {
        let (ns, name, sel) = (self.ns, self.name, &self.sel);
        self.rule(
            BROKER_ALERT,
            format!("max by (namespace, name) (dlq_broker_up{{{sel}}}) == 0"),
            format!("The broker of {ns}/{name} cannot be read"),
            format!(
                "The operator cannot read the queue depths of DeadLetterQueue {ns}/{name} from its broker (its BrokerReachable condition says why and names every address tried): its backlog is not watched, and a firing {BACKLOG_ALERT} stays firing meanwhile."
            ),
            false,
        )
    }

    /// [`ABSENT_ALERT`]: no dead-letter depth series, so missing data alerts.
    fn absent_rule(&self) -> Value {
        let (ns, name, sel) = (self.ns, self.name, &self.sel);
        self.rule(
            ABSENT_ALERT,
            format!("absent(dlq_queue_depth{{{sel}, role=\"dead_letter\"}})"),
            format!("No dead-letter metrics for {ns}/{name}"),
            format!(
                "dlq_queue_depth of DeadLetterQueue {ns}/{name} is missing: the operator is down, cannot reach the broker, or is not scraped. Its backlog is not watched."
            ),
            false,
        )
    }
}

/// A Prometheus rule file (`groups:`) with the group of every `(resource, params)`.
pub fn rule_file(items: &[(&DeadLetterQueue, &Params)]) -> Value {
    json!({"groups": items.iter().map(|(d, p)| rule_group(d, p)).collect::<Vec<_>>()})
}

/// The `PrometheusRule` (`monitoring.coreos.com/v1`) of `dlq`, named `dlq-<name>` in its
/// namespace, owned by it (so Kubernetes deletes it with the resource; without
/// `blockOwnerDeletion`, which would need `update` on `deadletterqueues/finalizers` where
/// owner-reference permissions are enforced), labelled with
/// `spec.alerting.prometheusRule.labels` (kube-prometheus-stack selects rules by
/// `release: <its release name>` by default) and `app.kubernetes.io/managed-by`.
pub fn prometheus_rule(dlq: &DeadLetterQueue, params: &Params) -> Value {
    let ns = crate::manifest::namespace_of(&dlq.metadata);
    let name = dlq.metadata.name.as_deref().unwrap_or_default();
    let mut labels = json!(dlq.spec.alerting.prometheus_rule.labels);
    labels["app.kubernetes.io/managed-by"] = json!("dlq-operator");
    let mut metadata = json!({"name": format!("dlq-{name}"), "namespace": ns, "labels": labels});
    if let Some(uid) = &dlq.metadata.uid {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "dlqoperator.io/v1alpha1",
            "kind": "DeadLetterQueue",
            "name": name,
            "uid": uid,
            "controller": true,
        }]);
    }
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": [rule_group(dlq, params)]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dlq(extra: Value) -> (DeadLetterQueue, Params) {
        let mut spec = json!({
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": "orders"},
            "retryPolicyRef": {"name": "p"},
            "monitoring": {"baseline": {"mode": "Static", "value": 10}, "threshold": 110,
                           "for": "5m", "minHeadroom": 3},
        });
        if let (Some(o), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        let mut d = DeadLetterQueue::new("orders", serde_json::from_value(spec).expect("spec"));
        d.metadata.namespace = Some("shop".into());
        d.metadata.uid = Some("u-1".into());
        let p = Params::from_spec(&d.spec.monitoring).expect("params");
        (d, p)
    }

    #[test]
    fn backlog_rule_is_guarded_and_carries_labels_and_annotations() {
        let (d, p) = dlq(
            json!({"alerting": {"prometheusRule": {"severity": "critical",
            "runbookUrl": "https://runbooks/dlq", "labels": {"release": "kps"}}}}),
        );
        let g = rule_group(&d, &p);
        let backlog = &g["rules"][0];
        assert_eq!(backlog["alert"], BACKLOG_ALERT);
        assert_eq!(backlog["for"], "5m");
        let expr = backlog["expr"].as_str().expect("expr");
        assert!(expr.contains("clamp_min("), "{expr}");
        let (live, held) = expr
            .split_once(" or on (namespace, name) ")
            .expect("the live ratio, or the one held while the broker is down");
        assert!(live.ends_with(", 3) >= 1"), "{expr}");
        for part in [
            r#"last_over_time(dlq_backlog_ratio{namespace="shop", name="orders"}[1d])"#,
            r#"last_over_time(dlq_backlog_alert_state{namespace="shop", name="orders"}[1d])) == 2"#,
            r#"(dlq_broker_up{namespace="shop", name="orders"}) == 0)"#,
        ] {
            assert!(held.contains(part), "{part} in {held}");
        }
        assert!(expr
            .contains(r#"dlq_queue_depth{namespace="shop", name="orders", role="dead_letter"}"#));
        assert_eq!(backlog["labels"]["severity"], "critical");
        assert_eq!(
            backlog["annotations"]["runbook_url"],
            "https://runbooks/dlq"
        );
        assert!(backlog.get("keep_firing_for").is_none());
        assert_eq!(
            g["rules"].as_array().map(Vec::len),
            Some(3),
            "no growth rule without growthPerMinute"
        );
        assert_eq!(g["rules"][1]["alert"], ABSENT_ALERT);
        assert_eq!(g["rules"][2]["alert"], BROKER_ALERT);
        assert_eq!(
            g["rules"][2]["expr"],
            r#"max by (namespace, name) (dlq_broker_up{namespace="shop", name="orders"}) == 0"#
        );

        let rule = prometheus_rule(&d, &p);
        assert_eq!(rule["metadata"]["name"], "dlq-orders");
        assert_eq!(rule["metadata"]["labels"]["release"], "kps");
        assert_eq!(rule["metadata"]["ownerReferences"][0]["uid"], "u-1");
    }

    #[test]
    fn growth_and_keep_firing_for_when_set() {
        let (d, p) = dlq(json!({"monitoring": {"threshold": 500, "for": "2m",
            "growthPerMinute": 50.0, "keepFiringFor": "10m"}}));
        let g = rule_group(&d, &p);
        assert_eq!(g["rules"][0]["keep_firing_for"], "10m");
        assert_eq!(g["rules"][1]["keep_firing_for"], "10m", "growth too");
        assert_eq!(g["rules"][1]["alert"], GROWTH_ALERT);
        assert!(g["rules"][1]["expr"]
            .as_str()
            .expect("expr")
            .ends_with(">= 50"));
    }

    #[test]
    fn router_rules_only_in_router_mode() {
        let (d, p) = dlq(json!({}));
        let g = rule_group(&d, &p);
        assert!(g["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .all(|r| r["alert"] != ROUTER_INBOX_ALERT));
        let (d, p) = dlq(json!({"router": {"enabled": true, "backlogThreshold": 250}}));
        let g = rule_group(&d, &p);
        let router: Vec<&Value> = g["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| r["alert"] == ROUTER_INBOX_ALERT)
            .collect();
        assert_eq!(router.len(), 2);
        assert_eq!(router[0]["labels"]["reason"], "NoConsumer");
        assert_eq!(router[0]["for"], ROUTER_NO_CONSUMER_FOR);
        assert_eq!(
            router[0]["expr"],
            r#"max by (namespace, name) (dlq_queue_depth{namespace="shop", name="orders", role="inbox"}) > 0 and on (namespace, name) max by (namespace, name) (dlq_router_inbox_consumers{namespace="shop", name="orders"}) == 0"#
        );
        assert_eq!(router[1]["labels"]["reason"], "InboxBackedUp");
        assert_eq!(router[1]["for"], "5m", "spec.monitoring.for");
        assert!(router[1]["expr"]
            .as_str()
            .expect("expr")
            .contains(r#"role="inbox"}) > 250 unless on (namespace, name)"#));
        assert!(router[0]["annotations"]["description"]
            .as_str()
            .expect("description")
            .contains("orders.router"));
    }

    #[test]
    fn label_values_are_quoted() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
