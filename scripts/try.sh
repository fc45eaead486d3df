#!/usr/bin/env bash
# The main job of dlq-operator on local defaults, without a cluster: a local RabbitMQ, the
# build, the examples' topology, the operator running in the background, and one message
# failed by a consumer (examples/retry_demo/main.rs, written with the project's client
# library) through every retry tier into the dead-letter queue; then the same with a
# consumer in plain Python that only rejects (examples/router/reject.py, pika), retried by
# the operator's retry router (router mode, examples/try/router-demo.yaml); then what
# `dlq inspect` and the operator's metrics say about them.
#
# For a fresh Debian 12 machine as root with a Rust toolchain from rustup. Idempotent: a
# second run re-applies (nothing to write), and its demo messages join the first ones in the
# dead-letter queues. Python 3 with venv (Debian: python3-venv) is installed if missing,
# and pika into .venv. Exits non-zero on the first failure; the background operator is
# stopped on exit either way.
#
#   bash scripts/try.sh                    # metrics on 127.0.0.1:18181
#   TRY_METRICS_PORT=19000 bash scripts/try.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${TRY_METRICS_PORT:-18181}"
TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
MANIFESTS=(-f examples/ -f examples/try/)
DEMO=retry-demo
ROUTER_DEMO=router-demo
# pika for the router demo's consumer: the pin of requirements-dev.txt if it has one.
PIKA="$(grep -E '^pika==' requirements-dev.txt 2>/dev/null | head -1 || true)"
PIKA="${PIKA:-pika==1.4.4}"
STARTED=$SECONDS

step() { printf '\n=== %s\n' "$*"; }
fail() { printf 'try.sh: %s\n' "$*" >&2; exit 1; }

OPERATOR_PID=""
OPERATOR_LOG="$(mktemp /tmp/dlq-try-operator.XXXXXX)"
stop_operator() {
  if [ -n "$OPERATOR_PID" ] && kill -0 "$OPERATOR_PID" 2>/dev/null; then
    kill -TERM "$OPERATOR_PID" 2>/dev/null || true
    wait "$OPERATOR_PID" 2>/dev/null || true
    echo "(stopped the background operator, pid $OPERATOR_PID; its log: $OPERATOR_LOG)"
  fi
}
trap stop_operator EXIT

step "1/7 RabbitMQ on 127.0.0.1 (scripts/ensure-rabbitmq.sh: installs and starts it if there is none)"
command -v cargo >/dev/null 2>&1 || fail "cargo is missing: install a Rust toolchain with rustup (https://rustup.rs)"
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
bash scripts/ensure-rabbitmq.sh

step "2/7 build (cargo build --locked --bins --examples; the first build takes several minutes), and $PIKA in .venv"
cargo build --locked --bins --examples
export PATH="$TARGET_DIR/debug:$PATH"
command -v dlq-operator >/dev/null 2>&1 || fail "no dlq-operator in $TARGET_DIR/debug after the build"
# Debian's python3 makes a venv without pip unless python3-venv is installed: check pip.
if [ ! -x .venv/bin/pip ]; then
  command -v python3 >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null; }
  python3 -m venv --clear .venv >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear .venv
  }
fi
.venv/bin/pip install -q --disable-pip-version-check "$PIKA"

step "3/7 the topology of examples/ and examples/try/ (dlq-operator apply ${MANIFESTS[*]})"
# One summary line per DeadLetterQueue; run the command yourself for every object's line.
dlq-operator apply "${MANIFESTS[@]}" | grep -E '^(DeadLetterQueue |  => |[0-9]+ DeadLetterQueue)|: (conflict|shadowed|failed|draining|retained|retired)'

step "4/7 the operator in the background, with the retry router of router-demo (dlq-operator run --standalone ${MANIFESTS[*]} --metrics-bind-address 127.0.0.1:$PORT)"
if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then
  fail "something already listens on 127.0.0.1:$PORT: stop it or set TRY_METRICS_PORT"
fi
dlq-operator run --standalone "${MANIFESTS[@]}" --metrics-bind-address "127.0.0.1:$PORT" \
  >"$OPERATOR_LOG" 2>&1 &
OPERATOR_PID=$!
for _ in $(seq 1 60); do
  curl -fsS -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break
  kill -0 "$OPERATOR_PID" 2>/dev/null || { cat "$OPERATOR_LOG" >&2; fail "the operator exited"; }
  sleep 0.5
done
curl -fsS -o /dev/null "http://127.0.0.1:$PORT/readyz" || { cat "$OPERATOR_LOG" >&2; fail "the operator is not ready after 30 s"; }
echo "pid $OPERATOR_PID, ready: http://127.0.0.1:$PORT/metrics (log: $OPERATOR_LOG)"

step "5/7 one order message failed by a consumer through every retry tier (cargo run --locked --example retry_demo)"
DEMO_OUT="$(mktemp /tmp/dlq-try-demo.XXXXXX)"
cargo run --locked --quiet --example retry_demo -- --name "$DEMO" "${MANIFESTS[@]}" | tee "$DEMO_OUT"
# Its last line: "<queue> holds N message(s) …", counted by AMQP (no statistics lag).
DEAD="$(sed -n 's/.* holds \([0-9]*\) message(s).*/\1/p' "$DEMO_OUT" | tail -1)"
rm -f "$DEMO_OUT"
[ -n "$DEAD" ] || fail "the demo did not report the dead-letter queue's depth"

step "6/7 what the operator sees: dlq-operator dlq inspect, then /metrics"
dlq-operator dlq inspect --standalone "${MANIFESTS[@]}" --name "$DEMO" --sample 1
# The operator polls every 2 s (spec.monitoring.interval of the demo) through the management
# API, whose counts lag by the broker's statistics interval (5 s by default).
depth_line() {
  curl -fsS "http://127.0.0.1:$PORT/metrics" |
    grep -E "^dlq_queue_depth\{.*name=\"$DEMO\".*role=\"dead_letter\"" || true
}
seen=""
for _ in $(seq 1 60); do
  seen="$(depth_line)"; seen="${seen##* }"
  [ "$seen" = "$DEAD" ] && break
  sleep 0.5
done
[ "$seen" = "$DEAD" ] || fail "after 30 s the operator's metrics show ${seen:-no} dead letters for $DEMO, not $DEAD"
echo
echo "curl -s 127.0.0.1:$PORT/metrics | grep 'name=\"$DEMO\"'"
curl -fsS "http://127.0.0.1:$PORT/metrics" | grep -E "^dlq_.*name=\"$DEMO\""
echo
echo "the operator's last depth line for $DEMO:"
grep "default/$DEMO: source=" "$OPERATOR_LOG" | tail -1

step "7/7 router mode: a consumer in plain Python that only rejects (.venv/bin/python examples/router/reject.py), retried by the operator's retry router"
# The operator started a retry router for router-demo (spec.router.enabled) after its
# first apply: wait until it consumes the inbox router-demo.router. Without one, rejected
# messages would wait there, nothing lost.
router_consuming() {
  curl -fsS "http://127.0.0.1:$PORT/metrics" |
    grep -E "^dlq_router_consuming\{.*name=\"$ROUTER_DEMO\".*\} 1$" >/dev/null
}
for _ in $(seq 1 60); do router_consuming && break; sleep 0.5; done
router_consuming || { cat "$OPERATOR_LOG" >&2; fail "the retry router of $ROUTER_DEMO does not consume its inbox after 30 s"; }
echo "retry router of default/$ROUTER_DEMO: consuming $ROUTER_DEMO.router (dlq_router_consuming 1)"
.venv/bin/python examples/router/reject.py --queue "$ROUTER_DEMO" --publish 1 \
  --until-dead-letter "$ROUTER_DEMO.dlq" --timeout 60
dlq-operator dlq inspect --standalone "${MANIFESTS[@]}" --name "$ROUTER_DEMO" --sample 1
echo
echo "curl -s 127.0.0.1:$PORT/metrics | grep '^dlq_router_.*name=\"$ROUTER_DEMO\"'    # what the retry router did"
curl -fsS "http://127.0.0.1:$PORT/metrics" | grep -E "^dlq_router_.*name=\"$ROUTER_DEMO\""

stop_operator
OPERATOR_PID=""
cat <<EOF

=== done in $((SECONDS - STARTED)) s. What to try next (export PATH="$TARGET_DIR/debug:\$PATH" first):
  dlq-operator render -f examples/rabbitmq-secret.yaml -f examples/try/      # the plan behind the demo
  dlq-operator dlq replay --standalone ${MANIFESTS[*]} --name $DEMO --dry-run  # what a replay would send back
  dlq-operator run --standalone ${MANIFESTS[*]} --metrics-bind-address 127.0.0.1:$PORT   # the operator in the foreground
  cargo run --locked --example retry_demo                                    # another message, with the operator above
  .venv/bin/python examples/router/reject.py --publish 1 --report-class Validation --until-dead-letter $ROUTER_DEMO.dlq   # a failure reported with its class, with the operator above
  dlq-operator router --standalone ${MANIFESTS[*]} --metrics-bind-address 127.0.0.1:$PORT   # the retry routers alone, instead of the operator (docs/ROUTER.md)
  dlq-operator console --standalone ${MANIFESTS[*]}     # the dead letters in a browser: open the printed link (docs/CONSOLE.md)
  docs/ROUTER.md (router mode, and recipes for Python, Node, Java and Go consumers),
  docs/STANDALONE.md (running without a cluster), docs/REPLAY.md (replaying dead letters),
  docs/INSTALL.md (a cluster with Helm), docs/REFERENCE.md (every field and command)
EOF
