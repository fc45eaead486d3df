// A consumer written with amqplib (Node's usual AMQP client), nothing of dlq-operator in
// it, for tests/router_clients.rs: nacks every delivery with requeue=false.
//
// Usage: node amqplib_consumer.js AMQP_URL QUEUE
//
// Prints one JSON line on stdout when it is consuming ({"ready": true}), then one per
// delivery: {"t_ms": <ms since the epoch>, "message_id": ..., "retry_count": <header
// dlq-retry-count or null>}.
'use strict';

const amqp = require('amqplib');

function emit(line) {
  process.stdout.write(JSON.stringify(line) + '\n');
}

async function main() {
  const [url, queue] = process.argv.slice(2);
  if (!url || !queue) {
    throw new Error('usage: node amqplib_consumer.js AMQP_URL QUEUE');
  }
  const connection = await amqp.connect(url);
  connection.on('error', (e) => {
    console.error(`amqplib_consumer.js: connection error: ${e.message}`);
    process.exit(1);
  });
  const channel = await connection.createChannel();
  await channel.prefetch(10);
  await channel.consume(queue, (msg) => {
    if (msg === null) {
      console.error('amqplib_consumer.js: the broker cancelled the consumer');
      process.exit(1);
    }
    const headers = msg.properties.headers || {};
    const count = headers['dlq-retry-count'];
    emit({
      t_ms: performance.timeOrigin + performance.now(),
      message_id: msg.properties.messageId === undefined ? null : msg.properties.messageId,
      retry_count: count === undefined ? null : Number(count),
    });
    // nack(message, allUpTo, requeue)
    channel.nack(msg, false, false);
  });
  emit({ ready: true });
}

main().catch((e) => {
  console.error(`amqplib_consumer.js: ${e.stack || e}`);
  process.exit(1);
});
