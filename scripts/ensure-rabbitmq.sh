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

if ! rabbitmqctl -q status >/dev/null 2>&1; then
  log "starting rabbitmq-server"
  # Every quorum queue holds file handles; the inherited soft limit (often 1024) runs out
  # after a few dozen DeadLetterQueues, and the broker then stops answering new AMQP
  # connections (TCP connects, no Connection.Start). Raise it to the hard limit.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  rabbitmq-server -detached
fi
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
