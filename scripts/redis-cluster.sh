#!/usr/bin/env bash
# A local Redis Cluster for the Redis adapter's cluster tests (docs/REDIS.md): three
# masters and one replica each, on 127.0.0.1 ports 7001–7006 (DLQ_REDIS_CLUSTER_PORT for
# the first), nothing kept on disk, cluster-node-timeout 2 s so that a replica takes over
# a killed master within seconds. Run inside a network namespace (scripts/rabbitmq4.sh
# exec …), it starts a cluster on that namespace's own loopback.
#
#   scripts/redis-cluster.sh start     start (or keep) the six nodes and create the cluster
#   scripts/redis-cluster.sh stop      stop every node and remove their files
#   scripts/redis-cluster.sh kill N    SIGKILL node N (1–6)
#   scripts/redis-cluster.sh restart N start node N again (it rejoins as a replica)
#   scripts/redis-cluster.sh wait      wait until the cluster says cluster_state:ok
#
# The tests find it through DLQ_REDIS_CLUSTER=redis://127.0.0.1:7001,… (start prints it).
set -euo pipefail

log() { printf '[redis-cluster] %s\n' "$*"; }
die() { log "ERROR: $*"; exit 1; }

FIRST="${DLQ_REDIS_CLUSTER_PORT:-7001}"
# One directory per network namespace: the host's cluster and a namespace's share /tmp.
NETNS="$(ip netns identify $$ 2>/dev/null || true)"
DIR="${DLQ_REDIS_CLUSTER_DIR:-/tmp/dlq-redis-cluster-${NETNS:-host}-$FIRST}"
NODES=6

port() { echo $((FIRST + $1 - 1)); }
answers() { [ "$(redis-cli -h 127.0.0.1 -p "$(port "$1")" ping 2>/dev/null)" = PONG ]; }

start_node() {
  local n="$1" p
  p="$(port "$n")"
  mkdir -p "$DIR/$n"
  answers "$n" && return 0
  redis-server --bind 127.0.0.1 --port "$p" --dir "$DIR/$n" --daemonize yes \
    --cluster-enabled yes --cluster-config-file "nodes.conf" --cluster-node-timeout 2000 \
    --save '' --appendonly no --logfile "$DIR/$n/redis.log" --pidfile "$DIR/$n/redis.pid"
  for _ in $(seq 1 100); do
    answers "$n" && return 0
    sleep 0.1
  done
  cat "$DIR/$n/redis.log" || true
  die "node $n (port $p) did not answer"
}

cluster_ok() {
  redis-cli -h 127.0.0.1 -p "$(port 1)" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'
}

wait_ok() {
  for _ in $(seq 1 300); do
    cluster_ok && return 0
    sleep 0.1
  done
  die "the cluster did not reach cluster_state:ok in 30 s"
}

# Every master has its replica (three nodes say "slave").
replicas_ok() {
  [ "$(redis-cli -h 127.0.0.1 -p "$(port 1)" cluster nodes 2>/dev/null | awk '$3 ~ /slave/' | wc -l)" -eq 3 ]
}

wait_replicas() {
  for _ in $(seq 1 300); do
    replicas_ok && return 0
    sleep 0.1
  done
  die "the replicas did not attach in 30 s"
}

uris() {
  local out="" n
  for n in $(seq 1 3); do out="${out:+$out,}redis://127.0.0.1:$(port "$n")"; done
  echo "$out"
}

start() {
  command -v redis-server >/dev/null || bash "$(dirname "$0")/ensure-redis.sh"
  for n in $(seq 1 "$NODES"); do start_node "$n"; done
  if ! cluster_ok; then
    local addrs=() n
    for n in $(seq 1 "$NODES"); do addrs+=("127.0.0.1:$(port "$n")"); done
    log "creating the cluster: 3 masters, 1 replica each"
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
  fi
  wait_ok
  wait_replicas
  log "cluster_state:ok, 3 masters with a replica each; DLQ_REDIS_CLUSTER=$(uris)"
}

stop() {
  local n
  for n in $(seq 1 "$NODES"); do
    redis-cli -h 127.0.0.1 -p "$(port "$n")" shutdown nosave >/dev/null 2>&1 || true
  done
  rm -rf "$DIR"
}

kill_node() {
  local n="$1"
  [ -f "$DIR/$n/redis.pid" ] || die "node $n is not running"
  kill -9 "$(cat "$DIR/$n/redis.pid")"
  rm -f "$DIR/$n/redis.pid"
  log "node $n (port $(port "$n")) killed"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) [[ $# -eq 2 ]] || die "usage: $0 kill N"; kill_node "$2" ;;
  restart) [[ $# -eq 2 ]] || die "usage: $0 restart N"; start_node "$2" ;;
  wait) wait_ok ;;
  uris) uris ;;
  *) die "usage: $0 start|stop|kill N|restart N|wait|uris" ;;
esac
