//! Client processes of other languages for the tests of the retry router with real
//! clients (tests/router_clients.rs, tests/redis_clients.rs): a child process SIGKILLed on
//! drop, its stdout's JSON lines as they come, and where Python (`.venv`) and Node (with
//! the packages of tests/router_clients) are.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::helm::skip;
use super::root;

/// A child process SIGKILLed and reaped on drop, also when a test panics.
pub struct Killed(pub Child);

impl Killed {
    /// SIGKILL now and reap (idempotent).
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client script running as a child process, its stdout's JSON lines arriving on
/// `lines` as they come.
pub struct Client {
    name: &'static str,
    _process: Killed,
    lines: UnboundedReceiver<Value>,
}

impl Client {
    /// Starts `command` (stdin closed, stdout read line by line, stderr inherited: a
    /// client's errors show in the test's output).
    pub fn start(name: &'static str, mut command: Command) -> Client {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start the {name} client ({command:?}): {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let process = Killed(child);
        let (tx, lines) = unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v.is_object() => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    _ => eprintln!("{name} (not JSON): {line}"),
                }
            }
        });
        Client {
            name,
            _process: process,
            lines,
        }
    }

    /// The next JSON line within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Value {
        match tokio::time::timeout(timeout, self.lines.recv()).await {
            Ok(Some(v)) => v,
            Ok(None) => panic!("the {} client exited (its stderr is above)", self.name),
            Err(_) => panic!("the {} client printed nothing for {timeout:?}", self.name),
        }
    }

    /// Waits for the client's `{"ready": true}` (it consumes).
    pub async fn ready(&mut self) {
        let line = self.next(Duration::from_secs(60)).await;
        assert_eq!(line["ready"], true, "{}: {line}", self.name);
    }

    /// The next `n` deliveries it reports, each within `timeout` of the one before.
    pub async fn deliveries(&mut self, n: usize, timeout: Duration) -> Vec<Seen> {
        let mut seen = Vec::new();
        while seen.len() < n {
            let line = self.next(timeout).await;
            seen.push(Seen::of(self.name, &line));
        }
        seen
    }

    /// Deliveries it reported that were not read yet.
    pub fn unread(&mut self) -> Vec<Value> {
        let mut rest = Vec::new();
        while let Ok(v) = self.lines.try_recv() {
            rest.push(v);
        }
        rest
    }
}

/// One delivery as a client reported it.
#[derive(Debug)]
pub struct Seen {
    /// The client's clock when it got the delivery (ms since the epoch).
    pub t_ms: f64,
    /// The message's id (AMQP message-id, or Celery's task id).
    pub id: String,
    /// Header `dlq-retry-count`, absent on the first delivery.
    pub retry_count: Option<u64>,
}

impl Seen {
    pub fn of(client: &str, line: &Value) -> Seen {
        let id = line["message_id"].as_str().or(line["task_id"].as_str());
        Seen {
            t_ms: line["t_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("{client}: no t_ms in {line}")),
            id: id
                .unwrap_or_else(|| panic!("{client}: no message id in {line}"))
                .to_string(),
            retry_count: line["retry_count"].as_u64(),
        }
    }
}

/// A TCP port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `.venv/bin/python` of the crate if it imports `modules`; else reports `test` as
/// skipped ([`skip`]: a failure under .ci/run's `DLQ_REQUIRE_TOOLS=1`) and gives `None`.
pub fn python(test: &str, modules: &str) -> Option<PathBuf> {
    let python = root().join(".venv/bin/python");
    let how =
        "python3 -m venv .venv && .venv/bin/pip install -r requirements-dev.txt (as .ci/run does)";
    let why = match Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
    {
        Ok(o) if o.status.success() => return Some(python),
        Ok(o) => format!(
            "{} cannot import {modules} ({})",
            python.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("{} does not run ({e})", python.display()),
    };
    skip(test, &format!("{why}: {how}"));
    None
}

/// The directory of the client scripts.
pub fn scripts() -> PathBuf {
    root().join("tests/router_clients")
}

/// True when `node` is in PATH and `package` is installed in tests/router_clients; else
/// reports `test` as skipped ([`skip`]).
pub fn node(test: &str, package: &str) -> bool {
    let how = "apt-get install nodejs npm, then npm ci in tests/router_clients (as .ci/run does)";
    if !matches!(Command::new("node").arg("--version").output(), Ok(o) if o.status.success()) {
        skip(test, &format!("node is not in PATH: {how}"));
        return false;
    }
    if !scripts()
        .join(format!("node_modules/{package}/package.json"))
        .exists()
    {
        skip(
            test,
            &format!("{package} is not installed in tests/router_clients: {how}"),
        );
        return false;
    }
    true
}

/// `dlq-operator router --standalone -f dir` with /metrics on 127.0.0.1:`port` (0: any
/// free port) and `RUST_LOG=log`, its stderr the test's; SIGKILLed on drop.
pub fn router(dir: &str, port: u16, log: &str) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args([
            "router",
            "--standalone",
            "-f",
            dir,
            "--metrics-bind-address",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .env("RUST_LOG", log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start dlq-operator router");
    Killed(child)
}
