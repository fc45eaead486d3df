//! What one RabbitMQ policy write costs as a vhost grows (docs/BENCHMARKS.md, "Policy
//! writes at scale").
//!
//! A policy change makes the broker match every policy of the vhost against every queue
//! and exchange of the vhost again. Each scenario runs in a fresh vhost of its own
//! (`bench-policy-<random>-<scenario>`, guest granted, deleted at the end), through the
//! management HTTP API (one keep-alive reqwest client; every request waits for its answer):
//!
//! - **A, exact**: today's layout, one policy per queue (`^q-0042$`), P = N;
//! - **A′, exact, sparse**: N = 100 queues, P = 1,000 exact-name policies (900 match no
//!   queue): separates the number of policies from the number of queues;
//! - **B, shared**: P = 4 policies whose patterns each match a quarter of the queues (by
//!   the last two digits of the name);
//! - **E, shared, name lists**: P = 4 policies as in B, but each pattern lists the exact
//!   names of its quarter of the queues (`^(?:q-0000|q-0004|…)$`): the only way a shared
//!   policy can cover queues whose names follow no pattern of their own, such as the
//!   operator's (a pattern like `\.dlq$` would also catch users' queues);
//! - **C, arguments**: P = 0, the settings given as queue arguments at declaration
//!   (`x-dead-letter-exchange`, `x-dead-letter-routing-key`, `x-message-ttl`); its timed
//!   writes add new exact-name policies (P grows from 0 to W);
//! - **D, concurrency**: in A's vhost at the largest N, W writes one after another against
//!   W writes 4 at a time: does the broker serialize them?
//!
//! Set-up order: the P policies first (on an empty vhost, where a write is cheap), then the
//! N classic durable queues (`q-0000`…; each declaration matches the policies once).
//! Written the other way round — what an operator does for queues that exist — the set-up
//! would cost the sum of P writes at growing P, about P × the median below / 2.
//!
//! Timed per scenario: W policy writes (PUT of an existing policy with a changed
//! definition: what a reconcile of a changed spec does; median and p90, ms), the broker's
//! CPU during them (beam.smp utime + stime, per write), 3 policy DELETEs (median, ms), 5
//! declarations of one more queue (median, ms) and the two set-up steps (s).
//!
//! Needs the local RabbitMQ (127.0.0.1, guest/guest, management plugin). Creates and
//! removes its own vhosts only.
//!
//! Run: `cargo bench --bench policy_writes` (N = 100, 300, 1000; W = 20), or
//! `cargo bench --bench policy_writes -- n=100,1000 w=10 only=a,b`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

mod common;
use common::{broker_pid, cpu_seconds_since, median, percentile, ticks_now, API};

/// A failure of the bench, described (the vhost is still deleted after it).
type Res<T> = Result<T, String>;

/// Writes at once in the concurrent half of scenario D.
const CONCURRENCY: usize = 4;
/// Timed policy DELETEs per scenario.
const DELETES: usize = 3;
/// Timed declarations of one more queue per scenario.
const EXTRA_QUEUES: usize = 5;

/// The patterns of the 4 shared policies of layout B: a quarter of the queues each, by the
/// last two digits of `q-NNNN` (exact quarters when N is a multiple of 100).
const SHARED: [&str; 4] = [
    r"^q-\d\d([01]\d|2[0-4])$",
    r"^q-\d\d(2[5-9]|[34]\d)$",
    r"^q-\d\d([56]\d|7[0-4])$",
    r"^q-\d\d(7[5-9]|[89]\d)$",
];

/// How a scenario's policies are laid out.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// One exact-name policy per queue, `policies` of them (queue names from `q-0000`).
    Exact { policies: usize },
    /// The 4 [`SHARED`] policies.
    Shared,
    /// 4 policies, each listing the exact names of a quarter of the queues.
    NameLists,
    /// No policy; the settings as queue arguments.
    Arguments,
}

impl Layout {
    /// The row's name in the table.
    fn label(self, n: usize) -> String {
        match self {
            Layout::Exact { policies } if policies == n => "A exact".into(),
            Layout::Exact { .. } => "A′ exact, sparse".into(),
            Layout::Shared => "B shared".into(),
            Layout::NameLists => "E shared, name lists".into(),
            Layout::Arguments => "C arguments".into(),
        }
    }

    /// How many policies exist before the timed writes.
    fn policies(self) -> usize {
        match self {
            Layout::Exact { policies } => policies,
            Layout::Shared | Layout::NameLists => SHARED.len(),
            Layout::Arguments => 0,
        }
    }
}

/// Pattern number `group` of layout E for `n` queues: the exact names of every queue whose
/// number is `group` modulo [`SHARED`]`.len()`, as one alternation.
fn name_list(group: usize, n: usize) -> String {
    let names: Vec<String> = (group..n).step_by(SHARED.len()).map(queue).collect();
    format!("^(?:{})$", names.join("|"))
}

/// The bench's command line: `n=100,300,1000`, `w=20`, `only=a,a2,b,c,d,e`.
struct Args {
    /// Queue counts of scenarios A and B.
    ns: Vec<usize>,
    /// Timed writes per scenario.
    writes: usize,
    /// Scenarios to run (lower case letters; `a2` for A′).
    only: Vec<String>,
}

/// Reads [`Args`] from the arguments after `--`.
fn args() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |key: &str| args.iter().find_map(|a| a.strip_prefix(key));
    let ns = value("n=")
        .map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 300, 1000]);
    let writes = value("w=").and_then(|w| w.parse().ok()).unwrap_or(20);
    let only = value("only=")
        .unwrap_or("a,a2,b,c,d,e")
        .split(',')
        .map(str::to_string)
        .collect();
    Args { ns, writes, only }
}

/// The management API, scoped to one vhost of the bench.
struct Api {
    http: reqwest::Client,
    vhost: String,
}

impl Api {
    /// Sends `method path` (relative to [`API`]) with an optional JSON body; returns the
    /// time to the answer in ms. Errors on a transport failure or a non-2xx answer.
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Res<f64> {
        let url = format!("{API}{path}");
        let mut req = self
            .http
            .request(method.clone(), &url)
            .basic_auth("guest", Some("guest"));
        if let Some(body) = body {
            req = req.json(body);
        }
        let start = Instant::now();
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if status.is_success() {
            Ok(ms)
        } else {
            Err(format!("{method} {url}: {status}: {text}"))
        }
    }

    /// PUT of the policy `name` (pattern, definition; apply-to queues, priority 10) in ms.
    async fn put_policy(&self, name: &str, pattern: &str, definition: Value) -> Res<f64> {
        let body = json!({
            "pattern": pattern, "definition": definition, "priority": 10, "apply-to": "queues"
        });
        let path = format!("/policies/{}/{name}", self.vhost);
        self.send(reqwest::Method::PUT, &path, Some(&body)).await
    }

    /// DELETE of the policy `name` in ms.
    async fn delete_policy(&self, name: &str) -> Res<f64> {
        let path = format!("/policies/{}/{name}", self.vhost);
        self.send(reqwest::Method::DELETE, &path, None).await
    }

    /// Declares the classic durable queue `name` with `arguments`; ms.
    async fn declare(&self, name: &str, arguments: Value) -> Res<f64> {
        let body = json!({"durable": true, "auto_delete": false, "arguments": arguments});
        let path = format!("/queues/{}/{name}", self.vhost);
        self.send(reqwest::Method::PUT, &path, Some(&body)).await
    }
}

/// Queue `i`'s name.
fn queue(i: usize) -> String {
    format!("q-{i:04}")
}

/// The definition of a bench policy for `queue`: dead-lettering as the operator writes
/// it, with a message TTL of `ttl` ms when given (the "changed spec" of a timed write).
fn definition(queue: &str, ttl: Option<u64>) -> Value {
    let mut d =
        json!({"dead-letter-exchange": "dlx", "dead-letter-routing-key": format!("{queue}.dlq")});
    if let Some(ttl) = ttl {
        d["message-ttl"] = json!(ttl);
    }
    d
}

/// Queue arguments of scenario C: the same settings as a policy's definition.
fn queue_arguments(queue: &str) -> Value {
    json!({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": format!("{queue}.dlq"),
           "x-message-ttl": 60_000})
}

/// One timed write number `k` of `layout` in a vhost of `n` queues: rewrites an existing
/// policy with a changed definition (C: adds a new exact-name policy); ms.
async fn write(api: &Api, layout: Layout, n: usize, k: usize) -> Res<f64> {
    let ttl = Some(60_000 + k as u64);
    match layout {
        Layout::Exact { .. } => {
            let q = queue((k * 37) % n);
            api.put_policy(&format!("p-{q}"), &format!("^{q}$"), definition(&q, ttl))
                .await
        }
        Layout::Shared => {
            let i = k % SHARED.len();
            api.put_policy(&format!("shared-{i}"), SHARED[i], definition("shared", ttl))
                .await
        }
        Layout::NameLists => {
            let i = k % SHARED.len();
            let pattern = name_list(i, n);
            api.put_policy(&format!("shared-{i}"), &pattern, definition("shared", ttl))
                .await
        }
        Layout::Arguments => {
            let q = queue((k * 37) % n);
            api.put_policy(&format!("p-{q}"), &format!("^{q}$"), definition(&q, ttl))
                .await
        }
    }
}

/// What one scenario measured.
struct Row {
    label: String,
    n: usize,
    p: usize,
    writes_ms: Vec<f64>,
    cpu_per_write_ms: f64,
    delete_ms: f64,
    extra_queue_ms: f64,
    setup_policies_s: f64,
    setup_queues_s: f64,
    broker_cpu_s: f64,
}

/// Scenario D's two runs: (total s, median ms per write, broker CPU s) each.
struct Concurrency {
    serial: (f64, f64, f64),
    parallel: (f64, f64, f64),
}

/// Creates the policies of `layout`, then `n` queues; returns the two durations in s.
async fn set_up(api: &Api, layout: Layout, n: usize) -> Res<(f64, f64)> {
    let start = Instant::now();
    match layout {
        Layout::Exact { policies } => {
            for i in 0..policies {
                let q = queue(i);
                api.put_policy(&format!("p-{q}"), &format!("^{q}$"), definition(&q, None))
                    .await?;
            }
        }
        Layout::Shared => {
            for (i, pattern) in SHARED.iter().enumerate() {
                api.put_policy(&format!("shared-{i}"), pattern, definition("shared", None))
                    .await?;
            }
        }
        Layout::NameLists => {
            for i in 0..SHARED.len() {
                api.put_policy(
                    &format!("shared-{i}"),
                    &name_list(i, n),
                    definition("shared", None),
                )
                .await?;
            }
        }
        Layout::Arguments => {}
    }
    let policies_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for i in 0..n {
        let q = queue(i);
        let arguments = match layout {
            Layout::Arguments => queue_arguments(&q),
            _ => json!({}),
        };
        api.declare(&q, arguments).await?;
    }
    Ok((policies_s, start.elapsed().as_secs_f64()))
}

/// Runs scenario `layout` with `n` queues in `api`'s (fresh) vhost; with `concurrency`,
/// also scenario D before the deletes.
async fn scenario(
    api: &Api,
    layout: Layout,
    (n, w): (usize, usize),
    beam: Option<&str>,
    concurrency: bool,
) -> Res<(Row, Option<Concurrency>)> {
    let whole = ticks_now(beam);
    let (setup_policies_s, setup_queues_s) = set_up(api, layout, n).await?;
    let started = ticks_now(beam);
    let mut writes_ms = Vec::with_capacity(w);
    for k in 0..w {
        writes_ms.push(write(api, layout, n, k).await?);
    }
    let cpu_per_write_ms = cpu_seconds_since(beam, started).0 * 1e3 / w.max(1) as f64;
    let d = if concurrency {
        Some(concurrent(api, layout, n, w, beam).await?)
    } else {
        None
    };
    let mut extra = Vec::with_capacity(EXTRA_QUEUES);
    for i in 0..EXTRA_QUEUES {
        let q = format!("extra-{i}");
        let arguments = match layout {
            Layout::Arguments => queue_arguments(&q),
            _ => json!({}),
        };
        extra.push(api.declare(&q, arguments).await?);
    }
    let mut deletes = Vec::with_capacity(DELETES);
    for k in 0..DELETES {
        let name = match layout {
            Layout::Shared | Layout::NameLists => format!("shared-{k}"),
            _ => format!("p-{}", queue((k * 37) % n)),
        };
        deletes.push(api.delete_policy(&name).await?);
    }
    let row = Row {
        label: layout.label(n),
        n,
        p: layout.policies(),
        writes_ms,
        cpu_per_write_ms,
        delete_ms: median(deletes),
        extra_queue_ms: median(extra),
        setup_policies_s,
        setup_queues_s,
        broker_cpu_s: cpu_seconds_since(beam, whole).0,
    };
    Ok((row, d))
}

/// Scenario D: `w` writes one after another, then `w` writes [`CONCURRENCY`] at a time.
async fn concurrent(
    api: &Api,
    layout: Layout,
    n: usize,
    w: usize,
    beam: Option<&str>,
) -> Res<Concurrency> {
    let mut runs = Vec::with_capacity(2);
    for (run, at_once) in [(0, 1), (1, CONCURRENCY)] {
        let ticks = ticks_now(beam);
        let start = Instant::now();
        // Other policies than the timed writes' ones (offset), other TTLs per run.
        let results: Vec<Res<f64>> = futures::stream::iter(0..w)
            .map(|k| write(api, layout, n, 1_000 + k + run * w))
            .buffer_unordered(at_once)
            .collect()
            .await;
        let total = start.elapsed().as_secs_f64();
        let ms = results.into_iter().collect::<Res<Vec<f64>>>()?;
        runs.push((total, median(ms), cpu_seconds_since(beam, ticks).0));
    }
    Ok(Concurrency {
        serial: runs[0],
        parallel: runs[1],
    })
}

/// Creates vhost `name` and grants guest everything in it.
async fn create_vhost(api: &Api) -> Res<()> {
    let vhost = &api.vhost;
    api.send(reqwest::Method::PUT, &format!("/vhosts/{vhost}"), None)
        .await?;
    let all = json!({"configure": ".*", "write": ".*", "read": ".*"});
    api.send(
        reqwest::Method::PUT,
        &format!("/permissions/{vhost}/guest"),
        Some(&all),
    )
    .await?;
    Ok(())
}

/// Runs one scenario in a fresh vhost and deletes the vhost whatever happened.
async fn in_fresh_vhost(
    http: &reqwest::Client,
    tag: &str,
    layout: Layout,
    (n, w): (usize, usize),
    (beam, d): (Option<&str>, bool),
) -> Res<(Row, Option<Concurrency>)> {
    let api = Api {
        http: http.clone(),
        vhost: format!("bench-policy-{:08x}-{tag}", rand::random::<u32>()),
    };
    let result = match create_vhost(&api).await {
        Ok(()) => scenario(&api, layout, (n, w), beam, d).await,
        Err(e) => Err(e),
    };
    let path = format!("/vhosts/{}", api.vhost);
    match api.send(reqwest::Method::DELETE, &path, None).await {
        Ok(ms) => println!("vhost {} deleted in {:.1} s", api.vhost, ms / 1e3),
        Err(e) => println!("could not delete vhost {}: {e}", api.vhost),
    }
    result
}

/// The broker's node name and version from the management API ("?" when unknown).
async fn node(http: &reqwest::Client) -> (String, String) {
    let overview: Value = match http
        .get(format!("{API}/overview"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
    {
        Ok(resp) => resp.json().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    let field = |k: &str| overview[k].as_str().unwrap_or("?").to_string();
    (field("node"), field("rabbitmq_version"))
}

/// Prints which broker is measured: version, node, beam.smp PID and its `-sname`/`-name`.
async fn describe(http: &reqwest::Client, beam: Option<&str>) {
    let (node, version) = node(http).await;
    let cmdline = beam
        .and_then(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default();
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    let sname = words
        .windows(2)
        .find(|w| w[0] == "-sname" || w[0] == "-name")
        .map_or("none on its command line".to_string(), |w| w[1].to_string());
    println!(
        "RabbitMQ {version}, node {node}; beam.smp PID {} (-sname/-name: {sname})",
        beam.unwrap_or("not found: the broker's CPU is not reported")
    );
}

/// Prints the tables.
fn report(rows: &[Row], d: Option<&Concurrency>, w: usize) {
    println!();
    println!("| scenario | queues N | policies P | write median ms | write p90 ms | broker CPU per write ms | policy DELETE ms | +1 queue ms | set-up: P policies s | set-up: N queues s | broker CPU s (scenario) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.label,
            r.n,
            r.p,
            median(r.writes_ms.clone()),
            percentile(r.writes_ms.clone(), 90.0),
            r.cpu_per_write_ms,
            r.delete_ms,
            r.extra_queue_ms,
            r.setup_policies_s,
            r.setup_queues_s,
            r.broker_cpu_s
        );
    }
    if let Some(d) = d {
        println!();
        println!("| D: {w} writes, layout A at its largest N | total s | median per write ms | broker CPU s |");
        println!("|---|---|---|---|");
        for (name, (total, med, cpu)) in
            [("one after another", d.serial), ("4 at a time", d.parallel)]
        {
            println!("| {name} | {total:.2} | {med:.1} | {cpu:.2} |");
        }
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            eprintln!("HTTP client: {e}");
            std::process::exit(1);
        }
    };
    let beam = broker_pid();
    describe(&http, beam.as_deref()).await;
    let largest = args.ns.iter().copied().max().unwrap_or(1000);
    let want = |s: &str| args.only.iter().any(|o| o == s);
    let mut plan = Vec::new();
    for &n in &args.ns {
        if want("a") || (want("d") && n == largest) {
            plan.push((format!("a{n}"), Layout::Exact { policies: n }, n));
        }
        if want("b") {
            plan.push((format!("b{n}"), Layout::Shared, n));
        }
        if want("e") {
            plan.push((format!("e{n}"), Layout::NameLists, n));
        }
    }
    if want("a2") {
        plan.push(("a2".into(), Layout::Exact { policies: 1000 }, 100));
    }
    if want("c") {
        plan.push(("c".into(), Layout::Arguments, largest));
    }
    let (mut rows, mut d) = (Vec::new(), None);
    for (tag, layout, n) in plan {
        let with_d = want("d") && tag == format!("a{largest}");
        let started = Instant::now();
        match in_fresh_vhost(
            &http,
            &tag,
            layout,
            (n, args.writes),
            (beam.as_deref(), with_d),
        )
        .await
        {
            Ok((row, conc)) => {
                println!(
                    "{tag}: done in {:.0} s, write median {:.1} ms",
                    started.elapsed().as_secs_f64(),
                    median(row.writes_ms.clone())
                );
                rows.push(row);
                d = d.or(conc);
            }
            Err(e) => println!("{tag}: failed: {e}"),
        }
    }
    report(&rows, d.as_ref(), args.writes);
}
