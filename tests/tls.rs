//! TLS end to end: `amqps://` and `https://` with a private CA and a client certificate,
//! against the real RabbitMQ behind `socat` TLS listeners that require a client
//! certificate signed by the test CA (socat and openssl are Debian packages installed by
//! .ci/run). The whole apply → depth poll → AMQP path runs over TLS.

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlq_operator::broker::{BrokerConnection, BrokerError};
use dlq_operator::rabbitmq::{amqp, RabbitMq};
use dlq_operator::standalone::load_and_plan;

use common::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CA, server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn make_pki(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=dlq-tls-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    for (name, cn, eku, san) in [
        (
            "srv",
            "localhost",
            "serverAuth",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        ),
        ("client", "dlq-operator", "clientAuth", ""),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        std::fs::write(
            dir.join(format!("{name}.cnf")),
            format!("{san}basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={eku}\n"),
        )
        .expect("ext");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "1",
                "-extfile",
                &format!("{name}.cnf"),
            ],
        );
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

struct Socat(Child);

impl Drop for Socat {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TLS listener on `port` forwarding to `target` on loopback, requiring a client
/// certificate signed by the test CA.
fn tls_proxy(dir: &Path, port: u16, target: u16) -> Socat {
    let listen = format!(
        "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert=srv.crt,key=srv.key,cafile=ca.crt,verify=1"
    );
    let child = Command::new("socat")
        .args([&listen, &format!("TCP:127.0.0.1:{target}")])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("socat installed (.ci/run installs it)");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "socat did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Socat(child)
}

fn secret_data(
    dir: &Path,
    amqps: u16,
    https: u16,
    with_ca: bool,
    with_client: bool,
) -> BTreeMap<String, Vec<u8>> {
    let read = |f: &str| std::fs::read(dir.join(f)).expect("pem");
    let mut data = BTreeMap::new();
    data.insert(
        "uri".into(),
        format!("amqps://guest:guest@127.0.0.1:{amqps}/%2f").into_bytes(),
    );
    data.insert(
        "managementUri".into(),
        format!("https://127.0.0.1:{https}").into_bytes(),
    );
    if with_ca {
        data.insert("ca.crt".into(), read("ca.crt"));
    }
    if with_client {
        data.insert("tls.crt".into(), read("client.crt"));
        data.insert("tls.key".into(), read("client.key"));
    }
    data
}

#[tokio::test]
async fn amqps_and_https_with_private_ca_and_client_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    make_pki(d);
    let (amqps, https) = (free_port(), free_port());
    let _amqp_proxy = tls_proxy(d, amqps, 5672);
    let _mgmt_proxy = tls_proxy(d, https, 15672);

    // A full apply over HTTPS, planned from manifests whose Secret carries the PEMs.
    let q = unique("tlsq");
    let pem = |f: &str| {
        std::fs::read_to_string(d.join(f))
            .expect("pem")
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls\n  namespace: default\nstringData:\n  uri: amqps://guest:guest@127.0.0.1:{amqps}/%2f\n  managementUri: https://127.0.0.1:{https}\n  ca.crt: |\n{}  tls.crt: |\n{}  tls.key: |\n{}",
        pem("ca.crt"),
        pem("client.crt"),
        pem("client.key")
    );
    let policy = policy_yaml("p", "  maxRetries: 1\n  tiers: [1s]\n");
    let dlq = dlq_yaml("d", &q, "p", "tls", "");
    let mdir = manifests(&[("all.yaml", &format!("{secret}---\n{policy}---\n{dlq}"))]);
    let (_, planned) = load_and_plan(&[mdir.path().to_path_buf()]).expect("plan");
    let prepared = &planned[0].prepared;
    assert!(prepared
        .connection
        .redacted_management_uri()
        .starts_with("https://"));
    let broker = RabbitMq::new(&prepared.connection).expect("https client");
    let report = broker
        .apply(&prepared.topology)
        .await
        .expect("apply over https");
    assert!(report.is_ready(), "{report}");
    let depths = broker.queue_depths("/").await.expect("depths over https");
    assert!(depths.contains_key(&q), "source queue listed over https");

    // AMQP over TLS with the client certificate: the queue created above is there.
    let conn = amqp::connect(&prepared.connection)
        .await
        .expect("amqps connect");
    let ch = conn.create_channel().await.expect("channel");
    let declared = ch
        .queue_declare(
            q.as_str().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await;
    assert!(declared.is_ok(), "passive declare over amqps: {declared:?}");
    let _ = conn.close(200, "bye".into()).await;

    // Without the CA the server certificate is not trusted: a TLS error, no password.
    let no_ca =
        BrokerConnection::from_secret_data("tls", &secret_data(d, amqps, https, false, true))
            .expect("secret");
    let err = RabbitMq::new(&no_ca)
        .expect("client")
        .queue_depths("/")
        .await
        .expect_err("untrusted server certificate");
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, BrokerError::Tls { .. }), "{shown}");
    assert!(!shown.contains(":guest@"), "{shown}");
    let err = amqp::connect(&no_ca)
        .await
        .expect_err("untrusted over amqps");
    assert!(
        matches!(
            err,
            BrokerError::Tls { .. } | BrokerError::Unreachable { .. }
        ),
        "{err}"
    );

    // Without a client certificate the listener refuses the handshake.
    let no_client =
        BrokerConnection::from_secret_data("tls", &secret_data(d, amqps, https, true, false))
            .expect("secret");
    let err = amqp::connect(&no_client)
        .await
        .expect_err("client certificate required");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(":guest@"), "{shown}");
    let err = RabbitMq::new(&no_client)
        .expect("client")
        .queue_depths("/")
        .await
        .expect_err("client certificate required over https");
    assert!(
        matches!(
            err,
            BrokerError::Tls { .. } | BrokerError::Unreachable { .. }
        ),
        "{err}"
    );

    cleanup(&q).await;
}
