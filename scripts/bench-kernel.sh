#!/bin/bash
# scripts/bench-kernel.sh - ibcm against the kernel CM on the same unmodified binaries, in one run
# (docs/PERFORMANCE.md, "ibcm vs the kernel CM"; `make bench-kernel`). A measurement, not a test:
# it is not part of `make test` or CI.
#
# Two Soft-RoCE qemu guests (interop/verbs/run-pair.sh), guest A the server, guest B the client,
# in the pairings of the rdmacm matrix (interop/rdmacm/pairings.sh, shared with interop/rdmacm.sh,
# whose guest driver interop/rdmacm/guest.sh runs the tools here too):
#   kernel-kernel   kernel CM on both (the reference every ratio is taken to)
#   kernel-ibcm     A kernel CM, B ibcm's librdmacm.so.1 preloaded (CM over ib_umad)
#   ibcm-kernel     the reverse
#   ibcm-ibcm-umad  both preloaded, no kernel CM module on either guest
#   ibcm-ibcm-udp   both preloaded, kernel CM loaded on both (ibcm's UDP side channel)
# In ibcm-ibcm-udp, whose guests have the kernel CM loaded, every `cmtime -c N` (and BENCH_PAR run)
# runs first with the kernel's librdmacm (scenario kcm-cmtime-N, kcm-cmtime-par-KxN: the preload
# taken off) and then on ibcm, in the same boot: a ratio that the host's load cannot skew
# (BENCH_SAME_BOOT=0: not).
# In each: Debian 12's `cmtime -c N` for every N of BENCH_N (its own per-step times), `rping -C 1`,
# `ib_write_bw -R` and `ib_send_lat -R`, the clients timed from outside by interop/bench/stamp.sh
# (process start -> first result line, and -> exit).
#
# usage: scripts/bench-kernel.sh [PAIRING...]       (default: all five, one after the other)
# Environment:
#   BENCH_N          cmtime connection counts (default "100 1000")
#   BENCH_APPS       0: cmtime only (no rping / perftest)
#   BENCH_PAR        many connections at once: "KxN ..." runs K `cmtime -c N` clients at the same
#                    time in guest B against one server (interop/bench/par.sh), after the
#                    single-client runs
#   BENCH_PAR_SERVICE  1: the preloaded clients of BENCH_PAR open their device through an
#                    `ibcm daemon` (target/release/ibcm) in guest B (par.sh)
#   BENCH_SERVICE    1: the preloaded tools go through the host CM service where the rdmacm matrix
#                    runs them so (ibcm-kernel, ibcm-ibcm-udp, ibcm-svc; `ibcm daemon` started on
#                    demand from the run directory's `ibcm`, this tree's target/release/ibcm); by
#                    default only ibcm-svc does. With BENCH_LIBS every label's library talks to
#                    that one daemon (the service op set only grows: an older library works with
#                    it unchanged), so the A/B compares the libraries' side of the service
#   BENCH_SERVICE_UP 0: the host CM service starts on demand, inside the first timed step of the
#                    first run that uses it (and again after 30 idle seconds); default 1: each
#                    guest that uses it starts `ibcm daemon` before its first scenario and keeps
#                    it, as a service started at boot (the kernel CM is loaded before the runs too)
#   BENCH_PCAP       1: capture guest A's NIC (run-pair.sh -p); the tables then add what
#                    `ibcm decode --summary` counts on the wire per scenario (retransmissions,
#                    duplicates, timeouts) -- the same count for both CMs
#   BENCH_BOUND      seconds one cmtime run may take (default 60 + N / 10)
#   BENCH_GUEST_MEM  each guest's memory (qemu -m; default 512, the lab's): for large N only
#   BENCH_GUEST_CPUS each guest's vCPUs (qemu -smp; default 1, the lab's): whether a CM's cost
#                    comes from sharing one CPU (the service's thread preempting the application)
#   BENCH_MEM_SAMPLE seconds between the guests' memory samples (default 5; 0: none): each guest
#                    writes runs/PAIRING/A.mem, B.mem (MemAvailable, Slab, and the RSS of every
#                    cmtime and ibcm process; interop/rdmacm/guest.sh's rdmacm_memwatch)
#   BENCH_LIB        the library under test (default target/rdmacm/librdmacm.so.1; `make rdmacm`
#                    when absent)
#   BENCH_LIBS       "LABEL=PATH ..." (labels [a-z][a-z0-9]*, at least two): libraries against each
#                    other in one boot. Every cmtime-N runs BENCH_ROUNDS times (default 3) per library,
#                    alternating (cmtime-N-LABEL1-1, cmtime-N-LABEL2-1, cmtime-N-LABEL1-2, ...),
#                    each preloading guest on that run's library (BENCH_LIB is unused: the other
#                    scenarios run on the first label's). The host samples its load every 5 s
#                    (runs/PAIRING/host.load); the tables add, per pairing and N, one row per run
#                    with the host's load at its start and its connect step against the first
#                    label's median (and kernel-kernel's, when it is one of the pairings: a
#                    pairing that preloads nothing runs its plain scenarios once). The
#                    BENCH_SAME_BOOT kcm-cmtime-N runs are left out.
#                    PATH "kernel": the label's runs are the kernel CM's (the preload taken off; a
#                    guest booted without the kernel CM loads it for them and unloads it for the
#                    others' runs), in the guests of any pairing with an ibcm side, e.g.
#                    BENCH_LIBS="kcm=kernel ibcm=target/rdmacm/librdmacm.so.1" kernel-ibcm: the
#                    kernel-kernel reference in the same boot, alternating; every ratio is then to
#                    that label's median (list it second in another boot to swap the order)
#   BENCH_LIBS_ENV   "LABEL:VAR=VALUE ..." (with BENCH_LIBS): extra environment of the preloaded
#                    tools in LABEL's runs only, after BENCH_IBCM_ENV (a label may repeat, one VAR
#                    each); two labels on one PATH then A/B a switch in one boot, e.g.
#                    BENCH_LIBS="svc=P inproc=P" BENCH_LIBS_ENV="inproc:IBCM_SERVICE=off"
#   BENCH_IBCM_ENV   extra environment of the preloaded tools (IBCM_RDMACM_* switches)
#   IBCM_LOG_LEVEL   IBCM_LOG of the preloaded tools (default info: the server's readiness line,
#                    BENCH_LISTEN_RE, default "listen|opened device", is looked for in its log)
#   BENCH_OUT        output directory (default build/bench-kernel)
#   BENCH_CLIENT_WRAP, BENCH_SERVER_WRAP
#                    a command prefix for the cmtime clients (guest B) / servers (guest A), to
#                    profile them (e.g. 'strace -f -c -o $LAB_DIR/cmtime.strace': the guests run
#                    the host's userland, and $LAB_DIR is the run directory); the times are then
#                    not the tool's own
# Output: BENCH_OUT/bench-kernel.md (printed) and bench-kernel.json; BENCH_OUT/runs/PAIRING/ holds
# every tool's output. Needs root (qemu, apt). Exit status 0 iff the kernel-kernel reference ran.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${BENCH_OUT:-$ROOT/build/bench-kernel}"
CACHE="$ROOT/build/interop-verbs/cache"
# shellcheck source=../interop/rdmacm/pairings.sh
. "$ROOT/interop/rdmacm/pairings.sh"
read -r -a NS <<< "${BENCH_N-100 1000}"
read -r -a PARS <<< "${BENCH_PAR:-}"
read -r -a LIBS <<< "${BENCH_LIBS:-}"
read -r -a LIBS_ENV <<< "${BENCH_LIBS_ENV:-}"
say() { echo "[bench-kernel] $*"; }

PAIRS=("$@"); [ ${#PAIRS[@]} -gt 0 ] || read -r -a PAIRS <<< "$RDMACM_PAIRINGS"
rdmacm_check_pairings "${PAIRS[@]}"
for n in "${NS[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_N: $n is not a connection count" >&2; exit 2; }
done
[[ ${BENCH_MEM_SAMPLE:-5} =~ ^[0-9]+$ ]] || { echo "BENCH_MEM_SAMPLE: ${BENCH_MEM_SAMPLE} is not a number of seconds" >&2; exit 2; }
[[ ${BENCH_GUEST_MEM:-512} =~ ^[1-9][0-9]*[MG]?$ ]] || { echo "BENCH_GUEST_MEM: ${BENCH_GUEST_MEM} is not a memory size (qemu -m: 512, 1G)" >&2; exit 2; }
for kn in "${PARS[@]}"; do
  [[ $kn =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || { echo "BENCH_PAR: $kn is not KxN (clients x connections)" >&2; exit 2; }
done
LABELS=() KLABEL= LIB1=
if [ ${#LIBS[@]} -gt 0 ]; then
  [ ${#LIBS[@]} -ge 2 ] || { echo "BENCH_LIBS: two libraries or more (LABEL=PATH ...)" >&2; exit 2; }
  for l in "${LIBS[@]}"; do
    [[ $l =~ ^([a-z][a-z0-9]*)=(.+)$ ]] || { echo "BENCH_LIBS: $l is not LABEL=PATH" >&2; exit 2; }
    if [ "${BASH_REMATCH[2]}" = kernel ]; then
      [ -z "$KLABEL" ] || { echo "BENCH_LIBS: two kernel labels" >&2; exit 2; }
      KLABEL=${BASH_REMATCH[1]}
    else
      [ -f "${BASH_REMATCH[2]}" ] || { echo "BENCH_LIBS: no library at ${BASH_REMATCH[2]}" >&2; exit 2; }
      [ -n "$LIB1" ] || LIB1=${BASH_REMATCH[2]}
    fi
    for x in "${LABELS[@]}"; do
      [ "$x" != "${BASH_REMATCH[1]}" ] || { echo "BENCH_LIBS: label $x twice" >&2; exit 2; }
    done
    LABELS+=("${BASH_REMATCH[1]}")
  done
  [ -n "$LIB1" ] || { echo "BENCH_LIBS: no library but the kernel's" >&2; exit 2; }
  [[ ${BENCH_ROUNDS:-3} =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS: ${BENCH_ROUNDS} is not a count" >&2; exit 2; }
fi
for e in "${LIBS_ENV[@]}"; do
  [[ $e =~ ^([a-z][a-z0-9]*):[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.,/:=+-]*$ ]] ||
    { echo "BENCH_LIBS_ENV: $e is not LABEL:VAR=VALUE" >&2; exit 2; }
  [[ " ${LABELS[*]} " == *" ${BASH_REMATCH[1]} "* ]] ||
    { echo "BENCH_LIBS_ENV: $e names no label of BENCH_LIBS" >&2; exit 2; }
done
if [ "$(id -u)" != 0 ]; then echo "bench-kernel: needs root (qemu guests, apt)" >&2; exit 2; fi
mkdir -p "$OUT/runs"

LAB_CACHE="$CACHE" bash "$ROOT/interop/verbs/build.sh"
if [ "${BENCH_PCAP:-0}${BENCH_PAR_SERVICE:-0}${BENCH_SERVICE:-0}" != 000 ] && [ ! -x "$ROOT/target/release/ibcm" ]; then
  (cd "$ROOT" && cargo build --release --bins -q)   # the decoder of the captures, the service
fi
LIB="${BENCH_LIB:-$ROOT/target/rdmacm/librdmacm.so.1}"
[ ${#LIBS[@]} -eq 0 ] || LIB=$LIB1
if [ ! -f "$LIB" ] && [ -z "${BENCH_LIB:-}" ]; then
  for p in "${PAIRS[@]}"; do
    if [ "$p" != kernel-kernel ]; then make -s -C "$ROOT" rdmacm; break; fi
  done
fi

# the scenarios of one pairing, in the guest driver's format: NAME TIMEOUT READY STOP SERVER CLIENT
# (TAB-separated); clients run under stamp.sh, which writes $LAB_DIR/NAME.ts
# kernel_server CMD: CMD on the kernel's librdmacm in a preloading guest, and a line ($KREADY) in
# its output once the kernel shows its listener (guest.sh's "out:" readiness)
KREADY=kernel-listener-up
kernel_server() {
  printf '%s' "env -u LD_PRELOAD $1 & p=\$!; i=0; until rdma res show cm_id 2>/dev/null | grep -q LISTEN || [ \$i -ge 100 ]; do sleep 0.1; i=\$((i + 1)); done; echo $KREADY; wait \$p"
}

# lib_prefix LABEL SIDE(A|B): the command prefix that makes a preloading guest's tool load
# BENCH_LIBS's library LABEL instead of lib/librdmacm.so.1 (stdbuf's library, appended by
# guest.sh's rdmacm_run, kept), with BENCH_LIBS_ENV's variables of LABEL; nothing for a guest
# that does not preload
# The kernel's label (KLABEL, BENCH_LIBS's LABEL=kernel): ibcm's preload taken off, and in a guest
# booted without the kernel CM its modules loaded first ($KCM_ON); every other label's run in such
# a guest unloads them first ($KCM_OFF: ibcm's umad agent needs the CM class free)
KCM_ON='[ -d /sys/module/rdma_ucm ] || { mkdir -p /tmp/kmod/lib && ln -sfn /run/modules /tmp/kmod/lib/modules && modprobe -d /tmp/kmod rdma_ucm; } || { echo "KCM: modprobe rdma_ucm failed" >&2; exit 97; }; i=0; until [ -e /dev/infiniband/rdma_cm ] || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done; '
KCM_OFF='i=0; while [ -d /sys/module/ib_cm ] && [ $i -lt 100 ]; do modprobe -d /tmp/kmod -r rdma_ucm rdma_cm iw_cm ib_cm 2>/dev/null || sleep 0.1; i=$((i + 1)); done; [ ! -d /sys/module/ib_cm ] || { echo "KCM: ib_cm still loaded" >&2; exit 98; }; '
lib_prefix() {
  local pre=$PAIR_PRELOAD_A mods=$PAIR_MODS_A e
  [ "$2" = A ] || pre=$PAIR_PRELOAD_B mods=$PAIR_MODS_B
  if [ "$1" = "$KLABEL" ]; then
    [ "$mods" != "$RDMACM_NOCM" ] || printf '%s' "$KCM_ON"
    # stdbuf's library stays (the client's lines keep their stamp.sh times)
    [ "$pre" != 1 ] || printf 'export LD_PRELOAD=${LD_PRELOAD#*librdmacm.so.1}; '
    return 0
  fi
  [ -z "$KLABEL" ] || [ "$mods" != "$RDMACM_NOCM" ] || printf '%s' "$KCM_OFF"
  [ "$pre" = 1 ] || return 0
  printf 'export LD_PRELOAD=$LAB_DIR/lib/%s/librdmacm.so.1${LD_PRELOAD#*librdmacm.so.1}; ' "$1"
  for e in "${LIBS_ENV[@]}"; do
    [ "${e%%:*}" != "$1" ] || printf 'export %s; ' "${e#*:}"
  done
}

scenarios() { # scenarios SAME_BOOT (1: kcm-cmtime-N before each cmtime-N)
  local n r l ready st='bash $LAB_DIR/stamp.sh $LAB_DIR'
  for n in "${NS[@]}"; do
    if [ ${#LABELS[@]} -gt 0 ] && [ "$PAIR_PRELOAD_A$PAIR_PRELOAD_B" != 00 ]; then
      for ((r = 1; r <= ${BENCH_ROUNDS:-3}; r++)); do
        for l in "${LABELS[@]}"; do
          if [ "$l" = "$KLABEL" ]; then
            # the kernel CM: its listener shows in `rdma res`, not in ibcm's log
            printf '%s\t%s\tout:%s\t1\t%s\t%s\n' "cmtime-$n-$l-$r" "${BENCH_BOUND:-$((60 + n / 10))}" "$KREADY" \
              "$(lib_prefix "$l" A)$(kernel_server "${BENCH_SERVER_WRAP:+$BENCH_SERVER_WRAP }cmtime -b \$IP -c $n")" \
              "$(lib_prefix "$l" B)$st/cmtime-$n-$l-$r.ts ${BENCH_CLIENT_WRAP:+$BENCH_CLIENT_WRAP }cmtime -s \$PEER -c $n"
            continue
          fi
          # a label in-process (IBCM_SERVICE=off) beside the service: its listener is not in
          # `ibcm ids`, its log says it listens
          ready=listen
          if [ "$PAIR_SERVICE" = 1 ] && [[ " ${LIBS_ENV[*]} " == *" $l:IBCM_SERVICE=off "* ]]; then
            ready="out:${BENCH_LISTEN_RE:-$RDMACM_DEFAULT_LISTEN_RE}"
          fi
          printf '%s\t%s\t%s\t1\t%s\t%s\n' "cmtime-$n-$l-$r" "${BENCH_BOUND:-$((60 + n / 10))}" "$ready" \
            "$(lib_prefix "$l" A)${BENCH_SERVER_WRAP:+$BENCH_SERVER_WRAP }cmtime -b \$IP -c $n" \
            "$(lib_prefix "$l" B)$st/cmtime-$n-$l-$r.ts ${BENCH_CLIENT_WRAP:+$BENCH_CLIENT_WRAP }cmtime -s \$PEER -c $n"
        done
      done
      continue
    fi
    if [ "$1" = 1 ]; then
      # the kernel CM in the same guests: the tools without ibcm's preload; its listener shows
      # in `rdma res`, not in ibcm's log, so the server command says when it is there
      printf '%s\t%s\tout:%s\t1\t%s\t%s\n' "kcm-cmtime-$n" "${BENCH_BOUND:-$((60 + n / 10))}" \
        "$KREADY" "$(kernel_server "cmtime -b \$IP -c $n")" \
        "$st/kcm-cmtime-$n.ts env -u LD_PRELOAD cmtime -s \$PEER -c $n"
    fi
    # cmtime's server serves until stopped; the bound grows with N (TCG guests: ms per connection)
    printf '%s\t%s\tlisten\t1\t%s\t%s\n' "cmtime-$n" "${BENCH_BOUND:-$((60 + n / 10))}" \
      "${BENCH_SERVER_WRAP:+$BENCH_SERVER_WRAP }cmtime -b \$IP -c $n" \
      "$st/cmtime-$n.ts ${BENCH_CLIENT_WRAP:+$BENCH_CLIENT_WRAP }cmtime -s \$PEER -c $n"
  done
  local kn k svc=
  [ "${BENCH_PAR_SERVICE:-0}" != 1 ] || svc=1
  for kn in "${PARS[@]}"; do
    k=${kn%x*} n=${kn#*x}
    if [ "$1" = 1 ]; then
      printf '%s\t%s\tout:%s\t1\t%s\t%s\n' "kcm-cmtime-par-$kn" "${BENCH_BOUND:-$((60 + k * n / 10))}" \
        "$KREADY" "$(kernel_server "cmtime -b \$IP -c $((k * n))")" \
        "env -u LD_PRELOAD bash \$LAB_DIR/par.sh kcm-cmtime-par-$kn $k $n \$PEER"
    fi
    printf '%s\t%s\tlisten\t1\t%s\t%s\n' "cmtime-par-$kn" "${BENCH_BOUND:-$((60 + k * n / 10))}" \
      "cmtime -b \$IP -c $((k * n))" "bash \$LAB_DIR/par.sh cmtime-par-$kn $k $n \$PEER${svc:+ service}"
  done
  [ "${BENCH_APPS:-1}" != 0 ] || return 0
  printf '%s\t%s\tlisten\t0\t%s\t%s\n' rping-C1 60 'rping -s -a $IP -C 1 -v' \
    "$st/rping-C1.ts rping -c -a \$PEER -C 1 -v"
  printf '%s\t%s\tlisten\t0\t%s\t%s\n' ib_write_bw 90 'ib_write_bw -R -d $DEV -n 200' \
    "$st/ib_write_bw.ts ib_write_bw -R -d \$DEV -n 200 \$PEER"
  printf '%s\t%s\tlisten\t0\t%s\t%s\n' ib_send_lat 90 'ib_send_lat -R -d $DEV -n 200' \
    "$st/ib_send_lat.ts ib_send_lat -R -d \$DEV -n 200 \$PEER"
}

pairing() { # pairing NAME
  local p=$1 run="$OUT/runs/$1" total t1 ma mb pcap= same sampler l
  rdmacm_pairing "$p"
  # in-process, as measured so far (the matrix runs ibcm-kernel and ibcm-ibcm-udp through the
  # service): the service only in ibcm-svc, or for BENCH_PAR's clients with BENCH_PAR_SERVICE,
  # or as in the matrix with BENCH_SERVICE=1
  [ "${BENCH_SERVICE:-0}" = 1 ] || PAIR_SERVICE=$PAIR_SERVICE_ONLY
  ma=$PAIR_MODS_A mb=$PAIR_MODS_B
  rm -rf "$run"; mkdir -p "$run/lib"
  same=0
  if [ "${BENCH_SAME_BOOT:-1}" = 1 ] && [ "$PAIR_PRELOAD_A$PAIR_PRELOAD_B" = 11 ] &&
     [ "$ma" = "$RDMACM_WITHCM" ] && [ "$mb" = "$RDMACM_WITHCM" ]; then same=1; fi
  scenarios "$same" > "$run/scenarios.run"
  [ -z "$KLABEL" ] || echo "$KLABEL" > "$run/kernel.label"   # bench_kernel.py: the ratios' base
  [ "${BENCH_PCAP:-0}" != 1 ] || pcap="$run/A.pcap"
  total=$(awk -F'\t' '{s += $2 + 20} END {print s + 30}' "$run/scenarios.run")
  if [ "$PAIR_PRELOAD_A$PAIR_PRELOAD_B" != 00 ]; then
    if [ ! -f "$LIB" ]; then echo "no library at $LIB" > "$run/skipped"; say "$p: skipped (no $LIB)"; return 0; fi
    cp -L "$LIB" "$run/lib/librdmacm.so.1"
    for l in "${LIBS[@]}"; do
      [ "${l%%=*}" != "$KLABEL" ] || continue
      mkdir -p "$run/lib/${l%%=*}"; cp -L "${l#*=}" "$run/lib/${l%%=*}/librdmacm.so.1"
    done
  fi
  cp "$ROOT/interop/rdmacm/guest.sh" "$ROOT/interop/bench/stamp.sh" "$ROOT/interop/bench/par.sh" "$run/"
  [ "${BENCH_PAR_SERVICE:-0}" != 1 ] && [ "$PAIR_SERVICE" != 1 ] || cp "$ROOT/target/release/ibcm" "$run/ibcm"
  rdmacm_pairing_env "${BENCH_IBCM_ENV:-}" "${IBCM_LOG_LEVEL:-info}" "${BENCH_LISTEN_RE:-$RDMACM_DEFAULT_LISTEN_RE}" \
    "${BENCH_READY_WAIT:-10}" > "$run/pairing.env"
  [ "${BENCH_MEM_SAMPLE:-5}" = 0 ] || echo "MEM_SAMPLE=${BENCH_MEM_SAMPLE:-5}" >> "$run/pairing.env"
  [ "${BENCH_SERVICE_UP:-1}" = 0 ] || echo "SERVICE_UP=1" >> "$run/pairing.env"
  say "=== $p: guest A ${ma//,/ } (preload $PAIR_PRELOAD_A), guest B ${mb//,/ } (preload $PAIR_PRELOAD_B); bound $total s"
  t1=$(date +%s)
  { uptime; grep -m1 'model name' /proc/cpuinfo; } > "$run/host.before"
  # the host's load through the run (epoch seconds, 1/5/15-min averages): the A/B rows' load
  while :; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 5; done > "$run/host.load" &
  sampler=$!
  LAB_CACHE="$CACHE" LAB_GUEST_MEM="${BENCH_GUEST_MEM:-512}" LAB_GUEST_CPUS="${BENCH_GUEST_CPUS:-1}" bash "$ROOT/interop/verbs/run-pair.sh" -q -t "$total" -a "$ma" -b "$mb" \
    -o "$run" ${pcap:+-p "$pcap"} "$(rdmacm_guest_cmd "$ma" server)" "$(rdmacm_guest_cmd "$mb" client)" \
    > "$run/pair.log" 2>&1 || true
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  uptime > "$run/host.after"
  grep -E '^(guest [AB]: rc|wall:|qemu timed out)' "$run/pair.log" | sed 's/^/  /' || true
  say "$p: $(( $(date +%s) - t1 )) s"
}

for p in "${PAIRS[@]}"; do pairing "$p"; done
python3 "$ROOT/scripts/bench_kernel.py" "$OUT" "${PAIRS[@]}"
