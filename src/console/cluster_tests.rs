//! The console with [`auth::Auth::Kubernetes`] in process, its reviews answered from tables
//! ([`crate::access::fake::Tables`]) and the in-memory broker: login by form only, each
//! page and action allowed by its own review, a revoked token ends the session. The same
//! against a real API server and real RabbitMQ: tests/e2e_console.rs.

use std::sync::Arc;

use super::fast_tests::{client, encoded, get, hidden, post, scanned_page, started_with};
use super::*;
use crate::access::fake::Tables;
use crate::access::Permission;

const DLQ: &str = "/dlq/default/order-events";

fn tables() -> Arc<Tables> {
    let view = Permission::View {
        namespace: "default".into(),
        name: "order-events".into(),
    };
    let act = Permission::Act {
        namespace: "default".into(),
    };
    Arc::new(
        Tables::default()
            .with("t-viewer", "viewer", vec![view.clone()])
            .with("t-actor", "actor", vec![view, act])
            .with("t-nobody", "nobody", vec![]),
    )
}

/// POSTs the login form with `token`: the status and the session's `Cookie` value, if
/// one was set.
async fn form_login(base: &str, token: &str, origin: Option<&str>) -> (u16, Option<String>) {
    let mut request = client()
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("token", token)]));
    if let Some(o) = origin {
        request = request.header("origin", o);
    }
    let r = request.send().await.expect("login");
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::to_string);
    (r.status().as_u16(), cookie)
}

#[tokio::test]
async fn kubernetes_tokens_log_in_by_form_only() {
    let (base, _fake, _dlq, stop) = started_with(auth::Auth::Kubernetes(tables())).await;
    let (status, form) = get(&base, "", "/login").await;
    assert_eq!(status, 200);
    assert!(form.contains("Kubernetes bearer token"), "{form}");
    let (status, _) = get(&base, "", "/").await;
    assert_eq!(status, 401, "no session, no page");
    // A token in the URL is refused (histories, proxy logs), even a valid one.
    let r = client()
        .get(format!("{base}/login?token=t-actor"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("set-cookie").is_none());
    assert_eq!(form_login(&base, "made-up", None).await, (401, None));
    assert_eq!(form_login(&base, "", None).await, (401, None));
    let (status, cookie) = form_login(&base, "t-actor", Some("http://evil.example")).await;
    assert_eq!((status, cookie), (403, None), "a cross-origin login");
    // Behind a Service or a port-forward the console answers to any Host.
    let (status, cookie) = form_login(&base, "t-actor", None).await;
    assert_eq!(status, 303);
    let cookie = cookie.expect("a session");
    let r = client()
        .get(format!("{base}/"))
        .header("cookie", &cookie)
        .header("host", "dlq-console.ops.svc:8081")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert!(r.text().await.expect("body").contains("Logged in as actor"));
    stop.cancel();
}

#[tokio::test]
async fn each_page_and_action_is_allowed_by_its_review() {
    let tables = tables();
    let (base, fake, dlq, stop) = started_with(auth::Auth::Kubernetes(tables.clone())).await;
    let login = |token: &'static str| {
        let base = base.clone();
        async move { form_login(&base, token, None).await.1.expect("session") }
    };
    // Nobody: an empty index, the DeadLetterQueue refused with the RBAC it takes.
    let nobody = login("t-nobody").await;
    let (status, index) = get(&base, &nobody, "/").await;
    assert_eq!(status, 200);
    assert!(!index.contains("order-events"), "{index}");
    let (status, page) = get(&base, &nobody, DLQ).await;
    assert_eq!(status, 403);
    assert!(page.contains("get on deadletterqueues"), "{page}");
    // A viewer sees it, but may not act.
    let viewer = login("t-viewer").await;
    assert!(get(&base, &viewer, "/").await.1.contains("order-events"));
    let html = scanned_page(&base, &viewer).await;
    let csrf = hidden(&html, "csrf");
    let preview = format!("{DLQ}/replay/preview");
    let form = [("csrf", csrf.as_str()), ("filter", "class=timeout")];
    let (status, refused) = post(&base, &viewer, &preview, &form).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.contains("create on deadletterreplays"), "{refused}");
    let purge = format!("{DLQ}/purge/preview");
    assert_eq!(post(&base, &viewer, &purge, &form).await.0, 403);
    // An actor may.
    let actor = login("t-actor").await;
    let csrf = hidden(&scanned_page(&base, &actor).await, "csrf");
    let form = [("csrf", csrf.as_str()), ("filter", "class=timeout")];
    let (status, confirm) = post(&base, &actor, &preview, &form).await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">3</strong>"),
        "{confirm}"
    );
    assert_eq!(fake.messages("/", &dlq).len(), 5, "a dry run moves nothing");
    // A revoked token ends the session at its next request.
    tables.revoke("t-actor");
    assert_eq!(get(&base, &actor, "/").await.0, 401);
    tables.tokens.lock().expect("lock").insert(
        "t-actor".into(),
        (
            "actor".into(),
            vec![Permission::Act {
                namespace: "default".into(),
            }],
        ),
    );
    assert_eq!(
        get(&base, &actor, "/").await.0,
        401,
        "the session was closed: the token must be given again"
    );
    stop.cancel();
}
