#!/bin/bash
# interop/rdmacm.sh - the librdmacm drop-in proof (docs/INTEROP.md, "The rdmacm matrix"): the
# unmodified Debian 12 rdma_cm tools (rdmacm-utils, perftest) between two Soft-RoCE qemu guests
# (interop/verbs/run-pair.sh), guest A the server and guest B the client of every scenario of
# interop/rdmacm/scenarios, in each pairing:
#
#   kernel-kernel   both with the kernel CM (ib_cm, rdma_cm, rdma_ucm): the baseline
#   kernel-ibcm     A kernel CM; B without any kernel CM module, tools with ibcm's
#                   librdmacm.so.1 in LD_PRELOAD (its CM on QP1 through ib_umad)
#   ibcm-kernel     the reverse
#   ibcm-ibcm-umad  both preloaded, no kernel CM on either guest (CM over ib_umad)
#   ibcm-ibcm-udp   both preloaded, kernel CM loaded on both (CM over ibcm's UDP side channel)
#   ibcm-svc        both preloaded, no kernel CM, through the host CM service: the first tool
#                   of a guest starts `ibcm daemon` (copied into the run directory), which owns
#                   rxe0's umad agent and serves every later tool of that guest
#
# The other ibcm pairings run in-process (IBCM_SERVICE=off, one process per device and guest).
# Scenarios named local-* run server and client in guest A at once (two processes on one rxe0
# port, loopback): in kernel-kernel (the baseline) and ibcm-svc only; svc-* in ibcm-svc only
# (they need the service: e.g. the ibcm CLI beside rping on rxe0). ibcm-svc runs
# svc-server-killed instead of server-killed (which watches the kernel's cm_ids).
#
# Every scenario is judged on the tools' exit statuses and their own success lines, the data
# packets on the wire, and the capture of guest A's NIC decoded by `ibcm decode --summary`
# (interop/rdmacm/check.py). One pairing = one boot of the two guests; the scenarios run one
# after the other in it.
#
# usage: interop/rdmacm.sh [-l] [PAIRING...]        (default: all five; -l lists scenarios)
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
# NAME.decode.txt, NAME.srv.out, NAME.cli.out), build/interop-rdmacm/runs/ (the guests' share).
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
NOCM=rdma_rxe,ib_uverbs,ib_umad                 # a guest without any kernel CM
WITHCM=rdma_rxe,ib_uverbs,ib_umad,rdma_ucm      # rdma_ucm pulls rdma_cm and ib_cm
ALL="kernel-kernel kernel-ibcm ibcm-kernel ibcm-ibcm-umad ibcm-ibcm-udp ibcm-svc"
say() { echo "[interop-rdmacm] $*"; }

if [ "${1:-}" = -l ]; then sed -n 's/^\([A-Za-z0-9_.-]*\) | .*/\1/p' "$TABLE"; exit 0; fi
PAIRS=("$@"); [ ${#PAIRS[@]} -gt 0 ] || read -r -a PAIRS <<< "$ALL"
for p in "${PAIRS[@]}"; do
  case " $ALL " in *" $p "*) ;; *) echo "unknown pairing $p (one of: $ALL)" >&2; exit 2 ;; esac
done
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
say "ready in $(( $(date +%s) - t0 )) s"

# --- one pairing: both guests booted once, every scenario in turn -----------------------------
# default_scenarios PAIRING: the scenarios a pairing runs by default (every one not excluded,
# local-* only in kernel-kernel and ibcm-svc, svc-* only in ibcm-svc)
default_scenarios() {
  local x
  x=$(sed -n 's/^exclude \([^ ]*\).*/\1/p' "$TABLE")
  sed -n 's/^\([A-Za-z0-9_.-]*\) | .*/\1/p' "$TABLE" | while read -r n; do
    grep -qxF "$n" <<< "$x" && continue
    case $n in
      local-*) [ "$1" = kernel-kernel ] || [ "$1" = ibcm-svc ] || continue ;;
      svc-*) [ "$1" = ibcm-svc ] || continue ;;
      server-killed) [ "$1" != ibcm-svc ] || continue ;;  # svc-server-killed there
    esac
    echo "$n"
  done
}

pairing() { # pairing NAME MODS_A MODS_B PRELOAD_A PRELOAD_B SERVICE
  local p=$1 ma=$2 mb=$3 pa=$4 pb=$5 svc=${6:-0} run="$WORK/runs/$1" total n t1 a b scen
  rm -rf "$run" "$WORK/runs/$p.A.pcap"; mkdir -p "$run/lib"
  if [ ${#SCEN[@]} -gt 0 ]; then scen=("${SCEN[@]}"); else mapfile -t scen < <(default_scenarios "$p"); fi
  total=$(python3 "$CHECK" prepare "$TABLE" "$run" "${scen[@]}")
  n=$(wc -l < "$run/scenarios.run")
  if [ "$pa$pb" != 00 ]; then
    if [ -n "$LIBERR" ]; then
      python3 "$CHECK" fail "$TABLE" "$run" "$RESULTS/$p" "$p" "$LIBERR"
      return 0
    fi
    cp -L "$LIB" "$run/lib/librdmacm.so.1"
    [ "$svc" = 0 ] || cp "$IBCM" "$run/ibcm"
  fi
  cp "$HERE/rdmacm/guest.sh" "$run/guest.sh"
  {
    echo "PRELOAD_A=$pa"; echo "PRELOAD_B=$pb"; echo "SERVICE=$svc"
    printf 'IBCM_ENV=%q\n' "${RDMACM_IBCM_ENV:-}"
    printf 'IBCM_LOG_LEVEL=%q\n' "${IBCM_LOG_LEVEL:-debug}"
    printf 'LISTEN_RE=%q\n' "${RDMACM_LISTEN_RE:-listen|opened device}"
    echo "READY_WAIT=${RDMACM_READY_WAIT:-10}"
  } > "$run/pairing.env"
  # the premise of the pairing: which guest has the kernel CM
  a="$([ "$ma" = "$NOCM" ] && echo '[ ! -d /sys/module/ib_cm ]' || echo '[ -d /sys/module/ib_cm ]') || { echo 'PAIRING: wrong kernel CM state'; exit 1; }
. \$LAB_DIR/guest.sh; rdmacm_guest server"
  b="$([ "$mb" = "$NOCM" ] && echo '[ ! -d /sys/module/ib_cm ]' || echo '[ -d /sys/module/ib_cm ]') || { echo 'PAIRING: wrong kernel CM state'; exit 1; }
. \$LAB_DIR/guest.sh; rdmacm_guest client"
  say "=== $p: $n scenario(s), guest A ${ma//,/ } (preload $pa), guest B ${mb//,/ } (preload $pb), service $svc"
  t1=$(date +%s)
  LAB_CACHE="$CACHE" bash "$HERE/verbs/run-pair.sh" -q -t $((total + 20 * n + 30)) -a "$ma" -b "$mb" \
    -o "$run" -p "$WORK/runs/$p.A.pcap" "$a" "$b" > "$RESULTS/$p.log" 2>&1 || true
  grep -E '^(guest [AB]: rc|wall:|qemu timed out)' "$RESULTS/$p.log" | sed 's/^/  /' || true
  python3 "$CHECK" check "$TABLE" "$run" "$WORK/runs/$p.A.pcap" "$IBCM" "$RESULTS/$p" "$p"
  say "$p: $(( $(date +%s) - t1 )) s"
}

run_pairing() {
  case $1 in
    kernel-kernel)  pairing "$1" "$WITHCM" "$WITHCM" 0 0 ;;
    kernel-ibcm)    pairing "$1" "$WITHCM" "$NOCM" 0 1 ;;
    ibcm-kernel)    pairing "$1" "$NOCM" "$WITHCM" 1 0 ;;
    ibcm-ibcm-umad) pairing "$1" "$NOCM" "$NOCM" 1 1 ;;
    ibcm-ibcm-udp)  pairing "$1" "$WITHCM" "$WITHCM" 1 1 ;;
    ibcm-svc)       pairing "$1" "$NOCM" "$NOCM" 1 1 1 ;;
  esac
}
# Pairings in parallel: each boots two single-vCPU TCG guests, so one per two host CPUs.
JOBS=${RDMACM_JOBS:-$(( $(nproc) / 2 ))}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
if [ "$JOBS" = 1 ]; then
  for p in "${PAIRS[@]}"; do run_pairing "$p"; done
else
  say "$JOBS pairings at a time"
  for p in "${PAIRS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    run_pairing "$p" > "$RESULTS/$p.driver.log" 2>&1 &
  done
  wait
  for p in "${PAIRS[@]}"; do cat "$RESULTS/$p.driver.log"; done
fi

# A scenario with a known race of the tool itself ("retry" in the table) whose expected cell
# failed runs once more, alone, in a fresh boot of its pairing; the summary shows both attempts.
while read -r p names; do
  [ -n "$p" ] || continue
  say "retrying in $p (a \"retry\" scenario of the table failed): $names"
  ( RESULTS="$RESULTS/retry"; read -r -a SCEN <<< "$names"; mkdir -p "$RESULTS"; run_pairing "$p" )
done < <(python3 "$CHECK" retries "$TABLE" "$EXPECT" "$RESULTS" "${PAIRS[@]}")

say "whole matrix: $(( $(date +%s) - t0 )) s"
python3 "$CHECK" summary "$EXPECT" "$RESULTS" "${PAIRS[@]}"
