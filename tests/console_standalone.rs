//! `dlq-operator console --standalone` against the real RabbitMQ (127.0.0.1, guest/guest):
//! the binary started on `127.0.0.1:0`, its login link read from stderr, then over HTTP
//! (reqwest, the session cookie sent by hand): no page without the token; the index
//! with the DeadLetterQueue's depth; the groups; a hostile header shown inert; replay
//! (dry-run count, then the messages back in the source queue) and purge (refused
//! without the typed name, done with it), each audited on stderr; the CSRF token and
//! the Origin checked on every POST; a non-loopback address refused; the repair of one
//! message from its page (invalid JSON refused, then the copy with the new body); SIGTERM
//! during a replay job (its copies settled and the replay audited).

mod common;

use std::time::Duration;

use common::cleanup;
use common::console::{
    client, encoded, first_message, get, hidden, login, page_with, post, post_with, repair_form,
    start_replay, Console, RepairForm,
};
use common::dlq::{applied_manifests, confirm_channel, header, publish, ready, take_all, text};

#[tokio::test]
async fn console_shows_groups_escapes_text_and_replays_and_purges_with_checks() {
    let q = common::unique("t-console");
    let (_dir, path) = applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..3 {
        let h = header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-error-class", text("timeout")),
        ]);
        publish(&ch, &dlq, &format!("t{i}"), h).await;
    }
    for i in 0..2 {
        let h = header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-error-class", text("validation")),
            ("x-note", text("<script>alert(1)</script>\u{1b}[2J")),
        ]);
        publish(&ch, &dlq, &format!("v{i}"), h).await;
    }

    let c = Console::start(&path);
    // No page without the token.
    assert_eq!(get(&c, "", "/").await.0, 401);
    assert_eq!(get(&c, "", "/login?token=nope").await.0, 401);
    let r = client()
        .get(format!("{}/login?token={}", c.base, c.token))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().expect("cookie").to_string();

    // The index: the DeadLetterQueue and its dead-letter depth.
    page_with(&c, &cookie, "/", "<td class=\"num\">5</td>").await;
    // Its page: both groups with their counts, no credentials.
    let dlq_page = "/dlq/default/d";
    let html = page_with(&c, &cookie, dlq_page, "Last scan").await;
    assert!(html.contains("<td class=\"num\">3</td>"), "{html}");
    assert!(html.contains("<td class=\"num\">2</td>"), "{html}");
    assert!(!html.contains(":guest@"), "no password in the page: {html}");
    let (g, csrf) = (hidden(&html, "g"), hidden(&html, "csrf"));

    // A hostile header is shown inert.
    let (_, msg) = first_message(&c, &cookie, dlq_page, &g, "class%3Dvalidation").await;
    assert!(msg.contains("x-note"), "{msg}");
    assert!(!msg.contains("<script>"), "{msg}");
    assert!(!msg.contains('\u{1b}'), "{msg}");
    assert!(
        msg.contains("&#60;script&#62;") || msg.contains("&lt;script&gt;"),
        "{msg}"
    );

    // POSTs: no CSRF token → 403; a foreign Origin → 403; nothing moved.
    let preview = format!("{dlq_page}/replay/preview");
    let (status, _) = post(&c, &cookie, &preview, &[("filter", "class=timeout")]).await;
    assert_eq!(status, 403);
    let form = [("csrf", csrf.as_str()), ("filter", "class=timeout")];
    let (status, _) = post_with(&c, &cookie, &preview, &form, "http://evil.example").await;
    assert_eq!(status, 403);
    assert_eq!(ready(&ch, &dlq).await, 5);

    // Replay the timeout ones: the dry-run count, then the messages back in the source.
    let (status, confirm) = post(&c, &cookie, &preview, &form).await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">3</strong>"),
        "{confirm}"
    );
    assert_eq!(ready(&ch, &q).await, 0, "a dry run moves nothing");
    let action = hidden(&confirm, "action");
    let r = client()
        .post(format!("{}{dlq_page}/replay", c.base))
        .header("cookie", &cookie)
        .header("origin", &c.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("csrf", &csrf), ("action", &action)]))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 303, "the replay runs as a job");
    let job = r.headers()["location"].to_str().expect("ascii").to_string();
    let done = page_with(&c, &cookie, &job, "Done:").await;
    assert!(done.contains("<strong id=\"count\">3</strong>"), "{done}");
    assert_eq!(ready(&ch, &q).await, 3);
    assert_eq!(ready(&ch, &dlq).await, 2);
    c.line_with(&[
        "console audit",
        "user=\"local\"",
        "action=\"replay\"",
        "count=3",
    ]);

    // Purge the validation ones: refused without the typed name, done with it.
    let (status, confirm) = post(
        &c,
        &cookie,
        &format!("{dlq_page}/purge/preview"),
        &[("csrf", &csrf), ("filter", "class=validation")],
    )
    .await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">2</strong>"),
        "{confirm}"
    );
    let action = hidden(&confirm, "action");
    let purge = format!("{dlq_page}/purge");
    let (status, _) = post(&c, &cookie, &purge, &[("csrf", &csrf), ("action", &action)]).await;
    assert_eq!(status, 400);
    assert_eq!(ready(&ch, &dlq).await, 2, "nothing removed");
    let typed = [
        ("csrf", csrf.as_str()),
        ("action", &action),
        ("confirm", "default/d"),
    ];
    let (status, done) = post(&c, &cookie, &purge, &typed).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("<strong id=\"count\">2</strong>"), "{done}");
    assert_eq!(ready(&ch, &dlq).await, 0);
    assert_eq!(ready(&ch, &q).await, 3, "the replayed ones stay");
    c.line_with(&["console audit", "action=\"purge-refused\""]);
    c.line_with(&[
        "console audit",
        "action=\"purge\"",
        "count=2",
        "outcome=\"ok\"",
    ]);

    drop(c);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// Repair and replay of one message from its page: invalid JSON refused (400, nothing
/// moved), then the copy in the source queue with the new body and headers, its
/// message_id kept and dlq-repaired-at set, the original gone, the other dead letters
/// untouched; audited.
#[tokio::test]
async fn console_repairs_one_message_through_the_core() {
    let q = common::unique("t-console-repair");
    let (_dir, path) = applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..3 {
        let h = header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-error-class", text("validation")),
            ("tenant", text("acme")),
            ("debug", text("yes")),
        ]);
        publish(&ch, &dlq, &format!("r{i}"), h).await;
    }
    let c = Console::start(&path);
    let cookie = login(&c).await;
    let dlq_page = "/dlq/default/d";
    let RepairForm {
        action: repair,
        csrf,
        g,
        page: msg,
    } = repair_form(&c, &cookie, dlq_page, "r1").await;
    assert!(
        msg.contains("body of r1</textarea>"),
        "the body pre-filled: {msg}"
    );
    let headers = r#"{"tenant": "acme2"}"#;

    // Invalid JSON: 400, the form again, nothing moved.
    let bad = [
        ("csrf", csrf.as_str()),
        ("g", &g),
        ("body", "{\"orderId\": 1,}"),
        ("headers", headers),
    ];
    let (status, html) = post(&c, &cookie, &repair, &bad).await;
    assert_eq!(status, 400, "{html}");
    assert!(html.contains("invalid JSON at line 1"), "{html}");
    assert_eq!(ready(&ch, &dlq).await, 3);
    assert_eq!(ready(&ch, &q).await, 0);

    // Repaired.
    let body = "{\"orderId\": 1, \"currency\": \"EUR\"}";
    let form = [
        ("csrf", csrf.as_str()),
        ("g", &g),
        ("body", body),
        ("headers", headers),
    ];
    let (status, done) = post(&c, &cookie, &repair, &form).await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("<strong id=\"repair-outcome\">repaired</strong>"),
        "{done}"
    );
    c.line_with(&[
        "console audit",
        "action=\"repair\"",
        "message_id r1",
        "outcome=\"ok\"",
    ]);
    let copies = take_all(&ch, &q).await;
    assert_eq!(copies.len(), 1);
    let copy = &copies[0];
    assert_eq!(copy.id, "r1", "message_id kept");
    assert_eq!(copy.body, body.as_bytes());
    let h = copy.headers.inner();
    assert!(h.contains_key("dlq-repaired-at"), "{h:?}");
    assert!(h.contains_key("dlq-replay-id"), "{h:?}");
    assert!(!h.contains_key("debug"), "removed in the form: {h:?}");
    match h.get("tenant") {
        Some(lapin::types::AMQPValue::LongString(s)) => assert_eq!(s.as_bytes(), b"acme2"),
        other => panic!("tenant: {other:?}"),
    }
    let rest = take_all(&ch, &dlq).await;
    let ids: Vec<&str> = rest.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["r0", "r2"], "the original gone, the others untouched");
    for t in &rest {
        assert_eq!(t.body, format!("body of {}", t.id).as_bytes());
        assert!(!t.headers.inner().contains_key("dlq-repaired-at"));
    }

    drop(c);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// Bad flags: one clear error each, before anything is bound or read.
#[test]
fn bad_flags_are_refused_with_one_clear_error() {
    let dir = common::manifests(&[]);
    let path = dir.path().display().to_string();
    for (args, needle) in [
        (
            vec![
                "console",
                "--standalone",
                "-f",
                &path,
                "--bind-address",
                "0.0.0.0:0",
            ],
            "loopback address only",
        ),
        (
            vec!["console", "-f", &path],
            "-f PATH is for `console --standalone`",
        ),
        (vec!["console", "--standalone"], "needs -f PATH"),
        (
            vec!["console", "--standalone", "-f", "-"],
            "standard input can be read only once",
        ),
        (
            vec!["console", "--standalone", "-f", &path, "--scan-ttl", "0s"],
            "--scan-ttl",
        ),
        (
            vec![
                "console",
                "--standalone",
                "-f",
                &path,
                "--bind-address",
                "localhost:1",
            ],
            "takes IP:port",
        ),
    ] {
        let out = common::cli(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            common::text(&out).contains(needle),
            "{args:?}: {}",
            common::text(&out)
        );
    }
}

#[tokio::test]
async fn sigterm_during_a_replay_settles_its_copies_and_audits_it() {
    const N: usize = 20_000;
    let q = common::unique("t-console-term");
    let (_dir, path) = applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (_conn, ch) = confirm_channel().await;
    let mut confirms = Vec::with_capacity(N);
    for i in 0..N {
        let props = lapin::BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("s{i}").into())
            .with_headers(header(&[("dlq-original-queue", text(&q))]));
        confirms.push(
            ch.basic_publish(
                "".into(),
                dlq.as_str().into(),
                Default::default(),
                b"x",
                props,
            )
            .await
            .expect("publish"),
        );
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack());
    }
    let mut c = Console::start(&path);
    let cookie = login(&c).await;
    let dlq_page = "/dlq/default/d";
    start_replay(&c, &cookie, dlq_page).await;
    // SIGTERM as soon as copies arrive in the source queue.
    while common::dlq::ready_now(&ch, &q).await == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let pid = c.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(status) = c.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit 60 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
    // The replay was audited with what it did, and every message is in one place once.
    let line = c.line_with(&["console audit", "action=\"replay\""]);
    let (copies, left) = (
        ready(&ch, &q).await as usize,
        ready(&ch, &dlq).await as usize,
    );
    eprintln!("SIGTERM during a console replay: {copies} copies, {left} left of {N}; {line}");
    assert!(line.contains(&format!("count={copies}")), "{line}");
    assert_eq!(copies + left, N, "a message lost or copied twice");
    cleanup(&q).await;
}
