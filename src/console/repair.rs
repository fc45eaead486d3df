//! Repair and replay of one message from its page: its body (JSON) and headers edited in
//! a form, then the repaired copy published to the source queue with a publisher confirm
//! and only then the original removed — through the same core as `dlq-operator dlq
//! repair`: [`crate::dlq::repair::repair_with`] with a [`Rewrite`] built by
//! [`Rewrite::with_json_body`] and [`Rewrite::edit_headers_json`] (so the protected
//! headers, the JSON check, the copy's `message_id`, `dlq-repaired-at` and the replay's
//! headers are the core's rules, docs/REPLAY.md "Repair one message"). It runs under the
//! DeadLetterQueue's lock (never beside a console scan or action), in a task of its own,
//! invalidates the cached scan and is audited ([`super::audit`]).

use std::collections::BTreeMap;

use axum::extract::{Form, Path, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::actions::{checked_post, ActionForm};
use super::audit::Entry;
use super::auth::Need;
use super::respond::{broker_error, broker_error_noting, html, page, scan_of, Shared};
use super::templates::{Message, RepairDone};
use super::views::{self, Editor};
use crate::dlq::repair::{protected, repair_with, RepairOutcome, RepairReport, Rewrite};
use crate::dlq::DeadLetter;
use crate::printable::{escape_json, escape_lines, shown, PREVIEW_BYTES};

/// Whether the console read `m`'s whole body as text: not cut, valid UTF-8 (the preview
/// is lossy UTF-8: same length and no U+FFFD).
pub fn body_whole(m: &DeadLetter) -> bool {
    !m.body_truncated
        && m.body_preview.len() == m.body_bytes
        && !m.body_preview.contains('\u{fffd}')
}

/// The headers of `m` a repair may edit (not [`protected`]), as JSON.
fn editable(m: &DeadLetter) -> BTreeMap<String, Value> {
    m.headers
        .iter()
        .filter(|(k, _)| protected(k).is_none())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The body textarea's text for `m` (when [`body_whole`]): the body with the characters
/// [`crate::printable::escape`] replaces written as JSON `\uXXXX` escapes (the same JSON
/// value when the body is JSON).
fn body_text(m: &DeadLetter) -> Option<String> {
    body_whole(m).then(|| escape_json(&m.body_preview).into_owned())
}

/// The form of `m`, pre-filled with its body and editable headers.
pub fn editor(m: &DeadLetter) -> Editor {
    let headers = serde_json::to_string_pretty(&editable(m)).unwrap_or_else(|_| "{}".into());
    let body = body_text(m);
    let body_note = if body.is_some() {
        String::new()
    } else if m.body_truncated {
        format!(
            "The body ({} bytes) is longer than the {} bytes the console reads: it cannot be edited here and is kept (dlq-operator dlq repair --body-file replaces it).",
            m.body_bytes,
            super::PREVIEW_BYTES
        )
    } else {
        "The body is not UTF-8 text: it cannot be edited here and is kept (dlq-operator dlq repair --body-file replaces it).".into()
    };
    Editor {
        unavailable: m.message_id.is_none().then(|| {
            "This message has no message_id: a repair selects its message by message_id, so it cannot be repaired.".into()
        }),
        body,
        body_note,
        headers: escape_json(&headers).into_owned(),
        protected: m
            .headers
            .keys()
            .filter_map(|k| protected(k).map(|why| (shown(k, PREVIEW_BYTES), why)))
            .collect(),
        error: None,
    }
}

/// A textarea's text as the console compares and keeps it: line breaks as `\n` (browsers
/// send `\r\n`).
fn lines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// The [`Rewrite`] of `m` that the submitted `body` and `headers` texts ask for: the body
/// replaced ([`Rewrite::with_json_body`]) only when it differs from the shown one (line
/// breaks aside), the headers by [`Rewrite::edit_headers_json`] against the editable
/// ones. A form without a `headers` field (`None`) leaves every header as it is — not
/// an empty object, which would remove them all.
///
/// # Errors
/// A text for the page (escaped): invalid JSON, a protected or bad header, a body sent
/// for a message whose body cannot be edited, or no change at all.
pub fn rewrite(
    m: &DeadLetter,
    body: Option<&str>,
    headers: Option<&str>,
) -> Result<Rewrite, String> {
    let mut rewrite = Rewrite::new();
    match (body_text(m), body) {
        (Some(shown_body), Some(sent)) if lines(sent) != lines(&shown_body) => {
            rewrite = rewrite
                .with_json_body(&lines(sent))
                .map_err(|e| format!("body: {}", escape_lines(&e.to_string())))?;
        }
        (None, Some(sent)) if !sent.is_empty() => {
            return Err("body: this message's body cannot be edited here".into());
        }
        _ => {}
    }
    if let Some(headers) = headers {
        rewrite
            .edit_headers_json(&editable(m), headers)
            .map_err(|e| format!("headers: {}", escape_lines(&e.to_string())))?;
    }
    if rewrite.is_empty() {
        return Err("Nothing changed: edit the body or the headers to repair the message.".into());
    }
    Ok(rewrite)
}

/// The outcome of a repair for the audit line and the page: (word, text shown, status).
fn outcome(report: &RepairReport) -> (&'static str, String, StatusCode) {
    match &report.outcome {
        RepairOutcome::Repaired => (
            "repaired",
            "The repaired copy is in the source queue (confirmed by the broker) and the original was removed.".into(),
            StatusCode::OK,
        ),
        RepairOutcome::NotFound => (
            "not found",
            "No message with this message_id was read: nothing changed.".into(),
            StatusCode::NOT_FOUND,
        ),
        RepairOutcome::Skipped(why) => (
            "skipped",
            format!(
                "Skipped: {}; the message stays in the dead-letter queue.",
                shown(why, PREVIEW_BYTES)
            ),
            StatusCode::CONFLICT,
        ),
        RepairOutcome::Failed(why) => (
            "failed",
            format!(
                "Failed: {}; the original stays in the dead-letter queue.",
                shown(why, PREVIEW_BYTES)
            ),
            StatusCode::BAD_GATEWAY,
        ),
        RepairOutcome::Interrupted => (
            "interrupted",
            "Interrupted (the console is stopping): nothing changed.".into(),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    }
}

/// Runs [`repair_with`] for `message_id` of `key` with `rewrite` under the
/// DeadLetterQueue's lock, in a task of its own (a closed browser tab does not cut it
/// short); the report, or the error page.
async fn run(
    state: &Shared,
    key: &str,
    message_id: String,
    rewrite: Rewrite,
) -> Result<RepairReport, Response> {
    let (prep, client) = super::actions::prepared_client(state, key)?;
    let (lock, cancel) = (state.scans.lock(key), state.cancel.clone());
    let task = state.tasks.spawn(async move {
        let _held = lock.lock().await;
        let now = crate::clock::now_ms();
        repair_with(
            client.as_ref(),
            &prep.topology,
            &message_id,
            rewrite,
            now,
            &cancel,
        )
        .await
    });
    match task.await {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(stop)) => Err(match stop.note() {
            Some(note) => broker_error_noting(&stop.error, note),
            None => broker_error(&stop.error),
        }),
        Err(e) => Err(page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed",
            format!(
                "the repair task failed: {e}; the original is kept unless its copy was confirmed"
            ),
        )),
    }
}

/// `POST /dlq/{ns}/{name}/messages/{index}/repair` (fields `csrf`, `g`, `body`,
/// `headers`): repairs message `index` of scan `g`. Invalid input re-renders the message
/// page with the error and the user's text (400, nothing changed); else the repair runs
/// ([`run`]), the scan cache of the DeadLetterQueue is invalidated and the result page
/// shows the outcome. Audited as `repair-refused` or `repair`.
pub async fn repair(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path((ns, name, index)): Path<(String, String, usize)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let s = match checked_post(&state, &headers, &form, Need::Act(&ns, &name)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = format!("{ns}/{name}");
    let scan = match scan_of(&state, &key, form.g, &format!("/dlq/{key}")) {
        Ok(scan) => scan,
        Err(r) => return r,
    };
    let Some(m) = scan.result.as_ref().ok().and_then(|i| i.sample.get(index)) else {
        return page(StatusCode::NOT_FOUND, "No such message", String::new());
    };
    let refused = |what: &str, error: String, status: StatusCode| {
        state.audit(&Entry {
            user: &s.user,
            action: "repair-refused",
            resource: &key,
            what,
            count: 0,
            outcome: &error,
        });
        let mut view = editor(m);
        if view.unavailable.is_none() {
            // The user's text kept, its unsafe characters as JSON escapes (the same JSON).
            let kept =
                |t: &Option<String>| escape_json(t.as_deref().unwrap_or_default()).into_owned();
            view.body = view.body.map(|_| kept(&form.body));
            view.headers = kept(&form.headers);
        }
        view.error = Some(error);
        html(
            status,
            &Message {
                key: key.clone(),
                namespace: ns.clone(),
                name: name.clone(),
                view: views::message_view(m, scan.now_ms),
                csrf: s.csrf.clone(),
                generation: scan.generation,
                index,
                repair: view,
            },
        )
    };
    let Some(id) = m.message_id.clone() else {
        let why = "the message has no message_id: it cannot be repaired".to_string();
        return refused("no message_id", why, StatusCode::BAD_REQUEST);
    };
    let what = format!("message_id {}", shown(&id, PREVIEW_BYTES));
    let sharing = scan.result.as_ref().map_or(0, |i| {
        i.sample
            .iter()
            .filter(|o| o.message_id.as_deref() == Some(id.as_str()))
            .count()
    });
    if sharing > 1 {
        // A repair selects by message_id (`id=`) and takes the first one read, which may
        // be another than the one on screen: its body would be replaced by this edit.
        let why = format!(
            "{sharing} dead letters read by the last scan share this message_id: a repair takes the first one read, which may not be this one, so nothing was changed. Give them distinct message ids, or replay them as they are"
        );
        return refused(&what, why, StatusCode::CONFLICT);
    }
    let rw = match rewrite(m, form.body.as_deref(), form.headers.as_deref()) {
        Ok(rw) => rw,
        Err(e) => return refused(&what, e, StatusCode::BAD_REQUEST),
    };
    let result = run(&state, &key, id, rw).await;
    state.scans.invalidate(&key);
    finished(&state, &s.user, &what, (key, ns, name), result)
}

/// Audits the repair of `what` by `user` on `(key, ns, name)` and renders its result:
/// the report's page, or the broker's error page.
fn finished(
    state: &super::State,
    user: &str,
    what: &str,
    (key, namespace, name): (String, String, String),
    result: Result<RepairReport, Response>,
) -> Response {
    let report = match result {
        Ok(report) => report,
        Err(r) => {
            state.audit(&Entry {
                user,
                action: "repair",
                resource: &key,
                what,
                count: 0,
                outcome: "broker error; the original is kept unless its copy was confirmed",
            });
            return r;
        }
    };
    let (word, text, status) = outcome(&report);
    let repaired = report.outcome == RepairOutcome::Repaired;
    state.audit(&Entry {
        user,
        action: "repair",
        resource: &key,
        what,
        count: u64::from(repaired),
        outcome: if repaired { "ok" } else { word },
    });
    html(
        status,
        &RepairDone {
            key,
            namespace,
            name,
            message_id: shown(&report.message_id, PREVIEW_BYTES),
            outcome: word,
            text,
            replay_id: repaired.then(|| shown(&report.replay_id, PREVIEW_BYTES)),
            scanned: report.scanned,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::views::tests::letter;
    use serde_json::json;

    fn with_headers(mut m: DeadLetter) -> DeadLetter {
        m.headers.insert("tenant".into(), json!("acme"));
        m.headers.insert("x-death".into(), json!([{"count": 1}]));
        m.headers
            .insert("dlq-error-class".into(), json!("validation"));
        m.body_preview = "{\"a\":1}".into();
        m.body_bytes = m.body_preview.len();
        m
    }

    #[test]
    fn the_form_shows_editable_headers_and_lists_protected_ones() {
        let m = with_headers(letter("id1", "validation", "r", None));
        let e = editor(&m);
        assert_eq!(e.unavailable, None);
        assert_eq!(e.body.as_deref(), Some("{\"a\":1}"));
        let shown: Value = serde_json::from_str(&e.headers).expect("JSON");
        assert_eq!(shown, json!({"tenant": "acme"}));
        let names: Vec<_> = e.protected.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["dlq-error-class", "x-death"]);
    }

    #[test]
    fn a_message_without_id_or_whole_body_says_why() {
        let mut m = letter("id1", "c", "r", None);
        m.message_id = None;
        assert!(editor(&m).unavailable.is_some());
        m.body_truncated = true;
        m.body_bytes = 10_000;
        let e = editor(&m);
        assert!(
            e.body.is_none() && e.body_note.contains("10000 bytes"),
            "{e:?}"
        );
        m.body_truncated = false;
        m.body_bytes = 3;
        m.body_preview = "\u{fffd}".into();
        assert!(editor(&m).body_note.contains("not UTF-8"));
    }

    #[test]
    fn submissions_become_the_cores_rewrite() {
        let m = with_headers(letter("id1", "validation", "r", None));
        let shown_headers = editor(&m).headers;
        // Unchanged (browser line breaks aside): nothing to repair.
        let crlf = shown_headers.replace('\n', "\r\n");
        let e = rewrite(&m, Some("{\"a\":1}"), Some(&crlf)).expect_err("no change");
        assert!(e.contains("Nothing changed"), "{e}");
        // A new body, checked as JSON.
        let rw = rewrite(&m, Some("{\"a\":2}\r\n"), Some(&shown_headers)).expect("rewrite");
        assert_eq!(rw.body(), Some(&b"{\"a\":2}\n"[..]));
        assert!(rw.set().is_empty() && rw.removed().is_empty());
        let e = rewrite(&m, Some("{\"a\":"), Some(&shown_headers)).expect_err("invalid");
        assert!(e.starts_with("body: invalid JSON at line 1"), "{e}");
        // Header edits against the editable headers; protected ones refused.
        let rw = rewrite(&m, Some("{\"a\":1}"), Some(r#"{"region": "eu"}"#)).expect("rewrite");
        assert!(rw.body().is_none());
        assert!(rw.set().contains_key("region") && rw.removed().contains("tenant"));
        let e = rewrite(&m, None, Some(r#"{"x-death": 1, "tenant": "acme"}"#)).expect_err("x-");
        assert!(e.contains("protected"), "{e}");
        let e = rewrite(&m, None, Some("[1]")).expect_err("not an object");
        assert!(e.contains("JSON object"), "{e}");
    }

    #[test]
    fn a_form_without_headers_keeps_every_header() {
        let m = with_headers(letter("id1", "v", "r", None));
        let rw = rewrite(&m, Some("{\"a\":2}"), None).expect("a body change");
        assert!(rw.removed().is_empty() && rw.set().is_empty(), "{rw:?}");
        // An empty object, sent on purpose, does remove them.
        let rw = rewrite(&m, Some("{\"a\":2}"), Some("{}")).expect("rewrite");
        assert!(!rw.removed().is_empty(), "{rw:?}");
    }

    #[test]
    fn a_body_is_refused_where_it_cannot_be_edited() {
        let mut m = with_headers(letter("id1", "c", "r", None));
        m.body_truncated = true;
        let e = rewrite(&m, Some("{}"), Some("{}")).expect_err("refused");
        assert!(e.contains("cannot be edited"), "{e}");
        // The headers alone still can be.
        assert!(rewrite(&m, None, Some(r#"{"tenant": "other"}"#)).is_ok());
    }

    #[test]
    fn outcomes_are_words_statuses_and_escaped_reasons() {
        let report = |outcome| RepairReport {
            resource: "ns/d".into(),
            message_id: "id1".into(),
            replay_id: "r".into(),
            repaired_at_ms: None,
            scanned: 1,
            outcome,
        };
        let (word, _, status) = outcome(&report(RepairOutcome::Repaired));
        assert_eq!((word, status), ("repaired", StatusCode::OK));
        let (word, _, status) = outcome(&report(RepairOutcome::NotFound));
        assert_eq!((word, status), ("not found", StatusCode::NOT_FOUND));
        let hostile = "no route\u{1b}[2J".to_string();
        let (word, text, status) = outcome(&report(RepairOutcome::Failed(hostile.clone())));
        assert_eq!((word, status), ("failed", StatusCode::BAD_GATEWAY));
        assert!(
            text.contains("\\u{1b}") && !text.contains('\u{1b}'),
            "{text}"
        );
        assert!(text.contains("original stays"), "{text}");
        let (word, text, _) = outcome(&report(RepairOutcome::Skipped(hostile)));
        assert_eq!(word, "skipped");
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
