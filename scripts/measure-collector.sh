#!/usr/bin/env bash
# Measures what it costs to read queue depths from a local RabbitMQ when a vhost holds
# many queues: management API (full list, disable_stats + enable_queue_totals, paginated)
# versus the rabbitmq_prometheus /metrics/detailed endpoint.
#
# Usage: scripts/measure-collector.sh [N] [VHOST] [options]
#   N        number of durable classic queues to declare (default 30000)
#   VHOST    scratch vhost to create and delete (default dlq-collector-bench); never "/"
# Options:
#   --runs K        measurements per variant (default 5)
#   --threads T     parallel HTTP connections used to declare the queues (default 8)
#   --every M       publish one message to every M-th queue (default 100; 0 = none)
#   --page-size P   page size for the paginated variant (default 500, the API maximum)
#   --settle S      seconds to wait for statistics after declaring (default 10)
#   --save-dir DIR  where the last successful raw responses and the per-request samples
#                   (collector-samples.tsv) are kept (default /tmp/notes)
#   --max-time S    client timeout per HTTP request, seconds (default 600; note the broker's
#                   management listener closes requests that run longer than its idle timeout)
#   --no-cleanup    keep the vhost at the end (it is deleted by default, also on failure)
#   --cleanup       only delete VHOST (e.g. left over from an interrupted run) and exit
#   --force         proceed even if VHOST already exists (it will be deleted at the end)
#
# Needs only bash, curl and the python3 standard library. Talks to 127.0.0.1:15672
# (management) and 127.0.0.1:15692 (prometheus) as guest/guest; override with
# RMQ_MGMT_URL, RMQ_PROM_URL, RMQ_USER, RMQ_PASS. Reads the broker's CPU time and RSS
# from /proc, so it must run on the broker's host.
set -euo pipefail

CMDLINE="$0${*:+ $*}"
MGMT="${RMQ_MGMT_URL:-http://127.0.0.1:15672}"
PROM="${RMQ_PROM_URL:-http://127.0.0.1:15692}"
RUSER="${RMQ_USER:-guest}"
RPASS="${RMQ_PASS:-guest}"

N=30000
VHOST=dlq-collector-bench
RUNS=5
THREADS=8
EVERY=100
PAGE_SIZE=500
SETTLE=10
SAVE_DIR=/tmp/notes
MAX_TIME=600
CLEANUP=1
CLEANUP_ONLY=0
FORCE=0

pos=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --every) EVERY="$2"; shift 2 ;;
    --page-size) PAGE_SIZE="$2"; shift 2 ;;
    --settle) SETTLE="$2"; shift 2 ;;
    --save-dir) SAVE_DIR="$2"; shift 2 ;;
    --max-time) MAX_TIME="$2"; shift 2 ;;
    --no-cleanup) CLEANUP=0; shift ;;
    --cleanup) CLEANUP_ONLY=1; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *)
      case $pos in
        0) N="$1" ;;
        1) VHOST="$1" ;;
        *) echo "unexpected argument: $1" >&2; exit 2 ;;
      esac
      pos=$((pos + 1)); shift ;;
  esac
done

[[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 99999 ] || { echo "N must be 1..99999" >&2; exit 2; }
if [ -z "$VHOST" ] || [ "$VHOST" = "/" ]; then
  echo "refusing to use vhost '$VHOST' (this script deletes its vhost)" >&2; exit 2
fi

log() { printf '[measure-collector %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
urlenc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
VH_ENC="$(urlenc "$VHOST")"
AUTH=(-u "$RUSER:$RPASS")

# ---- broker process: pid, CPU ticks, RSS --------------------------------------------
find_beam_pid() {
  local p
  for p in $(pgrep -f beam.smp || true); do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q rabbit; then echo "$p"; return 0; fi
  done
  return 1
}
BEAM_PID="$(find_beam_pid)" || { echo "no RabbitMQ beam.smp process found" >&2; exit 1; }
CLK_TCK="$(getconf CLK_TCK)"
cpu_ticks() { # utime + stime of the broker, in clock ticks (fields 14 and 15 of /proc/PID/stat)
  local line rest
  read -r line <"/proc/$BEAM_PID/stat"
  rest="${line##*) }"
  # shellcheck disable=SC2086
  set -- $rest
  echo $(( ${12} + ${13} ))
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$BEAM_PID/status"; }
erl_mem() { # Erlang-reported memory use (bytes), from the management API
  curl -s --max-time 30 "${AUTH[@]}" "$MGMT/api/nodes?columns=mem_used" |
    python3 -c 'import sys, json; print(json.load(sys.stdin)[0]["mem_used"])' 2>/dev/null || echo "?"
}
mb() { awk -v k="$1" 'BEGIN { printf "%.0f MiB", k / 1024 }'; }

# ---- vhost lifecycle ------------------------------------------------------------------
vhost_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 30 "${AUTH[@]}" "$MGMT/api/vhosts/$VH_ENC"; }

delete_vhost() {
  local attempt code t0 t1
  t0=$(date +%s.%N)
  for attempt in 1 2 3 4 5; do
    code="$(vhost_status)"
    if [ "$code" = 404 ]; then break; fi
    log "deleting vhost '$VHOST' (attempt $attempt)"
    curl -s -o /dev/null -w '  DELETE -> HTTP %{http_code} in %{time_total}s\n' --max-time 900 \
      "${AUTH[@]}" -X DELETE "$MGMT/api/vhosts/$VH_ENC" >&2 || log "DELETE request failed (curl exit $?)"
    # The deletion may outlive the HTTP request; wait for the vhost to disappear.
    for _ in $(seq 1 120); do
      [ "$(vhost_status)" = 404 ] && break
      sleep 2
    done
  done
  t1=$(date +%s.%N)
  if [ "$(vhost_status)" = 404 ]; then
    log "vhost '$VHOST' is gone ($(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s)"
    return 0
  fi
  log "WARNING: vhost '$VHOST' still exists; remove it with: $0 --cleanup $N '$VHOST'"
  return 1
}

if [ "$CLEANUP_ONLY" = 1 ]; then
  delete_vhost
  exit $?
fi

WORK="$(mktemp -d /tmp/measure-collector.XXXXXX)"
CREATED=0
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$CREATED" = 1 ] && [ "$CLEANUP" = 1 ]; then
    delete_vhost || rc=1
    log "broker RSS right after cleanup: $(mb "$(rss_kb)") (Erlang mem_used $(erl_mem) B)"
    sleep 15
    RSS_AFTER="$(rss_kb)"
    log "broker RSS 15 s after cleanup: $(mb "$RSS_AFTER") (Erlang mem_used $(erl_mem) B)"
  elif [ "$CREATED" = 1 ]; then
    log "--no-cleanup: vhost '$VHOST' kept; delete it with: $0 --cleanup $N '$VHOST'"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- set-up ---------------------------------------------------------------------------
curl -sf --max-time 30 "${AUTH[@]}" "$MGMT/api/overview" >/dev/null || { echo "management API not reachable at $MGMT" >&2; exit 1; }
if [ "$(vhost_status)" != 404 ]; then
  if [ "$FORCE" != 1 ]; then
    echo "vhost '$VHOST' already exists; use --force to reuse it (it will be deleted at the end) or --cleanup to delete it" >&2
    exit 1
  fi
  log "vhost '$VHOST' already exists (--force): reusing it"
fi

RSS_BEFORE="$(rss_kb)"
MEM_BEFORE="$(erl_mem)"
log "broker pid $BEAM_PID; RSS before: $(mb "$RSS_BEFORE") (Erlang mem_used $MEM_BEFORE B)"

idle_cpu_rate() { # broker CPU seconds per second over an idle window of $1 seconds
  local c0 c1
  c0=$(cpu_ticks); sleep "$1"; c1=$(cpu_ticks)
  awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v s="$1" 'BEGIN { printf "%.4f", d / hz / s }'
}
log "measuring idle broker CPU before creating queues (10 s)"
IDLE_BEFORE="$(idle_cpu_rate 10)"

CREATED=1
curl -sf -o /dev/null --max-time 30 "${AUTH[@]}" -X PUT -H 'content-type: application/json' \
  -d '{}' "$MGMT/api/vhosts/$VH_ENC"
curl -sf -o /dev/null --max-time 30 "${AUTH[@]}" -X PUT -H 'content-type: application/json' \
  -d '{"configure":".*","write":".*","read":".*"}' "$MGMT/api/permissions/$VH_ENC/$(urlenc "$RUSER")"
log "vhost '$VHOST' created; declaring $N durable classic queues with $THREADS connections"

# Declares q.00001..q.NNNNN (PUT /api/queues) over T keep-alive connections, then publishes
# one message to every M-th queue. Prints "declare_seconds publish_seconds published".
python3 - "$MGMT" "$VHOST" "$N" "$THREADS" "$EVERY" "$RUSER" "$RPASS" >"$WORK/create.out" <<'PY'
import base64, http.client, json, sys, threading, time, urllib.parse

mgmt, vhost, n, threads, every, user, pw = sys.argv[1:8]
n, threads, every = int(n), int(threads), int(every)
u = urllib.parse.urlsplit(mgmt)
host, port = u.hostname, u.port or 80
vh = urllib.parse.quote(vhost, safe="")
headers = {
    "Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode(),
    "Content-Type": "application/json",
}

class Client:
    def __init__(self):
        self.conn = None
    def request(self, method, path, body):
        for attempt in range(8):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(host, port, timeout=120)
                self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                if (r.getheader("connection") or "").lower() == "close":
                    self.conn.close(); self.conn = None
                if r.status >= 500 and attempt < 7:
                    time.sleep(0.5 * (attempt + 1)); continue
                return r.status, data
            except (http.client.HTTPException, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 7:
                    raise
                time.sleep(0.2 * (attempt + 1))

def run(paths, method, body_of, ok):
    lock = threading.Lock()
    it = iter(paths)
    done = [0]
    errors = []
    def worker():
        c = Client()
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            try:
                status, data = c.request(method, item[0], body_of(item))
                if not ok(status, data):
                    errors.append((item[0], status, data[:200]))
            except Exception as e:  # noqa: BLE001 - report and carry on
                errors.append((item[0], "exception", repr(e)))
            with lock:
                done[0] += 1
                if done[0] % 5000 == 0:
                    print(f"  {method} {done[0]}/{len(paths)}", file=sys.stderr, flush=True)
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    return errors

names = [f"q.{i:05d}" for i in range(1, n + 1)]
t0 = time.monotonic()
errs = run([(f"/api/queues/{vh}/{urllib.parse.quote(q, safe='')}", q) for q in names], "PUT",
           lambda item: b'{"durable":true,"auto_delete":false,"arguments":{}}',
           lambda s, d: s in (201, 204))
t1 = time.monotonic()
if errs:
    print(f"{len(errs)} queue declarations failed, e.g. {errs[:3]}", file=sys.stderr)
    sys.exit(1)
targets = names[every - 1::every] if every > 0 else []
perrs = run([(f"/api/exchanges/{vh}/amq.default/publish", q) for q in targets], "POST",
            lambda item: json.dumps({"properties": {"delivery_mode": 2}, "routing_key": item[1],
                                     "payload": "dlq-collector-bench", "payload_encoding": "string"}).encode(),
            lambda s, d: s == 200 and json.loads(d).get("routed") is True)
t2 = time.monotonic()
if perrs:
    print(f"{len(perrs)} publishes failed, e.g. {perrs[:3]}", file=sys.stderr)
    sys.exit(1)
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {len(targets)}")
PY
read -r DECL_S PUB_S PUBLISHED <"$WORK/create.out"
log "declared $N queues in ${DECL_S}s ($(awk -v n="$N" -v s="$DECL_S" 'BEGIN{printf "%.0f", n/s}') queues/s); published $PUBLISHED messages in ${PUB_S}s"

log "waiting ${SETTLE}s for statistics to settle"
sleep "$SETTLE"
RSS_LOADED="$(rss_kb)"
MEM_LOADED="$(erl_mem)"
log "broker RSS with $N queues: $(mb "$RSS_LOADED") (Erlang mem_used $MEM_LOADED B)"
log "measuring idle broker CPU with $N queues (10 s)"
IDLE_LOADED="$(idle_cpu_rate 10)"

# ---- measurements -------------------------------------------------------------------------
COLS="name,messages,messages_ready,messages_unacknowledged"
URL_A="$MGMT/api/queues/$VH_ENC?columns=$COLS"
URL_B="$MGMT/api/queues/$VH_ENC?columns=$COLS&disable_stats=true&enable_queue_totals=true"
URL_C="$PROM/metrics/detailed?vhost=$VH_ENC&family=queue_coarse_metrics"
URL_D="$MGMT/api/queues/$VH_ENC?page=%d&page_size=$PAGE_SIZE&columns=$COLS"
mkdir -p "$SAVE_DIR"
SAMPLES="$SAVE_DIR/collector-samples.tsv"
printf 'variant\tround\tok\twall_s\tbytes\tbroker_cpu_s\tpages\tdetail\n' >"$SAMPLES"

# One timed GET: writes the body to $2, prints "wall_seconds bytes http_code curl_exit".
timed_get() {
  local extra=() out rc=0
  [[ "$1" == "$MGMT"* ]] && extra=("${AUTH[@]}")
  out="$(curl -s --max-time "$MAX_TIME" "${extra[@]}" -o "$2" -w '%{time_total} %{size_download} %{http_code}' "$1")" || rc=$?
  echo "${out:-0 0 000} $rc"
}
ticks_to_s() { awk -v d="$1" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", d/hz}'; }

measure_one() { # variant round url savefile
  local c0 c1 out wall bytes code rc ok=1 detail="HTTP 200"
  rm -f "$WORK/body"
  c0=$(cpu_ticks)
  out="$(timed_get "$3" "$WORK/body")"
  c1=$(cpu_ticks)
  read -r wall bytes code rc <<<"$out"
  if [ "$code" != 200 ] || [ "$rc" != 0 ]; then
    ok=0; detail="HTTP $code, curl exit $rc"
    log "WARNING: variant $1 round $2 failed after ${wall}s: $detail"
  else
    mv "$WORK/body" "$4"   # keep the last successful response only
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t1\t%s\n' "$1" "$2" "$ok" "$wall" "$bytes" "$(ticks_to_s $((c1 - c0)))" "$detail" >>"$SAMPLES"
}

measure_paged() { # round; all pages of variant d, wall and bytes summed over pages
  local c0 c1 page=1 pages=1 out wall bytes code rc tw=0 tb=0 ok=1 detail="HTTP 200"
  c0=$(cpu_ticks)
  while [ "$page" -le "$pages" ]; do
    # shellcheck disable=SC2059
    out="$(timed_get "$(printf "$URL_D" "$page")" "$WORK/d.json")"
    read -r wall bytes code rc <<<"$out"
    tw=$(awk -v a="$tw" -v b="$wall" 'BEGIN{printf "%.6f", a+b}')
    tb=$((tb + bytes))
    if [ "$code" != 200 ] || [ "$rc" != 0 ]; then
      ok=0; detail="page $page: HTTP $code, curl exit $rc"
      log "WARNING: variant d round $1 failed: $detail"
      break
    fi
    if [ "$page" = 1 ]; then
      pages="$(grep -o '"page_count":[0-9]*' "$WORK/d.json" | head -1 | cut -d: -f2)"
      pages="${pages:-1}"
      cp "$WORK/d.json" "$SAVE_DIR/collector-d-page1.json"
    fi
    page=$((page + 1))
  done
  c1=$(cpu_ticks)
  [ "$ok" = 1 ] && page=$((page - 1))
  printf 'd\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$ok" "$tw" "$tb" "$(ticks_to_s $((c1 - c0)))" "$page" "$detail" >>"$SAMPLES"
}

# Rounds interleave the variants so that drifting background load hits all of them alike.
for run in $(seq 1 "$RUNS"); do
  log "round $run/$RUNS"
  measure_one a "$run" "$URL_A" "$SAVE_DIR/collector-a.json"
  measure_one b "$run" "$URL_B" "$SAVE_DIR/collector-b.json"
  measure_one c "$run" "$URL_C" "$SAVE_DIR/collector-c.txt"
  measure_paged "$run"
done
RSS_AFTER_MEAS="$(rss_kb)"
log "measuring idle broker CPU after the measurements (10 s)"
IDLE_AFTER="$(idle_cpu_rate 10)"

# ---- report -------------------------------------------------------------------------------
python3 - "$SAMPLES" "$SAVE_DIR" "$VHOST" "$N" "$PUBLISHED" "$IDLE_BEFORE" "$IDLE_LOADED" "$CMDLINE" \
  "$DECL_S" "$PUB_S" "$THREADS" "$RSS_BEFORE" "$RSS_LOADED" "$RSS_AFTER_MEAS" "$PAGE_SIZE" "$RUNS" "$IDLE_AFTER" <<'PY'
import json, os, re, statistics, sys
(samples, save, vhost, n, published, idle0, idle1, cmdline, decl, pub, threads,
 rss0, rss1, rss2, page_size, runs, idle2) = sys.argv[1:18]
n, published = int(n), int(published)
idle1 = float(idle1)
rows, fails, raw = {}, {}, []
for line in list(open(samples))[1:]:
    v, rnd, ok, wall, size, cpu, pages, detail = line.rstrip("\n").split("\t")
    raw.append((v, rnd, ok, wall, size, cpu, pages, detail))
    if ok == "1":
        rows.setdefault(v, []).append((float(wall), int(size), float(cpu), int(pages)))
    else:
        fails.setdefault(v, []).append(f"round {rnd}: {detail} after {float(wall):.1f} s, broker CPU {cpu} s")

def check_json(path, label):
    try:
        data = json.load(open(path))
    except Exception as e:  # noqa: BLE001
        return f"{label}: not JSON ({e})"
    if isinstance(data, dict) and "items" in data:
        data = data["items"]
    if not isinstance(data, list):
        return f"{label}: unexpected shape {type(data).__name__}"
    keys = sorted({k for q in data for k in q})
    have = {k: sum(1 for q in data if k in q) for k in ("messages", "messages_ready", "messages_unacknowledged")}
    total = sum(q.get("messages") or 0 for q in data)
    return (f"{label}: {len(data)} queues; keys {keys}; queues with messages/ready/unacked key: "
            f"{have['messages']}/{have['messages_ready']}/{have['messages_unacknowledged']}; "
            f"sum(messages) = {total} (published {published})")

def check_prom(path):
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        return f"c: unreadable ({e})"
    per_metric, queues, total, other = {}, set(), 0, 0
    pat = re.compile(r'^(\w+)\{([^}]*)\}\s+(\S+)')
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        if f'vhost="{vhost}"' not in m.group(2):
            other += 'vhost="' in m.group(2)
            continue
        per_metric[m.group(1)] = per_metric.get(m.group(1), 0) + 1
        q = re.search(r'queue="([^"]*)"', m.group(2))
        if q:
            queues.add(q.group(1))
        if m.group(1) == "rabbitmq_detailed_queue_messages":
            total += float(m.group(3))
    lines = sum(per_metric.values())
    return (f"c: {lines} sample lines for vhost {vhost!r}, {len(queues)} distinct queues; per metric "
            f"{per_metric}; sum(rabbitmq_detailed_queue_messages) = {total:.0f} (published {published}); "
            f"{other} sample lines for other vhosts")

def fmt(vals, f):
    return f"{f(statistics.median(vals))} ({f(min(vals))}–{f(max(vals))})"

label = {
    "a": "(a) `GET /api/queues/<vhost>?columns=name,messages,messages_ready,messages_unacknowledged`",
    "b": "(b) (a) + `&disable_stats=true&enable_queue_totals=true`",
    "c": "(c) `GET :15692/metrics/detailed?vhost=<vhost>&family=queue_coarse_metrics`",
    "d": f"(d) (a) paginated, `page_size={page_size}`, all pages",
}
print()
print(f"## Queue-depth read cost, {n} queues in vhost `{vhost}` (RabbitMQ, {runs} runs each, median (min–max))")
print()
print("| variant | ok runs | wall time, s | response bytes | broker CPU, s | broker CPU net of idle, s | pages |")
print("|---|---|---|---|---|---|---|")
for v in "abcd":
    okn = f"{len(rows.get(v, []))}/{len(rows.get(v, [])) + len(fails.get(v, []))}"
    if v not in rows:
        print(f"| {label[v]} | {okn} | – | – | – | – | – |"); continue
    r = rows[v]
    walls = [x[0] for x in r]; sizes = [x[1] for x in r]; cpus = [x[2] for x in r]
    net = [max(0.0, x[2] - idle1 * x[0]) for x in r]
    pages = sorted({x[3] for x in r})
    print(f"| {label[v]} | {okn} | {fmt(walls, lambda x: f'{x:.3f}')} | {fmt(sizes, lambda x: f'{x:,.0f}')} | "
          f"{fmt(cpus, lambda x: f'{x:.2f}')} | {fmt(net, lambda x: f'{x:.2f}')} | {'/'.join(map(str, pages))} |")
print()
print("Only successful requests enter the statistics. Failed requests:" if fails else "No request failed.")
for v in "abcd":
    for f in fails.get(v, []):
        print(f"- ({v}) {f}")
print()
print(f"- Broker CPU = utime+stime of beam.smp from /proc/<pid>/stat across the request (10 ms ticks); "
      f"'net of idle' subtracts the idle rate with the queues in place ({idle1:.3f} CPU-s/s; "
      f"{float(idle0):.3f} CPU-s/s before the queues were created, {float(idle2):.3f} CPU-s/s after the "
      f"measurements) times the wall time; each idle rate is one 10 s window.")
print(f"- Queue creation: {n} PUT /api/queues with {threads} keep-alive connections in {decl} s "
      f"({n / float(decl):.0f}/s); {published} messages published in {pub} s.")
print(f"- beam.smp RSS: {int(rss0) / 1024:.0f} MiB before, {int(rss1) / 1024:.0f} MiB with {n} queues, "
      f"{int(rss2) / 1024:.0f} MiB after the measurements (after cleanup: see the log below).")
print("- Checks of the saved responses (last run):")
print("  - " + check_json(os.path.join(save, "collector-a.json"), "a"))
print("  - " + check_json(os.path.join(save, "collector-b.json"), "b"))
print("  - " + check_prom(os.path.join(save, "collector-c.txt")))
print("  - " + check_json(os.path.join(save, "collector-d-page1.json"), "d page 1"))
print(f"- Raw responses: {save}/collector-a.json, collector-b.json, collector-c.txt, collector-d-page1.json")
print(f"- Per-request samples: {samples}")
print(f"- Command: `{cmdline}`")
print()
print("<details><summary>all samples</summary>")
print()
print("| variant | round | ok | wall s | bytes | broker CPU s | pages | detail |")
print("|---|---|---|---|---|---|---|---|")
for r in raw:
    print("| " + " | ".join(r) + " |")
print()
print("</details>")
print()
PY
