#!/bin/bash
# interop/bench/par.sh NAME K N PEER - K `cmtime -s PEER -c N` clients started at once in this lab
# guest (scripts/bench-kernel.sh, BENCH_PAR), all against one server; inside the guest, with the
# environment guest.sh gives its tools. Writes to $LAB_DIR:
#   NAME.I.out, NAME.I.ts  client I's output and its stamp.sh timings (I = 1..K)
#   NAME.kcm               this guest's kernel CM counters (cm_tx_retries, cm_rx_duplicates,
#                          cm_tx_msgs of REQ), before and after, when the kernel CM is loaded
# Exit status: 0 iff every client exited 0; otherwise the first failing client's status.
set -u
name=$1 k=$2 n=$3 peer=$4
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
echo "$k clients of $n connections: exit status $rc"
exit $rc
