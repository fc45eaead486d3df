#!/usr/bin/env bash
# A local 3-node RabbitMQ cluster for the fault tests (docs/RELIABILITY.md): three nodes,
# each in a network namespace of its own on a private bridge, clustered by classic config
# peer discovery with `cluster_partition_handling = pause_minority`, the management,
# prometheus and shovel plugins, and a Service-like front address (HAProxy, round robin
# over the nodes that pass a TCP health check, as a Kubernetes Service over ready Pods).
# RabbitMQ 3.10 is the host's Debian package (scripts/ensure-rabbitmq.sh); 4.0 runs from
# the Debian 13 root of scripts/rabbitmq4.sh (`rabbitmq4.sh build` first). The host's own
# broker (127.0.0.1:5672) and its files are never touched.
#
#   scripts/rabbitmq-cluster.sh start [3.10|4.0]   # (re)creates the cluster, waits for 3 nodes
#   scripts/rabbitmq-cluster.sh stop               # stops every node and the front, removes the network
#   scripts/rabbitmq-cluster.sh kill N             # SIGKILL node N (1-3)
#   scripts/rabbitmq-cluster.sh restart N          # starts node N again (after kill), waits for it
#   scripts/rabbitmq-cluster.sh partition N        # cuts node N off from the other two nodes
#                                                  # (clients still reach it)
#   scripts/rabbitmq-cluster.sh heal               # removes every partition
#   scripts/rabbitmq-cluster.sh wait               # waits until the three nodes run as one cluster
#   scripts/rabbitmq-cluster.sh attach NS          # plugs network namespace NS into the bridge
#   scripts/rabbitmq-cluster.sh ctl N ARGS...      # rabbitmqctl of node N
#   scripts/rabbitmq-cluster.sh status             # prints the addresses (as `start` does)
#
# Addresses (bridge 10.77.0.0/24; DLQ_CLUSTER_NET=10.77.0 changes the prefix):
#   node N:  amqp://10.77.0.1N:5672, http://10.77.0.1N:15672 (prometheus :15692)
#   front:   amqp://10.77.0.10:5672, http://10.77.0.10:15672
#   host:    10.77.0.1 (the bridge); `attach NS` gives NS 10.77.0.2..9
# Users: guest/guest (allowed from any address on this private network only).
# `start` writes $DLQ_CLUSTER_STATE/cluster.json (default /run/dlq-rabbitmq-cluster), which
# the tests read through DLQ_RABBITMQ_CLUSTER (tests/common/cluster.rs).
# Needs root (ip netns, bridge, chroot for 4.0).
set -euo pipefail

NET="${DLQ_CLUSTER_NET:-10.77.0}"
STATE="${DLQ_CLUSTER_STATE:-/run/dlq-rabbitmq-cluster}"
RMQ4_ROOT="${DLQ_RABBITMQ4_CACHE:-/var/cache/dlq-rabbitmq4}/root"
BRIDGE=dlqc-br
FRONT_NS=dlqc-front
NOFILE=20000
# Erlang's net_ticktime (s): how long before a silent peer counts as down. RabbitMQ's 60 s
# default would make every partition test wait a minute; 10 s keeps them short and is
# still far above the latency of a bridge.
NET_TICKTIME=10
# How long (ms) RabbitMQ's at-least-once dead-lettering waits for its target's confirm
# before it publishes again (rabbit's dead_letter_worker_publisher_confirm_timeout, 180 s
# by default): after a node loss, messages rejected out of a quorum queue wait up to this
# long before they move on. 20 s keeps the router's fault tests short; docs/RELIABILITY.md
# gives the figures with the default as well.
DLX_CONFIRM_TIMEOUT_MS=20000
HERE="$(cd "$(dirname "$0")" && pwd)"

log() { printf '[rabbitmq-cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

node_ns() { echo "dlqc-n$1"; }
node_ip() { echo "$NET.1$1"; }
node_name() { echo "rabbit@$(node_ip "$1")"; }
check_n() { [[ "${1:-}" =~ ^[123]$ ]] || die "node must be 1, 2 or 3 (got '${1:-}')"; }
has_ns() { ip netns list | awk '{print $1}' | grep -qxF -- "$1"; }

version() { cat "$STATE/version" 2>/dev/null || die "no cluster: run '$0 start' first"; }

# Where the node's files live and how its commands run: on the host for 3.10; inside the
# Debian 13 root (chroot) for 4.0, where paths are the root's.
in_root() {
  if [[ "$(version)" == 4.0 ]]; then chroot "$RMQ4_ROOT" "$@"; else "$@"; fi
}
node_dir() { echo "/var/lib/dlq-rabbitmq-cluster/n$1"; }     # as the node sees it
host_path() {                                              # the same path from the host
  if [[ "$(version)" == 4.0 ]]; then echo "$RMQ4_ROOT$1"; else echo "$1"; fi
}

# The environment of node N's commands (server and rabbitmqctl): its own name, config,
# data and logs, and a cookie shared by the three nodes; nothing of /etc/rabbitmq.
node_env() {
  local d
  d="$(node_dir "$1")"
  echo "HOME=$d RABBITMQ_USE_LONGNAME=true RABBITMQ_NODENAME=$(node_name "$1")" \
    "RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf" \
    "RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config RABBITMQ_MNESIA_BASE=$d/mnesia" \
    "RABBITMQ_LOG_BASE=$d/log RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins" \
    "RABBITMQ_PID_FILE=$d/pid RABBITMQ_PLUGINS_EXPAND_DIR=$d/plugins-expand" \
    "ERL_INETRC=$d/inetrc"
}

# ------------------------------------------------------------------------------- network

net_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  local n
  for n in 1 2 3; do plug "$(node_ns "$n")" "$(node_ip "$n")" "dlqc-v$n"; done
  plug "$FRONT_NS" "$NET.10" dlqc-vf
}

# Network namespace $1 with address $2 on the bridge, through veth $3 (host side).
plug() {
  local ns="$1" ip="$2" veth="$3"
  has_ns "$ns" || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
  fi
}

net_down() {
  local ns
  for ns in "$FRONT_NS" dlqc-n1 dlqc-n2 dlqc-n3; do
    if has_ns "$ns"; then
      kill_ns "$ns"
      ip netns del "$ns"
    fi
  done
  local v
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^dlqc-(v|a)' || true); do
    ip link del "$v" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

# SIGKILL every process of network namespace $1.
kill_ns() {
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
}

attach() {
  local ns="$1" i
  has_ns "$ns" || die "no network namespace $ns"
  ip link show "$BRIDGE" >/dev/null 2>&1 || die "no cluster network: run '$0 start' first"
  # A link left from an earlier attach (its cluster stopped, the namespace kept): deleting
  # this end of the veth pair deletes the other, so NS is plugged in afresh.
  ip -n "$ns" link del dlqc0 2>/dev/null || true
  for i in 2 3 4 5 6 7 8 9; do
    if ! ip link show "dlqc-a$i" >/dev/null 2>&1; then
      ip link add "dlqc-a$i" type veth peer name dlqc0 netns "$ns"
      ip link set "dlqc-a$i" master "$BRIDGE" up
      ip -n "$ns" addr add "$NET.$i/24" dev dlqc0
      ip -n "$ns" link set dlqc0 up
      log "attached $ns as $NET.$i"
      return 0
    fi
  done
  die "no free address to attach $ns"
}

# --------------------------------------------------------------------------------- nodes

write_node_files() {
  local n="$1" d h
  d="$(node_dir "$n")"
  h="$(host_path "$d")"
  rm -rf "$h"
  mkdir -p "$h/log" "$h/mnesia"
  cp "$STATE/cookie" "$h/.erlang.cookie"
  chmod 400 "$h/.erlang.cookie"
  : > "$h/rabbitmq-env.conf"
  echo '[rabbitmq_management,rabbitmq_prometheus,rabbitmq_shovel,rabbitmq_shovel_management].' > "$h/enabled_plugins"
  {
    echo "listeners.tcp.default = 5672"
    echo "management.tcp.port = 15672"
    echo "prometheus.tcp.port = 15692"
    echo "loopback_users.guest = false"
    echo "cluster_partition_handling = pause_minority"
    echo "cluster_formation.peer_discovery_backend = classic_config"
    local m
    for m in 1 2 3; do echo "cluster_formation.classic_config.nodes.$m = $(node_name "$m")"; done
    # Statistics every second: the tests read depths through the management API.
    echo "collect_statistics_interval = 1000"
  } > "$h/rabbitmq.conf"
  printf '[{kernel, [{net_ticktime, %s}]},\n {rabbit, [{dead_letter_worker_publisher_confirm_timeout, %s}]}].\n' \
    "$NET_TICKTIME" "$DLX_CONFIRM_TIMEOUT_MS" > "$h/advanced.config"
  # Names from /etc/hosts and this file only: the namespaces have no DNS, and RabbitMQ 4.0
  # looks up the machine's host name while it forms the cluster (23 s per lookup that
  # waits for a resolver that cannot answer).
  printf '{lookup, [file]}.\n{host, {127,0,0,1}, ["%s"]}.\n' "$(hostname)" > "$h/inetrc"
}

start_node() {
  local n="$1" ns d
  ns="$(node_ns "$n")"
  d="$(node_dir "$n")"
  if node_pid "$n" >/dev/null; then
    log "node $n already runs"
    return 0
  fi
  # shellcheck disable=SC2046
  ip netns exec "$ns" $( [[ "$(version)" == 4.0 ]] && echo chroot "$RMQ4_ROOT" ) \
    sh -c "ulimit -n $NOFILE; cd $d && exec env $(node_env "$n") setsid /usr/lib/rabbitmq/bin/rabbitmq-server" \
    >"$(host_path "$d")/log/console.log" 2>&1 </dev/null &
}

# PID of node N's beam.smp (exit 1 if none).
node_pid() {
  local p
  for p in $(ip netns pids "$(node_ns "$1")" 2>/dev/null); do
    if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == beam.smp ]]; then echo "$p"; return 0; fi
  done
  return 1
}

ctl() {
  local n="$1"; shift
  # shellcheck disable=SC2046
  ip netns exec "$(node_ns "$n")" $( [[ "$(version)" == 4.0 ]] && echo chroot "$RMQ4_ROOT" ) \
    env $(node_env "$n") /usr/lib/rabbitmq/bin/rabbitmqctl "$@"
}

# Waits until node N's management API answers and the node is running (s: $2, default 120).
wait_node() {
  local n="$1" limit="${2:-120}" i
  for i in $(seq 1 "$limit"); do
    if curl -fsS -m 2 -u guest:guest "http://$(node_ip "$n"):15672/api/overview" >/dev/null 2>&1; then
      return 0
    fi
    node_pid "$n" >/dev/null || [[ $i -lt 15 ]] || die "node $n exited: $(host_path "$(node_dir "$n")")/log"
    sleep 1
  done
  die "node $n did not answer within $limit s: $(host_path "$(node_dir "$n")")/log"
}

# Waits until node 1 sees all three nodes running.
wait_cluster() {
  local i running
  for i in $(seq 1 120); do
    running="$(curl -fsS -m 2 -u guest:guest "http://$(node_ip 1):15672/api/nodes?columns=name,running" 2>/dev/null \
      | grep -o '"running":true' | wc -l || true)"
    [[ "$running" == 3 ]] && return 0
    sleep 1
  done
  die "the cluster did not reach 3 running nodes within 120 s"
}

# ---------------------------------------------------------------------------------- front

start_front() {
  command -v haproxy >/dev/null 2>&1 || {
    log "installing haproxy (the Service-like front address)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get install -y -qq --no-install-recommends haproxy >/dev/null
    rm -f /usr/sbin/policy-rc.d
  }
  local port n
  {
    echo "global"
    echo "  pidfile $STATE/haproxy.pid"
    echo "  daemon"
    echo "defaults"
    echo "  mode tcp"
    echo "  timeout connect 3s"
    echo "  timeout client 1h"
    echo "  timeout server 1h"
    # A backend that fails two checks 1 s apart leaves the rotation, as a Pod that fails
    # its readiness probe leaves a Service's endpoints.
    echo "  default-server check inter 1s fall 2 rise 2"
    for port in 5672 15672 15692; do
      echo "listen p$port"
      echo "  bind $NET.10:$port"
      echo "  balance roundrobin"
      for n in 1 2 3; do echo "  server n$n $(node_ip "$n"):$port"; done
    done
  } > "$STATE/haproxy.cfg"
  ip netns exec "$FRONT_NS" haproxy -f "$STATE/haproxy.cfg" >"$STATE/haproxy.log" 2>&1 </dev/null
}

# ------------------------------------------------------------------------------ commands

print_status() {
  local n
  for n in 1 2 3; do
    printf 'node %s  %s  amqp://%s:5672  http://%s:15672  %s\n' "$n" "$(node_name "$n")" \
      "$(node_ip "$n")" "$(node_ip "$n")" "$(node_pid "$n" >/dev/null && echo running || echo down)"
  done
  printf 'front   (round robin)          amqp://%s.10:5672  http://%s.10:15672\n' "$NET" "$NET"
}

write_json() {
  local n sep=""
  {
    printf '{"version": "%s", "script": "%s", "nodes": [' "$(version)" "$HERE/rabbitmq-cluster.sh"
    for n in 1 2 3; do
      printf '%s{"name": "%s", "amqp": "amqp://%s:5672", "management": "http://%s:15672"}' \
        "$sep" "$(node_name "$n")" "$(node_ip "$n")" "$(node_ip "$n")"
      sep=", "
    done
    printf '], "front": {"amqp": "amqp://%s.10:5672", "management": "http://%s.10:15672"}}\n' "$NET" "$NET"
  } > "$STATE/cluster.json"
}

start() {
  local v="${1:-3.10}"
  case "$v" in
    3.10)
      command -v rabbitmq-server >/dev/null 2>&1 || bash "$HERE/ensure-rabbitmq.sh"
      ;;
    4.0)
      [[ -f "$RMQ4_ROOT/.dlq-complete" ]] || bash "$HERE/rabbitmq4.sh" build
      ;;
    *) die "version must be 3.10 or 4.0 (got '$v')" ;;
  esac
  command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
  [[ -d "$STATE" ]] && stop
  mkdir -p "$STATE"
  echo "$v" > "$STATE/version"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F > "$STATE/cookie"
  if [[ "$v" == 4.0 ]]; then
    bash "$HERE/rabbitmq4.sh" mount
  fi
  net_up
  local n
  for n in 1 2 3; do write_node_files "$n"; done
  if [[ "$v" == 3.10 ]]; then
    # Node 1 first: it forms the cluster, the other two find it by classic config and
    # join (started at once, two 3.10 nodes that each find no peer may each form one).
    log "starting RabbitMQ $v node 1 of 3"
    start_node 1
    wait_node 1
    log "starting nodes 2 and 3"
    start_node 2
    start_node 3
  else
    # 4.0's peer discovery waits for the listed peers and picks one node to join, so the
    # three start together (node 1 alone waits for the others for minutes).
    log "starting RabbitMQ $v nodes 1, 2 and 3"
    for n in 1 2 3; do start_node "$n"; done
  fi
  for n in 1 2 3; do wait_node "$n"; done
  wait_cluster
  start_front
  write_json
  log "cluster of 3 nodes ready (RabbitMQ $(ctl 1 -q version 2>/dev/null || echo "$v")); $STATE/cluster.json"
  print_status
}

stop() {
  [[ -d "$STATE" ]] || { net_down; return 0; }
  if [[ -f "$STATE/haproxy.pid" ]]; then kill "$(cat "$STATE/haproxy.pid")" 2>/dev/null || true; fi
  local n
  if [[ -f "$STATE/version" ]]; then
    for n in 1 2 3; do node_pid "$n" >/dev/null && kill -9 "$(node_pid "$n")" 2>/dev/null || true; done
  fi
  net_down
  if [[ "$(cat "$STATE/version" 2>/dev/null)" == 4.0 ]]; then
    bash "$HERE/rabbitmq4.sh" umount-unused
  fi
  rm -rf "$STATE"
  log "stopped"
}

kill_node() {
  local n="$1" pid
  pid="$(node_pid "$n")" || die "node $n is not running"
  kill -9 "$pid"
  # epmd stays: a restart registers with it again.
  for _ in $(seq 1 50); do node_pid "$n" >/dev/null || break; sleep 0.1; done
  log "killed node $n ($(node_name "$n"), pid $pid)"
}

restart_node() {
  local n="$1"
  start_node "$n"
  wait_node "$n"
  log "node $n is back"
}

# Node N cannot reach the other nodes, nor they it (routes dropped on both sides); the
# bridge, the front and every client still reach all three.
partition() {
  local n="$1" m
  for m in 1 2 3; do
    [[ "$m" == "$n" ]] && continue
    ip -n "$(node_ns "$n")" route replace blackhole "$(node_ip "$m")/32"
    ip -n "$(node_ns "$m")" route replace blackhole "$(node_ip "$n")/32"
  done
  log "partitioned node $n from the others"
}

heal() {
  local n m
  for n in 1 2 3; do
    for m in 1 2 3; do
      ip -n "$(node_ns "$n")" route del blackhole "$(node_ip "$m")/32" 2>/dev/null || true
    done
  done
  log "healed"
}

case "${1:-}" in
  start) start "${2:-3.10}" ;;
  stop) stop ;;
  kill) check_n "${2:-}"; kill_node "$2" ;;
  restart) check_n "${2:-}"; restart_node "$2" ;;
  partition) check_n "${2:-}"; partition "$2" ;;
  heal) heal ;;
  wait) version >/dev/null; for n in 1 2 3; do wait_node "$n"; done; wait_cluster; log "3 nodes running" ;;
  attach) [[ $# -eq 2 ]] || usage; attach "$2" ;;
  ctl) check_n "${2:-}"; n="$2"; shift 2; ctl "$n" "$@" ;;
  status) version >/dev/null; print_status ;;
  *) usage ;;
esac
