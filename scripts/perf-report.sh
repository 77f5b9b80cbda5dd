#!/usr/bin/env bash
# Runs every measurement docs/PERFORMANCE.md reports, on this machine, and
# prints them in one place. Nothing here asserts a number.
#
#   scripts/perf-report.sh            # everything (~6 min on 2 cores)
#   QUICK=1 scripts/perf-report.sh    # skip the criterion benches and the 1M scale run
#
# Run it on an otherwise idle machine: every figure is wall-clock except
# the callgrind instruction count.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins --examples >/dev/null 2>&1 || cargo build --release --bins --examples
IBCM=./target/release/ibcm
say() { printf '\n== %s\n' "$*"; }

say "machine"
nproc; grep -m1 'model name' /proc/cpuinfo || true; uname -r; uptime

say "engine only, one core (examples/engine_loop; both sides of every handshake on this core)"
for b in 64 4096; do
    echo "-- $b connections live per batch"
    ./target/release/examples/engine_loop 1000000 "$b"
done
if command -v valgrind >/dev/null; then
    echo "-- instructions per connect+teardown (callgrind, 100k)"
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        ./target/release/examples/engine_loop 100000 64 2>&1 | awk '/refs/ {gsub(",","",$4); printf "%.0f instructions per connection (connect + teardown, both sides)\n", $4/100000}'
fi

say "UDP software fabric, two processes, 10k connections, 256 in flight (3 runs)"
summ=$(mktemp)
cat > "$summ" <<'PY'
import json, sys
d = json.load(sys.stdin)
b = d["udp_baseline"]
c, q = d["connect_us"], d["disconnect_us"]
print(f"connect {d['connect_per_s']}/s  disconnect {d['disconnect_per_s']}/s  "
      f"connect p50/p99/max {c['p50']}/{c['p99']}/{c['max']} us  DREQ->DREP p50 {q['p50']} us  "
      f"cpu {d['cpu_s']} s  rss {d['max_rss_kib']} KiB  | baseline {b['exchanges_per_s']}/s "
      f"p50 {b['exchange_us']['p50']} us  ratio rate {d['ratio_to_udp']['rate']} p50 {d['ratio_to_udp']['p50']}")
print("  baseline with the wire's work: " + ", ".join(
      f"{r['work']} {r['ratio']} ({r['cpu_us']} us CPU)" for r in b["floor"]))
PY
for i in 1 2 3; do
    $IBCM bench --baseline --json 2>/dev/null | python3 "$summ"
done
rm -f "$summ"

say "threads (engine shards + event-loop threads per device), 50k connections"
for t in 1 2; do
    echo "-- --threads $t"
    $IBCM bench --connections 50000 --threads "$t" 2>&1 | grep -E 'connect  |disconnect  |CPU'
done

say "concurrency, 50k connections"
for c in 1 16 256 1024; do
    echo "-- --concurrency $c"
    $IBCM bench --connections 50000 --concurrency "$c" 2>&1 | grep -E 'connect  |connect   '
done

say "in-process loopback fabric, 100k connections"
$IBCM bench --fabric loopback --connections 100000 2>&1 | grep -E 'connect  |disconnect  |connect   |CPU'

if [ -z "${QUICK:-}" ]; then
    say "scale: 1,000,000 connections held in one process"
    $IBCM bench --scale --connections 1000000 2>&1 | tail -5

    say "criterion (short runs)"
    for b in wire timer engine idtable; do
        cargo bench --bench "$b" -- --warm-up-time 1 --measurement-time 3 2>/dev/null \
            | python3 -c '
import re, sys
name = None
for line in sys.stdin:
    m = re.match(r"^(\S+)", line)
    if m and not line.startswith(("Benchmarking", "Found", "Gnuplot")):
        name = m.group(1)
    t = re.search(r"time:\s+\[\S+ \S+ (\S+ \S+)", line)
    if t and name:
        print(f"{name:60} {t.group(1)}")
        name = None'
    done
fi
