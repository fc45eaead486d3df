//! `dlq replay` against the real RabbitMQ: exactly the matching messages go back, once,
//! unmodified but for the documented headers, the rest stay; a message that failed in one
//! of two queues behind a fanout exchange goes back to that queue only; a SIGKILL in the
//! middle loses nothing; bad input touches no message.

mod common;

use std::collections::BTreeSet;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::ExchangeKind;

use common::cleanup;
use common::dlq::{
    applied, applied_manifests_with, confirm_channel, connection, drain_ids, header, ids_in_order,
    now_ms, publish, ready, ready_now, text,
};
use tokio_util::sync::CancellationToken;

use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::replay::{Outcome, ReplayOptions, ReplayReport, Target};
use dlq_operator::dlq::DeadLetter;
use dlq_operator::rabbitmq::dlq::replay;

/// Starts `dlq replay --standalone -f PATH --name d EXTRA…` (`RUST_LOG=warn`), its
/// output captured (`piped`) or dropped.
fn spawn_replay(path: &str, extra: &[&str], piped: bool) -> std::process::Child {
    let out = || {
        if piped {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        }
    };
    std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["dlq", "replay", "--standalone", "-f", path, "--name", "d"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(out())
        .stderr(out())
        .spawn()
        .expect("start replay")
}

/// Waits (at most 60 s) until the source queue `q` holds at least `n` messages.
async fn until_source_holds(ch: &lapin::Channel, q: &str, n: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ready_now(ch, q).await < n {
        assert!(
            std::time::Instant::now() < deadline,
            "replay made no progress: {q} holds fewer than {n}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn options(filter: &[&str]) -> ReplayOptions {
    ReplayOptions {
        filter: Filter::parse(filter).expect("filter"),
        limit: None,
        rate: None,
        dry_run: false,
        target: Target::OriginalQueue,
        max_replays: 3,
        replay_id: "test-run".into(),
        max_in_flight: dlq_operator::dlq::replay::MAX_IN_FLIGHT,
        rewrite: None,
    }
}

/// Takes every message of `queue` (acked) as read by the inspector's reader.
async fn drain(ch: &lapin::Channel, queue: &str) -> Vec<(DeadLetter, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        let d = DeadLetter::read(queue, &m.delivery.properties, &m.delivery.data, usize::MAX);
        out.push((d, m.delivery.data.clone()));
    }
    out
}

#[tokio::test]
async fn replay_with_a_filter_moves_exactly_the_matching_messages_once() {
    let q = common::unique("t-replay-filter");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let classes = ["timeout", "validation", "parse"];
    let mut expected = BTreeSet::new();
    for i in 0..1000 {
        let class = classes[i % 3];
        let id = format!("m{i:04}");
        if class == "timeout" {
            expected.insert(id.clone());
        }
        publish(
            &ch,
            &dlq,
            &id,
            header(&[
                ("dlq-error-class", text(class)),
                ("dlq-retry-count", AMQPValue::LongLongInt(5)),
                ("dlq-reason", text("MaxRetriesExceeded")),
                ("dlq-original-queue", text(&q)),
                ("tenant", text("acme")),
            ]),
        )
        .await;
    }
    let stop = CancellationToken::new();
    let report = replay(
        &connection(),
        &t,
        &options(&["class=timeout"]),
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(
        (report.total, report.matched, report.replayed),
        (1000, 334, 334)
    );
    assert_eq!((report.skipped_total(), report.failed_total()), (0, 0));

    let back = drain(&ch, &q).await;
    let ids: Vec<String> = back
        .iter()
        .filter_map(|(d, _)| d.message_id.clone())
        .collect();
    assert_eq!(ids.len(), 334, "none duplicated");
    assert_eq!(
        ids.iter().cloned().collect::<BTreeSet<_>>(),
        expected,
        "exactly the matching ones"
    );
    for (d, body) in &back {
        let id = d.message_id.as_deref().unwrap_or_default();
        assert_eq!(body, format!("body of {id}").as_bytes(), "body unchanged");
        assert_eq!(d.headers["tenant"], "acme", "user header kept");
        assert_eq!(d.error_class, "Timeout");
        assert_eq!(d.headers["dlq-replay-id"], "test-run");
        assert_eq!(d.replay_count, 1);
        assert!(d.headers.contains_key("dlq-replayed-at"));
        assert!(
            !d.headers.contains_key("dlq-retry-count"),
            "retry count reset"
        );
        assert!(!d.headers.contains_key("dlq-reason"));
    }
    let rest = drain_ids(&ch, &dlq).await;
    assert_eq!(rest.len(), 666, "the others stay in the dead-letter queue");
    assert!(rest.iter().all(|id| !expected.contains(id)));
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// The acks of replayed originals, the nacks of the kept messages and the channel's close
/// reach the broker in one piece (a proxy holds them until the replay waits for a reply on
/// that connection), as from a fast replay on a broker that commits slowly. Once 32 of a
/// quorum queue channel's commands await their Raft commit, the channel keeps further acks
/// back until commits are reported, and a channel closed before then drops them (RabbitMQ
/// 3.10): without a wait for the acks before the close, all but the first 33 originals
/// stayed in the dead-letter queue beside their copies — in most rounds, so three rounds.
#[tokio::test]
async fn every_replayed_original_is_removed_even_when_the_acks_reach_the_broker_at_once() {
    for round in 0..3 {
        let (rest, duplicated) = replay_through_a_burst_proxy(round).await;
        assert_eq!(
            (rest, duplicated),
            (50, 0),
            "round {round}: replayed originals left in the dead-letter queue beside their copies"
        );
    }
}

/// Replays 100 of 150 dead letters (a kept one after every two that match: one ack each)
/// through a [`common::proxy::Coalescing`] proxy; returns how many messages the dead-letter
/// queue holds after it, and how many of those were replayed.
async fn replay_through_a_burst_proxy(round: u32) -> (usize, usize) {
    let q = common::unique(&format!("t-replay-burst{round}"));
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let mut expected = BTreeSet::new();
    for i in 0..150 {
        let id = format!("m{i:03}");
        let class = if i % 3 == 2 { "parse" } else { "timeout" };
        if class == "timeout" {
            expected.insert(id.clone());
        }
        let headers = header(&[
            ("dlq-error-class", text(class)),
            ("dlq-original-queue", text(&q)),
        ]);
        publish(&ch, &dlq, &id, headers).await;
    }
    // The first connection (the one that reads) is held; the one that publishes is not.
    let proxy =
        common::proxy::Coalescing::start("127.0.0.1:5672", std::time::Duration::from_millis(200));
    let data: std::collections::BTreeMap<String, Vec<u8>> = [
        ("uri", format!("amqp://guest:guest@{}/%2f", proxy.addr)),
        ("managementUri", common::MGMT.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_bytes()))
    .collect();
    let through_proxy = dlq_operator::broker::BrokerConnection::from_secret_data("rabbitmq", &data)
        .expect("secret");
    let report = replay(
        &through_proxy,
        &t,
        &options(&["class=timeout"]),
        now_ms(),
        &CancellationToken::new(),
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    drop(proxy);
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(
        (report.total, report.matched, report.replayed),
        (150, 100, 100)
    );
    let arrived = drain_ids(&ch, &q).await;
    assert_eq!(arrived.len(), 100, "one copy each");
    assert_eq!(arrived.into_iter().collect::<BTreeSet<_>>(), expected);
    let rest = drain_ids(&ch, &dlq).await;
    let duplicated = rest.iter().filter(|id| expected.contains(*id)).count();
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
    (rest.len(), duplicated)
}

#[tokio::test]
async fn replay_to_the_original_queue_skips_the_other_queues_of_a_fanout() {
    let q = common::unique("t-replay-fanout");
    let t = applied(&q, None).await;
    let (conn, ch) = confirm_channel().await;
    let fanout = format!("{q}-fanout");
    let other = format!("{q}-other");
    ch.exchange_declare(
        fanout.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange");
    ch.queue_declare(
        other.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("other queue");
    for queue in [&q, &other] {
        ch.queue_bind(
            queue.as_str().into(),
            fanout.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    }
    let dlq = format!("{q}.dlq");
    let failed = |id: &str| {
        header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-original-exchange", text(&fanout)),
            ("dlq-original-routing-key", text("")),
            ("dlq-error-class", text(id)),
        ])
    };
    publish(&ch, &dlq, "f1", failed("f1")).await;
    // Another queue's message in this DLQ (mis-routed): never sent elsewhere.
    publish(
        &ch,
        &dlq,
        "x1",
        header(&[("dlq-original-queue", text("someone-else"))]),
    )
    .await;

    let stop = CancellationToken::new();
    let report = replay(
        &connection(),
        &t,
        &options(&[]),
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(
        (report.matched, report.replayed, report.skipped_total()),
        (2, 1, 1),
        "{report:?}"
    );
    assert!(
        report.skipped.keys().any(|k| k.contains("someone-else")),
        "{report:?}"
    );
    assert_eq!(drain_ids(&ch, &q).await, ["f1"]);
    assert_eq!(
        ready(&ch, &other).await,
        0,
        "the fanout's other queue gets nothing"
    );

    // --to original-exchange through the fanout would also reach the other queue (whose
    // consumer had the message already): skipped, naming that queue, and kept.
    publish(&ch, &dlq, "f2", failed("f2")).await;
    let mut opts = options(&["class=f2"]);
    opts.target = Target::OriginalExchange;
    let report = replay(
        &connection(),
        &t,
        &opts,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(
        (report.replayed, report.skipped_total()),
        (0, 1),
        "{report:?}"
    );
    assert!(
        report
            .skipped
            .keys()
            .any(|k| k.contains(&format!("also reaches \"{other}\""))),
        "{report:?}"
    );
    assert_eq!(ready(&ch, &q).await, 0);
    assert_eq!(
        ready(&ch, &other).await,
        0,
        "nothing sent to the other queue"
    );
    assert_eq!(drain_ids(&ch, &dlq).await, ["f2", "x1"]);
    let _ = ch
        .queue_delete(other.as_str().into(), Default::default())
        .await;
    let _ = ch
        .exchange_delete(fanout.as_str().into(), Default::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// Declares exchange `name` of `kind` (with `args`) and binds each (queue, key).
async fn exchange_with(
    ch: &lapin::Channel,
    name: &str,
    kind: ExchangeKind,
    args: FieldTable,
    bindings: &[(&str, &str)],
) {
    ch.exchange_declare(name.into(), kind, ExchangeDeclareOptions::default(), args)
        .await
        .expect("exchange");
    for (queue, key) in bindings {
        ch.queue_bind(
            (*queue).into(),
            name.into(),
            (*key).into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    }
}

/// Publishes dead letter `id` of source queue `q` to `dlq`, first published to `exchange`
/// with `key`.
async fn letter(ch: &lapin::Channel, dlq: &str, q: &str, id: &str, exchange: &str, key: &str) {
    publish(
        ch,
        dlq,
        id,
        header(&[
            ("dlq-original-queue", text(q)),
            ("dlq-original-exchange", text(exchange)),
            ("dlq-original-routing-key", text(key)),
        ]),
    )
    .await;
}

/// `--to original-exchange` publishes a copy only where the broker's bindings route it to
/// the source queue alone: a route that also (or only) reaches another queue — a topic
/// pattern, a direct key, the default exchange, a `CC` header — is skipped with the queue
/// named, and so is what cannot be resolved (a headers exchange, an exchange-to-exchange
/// binding, a missing exchange, no queue at all). Each of those copies used to be
/// delivered (or fail as unroutable), since only `dlq-original-queue` was checked.
#[tokio::test]
async fn replay_to_the_original_exchange_reaches_the_source_queue_only() {
    let q = common::unique("t-replay-route");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let other = format!("{q}-other");
    ch.queue_declare(
        other.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("other queue");
    let (topic, direct, headers, hop, with_ae) = (
        format!("{q}-topic"),
        format!("{q}-direct"),
        format!("{q}-headers"),
        format!("{q}-hop"),
        format!("{q}-ae"),
    );
    let none = FieldTable::default();
    exchange_with(
        &ch,
        &topic,
        ExchangeKind::Topic,
        none.clone(),
        &[(&q, "orders.created.*"), (&other, "orders.#.eu")],
    )
    .await;
    exchange_with(
        &ch,
        &direct,
        ExchangeKind::Direct,
        none.clone(),
        &[(&q, "k1"), (&other, "k2")],
    )
    .await;
    exchange_with(
        &ch,
        &headers,
        ExchangeKind::Headers,
        none.clone(),
        &[(&q, "")],
    )
    .await;
    // An alternate exchange routing to the other queue: used only for what the exchange
    // itself cannot route, so a copy that reaches the source queue never goes there.
    exchange_with(
        &ch,
        &with_ae,
        ExchangeKind::Direct,
        header(&[("alternate-exchange", text(&direct))]),
        &[(&q, "k1")],
    )
    .await;
    exchange_with(&ch, &hop, ExchangeKind::Direct, none.clone(), &[(&q, "k1")]).await;
    ch.exchange_bind(
        direct.as_str().into(),
        hop.as_str().into(),
        "k1".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange-to-exchange binding");
    letter(&ch, &dlq, &q, "ok-topic", &topic, "orders.created.us").await;
    letter(&ch, &dlq, &q, "ok-direct", &direct, "k1").await;
    letter(&ch, &dlq, &q, "ok-ae", &with_ae, "k1").await;
    letter(&ch, &dlq, &q, "ok-default", "", &q).await;
    letter(&ch, &dlq, &q, "both-topic", &topic, "orders.created.eu").await;
    letter(&ch, &dlq, &q, "other-direct", &direct, "k2").await;
    letter(&ch, &dlq, &q, "other-default", "", &other).await;
    letter(&ch, &dlq, &q, "headers", &headers, "").await;
    letter(&ch, &dlq, &q, "hop", &hop, "k1").await;
    letter(&ch, &dlq, &q, "nowhere", &direct, "k9").await;
    letter(&ch, &dlq, &q, "gone", &format!("{q}-gone"), "k1").await;
    publish(
        &ch,
        &dlq,
        "o1",
        header(&[
            ("dlq-original-queue", text(&other)),
            ("dlq-original-exchange", text(&direct)),
            ("dlq-original-routing-key", text("k2")),
        ]),
    )
    .await;
    publish(
        &ch,
        &dlq,
        "cc",
        header(&[
            ("dlq-original-queue", text(&q)),
            ("dlq-original-exchange", text(&direct)),
            ("dlq-original-routing-key", text("k1")),
            ("CC", AMQPValue::FieldArray(vec![text("k2")].into())),
        ]),
    )
    .await;

    let stop = CancellationToken::new();
    let mut opts = options(&[]);
    opts.target = Target::OriginalExchange;
    let report = replay(
        &connection(),
        &t,
        &opts,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!(
        (
            report.replayed,
            report.skipped_total(),
            report.failed_total()
        ),
        (4, 9, 0),
        "{report:?}"
    );
    let count = |needle: &str| -> u64 {
        report
            .skipped
            .iter()
            .filter(|(k, _)| k.contains(needle))
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(count(&format!("also reaches \"{other}\"")), 4, "{report:?}");
    assert_eq!(count("headers exchange"), 1, "{report:?}");
    assert_eq!(
        count(&format!("routes on to exchange \"{direct}\"")),
        1,
        "{report:?}"
    );
    assert_eq!(count("reaches no queue"), 1, "{report:?}");
    assert_eq!(count("does not exist"), 1, "{report:?}");
    assert_eq!(
        count("is not this DeadLetterQueue's source queue"),
        1,
        "{report:?}"
    );
    assert_eq!(
        ready(&ch, &other).await,
        0,
        "nothing reached the other queue"
    );
    assert_eq!(
        drain_ids(&ch, &q).await,
        ["ok-ae", "ok-default", "ok-direct", "ok-topic"]
    );
    assert_eq!(
        drain_ids(&ch, &dlq).await,
        [
            "both-topic",
            "cc",
            "gone",
            "headers",
            "hop",
            "nowhere",
            "o1",
            "other-default",
            "other-direct"
        ]
    );

    // The default target too: a CC header would add the other queue to the default
    // exchange's route.
    publish(
        &ch,
        &dlq,
        "cc-default",
        header(&[
            ("dlq-original-queue", text(&q)),
            ("CC", AMQPValue::FieldArray(vec![text(&other)].into())),
        ]),
    )
    .await;
    // (Publishing it here reached the other queue too, by its CC header.)
    assert_eq!(drain_ids(&ch, &other).await, ["cc-default"]);
    let report = replay(
        &connection(),
        &t,
        &options(&[]),
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(
        (report.replayed, report.skipped_total()),
        (0, 1),
        "{report:?}"
    );
    assert_eq!(ready(&ch, &other).await, 0);
    assert_eq!(drain_ids(&ch, &dlq).await, ["cc-default"]);
    for x in [&topic, &direct, &headers, &hop, &with_ae] {
        let _ = ch
            .exchange_delete(x.as_str().into(), Default::default())
            .await;
    }
    let _ = ch
        .queue_delete(other.as_str().into(), Default::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

#[tokio::test]
async fn limit_dry_run_and_max_replays() {
    let q = common::unique("t-replay-limits");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..10 {
        publish(&ch, &dlq, &format!("m{i}"), FieldTable::default()).await;
    }
    publish(
        &ch,
        &dlq,
        "looped",
        header(&[("dlq-replay-count", AMQPValue::LongLongInt(3))]),
    )
    .await;
    let stop = CancellationToken::new();
    let mut dry = options(&[]);
    dry.dry_run = true;
    let r = replay(
        &connection(),
        &t,
        &dry,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("dry run");
    assert_eq!((r.replayed, r.skipped_total()), (10, 1), "{r:?}");
    assert_eq!(ready(&ch, &dlq).await, 11, "a dry run moves nothing");
    assert_eq!(ready(&ch, &q).await, 0);

    let mut limited = options(&[]);
    limited.limit = Some(4);
    limited.rate = Some(200.0);
    let r = replay(
        &connection(),
        &t,
        &limited,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("limited");
    assert_eq!(r.replayed, 4, "{r:?}");
    assert_eq!(ready(&ch, &q).await, 4);
    assert_eq!(ready(&ch, &dlq).await, 7);
    let r = replay(
        &connection(),
        &t,
        &options(&[]),
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("rest");
    assert_eq!((r.replayed, r.skipped_total()), (6, 1), "{r:?}");
    assert!(
        r.skipped.keys().any(|k| k.contains("--max-replays")),
        "{r:?}"
    );
    assert_eq!(drain_ids(&ch, &dlq).await, ["looped"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// The CLI: a SIGKILL after about 300 of 2,000 replayed loses nothing (source + DLQ ≥
/// 2,000 and every id present); bad input is refused before any message is touched.
#[tokio::test]
async fn cli_replay_survives_sigkill_and_refuses_bad_input() {
    let q = common::unique("t-replay-kill");
    let (_dir, path) = common::dlq::applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let all: BTreeSet<String> = (0..2000).map(|i| format!("k{i:04}")).collect();
    for id in &all {
        publish(&ch, &dlq, id, header(&[("dlq-original-queue", text(&q))])).await;
    }

    // Bad input: one clear error, exit 1, nothing touched.
    for (args, needle) in [
        (vec!["--filter", "colour=red"], "unknown key \"colour\""),
        (vec!["--rate", "0"], "--rate 0"),
        (vec!["--rate", "-5"], "--rate -5"),
    ] {
        let mut all_args = vec!["dlq", "replay", "--standalone", "-f", &path, "--name", "d"];
        all_args.extend(args);
        let out = common::cli(&all_args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{all_args:?}: {}",
            common::text(&out)
        );
        assert!(
            common::text(&out).contains(needle),
            "{all_args:?}: {}",
            common::text(&out)
        );
    }
    let out = common::cli(&[
        "dlq",
        "replay",
        "--standalone",
        "-f",
        &path,
        "--name",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out).contains("no DeadLetterQueue \"nope\""),
        "{}",
        common::text(&out)
    );
    assert_eq!(ready(&ch, &dlq).await, 2000, "bad input touched nothing");
    assert_eq!(ready(&ch, &q).await, 0);

    let mut child = spawn_replay(&path, &["--rate", "500"], false);
    until_source_holds(&ch, &q, 300).await;
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Held messages return to the DLQ when the broker sees the connection gone.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let in_source = ready(&ch, &q).await;
    let in_dlq = ready(&ch, &dlq).await;
    assert!(
        in_source + in_dlq >= 2000,
        "source {in_source} + DLQ {in_dlq} < 2000"
    );
    assert!(in_source < 2000, "killed before the end ({in_source})");
    let mut seen: BTreeSet<String> = drain_ids(&ch, &q).await.into_iter().collect();
    seen.extend(drain_ids(&ch, &dlq).await);
    assert_eq!(seen, all, "every message id is present at least once");
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// SIGKILL of a replay with a small crash window (`--max-in-flight`), at several points
/// of a run of 2,000: the copies that arrived while their originals are still in the
/// dead-letter queue — duplicates — are at most the window, and nothing is lost; a window
/// out of range is refused before anything is touched. (With the default window of 1,000
/// the breaker saw 134–880 duplicates.)
#[tokio::test]
async fn cli_sigkill_duplicates_at_most_the_max_in_flight_window() {
    for (run, (window, kill_at)) in [(5_u32, 150_u32), (5, 700), (1, 400)]
        .into_iter()
        .enumerate()
    {
        let q = common::unique("t-replay-window");
        let (_dir, path) = common::dlq::applied_manifests(&q);
        let dlq = format!("{q}.dlq");
        let (conn, ch) = confirm_channel().await;
        let all: BTreeSet<String> = (0..2000).map(|i| format!("w{i:04}")).collect();
        for id in &all {
            publish(&ch, &dlq, id, header(&[("dlq-original-queue", text(&q))])).await;
        }
        if run == 0 {
            for bad in ["0", "1001"] {
                let out = common::cli(&[
                    "dlq",
                    "replay",
                    "--standalone",
                    "-f",
                    &path,
                    "--name",
                    "d",
                    "--max-in-flight",
                    bad,
                ]);
                let t = common::text(&out);
                assert_eq!(out.status.code(), Some(2), "{bad}: {t}");
                assert!(t.contains("--max-in-flight"), "{bad}: {t}");
            }
            assert_eq!(ready(&ch, &dlq).await, 2000, "refused runs touch nothing");
        }
        let window_arg = window.to_string();
        let mut child = spawn_replay(&path, &["--max-in-flight", &window_arg], false);
        until_source_holds(&ch, &q, kill_at).await;
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        // The held messages return to the DLQ when the broker sees the connection gone.
        let in_source = ready(&ch, &q).await;
        let in_dlq = ready(&ch, &dlq).await;
        assert!(in_source < 2000, "killed before the end ({in_source})");
        let duplicates = (in_source + in_dlq)
            .checked_sub(2000)
            .unwrap_or_else(|| panic!("lost: source {in_source} + DLQ {in_dlq} < 2000"));
        assert!(
            duplicates <= window,
            "--max-in-flight {window}: {duplicates} duplicated (source {in_source}, DLQ {in_dlq})"
        );
        let mut seen: BTreeSet<String> = drain_ids(&ch, &q).await.into_iter().collect();
        seen.extend(drain_ids(&ch, &dlq).await);
        assert_eq!(seen, all, "every message id is present at least once");
        let _ = conn.close(200, "bye".into()).await;
        cleanup(&q).await;
    }
}

/// Ctrl-C (SIGINT) stops a replay cleanly: the copies in flight are settled, the report
/// says Partial, the exit code is 1, and replayed + still in the DLQ = the starting count.
#[tokio::test]
async fn cli_replay_interrupted_is_partial_and_exact() {
    let q = common::unique("t-replay-int");
    let (_dir, path) = common::dlq::applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..1000 {
        publish(&ch, &dlq, &format!("i{i:04}"), FieldTable::default()).await;
    }
    let child = spawn_replay(&path, &["--rate", "300", "-o", "json"], true);
    until_source_holds(&ch, &q, 100).await;
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let out = child.wait_with_output().expect("replay output");
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["outcome"], "Partial", "{report}");
    let replayed = report["replayed"].as_u64().expect("replayed");
    assert!((100..1000).contains(&replayed), "{report}");
    assert_eq!(
        u64::from(ready(&ch, &q).await),
        replayed,
        "each replayed message once"
    );
    assert_eq!(
        u64::from(ready(&ch, &dlq).await) + replayed,
        1000,
        "replayed + still in the DLQ = the starting count"
    );
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// `dlq purge --older-than`: removes only the old messages, only with --yes; a dry run
/// counts them and removes nothing.
#[tokio::test]
async fn cli_purge_removes_only_matching_messages_and_needs_yes() {
    let q = common::unique("t-purge");
    let (_dir, path) = common::dlq::applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let day = 86_400_000_u64;
    for (id, age, class) in [
        ("old-a", 10 * day, "parse"),
        ("new-a", 3_600_000, "parse"),
        ("old-b", 8 * day, "timeout"),
        ("new-b", 60_000, "timeout"),
        ("old-c", 30 * day, "parse"),
    ] {
        publish(
            &ch,
            &dlq,
            id,
            header(&[
                (
                    "dlq-last-failed-at",
                    AMQPValue::LongLongInt((now_ms() - age) as i64),
                ),
                ("dlq-error-class", text(class)),
            ]),
        )
        .await;
    }
    let purge = |extra: &[&str]| {
        let mut args = vec![
            "dlq",
            "purge",
            "--standalone",
            "-f",
            &path,
            "--name",
            "d",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        common::cli(&args)
    };
    let out = purge(&["--older-than", "7d"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out).contains("--yes"),
        "{}",
        common::text(&out)
    );
    let out = purge(&["--older-than", "7 days", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out).contains("--older-than"),
        "{}",
        common::text(&out)
    );
    assert_eq!(ready(&ch, &dlq).await, 5, "refused runs touch nothing");

    let out = purge(&["--older-than", "7d", "--dry-run"]);
    assert!(out.status.success(), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (report["matched"].as_u64(), report["removed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(ready(&ch, &dlq).await, 5);

    let out = purge(&["--older-than", "7d", "--filter", "class=parse", "--yes"]);
    assert!(out.status.success(), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["removed"], 2, "{report}");
    let left: Vec<String> = ids_in_order(&ch, &dlq).await;
    assert_eq!(left, ["new-a", "old-b", "new-b"], "the rest stay, in order");

    // A message with no dead-lettering time has no age: never purged by age, and counted.
    publish(&ch, &dlq, "no-age", FieldTable::default()).await;
    let out = purge(&["--older-than", "0s", "--yes"]);
    assert!(out.status.success(), "{}", common::text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["unknownAge"], 1, "{report}");
    assert_eq!(ids_in_order(&ch, &dlq).await, ["no-age"]);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// Publishes `n` dead letters `{prefix}{i:04}` of source queue `q` to `dlq`: class
/// `timeout` where `timeout(i)`, else `validation`. Returns their ids.
async fn fill_classes(
    ch: &lapin::Channel,
    dlq: &str,
    q: &str,
    prefix: &str,
    n: usize,
    timeout: impl Fn(usize) -> bool,
) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for i in 0..n {
        let id = format!("{prefix}{i:04}");
        let class = if timeout(i) { "timeout" } else { "validation" };
        publish(
            ch,
            dlq,
            &id,
            header(&[
                ("dlq-error-class", text(class)),
                ("dlq-original-queue", text(q)),
            ]),
        )
        .await;
        all.insert(id);
    }
    all
}

/// Records every checkpoint (replayed and failed so far, batch) and fails the one at
/// index `fail_at`.
struct Recorder {
    calls: Vec<(u64, u64, u64)>,
    fail_at: Option<usize>,
}

impl dlq_operator::dlq::replay::Observer for Recorder {
    fn progress(&mut self, _: &ReplayReport) {}

    fn checkpoint<'a>(
        &'a mut self,
        report: &'a ReplayReport,
        batch: u64,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        self.calls
            .push((report.replayed, report.failed_total(), batch));
        let fail = self.fail_at == Some(self.calls.len() - 1);
        Box::pin(async move {
            if fail {
                Err("simulated status write failure".to_string())
            } else {
                Ok(())
            }
        })
    }
}

#[tokio::test]
async fn checkpoints_precede_each_batch_a_failed_one_stops_exactly_and_a_resume_skips_its_own_copies(
) {
    let q = common::unique("t-replay-ckpt");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    // 3,750 messages, every third one matching: the 2,500 kept ones fill more than half
    // of the prefetch window (3,000), so the scan changes consumers on the way.
    let all = fill_classes(&ch, &dlq, &q, "c", 3750, |i| i % 3 == 0).await;
    let stop = CancellationToken::new();
    let opts = options(&["class=timeout"]);
    let mut failing = Recorder {
        calls: Vec::new(),
        fail_at: Some(1),
    };
    let report = replay(&connection(), &t, &opts, now_ms(), &stop, &mut failing)
        .await
        .expect("replay");
    assert_eq!(
        failing.calls,
        vec![(0, 0, 1000), (1000, 0, 1000)],
        "one checkpoint before each batch, every earlier copy settled"
    );
    assert_eq!(report.outcome, Outcome::Partial, "{report:?}");
    assert_eq!(report.replayed, 1000, "exactly the first batch");
    assert_eq!(ready(&ch, &q).await, 1000);
    assert_eq!(ready(&ch, &dlq).await, 2750, "the rest stays");

    // Resumed with the same replay id: the other 250 matching ones go, nothing else.
    let mut ok = Recorder {
        calls: Vec::new(),
        fail_at: None,
    };
    let report = replay(&connection(), &t, &opts, now_ms(), &stop, &mut ok)
        .await
        .expect("resume");
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert_eq!((report.matched, report.replayed), (250, 250));
    assert_eq!(ok.calls, vec![(0, 0, 1000)]);
    let source: Vec<String> = drain(&ch, &q)
        .await
        .into_iter()
        .filter_map(|(d, _)| d.message_id)
        .collect();
    assert_eq!(source.len(), 1250, "none duplicated");
    let rest = drain_ids(&ch, &dlq).await;
    assert_eq!(rest.len(), 2500);
    let mut union: BTreeSet<String> = source.iter().cloned().collect();
    union.extend(rest.iter().cloned());
    assert_eq!(union, all, "every message is somewhere, once");

    // The replayed copies fail again and come back: the same replay skips them.
    for i in (0..3750).step_by(3).take(40) {
        let id = format!("c{i:04}");
        publish(
            &ch,
            &dlq,
            &id,
            header(&[
                ("dlq-error-class", text("timeout")),
                ("dlq-original-queue", text(&q)),
                ("dlq-replay-id", text("test-run")),
                ("dlq-replay-count", AMQPValue::LongLongInt(1)),
            ]),
        )
        .await;
    }
    let report = replay(
        &connection(),
        &t,
        &opts,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("again");
    assert_eq!((report.matched, report.replayed), (40, 0), "{report:?}");
    assert_eq!(
        report.skipped.get("already replayed by this replay"),
        Some(&40)
    );
    assert_eq!(ready(&ch, &dlq).await, 40);
    drop(conn);
    cleanup(&q).await;
}

#[tokio::test]
async fn replays_under_a_delivery_limit_never_dead_letter_a_kept_message() {
    // A quorum dead-letter queue with delivery-limit 3: every message a replay reads and
    // keeps (not matched, or prefetched past `--limit`) returns to it, which counts as a
    // delivery; ten replays must still lose none of them.
    let q = common::unique("t-replay-limit");
    let t = applied(&q, Some(3)).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let mut expected = Vec::new();
    for i in 0..300 {
        let id = format!("k{i:03}");
        let class = if i < 10 { "timeout" } else { "validation" };
        publish(
            &ch,
            &dlq,
            &id,
            header(&[
                ("dlq-error-class", text(class)),
                ("dlq-original-queue", text(&q)),
            ]),
        )
        .await;
        if i >= 10 {
            expected.push(id);
        }
    }
    let stop = CancellationToken::new();
    let mut replayed = 0;
    for _ in 0..10 {
        let mut opts = options(&["class=timeout"]);
        opts.limit = Some(1);
        let report = replay(
            &connection(),
            &t,
            &opts,
            now_ms(),
            &stop,
            &mut |_: &ReplayReport| {},
        )
        .await
        .expect("replay");
        assert_eq!(report.failed_total(), 0, "{report:?}");
        replayed += report.replayed;
        assert_eq!(
            u64::from(ready(&ch, &dlq).await),
            300 - replayed,
            "nothing dead-lettered or lost"
        );
    }
    assert_eq!(replayed, 10, "one per run, by --limit");
    assert_eq!(drain_ids(&ch, &q).await.len(), 10);
    assert_eq!(drain_ids(&ch, &dlq).await, expected);
    drop(conn);
    cleanup(&q).await;
}

/// Two SIGKILLs in a row of a rate-limited replay of a quorum dead-letter queue under
/// `delivery-limit: 2` (a policy): every message delivered to the killed process returns
/// with a delivery counted; a prefetch window would expose many, twice — none may be lost.
#[tokio::test]
async fn two_sigkills_in_a_row_under_a_delivery_limit_lose_nothing() {
    let q = common::unique("t-replay-kill2");
    let (_dir, path) = common::dlq::applied_manifests(&q);
    let dlq = format!("{q}.dlq");
    common::dlq::policy(
        &format!("{q}-limit"),
        &dlq,
        serde_json::json!({"delivery-limit": 2}),
    )
    .await;
    let (conn, ch) = confirm_channel().await;
    let all = fill_classes(&ch, &dlq, &q, "d", 50, |i| i % 2 == 0).await;
    // One complete run that takes nothing: every message is read and given back once.
    let out = common::cli(&[
        "dlq",
        "replay",
        "--standalone",
        "-f",
        &path,
        "--name",
        "d",
        "--filter",
        "class=nope",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    for _ in 0..2 {
        let before = ready_now(&ch, &q).await;
        let mut child = spawn_replay(&path, &["--filter", "class=timeout", "--rate", "2"], false);
        until_source_holds(&ch, &q, before + 1).await;
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
    let source = drain_ids(&ch, &q).await;
    let rest = drain_ids(&ch, &dlq).await;
    let mut seen: BTreeSet<String> = source.iter().cloned().collect();
    seen.extend(rest.iter().cloned());
    assert_eq!(
        seen, all,
        "every message is somewhere: source {source:?}, DLQ {rest:?}"
    );
    assert_eq!(
        rest.iter()
            .filter(|id| id[1..].parse::<u32>().is_ok_and(|n| n % 2 == 1))
            .count(),
        25,
        "every non-matching message is still in the DLQ"
    );
    common::mgmt_delete(&format!("/api/policies/%2F/{q}-limit")).await;
    drop(conn);
    cleanup(&q).await;
}

/// A copy the broker refuses by closing the channel (publishing to an internal exchange)
/// fails alone: the held messages are on another channel, nothing is dead-lettered or
/// lost under `delivery-limit: 2`, and the broker's reason is reported, run after run.
#[tokio::test]
async fn a_copy_refused_by_the_broker_fails_alone_and_loses_nothing() {
    let q = common::unique("t-replay-refused");
    let t = applied(&q, Some(2)).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    let mut all = Vec::new();
    for i in 0..51 {
        let id = format!("r{i:02}");
        let mut h = vec![
            (
                "dlq-error-class",
                text(if i == 30 { "timeout" } else { "validation" }),
            ),
            ("dlq-original-queue", text(&q)),
        ];
        if i == 30 {
            h.push(("dlq-original-exchange", text("amq.rabbitmq.trace")));
            h.push(("dlq-original-routing-key", text("x")));
        }
        publish(&ch, &dlq, &id, header(&h)).await;
        all.push(id);
    }
    // Bound, so that the route reaches the source queue and the copy is published; the
    // broker refuses a publish to an internal exchange by closing the channel.
    bind_to_trace(&ch, &q, "x").await;
    let stop = CancellationToken::new();
    let mut opts = options(&["class=timeout"]);
    opts.target = Target::OriginalExchange;
    for run in 0..4 {
        let report = replay(
            &connection(),
            &t,
            &opts,
            now_ms(),
            &stop,
            &mut |_: &ReplayReport| {},
        )
        .await
        .expect("the replay itself does not fail");
        assert_eq!(report.outcome, Outcome::Failed, "run {run}: {report:?}");
        assert_eq!((report.matched, report.replayed), (1, 0), "run {run}");
        let reasons: Vec<&String> = report.failed.keys().collect();
        assert!(
            reasons.len() == 1 && reasons[0].contains("internal exchange"),
            "run {run}: the broker's reason: {reasons:?}"
        );
        assert_eq!(ready(&ch, &dlq).await, 51, "run {run}: nothing lost");
    }
    all.sort();
    assert_eq!(drain_ids(&ch, &dlq).await, all);
    drop(conn);
    cleanup(&q).await;
}

/// Binds `queue` to the internal exchange `amq.rabbitmq.trace` (a topic exchange) with
/// `key`: a copy's route then reaches the source queue, and the broker refuses the publish
/// itself (clients may not publish to an internal exchange). The binding goes with the
/// queue.
async fn bind_to_trace(ch: &lapin::Channel, queue: &str, key: &str) {
    ch.queue_bind(
        queue.into(),
        "amq.rabbitmq.trace".into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind to amq.rabbitmq.trace");
}

/// The batch a checkpoint announces (what a crash may leave in doubt, and a resume takes
/// off the limit) never exceeds what `--limit` still allows.
#[tokio::test]
async fn a_checkpoint_never_announces_more_than_the_limit_allows() {
    let q = common::unique("t-replay-ckpt-limit");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..50 {
        publish(
            &ch,
            &dlq,
            &format!("l{i:02}"),
            header(&[("dlq-original-queue", text(&q))]),
        )
        .await;
    }
    let stop = CancellationToken::new();
    let mut opts = options(&[]);
    opts.limit = Some(20);
    let mut rec = Recorder {
        calls: Vec::new(),
        fail_at: None,
    };
    let report = replay(&connection(), &t, &opts, now_ms(), &stop, &mut rec)
        .await
        .expect("replay");
    assert_eq!(report.replayed, 20);
    assert_eq!(
        rec.calls,
        vec![(0, 0, 20)],
        "one checkpoint, for the 20 the limit allows"
    );
    assert_eq!(ready(&ch, &dlq).await, 30);
    drop(conn);
    cleanup(&q).await;
}

/// One copy the broker refuses by closing the publishing channel, among many in flight
/// (the consumer path: no delivery limit): the copies lost with the channel are sent
/// again one by one, so only the refused one fails and every other one is replayed.
#[tokio::test]
async fn one_refused_copy_among_many_fails_alone() {
    let q = common::unique("t-replay-refused-many");
    let t = applied(&q, None).await;
    let dlq = format!("{q}.dlq");
    let (conn, ch) = confirm_channel().await;
    for i in 0..601 {
        let exchange = if i == 300 { "amq.rabbitmq.trace" } else { "" };
        publish(
            &ch,
            &dlq,
            &format!("g{i:03}"),
            header(&[
                ("dlq-original-queue", text(&q)),
                ("dlq-original-exchange", text(exchange)),
                ("dlq-original-routing-key", text(&q)),
            ]),
        )
        .await;
    }
    bind_to_trace(&ch, &q, &q).await;
    let stop = CancellationToken::new();
    let mut opts = options(&[]);
    opts.target = Target::OriginalExchange;
    let report = replay(
        &connection(),
        &t,
        &opts,
        now_ms(),
        &stop,
        &mut |_: &ReplayReport| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.outcome, Outcome::Failed, "{report:?}");
    assert_eq!(
        (report.replayed, report.failed_total()),
        (600, 1),
        "{report:?}"
    );
    assert!(
        report
            .failed
            .keys()
            .all(|k| k.contains("internal exchange")),
        "{report:?}"
    );
    assert_eq!(drain_ids(&ch, &dlq).await, vec!["g300".to_string()]);
    // Copies routed just before the refused one lose their confirms with the closed
    // channel and are sent again: duplicates (at-least-once), never a loss.
    let mut arrived = drain_ids(&ch, &q).await;
    arrived.dedup();
    let expected: Vec<String> = (0..601)
        .filter(|i| *i != 300)
        .map(|i| format!("g{i:03}"))
        .collect();
    assert_eq!(arrived, expected, "every other message arrived");
    drop(conn);
    cleanup(&q).await;
}

/// A DeadLetterQueue partitioned by error class whose last dead-letter queue (`.poison`)
/// is missing on the broker: `dlq replay` and `dlq purge` name it and touch nothing, not
/// even the messages of the queues before it. Each used to replay (or remove) the
/// `.timeout` queue's messages first and then fail without a report (breaker helper).
#[tokio::test]
async fn a_missing_partition_queue_stops_replay_and_purge_before_anything_is_touched() {
    let q = common::unique("t-replay-partition");
    let (_dir, path) = applied_manifests_with(&q, "  deadLetter:\n    partitionBy: ErrorClass\n");
    let timeout = format!("{q}.dlq.timeout");
    let poison = format!("{q}.dlq.poison");
    let (conn, ch) = confirm_channel().await;
    let failed_at = now_ms().saturating_sub(3_600_000);
    for i in 0..5 {
        publish(
            &ch,
            &timeout,
            &format!("t{i}"),
            header(&[
                ("dlq-error-class", text("Timeout")),
                ("dlq-original-queue", text(&q)),
                (
                    "dlq-last-failed-at",
                    AMQPValue::LongLongInt(failed_at as i64),
                ),
            ]),
        )
        .await;
    }
    common::mgmt_delete(&format!("/api/queues/%2F/{poison}")).await;
    let runs: [&[&str]; 2] = [&["replay"], &["purge", "--older-than", "1m", "--yes"]];
    for command in runs {
        let mut args = vec!["dlq"];
        args.extend_from_slice(command);
        args.extend_from_slice(&["--standalone", "-f", &path, "--name", "d"]);
        let out = common::cli(&args);
        let t = common::text(&out);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {t}");
        assert!(
            t.contains(&poison),
            "{command:?} names the missing queue: {t}"
        );
        assert_eq!(ready(&ch, &timeout).await, 5, "{command:?}: {t}");
        assert_eq!(ready(&ch, &q).await, 0, "{command:?}: {t}");
    }
    assert_eq!(
        drain_ids(&ch, &timeout).await,
        ["t0", "t1", "t2", "t3", "t4"]
    );
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}

/// A dead-letter queue deleted while a replay runs (after the look-up, before the replay
/// reaches it): the error comes with what was done before it — the messages read and
/// replayed — instead of the error alone, and nothing is lost.
#[tokio::test]
async fn an_error_mid_replay_reports_what_was_replayed_before_it() {
    let q = common::unique("t-replay-midway");
    let (_dir, path) = applied_manifests_with(&q, "  deadLetter:\n    partitionBy: ErrorClass\n");
    let (conn, ch) = confirm_channel().await;
    let dlq = format!("{q}.dlq");
    for i in 0..20 {
        publish(
            &ch,
            &dlq,
            &format!("m{i:02}"),
            header(&[("dlq-original-queue", text(&q))]),
        )
        .await;
    }
    // 20 at 20/s: about a second in the main dead-letter queue. Once the first copy has
    // arrived (every queue was looked up), the last partition queue disappears.
    let child = spawn_replay(&path, &["--rate", "20"], true);
    until_source_holds(&ch, &q, 1).await;
    common::mgmt_delete(&format!("/api/queues/%2F/{q}.dlq.poison")).await;
    let out = child.wait_with_output().expect("wait");
    let t = common::text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("{q}.dlq.poison")), "{t}");
    assert!(
        t.contains("before the error: at least 20 messages read and 20 copies confirmed"),
        "{t}"
    );
    let mut arrived = drain_ids(&ch, &q).await;
    arrived.dedup();
    assert_eq!(
        arrived.len(),
        20,
        "every message replayed once: {arrived:?}"
    );
    assert_eq!(ready(&ch, &dlq).await, 0);
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&q).await;
}
