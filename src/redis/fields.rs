//! The header contract on Redis entries (docs/REDIS.md, "The contract"): the same `dlq-*`
//! names as on RabbitMQ ([`crate::wire::headers`]), written as stream fields whose values
//! are decimal strings (numbers) or UTF-8 text. Pure.

use crate::backoff::{Decision, ResolvedPolicy};
use crate::crd::ErrorClass;
use crate::wire::headers::truncate_utf8;
use crate::wire::headers::{
    ERROR_CLASS, FIRST_FAILED_AT, LAST_DELAY_MS, LAST_ERROR, LAST_FAILED_AT, MAX_LAST_ERROR_BYTES,
    ORIGINAL_QUEUE, REASON, RETRY_COUNT,
};

/// `dlq-original-id` (string): the stream entry id of the first failure; set once. A
/// Redis addition to the contract: a retried entry comes back under a new id.
pub const ORIGINAL_ID: &str = "dlq-original-id";

/// The retry state an entry carries, read from its fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryState {
    /// `dlq-retry-count` (0 when absent or not a non-negative decimal).
    pub retry_count: u32,
    /// `dlq-first-failed-at`, ms since the epoch.
    pub first_failed_at_ms: Option<u64>,
    /// `dlq-last-delay-ms`, ms.
    pub last_delay_ms: Option<u64>,
    /// `dlq-original-queue`, when an earlier failure wrote it.
    pub original_queue: Option<String>,
    /// `dlq-original-id`, when an earlier failure wrote it.
    pub original_id: Option<String>,
}

impl EntryState {
    /// Reads the state from an entry's `(name, value)` fields; a value that is not a
    /// non-negative decimal counts as absent (other clients may write anything), one too
    /// large for 64 bits as the largest.
    pub fn from_fields(fields: &[(Vec<u8>, Vec<u8>)]) -> Self {
        let get = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n.as_slice() == name.as_bytes())
                .map(|(_, v)| v.as_slice())
        };
        // A decimal too large for u64 counts as u64::MAX (a retry count that large is
        // spent), never as absent.
        let number = |name: &str| {
            let text = get(name).and_then(|v| std::str::from_utf8(v).ok())?.trim();
            text.parse::<u64>().ok().or_else(|| {
                (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then_some(u64::MAX)
            })
        };
        let text = |name: &str| {
            get(name)
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_string)
        };
        EntryState {
            retry_count: number(RETRY_COUNT)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .unwrap_or(0),
            first_failed_at_ms: number(FIRST_FAILED_AT),
            last_delay_ms: number(LAST_DELAY_MS),
            original_queue: text(ORIGINAL_QUEUE),
            original_id: text(ORIGINAL_ID),
        }
    }

    /// What `policy` decides for a failure of `class` of this entry at `now_ms` (ms since
    /// the epoch): [`ResolvedPolicy::decide`] with the elapsed time since the first
    /// failure.
    pub fn decide<R: rand::Rng + ?Sized>(
        &self,
        policy: &ResolvedPolicy,
        class: Option<ErrorClass>,
        now_ms: u64,
        rng: &mut R,
    ) -> Decision {
        let elapsed_ms = now_ms.saturating_sub(self.first_failed_at_ms.unwrap_or(now_ms));
        policy.decide(class, self.retry_count, elapsed_ms, self.last_delay_ms, rng)
    }
}

/// One failure of an entry, as the copy records it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    /// Its class, if the consumer named one.
    pub class: Option<ErrorClass>,
    /// What happened (truncated to [`MAX_LAST_ERROR_BYTES`]).
    pub error: &'a str,
    /// Now, ms since the epoch.
    pub now_ms: u64,
    /// The source key it failed in.
    pub source: &'a str,
    /// Its entry id (stream) or the router's id for it (list).
    pub id: &'a str,
}

/// The `dlq-*` fields of an entry's copy: what to write and what to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamped {
    /// Fields to write, as name, value pairs (they replace fields of the same name).
    pub set: Vec<(String, String)>,
    /// Fields to remove: a stale `dlq-error-class` when this failure has no class, a
    /// stale `dlq-reason` (of an entry replayed out of the dead letters) on a retry.
    pub remove: Vec<String>,
}

/// The `dlq-*` fields the copy of an entry in `state` gets for `decision`, by the rules
/// the RabbitMQ copies follow (`client::headers::republish_properties`): always the
/// error, its class (removed when unknown) and the last failure time; once, the first
/// failure time and the origin (source key, first entry id); a retry sets the retry count
/// to its attempt and the delay, and removes a stale reason; a dead-letter keeps the
/// retry count (written as 0 when absent) and sets the reason.
pub fn stamp(state: &EntryState, failure: &Failure<'_>, decision: &Decision) -> Stamped {
    let mut set = vec![
        (
            LAST_ERROR.to_string(),
            truncate_utf8(failure.error, MAX_LAST_ERROR_BYTES).to_string(),
        ),
        (
            FIRST_FAILED_AT.to_string(),
            state
                .first_failed_at_ms
                .unwrap_or(failure.now_ms)
                .to_string(),
        ),
        (LAST_FAILED_AT.to_string(), failure.now_ms.to_string()),
        (
            ORIGINAL_QUEUE.to_string(),
            state
                .original_queue
                .clone()
                .unwrap_or_else(|| failure.source.to_string()),
        ),
        (
            ORIGINAL_ID.to_string(),
            state
                .original_id
                .clone()
                .unwrap_or_else(|| failure.id.to_string()),
        ),
    ];
    let mut remove = Vec::new();
    match failure.class {
        Some(class) => set.push((ERROR_CLASS.to_string(), class.name().to_string())),
        None => remove.push(ERROR_CLASS.to_string()),
    }
    match decision {
        Decision::Retry {
            attempt, delay_ms, ..
        } => {
            set.push((RETRY_COUNT.to_string(), attempt.to_string()));
            set.push((LAST_DELAY_MS.to_string(), delay_ms.to_string()));
            remove.push(REASON.to_string());
        }
        Decision::DeadLetter(reason) => {
            set.push((RETRY_COUNT.to_string(), state.retry_count.to_string()));
            set.push((REASON.to_string(), reason.as_str().to_string()));
        }
    }
    Stamped { set, remove }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::DeadLetterReason;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn get<'a>(stamped: &'a Stamped, name: &str) -> &'a str {
        stamped
            .set
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} in {stamped:?}"))
    }

    #[test]
    fn the_state_is_read_from_decimal_fields_and_junk_counts_as_absent() {
        let s = EntryState::from_fields(&fields(&[
            ("body", "x"),
            (RETRY_COUNT, "2"),
            (FIRST_FAILED_AT, "1000"),
            (LAST_DELAY_MS, "oops"),
            (ORIGINAL_ID, "1-0"),
        ]));
        assert_eq!(s.retry_count, 2);
        assert_eq!(s.first_failed_at_ms, Some(1000));
        assert_eq!(s.last_delay_ms, None);
        assert_eq!(s.original_id.as_deref(), Some("1-0"));
        assert_eq!(EntryState::from_fields(&[]), EntryState::default());
        let huge = EntryState::from_fields(&fields(&[(RETRY_COUNT, "99999999999999999999")]));
        assert_eq!(huge.retry_count, u32::MAX, "spent, not restarted");
    }

    #[test]
    fn a_first_retry_sets_the_origin_and_a_later_one_keeps_it() {
        let failure = Failure {
            class: None,
            error: "not acknowledged",
            now_ms: 5_000,
            source: "orders",
            id: "7-0",
        };
        let retry = Decision::Retry {
            attempt: 1,
            delay_ms: 100,
            tier_ms: 100,
        };
        let first = stamp(&EntryState::default(), &failure, &retry);
        assert_eq!(get(&first, RETRY_COUNT), "1");
        assert_eq!(get(&first, FIRST_FAILED_AT), "5000");
        assert_eq!(get(&first, ORIGINAL_ID), "7-0");
        assert_eq!(get(&first, ORIGINAL_QUEUE), "orders");
        assert_eq!(get(&first, LAST_DELAY_MS), "100");

        let state = EntryState {
            retry_count: 1,
            first_failed_at_ms: Some(1_000),
            last_delay_ms: Some(100),
            original_queue: Some("orders".into()),
            original_id: Some("3-0".into()),
        };
        let dead = stamp(
            &state,
            &Failure {
                id: "9-0",
                ..failure
            },
            &Decision::DeadLetter(DeadLetterReason::MaxRetriesExceeded),
        );
        assert_eq!(get(&dead, RETRY_COUNT), "1", "unchanged on dead-lettering");
        assert_eq!(get(&dead, FIRST_FAILED_AT), "1000");
        assert_eq!(get(&dead, ORIGINAL_ID), "3-0");
        assert_eq!(get(&dead, REASON), "MaxRetriesExceeded");
        assert!(dead.set.iter().all(|(n, _)| n != LAST_DELAY_MS));
        assert_eq!(
            dead.remove,
            [ERROR_CLASS],
            "unclassified: a stale class goes"
        );
        assert!(
            first.remove.contains(&REASON.to_string()),
            "a retry drops a stale reason"
        );
    }

    #[test]
    fn a_long_error_is_truncated_on_a_character_boundary() {
        let long = "é".repeat(MAX_LAST_ERROR_BYTES);
        let stamped = stamp(
            &EntryState::default(),
            &Failure {
                class: Some(ErrorClass::Timeout),
                error: &long,
                now_ms: 1,
                source: "s",
                id: "1-0",
            },
            &Decision::DeadLetter(DeadLetterReason::NonRetryable),
        );
        assert!(get(&stamped, LAST_ERROR).len() <= MAX_LAST_ERROR_BYTES);
        assert_eq!(get(&stamped, ERROR_CLASS), "Timeout");
    }
}
