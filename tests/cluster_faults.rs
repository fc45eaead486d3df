//! Node loss and partitions on a real 3-node RabbitMQ cluster (scripts/rabbitmq-cluster.sh,
//! 3.10 or 4.0: `DLQ_RABBITMQ_CLUSTER` names its cluster.json), counting every message id
//! end to end (docs/RELIABILITY.md):
//! - `dlq replay` of 20,000 dead letters with the connected node killed half-way, a
//!   follower killed, the queues' leader killed while connected to another node, and the
//!   connected node partitioned (pause_minority);
//! - the retry router moving 10,000 rejected messages with its node killed, and with its
//!   node partitioned;
//! - `apply` with one node down, and with no node answering;
//! - the backlog monitor (`run --standalone`) with its only node killed and back, and with
//!   a list of nodes.
//!
//! Each prints a `RELIABILITY` line with its figures. The tests take the cluster one at a
//! time (tests/common/cluster.rs); a test heals and restarts what it broke.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{self, Cluster, Tally};
use common::dlq::{header, text as amqp_text};
use common::*;
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;

/// Dead letters a replay test replays.
const REPLAYED: usize = 20_000;
/// Messages the router tests have rejected.
const ROUTED: usize = 10_000;
/// `--max-in-flight` of the replays: the most one lost pass may duplicate.
const MAX_IN_FLIGHT: usize = 1_000;
/// `spec.router.prefetch` of the router tests: the most a lost router may duplicate.
const PREFETCH: usize = 1_000;
/// Copies that may still land after a fault without the run moving on (in flight when it
/// struck): a depth above the one at the fault by more than this says the run moves again.
const IN_FLIGHT_MARGIN: u32 = 1_100;
/// How long (s) the router tests keep a node partitioned before healing it.
const PARTITION_S: u64 = 30;

/// What the product did under one fault, for the `RELIABILITY` line.
struct Row<'a> {
    version: &'a str,
    case: &'a str,
    tally: &'a Tally,
    bound: usize,
    resumed: u64,
    moving_again: Option<Duration>,
    said: String,
}

impl Row<'_> {
    fn print(&self) {
        let again = self
            .moving_again
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        eprintln!(
            "RELIABILITY {} | {} | lost {} | duplicated {} (bound {}) | resumed {} | moving again {} | {}",
            self.version,
            self.case,
            self.tally.lost,
            self.tally.duplicated,
            self.bound,
            self.resumed,
            again,
            self.said
        );
    }
}

/// Manifests of Secret `s` (the nodes in `order`), RetryPolicy `p` (`policy`: its spec
/// body) and DeadLetterQueue `d` of quorum queue `q` with `extra` under `spec:`.
fn manifests_for(
    c: &Cluster,
    order: &[usize],
    q: &str,
    policy: &str,
    extra: &str,
) -> tempfile::TempDir {
    manifests(&[
        ("s.yaml", &c.secret_yaml("s", order)),
        ("p.yaml", &policy_yaml("p", policy)),
        ("d.yaml", &dlq_yaml("d", q, "p", "s", extra)),
    ])
}

/// `dlq-operator apply -f dir`, asserted to succeed.
fn apply_ok(dir: &tempfile::TempDir) {
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    assert!(out.status.success(), "apply: {}", text(&out));
}

/// A process of ours: stdout read whole at the end, stderr line by line; killed on drop.
struct Proc {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Vec<String>,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(args)
            .env("RUST_LOG", "warn,lapin=off")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dlq-operator");
        let lines = stderr_lines(&mut child);
        Proc {
            child,
            lines,
            stderr: Vec::new(),
        }
    }

    /// Collects the stderr lines written so far.
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            eprintln!("  | {l}");
            self.stderr.push(l);
        }
    }

    /// `true` once the process has exited.
    fn exited(&mut self) -> bool {
        self.drain();
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits up to `timeout` for the exit: its status and stdout.
    fn finish(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        loop {
            self.drain();
            if let Some(status) = self.child.try_wait().expect("wait") {
                std::thread::sleep(Duration::from_millis(200));
                self.drain();
                let mut out = String::new();
                if let Some(mut s) = self.child.stdout.take() {
                    let _ = s.read_to_string(&mut out);
                }
                return (status, out);
            }
            assert!(
                start.elapsed() < timeout,
                "still running after {timeout:?}: {}",
                self.stderr.join("\n")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM, then [`Proc::finish`] (a router drains).
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish(Duration::from_secs(60));
    }

    fn said(&self, needle: &str) -> Option<&String> {
        self.stderr.iter().find(|l| l.contains(needle))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Depth of `queue` on a fresh channel of `conn` (a failed passive declare closes its
/// channel): `None` while it cannot be read.
async fn depth_on(conn: &lapin::Connection, queue: &str) -> Option<u32> {
    let ch = conn.create_channel().await.ok()?;
    let d = cluster::depth(&ch, queue).await;
    let _ = ch.close(200, "bye".into()).await;
    d
}

/// Waits up to `timeout` until `queue` holds at least `n` messages (read through `conn`).
async fn depth_at_least(
    conn: &lapin::Connection,
    queue: &str,
    n: u32,
    timeout: Duration,
) -> Option<u32> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(d) = depth_on(conn, queue).await.filter(|d| *d >= n) {
            return Some(d);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Which fault a test makes.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill(usize),
    Partition(usize),
}

impl Fault {
    fn strike(self, c: &Cluster) {
        match self {
            Fault::Kill(n) => c.kill(n),
            Fault::Partition(n) => c.partition(n),
        }
    }
}

/// One replay under a fault: the Secret lists the nodes in `order` (the first is the one
/// connected to), the queues are declared through node 1 (their leader), 20,000 dead
/// letters are published through `watch`, and `fault` strikes once half of them are
/// back in the source queue. Returns the row's figures after asserting 0 lost and the
/// duplicates within what the report says may be in doubt.
async fn replay_under(c: &Cluster, case: &str, order: &[usize], fault: Fault, watch: usize) {
    let q = unique("cf-replay");
    let dlq = format!("{q}.dlq");
    let declared = manifests_for(c, &[1, 2, 3], &q, "  maxRetries: 1\n  tiers: [1s]\n", "");
    apply_ok(&declared);
    let dir = manifests_for(c, order, &q, "  maxRetries: 1\n  tiers: [1s]\n", "");
    let leader = c.leader_of(watch, &dlq).await;
    let ids = cluster::ids(&q, REPLAYED);
    let (conn, ch) = c.channel(watch).await;
    let h = header(&[("dlq-original-queue", amqp_text(&q))]);
    cluster::publish_all(&ch, &dlq, &ids, h).await;

    let path = dir.path().display().to_string();
    let max = MAX_IN_FLIGHT.to_string();
    let mut replay = Proc::start(&[
        "dlq",
        "replay",
        "--standalone",
        "-f",
        &path,
        "--name",
        "d",
        "--max-in-flight",
        &max,
        "-o",
        "json",
    ]);
    let half = (REPLAYED / 2) as u32;
    let at_fault = depth_at_least(&conn, &q, half, Duration::from_secs(300))
        .await
        .unwrap_or_else(|| {
            panic!(
                "the replay did not reach {half} copies: {:?}",
                replay.stderr
            )
        });
    fault.strike(c);
    let struck = Instant::now();
    let mut moving_again = None;
    while !replay.exited() {
        if moving_again.is_none()
            && depth_on(&conn, &q).await.unwrap_or(0) > at_fault + IN_FLIGHT_MARGIN
        {
            moving_again = Some(struck.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(struck.elapsed() < Duration::from_secs(400), "replay hangs");
    }
    let (status, out) = replay.finish(Duration::from_secs(10));
    let report: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("report JSON ({e}): {out}\n{:?}", replay.stderr));
    if let Fault::Partition(_) = fault {
        c.heal();
    }
    let seen = cluster::count_ids(&ch, &[q.clone(), dlq.clone()]).await;
    let t = cluster::tally(&ids, &seen);
    let resumed = report["resumed"].as_u64().unwrap_or(0);
    let in_doubt = report["inDoubt"].as_u64().unwrap_or(0) as usize;
    Row {
        version: &c.version,
        case,
        tally: &t,
        bound: in_doubt,
        resumed,
        moving_again,
        said: format!(
            "exit {:?}, outcome {}, leader was node {leader:?}{}",
            status.code(),
            report["outcome"],
            replay
                .said("resuming")
                .map(|l| format!(", said: {l}"))
                .unwrap_or_default()
        ),
    }
    .print();
    let _ = conn.close(200, "bye".into()).await;
    assert_eq!(t.lost, 0, "{case}: dead letters lost ({t:?})");
    assert_eq!(t.unexpected, 0, "{case}: {t:?}");
    assert!(
        t.duplicated <= in_doubt && in_doubt <= MAX_IN_FLIGHT * resumed as usize,
        "{case}: {t:?} beyond the {in_doubt} in doubt of {resumed} resumed pass(es)"
    );
    assert!(status.success(), "{case}: {report}");
    assert_eq!(report["outcome"], "Succeeded", "{case}: {report}");
    if resumed > 0 {
        assert!(
            replay.said("resuming in").is_some(),
            "{case}: a resumed pass is told on stderr: {:?}",
            replay.stderr
        );
    }
    c.cleanup(watch, &q).await;
}

#[tokio::test]
async fn replay_resumes_when_the_connected_node_is_killed_half_way() {
    let Some(c) = Cluster::get("replay_resumes_when_the_connected_node_is_killed_half_way") else {
        return;
    };
    replay_under(
        &c,
        "replay, connected node 1 (leader) killed",
        &[1, 2, 3],
        Fault::Kill(1),
        2,
    )
    .await;
}

#[tokio::test]
async fn replay_goes_on_when_a_follower_is_killed() {
    let Some(c) = Cluster::get("replay_goes_on_when_a_follower_is_killed") else {
        return;
    };
    replay_under(
        &c,
        "replay, follower node 3 killed",
        &[1, 2, 3],
        Fault::Kill(3),
        2,
    )
    .await;
}

#[tokio::test]
async fn replay_goes_on_when_the_leader_is_killed_under_a_client_of_another_node() {
    let Some(c) =
        Cluster::get("replay_goes_on_when_the_leader_is_killed_under_a_client_of_another_node")
    else {
        return;
    };
    replay_under(
        &c,
        "replay via node 2, leader node 1 killed",
        &[2, 3, 1],
        Fault::Kill(1),
        3,
    )
    .await;
}

#[tokio::test]
async fn replay_resumes_when_the_connected_node_is_partitioned() {
    let Some(c) = Cluster::get("replay_resumes_when_the_connected_node_is_partitioned") else {
        return;
    };
    replay_under(
        &c,
        "replay, connected node 1 partitioned (pause_minority)",
        &[1, 2, 3],
        Fault::Partition(1),
        2,
    )
    .await;
}

/// A consumer of `queue` on `conn` that rejects every delivery (requeue=false) until
/// `stop`, consuming again whenever its consumer ends (its queue's leader moved).
fn rejecting_consumer(
    conn: Arc<lapin::Connection>,
    queue: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let Ok(ch) = conn.create_channel().await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let _ = ch.basic_qos(500, BasicQosOptions::default()).await;
            let Ok(mut consumer) = ch
                .basic_consume(
                    queue.as_str().into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
            else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(300), consumer.next()).await {
                    Ok(Some(Ok(d))) => {
                        let _ = d.reject(BasicRejectOptions { requeue: false }).await;
                    }
                    Ok(_) => break,
                    Err(_) => {}
                }
            }
            let _ = ch.close(200, "bye".into()).await;
        }
    })
}

/// The retry router under a fault: the Secret lists nodes 1, 2, 3 (the router connects to
/// node 1, which leads the queues), 10,000 messages published through node 2 are rejected
/// there by a plain consumer, and `fault` strikes once 3,000 of them wait in the tier.
async fn router_under(c: &Cluster, case: &str, fault: Fault) {
    let q = unique("cf-router");
    let tier = format!("{q}.retry.1h");
    let extra = format!("  router:\n    enabled: true\n    prefetch: {PREFETCH}\n");
    let dir = manifests_for(
        c,
        &[1, 2, 3],
        &q,
        "  maxRetries: 1\n  tiers: [1h]\n",
        &extra,
    );
    apply_ok(&dir);
    let ids = cluster::ids(&q, ROUTED);
    let (conn, ch) = c.channel(2).await;
    cluster::publish_all(&ch, &q, &ids, FieldTable::default()).await;
    let conn = Arc::new(conn);
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = rejecting_consumer(conn.clone(), q.clone(), stop.clone());
    let path = dir.path().display().to_string();
    let mut router = Proc::start(&[
        "router",
        "--standalone",
        "-f",
        &path,
        "--metrics-bind-address",
        "127.0.0.1:0",
    ]);
    let at_fault = depth_at_least(&conn, &tier, 3_000, Duration::from_secs(300))
        .await
        .unwrap_or_else(|| panic!("the router did not move 3,000: {:?}", router.stderr));
    fault.strike(c);
    let struck = Instant::now();
    let mut moving_again = None;
    // Done once the source and the inbox hold nothing ready and every id has reached the
    // tier (or the dead-letter queue), three reads a second apart.
    let mut settled = 0;
    // A partition is healed after PARTITION_S: RabbitMQ's at-least-once dead-lettering out
    // of the source queue may stall until then (docs/RELIABILITY.md).
    let mut healed = !matches!(fault, Fault::Partition(_));
    while settled < 3 {
        router.drain();
        assert!(!router.exited(), "the router exited: {:?}", router.stderr);
        assert!(
            struck.elapsed() < Duration::from_secs(PARTITION_S + 400),
            "the router does not finish"
        );
        if !healed && struck.elapsed() > Duration::from_secs(PARTITION_S) {
            c.heal();
            healed = true;
        }
        let t = depth_on(&conn, &tier).await.unwrap_or(0);
        if moving_again.is_none() && t > at_fault + PREFETCH as u32 + 100 {
            moving_again = Some(struck.elapsed());
        }
        let rest = depth_on(&conn, &q).await.unwrap_or(1)
            + depth_on(&conn, &format!("{q}.router")).await.unwrap_or(1);
        settled = if rest == 0 && t as usize >= ROUTED {
            settled + 1
        } else {
            0
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = consumer.await;
    let settled_after = struck.elapsed();
    router.stop();
    let queues = [
        tier.clone(),
        format!("{q}.dlq"),
        format!("{q}.router"),
        q.clone(),
    ];
    let seen = cluster::count_ids(&ch, &queues).await;
    let t = cluster::tally(&ids, &seen);
    let warned = router
        .said("another address")
        .and_then(|l| l.split_once("position=(").map(|(_, p)| p))
        .and_then(|p| {
            p.split_once(')')
                .map(|(p, _)| format!("another address answered ({p})"))
        })
        .unwrap_or_else(|| "none".into());
    Row {
        version: &c.version,
        case,
        tally: &t,
        bound: PREFETCH,
        resumed: 0,
        moving_again,
        said: format!(
            "every id in the tier {:.0} s after the fault{} | warning: {warned}",
            settled_after.as_secs_f64(),
            match fault {
                Fault::Partition(_) => format!(" (partition healed after {PARTITION_S} s)"),
                Fault::Kill(_) => String::new(),
            }
        ),
    }
    .print();
    let _ = ch.close(200, "bye".into()).await;
    assert_eq!(t.lost, 0, "{case}: messages lost ({t:?})");
    assert_eq!(t.unexpected, 0, "{case}: {t:?}");
    assert!(
        t.duplicated <= PREFETCH,
        "{case}: {t:?} beyond the prefetch"
    );
    assert!(
        moving_again.is_some(),
        "{case}: the router did not move on after the fault"
    );
    c.cleanup(2, &q).await;
}

#[tokio::test]
async fn router_reconnects_to_another_node_when_its_node_is_killed() {
    let Some(c) = Cluster::get("router_reconnects_to_another_node_when_its_node_is_killed") else {
        return;
    };
    router_under(&c, "router, its node 1 (leader) killed", Fault::Kill(1)).await;
}

#[tokio::test]
async fn router_reconnects_to_another_node_when_its_node_is_partitioned() {
    let Some(c) = Cluster::get("router_reconnects_to_another_node_when_its_node_is_partitioned")
    else {
        return;
    };
    router_under(
        &c,
        "router, its node 1 partitioned (pause_minority)",
        Fault::Partition(1),
    )
    .await;
}

#[tokio::test]
async fn apply_converges_through_the_other_nodes_and_names_every_address_when_none_answers() {
    let Some(c) = Cluster::get(
        "apply_converges_through_the_other_nodes_and_names_every_address_when_none_answers",
    ) else {
        return;
    };
    let q = unique("cf-apply");
    let dir = manifests_for(&c, &[1, 2, 3], &q, "  maxRetries: 1\n  tiers: [1s]\n", "");
    c.kill(1);
    let start = Instant::now();
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "apply with node 1 down: {}",
        text(&out)
    );
    assert!(
        c.mgmt_get(
            2,
            &format!("/api/queues/%2F/{}", cluster::enc(&format!("{q}.dlq")))
        )
        .await
        .is_some(),
        "the dead-letter queue is declared through node 2"
    );
    eprintln!(
        "RELIABILITY {} | apply, node 1 down | converged through the others in {:.1} s",
        c.version,
        took.as_secs_f64()
    );
    c.restart(1);

    // Nodes 2 and 3 down: node 1, alone, pauses (pause_minority) and answers nothing.
    c.kill(2);
    c.kill(3);
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let said = text(&out);
    eprintln!(
        "RELIABILITY {} | apply, no node answers | exit {:?}: {}",
        c.version,
        out.status.code(),
        said.trim()
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    for n in 1..=3 {
        let host = c.nodes[n - 1]
            .amqp
            .trim_start_matches("amqp://")
            .to_string();
        let mgmt = c.nodes[n - 1]
            .management
            .trim_start_matches("http://")
            .to_string();
        assert!(
            said.contains(&host) || said.contains(&mgmt),
            "the error names node {n}: {said}"
        );
    }
    assert!(said.contains("unreachable"), "{said}");
    assert!(!said.contains("guest:guest"), "no password shown: {said}");
    assert!(!said.contains("panicked"), "{said}");
    c.restart(2);
    c.restart(3);
    c.cleanup(2, &q).await;
}

/// `dlq_broker_up` of DeadLetterQueue default/d on the metrics page at `addr`: `None`
/// while the page or the series is missing.
async fn broker_up(addr: &str) -> Option<f64> {
    let page = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    page.lines()
        .find(|l| {
            l.starts_with("dlq_broker_up{")
                && l.contains("name=\"d\"")
                && l.contains("namespace=\"default\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits up to `timeout` until [`broker_up`] is `want`: how long that took.
async fn until_broker_up(addr: &str, want: f64, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if broker_up(addr).await == Some(want) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A free loopback address for a metrics server.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

#[tokio::test]
async fn the_monitor_says_the_broker_cannot_be_read_and_recovers_by_itself() {
    let Some(c) = Cluster::get("the_monitor_says_the_broker_cannot_be_read_and_recovers_by_itself")
    else {
        return;
    };
    let q = unique("cf-monitor");
    let monitoring = "  monitoring:\n    interval: 200ms\n    threshold: 100\n";
    // One address: node 3 only.
    let dir = manifests_for(&c, &[3], &q, "  maxRetries: 1\n  tiers: [1s]\n", monitoring);
    let addr = free_addr();
    let path = dir.path().display().to_string();
    let mut run = Proc::start(&[
        "run",
        "--standalone",
        "-f",
        &path,
        "--metrics-bind-address",
        &addr,
    ]);
    until_broker_up(&addr, 1.0, Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("dlq_broker_up never 1: {:?}", run.stderr));
    c.kill(3);
    let down = until_broker_up(&addr, 0.0, Duration::from_secs(60)).await;
    c.restart(3);
    let back = until_broker_up(&addr, 1.0, Duration::from_secs(60)).await;
    run.drain();
    drop(run);
    eprintln!(
        "RELIABILITY {} | monitor, its only node 3 killed | dlq_broker_up 0 after {:?}, 1 again {:?} after the restart",
        c.version, down, back
    );
    assert!(
        down.is_some(),
        "dlq_broker_up did not turn 0 with its node gone"
    );
    assert!(back.is_some(), "dlq_broker_up did not come back by itself");

    // The same with the three nodes listed, node 3 first: it never turns 0.
    let listed = manifests_for(
        &c,
        &[3, 1, 2],
        &q,
        "  maxRetries: 1\n  tiers: [1s]\n",
        monitoring,
    );
    let addr = free_addr();
    let path = listed.path().display().to_string();
    let mut run = Proc::start(&[
        "run",
        "--standalone",
        "-f",
        &path,
        "--metrics-bind-address",
        &addr,
    ]);
    until_broker_up(&addr, 1.0, Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("dlq_broker_up never 1: {:?}", run.stderr));
    c.kill(3);
    let watch = Instant::now();
    let mut values = Vec::new();
    while watch.elapsed() < Duration::from_secs(15) {
        values.push(broker_up(&addr).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run.drain();
    c.restart(3);
    let zeros = values.iter().filter(|v| **v == Some(0.0)).count();
    eprintln!(
        "RELIABILITY {} | monitor, node 3 of [3, 1, 2] killed | dlq_broker_up 0 in {zeros} of {} reads over 15 s",
        c.version,
        values.len()
    );
    assert_eq!(
        zeros, 0,
        "dlq_broker_up turned 0 although nodes 1 and 2 answer"
    );
    assert!(
        values.iter().filter(|v| **v == Some(1.0)).count() > values.len() / 2,
        "dlq_broker_up read as 1: {values:?}"
    );
    c.cleanup(1, &q).await;
}
