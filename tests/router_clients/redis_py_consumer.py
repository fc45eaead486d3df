"""A consumer of a Redis stream written with redis-py, nothing of dlq-operator in it, for
tests/redis_clients.rs.

Usage: redis_py_consumer.py REDIS_URL STREAM GROUP CONSUMER

Reads STREAM as CONSUMER of GROUP (XREADGROUP, new entries only) and fails every entry the
way a consumer without a retry library does: it never acknowledges it (no XACK). Prints one
JSON line on stdout when it is reading ({"ready": true}), then one per delivery:
{"t_ms": <ms since the epoch, float>, "message_id": <field "id">, "retry_count": <field
dlq-retry-count as a number, or null>}.
"""

import json
import sys
import time

import redis


def emit(line):
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main():
    url, stream, group, consumer = sys.argv[1:5]
    client = redis.Redis.from_url(url)
    client.ping()
    emit({"ready": True})
    while True:
        reply = client.xreadgroup(group, consumer, {stream: ">"}, count=100, block=1000)
        for _, entries in reply or []:
            for _entry_id, fields in entries:
                count = fields.get(b"dlq-retry-count")
                emit(
                    {
                        "t_ms": time.time() * 1000.0,
                        "message_id": fields.get(b"id", b"").decode(),
                        "retry_count": int(count) if count is not None else None,
                    }
                )
                # Processing fails; nothing is acknowledged.


if __name__ == "__main__":
    main()
