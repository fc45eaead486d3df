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
        if let Some(at) = message.dead_lettered_at_ms {
            let age = now_ms.saturating_sub(at);
            self.oldest_age_ms = Some(self.oldest_age_ms.map_or(age, |a| a.max(age)));
            self.newest_age_ms = Some(self.newest_age_ms.map_or(age, |a| a.min(age)));
        }
        if self.sample.len() < sample_size {
            self.sample.push(message);
        }
    }
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
    use crate::broker::message::{HeaderValue, Message};
    use crate::client::headers::{ERROR_CLASS, LAST_FAILED_AT};

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
}
