//! `dlq-operator console` in cluster mode (the real binary, its identity the test's
//! kubeconfig) against a real Kubernetes API server and the real RabbitMQ: users log in
//! with ServiceAccount tokens (TokenRequest) that TokenReview checks, and
//! SubjectAccessReview decides per DeadLetterQueue — a ServiceAccount without a binding
//! sees nothing, a viewer sees the dead letters but may not replay, an actor replays (the
//! message is back in its source queue) and the replay is a Kubernetes Event on the
//! DeadLetterQueue. The login and the refusals are also driven in Chromium
//! (tests/console_browser/cluster.mjs; skipped by name without node, playwright-core and
//! Chromium, failed with `DLQ_REQUIRE_TOOLS=1`). The DeadLetterQueue is built by
//! `dlq-operator run`. Needs `DLQ_E2E_KUBECONFIG` (.ci/run starts an API server); skipped
//! by name without it.

mod common;

use std::time::Duration;

use kube::Client;
use lapin::types::AMQPValue;
use serde_json::json;

use common::browser::{browser_tools, run_script};
use common::cleanup;
use common::console::{form_login, get, hidden, page_with, post, post_for_location, Console};
use common::dlq::{confirm_channel, drain_ids, header, publish, ready, text};
use common::e2e::{account, events_about, ready_orders};

const LONG: Duration = Duration::from_secs(60);

/// Logs in with `token` through the form: the session's `Cookie` value.
async fn login(c: &Console, token: &str) -> String {
    let (status, cookie) = form_login(c, token).await;
    assert_eq!(status, 303, "login with a ServiceAccount token");
    cookie.expect("a session cookie")
}

/// Notes of the Events with `reason` about DeadLetterQueue `name`.
async fn event_notes(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    events_about(client, ns, "DeadLetterQueue", name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn cluster_console_reviews_tokens_and_rbac_and_audits_as_events() {
    const TEST: &str = "cluster_console_reviews_tokens_and_rbac_and_audits_as_events";
    let Some(o) = ready_orders(TEST, "e2e-console", "e2e-con").await else {
        return;
    };
    let (client, kubeconfig, ns, q, dlq) = (&o.client, &o.kubeconfig, &o.ns, &o.q, &o.dlq);
    let (_conn, ch) = confirm_channel().await;
    let letter = header(&[
        ("dlq-error-class", text("Timeout")),
        ("dlq-retry-count", AMQPValue::LongLongInt(3)),
        ("dlq-reason", text("MaxRetriesExceeded")),
        ("dlq-original-queue", text(q)),
    ]);
    publish(&ch, dlq, "m-1", letter).await;
    assert_eq!(ready(&ch, dlq).await, 1);

    let view = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterqueues"], "verbs": ["get"]});
    let act = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterreplays"], "verbs": ["create"]});
    let viewer = account(client, ns, "viewer", json!([view])).await;
    let actor = account(client, ns, "actor", json!([view, act])).await;
    let nobody = account(client, ns, "nobody", json!([])).await;
    let c = Console::cluster(kubeconfig, ns);
    let dlq_path = format!("/dlq/{ns}/orders");

    // No token, a made-up one: refused.
    assert_eq!(get(&c, "", "/").await.0, 401);
    let (status, _) = post(&c, "", "/login", &[("token", "not-a-token")]).await;
    assert_eq!(status, 401);
    // Nobody: an empty index, the DeadLetterQueue refused.
    let cookie = login(&c, &nobody).await;
    let (status, index) = get(&c, &cookie, "/").await;
    assert_eq!(status, 200);
    assert!(
        index.contains(&format!("system:serviceaccount:{ns}:nobody")) && !index.contains("orders"),
        "{index}"
    );
    assert_eq!(get(&c, &cookie, &dlq_path).await.0, 403);

    // The viewer sees the dead letter under its class, and may not replay it.
    let cookie = login(&c, &viewer).await;
    page_with(&c, &cookie, "/", &dlq_path).await;
    let html = page_with(&c, &cookie, &dlq_path, "Last scan").await;
    assert!(html.contains("Timeout"), "{html}");
    let csrf = hidden(&html, "csrf");
    let preview = format!("{dlq_path}/replay/preview");
    let form = [("csrf", csrf.as_str()), ("filter", "class=Timeout")];
    let (status, refused) = post(&c, &cookie, &preview, &form).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.contains("create on deadletterreplays"), "{refused}");
    let audit = c.line_with(&["access-refused", ":viewer"]);
    assert!(audit.contains(&format!("{ns}/orders")), "{audit}");

    // The same in Chromium: the login form, refusals, and the actor's dry run (a
    // same-origin POST under a Host the console cannot know in advance).
    if browser_tools(TEST) {
        let env = [
            ("BASE", c.base.as_str()),
            ("NS", ns.as_str()),
            ("NAME", "orders"),
            ("CLASS", "Timeout"),
            ("NOBODY_TOKEN", nobody.as_str()),
            ("ACTOR_TOKEN", actor.as_str()),
        ];
        let env: Vec<(&str, &std::ffi::OsStr)> = env
            .iter()
            .map(|(k, v)| (*k, std::ffi::OsStr::new(*v)))
            .collect();
        run_script("cluster.mjs", &env);
    }

    // The actor replays it: a dry run, then the job; the message is back in its queue.
    let cookie = login(&c, &actor).await;
    let html = page_with(&c, &cookie, &dlq_path, "Last scan").await;
    let csrf = hidden(&html, "csrf");
    let form = [("csrf", csrf.as_str()), ("filter", "class=Timeout")];
    let (status, confirm) = post(&c, &cookie, &preview, &form).await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">1</strong>"),
        "{confirm}"
    );
    let action = hidden(&confirm, "action");
    let replay = format!("{dlq_path}/replay");
    let form = [("csrf", csrf.as_str()), ("action", action.as_str())];
    let (status, job) = post_for_location(&c, &cookie, &replay, &form).await;
    assert_eq!(status, 303);
    let done = page_with(&c, &cookie, &job, "Done:").await;
    assert!(done.contains("<strong id=\"count\">1</strong>"), "{done}");
    assert_eq!(drain_ids(&ch, q).await, vec!["m-1".to_string()]);
    assert_eq!(ready(&ch, dlq).await, 0);

    // The audit: an Event on the DeadLetterQueue naming the actor.
    let user = format!("system:serviceaccount:{ns}:actor");
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let notes = event_notes(client, ns, "orders", "ConsoleReplay").await;
        if let Some(note) = notes.first() {
            assert!(
                note.contains(&user) && note.contains("1 message(s)"),
                "{note}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ConsoleReplay Event"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(c);
    cleanup(&o.prefix).await;
}
