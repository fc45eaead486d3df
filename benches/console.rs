//! How fast the dead-letter console summarises a big dead-letter queue
//! (docs/BENCHMARKS.md, "Dead-letter console: a 100,000-message dead-letter queue").
//!
//! One DeadLetterQueue (classic queues, or quorum with the `quorum` arg) is written as
//! manifests and applied with `dlq-operator apply -f`; its dead-letter queue is filled
//! with N dead letters of 1 KiB (100,000 by default) carrying the header contract in
//! four (error class, reason) groups, pipelined publishes with publisher confirms.
//!
//! Each round starts `dlq-operator console --standalone` (the binary of this build, on
//! `127.0.0.1:0`), reads the login link from its stderr, logs in (the session cookie
//! sent by hand) and measures over HTTP (reqwest, one keep-alive client):
//!
//! - **cold**: the DeadLetterQueue's page before any scan — what the user gets at once:
//!   the dead-letter queue's count (a passive declare), the background scan started;
//! - **groups**: from that request's start until the page shows the groups (the
//!   bounded background scan done), polling every [`POLL_MS`] ms; with the broker's
//!   CPU (`beam.smp`) and the console's over that time, and the messages the scan read;
//! - **warm**: the page again, [`REPEATS`] times (the cached scan);
//! - **index**: the index page, [`REPEATS`] times.
//!
//! Then the console is stopped (SIGTERM). After the rounds, the dead-letter queue must
//! still hold N (a passive declare, the broker given a moment to requeue; on a quorum
//! queue a message dead-lettered or dropped at a delivery limit by the reads would be
//! missing) and the source queue none. The bench's objects (`bench-console-<pid>*`) are
//! purged and removed with `RabbitMq::remove`, ownership records included.
//!
//! Needs the local RabbitMQ (127.0.0.1, guest/guest, management plugin).
//!
//! Run: `cargo bench --bench console` (100,000 messages, classic queues, 5 rounds), or
//! `cargo bench --bench console -- 20000 quorum rounds=3 scan-max=5000`.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use lapin::options::QueuePurgeOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

use dlq_operator::client::headers::{
    ERROR_CLASS, FIRST_FAILED_AT, LAST_ERROR, LAST_FAILED_AT, ORIGINAL_EXCHANGE, ORIGINAL_QUEUE,
    ORIGINAL_ROUTING_KEY, REASON, RETRY_COUNT,
};
use dlq_operator::rabbitmq::RabbitMq;
use dlq_operator::reconcile::Prepared;
use dlq_operator::resolve::manifests::load_and_plan;

mod common;
use common::{
    broker_pid, count, cpu_seconds_since, cpu_ticks, fill_with, median, now_ms, ticks_now,
    wait_for, AMQP,
};

/// The (error class, reason) pairs of the dead letters, message `i` taking pair
/// `i % 4`: four groups of N/4.
const GROUPS: [(&str, &str); 4] = [
    ("Timeout", "MaxRetriesExceeded"),
    ("Validation", "NonRetryable"),
    ("Parse", "NonRetryable"),
    ("Dependency", "RetryWindowExceeded"),
];

/// Interval of the polls waiting for the groups, ms.
const POLL_MS: u64 = 50;

/// Warm page and index requests per round.
const REPEATS: usize = 10;

/// The bench's arguments (module doc).
struct Args {
    /// Dead letters.
    n: usize,
    /// `Quorum` or `Classic`.
    queue_type: &'static str,
    /// Rounds (a console started for each).
    rounds: usize,
    /// `--scan-max-messages` given to the console (`None`: its default).
    scan_max: Option<u64>,
}

/// Args: the message count (default 100,000), `quorum`, `rounds=R` (default 5) and
/// `scan-max=M` (the console's `--scan-max-messages`, default its own).
fn args() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let find = |prefix: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(prefix)?.parse::<u64>().ok())
    };
    Args {
        n: args.iter().find_map(|a| a.parse().ok()).unwrap_or(100_000),
        queue_type: if args.iter().any(|a| a == "quorum") {
            "Quorum"
        } else {
            "Classic"
        },
        rounds: find("rounds=").map_or(5, |r| r.max(1) as usize),
        scan_max: find("scan-max="),
    }
}

/// Writes the manifests of DeadLetterQueue `default/<name>` (source queue `name`, its
/// dead-letter queue `<name>.dlq` holding up to `max_length`) into `dir`, applies them
/// with `dlq-operator apply -f` and returns them planned.
fn applied(dir: &Path, name: &str, queue_type: &str, max_length: usize) -> Prepared {
    let manifests = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: default\nstringData:\n  uri: {AMQP}\n  managementUri: http://127.0.0.1:15672\n---\napiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata:\n  name: p\n  namespace: default\nspec:\n  maxRetries: 3\n  tiers: [5s]\n---\napiVersion: dlqoperator.io/v1alpha1\nkind: DeadLetterQueue\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  broker:\n    secretRef:\n      name: s\n  source:\n    queue: {name}\n    queueType: {queue_type}\n  retryPolicyRef:\n    name: p\n  deadLetter:\n    maxLength: {max_length}\n"
    );
    let path = dir.join("bench.yaml");
    std::fs::write(&path, manifests).expect("write manifests");
    let out = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["apply", "-f"])
        .arg(dir)
        .output()
        .expect("dlq-operator apply runs");
    assert!(
        out.status.success(),
        "apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, mut planned) = load_and_plan(&[PathBuf::from(&path)]).expect("valid manifests");
    planned.pop().expect("one DeadLetterQueue").prepared
}

/// Fills `dlq` with `n` dead letters of 1 KiB as the router leaves them: the header
/// contract (class and reason of [`GROUPS`], original queue `source`, retry count,
/// failure times a minute apart per thousand messages, last error).
async fn dead_letters(ch: &lapin::Channel, dlq: &str, source: &str, n: usize) {
    let text = |v: &str| AMQPValue::LongString(LongString::from(v));
    let start = now_ms().saturating_sub(n as u64 * 60);
    fill_with(ch, dlq, n, |i| {
        let (class, reason) = GROUPS[i % GROUPS.len()];
        let at = i64::try_from(start + i as u64 * 60).unwrap_or(i64::MAX);
        let mut h = FieldTable::default();
        for (k, v) in [
            (ERROR_CLASS, text(class)),
            (REASON, text(reason)),
            (ORIGINAL_QUEUE, text(source)),
            (ORIGINAL_EXCHANGE, text("")),
            (ORIGINAL_ROUTING_KEY, text(source)),
            (
                LAST_ERROR,
                text(&format!("{class}: bench failure {}", i % 7)),
            ),
            (RETRY_COUNT, AMQPValue::LongLongInt(3)),
            (FIRST_FAILED_AT, AMQPValue::LongLongInt(at - 10_000)),
            (LAST_FAILED_AT, AMQPValue::LongLongInt(at)),
        ] {
            h.insert(ShortString::from(k), v);
        }
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("c{i}").into())
            .with_headers(h)
    })
    .await;
}

/// A running console: the process, its base URL and the session cookie. Killed when
/// dropped (a failed assertion), stopped with SIGTERM by [`Console::stop`].
struct Console {
    child: Child,
    base: String,
    cookie: String,
    _stderr: Receiver<String>,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Console {
    /// Starts `console --standalone -f dir` on 127.0.0.1:0 (with `--scan-max-messages`
    /// when given), reads the login link from stderr (kept drained after) and logs in.
    async fn start(dir: &Path, scan_max: Option<u64>, http: &reqwest::Client) -> Console {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq-operator"));
        cmd.args(["console", "--standalone", "-f"])
            .arg(dir)
            .args(["--bind-address", "127.0.0.1:0"]);
        if let Some(m) = scan_max {
            cmd.args(["--scan-max-messages", &m.to_string()]);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the console starts");
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let link = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the console prints its login link");
            if let Some(link) = line.strip_prefix("console: ") {
                break link.to_string();
            }
        };
        let base = link
            .split_once("/login")
            .expect("a login link")
            .0
            .to_string();
        let r = http.get(&link).send().await.expect("login");
        assert_eq!(r.status().as_u16(), 303, "login refused");
        let set = r.headers()["set-cookie"].to_str().expect("ascii");
        let cookie = set.split(';').next().expect("cookie").to_string();
        Console {
            child,
            base,
            cookie,
            _stderr: lines,
        }
    }

    /// `GET path`: its time in ms and its body; panics on a status other than 200.
    async fn get(&self, http: &reqwest::Client, path: &str) -> (f64, String) {
        let t = Instant::now();
        let r = http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .expect("get");
        let status = r.status().as_u16();
        let body = r.text().await.expect("body");
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(status, 200, "{path}: {body}");
        (ms, body)
    }

    /// Stops the console with SIGTERM and waits for it.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// What one round measured.
struct Round {
    cold_ms: f64,
    groups_ms: f64,
    warm_ms: Vec<f64>,
    index_ms: Vec<f64>,
    /// (messages read, messages in the queue) of the scan.
    read: (u64, u64),
    broker_cpu_s: f64,
    broker_cpu_pct: f64,
    console_cpu_s: f64,
}

/// The page shows a finished scan's groups (no scan running, no error).
fn has_groups(html: &str) -> bool {
    assert!(!html.contains("class=\"error\""), "the scan failed: {html}");
    html.contains("<th>error class</th>") && !html.contains("Scanning")
}

/// "Last scan: read X of Y messages" of the page: (X, Y).
fn scan_read(html: &str) -> (u64, u64) {
    let rest = html
        .split_once("Last scan: read ")
        .expect("a scan summary")
        .1;
    let words: Vec<&str> = rest.split_whitespace().take(3).collect();
    let num = |w: Option<&&str>| w.and_then(|w| w.parse().ok()).expect("a count");
    (num(words.first()), num(words.get(2)))
}

/// One round (module doc) on a console started for it; `n` dead letters expected.
async fn round(dir: &Path, args: &Args, page: &str, beam: Option<&str>) -> Round {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let console = Console::start(dir, args.scan_max, &http).await;
    let pid = console.child.id().to_string();
    let (ticks, console_ticks) = (ticks_now(beam), cpu_ticks(&pid));
    let (cold_ms, cold) = console.get(&http, page).await;
    let count_cell = format!("<td class=\"num\">{}</td>", args.n);
    assert!(
        cold.contains(&count_cell),
        "no count {} on the cold page: {cold}",
        args.n
    );
    assert!(!has_groups(&cold), "groups before any scan: {cold}");
    let warm = loop {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        let (_, html) = console.get(&http, page).await;
        if has_groups(&html) {
            break html;
        }
    };
    let groups_ms = ticks.2.elapsed().as_secs_f64() * 1000.0;
    let (broker_cpu_s, _) = cpu_seconds_since(beam, ticks);
    let console_cpu_s = cpu_ticks(&pid).saturating_sub(console_ticks) as f64 / 100.0;
    let read = scan_read(&warm);
    let mut warm_ms = Vec::with_capacity(REPEATS);
    let mut index_ms = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let (ms, html) = console.get(&http, page).await;
        assert!(has_groups(&html), "the cached groups are gone: {html}");
        warm_ms.push(ms);
    }
    for _ in 0..REPEATS {
        index_ms.push(console.get(&http, "/").await.0);
    }
    console.stop();
    Round {
        cold_ms,
        groups_ms,
        warm_ms,
        index_ms,
        read,
        broker_cpu_s,
        broker_cpu_pct: broker_cpu_s * 100_000.0 / groups_ms,
        console_cpu_s,
    }
}

/// "median M ms, max X ms" of `v`.
fn med_max(v: Vec<f64>) -> String {
    let max = v.iter().copied().fold(0.0, f64::max);
    format!("median {:>7.1} ms, max {:>7.1} ms", median(v), max)
}

/// Prints the medians and maxima of `rounds`.
fn report(args: &Args, rounds: &[Round]) {
    let all = |f: fn(&Round) -> Vec<f64>| rounds.iter().flat_map(f).collect::<Vec<_>>();
    let (read, total) = rounds[0].read;
    println!(
        "{} dead letters of 1 KiB, {} queues, {} rounds (a console started for each):",
        args.n,
        args.queue_type,
        rounds.len()
    );
    println!(
        "  page cold (counts, scan started)  {}",
        med_max(all(|r| vec![r.cold_ms]))
    );
    println!(
        "  page until the groups show        {}",
        med_max(all(|r| vec![r.groups_ms]))
    );
    println!(
        "  page warm (cached scan, {REPEATS}/round)  {}",
        med_max(all(|r| r.warm_ms.clone()))
    );
    println!(
        "  index page ({REPEATS}/round)            {}",
        med_max(all(|r| r.index_ms.clone()))
    );
    println!("  scan read {read} of {total} messages");
    println!(
        "  during the scan: broker CPU median {:.2} s ({:.0} % of a core), console CPU median {:.2} s",
        median(all(|r| vec![r.broker_cpu_s])),
        median(all(|r| vec![r.broker_cpu_pct])),
        median(all(|r| vec![r.console_cpu_s]))
    );
}

/// Waits (up to 30 s) until `dlq` holds `n` again — messages held by a stopped console
/// come back a moment after its connection closes — and checks it does, and that the
/// source queue holds none (nothing replayed or lost on the way).
async fn nothing_lost(ch: &lapin::Channel, dlq: &str, source: &str, n: usize) {
    let mut held = 0;
    for _ in 0..300 {
        held = count(ch, dlq).await as usize;
        if held >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(held, n, "dead letters in {dlq} after the scans");
    assert_eq!(count(ch, source).await, 0, "messages in {source}");
    println!("  after the scans: {dlq} holds {held} of {n}, {source} none: nothing lost");
}

/// Purges the bench's queues and removes its objects (retried while the broker's
/// statistics still show the purged messages).
async fn clean_up(ch: &lapin::Channel, prepared: &Prepared, queues: &[&str]) {
    for q in queues {
        let _ = ch
            .queue_purge((*q).into(), QueuePurgeOptions::default())
            .await;
    }
    let broker = RabbitMq::new(&prepared.connection).expect("client");
    for attempt in 0.. {
        let removed = broker.remove(&prepared.topology).await.expect("remove");
        if removed.blocked.is_empty() {
            break;
        }
        assert!(
            attempt < 30,
            "the bench's objects were not removed: {removed:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    let name = format!("bench-console-{}", std::process::id());
    let dir = tempfile::tempdir().expect("temp dir");
    let prepared = applied(dir.path(), &name, args.queue_type, args.n.max(100_000));
    let dlq = prepared
        .topology
        .dead_letter_queues()
        .next()
        .expect("a dead-letter queue")
        .to_string();
    let amqp = lapin::Connection::connect(AMQP, Default::default())
        .await
        .expect("amqp");
    let ch = amqp.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let filled = Instant::now();
    dead_letters(&ch, &dlq, &name, args.n).await;
    println!(
        "filled {dlq} with {} dead letters in {:.1} s",
        args.n,
        filled.elapsed().as_secs_f64()
    );
    let beam = broker_pid();
    if beam.is_none() {
        println!("no beam.smp process found here: the broker's CPU is not reported");
    }
    let page = format!("/dlq/default/{name}");
    let mut rounds = Vec::with_capacity(args.rounds);
    for i in 0..args.rounds {
        // What the last console held is back before the next starts (its page shows N).
        wait_for(&ch, &dlq, args.n).await;
        let r = round(dir.path(), &args, &page, beam.as_deref()).await;
        println!(
            "round {i}: cold {:.1} ms, groups after {:.1} ms (read {} of {}), warm median {:.1} ms, index median {:.1} ms",
            r.cold_ms,
            r.groups_ms,
            r.read.0,
            r.read.1,
            median(r.warm_ms.clone()),
            median(r.index_ms.clone())
        );
        rounds.push(r);
    }
    report(&args, &rounds);
    nothing_lost(&ch, &dlq, &name, args.n).await;
    clean_up(&ch, &prepared, &[&dlq, &name]).await;
    let _ = amqp.close(200, "bye".into()).await;
}
