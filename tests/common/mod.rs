//! Shared test helpers: temp manifest directories, running the CLI, unique names, and the
//! local RabbitMQ (127.0.0.1, guest/guest; started by .ci/run).
#![allow(dead_code)]

pub mod browser;
pub mod clients;
pub mod cluster;
pub mod console;
pub mod dlq;
pub mod e2e;
pub mod fake_api;
pub mod helm;
pub mod proxy;
pub mod redis_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes one `RELIABILITY …` line of figures (docs/RELIABILITY.md) straight to the
/// process's stderr, past the test harness's capture, so the log of `.ci/run` keeps them.
#[macro_export]
macro_rules! reliability {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "RELIABILITY {}", format_args!($($arg)*));
    }};
}

/// Management API of the local broker.
pub const MGMT: &str = "http://127.0.0.1:15672";
/// AMQP URI of the local broker.
pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A unique lower-case name with the given prefix.
pub fn unique(prefix: &str) -> String {
    use rand::Rng;
    let n: u32 = rand::rng().random();
    format!("{prefix}-{n:08x}")
}

/// Runs `dlq-operator` with `args`, returning its output.
pub fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run dlq-operator")
}

/// stdout + stderr as one string.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes `files` (name, content) into a fresh temp dir.
pub fn manifests(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content).expect("write manifest");
    }
    dir
}

/// Path of a file in a dir as a `String`.
pub fn path_str(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// A Secret manifest for the local broker with `password`.
pub fn secret_yaml(name: &str, user: &str, password: &str, mgmt: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: default\nstringData:\n  uri: amqp://{user}:{password}@127.0.0.1:5672/%2f\n  managementUri: {mgmt}\n"
    )
}

/// A RetryPolicy manifest with the given `spec` body (indented YAML under `spec:`).
pub fn policy_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}"
    )
}

/// A DeadLetterQueue manifest for `queue` using policy `policy` and secret `secret`,
/// with `extra` appended under `spec:` (indented by two spaces).
pub fn dlq_yaml(name: &str, queue: &str, policy: &str, secret: &str, extra: &str) -> String {
    format!(
        "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: {secret}\n  source:\n    queue: {queue}\n  retryPolicyRef:\n    name: {policy}\n{extra}"
    )
}

/// GET a management API path as JSON (guest/guest); `None` on 404.
pub async fn mgmt_get(path: &str) -> Option<serde_json::Value> {
    mgmt_get_at(MGMT, path).await
}

/// GET `path` of the management API at `base` as JSON (guest/guest); `None` on 404.
pub async fn mgmt_get_at(base: &str, path: &str) -> Option<serde_json::Value> {
    let resp = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .expect("management API reachable");
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert!(
        resp.status().is_success(),
        "GET {base}{path}: {}",
        resp.status()
    );
    Some(resp.json().await.expect("json"))
}

/// DELETE a management API path (ignores 404).
pub async fn mgmt_delete(path: &str) {
    mgmt_delete_at(MGMT, path).await
}

/// DELETE `path` of the management API at `base` (ignores 404).
pub async fn mgmt_delete_at(base: &str, path: &str) {
    let resp = reqwest::Client::new()
        .delete(format!("{base}{path}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .expect("management API reachable");
    assert!(
        resp.status().is_success() || resp.status() == reqwest::StatusCode::NOT_FOUND,
        "DELETE {base}{path}: {}",
        resp.status()
    );
}

/// Removes every queue, exchange and operator policy whose name starts with `prefix`
/// (test objects only) from the local broker.
pub async fn cleanup(prefix: &str) {
    cleanup_via(MGMT, prefix).await
}

/// [`cleanup`] through the management API at `base` (a node of the test cluster).
pub async fn cleanup_via(base: &str, prefix: &str) {
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    if let Some(qs) = mgmt_get_at(base, "/api/queues/%2F?columns=name").await {
        for q in qs.as_array().into_iter().flatten() {
            if let Some(n) = q["name"].as_str().filter(|n| n.starts_with(prefix)) {
                mgmt_delete_at(base, &format!("/api/queues/%2F/{}", enc(n))).await;
            }
        }
    }
    if let Some(xs) = mgmt_get_at(base, "/api/exchanges/%2F").await {
        for x in xs.as_array().into_iter().flatten() {
            if let Some(n) = x["name"].as_str().filter(|n| n.starts_with(prefix)) {
                mgmt_delete_at(base, &format!("/api/exchanges/%2F/{}", enc(n))).await;
            }
        }
    }
    if let Some(ps) = mgmt_get_at(base, "/api/policies/%2F").await {
        for p in ps.as_array().into_iter().flatten() {
            if let Some(n) = p["name"].as_str().filter(|n| n.contains(prefix)) {
                mgmt_delete_at(base, &format!("/api/policies/%2F/{}", enc(n))).await;
            }
        }
    }
    delete_owner_records_at(base, prefix).await;
}

/// Deletes the ownership records (global parameters `dlq-operator.owner.…`) of the
/// objects of vhost `/` whose name starts with `prefix`.
pub async fn delete_owner_records(prefix: &str) {
    delete_owner_records_at(MGMT, prefix).await
}

/// [`delete_owner_records`] through the management API at `base`.
pub async fn delete_owner_records_at(base: &str, prefix: &str) {
    let Some(params) = mgmt_get_at(base, "/api/global-parameters").await else {
        return;
    };
    for p in params.as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default();
        let object = p["value"]["name"].as_str().unwrap_or_default();
        if name.starts_with(dlq_operator::rabbitmq::ownership::RECORD_PREFIX)
            && p["value"]["vhost"] == "/"
            && object.starts_with(prefix)
        {
            mgmt_delete_at(base, &format!("/api/global-parameters/{name}")).await;
        }
    }
}

/// Root of the crate (for examples/).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Ready-message count of `queue` from an AMQP passive declare (immediate, unlike the
/// management statistics); panics if the queue does not exist.
pub async fn passive_ready_count(uri: &str, queue: &str) -> u32 {
    let conn = lapin::Connection::connect(uri, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    let declared = ch
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("queue {queue} should exist: {e}"));
    let _ = conn.close(200, "bye".into()).await;
    declared.message_count()
}

/// Publishes `n` persistent messages to `queue` through the default exchange, with
/// publisher confirms.
pub async fn publish_persistent(queue: &str, n: usize) {
    let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    for i in 0..n {
        ch.basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            format!("m{i}").as_bytes(),
            lapin::BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
    let _ = conn.close(200, "bye".into()).await;
}

/// Publishes `n` persistent messages to `queue` and returns how many the broker
/// confirmed with an ack, retrying a nacked one up to 5 times (a quorum queue under load
/// may refuse a publish).
pub async fn publish_acked(queue: &str, n: usize) -> usize {
    let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let mut acked = 0;
    for i in 0..n {
        for _attempt in 0..5 {
            let confirm = ch
                .basic_publish(
                    "".into(),
                    queue.into(),
                    Default::default(),
                    format!("m{i}").as_bytes(),
                    lapin::BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .expect("publish")
                .await
                .expect("confirm");
            if confirm.is_ack() {
                acked += 1;
                break;
            }
            eprintln!("publish to {queue} nacked: {confirm:?}; retrying");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    let _ = conn.close(200, "bye".into()).await;
    acked
}

/// The lines `child` writes to its (piped) stderr, as they come, read on a thread of their
/// own so that a test can wait for one with a timeout.
pub fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}
