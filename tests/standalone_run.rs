//! `apply` twice on the shipped examples, `render` without a broker, and `run --standalone`
//! picking up a changed file, against the real RabbitMQ.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn apply_examples_twice_second_run_changes_nothing() {
    let examples = root().join("examples").display().to_string();
    let first = cli(&["apply", "-f", &examples]);
    let t1 = text(&first);
    assert!(first.status.success(), "first apply failed:\n{t1}");
    assert!(
        t1.contains("2 DeadLetterQueue(s) ready, 0 not ready"),
        "{t1}"
    );

    let second = cli(&["apply", "-f", &examples]);
    let t2 = text(&second);
    assert!(second.status.success(), "second apply failed:\n{t2}");
    // Every object line says "in place"; no creation or update.
    let object_lines: Vec<&str> = t2
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  =>"))
        .collect();
    assert!(!object_lines.is_empty(), "{t2}");
    for l in &object_lines {
        assert!(
            l.ends_with("in place"),
            "second apply changed something: {l}\n{t2}"
        );
    }
    assert!(t2.contains("(0 created, 0 updated, 0 deleted,"), "{t2}");
}

#[tokio::test]
async fn a_later_apply_of_another_resource_cannot_take_over_the_queues_of_an_earlier_one() {
    // The break test's case: `apply -f a.yaml`, then a separate `apply -f b.yaml` whose
    // DeadLetterQueue has the same source queue, or a's dead-letter queue as its source,
    // with a dead-letter queue that drops dead letters (maxLength 3, DropHead). It exited 0
    // and rewrote a's policies; now the broker's ownership records refuse it.
    let q = unique("takeover");
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let a = manifests(&[(
        "a.yaml",
        &format!(
            "{secret}---\n{policy}---\n{}",
            dlq_yaml("a", &q, "p", "s", "")
        ),
    )]);
    let first = cli(&["apply", "-f", &a.path().display().to_string()]);
    assert!(first.status.success(), "{}", text(&first));
    let dlq_policy = format!("/api/policies/%2F/dlq-operator.{q}.dlq");
    let before = mgmt_get(&dlq_policy)
        .await
        .expect("a's dead-letter queue policy");

    let dropping = "  deadLetter:\n    maxLength: 3\n    overflow: DropHead\n";
    for (source, role) in [
        (q.clone(), "its source queue"),
        (format!("{q}.dlq"), "its dead-letter queue"),
    ] {
        let b = manifests(&[(
            "b.yaml",
            &format!(
                "{secret}---\n{policy}---\n{}",
                dlq_yaml("b", &source, "p", "s", dropping)
            ),
        )]);
        let o = cli(&["apply", "-f", &b.path().display().to_string()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(
            t.contains("failed [NameConflict]: spec.source.queue:"),
            "{t}"
        );
        assert!(t.contains("belongs to DeadLetterQueue default/a"), "{t}");
        assert!(t.contains(role), "{t}");
        assert!(t.contains("rabbitmqctl clear_global_parameter"), "{t}");
        let after = mgmt_get(&dlq_policy).await.expect("policy kept");
        assert_eq!(after["definition"], before["definition"], "{t}");
    }
    // The owner itself still applies cleanly, from another run.
    let again = cli(&["apply", "-f", &a.path().display().to_string()]);
    assert!(again.status.success(), "{}", text(&again));
    cleanup(&q).await;
}

#[tokio::test]
async fn apply_fails_on_a_wrong_amqp_address_and_names_it() {
    // The management API is right, the AMQP port is not: apply said ready, and the error
    // came later from `dlq inspect` or a consumer.
    let q = unique("amqpaddr");
    let secret = secret_yaml("s", "guest", "guest", MGMT).replace(":5672/", ":5999/");
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dir = manifests(&[(
        "all.yaml",
        &format!(
            "{secret}---\n{policy}---\n{}",
            dlq_yaml("d", &q, "p", "s", "")
        ),
    )]);
    let o = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("failed [BrokerUnreachable]: broker at amqp://guest:***@127.0.0.1:5999/"),
        "{t}"
    );
    assert!(t.contains("the Secret's `uri` key"), "{t}");
    assert!(
        t.contains("0 ready, 1 not ready") || t.contains("0 DeadLetterQueue(s) ready"),
        "{t}"
    );
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{q}")).await.is_none(),
        "nothing declared: {t}"
    );
}

#[tokio::test]
async fn apply_output_escapes_control_characters_in_queue_names() {
    // A queue name may hold a bidi override (U+202E) or a zero-width character: printed
    // raw, it reorders or hides what the terminal shows.
    let q = unique("esc");
    let name = format!("{q}\u{202e}x");
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dlq = classic_dlq_yaml(&format!("\"{name}\""), "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let o = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains('\u{202e}'), "raw U+202E in {t:?}");
    assert!(
        t.contains(&format!("queue {q}\\u{{202e}}x: created")),
        "{t}"
    );
    cleanup(&q).await;
}

#[test]
fn render_needs_no_broker() {
    // The Secret points at a closed port: render must not touch it.
    let secret = secret_yaml("s", "guest", "guest", "http://127.0.0.1:1");
    let policy = policy_yaml("p", "  maxRetries: 3\n  tiers: [5s, 15s, 60s]\n");
    let dlq = dlq_yaml("d", "render-q", "p", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let o = cli(&["render", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for needle in [
        "render-q.retry.5s",
        "render-q.retry.15s",
        "render-q.retry.1m",
        "render-q.dlx",
        "render-q.dlq",
        "dead-letter-exchange: render-q.dlx",
    ] {
        assert!(t.contains(needle), "missing {needle}:\n{t}");
    }
}

/// DeadLetterQueue `d` of classic source queue `q` (policy `p`, Secret `s`), with `extra`
/// under `spec:`. Classic queues: RabbitMQ deletes an obsolete classic tier only-if-empty
/// itself (quorum tiers are unbound and retained, see tests/broker_rabbitmq.rs).
fn classic_dlq_yaml(q: &str, extra: &str) -> String {
    dlq_yaml("d", q, "p", "s", extra).replace(
        &format!("    queue: {q}\n"),
        &format!("    queue: {q}\n    queueType: Classic\n"),
    )
}

/// `dlq-operator run --standalone -f dir` serving metrics on `addr`, with `RUST_LOG=log`
/// and stdout/stderr set by `io`.
fn standalone(
    dir: &std::path::Path,
    addr: &str,
    log: &str,
    io: fn() -> Stdio,
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["run", "--standalone", "--metrics-bind-address", addr, "-f"])
        .arg(dir)
        .env("RUST_LOG", log)
        .stdout(io())
        .stderr(io())
        .spawn()
        .expect("spawn")
}

/// Sends SIGTERM to `child` and waits up to 10 s for it to exit: its status, or `None`
/// (then it is killed).
fn sigterm_and_wait(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return Some(s);
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn wait_for_queue(name: &str, deadline: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if mgmt_get(&format!("/api/queues/%2F/{name}")).await.is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test]
async fn run_standalone_reconciles_changed_files_and_stops_on_sigterm() {
    let q = unique("runq");
    let dir = manifests(&[]);
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let write_policy = |tiers: &str| {
        let policy = policy_yaml("p", &format!("  maxRetries: 2\n  tiers: [{tiers}]\n"));
        let dlq = classic_dlq_yaml(&q, "  monitoring:\n    interval: 300ms\n");
        std::fs::write(
            dir.path().join("all.yaml"),
            format!("{secret}---\n{policy}---\n{dlq}"),
        )
        .expect("write");
    };
    write_policy("1s, 2s");
    let mut child = standalone(dir.path(), "127.0.0.1:0", "info", Stdio::piped);

    assert!(wait_for_queue(&format!("{q}.retry.2s"), Duration::from_secs(20)).await);
    write_policy("1s, 3s");
    let found = wait_for_queue(&format!("{q}.retry.3s"), Duration::from_secs(20)).await;
    // The old, empty 2s tier is removed once the new plan is applied.
    let start = Instant::now();
    let mut old_gone = false;
    while found && start.elapsed() < Duration::from_secs(20) {
        if mgmt_get(&format!("/api/queues/%2F/{q}.retry.2s"))
            .await
            .is_none()
        {
            old_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A planned queue deleted behind the operator's back is noticed by the depth poll
    // and declared again.
    mgmt_delete(&format!("/api/queues/%2F/{q}.retry.1s")).await;
    let repaired = wait_for_queue(&format!("{q}.retry.1s"), Duration::from_secs(20)).await;

    // SIGTERM: clean exit.
    let status = sigterm_and_wait(&mut child);
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    cleanup(&q).await;
    assert!(found, "new tier queue never appeared:\n{out}\n{err}");
    assert!(
        old_gone,
        "obsolete empty tier was not removed:\n{out}\n{err}"
    );
    assert!(
        repaired,
        "deleted tier queue was not declared again:\n{out}\n{err}"
    );
    assert!(err.contains("missing on the broker"), "{err}");
    let status = status.expect("run did not stop on SIGTERM");
    assert!(status.success(), "exit {status:?}:\n{err}");
    assert!(err.contains("manifests changed"), "{err}");
    assert!(
        err.contains("default/d: source=0 retry["),
        "no depth status line:\n{err}"
    );
    // Ordinary files are read at once: no poll may call their read pending (every other
    // poll did, and the files were then read one interval late).
    assert!(!err.contains("still being read"), "{err}");
}

/// `value` of the sample of `metric` whose line contains every `labels` part, from the
/// Prometheus text at `url`.
async fn scrape(url: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    let text = reqwest::get(url).await.ok()?.text().await.ok()?;
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| labels.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn run_standalone_exports_backlog_metrics_that_follow_the_dead_letter_queue() {
    let q = unique("metq");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = manifests(&[]);
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [5s]\n");
    let dlq = classic_dlq_yaml(
        &q,
        "  monitoring:\n    interval: 300ms\n    baseline: {mode: Static, value: 0}\n    threshold: 4\n    for: 1s\n",
    );
    std::fs::write(
        dir.path().join("all.yaml"),
        format!("{secret}---\n{policy}---\n{dlq}"),
    )
    .expect("write");
    let mut child = standalone(
        dir.path(),
        &format!("127.0.0.1:{port}"),
        "warn",
        Stdio::null,
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let dl = format!("queue=\"{q}.dlq\"");
    let ours = "namespace=\"default\"";
    let wait = |metric: &'static str, labels: Vec<String>, want: f64| {
        let url = url.clone();
        async move {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                let parts: Vec<&str> = labels.iter().map(String::as_str).collect();
                if scrape(&url, metric, &parts).await == Some(want) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            false
        }
    };
    // Series from the first poll, explicit 0 for empty queues.
    let zero = wait("dlq_queue_depth", vec![dl.clone(), ours.into()], 0.0).await;
    let threshold = scrape(&url, "dlq_backlog_threshold", &[ours, "name=\"d\""]).await;
    let maturity = scrape(&url, "dlq_maturity_score", &[ours, "name=\"d\""]).await;
    // 6 dead letters against a threshold of 4: ratio 1.5, firing after `for` (1 s; the
    // management statistics lag a few seconds).
    common::publish_persistent(&format!("{q}.dlq"), 6).await;
    let firing = wait(
        "dlq_backlog_alert_state",
        vec![ours.into(), "name=\"d\"".into()],
        2.0,
    )
    .await;
    let ratio = scrape(&url, "dlq_backlog_ratio", &[ours, "name=\"d\""]).await;
    mgmt_delete(&format!("/api/queues/%2F/{q}.dlq/contents")).await;
    let resolved = wait(
        "dlq_backlog_alert_state",
        vec![ours.into(), "name=\"d\"".into()],
        0.0,
    )
    .await;

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().expect("wait");
    common::cleanup(&q).await;
    assert!(zero, "no explicit 0 depth series for {q}.dlq");
    assert_eq!(threshold, Some(4.0));
    // The maturity score from the files: a classic source with a threshold, the default
    // classification, overflow and alert rules, nothing seen.
    use dlq_operator::maturity::{share, Item, Weights};
    let expected: f64 = [
        Item::RetryPolicyReady,
        Item::NonRetryableClasses,
        Item::RetentionAndCapacity,
        Item::Threshold,
        Item::AlertRules,
    ]
    .iter()
    .map(|i| share(*i, &Weights::default()))
    .sum();
    let maturity = maturity.expect("dlq_maturity_score of d");
    assert!(
        (maturity - expected).abs() < 1e-9,
        "{maturity} != {expected}"
    );
    assert!(firing, "alert state never reached 2 (firing)");
    assert_eq!(ratio, Some(1.5));
    assert!(resolved, "alert did not resolve after the purge");
    assert!(status.success(), "{status:?}");
}

/// `run --standalone` whose stdout reader went away (`| head -1`, a log shipper
/// restarting) keeps running: the apply report is dropped. It used to exit 1 ("Broken
/// pipe") at its first apply. It still declares the topology and stops cleanly on SIGTERM.
#[tokio::test]
async fn run_standalone_keeps_running_when_its_stdout_reader_is_gone() {
    let q = unique("run-pipe");
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dlq = classic_dlq_yaml(&q, "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args([
            "run",
            "--standalone",
            "--metrics-bind-address",
            "127.0.0.1:0",
            "-f",
        ])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let declared = wait_for_queue(&format!("{q}.dlq"), Duration::from_secs(20)).await;
    // Past the first apply (whose report met the closed pipe).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let running = child.try_wait().expect("status").is_none();
    let status = sigterm_and_wait(&mut child);
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    cleanup(&q).await;
    assert!(declared, "the topology was not declared:\n{err}");
    assert!(running, "it stopped at the closed stdout:\n{err}");
    let status = status.expect("run did not stop on SIGTERM");
    assert!(status.success(), "exit {status:?}:\n{err}");
}

/// `run --standalone -f DIR -f FIFO`: once a re-read of the FIFO blocks (nothing writes
/// it any more), the depth polls and `/metrics` go on with the last valid manifests and
/// a warning says the manifests are still being read. The read used to run on the loop
/// itself: every poll stopped while `/healthz` still said 200.
#[cfg(unix)]
#[tokio::test]
async fn run_standalone_keeps_polling_while_a_manifest_read_blocks() {
    use std::io::Write;
    let q = unique("run-fifo");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dlq = classic_dlq_yaml(&q, "  monitoring:\n    interval: 300ms\n");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let fifo_dir = tempfile::tempdir().expect("tempdir");
    let fifo = fifo_dir.path().join("extra.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo");
    // The FIFO is written (an empty document, which may arrive merged with the next)
    // until the loop has polled once; after that, its reads block.
    let writer_path = fifo.clone();
    let stop_writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = stop_writing.clone();
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            // A reader that closed between our open and our write (EPIPE): write again.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&writer_path)
                .and_then(|mut w| w.write_all(b"---\n# filler\n"));
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["run", "--standalone", "--metrics-bind-address"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-f")
        .arg(dir.path())
        .arg("-f")
        .arg(&fifo)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    // Failure guards, not speed targets: polls come every 300 ms.
    let mut seen = Vec::new();
    let next_line = |seen: &mut Vec<String>| {
        let line = rx.recv_timeout(Duration::from_secs(30)).ok()?;
        seen.push(line.clone());
        Some(line)
    };
    let mut polled = false;
    while let Some(line) = next_line(&mut seen) {
        if line.contains("default/d: source=") {
            polled = true;
            break;
        }
    }
    stop_writing.store(true, std::sync::atomic::Ordering::SeqCst);
    // The warning that the read blocks, the reader's own notice naming the FIFO (a second
    // into the read) and three polls after the warning, in whatever order they come.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut blocked, mut announced, mut polls_after) = (false, false, 0);
    while polled && Instant::now() < deadline && !(blocked && announced && polls_after >= 3) {
        let Some(line) = next_line(&mut seen) else {
            break;
        };
        if line.contains("still being read") {
            blocked = true;
        } else if line.contains("waiting for") && line.contains("extra.yaml") {
            announced = line.contains("a FIFO");
        } else if blocked && line.contains("default/d: source=") {
            polls_after += 1;
        }
    }
    let depth = scrape(
        &format!("http://127.0.0.1:{port}/metrics"),
        "dlq_queue_depth",
        &[&format!("queue=\"{q}.dlq\"")],
    )
    .await;
    let status = sigterm_and_wait(&mut child);
    cleanup(&q).await;
    let log = seen.join("\n");
    assert!(polled, "no first poll:\n{log}");
    assert!(blocked, "no warning that the read blocks:\n{log}");
    assert_eq!(
        polls_after, 3,
        "the polls stopped while the read blocked:\n{log}"
    );
    assert!(announced, "no notice naming the blocked FIFO:\n{log}");
    assert_eq!(depth, Some(0.0), "no depth series while the read blocked");
    let status = status.expect("run did not stop on SIGTERM");
    assert!(status.success(), "exit {status:?}:\n{log}");
}

/// A broker whose management port accepts connections but never answers (the apply then
/// waits for its HTTP timeout): SIGTERM during that apply ends `run --standalone` at once,
/// without waiting for the apply's verdict — the summary line an ended apply prints never
/// comes. Nothing is written to the broker: it answered nothing.
#[test]
fn run_standalone_stops_during_an_apply_to_a_broker_that_does_not_answer() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mgmt = format!("http://{}", silent.local_addr().expect("addr"));
    let (connected, accepted) = std::sync::mpsc::channel();
    // Accepts and holds every connection without a byte of answer.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
            let _ = connected.send(());
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let secret = secret_yaml("s", "guest", "guest", &mgmt);
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dlq = classic_dlq_yaml(&unique("run-silent"), "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let mut child = standalone(
        dir.path(),
        &format!("127.0.0.1:{port}"),
        "info",
        Stdio::piped,
    );
    accepted
        .recv_timeout(Duration::from_secs(30))
        .expect("the apply reaches the silent broker");
    let status = sigterm_and_wait(&mut child).expect("run did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read stdout");
    assert!(
        !out.contains("DeadLetterQueue(s) ready"),
        "the apply was waited for instead of dropped:\n{out}"
    );
}
