//! The stream layout (docs/REDIS.md, "Streams"): consumers read a stream with a consumer
//! group (`XREADGROUP`) and acknowledge what they processed (`XACK`). An entry still
//! pending in the group after the visibility timeout has failed once: the router moves
//! it, in one script each ([`super::scripts`]), to the retry set or to the dead-letter
//! stream, and puts due retries back on the stream as new entries.

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::fields::Stamped;
use super::scripts::{
    DEAD_LETTER_STREAM_ENTRY, MOVED, NOT_PENDING, OVERSIZED, RELEASE_DUE_TO_STREAM,
    RETRY_STREAM_ENTRY, TRIMMED,
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

/// One move of a pending entry: where to, and what its copy carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The entry id.
    pub id: String,
    /// Where it goes.
    pub to: To,
    /// The `dlq-*` fields its copy gets.
    pub stamp: Stamped,
}

/// Where a move sends an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// The retry set, due after `delay_ms` ms (server clock).
    Retry {
        /// Delay, ms.
        delay_ms: u64,
    },
    /// The dead-letter stream.
    DeadLetters,
}

/// What one move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Moved (and acknowledged in the group).
    Moved,
    /// No longer pending past the visibility timeout: nothing written.
    NotPending,
    /// Pending, but trimmed from the stream: acknowledged, nothing to copy.
    Trimmed,
    /// Its copy would have too many fields for a script to write: nothing written, the
    /// entry stays pending ([`super::scripts::OVERSIZED`]).
    Oversized,
}

impl Moved {
    fn from_code(code: i64) -> Result<Moved, RedisError> {
        match code {
            MOVED => Ok(Moved::Moved),
            NOT_PENDING => Ok(Moved::NotPending),
            TRIMMED => Ok(Moved::Trimmed),
            OVERSIZED => Ok(Moved::Oversized),
            other => Err(RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected answer of the move script",
                other.to_string(),
            ))),
        }
    }
}

impl StreamSource {
    /// Up to `count` entries pending longer than the visibility timeout, oldest id first,
    /// from id `start` (`-` for the first; `(ID` after ID)
    /// (`XPENDING <stream> <group> IDLE <ms> <start> + <count>`, Redis 6.2 or later).
    ///
    /// # Errors
    /// The server's error (a missing group is `NOGROUP`).
    pub async fn failed<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        start: &str,
        count: usize,
    ) -> Result<Vec<Pending>, RedisError> {
        // A consumer name is any bytes: read as bytes, shown lossily.
        let rows: Vec<(String, Vec<u8>, u64, u64)> = redis::cmd("XPENDING")
            .arg(self.keys.source())
            .arg(&self.group)
            .arg("IDLE")
            .arg(self.visibility_timeout_ms)
            .arg(start)
            .arg("+")
            .arg(count)
            .query_async(conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, consumer, idle_ms, deliveries)| Pending {
                id,
                consumer: String::from_utf8_lossy(&consumer).into_owned(),
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

    /// Makes `moves` in one pipeline (each still one script, checked on the server:
    /// [`RETRY_STREAM_ENTRY`], [`DEAD_LETTER_STREAM_ENTRY`]); returns what each did, in
    /// order, or the server's error for that move alone (`WRONGTYPE` when the dead-letter
    /// key is not a stream): one entry the server refuses never holds up the others. A
    /// move refused with `NOSCRIPT` (the server had not loaded the script, or lost it in a
    /// restart or failover: nothing ran) is made again alone, which loads it.
    ///
    /// # Errors
    /// The error of the pipeline as a whole (the connection).
    pub async fn make<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        moves: &[Move],
    ) -> Result<Vec<Result<Moved, RedisError>>, RedisError> {
        if moves.is_empty() {
            return Ok(Vec::new());
        }
        let calls: Vec<redis::ScriptInvocation<'static>> =
            moves.iter().map(|m| self.invocation(m)).collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in &calls {
            pipe.invoke_script(call);
        }
        let results: Vec<Result<i64, RedisError>> = pipe.query_async(conn).await?;
        let mut done = Vec::with_capacity(moves.len());
        for (result, call) in results.into_iter().zip(&calls) {
            let code = match result {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    call.invoke_async(conn).await
                }
                other => other,
            };
            done.push(code.and_then(Moved::from_code));
        }
        Ok(done)
    }

    /// The script call of `m`.
    fn invocation(&self, m: &Move) -> redis::ScriptInvocation<'static> {
        let mut call = match m.to {
            To::Retry { delay_ms } => {
                let mut call = RETRY_STREAM_ENTRY.prepare_invoke();
                call.key(self.keys.source())
                    .key(self.keys.retry_set())
                    .key(self.keys.retry_entries())
                    .arg(&self.group)
                    .arg(&m.id)
                    .arg(self.visibility_timeout_ms)
                    .arg(delay_ms);
                call
            }
            To::DeadLetters => {
                let mut call = DEAD_LETTER_STREAM_ENTRY.prepare_invoke();
                call.key(self.keys.source())
                    .key(self.keys.dead_letters())
                    .arg(&self.group)
                    .arg(&m.id)
                    .arg(self.visibility_timeout_ms)
                    .arg(self.dead_letter_max_length);
                call
            }
        };
        stamp_args(&mut call, &m.stamp);
        call
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
