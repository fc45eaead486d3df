//! The Redis retry router's speed against a minimal Lua mover doing the same atomic moves
//! (docs/BENCHMARKS.md, "Redis retry router").
//!
//! Each round, N entries of 1 KiB are added to a fresh stream and read by a consumer of
//! its group that never acknowledges them; once they have been pending longer than the
//! visibility timeout (100 ms), one of two movers moves every one of them into the retry
//! set, the clock stopping when the retry set holds all N:
//!
//! - **router**: `StreamRouter::sweep`, the code `router --standalone` runs — `XPENDING …
//!   IDLE`, the fields read back, the RetryPolicy's decision, the header contract, and per
//!   entry the move script that checks on the server that the entry is still pending
//!   before it acknowledges it and keeps its copy, the moves of a batch in one pipeline
//!   (batches of 500, as the router runs);
//! - **minimal mover**: the floor for the same atomic move — the same `XPENDING` listing,
//!   then per entry one script (pipelined per batch, as the router sends its moves) that
//!   copies the entry into the entries hash, adds it to the retry set and acknowledges it:
//!   no check, no decision, no contract, no read of the fields before the move.
//!
//! Three rounds, alternating; medians, their ratio, and the CPU per entry of this process
//! (the mover) and of the Redis server (`INFO server` `process_id`, `/proc`).
//!
//! Needs the local Redis (`DLQ_REDIS_URI`, default redis://127.0.0.1:6379). Creates and
//! deletes its own keys (`bench-redis-<pid>-*`).
//!
//! Run: `cargo bench --bench redis_router` (20,000 entries), or
//! `cargo bench --bench redis_router -- 5000`.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::SeedableRng;
use redis::aio::ConnectionLike;
use redis::Script;

use dlq_operator::backoff::ResolvedPolicy;
use dlq_operator::crd::RetryPolicySpec;
use dlq_operator::redis::connection::Connection;
use dlq_operator::redis::router::StreamRouter;
use dlq_operator::redis::stream::StreamSource;
use dlq_operator::redis_keys::Keys;

mod common;
use common::{cpu_ticks, median};

const GROUP: &str = "bench";
const VISIBILITY_MS: u64 = 100;
const BATCH: usize = 500;

/// The minimal mover's script: copy, schedule, acknowledge — the same three writes as the
/// router's retry move, without its checks. KEYS: stream, retry set, entries hash. ARGV:
/// group, id, due (ms).
const MINIMAL: &str = r"
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], cmsgpack.pack(e[1][2]))
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return 1
";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let uri = std::env::var("DLQ_REDIS_URI").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut conn = Connection::open(std::slice::from_ref(&uri))
        .await
        .unwrap_or_else(|e| panic!("Redis at {uri} is required: {e}"));
    let server = server_pid(&mut conn).await;
    let spec: RetryPolicySpec =
        serde_json::from_value(serde_json::json!({"maxRetries": 3, "tiers": ["5m"]}))
            .expect("policy");
    let policy = ResolvedPolicy::from_spec(&spec).expect("valid policy");
    let mut rows: Vec<(&str, f64, f64, f64)> = Vec::new();
    for round in 0..3 {
        for mover in ["router", "minimal"] {
            let stream = format!("bench-redis-{}-{round}-{mover}", std::process::id());
            let keys = Keys::new(&stream, None, None).expect("keys");
            fill(&mut conn, &stream, n).await;
            tokio::time::sleep(std::time::Duration::from_millis(VISIBILITY_MS + 20)).await;
            let (server0, self0, t0) = (cpu_ticks(&server), cpu_ticks("self"), Instant::now());
            match mover {
                "router" => route(&mut conn, &keys, &policy, n).await,
                _ => minimal(&mut conn, &keys, n).await,
            }
            let secs = t0.elapsed().as_secs_f64();
            let per = |ticks: u64| ticks as f64 * 10_000.0 / n as f64; // µs per entry
            rows.push((
                mover,
                n as f64 / secs,
                per(cpu_ticks("self") - self0),
                per(cpu_ticks(&server) - server0),
            ));
            let _: i64 = redis::cmd("DEL")
                .arg(&stream)
                .arg(keys.retry_set())
                .arg(keys.retry_entries())
                .query_async(&mut conn)
                .await
                .expect("DEL");
        }
    }
    let of = |mover: &str, f: fn(&(&str, f64, f64, f64)) -> f64| {
        median(rows.iter().filter(|r| r.0 == mover).map(f).collect())
    };
    let (router, floor) = (of("router", |r| r.1), of("minimal", |r| r.1));
    println!("Redis retry router, {n} entries of 1 KiB, 3 rounds, medians:");
    println!("| mover | entries/s | mover CPU per entry | Redis CPU per entry |");
    println!("|---|---|---|---|");
    for mover in ["router", "minimal"] {
        println!(
            "| {mover} | {:.0} | {:.1} µs | {:.1} µs |",
            of(mover, |r| r.1),
            of(mover, |r| r.2),
            of(mover, |r| r.3)
        );
    }
    println!("router / minimal mover: {:.2}", router / floor);
}

/// Adds `n` entries of 1 KiB to `stream`, creates the group and reads them all as one
/// consumer that never acknowledges: `n` pending entries.
async fn fill<C: ConnectionLike + Send>(conn: &mut C, stream: &str, n: usize) {
    let body = "x".repeat(1024);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(GROUP)
        .arg("$")
        .arg("MKSTREAM")
        .query_async(conn)
        .await
        .expect("XGROUP CREATE");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("id")
                .arg(i)
                .arg("body")
                .arg(&body);
        }
        let _: Vec<String> = pipe.query_async(conn).await.expect("XADD");
    }
    let mut read = 0;
    while read < n {
        let reply: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg("c")
            .arg("COUNT")
            .arg(5_000)
            .arg("STREAMS")
            .arg(stream)
            .arg(">")
            .query_async(conn)
            .await
            .expect("XREADGROUP");
        read += entries_in(&reply);
    }
}

/// Entries of an `XREADGROUP` answer (one stream).
fn entries_in(reply: &redis::Value) -> usize {
    match reply {
        redis::Value::Array(streams) | redis::Value::Set(streams) => streams
            .iter()
            .map(|s| match s {
                redis::Value::Array(kv) => match kv.get(1) {
                    Some(redis::Value::Array(entries)) => entries.len(),
                    _ => 0,
                },
                _ => 0,
            })
            .sum(),
        redis::Value::Map(streams) => streams
            .iter()
            .map(|(_, v)| match v {
                redis::Value::Array(entries) => entries.len(),
                _ => 0,
            })
            .sum(),
        _ => 0,
    }
}

/// The router's sweeps until the retry set holds `n`.
async fn route(conn: &mut Connection, keys: &Keys, policy: &ResolvedPolicy, n: usize) {
    let router = StreamRouter {
        source: StreamSource {
            keys: keys.clone(),
            group: GROUP.into(),
            visibility_timeout_ms: VISIBILITY_MS,
            dead_letter_max_length: 0,
        },
        policy: policy.clone(),
        batch: BATCH,
    };
    let mut rng = StdRng::seed_from_u64(1);
    let mut moved = 0;
    while moved < n as u64 {
        let sweep = router
            .sweep(conn, &mut rng, dlq_operator::clock::now_ms())
            .await
            .expect("sweep");
        moved += sweep.retried;
    }
}

/// The minimal mover until every pending entry is in the retry set.
async fn minimal(conn: &mut Connection, keys: &Keys, n: usize) {
    let script = Script::new(MINIMAL);
    let _: String = script
        .prepare_invoke()
        .load_async(conn)
        .await
        .expect("SCRIPT LOAD");
    let due = dlq_operator::clock::now_ms() + 300_000;
    let mut moved = 0;
    while moved < n {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(keys.source())
            .arg(GROUP)
            .arg("IDLE")
            .arg(VISIBILITY_MS)
            .arg("-")
            .arg("+")
            .arg(BATCH)
            .query_async(conn)
            .await
            .expect("XPENDING");
        // Pipelined per batch, as the router sends its moves.
        let mut pipe = redis::pipe();
        for (id, ..) in &rows {
            pipe.invoke_script(
                script
                    .key(keys.source())
                    .key(keys.retry_set())
                    .key(keys.retry_entries())
                    .arg(GROUP)
                    .arg(id)
                    .arg(due),
            );
        }
        let _: Vec<i64> = pipe.query_async(conn).await.expect("minimal moves");
        moved += rows.len();
    }
}

/// The Redis server's process id (`INFO server`), for its CPU time.
async fn server_pid(conn: &mut Connection) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.trim().strip_prefix("process_id:"))
        .unwrap_or("0")
        .to_string()
}
