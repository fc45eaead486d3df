//! Property tests of the duration grammar (docs/REFERENCE.md): the parser and the CRD schema's
//! rules (`pattern` + `maxLength`) accept exactly the same strings, valid strings parse to
//! the sum of their components, and `format_ms` round-trips.

use std::sync::LazyLock;

use dlq_operator::duration::{
    format_ms, parse_ms, DurationError, DURATION_MAX_LENGTH, DURATION_PATTERN,
};
use proptest::prelude::*;
use regex::Regex;

static SCHEMA_PATTERN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(DURATION_PATTERN).expect("DURATION_PATTERN compiles"));

/// What the API server's schema accepts: the pattern (searched, as ECMA `test` does; the
/// pattern is anchored) and `maxLength` (all strings the pattern accepts are ASCII, so bytes
/// and characters agree).
fn schema_accepts(s: &str) -> bool {
    SCHEMA_PATTERN.is_match(s) && s.len() <= DURATION_MAX_LENGTH
}

/// Milliseconds per unit, written out here rather than taken from the crate.
fn unit_ms(unit: &str) -> u128 {
    match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60 * 1_000,
        "h" => 60 * 60 * 1_000,
        "d" => 24 * 60 * 60 * 1_000,
        "w" => 7 * 24 * 60 * 60 * 1_000,
        other => panic!("not a unit: {other}"),
    }
}

const UNITS: [&str; 6] = ["ms", "s", "m", "h", "d", "w"];

/// Most digits per unit, written out here rather than taken from the crate.
fn max_digits(unit: &str) -> usize {
    match unit {
        "ms" => 11,
        "s" => 8,
        "m" => 6,
        "h" => 4,
        "d" => 3,
        "w" => 2,
        other => panic!("not a unit: {other}"),
    }
}

/// 1..=8 components of 1..=(the unit's most) digits (leading zeros included) and a unit;
/// up to 104 characters, so some exceed the 64-character limit.
fn components() -> impl Strategy<Value = Vec<(String, &'static str)>> {
    let component = prop::sample::select(UNITS.to_vec()).prop_flat_map(|unit| {
        (
            proptest::string::string_regex(&format!("[0-9]{{1,{}}}", max_digits(unit)))
                .expect("digits regex"),
            Just(unit),
        )
    });
    prop::collection::vec(component, 1..=8)
}

fn join(parts: &[(String, &str)]) -> String {
    parts.iter().map(|(d, u)| format!("{d}{u}")).collect()
}

/// Characters that make near-misses likely: digits, unit letters (both cases), separators,
/// signs, fractions, other letters and a non-ASCII letter.
fn noise_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('0', '9'),
        4 => prop::sample::select(vec!['m', 's', 'h', 'd', 'w']),
        1 => prop::sample::select(vec!['M', 'S', 'H', 'D', 'W']),
        1 => prop::sample::select(vec![' ', '-', '.', '+', '\t', '\n', '_', ',']),
        1 => prop::sample::select(vec!['y', 'n', 'u', 'x', 'e', 'µ', 'é', '٣']),
    ]
}

fn noise_string() -> impl Strategy<Value = String> {
    prop::collection::vec(noise_char(), 0..=70).prop_map(|cs| cs.into_iter().collect())
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, char),
    Delete(usize),
    Replace(usize, char),
    Swap(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), noise_char()).prop_map(|(i, c)| Mutation::Insert(i, c)),
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), noise_char()).prop_map(|(i, c)| Mutation::Replace(i, c)),
        any::<usize>().prop_map(Mutation::Swap),
        (any::<usize>(), 1usize..=12).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(s: &str, m: &Mutation) -> String {
    let mut cs: Vec<char> = s.chars().collect();
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *m {
        Mutation::Insert(i, c) => {
            let len = cs.len();
            cs.insert(i % (len + 1), c);
        }
        Mutation::Delete(i) => {
            if !cs.is_empty() {
                let len = cs.len();
                cs.remove(at(i, len));
            }
        }
        Mutation::Replace(i, c) => {
            if !cs.is_empty() {
                let len = cs.len();
                cs[at(i, len)] = c;
            }
        }
        Mutation::Swap(i) => {
            if cs.len() >= 2 {
                let j = i % (cs.len() - 1);
                cs.swap(j, j + 1);
            }
        }
        Mutation::Duplicate(i, n) => {
            let len = cs.len();
            let start = at(i, len);
            let end = (start + n).min(len);
            let chunk: Vec<char> = cs[start..end].to_vec();
            cs.splice(end..end, chunk);
        }
    }
    cs.into_iter().collect()
}

fn mutated() -> impl Strategy<Value = String> {
    (components(), prop::collection::vec(mutation(), 1..=3)).prop_map(|(parts, ms)| {
        let mut s = join(&parts);
        for m in &ms {
            s = apply(&s, m);
        }
        s
    })
}

fn agree(s: &str) -> Result<(), TestCaseError> {
    let parsed = parse_ms(s);
    prop_assert_eq!(
        parsed.is_ok(),
        schema_accepts(s),
        "parser and schema disagree on {:?}: parser {:?}",
        s,
        parsed
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Well-formed strings: accepted by both iff within the length limit, and the value is
    /// the sum of the components.
    #[test]
    fn valid_strings_parse_to_their_sum(parts in components()) {
        let s = join(&parts);
        agree(&s)?;
        let want: u128 = parts
            .iter()
            .map(|(d, u)| d.parse::<u128>().expect("digits") * unit_ms(u))
            .sum();
        if s.len() <= DURATION_MAX_LENGTH {
            prop_assert!(SCHEMA_PATTERN.is_match(&s), "{s:?} must match the pattern");
            prop_assert_eq!(parse_ms(&s).map(u128::from), Ok(want), "{:?}", s);
        } else {
            prop_assert_eq!(parse_ms(&s), Err(DurationError::TooLong(s.clone())));
        }
    }

    /// Arbitrary strings over a near-miss alphabet.
    #[test]
    fn noise_is_judged_alike(s in noise_string()) {
        agree(&s)?;
    }

    /// Valid strings with one to three random edits.
    #[test]
    fn mutations_are_judged_alike(s in mutated()) {
        agree(&s)?;
    }

    /// Completely arbitrary Unicode strings.
    #[test]
    fn any_string_is_judged_alike(s in any::<String>()) {
        agree(&s)?;
    }

    /// `format_ms` output below 1,000 days is a valid duration (for the schema too) and
    /// parses back.
    #[test]
    fn format_round_trips(ms in 0u64..1_000 * 86_400_000) {
        let s = format_ms(ms);
        prop_assert!(schema_accepts(&s), "{s:?} rejected by the schema");
        prop_assert_eq!(parse_ms(&s), Ok(ms), "{:?}", s);
    }
}

#[test]
fn one_week_in_every_unit() {
    const WEEK_MS: u64 = 604_800_000;
    for s in ["7d", "1w", "168h", "10080m", "604800s", "604800000ms"] {
        assert_eq!(parse_ms(s), Ok(WEEK_MS), "{s}");
        assert!(schema_accepts(s), "{s}");
    }
}

#[test]
fn length_limit_is_inclusive() {
    // 64 characters: accepted by both; 65: rejected by both.
    let at_limit = format!("{}s", "1".repeat(8)).repeat(6) + "0000000s" + "0s";
    assert_eq!(at_limit.len(), DURATION_MAX_LENGTH);
    assert!(schema_accepts(&at_limit));
    assert_eq!(parse_ms(&at_limit), Ok(6 * 11_111_111_000));
    let over = format!("{}s", "1".repeat(8)).repeat(6) + "0000000s" + "00s";
    assert_eq!(over.len(), DURATION_MAX_LENGTH + 1);
    assert!(SCHEMA_PATTERN.is_match(&over));
    assert!(!schema_accepts(&over));
    assert!(parse_ms(&over).is_err());
}

#[test]
fn known_edge_cases_are_judged_alike() {
    for s in [
        "",
        "0",
        "ms",
        "1ms",
        "1msms",
        "1m1s",
        "1sm",
        "1mss",
        "999999999w",
        "1000000000ms",
        "100w",
        "99w",
        "1000d",
        "999d",
        "10000h",
        "9999h",
        "1000000m",
        "100000000s",
        "100000000000ms",
        "99999999999ms",
        "0000000001s",
        "1s\n",
        "\n1s",
        "1s ",
        "1 s",
        "-1s",
        "+1s",
        "1.5s",
        "1S",
        "1µs",
        "١s",
        "1y",
    ] {
        assert_eq!(parse_ms(s).is_ok(), schema_accepts(s), "{s:?}");
    }
}
