//! The operator (`dlq-operator run`, the real binary as a local process) against a real
//! Kubernetes API server and the real RabbitMQ (docs/DEVELOPMENT.md, "Testing"). `.ci/run` starts a local
//! v1.20.2 API server (scripts/kube-apiserver.sh) and sets `DLQ_E2E_KUBECONFIG`; any
//! cluster that variable points at works. Without it each test reports itself as skipped,
//! by name.
//!
//! Each test uses its own namespace (left behind: without a controller manager a
//! namespace is never finalized; the API server's etcd is fresh per CI run), its own
//! Lease and queue names prefixed with a unique id.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use common::e2e::{
    client, create_examples, dlqs, ensure_crds, namespace, namespace_with_broker, ready, rps,
    table, wait_for, Operator,
};
use common::{cleanup, cli, mgmt_get, text, unique, AMQP};
use dlq_operator::crd::{DeadLetterQueue, RetryPolicy};
use dlq_operator::object::api_resource;

/// `dlq-operator report -n ns -o json` with `kubeconfig`: its rows.
fn report(kubeconfig: &str, ns: &str) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["report", "-n", ns, "-o", "json"])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .output()
        .expect("report");
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("report json")
}

/// The maturity score of the DeadLetterQueues `names` of `ns`: written to status by the
/// monitor, shown in the `Maturity` column, and the same in `dlq-operator report` (once
/// the monitor has polled after the last reconcile), which lists them worst first.
async fn maturity_in_status_column_and_report(
    client: &Client,
    kubeconfig: &str,
    ns: &str,
    names: &[String],
    op: &Operator,
) {
    let api = dlqs(client, ns);
    let (status, rows) = wait_for(
        Duration::from_secs(60),
        "status.maturity as report has it",
        op,
        || async {
            let mut status = Vec::new();
            for name in names {
                let o = api.get(name).await.ok()?;
                status.push((name.clone(), o.data["status"]["maturity"].clone()));
            }
            let rows = report(kubeconfig, ns);
            let agree = status.iter().all(|(name, m)| {
                rows.iter().any(|r| {
                    r["name"] == name.as_str()
                        && r["score"] == m["score"]
                        && r["missing"] == m["missing"]
                })
            });
            agree.then_some((status, rows))
        },
    )
    .await;
    for (name, m) in &status {
        assert!(m["score"].is_f64(), "{name}: {m}");
        let missing = m["missing"].as_array().map_or(0, Vec::len);
        assert!(missing > 0, "{name}: nothing missing? {m}");
    }
    let scores: Vec<f64> = rows
        .iter()
        .map(|r| r["score"].as_f64().unwrap_or(-1.0))
        .collect();
    assert_eq!(scores.len(), names.len(), "{rows:?}");
    assert!(
        scores.windows(2).all(|w| w[0] <= w[1]),
        "worst first: {scores:?}"
    );
    let (columns, table_rows) = table(client, ns, "deadletterqueues").await;
    let col = columns
        .iter()
        .position(|c| c == "Maturity")
        .expect("column");
    for (name, m) in &status {
        let row = table_rows
            .iter()
            .find(|r| r[0] == name.as_str())
            .expect("row");
        assert_eq!(row[col], m["score"], "{name}");
    }
    // A DeadLetterQueue the operator refuses (a control character in the queue name) is
    // listed first, with score 0 and what to fix.
    let broken = DynamicObject::new("broken", &api_resource::<DeadLetterQueue>()).data(json!({
        "spec": {"broker": {"secretRef": {"name": "rabbitmq-local"}},
                 "source": {"queue": "q\u{1b}[2J"},
                 "retryPolicyRef": {"name": "order-events"}}}));
    api.create(&PostParams::default(), &broken)
        .await
        .expect("create broken");
    let rows = report(kubeconfig, ns);
    assert_eq!(rows[0]["name"], "broken", "{rows:?}");
    assert_eq!(rows[0]["score"].as_f64(), Some(0.0));
    let fix = rows[0]["missing"][0].as_str().unwrap_or_default();
    assert!(
        fix.starts_with("fix the DeadLetterQueue's spec") && fix.contains("spec.source.queue"),
        "{fix}"
    );
    assert!(!fix.contains('\u{1b}'), "escaped: {fix}");
    api.delete("broken", &DeleteParams::default())
        .await
        .expect("delete broken");
}

#[tokio::test]
async fn operator_applies_examples_reports_status_and_replans_on_policy_edit() {
    const TEST: &str = "operator_applies_examples_reports_status_and_replans_on_policy_edit";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace(&client, "e2e-apply").await;
    let prefix = unique("e2e");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let names = create_examples(&client, &kubeconfig, &ns, &prefix).await;
    assert_eq!(names, ["order-events", "payment-callback"]);

    let api = dlqs(&client, &ns);
    for name in &names {
        let r = wait_for(
            Duration::from_secs(60),
            &format!("{name} Ready"),
            &op,
            || async { ready(&api, name).await.filter(|r| r.0 == "True") },
        )
        .await;
        assert_eq!(r.1, "TopologyApplied");
    }
    // The topology is on the broker.
    let q = format!("{prefix}-order-events");
    for queue in [q.clone(), format!("{q}.dlq"), format!("{q}.retry.5m")] {
        assert!(
            mgmt_get(&format!("/api/queues/%2F/{queue}"))
                .await
                .is_some(),
            "{queue}"
        );
    }
    // `kubectl get dlq` columns and values.
    let (columns, rows) = table(&client, &ns, "deadletterqueues").await;
    assert_eq!(
        columns,
        [
            "Name",
            "Ready",
            "DLQ depth",
            "Baseline",
            "Ratio",
            "Alert",
            "Maturity",
            "Age"
        ]
    );
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r[1] == "True"), "{rows:?}");
    maturity_in_status_column_and_report(&client, &kubeconfig, &ns, &names, &op).await;
    // RetryPolicy status.
    let rp = rps(&client, &ns).get("order-events").await.expect("rp");
    assert_eq!(rp.data["status"]["worstCaseRetryDuration"], "6m20s");
    // Finalizer in place.
    let dlq = api.get("order-events").await.expect("dlq");
    assert_eq!(
        dlq.metadata.finalizers.as_deref(),
        Some(&["dlqoperator.io/cleanup".to_string()][..])
    );

    // Editing the RetryPolicy re-plans the tiers of the DeadLetterQueue using it.
    rps(&client, &ns)
        .patch(
            "order-events",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"tiers": ["5s", "15s", "60s", "300s", "900s"],
                                          "maxRetries": 5}}),
            ),
        )
        .await
        .expect("edit policy");
    wait_for(
        Duration::from_secs(60),
        "tier 15m in status",
        &op,
        || async {
            let o = api.get("order-events").await.ok()?;
            let tiers = o.data["status"]["tiers"].as_array()?.clone();
            tiers.contains(&json!("15m")).then_some(())
        },
    )
    .await;
    assert!(mgmt_get(&format!("/api/queues/%2F/{q}.retry.15m"))
        .await
        .is_some());
    assert!(op.reconciles().await > 0);

    // An object the 1.20 schema cannot reject (its CEL rules are dropped there): the
    // controller reports InvalidSpec naming the field and never touches the broker.
    let bad_rp = DynamicObject::new("too-short", &api_resource::<RetryPolicy>())
        .data(json!({"spec": {"backoff": {"initialDelay": "10s", "maxDelay": "1s"}}}));
    rps(&client, &ns)
        .create(&PostParams::default(), &bad_rp)
        .await
        .expect("accepted by a 1.20 server");
    let bad_q = format!("{prefix}-bad");
    let bad_dlq =
        DynamicObject::new("bad", &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
            "broker": {"secretRef": {"name": "rabbitmq-local"}},
            "source": {"queue": bad_q},
            "retryPolicyRef": {"name": "too-short"},
        }}));
    api.create(&PostParams::default(), &bad_dlq)
        .await
        .expect("create");
    let r = wait_for(Duration::from_secs(60), "bad InvalidSpec", &op, || async {
        ready(&api, "bad").await.filter(|r| r.1 == "InvalidSpec")
    })
    .await;
    assert!(r.2.contains("spec.backoff.maxDelay"), "{r:?}");
    let rp_ready = wait_for(
        Duration::from_secs(30),
        "policy InvalidSpec",
        &op,
        || async {
            let o = rps(&client, &ns).get("too-short").await.ok()?;
            let c = o.data["status"]["conditions"][0].clone();
            (c["reason"] == "InvalidSpec").then_some(c)
        },
    )
    .await;
    assert!(rp_ready["message"]
        .as_str()
        .unwrap_or_default()
        .contains("spec.backoff.maxDelay"));
    assert!(mgmt_get(&format!("/api/queues/%2F/{bad_q}"))
        .await
        .is_none());
    api.delete("bad", &DeleteParams::default())
        .await
        .expect("delete bad");

    // Retain (the examples' policy): deleted at once, broker objects kept.
    for name in &names {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for name in &names {
        wait_for(
            Duration::from_secs(30),
            &format!("{name} gone"),
            &op,
            || async {
                match api.get_opt(name).await {
                    Ok(None) => Some(()),
                    _ => None,
                }
            },
        )
        .await;
    }
    assert!(mgmt_get(&format!("/api/queues/%2F/{q}.dlq"))
        .await
        .is_some());
    drop(op);
    cleanup(&prefix).await;
}

#[tokio::test]
async fn delete_policy_keeps_a_dlq_with_messages_and_removes_it_once_drained() {
    const TEST: &str = "delete_policy_keeps_a_dlq_with_messages_and_removes_it_once_drained";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-delete", AMQP).await;
    let prefix = unique("e2e-del");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let q = format!("{prefix}-work");
    let dlq = DynamicObject::new("work", &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
        "broker": {"secretRef": {"name": "rabbit"}},
        "source": {"queue": q},
        "retryPolicyRef": {"name": "policy"},
        "deletionPolicy": "Delete",
    }}));
    let api = dlqs(&client, &ns);
    api.create(&PostParams::default(), &dlq).await.expect("dlq");
    wait_for(Duration::from_secs(60), "Ready", &op, || async {
        ready(&api, "work").await.filter(|r| r.0 == "True")
    })
    .await;

    common::publish_persistent(&format!("{q}.dlq"), 2).await;
    api.delete("work", &DeleteParams::default())
        .await
        .expect("delete");
    let blocked = wait_for(Duration::from_secs(30), "DeletionBlocked", &op, || async {
        ready(&api, "work")
            .await
            .filter(|r| r.1 == "DeletionBlocked")
    })
    .await;
    assert!(
        blocked
            .2
            .contains(&format!("queue \"{q}.dlq\" holds 2 message(s)")),
        "{blocked:?}"
    );
    assert_eq!(
        common::passive_ready_count(AMQP, &format!("{q}.dlq")).await,
        2
    );
    assert!(
        api.get_opt("work").await.expect("get").is_some(),
        "finalizer holds it"
    );

    // Drained: the next retry deletes the topology and releases the object.
    common::mgmt_delete(&format!("/api/queues/%2F/{q}.dlq/contents")).await;
    wait_for(Duration::from_secs(60), "object gone", &op, || async {
        match api.get_opt("work").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(mgmt_get(&format!("/api/queues/%2F/{q}.dlq"))
        .await
        .is_none());
    assert!(mgmt_get(&format!("/api/exchanges/%2F/{q}.dlx"))
        .await
        .is_none());
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{q}")).await.is_some(),
        "the source queue stays"
    );
    drop(op);
    cleanup(&prefix).await;
}

async fn holder(client: &Client, ns: &str, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn leader_election_runs_one_leader_and_hands_over_when_it_dies() {
    const TEST: &str = "leader_election_runs_one_leader_and_hands_over_when_it_dies";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace(&client, "e2e-lease").await;
    let prefix = unique("e2e-lease");
    let lease = unique("lease");
    let duration = 6u64;
    let start = |id: &str| {
        Operator::start(
            &kubeconfig,
            &[
                "--namespace",
                &ns,
                "--lease-namespace",
                &ns,
                "--lease-name",
                &lease,
                "--lease-duration",
                &duration.to_string(),
                "--identity",
                id,
            ],
        )
    };
    let a = start("replica-a");
    // Let a take the lease first, so the roles are known.
    wait_for(Duration::from_secs(30), "a holds the lease", &a, || async {
        (holder(&client, &ns, &lease).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut b = start("replica-b");
    let names = create_examples(&client, &kubeconfig, &ns, &prefix).await;
    let api = dlqs(&client, &ns);
    for name in &names {
        wait_for(
            Duration::from_secs(60),
            &format!("{name} Ready"),
            &a,
            || async { ready(&api, name).await.filter(|r| r.0 == "True") },
        )
        .await;
    }
    // b is alive (it answers /healthz) but never reconciled.
    wait_for(
        Duration::from_secs(10),
        "b answers /healthz",
        &b,
        || async { b.healthy().await.then_some(()) },
    )
    .await;
    assert!(a.reconciles().await > 0);
    assert_eq!(b.reconciles().await, 0, "the standby never reconciles");
    assert_eq!(
        holder(&client, &ns, &lease).await.as_deref(),
        Some("replica-a")
    );

    // The leader dies without releasing: b takes over once the lease expires.
    let mut a = a;
    a.signal("-KILL");
    a.wait(Duration::from_secs(10)).await.expect("a exited");
    let killed = Instant::now();
    wait_for(
        Duration::from_secs(duration + 10),
        "b holds the lease",
        &b,
        || async {
            (holder(&client, &ns, &lease).await.as_deref() == Some("replica-b")).then_some(())
        },
    )
    .await;
    // The standby may take the lease once it has expired: at most one lease duration
    // after the leader's last renewal, plus the standby's polling (slack for a loaded CI
    // machine; the figure itself is printed below and reported in the issue note).
    let handover = killed.elapsed();
    assert!(
        handover <= Duration::from_secs(duration + 4),
        "handover took {handover:?} with a {duration}s lease"
    );
    eprintln!("lease handover after SIGKILL of the leader: {handover:?} (lease {duration}s)");
    // b now reconciles: a spec change is applied by it.
    rps(&client, &ns)
        .patch(
            "payment-callback",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxRetries": 4}})),
        )
        .await
        .expect("edit");
    wait_for(Duration::from_secs(60), "b reconciles", &b, || async {
        (b.reconciles().await > 0).then_some(())
    })
    .await;

    // SIGTERM: b drains, releases the lease and exits 0.
    b.signal("-TERM");
    let Some(status) = b.wait(Duration::from_secs(20)).await else {
        panic!("b did not exit within 20 s of SIGTERM; log:\n{}", b.log());
    };
    assert!(status.success(), "exit {status:?}; log:\n{}", b.log());
    assert_eq!(holder(&client, &ns, &lease).await, None, "lease released");
    assert!(b.log().contains("released the leader Lease"), "{}", b.log());

    // A leader whose Lease is taken stops at once with exit 1 (so it restarts as a
    // standby), instead of living on without reconciling.
    let mut c = start("replica-c");
    // Holding it on the server is not enough: c must have seen it (and started its
    // controllers), or the theft below would only find a standby that never led.
    wait_for(Duration::from_secs(30), "c leads", &c, || async {
        (holder(&client, &ns, &lease).await.as_deref() == Some("replica-c")
            && c.log().contains("acquired the leader Lease"))
        .then_some(())
    })
    .await;
    Api::<Lease>::namespaced(client.clone(), &ns)
        .patch(
            &lease,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "thief",
                                          "leaseDurationSeconds": 3600}})),
        )
        .await
        .expect("steal the lease");
    let status = c
        .wait(Duration::from_secs(duration + 25))
        .await
        .unwrap_or_else(|| panic!("c still running; log:\n{}", c.log()));
    assert_eq!(status.code(), Some(1), "log:\n{}", c.log());
    assert!(c.log().contains("lost the leader Lease"), "{}", c.log());
    cleanup(&prefix).await;
}

/// The `BacklogHigh` condition of a DeadLetterQueue as (status, reason), and its status.
async fn backlog(api: &Api<DynamicObject>, name: &str) -> Option<(String, String, Value)> {
    let o = api.get_opt(name).await.ok()??;
    let status = o.data["status"].clone();
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "BacklogHigh")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        status,
    ))
}

/// The value of the metric line that starts with `series` (name and labels, as rendered).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// docs/ARCHITECTURE.md, "Monitoring and alerting" and issue 4's real-broker test: short intervals (200 ms, `for` 2 s), a
/// dead-letter queue filled above its threshold and held → `BacklogHigh` goes Pending
/// then True, with ratio ≥ 1 and alert state 2 in the metrics; drained → resolved. Then
/// the broker goes away (a proxy in front of its management API is stopped, so the
/// shared broker keeps serving the other tests) → `Unknown`/`BrokerUnreachable`, series
/// removed, the operator keeps running; the broker comes back → it recovers.
#[tokio::test]
async fn backlog_goes_pending_then_high_resolves_and_survives_a_broker_outage() {
    const TEST: &str = "backlog_goes_pending_then_high_resolves_and_survives_a_broker_outage";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace(&client, "e2e-backlog").await;
    let q = unique("e2e-bl");
    let mut proxy = common::proxy::Proxy::start("127.0.0.1:15672").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "rabbit"},
        "stringData": {"uri": AMQP, "managementUri": format!("http://guest:guest@{}", proxy.addr)},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
    let rp = DynamicObject::new("policy", &api_resource::<RetryPolicy>())
        .data(json!({"spec": {"maxRetries": 1, "tiers": ["5s"]}}));
    rps(&client, &ns)
        .create(&PostParams::default(), &rp)
        .await
        .expect("create RetryPolicy");
    let dlq =
        DynamicObject::new("orders", &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
            "broker": {"secretRef": {"name": "rabbit"}},
            "source": {"queue": q},
            "retryPolicyRef": {"name": "policy"},
            "monitoring": {"interval": "200ms", "baseline": {"mode": "Static", "value": 0},
                           "threshold": 5, "for": "2s"},
        }}));
    let api = dlqs(&client, &ns);
    api.create(&PostParams::default(), &dlq)
        .await
        .expect("create DeadLetterQueue");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let labels = format!("namespace=\"{ns}\"");
    let depth_series =
        format!("dlq_queue_depth{{name=\"orders\",{labels},queue=\"{q}.dlq\",role=\"dead_letter\",tier=\"\"}}");
    let ratio_series = format!("dlq_backlog_ratio{{name=\"orders\",{labels}}}");
    let state_series = format!("dlq_backlog_alert_state{{name=\"orders\",{labels}}}");

    // The topology is on the broker (a message published before would be unroutable).
    wait_for(Duration::from_secs(60), "Ready", &op, || async {
        ready(&api, "orders").await.filter(|r| r.0 == "True")
    })
    .await;
    // Empty: BacklogNormal, and an explicit 0 depth series from the first poll.
    let (_, _, status) = wait_for(Duration::from_secs(60), "BacklogNormal", &op, || async {
        backlog(&api, "orders")
            .await
            .filter(|b| b.0 == "False" && b.1 == "BacklogNormal")
    })
    .await;
    assert_eq!(status["alertState"], "Inactive");
    assert_eq!(status["threshold"], 5.0);
    let m = op.metrics().await;
    assert_eq!(metric(&m, &depth_series), Some(0.0), "{m}");

    // Fill the dead-letter queue above the threshold (10 > 5: ratio 2) and hold it.
    assert_eq!(
        common::publish_acked(&format!("{q}.dlq"), 10).await,
        10,
        "every message confirmed"
    );
    // The broker's statistics show the messages within a few seconds (its statistics
    // interval is 5 s); the monitor's live reading is the depth metric.
    let live = wait_for(
        Duration::from_secs(60),
        "depth metric >= 5",
        &op,
        || async { metric(&op.metrics().await, &depth_series).filter(|d| *d >= 5.0) },
    )
    .await;
    assert!(live <= 10.0, "{live}");
    // Pending first (seen here unless a loaded machine polls past its 2 s), then True.
    let (_, reason, first) = wait_for(Duration::from_secs(60), "BacklogPending", &op, || async {
        backlog(&api, "orders")
            .await
            .filter(|b| b.1 == "BacklogPending" || b.1 == "BacklogHigh")
    })
    .await;
    if reason == "BacklogPending" {
        assert_eq!(first["alertState"], "Pending");
    }
    assert!(first["breachingSince"].is_string(), "{first}");
    let (_, _, firing) = wait_for(Duration::from_secs(30), "BacklogHigh True", &op, || async {
        backlog(&api, "orders")
            .await
            .filter(|b| b.0 == "True" && b.1 == "BacklogHigh")
    })
    .await;
    assert_eq!(firing["alertState"], "Firing");
    // The statistics may show part of the 10 messages first: 5 is already the threshold.
    let depth = firing["depth"]["deadLetter"].as_u64().expect("depth");
    assert!((5..=10).contains(&depth), "{firing}");
    assert_eq!(firing["backlogRatio"].as_f64(), Some(depth as f64 / 5.0));
    assert_eq!(firing["breachingSince"], first["breachingSince"]);
    // It fired only after the breach had held for `for` (2 s): the condition turned True
    // at least 2 s after the breach began (both times have 1 s resolution).
    let ts = |v: &Value| {
        v.as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .expect("RFC 3339 time")
    };
    let turned_true = firing["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "BacklogHigh"))
        .map(|c| ts(&c["lastTransitionTime"]))
        .expect("BacklogHigh");
    let held = turned_true.duration_since(ts(&firing["breachingSince"]));
    assert!(
        held.as_secs_f64() >= 1.0,
        "fired {held:?} after the breach began (for: 2s)"
    );
    let m = op.metrics().await;
    assert!(metric(&m, &ratio_series).is_some_and(|r| r >= 1.0), "{m}");
    assert_eq!(metric(&m, &state_series), Some(2.0), "{m}");
    // `kubectl get dlq` shows it.
    let (_, rows) = table(&client, &ns, "deadletterqueues").await;
    assert_eq!(rows[0][2], depth, "DLQ depth column: {rows:?}");
    assert_eq!(rows[0][5], "Firing", "Alert column: {rows:?}");

    // Drain it: resolved.
    common::mgmt_delete(&format!("/api/queues/%2F/{q}.dlq/contents")).await;
    wait_for(Duration::from_secs(60), "resolved", &op, || async {
        backlog(&api, "orders")
            .await
            .filter(|b| b.0 == "False" && b.1 == "BacklogNormal")
    })
    .await;
    assert_eq!(metric(&op.metrics().await, &state_series), Some(0.0));

    // The broker goes away: unknown (not zero), the operator keeps running.
    proxy.stop().await;
    let (_, _, unknown) = wait_for(
        Duration::from_secs(60),
        "BrokerUnreachable",
        &op,
        || async {
            backlog(&api, "orders")
                .await
                .filter(|b| b.0 == "Unknown" && b.1 == "BrokerUnreachable")
        },
    )
    .await;
    assert_eq!(unknown["alertState"], "Unknown");
    assert!(unknown.get("backlogRatio").is_none(), "{unknown}");
    let m = op.metrics().await;
    assert_eq!(metric(&m, &depth_series), None, "series removed: {m}");
    assert!(op.healthy().await, "still running");

    // It comes back: the monitor recovers by itself.
    proxy.restart().await;
    wait_for(Duration::from_secs(60), "recovered", &op, || async {
        backlog(&api, "orders")
            .await
            .filter(|b| b.0 == "False" && b.1 == "BacklogNormal")
    })
    .await;
    assert_eq!(metric(&op.metrics().await, &depth_series), Some(0.0));

    // Every transition was recorded as an Event (the status is written before its
    // Event, so the last one may still be on its way).
    let wanted = ["BacklogHigh", "BacklogResolved", "BrokerUnreachable"];
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let what = format!("Events {wanted:?}");
    wait_for(Duration::from_secs(60), &what, &op, || async {
        let reasons: Vec<String> = events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        wanted
            .iter()
            .all(|want| reasons.iter().any(|r| r == want))
            .then_some(())
    })
    .await;
    drop(op);
    cleanup(&q).await;
}

/// With the Prometheus Operator's PrometheusRule CRD served (a minimal stand-in with the
/// real group, version, kind and plural; its schema keeps every field), each
/// DeadLetterQueue gets its PrometheusRule: owned by it, labelled as the spec says, and
/// reported as `AlertRulesReady=True`; disabling alerting deletes it.
#[tokio::test]
async fn prometheus_rule_is_applied_owned_and_removed_when_alerting_is_disabled() {
    const TEST: &str = "prometheus_rule_is_applied_owned_and_removed_when_alerting_is_disabled";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    common::e2e::ensure_prometheus_rule_crd(&client).await;
    let ns = namespace(&client, "e2e-rules").await;
    let prefix = unique("e2e-rules");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    create_examples(&client, &kubeconfig, &ns, &prefix).await;
    let api = dlqs(&client, &ns);
    let rules: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &dlq_operator::controller::alert_rules::api_resource(),
    );
    let condition = |name: &'static str| {
        let api = api.clone();
        async move {
            let o = api.get_opt(name).await.ok()??;
            o.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "AlertRulesReady")
                .cloned()
        }
    };
    let c = wait_for(Duration::from_secs(60), "AlertRulesReady", &op, || async {
        condition("order-events")
            .await
            .filter(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(c["reason"], "RulesApplied");
    let rule = rules.get("dlq-order-events").await.expect("PrometheusRule");
    let dlq = api.get("order-events").await.expect("dlq");
    let owner = &rule.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.kind, "DeadLetterQueue");
    assert_eq!(Some(&owner.uid), dlq.metadata.uid.as_ref());
    assert_eq!(
        rule.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("dlq-operator")
    );
    let alerts: Vec<&str> = rule.data["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.contains(&"DeadLetterBacklogHigh"), "{alerts:?}");
    assert!(alerts.contains(&"DeadLetterMetricsAbsent"), "{alerts:?}");

    // Alerting disabled: the rule goes and so does the condition.
    api.patch(
        "order-events",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"alerting": {"prometheusRule": {"enabled": false}}}})),
    )
    .await
    .expect("disable alerting");
    wait_for(Duration::from_secs(60), "rule deleted", &op, || async {
        rules
            .get_opt("dlq-order-events")
            .await
            .ok()
            .and_then(|r| r.is_none().then_some(()))
    })
    .await;
    wait_for(
        Duration::from_secs(30),
        "condition removed",
        &op,
        || async {
            let o = api.get("order-events").await.ok()?;
            let has = o.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "AlertRulesReady");
            (!has).then_some(())
        },
    )
    .await;
    drop(op);
    cleanup(&prefix).await;
}

#[tokio::test]
async fn a_cluster_resource_cannot_take_over_queues_a_standalone_apply_owns() {
    // Ownership holds across drivers: the examples applied with `dlq-operator apply -f`
    // (owners default/order-events, default/payment-callback), then the same queue names
    // planned by resources of another namespace in the cluster. Before the ownership
    // records the operator rewrote the standalone topology's policies.
    const TEST: &str = "a_cluster_resource_cannot_take_over_queues_a_standalone_apply_owns";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let prefix = unique("e2e-own");
    let (docs, _) = common::e2e::prefixed_examples("default", &prefix);
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml: Vec<String> = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).expect("yaml"))
        .collect();
    std::fs::write(dir.path().join("examples.yaml"), yaml.join("---\n")).expect("write");
    let standalone = cli(&["apply", "-f", &dir.path().display().to_string()]);
    assert!(standalone.status.success(), "{}", text(&standalone));
    let dlq_policy = format!("/api/policies/%2F/dlq-operator.{prefix}-order-events.dlq");
    let before = mgmt_get(&dlq_policy).await.expect("policy");

    let ns = namespace(&client, "e2e-own").await;
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let names = create_examples(&client, &kubeconfig, &ns, &prefix).await;
    let api = dlqs(&client, &ns);
    for name in &names {
        let (_, reason, message) = wait_for(
            Duration::from_secs(60),
            &format!("{name} NameConflict"),
            &op,
            || async { ready(&api, name).await.filter(|r| r.0 == "False") },
        )
        .await;
        assert_eq!(reason, "NameConflict", "{message}");
        assert!(
            message.contains(&format!("belongs to DeadLetterQueue default/{name}")),
            "{message}"
        );
    }
    assert_eq!(
        mgmt_get(&dlq_policy).await.expect("policy")["definition"],
        before["definition"]
    );
    drop(op);
    cleanup(&prefix).await;
}
