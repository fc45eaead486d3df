//! `dlq inspect` against the real RabbitMQ (127.0.0.1, guest/guest): the summary of a
//! dead-letter queue reads the contract's headers and the broker's `x-death`, and
//! inspecting a quorum dead-letter queue with a delivery limit — 30 times, far past the
//! limit — neither loses, dead-letters nor duplicates a message (docs/ARCHITECTURE.md, "Broker topology"; the rule
//! is `dlq::release_for`).

mod common;

use lapin::options::{BasicGetOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::json;

use common::dlq::{
    applied, applied_manifests, confirm_channel, connection, drain_ids, header, ids_in_order,
    now_ms, policy, publish, ready, ready_now, text, topology,
};
use common::{cleanup, MGMT};
use dlq_operator::dlq::browse::InspectOptions;
use dlq_operator::rabbitmq::dlq::inspect;

const OPTS: InspectOptions = InspectOptions {
    max_messages: 10_000,
    sample_size: 3,
    preview_bytes: 64,
};

#[tokio::test]
async fn summary_reads_contract_headers_and_x_death() {
    let q = common::unique("t-inspect-sum");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    // Three dead-lettered by the helper (contract headers), two rejected in the source
    // queue (the broker dead-letters them with x-death).
    for (i, class) in ["timeout", "timeout", "validation"].iter().enumerate() {
        publish(
            &ch,
            &dlq,
            &format!("c{i}"),
            header(&[
                ("dlq-error-class", text(class)),
                ("dlq-reason", text("MaxRetriesExceeded")),
                ("dlq-retry-count", AMQPValue::LongLongInt(3)),
                ("dlq-original-queue", text(&q)),
                (
                    "dlq-last-failed-at",
                    AMQPValue::LongLongInt((now_ms() - 60_000) as i64),
                ),
            ]),
        )
        .await;
    }
    for i in 0..2 {
        publish(&ch, &q, &format!("r{i}"), FieldTable::default()).await;
        let m = ch
            .basic_get(q.as_str().into(), BasicGetOptions { no_ack: false })
            .await
            .expect("get")
            .expect("a message");
        m.delivery
            .reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");
    }
    // The broker's dead-lettering is asynchronous: wait for both.
    for _ in 0..100 {
        if ready(&ch, &dlq).await == 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let i = inspect(&connection(), &t, OPTS, now_ms())
        .await
        .expect("inspect");
    assert_eq!((i.total, i.scanned), (5, 5), "{i:?}");
    assert_eq!(i.by_error_class["Timeout"], 2);
    assert_eq!(i.by_error_class["Validation"], 1);
    assert_eq!(i.by_error_class["unclassified"], 2);
    assert_eq!(i.by_reason["MaxRetriesExceeded"], 3);
    assert_eq!(i.by_reason["rejected"], 2);
    assert_eq!(i.by_retry_count[&3], 3);
    assert_eq!(
        i.by_original_queue[&q], 5,
        "x-death names the source queue too"
    );
    assert!(i.oldest_age_ms.is_some_and(|a| a >= 60_000), "{i:?}");
    assert!(i.newest_age_ms.is_some_and(|a| a < 60_000), "{i:?}");
    assert_eq!(i.sample.len(), 3);
    assert_eq!(i.sample[0].body_preview, "body of c0");
    assert_eq!(
        i.rotated, 0,
        "no delivery limit on this queue: requeued in place"
    );
    // Nothing changed: same messages, same order.
    let order: Vec<String> = ids_in_order(&ch, &dlq).await;
    assert_eq!(order, ["c0", "c1", "c2", "r0", "r1"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

#[tokio::test]
async fn inspecting_a_quorum_dlq_with_a_delivery_limit_30_times_loses_nothing() {
    let q = common::unique("t-inspect-limit");
    let t = applied(&q, Some(3)).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let mut expected: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    for id in &expected {
        publish(
            &ch,
            &dlq,
            id,
            header(&[("dlq-error-class", text("timeout"))]),
        )
        .await;
    }
    let mut rotated = 0;
    for run in 0..30 {
        let i = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .unwrap_or_else(|e| panic!("inspect {run}: {e}"));
        assert_eq!((i.total, i.scanned), (20, 20), "run {run}: {i:?}");
        assert_eq!(i.by_error_class["Timeout"], 20, "run {run}");
        rotated += i.rotated;
    }
    assert!(
        rotated >= 20,
        "the limit was reached, so messages were rotated: {rotated}"
    );
    assert_eq!(ready(&ch, &dlq).await, 20);
    expected.sort();
    assert_eq!(
        drain_ids(&ch, &dlq).await,
        expected,
        "every message once, none lost"
    );
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

#[tokio::test]
async fn a_dead_letter_queue_missing_on_the_broker_is_named() {
    let q = common::unique("t-inspect-missing");
    let t = topology(&q, None);
    let err = inspect(&connection(), &t, OPTS, now_ms())
        .await
        .expect_err("nothing was applied");
    assert!(err.to_string().contains(&format!("{q}.dlq")), "{err}");
}

/// The CLI in standalone mode: the manifests' DeadLetterQueue, JSON and table reports;
/// bad input gets one clear error and a non-zero exit, and touches no message.
#[tokio::test]
async fn cli_inspect_standalone_and_bad_input() {
    let q = common::unique("t-inspect-cli");
    let dir = common::manifests(&[
        ("s.yaml", &common::secret_yaml("s", "guest", "guest", MGMT)),
        (
            "p.yaml",
            &common::policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n"),
        ),
        ("d.yaml", &common::dlq_yaml("d", &q, "p", "s", "")),
    ]);
    let path = dir.path().display().to_string();
    // Not applied yet: the dead-letter queue is missing on the broker, and named.
    let out = common::cli(&["dlq", "inspect", "--standalone", "-f", &path, "--name", "d"]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    assert!(
        common::text(&out).contains(&format!("{q}.dlq")),
        "{}",
        common::text(&out)
    );

    let out = common::cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", common::text(&out));
    let (conn, ch) = confirm_channel().await;
    let dlq = format!("{q}.dlq");
    for (i, class) in ["timeout", "parse", "timeout"].iter().enumerate() {
        publish(
            &ch,
            &dlq,
            &format!("m{i}"),
            header(&[("dlq-error-class", text(class))]),
        )
        .await;
    }

    let out = common::cli(&[
        "dlq",
        "inspect",
        "--standalone",
        "-f",
        &path,
        "--name",
        "default/d",
        "-o",
        "json",
        "--sample",
        "1",
        "--show-payload",
    ]);
    assert!(out.status.success(), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["resource"], "default/d");
    assert_eq!(report["total"], 3);
    assert_eq!(report["byErrorClass"], json!({"Parse": 1, "Timeout": 2}));
    assert_eq!(report["sample"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["sample"][0]["bodyPreview"], "body of m0");
    let out = common::cli(&["dlq", "inspect", "--standalone", "-f", &path, "--name", "d"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("messages         3 (read 3)"), "{table}");
    assert!(table.contains("Timeout"), "{table}");

    for (args, needle, code) in [
        (vec!["--name", "nope"], "no DeadLetterQueue \"nope\"", 1),
        (
            vec!["--name", "d", "--max-messages", "0"],
            "max-messages",
            2,
        ),
        (vec!["--name", "d", "-o", "xml"], "xml", 2),
    ] {
        let mut all = vec!["dlq", "inspect", "--standalone", "-f", &path];
        all.extend(args);
        let out = common::cli(&all);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{all:?}: {}",
            common::text(&out)
        );
        assert!(
            common::text(&out).contains(needle),
            "{all:?}: {}",
            common::text(&out)
        );
    }
    let out = common::cli(&["dlq", "inspect", "not-a-reference"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out).contains("NAMESPACE/NAME"),
        "{}",
        common::text(&out)
    );
    // None of it touched a message.
    assert_eq!(ready(&ch, &dlq).await, 3);
    assert_eq!(drain_ids(&ch, &dlq).await, ["m0", "m1", "m2"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// `dlq inspect NAMESPACE/NAME` reads the DeadLetterQueue, its RetryPolicy and Secret from
/// a real API server (`DLQ_E2E_KUBECONFIG`; skipped without it).
#[tokio::test]
async fn cli_inspect_reads_the_dead_letter_queue_from_the_cluster() {
    const TEST: &str = "cli_inspect_reads_the_dead_letter_queue_from_the_cluster";
    let Some(client) = common::e2e::client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    common::e2e::ensure_crds(&client).await;
    let ns = common::e2e::namespace(&client, "e2e-inspect").await;
    let prefix = common::unique("e2e-inspect");
    let op = common::e2e::Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    common::e2e::create_examples(&client, &kubeconfig, &ns, &prefix).await;
    let api = common::e2e::dlqs(&client, &ns);
    common::e2e::wait_for(std::time::Duration::from_secs(60), "Ready", &op, || async {
        common::e2e::ready(&api, "order-events")
            .await
            .filter(|(s, _, _)| s == "True")
    })
    .await;
    let inspect = |reference: String| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(["dlq", "inspect", &reference, "-o", "json"])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run dlq-operator")
    };
    let out = inspect(format!("{ns}/order-events"));
    assert!(out.status.success(), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let queue = report["queues"][0]
        .as_str()
        .expect("a dead-letter queue")
        .to_string();
    assert!(queue.starts_with(&prefix), "{queue}");
    let (conn, ch) = confirm_channel().await;
    publish(
        &ch,
        &queue,
        "k0",
        header(&[("dlq-error-class", text("timeout"))]),
    )
    .await;
    let out = inspect(format!("{ns}/order-events"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["byErrorClass"], json!({"Timeout": 1}), "{report}");
    let out = inspect(format!("{ns}/nope"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out).contains(&format!("DeadLetterQueue {ns}/nope not found")),
        "{}",
        common::text(&out)
    );
    assert_eq!(drain_ids(&ch, &queue).await, ["k0"]);
    let _ = conn.close(200, "bye".into()).await;
    // The DeadLetterQueues go while the operator runs (it removes their finalizers):
    // left in the API server, an operator of a later e2e test watching every namespace
    // would declare their topology again after the clean-up below.
    api.delete_collection(&Default::default(), &Default::default())
        .await
        .expect("delete the DeadLetterQueues");
    common::e2e::wait_for(
        std::time::Duration::from_secs(60),
        "the DeadLetterQueues deleted",
        &op,
        || async {
            api.list(&Default::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(|_| ())
        },
    )
    .await;
    drop(op);
    cleanup(&prefix).await;
}

/// The smaller of an `x-delivery-limit` argument and a policy's `delivery-limit` is the
/// one the broker enforces; inspection goes by it, read at once (not from statistics that
/// lag), and loses nothing over 10 runs.
#[tokio::test]
async fn the_smallest_delivery_limit_of_argument_and_policies_is_respected() {
    let q = common::unique("t-inspect-min");
    let t = applied(&q, Some(2)).await;
    let dlq = format!("{q}.dlq");
    // Set just before the first inspection: the statistics still show the old definition.
    policy(&format!("{q}-limit"), &dlq, json!({"delivery-limit": 50})).await;
    let (conn, ch) = confirm_channel().await;
    for i in 0..5 {
        publish(&ch, &dlq, &format!("p{i}"), FieldTable::default()).await;
    }
    for run in 0..10 {
        let i = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert_eq!(i.scanned, 5, "run {run}: {i:?}");
    }
    assert_eq!(drain_ids(&ch, &dlq).await, ["p0", "p1", "p2", "p3", "p4"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// An operator policy's delivery limit counts at once: just after it is set the queue's
/// effective definition in the statistics does not show it yet (on RabbitMQ 4.0.5 the
/// operator's own `delivery-limit: -1` showed, and three messages were lost to the
/// limit of 2 it did not know of).
#[tokio::test]
async fn an_operator_policys_delivery_limit_is_respected_at_once() {
    let q = common::unique("t-inspect-op");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..3 {
        publish(&ch, &dlq, &format!("o{i}"), FieldTable::default()).await;
    }
    // Read a few times first: without a limit the messages are simply requeued.
    for run in 0..3 {
        let i = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert_eq!(i.scanned, 3, "run {run}: {i:?}");
    }
    let url = format!("{MGMT}/api/operator-policies/%2F/{q}-op");
    let http = reqwest::Client::new();
    let status = http
        .put(&url)
        .basic_auth("guest", Some("guest"))
        .json(
            &json!({"pattern": format!("^{dlq}$"), "apply-to": "queues", "priority": 0,
                      "definition": {"delivery-limit": 2}}),
        )
        .send()
        .await
        .expect("operator policy")
        .status();
    assert!(status.is_success(), "operator policy refused: {status}");
    for run in 0..5 {
        let i = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .unwrap_or_else(|e| panic!("run {run} after the operator policy: {e}"));
        assert_eq!(i.scanned, 3, "run {run}: {i:?}");
    }
    assert_eq!(drain_ids(&ch, &dlq).await, ["o0", "o1", "o2"], "none lost");
    let _ = http
        .delete(&url)
        .basic_auth("guest", Some("guest"))
        .send()
        .await;
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// A full quorum dead-letter queue with a delivery limit is not read (a message near the
/// limit could not be moved: the copy would be refused); once there is room, it is, and
/// nothing is lost.
#[tokio::test]
async fn a_full_quorum_dlq_with_a_delivery_limit_is_not_read() {
    let q = common::unique("t-inspect-full");
    let t = applied(&q, Some(2)).await;
    let dlq = format!("{q}.dlq");
    policy(
        &format!("{q}-full"),
        &dlq,
        json!({"max-length": 4, "overflow": "reject-publish"}),
    )
    .await;
    let (conn, ch) = confirm_channel().await;
    for i in 0..4 {
        publish(&ch, &dlq, &format!("f{i}"), FieldTable::default()).await;
    }
    for _ in 0..3 {
        let err = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .expect_err("a full queue is not read");
        assert!(
            err.to_string().contains("is full (4 of max-length 4)"),
            "{err}"
        );
    }
    // Room for one: readable, and 10 inspections rotate what they must without a loss.
    let taken = ch
        .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("a message");
    assert_eq!(
        taken
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("f0")
    );
    for run in 0..10 {
        let i = inspect(&connection(), &t, OPTS, now_ms())
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert_eq!(i.scanned, 3, "run {run}: {i:?}");
    }
    let mut left = drain_ids(&ch, &dlq).await;
    left.sort();
    assert_eq!(left, ["f1", "f2", "f3"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// A signal during `dlq inspect`, `dlq replay --dry-run` or `dlq purge --dry-run` (SIGINT
/// from Ctrl-C, SIGHUP from a closed terminal, SIGTERM) stops it between two messages, with
/// the message in hand settled, instead of killing it with that message held: here every
/// message is at its delivery limit (returned once under `delivery-limit: 1`), so a kill
/// with one in hand makes the broker drop it (the breaker helper lost one in 2 of 16
/// Ctrl-Cs of inspect, and with SIGHUP on replay). Each run reports that it was
/// interrupted, exits 1, and leaves every message exactly once.
#[tokio::test]
async fn a_signal_stops_cli_inspect_replay_and_purge_between_messages_losing_nothing() {
    const N: usize = 3000;
    let q = common::unique("t-inspect-signal");
    let (_dir, path) = applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    policy(&format!("{q}-limit"), &dlq, json!({"delivery-limit": 1})).await;
    let (conn, ch) = confirm_channel().await;
    let expected: Vec<String> = (0..N).map(|i| format!("s{i:04}")).collect();
    let runs: [(&[&str], &str, &str); 3] = [
        (&["inspect"], "-INT", "interrupted"),
        (&["replay", "--dry-run"], "-HUP", "Partial"),
        (
            &["purge", "--older-than", "1d", "--dry-run"],
            "-TERM",
            "interrupted",
        ),
    ];
    for (command, signal, says) in runs {
        for id in &expected {
            publish(&ch, &dlq, id, FieldTable::default()).await;
        }
        // Each returned once (all read first, so none is read twice): now at the limit, so
        // the command must rotate every one.
        let mut tags = Vec::with_capacity(N);
        for _ in 0..N {
            let m = ch
                .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: false })
                .await
                .expect("get")
                .expect("a message");
            tags.push(m.delivery.delivery_tag);
        }
        for tag in tags {
            ch.basic_reject(tag, BasicRejectOptions { requeue: true })
                .await
                .expect("return");
        }
        assert_eq!(ready(&ch, &dlq).await as usize, N, "set-up");
        let mut args = vec!["dlq"];
        args.extend_from_slice(command);
        args.extend_from_slice(&["--standalone", "-f", &path, "--name", "d"]);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // The signal must come inside the scan, whatever the machine's load: once a
        // message has left the ready count (the command holds one; nothing else reads
        // this queue), or at the latest after 20 s. Rotating 3,000 messages, one confirm
        // each, takes seconds, so the scan is caught early.
        let stderr = child.stderr.take().expect("stderr");
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut all);
            all
        });
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(20)
            && ready_now(&ch, &dlq).await as usize >= N
        {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let sent = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {signal}");
        let out = child.wait_with_output().expect("wait");
        let t = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            reader.join().expect("stderr reader")
        );
        assert_eq!(out.status.code(), Some(1), "{command:?} {signal}: {t}");
        assert!(t.contains(says), "{command:?} {signal}: {t}");
        assert!(!t.contains("panicked"), "{command:?} {signal}: {t}");
        // Drained here; the next run starts from a fresh set.
        let left = drain_ids(&ch, &dlq).await;
        assert_eq!(left.len(), N, "{command:?} {signal}: every message once");
        assert_eq!(left, expected, "{command:?} {signal}: none lost");
    }
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// The first character of `out` that a terminal would act on or that reorders text — a
/// control character other than the line break (C0, DEL, C1), or a format character such
/// as U+202E — with its position.
fn raw_control(out: &str) -> Option<(usize, char)> {
    out.char_indices().find(|(_, c)| {
        (c.is_control() && *c != '\n')
            || matches!(*c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// Dead letters whose message id, error class, reason, original queue, a header name,
/// a header value and body carry terminal escapes (`ESC ] 0 ; … BEL` retitles the terminal,
/// `ESC [ 2 J` clears it), C1 controls and U+202E, and a 100 KB header: every human
/// output of `dlq inspect`, `dlq replay` and `dlq purge` (and `inspect -o json`) shows
/// them escaped, never raw, and the long header cut with its size. Before, the table
/// printed them raw and 17 such messages made 1.7 MB of it.
#[tokio::test]
async fn cli_outputs_escape_message_text_and_cut_long_headers() {
    let q = common::unique("t-inspect-esc");
    let (_dir, path) = common::dlq::applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let big = "B".repeat(102_400);
    let other = format!("other\u{1b}[2J\u{9b}31m{q}");
    for i in 0..17 {
        let original = if i % 2 == 0 { q.clone() } else { other.clone() };
        publish(
            &ch,
            &dlq,
            &format!("evil\u{1b}]0;pwned\u{7}\u{1b}[2J-{i:02}"),
            header(&[
                ("dlq-error-class", text("\u{1b}[31mTimeout\u{9b}")),
                ("dlq-reason", text("fdp\u{202e}exe.")),
                ("dlq-original-queue", text(&original)),
                (
                    "dlq-last-failed-at",
                    AMQPValue::LongLongInt((now_ms() - 60_000) as i64),
                ),
                ("big", text(&big)),
                ("x-\u{1b}[1mname", text("v\u{7f}")),
            ]),
        )
        .await;
    }
    let run = |args: &[&str]| {
        let mut all = vec!["dlq"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--standalone", "-f", &path, "--name", "d"]);
        common::cli(&all)
    };
    let inspect = run(&["inspect", "--sample", "17"]);
    let table = common::text(&inspect);
    assert!(inspect.status.success(), "{table}");
    assert_eq!(raw_control(&table), None, "inspect table");
    assert!(
        table.contains("message_id evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J-00"),
        "the id is shown, escaped: {}",
        &table[..table.len().min(3000)]
    );
    assert!(table.contains("\\u{1b}[31mTimeout\\u{9b}"), "class");
    assert!(table.contains("fdp\\u{202e}exe."), "reason");
    assert!(
        table.contains("x-\\u{1b}[1mname: \"v\\u{7f}\""),
        "header name"
    );
    assert!(table.contains("body (") && table.contains("body of evil\\u{1b}]0;pwned"));
    assert_eq!(
        table
            .matches(&format!("big: \"{}\"… (102400 bytes)", &big[..256]))
            .count(),
        17,
        "each long header cut to 256 bytes, with its size"
    );
    assert!(
        table.len() < 40_000,
        "{} bytes for 17 messages",
        table.len()
    );

    let json = run(&["inspect", "--sample", "1", "-o", "json"]);
    let text_json = String::from_utf8_lossy(&json.stdout).into_owned();
    assert_eq!(raw_control(&text_json), None, "inspect -o json");
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(
        report["sample"][0]["headers"]["dlq-error-class"], "\u{1b}[31mTimeout\u{9b}",
        "JSON keeps the value"
    );
    assert_eq!(report["sample"][0]["headers"]["big"], big.as_str());

    let dry = run(&["replay", "--dry-run"]);
    let purge = run(&["purge", "--older-than", "0s", "--dry-run"]);
    for (what, out) in [("replay --dry-run", &dry), ("purge --dry-run", &purge)] {
        assert!(out.status.success(), "{what}: {}", common::text(out));
        assert_eq!(raw_control(&common::text(out)), None, "{what}");
    }
    let replayed = run(&["replay"]);
    let t = common::text(&replayed);
    assert!(replayed.status.success(), "{t}");
    assert_eq!(raw_control(&t), None, "replay");
    assert!(
        t.contains("replayed         9") && t.contains("other\\u{1b}[2J\\u{9b}31m"),
        "the skip reason quotes the other queue, escaped: {t}"
    );
    assert_eq!(ready(&ch, &q).await, 9);
    assert_eq!(ready(&ch, &dlq).await, 8);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// The `x-delivery-count` of each message of `queue`, in queue order (all taken): `(id,
/// count)`, 0 for a message never returned.
async fn delivery_counts(ch: &lapin::Channel, queue: &str) -> Vec<(String, i64)> {
    let count = |v: Option<&AMQPValue>| match v {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(other) => panic!("x-delivery-count {other:?}"),
        None => 0,
    };
    let all = common::dlq::take_all(ch, queue).await;
    all.iter()
        .map(|m| (m.id.clone(), count(m.header("x-delivery-count"))))
        .collect()
}

/// A scan bounded below the queue's size reads its head, one above it reads it all, and
/// afterwards every message is there once, in its order, each returned once per scan
/// that read it — on a quorum dead-letter queue without a delivery limit (read by a
/// consumer and a prefetch window), with one (one `basic.get` at a time), and on a
/// classic one (`limit` "classic" below).
#[tokio::test]
async fn quorum_scans_below_and_above_the_size_keep_every_message_in_order() {
    for (classic, limit) in [(false, None), (false, Some(5)), (true, None)] {
        let q = common::unique("t-inspect-bound");
        let t = if classic {
            applied_classic(&q).await
        } else {
            applied(&q, limit).await
        };
        let limit = if classic {
            "classic".into()
        } else {
            format!("{limit:?}")
        };
        let dlq = format!("{q}.dlq");
        let (conn, ch) = confirm_channel().await;
        let ids: Vec<String> = (0..30).map(|i| format!("b{i:02}")).collect();
        for id in &ids {
            publish(&ch, &dlq, id, FieldTable::default()).await;
        }
        for (max, scanned) in [(10, 10), (100, 30)] {
            let opts = InspectOptions {
                max_messages: max,
                ..OPTS
            };
            let i = inspect(&connection(), &t, opts, now_ms())
                .await
                .expect("inspect");
            assert_eq!((i.total, i.scanned, i.rotated), (30, scanned, 0), "{i:?}");
            assert_eq!(i.sample[0].body_preview, "body of b00", "the head: {limit}");
            assert_eq!(ready(&ch, &dlq).await, 30, "{limit}");
        }
        let counts = delivery_counts(&ch, &dlq).await;
        let order: Vec<&str> = counts.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, ids, "same messages, same order ({limit})");
        for (n, (id, count)) in counts.iter().enumerate() {
            // Read by both scans (the first 10) or by the second only: a return each at
            // most (RabbitMQ 4 counts fewer), far from the limit of 5.
            let most = if n < 10 { 2 } else { 1 };
            assert!(*count <= most, "{id}: x-delivery-count {count} ({limit})");
        }
        let _ = conn.close(200, "bye".into()).await;
        cleanup(&q).await;
    }
}

/// [`common::dlq::topology`] of `queue` with classic queues, applied to the local broker.
async fn applied_classic(queue: &str) -> dlq_operator::topology::DesiredTopology {
    let spec = serde_json::from_value(json!({
        "broker": {"secretRef": {"name": "rabbitmq"}},
        "source": {"queue": queue, "queueType": "Classic"},
        "retryPolicyRef": {"name": "rp"},
    }))
    .expect("spec");
    let rp = serde_json::from_value(json!({"maxRetries": 1, "tiers": ["1s"]})).expect("rp");
    let policy = dlq_operator::backoff::ResolvedPolicy::from_spec(&rp).expect("policy");
    let t = dlq_operator::topology::plan("test/inspect", &spec, &policy);
    dlq_operator::rabbitmq::RabbitMq::new(&connection())
        .expect("client")
        .apply(&t)
        .await
        .expect("apply");
    t
}

/// A scan that starts right after another ended counts every message: the first one's
/// requeues have reached the queue when it returns (quorum and classic).
#[tokio::test]
async fn two_scans_back_to_back_count_the_same() {
    for classic in [false, true] {
        let q = common::unique("t-inspect-twice");
        let t = if classic {
            applied_classic(&q).await
        } else {
            applied(&q, None).await
        };
        let dlq = format!("{q}.dlq");
        let (conn, ch) = confirm_channel().await;
        for i in 0..200 {
            publish(&ch, &dlq, &format!("t{i:03}"), FieldTable::default()).await;
        }
        for run in 0..10 {
            let first = inspect(&connection(), &t, OPTS, now_ms()).await;
            let second = inspect(&connection(), &t, OPTS, now_ms()).await;
            let (first, second) = (first.expect("first"), second.expect("second"));
            assert_eq!(
                (first.total, first.scanned, second.total, second.scanned),
                (200, 200, 200, 200),
                "run {run}, classic {classic}"
            );
        }
        assert_eq!(ready(&ch, &dlq).await, 200);
        let _ = conn.close(200, "bye".into()).await;
        cleanup(&q).await;
    }
}
