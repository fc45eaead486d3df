//! What a Redis DeadLetterQueue needs on the server before its router runs
//! (docs/REDIS.md, "Apply"): its keys of the right types, its ownership record, and the
//! consumer group. Idempotent: a second apply writes nothing. Never deletes a key and
//! never writes to a key of another owner or of another type.

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::stream::StreamSource;

/// The operator's mark in an ownership record (field `operator`).
pub const OPERATOR: &str = "dlq-operator";

/// What one apply did to one thing on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Written by this apply.
    Created(String),
    /// Already as wanted: nothing written.
    InPlace(String),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Created(what) => write!(f, "created: {what}"),
            Action::InPlace(what) => write!(f, "in place: {what}"),
        }
    }
}

/// Why an apply was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A key the DeadLetterQueue uses holds another type (`TYPE`): nothing was written.
    #[error("key {key:?} ({field}) is a {found}, not a {expected}: it is not this DeadLetterQueue's to change; name another stream or remove that key yourself")]
    WrongType {
        /// The key.
        key: String,
        /// The field that names it.
        field: &'static str,
        /// Its type on the server.
        found: String,
        /// The type the operator needs.
        expected: &'static str,
    },
    /// Another DeadLetterQueue's ownership record is on these keys: nothing was written.
    #[error("stream {stream:?} belongs to DeadLetterQueue {owner} (ownership record {record:?}); each stream belongs to one DeadLetterQueue: give this one another stream, or delete the other DeadLetterQueue first")]
    Owned {
        /// The stream.
        stream: String,
        /// The owner the record names.
        owner: String,
        /// The record's key.
        record: String,
    },
    /// A key this DeadLetterQueue would write exists and is not its own (no ownership
    /// record of this DeadLetterQueue covers it): nothing was written.
    #[error("key {key:?} ({field}) exists and is not this DeadLetterQueue's (no ownership record of it covers that key): it may be another application's; name another key, or remove it yourself if it is yours")]
    NotOurs {
        /// The key.
        key: String,
        /// The field that names it.
        field: &'static str,
    },
    /// The server refused or could not be reached.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

/// Applies the DeadLetterQueue `owner` (`namespace/name`) with `source` on `conn`: checks
/// the type of every key it uses, that no key it would write exists without its record
/// (another application's retry set or dead-letter stream, whose entries the router would
/// move or trim), and that the record is its own — all before any write; then records its
/// ownership (`<prefix>:dlq:owner`: `owner`, `operator`, `deadLetters`: the dead-letter
/// key it covers) and creates the consumer group unless it exists — from the stream's
/// first entry (`0`), so that entries already in the stream are delivered to the group,
/// never skipped; with `MKSTREAM` when the stream does not exist yet.
///
/// # Errors
/// [`ApplyError::WrongType`], [`ApplyError::Owned`], [`ApplyError::NotOurs`] (nothing
/// written), or the server's.
pub async fn apply<C: ConnectionLike + Send>(
    conn: &mut C,
    owner: &str,
    source: &StreamSource,
) -> Result<Vec<Action>, ApplyError> {
    let keys = &source.keys;
    check_types(conn, source).await?;
    let record = keys.owner();
    let fields: std::collections::HashMap<String, Vec<u8>> =
        redis::cmd("HGETALL").arg(&record).query_async(conn).await?;
    let recorded = check_record(&record, &fields, owner, keys.source())?;
    check_not_foreign(conn, source, recorded).await?;
    let mut actions = Vec::new();
    let dead = keys.dead_letters();
    if recorded.is_some_and(|r| r == dead) {
        actions.push(Action::InPlace(format!("ownership record {record}")));
    } else {
        // HSETNX: of two applies racing for the stream, one writes the owner; the other
        // finds it taken and writes nothing more.
        let written: bool = redis::cmd("HSETNX")
            .arg(&record)
            .arg("owner")
            .arg(owner)
            .query_async(conn)
            .await?;
        if !written {
            let now: Option<String> = redis::cmd("HGET")
                .arg(&record)
                .arg("owner")
                .query_async(conn)
                .await?;
            if now.as_deref() != Some(owner) {
                return Err(ApplyError::Owned {
                    stream: keys.source().to_string(),
                    owner: now.unwrap_or_default(),
                    record,
                });
            }
        }
        let _: () = redis::cmd("HSET")
            .arg(&record)
            .arg("operator")
            .arg(OPERATOR)
            .arg("deadLetters")
            .arg(dead)
            .query_async(conn)
            .await?;
        actions.push(Action::Created(format!("ownership record {record}")));
    }
    actions.push(ensure_group(conn, source).await?);
    Ok(actions)
}

/// The dead-letter key the ownership record `fields` (of key `record`) covers, `None`
/// when there is no record; an error when it is another owner's or not an operator's.
fn check_record<'a>(
    record: &str,
    fields: &'a std::collections::HashMap<String, Vec<u8>>,
    owner: &str,
    stream: &str,
) -> Result<Option<&'a str>, ApplyError> {
    if fields.is_empty() {
        return Ok(None);
    }
    let text = |name: &str| {
        fields
            .get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    match (text("owner"), text("operator")) {
        (Some(o), Some(op)) if o == owner && op == OPERATOR => Ok(Some(
            fields
                .get("deadLetters")
                .and_then(|v| std::str::from_utf8(v).ok())
                .unwrap_or(""),
        )),
        (Some(o), Some(op)) if op == OPERATOR => Err(ApplyError::Owned {
            stream: stream.to_string(),
            owner: o,
            record: record.to_string(),
        }),
        _ => Err(ApplyError::NotOurs {
            key: record.to_string(),
            field: "spec.source.stream",
        }),
    }
}

/// Refuses the operator's keys that exist without being covered by this DeadLetterQueue's
/// record (`recorded`: the dead-letter key the record covers, `None` without a record):
/// the retry set and entries before the first apply, the dead-letter key unless the
/// record names it.
async fn check_not_foreign<C: ConnectionLike + Send>(
    conn: &mut C,
    source: &StreamSource,
    recorded: Option<&str>,
) -> Result<(), ApplyError> {
    let keys = &source.keys;
    let mut ours_if_recorded = vec![
        (keys.retry_set(), "spec.source.stream"),
        (keys.retry_entries(), "spec.source.stream"),
    ];
    if recorded.is_some() {
        ours_if_recorded.clear();
    }
    if recorded != Some(keys.dead_letters()) {
        ours_if_recorded.push((keys.dead_letters().to_string(), dead_letters_field(source)));
    }
    for (key, field) in ours_if_recorded {
        let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(conn).await?;
        if exists {
            return Err(ApplyError::NotOurs { key, field });
        }
    }
    Ok(())
}

/// The field that names the dead-letter key: `spec.deadLetter.queue` when set, else the
/// stream it is derived from.
fn dead_letters_field(source: &StreamSource) -> &'static str {
    if source.keys.dead_letters_named() {
        "spec.deadLetter.queue"
    } else {
        "spec.source.stream"
    }
}

/// The keys of `source` with the type each must have (or be absent), and the field that
/// names each.
fn typed_keys(source: &StreamSource) -> [(String, &'static str, &'static str); 5] {
    let keys = &source.keys;
    [
        (keys.source().to_string(), "stream", "spec.source.stream"),
        (
            keys.dead_letters().to_string(),
            "stream",
            "spec.deadLetter.queue",
        ),
        (keys.retry_set(), "zset", "spec.source.stream"),
        (keys.retry_entries(), "hash", "spec.source.stream"),
        (keys.owner(), "hash", "spec.source.stream"),
    ]
}

/// Refuses a key of the wrong type before anything is written.
async fn check_types<C: ConnectionLike + Send>(
    conn: &mut C,
    source: &StreamSource,
) -> Result<(), ApplyError> {
    for (key, expected, field) in typed_keys(source) {
        let found: String = redis::cmd("TYPE").arg(&key).query_async(conn).await?;
        if found != "none" && found != expected {
            return Err(ApplyError::WrongType {
                key,
                field,
                found,
                expected,
            });
        }
    }
    Ok(())
}

/// Creates the consumer group unless the stream has it (`XINFO GROUPS`).
async fn ensure_group<C: ConnectionLike + Send>(
    conn: &mut C,
    source: &StreamSource,
) -> Result<Action, ApplyError> {
    let stream = source.keys.source();
    let what = format!("consumer group {:?} of stream {stream:?}", source.group);
    let exists: bool = redis::cmd("EXISTS").arg(stream).query_async(conn).await?;
    if exists {
        let groups: Vec<redis::Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(stream)
            .query_async(conn)
            .await?;
        if groups
            .iter()
            .any(|g| group_name(g).as_deref() == Some(source.group.as_str()))
        {
            return Ok(Action::InPlace(what));
        }
    }
    let created: Result<(), RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(&source.group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match created {
        Ok(()) => Ok(Action::Created(format!("{what}, from the first entry"))),
        // Created in between by a consumer: there it is.
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(Action::InPlace(what)),
        Err(e) => Err(e.into()),
    }
}

/// The `name` of one `XINFO GROUPS` entry (a map in RESP3, a flat array in RESP2).
fn group_name(group: &redis::Value) -> Option<String> {
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match group {
        redis::Value::Array(flat) => flat
            .chunks(2)
            .find(|p| text(&p[0]).as_deref() == Some("name"))
            .and_then(|p| p.get(1).and_then(text)),
        redis::Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some("name"))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }
}
