//! Bad input through the real CLI: each case gives one clear error naming the file, the
//! resource and the field (or the broker's reason), a non-zero exit, no panic, and no
//! message deleted.

mod common;

use common::*;

const GOOD_POLICY: &str = "  maxRetries: 2\n  backoff:\n    strategy: Exponential\n    initialDelay: 1s\n    maxDelay: 10s\n";

/// Runs `apply -f DIR` and returns (exit success, combined output).
fn apply_dir(dir: &tempfile::TempDir) -> (bool, String) {
    let o = cli(&["apply", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert!(!t.contains("panicked"), "panic:\n{t}");
    (o.status.success(), t)
}

fn assert_names(t: &str, needles: &[&str]) {
    for n in needles {
        assert!(t.contains(n), "expected {n:?} in:\n{t}");
    }
}

/// Starts `dlq-operator ARGS…`, checks it is still running 500 ms later (`what` says
/// where it waits), sends `signal` (`-INT`, `-TERM`…) and returns its output once it has
/// ended, failing if it still runs 5 s after the signal.
fn signal_while_it_waits(args: &[&str], signal: &str, what: &str) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        child.try_wait().expect("status").is_none(),
        "{what}: ended before the signal"
    );
    let sent = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while child.try_wait().expect("status").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running 5 s after {signal}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let dir = manifests(&[(
        "bad.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: [unclosed\n",
    )]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(&t, &["bad.yaml", "invalid YAML", "line"]);
}

#[test]
fn unknown_field_is_named() {
    let policy = policy_yaml("p", "  maxRetries: 2\n  backoff:\n    initalDelay: 1s\n");
    let dir = manifests(&[("p.yaml", &policy)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &[
            "p.yaml",
            "RetryPolicy default/p",
            "spec.backoff.initalDelay",
            "unknown field",
        ],
    );
}

#[test]
fn bad_durations_are_named() {
    for bad in ["5 minutes", "-1s"] {
        let policy = policy_yaml("p", &format!("  backoff:\n    initialDelay: \"{bad}\"\n"));
        let dir = manifests(&[("p.yaml", &policy)]);
        let (ok, t) = apply_dir(&dir);
        assert!(!ok, "{bad}");
        assert_names(
            &t,
            &[
                "p.yaml",
                "RetryPolicy default/p",
                "spec.backoff.initialDelay",
                bad,
            ],
        );
    }
}

#[test]
fn max_delay_below_initial_delay_is_named() {
    let policy = policy_yaml("p", "  backoff:\n    initialDelay: 10s\n    maxDelay: 5s\n");
    let dir = manifests(&[("p.yaml", &policy)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &[
            "RetryPolicy default/p",
            "spec.backoff.maxDelay",
            "maxDelay must be >= initialDelay",
        ],
    );
}

#[test]
fn multiplier_below_one_is_named() {
    let policy = policy_yaml("p", "  backoff:\n    multiplier: 0.5\n");
    let dir = manifests(&[("p.yaml", &policy)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &["RetryPolicy default/p", "spec.backoff.multiplier", "0.5"],
    );
}

#[test]
fn wrong_type_is_named() {
    let policy = policy_yaml("p", "  maxRetries: three\n");
    let dir = manifests(&[("p.yaml", &policy)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &["RetryPolicy default/p", "spec.maxRetries", "invalid type"],
    );
}

#[test]
fn a_scalar_where_a_mapping_belongs_names_no_rust_type() {
    let dlq = dlq_yaml("d", "q-router-scalar", "p", "s", "  router: true\n");
    let dir = manifests(&[("d.yaml", &dlq)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &[
            "DeadLetterQueue default/d",
            "spec.router",
            "expected a mapping of fields",
            "docs/REFERENCE.md",
        ],
    );
    assert!(
        !t.contains("RouterSpec"),
        "a Rust type name in the error: {t}"
    );
}

#[test]
fn missing_retry_policy_and_secret_are_named() {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let dlq = dlq_yaml("d", "q-missing-policy", "nope", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &[
            "all.yaml (document 2)",
            "DeadLetterQueue default/d",
            "spec.retryPolicyRef.name",
            "RetryPolicy default/nope not found",
        ],
    );

    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml("d", "q-missing-secret", "p", "absent", "");
    let dir = manifests(&[("all.yaml", &format!("{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &[
            "DeadLetterQueue default/d",
            "spec.broker.secretRef.name",
            "Secret default/absent not found",
        ],
    );
}

#[test]
fn unknown_kind_and_missing_name_are_reported() {
    let dir = manifests(&[(
        "x.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    )]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &["x.yaml (document 1)", "unsupported object v1/ConfigMap"],
    );

    let dir = manifests(&[(
        "y.yaml",
        &policy_yaml("p", GOOD_POLICY).replace("  name: p\n", ""),
    )]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(&t, &["y.yaml", "metadata.name", "is required"]);
}

#[test]
fn missing_path_is_reported() {
    let o = cli(&["apply", "-f", "/nonexistent/manifests"]);
    assert!(!o.status.success());
    assert_names(&text(&o), &["/nonexistent/manifests", "No such file"]);
}

#[tokio::test]
async fn wrong_password_is_auth_failure_without_leaking_it() {
    let password = "s3cr3t-Wr0ng-pa55";
    let q = unique("badpw");
    let secret = secret_yaml("s", "guest", password, MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml("d", &q, "p", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &["DeadLetterQueue default/d", "BrokerAuthFailed", "guest"],
    );
    assert!(!t.contains(password), "password leaked:\n{t}");
    assert!(
        mgmt_get(&format!("/api/queues/%2F/{q}")).await.is_none(),
        "nothing created"
    );
}

#[test]
fn broker_down_is_unreachable_without_leaking_password() {
    let password = "d0wn-pa55w0rd";
    let secret = secret_yaml("s", "guest", password, "http://127.0.0.1:1");
    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml("d", "q-down", "p", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "DeadLetterQueue default/d",
            "BrokerUnreachable",
            "127.0.0.1:1",
        ],
    );
    assert!(!t.contains(password), "password leaked:\n{t}");
}

#[tokio::test]
async fn existing_source_queue_with_other_arguments_is_a_conflict_and_keeps_its_messages() {
    let q = unique("conflict");
    // A classic queue with a max-length argument, holding one message.
    let client = reqwest::Client::new();
    let put = client
        .put(format!("{MGMT}/api/queues/%2F/{q}"))
        .basic_auth("guest", Some("guest"))
        .json(&serde_json::json!({"durable": true, "arguments": {"x-queue-type": "classic", "x-max-length": 1000}}))
        .send()
        .await
        .expect("declare");
    assert!(put.status().is_success());
    let publish = client
        .post(format!("{MGMT}/api/exchanges/%2F/amq.default/publish"))
        .basic_auth("guest", Some("guest"))
        .json(&serde_json::json!({"properties": {"delivery_mode": 2}, "routing_key": q, "payload": "keep me", "payload_encoding": "string"}))
        .send()
        .await
        .expect("publish");
    let routed: serde_json::Value = publish.json().await.expect("json");
    assert_eq!(routed["routed"], true);

    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml("d", &q, "p", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(&t, &[&q, "conflict", "NOT ready"]);

    // The queue and its message are still there (AMQP passive declare is not lagged).
    assert_eq!(passive_ready_count(AMQP, &q).await, 1, "message kept");
    cleanup(&q).await;
}

#[test]
fn one_resources_dead_letter_queue_cannot_be_anothers_source_queue() {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    let a = dlq_yaml("a", "shared-a", "p", "s", "");
    let b = dlq_yaml(
        "b",
        "shared-b",
        "p",
        "s",
        "  deadLetter:\n    queue: shared-a\n",
    );
    let dir = manifests(&[(
        "all.yaml",
        &format!("{secret}---\n{policy}---\n{a}---\n{b}"),
    )]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "DeadLetterQueue default/b",
            "spec.deadLetter.queue",
            "\"shared-a\" is also planned by DeadLetterQueue default/a",
        ],
    );

    let c = dlq_yaml("c", "shared-a", "p", "s", "");
    let dir = manifests(&[(
        "all.yaml",
        &format!("{secret}---\n{policy}---\n{a}---\n{c}"),
    )]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "DeadLetterQueue default/c",
            "spec.source.queue",
            "also planned by DeadLetterQueue default/a",
        ],
    );
}

#[test]
fn secret_values_are_never_printed_even_when_mistyped() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  uri: amqp://127.0.0.1\n  managementUri: http://127.0.0.1:15672\n  password: 98765431\n";
    let dir = manifests(&[("s.yaml", secret)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(
        &t,
        &["Secret default/s", "stringData.password", "not shown"],
    );
    assert!(!t.contains("98765431"), "password leaked:\n{t}");
}

#[test]
fn names_with_control_characters_and_oversized_ttls_are_rejected() {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml("d", "\"ctl\\nq\"", "p", "s", "");
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(&t, &["spec.source.queue", "control characters"]);

    let dlq = dlq_yaml(
        "d",
        "ttl-q",
        "p",
        "s",
        "  deadLetter:\n    retention: 999999999w\n",
    );
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(&t, &["spec.deadLetter.retention", "365d"]);
}

#[test]
fn manifests_without_a_dead_letter_queue_are_an_error() {
    let dir = manifests(&[("empty.yaml", "# nothing here\n")]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok);
    assert_names(&t, &["no DeadLetterQueue"]);
}

#[test]
fn simulate_rejects_out_of_range_flags() {
    for args in [
        vec!["simulate", "backoff", "--attempts", "4294967295"],
        vec!["simulate", "backoff", "--clients", "100000000"],
        vec!["simulate", "backoff", "--multiplier", "-1"],
        vec!["simulate", "backoff", "--initial-delay", "-1s"],
    ] {
        let o = cli(&args);
        let t = text(&o);
        assert!(!o.status.success(), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{t}");
    }
    let o = cli(&["simulate", "backoff", "--initial-delay", "-1s"]);
    assert!(text(&o).contains("--initial-delay"), "{}", text(&o));
}

#[test]
fn dot_vhosts_are_rejected() {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    for vhost in [".", ".."] {
        let dlq = dlq_yaml("d", "dot-q", "p", "s", "").replace(
            "      name: s\n",
            &format!("      name: s\n    vhost: \"{vhost}\"\n"),
        );
        let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
        let (ok, t) = apply_dir(&dir);
        assert!(!ok, "{vhost}: {t}");
        assert_names(&t, &["spec.broker.vhost"]);
    }
}

#[test]
fn manifests_can_be_piped_on_stdin() {
    use std::io::Write;
    // The files of examples/ itself, as `-f examples/` reads them (not examples/replay/).
    let all = std::fs::read_dir(root().join("examples"))
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| std::fs::read_to_string(p).expect("read"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["render", "-f", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(all.as_bytes())
        .expect("write");
    let o = child.wait_with_output().expect("wait");
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("order-events.retry.5s"), "{t}");
}

#[test]
fn controller_flags_are_checked_before_reaching_any_cluster() {
    for (args, needle) in [
        (
            vec!["run", "-f", "examples/"],
            "-f PATH is for `run --standalone`",
        ),
        (
            vec!["run", "--resync", "1ms"],
            "--resync: must be at least 10s",
        ),
        (vec!["run", "--resync", "soon"], "--resync:"),
        (
            vec!["run", "--namespace", "Bad_NS!"],
            "--namespace \"Bad_NS!\": not a namespace name",
        ),
        (
            vec!["run", "--lease-namespace", "UPPER"],
            "--lease-namespace \"UPPER\": not a namespace name",
        ),
        (vec!["run", "--lease-duration", "0"], "--lease-duration"),
        (vec!["run", "--concurrency", "0"], "--concurrency"),
        (
            vec!["run", "--metrics-bind-address", "not-an-address"],
            "--metrics-bind-address",
        ),
    ] {
        let o = common::cli(&args);
        let t = common::text(&o);
        assert!(!o.status.success(), "{args:?} succeeded:\n{t}");
        assert!(t.contains(needle), "{args:?}: expected {needle:?} in:\n{t}");
        assert!(!t.contains("panicked"), "{args:?} panicked:\n{t}");
    }
}

/// `dlq-operator crdgen | head -1`: a reader that went away is not an error. The command
/// does its work, drops the rest of its output and exits 0, with nothing on stderr. Before
/// the fix, `print!` panicked on the broken pipe (exit 101, a backtrace on stderr). The
/// pipe's read end is closed before the command starts, so its first write fails, every
/// time.
#[test]
fn a_closed_stdout_pipe_is_not_an_error_and_no_panic() {
    use std::process::{Command, Stdio};
    let run = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run dlq-operator");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!stderr.contains("panicked"), "{args:?}: panic:\n{stderr}");
        assert!(stderr.is_empty(), "{args:?}: stderr:\n{stderr}");
        assert!(out.status.success(), "{args:?}: {:?}", out.status);
    };
    run(&["crdgen"]);
    run(&["rbac", "--format", "yaml"]);
    run(&["simulate", "backoff", "--clients", "100", "--attempts", "3"]);
}

/// An error with standard error closed (`2>&-` or a reader gone) still exits 1, not 101:
/// `eprintln!` panicked there.
#[test]
fn a_closed_stderr_pipe_keeps_the_exit_code_of_an_error() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["dlq", "replay", "default/orders", "--rate", "0"])
        .stderr(writer)
        .output()
        .expect("run dlq-operator");
    assert_eq!(out.status.code(), Some(1), "{:?}", out.status);
}

/// `dlq … --standalone` without `--name` asks for `--name` only: NAMESPACE/NAME is not
/// the way in standalone mode, so the usage error does not ask for it too.
#[test]
fn standalone_without_name_asks_for_name_only() {
    for command in ["inspect", "replay", "purge"] {
        let o = cli(&["dlq", command, "--standalone", "-f", "examples"]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{command}: {t}");
        let missing = t
            .split("Usage:")
            .next()
            .expect("the part before the usage line");
        assert!(missing.contains("--name <NAME>"), "{command}: {t}");
        assert!(!missing.contains("<REFERENCE>"), "{command}: {t}");
    }
}

/// A Secret whose AMQP URI points at something that is not an AMQP broker (here an HTTP
/// server answering 400, like a proxy or the management port would), while its management
/// URI is right: the error says the endpoint did not answer in AMQP 0-9-1 and names it,
/// instead of only the parser's `failed to parse: … Nom(MapOpt)`.
#[tokio::test]
async fn an_amqp_uri_that_answers_http_is_named_as_not_amqp() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 64];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let q = common::unique("t-not-amqp");
    let good = common::secret_yaml("s", "guest", "guest", common::MGMT);
    let bad = good.replace("127.0.0.1:5672", &format!("127.0.0.1:{port}"));
    let files = |secret: &str| {
        manifests(&[
            ("s.yaml", secret),
            ("p.yaml", &policy_yaml("p", GOOD_POLICY)),
            ("d.yaml", &dlq_yaml("d", &q, "p", "s", "")),
        ])
    };
    // The dead-letter queue exists (applied with the right Secret); only AMQP is wrong.
    let applied = files(&good);
    let o = cli(&["apply", "-f", &applied.path().display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let dir = files(&bad);
    let path = dir.path().display().to_string();
    for command in ["inspect", "replay"] {
        let o = cli(&["dlq", command, "--standalone", "-f", &path, "--name", "d"]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{command}: {t}");
        assert!(!t.contains("panicked"), "{command}: {t}");
        assert_names(
            &t,
            &[&format!("127.0.0.1:{port}"), "did not answer in AMQP 0-9-1"],
        );
        // Resuming is for a broker lost on the way, not one never reached.
        assert!(!t.contains("resuming"), "{command}: {t}");
    }
    // A repair that never reached the broker sent no copy, and does not say it may have.
    let o = cli(&[
        "dlq",
        "repair",
        "--standalone",
        "-f",
        &path,
        "--name",
        "d",
        "--id",
        "m-1",
        "--set-header",
        "fixed=yes",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "repair: {t}");
    assert_names(&t, &[&format!("127.0.0.1:{port}")]);
    assert!(!t.contains("may have reached"), "repair: {t}");
    // A server that reads the AMQP header and hangs up without a word (the management
    // port does that after 5 s): the hint too.
    let quiet = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let quiet_port = quiet.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in quiet.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 8];
            let _ = stream.read(&mut buf);
        }
    });
    let dir = files(&good.replace("127.0.0.1:5672", &format!("127.0.0.1:{quiet_port}")));
    let path = dir.path().display().to_string();
    let o = cli(&["dlq", "inspect", "--standalone", "-f", &path, "--name", "d"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(
        &t,
        &[
            &format!("127.0.0.1:{quiet_port}"),
            "is this RabbitMQ's AMQP port",
        ],
    );
    common::cleanup(&q).await;
}

/// Log lines that cannot be written (stderr a pipe whose reader is gone, `2>&1 | head`)
/// are dropped: tracing-subscriber used to report the failed write with `eprintln!`, which
/// panicked there (exit 101). Here `RUST_LOG=debug` logs the management API requests of an
/// inspect whose dead-letter queue does not exist: exit 1, the error's code.
#[test]
fn log_lines_to_a_closed_stderr_pipe_do_not_panic() {
    let q = common::unique("t-log-closed");
    let dir = manifests(&[
        (
            "s.yaml",
            &common::secret_yaml("s", "guest", "guest", common::MGMT),
        ),
        ("p.yaml", &policy_yaml("p", GOOD_POLICY)),
        ("d.yaml", &dlq_yaml("d", &q, "p", "s", "")),
    ]);
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["dlq", "inspect", "--standalone", "-f"])
        .arg(dir.path())
        .args(["--name", "d"])
        .env("RUST_LOG", "debug")
        .stderr(writer)
        .output()
        .expect("run dlq-operator");
    assert_eq!(out.status.code(), Some(1), "{:?}", out.status);
}

/// A signal while the broker does not answer (here a management API that accepts the
/// connection and never replies) ends `dlq inspect`, `replay` and `purge` at once with
/// "interrupted before any message was read" and exit 1. They used to wait for the
/// 10 s timeout and then report the broker unreachable (or an empty report, read as an
/// empty dead-letter queue).
#[test]
fn a_signal_while_the_broker_does_not_answer_ends_the_command_at_once() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let secret = common::secret_yaml("s", "guest", "guest", &format!("http://127.0.0.1:{port}"));
    let dir = manifests(&[
        ("s.yaml", &secret),
        ("p.yaml", &policy_yaml("p", GOOD_POLICY)),
        ("d.yaml", &dlq_yaml("d", "t-silent", "p", "s", "")),
    ]);
    let path = dir.path().display().to_string();
    let commands: [&[&str]; 3] = [
        &["inspect"],
        &["replay"],
        &["purge", "--older-than", "1d", "--yes"],
    ];
    for command in commands {
        let mut args = vec!["dlq"];
        args.extend_from_slice(command);
        args.extend_from_slice(&["--standalone", "-f", &path, "--name", "d"]);
        // Well before the 10 s connect timeout.
        let out = signal_while_it_waits(&args, "-TERM", &format!("{command:?}"));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {t}");
        assert_names(&t, &["interrupted before any message was read"]);
    }
}

/// A manifest whose read blocks (a FIFO nobody writes, like a file on a hung network
/// mount): a signal still ends the command, with exit 1 and "interrupted before any
/// message was read". The blocking read used to keep it from ever stopping (only SIGKILL
/// did).
#[cfg(unix)]
#[test]
fn a_signal_ends_a_command_blocked_reading_its_manifests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("blocked.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let fifo = fifo.to_str().expect("a UTF-8 temp path");
    let args = ["dlq", "inspect", "--standalone", "-f", fifo, "--name", "d"];
    let out = signal_while_it_waits(&args, "-INT", "blocked on the FIFO");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert_names(&t, &["interrupted before any message was read"]);
}

/// SIGHUP (the terminal of the command closed) stops a `dlq` command like SIGINT and
/// SIGTERM do: it ends cleanly with "interrupted before any message was read" and exit 1,
/// for each of the three commands, instead of being killed by the signal's default action
/// (no exit code, a held message returned by the broker as one more delivery).
#[cfg(unix)]
#[test]
fn a_hangup_stops_each_dlq_command_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("blocked.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let fifo = fifo.to_str().expect("a UTF-8 temp path");
    let commands: [&[&str]; 3] = [
        &["inspect"],
        &["replay"],
        &["purge", "--older-than", "1d", "--yes"],
    ];
    for command in commands {
        let mut args = vec!["dlq"];
        args.extend_from_slice(command);
        args.extend_from_slice(&["--standalone", "-f", fifo, "--name", "d"]);
        let out = signal_while_it_waits(&args, "-HUP", &format!("{command:?} on the FIFO"));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {t}");
        assert_names(&t, &["interrupted before any message was read"]);
    }
}

/// A multiplier far beyond its range (`1e308`) is named as too large, in a number a
/// person reads (not 309 digits), with the valid range; NaN and small ones likewise.
#[test]
fn an_out_of_range_multiplier_is_readable_and_states_the_range() {
    for (value, shown, why) in [
        ("1e308", "1e308", "is too large"),
        (".nan", ".nan", "is not a number"),
        ("0.5", "0.5", "is too small"),
    ] {
        let policy = policy_yaml(
            "p",
            &format!("  maxRetries: 2\n  backoff:\n    multiplier: {value}\n"),
        );
        let dir = manifests(&[("p.yaml", &policy)]);
        let (ok, t) = apply_dir(&dir);
        assert!(!ok, "{value}: {t}");
        assert_names(
            &t,
            &[
                "p.yaml (document 1)",
                "RetryPolicy default/p",
                "spec.backoff.multiplier",
                &format!("{shown} {why}"),
                "the valid range is 1 to 1000",
            ],
        );
        assert!(!t.contains("0000000000"), "{value}: digits printed:\n{t}");
    }
}

/// A duration whose number has too many digits is well-formed but too large: the error
/// says so and gives the limits, instead of calling the syntax wrong.
#[test]
fn an_overflowing_duration_is_too_large_not_a_syntax_error() {
    let policy = policy_yaml(
        "p",
        "  backoff:\n    initialDelay: 99999999999999999999999ms\n",
    );
    let dir = manifests(&[("p.yaml", &policy)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "p.yaml (document 1)",
            "RetryPolicy default/p",
            "spec.backoff.initialDelay",
            "is too large",
            "a number of ms has at most 11 digits (99999999999ms)",
            "365d",
        ],
    );
    assert!(!t.contains("expected one or more"), "{t}");
}

/// An integer beyond 64 bits is named as too large (or too small) on its document,
/// resource and field, with the limit, instead of serde's "as u128, expected any YAML
/// value" and no document; in a Secret its digits are not printed.
#[test]
fn an_integer_beyond_64_bits_is_named_with_its_document_and_limit() {
    let secret = secret_yaml("s", "guest", "guest", MGMT);
    let policy = policy_yaml("p", GOOD_POLICY);
    let dlq = dlq_yaml(
        "d",
        "huge-q",
        "p",
        "s",
        "  deadLetter:\n    maxLength: 99999999999999999999999\n",
    );
    let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "all.yaml (document 3)",
            "DeadLetterQueue default/d",
            "spec.deadLetter.maxLength",
            "integer 99999999999999999999999 is too large",
            "18446744073709551615",
        ],
    );
    assert!(!t.contains("u128"), "{t}");

    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  uri: amqp://127.0.0.1\n  password: -98765432109876543210987\n";
    let dir = manifests(&[("s.yaml", secret)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "s.yaml (document 1)",
            "Secret default/s",
            "stringData.password",
            "is too small",
            "not shown",
        ],
    );
    assert!(!t.contains("98765432109876543210987"), "leaked:\n{t}");
}

/// A password written raw into a Secret's `uri` with `@ : / %` in it: the error says to
/// percent-encode it or use the Secret's `username`/`password` keys, and never shows it.
/// With only `/` in it the URI parsed, as a wrong host and port: that is refused too.
#[test]
fn a_raw_password_in_the_uri_gets_the_way_out_and_is_not_shown() {
    let policy = policy_yaml("p", GOOD_POLICY);
    for password in ["p@ss:w/o%rd", "12/34"] {
        let secret = secret_yaml("s", "guest", password, MGMT);
        let dlq = dlq_yaml("d", "raw-pw-q", "p", "s", "");
        let dir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
        let o = cli(&["render", "-f", &dir.path().display().to_string()]);
        let t = text(&o);
        assert!(!o.status.success(), "{password}: {t}");
        assert_names(
            &t,
            &[
                "all.yaml (document 1)",
                "Secret default/s",
                "data.uri",
                "percent-encoded",
                "%40",
                "`username` and `password` keys",
            ],
        );
        assert!(!t.contains(password), "{password} leaked:\n{t}");
    }
}

/// Flow collections nested 50,000 deep (`{a: ` repeated, 200 KB) are refused before the
/// YAML parser sees them, with the file, the document, the place and what to look for.
/// The parser would spend seconds of CPU on them (time quadratic in the depth) and then
/// say only "recursion limit exceeded".
#[test]
fn deeply_nested_flow_collections_are_refused_before_parsing() {
    let deep = format!(
        "{}---\n{}",
        policy_yaml("p", GOOD_POLICY),
        "{a: ".repeat(50_000)
    );
    let dir = manifests(&[("deep.yaml", &deep)]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert_names(
        &t,
        &[
            "deep.yaml (document 2)",
            "nested more than 128 levels deep",
            "line 13 column 1021",
            "brackets that are never closed",
        ],
    );
    assert!(!t.contains("recursion limit"), "{t}");
}

/// A `*.yaml` entry of a directory that is a FIFO (reading it would block without end)
/// or a symbolic link that cannot be followed (a loop, a missing target) is an error
/// naming it and saying what to do; both used to be skipped without a word.
#[cfg(unix)]
#[test]
fn a_fifo_or_a_broken_link_in_a_directory_is_named_not_skipped() {
    let dir = manifests(&[
        ("p.yaml", &policy_yaml("p", GOOD_POLICY)),
        ("s.yaml", &secret_yaml("s", "guest", "guest", MGMT)),
        ("d.yaml", &dlq_yaml("d", "dir-entries-q", "p", "s", "")),
    ]);
    let fifo = dir.path().join("x.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let o = cli(&["render", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(
        &t,
        &["x.yaml", "not a regular file but a FIFO", "move it out"],
    );
    std::fs::remove_file(&fifo).expect("remove FIFO");

    let looped = dir.path().join("loop.yaml");
    std::os::unix::fs::symlink(&looped, &looped).expect("symlink");
    let o = cli(&["render", "-f", &dir.path().display().to_string()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(
        &t,
        &[
            "loop.yaml",
            "symbolic link that cannot be followed",
            "fix the link or remove it",
        ],
    );
}

/// `-f FIFO` with no writer yet: after a second a warning on stderr says what the
/// command waits for; once something writes the manifests the command goes on.
#[cfg(unix)]
#[test]
fn a_blocked_fifo_read_is_announced_and_then_read() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("blocked.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .args(["render", "-f"])
        .arg(&fifo)
        .args(["-f", "examples/"])
        .current_dir(root())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    // A failure guard, not a speed target: the notice comes after about a second.
    let notice = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("no notice while the FIFO read blocks");
        });
    assert!(notice.contains("waiting for"), "{notice}");
    assert!(notice.contains("blocked.yaml"), "{notice}");
    assert!(notice.contains("a FIFO"), "{notice}");
    let policy = std::fs::read_to_string(root().join("examples/order-events.yaml"))
        .expect("example")
        .replace("order-events", "fifo-events");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .and_then(|mut w| w.write_all(policy.as_bytes()))
        .expect("write the FIFO");
    let o = child.wait_with_output().expect("wait");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("deadLetterQueue: default/fifo-events"),
        "{out}"
    );
}

/// `-f -` reads the manifests from standard input (as kubectl does), named "standard
/// input" in messages; `run --standalone -f -` refuses it, since it re-reads its files
/// every interval.
#[test]
fn dash_reads_standard_input_and_run_standalone_refuses_it() {
    use std::io::Write;
    let run = |args: &[&str], input: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_string();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        let o = child.wait_with_output().expect("wait");
        writer.join().expect("writer");
        o
    };
    let policy =
        std::fs::read_to_string(root().join("examples/order-events.yaml")).expect("example");
    let secret =
        std::fs::read_to_string(root().join("examples/rabbitmq-secret.yaml")).expect("example");
    let o = run(&["render", "-f", "-"], &format!("{policy}\n---\n{secret}"));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("order-events.retry.5s"), "{t}");

    let o = run(&["render", "-f", "-"], &policy);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(
        &t,
        &[
            "standard input (document 2)",
            "Secret default/rabbitmq-local",
        ],
    );

    let o = run(&["run", "--standalone", "-f", "-"], &policy);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(&t, &["standard input can be read only once", "-f FILE"]);

    // Nothing on standard input: named as such, not as "-".
    let o = run(&["render", "-f", "-"], "");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert_names(&t, &["error: standard input: no DeadLetterQueue"]);

    // The example files one after another (`cat examples/*.yaml`): each starts with its
    // own `---`, so they stay separate documents.
    let mut all = String::new();
    for f in [
        "order-events.yaml",
        "payment-callback.yaml",
        "rabbitmq-secret.yaml",
    ] {
        all.push_str(&std::fs::read_to_string(root().join("examples").join(f)).expect("example"));
    }
    let o = run(&["render", "-f", "-"], &all);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("payment-callback.retry.1s"), "{t}");
}

/// Negative numbers for the counts and ages of `dlq inspect/replay/purge` get one clear
/// error naming the flag and what it takes; clap used to suggest `-- -1`, which then
/// failed too. An address with a host name gets the IP:port form it takes. Counts and
/// addresses are the argument parser's (exit 2); an age is checked by the command, as
/// any other bad `--older-than` (exit 1).
#[test]
fn negative_counts_and_ages_and_host_name_addresses_get_one_clear_error() {
    let dlq = |args: &[&'static str]| {
        let mut all = vec!["dlq"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--standalone", "-f", "examples/", "--name", "order-events"]);
        all
    };
    for (args, needle, code) in [
        (
            dlq(&["replay", "--limit", "-1"]),
            "'--limit <LIMIT>': must be a whole number >= 1",
            2,
        ),
        (
            dlq(&["replay", "--max-in-flight", "-1"]),
            "'--max-in-flight <N>': must be a whole number from 1 to 1000",
            2,
        ),
        (
            dlq(&["inspect", "--sample", "-1"]),
            "'--sample <SAMPLE>': must be a whole number >= 0",
            2,
        ),
        (
            dlq(&["inspect", "--max-messages", "-5"]),
            "must be a whole number >= 1",
            2,
        ),
        (
            dlq(&["purge", "--older-than", "-1s"]),
            "--older-than \"-1s\": must be a positive duration",
            1,
        ),
        (
            dlq(&["purge", "--older-than", "-1"]),
            "--older-than \"-1\": must be a positive duration",
            1,
        ),
        (
            vec![
                "run",
                "--standalone",
                "-f",
                "examples/",
                "--metrics-bind-address",
                "localhost:18393",
            ],
            "takes IP:port, e.g. 127.0.0.1:18393",
            2,
        ),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args(&args)
            .current_dir(root())
            .output()
            .expect("run");
        let t = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: expected {needle:?} in:\n{t}");
        assert!(!t.contains("-- -1"), "{args:?}: {t}");
    }
}

/// A file name holding an escape sequence reaches the terminal escaped in an error.
#[test]
fn control_characters_in_an_error_are_escaped() {
    let dir = manifests(&[("bad\u{1b}[31m.yaml", "a: [unclosed\n")]);
    let (ok, t) = apply_dir(&dir);
    assert!(!ok, "{t}");
    assert!(!t.contains('\u{1b}'), "raw escape in:\n{t}");
    assert_names(&t, &["bad\\u{1b}[31m.yaml", "invalid YAML"]);
}

/// A DeadLetterQueue's `namespace/name` is its identity on the broker (its ownership
/// records): names the API server would refuse are refused here too, or `a/b` + `c` and
/// `a` + `b/c` would be one owner and take over each other's queues.
#[test]
fn names_the_api_server_refuses_are_refused() {
    for (meta, field) in [
        ("  name: b/c\n  namespace: a\n", "metadata.name"),
        ("  name: c\n  namespace: a/b\n", "metadata.namespace"),
        ("  name: \"\"\n  namespace: default\n", "metadata.name"),
        ("  name: Orders\n  namespace: default\n", "metadata.name"),
        (
            "  name: \"x\\e]0;t\\a\"\n  namespace: default\n",
            "metadata.name",
        ),
        ("  name: ok\n  namespace: team.a\n", "metadata.namespace"),
    ] {
        let doc = format!(
            "apiVersion: dlqoperator.io/v1alpha1\nkind: RetryPolicy\nmetadata:\n{meta}spec:\n{GOOD_POLICY}"
        );
        let dir = manifests(&[("p.yaml", &doc)]);
        let (ok, t) = apply_dir(&dir);
        assert!(!ok, "{t}");
        assert_names(&t, &["p.yaml (document 1)", field, "RFC 1123"]);
        assert!(!t.contains('\u{1b}'), "raw escape in {t:?}");
    }
}
