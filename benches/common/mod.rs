//! What the broker benchmarks share: message counts, CPU readings of this process and of
//! the broker, medians. Included with `mod common;` by `benches/replay.rs`,
//! `benches/router.rs` and `benches/console.rs`; not a benchmark of its own.

#![allow(dead_code)]

use std::time::Instant;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::BasicProperties;

/// The local broker the benchmarks use (guest/guest, default vhost).
pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Its management API.
pub const API: &str = "http://127.0.0.1:15672/api";

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Ready messages in `queue` (AMQP passive declare: immediate, no statistics delay).
/// Panics when the queue does not exist (a benchmark's own queue).
pub async fn count(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue exists")
    .message_count()
}

/// Publishes `n` persistent 1 KiB messages (message ids `b0`, `b1`…) to `queue` through
/// the default exchange on `ch` (in confirm mode), all confirms awaited.
pub async fn fill(ch: &lapin::Channel, queue: &str, n: usize) {
    fill_with(ch, queue, n, |i| {
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("b{i}").into())
    })
    .await;
}

/// Confirms a [`fill_with`] leaves outstanding at most: the publishes stay pipelined
/// without holding every message of a large fill in the client at once.
const FILL_WINDOW: usize = 10_000;

/// Publishes `n` 1 KiB messages to `queue` through the default exchange on `ch` (in
/// confirm mode), message `i` with the properties `props(i)`; pipelined, at most
/// [`FILL_WINDOW`] confirms outstanding, all awaited. Panics on a refused publish.
pub async fn fill_with(
    ch: &lapin::Channel,
    queue: &str,
    n: usize,
    props: impl Fn(usize) -> BasicProperties,
) {
    let body = vec![b'x'; 1024];
    let mut confirms =
        std::collections::VecDeque::<lapin::PublisherConfirm>::with_capacity(FILL_WINDOW.min(n));
    for i in 0..n {
        if confirms.len() >= FILL_WINDOW {
            let c = confirms.pop_front().expect("outstanding confirm");
            assert!(c.await.expect("confirm").is_ack(), "publish refused");
        }
        confirms.push_back(
            ch.basic_publish("".into(), queue.into(), Default::default(), &body, props(i))
                .await
                .expect("publish"),
        );
    }
    for c in confirms {
        assert!(c.await.expect("confirm").is_ack(), "publish refused");
    }
}

/// Waits until `queue` holds at least `n` ready messages, polling every 5 ms.
pub async fn wait_for(ch: &lapin::Channel, queue: &str, n: usize) {
    while (count(ch, queue).await as usize) < n {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// CPU time of process `pid` (`"self"` for this one) in clock ticks (user + system,
/// fields 14 and 15 of `/proc/PID/stat`); 0 when it cannot be read.
pub fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum()
}

/// The broker's Erlang VM (`beam.smp`) process id, if one runs here.
pub fn broker_pid() -> Option<String> {
    // The broker this bench talks to at 127.0.0.1 runs in its network namespace: with a
    // RabbitMQ 4 in a namespace of its own (scripts/rabbitmq4.sh) beside the host's, the
    // host's is not the one measured.
    let net = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let ours = net("self");
    let out = std::process::Command::new("pgrep")
        .arg("beam.smp")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|pid| net(pid) == ours)
        .map(str::to_string)
}

/// CPU readings at the start of a measured run: broker ticks, own ticks, wall clock.
pub type Ticks = (u64, u64, Instant);

/// Reads the CPU counters of `broker` (if known) and of this process now.
pub fn ticks_now(broker: Option<&str>) -> Ticks {
    (
        broker.map_or(0, cpu_ticks),
        cpu_ticks("self"),
        Instant::now(),
    )
}

/// CPU used by the broker and by this process since `start`, in % of one core (clock
/// ticks at 100 Hz, `getconf CLK_TCK` on Linux).
pub fn cpu_since(broker: Option<&str>, start: Ticks) -> (f64, f64) {
    let wall_ticks = start.2.elapsed().as_secs_f64() * 100.0;
    let share = |now: u64, then: u64| now.saturating_sub(then) as f64 / wall_ticks * 100.0;
    (
        broker.map_or(0.0, |b| share(cpu_ticks(b), start.0)),
        share(cpu_ticks("self"), start.1),
    )
}

/// CPU seconds used by the broker and by this process since `start` (10 ms resolution).
pub fn cpu_seconds_since(broker: Option<&str>, start: Ticks) -> (f64, f64) {
    let secs = |now: u64, then: u64| now.saturating_sub(then) as f64 / 100.0;
    (
        broker.map_or(0.0, |b| secs(cpu_ticks(b), start.0)),
        secs(cpu_ticks("self"), start.1),
    )
}

/// The median of `v` (the upper one of an even count). Panics on an empty `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The `p`-th percentile (0–100, nearest rank) of `v`. Panics on an empty `v`.
pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
