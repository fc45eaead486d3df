#!/usr/bin/env bash
# A real Kubernetes v1.20.2 API server (kube-apiserver + etcd) on 127.0.0.1, built from
# Debian 12 (bookworm) packages. There is no kubelet: objects are stored and validated,
# nothing runs. Used to check the CRDs (structural schema, defaults, min/max/pattern,
# printer columns, status subresource) against a real server; 1.20 does not enforce CEL
# (`x-kubernetes-validations`), and its kubectl must apply the CRDs with --validate=false.
#
#   scripts/kube-apiserver.sh build        # once; ~8 min on 2 cores, ~2-6 GB under the cache
#   scripts/kube-apiserver.sh start DIR    # certs, etcd, kube-apiserver; writes DIR/kubeconfig
#   scripts/kube-apiserver.sh stop DIR     # stops what `start DIR` started
#   scripts/kube-apiserver.sh restart-apiserver DIR   # kube-apiserver only, same port and etcd
#   scripts/kube-apiserver.sh kubectl DIR ARGS...   # the built kubectl with DIR/kubeconfig
#
# Environment:
#   DLQ_KUBE_CACHE   build trees and binaries (default /var/cache/dlq-kube); binaries in bin/
#   DLQ_KUBE_ETCD_PORT, DLQ_KUBE_ETCD_PEER_PORT, DLQ_KUBE_APISERVER_PORT
#                    preferred ports (default 2379, 2380, 6443); if one is taken, the next
#                    free port above it is used. The ports in use are written to DIR/ports.
# `build` needs root (apt-get). `start`/`stop` do not.
set -euo pipefail

CACHE="${DLQ_KUBE_CACHE:-/var/cache/dlq-kube}"
BIN="$CACHE/bin"
K8S_VERSION="v1.20.2"
SRC_PKG="kubernetes"
SRC_DIR="$CACHE/src/kubernetes-1.20.2"
GOROOT_119="/usr/lib/go-1.19"
REFLECT2_SRC="/usr/share/gocode/src/github.com/modern-go/reflect2"
APT_PACKAGES=(golang-1.19-go golang-1.19-src golang-github-modern-go-reflect2-dev
  rsync etcd-server openssl curl make gcc libc6-dev)
SA_ISSUER="https://kubernetes.default.svc.cluster.local"

log() { printf '[kube-apiserver.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------- build

have_binaries() { [[ -x "$BIN/kube-apiserver" && -x "$BIN/kubectl" ]]; }

ensure_deb_src() {
  # Is there already a deb-src entry for bookworm (one-line or deb822 format)?
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    if [[ "$f" == *.sources ]]; then
      # deb822: a stanza whose Types has deb-src and whose Suites has bookworm.
      if awk 'BEGIN{RS=""} /(^|\n)Types:[^\n]*deb-src/ && /(^|\n)Suites:[^\n]*bookworm([ \n]|$)/ && !/(^|\n)Enabled: *no/ {found=1} END{exit !found}' "$f"; then
        return 0
      fi
    elif grep -Eq '^[[:space:]]*deb-src[[:space:]].*[[:space:]]bookworm([[:space:]]|$)' "$f"; then
      return 0
    fi
  done
  log "adding deb-src twins of the bookworm deb entries: /etc/apt/sources.list.d/dlq-kube-src.*"
  # deb822 stanzas: copy each bookworm `Types: deb` stanza as `Types: deb-src`.
  {
    echo "# Added by dlq-operator scripts/kube-apiserver.sh (source package kubernetes)."
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f "$f" && "$f" != */dlq-kube-src.sources ]] || continue
      awk 'BEGIN{RS=""; ORS="\n\n"}
           /(^|\n)Types:[^\n]*deb([ \n]|$)/ && /(^|\n)Suites:[^\n]*bookworm/ && !/(^|\n)Enabled: *no/ {
             gsub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f"
    done
  } > /etc/apt/sources.list.d/dlq-kube-src.sources
  # One-line format: `deb …` → `deb-src …`.
  grep -hE '^[[:space:]]*deb[[:space:]].*[[:space:]]bookworm' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed -E 's/^([[:space:]]*)deb[[:space:]]/\1deb-src /' > /etc/apt/sources.list.d/dlq-kube-src.list || true
  [[ -s /etc/apt/sources.list.d/dlq-kube-src.list ]] || rm -f /etc/apt/sources.list.d/dlq-kube-src.list
  grep -qs 'deb-src' /etc/apt/sources.list.d/dlq-kube-src.sources /etc/apt/sources.list.d/dlq-kube-src.list \
    || die "no bookworm deb entry found to derive a deb-src entry from"
  APT_UPDATED=0
}

cmd_build() {
  if have_binaries; then
    log "binaries already in $BIN (kube-apiserver, kubectl): nothing to build"
    log "  (delete $BIN to rebuild)"
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "build needs root (apt-get install); the binaries are not in $BIN yet"
  local start_ts=$SECONDS
  mkdir -p "$CACHE/src" "$BIN"

  # 1. Debian packages.
  export DEBIAN_FRONTEND=noninteractive
  APT_UPDATED=1
  ensure_deb_src
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [[ ${#missing[@]} -gt 0 || $APT_UPDATED -eq 0 ]]; then
    log "apt-get update"
    apt-get update -qq
  fi
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing: ${missing[*]}"
    # No init system here: keep etcd-server's postinst from trying to start the service.
    local rc_created=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      rc_created=1
    fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || {
      [[ $rc_created -eq 1 ]] && rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
    [[ $rc_created -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
  fi
  [[ -x "$GOROOT_119/bin/go" ]] || die "$GOROOT_119/bin/go missing after install"
  [[ -d "$REFLECT2_SRC" ]] || die "$REFLECT2_SRC missing (golang-github-modern-go-reflect2-dev)"

  # 2. The `kubernetes` source package: its orig tarball is the upstream v1.20.2 tree.
  if [[ ! -f "$SRC_DIR/.dlq-extracted" ]]; then
    local dl="$CACHE/src/download" orig
    mkdir -p "$dl"
    # apt downloads as user _apt when it can write there (otherwise it warns and uses root).
    id _apt >/dev/null 2>&1 && chown _apt "$dl" || true
    orig=$(find "$dl" -maxdepth 1 -name "${SRC_PKG}_*.orig.tar.*" ! -name '*.asc' | head -n1)
    if [[ -z "$orig" ]]; then
      log "apt-get source --download-only $SRC_PKG (into $dl)"
      (cd "$dl" && apt-get source --download-only -qq "$SRC_PKG") \
        || { apt-get update -qq && (cd "$dl" && apt-get source --download-only -qq "$SRC_PKG"); } \
        || die "apt-get source failed (is there a deb-src entry for bookworm?)"
      orig=$(find "$dl" -maxdepth 1 -name "${SRC_PKG}_*.orig.tar.*" ! -name '*.asc' | head -n1)
      [[ -n "$orig" ]] || die "no ${SRC_PKG}_*.orig.tar.* in $dl"
    fi
    log "extracting $(basename "$orig") into $SRC_DIR"
    rm -rf "$SRC_DIR"
    mkdir -p "$SRC_DIR"
    tar -xf "$orig" -C "$SRC_DIR" --strip-components=1
    [[ -d "$SRC_DIR/cmd/kube-apiserver" && -d "$SRC_DIR/vendor" ]] \
      || die "$orig does not look like the upstream tree (no cmd/kube-apiserver or vendor/)"
    touch "$SRC_DIR/.dlq-extracted"
  else
    log "source tree already extracted: $SRC_DIR"
  fi

  # 3. reflect2 1.0.1 (vendored) segfaults under Go >= 1.18: use Debian's 1.0.2.
  local vr="$SRC_DIR/vendor/github.com/modern-go/reflect2"
  if [[ ! -f "$vr/.dlq-reflect2-1.0.2" ]]; then
    log "replacing vendor/github.com/modern-go/reflect2 with Debian's reflect2 1.0.2"
    find "$vr" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) -delete
    find "$REFLECT2_SRC" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
      -exec cp -t "$vr" {} +
    touch "$vr/.dlq-reflect2-1.0.2"
  fi

  # 4. Build with upstream make (it runs the code generators first).
  local buildlog="$CACHE/build.log"
  log "building kube-apiserver and kubectl (make; log: $buildlog) — several minutes"
  (
    cd "$SRC_DIR"
    unset GOFLAGS GOPATH GO111MODULE GOBIN
    export GOROOT="$GOROOT_119" PATH="$GOROOT_119/bin:$PATH" GOPROXY=off \
      GOCACHE="$CACHE/go-build" \
      KUBE_BUILD_PLATFORMS=linux/amd64 KUBE_GIT_VERSION="$K8S_VERSION" KUBE_GIT_MAJOR=1 \
      KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
    make WHAT="cmd/kube-apiserver cmd/kubectl" GOFLAGS="-p=$(nproc)"
  ) >"$buildlog" 2>&1 || { tail -n 40 "$buildlog" >&2; die "make failed; see $buildlog"; }

  local out="$SRC_DIR/_output/bin"
  [[ -x "$out/kube-apiserver" && -x "$out/kubectl" ]] || die "make did not produce $out/{kube-apiserver,kubectl}"
  install -m 0755 "$out/kube-apiserver" "$out/kubectl" "$BIN/"
  log "built in $((SECONDS - start_ts)) s: $("$BIN/kube-apiserver" --version), kubectl $("$BIN/kubectl" version --client --short 2>/dev/null || true)"
  log "binaries: $BIN/kube-apiserver $BIN/kubectl"
}

# ---------------------------------------------------------------------------------- start

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# First port >= $1 that nobody listens on and that is not in the list of already chosen ones.
pick_port() {
  local p=$1; shift
  local taken=" $* "
  while port_in_use "$p" || [[ "$taken" == *" $p "* ]]; do
    p=$((p + 1))
    [[ $p -lt 65535 ]] || die "no free port found"
  done
  echo "$p"
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# The pid in DIR/pids for NAME, if that process is still the one we started.
running_pid() {
  local dir=$1 name=$2 pid comm
  [[ -f "$dir/pids" ]] || return 1
  pid=$(awk -v n="$name" '$1==n {print $2}' "$dir/pids")
  pid_alive "$pid" || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
  [[ "$comm" == "$name"* ]] || return 1
  echo "$pid"
}

make_certs() {
  local pki=$1
  mkdir -p "$pki"
  chmod 700 "$pki"
  if [[ ! -f "$pki/ca.crt" || ! -f "$pki/ca.key" ]]; then
    log "creating CA ($pki/ca.crt)"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj "/CN=dlq-e2e-ca" 2>/dev/null
    rm -f "$pki/apiserver.crt"
  fi
  if [[ ! -f "$pki/apiserver.crt" || ! -f "$pki/apiserver.key" ]]; then
    log "creating serving certificate for 127.0.0.1/localhost ($pki/apiserver.crt)"
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$pki/apiserver.key" \
      -out "$pki/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
      "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" > "$pki/apiserver.ext"
    openssl x509 -req -sha256 -days 3650 -in "$pki/apiserver.csr" -CA "$pki/ca.crt" \
      -CAkey "$pki/ca.key" -CAcreateserial -extfile "$pki/apiserver.ext" \
      -out "$pki/apiserver.crt" 2>/dev/null
    rm -f "$pki/apiserver.csr"
  fi
  if [[ ! -f "$pki/sa.key" || ! -f "$pki/sa.pub" ]]; then
    log "creating service-account key pair ($pki/sa.key, sa.pub)"
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
}

print_export() {
  local dir=$1
  echo "export DLQ_E2E_KUBECONFIG=$dir/kubeconfig"
}

wait_http() { # URL SECONDS CURL-ARGS...
  local url=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs * 4; i++)); do
    if curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; then return 0; fi
    sleep 0.25
  done
  return 1
}

# Starts kube-apiserver of DIR on API_PORT over etcd on ETCD_PORT and waits for /readyz
# (up to 90 s); its pid is appended to DIR/pids.
launch_apiserver() {
  local dir=$1 etcd_port=$2 api_port=$3 token=$4 api_pid
  log "starting kube-apiserver (log $dir/kube-apiserver.log)"
  setsid "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --insecure-port=0 \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" --token-auth-file="$dir/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer="$SA_ISSUER" \
    --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --api-audiences="$SA_ISSUER" \
    --service-cluster-ip-range=10.0.0.0/24 --endpoint-reconciler-type=none \
    >>"$dir/kube-apiserver.log" 2>&1 </dev/null &
  api_pid=$!
  echo "kube-apiserver $api_pid" >> "$dir/pids"

  if ! wait_http "https://127.0.0.1:$api_port/readyz" 90 \
      --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $token"; then
    tail -n 40 "$dir/kube-apiserver.log" >&2
    cmd_stop "$dir"
    die "kube-apiserver /readyz did not answer ok within 90 s (log: $dir/kube-apiserver.log)"
  fi
  log "kube-apiserver ready (pid $api_pid): https://127.0.0.1:$api_port"
}

cmd_start() {
  [[ $# -eq 1 ]] || usage
  local dir
  mkdir -p "$1"
  dir=$(cd "$1" && pwd)
  have_binaries || die "no binaries in $BIN: run '$0 build' first"
  command -v etcd >/dev/null || die "etcd not found (Debian package etcd-server; '$0 build' installs it)"
  command -v openssl >/dev/null || die "openssl not found"
  command -v curl >/dev/null || die "curl not found"

  local etcd_pid api_pid
  etcd_pid=$(running_pid "$dir" etcd || true)
  api_pid=$(running_pid "$dir" kube-apiserver || true)
  if [[ -n "$etcd_pid" && -n "$api_pid" && -f "$dir/kubeconfig" ]]; then
    log "already running from $dir (etcd $etcd_pid, kube-apiserver $api_pid)"
    print_export "$dir"
    return 0
  fi
  if [[ -n "$etcd_pid" || -n "$api_pid" ]]; then
    log "half-running instance in $dir: stopping it first"
    cmd_stop "$dir"
  fi

  make_certs "$dir/pki"
  local token
  if [[ -f "$dir/token" ]]; then
    token=$(cat "$dir/token")
  else
    token=$(openssl rand -hex 24)
    (umask 077 && printf '%s\n' "$token" > "$dir/token")
  fi
  (umask 077 && printf '%s,dlq-e2e-admin,dlq-e2e-admin,"system:masters"\n' "$token" > "$dir/tokens.csv")

  local etcd_port peer_port api_port
  etcd_port=$(pick_port "${DLQ_KUBE_ETCD_PORT:-2379}")
  peer_port=$(pick_port "${DLQ_KUBE_ETCD_PEER_PORT:-2380}" "$etcd_port")
  api_port=$(pick_port "${DLQ_KUBE_APISERVER_PORT:-6443}" "$etcd_port" "$peer_port")
  printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' "$etcd_port" "$peer_port" "$api_port" > "$dir/ports"
  log "ports: etcd $etcd_port (peer $peer_port), kube-apiserver $api_port (all on 127.0.0.1)"
  : > "$dir/pids"

  # etcd, fresh data dir every start.
  rm -rf "$dir/etcd-data"
  log "starting etcd (data $dir/etcd-data, log $dir/etcd.log)"
  setsid etcd --name dlq-e2e --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "dlq-e2e=http://127.0.0.1:$peer_port" \
    >"$dir/etcd.log" 2>&1 </dev/null &
  etcd_pid=$!
  echo "etcd $etcd_pid" >> "$dir/pids"
  if ! wait_http "http://127.0.0.1:$etcd_port/health" 30; then
    tail -n 30 "$dir/etcd.log" >&2
    cmd_stop "$dir"
    die "etcd did not become healthy within 30 s (log: $dir/etcd.log)"
  fi
  log "etcd ready (pid $etcd_pid)"

  : > "$dir/kube-apiserver.log"
  launch_apiserver "$dir" "$etcd_port" "$api_port" "$token"

  (umask 077 && cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dlq-e2e
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 < "$dir/pki/ca.crt")
users:
- name: dlq-e2e-admin
  user:
    token: $token
contexts:
- name: dlq-e2e
  context:
    cluster: dlq-e2e
    user: dlq-e2e-admin
    namespace: default
current-context: dlq-e2e
EOF
  )
  log "kubeconfig: $dir/kubeconfig   kubectl: $BIN/kubectl   pids: $dir/pids"
  print_export "$dir"
}

# ----------------------------------------------------------------------------------- stop

# SIGTERM to process PID (NAME), SIGKILL if it has not exited 15 s later.
stop_pid() {
  local name=$1 pid=$2 i
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.25
  done
  log "$name (pid $pid) did not exit after 15 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage
  local dir=$1 name pid
  if [[ ! -f "$dir/pids" ]]; then
    log "nothing to stop: no $dir/pids"
    return 0
  fi
  # Stop in reverse start order: kube-apiserver first, then etcd.
  for name in kube-apiserver etcd; do
    pid=$(running_pid "$dir" "$name" || true)
    if [[ -z "$pid" ]]; then
      log "$name: not running"
      continue
    fi
    stop_pid "$name" "$pid"
  done
  rm -f "$dir/pids"
  log "stopped"
}

cmd_kubectl() {
  [[ $# -ge 1 ]] || usage
  local dir=$1; shift
  [[ -f "$dir/kubeconfig" ]] || die "no $dir/kubeconfig: run '$0 start $dir' first"
  exec "$BIN/kubectl" --kubeconfig "$dir/kubeconfig" "$@"
}

# ------------------------------------------------------------------------- restart-apiserver

# Stops the kube-apiserver of DIR (SIGTERM, as a rolling restart does) and starts it again
# on the same port over the same etcd: stored objects stay, every watch is cut.
cmd_restart_apiserver() {
  [[ $# -eq 1 ]] || usage
  local dir=$1 pid etcd_port api_port
  running_pid "$dir" etcd >/dev/null || die "no etcd running from $dir: run '$0 start $dir' first"
  etcd_port=$(awk -F= '$1=="ETCD_PORT" {print $2}' "$dir/ports")
  api_port=$(awk -F= '$1=="APISERVER_PORT" {print $2}' "$dir/ports")
  pid=$(running_pid "$dir" kube-apiserver || true)
  [[ -z "$pid" ]] || stop_pid kube-apiserver "$pid"
  sed -i '/^kube-apiserver /d' "$dir/pids"
  launch_apiserver "$dir" "$etcd_port" "$api_port" "$(cat "$dir/token")"
}

# ----------------------------------------------------------------------------------- main

[[ $# -ge 1 ]] || usage
sub=$1; shift
case "$sub" in
  build) [[ $# -eq 0 ]] || usage; cmd_build ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  restart-apiserver) cmd_restart_apiserver "$@" ;;
  kubectl) cmd_kubectl "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
