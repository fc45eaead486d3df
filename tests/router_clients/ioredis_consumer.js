// A consumer of a Redis stream written with ioredis (Node's usual Redis client), nothing of
// dlq-operator in it, for tests/redis_clients.rs.
//
// Usage: node ioredis_consumer.js REDIS_URL STREAM GROUP CONSUMER
//
// Reads STREAM as CONSUMER of GROUP (XREADGROUP, new entries only) and fails every entry
// the way a consumer without a retry library does: it never acknowledges it (no XACK).
// Prints {"ready": true} when it is reading, then one JSON line per delivery:
// {"t_ms": <ms since the epoch>, "message_id": <field "id">, "retry_count": <field
// dlq-retry-count as a number, or null>}.
'use strict';

const Redis = require('ioredis');

const [url, stream, group, consumer] = process.argv.slice(2);

function emit(line) {
  process.stdout.write(JSON.stringify(line) + '\n');
}

function fieldsOf(flat) {
  const fields = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
  return fields;
}

async function main() {
  const redis = new Redis(url);
  await redis.ping();
  emit({ ready: true });
  for (;;) {
    const reply = await redis.xreadgroup(
      'GROUP', group, consumer, 'COUNT', 100, 'BLOCK', 1000, 'STREAMS', stream, '>');
    for (const [, entries] of reply || []) {
      for (const [, flat] of entries) {
        const fields = fieldsOf(flat);
        const count = fields['dlq-retry-count'];
        emit({
          t_ms: Date.now(),
          message_id: fields.id || '',
          retry_count: count === undefined ? null : Number(count),
        });
        // Processing fails; nothing is acknowledged.
      }
    }
  }
}

main().catch((e) => {
  process.stderr.write(`ioredis_consumer.js: ${e}\n`);
  process.exit(1);
});
