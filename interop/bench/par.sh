#!/bin/bash
# interop/bench/par.sh NAME K N PEER [service] - K `cmtime -s PEER -c N` clients started at once
# in this lab guest (scripts/bench-kernel.sh, BENCH_PAR), all against one server; inside the guest,
# with the environment guest.sh gives its tools. With "service" (BENCH_PAR_SERVICE=1, preloaded
# tools), $LAB_DIR/ibcm runs `ibcm daemon` in this guest first and the clients open their device
# through it (IBCM_SERVICE=required): without it, one device (umad agent, side-channel UDP port)
# belongs to one process. Writes to $LAB_DIR:
#   NAME.I.out, NAME.I.ts  client I's output and its stamp.sh timings (I = 1..K)
#   NAME.kcm               this guest's kernel CM counters (cm_tx_retries, cm_rx_duplicates,
#                          cm_tx_msgs of REQ), before and after, when the kernel CM shows them
#                          (/sys/class/infiniband_cm: absent in the lab's Debian 12 guests, where
#                          BENCH_PCAP's wire counts stand for both CMs)
#   NAME.service.log       the service's log (with "service")
#   NAME.stat.json         the service's counters once the clients have exited (`ibcm stat --json`,
#                          with "service"; NAME.stat.err says why not, if not)
# Exit status: 0 iff every client exited 0; otherwise the first failing client's status.
set -u
name=$1 k=$2 n=$3 peer=$4 service=${5:-}
dir=$LAB_DIR

# kcm_counters: "retries duplicates reqs" summed over this guest's kernel CM ports
kcm_counters() {
  local r=0 d=0 q=0 f
  for f in /sys/class/infiniband_cm/*/*/cm_tx_retries/*; do [ -r "$f" ] && r=$((r + $(cat "$f"))); done
  for f in /sys/class/infiniband_cm/*/*/cm_rx_duplicates/*; do [ -r "$f" ] && d=$((d + $(cat "$f"))); done
  for f in /sys/class/infiniband_cm/*/*/cm_tx_msgs/req; do [ -r "$f" ] && q=$((q + $(cat "$f"))); done
  echo "$r $d $q"
}

[ -d /sys/class/infiniband_cm ] && echo "before $(kcm_counters)" > "$dir/$name.kcm"
svc=
if [ "$service" = service ]; then
  export IBCM_SERVICE=required IBCM_SERVICE_SOCKET="/run/ibcm-bench.$name.sock"
  # the service in the foreground, as a child of this script (stopped with it); ready once its
  # socket exists
  env -u LD_PRELOAD IBCM_LOG=info "$dir/ibcm" daemon --foreground --socket "$IBCM_SERVICE_SOCKET" \
    > "$dir/$name.service.log" 2>&1 &
  svc=$!
  i=0
  until [ -S "$IBCM_SERVICE_SOCKET" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
  [ -S "$IBCM_SERVICE_SOCKET" ] || echo "par: no service socket after 10 s" >&2
fi
pids=()
for i in $(seq 1 "$k"); do
  bash "$dir/stamp.sh" "$dir/$name.$i.ts" cmtime -s "$peer" -c "$n" > "$dir/$name.$i.out" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p"
  s=$?
  [ $rc != 0 ] || rc=$s
done
[ -d /sys/class/infiniband_cm ] && echo "after $(kcm_counters)" >> "$dir/$name.kcm"
if [ -n "$svc" ]; then
  timeout 60 env -u LD_PRELOAD "$dir/ibcm" stat --json --socket "$IBCM_SERVICE_SOCKET" \
    > "$dir/$name.stat.json" 2> "$dir/$name.stat.err"
fi
if [ -n "$svc" ]; then kill "$svc" 2>/dev/null; wait "$svc" 2>/dev/null; fi
echo "$k clients of $n connections: exit status $rc"
exit $rc
