//! Duration strings of the custom resources (docs/REFERENCE.md).
//!
//! A duration is one or more `<integer><unit>` components, units `ms`, `s`, `m`, `h`,
//! `d` (24 h) and `w` (7 d), e.g. `500ms`, `1m30s`, `7d`. The CRD schema's `pattern`
//! ([`DURATION_PATTERN`]) plus `maxLength` ([`DURATION_MAX_LENGTH`]) and [`parse_ms`] accept
//! exactly the same strings (a property test holds them to it).
//!
//! Each component is at most a few years ([`MAX_DIGITS`]: `99999999999ms`, `99999999s`,
//! `999999m`, `9999h`, `999d`, `99w`) and the string at most 64 characters, so the total
//! stays below 50 years. That bound matters to the API server: the CRDs' CEL rules compare
//! durations with CEL's `duration()`, which reads Go durations and fails with "type
//! conversion error" beyond about 292 years (`999999999h` did on Kubernetes 1.36). Every
//! duration the schema accepts converts, so the server reports a wrong value in the
//! field's own words (its `pattern`), never as a conversion error. No duration the
//! operator takes is longer than a year (e.g. the 365-day cap on TTLs).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ECMA-262 regular expression (as used by the Kubernetes OpenAPI `pattern`) that a
/// duration string must match in full.
pub const DURATION_PATTERN: &str =
    "^([0-9]{1,11}ms|[0-9]{1,8}s|[0-9]{1,6}m|[0-9]{1,4}h|[0-9]{1,3}d|[0-9]{1,2}w)+$";

/// Most digits of one component per unit (module documentation): each unit's largest
/// number is a few years at most.
pub const MAX_DIGITS: [(&str, usize); 6] =
    [("ms", 11), ("s", 8), ("m", 6), ("h", 4), ("d", 3), ("w", 2)];

/// Maximum length in characters of a duration string (schema `maxLength`).
pub const DURATION_MAX_LENGTH: usize = 64;

/// Longest message TTL the operator sets on a queue (retention, tier delays), in
/// milliseconds: 365 days. RabbitMQ 3.10.8 accepts far larger values but its expiry
/// timers misbehave with them (a `999999999w` retention crash-loops a quorum queue and
/// loses the message, tried by hand), so the operator refuses anything beyond a year.
pub const MAX_TTL_MS: u64 = 365 * 86_400_000;

/// Why a duration string was rejected by [`parse_ms`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration; expected e.g. 500ms, 30s, 1m30s, 7d")]
    Empty,
    /// The string is longer than [`DURATION_MAX_LENGTH`].
    #[error("duration {0:?} is longer than {DURATION_MAX_LENGTH} characters")]
    TooLong(String),
    /// The string does not follow `<integer><unit>` repeated.
    #[error(
        "invalid duration {0:?}: expected one or more <integer><unit> with units ms, s, m, h, d, w (e.g. 500ms, 1m30s, 7d)"
    )]
    Syntax(String),
    /// A number with more digits than its unit allows ([`MAX_DIGITS`], e.g. `10000h`): the
    /// syntax is right, the value too large.
    #[error(
        "duration {value:?} is too large: a number of {unit} has at most {digits} digits ({largest}{unit}); no duration the operator takes is longer than a year (e.g. 365d, 8760h, 52w)"
    )]
    TooLarge {
        /// The whole duration string.
        value: String,
        /// The unit of the component that is too long.
        unit: &'static str,
        /// The most digits that unit allows.
        digits: usize,
        /// The largest number of that unit (`digits` nines).
        largest: String,
    },
}

/// Parses a duration string into milliseconds.
///
/// Takes the string as written in a manifest; returns the total in **milliseconds**.
/// `d` is 24 h and `w` is 7 d (so `7d` is 604,800,000 ms).
///
/// # Errors
/// [`DurationError`] when the string is empty, longer than [`DURATION_MAX_LENGTH`], has a
/// number with more digits than its unit allows ([`DurationError::TooLarge`],
/// [`MAX_DIGITS`]), or is not of the form of [`DURATION_PATTERN`] (signs, spaces,
/// fractions and unknown units are rejected).
pub fn parse_ms(s: &str) -> Result<u64, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.chars().count() > DURATION_MAX_LENGTH {
        return Err(DurationError::TooLong(s.to_string()));
    }
    let syntax = || DurationError::Syntax(s.to_string());
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: u64 = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return Err(syntax());
        }
        let (unit, unit_ms): (&'static str, u64) = match bytes.get(i) {
            Some(b'm') if bytes.get(i + 1) == Some(&b's') => ("ms", 1),
            Some(b's') => ("s", 1_000),
            Some(b'm') => ("m", 60_000),
            Some(b'h') => ("h", 3_600_000),
            Some(b'd') => ("d", 86_400_000),
            Some(b'w') => ("w", 604_800_000),
            _ => return Err(syntax()),
        };
        let most = MAX_DIGITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map_or(0, |(_, d)| *d);
        if digits > most {
            // Right syntax, too many digits for the unit.
            return Err(DurationError::TooLarge {
                value: s.to_string(),
                unit,
                digits: most,
                largest: "9".repeat(most),
            });
        }
        // At most eleven ASCII digits: always fits in u64.
        let value: u64 = s[start..i].parse().map_err(|_| syntax())?;
        i += unit.len();
        // Bounded far below u64 (module documentation); saturating all the same, so no
        // input can ever panic.
        total = total.saturating_add(value.saturating_mul(unit_ms));
    }
    Ok(total)
}

/// Formats milliseconds as the shortest canonical duration string, largest units first
/// (`90000` → `1m30s`, `1500` → `1s500ms`, `0` → `0s`). Weeks are not used so that
/// `7d` stays `7d`. Below 1,000 days the result parses back to the same value with
/// [`parse_ms`]; longer (a worst-case retry duration in a status, say) it is for reading
/// only (more than the 3 digits of days [`MAX_DIGITS`] allows).
pub fn format_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    let mut rest = ms;
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000u64),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        let n = rest / size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
            rest %= size;
        }
    }
    out
}

/// A duration as written in a resource (e.g. `"1m30s"`).
///
/// Deserialising never fails on the content, so an object with a bad duration (written
/// by an older CRD, say) can still be read and reported with the field's path by
/// validation; call [`Duration::as_ms`] to parse it.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Duration(pub String);

impl Duration {
    /// Builds a duration from its string form (not validated until [`Duration::as_ms`]).
    pub fn new(s: impl Into<String>) -> Self {
        Duration(s.into())
    }

    /// Builds the canonical duration string for `ms` milliseconds (see [`format_ms`]).
    pub fn from_ms(ms: u64) -> Self {
        Duration(format_ms(ms))
    }

    /// Parses the duration into milliseconds; see [`parse_ms`] for the grammar and errors.
    pub fn as_ms(&self) -> Result<u64, DurationError> {
        parse_ms(&self.0)
    }

    /// The string as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "maxLength": DURATION_MAX_LENGTH,
            "description": "Duration: one or more <integer><unit>, units ms, s, m, h, d (24h), w (7d); e.g. 500ms, 1m30s, 7d."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        let cases = [
            ("500ms", 500),
            ("1s", 1_000),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            ("7d", 604_800_000),
            ("1w", 604_800_000),
            ("1ms1s", 1_001),
            ("0s", 0),
            ("168h", 604_800_000),
        ];
        for (s, want) in cases {
            assert_eq!(parse_ms(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "5 minutes",
            "-1s",
            "1",
            "s",
            "1.5s",
            "1S",
            "1ms ",
            " 1s",
            "1y",
            "1sm",
            "1234567890s",
            "+1s",
        ] {
            assert!(parse_ms(s).is_err(), "{s:?} should be rejected");
        }
    }

    /// A number that is too long is named as too large (with the way out), not as a
    /// syntax error: `99999999999999999999999ms` is well formed.
    #[test]
    fn too_many_digits_is_too_large_not_a_syntax_error() {
        let s = "99999999999999999999999ms";
        assert!(matches!(
            parse_ms(s),
            Err(DurationError::TooLarge {
                unit: "ms",
                digits: 11,
                ..
            })
        ));
        let message = parse_ms(s).map_err(|e| e.to_string()).unwrap_err();
        assert!(message.contains("too large"), "{message}");
        assert!(message.contains("99999999999ms"), "{message}");
        assert!(message.contains("365d"), "{message}");
        // Each unit has its own bound (a few years), which CEL's duration() can convert.
        let message = parse_ms("999999999h")
            .map_err(|e| e.to_string())
            .unwrap_err();
        assert!(message.contains("at most 4 digits (9999h)"), "{message}");
        assert_eq!(parse_ms("9999h"), Ok(9_999 * 3_600_000));
        assert_eq!(parse_ms("99w"), Ok(99 * 604_800_000));
        assert!(matches!(
            parse_ms("1234567890"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(
            parse_ms("1234567890x"),
            Err(DurationError::Syntax(_))
        ));
    }

    #[test]
    fn format_round_trips() {
        for ms in [
            0,
            1,
            999,
            1_000,
            1_500,
            60_000,
            90_000,
            3_600_000,
            604_800_000,
            86_399_999,
        ] {
            assert_eq!(parse_ms(&format_ms(ms)), Ok(ms), "{ms}");
        }
        assert_eq!(format_ms(5_000), "5s");
        assert_eq!(format_ms(300_000), "5m");
        assert_eq!(format_ms(604_800_000), "7d");
    }
}
