#!/usr/bin/env bash
# A real RabbitMQ 4.0.5 (Debian 13 "trixie"'s package, Erlang 27) beside the host's 3.10
# broker: a trixie root made with debootstrap, started inside a network namespace of its
# own, where it owns 127.0.0.1:5672 / 15672 / 15692 like a normal install. Anything run
# with `scripts/rabbitmq4.sh exec NS CMD…` (the test suite included) sees the 4.0 broker at
# the usual addresses. The host's apt sources are never touched.
#
#   scripts/rabbitmq4.sh build           # once; ~75 s and ~500 MB, cached
#   scripts/rabbitmq4.sh start NS        # network namespace NS, broker started, waits for it
#   scripts/rabbitmq4.sh stop NS         # stops the broker and removes NS
#   scripts/rabbitmq4.sh exec NS CMD...  # runs CMD inside NS
#   scripts/rabbitmq4.sh ctl NS ARGS...  # rabbitmqctl of the 4.0 broker
#   scripts/rabbitmq4.sh mount           # the root's /proc, /dev, /dev/pts (for other users
#                                        # of the root: scripts/rabbitmq-cluster.sh)
#   scripts/rabbitmq4.sh umount-unused   # unmounts them unless a process still runs in it
#
# Environment:
#   DLQ_RABBITMQ4_CACHE   the root (default /var/cache/dlq-rabbitmq4; the root is ROOT/root)
#   DLQ_RABBITMQ4_MIRROR  Debian mirror (default http://deb.debian.org/debian)
# Needs root (debootstrap, chroot, ip netns, mounts).
set -euo pipefail

CACHE="${DLQ_RABBITMQ4_CACHE:-/var/cache/dlq-rabbitmq4}"
ROOT="$CACHE/root"
MIRROR="${DLQ_RABBITMQ4_MIRROR:-http://deb.debian.org/debian}"
NOFILE=20000

log() { printf '[rabbitmq4.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

built() { [[ -x "$ROOT/usr/sbin/rabbitmq-server" && -f "$ROOT/.dlq-complete" ]]; }

# Mounts the root needs while a broker runs in it (idempotent).
mount_root() {
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
  mountpoint -q "$ROOT/dev/pts" || mount --bind /dev/pts "$ROOT/dev/pts"
}

# Whether a process other than this script's runs inside the root (a broker of `start`,
# or a cluster node of scripts/rabbitmq-cluster.sh): its mounts must stay.
root_in_use() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$ROOT" ]] && return 0
  done
  return 1
}

umount_root() {
  local m
  if root_in_use; then
    log "the root is still in use: its mounts stay"
    return 0
  fi
  for m in dev/pts dev proc; do
    if mountpoint -q "$ROOT/$m"; then umount "$ROOT/$m" || umount -l "$ROOT/$m"; fi
  done
}

build() {
  if built; then
    log "cached: $ROOT ($(chroot "$ROOT" dpkg-query -W -f '${Version}' rabbitmq-server))"
    return 0
  fi
  command -v debootstrap >/dev/null 2>&1 || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
  }
  mkdir -p "$CACHE"
  if [[ ! -x "$ROOT/usr/bin/apt-get" ]]; then
    rm -rf "$ROOT"
    log "debootstrap trixie into $ROOT"
    debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || die "debootstrap failed: $CACHE/debootstrap.log"
  fi
  # No init system in the root: keep the package's postinst from starting the service.
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  mount_root
  log "installing rabbitmq-server in the root"
  chroot "$ROOT" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server curl' \
    >"$CACHE/install.log" 2>&1 || { umount_root; die "apt-get in the root failed: $CACHE/install.log"; }
  echo 'NODENAME=rabbit@localhost' > "$ROOT/etc/rabbitmq/rabbitmq-env.conf"
  echo 'listeners.tcp.local = 127.0.0.1:5672' > "$ROOT/etc/rabbitmq/rabbitmq.conf"
  # Debian's wrapper starts the node through `su rabbitmq`, whose pam_limits would reset
  # the soft open-files limit to 1024 (too few for quorum queues) without this line.
  printf 'rabbitmq soft nofile %s\nrabbitmq hard nofile %s\n' "$NOFILE" "$NOFILE" \
    > "$ROOT/etc/security/limits.d/rabbitmq.conf"
  chroot "$ROOT" rabbitmq-plugins enable --offline rabbitmq_management rabbitmq_prometheus \
    rabbitmq_shovel rabbitmq_shovel_management >/dev/null
  umount_root
  touch "$ROOT/.dlq-complete"
  log "built: $ROOT ($(chroot "$ROOT" dpkg-query -W -f '${Version}' rabbitmq-server))"
}

in_ns() { local ns="$1"; shift; ip netns exec "$ns" "$@"; }

start() {
  local ns="$1"
  built || die "not built: run '$0 build' first"
  if ! ip netns list | awk '{print $1}' | grep -qxF -- "$ns"; then
    ip netns add "$ns"
  fi
  in_ns "$ns" ip link set lo up
  mount_root
  if in_ns "$ns" curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null 2>&1; then
    log "already running in $ns"
    return 0
  fi
  log "starting RabbitMQ 4 in network namespace $ns"
  in_ns "$ns" chroot "$ROOT" sh -c "ulimit -n $NOFILE; rabbitmq-server -detached" >/dev/null 2>&1
  local _
  for _ in $(seq 1 120); do
    if in_ns "$ns" curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null 2>&1; then
      local pid p
      pid=""
      for p in $(ip netns pids "$ns"); do
        [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == beam.smp ]] && pid="$p"
      done
      log "ready: RabbitMQ $(ctl "$ns" -q version 2>/dev/null || echo '?') in $ns (open files: $(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null || echo '?'))"
      return 0
    fi
    sleep 1
  done
  die "the 4.0 broker's management API did not answer in $ns within 120 s"
}

stop() {
  local ns="$1"
  if ip netns list | awk '{print $1}' | grep -qxF -- "$ns"; then
    ctl "$ns" -q stop >/dev/null 2>&1 || true
    # epmd and anything else left in the namespace.
    local p
    for p in $(ip netns pids "$ns"); do kill "$p" 2>/dev/null || true; done
    sleep 1
    for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns"
  fi
  umount_root
  log "stopped $ns"
}

ctl() { local ns="$1"; shift; in_ns "$ns" chroot "$ROOT" rabbitmqctl "$@"; }

case "${1:-}" in
  build) build ;;
  start) [[ $# -eq 2 ]] || usage; start "$2" ;;
  stop) [[ $# -eq 2 ]] || usage; stop "$2" ;;
  exec) [[ $# -ge 3 ]] || usage; ns="$2"; shift 2; in_ns "$ns" "$@" ;;
  ctl) [[ $# -ge 2 ]] || usage; ns="$2"; shift 2; ctl "$ns" "$@" ;;
  mount) built || die "not built: run '$0 build' first"; mount_root ;;
  umount-unused) umount_root ;;
  *) usage ;;
esac
