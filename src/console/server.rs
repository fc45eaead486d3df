//! The console's HTTP routes (axum): the checks every request passes (Host, session,
//! security headers), login, and the read-only pages. The actions are [`super::actions`].

use axum::extract::{Path, Query, Request, State as Extract};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::auth::{self, Need, Session, Verdict};
use super::respond::{authorized, broker_error, find, html, page, scan_of, Shared};
use super::source::Target;
use super::templates;
use super::{views, State};
use crate::lock::Locked;
use crate::printable::{shown, PREVIEW_BYTES};

/// The largest request body (bytes): a repair form carries the message's editable headers,
/// which may come near AMQP's 128 KiB frame, URL-encoded (up to three times as long).
pub const MAX_FORM_BYTES: usize = 1024 * 1024;

/// The console's routes, behind a guard on every one: the Host check (421) and the
/// security headers (CSP, no framing, no Referer to other sites, no caching); request
/// bodies at most [`MAX_FORM_BYTES`].
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        // Browsers ask for it on every page: no icon, and no 404 in their consoles.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/static/console.css", get(css))
        .route("/", get(index))
        .route("/dlq/{ns}/{name}", get(dlq_page))
        .route("/dlq/{ns}/{name}/scan", post(super::actions::rescan))
        .route("/dlq/{ns}/{name}/messages", get(messages))
        .route("/dlq/{ns}/{name}/messages/{index}", get(message))
        .route(
            "/dlq/{ns}/{name}/messages/{index}/repair",
            post(super::repair::repair),
        )
        .route(
            "/dlq/{ns}/{name}/replay/preview",
            post(super::actions::replay_preview),
        )
        .route("/dlq/{ns}/{name}/replay", post(super::actions::replay))
        .route(
            "/dlq/{ns}/{name}/purge/preview",
            post(super::actions::purge_preview),
        )
        .route("/dlq/{ns}/{name}/purge", post(super::actions::purge))
        .route("/jobs/{id}", get(super::jobs::job_page))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Refuses a request whose Host the console does not answer to ([`auth::Hosts`];
/// standalone, DNS rebinding: 421), and sets the security headers on every response (a strict CSP
/// without scripts, no framing, no referrer, no caching).
async fn guard(Extract(state): Extract<Shared>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let mut response = if state.hosts.allows(host) {
        next.run(request).await
    } else {
        page(
            StatusCode::MISDIRECTED_REQUEST,
            "Wrong host",
            "This console answers only to its own address (standalone: 127.0.0.1, localhost or [::1] with its port).".into(),
        )
    };
    let h = response.headers_mut();
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        ("x-content-type-options", "nosniff"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with every form POST
        // (Fetch standard, "serializing a request origin"), and the same-origin check
        // could not tell the console's own forms from a sandboxed page's. `same-origin`
        // still sends no Referer (nor the login link's token) to another site.
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[derive(Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

/// `GET /login?token=T` (standalone: the link printed at start): a session cookie and a
/// redirect to `/`, or 401. Without a token: the login form. In a cluster a token in the
/// URL is refused (URLs end up in histories and proxy logs): the form is shown.
async fn login_page(Extract(state): Extract<Shared>, Query(q): Query<LoginQuery>) -> Response {
    match (&state.auth, q.token) {
        (auth::Auth::Token(_), Some(token)) => logged_in(&state, &token).await,
        (auth::Auth::Kubernetes(_), Some(_)) => login_form(
            &state,
            StatusCode::BAD_REQUEST,
            Some("A token in the address is refused: paste it in the form instead.".into()),
        ),
        (_, None) => login_form(&state, StatusCode::OK, None),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: Option<String>,
}

/// `POST /login` (the form; same origin only): a session for the token, or the form
/// again with 401.
async fn login(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    if !state.hosts.same_origin(&headers) {
        return page(
            StatusCode::FORBIDDEN,
            "Refused",
            "Cross-origin request.".into(),
        );
    }
    logged_in(&state, form.token.as_deref().unwrap_or_default().trim()).await
}

/// The session of `token` ([`auth::Auth::login`]) as a cookie and a redirect to `/`; the
/// form with 401 when it identifies nobody; 503 when it could not be reviewed.
async fn logged_in(state: &State, token: &str) -> Response {
    match state.auth.login(token).await {
        Ok(Some((user, identity))) => {
            tracing::info!(target: "dlq_operator::console::audit", user = ?crate::printable::escape(&user), "console login");
            let id = state.sessions.open(user, identity);
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&auth::session_cookie(&id)) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Ok(None) => {
            tracing::warn!(target: "dlq_operator::console::audit", "console login refused: a wrong, expired or empty token");
            login_form(
                state,
                StatusCode::UNAUTHORIZED,
                Some("Wrong, expired or missing token.".into()),
            )
        }
        Err(e) => {
            tracing::error!("console: {e}");
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Cannot check the token",
                crate::printable::escape_lines(&e.to_string()),
            )
        }
    }
}

/// The login form with `status` and an error, if any.
fn login_form(state: &State, status: StatusCode, error: Option<String>) -> Response {
    let kubernetes = matches!(state.auth, auth::Auth::Kubernetes(_));
    html(status, &templates::Login { kubernetes, error })
}

/// `POST /logout`: ends the session.
async fn logout(Extract(state): Extract<Shared>, headers: HeaderMap) -> Response {
    if !state.hosts.same_origin(&headers) {
        return page(
            StatusCode::FORBIDDEN,
            "Refused",
            "Cross-origin request.".into(),
        );
    }
    state.sessions.close(&headers);
    Redirect::to("/login").into_response()
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        templates::CSS,
    )
        .into_response()
}

/// `GET /`: every DeadLetterQueue with its depth, ratio, alert and sparkline.
async fn index(Extract(state): Extract<Shared>, headers: HeaderMap) -> Response {
    let s = match authorized(&state, &headers, Need::Session).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let visible = match visible(&state, &s).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let polled = state.polled.locked().clone();
    let history = state.history.locked();
    let rows = visible
        .iter()
        .map(|t| {
            let key = &t.prepared.key;
            let (ns, name) = crate::collector::split_key(key);
            let last = polled.get(key);
            let depths = history.of(key);
            templates::IndexRow {
                namespace: ns.to_string(),
                name: name.to_string(),
                depth: last.map_or("-".into(), |l| {
                    l.depth.map_or("?".into(), |d| d.to_string())
                }),
                ratio: last
                    .and_then(|l| l.ratio)
                    .map_or("-".into(), |r| format!("{r:.2}")),
                alert: last.map_or("-", |l| l.alert),
                points: super::history::sparkline(&depths, 120, 24),
                points_count: depths.len(),
            }
        })
        .collect();
    drop(history);
    let interval = u64::try_from(state.interval().as_millis()).unwrap_or(u64::MAX);
    html(
        StatusCode::OK,
        &templates::Index {
            rows,
            interval: crate::duration::format_ms(interval),
            user: s.user,
        },
    )
}

/// The DeadLetterQueues in force that session `s` may view ([`Need::View`]), reviewed
/// together; or the error page of the first failed review.
async fn visible(state: &State, s: &Session) -> Result<Vec<Target>, Response> {
    let targets = state.targets();
    let checks = targets.iter().map(|t| {
        let (ns, name) = crate::collector::split_key(&t.prepared.key);
        state.auth.check(&s.identity, Need::View(ns, name))
    });
    let verdicts = futures::future::join_all(checks).await;
    let mut shown = Vec::new();
    for (t, verdict) in targets.iter().zip(verdicts) {
        match verdict {
            Ok(Verdict::Allowed) => shown.push(t.clone()),
            Ok(_) => {}
            Err(e) => {
                return Err(page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Cannot check access",
                    crate::printable::escape_lines(&e.to_string()),
                ))
            }
        }
    }
    Ok(shown)
}

/// `GET /dlq/{ns}/{name}`: the dead-letter queues' counts now (passive declares), and the
/// groups of the cached scan (a scan is started in the background when missing or
/// stale; the page then refreshes itself).
async fn dlq_page(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let s = match authorized(&state, &headers, Need::View(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (targets, i) = match find(&state, &ns, &name) {
        Ok(found) => found,
        Err(r) => return r,
    };
    let prep = &targets[i].prepared;
    let client = match state.brokers.client(&prep.connection) {
        Ok(c) => c,
        Err(e) => return broker_error(&e),
    };
    let mut queues = Vec::new();
    for q in prep.topology.dead_letter_queues() {
        let count = match client.passive_queue_counts(&prep.topology.vhost, q).await {
            Ok(Some(c)) => c.ready.to_string(),
            Ok(None) => "missing".into(),
            Err(e) => crate::printable::escape_lines(&e.to_string()),
        };
        queues.push((shown(q, PREVIEW_BYTES), count));
    }
    let cached = state.scans.refresh(
        &prep.key,
        client,
        prep.topology.clone(),
        false,
        &state.cancel,
    );
    let (mut error, mut summary, mut generation, mut groups) = (None, None, 0, Vec::new());
    if let Some(scan) = &cached.last {
        generation = scan.generation;
        match &scan.result {
            Ok(ins) => {
                summary = Some(scan_summary(ins, scan.at.elapsed()));
                groups = views::group_rows(&views::groups(ins));
            }
            Err(e) => error = Some(e.clone()),
        }
    }
    html(
        StatusCode::OK,
        &templates::DlqPage {
            key: prep.key.clone(),
            namespace: ns,
            name,
            csrf: s.csrf,
            // No user name, no password: the management URI without userinfo.
            broker: format!(
                "{} (vhost {})",
                prep.connection.management_base(),
                prep.topology.vhost
            ),
            queues,
            scanning: cached.running,
            error,
            summary,
            generation,
            groups,
        },
    )
}

/// "Read N of M messages …, K ago" for a finished scan.
fn scan_summary(ins: &crate::dlq::Inspection, age: std::time::Duration) -> String {
    let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    format!(
        "Last scan: read {} of {} messages{}{}, {} ago.",
        ins.scanned,
        ins.total,
        if ins.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        if ins.rotated > 0 {
            format!(
                "; {} moved to the tail to stay under the delivery limit",
                ins.rotated
            )
        } else {
            String::new()
        },
        crate::duration::format_ms(ms / 1000 * 1000)
    )
}

#[derive(Deserialize)]
struct ListQuery {
    g: Option<u64>,
    group: Option<usize>,
    filter: Option<String>,
}

/// `GET /dlq/{ns}/{name}/messages?g=&group=|filter=`: the messages of a group or a
/// filter among those the cached scan read.
async fn messages(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(r) = authorized(&state, &headers, Need::View(&ns, &name)).await {
        return r;
    }
    let key = format!("{ns}/{name}");
    let back = format!("/dlq/{ns}/{name}");
    let scan = match scan_of(&state, &key, q.g, &back) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Ok(ins) = &scan.result else {
        return page(StatusCode::CONFLICT, "No scan", String::new());
    };
    let (filter, what) = match (
        q.group,
        q.filter.as_deref().filter(|f| !f.trim().is_empty()),
    ) {
        (Some(i), _) => match views::groups(ins).get(i) {
            Some(g) => (g.filter(), super::actions::group_text(g)),
            None => return page(StatusCode::NOT_FOUND, "No such group", String::new()),
        },
        (None, Some(text)) => match crate::dlq::filter::Filter::parse(&[text]) {
            Ok(f) => (f, format!("filter {}", shown(text, PREVIEW_BYTES))),
            Err(e) => {
                return page(
                    StatusCode::BAD_REQUEST,
                    "Bad filter",
                    shown(&e.to_string(), PREVIEW_BYTES),
                )
            }
        },
        (None, None) => (crate::dlq::filter::Filter::default(), "all".into()),
    };
    html(
        StatusCode::OK,
        &templates::Messages {
            key,
            namespace: ns,
            name,
            what,
            scanned: ins.scanned,
            generation: scan.generation,
            rows: views::message_rows(&ins.sample, &filter, scan.now_ms),
        },
    )
}

#[derive(Deserialize)]
struct MessageQuery {
    g: Option<u64>,
}

/// `GET /dlq/{ns}/{name}/messages/{i}?g=`: one message of the cached scan, with its
/// repair form ([`super::repair`]).
async fn message(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name, index)): Path<(String, String, usize)>,
    Query(q): Query<MessageQuery>,
) -> Response {
    let s = match authorized(&state, &headers, Need::View(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let back = format!("/dlq/{ns}/{name}");
    let scan = match scan_of(&state, &key, q.g, &back) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match scan.result.as_ref().ok().and_then(|i| i.sample.get(index)) {
        Some(m) => html(
            StatusCode::OK,
            &templates::Message {
                key,
                namespace: ns,
                name,
                view: views::message_view(m, scan.now_ms),
                csrf: s.csrf,
                generation: scan.generation,
                index,
                repair: super::repair::editor(m),
            },
        ),
        None => page(StatusCode::NOT_FOUND, "No such message", String::new()),
    }
}
