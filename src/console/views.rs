//! View models: what the console's pages show, built from the core's types. Every text
//! that comes from a message or the broker is passed through
//! [`crate::printable::shown`] (controls, terminal escapes and bidi overrides made
//! visible, long text cut) here; the templates then escape HTML. Pure.

use crate::dlq::filter::{Filter, Term};
use crate::dlq::{DeadLetter, Inspection};
use crate::printable::{escape_json, shown, PREVIEW_BYTES};

/// One joint group of dead letters: same error class, reason and original queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Error class (raw, as the message says).
    pub error_class: String,
    /// Reason (raw).
    pub reason: String,
    /// Original queue (raw).
    pub original_queue: String,
    /// Messages in the group.
    pub count: u64,
    /// Age of its oldest message, ms (`None`: no message has a dead-lettering time).
    pub oldest_age_ms: Option<u64>,
    /// Age of its newest message, ms.
    pub newest_age_ms: Option<u64>,
}

impl Group {
    /// The filter that takes exactly this group's messages (built from terms, never from
    /// text, so any value works).
    pub fn filter(&self) -> Filter {
        Filter {
            terms: vec![
                Term::Class(self.error_class.clone(), true),
                Term::Reason(self.reason.clone(), true),
                Term::Queue(self.original_queue.clone(), true),
            ],
        }
    }
}

/// The joint groups of `inspection`, largest first: the core's
/// [`Inspection::groups`] (every message the scan read, not only the sample; ages at the
/// scan's time), as the console's rows. The console computes no grouping of its own.
pub fn groups(inspection: &Inspection) -> Vec<Group> {
    inspection
        .groups()
        .into_iter()
        .map(|g| Group {
            error_class: g.key.error_class,
            reason: g.key.reason,
            original_queue: g.key.original_queue,
            count: g.stats.count,
            oldest_age_ms: g.stats.oldest_age_ms,
            newest_age_ms: g.stats.newest_age_ms,
        })
        .collect()
}

/// An age for a page, to the second: `3m20s`, or `-` when unknown.
pub fn age(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "-".to_string(),
        |ms| crate::duration::format_ms(ms / 1000 * 1000),
    )
}

/// A row of the groups table.
#[derive(Debug, Clone)]
pub struct GroupRow {
    /// Its index in [`groups`]' list (what forms and links send back).
    pub index: usize,
    /// Error class, shown.
    pub error_class: String,
    /// Reason, shown.
    pub reason: String,
    /// Original queue, shown.
    pub original_queue: String,
    /// Count.
    pub count: u64,
    /// Oldest age.
    pub oldest: String,
    /// Newest age.
    pub newest: String,
}

/// The rows of the groups table of `groups`.
pub fn group_rows(groups: &[Group]) -> Vec<GroupRow> {
    groups
        .iter()
        .enumerate()
        .map(|(index, g)| GroupRow {
            index,
            error_class: shown(&g.error_class, PREVIEW_BYTES),
            reason: shown(&g.reason, PREVIEW_BYTES),
            original_queue: shown(&g.original_queue, PREVIEW_BYTES),
            count: g.count,
            oldest: age(g.oldest_age_ms),
            newest: age(g.newest_age_ms),
        })
        .collect()
}

/// A row of the message list.
#[derive(Debug, Clone)]
pub struct MessageRow {
    /// Its index in the scan's sample (the message view's URL).
    pub index: usize,
    /// `message_id`, shown (`-` when absent).
    pub message_id: String,
    /// Error class, shown.
    pub error_class: String,
    /// Reason, shown.
    pub reason: String,
    /// Age.
    pub age: String,
    /// Body preview, shown and cut to 80 bytes.
    pub preview: String,
}

/// The messages of `sample` (read at `now_ms`) that `filter` takes, as list rows.
pub fn message_rows(sample: &[DeadLetter], filter: &Filter, now_ms: u64) -> Vec<MessageRow> {
    sample
        .iter()
        .enumerate()
        .filter(|(_, m)| filter.matches(m, now_ms))
        .map(|(index, m)| MessageRow {
            index,
            message_id: m
                .message_id
                .as_deref()
                .map_or_else(|| "-".to_string(), |id| shown(id, PREVIEW_BYTES)),
            error_class: shown(&m.error_class, PREVIEW_BYTES),
            reason: shown(&m.reason, PREVIEW_BYTES),
            age: age(m.dead_lettered_at_ms.map(|at| now_ms.saturating_sub(at))),
            preview: shown(&m.body_preview, 80),
        })
        .collect()
}

/// One message, for its page.
#[derive(Debug, Clone)]
pub struct MessageView {
    /// (label, value) pairs: queue, ids, class, reason, counts, origin, age, last error.
    pub fields: Vec<(&'static str, String)>,
    /// (name, value as JSON text) per header but `x-death`, shown.
    pub headers: Vec<(String, String)>,
    /// `x-death`, pretty JSON, shown (empty when absent).
    pub x_death: String,
    /// Body preview, escaped (line breaks kept).
    pub body: String,
    /// "N bytes" and whether the preview is cut.
    pub body_note: String,
}

/// The page of `m` (read at `now_ms`).
pub fn message_view(m: &DeadLetter, now_ms: u64) -> MessageView {
    let opt = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "-".to_string(), |s| shown(s, PREVIEW_BYTES))
    };
    let fields = vec![
        ("queue", shown(&m.queue, PREVIEW_BYTES)),
        ("message id", opt(&m.message_id)),
        ("error class", shown(&m.error_class, PREVIEW_BYTES)),
        ("reason", shown(&m.reason, PREVIEW_BYTES)),
        ("retry count", m.retry_count.to_string()),
        ("replay count", m.replay_count.to_string()),
        ("delivery count", m.delivery_count.to_string()),
        ("original queue", shown(&m.original_queue, PREVIEW_BYTES)),
        ("original exchange", opt(&m.original_exchange)),
        ("original routing key", opt(&m.original_routing_key)),
        (
            "age",
            age(m.dead_lettered_at_ms.map(|at| now_ms.saturating_sub(at))),
        ),
        ("last error", opt(&m.last_error)),
    ];
    let json = |v: &serde_json::Value| escape_json(&v.to_string()).into_owned();
    let headers = m
        .headers
        .iter()
        .filter(|(k, _)| k.as_str() != "x-death")
        .map(|(k, v)| (shown(k, PREVIEW_BYTES), shown(&json(v), PREVIEW_BYTES * 4)))
        .collect();
    let x_death = m
        .headers
        .get("x-death")
        .and_then(|v| serde_json::to_string_pretty(v).ok())
        .map(|t| escape_json(&t).into_owned())
        .unwrap_or_default();
    MessageView {
        fields,
        headers,
        x_death,
        body: crate::printable::escape_lines(&m.body_preview),
        body_note: format!(
            "{} bytes{}",
            m.body_bytes,
            if m.body_truncated {
                ", preview cut"
            } else {
                ""
            }
        ),
    }
}

/// The repair form of one message, as its page shows it (every text made visible or a
/// JSON text whose unsafe characters are JSON escapes: `repair::escape_json`).
#[derive(Debug, Clone, Default)]
pub struct Editor {
    /// Why the message cannot be repaired here (no `message_id`), else `None`.
    pub unavailable: Option<String>,
    /// The body textarea's text: the body when it is shown whole (`repair::body_whole`),
    /// else `None` (no body field; the body is kept).
    pub body: Option<String>,
    /// Why the body cannot be edited here, when `body` is `None`.
    pub body_note: String,
    /// The headers textarea's text: the editable headers as a JSON object, pretty.
    pub headers: String,
    /// The protected headers (name shown, why protected): listed, not editable.
    pub protected: Vec<(String, &'static str)>,
    /// Why the last submission was refused (the user's text is kept in `body` and
    /// `headers`).
    pub error: Option<String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    pub(crate) fn letter(id: &str, class: &str, reason: &str, at: Option<u64>) -> DeadLetter {
        DeadLetter {
            queue: "q.dlq".into(),
            message_id: Some(id.into()),
            error_class: class.into(),
            reason: reason.into(),
            retry_count: 2,
            original_queue: "q".into(),
            original_exchange: None,
            original_routing_key: None,
            replay_count: 0,
            dead_lettered_at_ms: at,
            delivery_count: 0,
            last_error: None,
            headers: BTreeMap::new(),
            body_bytes: 4,
            body_preview: "body".into(),
            body_truncated: false,
        }
    }

    #[test]
    fn groups_are_the_cores_joint_groups_with_counts_and_ages() {
        let mut ins = Inspection::default();
        for m in [
            letter("1", "timeout", "MaxRetriesExceeded", Some(1_000)),
            letter("2", "timeout", "MaxRetriesExceeded", Some(5_000)),
            letter("3", "timeout", "rejected", None),
            letter("4", "validation", "MaxRetriesExceeded", Some(9_000)),
            letter("5", "timeout", "MaxRetriesExceeded", Some(3_000)),
        ] {
            // A sample of 3: the groups still count all 5 messages read.
            ins.add(m, 10_000, 3);
        }
        let g = groups(&ins);
        assert_eq!(g.iter().map(|x| x.count).sum::<u64>(), 5);
        assert_eq!(g.len(), 3);
        assert_eq!(
            (g[0].error_class.as_str(), g[0].reason.as_str(), g[0].count),
            ("timeout", "MaxRetriesExceeded", 3)
        );
        assert_eq!(
            (g[0].oldest_age_ms, g[0].newest_age_ms),
            (Some(9_000), Some(5_000))
        );
        let rejected = g.iter().find(|x| x.reason == "rejected").expect("group");
        assert_eq!((rejected.count, rejected.oldest_age_ms), (1, None));
        // The group's filter takes exactly its messages.
        let all = [
            letter("1", "timeout", "MaxRetriesExceeded", Some(1_000)),
            letter("2", "timeout", "MaxRetriesExceeded", Some(5_000)),
            letter("4", "validation", "MaxRetriesExceeded", Some(9_000)),
            letter("5", "timeout", "MaxRetriesExceeded", Some(3_000)),
        ];
        let taken: Vec<_> = all
            .iter()
            .filter(|m| g[0].filter().matches(m, 10_000))
            .filter_map(|m| m.message_id.clone())
            .collect();
        assert_eq!(taken, ["1", "2", "5"]);
    }

    #[test]
    fn ages_are_shown_to_the_second() {
        assert_eq!(age(None), "-");
        assert_eq!(age(Some(60_112)), "1m");
        assert_eq!(age(Some(999)), "0s");
        assert_eq!(age(Some(3_723_000)), "1h2m3s");
    }

    #[test]
    fn hostile_text_is_made_visible() {
        let mut m = letter("<b>\u{1b}[31m", "timeout", "r\u{202e}x", Some(0));
        m.headers
            .insert("evil".into(), serde_json::json!("<script>\u{1b}]0;x\u{7}"));
        let v = message_view(&m, 0);
        let id = &v.fields[1].1;
        assert!(id.contains("\\u{1b}") && !id.contains('\u{1b}'), "{id}");
        assert!(v.fields[3].1.contains("\\u{202e}"));
        let (_, h) = &v.headers[0];
        assert!(!h.contains('\u{1b}') && !h.contains('\u{7}'), "{h}");
        let rows = message_rows(&[m], &Filter::default(), 0);
        assert!(!rows[0].message_id.contains('\u{1b}'));
    }
}
