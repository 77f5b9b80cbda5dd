#!/bin/bash
# run-pair.sh - boot two qemu (TCG) guests A (10.77.0.1) and B (10.77.0.2) on one private L2
# segment (qemu -netdev dgram over 127.0.0.1 UDP, no root networking), create rxe0 on eth0 in each,
# and run one command (bash snippet, inside a chroot into the host's / via virtio-9p) on each guest.
#
# usage: run-pair.sh [options] [CMD_A [CMD_B]]
#   CMD_A / CMD_B   bash snippet or path of a script file; default: rping server on A, client on B.
#                   Helpers from guest/lablib.sh are available (lab_signal, lab_wait,
#                   lab_wait_listen, lab_time) and env LAB_NAME LAB_IP LAB_PEER_IP LAB_DIR LAB_ROOT LAB_BIN.
#   -t SEC          bound for each guest command (default 90); qemu is killed at SEC+60
#   -a MODS         modules for A (comma list, default rdma_rxe,ib_uverbs,ib_umad,rdma_ucm)
#   -b MODS         modules for B (default: same as A)
#   -p PCAP         capture guest A's NIC with qemu filter-dump into PCAP
#   -P PCAP         capture guest B's NIC into PCAP
#   -o DIR          run directory (default runs/<date>-<pid>); gets consoles, outputs, rc, dmesg
#   -N              no rxe0 (skip `rdma link add`)
#   -q              quiet: do not print the guest consoles at the end
# Environment: LAB_GUEST_MEM  each guest's memory (qemu -m, default 512)
#              LAB_GUEST_CPUS each guest's vCPUs (qemu -smp, default 1, the lab's)
# exit status: 0 if both guest commands returned 0, else 1.
set -euo pipefail
LAB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${LAB_CACHE:-$LAB/../../build/interop-verbs/cache}"
[[ ${LAB_GUEST_CPUS:-1} =~ ^[1-9][0-9]?$ ]] || { echo "LAB_GUEST_CPUS: ${LAB_GUEST_CPUS} is not a vCPU count (1-99)" >&2; exit 2; }
[ -f "$CACHE/initramfs.cpio.gz" ] || { echo "run build.sh first" >&2; exit 2; }

T=90; MODS_A=rdma_rxe,ib_uverbs,ib_umad,rdma_ucm; MODS_B=; PCAP_A=; PCAP_B=; RUN=; RXE=1; QUIET=0
while getopts "t:a:b:p:P:o:Nq" o; do
  case $o in
    t) T=$OPTARG ;; a) MODS_A=$OPTARG ;; b) MODS_B=$OPTARG ;; p) PCAP_A=$OPTARG ;; P) PCAP_B=$OPTARG ;;
    o) RUN=$OPTARG ;; N) RXE=0 ;; q) QUIET=1 ;; *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND-1))
MODS_B=${MODS_B:-$MODS_A}
CMD_A=${1:-'lab_time rping -s -a 10.77.0.1 -v -C 3 & lab_wait_listen && lab_signal listening; wait'}
CMD_B=${2:-'lab_wait listening && lab_time rping -c -a 10.77.0.1 -v -C 3'}

RUN=${RUN:-$LAB/../../build/interop-verbs/runs/$(date +%Y%m%d-%H%M%S)-$$}
mkdir -p "$RUN"; RUN="$(cd "$RUN" && pwd)"
rm -f "$RUN"/A.* "$RUN"/B.*
{ echo "LAB_ROOT=$LAB"; echo "LAB_BIN=$CACHE/bin"; cat "$LAB/guest/lablib.sh"; } > "$RUN/lablib.sh"
for n in A B; do
  eval "c=\$CMD_$n"
  if [ -f "$c" ]; then cp "$c" "$RUN/$n.sh"; else printf '%s\n' "$c" > "$RUN/$n.sh"; fi
done

# two free UDP ports on 127.0.0.1 for the dgram "wire"
read -r PA PB < <(python3 -c '
import socket
s=[socket.socket(socket.AF_INET,socket.SOCK_DGRAM) for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]; print(*[x.getsockname()[1] for x in s])')

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

boot() { # boot NAME IP PEERNAME PEERIP MAC LPORT RPORT MODS PCAP
  local n=$1 ip=$2 pn=$3 pip=$4 mac=$5 lp=$6 rp=$7 mods=$8 pcap=$9 dump=()
  [ -n "$pcap" ] && { rm -f "$pcap"; dump=(-object "filter-dump,id=cap0,netdev=n0,file=$pcap"); }
  # no_timer_check: under a loaded host the guest kernel's IO-APIC timer check can fail under
  # TCG ("IO-APIC + timer doesn't work!" panic, seen twice at load 17); the check proves nothing here.
  timeout -k 5 $((T+60)) qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "${LAB_GUEST_CPUS:-1}" -m "${LAB_GUEST_MEM:-512}" \
    -display none -nodefaults -no-reboot -serial "file:$RUN/$n.console" \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet panic=-1 no_timer_check lab.name=$n lab.ip=$ip/24 lab.peername=$pn lab.peerip=$pip lab.mods=$mods lab.rxe=$RXE lab.timeout=$T" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$RUN,mount_tag=labrun,security_model=none" \
    -netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$lp,remote.type=inet,remote.host=127.0.0.1,remote.port=$rp" \
    -device "virtio-net-pci,netdev=n0,mac=$mac" "${dump[@]}" \
    > "$RUN/$n.qemu.log" 2>&1 &
  PIDS+=($!)
}
t0=$(date +%s.%N)
boot A 10.77.0.1 B 10.77.0.2 52:54:00:77:00:01 "$PA" "$PB" "$MODS_A" "$PCAP_A"
boot B 10.77.0.2 A 10.77.0.1 52:54:00:77:00:02 "$PB" "$PA" "$MODS_B" "$PCAP_B"
# host-side timing: guest init writes <name>.times when rxe0 is up ("ready")
el() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
RA=; RB=
while kill -0 "${PIDS[0]}" 2>/dev/null || kill -0 "${PIDS[1]}" 2>/dev/null; do
  [ -z "$RA" ] && [ -s "$RUN/A.times" ] && RA=$(el)
  [ -z "$RB" ] && [ -s "$RUN/B.times" ] && RB=$(el)
  sleep 0.05
done
qrc=0
for p in "${PIDS[@]}"; do wait "$p" || qrc=$?; done
PIDS=()
t1=$(date +%s.%N)

rc=0
for n in A B; do
  if [ "$QUIET" = 0 ]; then
    echo "===== guest $n console ====="
    sed "s/^/[$n] /" "$RUN/$n.console" 2>/dev/null || true
  fi
  r=$(cat "$RUN/$n.rc" 2>/dev/null || echo none)
  [ "$r" = 0 ] || rc=1
  echo "guest $n: rc=$r marks: $(cat "$RUN/$n.times" 2>/dev/null | tr -s ' ')"
done
grep -h "LAB-TIME" "$RUN"/A.out "$RUN"/B.out 2>/dev/null | sed 's/^/  /' || true
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then echo "qemu timed out"; rc=1; fi
echo "host clock: qemu start -> guest ready (rxe0 up): A ${RA:-?} s, B ${RB:-?} s"
echo "wall: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s (both guests, boot to poweroff); run dir: $RUN"
[ -n "$PCAP_A" ] && echo "pcap A: $PCAP_A"
[ -n "$PCAP_B" ] && echo "pcap B: $PCAP_B"
exit $rc
