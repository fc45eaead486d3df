"""A Celery app for tests/router_clients.rs: one task that always fails with
celery.exceptions.Reject(requeue=False), run by a real Celery worker consuming the test's
source queue. Nothing of dlq-operator in it.

Environment: DLQ_TEST_QUEUE (the source queue: Celery's default and only queue),
DLQ_TEST_BROKER (default amqp://guest:guest@127.0.0.1:5672//).

As a worker (cwd = this directory):
    python -m celery -A celery_app worker -P solo --without-gossip --without-mingle \
        --without-heartbeat
prints {"ready": true} on stdout once it consumes, then one JSON line per execution of the
task: {"t_ms": <ms since the epoch>, "task_id": ..., "retry_count": <header
dlq-retry-count or null>}.

As a publisher:
    python celery_app.py send
sends one task with Celery's own send_task and prints {"task_id": ...}.
"""

import json
import os
import sys
import time

from celery import Celery
from celery.exceptions import Reject
from celery.signals import worker_ready
from kombu import Queue

QUEUE = os.environ["DLQ_TEST_QUEUE"]
TASK = "dlq_test.always_fails"

app = Celery(
    "dlq_test",
    broker=os.environ.get("DLQ_TEST_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
)
app.conf.update(
    # The queue dlq-operator manages (declared by `dlq-operator apply` first): Celery's
    # default and only queue, declared by Celery with the same arguments.
    task_default_queue=QUEUE,
    task_queues=[Queue(QUEUE, routing_key=QUEUE)],
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    # The task's JSON lines go to stdout as they are, not to Celery's log.
    worker_redirect_stdouts=False,
    worker_hijack_root_logger=False,
    # No pidbox or event exchanges/queues: only the test's own objects on the broker.
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
    broker_connection_retry_on_startup=True,
)


def emit(line):
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


@worker_ready.connect
def on_ready(**_kwargs):
    emit({"ready": True})


@app.task(bind=True, acks_late=True, name=TASK)
def always_fails(self, order):
    # Celery (message protocol 2) puts every AMQP header of the message into the request.
    count = vars(self.request).get("dlq-retry-count")
    emit({"t_ms": time.time() * 1000.0, "task_id": self.request.id, "retry_count": count})
    raise Reject(f"order {order} cannot be processed", requeue=False)


if __name__ == "__main__":
    if sys.argv[1:] != ["send"]:
        sys.exit("usage: celery_app.py send")
    result = app.send_task(TASK, args=[1], queue=QUEUE)
    emit({"task_id": result.id})
