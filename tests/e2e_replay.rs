//! The DeadLetterReplay controller (`dlq-operator run`, the real binary as a local
//! process) against a real Kubernetes API server and the real RabbitMQ (docs/DEVELOPMENT.md, "Testing"):
//! a filtered replay with exact counts, Events, printer columns and metrics; an invalid
//! filter; a replay that waits for its DeadLetterQueue; a replay that survives a SIGTERM
//! and a SIGKILL of the operator. Without `DLQ_E2E_KUBECONFIG` each test reports itself as
//! skipped, by name.
//!
//! Each test uses its own namespace and queue names prefixed with a unique id.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{json, Value};

use common::dlq::{confirm_channel, drain_ids, header, publish, ready, ready_now, text};
use common::e2e::{
    client, create_dlq, dlqs, ensure_crds, events_about, lease_flags, lease_holder,
    namespace_with_broker, ready as dlq_ready, ready_orders, table, wait_for, Operator,
};
use common::{cleanup, unique, AMQP};
use dlq_operator::crd::DeadLetterReplay;
use dlq_operator::object::api_resource;

const LONG: Duration = Duration::from_secs(60);

fn replays(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource::<DeadLetterReplay>())
}

/// A namespace with the broker Secret `rabbit` and the RetryPolicy `policy`.
async fn namespace_with_references(client: &Client, prefix: &str) -> String {
    namespace_with_broker(client, prefix, AMQP).await
}

async fn create_replay(client: &Client, ns: &str, name: &str, spec: Value) -> String {
    let r =
        DynamicObject::new(name, &api_resource::<DeadLetterReplay>()).data(json!({ "spec": spec }));
    let created = replays(client, ns)
        .create(&PostParams::default(), &r)
        .await
        .expect("create DeadLetterReplay");
    created.metadata.uid.expect("uid")
}

/// The replay's status once `pred` holds for it.
async fn status_when(
    client: &Client,
    ns: &str,
    name: &str,
    op: &Operator,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let api = replays(client, ns);
    wait_for(LONG, what, op, || async {
        let o = api.get_opt(name).await.ok()??;
        let status = o.data.get("status")?.clone();
        pred(&status).then_some(status)
    })
    .await
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |s: &Value| s["phase"] == phase
}

fn complete(status: &Value) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Complete"))
        .cloned()
        .unwrap_or_else(|| panic!("Complete condition in {status}"));
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

fn count(status: &Value, field: &str) -> u64 {
    status[field]
        .as_u64()
        .unwrap_or_else(|| panic!("status.{field} in {status}"))
}

/// Reasons of the Events recorded about the DeadLetterReplay `name`, oldest first, once
/// the last one is `last`: the operator writes a status before its Event, so a test that
/// saw the status may list the Events before the last one is recorded. Fails after
/// [`LONG`] with the reasons seen and `op`'s log.
async fn event_reasons(
    client: &Client,
    ns: &str,
    name: &str,
    op: &Operator,
    last: &str,
) -> Vec<String> {
    let what = format!("a {last} Event about {name}");
    wait_for(LONG, &what, op, || async {
        let reasons: Vec<String> = events_about(client, ns, "DeadLetterReplay", name)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        (reasons.last().map(String::as_str) == Some(last)).then_some(reasons)
    })
    .await
}

/// The value of the sample `line_start` (metric name and labels, as rendered) on the
/// operator's `/metrics`.
async fn metric(op: &Operator, line_start: &str) -> Option<f64> {
    op.metrics()
        .await
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Dead letters of source queue `q` with error class `class`, as the consumer helper
/// writes them.
fn dead_letter(q: &str, class: &str) -> FieldTable {
    header(&[
        ("dlq-error-class", text(class)),
        ("dlq-retry-count", AMQPValue::LongLongInt(3)),
        ("dlq-reason", text("MaxRetriesExceeded")),
        ("dlq-original-queue", text(q)),
    ])
}

#[tokio::test]
async fn a_filtered_replay_succeeds_with_exact_counts_events_columns_and_metrics() {
    const TEST: &str = "a_filtered_replay_succeeds_with_exact_counts_events_columns_and_metrics";
    let Some(o) = ready_orders(TEST, "e2e-replay", "e2e-rpl").await else {
        return;
    };
    let prefix = o.prefix.clone();
    let (client, ns, q, dlq, op) = (&o.client, &o.ns, &o.q, &o.dlq, &o.op);
    let api = dlqs(client, ns);
    // The monitor has seen the empty dead-letter queue (the ratio's starting point).
    wait_for(LONG, "a first depth poll", op, || async {
        let o = api.get("orders").await.ok()?;
        o.data["status"]["depth"]["deadLetter"].as_u64()
    })
    .await;

    // 30 dead letters of three classes; 10 Timeouts match. Two more Timeouts are
    // matched but skipped: one already replayed 3 times (maxReplays), one that failed in
    // another queue.
    let (conn, ch) = confirm_channel().await;
    let classes = ["Timeout", "Validation", "Parse"];
    let mut expected = BTreeSet::new();
    let mut all = BTreeSet::new();
    for i in 0..30 {
        let id = format!("m{i:02}");
        let class = classes[i % 3];
        if class == "Timeout" {
            expected.insert(id.clone());
        }
        all.insert(id.clone());
        publish(&ch, dlq, &id, dead_letter(q, class)).await;
    }
    let mut looping = dead_letter(q, "Timeout");
    looping.insert("dlq-replay-count".into(), AMQPValue::LongLongInt(3));
    publish(&ch, dlq, "looping", looping).await;
    publish(&ch, dlq, "elsewhere", dead_letter("other-queue", "Timeout")).await;
    all.extend(["looping".to_string(), "elsewhere".to_string()]);

    let uid = create_replay(
        client,
        ns,
        "timeouts",
        json!({"deadLetterQueueRef": {"name": "orders"}, "filter": ["class=Timeout"]}),
    )
    .await;
    let status = status_when(
        client,
        ns,
        "timeouts",
        op,
        "timeouts Succeeded",
        phase_is("Succeeded"),
    )
    .await;
    assert_eq!(
        ["scanned", "matched", "replayed", "skipped", "failed", "inDoubt"]
            .map(|f| count(&status, f)),
        [32, 12, 10, 2, 0, 0],
        "{status}"
    );
    assert_eq!(status["replayId"], uid.as_str());
    assert!(status["startTime"].is_string() && status["completionTime"].is_string());
    let (st, reason, message) = complete(&status);
    assert_eq!((st.as_str(), reason.as_str()), ("True", "Succeeded"));
    assert_eq!(
        message,
        "replayed 10 of 12 matching message(s) (32 scanned, 2 skipped, 0 failed)"
    );
    let reasons: Vec<String> = serde_json::from_value(status["reasons"].clone()).expect("reasons");
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons.contains(&"skipped: already replayed 3 times (spec.maxReplays): 1".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("skipped: original queue other-queue") && r.ends_with(": 1")),
        "{reasons:?}"
    );

    // Metrics, labelled with the DeadLetterQueue.
    let sample = |outcome: &str| {
        format!(
            "dlq_replayed_messages_total{{name=\"orders\",namespace=\"{ns}\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(metric(op, &sample("replayed")).await, Some(10.0));
    assert_eq!(metric(op, &sample("skipped")).await, Some(2.0));
    assert_eq!(metric(op, &sample("failed")).await, Some(0.0));
    // 32 dead-lettered since the first poll, 10 of them replayed: once a depth poll shows
    // the 22 left (the statistics lag by up to 5 s). Read before the queues are drained
    // below (a consumer's removals are not seen: the ratio would rise).
    let ratio = format!("dlq_compensation_success_ratio{{name=\"orders\",namespace=\"{ns}\"}}");
    let want = 10.0 / 32.0;
    wait_for(LONG, "compensation ratio 10/32", op, || async {
        metric(op, &ratio).await.filter(|r| (r - want).abs() < 1e-9)
    })
    .await;

    // Exactly the matching ones are in the source queue, once; the rest stayed.
    let back: BTreeSet<String> = drain_ids(&ch, q).await.into_iter().collect();
    assert_eq!(back, expected);
    assert_eq!(ready(&ch, q).await, 0, "drained: each replayed once");
    let rest: BTreeSet<String> = drain_ids(&ch, dlq).await.into_iter().collect();
    assert_eq!(rest.len(), 22);
    assert_eq!(
        back.union(&rest).cloned().collect::<BTreeSet<_>>(),
        all,
        "nothing lost"
    );

    // Events: started, then finished.
    let reasons = event_reasons(client, ns, "timeouts", op, "Succeeded").await;
    assert_eq!(reasons, ["Started", "Succeeded"], "{reasons:?}");

    // `kubectl get dlqr`.
    let (columns, rows) = table(client, ns, "deadletterreplays").await;
    assert_eq!(
        columns,
        ["Name", "DLQ", "Phase", "Matched", "Replayed", "Skipped", "Failed", "Age"]
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0][..7],
        [
            json!("timeouts"),
            json!("orders"),
            json!("Succeeded"),
            json!(12),
            json!(10),
            json!(2),
            json!(0)
        ]
    );

    let _ = conn.close(200, "bye".into()).await;
    drop(o);
    cleanup(&prefix).await;
}

#[tokio::test]
async fn an_invalid_filter_fails_and_a_replay_waits_for_its_dead_letter_queue() {
    const TEST: &str = "an_invalid_filter_fails_and_a_replay_waits_for_its_dead_letter_queue";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_references(&client, "e2e-replay-wait").await;
    let prefix = unique("e2e-rplw");
    let q = format!("{prefix}-late");
    let dlq = format!("{q}.dlq");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );

    // An invalid filter (the API server takes it: the filter grammar is the operator's).
    create_replay(
        &client,
        &ns,
        "bad",
        json!({"deadLetterQueueRef": {"name": "late"}, "filter": ["class=Timeout", "age>=1h"]}),
    )
    .await;
    let status = status_when(&client, &ns, "bad", &op, "bad Failed", phase_is("Failed")).await;
    let (st, reason, message) = complete(&status);
    assert_eq!((st.as_str(), reason.as_str()), ("True", "InvalidSpec"));
    assert!(message.starts_with("spec.filter[1]: "), "{message}");
    assert_eq!(
        event_reasons(&client, &ns, "bad", &op, "InvalidSpec").await,
        ["InvalidSpec"]
    );

    // A replay of a DeadLetterQueue that does not exist yet waits for it.
    create_replay(
        &client,
        &ns,
        "early",
        json!({"deadLetterQueueRef": {"name": "late"}}),
    )
    .await;
    let status = status_when(
        &client,
        &ns,
        "early",
        &op,
        "early Pending",
        phase_is("Pending"),
    )
    .await;
    let (st, reason, message) = complete(&status);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "DeadLetterQueueNotFound")
    );
    assert_eq!(
        message,
        format!("spec.deadLetterQueueRef.name: DeadLetterQueue {ns}/late not found")
    );

    // Dead letters are waiting in the (already declared) dead-letter queue; then the
    // DeadLetterQueue is created and the replay runs.
    let (conn, ch) = confirm_channel().await;
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("classic".into()),
    );
    ch.queue_declare(
        dlq.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .expect("declare the dead-letter queue");
    for id in ["a", "b", "c"] {
        publish(&ch, &dlq, id, dead_letter(&q, "Timeout")).await;
    }
    create_dlq(&client, &ns, "late", &q, json!({})).await;
    let status = status_when(
        &client,
        &ns,
        "early",
        &op,
        "early Succeeded",
        phase_is("Succeeded"),
    )
    .await;
    assert_eq!(count(&status, "replayed"), 3, "{status}");
    assert_eq!(drain_ids(&ch, &q).await, ["a", "b", "c"]);
    assert_eq!(ready(&ch, &dlq).await, 0);
    // (A reconcile between the creation and the topology's apply may add a
    // DeadLetterQueueNotReady in between.)
    let reasons = event_reasons(&client, &ns, "early", &op, "Succeeded").await;
    assert_eq!(
        reasons.first().map(String::as_str),
        Some("DeadLetterQueueNotFound")
    );
    assert!(
        reasons.ends_with(&["Started".to_string(), "Succeeded".to_string()]),
        "{reasons:?}"
    );
    let _ = conn.close(200, "bye".into()).await;
    drop(op);
    cleanup(&prefix).await;
}

/// A namespace, a DeadLetterQueue `work` whose dead-letter queue holds `n` dead letters
/// (ids `r000`…), the operator, and a rate-limited replay `slow` of it, running with at
/// least `started` messages back in the source queue.
struct Interrupted {
    client: Client,
    kubeconfig: String,
    ns: String,
    prefix: String,
    q: String,
    dlq: String,
    ids: BTreeSet<String>,
    op: Operator,
    conn: lapin::Connection,
    ch: lapin::Channel,
}

async fn running_replay(test: &str, n: usize, rate: u32, started: u32) -> Option<Interrupted> {
    running_replay_via(test, n, rate, started, AMQP).await
}

/// The flags of an operator without leader election.
const NO_ELECTION: &[&str] = &["--leader-election=false"];

/// [`running_replay`] with the operator reaching the broker's AMQP port at `amqp`.
async fn running_replay_via(
    test: &str,
    n: usize,
    rate: u32,
    started: u32,
    amqp: &str,
) -> Option<Interrupted> {
    running_replay_with(test, n, rate, started, amqp, NO_ELECTION).await
}

/// [`running_replay_via`] with the operator started with `election` (its leader election
/// flags) after `--namespace`.
async fn running_replay_with(
    test: &str,
    n: usize,
    rate: u32,
    started: u32,
    amqp: &str,
    election: &[&str],
) -> Option<Interrupted> {
    let client = client(test).await?;
    let kubeconfig = common::e2e::kubeconfig(test).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-replay-stop", amqp).await;
    let prefix = unique("e2e-rpls");
    let q = format!("{prefix}-work");
    let dlq = format!("{q}.dlq");
    let op = Operator::start(&kubeconfig, &[&["--namespace", &ns][..], election].concat());
    create_dlq(&client, &ns, "work", &q, json!({})).await;
    let api = dlqs(&client, &ns);
    wait_for(LONG, "work Ready", &op, || async {
        dlq_ready(&api, "work").await.filter(|r| r.0 == "True")
    })
    .await;
    let (conn, ch) = confirm_channel().await;
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let id = format!("r{i:03}");
        publish(&ch, &dlq, &id, dead_letter(&q, "Timeout")).await;
        ids.insert(id);
    }
    create_replay(
        &client,
        &ns,
        "slow",
        json!({"deadLetterQueueRef": {"name": "work"}, "rate": rate}),
    )
    .await;
    status_when(
        &client,
        &ns,
        "slow",
        &op,
        "slow Running",
        phase_is("Running"),
    )
    .await;
    let ch_ref = &ch;
    let q_ref = &q;
    wait_for(LONG, "replay progress", &op, || async move {
        (ready_now(ch_ref, q_ref).await >= started).then_some(())
    })
    .await;
    Some(Interrupted {
        client,
        kubeconfig,
        ns,
        prefix,
        q,
        dlq,
        ids,
        op,
        conn,
        ch,
    })
}

#[tokio::test]
async fn a_replay_stopped_by_sigterm_is_resumed_by_the_next_operator_exactly() {
    const TEST: &str = "a_replay_stopped_by_sigterm_is_resumed_by_the_next_operator_exactly";
    let n = 100;
    let Some(mut t) = running_replay(TEST, n, 20, 10).await else {
        return;
    };
    t.op.signal("-TERM");
    let exit = t.op.wait(Duration::from_secs(30)).await;
    assert!(
        exit.is_some_and(|s| s.success()),
        "graceful exit: {exit:?}; log:\n{}",
        t.op.log()
    );
    let stopped = replays(&t.client, &t.ns)
        .get("slow")
        .await
        .expect("replay")
        .data["status"]
        .clone();
    assert_eq!(stopped["phase"], "Running", "{stopped}");
    assert_eq!(complete(&stopped).1, "Interrupted");
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    let in_dlq = u64::from(ready(&t.ch, &t.dlq).await);
    assert_eq!(
        count(&stopped, "replayed"),
        in_source,
        "the counts written at shutdown are exact"
    );
    assert_eq!(count(&stopped, "inDoubt"), 0, "drained: nothing in doubt");
    assert_eq!(
        in_source + in_dlq,
        n as u64,
        "nothing lost, nothing doubled"
    );
    assert!(in_source < n as u64, "stopped before the end");
    let first_start = stopped["startTime"].clone();

    // The next operator resumes it to the end, counting on from the status.
    let op = Operator::start(
        &t.kubeconfig,
        &["--namespace", &t.ns, "--leader-election=false"],
    );
    let done = status_when(
        &t.client,
        &t.ns,
        "slow",
        &op,
        "slow Succeeded",
        phase_is("Succeeded"),
    )
    .await;
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    assert_eq!(in_source, n as u64, "every message replayed");
    assert_eq!(ready(&t.ch, &t.dlq).await, 0);
    assert_eq!(
        ["scanned", "matched", "replayed", "skipped", "failed", "inDoubt"].map(|f| count(&done, f)),
        [n as u64, n as u64, n as u64, 0, 0, 0],
        "{done}"
    );
    assert_eq!(done["startTime"], first_start, "the first start is kept");
    let ids: BTreeSet<String> = drain_ids(&t.ch, &t.q).await.into_iter().collect();
    assert_eq!(ids, t.ids, "each message exactly once");
    assert_eq!(
        event_reasons(&t.client, &t.ns, "slow", &op, "Succeeded").await,
        ["Started", "Interrupted", "Resumed", "Succeeded"]
    );
    let _ = t.conn.close(200, "bye".into()).await;
    drop(op);
    cleanup(&t.prefix).await;
}

/// SIGKILL of the operator in the middle of a replay, and a new operator that resumes
/// it. Returns the status read right after the kill, what had arrived in the source queue
/// by then (once the broker gave the held messages back), the final status and what had
/// arrived in the end.
async fn killed_and_resumed(test: &str) -> Option<(Value, u64, Value, u64)> {
    let n = 100;
    let mut t = running_replay(test, n, 20, 10).await?;
    t.op.signal("-KILL");
    t.op.wait(Duration::from_secs(10)).await.expect("killed");
    let killed = replays(&t.client, &t.ns)
        .get("slow")
        .await
        .expect("replay")
        .data["status"]
        .clone();
    assert_eq!(killed["phase"], "Running", "{killed}");
    // The broker gives the held messages back once it sees the connection gone.
    let (ch, q, dlq) = (&t.ch, &t.q, &t.dlq);
    wait_for(LONG, "held messages back", &t.op, || async move {
        let total = u64::from(ready(ch, q).await) + u64::from(ready(ch, dlq).await);
        (total >= n as u64).then_some(())
    })
    .await;
    let arrived = u64::from(ready(&t.ch, &t.q).await);
    assert!(arrived < n as u64, "killed before the end ({arrived})");
    assert!(
        count(&killed, "replayed") <= arrived,
        "never counted as replayed what did not arrive: {killed}"
    );

    let op = Operator::start(
        &t.kubeconfig,
        &["--namespace", &t.ns, "--leader-election=false"],
    );
    let done = status_when(
        &t.client,
        &t.ns,
        "slow",
        &op,
        "slow Succeeded after the kill",
        phase_is("Succeeded"),
    )
    .await;
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    let in_dlq = u64::from(ready(&t.ch, &t.dlq).await);
    assert!(
        in_source + in_dlq >= n as u64,
        "source {in_source} + DLQ {in_dlq} < {n}"
    );
    assert_eq!(in_dlq, 0, "every message replayed in the end");
    let mut seen: BTreeSet<String> = drain_ids(&t.ch, &t.q).await.into_iter().collect();
    seen.extend(drain_ids(&t.ch, &t.dlq).await);
    assert_eq!(seen, t.ids, "every message id is present at least once");
    assert!(
        count(&done, "replayed") <= in_source,
        "never counted as replayed what did not arrive: {done}"
    );
    let _ = t.conn.close(200, "bye".into()).await;
    drop(op);
    cleanup(&t.prefix).await;
    Some((killed, arrived, done, in_source))
}

#[tokio::test]
async fn a_replay_killed_mid_run_loses_nothing_and_is_resumed() {
    const TEST: &str = "a_replay_killed_mid_run_loses_nothing_and_is_resumed";
    let Some((_, _, done, _)) = killed_and_resumed(TEST).await else {
        return;
    };
    assert_eq!(complete(&done).1, "Succeeded");
}

/// With a replay engine that checkpoints before each batch (the contract of
/// `dlq::replay::Observer::checkpoint`), the status after a SIGKILL bounds what was
/// sent: `replayed ≤ arrived ≤ replayed + inDoubt`, before and after the resume.
#[tokio::test]
async fn a_replay_killed_mid_run_bounds_what_it_sent_with_in_doubt() {
    const TEST: &str = "a_replay_killed_mid_run_bounds_what_it_sent_with_in_doubt";
    let Some((killed, arrived, done, arrived_in_the_end)) = killed_and_resumed(TEST).await else {
        return;
    };
    let bounds = |status: &Value, arrived: u64, when: &str| {
        let (replayed, in_doubt) = (count(status, "replayed"), count(status, "inDoubt"));
        assert!(
            replayed <= arrived && arrived <= replayed + in_doubt,
            "{when}: replayed {replayed} (+{in_doubt} in doubt) must bound the {arrived} that arrived"
        );
    };
    bounds(&killed, arrived, "after the kill");
    // The in-doubt batch stays recorded; the resumed run counts on from the status.
    assert_eq!(count(&done, "inDoubt"), count(&killed, "inDoubt"), "{done}");
    bounds(&done, arrived_in_the_end, "in the end");
}

/// The broker goes away in the middle of a run (a proxy in front of its AMQP port is
/// stopped): the attempt fails, the condition says so and that it is retried, and once
/// the broker is back the run resumes where it stopped, to the end, losing nothing.
#[tokio::test]
async fn a_broker_lost_mid_run_is_retried_and_the_replay_resumes() {
    const TEST: &str = "a_broker_lost_mid_run_is_retried_and_the_replay_resumes";
    if common::e2e::kubeconfig(TEST).is_none() {
        return;
    }
    let mut proxy = common::proxy::Proxy::start("127.0.0.1:5672").await;
    let amqp = format!("amqp://guest:guest@{}/%2f", proxy.addr);
    let n = 60;
    let Some(t) = running_replay_via(TEST, n, 20, 10, &amqp).await else {
        return;
    };
    proxy.stop().await;
    let failed = status_when(
        &t.client,
        &t.ns,
        "slow",
        &t.op,
        "a failed attempt in status",
        |s| complete(s).2.starts_with("attempt 1 of 4 failed: "),
    )
    .await;
    assert_eq!(failed["phase"], "Running", "{failed}");
    let (st, reason, message) = complete(&failed);
    assert_eq!(st, "False");
    assert!(reason.starts_with("Broker"), "{reason}: {message}");
    assert!(message.ends_with("retrying in 5 s"), "{message}");
    proxy.restart().await;
    let done = status_when(
        &t.client,
        &t.ns,
        "slow",
        &t.op,
        "slow Succeeded after the broker came back",
        phase_is("Succeeded"),
    )
    .await;
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    assert_eq!(ready(&t.ch, &t.dlq).await, 0, "every message replayed");
    assert!(in_source >= n as u64, "nothing lost: {in_source}");
    assert!(
        count(&done, "replayed") <= in_source,
        "never counted as replayed what did not arrive: {done}"
    );
    let ids: BTreeSet<String> = drain_ids(&t.ch, &t.q).await.into_iter().collect();
    assert_eq!(ids, t.ids, "every message id arrived");
    let reasons = event_reasons(&t.client, &t.ns, "slow", &t.op, "Succeeded").await;
    assert_eq!(reasons.first().map(String::as_str), Some("Started"));
    assert_eq!(reasons.last().map(String::as_str), Some("Succeeded"));
    assert!(
        reasons.iter().any(|r| r == &reason),
        "a Warning Event for the failed attempt: {reasons:?}"
    );
    let _ = t.conn.close(200, "bye".into()).await;
    drop(t.op);
    cleanup(&t.prefix).await;
}

/// A DeadLetterReplay deleted in the middle of its run: the next checkpoint's status write
/// finds it gone, the engine settles its copies and stops; nothing is lost, the rest stays
/// in the dead-letter queue. Needs a replay engine that checkpoints before each batch.
#[tokio::test]
async fn a_replay_deleted_mid_run_stops_and_loses_nothing() {
    const TEST: &str = "a_replay_deleted_mid_run_stops_and_loses_nothing";
    let n = 100;
    let Some(t) = running_replay(TEST, n, 20, 10).await else {
        return;
    };
    replays(&t.client, &t.ns)
        .delete("slow", &Default::default())
        .await
        .expect("delete");
    wait_for(LONG, "the run to stop", &t.op, || async {
        t.op.log().contains("deleted while running").then_some(())
    })
    .await;
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    let in_dlq = u64::from(ready(&t.ch, &t.dlq).await);
    assert_eq!(
        in_source + in_dlq,
        n as u64,
        "nothing lost, nothing doubled"
    );
    assert!(in_source < n as u64, "stopped before the end");
    let _ = t.conn.close(200, "bye".into()).await;
    drop(t.op);
    cleanup(&t.prefix).await;
}

/// Operator failover (docs/RELIABILITY.md): two operators share a Lease; the leader is
/// SIGKILLed in the middle of a DeadLetterReplay; the standby takes the Lease once it
/// expires and finishes the replay: Succeeded, every message id in the source queue,
/// none left in the dead-letter queue, the duplicates within `inDoubt`.
#[tokio::test]
async fn a_replay_whose_leader_is_killed_is_finished_by_the_standby() {
    const TEST: &str = "a_replay_whose_leader_is_killed_is_finished_by_the_standby";
    let lease = unique("e2e-failover");
    let duration = 6u64;
    let leader = lease_flags(&lease, duration, "replica-a");
    let leader: Vec<&str> = leader.iter().map(String::as_str).collect();
    let n = 100;
    let Some(mut t) = running_replay_with(TEST, n, 20, 10, AMQP, &leader).await else {
        return;
    };
    assert_eq!(
        lease_holder(&t.client, &lease).await.as_deref(),
        Some("replica-a"),
        "the first operator leads"
    );
    let standby = lease_flags(&lease, duration, "replica-b");
    let standby: Vec<&str> = standby.iter().map(String::as_str).collect();
    let b = Operator::start(
        &t.kubeconfig,
        &[&["--namespace", &t.ns][..], &standby].concat(),
    );
    wait_for(LONG, "b answers /healthz", &b, || async {
        b.healthy().await.then_some(())
    })
    .await;
    t.op.signal("-KILL");
    t.op.wait(Duration::from_secs(10)).await.expect("killed");
    let killed = std::time::Instant::now();
    let (client, lease_ref) = (&t.client, &lease);
    wait_for(LONG, "b holds the lease", &b, || async move {
        (lease_holder(client, lease_ref).await.as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    let handover = killed.elapsed();
    let done = status_when(
        &t.client,
        &t.ns,
        "slow",
        &b,
        "slow Succeeded after the failover",
        phase_is("Succeeded"),
    )
    .await;
    let finished = killed.elapsed();
    let in_source = u64::from(ready(&t.ch, &t.q).await);
    assert_eq!(
        ready(&t.ch, &t.dlq).await,
        0,
        "every message replayed: {done}"
    );
    let (replayed, in_doubt) = (count(&done, "replayed"), count(&done, "inDoubt"));
    reliability!(
        "operator failover | leader SIGKILLed mid-replay of {n} | standby leads after {:.1} s (lease {duration} s), replay Succeeded {:.1} s after the kill | arrived {in_source}, replayed {replayed}, inDoubt {in_doubt}",
        handover.as_secs_f64(),
        finished.as_secs_f64()
    );
    assert!(
        handover <= Duration::from_secs(duration + 4),
        "handover took {handover:?} with a {duration} s lease"
    );
    assert!(
        replayed <= in_source && in_source <= n as u64 + in_doubt,
        "arrived {in_source} of {n}: duplicates beyond inDoubt {in_doubt}: {done}"
    );
    let ids: BTreeSet<String> = drain_ids(&t.ch, &t.q).await.into_iter().collect();
    assert_eq!(ids, t.ids, "every message id arrived");
    let _ = t.conn.close(200, "bye".into()).await;
    drop(b);
    cleanup(&t.prefix).await;
}
