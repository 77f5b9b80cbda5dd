#!/bin/sh
# Prints "127.A.B": the loopback addresses 127.A.B.0/23 (B even, so B+1 is
# the run's too) that one test run owns, so two runs on one host (two
# worktrees, CI beside a developer) never bind the same soft-device address.
#
#   scripts/test-net.sh OWNER_PID
#
# OWNER_PID is the process the claim lives as long as (the Makefile passes
# make's own pid). Claims are directories under $IBCM_TEST_NETS
# (default ${TMPDIR:-/tmp}/ibcm-test-nets), one per slot, holding the
# owner's pid; a slot whose owner is gone is taken over. The first slot
# tried is derived from the owner's pid; the same owner always gets the
# same slot back. A is 128..254, clear of 127.0.x.y. Each Rust test process
# claims a slot the same way, under the same lock, for its own pid
# (tests/common/net.rs), so C and Rust runs never share a network.
set -eu

owner=${1:?usage: test-net.sh OWNER_PID}
case $owner in *[!0-9]* | '') echo "test-net.sh: bad pid '$owner'" >&2; exit 2 ;; esac
dir=${IBCM_TEST_NETS:-${TMPDIR:-/tmp}/ibcm-test-nets}
mkdir -p "$dir"
slots=16256 # 127 values of A x 128 even values of B

exec 9>"$dir/.lock"
flock 9

net() {
	echo "127.$((128 + $1 / 128)).$((2 * ($1 % 128)))"
}

# Already ours (the Makefile may ask more than once).
mine=$(grep -l -x -F "$owner" "$dir"/slot-* 2>/dev/null | head -1 || true)
if [ -n "$mine" ]; then
	net "${mine##*/slot-}"
	exit 0
fi

i=0
while [ $i -lt $slots ]; do
	k=$(((owner + i) % slots))
	f="$dir/slot-$k"
	if [ -f "$f" ]; then
		o=$(cat "$f")
		if [ -n "$o" ] && [ -d "/proc/$o" ]; then
			i=$((i + 1))
			continue
		fi
	fi
	echo "$owner" >"$f"
	net "$k"
	exit 0
done
echo "test-net.sh: every slot under $dir is held by a live process" >&2
exit 1
