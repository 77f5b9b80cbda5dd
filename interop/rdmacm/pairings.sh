# interop/rdmacm/pairings.sh - the pairings of the rdmacm lab, sourced by interop/rdmacm.sh (the
# drop-in matrix) and scripts/bench-kernel.sh (ibcm vs the kernel CM): one definition of which
# kernel modules each guest loads, which guest runs the tools with ibcm's librdmacm.so.1 preloaded,
# the guest command that checks that premise before it runs interop/rdmacm/guest.sh, and the
# pairing.env that guest.sh reads.
#
#   kernel-kernel   both with the kernel CM (ib_cm, rdma_cm, rdma_ucm): the reference
#   kernel-ibcm     A kernel CM; B without any kernel CM module, tools with ibcm's
#                   librdmacm.so.1 in LD_PRELOAD (its CM on QP1 through ib_umad), in-process
#                   (IBCM_SERVICE=off: the proof of the single-process mode, client side)
#   ibcm-kernel     the reverse, the ibcm tools through the host CM service (IBCM_SERVICE=auto,
#                   what users get: `ibcm daemon` started on demand from the run directory's
#                   `ibcm`, owning rxe0's umad agent, in its default forward mode)
#   ibcm-ibcm-umad  both preloaded, no kernel CM on either guest (CM over ib_umad), in-process
#                   (IBCM_SERVICE=off: the single-process mode with an ibcm server; a killed
#                   server there sends no REJ, nobody alive holds its ids)
#   ibcm-ibcm-udp   both preloaded, kernel CM loaded on both (CM over ibcm's UDP side channel),
#                   through the host CM service in each guest (default mode: forward)
#   ibcm-svc        both preloaded, no kernel CM, the tools through the host CM service in
#                   engine mode (IBCM_SERVICE_MODE=engine: the CM engines in the service;
#                   docs/SERVICE.md "Design A"), with the scenarios that need it (two processes
#                   on one port, the ibcm CLI)
#   ibcm-fwd        ibcm-svc with the service in forward mode (IBCM_SERVICE_MODE=forward, the
#                   default: the tools run the CM engines, the service forwards their MADs;
#                   docs/SERVICE.md "Design B"), the same scenarios
#
# Guest A is the server of every scenario, guest B the client.

RDMACM_NOCM=rdma_rxe,ib_uverbs,ib_umad              # a guest without any kernel CM
RDMACM_WITHCM=rdma_rxe,ib_uverbs,ib_umad,rdma_ucm   # rdma_ucm pulls rdma_cm and ib_cm
RDMACM_PAIRINGS="kernel-kernel kernel-ibcm ibcm-kernel ibcm-ibcm-umad ibcm-ibcm-udp ibcm-svc ibcm-fwd"
# the line of a preloaded server's log (IBCM_LOG info or debug) that says it is ready: nothing in
# the kernel shows ibcm's listener; the library logs opening its device at info, and the tools
# listen right after binding, long before a client can start
RDMACM_DEFAULT_LISTEN_RE="listen|opened device"

# rdmacm_pairing NAME: sets PAIR_MODS_A, PAIR_MODS_B (modules, comma-separated, for
# run-pair.sh -a/-b), PAIR_PRELOAD_A, PAIR_PRELOAD_B (1: that guest's tools run on ibcm) and
# PAIR_SERVICE (1: the preloaded tools go through the host CM service in the rdmacm matrix; the
# run directory needs the `ibcm` binary), PAIR_SERVICE_ONLY (1: the pairing is the service's own,
# ibcm-svc: scripts/bench-kernel.sh takes the service from this one, measuring the other
# pairings in-process unless a BENCH_* switch asks), PAIR_ENV (the pairing's own environment of
# the preloaded tools, before RDMACM_IBCM_ENV's); status 1 for a name that is not a pairing
rdmacm_pairing() {
  PAIR_SERVICE=0 PAIR_SERVICE_ONLY=0 PAIR_ENV=
  case $1 in
    kernel-kernel)  PAIR_MODS_A=$RDMACM_WITHCM PAIR_MODS_B=$RDMACM_WITHCM PAIR_PRELOAD_A=0 PAIR_PRELOAD_B=0 ;;
    kernel-ibcm)    PAIR_MODS_A=$RDMACM_WITHCM PAIR_MODS_B=$RDMACM_NOCM PAIR_PRELOAD_A=0 PAIR_PRELOAD_B=1 ;;
    ibcm-kernel)    PAIR_MODS_A=$RDMACM_NOCM PAIR_MODS_B=$RDMACM_WITHCM PAIR_PRELOAD_A=1 PAIR_PRELOAD_B=0 PAIR_SERVICE=1 ;;
    ibcm-ibcm-umad) PAIR_MODS_A=$RDMACM_NOCM PAIR_MODS_B=$RDMACM_NOCM PAIR_PRELOAD_A=1 PAIR_PRELOAD_B=1 ;;
    ibcm-ibcm-udp)  PAIR_MODS_A=$RDMACM_WITHCM PAIR_MODS_B=$RDMACM_WITHCM PAIR_PRELOAD_A=1 PAIR_PRELOAD_B=1 PAIR_SERVICE=1 ;;
    ibcm-svc)       PAIR_MODS_A=$RDMACM_NOCM PAIR_MODS_B=$RDMACM_NOCM PAIR_PRELOAD_A=1 PAIR_PRELOAD_B=1 PAIR_SERVICE=1 PAIR_SERVICE_ONLY=1 PAIR_ENV=IBCM_SERVICE_MODE=engine ;;
    ibcm-fwd)       PAIR_MODS_A=$RDMACM_NOCM PAIR_MODS_B=$RDMACM_NOCM PAIR_PRELOAD_A=1 PAIR_PRELOAD_B=1 PAIR_SERVICE=1 PAIR_SERVICE_ONLY=1 PAIR_ENV=IBCM_SERVICE_MODE=forward ;;
    *) return 1 ;;
  esac
}

# rdmacm_check_pairings NAME...: exits 2 naming the first argument that is not a pairing
rdmacm_check_pairings() {
  local p
  for p in "$@"; do
    rdmacm_pairing "$p" || { echo "unknown pairing $p (one of: $RDMACM_PAIRINGS)" >&2; exit 2; }
  done
}

# rdmacm_guest_cmd MODS ROLE: the command a guest runs (run-pair.sh's argument): the premise of
# the pairing (with MODS the guest has the kernel CM or not) checked, then guest.sh as ROLE
rdmacm_guest_cmd() {
  local premise='[ -d /sys/module/ib_cm ]'
  [ "$1" != "$RDMACM_NOCM" ] || premise='[ ! -d /sys/module/ib_cm ]'
  printf '%s || { echo '\''PAIRING: wrong kernel CM state'\''; exit 1; }\n. $LAB_DIR/guest.sh; rdmacm_guest %s' \
    "$premise" "$2"
}

# rdmacm_pairing_env IBCM_ENV LOG_LEVEL LISTEN_RE READY_WAIT: the pairing.env of the pairing
# last selected by rdmacm_pairing (guest.sh reads it: who preloads, with which environment:
# the pairing's PAIR_ENV, then IBCM_ENV)
rdmacm_pairing_env() {
  echo "PRELOAD_A=$PAIR_PRELOAD_A"; echo "PRELOAD_B=$PAIR_PRELOAD_B"; echo "SERVICE=$PAIR_SERVICE"
  printf 'IBCM_ENV=%q\n' "${PAIR_ENV:+$PAIR_ENV }$1"
  printf 'IBCM_LOG_LEVEL=%q\n' "$2"
  printf 'LISTEN_RE=%q\n' "$3"
  echo "READY_WAIT=$4"
}
