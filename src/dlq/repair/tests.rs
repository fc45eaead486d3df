use super::*;
use crate::dlq::{REPLAYED_AT, REPLAY_COUNT, REPLAY_ID};
use crate::wire::headers::{ERROR_CLASS, RETRY_COUNT};
use serde_json::{json, Value};

fn opts(rewrite: Option<Rewrite>) -> ReplayOptions {
    let mut o = repair_options("m-1", Rewrite::new(), 5_000);
    o.replay_id = "run-1".into();
    o.rewrite = rewrite;
    o
}

fn original() -> Headers {
    [
        (RETRY_COUNT.to_string(), HeaderValue::I64(4)),
        (ERROR_CLASS.to_string(), HeaderValue::text("Timeout")),
        ("tenant".to_string(), HeaderValue::text("a")),
        ("keep".to_string(), HeaderValue::I32(7)),
        ("x-death".to_string(), HeaderValue::Array(vec![])),
    ]
    .into()
}

#[test]
fn invalid_json_names_line_and_column() {
    let e = check_json("{\n  \"a\": 1,\n  \"b\": }").expect_err("invalid");
    match &e {
        RewriteError::InvalidJson { line, column, .. } => assert_eq!((*line, *column), (3, 8)),
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.starts_with("invalid JSON at line 3, column 8: "),
        "{text}"
    );
    assert!(!text.contains(" at line 3 column"), "position once: {text}");
    assert!(check_json("[1, 2]").is_ok());
    assert!(Rewrite::new().with_json_body("{\"a\":").is_err());
    let r = Rewrite::new()
        .with_json_body(" {\"a\": 1} ")
        .expect("valid");
    assert_eq!(r.body(), Some(&b" {\"a\": 1} "[..]), "kept byte for byte");
}

#[test]
fn protected_headers_cannot_be_set_or_removed() {
    for name in [
        "x-death",
        "X-Death",
        "x-delivery-count",
        "dlq-replay-id",
        "DLQ-Reason",
        "dlq-repaired-at",
        "dlq-original-queue",
        "CC",
        "bcc",
    ] {
        let mut r = Rewrite::new();
        let e = r.set_header(name, &json!("v")).expect_err(name);
        assert!(matches!(e, RewriteError::Protected(..)), "{name}: {e}");
        assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
        let e = r.remove_header(name).expect_err(name);
        assert!(matches!(e, RewriteError::Protected(..)), "{name}: {e}");
        assert!(r.is_empty());
    }
    let mut r = Rewrite::new();
    let e = r
        .set_headers_json(r#"{"ok": 1, "x-death": []}"#)
        .expect_err("x-");
    assert!(matches!(e, RewriteError::Protected(..)), "{e}");
    assert!(protected("xdeath").is_none() && protected("tenant").is_none());
}

#[test]
fn header_values_and_names_are_checked() {
    let mut r = Rewrite::new();
    r.set_headers_json(r#"{"s": "t", "i": -3, "f": 1.5, "b": true}"#)
        .expect("valid");
    assert_eq!(r.set()["s"], HeaderValue::text("t"));
    assert_eq!(r.set()["i"], HeaderValue::I64(-3));
    assert_eq!(r.set()["f"], HeaderValue::F64(1.5));
    assert_eq!(r.set()["b"], HeaderValue::Bool(true));
    for (value, why) in [
        (json!(null), "null"),
        (json!([1]), "string, number or boolean"),
        (json!({"a": 1}), "string, number or boolean"),
        (json!(u64::MAX), "signed 64-bit"),
    ] {
        let e = r.set_header("h", &value).expect_err(why);
        assert!(e.to_string().contains(why), "{e}");
    }
    // Past u64, serde_json reads an integer as a float: refused, not stored rounded.
    let e = r
        .set_headers_json(r#"{"big": 18446744073709551616}"#)
        .expect_err("beyond 64 bits");
    assert!(e.to_string().contains("signed 64-bit"), "{e}");
    assert!(
        r.set_headers_json(r#"{"f": 1e300}"#).is_err(),
        "an integral float that large"
    );
    assert!(
        r.set_headers_json(r#"{"f": 2.5e3}"#).is_ok(),
        "a float of modest size"
    );
    assert!(matches!(
        r.set_header("", &json!(1)),
        Err(RewriteError::BadName(..))
    ));
    assert!(matches!(
        r.set_header(&"n".repeat(256), &json!(1)),
        Err(RewriteError::BadName(..))
    ));
    for (text, kind) in [("[]", "an array"), ("\"s\"", "a string"), ("null", "null")] {
        let e = Rewrite::new().set_headers_json(text).expect_err(text);
        assert_eq!(e, RewriteError::NotAnObject(kind));
    }
    let e = Rewrite::new().set_headers_json("{").expect_err("invalid");
    assert!(
        matches!(e, RewriteError::InvalidJson { line: 1, .. }),
        "{e}"
    );
    assert!(matches!(
        r.remove_header("s"),
        Err(RewriteError::SetAndRemoved(_))
    ));
    r.remove_header("gone").expect("remove");
    assert!(matches!(
        r.set_header("gone", &json!(1)),
        Err(RewriteError::SetAndRemoved(_))
    ));
}

#[test]
fn the_copy_gets_the_replay_headers_the_edits_and_the_repair_stamp() {
    let mut rw = Rewrite::new()
        .with_json_body("{\"fixed\":true}")
        .expect("body");
    rw.set_header("tenant", &json!("b")).expect("set");
    rw.set_header("new", &json!(2)).expect("set");
    rw.remove_header("keep").expect("remove");
    let (h, body) = copy_content(Some(&original()), b"old", &opts(Some(rw)), 9_000);
    assert_eq!(body, b"{\"fixed\":true}");
    assert_eq!(h["tenant"], HeaderValue::text("b"));
    assert_eq!(h["new"], HeaderValue::I64(2));
    assert!(!h.contains_key("keep"));
    assert!(
        !h.contains_key(RETRY_COUNT),
        "retry state reset as by a replay"
    );
    assert_eq!(h[ERROR_CLASS], HeaderValue::text("Timeout"));
    assert_eq!(h["x-death"], HeaderValue::Array(vec![]), "broker's kept");
    assert_eq!(h[REPAIRED_AT], HeaderValue::I64(9_000));
    assert_eq!(h[REPLAYED_AT], HeaderValue::I64(9_000));
    assert_eq!(h[REPLAY_ID], HeaderValue::text("run-1"));
    assert_eq!(h[REPLAY_COUNT], HeaderValue::I64(1));
    // Headers only: the body stays.
    let mut rw = Rewrite::new();
    rw.remove_header("tenant").expect("remove");
    let (h, body) = copy_content(Some(&original()), b"old", &opts(Some(rw)), 9_000);
    assert_eq!(body, b"old");
    assert!(!h.contains_key("tenant"));
    // No rewrite: a plain replay, no repair stamp, exactly as replay_headers.
    let (h, body) = copy_content(Some(&original()), b"old", &opts(None), 9_000);
    assert_eq!(body, b"old");
    assert_eq!(h, replay_headers(Some(&original()), "run-1", 9_000));
    assert!(!h.contains_key(REPAIRED_AT));
}

#[test]
fn repair_options_select_one_message_by_id() {
    let o = repair_options("a,b", Rewrite::new(), 1_000);
    assert_eq!(o.filter.terms, [Term::MessageId("a,b".into(), true)]);
    assert_eq!((o.limit, o.max_in_flight, o.dry_run), (Some(1), 1, false));
    assert_eq!(o.target, Target::OriginalQueue);
    assert!(o.replay_id.starts_with("1000-"), "{}", o.replay_id);
    assert!(o.rewrite.is_some());
}

fn replay_report() -> ReplayReport {
    ReplayReport {
        resource: "ns/\u{1b}[2Jdlq".into(),
        replay_id: "r".into(),
        dry_run: false,
        outcome: Outcome::Succeeded,
        total: 3,
        scanned: 3,
        matched: 0,
        replayed: 0,
        skipped: BTreeMap::new(),
        failed: BTreeMap::new(),
        resumed: 0,
        in_doubt: 0,
    }
}

#[test]
fn the_report_follows_the_replay_and_is_escaped() {
    let mut r = replay_report();
    let rep = RepairReport::from_replay("m\u{202e}1", &r, 7);
    assert_eq!(rep.outcome, RepairOutcome::NotFound);
    assert_eq!(rep.repaired_at_ms, None);
    let text = rep.to_string();
    assert!(text.contains("not found"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    r.matched = 1;
    r.skipped.insert("original queue \u{1b}x is not".into(), 1);
    let rep = RepairReport::from_replay("m1", &r, 7);
    assert!(matches!(rep.outcome, RepairOutcome::Skipped(ref w) if w.contains("original queue")));
    assert!(!rep.to_string().contains('\u{1b}'), "{rep}");
    r.failed.insert("nack".into(), 1);
    let rep = RepairReport::from_replay("m1", &r, 7);
    assert_eq!(rep.outcome, RepairOutcome::Failed("nack".into()));
    r.replayed = 1;
    let rep = RepairReport::from_replay("m1", &r, 7);
    assert_eq!(rep.outcome, RepairOutcome::Repaired);
    assert_eq!(rep.repaired_at_ms, Some(7));
    assert!(rep.to_string().contains("repaired"), "{rep}");
    let json = serde_json::to_value(&rep).expect("json");
    assert_eq!(json["outcome"], "repaired");
    assert_eq!(json["messageId"], "m1");
    let mut r = replay_report();
    r.outcome = Outcome::Partial;
    assert_eq!(
        RepairReport::from_replay("m1", &r, 7).outcome,
        RepairOutcome::Interrupted
    );
    let skipped = RepairReport {
        outcome: RepairOutcome::Skipped("why".into()),
        ..RepairReport::from_replay("m1", &r, 7)
    };
    let json = serde_json::to_value(&skipped).expect("json");
    assert_eq!(
        (json["outcome"].as_str(), json["reason"].as_str()),
        (Some("skipped"), Some("why"))
    );
}

#[test]
fn edited_headers_json_becomes_sets_and_removals() {
    let original: BTreeMap<String, Value> = [
        ("tenant".to_string(), json!("a")),
        ("n".to_string(), json!(7)),
        ("gone".to_string(), json!(true)),
        ("x-death".to_string(), json!([{"count": 1}])),
        ("dlq-reason".to_string(), json!("MaxRetriesExceeded")),
    ]
    .into();
    let mut r = Rewrite::new();
    r.edit_headers_json(
        &original,
        r#"{"tenant": "b", "n": 7, "new": 1.5, "x-death": [{"count": 1}],
            "dlq-reason": "MaxRetriesExceeded"}"#,
    )
    .expect("valid edit");
    assert_eq!(
        r.set().keys().collect::<Vec<_>>(),
        ["new", "tenant"],
        "n unchanged"
    );
    assert_eq!(r.removed().iter().collect::<Vec<_>>(), ["gone"]);
    for (edited, name) in [
        (
            r#"{"x-death": [], "dlq-reason": "MaxRetriesExceeded"}"#,
            "x-death",
        ),
        (r#"{"x-death": [{"count": 1}]}"#, "dlq-reason"),
        (
            r#"{"x-death": [{"count": 1}], "dlq-reason": "MaxRetriesExceeded", "CC": ["k"]}"#,
            "CC",
        ),
    ] {
        let e = Rewrite::new()
            .edit_headers_json(&original, edited)
            .expect_err(edited);
        assert!(matches!(e, RewriteError::Protected(..)), "{edited}: {e}");
        assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
    }
    let e = Rewrite::new()
        .edit_headers_json(&original, "[1]")
        .expect_err("array");
    assert_eq!(e, RewriteError::NotAnObject("an array"));
    let e = Rewrite::new()
        .edit_headers_json(&original, "{\n\"a\": }")
        .expect_err("invalid");
    assert!(
        matches!(e, RewriteError::InvalidJson { line: 2, .. }),
        "{e}"
    );
}
