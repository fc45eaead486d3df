//! `dlq-operator report --standalone` against the real RabbitMQ: the scores from the
//! files and what the broker shows (a message waiting in a retry tier makes retries live,
//! worth exactly its share), worst first, in every output format; a broker that cannot be
//! read is said on stderr with exit 1; bad flags and manifests are one clear error.

mod common;

use serde_json::Value;

use common::{cleanup, cli, manifests, policy_yaml, secret_yaml, text, unique, MGMT};
use dlq_operator::maturity::{share, Item, Weights};

/// Manifests of two DeadLetterQueues on the local broker (management API `mgmt`): `bare`
/// (classic source, `DropHead`, nothing else) and `full` (quorum, partitions, threshold,
/// growth, a jittered policy with a retry window), each with a 10 min tier.
fn two_resources(prefix: &str, mgmt: &str) -> tempfile::TempDir {
    let dlq = |name: &str, policy: &str, spec: &str| {
        format!(
            "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  retryPolicyRef:\n    name: {policy}\n{spec}"
        )
    };
    manifests(&[
        ("s.yaml", &secret_yaml("s", "guest", "guest", mgmt)),
        ("p-bare.yaml", &policy_yaml("bare", "  maxRetries: 1\n  tiers: [10m]\n")),
        (
            "p-full.yaml",
            &policy_yaml(
                "full",
                "  maxRetries: 2\n  tiers: [10m]\n  maxRetryDuration: 1h\n  backoff:\n    strategy: FullJitter\n",
            ),
        ),
        (
            "bare.yaml",
            &dlq(
                "bare",
                "bare",
                &format!("  source:\n    queue: {prefix}-bare\n    queueType: Classic\n  deadLetter:\n    overflow: DropHead\n"),
            ),
        ),
        (
            "full.yaml",
            &dlq(
                "full",
                "full",
                &format!("  source:\n    queue: {prefix}-full\n  deadLetter:\n    partitionBy: ErrorClass\n  monitoring:\n    threshold: 10\n    growthPerMinute: 5\n"),
            ),
        ),
    ])
}

/// `report --standalone -f dir -o json`: exit code and rows.
fn report_json(dir: &str) -> (Option<i32>, Vec<Value>, String) {
    let out = cli(&["report", "--standalone", "-f", dir, "-o", "json"]);
    let rows =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (
        out.status.code(),
        rows,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn holds(row: &Value, item: &str) -> bool {
    row["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .any(|c| c["item"] == item && c["holds"] == true)
}

#[tokio::test]
async fn report_scores_from_files_and_the_broker_worst_first() {
    let prefix = unique("maturity");
    let dir = two_resources(&prefix, MGMT);
    let path = dir.path().display().to_string();
    let out = cli(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", text(&out));

    let (code, rows, _) = report_json(&path);
    assert_eq!(code, Some(0));
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["bare", "full"], "worst first");
    let w = Weights::default();
    // bare: its RetryPolicy (found, Ready from files), the default classification,
    // rules enabled. full: everything but a live retry path and a replay.
    let expected = |items: &[Item]| -> f64 {
        let sum: f64 = items.iter().map(|i| share(*i, &w)).sum();
        (sum * 1000.0).round() / 1000.0
    };
    assert_eq!(
        rows[0]["score"].as_f64(),
        Some(expected(&[
            Item::RetryPolicyReady,
            Item::NonRetryableClasses,
            Item::AlertRules
        ]))
    );
    let full: Vec<Item> = Item::ALL
        .into_iter()
        .filter(|i| !matches!(i, Item::LiveRetryPath | Item::Replayed))
        .collect();
    assert_eq!(rows[1]["score"].as_f64(), Some(expected(&full)));
    assert!(!holds(&rows[1], "liveRetryPath"));

    // A retry waits in full's 10 min tier: once the broker's statistics show it, retries
    // are live, worth exactly that item's share.
    let (_conn, ch) = common::dlq::confirm_channel().await;
    common::dlq::publish(
        &ch,
        &format!("{prefix}-full.retry.10m"),
        "m1",
        Default::default(),
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let live = loop {
        let (_, rows, _) = report_json(&path);
        let row = rows
            .iter()
            .find(|r| r["name"] == "full")
            .expect("full")
            .clone();
        if holds(&row, "liveRetryPath") || std::time::Instant::now() > deadline {
            break row;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(holds(&live, "liveRetryPath"), "{live}");
    let mut with_retries = full.clone();
    with_retries.push(Item::LiveRetryPath);
    assert_eq!(live["score"].as_f64(), Some(expected(&with_retries)));
    assert_eq!(
        live["missing"].as_array().map(Vec::len),
        Some(1),
        "only the replay is missing: {live}"
    );

    // The table and YAML say the same.
    let out = cli(&["report", "--standalone", "-f", &path]);
    let table = text(&out);
    assert!(out.status.success(), "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("DEADLETTERQUEUE") && lines[0].contains("MATURITY"),
        "{table}"
    );
    assert!(lines[1].starts_with("default/bare"), "{table}");
    assert!(
        table.contains("  - deadLetter: set spec.source.queueType: Quorum"),
        "{table}"
    );
    let out = cli(&["report", "--standalone", "-f", &path, "-o", "yaml"]);
    let yaml: Vec<Value> = serde_yaml_ng::from_slice(&out.stdout).expect("yaml");
    assert_eq!(yaml.len(), 2);

    // Other weights: the same items, another score.
    let out = cli(&[
        "report",
        "--standalone",
        "-f",
        &path,
        "-o",
        "json",
        "--maturity-weights",
        "0,0,1",
    ]);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    let bare = rows.iter().find(|r| r["name"] == "bare").expect("bare");
    assert_eq!(
        bare["score"].as_f64(),
        bare["monitoring"].as_f64(),
        "{bare}"
    );
    cleanup(&prefix).await;
}

#[test]
fn an_unreadable_broker_is_said_and_exits_1_with_the_scores_from_the_files() {
    let prefix = unique("maturity-down");
    let dir = two_resources(&prefix, "http://127.0.0.1:1");
    let path = dir.path().display().to_string();
    let (code, rows, stderr) = report_json(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(rows.len(), 2, "the report is still printed");
    assert!(
        stderr.contains("warning: vhost / of http://guest:***@127.0.0.1:1/")
            && stderr.contains("unreachable")
            && stderr.contains("are not checked"),
        "{stderr}"
    );
}

#[test]
fn bad_flags_and_manifests_are_one_clear_error() {
    let prefix = unique("maturity-bad");
    let dir = two_resources(&prefix, MGMT);
    let path = dir.path().display().to_string();
    let report_with = |weights: &str| -> Vec<String> {
        [
            "report",
            "--standalone",
            "-f",
            &path,
            "--maturity-weights",
            weights,
        ]
        .map(String::from)
        .to_vec()
    };
    let plain = |args: &[&str]| -> Vec<String> { args.iter().map(|a| a.to_string()).collect() };
    for (args, code, needle) in [
        (report_with("0.5,0.5,0.5"), 2, "sum to 1.5, not 1"),
        (report_with("0.5,0.5"), 2, "is not three weights"),
        (report_with("-1,1,1"), 2, "outside 0..1"),
        (
            plain(&["report", "--standalone", "-f", &path, "-n", "default"]),
            1,
            "-n/--namespace is for the cluster",
        ),
        (plain(&["report", "--standalone"]), 1, "needs -f PATH"),
        (
            plain(&["report", "-f", &path]),
            1,
            "-f PATH is for `report --standalone`",
        ),
        (
            plain(&["report", "-n", "Not_A_Namespace"]),
            1,
            "not a namespace name",
        ),
        (
            plain(&["run", "--maturity-weights", "1,1,1"]),
            2,
            "sum to 3, not 1",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli(&args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{t}");
    }
    // A manifest with a bad field: the file, the resource and the field are named.
    std::fs::write(
        dir.path().join("bare.yaml"),
        format!("apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: bare\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  retryPolicyRef:\n    name: bare\n  source:\n    queue: {prefix}-bare\n    queueType: Sideways\n"),
    )
    .expect("write");
    let out = cli(&["report", "--standalone", "-f", &path]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("bare.yaml") && t.contains("queueType"), "{t}");
}
