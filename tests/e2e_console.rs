//! `dlq-operator console` in cluster mode (the real binary, its identity the test's
//! kubeconfig) against a real Kubernetes API server and the real RabbitMQ: users log in
//! with ServiceAccount tokens (TokenRequest) that TokenReview checks, and
//! SubjectAccessReview decides per DeadLetterQueue — a ServiceAccount without a binding
//! sees nothing, a viewer sees the dead letters but may not replay, an actor replays (the
//! message is back in its source queue) and the replay is a Kubernetes Event on the
//! DeadLetterQueue. The DeadLetterQueue is built by `dlq-operator run`. Needs
//! `DLQ_E2E_KUBECONFIG` (.ci/run starts an API server); skipped by name without it.

mod common;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams};
use kube::Client;
use lapin::types::AMQPValue;
use serde_json::json;

use common::console::Console;
use common::dlq::{confirm_channel, drain_ids, header, publish, ready, text};
use common::e2e::{
    account, client, create_dlq, dlqs, ensure_crds, kubeconfig, namespace_with_broker,
    ready as dlq_ready, wait_for, Operator,
};
use common::{cleanup, unique, AMQP};

const LONG: Duration = Duration::from_secs(60);

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
fn encoded(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// Logs in with `token` through the form: the session's `Cookie` value.
async fn login(c: &Console, token: &str) -> String {
    let r = http()
        .post(format!("{}/login", c.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("token", token)]))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 303, "login with a ServiceAccount token");
    let set = r.headers()["set-cookie"].to_str().expect("ascii");
    set.split(';').next().expect("pair").to_string()
}

async fn get(c: &Console, cookie: &str, path: &str) -> (u16, String) {
    let r = http()
        .get(format!("{}{path}", c.base))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// POSTs `form` with the session's CSRF token (read from `page`): status, body and
/// `Location`.
async fn post(
    c: &Console,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, String, String) {
    let r = http()
        .post(format!("{}{path}", c.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(form))
        .send()
        .await
        .expect("post");
    let location = r
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (r.status().as_u16(), r.text().await.expect("body"), location)
}

/// The value of hidden input `name` in `html`.
fn hidden(html: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + needle.len();
    html[at..].split('"').next().expect("value").to_string()
}

/// The page of `path` once `done` holds for it.
async fn page_when(c: &Console, cookie: &str, path: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let (status, html) = get(c, cookie, path).await;
        assert_eq!(status, 200, "{path}: {html}");
        if done(&html) {
            return html;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} never got there: {html}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Notes of the Events with `reason` about DeadLetterQueue `name`.
async fn event_notes(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    Api::<KubeEvent>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("DeadLetterQueue") && r.name.as_deref() == Some(name)
                })
        })
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn cluster_console_reviews_tokens_and_rbac_and_audits_as_events() {
    const TEST: &str = "cluster_console_reviews_tokens_and_rbac_and_audits_as_events";
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-console", AMQP).await;
    let prefix = unique("e2e-con");
    let q = format!("{prefix}-orders");
    let dlq = format!("{q}.dlq");
    let op = Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    create_dlq(&client, &ns, "orders", &q, json!({"interval": "1s"})).await;
    let api = dlqs(&client, &ns);
    wait_for(LONG, "orders Ready", &op, || async {
        dlq_ready(&api, "orders").await.filter(|r| r.0 == "True")
    })
    .await;
    let (_conn, ch) = confirm_channel().await;
    let letter = header(&[
        ("dlq-error-class", text("Timeout")),
        ("dlq-retry-count", AMQPValue::LongLongInt(3)),
        ("dlq-reason", text("MaxRetriesExceeded")),
        ("dlq-original-queue", text(&q)),
    ]);
    publish(&ch, &dlq, "m-1", letter).await;
    assert_eq!(ready(&ch, &dlq).await, 1);

    let view = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterqueues"], "verbs": ["get"]});
    let act = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterreplays"], "verbs": ["create"]});
    let viewer = account(&client, &ns, "viewer", json!([view])).await;
    let actor = account(&client, &ns, "actor", json!([view, act])).await;
    let nobody = account(&client, &ns, "nobody", json!([])).await;
    let c = Console::cluster(&kubeconfig, &ns);
    let dlq_path = format!("/dlq/{ns}/orders");

    // No token, a made-up one: refused.
    assert_eq!(get(&c, "", "/").await.0, 401);
    let (status, _, _) = post(&c, "", "/login", &[("token", "not-a-token")]).await;
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
    page_when(&c, &cookie, "/", |h| h.contains(&dlq_path)).await;
    let html = page_when(&c, &cookie, &dlq_path, |h| h.contains("Last scan")).await;
    assert!(html.contains("Timeout"), "{html}");
    let csrf = hidden(&html, "csrf");
    let preview = format!("{dlq_path}/replay/preview");
    let form = [("csrf", csrf.as_str()), ("filter", "class=Timeout")];
    let (status, refused, _) = post(&c, &cookie, &preview, &form).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.contains("create on deadletterreplays"), "{refused}");

    // The actor replays it: a dry run, then the job; the message is back in its queue.
    let cookie = login(&c, &actor).await;
    let html = page_when(&c, &cookie, &dlq_path, |h| h.contains("Last scan")).await;
    let csrf = hidden(&html, "csrf");
    let form = [("csrf", csrf.as_str()), ("filter", "class=Timeout")];
    let (status, confirm, _) = post(&c, &cookie, &preview, &form).await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">1</strong>"),
        "{confirm}"
    );
    let action = hidden(&confirm, "action");
    let replay = format!("{dlq_path}/replay");
    let form = [("csrf", csrf.as_str()), ("action", action.as_str())];
    let (status, _, job) = post(&c, &cookie, &replay, &form).await;
    assert_eq!(status, 303);
    let done = page_when(&c, &cookie, &job, |h| h.contains("Done:")).await;
    assert!(done.contains("<strong id=\"count\">1</strong>"), "{done}");
    assert_eq!(drain_ids(&ch, &q).await, vec!["m-1".to_string()]);
    assert_eq!(ready(&ch, &dlq).await, 0);

    // The audit: an Event on the DeadLetterQueue naming the actor.
    let user = format!("system:serviceaccount:{ns}:actor");
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let notes = event_notes(&client, &ns, "orders", "ConsoleReplay").await;
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
    cleanup(&prefix).await;
}
