//! The console's actions, through the same core as the CLI: a rescan
//! ([`super::scan`]), a replay ([`crate::dlq::replay::replay_with`]) and a purge
//! ([`crate::dlq::purge::purge_with`]). Each runs first as a dry run whose count is shown
//! with a confirmation form carrying a one-time action id; the purge's confirmation also
//! needs the DeadLetterQueue's `namespace/name` typed. Every POST is checked (same origin,
//! session, CSRF token), runs under the DeadLetterQueue's lock (never beside a console
//! scan), in a task of its own (a closed browser tab does not cut it short), and is
//! audited ([`super::audit`]). The repair of one message is [`super::repair`].

use std::sync::Arc;

use axum::extract::{Form, Path, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Redirect, Response};
use serde::Deserialize;

use super::audit::Entry;
use super::auth::{self, Need, Session};
use super::respond::{broker_error, find, html, lost_broker_text, page, scan_of, Shared};
use super::templates::{Confirm, Done};
use super::views::{self, Group};
use super::{Pending, State};
use crate::broker::{BrokerClient, BrokerError};
use crate::dlq::filter::Filter;
use crate::dlq::purge::{purge_with, PurgeReport};
use crate::dlq::replay::{
    crash_bound, replay_with, stopped_note, ReplayOptions, ReplayReport, Target, MAX_IN_FLIGHT,
};
use crate::lock::Locked;
use crate::printable::{shown, PREVIEW_BYTES};
use crate::reconcile::Prepared;

/// Skip a message already replayed this many times (the CLI's `--max-replays` default).
pub const MAX_REPLAYS: u64 = 3;

/// The fields of the console's forms.
#[derive(Debug, Default, Deserialize)]
pub struct ActionForm {
    /// The session's CSRF token.
    pub csrf: Option<String>,
    /// The scan a group index points into.
    pub g: Option<u64>,
    /// A group of that scan ([`views::groups`]).
    pub group: Option<usize>,
    /// A filter expression ([`crate::filter`]).
    pub filter: Option<String>,
    /// The one-time action id of a confirmation.
    pub action: Option<String>,
    /// The typed `namespace/name` of a purge confirmation.
    pub confirm: Option<String>,
    /// The edited body of a repair ([`super::repair`]).
    pub body: Option<String>,
    /// The edited headers of a repair, a JSON object ([`super::repair`]).
    pub headers: Option<String>,
}

/// The session of a POST that comes from the console's own page: same origin (403),
/// logged in and allowed what `need` says ([`super::respond::authorized`]: 401, 403, 503),
/// with the session's CSRF token (403).
pub async fn checked_post(
    state: &State,
    headers: &HeaderMap,
    form: &ActionForm,
    need: Need<'_>,
) -> Result<Session, Response> {
    if !state.hosts.same_origin(headers) {
        return Err(page(
            StatusCode::FORBIDDEN,
            "Refused",
            "Cross-origin request refused.".into(),
        ));
    }
    let session = super::respond::authorized(state, headers, need).await?;
    if !auth::csrf_ok(&session, form.csrf.as_deref()) {
        return Err(page(
            StatusCode::FORBIDDEN,
            "Refused",
            "Missing or wrong form token: reload the page and try again.".into(),
        ));
    }
    Ok(session)
}

/// A group, for people: its class, reason and original queue, shown.
pub fn group_text(g: &Group) -> String {
    format!(
        "error class {}, reason {}, original queue {}",
        shown(&g.error_class, PREVIEW_BYTES),
        shown(&g.reason, PREVIEW_BYTES),
        shown(&g.original_queue, PREVIEW_BYTES)
    )
}

/// The messages a form names: a group of a cached scan, a filter expression, or (neither)
/// all; with their description.
#[allow(clippy::result_large_err)]
fn chosen(state: &State, key: &str, form: &ActionForm) -> Result<(Filter, String), Response> {
    let back = format!("/dlq/{key}");
    if let Some(i) = form.group {
        let scan = scan_of(state, key, form.g, &back)?;
        let group = scan
            .result
            .as_ref()
            .ok()
            .and_then(|ins| views::groups(ins).get(i).cloned());
        return group
            .map(|g| (g.filter(), group_text(&g)))
            .ok_or_else(|| page(StatusCode::NOT_FOUND, "No such group", String::new()));
    }
    match form
        .filter
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        None => Ok((Filter::default(), "all".into())),
        Some(text) => Filter::parse(&[text])
            .map(|f| (f, format!("filter {}", shown(text, PREVIEW_BYTES))))
            .map_err(|e| {
                page(
                    StatusCode::BAD_REQUEST,
                    "Bad filter",
                    shown(&e.to_string(), PREVIEW_BYTES),
                )
            }),
    }
}

/// `POST /dlq/{ns}/{name}/scan`: starts a new scan now (unless one runs).
pub async fn rescan(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(r) = checked_post(&state, &headers, &form, Need::View(&ns, &name)).await {
        return r;
    }
    let (planned, i) = match find(&state, &ns, &name) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let prep = &planned[i].prepared;
    match state.brokers.client(&prep.connection) {
        Ok(client) => {
            state.scans.refresh(
                &prep.key,
                client,
                prep.topology.clone(),
                true,
                &state.cancel,
            );
            axum::response::IntoResponse::into_response(Redirect::to(&format!("/dlq/{ns}/{name}")))
        }
        Err(e) => broker_error(&e),
    }
}

/// Starts a replay of `key` with `filter` (`dry_run` or not) under its lock, in a task
/// of its own (a closed browser tab does not cut it short), `observer` seeing its
/// progress.
#[allow(clippy::result_large_err)]
fn spawn_replay(
    state: &Shared,
    key: &str,
    filter: Filter,
    dry_run: bool,
    mut observer: impl crate::dlq::replay::Observer + 'static,
) -> Result<tokio::task::JoinHandle<Result<ReplayReport, BrokerError>>, Response> {
    let (prep, client) = prepared_client(state, key)?;
    let (lock, cancel) = (state.scans.lock(key), state.cancel.clone());
    Ok(state.tasks.spawn(async move {
        let _held = lock.lock().await;
        let now = crate::clock::now_ms();
        let opts = ReplayOptions {
            filter,
            limit: None,
            rate: None,
            dry_run,
            target: Target::OriginalQueue,
            max_replays: MAX_REPLAYS,
            replay_id: crate::dlq::replay::new_replay_id(now),
            max_in_flight: MAX_IN_FLIGHT,
            rewrite: None,
        };
        replay_with(
            client.as_ref(),
            &prep.topology,
            &opts,
            now,
            &cancel,
            &mut observer,
        )
        .await
    }))
}

/// A dry-run replay of `key` with `filter` ([`spawn_replay`]), awaited.
async fn dry_replay(state: &Shared, key: &str, filter: Filter) -> Result<ReplayReport, Response> {
    let task = spawn_replay(state, key, filter, true, |_: &ReplayReport| {})?;
    match task.await {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(broker_error(&e)),
        Err(e) => Err(page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            format!("the replay task failed: {e}"),
        )),
    }
}

/// Runs a purge of `key` with `filter` under its lock, in a task: the report (counts
/// up to the error, if any) and the error.
async fn run_purge(
    state: &Shared,
    key: &str,
    filter: Filter,
    dry_run: bool,
) -> Result<(PurgeReport, Option<String>), Response> {
    let (prep, client) = prepared_client(state, key)?;
    let (lock, cancel) = (state.scans.lock(key), state.cancel.clone());
    let task = state.tasks.spawn(async move {
        let _held = lock.lock().await;
        let now = crate::clock::now_ms();
        let mut report = PurgeReport::start(&prep.topology, dry_run);
        let result = purge_with(
            client.as_ref(),
            &prep.topology,
            &filter,
            dry_run,
            now,
            &cancel,
            &mut report,
        )
        .await;
        (
            report,
            result
                .err()
                .map(|e| crate::printable::escape_lines(&e.to_string())),
        )
    });
    task.await.map_err(|e| {
        page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            format!("the purge task failed: {e}"),
        )
    })
}

/// The planned DeadLetterQueue `key` (`namespace/name`) and a broker client for it, for
/// an action.
///
/// # Errors
/// The page to answer: 404 for an unknown DeadLetterQueue, the broker error's page when
/// no client can be made.
#[allow(clippy::result_large_err)]
pub(crate) fn prepared_client(
    state: &Shared,
    key: &str,
) -> Result<(Prepared, Arc<dyn BrokerClient>), Response> {
    let (ns, name) = crate::collector::split_key(key);
    let (planned, i) = find(state, ns, name)?;
    let prep = planned[i].prepared.clone();
    let client = state
        .brokers
        .client(&prep.connection)
        .map_err(|e| broker_error(&e))?;
    Ok((prep, client))
}

/// Skipped and failed counts of a replay, shown.
pub(crate) fn replay_notes(r: &ReplayReport) -> String {
    r.skipped
        .iter()
        .map(|(why, n)| format!("{n} skipped: {}", shown(why, PREVIEW_BYTES)))
        .chain(
            r.failed
                .iter()
                .map(|(why, n)| format!("{n} failed: {}", shown(why, PREVIEW_BYTES))),
        )
        .collect::<Vec<_>>()
        .join("; ")
}

/// Keeps `pending` under a new one-time action id (forgetting those older than
/// [`super::PENDING_TTL`]): the id.
fn remember(state: &State, pending: Pending) -> String {
    let id = auth::random_token();
    let mut all = state.pending.locked();
    all.retain(|_, p| p.created.elapsed() < super::PENDING_TTL);
    all.insert(id.clone(), pending);
    id
}

/// The pending action `form.action` of `user` on `key` of `kind`, taken (one time) when
/// `take`, or the 409 page.
#[allow(clippy::result_large_err)]
fn pending_of(
    state: &State,
    form: &ActionForm,
    user: &str,
    key: &str,
    kind: &str,
    take: bool,
) -> Result<Pending, Response> {
    let mut all = state.pending.locked();
    let id = form.action.as_deref().unwrap_or_default();
    let ok = all.get(id).is_some_and(|p| {
        p.user == user && p.key == key && p.kind == kind && p.created.elapsed() < super::PENDING_TTL
    });
    if !ok {
        return Err(page(
            StatusCode::CONFLICT,
            "Nothing to confirm",
            "This confirmation was already used, has expired (15 minutes) or is unknown: start again from the DeadLetterQueue's page.".into(),
        ));
    }
    let p = if take {
        all.remove(id)
    } else {
        all.get(id).cloned()
    };
    p.ok_or_else(|| page(StatusCode::CONFLICT, "Nothing to confirm", String::new()))
}

/// `POST /dlq/{ns}/{name}/replay/preview`: the dry-run count of replaying a group, a
/// filter or all, and the confirmation form.
pub async fn replay_preview(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let s = match checked_post(&state, &headers, &form, Need::Act(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let (filter, what) = match chosen(&state, &key, &form) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let report = match dry_replay(&state, &key, filter.clone()).await {
        Ok(r) => r,
        Err(r) => {
            state.audit(&Entry {
                user: &s.user,
                action: "replay-dry-run",
                resource: &key,
                what: &what,
                count: 0,
                outcome: "failed (the broker's error is on the page)",
            });
            return r;
        }
    };
    state.audit(&Entry {
        user: &s.user,
        action: "replay-dry-run",
        resource: &key,
        what: &what,
        count: report.replayed,
        outcome: "ok",
    });
    let notes = replay_notes(&report);
    let action = remember(
        &state,
        Pending {
            user: s.user.clone(),
            key: key.clone(),
            kind: "replay",
            filter,
            what: what.clone(),
            count: report.replayed,
            scanned: report.scanned,
            notes: notes.clone(),
            created: std::time::Instant::now(),
        },
    );
    html(
        StatusCode::OK,
        &Confirm {
            key,
            namespace: ns,
            name,
            csrf: s.csrf,
            kind: "replay",
            verb: "Replay",
            done: "replayed",
            what,
            count: report.replayed,
            scanned: report.scanned,
            notes,
            action,
            typed: false,
            error: None,
        },
    )
}

/// `POST /dlq/{ns}/{name}/replay`: starts replaying what a confirmed dry run counted, to
/// the source queue (copy confirmed before the original is removed: the core's rule), as
/// a job whose page (`/jobs/{id}`, 303) shows its progress and its result.
pub async fn replay(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let s = match checked_post(&state, &headers, &form, Need::Act(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let p = match pending_of(&state, &form, &s.user, &key, "replay", true) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let (id, job) = state.jobs.open(&s.user, &key, &p.what);
    let progress = Arc::clone(&job);
    let observer = move |r: &ReplayReport| progress.locked().report = Some(r.clone());
    let task = match spawn_replay(&state, &key, p.filter, false, observer) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let shared = Arc::clone(&state);
    state.tasks.spawn(async move {
        let result = task.await;
        shared.scans.invalidate(&key);
        let mut j = job.locked();
        let (report, error) = match result {
            Ok(Ok(r)) => (Some(r), None),
            Ok(Err(e)) => {
                let (read, confirmed) = j
                    .report
                    .as_ref()
                    .map_or((0, 0), |r| (r.scanned, r.replayed));
                let unsettled = crash_bound(MAX_IN_FLIGHT, None, None);
                let note = stopped_note(read, confirmed, unsettled);
                (None, Some(lost_broker_text(&e, &note)))
            }
            Err(e) => (None, Some(format!("the replay task failed: {e}"))),
        };
        if report.is_some() {
            j.report = report;
        }
        let count = j.report.as_ref().map_or(0, |r| r.replayed);
        let failed = j.report.as_ref().is_some_and(|r| r.failed_total() > 0);
        shared.audit(&Entry {
            user: &j.user,
            action: "replay",
            resource: &key,
            what: &j.what,
            count,
            outcome: match (&error, failed) {
                (Some(e), _) => e,
                (None, true) => "some copies failed",
                (None, false) => "ok",
            },
        });
        j.error = error;
        j.finished = true;
    });
    axum::response::IntoResponse::into_response(Redirect::to(&format!("/jobs/{id}")))
}

/// `POST /dlq/{ns}/{name}/purge/preview`: the dry-run count of purging a filter's
/// messages (or all), and the confirmation form that needs `namespace/name` typed.
pub async fn purge_preview(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let s = match checked_post(&state, &headers, &form, Need::Act(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let (filter, what) = match chosen(&state, &key, &form) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (report, error) = match run_purge(&state, &key, filter.clone(), true).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Some(e) = error {
        state.audit(&Entry {
            user: &s.user,
            action: "purge-dry-run",
            resource: &key,
            what: &what,
            count: 0,
            outcome: &e,
        });
        return page(StatusCode::BAD_GATEWAY, "Broker error", e);
    }
    state.audit(&Entry {
        user: &s.user,
        action: "purge-dry-run",
        resource: &key,
        what: &what,
        count: report.matched,
        outcome: "ok",
    });
    let notes = purge_notes(&report);
    let pending = Pending {
        user: s.user.clone(),
        key: key.clone(),
        kind: "purge",
        filter,
        what,
        count: report.matched,
        scanned: report.scanned,
        notes,
        created: std::time::Instant::now(),
    };
    let action = remember(&state, pending.clone());
    purge_confirm(ns, name, s.csrf, pending, action, None, StatusCode::OK)
}

fn purge_notes(r: &PurgeReport) -> String {
    if r.unknown_age > 0 {
        format!("{} without a dead-lettering time", r.unknown_age)
    } else {
        String::new()
    }
}

fn purge_confirm(
    namespace: String,
    name: String,
    csrf: String,
    p: Pending,
    action: String,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    html(
        status,
        &Confirm {
            key: p.key,
            namespace,
            name,
            csrf,
            kind: "purge",
            verb: "Purge",
            done: "removed",
            what: p.what,
            count: p.count,
            scanned: p.scanned,
            notes: p.notes,
            action,
            typed: true,
            error,
        },
    )
}

/// `POST /dlq/{ns}/{name}/purge`: removes what a confirmed dry run counted, once the
/// DeadLetterQueue's `namespace/name` is typed (else 400 and the form again).
pub async fn purge(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let s = match checked_post(&state, &headers, &form, Need::Act(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let typed = form.confirm.as_deref().map(str::trim) == Some(key.as_str());
    let p = match pending_of(&state, &form, &s.user, &key, "purge", typed) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !typed {
        state.audit(&Entry {
            user: &s.user,
            action: "purge-refused",
            resource: &key,
            what: &p.what,
            count: 0,
            outcome: "confirmation not typed",
        });
        let action = form.action.clone().unwrap_or_default();
        let error = Some(format!(
            "Type {key} exactly to confirm; nothing was removed."
        ));
        return purge_confirm(ns, name, s.csrf, p, action, error, StatusCode::BAD_REQUEST);
    }
    let result = run_purge(&state, &key, p.filter, false).await;
    state.scans.invalidate(&key);
    let (report, error) = match result {
        Ok(r) => r,
        Err(r) => return r,
    };
    state.audit(&Entry {
        user: &s.user,
        action: "purge",
        resource: &key,
        what: &p.what,
        count: report.removed,
        outcome: error.as_deref().unwrap_or("ok"),
    });
    html(
        if error.is_some() {
            StatusCode::BAD_GATEWAY
        } else {
            StatusCode::OK
        },
        &Done {
            key,
            namespace: ns,
            name,
            verb: "Purge",
            done: "removed",
            what: p.what,
            count: report.removed,
            notes: purge_notes(&report),
            error,
        },
    )
}
