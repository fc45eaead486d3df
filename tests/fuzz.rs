//! Fuzzing with proptest (cargo-fuzz needs a nightly toolchain): the manifest reader, the
//! `--filter` parser and the dead-letter header decoder get arbitrary input and
//! structure-aware mutations of valid input. Each target asserts that nothing panics and
//! that every error is a proper one (for the manifest reader: it names the file, and the
//! document where there is one).
//!
//! Bounded by case count, not time: [`CASES`] per target (`PROPTEST_CASES` overrides it),
//! from a fixed seed ([`SEED`]; `PROPTEST_RNG_SEED` overrides it), which runs in a few
//! seconds on 2 cores in a debug build. Each
//! target prints `fuzz TARGET: N cases, 0 panics` on stderr (written past the test
//! harness's capture, so `cargo test` shows it) when it ends without a failure; a panic
//! fails the test with the shrunk input.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::{DeadLetter, Inspection};
use dlq_operator::manifest::ManifestError;
use lapin::types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString};
use lapin::BasicProperties;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

/// Cases per target (with the mutations of each case).
const CASES: u32 = 1_000;

/// The random seed when PROPTEST_RNG_SEED does not give one.
const SEED: u64 = 14;

/// Runs `test` on `strategy` for the case budget, counting the cases, and reports the
/// count on stderr. Panics (failing the test) with proptest's shrunk input on a failure.
fn fuzz<S: Strategy>(
    target: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    // `Config::default()` reads PROPTEST_RNG_SEED; without it the seed is fixed, so a CI
    // run is repeatable (set the variable to explore other cases).
    let mut config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    let seed = config.rng_seed;
    let mut runner = TestRunner::new(config);
    let count = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&strategy, |input| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        test(input)
    });
    if let Err(e) = result {
        panic!("fuzz {target}: {e}");
    }
    let n = count.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(
        std::io::stderr(),
        "fuzz {target}: {n} cases, 0 panics ({seed:?})"
    );
}

// ---------------------------------------------------------------------------------------
// The manifest reader
// ---------------------------------------------------------------------------------------

/// The example manifests (as `-f examples/` reads them, plus the DeadLetterReplay of
/// examples/replay/, which the reader refuses by kind).
fn seeds() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let read = |p: PathBuf| std::fs::read_to_string(&p).expect("example");
    let mut files: Vec<String> = [
        "order-events.yaml",
        "payment-callback.yaml",
        "rabbitmq-secret.yaml",
    ]
    .into_iter()
    .map(|f| read(root.join(f)))
    .collect();
    files.push(read(root.join("replay/order-events-timeouts.yaml")));
    let all = files[..3].join("\n---\n");
    files.push(all);
    files
}

/// Values a mutation puts into a line: huge, odd and broken ones.
fn odd_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("99999999999999999999999".to_string()),
        Just("-99999999999999999999999".to_string()),
        Just("1e308".to_string()),
        Just("-1e308".to_string()),
        Just(".nan".to_string()),
        Just(".inf".to_string()),
        Just("0x7fffffffffffffff".to_string()),
        Just("99999999999999999999999ms".to_string()),
        Just("-1s".to_string()),
        Just("~".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("\"\\u0000\"".to_string()),
        Just("\u{1b}[31mred".to_string()),
        Just("\u{202e}evil".to_string()),
        Just("\u{feff}".to_string()),
        Just("&a x".to_string()),
        Just("*a".to_string()),
        Just("!!binary aGVsbG8=".to_string()),
        Just("|\n  block".to_string()),
        (1usize..400).prop_map(|n| "{a: ".repeat(n)),
        (1usize..400).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n))),
        (1usize..300).prop_map(|n| "- ".repeat(n) + "x"),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        "\\PC{0,20}",
        any::<String>(),
    ]
}

/// One change to the lines of a manifest.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    /// Replace what follows the line's `:` (or the whole line) with the value.
    Value(usize, String),
    Insert(usize, String),
    Indent(usize, bool),
    Truncate(usize, usize),
    Swap(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let line = any::<prop::sample::Index>().prop_map(|i| i.index(1 << 20));
    prop_oneof![
        line.clone().prop_map(Mutation::Delete),
        line.clone().prop_map(Mutation::Duplicate),
        (line.clone(), odd_value()).prop_map(|(l, v)| Mutation::Value(l, v)),
        (
            line.clone(),
            prop_oneof![
                Just("---".to_string()),
                Just("...".to_string()),
                Just("%YAML 1.1".to_string()),
                Just("  extra: field".to_string()),
                odd_value()
            ]
        )
            .prop_map(|(l, v)| Mutation::Insert(l, v)),
        (line.clone(), any::<bool>()).prop_map(|(l, more)| Mutation::Indent(l, more)),
        (line.clone(), 0usize..80).prop_map(|(l, at)| Mutation::Truncate(l, at)),
        (line.clone(), line).prop_map(|(a, b)| Mutation::Swap(a, b)),
    ]
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for m in mutations {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let n = lines.len();
        match m.clone() {
            Mutation::Delete(i) => {
                lines.remove(i % n);
            }
            Mutation::Duplicate(i) => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            Mutation::Value(i, v) => {
                let l = &mut lines[i % n];
                *l = match l.split_once(':') {
                    Some((key, _)) => format!("{key}: {v}"),
                    None => v,
                };
            }
            Mutation::Insert(i, v) => lines.insert(i % (n + 1), v),
            Mutation::Indent(i, more) => {
                let l = &mut lines[i % n];
                if more {
                    l.insert_str(0, "  ");
                } else if let Some(rest) = l.strip_prefix("  ") {
                    *l = rest.to_string();
                }
            }
            Mutation::Truncate(i, at) => {
                let l = &mut lines[i % n];
                let cut = l.char_indices().nth(at).map_or(l.len(), |(b, _)| b);
                l.truncate(cut);
            }
            Mutation::Swap(a, b) => lines.swap(a % n, b % n),
        }
    }
    lines.join("\n") + "\n"
}

/// A manifest text: arbitrary, or an example with mutations.
fn manifest_text() -> impl Strategy<Value = String> {
    let seeds = seeds();
    prop_oneof![
        1 => any::<String>(),
        1 => prop::collection::vec(any::<u8>(), 0..400)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => "[-:\\[\\]{}#&*!|>'\"%@`, \n\ta-z0-9]{0,200}",
        6 => (prop::sample::select(seeds), prop::collection::vec(mutation(), 1..6))
            .prop_map(|(seed, ms)| apply(&seed, &ms)),
    ]
}

/// Nesting depth of a parsed value (a scalar 0, a collection one more than its deepest
/// key or item).
fn depth(v: &serde_yaml_ng::Value) -> usize {
    match v {
        serde_yaml_ng::Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
        serde_yaml_ng::Value::Mapping(m) => {
            1 + m
                .iter()
                .map(|(k, v)| depth(k).max(depth(v)))
                .max()
                .unwrap_or(0)
        }
        serde_yaml_ng::Value::Tagged(t) => depth(&t.value),
        _ => 0,
    }
}

/// The deepest nesting of every document of `text`, if the parser reads all of them.
fn parsed_depth(text: &str) -> Option<usize> {
    use serde::Deserialize;
    let mut deepest = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        deepest = deepest.max(depth(&serde_yaml_ng::Value::deserialize(doc).ok()?));
    }
    Some(deepest)
}

/// The whole reader: file, YAML, kinds, fields, validation and planning.
#[test]
fn fuzz_manifest_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fuzz.yaml");
    fuzz("manifest reader", manifest_text(), |text| {
        std::fs::write(&file, &text).expect("write");
        if let Err(e) = dlq_operator::standalone::load_and_plan(std::slice::from_ref(&file)) {
            let message = e.to_string();
            prop_assert!(message.contains("fuzz.yaml"), "no file in {message:?}");
            let in_document = matches!(
                e,
                ManifestError::Yaml { .. }
                    | ManifestError::Document { .. }
                    | ManifestError::Field { .. }
                    | ManifestError::Duplicate { .. }
            );
            prop_assert!(
                !in_document || message.contains("(document "),
                "no document in {message:?}"
            );
        }
        // The nesting pre-scan never refuses what the parser reads: its depth is never
        // more than the parsed one.
        if let Some(d) = parsed_depth(&text) {
            let found = dlq_operator::nesting::find_too_deep(&text, d);
            prop_assert!(found.is_none(), "pre-scan deeper than {d}: {found:?}");
        }
        Ok(())
    });
}

/// A JSON value with strings full of YAML syntax (brackets, quotes, `#`, `: `).
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let text = "[\\[\\]{}#:,'\" \\\\a-z\n\t-]{0,12}";
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        text.prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(40, 200, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(text, inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Nesting depth of a JSON value, counted as [`depth`] counts a YAML one.
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// On flow text (JSON), alone or as the value of a block key or entry after text that
/// looks like brackets, the pre-scan counts exactly the depth serde_yaml_ng parses: it
/// sees every level the parser sees, and no more.
#[test]
fn fuzz_nesting_pre_scan_on_flow_text() {
    let layouts = prop::sample::select(vec![
        "{}",
        "spec: {}",
        "- {}",
        "a: \"[[\" # [[\nb: |\n  [[[[\nc: x[[\n  [[\nd: {}",
        "---\nkind: x\n---\nspec:\n  deep: {}",
    ]);
    fuzz(
        "nesting pre-scan (flow text)",
        (json_value(), layouts),
        |(value, layout)| {
            let json = serde_json::to_string(&value).expect("JSON");
            let text = layout.replace("{}", &json) + "\n";
            let d = parsed_depth(&text).expect("serde_yaml_ng reads JSON in these layouts");
            prop_assert!(d >= json_depth(&value), "{}", text);
            prop_assert_eq!(
                dlq_operator::nesting::find_too_deep(&text, d),
                None,
                "{}",
                text
            );
            if d > 0 {
                let found = dlq_operator::nesting::find_too_deep(&text, d - 1);
                prop_assert!(found.is_some(), "depth {} not seen in {}", d, text);
            }
            Ok(())
        },
    );
}

/// `load_str` on text alone, without a file (what the reader does per file).
#[test]
fn fuzz_manifest_text() {
    fuzz("manifest text", manifest_text(), |text| {
        let mut out = dlq_operator::manifest::Manifests::default();
        if let Err(e) = dlq_operator::manifest::load_str(Path::new("t.yaml"), &text, &mut out) {
            prop_assert!(e.to_string().contains("t.yaml"), "{e}");
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// The dead-letter header decoder
// ---------------------------------------------------------------------------------------

/// Any AMQP field value, nested up to three levels.
fn amqp_value() -> impl Strategy<Value = AMQPValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<f32>().prop_map(AMQPValue::Float),
        any::<f64>().prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        "\\PC{0,40}".prop_map(|s| AMQPValue::ShortString(s.as_str().into())),
        any::<String>().prop_map(|s| AMQPValue::LongString(LongString::from(s))),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| AMQPValue::LongString(LongString::from(b))),
        "[0-9 -]{0,25}".prop_map(|s| AMQPValue::LongString(LongString::from(s))),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        prop::collection::vec(any::<u8>(), 0..32)
            .prop_map(|b| AMQPValue::ByteArray(ByteArray::from(b))),
        Just(AMQPValue::Void),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6)
                .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
            prop::collection::vec((header_name(), inner), 0..6).prop_map(|kv| {
                let mut t = FieldTable::default();
                for (k, v) in kv {
                    t.insert(k.as_str().into(), v);
                }
                AMQPValue::FieldTable(t)
            }),
        ]
    })
}

/// Header names: the contract's, RabbitMQ's (`x-death` and its fields) and any other.
fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "dlq-retry-count",
            "dlq-error-class",
            "dlq-last-error",
            "dlq-first-failed-at",
            "dlq-last-failed-at",
            "dlq-original-exchange",
            "dlq-original-routing-key",
            "dlq-original-queue",
            "dlq-reason",
            "dlq-last-delay-ms",
            "dlq-replayed-at",
            "dlq-replay-id",
            "dlq-replay-count",
            "x-death",
            "x-delivery-count",
            "x-first-death-reason",
            "reason",
            "queue",
            "time",
            "count",
            "exchange",
            "routing-keys",
        ])
        .prop_map(str::to_string),
        "\\PC{0,30}",
    ]
}

/// An `x-death` header: an array of tables of RabbitMQ's fields with values of any type,
/// or something else entirely.
fn x_death() -> impl Strategy<Value = AMQPValue> {
    let entry = prop::collection::vec(
        (
            prop::sample::select(vec![
                "reason",
                "queue",
                "time",
                "count",
                "exchange",
                "routing-keys",
            ]),
            amqp_value(),
        ),
        0..7,
    )
    .prop_map(|kv| {
        let mut t = FieldTable::default();
        for (k, v) in kv {
            t.insert(k.into(), v);
        }
        AMQPValue::FieldTable(t)
    });
    prop_oneof![
        prop::collection::vec(entry, 0..4).prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
        amqp_value(),
    ]
}

/// Message properties with arbitrary headers (and an `x-death`), message id and
/// timestamp, and a body.
fn message() -> impl Strategy<Value = (BasicProperties, Vec<u8>, usize)> {
    (
        prop::collection::vec((header_name(), amqp_value()), 0..12),
        prop::option::of(x_death()),
        prop::option::of("\\PC{0,40}"),
        prop::option::of(any::<u64>()),
        prop::collection::vec(any::<u8>(), 0..600),
        prop_oneof![Just(0usize), Just(3), Just(256), Just(usize::MAX)],
    )
        .prop_map(|(headers, death, id, ts, body, preview)| {
            let mut t = FieldTable::default();
            for (k, v) in headers {
                t.insert(k.as_str().into(), v);
            }
            if let Some(d) = death {
                t.insert("x-death".into(), d);
            }
            let mut props = BasicProperties::default().with_headers(t);
            if let Some(id) = id {
                props = props.with_message_id(id.as_str().into());
            }
            if let Some(ts) = ts {
                props = props.with_timestamp(ts);
            }
            (props, body, preview)
        })
}

/// Reading a dead letter, summarising it, its replay copy and the consumer helper's
/// state: no panic, and the report serialises.
#[test]
fn fuzz_dead_letter_headers() {
    fuzz(
        "dead-letter header decoder",
        (message(), any::<u64>()),
        |((props, body, preview), now)| {
            let letter = DeadLetter::read("q.dlq", &props, &body, preview);
            prop_assert!(letter.body_preview.len() <= preview, "{letter:?}");
            prop_assert_eq!(letter.body_bytes, body.len());
            serde_json::to_string(&letter).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut report = Inspection::default();
            report.add(letter.clone(), now, 2);
            let _ = report.table();
            let _ = dlq_operator::client::headers::FailureState::from_properties(&props);
            let copy = dlq_operator::dlq::replay_properties(&props, "fuzz-replay", now);
            let again = DeadLetter::read("q", &copy, &body, preview);
            prop_assert!(again.replay_count >= 1, "{again:?}");
            for expr in [
                "class=timeout",
                "reason!=rejected",
                "age>1d",
                "age<1s",
                "header.x-death=1",
            ] {
                if let Ok(f) = Filter::parse(&[expr]) {
                    let _ = f.matches(&letter, now);
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------
// The filter parser
// ---------------------------------------------------------------------------------------

/// A filter expression: arbitrary text, or terms built from keys, operators and values.
fn filter_expr() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "class",
            "reason",
            "queue",
            "age",
            "header.",
            "header.x-death",
            "CLASS",
            " age ",
            ""
        ])
        .prop_map(str::to_string),
        "\\PC{0,12}",
    ];
    let op = prop::sample::select(vec!["=", "!=", ">", "<", ">=", "==", "!", "", "=!="]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "timeout",
            "1d",
            "0s",
            "99999999999999999999999ms",
            "-1s",
            "1h30m",
            ""
        ])
        .prop_map(str::to_string),
        odd_value(),
    ];
    let term = (key, op, value).prop_map(|(k, o, v)| format!("{k}{o}{v}"));
    prop_oneof![
        1 => any::<String>(),
        1 => "[a-z.,=!<>0-9 -]{0,40}",
        4 => prop::collection::vec(term, 1..5).prop_map(|t| t.join(",")),
    ]
}

/// Parsing filters and matching them: no panic; an error names the offending term.
#[test]
fn fuzz_filter_parser() {
    let letter = DeadLetter::read("q", &BasicProperties::default(), b"", 0);
    fuzz(
        "filter parser",
        (prop::collection::vec(filter_expr(), 1..3), any::<u64>()),
        |(exprs, now)| {
            match Filter::parse(&exprs) {
                Ok(f) => {
                    let _ = f.matches(&letter, now);
                }
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(message.starts_with("--filter "), "{message}");
                    prop_assert!(!e.reason.is_empty(), "{message}");
                    prop_assert!(
                        exprs.iter().any(|x| x.contains(e.term.as_str())),
                        "term {:?} not in {exprs:?}",
                        e.term
                    );
                }
            }
            Ok(())
        },
    );
}
