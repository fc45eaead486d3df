//! The names of the message header contract (docs/ARCHITECTURE.md, "Message header
//! contract"): what the consumer helper and the retry router stamp on a message
//! ([`crate::client::headers`] writes them) and the neutral dead-letter logic reads
//! ([`crate::dlq`]). Names only: no broker type.

/// `dlq-retry-count` (long): retries already scheduled for this message; absent (0) on
/// the first failure, incremented on every retry, unchanged on dead-lettering.
pub const RETRY_COUNT: &str = "dlq-retry-count";
/// `dlq-error-class` (string): `ErrorClass::name` of the latest failure.
pub const ERROR_CLASS: &str = "dlq-error-class";
/// `dlq-last-error` (string): description of the latest failure, at most
/// [`MAX_LAST_ERROR_BYTES`] bytes of UTF-8.
pub const LAST_ERROR: &str = "dlq-last-error";
/// `dlq-first-failed-at` (long, ms since epoch): time of the first failure; set once.
pub const FIRST_FAILED_AT: &str = "dlq-first-failed-at";
/// `dlq-last-failed-at` (long, ms since epoch): time of the latest failure.
pub const LAST_FAILED_AT: &str = "dlq-last-failed-at";
/// `dlq-original-exchange` (string): exchange of the first failed delivery; set once.
pub const ORIGINAL_EXCHANGE: &str = "dlq-original-exchange";
/// `dlq-original-routing-key` (string): routing key of the first failed delivery; set once.
pub const ORIGINAL_ROUTING_KEY: &str = "dlq-original-routing-key";
/// `dlq-original-queue` (string): the source queue the message failed in; set once.
pub const ORIGINAL_QUEUE: &str = "dlq-original-queue";
/// `dlq-reason` (string): `DeadLetterReason::as_str`, on dead-lettered messages only.
pub const REASON: &str = "dlq-reason";
/// `dlq-last-delay-ms` (long, ms): computed delay of the latest retry (the "previous
/// delay" `DecorrelatedJitter` needs). An addition of this helper to the contract.
pub const LAST_DELAY_MS: &str = "dlq-last-delay-ms";

/// Maximum size in **bytes** of `dlq-last-error` (4 KiB).
pub const MAX_LAST_ERROR_BYTES: usize = 4096;

/// The longest prefix of `s` that is at most `max_bytes` bytes and ends on a UTF-8
/// character boundary.
pub fn truncate_utf8(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
