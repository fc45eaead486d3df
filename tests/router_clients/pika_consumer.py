"""A consumer written with pika (Python's usual AMQP client), nothing of dlq-operator in it,
for tests/router_clients.rs.

Usage: pika_consumer.py AMQP_URL QUEUE MODE

Prints one JSON line on stdout when it is consuming ({"ready": true}), then one per
delivery: {"t_ms": <ms since the epoch, float>, "message_id": ..., "retry_count": <header
dlq-retry-count or null>}. MODE says what it does with every delivery:

- reject: basic.reject with requeue=False (the only thing a consumer does in router mode);
- report: publishes the message (confirmed, mandatory) to the inbox exchange
  "<QUEUE>.router" with the headers dlq-error-class: Validation and dlq-last-error, then
  acks the original (the router's recipe for a consumer that knows the failure's class).
"""

import json
import sys
import time

import pika

CLASS = "Validation"
ERROR = "field 'order' must be a positive integer"


def emit(line):
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main():
    url, queue, mode = sys.argv[1:4]
    if mode not in ("reject", "report"):
        sys.exit(f"pika_consumer.py: MODE must be reject or report, not {mode!r}")
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10)
    if mode == "report":
        channel.confirm_delivery()

    def on_message(ch, method, properties, body):
        headers = properties.headers or {}
        emit(
            {
                "t_ms": time.time() * 1000.0,
                "message_id": properties.message_id,
                "retry_count": headers.get("dlq-retry-count"),
            }
        )
        if mode == "reject":
            ch.basic_reject(delivery_tag=method.delivery_tag, requeue=False)
            return
        report = dict(headers)
        report["dlq-error-class"] = CLASS
        report["dlq-last-error"] = ERROR
        # With confirm_delivery, basic_publish returns once the broker confirmed it and
        # raises if the message was returned (mandatory) or nacked: the original is acked
        # only after that.
        ch.basic_publish(
            exchange=f"{queue}.router",
            routing_key=queue,
            body=body,
            properties=pika.BasicProperties(
                message_id=properties.message_id,
                content_type=properties.content_type,
                headers=report,
                delivery_mode=pika.DeliveryMode.Persistent,
            ),
            mandatory=True,
        )
        ch.basic_ack(delivery_tag=method.delivery_tag)

    channel.basic_consume(queue=queue, on_message_callback=on_message)
    emit({"ready": True})
    channel.start_consuming()


if __name__ == "__main__":
    main()
