//! Convenience mapping of common failures to an [`ErrorClass`].
//!
//! These are heuristics for consumers that have nothing better: a consumer that knows why
//! it failed should pass its own class to
//! [`RetryHandler::handle_failure`](super::RetryHandler::handle_failure).

use std::error::Error;
use std::io::ErrorKind;

use crate::crd::ErrorClass;

/// Class of an [`std::io::ErrorKind`], if it says something about the failure.
///
/// `TimedOut`/`WouldBlock` → `Timeout`; `ConnectionRefused` → `ConnectionRefused`;
/// resets, aborts, broken pipes and unreachable hosts/networks → `Dependency`; out of
/// memory, storage full, quota exceeded, busy resources → `Resource`; `InvalidData` →
/// `Parse`; `InvalidInput` → `Validation`. `None` for everything else.
pub fn classify_io(kind: ErrorKind) -> Option<ErrorClass> {
    use ErrorKind as K;
    Some(match kind {
        K::TimedOut | K::WouldBlock => ErrorClass::Timeout,
        K::ConnectionRefused => ErrorClass::ConnectionRefused,
        K::ConnectionReset
        | K::ConnectionAborted
        | K::NotConnected
        | K::BrokenPipe
        | K::AddrNotAvailable
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown => ErrorClass::Dependency,
        K::OutOfMemory | K::StorageFull | K::QuotaExceeded | K::ResourceBusy => {
            ErrorClass::Resource
        }
        K::InvalidData => ErrorClass::Parse,
        K::InvalidInput => ErrorClass::Validation,
        _ => return None,
    })
}

/// Class of an HTTP status code a downstream call returned, if it has one.
///
/// 408, 504 → `Timeout`; 429 → `RateLimited`; 503 → `Overload`; 502 → `Dependency`;
/// 507 → `Resource`; 400, 422 → `Validation`. `None` otherwise.
pub fn classify_http_status(status: u16) -> Option<ErrorClass> {
    Some(match status {
        408 | 504 => ErrorClass::Timeout,
        429 => ErrorClass::RateLimited,
        503 => ErrorClass::Overload,
        502 => ErrorClass::Dependency,
        507 => ErrorClass::Resource,
        400 | 422 => ErrorClass::Validation,
        _ => return None,
    })
}

/// Keywords (lower case) per class, checked in this order.
const KEYWORDS: &[(ErrorClass, &[&str])] = &[
    (
        ErrorClass::Timeout,
        &["timed out", "timeout", "deadline exceeded"],
    ),
    (
        ErrorClass::ConnectionRefused,
        &["connection refused", "econnrefused"],
    ),
    (
        ErrorClass::RateLimited,
        &["rate limit", "ratelimit", "too many requests", "throttl"],
    ),
    (
        ErrorClass::Overload,
        &[
            "overload",
            "service unavailable",
            "server busy",
            "backpressure",
        ],
    ),
    (
        ErrorClass::Resource,
        &[
            "out of memory",
            "no space left",
            "disk full",
            "quota exceeded",
            "too many open files",
            "pool exhausted",
            "resource exhausted",
        ],
    ),
    (
        ErrorClass::Dependency,
        &[
            "connection reset",
            "broken pipe",
            "bad gateway",
            "unreachable",
            "unavailable",
            "dns",
        ],
    ),
    (
        ErrorClass::Parse,
        &[
            "parse",
            "syntax error",
            "malformed",
            "deserializ",
            "decode",
            "unexpected end of",
        ],
    ),
    (
        ErrorClass::Validation,
        &["validation", "invalid", "missing field", "required field"],
    ),
    (ErrorClass::Poison, &["poison"]),
];

/// Class of a free-text error description, by case-insensitive keywords (e.g. "timed
/// out" → `Timeout`, "connection refused" → `ConnectionRefused`, "429 Too Many
/// Requests" → `RateLimited`, "invalid …" → `Validation`). Transient classes are checked
/// first. `None` when nothing matches.
pub fn classify_message(description: &str) -> Option<ErrorClass> {
    let lower = description.to_lowercase();
    KEYWORDS
        .iter()
        .find(|(_, words)| words.iter().any(|w| lower.contains(w)))
        .map(|(class, _)| *class)
}

/// Class of an error: walks its [`source`](Error::source) chain, outermost first, and
/// returns the class of the first [`std::io::Error`] whose kind maps
/// ([`classify_io`]), else the first description that matches ([`classify_message`]).
/// `None` when nothing matches — the consumer then picks a class itself (the policy's
/// `classification.default` only applies to classes it does not list).
pub fn classify(error: &(dyn Error + 'static)) -> Option<ErrorClass> {
    fn chain<'a>(
        error: &'a (dyn Error + 'static),
    ) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
        std::iter::successors(Some(error), |&e| e.source())
    }
    chain(error)
        .find_map(|e| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| classify_io(io.kind()))
        })
        .or_else(|| chain(error).find_map(|e| classify_message(&e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("calling billing failed")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn io_kinds() {
        assert_eq!(classify_io(ErrorKind::TimedOut), Some(ErrorClass::Timeout));
        assert_eq!(
            classify_io(ErrorKind::ConnectionRefused),
            Some(ErrorClass::ConnectionRefused)
        );
        assert_eq!(
            classify_io(ErrorKind::ConnectionReset),
            Some(ErrorClass::Dependency)
        );
        assert_eq!(classify_io(ErrorKind::InvalidData), Some(ErrorClass::Parse));
        assert_eq!(classify_io(ErrorKind::NotFound), None);
    }

    #[test]
    fn messages_and_status() {
        assert_eq!(
            classify_message("request Timed Out after 5s"),
            Some(ErrorClass::Timeout)
        );
        assert_eq!(
            classify_message("HTTP 429 Too Many Requests"),
            Some(ErrorClass::RateLimited)
        );
        assert_eq!(
            classify_message("expected value at line 1 column 1: parse error"),
            Some(ErrorClass::Parse)
        );
        assert_eq!(
            classify_message("invalid order total"),
            Some(ErrorClass::Validation)
        );
        assert_eq!(classify_message("all good?"), None);
        assert_eq!(classify_http_status(503), Some(ErrorClass::Overload));
        assert_eq!(classify_http_status(404), None);
    }

    #[test]
    fn walks_the_source_chain() {
        let e = Wrapped(std::io::Error::from(ErrorKind::ConnectionRefused));
        assert_eq!(classify(&e), Some(ErrorClass::ConnectionRefused));
        let e = Wrapped(std::io::Error::other("upstream deadline exceeded"));
        assert_eq!(classify(&e), Some(ErrorClass::Timeout));
        let e = Wrapped(std::io::Error::other("no idea"));
        assert_eq!(classify(&e), None);
    }
}
