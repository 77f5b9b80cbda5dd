#!/bin/bash
# interop/bench/stamp.sh TSFILE CMD... - run CMD (inside a lab guest) with its output passed
# through unchanged, and write to TSFILE the time of its start, of each output line and of its exit
# (bash's $EPOCHREALTIME: no process is started per line, so the stamps cost next to nothing).
# TSFILE lines: "SECONDS @start", "SECONDS LINE"..., "SECONDS @exit RC". scripts/bench_kernel.py
# reads them: time to the first result line = that line's stamp - the start stamp.
ts=$1
shift
printf '%s @start\n' "$EPOCHREALTIME" > "$ts"
"$@" 2>&1 | while IFS= read -r line; do
  printf '%s\n' "$line"
  printf '%s %s\n' "$EPOCHREALTIME" "$line" >> "$ts"
done
rc=${PIPESTATUS[0]}
printf '%s @exit %s\n' "$EPOCHREALTIME" "$rc" >> "$ts"
exit "$rc"
