//! What every page handler of the console shares: the state as handlers take it
//! ([`Shared`]), rendering ([`html`], [`page`]), the access check of each request
//! ([`authorized`]), the DeadLetterQueue of a path ([`find`]), the cached scan a page points
//! into ([`scan_of`]) and the pages of a broker error ([`broker_error`],
//! [`broker_error_noting`]). The routes are [`super::server`]'s; the handlers are there and
//! in [`super::actions`], [`super::repair`] and [`super::jobs`].

use std::sync::Arc;

use askama::Template;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::auth::{Need, Session, Verdict};
use super::source::Target;
use super::templates::MessagePage;
use super::State;
use crate::printable::{shown, PREVIEW_BYTES};

/// Shared state as the handlers take it.
pub type Shared = Arc<State>;

/// A rendered template as an HTML response with `status`; a render error is a 500.
pub fn html(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!("console: rendering a page failed: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "page rendering failed").into_response()
        }
    }
}

/// A one-paragraph page (`text` must be made visible already where it quotes outside
/// text).
pub fn page(status: StatusCode, title: &str, text: String) -> Response {
    let class = if status.is_success() { "note" } else { "error" };
    html(
        status,
        &MessagePage {
            title: title.into(),
            text,
            class,
            back: Some("/".into()),
        },
    )
}

/// The request's session when it may do what `need` says ([`super::auth::Auth::check`]): else
/// 401 with the login link (no session, or its token no longer authenticates anybody: the
/// session is closed), 403 naming the RBAC it takes, or 503 when the API server could
/// not review the caller.
pub async fn authorized(
    state: &State,
    headers: &HeaderMap,
    need: Need<'_>,
) -> Result<Session, Response> {
    let logged_out = || {
        page(
            StatusCode::UNAUTHORIZED,
            "Log in",
            "You are not logged in (or your token expired): log in at /login.".into(),
        )
    };
    let session = state.sessions.of(headers).ok_or_else(logged_out)?;
    match state.auth.check(&session.identity, need).await {
        Ok(Verdict::Allowed) => Ok(session),
        Ok(Verdict::LoggedOut) => {
            state.sessions.close(headers);
            Err(logged_out())
        }
        Ok(Verdict::Denied(what)) => Err({
            let resource = match need {
                Need::View(ns, name) | Need::Act(ns, name) => format!("{ns}/{name}"),
                Need::Session => String::new(),
            };
            state.audit(&super::audit::Entry {
                user: &session.user,
                action: "access-refused",
                resource: &resource,
                what: &what,
                count: 0,
                outcome: "refused",
            });
            page(
                StatusCode::FORBIDDEN,
                "Not allowed",
                format!(
                    "{} may not do this: {}.",
                    shown(&session.user, PREVIEW_BYTES),
                    shown(&what, PREVIEW_BYTES)
                ),
            )
        }),
        Err(e) => {
            tracing::error!("console: {e}");
            Err(page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Cannot check access",
                crate::printable::escape_lines(&e.to_string()),
            ))
        }
    }
}

/// The DeadLetterQueue `ns/name` in force, or the 404 page.
#[allow(clippy::result_large_err)]
pub fn find(state: &State, ns: &str, name: &str) -> Result<(Arc<Vec<Target>>, usize), Response> {
    let targets = state.targets();
    let key = format!("{ns}/{name}");
    match targets.iter().position(|t| t.prepared.key == key) {
        Some(i) => Ok((targets, i)),
        None => Err(page(
            StatusCode::NOT_FOUND,
            "Not found",
            format!("No DeadLetterQueue {} here.", shown(&key, PREVIEW_BYTES)),
        )),
    }
}

/// The page of a broker error (escaped).
pub fn broker_error(e: &crate::broker::BrokerError) -> Response {
    page(
        StatusCode::BAD_GATEWAY,
        "Broker error",
        crate::printable::escape_lines(&e.to_string()),
    )
}

/// [`broker_error`] of an action that may have moved messages before it stopped: when the
/// connection was lost ([`crate::dlq::replay::resumable`]: a node killed, a partition),
/// `note` follows the error, saying what may have been left ([`lost_broker_text`]).
pub fn broker_error_noting(e: &crate::broker::BrokerError, note: &str) -> Response {
    page(
        StatusCode::BAD_GATEWAY,
        "Broker error",
        lost_broker_text(e, note),
    )
}

/// The error `e` (escaped), followed on a line of its own by `note` when the connection
/// was lost ([`crate::dlq::replay::resumable`]).
pub fn lost_broker_text(e: &crate::broker::BrokerError, note: &str) -> String {
    let error = crate::printable::escape_lines(&e.to_string());
    if crate::dlq::replay::resumable(e) {
        format!("{error}\n{note}")
    } else {
        error
    }
}

/// The cached scan of generation `g` of `key`, or the page saying it was replaced.
#[allow(clippy::result_large_err)]
pub fn scan_of(
    state: &State,
    key: &str,
    g: Option<u64>,
    back: &str,
) -> Result<Arc<super::scan::Scan>, Response> {
    state
        .scans
        .cached(key)
        .last
        .filter(|s| Some(s.generation) == g && s.result.is_ok())
        .ok_or_else(|| {
            html(
                StatusCode::CONFLICT,
                &MessagePage {
                    title: "Scan replaced".into(),
                    text: "The scan this page points into was replaced by a newer one (or an action changed the queue); go back and look again.".into(),
                    class: "error",
                    back: Some(back.into()),
                },
            )
        })
}
