//! The Lua scripts of the Redis retry router (docs/REDIS.md, "What is atomic"). Each move
//! of an entry is one script: Redis runs a script as one step, so a router killed at any
//! instant has either made the whole move or none of it. Every script touches keys of one
//! hash slot only ([`crate::redis_keys`]), so it also runs on one master of a Redis Cluster.
//!
//! Times are read from the server (`TIME`), in ms since the epoch: the due times of every
//! router of one source come from one clock. Numbers are formatted with `%.0f` (Lua's
//! `tostring` would write `1.7e+12`). Entry contents are kept with `cmsgpack` (shipped in
//! Redis's Lua), which keeps binary field values intact.

use std::sync::LazyLock;

use redis::Script;

/// What [`RETRY_STREAM_ENTRY`] and [`DEAD_LETTER_STREAM_ENTRY`] report.
pub const MOVED: i64 = 1;
/// The entry is no longer pending in the group past the visibility timeout (a consumer
/// acknowledged it, or another router moved it): nothing was written.
pub const NOT_PENDING: i64 = 0;
/// The entry is pending but its content is gone from the stream (trimmed by `MAXLEN` or
/// deleted by `XDEL`): there is nothing to copy; it was acknowledged so that it is not
/// looked at again.
pub const TRIMMED: i64 = -1;
/// The copy would have more than [`MAX_VALUES`] values: a script cannot pass that many
/// values to `XADD` (Lua's `unpack` limit), so nothing was written and the entry stays
/// pending, never half-moved.
pub const OVERSIZED: i64 = -2;
/// The most fields (names and values: twice the fields) a copy may carry: below Lua's
/// `unpack` limit of 8,000 values (`LUAI_MAXCSTACK`), with room for `XADD`'s own
/// arguments.
pub const MAX_VALUES: usize = 7_900;

/// The common head of the two stream moves: returns before writing anything unless the
/// entry is pending past the visibility timeout and still in the stream, and its copy has
/// at most [`MAX_VALUES`] values ([`OVERSIZED`] otherwise); `fields` is the
/// copy's fields: the entry's, without those named for removal (`ARGV[5]` names, count
/// in `ARGV[5]`, names in `ARGV[6..]`) or to be set, then the fields to set (name, value
/// pairs after the removals), in order.
const STREAM_HEAD: &str = r#"
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[3], ARGV[2], ARGV[2], 1)
if #pending == 0 then return 0 end
local range = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #range == 0 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  return -1
end
local removals = tonumber(ARGV[5])
local first_set = 6 + removals
local replaced = {}
for i = 6, first_set - 1 do replaced[ARGV[i]] = true end
for i = first_set, #ARGV, 2 do replaced[ARGV[i]] = true end
local fields = {}
local entry = range[1][2]
for i = 1, #entry, 2 do
  if not replaced[entry[i]] then
    fields[#fields + 1] = entry[i]
    fields[#fields + 1] = entry[i + 1]
  end
end
for i = first_set, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
end
if #fields > MAX_VALUES then return -2 end
"#;

/// [`STREAM_HEAD`] with [`MAX_VALUES`] written in.
fn stream_head() -> String {
    STREAM_HEAD.replace("MAX_VALUES", &MAX_VALUES.to_string())
}

/// Schedules a retry of a pending stream entry.
///
/// `KEYS`: source stream, retry set, retry entries. `ARGV`: group, entry id, visibility
/// timeout (ms: the entry must have been idle that long), delay (ms), the count of field
/// names to remove, those names, then the `dlq-*` fields to write as name, value pairs. Acknowledges the entry in the group, keeps the
/// copy's fields in the retry entries hash under the entry id and adds the id to the
/// retry set, due at the server's now + delay. Returns [`MOVED`], [`NOT_PENDING`],
/// [`TRIMMED`] or [`OVERSIZED`].
pub static RETRY_STREAM_ENTRY: LazyLock<Script> = LazyLock::new(|| {
    let head = stream_head();
    Script::new(&format!(
        r#"{head}
local now = redis.call('TIME')
local due = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[4])
redis.call('HSET', KEYS[3], ARGV[2], cmsgpack.pack(fields))
redis.call('ZADD', KEYS[2], string.format('%.0f', due), ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return 1
"#
    ))
});

/// Dead-letters a pending stream entry.
///
/// `KEYS`: source stream, dead-letter stream. `ARGV`: group, entry id, visibility timeout
/// (ms), the dead-letter stream's length limit (`0`: none; otherwise `MAXLEN ~`, which
/// drops the oldest dead letters), the count of field names to remove, those names, then
/// the `dlq-*` fields as name, value pairs. Adds the
/// copy to the dead-letter stream and acknowledges the entry. Returns [`MOVED`],
/// [`NOT_PENDING`], [`TRIMMED`] or [`OVERSIZED`].
pub static DEAD_LETTER_STREAM_ENTRY: LazyLock<Script> = LazyLock::new(|| {
    let head = stream_head();
    Script::new(&format!(
        r#"{head}
if tonumber(ARGV[4]) > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(fields))
else
  redis.call('XADD', KEYS[2], '*', unpack(fields))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return 1
"#
    ))
});

/// Puts the retries that are due back on their source stream.
///
/// `KEYS`: source stream, retry set, retry entries. `ARGV`: the most entries to move.
/// Each due id (score ≤ the server's now) is added to the source as a new entry with the
/// kept fields, and removed from the retry set and the entries hash. Returns
/// `{moved, missing}`: `missing` counts ids whose content was not in the hash (nothing
/// could be put back; never expected, reported rather than hidden).
pub static RELEASE_DUE_TO_STREAM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', ms), 'LIMIT', 0, ARGV[1])
local moved, missing = 0, 0
for _, id in ipairs(ids) do
  local packed = redis.call('HGET', KEYS[3], id)
  if packed then
    redis.call('XADD', KEYS[1], '*', unpack(cmsgpack.unpack(packed)))
    moved = moved + 1
  else
    missing = missing + 1
  end
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[2], id)
end
return {moved, missing}
"#,
    )
});
