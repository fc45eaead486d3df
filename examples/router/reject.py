#!/usr/bin/env python3
"""A consumer in plain Python (pika) that knows nothing of retries (docs/ROUTER.md).

It fails every message it gets from QUEUE, in one of the two ways router mode offers:

- by default it rejects it with requeue=False: nothing else. With the queue's
  DeadLetterQueue in router mode (spec.router.enabled), RabbitMQ dead-letters the message
  into the router inbox QUEUE.router and the retry router retries it through the tiers of
  the RetryPolicy, then dead-letters it with its reason.
- with --report-class CLASS it reports the failure with its class instead: it publishes
  the message (same body and properties, plus the headers dlq-error-class and
  dlq-last-error) to the inbox exchange QUEUE.router with a publisher confirm, and acks
  the original only after the broker confirmed the copy.

Each delivery is printed with its dlq-retry-count (written by the router) and the time.

    python examples/router/reject.py --queue router-demo --publish 1 \\
        --until-dead-letter router-demo.dlq      # what scripts/try.sh runs

--publish N first publishes N messages to QUEUE (through the default exchange, with a
publisher confirm). --until-dead-letter DLQ stops once DLQ holds as many more messages
than at the start as distinct messages were delivered (at least N; counted with a passive
queue.declare: no statistics lag); without it, the consumer runs until Ctrl-C. Exit
status 1 when --timeout (default 60 s) passes first.

Needs pika (pip install pika==1.4.4) and a broker: --url, default the local RabbitMQ.
"""

import argparse
import json
import sys
import time
from datetime import datetime

import pika
import pika.exceptions

STARTED = time.monotonic()


def log(text):
    """Prints TEXT after the wall-clock time and the seconds since the start."""
    now = datetime.now().strftime("%H:%M:%S.%f")[:-3]
    print(f"{now}  +{time.monotonic() - STARTED:5.1f}s  {text}", flush=True)


def reject(channel, method, properties, body):
    """The plain way: reject with requeue=False. The router does the rest."""
    channel.basic_reject(delivery_tag=method.delivery_tag, requeue=False)


def report(channel, method, properties, body, queue, error_class, error):
    """With a class: publish the failed message to the inbox exchange <queue>.router with
    its class and error, wait for the broker's confirm, then ack the original. The
    channel is in confirm mode (channel.confirm_delivery()), so basic_publish returns only
    once the broker confirmed the copy, and raises NackError or UnroutableError if it did
    not: the original is then given back with requeue=True (nothing is lost)."""
    headers = dict(properties.headers or {})
    headers["dlq-error-class"] = error_class
    headers["dlq-last-error"] = error
    properties.headers = headers
    try:
        channel.basic_publish(
            exchange=f"{queue}.router",
            routing_key=method.routing_key,
            body=body,
            properties=properties,
            mandatory=True,
        )
    except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as e:
        channel.basic_nack(delivery_tag=method.delivery_tag, requeue=True)
        log(f"  the broker refused the report ({e!r}); the message was given back")
        return
    channel.basic_ack(delivery_tag=method.delivery_tag)


def depth(channel, queue):
    """Ready messages in QUEUE now (AMQP passive declare)."""
    return channel.queue_declare(queue=queue, passive=True).method.message_count


def publish(channel, queue, count):
    """Publishes COUNT persistent order messages to QUEUE through the default exchange,
    each confirmed by the broker; returns their message ids."""
    ids = []
    for n in range(count):
        message_id = f"order-{int(time.time() * 1000)}-{n}"
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=json.dumps({"order": message_id, "amount": 42}).encode(),
            properties=pika.BasicProperties(
                message_id=message_id,
                content_type="application/json",
                delivery_mode=pika.DeliveryMode.Persistent,
            ),
            mandatory=True,
        )
        ids.append(message_id)
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2f")
    parser.add_argument("--queue", default="router-demo", help="the source queue")
    parser.add_argument("--publish", type=int, default=0, metavar="N")
    parser.add_argument("--until-dead-letter", metavar="DLQ")
    parser.add_argument("--report-class", metavar="CLASS")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS")
    args = parser.parse_args()

    try:
        connection = pika.BlockingConnection(pika.URLParameters(args.url))
    except pika.exceptions.AMQPConnectionError as e:
        sys.exit(f"reject.py: cannot connect to {args.url}: {e!r}")
    channel = connection.channel()
    channel.confirm_delivery()
    # A second channel for the depth checks: a passive declare of a missing queue closes
    # its channel.
    counter = connection.channel()
    try:
        depth(counter, args.queue)
        before = depth(counter, args.until_dead_letter) if args.until_dead_letter else 0
    except pika.exceptions.ChannelClosedByBroker as e:
        sys.exit(f"reject.py: {e.reply_text}: apply the manifests first "
                 "(dlq-operator apply -f examples/ -f examples/try/)")

    for message_id in publish(channel, args.queue, args.publish):
        log(f"published {message_id} to {args.queue}")

    seen = set()  # message ids delivered: each of them ends in the dead-letter queue

    def on_message(ch, method, properties, body):
        seen.add(properties.message_id)
        headers = properties.headers or {}
        count = headers.get("dlq-retry-count")
        shown = "absent (first delivery)" if count is None else f"{count}"
        how = (f"reported with dlq-error-class={args.report_class} to exchange {args.queue}.router"
               if args.report_class else "basic.reject(requeue=False)")
        log(f"delivery of {properties.message_id}: dlq-retry-count {shown} -> {how}")
        if args.report_class:
            report(ch, method, properties, body, args.queue, args.report_class,
                   "the demo consumer failed it on purpose")
        else:
            reject(ch, method, properties, body)

    channel.basic_consume(queue=args.queue, on_message_callback=on_message)
    deadline = time.monotonic() + args.timeout
    try:
        while True:
            connection.process_data_events(time_limit=0.1)
            if args.until_dead_letter:
                now = depth(counter, args.until_dead_letter)
                if now >= before + max(len(seen), args.publish, 1):
                    log(f"{args.until_dead_letter} holds {now} message(s) ({before} before this run)")
                    break
            if time.monotonic() > deadline:
                inbox = f"{args.queue}.router"
                try:
                    waiting = f"holds {depth(counter, inbox)} message(s)"
                except pika.exceptions.ChannelClosedByBroker as e:
                    waiting = f"cannot be read ({e.reply_text}: is the queue in router mode?)"
                log(f"timed out after {args.timeout:.0f} s; the inbox {inbox} {waiting}. "
                    "Is a retry router running (dlq-operator router, or run --standalone)? "
                    "Without one, failed messages wait in the inbox.")
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
