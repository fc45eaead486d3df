//! The Redis retry router on a real Redis 7 (docs/REDIS.md): a stream read by a consumer
//! group whose consumer never acknowledges goes through every retry at the policy's
//! delays into the dead-letter stream with the full record; acknowledged entries are never
//! moved; routers racing and cut mid-sweep move each entry exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::crd::RetryPolicySpec;
use dlq_operator::redis::router::{StreamRouter, Sweep};
use dlq_operator::redis::stream::StreamSource;
use dlq_operator::redis_keys::Keys;
use rand::rngs::StdRng;
use rand::SeedableRng;
use redis::aio::ConnectionLike;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::redis_server::{
    connect, delete, entries, field, group, never_ack, pending, read_new, GROUP,
};

fn policy(max_retries: u32) -> ResolvedPolicy {
    let spec: RetryPolicySpec = serde_json::from_value(json!({
        "maxRetries": max_retries,
        "backoff": {"strategy": "Exponential", "initialDelay": "200ms", "multiplier": 2, "maxDelay": "400ms"},
    }))
    .expect("RetryPolicy spec");
    ResolvedPolicy::from_spec(&spec).expect("valid RetryPolicy")
}

fn router(stream: &str, visibility_timeout_ms: u64, max_retries: u32) -> StreamRouter {
    StreamRouter {
        source: StreamSource {
            keys: Keys::new(stream, None, None).expect("keys"),
            group: GROUP.to_string(),
            visibility_timeout_ms,
            dead_letter_max_length: 0,
        },
        policy: policy(max_retries),
        batch: 100,
    }
}

/// Adds `n` entries with `body` = `0..n` and a binary `raw` field; returns their ids.
async fn produce<C: ConnectionLike + Send>(conn: &mut C, stream: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id: String = redis::cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg("body")
            .arg(i.to_string())
            .arg("raw")
            .arg(&[0u8, 0xff, b'\n', i as u8][..])
            .query_async(conn)
            .await
            .expect("XADD");
        ids.push(id);
    }
    ids
}

/// Entries pending in the group.
/// One sweep of `r` now, which must succeed.
async fn sweep_now<C: ConnectionLike + Send>(
    r: &StreamRouter,
    conn: &mut C,
    rng: &mut StdRng,
) -> Sweep {
    r.sweep(conn, rng, dlq_operator::clock::now_ms())
        .await
        .expect("sweep")
}

async fn zcard<C: ConnectionLike + Send>(conn: &mut C, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

/// Runs `router` sweeps every 20 ms until `dead` entries are in its dead-letter stream
/// (fails after 30 s).
async fn route_until_dead<C: ConnectionLike + Send>(
    conn: &mut C,
    router: &StreamRouter,
    dead: usize,
) -> Sweep {
    let mut rng = StdRng::seed_from_u64(7);
    let mut total = Sweep::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = router
            .sweep(conn, &mut rng, dlq_operator::clock::now_ms())
            .await
            .expect("sweep");
        total.released += s.released;
        total.retried += s.retried;
        total.dead_lettered += s.dead_lettered;
        total.not_pending += s.not_pending;
        total.trimmed += s.trimmed;
        total.missing += s.missing;
        let n = entries(conn, router.source.keys.dead_letters()).await.len();
        if n >= dead {
            return total;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{n} of {dead} dead-lettered after 30 s: {total:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn all_keys(r: &StreamRouter) -> Vec<String> {
    let k = &r.source.keys;
    vec![
        k.source().to_string(),
        k.retry_set(),
        k.retry_entries(),
        k.dead_letters().to_string(),
    ]
}

#[tokio::test]
async fn a_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letter_stream() {
    const TEST: &str =
        "a_consumer_that_never_acks_goes_through_every_retry_into_the_dead_letter_stream";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-never-ack");
    let r = router(&stream, 300, 2);
    group(&mut conn, &stream).await;
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(never_ack(stream.clone(), GROUP, "c1", stop.clone()));
    let ids = produce(&mut conn, &stream, 5).await;

    let total = route_until_dead(&mut conn, &r, 5).await;
    stop.cancel();
    let seen = consumer.await.expect("consumer");

    // Each entry was delivered three times: the first attempt and two retries, in order,
    // each after the visibility timeout plus the retry's delay.
    let mut by_body: BTreeMap<String, Vec<(u32, u128)>> = BTreeMap::new();
    for s in &seen {
        by_body
            .entry(s.body.clone())
            .or_default()
            .push((s.retry_count, s.at_ms));
    }
    assert_eq!(by_body.len(), 5, "{seen:?}");
    for (body, deliveries) in &by_body {
        let counts: Vec<u32> = deliveries.iter().map(|d| d.0).collect();
        assert_eq!(counts, [0, 1, 2], "entry {body}: {deliveries:?}");
        let gaps: Vec<u128> = deliveries.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert!(
            gaps[0] >= 300 + 200 && gaps[1] >= 300 + 400,
            "entry {body}: gaps {gaps:?} ms"
        );
    }
    assert_eq!(
        (total.retried, total.released, total.dead_lettered),
        (10, 10, 5),
        "{total:?}"
    );

    // The dead letters carry the payload (binary intact) and the full record.
    let dead = entries(&mut conn, r.source.keys.dead_letters()).await;
    let originals: BTreeSet<String> = dead
        .iter()
        .map(|(_, f)| field(f, "dlq-original-id").expect("dlq-original-id"))
        .collect();
    assert_eq!(
        originals,
        ids.iter().cloned().collect(),
        "each first id once"
    );
    for (_, f) in &dead {
        let body: u8 = field(f, "body").and_then(|b| b.parse().ok()).expect("body");
        let raw = f.iter().find(|(n, _)| n == b"raw").map(|(_, v)| v.clone());
        assert_eq!(raw, Some(vec![0, 0xff, b'\n', body]));
        assert_eq!(field(f, "dlq-retry-count").as_deref(), Some("2"));
        assert_eq!(
            field(f, "dlq-reason").as_deref(),
            Some("MaxRetriesExceeded")
        );
        assert_eq!(
            field(f, "dlq-original-queue").as_deref(),
            Some(stream.as_str())
        );
        let error = field(f, "dlq-last-error").expect("dlq-last-error");
        assert!(
            error.starts_with("not acknowledged within 300 ms"),
            "{error}"
        );
        let first: u64 = field(f, "dlq-first-failed-at")
            .and_then(|v| v.parse().ok())
            .expect("first");
        let last: u64 = field(f, "dlq-last-failed-at")
            .and_then(|v| v.parse().ok())
            .expect("last");
        assert!(last >= first + 500, "first {first}, last {last}");
    }
    // Nothing left behind: no pending entry, no waiting retry, no kept content.
    assert_eq!(pending(&mut conn, &stream).await, 0);
    assert_eq!(zcard(&mut conn, &r.source.keys.retry_set()).await, 0);
    let kept: u64 = redis::cmd("HLEN")
        .arg(r.source.keys.retry_entries())
        .query_async(&mut conn)
        .await
        .expect("HLEN");
    assert_eq!(kept, 0);
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn acknowledged_and_young_entries_are_never_moved() {
    const TEST: &str = "acknowledged_and_young_entries_are_never_moved";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-acked");
    let r = router(&stream, 400, 1);
    group(&mut conn, &stream).await;
    let ids = produce(&mut conn, &stream, 4).await;
    read_new(&mut conn, &stream).await;
    // Two are processed and acknowledged.
    let _: u64 = redis::cmd("XACK")
        .arg(&stream)
        .arg(GROUP)
        .arg(&ids[0])
        .arg(&ids[1])
        .query_async(&mut conn)
        .await
        .expect("XACK");
    let mut rng = StdRng::seed_from_u64(1);
    // Before the visibility timeout, nothing is a failure yet.
    let early = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!(early, Sweep::default());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!((s.retried, s.dead_lettered), (2, 0), "{s:?}");
    let waiting: Vec<String> = redis::cmd("ZRANGE")
        .arg(r.source.keys.retry_set())
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    assert_eq!(
        waiting.into_iter().collect::<BTreeSet<_>>(),
        ids[2..].iter().cloned().collect()
    );
    assert_eq!(pending(&mut conn, &stream).await, 0);
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn a_pending_entry_trimmed_from_the_stream_is_acknowledged_and_counted() {
    const TEST: &str = "a_pending_entry_trimmed_from_the_stream_is_acknowledged_and_counted";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-trimmed");
    let r = router(&stream, 100, 1);
    group(&mut conn, &stream).await;
    let ids = produce(&mut conn, &stream, 2).await;
    read_new(&mut conn, &stream).await;
    let _: u64 = redis::cmd("XDEL")
        .arg(&stream)
        .arg(&ids[0])
        .query_async(&mut conn)
        .await
        .expect("XDEL");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut rng = StdRng::seed_from_u64(1);
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!((s.trimmed, s.retried), (1, 1), "{s:?}");
    assert_eq!(pending(&mut conn, &stream).await, 0);
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn routers_racing_and_cut_mid_sweep_move_each_entry_exactly_once() {
    const TEST: &str = "routers_racing_and_cut_mid_sweep_move_each_entry_exactly_once";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-race");
    let n = 300;
    let r = router(&stream, 100, 1);
    group(&mut conn, &stream).await;
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(never_ack(stream.clone(), GROUP, "c1", stop.clone()));
    produce(&mut conn, &stream, n).await;

    // Three routers sweep the same source at once; one of them is cut off (its task
    // aborted, as a killed process stops) every few milliseconds and started again.
    let racers: Vec<_> = (0..2)
        .map(|seed| {
            let (r, mut c, stop) = (r.clone(), conn.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                while !stop.is_cancelled() {
                    r.sweep(&mut c, &mut rng, dlq_operator::clock::now_ms())
                        .await
                        .expect("sweep");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut cuts = 0;
    while entries(&mut conn, r.source.keys.dead_letters()).await.len() < n {
        let (r2, mut c) = (r.clone(), conn.clone());
        let cut = tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(99);
            loop {
                let _ = r2
                    .sweep(&mut c, &mut rng, dlq_operator::clock::now_ms())
                    .await;
            }
        });
        tokio::time::sleep(Duration::from_millis(7)).await;
        cut.abort();
        let _ = cut.await;
        cuts += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "not all dead-lettered in 60 s"
        );
    }
    stop.cancel();
    for t in racers {
        t.await.expect("racer");
    }
    let seen = consumer.await.expect("consumer");
    let dead = entries(&mut conn, r.source.keys.dead_letters()).await;
    assert_eq!(dead.len(), n, "each entry dead-lettered once, never twice");
    let bodies: BTreeSet<String> = dead.iter().filter_map(|(_, f)| field(f, "body")).collect();
    assert_eq!(bodies.len(), n, "every entry, none lost");
    // One retry each: every body was delivered exactly twice.
    let mut deliveries: BTreeMap<String, usize> = BTreeMap::new();
    for s in &seen {
        *deliveries.entry(s.body.clone()).or_default() += 1;
    }
    assert!(
        deliveries.values().all(|&d| d == 2),
        "{:?}",
        deliveries
            .iter()
            .filter(|(_, d)| **d != 2)
            .collect::<Vec<_>>()
    );
    assert_eq!(pending(&mut conn, &stream).await, 0);
    assert_eq!(zcard(&mut conn, &r.source.keys.retry_set()).await, 0);
    eprintln!("RELIABILITY redis stream | 3 routers, one cut {cuts} times | {n} entries | lost 0, moved twice 0");
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn a_retried_copy_keeps_the_payload_and_drops_a_stale_reason_and_class() {
    const TEST: &str = "a_retried_copy_keeps_the_payload_and_drops_a_stale_reason_and_class";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-stale");
    let r = router(&stream, 50, 3);
    group(&mut conn, &stream).await;
    // An entry replayed out of the dead letters still carries its old reason and class.
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("body")
        .arg("x")
        .arg("dlq-reason")
        .arg("MaxRetriesExceeded")
        .arg("dlq-error-class")
        .arg("Timeout")
        .arg("dlq-retry-count")
        .arg("1")
        .query_async(&mut conn)
        .await
        .expect("XADD");
    read_new(&mut conn, &stream).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let mut rng = StdRng::seed_from_u64(1);
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!(s.retried, 1, "{s:?}");
    // Due after 400 ms (the second retry's delay): wait for it to come back.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!(s.released, 1, "{s:?}");
    let all = entries(&mut conn, &stream).await;
    let (_, copy) = all.last().expect("the copy");
    assert_eq!(field(copy, "body").as_deref(), Some("x"));
    assert_eq!(field(copy, "dlq-retry-count").as_deref(), Some("2"));
    assert_eq!(field(copy, "dlq-reason"), None, "{copy:?}");
    assert_eq!(field(copy, "dlq-error-class"), None, "{copy:?}");
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn a_server_that_lost_its_scripts_still_gets_every_move() {
    const TEST: &str = "a_server_that_lost_its_scripts_still_gets_every_move";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-noscript");
    let r = router(&stream, 50, 1);
    group(&mut conn, &stream).await;
    produce(&mut conn, &stream, 20).await;
    read_new(&mut conn, &stream).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    // As after a restart or a failover to a replica that never ran them.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    let mut rng = StdRng::seed_from_u64(1);
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!(s.retried, 20, "{s:?}");
    assert_eq!(zcard(&mut conn, &r.source.keys.retry_set()).await, 20);
    delete(&mut conn, &all_keys(&r)).await;
}

#[tokio::test]
async fn an_entry_too_large_to_copy_or_read_by_an_odd_consumer_never_holds_up_the_others() {
    const TEST: &str =
        "an_entry_too_large_to_copy_or_read_by_an_odd_consumer_never_holds_up_the_others";
    let Some(mut conn) = connect(TEST).await else {
        return;
    };
    let stream = common::unique("redis-odd");
    let r = router(&stream, 50, 1);
    group(&mut conn, &stream).await;
    // 5,000 fields: more values than a script can pass to XADD.
    let mut big = redis::cmd("XADD");
    big.arg(&stream).arg("*");
    for i in 0..5_000 {
        big.arg(format!("f{i}")).arg("v");
    }
    let big_id: String = big.query_async(&mut conn).await.expect("XADD");
    produce(&mut conn, &stream, 3).await;
    // Read by a consumer whose name is not UTF-8.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg(&b"\xff\xfeworker"[..])
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .expect("XREADGROUP");
    tokio::time::sleep(Duration::from_millis(80)).await;
    let mut rng = StdRng::seed_from_u64(1);
    let s = sweep_now(&r, &mut conn, &mut rng).await;
    assert_eq!(s.oversized, [big_id], "{s:?}");
    assert_eq!(s.retried, 3, "the others moved: {s:?}");
    assert_eq!(
        pending(&mut conn, &stream).await,
        1,
        "the large one stays pending, whole"
    );
    delete(&mut conn, &all_keys(&r)).await;
}
