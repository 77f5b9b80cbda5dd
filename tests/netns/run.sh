#!/usr/bin/env bash
# Network-fault suite: `ibcm bench --verify` between two network namespaces
# joined by veth pairs through a middle namespace that impairs the link
# (loss, duplication, reordering, delay + jitter, a link cut and restore).
#
#   A (client, 10.88.1.1, fd00:88:1::1) --veth-- M --veth-- B (server, 10.88.2.1, fd00:88:2::1)
#
# In M, packets between the two veths go through the impairment: tc netem on
# M's veths where the kernel has sch_netem; otherwise (this CI kernel has no
# sch_netem) through two TUN devices and tests/netns/linkemu.py, which does
# the same in userspace — policy routing by input interface sends A->B
# traffic into one TUN, the emulator writes it out of the other, and the
# kernel forwards it on to B (and the reverse). The link cut is always the
# kernel's: `ip link set <M's veth to A> down`, then up.
#
# Every namespace, link and address is created here with unique names and
# removed on exit (trap), whatever happens. Nothing outside the namespaces
# is touched; only 10.88.x.x / fd00:88:: addresses are used, inside them.
#
# Skips (exit 0, with a message) when not root or without `ip`.
# Each scenario passes only with the outcome docs/RELIABILITY.md claims for
# it: no connection ended differently on the two sides, no id or timer left,
# and at least the stated number established (and, for the cut, failed) on
# both sides; the pass/fail line counts the scenarios.
# Results: one JSON line per scenario in $IBCM_NETNS_OUT (default
# build/reliability/netns.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."

# In-process (one process per address, the namespaces are the hosts); no
# service is started at either namespace's default socket.
export IBCM_SERVICE=${IBCM_SERVICE:-off}
BIN=${IBCM_BIN:-$PWD/target/release/ibcm}
OUT=${IBCM_NETNS_OUT:-$PWD/build/reliability/netns.jsonl}
EMU=$PWD/tests/netns/linkemu.py
# The interpreter itself (a pyenv-style shim would be the pid we kill).
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || echo python3)

skip() { echo "netns: SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces cannot be created"
command -v ip >/dev/null || skip "no 'ip' (iproute2)"
command -v python3 >/dev/null || skip "no python3 for the link emulator"
[ -x "$BIN" ] || { echo "netns: $BIN not built (make lib)" >&2; exit 1; }

S=$(( $$ % 100000 ))
NA=ibcmfA$S NM=ibcmfM$S NB=ibcmfB$S
VA=ifA$S VAM=ifAm$S VB=ifB$S VBM=ifBm$S TA=ifTa$S TB=ifTb$S
WORK=$(mktemp -d /tmp/ibcm-netns.XXXXXX)
EMU_PID=

cleanup() {
    set +e
    [ -n "$EMU_PID" ] && kill "$EMU_PID" 2>/dev/null
    for ns in $NA $NM $NB; do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$NA" 2>"$WORK/err"; then
    skip "cannot create network namespaces: $(cat "$WORK/err")"
fi
ip netns add "$NM"
ip netns add "$NB"
inns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
sys() { inns "$1" sh -c "echo $3 > /proc/sys/net/$2"; }

ip link add "$VA" netns "$NA" type veth peer name "$VAM" netns "$NM"
ip link add "$VB" netns "$NB" type veth peer name "$VBM" netns "$NM"
for ns in $NA $NM $NB; do ip -n "$ns" link set lo up; done
sys "$NM" ipv6/conf/all/keep_addr_on_down 1
ip -n "$NA" addr add 10.88.1.1/24 dev "$VA"
ip -n "$NA" addr add fd00:88:1::1/64 dev "$VA" nodad
ip -n "$NB" addr add 10.88.2.1/24 dev "$VB"
ip -n "$NB" addr add fd00:88:2::1/64 dev "$VB" nodad
ip -n "$NM" addr add 10.88.1.254/24 dev "$VAM"
ip -n "$NM" addr add fd00:88:1::fe/64 dev "$VAM" nodad
ip -n "$NM" addr add 10.88.2.254/24 dev "$VBM"
ip -n "$NM" addr add fd00:88:2::fe/64 dev "$VBM" nodad
for l in "$NA $VA" "$NB $VB" "$NM $VAM" "$NM $VBM"; do set -- $l; ip -n "$1" link set "$2" up; done
ip -n "$NA" route add default via 10.88.1.254
ip -n "$NA" -6 route add default via fd00:88:1::fe
ip -n "$NB" route add default via 10.88.2.254
ip -n "$NB" -6 route add default via fd00:88:2::fe
sys "$NM" ipv4/ip_forward 1
sys "$NM" ipv6/conf/all/forwarding 1
sys "$NM" ipv4/conf/all/rp_filter 0
sys "$NM" ipv4/conf/default/rp_filter 0

# netem here? Probe on M's veth (removed again right away).
MODE=emu
if inns "$NM" tc qdisc add dev "$VAM" root netem delay 1ms 2>"$WORK/err"; then
    inns "$NM" tc qdisc del dev "$VAM" root
    MODE=netem
    echo "netns: impairments by tc netem"
else
    echo "netns: tc netem unavailable here ($(tr -d '\n' <"$WORK/err"); the kernel lacks sch_netem):"
    echo "netns:   impairments by the userspace link emulator (tests/netns/linkemu.py) between TUN devices in $NM"
    [ -c /dev/net/tun ] || skip "neither tc netem nor /dev/net/tun: no way to impair the link"
    ip -n "$NM" tuntap add dev "$TA" mode tun
    ip -n "$NM" tuntap add dev "$TB" mode tun
    ip -n "$NM" link set "$TA" up
    ip -n "$NM" link set "$TB" up
    sys "$NM" "ipv4/conf/$TA/rp_filter" 0
    sys "$NM" "ipv4/conf/$TB/rp_filter" 0
    for fam in -4 -6; do
        ip -n "$NM" $fam rule add iif "$VAM" lookup 101
        ip -n "$NM" $fam rule add iif "$VBM" lookup 102
    done
    ip -n "$NM" route add 10.88.2.0/24 dev "$TA" table 101
    ip -n "$NM" route add 10.88.1.0/24 dev "$TB" table 102
    ip -n "$NM" -6 route add fd00:88:2::/64 dev "$TA" table 101
    ip -n "$NM" -6 route add fd00:88:1::/64 dev "$TB" table 102
fi

# impair LOSS DUP DELAY_MS JITTER_MS REORDER (probabilities 0..1)
impair() {
    unimpair
    if [ $MODE = netem ]; then
        local pct; pct() { python3 -c "print(f'{$1*100:g}%')"; }
        for dev in $VAM $VBM; do
            inns "$NM" tc qdisc add dev "$dev" root netem loss "$(pct $1)" duplicate "$(pct $2)" \
                delay "${3}ms" "${4}ms" reorder "$(pct $5)"
        done
    else
        rm -f "$WORK/emu.ready"
        inns "$NM" "$PY" "$EMU" --a "$TA" --b "$TB" --loss "$1" --dup "$2" --delay "$3" \
            --jitter "$4" --reorder "$5" --seed "$S" --stats "$WORK/emu.json" --ready "$WORK/emu.ready" &
        for _ in $(seq 100); do [ -s "$WORK/emu.ready" ] && break; sleep 0.05; done
        [ -s "$WORK/emu.ready" ] || { echo "netns: link emulator did not start" >&2; exit 1; }
        EMU_PID=$(cat "$WORK/emu.ready")
    fi
}
unimpair() {
    if [ $MODE = netem ]; then
        for dev in $VAM $VBM; do inns "$NM" tc qdisc del dev "$dev" root 2>/dev/null || true; done
    elif [ -n "$EMU_PID" ]; then
        kill "$EMU_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.02; done
        EMU_PID=
    fi
}
emu_stats() { if [ $MODE = emu ] && [ -e "$WORK/emu.json" ]; then cat "$WORK/emu.json"; else echo '{}'; fi; }

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
ran=0 passed=0 fails=0
# outcome FILE MIN_OK MIN_FAILED: checks the bench --verify JSON in FILE:
# every connection ended the same way on both sides (established and cleanly
# disconnected, or failed), no id or timer left, at least MIN_OK established
# on both sides and at least MIN_FAILED failed on both sides. Prints the
# counts; non-zero exit (and the reason) when the outcome is not the claimed one.
outcome() {
    python3 - "$@" <<'PY'
import json, sys
path, min_ok, min_failed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    b = json.loads(open(path).readline())
    v = b["verify"]
except (OSError, ValueError, KeyError) as e:
    print(f"no bench --verify result ({e!r})")
    sys.exit(1)
n = b["connections"]
ok, err = v["both_ok"], v["both_error"]
left = {k: v[k] for k in ("client_live_ids", "client_timers", "server_live_ids", "server_timers")}
print(f"{ok}/{n} established on both sides, {err} failed on both sides, "
      f"{v['mismatches']} one-sided, ids/timers left {sum(left.values())}")
bad = []
if v["mismatches"] or ok + err != n:
    bad.append(f"{n - ok - err} connection(s) ended differently on the two sides")
if any(left.values()):
    bad.append(f"left behind: {left}")
if ok < min_ok:
    bad.append(f"{ok} established on both sides, want at least {min_ok}")
if err < min_failed:
    bad.append(f"{err} failed on both sides, want at least {min_failed}")
if bad:
    print("; ".join(bad))
    sys.exit(1)
PY
}
# scenario NAME CLIENT_IP SERVER_IP CUT_AT CUT_FOR MIN_OK MIN_FAILED bench-args...
scenario() {
    local name=$1 cip=$2 sip=$3 cut_at=$4 cut_for=$5 min_ok=$6 min_failed=$7; shift 7
    local t0=$SECONDS cutter=
    echo "== netns $name: $*"
    if [ "$cut_for" != 0 ]; then
        ( sleep "$cut_at"; ip -n "$NM" link set "$VAM" down; echo "netns:   link cut"
          sleep "$cut_for"; ip -n "$NM" link set "$VAM" up; echo "netns:   link restored" ) &
        cutter=$!
    fi
    local rc=0
    inns "$NA" "$BIN" bench --client "soft:$cip" --server "soft:$sip" --server-wrap "ip netns exec $NB" \
        --verify --json --timeout 120 "$@" >"$WORK/$name.json" 2>"$WORK/$name.err" || rc=$?
    [ -n "$cutter" ] && wait "$cutter"
    unimpair
    local secs=$((SECONDS - t0))
    cat "$WORK/$name.err" >&2
    ran=$((ran + 1))
    local counts crc=0
    counts=$(outcome "$WORK/$name.json" "$min_ok" "$min_failed") || crc=$?
    if [ $rc != 0 ] || [ $crc != 0 ]; then
        echo "netns: FAIL $name (bench exit $rc): ${counts//$'\n'/; }"
        echo "netns:   $(cat "$WORK/$name.json")"
        fails=$((fails + 1))
    else
        echo "netns: ok $name in ${secs}s: $counts"
        passed=$((passed + 1))
    fi
    printf '{"scenario":"%s","mode":"%s","seconds":%s,"args":"%s","link":%s,"bench":%s}\n' \
        "$name" "$MODE" "$secs" "$*" "$(emu_stats)" "$(cat "$WORK/$name.json" | head -1 || echo null)" >>"$OUT"
    tail -1 "$OUT"
}

# 1. 20 % loss, 5 % duplication, 25 % reordering, 50 ms +- 10 ms each way:
#    every connection must establish and disconnect cleanly on both sides.
impair 0.20 0.05 50 10 0.25
scenario lossy 10.88.1.1 10.88.2.1 0 0 300 0 --connections 300 --concurrency 64 \
    --cm-timeout 17 --cm-local-timeout 17 --cm-retries 15

# 2. The same over IPv6 (fd00:88::), 10 % loss: all 100 established.
impair 0.10 0.05 50 10 0.25
scenario lossy-ipv6 '[fd00:88:1::1]' '[fd00:88:2::1]' 0 0 100 0 --connections 100 --concurrency 32 \
    --cm-timeout 17 --cm-local-timeout 17 --cm-retries 15

# 3. Link cut for 5 s mid-run (no random loss, 50 ms +- 10 ms, 5 % dup,
#    10 % reordering): REQs caught by the cut run out of retries
#    (4 x 0.8 s < 5 s) and fail on both sides (REQ_ERROR; the server's REP,
#    if the REQ got through, ends in REP_ERROR); REPs whose RTU was cut off
#    outlast the cut (a retransmission 6.4 s after the REP) and complete.
#    Nothing may end established on one side only, and no id or timer may
#    be left. (With random loss on top, an RTU lost beyond the passive
#    side's last REP retry leaves the client established and the server
#    with REP_ERROR — the kernel CM's own outcome; see docs/RELIABILITY.md.)
#    The cut must show (at least 1 failed on both sides) and cost at most two
#    rounds of the 16 in flight (at least 268 of 300 established).
impair 0 0.05 50 10 0.10
scenario cut 10.88.1.1 10.88.2.1 1.5 5 268 1 --connections 300 --concurrency 16 \
    --cm-timeout 16 --cm-local-timeout 19 --cm-retries 3

echo "netns: results in $OUT"
echo "netns: $passed passed, $fails failed"
if [ $fails != 0 ] || [ $passed != $ran ] || [ $passed = 0 ]; then exit 1; fi
