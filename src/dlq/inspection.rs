//! A dead-letter queue's contents, summarised ([`Inspection`]), and its human-readable
//! table. Pure.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::DeadLetter;
use crate::printable::PREVIEW_BYTES;

/// A dead-letter queue's contents, summarised.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// The dead-letter queues read.
    pub queues: Vec<String>,
    /// Messages in them when the inspection started.
    pub total: u64,
    /// Messages read (at most the `--max-messages` limit).
    pub scanned: u64,
    /// Stopped before the end (Ctrl-C, SIGTERM, SIGHUP): the counts cover the messages
    /// read, all given back.
    pub interrupted: bool,
    /// Messages per error class.
    pub by_error_class: BTreeMap<String, u64>,
    /// Messages per reason.
    pub by_reason: BTreeMap<String, u64>,
    /// Messages per retry count.
    pub by_retry_count: BTreeMap<u64, u64>,
    /// Messages per original queue.
    pub by_original_queue: BTreeMap<String, u64>,
    /// Messages per joint (error class, reason, original queue), with their ages.
    /// Serialized as the list of [`Inspection::groups`] (count descending, then key).
    #[serde(serialize_with = "groups_sorted")]
    pub groups: BTreeMap<GroupKey, GroupStats>,
    /// Age of the oldest message, ms (from its dead-lettering time).
    pub oldest_age_ms: Option<u64>,
    /// Age of the newest message, ms.
    pub newest_age_ms: Option<u64>,
    /// Messages given back by [`Release::Rotate`](super::Release::Rotate) (moved to the tail, not lost).
    pub rotated: u64,
    /// The first messages read, up to the sample size.
    pub sample: Vec<DeadLetter>,
}

impl Inspection {
    /// Adds `message` (read at `now_ms`, ms since epoch) to the counts; it joins the sample
    /// while the sample has fewer than `sample_size` messages.
    pub fn add(&mut self, message: DeadLetter, now_ms: u64, sample_size: usize) {
        self.scanned += 1;
        *self
            .by_error_class
            .entry(message.error_class.clone())
            .or_default() += 1;
        *self.by_reason.entry(message.reason.clone()).or_default() += 1;
        *self.by_retry_count.entry(message.retry_count).or_default() += 1;
        *self
            .by_original_queue
            .entry(message.original_queue.clone())
            .or_default() += 1;
        let age = message
            .dead_lettered_at_ms
            .map(|at| now_ms.saturating_sub(at));
        if let Some(age) = age {
            self.oldest_age_ms = Some(self.oldest_age_ms.map_or(age, |a| a.max(age)));
            self.newest_age_ms = Some(self.newest_age_ms.map_or(age, |a| a.min(age)));
        }
        self.groups
            .entry(GroupKey {
                error_class: message.error_class.clone(),
                reason: message.reason.clone(),
                original_queue: message.original_queue.clone(),
            })
            .or_default()
            .add(age);
        if self.sample.len() < sample_size {
            self.sample.push(message);
        }
    }
}

impl Inspection {
    /// The joint groups, the largest first (count descending, then the key in
    /// [`GroupKey`]'s order: error class, reason, original queue).
    pub fn groups(&self) -> Vec<Group> {
        sorted(&self.groups)
    }
}

/// `groups` as rows, count descending, then key.
fn sorted(groups: &BTreeMap<GroupKey, GroupStats>) -> Vec<Group> {
    let mut rows: Vec<Group> = groups
        .iter()
        .map(|(key, stats)| Group {
            key: key.clone(),
            stats: *stats,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.stats
            .count
            .cmp(&a.stats.count)
            .then_with(|| a.key.cmp(&b.key))
    });
    rows
}

/// What a joint group of dead letters shares: the same error class, reason and original
/// queue (as [`DeadLetter`] reads them: `unclassified`, `unknown` when missing).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupKey {
    /// [`DeadLetter::error_class`].
    pub error_class: String,
    /// [`DeadLetter::reason`].
    pub reason: String,
    /// [`DeadLetter::original_queue`].
    pub original_queue: String,
}

/// The counts and ages of one joint group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupStats {
    /// Messages in the group (read by this inspection).
    pub count: u64,
    /// Age of its oldest message, ms since its dead-lettering time
    /// ([`DeadLetter::dead_lettered_at_ms`]); `None` when no message of the group has one.
    pub oldest_age_ms: Option<u64>,
    /// Age of its newest message, ms; `None` as for `oldest_age_ms`.
    pub newest_age_ms: Option<u64>,
    /// Messages of the group with no dead-lettering time (not in the ages).
    pub unknown_age: u64,
}

impl GroupStats {
    /// Counts one more message of age `age_ms` (`None`: no dead-lettering time known).
    pub fn add(&mut self, age_ms: Option<u64>) {
        self.count += 1;
        match age_ms {
            Some(age) => {
                self.oldest_age_ms = Some(self.oldest_age_ms.map_or(age, |a| a.max(age)));
                self.newest_age_ms = Some(self.newest_age_ms.map_or(age, |a| a.min(age)));
            }
            None => self.unknown_age += 1,
        }
    }
}

/// One row of [`Inspection::groups`]: the key and its stats, flat in JSON and YAML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// What the group's messages share.
    #[serde(flatten)]
    pub key: GroupKey,
    /// How many there are and how old.
    #[serde(flatten)]
    pub stats: GroupStats,
}

/// Serializes the groups map as [`Inspection::groups`]'s sorted list.
fn groups_sorted<S: serde::Serializer>(
    groups: &BTreeMap<GroupKey, GroupStats>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(sorted(groups))
}

impl Inspection {
    /// The report as a human-readable table: counts, ages, then the sample (headers and
    /// body preview). Every text that comes from a message or the broker (queue names,
    /// classes, reasons, message ids, header names and values, bodies) is escaped, and cut
    /// to [`PREVIEW_BYTES`] where it is not the body ([`crate::printable::shown`]): a
    /// header value as its JSON text, a string one as the string, quoted.
    pub fn table(&self) -> String {
        use crate::printable::{escape, shown};
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "DeadLetterQueue  {}",
            shown(&self.resource, PREVIEW_BYTES)
        );
        let queues: Vec<String> = self
            .queues
            .iter()
            .map(|q| shown(q, PREVIEW_BYTES))
            .collect();
        let _ = writeln!(out, "queues           {}", queues.join(", "));
        let _ = writeln!(
            out,
            "messages         {} (read {}{}{})",
            self.total,
            self.scanned,
            if self.interrupted {
                ", interrupted"
            } else {
                ""
            },
            if self.rotated > 0 {
                format!(
                    "; {} moved to the tail to stay under the delivery limit",
                    self.rotated
                )
            } else {
                String::new()
            }
        );
        let age = |ms: Option<u64>| ms.map_or("-".to_string(), crate::duration::format_ms);
        let _ = writeln!(out, "oldest           {}", age(self.oldest_age_ms));
        let _ = writeln!(out, "newest           {}", age(self.newest_age_ms));
        let section = |out: &mut String, title: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "\n{title}");
            for (k, n) in rows {
                let _ = writeln!(out, "  {n:>8}  {}", shown(&k, PREVIEW_BYTES));
            }
        };
        let rows = |m: &BTreeMap<String, u64>| m.iter().map(|(k, n)| (k.clone(), *n)).collect();
        section(&mut out, "BY ERROR CLASS", rows(&self.by_error_class));
        section(&mut out, "BY REASON", rows(&self.by_reason));
        section(
            &mut out,
            "BY RETRY COUNT",
            self.by_retry_count
                .iter()
                .map(|(k, n)| (k.to_string(), *n))
                .collect(),
        );
        section(&mut out, "BY ORIGINAL QUEUE", rows(&self.by_original_queue));
        groups_table(&mut out, &self.groups());
        for (i, m) in self.sample.iter().enumerate() {
            let _ = writeln!(
                out,
                "\nSAMPLE {} of {}: message_id {}  queue {}",
                i + 1,
                self.sample.len(),
                m.message_id
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |id| shown(id, PREVIEW_BYTES)),
                shown(&m.queue, PREVIEW_BYTES)
            );
            for (k, v) in &m.headers {
                let _ = writeln!(out, "  {}: {}", shown(k, PREVIEW_BYTES), header_shown(v));
            }
            let _ = writeln!(
                out,
                "  body ({} bytes{}): {}",
                m.body_bytes,
                if m.body_truncated { ", truncated" } else { "" },
                escape(&m.body_preview)
            );
        }
        out
    }
}

/// The "BY GROUP" section: count, oldest and newest age (`-` when unknown; the messages
/// without a time counted after them), then the error class, reason and original queue,
/// each escaped and cut ([`crate::printable::shown`]).
fn groups_table(out: &mut String, groups: &[Group]) {
    use crate::printable::shown;
    use std::fmt::Write as _;
    let age = |ms: Option<u64>| ms.map_or("-".to_string(), crate::duration::format_ms);
    let _ = writeln!(
        out,
        "\nBY GROUP (count, oldest, newest, no age: class / reason / original queue)"
    );
    for g in groups {
        let _ = writeln!(
            out,
            "  {:>8}  {:>8}  {:>8}  {:>6}  {} / {} / {}",
            g.stats.count,
            age(g.stats.oldest_age_ms),
            age(g.stats.newest_age_ms),
            g.stats.unknown_age,
            shown(&g.key.error_class, PREVIEW_BYTES),
            shown(&g.key.reason, PREVIEW_BYTES),
            shown(&g.key.original_queue, PREVIEW_BYTES),
        );
    }
}

/// A header value for the table: a string quoted (JSON) and cut to [`PREVIEW_BYTES`]
/// before the quote, with `… (N bytes)` after it when cut; any other value as its JSON
/// text, cut the same way. Escaped ([`crate::printable`]).
fn header_shown(v: &Value) -> String {
    use crate::printable::{cut, escape, shown};
    match v {
        Value::String(s) => {
            let (kept, was_cut) = cut(s, PREVIEW_BYTES);
            let quoted = escape(&Value::String(kept.to_string()).to_string()).into_owned();
            if was_cut {
                format!("{quoted}… ({} bytes)", s.len())
            } else {
                quoted
            }
        }
        other => shown(&other.to_string(), PREVIEW_BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::headers::{ERROR_CLASS, LAST_FAILED_AT};
    use crate::wire::message::{HeaderValue, Message};

    #[test]
    fn inspection_counts_ages_and_samples() {
        let mut i = Inspection::default();
        let at = |ms: u64, class: &str| {
            let m = Message::new(
                [
                    (LAST_FAILED_AT.to_string(), HeaderValue::I64(ms as i64)),
                    (ERROR_CLASS.to_string(), HeaderValue::text(class)),
                ]
                .into(),
                b"",
            );
            DeadLetter::read("q.dlq", &m.properties, &m.body, 10)
        };
        i.add(at(1_000, "timeout"), 10_000, 1);
        i.add(at(4_000, "timeout"), 10_000, 1);
        i.add(at(9_000, "validation"), 10_000, 1);
        assert_eq!(i.scanned, 3);
        assert_eq!(i.by_error_class["Timeout"], 2);
        assert_eq!(i.by_error_class["Validation"], 1);
        assert_eq!(
            (i.oldest_age_ms, i.newest_age_ms),
            (Some(9_000), Some(1_000))
        );
        assert_eq!(i.sample.len(), 1);
        assert_eq!(i.by_reason["unknown"], 3);
        let table = i.table();
        assert!(table.contains("BY ERROR CLASS"), "{table}");
    }

    /// A dead letter with these fields (`at`: dead-lettering time, ms; `None`: unknown).
    fn letter(class: &str, reason: &str, queue: &str, at: Option<u64>) -> DeadLetter {
        use crate::wire::headers::{ORIGINAL_QUEUE, REASON};
        let mut headers: crate::wire::message::Headers = [
            (ERROR_CLASS.to_string(), HeaderValue::text(class)),
            (REASON.to_string(), HeaderValue::text(reason)),
            (ORIGINAL_QUEUE.to_string(), HeaderValue::text(queue)),
        ]
        .into();
        if let Some(ms) = at {
            headers.insert(LAST_FAILED_AT.to_string(), HeaderValue::I64(ms as i64));
        }
        let m = Message::new(headers, b"");
        DeadLetter::read("q.dlq", &m.properties, &m.body, 10)
    }

    #[test]
    fn groups_join_class_reason_and_queue_with_their_ages() {
        let mut i = Inspection::default();
        let now = 100_000;
        i.add(letter("timeout", "r1", "q", Some(10_000)), now, 0);
        i.add(letter("timeout", "r1", "q", Some(70_000)), now, 0);
        i.add(letter("timeout", "r1", "q", None), now, 0);
        i.add(letter("timeout", "r2", "q", Some(50_000)), now, 0);
        i.add(letter("parse", "r1", "q", None), now, 0);
        i.add(letter("timeout", "r1", "other", Some(99_000)), now, 0);
        let groups = i.groups();
        type Row<'a> = (
            &'a str,
            &'a str,
            &'a str,
            u64,
            Option<u64>,
            Option<u64>,
            u64,
        );
        let rows: Vec<Row> = groups
            .iter()
            .map(|g| {
                (
                    g.key.error_class.as_str(),
                    g.key.reason.as_str(),
                    g.key.original_queue.as_str(),
                    g.stats.count,
                    g.stats.oldest_age_ms,
                    g.stats.newest_age_ms,
                    g.stats.unknown_age,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("Timeout", "r1", "q", 3, Some(90_000), Some(30_000), 1),
                // Equal counts: by key (class, reason, queue).
                ("Parse", "r1", "q", 1, None, None, 1),
                ("Timeout", "r1", "other", 1, Some(1_000), Some(1_000), 0),
                ("Timeout", "r2", "q", 1, Some(50_000), Some(50_000), 0),
            ]
        );
        let json = serde_json::to_value(&i).expect("json");
        assert_eq!(json["groups"][0]["errorClass"], "Timeout");
        assert_eq!(json["groups"][0]["count"], 3);
        assert_eq!(json["groups"][0]["oldestAgeMs"], 90_000);
        assert_eq!(json["groups"][0]["unknownAge"], 1);
        assert_eq!(json["groups"][1]["oldestAgeMs"], serde_json::Value::Null);
        let table = i.table();
        assert!(table.contains("BY GROUP"), "{table}");
        assert!(table.contains("Timeout / r1 / q"), "{table}");
    }

    #[test]
    fn hostile_group_text_is_escaped_in_the_table() {
        let mut i = Inspection::default();
        let hostile = "\u{1b}[31mred\u{202e}<script>\n";
        i.add(letter("x", hostile, hostile, Some(1)), 2, 0);
        let table = i.table();
        let section = table.split("BY GROUP").nth(1).expect("section");
        assert!(!section.contains('\u{1b}'), "{table:?}");
        assert!(!section.contains('\u{202e}'), "{table:?}");
        assert_eq!(
            section.lines().count(),
            2,
            "one row, no raw newline: {table:?}"
        );
        // The JSON keeps the text (the CLI escapes JSON output as a whole).
        let json = serde_json::to_value(&i).expect("json");
        assert_eq!(json["groups"][0]["reason"], hostile);
    }
}
