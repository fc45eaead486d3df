//! AMQP 0-9-1 connections with `lapin` (publish/consume, replay, passive declares, tests).
//!
//! TLS for `amqps://` uses the Secret's `ca.crt` as extra trusted chain and
//! `tls.crt`+`tls.key` (PEM, PKCS#8 key) as client identity (RabbitMQ docs, "TLS Support").

use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::{Connection, ConnectionProperties};

use crate::broker::{BrokerConnection, BrokerError};

/// Longest wait for an AMQP connection (TCP, TLS and AMQP handshake) and for a passive
/// declare, like the management client's 10 s: an endpoint that accepts TCP and never
/// answers must not hold a reconcile forever.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens an AMQP connection with the settings of `conn` (credentials from the Secret,
/// TLS for `amqps://`). With several addresses in the Secret's `uri`, they are tried in
/// order from the one that answered last, each within [`TIMEOUT`] ([`connect_vhost`]).
///
/// # Errors
/// [`BrokerError::AuthFailed`] when the broker refuses the credentials (`ACCESS_REFUSED`),
/// [`BrokerError::Unreachable`] for I/O failures (connection refused, reset, DNS),
/// [`BrokerError::Tls`] for certificate problems, [`BrokerError::Amqp`] otherwise.
/// Endpoints are redacted and reasons scrubbed of the password.
pub async fn connect(conn: &BrokerConnection) -> Result<Connection, BrokerError> {
    connect_to(conn, None).await
}

/// Like [`connect`] but to virtual host `vhost` instead of the URI's.
///
/// # Errors
/// As [`connect`].
pub async fn connect_vhost(
    conn: &BrokerConnection,
    vhost: &str,
) -> Result<Connection, BrokerError> {
    connect_to(conn, Some(vhost)).await
}

/// Tries the AMQP addresses of `conn` in order, from the one in use
/// ([`Addresses::try_order`](crate::broker::Addresses::try_order)), each within
/// [`TIMEOUT`], and keeps the first that connects as the one in use (a warning names the
/// address left and the one taken). A refused login stops at once: every node of a
/// cluster has the same users. When every address fails, one error names them all
/// ([`all_failed`](super::failures::all_failed)).
async fn connect_to(
    conn: &BrokerConnection,
    vhost: Option<&str>,
) -> Result<Connection, BrokerError> {
    let addresses = conn.amqp_addresses();
    let mut failures = Vec::new();
    for index in addresses.try_order() {
        let uri = conn.amqp_uri_with_credentials_at(index, vhost);
        match connect_uri(conn, index, uri).await {
            Ok(connection) => {
                if addresses.answered(index).is_some() {
                    tracing::warn!(
                        secret = conn.secret_name(),
                        address = %conn.redacted_amqp_uri_at(index),
                        position = %addresses.position(index).trim(),
                        failed = %failures.iter().map(|(i, e): &(usize, BrokerError)| format!("{}: {e}", conn.redacted_amqp_uri_at(*i))).collect::<Vec<_>>().join("; "),
                        "AMQP: connected to another address of the broker"
                    );
                }
                return Ok(connection);
            }
            Err(e @ BrokerError::AuthFailed { .. }) => return Err(e),
            Err(e) => failures.push((index, e)),
        }
    }
    Err(super::failures::all_failed(
        failures,
        |i| conn.redacted_amqp_uri_at(i),
        addresses.several(),
    ))
}

/// Opens and closes an AMQP connection to `vhost` with the settings of `conn`: proves that
/// the Secret's `uri` (host, port, TLS, credentials) and the vhost work for consumers,
/// `dlq inspect` and `dlq replay`, which the management API alone cannot tell.
///
/// # Errors
/// As [`connect`], with a reason that names the Secret key `uri`.
pub async fn check(conn: &BrokerConnection, vhost: &str) -> Result<(), BrokerError> {
    let hint = |reason: String| {
        format!("{reason} (the Secret's `uri` key: consumers, `dlq inspect` and `dlq replay` connect there)")
    };
    match connect_vhost(conn, vhost).await {
        Ok(c) => {
            let _ = c.close(200, "connection check".into()).await;
            Ok(())
        }
        Err(BrokerError::Unreachable { endpoint, reason }) => Err(BrokerError::Unreachable {
            endpoint,
            reason: hint(reason),
        }),
        Err(BrokerError::Amqp { reason }) => Err(BrokerError::Amqp {
            reason: hint(reason),
        }),
        Err(BrokerError::Tls { reason }) => Err(BrokerError::Tls {
            reason: hint(reason),
        }),
        Err(other) => Err(other),
    }
}

/// Ready messages and consumers of queue `name` in `vhost`, from an AMQP passive
/// `queue.declare` (immediate, unlike the management statistics); `None` when the queue
/// does not exist (RabbitMQ docs, "Queues": passive declare). The connection tries every
/// address as [`connect`] does, each within [`TIMEOUT`]; the declare then has [`TIMEOUT`]
/// of its own (one limit around both would end before a second address was tried).
///
/// # Errors
/// As [`connect`]; [`BrokerError::Unreachable`] when the declare gets no answer in time.
pub async fn passive_queue_counts(
    conn: &BrokerConnection,
    vhost: &str,
    name: &str,
) -> Result<Option<(u32, u32)>, BrokerError> {
    let connection = connect_vhost(conn, vhost).await?;
    match tokio::time::timeout(TIMEOUT, passive_declare(conn, &connection, name)).await {
        Ok(out) => {
            // Best effort, and bounded: the connection is dropped anyway.
            let _ = tokio::time::timeout(TIMEOUT, connection.close(200, "bye".into())).await;
            out
        }
        // No close: a broker that does not answer would not answer it either.
        Err(_) => Err(BrokerError::Unreachable {
            endpoint: conn.redacted_amqp_uri(),
            reason: format!(
                "no answer to a passive declare of queue {name:?} within {} s",
                TIMEOUT.as_secs()
            ),
        }),
    }
}

/// The passive `queue.declare` of [`passive_queue_counts`] on `connection` (made with
/// `conn`), on a channel of its own.
async fn passive_declare(
    conn: &BrokerConnection,
    connection: &Connection,
    name: &str,
) -> Result<Option<(u32, u32)>, BrokerError> {
    let result = async {
        let channel = connection.create_channel().await?;
        let declared = channel
            .queue_declare(
                name.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await?;
        // Close the channel before the connection (a channel dropped while the connection
        // closes makes lapin log a spurious error). On NOT_FOUND the broker closed it.
        let _ = channel.close(200, "bye".into()).await;
        Ok::<_, lapin::Error>(declared)
    }
    .await;
    match result {
        Ok(q) => Ok(Some((q.message_count(), q.consumer_count()))),
        Err(e) if e.to_string().contains("NOT_FOUND") || e.to_string().contains("404") => Ok(None),
        Err(e) => Err(map_error(conn, &e)),
    }
}

/// One connection to AMQP address `index` of `conn` (its URI with credentials: `uri`).
async fn connect_uri(
    conn: &BrokerConnection,
    index: usize,
    uri: String,
) -> Result<Connection, BrokerError> {
    let tls = OwnedTLSConfig {
        identity: conn
            .client_identity_pem()
            .map(|(cert, key)| OwnedIdentity::PKCS8 {
                pem: cert.to_vec(),
                key: key.to_vec(),
            }),
        cert_chain: conn
            .ca_pem()
            .map(|ca| String::from_utf8_lossy(ca).into_owned()),
    };
    let runtime = lapin::runtime::default_runtime().map_err(|e| BrokerError::Amqp {
        reason: format!("no async runtime: {e}"),
    })?;
    let props = ConnectionProperties::default()
        .with_connection_name(format!("dlq-operator/{}", env!("CARGO_PKG_VERSION")).into());
    match tokio::time::timeout(
        TIMEOUT,
        Connection::connect_with_config(&uri, props, tls, runtime),
    )
    .await
    {
        Ok(result) => result.map_err(|e| with_port_hint(map_error_at(conn, index, &e))),
        Err(_) => Err(with_port_hint(BrokerError::Unreachable {
            endpoint: conn.redacted_amqp_uri_at(index),
            reason: format!(
                "no AMQP connection within {} s (TCP connect, TLS and AMQP handshake)",
                TIMEOUT.as_secs()
            ),
        })),
    }
}

/// The hint for a connection that reached something but got no AMQP 0-9-1 handshake.
const PORT_HINT: &str = "is this RabbitMQ's AMQP port (5672, or 5671 with TLS)?";

/// A failed connect that reached a server which then said nothing, hung up or answered in
/// another protocol (an HTTP server, the management port, TLS to a plain port) gets
/// [`PORT_HINT`]: lapin's own reason ("connection aborted", "corrupt message", a
/// timeout) does not say so. A refused connection or an unknown host needs no hint.
fn with_port_hint(e: BrokerError) -> BrokerError {
    match e {
        BrokerError::Unreachable { endpoint, reason }
            if !["refused", "lookup", "resolve", "dns", "AMQP 0-9-1"]
                .iter()
                .any(|clear| {
                    reason
                        .to_ascii_lowercase()
                        .contains(&clear.to_ascii_lowercase())
                }) =>
        {
            BrokerError::Unreachable {
                endpoint,
                reason: format!("{reason}; {PORT_HINT}"),
            }
        }
        other => other,
    }
}

/// Maps a `lapin` error of a connection made with `conn` (to the address in use) to a
/// [`BrokerError`].
pub fn map_error(conn: &BrokerConnection, e: &lapin::Error) -> BrokerError {
    map_error_at(conn, conn.amqp_addresses().in_use_index(), e)
}

/// Like [`map_error`] for a connection to AMQP address `index` of `conn`.
fn map_error_at(conn: &BrokerConnection, index: usize, e: &lapin::Error) -> BrokerError {
    let reason = conn.scrub(&super::failures::error_chain(e));
    let lower = reason.to_ascii_lowercase();
    let endpoint = conn.redacted_amqp_uri_at(index);
    // ACCESS_REFUSED is also the broker's answer on a channel to a publish it does not
    // allow (an internal exchange, no write permission): only a refused login or vhost
    // access is an authentication failure; anything else keeps the broker's reason.
    let refused = lower.contains("access_refused") || lower.contains("access-refused");
    if lower.contains("authentication")
        || lower.contains("login was refused")
        || (refused
            && (lower.contains("login")
                || lower.contains("vhost")
                    && !lower.contains("exchange")
                    && !lower.contains("queue")))
    {
        BrokerError::AuthFailed {
            endpoint,
            user: conn.username().to_string(),
        }
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        BrokerError::Tls {
            reason: format!("{endpoint}: {reason}"),
        }
    } else if e.is_io_error() {
        BrokerError::Unreachable { endpoint, reason }
    } else if matches!(
        e.kind(),
        lapin::ErrorKind::ParsingError(_) | lapin::ErrorKind::InvalidProtocolVersion(_)
    ) {
        // Something answered that does not speak AMQP 0-9-1 (an HTTP server, a proxy, the
        // management port): the parser's message alone does not say so.
        BrokerError::Unreachable {
            endpoint,
            reason: format!("it did not answer in AMQP 0-9-1; {PORT_HINT} ({reason})"),
        }
    } else {
        BrokerError::Amqp { reason }
    }
}
