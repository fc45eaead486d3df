#!/usr/bin/env bash
# Installs (Debian package redis-server) and starts a local Redis on 127.0.0.1:6379 for the
# Redis adapter's tests (docs/REDIS.md), unless one already answers there; then checks its
# version (the router needs 6.2 or later: XPENDING … IDLE; the tests use Redis 7).
# Idempotent. Run inside a network namespace (scripts/rabbitmq4.sh exec …), it starts a
# Redis of that namespace's own loopback. The started server keeps nothing on disk.
set -euo pipefail

log() { printf '[ensure-redis] %s\n' "$*"; }
PORT="${DLQ_REDIS_PORT:-6379}"
# One log per network namespace: the host's Redis and a namespace's share /tmp.
NETNS="$(ip netns identify $$ 2>/dev/null || true)"
LOG="/tmp/dlq-redis-${NETNS:-host}-$PORT.log"

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  log "installing redis-server and redis-tools (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No init system here: keep the package's postinst from trying to start the service.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -qq redis-server redis-tools >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi

answers() { [ "$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" = PONG ]; }

if ! answers; then
  log "starting redis-server on 127.0.0.1:$PORT (nothing kept on disk)"
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
    --dir /tmp --daemonize yes --logfile "$LOG"
  for _ in $(seq 1 100); do
    answers && break
    sleep 0.1
  done
  answers || { log "redis-server did not answer on 127.0.0.1:$PORT"; cat "$LOG" || true; exit 1; }
fi

VERSION="$(redis-cli -h 127.0.0.1 -p "$PORT" info server | tr -d '\r' | sed -n 's/^redis_version://p')"
MAJOR="${VERSION%%.*}"
if [ -z "$MAJOR" ] || [ "$MAJOR" -lt 7 ]; then
  log "Redis at 127.0.0.1:$PORT is ${VERSION:-of unknown version}; the tests need Redis 7 or later"
  exit 1
fi
log "Redis $VERSION answers on 127.0.0.1:$PORT"
