//! The dead-letter console in a real browser: Debian's Chromium driven by playwright-core
//! (tests/console_browser/console.mjs) against `dlq-operator console --standalone` and the
//! real RabbitMQ. Without the token (or with a wrong one) no page is served; with the login
//! link, the index lists the DeadLetterQueue with its dead-letter depth, its page shows the dead letter under its
//! error class, the message view shows a hostile header inert (no script runs, its escape
//! character is shown escaped), invalid JSON in the repair form is refused with its line
//! and column, and the repaired message reaches a real consumer of the source queue exactly
//! once, with its new body, its message_id and `dlq-repaired-at`.
//!
//! Needs node, playwright-core (`npm ci` in tests/console_browser) and Chromium
//! (`apt-get install chromium`), as .ci/run installs them; skipped by name without them
//! (failed with `DLQ_REQUIRE_TOOLS=1`). `DLQ_CONSOLE_SCREENSHOTS=DIR` keeps the screenshots
//! (docs/images has those of the docs).

mod common;

use std::time::Duration;

use common::browser::{browser_tools, run_script};
use common::cleanup;
use common::console::Console;
use common::dlq::{applied_manifests, confirm_channel, header, now_ms, ready, text};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

/// Publishes a dead letter of `class` with `id` and a JSON `body` to `queue`, confirmed.
async fn dead_letter(ch: &lapin::Channel, queue: &str, id: &str, body: &str, headers: FieldTable) {
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            body.as_bytes(),
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type(ShortString::from("application/json"))
                .with_message_id(ShortString::from(id))
                .with_headers(headers),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{id} not confirmed");
}

#[tokio::test]
async fn a_dead_letter_is_repaired_in_the_browser_and_consumed_once() {
    let test = "a_dead_letter_is_repaired_in_the_browser_and_consumed_once";
    if !browser_tools(test) {
        return;
    }
    let q = common::unique("t-browser");
    let (_dir, path) = applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let hostile = "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">\u{1b}[2J";
    let (conn, ch) = confirm_channel().await;
    let contract = |class: &str| {
        header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-error-class", text(class)),
            ("dlq-reason", text("NonRetryable")),
            ("dlq-last-error", text("amount must be positive")),
            (
                "dlq-last-failed-at",
                AMQPValue::LongLongInt((now_ms() - 2 * 3_600_000) as i64),
            ),
            ("x-note", text(hostile)),
        ])
    };
    dead_letter(
        &ch,
        &dlq,
        "order-7",
        "{\"orderId\":7,\"amount\":-5}",
        contract("Validation"),
    )
    .await;
    dead_letter(
        &ch,
        &dlq,
        "order-8",
        "{\"orderId\":8,\"amount\":9}",
        contract("Timeout"),
    )
    .await;

    let console = Console::start(&path);
    // A relative DIR is the repository's (the script runs in tests/console_browser).
    let shots = std::env::var("DLQ_CONSOLE_SCREENSHOTS").map_or_else(
        |_| tempfile::tempdir().expect("temp dir").keep(),
        |dir| common::root().join(dir),
    );
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let repaired = "{\"orderId\":7,\"amount\":5}";
    let env: [(&str, &str); 9] = [
        ("BASE", &console.base),
        ("TOKEN", &console.token),
        ("NS", "default"),
        ("NAME", "d"),
        ("DEPTH", "2"),
        ("MESSAGE_ID", "order-7"),
        ("CLASS", "Validation"),
        ("REPAIRED_BODY", repaired),
        ("HOSTILE", hostile),
    ];
    let mut env: Vec<(&str, &std::ffi::OsStr)> = env
        .iter()
        .map(|(k, v)| (*k, std::ffi::OsStr::new(*v)))
        .collect();
    env.push(("SHOTS", shots.as_os_str()));
    run_script("console.mjs", &env);
    console.line_with(&["repair", "order-7"]);

    // A real consumer of the source queue receives the repaired message, once.
    let consumer_ch = conn.create_channel().await.expect("channel");
    let mut consumer = consumer_ch
        .basic_consume(
            q.as_str().into(),
            "browser-test".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let first = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("the repaired message arrives")
        .expect("stream open")
        .expect("delivery");
    first.ack(BasicAckOptions::default()).await.expect("ack");
    assert_eq!(first.data, repaired.as_bytes());
    assert_eq!(
        first.properties.message_id().as_ref().map(|s| s.as_str()),
        Some("order-7")
    );
    let headers = first.properties.headers().clone().expect("headers");
    assert!(
        headers.inner().contains_key("dlq-repaired-at"),
        "{headers:?}"
    );
    let again = tokio::time::timeout(Duration::from_secs(3), consumer.next()).await;
    assert!(
        again.is_err(),
        "a second message reached the consumer: {again:?}"
    );
    // The original is gone; the other dead letter stays.
    assert_eq!(ready(&ch, &dlq).await, 1, "order-8 stays in {dlq}");
    drop(console);
    cleanup(&q).await;
}
