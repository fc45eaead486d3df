//! The error classes of consumer failures (docs/ARCHITECTURE.md, "Domain"): what a
//! RetryPolicy's `spec.classification` lists, what the consumer helper writes in the
//! `dlq-error-class` header, what names the dead-letter partitions and what a `class=`
//! filter term matches. Pure, at the bottom of the module graph: [`crate::crd`] re-exports
//! [`ErrorClass`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Class of a consumer failure (docs/ARCHITECTURE.md, "Domain").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum ErrorClass {
    /// The call timed out.
    Timeout,
    /// The peer refused the connection.
    ConnectionRefused,
    /// The peer is overloaded.
    Overload,
    /// The peer rate-limited the call.
    RateLimited,
    /// A dependency is down.
    Dependency,
    /// A resource (disk, memory, pool) is exhausted.
    Resource,
    /// The message failed validation.
    Validation,
    /// The message could not be parsed.
    Parse,
    /// The message crashes or poisons its consumer.
    Poison,
}

impl ErrorClass {
    /// Every class, in declaration order.
    pub const ALL: [ErrorClass; 9] = [
        ErrorClass::Timeout,
        ErrorClass::ConnectionRefused,
        ErrorClass::Overload,
        ErrorClass::RateLimited,
        ErrorClass::Dependency,
        ErrorClass::Resource,
        ErrorClass::Validation,
        ErrorClass::Parse,
        ErrorClass::Poison,
    ];

    /// The name as written in manifests and in the `dlq-error-class` header.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "Timeout",
            ErrorClass::ConnectionRefused => "ConnectionRefused",
            ErrorClass::Overload => "Overload",
            ErrorClass::RateLimited => "RateLimited",
            ErrorClass::Dependency => "Dependency",
            ErrorClass::Resource => "Resource",
            ErrorClass::Validation => "Validation",
            ErrorClass::Parse => "Parse",
            ErrorClass::Poison => "Poison",
        }
    }

    /// Lower-case, dash-separated form used in queue names and routing keys
    /// (`ConnectionRefused` → `connection-refused`).
    pub fn slug(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::ConnectionRefused => "connection-refused",
            ErrorClass::Overload => "overload",
            ErrorClass::RateLimited => "rate-limited",
            ErrorClass::Dependency => "dependency",
            ErrorClass::Resource => "resource",
            ErrorClass::Validation => "validation",
            ErrorClass::Parse => "parse",
            ErrorClass::Poison => "poison",
        }
    }

    /// Parses a class name (as in [`ErrorClass::name`]; case-insensitive).
    pub fn from_name(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
    }
}

/// An error class in its canonical spelling: a known class written as its name or its
/// queue slug, in any case (`timeout`, `TIMEOUT`, `connection-refused`), becomes
/// [`ErrorClass::name`] (`Timeout`, `ConnectionRefused`) — the consumer helper writes
/// names, other clients and the partition queues use slugs; anything else is kept as
/// written.
pub fn canonical_class(class: &str) -> String {
    ErrorClass::from_name(class)
        .or_else(|| {
            ErrorClass::ALL
                .into_iter()
                .find(|c| c.slug().eq_ignore_ascii_case(class))
        })
        .map_or_else(|| class.to_string(), |c| c.name().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_slugs_become_the_canonical_name() {
        assert_eq!(canonical_class("timeout"), "Timeout");
        assert_eq!(canonical_class("TIMEOUT"), "Timeout");
        assert_eq!(canonical_class("connection-refused"), "ConnectionRefused");
        assert_eq!(canonical_class("Connection-Refused"), "ConnectionRefused");
        assert_eq!(canonical_class("connectionrefused"), "ConnectionRefused");
        assert_eq!(canonical_class("unclassified"), "unclassified");
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::from_name(c.name()), Some(c));
            assert_eq!(canonical_class(c.slug()), c.name());
        }
    }
}
