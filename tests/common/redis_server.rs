//! The local Redis 7 (127.0.0.1:6379, or `DLQ_REDIS_URI`; started by `.ci/run`) for the
//! Redis adapter's tests, and a consumer that knows nothing of retries.

use std::time::Duration;

use dlq_operator::redis::connection::Connection;
use redis::aio::ConnectionLike;

/// The consumer group of the tests' streams.
pub const GROUP: &str = "workers";

/// URI of the Redis the tests use.
pub fn uri() -> String {
    std::env::var("DLQ_REDIS_URI").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

/// A connection to the test Redis; `None` after printing that `test` is skipped when no
/// Redis answers (a test that needs it cannot run).
pub async fn connect(test: &str) -> Option<Connection> {
    match tokio::time::timeout(Duration::from_secs(15), Connection::open(&[uri()])).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            eprintln!("SKIPPED {test}: no Redis at {} ({e})", uri());
            None
        }
        Err(_) => {
            eprintln!("SKIPPED {test}: Redis at {} did not answer in 15 s", uri());
            None
        }
    }
}

/// One stream of an `XREADGROUP` answer: its key and its entries as `(id, [f1, v1, …])`.
type StreamReply = (String, Vec<(String, Vec<Vec<u8>>)>);

/// One delivery a consumer saw: the entry id, its `body` field and its
/// `dlq-retry-count` field (0 when absent), and when (ms since the test's start).
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: String,
    pub body: String,
    pub retry_count: u32,
    pub at_ms: u128,
}

/// Reads `stream` as consumer `consumer` of `group` until `stop`, never acknowledging
/// anything (a consumer that fails every entry and knows nothing of retries), and
/// returns what it saw. It has a connection of its own: a blocking read holds up every
/// other command on its connection.
pub async fn never_ack(
    stream: String,
    group: &'static str,
    consumer: &'static str,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<Seen> {
    never_ack_at(vec![uri()], stream, group, consumer, stop).await
}

/// [`never_ack`] on the Redis deployment at `uris` (a cluster's seed nodes).
pub async fn never_ack_at(
    uris: Vec<String>,
    stream: String,
    group: &'static str,
    consumer: &'static str,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<Seen> {
    let mut conn = Connection::open(&uris).await.expect("consumer connection");
    let start = std::time::Instant::now();
    let mut seen = Vec::new();
    while !stop.is_cancelled() {
        let reply: Option<Vec<StreamReply>> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg(consumer)
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(50)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(&mut conn)
            .await
            .expect("XREADGROUP");
        for (_, entries) in reply.unwrap_or_default() {
            for (id, flat) in entries {
                let field = |name: &str| {
                    flat.chunks(2)
                        .find(|p| p[0] == name.as_bytes())
                        .map(|p| String::from_utf8_lossy(&p[1]).into_owned())
                };
                seen.push(Seen {
                    id,
                    body: field("body").unwrap_or_default(),
                    retry_count: field("dlq-retry-count")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    at_ms: start.elapsed().as_millis(),
                });
            }
        }
    }
    seen
}

/// Reads every new entry of `stream` once as consumer `c1` of [`GROUP`], acknowledging
/// nothing (they stay pending), and returns the answer.
pub async fn read_new<C: ConnectionLike + Send>(conn: &mut C, stream: &str) -> redis::Value {
    redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("c1")
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(conn)
        .await
        .expect("XREADGROUP")
}

/// Entries pending in [`GROUP`] of `stream` (the `XPENDING` summary's count).
pub async fn pending<C: ConnectionLike + Send>(conn: &mut C, stream: &str) -> u64 {
    let (count, ..): (u64, Option<String>, Option<String>, redis::Value) = redis::cmd("XPENDING")
        .arg(stream)
        .arg(GROUP)
        .query_async(conn)
        .await
        .expect("XPENDING");
    count
}

/// Every entry of `stream` as `(id, fields)`, oldest first.
pub async fn entries<C: ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
) -> Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)> {
    let rows: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .expect("XRANGE");
    rows.into_iter()
        .map(|(id, flat)| {
            let pairs = flat
                .chunks(2)
                .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
                .collect();
            (id, pairs)
        })
        .collect()
}

/// The value of field `name` in `fields`, as text.
pub fn field(fields: &[(Vec<u8>, Vec<u8>)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(n, _)| n.as_slice() == name.as_bytes())
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// Deletes `keys`.
pub async fn delete<C: ConnectionLike + Send>(conn: &mut C, keys: &[String]) {
    let _: i64 = redis::cmd("DEL")
        .arg(keys)
        .query_async(conn)
        .await
        .expect("DEL");
}

/// Manifests of a Redis DeadLetterQueue `default/orders` on `stream` read by [`GROUP`]
/// (visibility timeout `visibility`, `max_retries` retries of 200 ms then 400 ms), its
/// RetryPolicy `rp` and Secret `redis` ([`uri`]).
pub fn redis_manifests(stream: &str, visibility: &str, max_retries: u32) -> tempfile::TempDir {
    redis_manifests_at(&uri(), &[stream], visibility, max_retries)
}

/// [`redis_manifests`] for the deployment at `uris` (comma-separated), one DeadLetterQueue
/// per stream of `streams` (`orders-0`, `orders-1`, …; `orders` for a single stream).
pub fn redis_manifests_at(
    uris: &str,
    streams: &[&str],
    visibility: &str,
    max_retries: u32,
) -> tempfile::TempDir {
    let policy = super::policy_yaml(
        "rp",
        &format!("  maxRetries: {max_retries}\n  backoff:\n    strategy: Exponential\n    initialDelay: 200ms\n    multiplier: 2\n    maxDelay: 400ms\n"),
    );
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: redis\n  namespace: default\nstringData:\n  uri: \"{uris}\"\n"
    );
    let dlqs: String = streams
        .iter()
        .enumerate()
        .map(|(i, stream)| {
            let name = if streams.len() == 1 {
                "orders".to_string()
            } else {
                format!("orders-{i}")
            };
            format!(
                "---\napiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  broker:\n    type: Redis\n    secretRef:\n      name: redis\n  source:\n    stream: {stream}\n    group: {GROUP}\n    visibilityTimeout: {visibility}\n  retryPolicyRef:\n    name: rp\n"
            )
        })
        .collect();
    super::manifests(&[
        ("rp.yaml", &policy),
        ("secret.yaml", &secret),
        ("dlq.yaml", &dlqs),
    ])
}

/// Creates `stream` with the consumer group [`GROUP`] (`XGROUP CREATE … $ MKSTREAM`).
pub async fn group<C: ConnectionLike + Send>(conn: &mut C, stream: &str) {
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(GROUP)
        .arg("$")
        .arg("MKSTREAM")
        .query_async(conn)
        .await
        .expect("XGROUP CREATE");
}

/// `dlq-operator apply -f dir`, which must succeed: the ownership records and groups the
/// routers need.
pub fn apply(dir: &std::path::Path) {
    let out = super::cli(&["apply", "-f", &dir.display().to_string()]);
    assert!(out.status.success(), "apply: {}", super::text(&out));
}
