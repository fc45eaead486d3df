//! Repair and replay of one dead-lettered message: its copy goes back to the source
//! queue with a new body and/or edited headers, and only then is the original removed.
//!
//! A repair is a replay, not a second engine: [`repair_with`] runs
//! [`replay_with`](super::replay::replay_with) with the filter `id=<message_id>`, a limit
//! of 1, a crash window of 1 and a [`Rewrite`] in [`ReplayOptions::rewrite`]. Every
//! engine builds the replayed copy through [`copy_content`] (one pure function), which
//! applies the rewrite on top of the replay's own headers
//! ([`replay_headers`](super::replay_headers)) and stamps [`REPAIRED_AT`]. The copy is
//! published with `mandatory` and a publisher confirm to the DeadLetterQueue's source
//! queue, and the original is acked only after the confirm — the replay engine's rule
//! (docs/ARCHITECTURE.md), so a crash leaves a duplicate, never a loss. The
//! `message_id` property is kept (consumers deduplicate on it and `dlq-replay-id`).
//!
//! Protected headers ([`protected`]) can be neither set nor removed:
//! - `x-*`: the broker's (`x-death`, `x-first-death-*`, `x-delivery-count`, …). They are
//!   the broker's record of what happened to the message; RabbitMQ owns them, and some
//!   change how it treats the message.
//! - `dlq-*`: the header contract (docs/ARCHITECTURE.md, "Broker topology") that the
//!   consumer helper, the replay and the repair maintain: the retry state the replay
//!   resets, the origin the replay routes by, the replay stamps its loop guard
//!   (`dlq-replay-id`, `--max-replays` on `dlq-replay-count`) reads, and
//!   `dlq-repaired-at` itself. An edit would falsify the message's history or defeat
//!   those guards.
//! - `CC` and `BCC`: they add routing keys, and the copy's route is checked against the
//!   original's headers before it is published ([`super::route`]).
//!
//! If several messages in the dead-letter queues share the `message_id`, the first one
//! read that the replay's rules accept is repaired; the others stay.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::filter::{Filter, Term};
use super::replay::{
    new_replay_id, replay_with, Observer, Outcome, ReplayOptions, ReplayReport, Target,
};
use super::DeadLetterOps;
use super::{replay_headers, REPAIRED_AT};
use crate::printable::{shown, PREVIEW_BYTES};
use crate::topology::DesiredTopology;
use crate::wire::message::{HeaderValue, Headers};
use crate::wire::BrokerError;

/// What a repair that stopped on a broker error may have left, for the user (the CLI's
/// error, the console's page): its one copy may have been confirmed while the original's
/// removal was lost with the connection (at-least-once, [`repair_with`]).
pub const STOPPED_NOTE: &str = "the repaired copy may have reached the source queue while \
     the original went back to the dead-letter queue (at-least-once: check the source queue \
     before repairing again; deduplicate on message_id). Nothing is lost.";

/// The longest header name AMQP 0-9-1 takes (a short string), bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 255;

/// What a repair changes in the copy of a message: an optional new body, headers set and
/// headers removed. Built only through its checked methods, so it never touches a
/// [`protected`] header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rewrite {
    body: Option<Vec<u8>>,
    set: Headers,
    remove: BTreeSet<String>,
}

/// Why a [`Rewrite`] cannot be built. Names quoted with `{:?}` (escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// A text that should be JSON is not (serde_json's position: line and column from 1).
    #[error("invalid JSON at line {line}, column {column}: {reason}")]
    InvalidJson {
        /// Line, from 1.
        line: usize,
        /// Column (a byte offset in the line), from 1.
        column: usize,
        /// serde_json's reason.
        reason: String,
    },
    /// The header edits are not a JSON object.
    #[error("the headers must be a JSON object of name: value, not {0}")]
    NotAnObject(&'static str),
    /// A protected header ([`protected`]).
    #[error("header {0:?} is protected ({1}): it cannot be set or removed")]
    Protected(String, &'static str),
    /// An empty or too long header name.
    #[error("header name {0:?}: {1}")]
    BadName(String, &'static str),
    /// A header value that is not a string, number or boolean.
    #[error("header {0:?}: {1}")]
    BadValue(String, String),
    /// The same header both set and removed.
    #[error("header {0:?} is both set and removed")]
    SetAndRemoved(String),
}

/// Why `name` is protected, or `None` when a repair may edit it (module doc). Compared in
/// any case.
pub fn protected(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("x-") {
        Some("x-* headers are the broker's")
    } else if lower.starts_with("dlq-") {
        Some("dlq-* headers are the dead-letter contract the retries and replays maintain")
    } else if lower == "cc" || lower == "bcc" {
        Some("CC and BCC add routing keys; the copy's route is checked without edits")
    } else {
        None
    }
}

/// Checks that `text` is one JSON value.
///
/// # Errors
/// [`RewriteError::InvalidJson`] with serde_json's line and column (both from 1) and
/// reason.
pub fn check_json(text: &str) -> Result<Value, RewriteError> {
    serde_json::from_str::<Value>(text).map_err(|e| RewriteError::InvalidJson {
        line: e.line(),
        // serde_json says column 0 at the very start of a line (an end of input there).
        column: e.column().max(1),
        reason: strip_position(&e.to_string()),
    })
}

/// serde_json's message without its trailing " at line L column C" (reported apart).
fn strip_position(message: &str) -> String {
    message
        .rfind(" at line ")
        .map_or(message, |i| &message[..i])
        .to_string()
}

impl Rewrite {
    /// A rewrite that changes nothing (yet).
    pub fn new() -> Self {
        Rewrite::default()
    }

    /// Replaces the body with `body` (any bytes; unchecked).
    pub fn with_body(mut self, body: Vec<u8>) -> Self {
        self.body = Some(body);
        self
    }

    /// Replaces the body with the JSON text `text`, kept byte for byte once it parses.
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`] ([`check_json`]).
    pub fn with_json_body(self, text: &str) -> Result<Self, RewriteError> {
        check_json(text)?;
        Ok(self.with_body(text.as_bytes().to_vec()))
    }

    /// Sets header `name` to `value`: a string (AMQP long string), an integer (signed
    /// 64-bit), another number (64-bit float) or a boolean.
    ///
    /// # Errors
    /// [`RewriteError::Protected`], [`RewriteError::BadName`] (empty, over
    /// [`MAX_HEADER_NAME_BYTES`]), [`RewriteError::BadValue`] (null, array, object, an
    /// integer beyond `i64`), [`RewriteError::SetAndRemoved`].
    pub fn set_header(&mut self, name: &str, value: &Value) -> Result<(), RewriteError> {
        check_name(name)?;
        if self.remove.contains(name) {
            return Err(RewriteError::SetAndRemoved(name.to_string()));
        }
        self.set
            .insert(name.to_string(), header_value(name, value)?);
        Ok(())
    }

    /// Sets every header of the JSON object `text` ([`Rewrite::set_header`]).
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`], [`RewriteError::NotAnObject`], and those of
    /// [`Rewrite::set_header`].
    pub fn set_headers_json(&mut self, text: &str) -> Result<(), RewriteError> {
        for (name, value) in &object(check_json(text)?)? {
            self.set_header(name, value)?;
        }
        Ok(())
    }

    /// The header edits that turn `original` (a dead letter's headers as JSON,
    /// [`DeadLetter::headers`](super::DeadLetter::headers)) into the JSON object `edited`:
    /// a header whose value changed or that is new is set ([`Rewrite::set_header`]), one
    /// missing from `edited` is removed; an unchanged one is left alone, so it keeps its
    /// exact AMQP type. For an edit form showing the headers as JSON.
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`], [`RewriteError::NotAnObject`];
    /// [`RewriteError::Protected`] when a protected header was changed, added or removed
    /// (left as it was, it is fine); those of [`Rewrite::set_header`].
    pub fn edit_headers_json(
        &mut self,
        original: &BTreeMap<String, Value>,
        edited: &str,
    ) -> Result<(), RewriteError> {
        let edited = object(check_json(edited)?)?;
        for (name, value) in &edited {
            if original.get(name) != Some(value) {
                self.set_header(name, value)?;
            }
        }
        for name in original.keys() {
            if !edited.contains_key(name) {
                self.remove_header(name)?;
            }
        }
        Ok(())
    }

    /// Removes header `name` from the copy (nothing happens when the message has none).
    ///
    /// # Errors
    /// [`RewriteError::Protected`], [`RewriteError::BadName`],
    /// [`RewriteError::SetAndRemoved`].
    pub fn remove_header(&mut self, name: &str) -> Result<(), RewriteError> {
        check_name(name)?;
        if self.set.contains_key(name) {
            return Err(RewriteError::SetAndRemoved(name.to_string()));
        }
        self.remove.insert(name.to_string());
        Ok(())
    }

    /// The new body, if any.
    pub fn body(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    /// The headers set, by name.
    pub fn set(&self) -> &Headers {
        &self.set
    }

    /// The names of the headers removed.
    pub fn removed(&self) -> &BTreeSet<String> {
        &self.remove
    }

    /// Whether it changes neither body nor header.
    pub fn is_empty(&self) -> bool {
        self.body.is_none() && self.set.is_empty() && self.remove.is_empty()
    }

    /// Applies the header edits to `headers`: removals, then the values set.
    pub fn apply(&self, headers: &mut Headers) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// The JSON object `value`.
///
/// # Errors
/// [`RewriteError::NotAnObject`] naming what it is instead.
fn object(value: Value) -> Result<serde_json::Map<String, Value>, RewriteError> {
    Err(RewriteError::NotAnObject(match value {
        Value::Object(map) => return Ok(map),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    }))
}

/// Refuses a protected, empty or over-long header name.
fn check_name(name: &str) -> Result<(), RewriteError> {
    if let Some(why) = protected(name) {
        return Err(RewriteError::Protected(name.to_string(), why));
    }
    if name.is_empty() {
        return Err(RewriteError::BadName(name.to_string(), "empty"));
    }
    if name.len() > MAX_HEADER_NAME_BYTES {
        return Err(RewriteError::BadName(
            shown(name, PREVIEW_BYTES),
            "longer than 255 bytes (AMQP 0-9-1)",
        ));
    }
    Ok(())
}

/// `value` as a header value (see [`Rewrite::set_header`]).
fn header_value(name: &str, value: &Value) -> Result<HeaderValue, RewriteError> {
    let bad = |why: &str| Err(RewriteError::BadValue(name.to_string(), why.to_string()));
    match value {
        Value::String(s) => Ok(HeaderValue::text(s)),
        Value::Bool(b) => Ok(HeaderValue::Bool(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(HeaderValue::I64(i))
            } else if n.is_u64() {
                bad("an integer beyond the signed 64-bit range")
            } else if n
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() >= 9.2e18)
            {
                // serde_json reads an integer past u64 as a float: it would be stored
                // rounded, as a float.
                bad("an integer beyond the signed 64-bit range")
            } else {
                n.as_f64()
                    .map_or_else(|| bad("not a finite number"), |f| Ok(HeaderValue::F64(f)))
            }
        }
        Value::Null => bad("null is not a header value (remove the header instead)"),
        Value::Array(_) | Value::Object(_) => bad("must be a string, number or boolean"),
    }
}

/// The headers and body of the replayed copy of a message with `original` headers and
/// `body`, under `opts`, at `now_ms` (ms since epoch): the replay's headers
/// ([`replay_headers`]), then, with [`ReplayOptions::rewrite`], its header edits and new
/// body and [`REPAIRED_AT`] = `now_ms`. Every engine builds its copies with this; the
/// other properties (`message_id` included) are the original's.
pub fn copy_content(
    original: Option<&Headers>,
    body: &[u8],
    opts: &ReplayOptions,
    now_ms: u64,
) -> (Headers, Vec<u8>) {
    let mut headers = replay_headers(original, &opts.replay_id, now_ms);
    let Some(rewrite) = &opts.rewrite else {
        return (headers, body.to_vec());
    };
    rewrite.apply(&mut headers);
    headers.insert(
        REPAIRED_AT.to_string(),
        HeaderValue::I64(i64::try_from(now_ms).unwrap_or(i64::MAX)),
    );
    let body = rewrite.body().unwrap_or(body).to_vec();
    (headers, body)
}

/// How a repair ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome", content = "reason")]
pub enum RepairOutcome {
    /// The copy was confirmed in the source queue and the original removed.
    Repaired,
    /// No message with that `message_id` was read: nothing changed.
    NotFound,
    /// Found, but the replay's rules refused it (the reason, escaped); it stays.
    Skipped(String),
    /// The broker refused the copy (the reason); the original stays.
    Failed(String),
    /// Stopped (cancelled) before the message was repaired; nothing changed.
    Interrupted,
}

/// The result of [`repair_with`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// The `message_id` asked for.
    pub message_id: String,
    /// `dlq-replay-id` of the copy.
    pub replay_id: String,
    /// `dlq-repaired-at` of the copy (ms since epoch) when [`RepairOutcome::Repaired`].
    pub repaired_at_ms: Option<u64>,
    /// Messages read.
    pub scanned: u64,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: RepairOutcome,
}

impl RepairReport {
    /// The repair's outcome from the report of its replay, run at `now_ms`.
    pub fn from_replay(message_id: &str, replay: &ReplayReport, now_ms: u64) -> Self {
        let first = |m: &BTreeMap<String, u64>| m.keys().next().cloned().unwrap_or_default();
        let outcome = if replay.replayed > 0 {
            RepairOutcome::Repaired
        } else if !replay.failed.is_empty() {
            RepairOutcome::Failed(first(&replay.failed))
        } else if !replay.skipped.is_empty() {
            RepairOutcome::Skipped(first(&replay.skipped))
        } else if replay.outcome == Outcome::Partial {
            RepairOutcome::Interrupted
        } else {
            RepairOutcome::NotFound
        };
        RepairReport {
            resource: replay.resource.clone(),
            message_id: message_id.to_string(),
            replay_id: replay.replay_id.clone(),
            repaired_at_ms: (outcome == RepairOutcome::Repaired).then_some(now_ms),
            scanned: replay.scanned,
            outcome,
        }
    }
}

impl fmt::Display for RepairReport {
    /// Lines of text, every outside text escaped and cut ([`crate::printable::shown`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "DeadLetterQueue  {}",
            shown(&self.resource, PREVIEW_BYTES)
        )?;
        writeln!(
            f,
            "message_id       {}",
            shown(&self.message_id, PREVIEW_BYTES)
        )?;
        writeln!(
            f,
            "replay id        {}",
            shown(&self.replay_id, PREVIEW_BYTES)
        )?;
        writeln!(f, "read             {}", self.scanned)?;
        let line = match &self.outcome {
            RepairOutcome::Repaired => format!(
                "repaired: the copy is in the source queue (dlq-repaired-at {}), the original removed",
                self.repaired_at_ms.unwrap_or_default()
            ),
            RepairOutcome::NotFound => {
                "not found: no message with this message_id was read; nothing changed".into()
            }
            RepairOutcome::Skipped(why) => format!(
                "skipped: {}; the message stays in the dead-letter queue",
                shown(why, PREVIEW_BYTES)
            ),
            RepairOutcome::Failed(why) => format!(
                "failed: {}; the original stays in the dead-letter queue",
                shown(why, PREVIEW_BYTES)
            ),
            RepairOutcome::Interrupted => "interrupted: nothing changed".into(),
        };
        writeln!(f, "outcome          {line}")
    }
}

/// The replay a repair of `message_id` with `rewrite` runs (module doc): filter
/// `id=<message_id>` (built as a [`Term`], so any id works, commas included), limit 1,
/// crash window 1, to the source queue, with no `--max-replays` cap (a person chose this
/// message), a fresh replay id ([`new_replay_id`]).
pub fn repair_options(message_id: &str, rewrite: Rewrite, now_ms: u64) -> ReplayOptions {
    ReplayOptions {
        filter: Filter {
            terms: vec![Term::MessageId(message_id.to_string(), true)],
        },
        limit: Some(1),
        rate: None,
        dry_run: false,
        target: Target::OriginalQueue,
        max_replays: u64::MAX,
        replay_id: new_replay_id(now_ms),
        max_in_flight: 1,
        rewrite: Some(rewrite),
    }
}

/// Repairs the dead-lettered message `message_id` of `topology`'s dead-letter queues on
/// `broker`: publishes its copy with `rewrite` applied ([`copy_content`]) to the source
/// queue with a publisher confirm and `mandatory`, then removes the original. `now_ms`
/// (ms since epoch) is the replay's time and `dlq-repaired-at`. `cancel` stops it between
/// messages.
///
/// # Errors
/// [`RepairStopped`]: the error of [`DeadLetterOps::replay`] — a missing dead-letter
/// queue (nothing changed), a lost connection (messages held go back; a copy already
/// confirmed stays repaired) — and whether the message had been found by then.
pub async fn repair_with(
    broker: &dyn DeadLetterOps,
    topology: &DesiredTopology,
    message_id: &str,
    rewrite: Rewrite,
    now_ms: u64,
    cancel: &CancellationToken,
) -> Result<RepairReport, RepairStopped> {
    let opts = repair_options(message_id, rewrite, now_ms);
    let mut found = Found(false);
    let report = replay_with(broker, topology, &opts, now_ms, cancel, &mut found)
        .await
        .map_err(|error| RepairStopped {
            error,
            found: found.0,
        })?;
    Ok(RepairReport::from_replay(message_id, &report, now_ms))
}

/// The observer of [`repair_with`]: whether the message was found. The replay keeps a
/// checkpoint right before it publishes a copy, with the message already counted as
/// matched, so a copy sent and lost with the connection is known here.
struct Found(bool);

impl Observer for Found {
    fn progress(&mut self, report: &ReplayReport) {
        self.0 |= report.matched > 0;
    }

    fn checkpoint<'a>(
        &'a mut self,
        report: &'a ReplayReport,
        _batch: u64,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        self.0 |= report.matched > 0;
        Box::pin(async { Ok(()) })
    }
}

/// A repair stopped by a broker error ([`repair_with`]).
#[derive(Debug)]
pub struct RepairStopped {
    /// The broker's error.
    pub error: BrokerError,
    /// Whether the message had been found before it: only then may its copy have been
    /// published.
    pub found: bool,
}

impl RepairStopped {
    /// What the stop may have left, for the user: [`STOPPED_NOTE`] once the message was
    /// found, else nothing (no copy was sent).
    pub fn note(&self) -> Option<&'static str> {
        self.found.then_some(STOPPED_NOTE)
    }
}

#[cfg(test)]
mod tests;
