//! The stream layout (docs/REDIS.md, "Streams"): consumers read a stream with a consumer
//! group (`XREADGROUP`) and acknowledge what they processed (`XACK`). An entry still
//! pending in the group after the visibility timeout has failed once: the router moves
//! it, in one script each ([`super::scripts`]), to the retry set or to the dead-letter
//! stream, and puts due retries back on the stream as new entries.

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::fields::Stamped;
use super::scripts::{
    DEAD_LETTER_STREAM_ENTRY, MOVED, NOT_PENDING, RELEASE_DUE_TO_STREAM, RETRY_STREAM_ENTRY,
    TRIMMED,
};
use crate::redis_keys::Keys;

/// A stream source: its keys, its consumer group and when a pending entry has failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSource {
    /// The keys (source stream, retry set, dead-letter stream, …).
    pub keys: Keys,
    /// The consumer group the consumers read with.
    pub group: String,
    /// How long (ms) an entry may stay pending before it counts as failed
    /// (`spec.source.visibilityTimeout`).
    pub visibility_timeout_ms: u64,
    /// The dead-letter stream's length limit (`spec.deadLetter.maxLength`; 0: none).
    pub dead_letter_max_length: u64,
}

/// An entry pending in the group for longer than the visibility timeout (`XPENDING`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its entry id.
    pub id: String,
    /// The consumer it was delivered to last.
    pub consumer: String,
    /// Time since it was delivered last, ms.
    pub idle_ms: u64,
    /// Times it was delivered.
    pub deliveries: u64,
}

/// The fields of one entry, in order, as bytes (values may be binary).
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What one move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Moved (and acknowledged in the group).
    Moved,
    /// No longer pending past the visibility timeout: nothing written.
    NotPending,
    /// Pending, but trimmed from the stream: acknowledged, nothing to copy.
    Trimmed,
}

impl Moved {
    fn from_code(code: i64) -> Result<Moved, RedisError> {
        match code {
            MOVED => Ok(Moved::Moved),
            NOT_PENDING => Ok(Moved::NotPending),
            TRIMMED => Ok(Moved::Trimmed),
            other => Err(RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected answer of the move script",
                other.to_string(),
            ))),
        }
    }
}

impl StreamSource {
    /// Up to `count` entries pending longer than the visibility timeout, oldest id first
    /// (`XPENDING <stream> <group> IDLE <ms> - + <count>`, Redis 6.2 or later).
    ///
    /// # Errors
    /// The server's error (a missing group is `NOGROUP`).
    pub async fn failed<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        count: usize,
    ) -> Result<Vec<Pending>, RedisError> {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(self.keys.source())
            .arg(&self.group)
            .arg("IDLE")
            .arg(self.visibility_timeout_ms)
            .arg("-")
            .arg("+")
            .arg(count)
            .query_async(conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, consumer, idle_ms, deliveries)| Pending {
                id,
                consumer,
                idle_ms,
                deliveries,
            })
            .collect())
    }

    /// The fields of each entry of `ids` (`None` for one trimmed from the stream), in
    /// the order of `ids`, read in one pipeline.
    ///
    /// # Errors
    /// The server's error.
    pub async fn fields<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ids: &[&str],
    ) -> Result<Vec<Option<Fields>>, RedisError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("XRANGE").arg(self.keys.source()).arg(*id).arg(*id);
        }
        let replies: Vec<Vec<(String, Vec<Vec<u8>>)>> = pipe.query_async(conn).await?;
        Ok(replies
            .into_iter()
            .map(|entries| entries.into_iter().next().map(|(_, flat)| pairs(flat)))
            .collect())
    }

    /// Schedules a retry of pending entry `id` after `delay_ms` ms, its copy carrying
    /// `stamp` ([`RETRY_STREAM_ENTRY`]).
    ///
    /// # Errors
    /// The server's error (the script is loaded again when the server lost it).
    pub async fn retry<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        id: &str,
        delay_ms: u64,
        stamp: &Stamped,
    ) -> Result<Moved, RedisError> {
        let mut call = RETRY_STREAM_ENTRY.prepare_invoke();
        call.key(self.keys.source())
            .key(self.keys.retry_set())
            .key(self.keys.retry_entries())
            .arg(&self.group)
            .arg(id)
            .arg(self.visibility_timeout_ms)
            .arg(delay_ms);
        stamp_args(&mut call, stamp);
        Moved::from_code(call.invoke_async(conn).await?)
    }

    /// Dead-letters pending entry `id`, its copy carrying `stamp`
    /// ([`DEAD_LETTER_STREAM_ENTRY`]).
    ///
    /// # Errors
    /// The server's error (`WRONGTYPE` when the dead-letter key is not a stream).
    pub async fn dead_letter<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        id: &str,
        stamp: &Stamped,
    ) -> Result<Moved, RedisError> {
        let mut call = DEAD_LETTER_STREAM_ENTRY.prepare_invoke();
        call.key(self.keys.source())
            .key(self.keys.dead_letters())
            .arg(&self.group)
            .arg(id)
            .arg(self.visibility_timeout_ms)
            .arg(self.dead_letter_max_length);
        stamp_args(&mut call, stamp);
        Moved::from_code(call.invoke_async(conn).await?)
    }

    /// Puts up to `limit` due retries back on the stream ([`RELEASE_DUE_TO_STREAM`]);
    /// returns `(moved, missing)`.
    ///
    /// # Errors
    /// The server's error.
    pub async fn release_due<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        limit: usize,
    ) -> Result<(u64, u64), RedisError> {
        RELEASE_DUE_TO_STREAM
            .key(self.keys.source())
            .key(self.keys.retry_set())
            .key(self.keys.retry_entries())
            .arg(limit)
            .invoke_async(conn)
            .await
    }
}

/// Adds `stamp` to a move script's arguments: the count of removals, their names, then
/// the fields to set as name, value pairs.
fn stamp_args(call: &mut redis::ScriptInvocation<'_>, stamp: &Stamped) {
    call.arg(stamp.remove.len());
    for name in &stamp.remove {
        call.arg(name);
    }
    for (name, value) in &stamp.set {
        call.arg(name).arg(value);
    }
}

/// `[f1, v1, f2, v2, …]` as pairs (a trailing odd element, which Redis never sends, is
/// dropped).
fn pairs(flat: Vec<Vec<u8>>) -> Fields {
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(name), Some(value)) = (it.next(), it.next()) {
        out.push((name, value));
    }
    out
}
