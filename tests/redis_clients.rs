//! The Redis retry router with real clients nobody here wrote, on the local Redis 7: a
//! redis-py consumer and an ioredis (Node) consumer read a stream with a consumer group and
//! never acknowledge (they know nothing of retries). Each entry comes back after the
//! visibility timeout plus every retry's delay, then lands in the dead-letter stream with
//! the record (docs/REDIS.md).
//!
//! The clients are tests/router_clients/{redis_py_consumer.py, ioredis_consumer.js}
//! (Python from `.venv`, Node with `npm ci` run there: .ci/run installs both).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::clients::{node, python, router, scripts, Client, Seen};
use common::redis_server::{
    apply, connect, delete, entries, field, group, redis_manifests, uri, GROUP,
};
use common::unique;

/// Entries each test produces.
const ENTRIES: usize = 3;
/// The visibility timeout of the manifests (ms) and the two retries' delays
/// ([`redis_manifests`]: 200 ms then 400 ms, no jitter).
const VISIBILITY_MS: f64 = 1_000.0;
const DELAYS_MS: [f64; 2] = [200.0, 400.0];
/// How much later than due a delivery may come (ms): generous for a loaded 2-core
/// machine; the router sweeps every 100 ms.
const MARGIN_MS: f64 = 3_000.0;

/// Runs `client` against a fresh stream with the router process, and checks every
/// delivery and the dead letters.
async fn retried_into_the_dead_letters(
    test: &str,
    name: &'static str,
    client: impl FnOnce(&str) -> Command,
) {
    let Some(mut conn) = connect(test).await else {
        return;
    };
    let stream = unique(&format!("redis-{name}"));
    let dead = format!("{{{stream}}}:dlq:dead");
    group(&mut conn, &stream).await;
    let tmp = redis_manifests(&stream, "1s", 2);
    apply(tmp.path());
    let router = router(&tmp.path().display().to_string(), 0, "warn");
    let mut consumer = Client::start(name, client(&stream));
    consumer.ready().await;
    for i in 0..ENTRIES {
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("id")
            .arg(format!("m{i}"))
            .arg("body")
            .arg("{\"order\": 7}")
            .query_async(&mut conn)
            .await
            .expect("XADD");
    }
    let seen = consumer
        .deliveries(ENTRIES * 3, Duration::from_secs(30))
        .await;
    let mut by_id: BTreeMap<String, Vec<&Seen>> = BTreeMap::new();
    for s in &seen {
        by_id.entry(s.id.clone()).or_default().push(s);
    }
    assert_eq!(by_id.len(), ENTRIES, "{seen:?}");
    for (id, deliveries) in &by_id {
        let counts: Vec<Option<u64>> = deliveries.iter().map(|d| d.retry_count).collect();
        assert_eq!(counts, [None, Some(1), Some(2)], "{name} {id}");
        for (i, pair) in deliveries.windows(2).enumerate() {
            let gap = pair[1].t_ms - pair[0].t_ms;
            let due = VISIBILITY_MS + DELAYS_MS[i];
            assert!(
                gap >= due - 50.0 && gap <= due + MARGIN_MS,
                "{name} {id}: retry {} came {gap:.0} ms after the delivery before it; due after {due} ms",
                i + 1
            );
        }
    }
    // The dead letters: each entry once, with the record.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let dead_letters = loop {
        let all = entries(&mut conn, &dead).await;
        if all.len() >= ENTRIES || std::time::Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(dead_letters.len(), ENTRIES, "{name}");
    for (_, f) in &dead_letters {
        assert_eq!(field(f, "body").as_deref(), Some("{\"order\": 7}"));
        assert_eq!(field(f, "dlq-retry-count").as_deref(), Some("2"));
        assert_eq!(
            field(f, "dlq-reason").as_deref(),
            Some("MaxRetriesExceeded")
        );
        assert!(
            field(f, "dlq-last-error").is_some_and(|e| e.contains(name)),
            "{f:?}"
        );
    }
    assert!(consumer.unread().is_empty(), "no further delivery");
    eprintln!(
        "{name} on Redis: {ENTRIES} entries, each delivered 3 times (gaps {:?} ms), then dead-lettered",
        by_id
            .values()
            .next()
            .map(|d| d.windows(2).map(|p| (p[1].t_ms - p[0].t_ms).round()).collect::<Vec<_>>())
    );
    // Stopped before their keys go (a consumer blocked on a deleted stream says so).
    drop(consumer);
    drop(router);
    delete(
        &mut conn,
        &[
            stream.clone(),
            dead,
            format!("{{{stream}}}:dlq:retry"),
            format!("{{{stream}}}:dlq:retry-entries"),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_redis_py_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letters() {
    const TEST: &str =
        "a_redis_py_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letters";
    let Some(python) = python(TEST, "redis") else {
        return;
    };
    retried_into_the_dead_letters(TEST, "redis-py", |stream| {
        let mut c = Command::new(python);
        c.arg(scripts().join("redis_py_consumer.py")).args([
            uri().as_str(),
            stream,
            GROUP,
            "redis-py",
        ]);
        c
    })
    .await;
}

#[tokio::test]
async fn an_ioredis_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letters() {
    const TEST: &str =
        "an_ioredis_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letters";
    if !node(TEST, "ioredis") {
        return;
    }
    retried_into_the_dead_letters(TEST, "ioredis", |stream| {
        let mut c = Command::new("node");
        c.arg(scripts().join("ioredis_consumer.js")).args([
            uri().as_str(),
            stream,
            GROUP,
            "ioredis",
        ]);
        c
    })
    .await;
}
