//! The console in process over the example's manifests, against the in-memory broker
//! ([`FakeBroker`]): login, pages, the checks on every POST, replay and purge with their
//! dry runs, the repair of one message. The real-broker test is tests/console_standalone.rs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::broker::message::{HeaderValue, Headers, Message};
use crate::client::headers::{ERROR_CLASS, LAST_FAILED_AT, ORIGINAL_QUEUE};
use crate::fake::FakeBroker;

const SOURCE: &str = "order-events";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A dead letter of the example's source queue with error class `class`.
fn letter(class: &str, id: &str, extra: &[(&str, &str)]) -> Message {
    let mut headers: Headers = [
        (ERROR_CLASS, HeaderValue::text(class)),
        (ORIGINAL_QUEUE, HeaderValue::text(SOURCE)),
        (
            LAST_FAILED_AT,
            HeaderValue::I64(i64::try_from(crate::clock::now_ms()).unwrap_or(0) - 60_000),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        headers.insert((*k).to_string(), HeaderValue::text(v));
    }
    let mut m = Message::new(headers, id.as_bytes());
    m.properties.message_id = Some(id.to_string());
    m
}

/// A console on 127.0.0.1:0 over the example, applied to a fake holding 3 `timeout` and 2
/// `validation` dead letters (one with a hostile header); its base URL, token, the fake and
/// the dead-letter queue's name.
async fn started() -> (String, String, FakeBroker, String, CancellationToken) {
    let (auth, token) = auth::Auth::new_token();
    let (base, fake, dlq, stop) = started_with(auth).await;
    (base, token, fake, dlq, stop)
}

/// [`started`] with `auth`: the base URL, the fake, the dead-letter queue and the stop.
pub(super) async fn started_with(
    auth: auth::Auth,
) -> (String, FakeBroker, String, CancellationToken) {
    let paths = vec![
        repo("examples/order-events.yaml"),
        repo("examples/rabbitmq-secret.yaml"),
    ];
    let (_, planned) = crate::standalone::load_and_plan(&paths).expect("plans");
    let fake = FakeBroker::new();
    let mut out = Vec::new();
    crate::standalone::apply_all(&fake, &planned, &mut out)
        .await
        .expect("applies");
    let dlq = planned[0]
        .prepared
        .topology
        .dead_letter_queues()
        .next()
        .expect("a dead-letter queue")
        .to_string();
    for i in 0..3 {
        fake.publish("/", "", &dlq, letter("timeout", &format!("t{i}"), &[]));
    }
    for i in 0..2 {
        let hostile = [("x-note", "<script>alert(1)</script>\u{1b}[2J")];
        fake.publish(
            "/",
            "",
            &dlq,
            letter("validation", &format!("v{i}"), &hostile),
        );
    }
    let targets = planned.into_iter().map(Target::from).collect();
    let console = Console::bind(
        Options {
            source: Source::Files(paths),
            targets,
            bind: "127.0.0.1:0".parse().expect("addr"),
            interval: Some(Duration::from_millis(50)),
            scan_max_messages: 2000,
            scan_ttl: Duration::from_secs(60),
            brokers: Arc::new(fake.clone()),
            events: None,
        },
        auth,
    )
    .await
    .expect("binds");
    let base = format!("http://{}", console.local_addr().expect("addr"));
    let stop = CancellationToken::new();
    tokio::spawn(console.serve(stop.clone()));
    (base, fake, dlq, stop)
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
pub(super) fn encoded(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Logs in: the `Cookie` header value.
async fn login(base: &str, token: &str) -> String {
    let r = client()
        .get(format!("{base}/login?token={token}"))
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
    set.split(';').next().expect("pair").to_string()
}

pub(super) async fn get(base: &str, cookie: &str, path: &str) -> (u16, String) {
    let r = client()
        .get(format!("{base}{path}"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    (r.status().as_u16(), r.text().await.expect("body"))
}

pub(super) async fn post(
    base: &str,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, String) {
    let r = client()
        .post(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(form))
        .send()
        .await
        .expect("post");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// The value of hidden input `name` in `html`.
pub(super) fn hidden(html: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + needle.len();
    html[at..].split('"').next().expect("value").to_string()
}

/// The page of job `path` once it is done.
async fn job_done(base: &str, cookie: &str, path: &str) -> String {
    for _ in 0..1500 {
        let (status, html) = get(base, cookie, path).await;
        assert_eq!(status, 200, "{html}");
        if html.contains("Done:") {
            return html;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the job never finished");
}

/// The DLQ page once its scan is done.
pub(super) async fn scanned_page(base: &str, cookie: &str) -> String {
    for _ in 0..1500 {
        let (status, html) = get(base, cookie, "/dlq/default/order-events").await;
        assert_eq!(status, 200, "{html}");
        if !html.contains("Scanning") && html.contains("Last scan") {
            return html;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the scan never finished");
}

#[tokio::test]
async fn pages_need_the_token_and_show_groups_and_escaped_messages() {
    let (base, token, _fake, _dlq, stop) = started().await;
    let (status, _) = get(&base, "", "/").await;
    assert_eq!(status, 401);
    let (status, _) = get(&base, "", "/login?token=wrong").await;
    assert_eq!(status, 401);
    let cookie = login(&base, &token).await;
    // The index lists the DeadLetterQueue, with its depth once polled.
    for attempt in 0.. {
        assert!(attempt < 1500, "the index never showed the depth");
        let (status, html) = get(&base, &cookie, "/").await;
        assert_eq!(status, 200);
        assert!(html.contains("default/order-events"), "{html}");
        if html.contains("<td class=\"num\">5</td>") {
            assert!(html.contains(">Inactive</td>"), "the alert state: {html}");
            assert!(html.contains("<polyline"), "the sparkline: {html}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let html = scanned_page(&base, &cookie).await;
    assert!(
        html.contains("<td class=\"num\">3</td>"),
        "timeout group: {html}"
    );
    assert!(
        html.contains("<td class=\"num\">2</td>"),
        "validation group: {html}"
    );
    let g = hidden(&html, "g");
    let (status, list) = get(
        &base,
        &cookie,
        &format!("/dlq/default/order-events/messages?g={g}&filter=class%3Dvalidation"),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert!(
        list.contains(">v0<") && list.contains(">v1<") && !list.contains(">t0<"),
        "{list}"
    );
    let (_, all) = get(
        &base,
        &cookie,
        &format!("/dlq/default/order-events/messages?g={g}"),
    )
    .await;
    let index = all
        .split("/messages/")
        .skip(1)
        .find(|s| s.contains(">v0<"))
        .and_then(|s| s.split('?').next())
        .expect("a link to v0")
        .to_string();
    let (status, msg) = get(
        &base,
        &cookie,
        &format!("/dlq/default/order-events/messages/{index}?g={g}"),
    )
    .await;
    assert_eq!(status, 200, "{msg}");
    assert!(msg.contains("x-note"), "{msg}");
    assert!(
        !msg.contains("<script>") && !msg.contains('\u{1b}'),
        "{msg}"
    );
    assert!(
        msg.contains("&#60;script&#62;") || msg.contains("&lt;script&gt;"),
        "{msg}"
    );
    // A foreign Host is refused (DNS rebinding).
    let r = client()
        .get(format!("{base}/"))
        .header("host", "evil.example")
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 421);
    stop.cancel();
}

#[tokio::test]
async fn replay_and_purge_count_first_then_act_and_posts_are_checked() {
    let (base, token, fake, dlq, stop) = started().await;
    let cookie = login(&base, &token).await;
    let html = scanned_page(&base, &cookie).await;
    let csrf = hidden(&html, "csrf");
    let path = "/dlq/default/order-events/replay/preview";
    // Without the CSRF token, or from another origin: refused.
    let (status, _) = post(&base, &cookie, path, &[("filter", "class=timeout")]).await;
    assert_eq!(status, 403);
    let r = client()
        .post(format!("{base}{path}"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[
            ("csrf", csrf.as_str()),
            ("filter", "class=timeout"),
        ]))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403);
    // Replay the `timeout` ones: dry run 3, then 3 back in the source queue.
    let (status, confirm) = post(
        &base,
        &cookie,
        path,
        &[("csrf", &csrf), ("filter", "class=timeout")],
    )
    .await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">3</strong>"),
        "{confirm}"
    );
    assert_eq!(
        fake.messages("/", SOURCE).len(),
        0,
        "a dry run moves nothing"
    );
    let action = hidden(&confirm, "action");
    let done_path = "/dlq/default/order-events/replay";
    let r = client()
        .post(format!("{base}{done_path}"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("csrf", &csrf), ("action", &action)]))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 303, "the replay runs as a job");
    let job = r.headers()["location"].to_str().expect("ascii").to_string();
    assert!(job.starts_with("/jobs/"), "{job}");
    let done = job_done(&base, &cookie, &job).await;
    assert!(done.contains("<strong id=\"count\">3</strong>"), "{done}");
    // Another session (same user here, but no cookie) does not see it.
    assert_eq!(get(&base, "", &job).await.0, 401);
    assert_eq!(fake.messages("/", SOURCE).len(), 3);
    assert_eq!(fake.messages("/", &dlq).len(), 2);
    // The same confirmation cannot be used twice.
    let (status, _) = post(
        &base,
        &cookie,
        done_path,
        &[("csrf", &csrf), ("action", &action)],
    )
    .await;
    assert_eq!(status, 409);
    // Purge: dry run 2, refused without the typed name, done with it.
    let (status, confirm) = post(
        &base,
        &cookie,
        "/dlq/default/order-events/purge/preview",
        &[("csrf", &csrf), ("filter", "class=validation")],
    )
    .await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("<strong id=\"count\">2</strong>"),
        "{confirm}"
    );
    let action = hidden(&confirm, "action");
    let purge = "/dlq/default/order-events/purge";
    let (status, _) = post(
        &base,
        &cookie,
        purge,
        &[
            ("csrf", &csrf),
            ("action", &action),
            ("confirm", "order-events"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(fake.messages("/", &dlq).len(), 2, "nothing removed");
    let (status, done) = post(
        &base,
        &cookie,
        purge,
        &[
            ("csrf", &csrf),
            ("action", &action),
            ("confirm", "default/order-events"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("<strong id=\"count\">2</strong>"), "{done}");
    assert_eq!(fake.messages("/", &dlq).len(), 0);
    assert_eq!(
        fake.messages("/", SOURCE).len(),
        3,
        "the replayed ones stay"
    );
    stop.cancel();
}

/// Scans run one at a time per DeadLetterQueue, are kept for their TTL, and a forced
/// rescan or an invalidation replaces them; every message read is given back.
#[tokio::test]
async fn scans_are_single_flight_cached_and_give_every_message_back() {
    let paths = vec![
        repo("examples/order-events.yaml"),
        repo("examples/rabbitmq-secret.yaml"),
    ];
    let (_, planned) = crate::standalone::load_and_plan(&paths).expect("plans");
    let fake = FakeBroker::new();
    let mut out = Vec::new();
    crate::standalone::apply_all(&fake, &planned, &mut out)
        .await
        .expect("applies");
    let prep = &planned[0].prepared;
    let dlq = prep
        .topology
        .dead_letter_queues()
        .next()
        .expect("dlq")
        .to_string();
    for i in 0..4 {
        fake.publish("/", "", &dlq, letter("timeout", &format!("m{i}"), &[]));
    }
    // Ids and bodies (a quorum queue counts each return in `x-delivery-count`).
    let ids = || {
        fake.messages("/", &dlq)
            .into_iter()
            .map(|m| (m.properties.message_id, m.body))
            .collect::<Vec<_>>()
    };
    let before = ids();
    let scans = Arc::new(scan::Scans::new(
        3,
        64,
        Duration::from_secs(3600),
        tokio_util::task::TaskTracker::new(),
    ));
    let cancel = CancellationToken::new();
    let client = || crate::broker::BrokerFactory::client(&fake, &prep.connection).expect("client");
    // The lock held: the first scan waits, and a second request starts none.
    let lock = scans.lock(&prep.key);
    let held = lock.lock().await;
    let first = scans.refresh(&prep.key, client(), prep.topology.clone(), false, &cancel);
    assert!(first.running && first.last.is_none());
    let second = scans.refresh(&prep.key, client(), prep.topology.clone(), true, &cancel);
    assert!(second.running, "no second scan while one runs");
    drop(held);
    let done = loop {
        let c = scans.cached(&prep.key);
        if let (false, Some(s)) = (c.running, c.last) {
            break s;
        }
        tokio::task::yield_now().await;
    };
    let ins = done.result.as_ref().expect("scanned");
    assert_eq!(
        (ins.total, ins.scanned, ins.sample.len()),
        (4, 3, 3),
        "bounded"
    );
    assert_eq!(ids(), before, "every message given back, in order");
    // Within the TTL: the same scan, none started.
    let again = scans.refresh(&prep.key, client(), prep.topology.clone(), false, &cancel);
    assert!(!again.running);
    assert_eq!(again.last.map(|s| s.generation), Some(done.generation));
    // Forced: a new one.
    let forced = scans.refresh(&prep.key, client(), prep.topology.clone(), true, &cancel);
    assert!(forced.running);
    scans.invalidate(&prep.key);
    loop {
        let c = scans.cached(&prep.key);
        if !c.running {
            let s = c.last.expect("the forced scan");
            assert!(s.generation > done.generation);
            break;
        }
        tokio::task::yield_now().await;
    }
}

/// The page of message `id` of scan `g` (scan number, index, its HTML).
async fn message_page(base: &str, cookie: &str, g: &str, id: &str) -> (String, String, String) {
    let list = format!("/dlq/default/order-events/messages?g={g}&filter=id%3D{id}");
    let (status, html) = get(base, cookie, &list).await;
    assert_eq!(status, 200, "{html}");
    let needle = "/dlq/default/order-events/messages/";
    let at = html
        .find(needle)
        .unwrap_or_else(|| panic!("{id} in {html}"))
        + needle.len();
    let link = html[at..].split('"').next().expect("link").to_string();
    let (index, g) = link.split_once("?g=").expect("scan number");
    let (status, page) = get(base, cookie, &format!("{needle}{index}?g={g}")).await;
    assert_eq!(status, 200, "{page}");
    (g.to_string(), index.to_string(), page)
}

#[tokio::test]
async fn repair_replaces_the_body_checks_json_and_needs_the_csrf_token() {
    let (base, token, fake, dlq, stop) = started().await;
    let cookie = login(&base, &token).await;
    let dlq_page = scanned_page(&base, &cookie).await;
    let csrf = hidden(&dlq_page, "csrf");
    let (g, index, page) = message_page(&base, &cookie, &hidden(&dlq_page, "g"), "v1").await;
    for id in [
        "repair-form",
        "repair-body",
        "repair-headers",
        "repair-submit",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "{id} in {page}");
    }
    // Its only headers are protected (dlq-*, x-*): listed, not in the textarea.
    let protected = page
        .split("id=\"repair-protected\"")
        .nth(1)
        .expect("the list");
    assert!(protected.contains("<code>x-note</code>"), "{page}");
    assert!(
        page.contains(
            "name=\"headers\" rows=\"8\" cols=\"100\" spellcheck=\"false\">\n{}</textarea>"
        ),
        "{page}"
    );
    let path = format!("/dlq/default/order-events/messages/{index}/repair");
    let headers = r#"{"tenant": "acme"}"#;
    // Without the CSRF token: refused, nothing changed.
    let body = r#"{"orderId": 1}"#;
    let form = [("g", g.as_str()), ("body", body), ("headers", headers)];
    assert_eq!(post(&base, &cookie, &path, &form).await.0, 403);
    // Invalid JSON: 400, the form again with the error and the user's text, nothing changed.
    let bad = "{\"orderId\": <b>";
    let (status, html) = post(
        &base,
        &cookie,
        &path,
        &[
            ("csrf", &csrf),
            ("g", &g),
            ("body", bad),
            ("headers", headers),
        ],
    )
    .await;
    assert_eq!(status, 400, "{html}");
    assert!(html.contains("id=\"repair-error\"") && html.contains("invalid JSON at line 1"));
    assert!(
        html.contains("{&#34;orderId&#34;: &#60;b&#62;") || html.contains("&lt;b&gt;"),
        "{html}"
    );
    assert_eq!(fake.messages("/", &dlq).len(), 5);
    assert_eq!(fake.messages("/", SOURCE).len(), 0);
    // Repaired: the copy in the source queue with the new body, the original gone.
    let (status, done) = post(
        &base,
        &cookie,
        &path,
        &[
            ("csrf", &csrf),
            ("g", &g),
            ("body", body),
            ("headers", headers),
        ],
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("<strong id=\"repair-outcome\">repaired</strong>"),
        "{done}"
    );
    assert!(done.contains("id=\"repair-replay-id\""), "{done}");
    let copies = fake.messages("/", SOURCE);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].body, body.as_bytes());
    assert_eq!(copies[0].properties.message_id.as_deref(), Some("v1"));
    let h = copies[0].properties.headers.as_ref().expect("headers");
    assert!(h.contains_key(crate::dlq::REPAIRED_AT), "{h:?}");
    assert_eq!(h.get("tenant"), Some(&HeaderValue::text("acme")));
    assert!(h.contains_key("x-note"), "a protected header is kept");
    let left: Vec<_> = fake
        .messages("/", &dlq)
        .into_iter()
        .filter_map(|m| m.properties.message_id)
        .collect();
    assert_eq!(left.len(), 4);
    assert!(!left.iter().any(|id| id == "v1"), "{left:?}");
    // The scan was invalidated: the page points into a replaced scan.
    assert_eq!(
        post(
            &base,
            &cookie,
            &path,
            &[
                ("csrf", &csrf),
                ("g", &g),
                ("body", body),
                ("headers", headers)
            ]
        )
        .await
        .0,
        409
    );
    stop.cancel();
}

#[tokio::test]
async fn a_repair_is_refused_when_the_scan_read_two_messages_with_its_id() {
    let (base, token, fake, dlq, stop) = started().await;
    // A second dead letter with the message_id of t0: a repair (by id=) could take either.
    fake.publish("/", "", &dlq, letter("timeout", "t0", &[]));
    let cookie = login(&base, &token).await;
    let dlq_page = scanned_page(&base, &cookie).await;
    let csrf = hidden(&dlq_page, "csrf");
    let (g, index, _) = message_page(&base, &cookie, &hidden(&dlq_page, "g"), "t0").await;
    let path = format!("/dlq/default/order-events/messages/{index}/repair");
    let form = [
        ("csrf", csrf.as_str()),
        ("g", g.as_str()),
        ("body", r#"{"fixed": true}"#),
    ];
    let (status, html) = post(&base, &cookie, &path, &form).await;
    assert_eq!(status, 409, "{html}");
    assert!(html.contains("share this message_id"), "{html}");
    assert_eq!(fake.messages("/", &dlq).len(), 6, "nothing removed");
    assert_eq!(fake.messages("/", SOURCE).len(), 0, "nothing sent");
    stop.cancel();
}

#[tokio::test]
async fn a_repair_form_with_large_headers_is_read_not_refused_for_its_size() {
    let (base, token, fake, dlq, stop) = started().await;
    let cookie = login(&base, &token).await;
    let dlq_page = scanned_page(&base, &cookie).await;
    let csrf = hidden(&dlq_page, "csrf");
    let (g, index, _) = message_page(&base, &cookie, &hidden(&dlq_page, "g"), "v1").await;
    let path = format!("/dlq/default/order-events/messages/{index}/repair");
    // 200 KB of headers, about 600 KB URL-encoded: over the old 64 KiB limit.
    let headers = format!(r#"{{"tenant": "{}"}}"#, "é".repeat(100_000));
    let form = [
        ("csrf", csrf.as_str()),
        ("g", g.as_str()),
        ("headers", headers.as_str()),
    ];
    let (status, html) = post(&base, &cookie, &path, &form).await;
    assert_ne!(status, 413, "{html}");
    assert!(
        html.contains("id=\"repair-outcome\"") || html.contains("id=\"repair-error\""),
        "{status}: {html}"
    );
    assert_eq!(
        fake.messages("/", &dlq).len() + fake.messages("/", SOURCE).len(),
        5,
        "nothing lost"
    );
    stop.cancel();
}

#[test]
fn a_lost_connection_is_followed_by_what_may_have_been_left_and_other_errors_are_not() {
    let lost = crate::broker::BrokerError::Unreachable {
        endpoint: "amqp://guest:***@10.0.0.1:5672/%2f".into(),
        reason: "IO error: connection aborted\u{1b}[2J".into(),
    };
    let text = super::respond::lost_broker_text(&lost, "NOTE");
    assert!(text.ends_with("\nNOTE"), "{text}");
    assert!(text.contains("connection aborted"), "{text}");
    assert!(!text.contains('\u{1b}'), "escaped: {text}");
    let missing = crate::broker::BrokerError::NotFound {
        what: "queue \"q.dlq\"".into(),
    };
    let text = super::respond::lost_broker_text(&missing, "NOTE");
    assert!(!text.contains("NOTE"), "nothing was moved: {text}");
}
