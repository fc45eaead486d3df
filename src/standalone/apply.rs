//! `dlq-operator apply -f`: every planned DeadLetterQueue applied once, a few at a time,
//! through the same [`crate::reconcile`] core as the controller, with one broker client
//! per connection (its AMQP check and broker version are then read once per broker and
//! vhost, not once per resource), and a report in the manifests' order.

use std::io::Write;
use std::sync::Arc;

use futures::StreamExt;

use super::{Planned, Summary};
use crate::broker::{
    ApplyReport, BrokerClient, BrokerConnection, BrokerError, BrokerFactory, Outcome,
};
use crate::lock::Locked;
use crate::reconcile;
use crate::resolve::manifests::RedisPlanned;
use crate::status::conditions;

/// Resources applied at once by [`apply_all`]: the controller's default `--concurrency`.
pub const APPLY_CONCURRENCY: usize = 4;

/// How many objects one apply created, updated, deleted, found in place, left draining
/// or retained.
#[derive(Debug, Default)]
struct Counts {
    created: usize,
    updated: usize,
    deleted: usize,
    in_place: usize,
    draining: usize,
    retained: usize,
    retired: usize,
}

impl Counts {
    fn of(report: &ApplyReport) -> Self {
        let mut c = Counts::default();
        // Ownership records are not broker objects: their line says what was written.
        for a in report
            .actions
            .iter()
            .filter(|a| a.kind != crate::broker::ObjectKind::Ownership)
        {
            match a.outcome {
                Outcome::Created => c.created += 1,
                Outcome::Updated => c.updated += 1,
                Outcome::Deleted => c.deleted += 1,
                Outcome::InPlace => c.in_place += 1,
                Outcome::Draining(_) => c.draining += 1,
                Outcome::Retained(_) => c.retained += 1,
                Outcome::Retired(_) => c.retired += 1,
                _ => {}
            }
        }
        c
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} created, {} updated, {} deleted, {} in place",
            self.created, self.updated, self.deleted, self.in_place
        )?;
        if self.draining > 0 {
            write!(f, ", {} draining", self.draining)?;
        }
        if self.retained > 0 {
            write!(f, ", {} retained", self.retained)?;
        }
        if self.retired > 0 {
            write!(f, ", {} retired", self.retired)?;
        }
        Ok(())
    }
}

/// One client per distinct connection (endpoints, credentials, certificates) among the
/// resources of one [`apply_all`].
#[derive(Default)]
struct Clients(std::sync::Mutex<Vec<(BrokerConnection, Arc<dyn BrokerClient>)>>);

impl Clients {
    /// The client for `conn`, made by `brokers` on first use.
    fn get(
        &self,
        brokers: &dyn BrokerFactory,
        conn: &BrokerConnection,
    ) -> Result<Arc<dyn BrokerClient>, BrokerError> {
        let mut clients = self.0.locked();
        if let Some((_, c)) = clients.iter().find(|(k, _)| k == conn) {
            return Ok(c.clone());
        }
        let client = brokers.client(conn)?;
        clients.push((conn.clone(), client.clone()));
        Ok(client)
    }
}

/// Applies every planned DeadLetterQueue once, [`APPLY_CONCURRENCY`] at a time, and
/// writes a human report to `out` in the order of `planned`: a header, one line per
/// broker object (created / updated / in place / conflict …) and a verdict per resource.
///
/// # Errors
/// Only I/O errors writing to `out`; broker problems are reported in the output and the
/// [`Summary`].
pub async fn apply_all(
    brokers: &dyn BrokerFactory,
    planned: &[Planned],
    out: &mut impl Write,
) -> std::io::Result<Summary> {
    let summary = apply_each(brokers, planned, out).await?;
    write_total(&summary, out)?;
    Ok(summary)
}

/// The closing line of a report: how many DeadLetterQueues are ready.
///
/// # Errors
/// I/O errors writing to `out`.
pub fn write_total(summary: &Summary, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{} DeadLetterQueue(s) ready, {} not ready",
        summary.ready, summary.not_ready
    )
}

/// [`apply_all`] without its closing line ([`write_total`]).
///
/// # Errors
/// As [`apply_all`].
pub async fn apply_each(
    brokers: &dyn BrokerFactory,
    planned: &[Planned],
    out: &mut impl Write,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    let clients = Clients::default();
    let mut results = futures::stream::iter(planned)
        .map(|p| {
            let clients = &clients;
            async move {
                let result = match clients.get(brokers, &p.prepared.connection) {
                    Ok(broker) => reconcile::apply(broker.as_ref(), &p.prepared).await,
                    Err(e) => Err(e.into()),
                };
                (p, result)
            }
        })
        .buffered(APPLY_CONCURRENCY);
    // Names and reasons come from files and from the broker: control characters are
    // escaped before they reach a terminal.
    let mut line = |text: String| writeln!(out, "{}", crate::printable::escape(&text));
    while let Some((p, result)) = results.next().await {
        let prep = &p.prepared;
        line(format!(
            "DeadLetterQueue {} from {} -> {} vhost {}",
            prep.key,
            p.source,
            prep.connection.redacted_management_uri(),
            prep.topology.vhost
        ))?;
        if let Ok(report) = &result {
            for a in &report.actions {
                line(format!("  {a}"))?;
            }
        }
        // The verdict is the resource's Ready condition, as the controller writes it.
        let [_, ready] = conditions::for_reconcile(&result);
        let counts = result.as_ref().ok().map(Counts::of);
        match (ready.status, counts) {
            (conditions::ConditionStatus::True, Some(counts)) => {
                summary.ready += 1;
                line(format!("  => ready ({counts})"))?;
            }
            (_, Some(counts)) => {
                summary.not_ready += 1;
                line(format!(
                    "  => NOT ready [{}]: {} ({counts})",
                    ready.reason, ready.message
                ))?;
            }
            (_, None) => {
                summary.not_ready += 1;
                line(format!("  => failed [{}]: {}", ready.reason, ready.message))?;
            }
        }
    }
    Ok(summary)
}

/// Applies every Redis DeadLetterQueue once, in order ([`crate::redis::topology::apply`]:
/// key types, ownership record, consumer group), one connection per Redis deployment,
/// and writes a line per action and a verdict per resource to `out`.
///
/// # Errors
/// Only I/O errors writing to `out`; Redis problems are reported in the output and the
/// [`Summary`].
pub async fn apply_redis_each(
    planned: &[RedisPlanned],
    out: &mut impl Write,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    let mut connections: Vec<(String, crate::redis::connection::Connection)> = Vec::new();
    for p in planned {
        let plan = &p.plan;
        let redacted = plan.connection.redacted();
        writeln!(
            out,
            "{}",
            crate::printable::escape(&format!(
                "DeadLetterQueue {} from {} -> {redacted} stream {}",
                plan.key,
                p.source,
                plan.source.keys.source()
            ))
        )?;
        let result = redis_apply(&mut connections, p).await;
        let verdict = match result {
            Ok(actions) => {
                for a in &actions {
                    writeln!(out, "  {}", crate::printable::escape(&a.to_string()))?;
                }
                summary.ready += 1;
                "  => ready (its retries run in `dlq-operator router --standalone -f`)".to_string()
            }
            Err((reason, message)) => {
                summary.not_ready += 1;
                format!("  => failed [{reason}]: {message}")
            }
        };
        writeln!(out, "{}", crate::printable::escape(&verdict))?;
    }
    Ok(summary)
}

/// Applies one Redis DeadLetterQueue over the connection of its deployment (opened once
/// and kept in `connections`); the failure as a condition reason and a message.
async fn redis_apply(
    connections: &mut Vec<(String, crate::redis::connection::Connection)>,
    p: &RedisPlanned,
) -> Result<Vec<crate::redis::topology::Action>, (&'static str, String)> {
    use crate::redis::topology::{apply, ApplyError};
    let uris = p.plan.connection.uris_with_credentials();
    let key = uris.join(",");
    let conn = match connections.iter_mut().find(|(k, _)| *k == key) {
        Some((_, c)) => c,
        None => {
            let c = crate::redis::connection::Connection::open(&uris)
                .await
                .map_err(|e| {
                    let reason = if e.kind() == redis::ErrorKind::AuthenticationFailed {
                        "BrokerAuthFailed"
                    } else {
                        "BrokerUnreachable"
                    };
                    (reason, redis_error(&p.plan.connection, &e))
                })?;
            connections.push((key, c));
            &mut connections.last_mut().expect("just pushed").1
        }
    };
    apply(conn, &p.plan.key, &p.plan.source)
        .await
        .map_err(|e| match e {
            ApplyError::WrongType { .. } => ("KeyTypeConflict", e.to_string()),
            ApplyError::Owned { .. } | ApplyError::NotOurs { .. } => {
                ("NameConflict", e.to_string())
            }
            ApplyError::Redis(r) => ("BrokerError", redis_error(&p.plan.connection, &r)),
        })
}

/// A Redis error for a person, with the deployment's address (without the password).
fn redis_error(conn: &crate::broker::RedisConnection, e: &redis::RedisError) -> String {
    format!("Redis at {}: {e}", conn.redacted())
}
