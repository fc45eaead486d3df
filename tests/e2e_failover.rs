//! Operator failover against the real Kubernetes API server and the real RabbitMQ
//! (docs/RELIABILITY.md, "Operator failover"): two `dlq-operator run` processes share the
//! leader Lease and the leader is SIGKILLed in the middle of reconciling twenty
//! DeadLetterQueues, and while its retry router moves messages; and the API server itself
//! is restarted while the operator reconciles. Each prints a `RELIABILITY` line with its
//! figures. (The leader killed mid-replay: tests/e2e_replay.rs.)
//!
//! Needs `DLQ_E2E_KUBECONFIG` (.ci/run starts an API server with
//! scripts/kube-apiserver.sh, which also restarts it); skipped by name without it. The
//! restart cuts every watch of the API server, so it runs alone: the other tests of this
//! binary hold [`API`] shared, the restart holds it exclusively.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::RwLock;

use common::cluster::{self, rejecting_consumer};
use common::dlq::confirm_channel;
use common::e2e::{
    client, create_dlq, dlqs, ensure_crds, lease_flags, lease_holder, namespace_with_broker, ready,
    rps, wait_for, Operator,
};
use common::{cleanup, mgmt_get, unique, AMQP};
use dlq_operator::crd::{DeadLetterQueue, RetryPolicy};
use dlq_operator::object::api_resource;

/// Held shared by a test that needs the API server up, exclusively by its restart.
static API: RwLock<()> = RwLock::const_new(());

const LONG: Duration = Duration::from_secs(90);
/// Lease duration (s) of the failover tests: how long a killed leader blocks the standby.
const LEASE_S: u64 = 6;

/// Two operators of namespace `ns` sharing a new Lease: `replica-a` holding it, and
/// `replica-b` answering `/healthz` as the standby. Returns (a, b, lease name).
async fn leader_and_standby(
    client: &Client,
    kubeconfig: &str,
    ns: &str,
) -> (Operator, Operator, String) {
    let lease = unique("e2e-failover");
    let flags = |id: &str| -> Vec<String> {
        let mut f = vec!["--namespace".to_string(), ns.to_string()];
        f.extend(lease_flags(&lease, LEASE_S, id));
        f
    };
    let a_flags = flags("replica-a");
    let a = Operator::start(
        kubeconfig,
        &a_flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for(LONG, "replica-a holds the lease", &a, || async {
        (lease_holder(client, &lease).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let b_flags = flags("replica-b");
    let b = Operator::start(
        kubeconfig,
        &b_flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for(LONG, "replica-b answers /healthz", &b, || async {
        b.healthy().await.then_some(())
    })
    .await;
    (a, b, lease)
}

/// SIGKILLs `a` and waits until `b` holds `lease`: the time from the kill to the
/// hand-over, and the instant of the kill.
async fn kill_and_hand_over(
    client: &Client,
    a: &mut Operator,
    b: &Operator,
    lease: &str,
) -> (Duration, Instant) {
    a.signal("-KILL");
    a.wait(Duration::from_secs(10)).await.expect("killed");
    let killed = Instant::now();
    wait_for(LONG, "replica-b holds the lease", b, || async {
        (lease_holder(client, lease).await.as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    (killed.elapsed(), killed)
}

/// How many of `names` have `Ready=True`.
async fn ready_count(api: &Api<DynamicObject>, names: &[String]) -> usize {
    let mut n = 0;
    for name in names {
        if ready(api, name).await.is_some_and(|r| r.0 == "True") {
            n += 1;
        }
    }
    n
}

/// Creates the DeadLetterQueues `names` in `ns` at once (source queue `<prefix>-<name>`).
async fn create_all(client: &Client, ns: &str, prefix: &str, names: &[String]) {
    futures::future::join_all(names.iter().map(|name| {
        let q = format!("{prefix}-{name}");
        async move { create_dlq(client, ns, name, &q, json!({})).await }
    }))
    .await;
}

/// Asserts that the topology of source queue `q` (tier 5s of `namespace_with_broker`'s
/// RetryPolicy) is on the local broker: the dead-letter queue, the tier and the
/// operator's policy on `q`.
async fn assert_topology(ch: &lapin::Channel, q: &str) {
    for queue in [format!("{q}.dlq"), format!("{q}.retry.5s")] {
        assert!(
            cluster::depth(ch, &queue).await.is_some(),
            "{queue} is declared"
        );
    }
    let policy = format!(
        "/api/policies/%2F/{}",
        cluster::enc(&format!("dlq-operator.{q}"))
    );
    assert!(
        mgmt_get(&policy).await.is_some(),
        "policy dlq-operator.{q} is set"
    );
}

#[tokio::test]
async fn a_reconcile_whose_leader_is_killed_is_finished_by_the_standby() {
    const TEST: &str = "a_reconcile_whose_leader_is_killed_is_finished_by_the_standby";
    let _up = API.read().await;
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-fo-reconcile", AMQP).await;
    let prefix = unique("e2e-forec");
    let (mut a, b, lease) = leader_and_standby(&client, &kubeconfig, &ns).await;
    let names: Vec<String> = (0..20).map(|i| format!("w{i:02}")).collect();
    create_all(&client, &ns, &prefix, &names).await;
    // Killed while it reconciles: once it has finished two reconciles, before the rest.
    wait_for(LONG, "replica-a reconciles", &a, || async {
        (a.reconciles().await >= 2).then_some(())
    })
    .await;
    let (handover, killed) = kill_and_hand_over(&client, &mut a, &b, &lease).await;
    let api = dlqs(&client, &ns);
    let ready_at_kill = ready_count(&api, &names).await;
    wait_for(LONG, "every DeadLetterQueue Ready", &b, || async {
        (ready_count(&api, &names).await == names.len()).then_some(())
    })
    .await;
    let all_ready = killed.elapsed();
    reliability!(
        "operator failover | leader SIGKILLed mid-reconcile of {} DeadLetterQueues ({ready_at_kill} Ready then) | standby leads after {:.1} s (lease {LEASE_S} s), all Ready {:.1} s after the kill",
        names.len(),
        handover.as_secs_f64(),
        all_ready.as_secs_f64()
    );
    assert!(
        ready_at_kill < names.len(),
        "the leader was killed after it had reconciled everything: nothing was interrupted"
    );
    assert!(
        handover <= Duration::from_secs(LEASE_S + 4),
        "handover took {handover:?} with a {LEASE_S} s lease"
    );
    let (conn, ch) = confirm_channel().await;
    for name in &names {
        assert_topology(&ch, &format!("{prefix}-{name}")).await;
    }
    let _ = conn.close(200, "bye".into()).await;
    drop(b);
    cleanup(&prefix).await;
}

/// A DeadLetterQueue `work` in router mode for quorum queue `q` with RetryPolicy `hour`
/// (1 retry, one 1 h tier: moved messages stay in the tier) and the router's `prefetch`.
async fn router_dlq(client: &Client, ns: &str, q: &str, prefetch: u16) {
    let rp = DynamicObject::new("hour", &api_resource::<RetryPolicy>())
        .data(json!({"spec": {"maxRetries": 1, "tiers": ["1h"]}}));
    rps(client, ns)
        .create(&PostParams::default(), &rp)
        .await
        .expect("rp");
    let dlq = DynamicObject::new("work", &api_resource::<DeadLetterQueue>()).data(json!({"spec": {
        "broker": {"secretRef": {"name": "rabbit"}},
        "source": {"queue": q},
        "retryPolicyRef": {"name": "hour"},
        "router": {"enabled": true, "prefetch": prefetch},
        "deletionPolicy": "Delete",
    }}));
    dlqs(client, ns)
        .create(&PostParams::default(), &dlq)
        .await
        .expect("dlq");
}

/// `dlq_router_consuming` of DeadLetterQueue `ns/work` is 1 on `op`'s metrics.
async fn consuming(op: &Operator, ns: &str) -> bool {
    let series = format!("dlq_router_consuming{{name=\"work\",namespace=\"{ns}\"}} 1");
    op.metrics().await.contains(&series)
}

/// Consumers of `queue` as the management API counts them (0 while it cannot be read).
async fn consumers_of(queue: &str) -> u64 {
    mgmt_get(&format!("/api/queues/%2F/{}", cluster::enc(queue)))
        .await
        .and_then(|q| q["consumers"].as_u64())
        .unwrap_or(0)
}

#[tokio::test]
async fn routers_whose_leader_is_killed_are_taken_over_by_the_standby() {
    const TEST: &str = "routers_whose_leader_is_killed_are_taken_over_by_the_standby";
    const N: usize = 5_000;
    const PREFETCH: u16 = 100;
    let _up = API.read().await;
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-fo-router", AMQP).await;
    let prefix = unique("e2e-forouter");
    let q = format!("{prefix}-work");
    let (tier, inbox) = (format!("{q}.retry.1h"), format!("{q}.router"));
    let (mut a, b, lease) = leader_and_standby(&client, &kubeconfig, &ns).await;
    router_dlq(&client, &ns, &q, PREFETCH).await;
    wait_for(LONG, "replica-a's router consumes", &a, || async {
        consuming(&a, &ns).await.then_some(())
    })
    .await;

    let (conn, ch) = confirm_channel().await;
    let ids = cluster::ids(&q, N);
    cluster::publish_all(&ch, &q, &ids, Default::default()).await;
    let conn = Arc::new(conn);
    let stop = Arc::new(AtomicBool::new(false));
    let rejecter = rejecting_consumer(conn.clone(), q.clone(), stop.clone());
    let at_kill = cluster::until_depth(&ch, &tier, 1_000, LONG)
        .await
        .unwrap_or_else(|| panic!("the router did not move 1,000; log:\n{}", a.log()));
    // The inbox's consumers, read while the leader goes and the standby takes over.
    let watching = Arc::new(AtomicBool::new(true));
    let most_consumers = {
        let (inbox, watching) = (inbox.clone(), watching.clone());
        tokio::spawn(async move {
            let mut most = 0;
            while watching.load(Ordering::Relaxed) {
                most = most.max(consumers_of(&inbox).await);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            most
        })
    };
    let (handover, killed) = kill_and_hand_over(&client, &mut a, &b, &lease).await;
    wait_for(LONG, "replica-b's router consumes", &b, || async {
        consuming(&b, &ns).await.then_some(())
    })
    .await;
    let consuming_again = killed.elapsed();
    // Settled: the source and the inbox empty and every id moved, three reads in a row.
    let mut settled = 0;
    while settled < 3 {
        assert!(
            killed.elapsed() < Duration::from_secs(180),
            "the standby's router does not finish; log:\n{}",
            b.log()
        );
        let moved = cluster::depth(&ch, &tier).await.unwrap_or(0)
            + cluster::depth(&ch, &format!("{q}.dlq")).await.unwrap_or(0);
        let rest = cluster::depth(&ch, &q).await.unwrap_or(1)
            + cluster::depth(&ch, &inbox).await.unwrap_or(1);
        settled = if rest == 0 && moved as usize >= N {
            settled + 1
        } else {
            0
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = rejecter.await;
    watching.store(false, Ordering::Relaxed);
    let most = most_consumers.await.expect("watcher");
    let queues = [tier.clone(), format!("{q}.dlq"), inbox.clone(), q.clone()];
    let t = cluster::tally(&ids, &cluster::count_ids(&ch, &queues).await);
    reliability!(
        "operator failover | leader SIGKILLed while its router moved {N} ({at_kill} in the tier then) | standby leads after {:.1} s (lease {LEASE_S} s), its router consumes {:.1} s after the kill | lost {} | duplicated {} (bound {PREFETCH}) | inbox consumers at most {most}",
        handover.as_secs_f64(),
        consuming_again.as_secs_f64(),
        t.lost,
        t.duplicated
    );
    assert!(
        (at_kill as usize) < N,
        "killed after the router had moved everything"
    );
    assert_eq!(t.lost, 0, "messages lost: {t:?}");
    assert_eq!(t.unexpected, 0, "{t:?}");
    assert!(
        t.duplicated <= usize::from(PREFETCH),
        "{t:?}: beyond the prefetch"
    );
    assert!(most <= 1, "{most} routers consumed the inbox at once");
    assert!(
        handover <= Duration::from_secs(LEASE_S + 4),
        "handover took {handover:?} with a {LEASE_S} s lease"
    );
    drop(b);
    cleanup(&prefix).await;
}

/// Stops the API server of `kubeconfig` (scripts/kube-apiserver.sh started it in the
/// kubeconfig's directory) and starts it again on the same port over the same etcd; how
/// long it was gone.
async fn restart_api_server(kubeconfig: &str) -> Duration {
    let dir = std::path::Path::new(kubeconfig)
        .parent()
        .expect("the kubeconfig's directory")
        .to_path_buf();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kube-apiserver.sh");
    let start = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(script)
            .arg("restart-apiserver")
            .arg(&dir)
            .output()
            .expect("run kube-apiserver.sh")
    })
    .await
    .expect("restart task");
    assert!(
        out.status.success(),
        "restart-apiserver: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

#[tokio::test]
async fn the_controller_recovers_from_an_api_server_restart_by_itself() {
    const TEST: &str = "the_controller_recovers_from_an_api_server_restart_by_itself";
    let _alone = API.write().await;
    let Some(client) = client(TEST).await else {
        return;
    };
    let kubeconfig = common::e2e::kubeconfig(TEST).expect("set");
    ensure_crds(&client).await;
    let ns = namespace_with_broker(&client, "e2e-apiserver", AMQP).await;
    let prefix = unique("e2e-apirestart");
    let lease = unique("e2e-restart");
    // Leader election on, with the default Lease duration (15 s), as the chart runs it.
    let mut flags = vec!["--namespace".to_string(), ns.clone()];
    flags.extend(lease_flags(&lease, 15, "replica-a"));
    let mut op = Operator::start(
        &kubeconfig,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let names: Vec<String> = (0..10).map(|i| format!("w{i:02}")).collect();
    create_all(&client, &ns, &prefix, &names).await;
    wait_for(LONG, "the operator reconciles", &op, || async {
        (op.reconciles().await >= 1).then_some(())
    })
    .await;
    let gone = restart_api_server(&kubeconfig).await;
    let back = Instant::now();
    // A DeadLetterQueue created after the restart: only a watch that recovered sees it.
    let mut all = names.clone();
    all.push("after".into());
    create_all(&client, &ns, &prefix, &all[names.len()..]).await;
    let api = dlqs(&client, &ns);
    wait_for(
        LONG,
        "every DeadLetterQueue Ready after the restart",
        &op,
        || async { (ready_count(&api, &all).await == all.len()).then_some(()) },
    )
    .await;
    let recovered = back.elapsed();
    let exited = op.child.try_wait().ok().flatten();
    let holder = lease_holder(&client, &lease).await;
    reliability!(
        "API server restart | mid-reconcile of {} DeadLetterQueues | the API server gone {:.1} s; all {} Ready {:.1} s after it was back, the one created after the restart included | operator still running: {}, Lease held by {holder:?}",
        names.len(),
        gone.as_secs_f64(),
        all.len(),
        recovered.as_secs_f64(),
        exited.is_none()
    );
    assert!(
        exited.is_none(),
        "the operator exited ({exited:?}); log:\n{}",
        op.log()
    );
    assert_eq!(holder.as_deref(), Some("replica-a"), "it still leads");
    for name in &all {
        let o = api.get(name).await.expect("get");
        assert_eq!(
            o.data["status"]["observedGeneration"].as_i64(),
            o.metadata.generation,
            "{name}: the status observed its generation"
        );
    }
    drop(op);
    cleanup(&prefix).await;
}
