#!/bin/sh
# The disconnect step of cmtime, QP-less, on the host (c-tests/bench/teardown.c;
# `make bench-teardown`): the server and the client as two processes, both
# pinned to one CPU (the lab's guests have one vCPU), on soft devices.
#
#   c-tests/bench/teardown.sh BINARY SERVER_IP CLIENT_IP [CONNECTIONS]
#
# Two addresses of the loopback (scripts/test-net.sh gives a run its own
# 127.A.B.0/23); CONNECTIONS defaults to 1000. The library is the one LD_LIBRARY_PATH finds first (the
# Makefile puts ibcm's librdmacm.so.1 there); IBCM_SERVICE chooses in
# process (off) or through the host CM service (required, with
# IBCM_SERVICE_SOCKET naming a running `ibcm daemon`).
#
# TEARDOWN_TRACE=DIR runs both under `perf record -e raw_syscalls:sys_enter
# -e sched:sched_switch` (DIR/{server,client}.data) and prints, per
# connection, each process's system calls by name and its context switches
# (its threads switched out) in the disconnect step (between the program's
# two getppid() marks). Tracepoints slow the calls a little; the step's
# times of that run are not the plain run's.
# TEARDOWN_CPU (default 0) is the CPU both are pinned to.
set -eu

usage="usage: teardown.sh BINARY SERVER_IP CLIENT_IP [CONNECTIONS]"
bin=${1:?$usage}
sip=${2:?$usage}
cip=${3:?$usage}
n=${4:-1000}
cpu=${TEARDOWN_CPU:-0}
trace=${TEARDOWN_TRACE:-}

wrap() { # who
	if [ -n "$trace" ]; then
		echo "perf record -q -e raw_syscalls:sys_enter -e sched:sched_switch -o $trace/$1.data --"
	fi
}

if [ -n "$trace" ]; then
	mkdir -p "$trace"
	command -v perf >/dev/null || { echo "teardown.sh: perf not installed" >&2; exit 2; }
	mark=$(printf '#include <sys/syscall.h>\nSYS_getppid\n' | cpp -P - | tail -n 1)
fi
out=$(mktemp)
trap 'rm -f "$out"; [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null; true' EXIT
# shellcheck disable=SC2046 # the wrapper is words
taskset -c "$cpu" $(wrap server) "$bin" server "$sip" "$n" >"$out" &
spid=$!
i=0
until grep -q '^ready' "$out"; do
	i=$((i + 1))
	if [ $i -gt 400 ] || ! kill -0 "$spid" 2>/dev/null; then
		echo "teardown.sh: the server did not start" >&2
		cat "$out" >&2
		exit 1
	fi
	sleep 0.05
done
# shellcheck disable=SC2046
taskset -c "$cpu" $(wrap client) "$bin" client "$sip" "$cip" "$n"
wait "$spid"
spid=
grep -v '^ready' "$out"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "$trace" ]; then
	printf '#include <sys/syscall.h>\n' | cpp -dM - |
		awk '$1 == "#define" && $2 ~ /^__NR_/ && $3 ~ /^[0-9]+$/ { sub(/^__NR_/, "", $2); print $3, $2 }' >"$trace/names"
	for who in server client; do
		perf script -i "$trace/$who.data" -F event,trace 2>/dev/null |
			awk -v who="$who" -v n="$n" -v mark="$mark" -v names="$trace/names" '
			BEGIN {
				# "number name" pairs from the headers of this machine
				while ((getline l < names) > 0) { split(l, f, " "); nm[f[1]] = f[2] }
			}
			/sys_enter/ {
				match($0, /NR [0-9]+/); nr = substr($0, RSTART + 3, RLENGTH - 3)
				if (nr == mark) { marks++; next }
				if (marks == 1) { c = (nr in nm) ? nm[nr] : "NR" nr; calls[c]++; total++ }
				next
			}
			/sched_switch/ { if (marks == 1) sw++ }
			END {
				printf "%s: %.2f context switches and %.1f system calls per connection in the disconnect step:", who, sw / n, total / n
				for (c in calls) if (calls[c] / n >= 0.01) printf " %s %.2f", c, calls[c] / n
				printf "\n"
			}'
	done
fi
