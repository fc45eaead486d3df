//! Node loss and partitions on a real 3-node RabbitMQ cluster (scripts/rabbitmq-cluster.sh,
//! 3.10 or 4.0: `DLQ_RABBITMQ_CLUSTER` names its cluster.json), counting every message id
//! end to end (docs/RELIABILITY.md):
//! - `dlq replay` of 20,000 dead letters with the connected node killed half-way, a
//!   follower killed, the queues' leader killed while connected to another node, and the
//!   connected node partitioned (pause_minority);
//! - the retry router moving 10,000 rejected messages with its node killed, and with its
//!   node partitioned;
//! - `apply` with one node down, and with no node answering;
//! - the backlog monitor (`run --standalone`) with its only node killed, and partitioned,
//!   each time back by itself, and with a list of nodes;
//! - `dlq repair`, the console's repair and the console's replay with their node killed
//!   between the publish of a copy and the ack of its original (a proxy holds back the
//!   broker's confirm: [`Freezing`]);
//! - a DeadLetterReplay run by the operator (against the real API server,
//!   `DLQ_E2E_KUBECONFIG`) with its node killed half-way, and the controller converging
//!   a new DeadLetterQueue while that node is down.
//!
//! Each prints a `RELIABILITY` line with its figures. The tests take the cluster one at a
//! time (tests/common/cluster.rs); a test heals and restarts what it broke.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{self, rejecting_consumer, Cluster, Tally};
use common::console::{login, page_with, repair_form, start_replay, Console};
use common::dlq::{header, text as amqp_text};
use common::proxy::Freezing;
use common::*;
use dlq_operator::object::api_resource;
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
/// The RetryPolicy of the fault tests (spec body).
const POLICY: &str = "  maxRetries: 1\n  tiers: [1s]\n";
/// How long (s) the router tests keep a node killed or partitioned before ending the fault.
const FAULT_S: u64 = 30;

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
        reliability!(
            "{} | {} | lost {} | duplicated {} (bound {}) | resumed {} | moving again {} | {}",
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

    /// Waits up to `timeout` for the exit: its status and stdout. Sleeps on the test's
    /// runtime, so its other tasks (a proxy, the AMQP connections' heartbeats) go on.
    async fn finish(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        loop {
            self.drain();
            if let Some(status) = self.child.try_wait().expect("wait") {
                tokio::time::sleep(Duration::from_millis(200)).await;
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
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, then [`Proc::finish`] (a router drains).
    async fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish(Duration::from_secs(60)).await;
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

    /// Ends the fault: restarts the killed node, heals the partition.
    fn end(self, c: &Cluster) {
        match self {
            Fault::Kill(n) => c.restart(n),
            Fault::Partition(_) => c.heal(),
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
    let declared = manifests_for(c, &[1, 2, 3], &q, POLICY, "");
    apply_ok(&declared);
    let dir = manifests_for(c, order, &q, POLICY, "");
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
    let (status, out) = replay.finish(Duration::from_secs(10)).await;
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

/// What [`route_through`] saw of a router run after its fault.
struct RouterRun {
    /// From the fault until the tier grew by more than what was in flight then.
    moving_again: Option<Duration>,
    /// From the fault until every id was in the tier and nothing was left to move.
    settled_after: Duration,
    /// Whether the fault was ended (after `FAULT_S`) before the run settled.
    healed: bool,
}

/// Strikes `fault` and waits until the router has moved everything: the source and the
/// inbox hold nothing ready, the source nothing held for its dead-lettering, and the tier
/// at least `ROUTED`, four reads a second apart (the cluster's management statistics are
/// at most 1 s old). The fault ends after `FAULT_S` (the partition heals; the killed node
/// is restarted, as Kubernetes restarts a killed pod): RabbitMQ's at-least-once
/// dead-lettering out of the source queue may stall until then (docs/RELIABILITY.md).
/// Panics if the router exits or does not finish within `FAULT_S + 400` s.
async fn route_through(
    c: &Cluster,
    fault: Fault,
    conn: &lapin::Connection,
    q: &str,
    router: &mut Proc,
    at_fault: u32,
) -> RouterRun {
    let tier = format!("{q}.retry.1h");
    fault.strike(c);
    let struck = Instant::now();
    let mut moving_again = None;
    let mut settled = 0;
    let mut healed = false;
    while settled < 4 {
        router.drain();
        assert!(!router.exited(), "the router exited: {:?}", router.stderr);
        assert!(
            struck.elapsed() < Duration::from_secs(FAULT_S + 400),
            "the router does not finish"
        );
        if !healed && struck.elapsed() > Duration::from_secs(FAULT_S) {
            fault.end(c);
            healed = true;
        }
        let t = depth_on(conn, &tier).await.unwrap_or(0);
        if moving_again.is_none() && t > at_fault + PREFETCH as u32 + 100 {
            moving_again = Some(struck.elapsed());
        }
        let rest = depth_on(conn, q).await.unwrap_or(1)
            + depth_on(conn, &format!("{q}.router")).await.unwrap_or(1)
            + held_for_dead_lettering(c, q).await;
        settled = if rest == 0 && t as usize >= ROUTED {
            settled + 1
        } else {
            0
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    RouterRun {
        moving_again,
        settled_after: struck.elapsed(),
        healed,
    }
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
    let run = route_through(c, fault, &conn, &q, &mut router, at_fault).await;
    stop.store(true, Ordering::Relaxed);
    let _ = consumer.await;
    let (moving_again, settled_after, healed) = (run.moving_again, run.settled_after, run.healed);
    router.stop().await;
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
            match (fault, healed) {
                (_, false) => " (the fault still on)".to_string(),
                (Fault::Partition(_), true) => format!(" (partition healed after {FAULT_S} s)"),
                (Fault::Kill(_), true) => format!(" (node restarted after {FAULT_S} s)"),
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

/// Messages quorum queue `queue` holds for its at-least-once dead-lettering
/// (`messages_dlx`: rejected, not yet confirmed by the dead-letter target; neither ready
/// nor unacknowledged, so a passive declare does not count them), as node 2's
/// management API reports it (its statistics lag up to `collect_statistics_interval`, 1 s
/// in the test cluster); 1 while it cannot be read.
async fn held_for_dead_lettering(c: &Cluster, queue: &str) -> u32 {
    c.mgmt_get(2, &format!("/api/queues/%2F/{}", cluster::enc(queue)))
        .await
        .map_or(1, |q| q["messages_dlx"].as_u64().unwrap_or(0) as u32)
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
    let dir = manifests_for(&c, &[1, 2, 3], &q, POLICY, "");
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
    reliability!(
        "{} | apply, node 1 down | converged through the others in {:.1} s",
        c.version,
        took.as_secs_f64()
    );
    c.restart(1);

    // Nodes 2 and 3 down: node 1, alone, pauses (pause_minority) and answers nothing.
    c.kill(2);
    c.kill(3);
    let out = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let said = text(&out);
    reliability!(
        "{} | apply, no node answers | exit {:?}: {}",
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

/// `monitoring:` of the monitor test: a poll every 200 ms.
const MONITORING: &str = "  monitoring:\n    interval: 200ms\n    threshold: 100\n";

/// `run --standalone` whose Secret lists node 3 only, with `fault` struck on node 3 once
/// `dlq_broker_up` reads 1 and ended once it reads 0: how long each took (`None`: not
/// within the time allowed).
async fn monitor_alone_under(
    c: &Cluster,
    q: &str,
    fault: Fault,
) -> (Option<Duration>, Option<Duration>) {
    let dir = manifests_for(c, &[3], q, POLICY, MONITORING);
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
    fault.strike(c);
    // A partition is noticed after net_ticktime, when the minority node pauses.
    let down = until_broker_up(&addr, 0.0, Duration::from_secs(60)).await;
    fault.end(c);
    let back = until_broker_up(&addr, 1.0, Duration::from_secs(120)).await;
    run.drain();
    (down, back)
}

#[tokio::test]
async fn the_monitor_says_the_broker_cannot_be_read_and_recovers_by_itself() {
    let Some(c) = Cluster::get("the_monitor_says_the_broker_cannot_be_read_and_recovers_by_itself")
    else {
        return;
    };
    let q = unique("cf-monitor");
    for (fault, what) in [
        (Fault::Kill(3), "killed"),
        (Fault::Partition(3), "partitioned (pause_minority)"),
    ] {
        let (down, back) = monitor_alone_under(&c, &q, fault).await;
        reliability!(
            "{} | monitor, its only node 3 {what} | dlq_broker_up 0 after {down:?}, 1 again {back:?} after the fault ended",
            c.version
        );
        assert!(
            down.is_some(),
            "dlq_broker_up did not turn 0 with its node {what}"
        );
        assert!(
            back.is_some(),
            "dlq_broker_up did not come back by itself after its node was {what}"
        );
    }

    // The same with the three nodes listed, node 3 first: it never turns 0.
    let listed = manifests_for(&c, &[3, 1, 2], &q, POLICY, MONITORING);
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
    reliability!(
        "{} | monitor, node 3 of [3, 1, 2] killed | dlq_broker_up 0 in {zeros} of {} reads over 15 s",
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

/// Marker in the body of a repaired copy: the proxy of [`Cut`] holds back the broker's
/// replies once a client has sent it.
const MARK: &str = "repaired-7c1f";

/// Dead letters of a DeadLetterQueue whose queues node 1 leads, for a move cut between
/// the publish of a copy and the ack of its original: a client reaches node 1 through a
/// [`Freezing`] proxy that stops the broker's replies (the copy's publisher confirm) once
/// the client sends a marker; node 1 is then killed.
struct Cut {
    q: String,
    dlq: String,
    ids: Vec<String>,
    /// A connection to node 2, which outlives node 1.
    conn: lapin::Connection,
    proxy: Freezing,
    /// Manifests whose Secret reaches node 1 through the proxy only.
    dir: tempfile::TempDir,
}

impl Cut {
    /// Declares the DeadLetterQueue `d` (through node 1), puts `n` dead letters in its
    /// dead-letter queue (through node 2), and starts the proxy that freezes on the
    /// marker `marker(ids)`.
    async fn new(c: &Cluster, prefix: &str, n: usize, marker: impl Fn(&[String]) -> String) -> Cut {
        let q = unique(prefix);
        let dlq = format!("{q}.dlq");
        apply_ok(&manifests_for(c, &[1, 2, 3], &q, POLICY, ""));
        let ids = cluster::ids(&q, n);
        let (conn, ch) = c.channel(2).await;
        let h = header(&[("dlq-original-queue", amqp_text(&q))]);
        cluster::publish_all(&ch, &dlq, &ids, h).await;
        let node1 = c.nodes[0].amqp.trim_start_matches("amqp://").to_string();
        let proxy = Freezing::start(&node1, marker(&ids).as_bytes()).await;
        let uri = format!("amqp://guest:guest@{}/%2f", proxy.addr);
        let dir = manifests(&[
            ("s.yaml", &c.secret_yaml_with("s", &uri, &[1, 2, 3])),
            ("p.yaml", &policy_yaml("p", POLICY)),
            ("d.yaml", &dlq_yaml("d", &q, "p", "s", "")),
        ]);
        Cut {
            q,
            dlq,
            ids,
            conn,
            proxy,
            dir,
        }
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Waits until the proxy has frozen and the source queue holds a copy and has stopped
    /// growing (1 s unchanged: the broker has routed and confirmed every copy it was sent,
    /// its confirms held back), then kills node 1: before the client could ack the
    /// originals of those copies.
    async fn kill_when_frozen(&self, c: &Cluster, said: &mut dyn FnMut() -> String) {
        let start = Instant::now();
        let (mut last, mut steady) = (0, 0);
        while steady < 5 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no copy was published through the proxy (frozen: {}): {}",
                self.proxy.frozen(),
                said()
            );
            if self.proxy.frozen() {
                let d = depth_on(&self.conn, &self.q).await.unwrap_or(0);
                steady = if d >= 1 && d == last { steady + 1 } else { 0 };
                last = d;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        c.kill(1);
    }

    /// Once the originals held by the dead connection are back (the source and the
    /// dead-letter queue hold at least every id, two reads a second apart), takes every
    /// message out of both and counts the copies of each id; the repaired bodies (those
    /// with [`MARK`]) counted apart.
    async fn tally(&self) -> (Tally, usize) {
        let start = Instant::now();
        let mut steady = 0;
        while steady < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the originals did not come back"
            );
            let held = depth_on(&self.conn, &self.q).await.unwrap_or(0)
                + depth_on(&self.conn, &self.dlq).await.unwrap_or(0);
            steady = if held as usize >= self.ids.len() {
                steady + 1
            } else {
                0
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // A channel opened now: one that saw a queue without a leader may have been closed.
        let ch = self.conn.create_channel().await.expect("channel");
        let repaired = common::dlq::take_all(&ch, &self.q).await;
        let marked = repaired
            .iter()
            .filter(|m| String::from_utf8_lossy(&m.body).contains(MARK))
            .count();
        let mut seen = cluster::count_ids(&ch, std::slice::from_ref(&self.dlq)).await;
        for m in &repaired {
            *seen.entry(m.id.clone()).or_insert(0) += 1;
        }
        (cluster::tally(&self.ids, &seen), marked)
    }

    async fn finish(self, c: &Cluster) {
        c.restart(1);
        let _ = self.conn.close(200, "bye".into()).await;
        c.cleanup(2, &self.q).await;
    }
}

#[tokio::test]
async fn repair_with_its_node_killed_between_the_publish_and_the_ack_loses_nothing() {
    let Some(c) =
        Cluster::get("repair_with_its_node_killed_between_the_publish_and_the_ack_loses_nothing")
    else {
        return;
    };
    let cut = Cut::new(&c, "cf-repair", 3, |_| MARK.to_string()).await;
    let id = cut.ids[1].clone();
    let body = format!("{{\"repaired\":\"{MARK}\"}}");
    let path = cut.path();
    let mut repair = Proc::start(&[
        "dlq",
        "repair",
        "--standalone",
        "-f",
        &path,
        "--name",
        "d",
        "--id",
        &id,
        "--body-json",
        &body,
    ]);
    cut.kill_when_frozen(&c, &mut || {
        repair.drain();
        repair.stderr.join("\n")
    })
    .await;
    let (status, _) = repair.finish(Duration::from_secs(120)).await;
    let said = repair.stderr.join("\n");
    let (t, marked) = cut.tally().await;
    reliability!(
        "{} | dlq repair, node 1 killed between the publish and the ack | lost {} | duplicated {} (bound 1) | repaired copies {marked} | exit {:?}: {}",
        c.version,
        t.lost,
        t.duplicated,
        status.code(),
        said.replace('\n', " / ")
    );
    assert_eq!(t.lost, 0, "{t:?}");
    assert_eq!(t.unexpected, 0, "{t:?}");
    assert!(t.duplicated <= 1, "{t:?}");
    assert_eq!(marked, 1, "the repaired copy is in the source queue");
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains(dlq_operator::dlq::repair::STOPPED_NOTE),
        "the user is told what may have happened: {said}"
    );
    assert!(!said.contains("panicked"), "{said}");
    cut.finish(&c).await;
}

#[tokio::test]
async fn console_repair_with_its_node_killed_between_the_publish_and_the_ack_loses_nothing() {
    let Some(c) = Cluster::get(
        "console_repair_with_its_node_killed_between_the_publish_and_the_ack_loses_nothing",
    ) else {
        return;
    };
    let cut = Cut::new(&c, "cf-crepair", 3, |_| MARK.to_string()).await;
    let console = Console::start(&cut.path());
    let cookie = login(&console).await;
    let form = repair_form(&console, &cookie, "/dlq/default/d", &cut.ids[1]).await;
    let body = format!("{{\"repaired\":\"{MARK}\"}}");
    let fields = [
        ("csrf", form.csrf.clone()),
        ("g", form.g.clone()),
        ("body", body),
        ("headers", "{}".to_string()),
    ];
    // The POST answers once the repair ends: sent from a task while node 1 is killed.
    let (base, action, cookie2) = (console.base.clone(), form.action.clone(), cookie.clone());
    let posted = tokio::spawn(async move {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = common::console::client()
            .post(format!("{base}{action}"))
            .header("cookie", &cookie2)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(common::console::encoded(&pairs))
            .send()
            .await
            .expect("post");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    });
    cut.kill_when_frozen(&c, &mut String::new).await;
    let (status, page) = posted.await.expect("post task");
    let (t, marked) = cut.tally().await;
    reliability!(
        "{} | console repair, node 1 killed between the publish and the ack | lost {} | duplicated {} (bound 1) | repaired copies {marked} | HTTP {status}",
        c.version, t.lost, t.duplicated
    );
    assert_eq!(t.lost, 0, "{t:?}");
    assert_eq!(t.unexpected, 0, "{t:?}");
    assert!(t.duplicated <= 1, "{t:?}");
    assert_eq!(marked, 1, "the repaired copy is in the source queue");
    assert_eq!(status, 502, "{page}");
    assert!(
        page.contains("may have reached the source queue"),
        "the user is told what may have happened: {page}"
    );
    drop(console);
    cut.finish(&c).await;
}

#[tokio::test]
async fn console_replay_with_its_node_killed_between_a_publish_and_its_ack_loses_nothing() {
    const N: usize = 2_000;
    let Some(c) = Cluster::get(
        "console_replay_with_its_node_killed_between_a_publish_and_its_ack_loses_nothing",
    ) else {
        return;
    };
    // The proxy freezes when the copy of the middle dead letter is published.
    let cut = Cut::new(&c, "cf-creplay", N, |ids| ids[N / 2].clone()).await;
    let console = Console::start(&cut.path());
    let cookie = login(&console).await;
    let job = start_replay(&console, &cookie, "/dlq/default/d").await;
    cut.kill_when_frozen(&c, &mut String::new).await;
    let page = page_with(&console, &cookie, &job, "Done:").await;
    let (t, _) = cut.tally().await;
    let bound = dlq_operator::dlq::replay::crash_bound(
        dlq_operator::dlq::replay::MAX_IN_FLIGHT,
        None,
        None,
    );
    let error = page
        .split("class=\"error\">")
        .nth(1)
        .and_then(|e| e.split("</p>").next())
        .unwrap_or_default()
        .replace('\n', " ");
    reliability!(
        "{} | console replay of {N}, node 1 killed between a publish and its ack | lost {} | duplicated {} (bound {bound}) | the job page: {error}",
        c.version, t.lost, t.duplicated
    );
    assert_eq!(t.lost, 0, "{t:?}");
    assert_eq!(t.unexpected, 0, "{t:?}");
    assert!(t.duplicated as u64 <= bound, "{t:?}");
    assert!(
        error.contains("a second replay sends those again"),
        "the user is told what may have happened: {page}"
    );
    drop(console);
    cut.finish(&c).await;
}

/// A DeadLetterReplay run by the operator (against the real API server) whose broker
/// connection's node is killed half-way: the operator's replay resumes on the next
/// address like `dlq replay`; the resource ends Succeeded, every id counted. Then, the
/// node still down, a new DeadLetterQueue converges through the other two.
#[tokio::test]
async fn the_operator_resumes_a_replay_and_converges_with_a_node_killed() {
    const TEST: &str = "the_operator_resumes_a_replay_and_converges_with_a_node_killed";
    const N: usize = 5_000;
    let Some(client) = common::e2e::client(TEST).await else {
        return;
    };
    let Some(c) = Cluster::get(TEST) else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    common::e2e::ensure_crds(&client).await;
    let ns = common::e2e::namespace(&client, "cf-replay").await;
    let q = unique("cf-dlr");
    let dlq = format!("{q}.dlq");
    let objects = [
        c.secret_yaml("rabbit", &[1, 2, 3]),
        policy_yaml("policy", POLICY),
        dlq_yaml("work", &q, "policy", "rabbit", ""),
    ];
    for yaml in objects {
        create_object(&client, &ns, &yaml).await;
    }
    let op = common::e2e::Operator::start(
        &kubeconfig,
        &["--namespace", &ns, "--leader-election=false"],
    );
    let dlqs = common::e2e::dlqs(&client, &ns);
    common::e2e::wait_for(Duration::from_secs(90), "work Ready", &op, || async {
        common::e2e::ready(&dlqs, "work")
            .await
            .filter(|r| r.0 == "True")
    })
    .await;
    let ids = cluster::ids(&q, N);
    let (conn, ch) = c.channel(2).await;
    let h = header(&[("dlq-original-queue", amqp_text(&q))]);
    cluster::publish_all(&ch, &dlq, &ids, h).await;
    let replay = kube::api::DynamicObject::new(
        "all",
        &api_resource::<dlq_operator::crd::DeadLetterReplay>(),
    )
    .data(serde_json::json!({"spec": {"deadLetterQueueRef": {"name": "work"}}}));
    let replays: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        &ns,
        &api_resource::<dlq_operator::crd::DeadLetterReplay>(),
    );
    replays
        .create(&Default::default(), &replay)
        .await
        .expect("create DeadLetterReplay");
    depth_at_least(&conn, &q, (N / 2) as u32, Duration::from_secs(300))
        .await
        .unwrap_or_else(|| panic!("the replay did not reach half; log:\n{}", op.log()));
    c.kill(1);
    let struck = Instant::now();
    let status = common::e2e::wait_for(
        Duration::from_secs(300),
        "the DeadLetterReplay finished",
        &op,
        || async {
            let o = replays.get_opt("all").await.ok()??;
            let s = o.data.get("status")?.clone();
            ["Succeeded", "Partial", "Failed"]
                .contains(&s["phase"].as_str()?)
                .then_some(s)
        },
    )
    .await;
    let finished = struck.elapsed();
    let t = cluster::tally(
        &ids,
        &cluster::count_ids(&ch, &[q.clone(), dlq.clone()]).await,
    );
    let in_doubt = status["inDoubt"].as_u64().unwrap_or(0);
    reliability!(
        "{} | DeadLetterReplay of {N}, its node 1 (the leader) killed half-way | lost {} | duplicated {} (inDoubt {in_doubt}) | {} {:.1} s after the kill, replayed {}",
        c.version,
        t.lost,
        t.duplicated,
        status["phase"],
        finished.as_secs_f64(),
        status["replayed"]
    );
    assert_eq!(t.lost, 0, "{t:?}");
    assert_eq!(t.unexpected, 0, "{t:?}");
    assert!(
        t.duplicated as u64 <= in_doubt,
        "{t:?} beyond inDoubt: {status}"
    );
    assert_eq!(status["phase"], "Succeeded", "{status}");

    converges_with_node_1_down(&c, &client, &ns, &op, &conn, &q).await;
    drop(op);
    let _ = conn.close(200, "bye".into()).await;
    c.restart(1);
    c.cleanup(2, &q).await;
}

/// With node 1 still down, a new DeadLetterQueue `second` (queue `{q}-second`) created in
/// `ns` becomes Ready through nodes 2 and 3 and its dead-letter queue is declared; prints
/// the RELIABILITY row with the time it took. Panics if it is not Ready within 120 s.
async fn converges_with_node_1_down(
    c: &Cluster,
    client: &kube::Client,
    ns: &str,
    op: &common::e2e::Operator,
    conn: &lapin::Connection,
    q: &str,
) {
    let dlqs = common::e2e::dlqs(client, ns);
    let q2 = format!("{q}-second");
    create_object(client, ns, &dlq_yaml("second", &q2, "policy", "rabbit", "")).await;
    let created = Instant::now();
    common::e2e::wait_for(
        Duration::from_secs(120),
        "second Ready with node 1 down",
        op,
        || async {
            common::e2e::ready(&dlqs, "second")
                .await
                .filter(|r| r.0 == "True")
        },
    )
    .await;
    reliability!(
        "{} | controller, node 1 down | a new DeadLetterQueue Ready through the other nodes {:.1} s after it was created",
        c.version,
        created.elapsed().as_secs_f64()
    );
    assert!(
        depth_on(conn, &format!("{q2}.dlq")).await.is_some(),
        "its dead-letter queue is declared"
    );
}

/// Creates the object of manifest `yaml` in namespace `ns` (its own namespace ignored).
async fn create_object(client: &kube::Client, ns: &str, yaml: &str) {
    let mut v: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("manifest");
    v["metadata"]["namespace"] = ns.into();
    let kind = v["kind"].as_str().expect("kind").to_string();
    let ar = match kind.as_str() {
        "Secret" => kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        "RetryPolicy" => api_resource::<dlq_operator::crd::RetryPolicy>(),
        "DeadLetterQueue" => api_resource::<dlq_operator::crd::DeadLetterQueue>(),
        other => panic!("no API resource for kind {other}"),
    };
    let obj: kube::api::DynamicObject = serde_json::from_value(v).expect("object");
    kube::Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .create(&Default::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {kind}: {e}"));
}
