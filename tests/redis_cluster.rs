//! The Redis retry router on a real 3-master Redis Cluster (scripts/redis-cluster.sh, one
//! replica per master; `DLQ_REDIS_CLUSTER` names its seed nodes, as .ci/run sets it):
//! streams whose slots live on different masters are each routed through every retry into
//! their dead letters; and a master killed during a router run loses nothing — its replica
//! takes over, the router follows the new topology, every entry ends in the dead-letter
//! stream (docs/REDIS.md, "Redis Cluster").

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;

use common::clients::{router, Killed};
use common::redis_server::{apply, entries, field, group, never_ack_at, redis_manifests_at, GROUP};
use common::unique;
use dlq_operator::redis::connection::Connection;

/// The cluster's seed URIs, or `None` after printing that `test` is skipped.
fn cluster(test: &str) -> Option<Vec<String>> {
    match std::env::var("DLQ_REDIS_CLUSTER") {
        Ok(v) if !v.is_empty() => Some(v.split(',').map(str::to_string).collect()),
        _ => {
            eprintln!("SKIPPED {test}: DLQ_REDIS_CLUSTER is not set (bash scripts/redis-cluster.sh start, as .ci/run does)");
            None
        }
    }
}

/// `router --standalone -f DIR`, SIGKILLed on drop; the client library's own warnings
/// while a node is down say what the test already knows.
fn start_router(dir: &std::path::Path) -> Killed {
    router(&dir.display().to_string(), 0, "warn,redis=off")
}

/// `scripts/redis-cluster.sh ARGS`, which must succeed.
fn script(args: &[&str]) {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/redis-cluster.sh"))
        .args(args)
        .output()
        .expect("run scripts/redis-cluster.sh");
    assert!(
        out.status.success(),
        "redis-cluster.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The port of the master that serves `key`'s slot (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`).
async fn master_port<C: ConnectionLike + Send>(conn: &mut C, key: &str) -> u16 {
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await
        .expect("CLUSTER KEYSLOT");
    // Each row: first slot, last slot, then the master and its replicas as [host, port, id, …].
    let rows: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .expect("CLUSTER SLOTS");
    let int = |v: Option<&redis::Value>| match v {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("CLUSTER SLOTS: a number expected, got {other:?}"),
    };
    rows.iter()
        .find(|row| (int(row.first())..=int(row.get(1))).contains(&slot))
        .map(|row| match row.get(2) {
            Some(redis::Value::Array(master)) => int(master.get(1)) as u16,
            other => panic!("CLUSTER SLOTS: a master expected, got {other:?}"),
        })
        .expect("a master serves every slot")
}

/// The port of a seed URI (`redis://host:port`).
fn port_of(uri: &str) -> u16 {
    uri.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("a port in the URI")
}

/// Adds entries `body` = `from..to` to `stream` and waits until a replica has them
/// (`WAIT 1`): what a producer acknowledged before a failover is the producer's.
async fn produce<C: ConnectionLike + Send>(conn: &mut C, stream: &str, from: usize, to: usize) {
    let mut pipe = redis::pipe();
    for i in from..to {
        pipe.cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg("body")
            .arg(i.to_string());
    }
    let _: Vec<String> = pipe.query_async(conn).await.expect("XADD");
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query_async(conn)
        .await
        .expect("WAIT");
}

/// A stream entry as `XRANGE` answers it: its id and `[f1, v1, …]`.
type Entry = (String, Vec<Vec<u8>>);

/// Waits until `dead` holds at least `n` distinct bodies (fails after `limit`); returns
/// every dead letter's body.
async fn dead_bodies<C: ConnectionLike + Send>(
    conn: &mut C,
    dead: &str,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        // A failover may answer with an error for a moment: try again.
        let all: Result<Vec<Entry>, _> = redis::cmd("XRANGE")
            .arg(dead)
            .arg("-")
            .arg("+")
            .query_async(conn)
            .await;
        if let Ok(all) = all {
            let bodies: Vec<String> = all
                .iter()
                .filter_map(|(_, flat)| {
                    flat.chunks(2)
                        .find(|p| p[0] == b"body")
                        .map(|p| String::from_utf8_lossy(&p[1]).into_owned())
                })
                .collect();
            let distinct: BTreeSet<&String> = bodies.iter().collect();
            if distinct.len() >= n {
                return bodies;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} dead-lettered after {limit:?}",
                distinct.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn streams_on_three_masters_are_each_retried_into_their_dead_letters() {
    const TEST: &str = "streams_on_three_masters_are_each_retried_into_their_dead_letters";
    let Some(uris) = cluster(TEST) else {
        return;
    };
    let mut conn = Connection::open(&uris).await.expect("cluster connection");
    assert!(
        matches!(conn, Connection::Cluster(_)),
        "found in cluster mode"
    );
    // Streams until three different masters serve them.
    let prefix = unique("redis-cl");
    let mut by_master: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0.. {
        let stream = format!("{prefix}-{i}");
        let port = master_port(&mut conn, &stream).await;
        by_master.entry(port).or_insert(stream);
        if by_master.len() == 3 {
            break;
        }
    }
    let streams: Vec<String> = by_master.values().cloned().collect();
    let names: Vec<&str> = streams.iter().map(String::as_str).collect();
    let tmp = redis_manifests_at(&uris.join(","), &names, "300ms", 1);
    let mut consumers = Vec::new();
    let stop = CancellationToken::new();
    for s in &streams {
        group(&mut conn, s).await;
        consumers.push(tokio::spawn(never_ack_at(
            uris.clone(),
            s.clone(),
            GROUP,
            "c1",
            stop.clone(),
        )));
    }
    apply(tmp.path());
    let router = start_router(tmp.path());
    let n = 100;
    for s in &streams {
        produce(&mut conn, s, 0, n).await;
    }
    for s in &streams {
        let dead = format!("{{{s}}}:dlq:dead");
        let bodies = dead_bodies(&mut conn, &dead, n, Duration::from_secs(30)).await;
        assert_eq!(bodies.len(), n, "{s}: each entry dead-lettered once");
        let all = entries(&mut conn, &dead).await;
        assert!(all
            .iter()
            .all(|(_, f)| field(f, "dlq-retry-count").as_deref() == Some("1")));
    }
    stop.cancel();
    drop(router);
    for c in consumers {
        let seen = c.await.expect("consumer");
        assert_eq!(
            seen.len(),
            2 * n,
            "each entry read twice: first, then its one retry"
        );
    }
}

#[tokio::test]
async fn a_master_killed_during_a_router_run_loses_nothing() {
    const TEST: &str = "a_master_killed_during_a_router_run_loses_nothing";
    let Some(uris) = cluster(TEST) else {
        return;
    };
    let mut conn = Connection::open(&uris).await.expect("cluster connection");
    let stream = unique("redis-failover");
    let dead = format!("{{{stream}}}:dlq:dead");
    let port = master_port(&mut conn, &stream).await;
    let node = (port - port_of(&uris[0]) + 1).to_string();
    group(&mut conn, &stream).await;
    let tmp = redis_manifests_at(&uris.join(","), &[&stream], "300ms", 1);
    apply(tmp.path());
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(never_ack_at(
        uris.clone(),
        stream.clone(),
        GROUP,
        "c1",
        stop.clone(),
    ));
    let router = start_router(tmp.path());
    let n = 2_000;
    produce(&mut conn, &stream, 0, n).await;
    // Kill the stream's master once the router has moved some of the entries.
    let _ = dead_bodies(&mut conn, &dead, 1, Duration::from_secs(30)).await;
    let killed_at = Instant::now();
    script(&["kill", &node]);
    let bodies = dead_bodies(&mut conn, &dead, n, Duration::from_secs(90)).await;
    let recovered = killed_at.elapsed();
    stop.cancel();
    drop(router);
    let _ = consumer.await;
    let distinct: BTreeSet<&String> = bodies.iter().collect();
    assert_eq!(
        distinct.len(),
        n,
        "every entry reached the dead letters: none lost"
    );
    let duplicates = bodies.len() - distinct.len();
    reliability!(
        "redis cluster | master of the stream's slot (port {port}) SIGKILLed mid-run | {n} entries | lost 0 | dead-lettered twice {duplicates} | all dead-lettered {:.1} s after the kill",
        recovered.as_secs_f64()
    );
    // The killed node comes back as a replica, for the tests after this one.
    script(&["restart", &node]);
    script(&["wait"]);
}
