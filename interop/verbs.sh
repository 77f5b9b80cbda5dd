#!/bin/bash
# interop/verbs.sh - ibcm on real RDMA devices (Soft-RoCE, rdma_rxe) with real RC QPs and data,
# in two qemu guests on one L2 segment (interop/verbs/run-pair.sh, adapted from the rxe lab).
#
#   1 kernel   A: kernel CM (ib_cm, rdma_cm) running the unmodified rdma-core server `ucmatose`;
#              first, on A, ibcm_open_device("rxe0") must be refused (-EBUSY, ib_cm owns QP1's
#              CM class). B: no ib_cm; verbs_client opens "rxe0" (CM MADs on QP1 via ib_umad),
#              REQ with the rdma_cm header -> REP -> QP INIT/RTR/RTS -> RTU, 10 x 100-byte sends
#              each way, the server's DREQ -> DREP. ucmatose must report success.
#   2 rping    A: kernel CM running the unmodified `rping -s -v`; B: no ib_cm, verbs_client -R:
#              rping's protocol, 3 times: the server RDMA READs our buffer and RDMA WRITEs it
#              back, compared; then our DREQ -> DREP. rping must print the 3 pings.
#   3 umad     ibcm <-> ibcm over ib_umad, both guests without ib_cm (verbs_client -s / -c).
#   4 soft     ibcm <-> ibcm with the kernel CM loaded on both guests: "soft:<ip>@rxe0" (CM MADs
#              over UDP port 4792, GIDs/paths/QP attributes from rxe0).
#   5 events   B (no ib_cm) opens rxe0, then an IPv4 address is added to eth0: the new RoCE GID
#              must reach ibcm_query_gid / ibcm_init_path through the device's port events.
#              Three times in one boot: in-process (IBCM_SERVICE=off, 10.77.1.2), then through the
#              host CM service in engine mode (IBCM_SERVICE=required IBCM_SERVICE_MODE=engine,
#              `ibcm daemon` started on demand from the run
#              directory, which owns rxe0 and pushes its new port tables: 10.77.2.2), then through the
#              service in forward mode (IBCM_SERVICE_MODE=forward, the default: the engines in the
#              process, the service pushing the port tables to it: 10.77.3.2).
#   6 rverbs   B (no ib_cm): rdmacm/examples/verbs_lab, the verbs half of the librdmacm drop-in
#              (rdmacm/src/verbs.rs): rxe0 found from B's IP (RoCE v2 GID), the route to A, the
#              default PD, an RC QP (own CQs, cq_context == id) INIT -> RTR -> RTS -> ERR and a UD
#              QP (RTS, RDMA_UDP_QKEY) checked with ibv_query_qp, everything destroyed.
#
# usage: interop/verbs.sh [SCENARIO...]    (default: kernel rping umad soft events rverbs). Needs root (apt-get for
# the host packages, qemu). Everything it builds goes to build/interop-verbs/ (cache ~500 MB,
# runs/, prefix/, verbs_client). Exit status 0 iff every scenario passed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OUT="$ROOT/build/interop-verbs"
PREFIX="$OUT/prefix"
BIN="$OUT/verbs_client"
NOCM=rdma_rxe,ib_uverbs,ib_umad          # a guest without any kernel CM
WITHCM=rdma_rxe,ib_uverbs,ib_umad,rdma_ucm  # rdma_ucm pulls rdma_cm and ib_cm
say() { echo "[interop-verbs] $*"; }

if [ "$(id -u)" != 0 ]; then
    echo "interop-verbs: skipped: needs root (apt-get for rdma-core and qemu)"
    exit 0
fi
SCEN=("$@"); [ ${#SCEN[@]} -gt 0 ] || SCEN=(kernel rping umad soft events rverbs)
mkdir -p "$OUT/runs"

# --- build: guests, library, client ----------------------------------------------------------
t0=$(date +%s)
LAB_CACHE="$OUT/cache" bash "$HERE/verbs/build.sh"
say "library -> $PREFIX"
make -s -C "$ROOT" install PREFIX="$PREFIX" >/dev/null
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
# shellcheck disable=SC2046
# The client finds libibcm next to itself: the guests see the host's root
# except /tmp, /run, /var/tmp and /var/log (tmpfs there), and the checkout
# may live under /tmp. So each run copies both into its run directory, which
# every guest sees as $LAB_DIR, and guest commands use $GBIN.
gcc -std=gnu11 -O2 -Wall -Wextra -Werror "$HERE/verbs/verbs_client.c" \
  $(pkg-config --cflags --libs ibcm) -Wl,-rpath,'$ORIGIN' -libverbs -lpthread -o "$BIN"
say "built in $(( $(date +%s) - t0 )) s: $BIN"
GBIN='$LAB_DIR/bin/verbs_client'

pair() { # pair NAME MODS_A MODS_B CMD_A CMD_B [extra run-pair options]
  local name=$1 ma=$2 mb=$3 ca=$4 cb=$5; shift 5
  local run="$OUT/runs/$name"
  rm -rf "$run"
  mkdir -p "$run/bin"
  cp "$BIN" "$run/bin/verbs_client"
  cp -L "$PREFIX/lib/libibcm.so.0" "$run/bin/libibcm.so.0"
  for x in ${PAIR_BINS:-}; do cp "$x" "$run/bin/"; done
  if LAB_CACHE="$OUT/cache" bash "$HERE/verbs/run-pair.sh" -q -t 60 -a "$ma" -b "$mb" -o "$run" "$@" \
      "$ca" "$cb" > "$run.log" 2>&1; then
    rc=0
  else
    rc=1
  fi
  cat "$run.log"
  for g in A B; do echo "----- $name: guest $g output -----"; cat "$run/$g.out" 2>/dev/null || true; done
  return $rc
}

# A guest command that starts the ibcm server in the background, signals "listening" once it
# listens, and returns its status.
ibcm_server() { # ibcm_server DEVICE
  cat <<EOF
( IBCM_LOG=info lab_time $GBIN -d $1 -s > \$LAB_DIR/A.srv 2>&1; echo \$? > \$LAB_DIR/A.srvrc ) &
i=0; until grep -q LISTENING \$LAB_DIR/A.srv 2>/dev/null || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done
lab_signal listening; wait; cat \$LAB_DIR/A.srv; exit \$(cat \$LAB_DIR/A.srvrc)
EOF
}
have_cm() { echo "[ -d /sys/module/ib_cm ] || { echo 'expected ib_cm loaded'; exit 1; }"; }
no_cm() { echo "[ ! -d /sys/module/ib_cm ] || { echo 'expected no ib_cm'; exit 1; }"; }

declare -A RESULT
for s in "${SCEN[@]}"; do
  say "=== scenario $s ==="
  case $s in
    kernel)
      A="$(have_cm)
env -u IBCM_LOG $GBIN -o -d rxe0 > \$LAB_DIR/A.refusal 2>&1; r=\$?; cat \$LAB_DIR/A.refusal
[ \$r = 16 ] && grep -q 'ib_cm module is loaded' \$LAB_DIR/A.refusal && echo 'REFUSAL OK: -EBUSY' || { echo 'REFUSAL: unexpected result'; exit 1; }
lab_time ucmatose -b \$LAB_IP > \$LAB_DIR/A.ucm 2>&1 & p=\$!
lab_wait_listen && lab_signal listening; wait \$p; r=\$?; cat \$LAB_DIR/A.ucm
grep -q 'data transfers complete' \$LAB_DIR/A.ucm && grep -q 'return status 0' \$LAB_DIR/A.ucm || r=1
exit \$r"
      B="$(no_cm)
lab_wait listening && IBCM_LOG=info lab_time $GBIN -d rxe0 -c \$LAB_PEER_IP"
      pair kernel "$WITHCM" "$NOCM" "$A" "$B" -p "$OUT/runs/kernel.A.pcap" && RESULT[$s]=PASS || RESULT[$s]=FAIL
      if command -v tshark >/dev/null && [ -s "$OUT/runs/kernel.A.pcap" ]; then
        say "RoCE on the wire (guest A's NIC): CM MADs and the RC data"
        tshark -r "$OUT/runs/kernel.A.pcap" -Y infiniband 2>/dev/null | sed 's/^/    /' || true
      fi
      ;;
    rping)
      A="$(have_cm)
lab_time rping -s -a \$LAB_IP -v > \$LAB_DIR/A.rping 2>&1 & p=\$!
lab_wait_listen && lab_signal listening; wait \$p; r=\$?; cat \$LAB_DIR/A.rping
[ \$(grep -c 'server ping data: rdma-ping-' \$LAB_DIR/A.rping) = 3 ] || r=1
exit \$r"
      B="$(no_cm)
lab_wait listening && IBCM_LOG=info lab_time $GBIN -d rxe0 -R -C 3 -c \$LAB_PEER_IP"
      pair rping "$WITHCM" "$NOCM" "$A" "$B" && RESULT[$s]=PASS || RESULT[$s]=FAIL
      ;;
    events)
      # events_wait OUT ADDR [ENV...]: verbs_client waits for ADDR's GID, the address is added
      # once it waits; its status (0: the GID reached ibcm_query_gid and ibcm_init_path)
      B="$(no_cm)
events_wait() {
  local out=\$LAB_DIR/\$1 ip=\$2 i=0; shift 2
  ( env IBCM_LOG=info \"\$@\" $GBIN -o -d rxe0 -t 40 -W \$ip > \$out 2>&1; echo \$? > \$out.rc ) &
  until grep -q WAITING \$out 2>/dev/null || [ \$i -ge 300 ]; do sleep 0.1; i=\$((i+1)); done
  ip addr add \$ip/24 dev eth0; wait; cat \$out; return \$(cat \$out.rc)
}
events_wait B.ev 10.77.1.2 IBCM_SERVICE=off || exit 1
echo '--- through the CM service'
events_wait B.evsvc 10.77.2.2 IBCM_SERVICE=required IBCM_SERVICE_MODE=engine IBCM_DAEMON=\$LAB_DIR/bin/ibcm || exit 1
grep -q 'open through the CM service' \$LAB_DIR/B.evsvc || { echo 'EVENTS: rxe0 was not opened through the service'; exit 1; }
echo '--- through the CM service in forward mode'
sleep 1  # the service closes rxe0's engine-mode open when it sees the last process hang up
events_wait B.evfwd 10.77.3.2 IBCM_SERVICE=required IBCM_SERVICE_MODE=forward IBCM_DAEMON=\$LAB_DIR/bin/ibcm || exit 1
grep -q 'forwarded by the CM service' \$LAB_DIR/B.evfwd || { echo 'EVENTS: rxe0 was not forwarded by the service'; exit 1; }"
      PAIR_BINS="$PREFIX/bin/ibcm" pair events "$NOCM" "$NOCM" "true" "$B" -t 150 \
        && RESULT[$s]=PASS || RESULT[$s]=FAIL
      ;;
    umad)
      B="$(no_cm)
lab_wait listening && IBCM_LOG=info lab_time $GBIN -d rxe0 -c \$LAB_PEER_IP"
      pair umad "$NOCM" "$NOCM" "$(no_cm)
$(ibcm_server rxe0)" "$B" && RESULT[$s]=PASS || RESULT[$s]=FAIL
      ;;
    soft)
      B="$(have_cm)
lab_wait listening && IBCM_LOG=info lab_time $GBIN -d soft:\$LAB_IP@rxe0 -c \$LAB_PEER_IP"
      pair soft "$WITHCM" "$WITHCM" "$(have_cm)
$(ibcm_server 'soft:$LAB_IP@rxe0')" "$B" && RESULT[$s]=PASS || RESULT[$s]=FAIL
      ;;
    rverbs)
      cargo build --release -q --manifest-path "$ROOT/Cargo.toml" -p ibcm-rdmacm --example verbs_lab
      B="$(no_cm)
IBCM_LOG=debug lab_time \$LAB_DIR/bin/verbs_lab \$LAB_IP \$LAB_PEER_IP"
      PAIR_BINS="$ROOT/target/release/examples/verbs_lab" pair rverbs "$NOCM" "$NOCM" "true" "$B" \
        && RESULT[$s]=PASS || RESULT[$s]=FAIL
      ;;
    *) echo "unknown scenario $s (kernel, rping, umad, soft, events, rverbs)" >&2; exit 2 ;;
  esac
done

rc=0
say "summary:"
for s in "${SCEN[@]}"; do
  say "  $s: ${RESULT[$s]}"
  [ "${RESULT[$s]}" = PASS ] || rc=1
done
exit $rc
