#!/usr/bin/env bash
# Installs (Debian package) and starts a local RabbitMQ with the management, prometheus
# and shovel plugins, then waits until AMQP (5672) and the management API (15672) answer.
# Idempotent: does nothing that is already done. Needs root for the install step.
set -euo pipefail

log() { printf '[ensure-rabbitmq] %s\n' "$*"; }

if ! command -v rabbitmq-server >/dev/null 2>&1; then
  log "installing rabbitmq-server (Debian package)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No init system here: keep the package's postinst from trying to start the service.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -qq rabbitmq-server curl >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }

# Plugins are recorded in the enabled_plugins file, so enabling them offline works
# whether or not the node runs; a running node picks them up below.
rabbitmq-plugins enable --offline rabbitmq_management rabbitmq_prometheus rabbitmq_shovel rabbitmq_shovel_management >/dev/null

# Every quorum queue holds file handles; a soft limit of 1024 runs out after a few dozen
# DeadLetterQueues, and the broker then stops answering new AMQP connections (TCP
# connects, no Connection.Start). Debian's wrapper starts the node through `su rabbitmq`,
# whose pam_limits resets the soft limit to 1024 unless limits.d raises it for that user:
# a `ulimit -n` before `rabbitmq-server` alone does not reach the broker.
WANT_NOFILE=20000
HARD_NOFILE="$(ulimit -Hn)"
if [ "$HARD_NOFILE" != unlimited ] && [ "$HARD_NOFILE" -lt "$WANT_NOFILE" ]; then
  WANT_NOFILE="$HARD_NOFILE"
fi
if [ -d /etc/security/limits.d ] && ! grep -qs "^rabbitmq soft nofile $WANT_NOFILE" /etc/security/limits.d/rabbitmq.conf; then
  printf 'rabbitmq soft nofile %s\nrabbitmq hard nofile %s\n' "$WANT_NOFILE" "$WANT_NOFILE" > /etc/security/limits.d/rabbitmq.conf
fi

# The soft open-files limit of the running broker (beam.smp), or nothing when none runs.
broker_nofile() {
  local pid
  pid="$(pgrep -u rabbitmq -f beam.smp | head -1 || true)"
  [ -n "$pid" ] && awk '/^Max open files/ {print $4}' "/proc/$pid/limits"
}

start_broker() {
  log "starting rabbitmq-server"
  ulimit -n "$WANT_NOFILE" 2>/dev/null || true
  rabbitmq-server -detached
}

if ! rabbitmqctl -q status >/dev/null 2>&1; then
  start_broker
else
  current="$(broker_nofile)"
  if [ -n "$current" ] && [ "$current" != unlimited ] && [ "$current" -lt "$WANT_NOFILE" ]; then
    log "the running broker's open-files limit is $current: restarting it with $WANT_NOFILE"
    rabbitmqctl -q stop
    start_broker
  fi
fi
for _ in $(seq 1 60); do
  rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 && break
  sleep 1   # right after -detached the node may not be registered yet (exit 69)
done
rabbitmqctl -q await_startup --timeout 120
# A node that was already running needs the plugins enabled online too.
rabbitmq-plugins enable rabbitmq_management rabbitmq_prometheus rabbitmq_shovel rabbitmq_shovel_management >/dev/null

for _ in $(seq 1 120); do
  if curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null 2>&1; then
    log "RabbitMQ $(rabbitmqctl -q version 2>/dev/null || echo '?') ready: amqp://127.0.0.1:5672, http://127.0.0.1:15672"
    exit 0
  fi
  sleep 1
done
log "the management API did not answer on http://127.0.0.1:15672 within 120 s" >&2
exit 1
