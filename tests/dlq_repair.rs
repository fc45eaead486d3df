//! `dlq repair` on the local RabbitMQ: one dead letter repaired (body replaced, a header
//! set and one removed) and sent back to its source queue through the replay engine, on
//! classic and quorum dead-letter queues; an unknown id and invalid input change nothing.

mod common;

use lapin::types::AMQPValue;

use common::dlq::{confirm_channel, header, publish, ready, take_all, text, Taken};

/// Manifests of a Secret, a RetryPolicy and a DeadLetterQueue `d` for source queue
/// `queue` of type `queue_type` (`Classic`, `Quorum`), applied: the dir and its path.
fn applied(queue: &str, queue_type: &str) -> (tempfile::TempDir, String) {
    let dlq = common::dlq_yaml("d", queue, "p", "s", "").replace(
        &format!("    queue: {queue}\n"),
        &format!("    queue: {queue}\n    queueType: {queue_type}\n"),
    );
    assert!(dlq.contains("queueType"), "{dlq}");
    let dir = common::manifests(&[
        (
            "s.yaml",
            &common::secret_yaml("s", "guest", "guest", common::MGMT),
        ),
        (
            "p.yaml",
            &common::policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n"),
        ),
        ("d.yaml", &dlq),
    ]);
    let path = dir.path().display().to_string();
    let out = common::cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", common::text(&out));
    (dir, path)
}

/// `dlq repair --standalone -f PATH --name d EXTRA…`.
fn repair(path: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["dlq", "repair", "--standalone", "-f", path, "--name", "d"];
    args.extend(extra);
    common::cli(&args)
}

async fn repairs_one_message(queue_type: &str) {
    let q = common::unique(&format!("t-repair-{}", queue_type.to_lowercase()));
    let (dir, path) = applied(&q, queue_type);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for id in ["m1", "m2", "m3"] {
        let headers = header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-error-class", text("Validation")),
            ("dlq-retry-count", AMQPValue::LongLongInt(4)),
            ("tenant", text("old")),
            ("debug", AMQPValue::Boolean(true)),
        ]);
        publish(&ch, &dlq, id, headers).await;
    }
    let elsewhere = header(&[
        ("dlq-original-queue", text("elsewhere")),
        ("tenant", text("old")),
        ("debug", AMQPValue::Boolean(true)),
        ("dlq-retry-count", AMQPValue::LongLongInt(4)),
    ]);
    publish(&ch, &dlq, "m4", elsewhere).await;
    let dead_letters = |all: &[Taken]| all.iter().map(|t| t.id.clone()).collect::<Vec<_>>();

    // Bad input: one clear error naming the problem, exit 1, nothing touched.
    let body_file = dir.path().join("body.json");
    std::fs::write(&body_file, "{\n  \"fixed\": true,\n}\n").expect("write");
    let bad_file = body_file.display().to_string();
    for (args, needle) in [
        (
            vec!["--id", "m2", "--body-json", "{\"a\": }"],
            "--body-json: invalid JSON at line 1, column 7",
        ),
        (
            vec!["--id", "m2", "--body-file", &bad_file],
            "invalid JSON at line 3, column 1: trailing comma",
        ),
        (
            vec!["--id", "m2", "--set-header", "x-death=1"],
            "header \"x-death\" is protected",
        ),
        (
            vec!["--id", "m2", "--remove-header", "dlq-replay-id"],
            "header \"dlq-replay-id\" is protected",
        ),
        // An endless file is not read without end (it ran a machine out of memory).
        (
            vec!["--id", "m2", "--body-file", "/dev/zero"],
            "larger than 16777216 bytes",
        ),
        (
            vec!["--id", "m2", "--set-header", "big=18446744073709551616"],
            "signed 64-bit",
        ),
    ] {
        let out = repair(&path, &args);
        let said = common::text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains(needle), "{args:?}: {said}");
        assert_eq!(said.matches("error:").count(), 1, "one error: {said}");
    }
    assert_eq!(ready(&ch, &dlq).await, 4, "nothing taken");
    assert_eq!(ready(&ch, &q).await, 0, "nothing sent");

    // An unknown id: not found, nothing changed.
    let out = repair(&path, &["--id", "nope", "--body-json", "{}"]);
    let said = common::text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("not found"), "{said}");
    assert_eq!(ready(&ch, &dlq).await, 4, "nothing taken");
    assert_eq!(ready(&ch, &q).await, 0, "nothing sent");

    // The replay's own rule: a message of another original queue is skipped, and stays.
    let out = repair(&path, &["--id", "m4", "--body-json", "{}"]);
    let said = common::text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("skipped") && said.contains("is not this DeadLetterQueue's source queue"),
        "{said}"
    );
    assert_eq!(ready(&ch, &dlq).await, 4, "nothing taken");
    assert_eq!(ready(&ch, &q).await, 0, "nothing sent");

    // The repair.
    std::fs::write(&body_file, "{\"fixed\": true}").expect("write");
    let good_file = body_file.display().to_string();
    let before = common::dlq::now_ms();
    let out = repair(
        &path,
        &[
            "--id",
            "m2",
            "--body-file",
            &good_file,
            "--set-header",
            "tenant=new",
            "--remove-header",
            "debug",
            "-o",
            "json",
        ],
    );
    let said = common::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["outcome"], "repaired", "{said}");
    assert_eq!(report["messageId"], "m2");

    let copies = take_all(&ch, &q).await;
    assert_eq!(
        dead_letters(&copies),
        ["m2"],
        "the copy, in the source queue"
    );
    let copy = &copies[0];
    assert_eq!(copy.body, b"{\"fixed\": true}");
    assert_eq!(copy.text("tenant").as_deref(), Some("new"));
    assert!(copy.header("debug").is_none(), "removed");
    assert!(
        copy.header("dlq-retry-count").is_none(),
        "retry state reset"
    );
    assert_eq!(copy.text("dlq-error-class").as_deref(), Some("Validation"));
    let repaired_at = match copy.header("dlq-repaired-at") {
        Some(AMQPValue::LongLongInt(ms)) => *ms as u64,
        other => panic!("dlq-repaired-at: {other:?}"),
    };
    assert!(repaired_at >= before, "{repaired_at} < {before}");
    assert_eq!(
        copy.text("dlq-replay-id"),
        report["replayId"].as_str().map(str::to_string)
    );

    let rest = take_all(&ch, &dlq).await;
    assert_eq!(
        dead_letters(&rest),
        ["m1", "m3", "m4"],
        "the original gone, the others kept"
    );
    for t in &rest {
        assert_eq!(t.body, format!("body of {}", t.id).as_bytes());
        assert_eq!(t.text("tenant").as_deref(), Some("old"));
        assert!(t.header("debug").is_some());
        assert!(t.header("dlq-repaired-at").is_none());
        assert!(t.header("dlq-retry-count").is_some());
    }
    let _ = conn.close(0, "done".into()).await;
    common::cleanup(&q).await;
}

#[tokio::test]
async fn repair_on_a_classic_dead_letter_queue() {
    repairs_one_message("Classic").await;
}

#[tokio::test]
async fn repair_on_a_quorum_dead_letter_queue() {
    repairs_one_message("Quorum").await;
}
