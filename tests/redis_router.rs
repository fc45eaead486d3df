//! `dlq-operator router --standalone -f` on Redis DeadLetterQueues, against the local
//! Redis 7 (docs/REDIS.md): a consumer that never acknowledges goes through every retry
//! into the dead-letter stream, counted in the router's metrics; a router SIGKILLed mid-run
//! and started again loses nothing and moves nothing twice; bad input is one clear error.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;

use common::clients::{free_port, router, Killed};
use common::redis_server::{
    apply, connect, delete, entries, field, group, never_ack, pending, read_new, redis_manifests,
    GROUP,
};
use common::{cli, text, unique};

/// A `router --standalone` process ([`router`], SIGKILLed on drop) and its /metrics port.
struct Router {
    _process: Killed,
    port: u16,
}

impl Router {
    fn start(dir: &str) -> Router {
        let port = free_port();
        Router {
            _process: router(dir, port, "warn"),
            port,
        }
    }

    /// The value of the first sample of `/metrics` whose line starts with `prefix`.
    async fn metric(&self, prefix: &str) -> Option<f64> {
        let body = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.port))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

async fn produce<C: ConnectionLike + Send>(conn: &mut C, stream: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("body")
                .arg(i.to_string());
        }
        let _: Vec<String> = pipe.query_async(conn).await.expect("XADD");
    }
}

/// Waits until the dead-letter stream `dead` holds `n` entries (fails after `limit`).
async fn wait_dead<C: ConnectionLike + Send>(conn: &mut C, dead: &str, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let len: usize = redis::cmd("XLEN")
            .arg(dead)
            .query_async(conn)
            .await
            .expect("XLEN");
        if len >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{len} of {n} dead-lettered after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn keys_of(stream: &str) -> Vec<String> {
    ["dlq:retry", "dlq:retry-entries", "dlq:dead"]
        .iter()
        .map(|s| format!("{{{stream}}}:{s}"))
        .chain([stream.to_string()])
        .collect()
}

#[tokio::test]
async fn the_router_process_retries_a_never_acking_consumer_into_the_dead_letters() {
    const TEST: &str = "the_router_process_retries_a_never_acking_consumer_into_the_dead_letters";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = unique("redis-cli");
    let dead = format!("{{{stream}}}:dlq:dead");
    group(&mut conn, &stream).await;
    let tmp = redis_manifests(&stream, "300ms", 2);
    apply(tmp.path());
    let router = Router::start(&tmp.path().display().to_string());
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(never_ack(stream.clone(), GROUP, "c1", stop.clone()));
    let n = 50;
    produce(&mut conn, &stream, n).await;
    wait_dead(&mut conn, &dead, n, Duration::from_secs(30)).await;
    stop.cancel();
    let seen = consumer.await.expect("consumer");
    let mut counts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for s in seen {
        counts.entry(s.body).or_default().push(s.retry_count);
    }
    assert_eq!(counts.len(), n);
    assert!(counts.values().all(|c| c == &[0, 1, 2]), "{counts:?}");
    let dead_entries = entries(&mut conn, &dead).await;
    assert_eq!(dead_entries.len(), n, "each once");
    assert!(dead_entries
        .iter()
        .all(|(_, f)| field(f, "dlq-reason").as_deref() == Some("MaxRetriesExceeded")));
    let dead_lettered = router
        .metric(r#"dlq_router_messages_total{decision="dead_letter",name="orders",namespace="default",reason="MaxRetriesExceeded",tier=""}"#)
        .await;
    assert_eq!(dead_lettered, Some(n as f64));
    let retried_200 = router
        .metric(r#"dlq_router_messages_total{decision="retry",name="orders",namespace="default",reason="",tier="200ms"}"#)
        .await;
    assert_eq!(retried_200, Some(n as f64));
    drop(router);
    delete(&mut conn, &keys_of(&stream)).await;
}

#[tokio::test]
async fn a_router_killed_mid_run_and_started_again_loses_nothing_and_moves_nothing_twice() {
    const TEST: &str =
        "a_router_killed_mid_run_and_started_again_loses_nothing_and_moves_nothing_twice";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = unique("redis-kill");
    let dead = format!("{{{stream}}}:dlq:dead");
    group(&mut conn, &stream).await;
    let tmp = redis_manifests(&stream, "200ms", 1);
    apply(tmp.path());
    let dir = tmp.path().display().to_string();
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(never_ack(stream.clone(), GROUP, "c1", stop.clone()));
    let n = 3_000;
    produce(&mut conn, &stream, n).await;
    let mut kills = 0;
    let start = Instant::now();
    // SIGKILL the router every 300 ms while it works, then let one finish.
    loop {
        let router = Router::start(&dir);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let len: usize = redis::cmd("XLEN")
            .arg(&dead)
            .query_async(&mut conn)
            .await
            .expect("XLEN");
        if len >= n || kills >= 8 {
            wait_dead(&mut conn, &dead, n, Duration::from_secs(60)).await;
            drop(router);
            break;
        }
        drop(router); // SIGKILL
        kills += 1;
    }
    // Let the consumer read what the last release put back, then stop it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    let seen = consumer.await.expect("consumer");
    let dead_entries = entries(&mut conn, &dead).await;
    let bodies: BTreeSet<String> = dead_entries
        .iter()
        .filter_map(|(_, f)| field(f, "body"))
        .collect();
    assert_eq!(bodies.len(), n, "every entry dead-lettered: none lost");
    assert_eq!(dead_entries.len(), n, "none dead-lettered twice");
    let mut deliveries: BTreeMap<String, usize> = BTreeMap::new();
    for s in &seen {
        *deliveries.entry(s.body.clone()).or_default() += 1;
    }
    let twice = deliveries.values().filter(|&&d| d == 2).count();
    assert_eq!(
        twice,
        n,
        "each delivered once, then once retried: {:?}",
        deliveries
            .iter()
            .filter(|(_, d)| **d != 2)
            .take(5)
            .collect::<Vec<_>>()
    );
    eprintln!(
        "RELIABILITY redis stream | router SIGKILLed {kills} times in {:.1} s | {n} entries | lost 0, moved twice 0",
        start.elapsed().as_secs_f64()
    );
    delete(&mut conn, &keys_of(&stream)).await;
}

#[tokio::test]
async fn apply_makes_the_group_and_ownership_once_and_refuses_what_is_not_its_own() {
    const TEST: &str = "apply_makes_the_group_and_ownership_once_and_refuses_what_is_not_its_own";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = unique("redis-apply");
    // A stream that already holds an entry, without the group.
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("body")
        .arg("early")
        .query_async(&mut conn)
        .await
        .expect("XADD");
    let tmp = redis_manifests(&stream, "30s", 1);
    let path = tmp.path().display().to_string();
    let first = cli(&["apply", "-f", &path]);
    let t = text(&first);
    assert!(first.status.success(), "{t}");
    assert!(
        t.contains("created: ownership record") && t.contains("created: consumer group"),
        "{t}"
    );
    assert!(t.contains("1 DeadLetterQueue(s) ready, 0 not ready"), "{t}");
    // The group starts at the first entry: what was there is delivered, never skipped.
    let read = read_new(&mut conn, &stream).await;
    assert!(format!("{read:?}").contains("early"), "{read:?}");
    // A second apply writes nothing.
    let again = cli(&["apply", "-f", &path]);
    let t = text(&again);
    assert!(again.status.success() && !t.contains("created:"), "{t}");
    assert_eq!(t.matches("in place:").count(), 2, "{t}");

    // Another DeadLetterQueue on the same stream is refused, naming the owner.
    let other = std::fs::read_to_string(tmp.path().join("dlq.yaml"))
        .expect("read")
        .replace("name: orders", "name: other");
    std::fs::write(tmp.path().join("dlq.yaml"), other).expect("write");
    let refused = cli(&["apply", "-f", &path]);
    let t = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{t}");
    assert!(
        t.contains("[NameConflict]") && t.contains("default/orders"),
        "{t}"
    );

    // A key of another type where the stream should be: refused before any write.
    let list = unique("redis-list");
    let _: i64 = redis::cmd("LPUSH")
        .arg(&list)
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("LPUSH");
    let wrong = redis_manifests(&list, "30s", 1);
    let out = cli(&["apply", "-f", &wrong.path().display().to_string()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("[KeyTypeConflict]") && t.contains("is a list, not a stream"),
        "{t}"
    );
    let owner_written: bool = redis::cmd("EXISTS")
        .arg(format!("{{{list}}}:dlq:owner"))
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert!(!owner_written, "nothing written");
    delete(&mut conn, &[list]).await;
    delete(&mut conn, &keys_of(&stream)).await;
    delete(&mut conn, &[format!("{{{stream}}}:dlq:owner")]).await;
}

#[test]
fn redis_input_that_cannot_work_is_one_clear_error() {
    let dir = redis_manifests("orders-bad", "30s", 1);
    let path = dir.path().display().to_string();
    // `run --standalone` does not handle Redis yet: it says so, naming the field.
    let out = cli(&["run", "--standalone", "-f", &path]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("spec.broker.type") && t.contains("router --standalone"),
        "{t}"
    );

    // A stream without its group.
    let dlq = std::fs::read_to_string(dir.path().join("dlq.yaml")).expect("read");
    std::fs::write(
        dir.path().join("dlq.yaml"),
        dlq.replace("    group: workers\n", ""),
    )
    .expect("write");
    let out = cli(&["router", "--standalone", "-f", &path]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("dlq.yaml") && t.contains("spec.source.group") && t.contains("required"),
        "{t}"
    );

    // One DeadLetterQueue's dead-letter stream is another's source: its trimming would
    // cut the other's entries.
    let two = "apiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: a\n  namespace: default\nspec:\n  broker:\n    type: Redis\n    secretRef:\n      name: redis\n  source:\n    stream: \"{o}\"\n    group: g\n  retryPolicyRef:\n    name: rp\n  deadLetter:\n    queue: \"{o}:b\"\n---\napiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: b\n  namespace: default\nspec:\n  broker:\n    type: Redis\n    secretRef:\n      name: redis\n  source:\n    stream: \"{o}:b\"\n    group: g\n  retryPolicyRef:\n    name: rp\n";
    std::fs::write(dir.path().join("dlq.yaml"), two).expect("write");
    let out = cli(&["router", "--standalone", "-f", &path]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("default/b")
            && t.contains("is the dead-letter stream of DeadLetterQueue default/a"),
        "{t}"
    );

    // A RabbitMQ resource given a Redis URI.
    let rabbit = common::dlq_yaml("plain", "plain-q", "rp", "redis", "");
    std::fs::write(dir.path().join("dlq.yaml"), rabbit).expect("write");
    let out = cli(&["router", "--standalone", "-f", &path]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("uri") && t.contains("set spec.broker.type: Redis"),
        "{t}"
    );
}

#[tokio::test]
async fn the_redis_example_applies_and_a_second_apply_writes_nothing() {
    const TEST: &str = "the_redis_example_applies_and_a_second_apply_writes_nothing";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let dir = format!("{}/examples/redis/", env!("CARGO_MANIFEST_DIR"));
    let keys = [
        "order-stream".to_string(),
        "{order-stream}:dlq:owner".to_string(),
    ];
    delete(&mut conn, &keys).await;
    for (round, word) in [(1, "created:"), (2, "in place:")] {
        let out = cli(&["apply", "-f", &dir]);
        let t = text(&out);
        assert!(out.status.success(), "apply {round}: {t}");
        assert_eq!(t.matches(word).count(), 2, "apply {round}: {t}");
    }
    delete(&mut conn, &keys).await;
}

#[tokio::test]
async fn apply_refuses_keys_it_would_write_that_are_someone_elses_and_the_router_waits_for_apply() {
    const TEST: &str =
        "apply_refuses_keys_it_would_write_that_are_someone_elses_and_the_router_waits_for_apply";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    // Another application's sorted set where the retry set would be: refused, untouched.
    let stream = unique("redis-foreign");
    let retry = format!("{{{stream}}}:dlq:retry");
    let _: i64 = redis::cmd("ZADD")
        .arg(&retry)
        .arg(1)
        .arg("their-job")
        .query_async(&mut conn)
        .await
        .expect("ZADD");
    let tmp = redis_manifests(&stream, "200ms", 1);
    let out = cli(&["apply", "-f", &tmp.path().display().to_string()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("[NameConflict]") && t.contains("is not this DeadLetterQueue's"),
        "{t}"
    );
    let theirs: u64 = redis::cmd("ZCARD")
        .arg(&retry)
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(theirs, 1, "their sorted set is untouched");

    // A router started on a stream never applied does not sweep it.
    delete(&mut conn, &[retry]).await;
    group(&mut conn, &stream).await;
    let router = Router::start(&tmp.path().display().to_string());
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("body")
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("XADD");
    read_new(&mut conn, &stream).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        pending(&mut conn, &stream).await,
        1,
        "not swept before apply"
    );
    // Once applied, the router takes it on (it looks again every second).
    apply(tmp.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if pending(&mut conn, &stream).await == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not moved within 30 s of apply");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(router);
    delete(&mut conn, &keys_of(&stream)).await;
    delete(&mut conn, &[format!("{{{stream}}}:dlq:owner")]).await;
}
