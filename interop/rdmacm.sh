#!/bin/bash
# interop/rdmacm.sh - the librdmacm drop-in proof (docs/INTEROP.md, "The rdmacm matrix"): the
# unmodified Debian 12 rdma_cm tools (rdmacm-utils, perftest) between two Soft-RoCE qemu guests
# (interop/verbs/run-pair.sh), guest A the server and guest B the client of every scenario of
# interop/rdmacm/scenarios, in each pairing of interop/rdmacm/pairings.sh (shared with
# scripts/bench-kernel.sh):
#
#   kernel-kernel   both with the kernel CM (ib_cm, rdma_cm, rdma_ucm): the baseline
#   kernel-ibcm     A kernel CM; B with ibcm's librdmacm.so.1 preloaded, no kernel CM module,
#                   in-process (IBCM_SERVICE=off)
#   ibcm-kernel     the reverse, through the host CM service (IBCM_SERVICE=auto, the default)
#   ibcm-ibcm-umad  both preloaded, no kernel CM on either guest (CM over ib_umad), in-process
#   ibcm-ibcm-udp   both preloaded, kernel CM loaded on both (CM over ibcm's UDP side channel),
#                   through the host CM service
#   ibcm-svc        both preloaded, no kernel CM, through the host CM service in engine mode
#                   (IBCM_SERVICE_MODE=engine), with the
#                   scenarios that need the service
#   ibcm-fwd        ibcm-svc with the service in forward mode (IBCM_SERVICE_MODE=forward, the default)
# Through the service, the first tool of a guest starts `ibcm daemon` (copied into the run
# directory), which owns the device (rxe0's umad agent, or the UDP side channel of its address)
# and serves every later tool of that guest. kernel-ibcm and ibcm-ibcm-umad stay in-process
# (IBCM_SERVICE=off, one process per device and guest): the proof of the single-process mode.
# Scenarios named local-* run server and client in guest A at once (two processes on one rxe0
# port, loopback; interop/rdmacm/local.sh, copied into the run directory, drives and reports both
# sides): in kernel-kernel (the baseline) and ibcm-svc only; svc-* in ibcm-svc only
# (they need the service: e.g. the ibcm CLI beside rping on rxe0), except svc-server-killed:
# where guest A's tools go through the service (ibcm-kernel, ibcm-ibcm-udp, ibcm-svc) it runs
# instead of server-killed (which watches the kernel's cm_ids; the service's are in `ibcm ids`).
#
# Scenario srq runs the lab's own program interop/rdmacm/srq_lab.c (built here against the host's
# librdmacm, copied into the run directory): an RC connection whose receives go through SRQs made
# with rdma_create_srq on both sides. Scenario mc-attach runs interop/rdmacm/mc_lab.c the same
# way: a QP created between rdma_join_multicast and the retrieval of MULTICAST_JOIN receives the
# group's datagrams (mckey -s on guest B) only if the library attaches it at that retrieval.
#
# Every scenario is judged on the tools' exit statuses and their own success lines, the data
# packets on the wire, and the capture of guest A's NIC decoded by `ibcm decode --summary`
# (interop/rdmacm/check.py). One pairing = one boot of the two guests; the scenarios run one
# after the other in it.
#
# usage: interop/rdmacm.sh [-l] [PAIRING...]        (default: all of them; -l lists scenarios)
# Environment:
#   RDMACM_SCENARIOS  scenario names to run (default: every one not excluded in the table)
#   RDMACM_JOBS       pairings run at the same time (default: host CPUs / 2, at least 1)
#   RDMACM_LIB        the library under test (default: target/rdmacm/librdmacm.so.1, built
#                     first with `make rdmacm`)
#   RDMACM_EXPECT     the pairings/scenarios expected to pass (default interop/rdmacm-expect):
#                     one of those failing fails the run; a pass not listed is reported loudly
#   RDMACM_IBCM_ENV   extra environment for the preloaded tools (e.g. a transport override)
#   IBCM_LOG_LEVEL    IBCM_LOG of the preloaded tools (default debug)
#   RDMACM_LISTEN_RE  a line of the preloaded server's log that says it listens (default
#                     "listen|opened device", case-insensitive); RDMACM_READY_WAIT bounds every
#                     readiness wait (default 10 s)
# A scenario marked "retry" in the table (a race inside the tool) whose expected cell failed is
# run once more in a fresh boot of its pairing (interop/out/rdmacm/retry/PAIRING/).
# Output: interop/out/rdmacm/ (summary.txt; per pairing: results.json, NAME.pcap,
# NAME.decode.txt, NAME.srv.out/.err, NAME.cli.out/.err), build/interop-rdmacm/runs/ (the guests' share).
# Exit status 0 iff every pairing/scenario of RDMACM_EXPECT passed. Needs root (apt, qemu).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TABLE="$HERE/rdmacm/scenarios"
CHECK="$HERE/rdmacm/check.py"
WORK="$ROOT/build/interop-rdmacm"
CACHE="$ROOT/build/interop-verbs/cache"      # the guests of interop/verbs.sh, shared
RESULTS="${RDMACM_OUT:-$HERE/out/rdmacm}"
EXPECT="${RDMACM_EXPECT:-$ROOT/interop/rdmacm-expect}"
IBCM="$ROOT/target/release/ibcm"
# shellcheck source=rdmacm/pairings.sh
. "$HERE/rdmacm/pairings.sh"
say() { echo "[interop-rdmacm] $*"; }

if [ "${1:-}" = -l ]; then sed -n 's/^\([A-Za-z0-9_.-]*\) | .*/\1/p' "$TABLE"; exit 0; fi
PAIRS=("$@"); [ ${#PAIRS[@]} -gt 0 ] || read -r -a PAIRS <<< "$RDMACM_PAIRINGS"
rdmacm_check_pairings "${PAIRS[@]}"
if [ "$(id -u)" != 0 ]; then
  echo "interop-rdmacm: skipped: needs root (apt-get for rdma-core and qemu)"
  exit 0
fi
read -r -a SCEN <<< "${RDMACM_SCENARIOS:-}"
mkdir -p "$WORK/runs"
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
t0=$(date +%s)

# --- guests, decoder, library ------------------------------------------------------------------
LAB_CACHE="$CACHE" bash "$HERE/verbs/build.sh"
[ -x "$IBCM" ] || (cd "$ROOT" && cargo build --release --bins -q)
LIB="${RDMACM_LIB:-$ROOT/target/rdmacm/librdmacm.so.1}"
LIBERR=
need_lib=0
for p in "${PAIRS[@]}"; do [ "$p" = kernel-kernel ] || need_lib=1; done
if [ $need_lib = 1 ]; then
  if [ -z "${RDMACM_LIB:-}" ]; then
    # the repository's library, as its sources are now (cargo: nothing to do when fresh)
    say "make rdmacm"
    make -s -C "$ROOT" rdmacm > "$WORK/make-rdmacm.log" 2>&1 ||
      LIBERR="make rdmacm failed: $(grep -m1 -iE 'error|no rule' "$WORK/make-rdmacm.log" || tail -1 "$WORK/make-rdmacm.log")"
  fi
  [ -n "$LIBERR" ] || [ -f "$LIB" ] || LIBERR="no library at $LIB"
fi
[ -z "$LIBERR" ] || say "ibcm pairings fail without booting: $LIBERR"
# The lab's own rdma_cm program (scenario srq): built against the host's librdmacm headers
# and -lrdmacm (Debian 12, as the guests), copied into every run directory.
SRQ_LAB="$WORK/srq_lab"
gcc -std=gnu11 -O2 -Wall -Wextra -Werror "$HERE/rdmacm/srq_lab.c" -lrdmacm -libverbs \
  -o "$SRQ_LAB" > "$WORK/srq_lab.log" 2>&1 || say "srq_lab did not build: $(head -1 "$WORK/srq_lab.log")"
# and scenario mc-attach's (interop/rdmacm/mc_lab.c), the same way
MC_LAB="$WORK/mc_lab"
gcc -std=gnu11 -O2 -Wall -Wextra -Werror "$HERE/rdmacm/mc_lab.c" -lrdmacm -libverbs \
  -o "$MC_LAB" > "$WORK/mc_lab.log" 2>&1 || say "mc_lab did not build: $(head -1 "$WORK/mc_lab.log")"
say "ready in $(( $(date +%s) - t0 )) s"

# --- one pairing: both guests booted once, every scenario in turn -----------------------------
# default_scenarios PAIRING: the scenarios a pairing runs by default (every one not excluded,
# local-* only in kernel-kernel and the service's own pairings (ibcm-svc, ibcm-fwd), svc-* only
# in those, svc-server-killed instead of server-killed where guest A's tools go through the
# service)
default_scenarios() {
  local x served=0
  rdmacm_pairing "$1"
  [ "$PAIR_SERVICE$PAIR_PRELOAD_A" != 11 ] || served=1
  x=$(sed -n 's/^exclude \([^ ]*\).*/\1/p' "$TABLE")
  sed -n 's/^\([A-Za-z0-9_.-]*\) | .*/\1/p' "$TABLE" | while read -r n; do
    grep -qxF "$n" <<< "$x" && continue
    case $n in
      local-*) [ "$1" = kernel-kernel ] || [ "$PAIR_SERVICE_ONLY" = 1 ] || continue ;;
      svc-server-killed) [ $served = 1 ] || continue ;;
      svc-*) [ "$PAIR_SERVICE_ONLY" = 1 ] || continue ;;
      server-killed) [ $served = 0 ] || continue ;;
    esac
    echo "$n"
  done
}

pairing() { # pairing NAME
  local p=$1 run="$WORK/runs/$1" total n t1 ma mb scen
  rdmacm_pairing "$p"
  ma=$PAIR_MODS_A mb=$PAIR_MODS_B
  rm -rf "$run" "$WORK/runs/$p.A.pcap"; mkdir -p "$run/lib"
  if [ ${#SCEN[@]} -gt 0 ]; then scen=("${SCEN[@]}"); else mapfile -t scen < <(default_scenarios "$p"); fi
  total=$(python3 "$CHECK" prepare "$TABLE" "$run" "${scen[@]}")
  n=$(wc -l < "$run/scenarios.run")
  if [ "$PAIR_PRELOAD_A$PAIR_PRELOAD_B" != 00 ]; then
    if [ -n "$LIBERR" ]; then
      python3 "$CHECK" fail "$TABLE" "$run" "$RESULTS/$p" "$p" "$LIBERR"
      return 0
    fi
    cp -L "$LIB" "$run/lib/librdmacm.so.1"
    [ "$PAIR_SERVICE" = 0 ] || cp "$IBCM" "$run/ibcm"
  fi
  cp "$HERE/rdmacm/guest.sh" "$run/guest.sh"
  [ ! -x "$SRQ_LAB" ] || cp "$SRQ_LAB" "$run/srq_lab"
  [ ! -x "$MC_LAB" ] || cp "$MC_LAB" "$run/mc_lab"
  cp "$HERE/rdmacm/local.sh" "$run/local.sh"
  rdmacm_pairing_env "${RDMACM_IBCM_ENV:-}" "${IBCM_LOG_LEVEL:-debug}" \
    "${RDMACM_LISTEN_RE:-$RDMACM_DEFAULT_LISTEN_RE}" "${RDMACM_READY_WAIT:-10}" > "$run/pairing.env"
  say "=== $p: $n scenario(s), guest A ${ma//,/ } (preload $PAIR_PRELOAD_A), guest B ${mb//,/ } (preload $PAIR_PRELOAD_B), service $PAIR_SERVICE"
  t1=$(date +%s)
  LAB_CACHE="$CACHE" bash "$HERE/verbs/run-pair.sh" -q -t $((total + 20 * n + 30)) -a "$ma" -b "$mb" \
    -o "$run" -p "$WORK/runs/$p.A.pcap" "$(rdmacm_guest_cmd "$ma" server)" \
    "$(rdmacm_guest_cmd "$mb" client)" > "$RESULTS/$p.log" 2>&1 || true
  grep -E '^(guest [AB]: rc|wall:|qemu timed out)' "$RESULTS/$p.log" | sed 's/^/  /' || true
  python3 "$CHECK" check "$TABLE" "$run" "$WORK/runs/$p.A.pcap" "$IBCM" "$RESULTS/$p" "$p"
  say "$p: $(( $(date +%s) - t1 )) s"
}

# Pairings in parallel: each boots two single-vCPU TCG guests, so one per two host CPUs.
JOBS=${RDMACM_JOBS:-$(( $(nproc) / 2 ))}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
if [ "$JOBS" = 1 ]; then
  for p in "${PAIRS[@]}"; do pairing "$p"; done
else
  say "$JOBS pairings at a time"
  for p in "${PAIRS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    pairing "$p" > "$RESULTS/$p.driver.log" 2>&1 &
  done
  wait
  for p in "${PAIRS[@]}"; do cat "$RESULTS/$p.driver.log"; done
fi

# A scenario with a known race of the tool itself ("retry" in the table) whose expected cell
# failed runs once more, alone, in a fresh boot of its pairing; the summary shows both attempts.
while read -r p names; do
  [ -n "$p" ] || continue
  say "retrying in $p (a \"retry\" scenario of the table failed): $names"
  ( RESULTS="$RESULTS/retry"; read -r -a SCEN <<< "$names"; mkdir -p "$RESULTS"; pairing "$p" )
done < <(python3 "$CHECK" retries "$TABLE" "$EXPECT" "$RESULTS" "${PAIRS[@]}")

say "whole matrix: $(( $(date +%s) - t0 )) s"
python3 "$CHECK" summary "$EXPECT" "$RESULTS" "${PAIRS[@]}"
