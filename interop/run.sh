#!/bin/bash
# interop/run.sh - ibcm against the Linux kernel CM, live (docs/INTEROP.md).
#
# usage: interop/run.sh [-l] [SCENARIO...]     (no SCENARIO: all of them; -l lists them)
#
# Boots a Debian 6.1 kernel in qemu (TCG) with Soft-RoCE (rdma_rxe) and the kernel CM,
# joined by a tap device to a private network namespace (ibcm-interop-PID, 10.77.5.0/24:
# host 10.77.5.254, guest 10.77.5.1) where ibcm runs on the soft device soft:10.77.5.254.
# The guest runs the host's rdma-core tools (rping, ucmatose, udaddy) through 9p; they use
# the guest kernel's rdma_cm / ib_cm. Every scenario runs both sides under timeouts,
# captures the wire (tcpdump on the tap), checks the events of both sides and the MAD
# sequence, and checks that `ibcm decode` and tshark agree on the capture.
#
# Output: interop/out/ (NAME.pcap, NAME.*.log, guest console, summary.txt).
# Skips (prints "interop: skipped: REASON", exits 0) for the environment limits of
# docs/INTEROP.md: not root, no /dev/net/tun. Anything else that keeps the suite from
# running (not Linux/x86_64, no network namespace, packages or the guest kernel not
# installable or downloadable in 900 s, no iproute2) is a skip too outside CI, but with
# CI=true it fails the run ("interop: FAIL: REASON", exit 1): CI must not pass green
# without having run ibcm against the kernel CM.
# Environment: IBCM (binary, default target/release/ibcm), IC_BUDGET (hard bound on
# the whole run in seconds, default 600), IC_OUT (output directory).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL="rping-server ucmatose-server ucmatose-client rping-client reject udaddy-client
  udaddy-server sidr-reject sidr-qkey no-listener-host no-listener-guest mra"
IBCM=${IBCM:-$IC_ROOT/target/release/ibcm}
OUT=${IC_OUT:-$IC_DIR/out}
BUDGET=${IC_BUDGET:-600}
H=$IC_HOST_IP
G=$IC_GUEST_IP
NS=ibcm-interop-$$
SHARE=$OUT/share

if [ "${1:-}" = -l ]; then echo $ALL; exit 0; fi
want=${*:-$ALL}
for s in $want; do
  case " $(echo $ALL) " in *" $s "*) ;; *) echo "interop: unknown scenario $s (one of: $(echo $ALL))" >&2; exit 2 ;; esac
done

# env_skip REASON: an environment limit (docs/INTEROP.md): skipped, also in CI.
env_skip() { echo "interop: skipped: $*"; exit 0; }
# skip REASON: the suite cannot run for another reason: skipped, but in CI a failure.
skip() {
  if [ "${CI:-}" = true ]; then
    echo "interop: FAIL: $* (CI=true: only 'not root' and 'no /dev/net/tun' may skip)" >&2
    exit 1
  fi
  echo "interop: skipped: $*"
  exit 0
}
[ "$(id -u)" = 0 ] || env_skip "needs root (network namespace, tap device, apt-get)"
[ -c /dev/net/tun ] || env_skip "no /dev/net/tun"
[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(uname -m)" = x86_64 ] || skip "the guest kernel is amd64, this machine is $(uname -m)"

T_START=$(date +%s.%N)
# One run at a time per checkout (the cache and out/ are shared).
mkdir -p "$IC_CACHE"
exec 9> "$IC_CACHE/run.lock"
flock -w 900 9 || ic_die "another interop run holds $IC_CACHE/run.lock"
rm -rf "$OUT"; mkdir -p "$SHARE"

# --- host packages, guest kernel, initramfs (bounded: a stuck download is a skip, in CI
# a failure) ---------------------------------------------------------------------------------
timeout -k 10 900 bash "$IC_DIR/fetch.sh" 2>&1 | tee "$OUT/fetch.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 77 ] && skip "$(sed -n 's/.*cannot: //p' "$OUT/fetch.log" | tail -1)"
[ "$rc" = 124 ] && skip "installing packages / downloading the guest kernel took over 900 s"
[ "$rc" = 0 ] || ic_die "fetch.sh failed ($rc), see $OUT/fetch.log"
command -v ip >/dev/null || skip "no ip (iproute2) after installing the host packages"
KVER=$(cat "$IC_CACHE/KVER")
T_FETCH=$(ic_since "$T_START")
if [ ! -x "$IBCM" ]; then
  ic_say "building ibcm"
  (cd "$IC_ROOT" && cargo build --release --bins -q) || ic_die "cargo build failed"
fi

# --- cleanup: every process we start, the namespace (and what runs in it) ---------------
PIDS=()
WATCHDOG=
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$WATCHDOG" ]; then kill $(pgrep -P "$WATCHDOG") "$WATCHDOG" 2>/dev/null; fi
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  if ip netns list 2>/dev/null | grep -qw "$NS"; then
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(ip netns pids "$NS" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$NS" 2>/dev/null
  fi
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
trap 'echo "interop: interrupted" >&2; exit 130' INT TERM
# Bound the whole run: the watchdog's TERM ends up in cleanup.
bash -c 'sleep "$1"; echo "interop: run exceeded $1 s, aborting" >&2; kill -TERM "$2"' _ "$BUDGET" $$ &
WATCHDOG=$!

# Namespaces left by a run that was killed (its PID is gone): remove them.
for ns in $(ip netns list 2>/dev/null | grep -o '^ibcm-interop-[0-9]*'); do
  kill -0 "${ns##*-}" 2>/dev/null && continue
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null && ic_say "removed stale namespace $ns"
done

ip netns add "$NS" 2>"$OUT/netns.err" || skip "cannot create a network namespace: $(cat "$OUT/netns.err")"
ip -n "$NS" link set lo up
ip -n "$NS" tuntap add dev tap0 mode tap || ic_die "cannot create a tap device in $NS"
ip -n "$NS" addr add "$H/24" dev tap0
ip -n "$NS" link set tap0 up

# --- the guest ------------------------------------------------------------------------------
cp "$IC_DIR/guest/agent.sh" "$SHARE/agent.sh"
printf 'G=%s\nH=%s\n' "$G" "$H" > "$SHARE/env.sh"
T_BOOT=$(date +%s.%N)
ip netns exec "$NS" timeout -k 5 "$BUDGET" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp 1 -m 512 \
  -display none -nodefaults -no-reboot -serial "file:$OUT/guest.console" \
  -kernel "$IC_CACHE/vmlinuz" -initrd "$IC_CACHE/initramfs.cpio.gz" \
  -append "console=ttyS0 quiet panic=-1 no_timer_check ic.ip=$G/24 ic.timeout=$BUDGET" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$SHARE,mount_tag=icrun,security_model=none" \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no,vnet_hdr=off \
  -device "virtio-net-pci,netdev=n0,mac=$IC_GUEST_MAC" > "$OUT/qemu.log" 2>&1 &
QEMU=$!
PIDS+=("$QEMU")
if ! ic_wait_file "$SHARE/agent.up" 120 "$QEMU"; then
  echo "---- guest console"; cat "$OUT/guest.console" 2>/dev/null; cat "$OUT/qemu.log"
  ic_die "the guest did not come up"
fi
T_READY=$(ic_since "$T_BOOT")
ic_say "guest ready after $T_READY s: $(sed -n 's/^uname=//p' "$SHARE/guest.info"), rxe0 $(grep -c '^gid' "$SHARE/guest.info") GIDs"

# --- helpers for the scenarios -------------------------------------------------------------
GN=0
# guest SEC SNIPPET: run the bash SNIPPET in the guest (killed after SEC s); returns at once.
# In the snippet: $G $H, `listening [SEC]` (an rdma_cm listener exists), `signal NAME`,
# `await NAME [SEC]` (see guest/agent.sh).
guest() {
  GN=$((GN + 1))
  printf '# timeout=%s\n%s\n' "$1" "$2" > "$SHARE/cmd.$GN.tmp"
  mv "$SHARE/cmd.$GN.tmp" "$SHARE/cmd.$GN"
}
# guest_wait SEC: wait for the last snippet to end; GRC = its status, GOUT = its output.
guest_wait() {
  GOUT=$SHARE/out.$GN
  if ic_wait_file "$SHARE/rc.$GN" "$1" "$QEMU"; then GRC=$(cat "$SHARE/rc.$GN"); else GRC=timeout; fi
  cp "$GOUT" "$OUT/$SC.guest.log" 2>/dev/null
}
await() { ic_wait_file "$SHARE/ev.$1" "${2:-20}" "$QEMU"; }
go() { : > "$SHARE/go.$1"; }
# host NAME SEC ARGS...: `ibcm ARGS` in the namespace, in the background (log: SC.NAME.log).
declare -A HPID HRC
host() {
  local name=$1 t=$2; shift 2
  ip netns exec "$NS" timeout -k 2 "$t" "$IBCM" "$@" > "$OUT/$SC.$name.log" 2>&1 &
  HPID[$name]=$!
  PIDS+=($!)
}
host_wait() { wait "${HPID[$1]}"; HRC[$1]=$?; }
host_log() { echo "$OUT/$SC.$1.log"; }
# host_listening NAME: wait until the ibcm listener NAME listens.
host_listening() { ic_wait_grep '^listening on' "$(host_log "$1")" 10 "${HPID[$1]}"; }

fail() { FAILS+=("$*"); }
expect_guest_rc() { [ "$GRC" = "$1" ] || fail "guest status $GRC, want $1"; }
expect_guest() { grep -Eq -- "$1" "$GOUT" 2>/dev/null || fail "guest output lacks /$1/"; }
expect_host_rc() { [ "${HRC[$1]}" = "$2" ] || fail "ibcm $1 status ${HRC[$1]}, want $2"; }
expect_host() { grep -Eq -- "$2" "$(host_log "$1")" || fail "ibcm $1 output lacks /$2/"; }
# expect_order NAME A B: in ibcm NAME's output, the first /A/ comes before the first /B/.
expect_order() {
  local a b
  a=$(grep -En -- "$2" "$(host_log "$1")" | head -1 | cut -d: -f1)
  b=$(grep -En -- "$3" "$(host_log "$1")" | head -1 | cut -d: -f1)
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] || fail "ibcm $1: /$2/ not before /$3/"
}

# --- the scenarios ---------------------------------------------------------------------------
# Each sets WIRE: the regex the capture's CM MADs must match (h: = ibcm, g: = kernel).

# 1a. ibcm connects to `rping -s` (REQ with the rdma_cm IP header, REP, RTU); ibcm disconnects.
sc_rping_server() {
  guest 40 'timeout 30 rping -s -a $G -v -d -C 1 & p=$!; listening && signal listening; wait $p'
  await listening || fail "rping -s did not listen"
  host connect 25 connect --device "soft:$H" --dest "$G" --rdma-cm --private-data ibcm --timeout 20
  host_wait connect; guest_wait 40
  expect_guest_rc 0
  expect_guest 'ESTABLISHED'
  expect_guest 'server DISCONNECT EVENT'
  expect_host_rc connect 0
  expect_host connect 'REP_RECEIVED qpn='
  expect_host connect 'DREP_RECEIVED'
  expect_host connect '^1 of 1 connection\(s\) established and disconnected'
  WIRE='h:REQ g:REP h:RTU h:DREQ g:DREP'
}

# 1b. ibcm connects to ucmatose (server, port 7471); the guest disconnects first.
sc_ucmatose_server() {
  guest 40 'timeout 30 ucmatose -b $G -C 0 & p=$!; listening && signal listening; wait $p'
  await listening || fail "ucmatose did not listen"
  host connect 25 connect --device "soft:$H" --dest "$G" --port 7471 --rdma-cm --wait-disconnect --timeout 20
  host_wait connect; guest_wait 40
  expect_guest_rc 0
  expect_guest '^return status 0'
  expect_host_rc connect 0
  expect_host connect 'REP_RECEIVED qpn='
  expect_host connect 'DREQ_RECEIVED'
  WIRE='h:REQ g:REP h:RTU g:DREQ h:DREP'
}

# 2a. ucmatose (client) connects to an ibcm listener, which accepts and disconnects first.
sc_ucmatose_client() {
  host listen 25 listen --device "soft:$H" --port 7471 --rdma-cm --disconnect --timeout 20
  host_listening listen || fail "ibcm did not listen"
  guest 40 'timeout 30 ucmatose -s $H -C 0'
  guest_wait 40; host_wait listen
  expect_guest_rc 0
  expect_guest '^return status 0'
  expect_host_rc listen 0
  expect_host listen "REQ_RECEIVED from $G .* service=0x1061d2f rdma_cm=$G:[0-9]+->$H "
  expect_host listen 'RTU_RECEIVED'
  expect_host listen 'DREP_RECEIVED'
  expect_host listen '^1 connection\(s\) handled, 0 failed'
  WIRE='g:REQ h:REP g:RTU h:DREQ g:DREP'
}

# 2b. rping -c connects to an ibcm listener (port 7174), which accepts and disconnects after
# 1 s. (rping starts its ping once connected; a DREQ before its main thread is in the ping
# loop makes rping itself fail or hang. Its first SEND is never acked, ibcm has no QP: the
# QP gives up after 7 retries, several seconds later, well after the DREQ.)
sc_rping_client() {
  host listen 25 listen --device "soft:$H" --rdma-cm --disconnect-delay 1000 --private-data ibcm --timeout 20
  host_listening listen || fail "ibcm did not listen"
  guest 40 'timeout 30 rping -c -a $H -v -d -C 1'
  guest_wait 40; host_wait listen
  expect_guest_rc 0
  expect_guest 'ESTABLISHED'
  expect_guest 'client DISCONNECT EVENT'
  expect_host_rc listen 0
  expect_host listen "REQ_RECEIVED from $G .* service=0x1061c06 rdma_cm=$G:[0-9]+->$H "
  expect_host listen 'DREP_RECEIVED'
  WIRE='g:REQ h:REP g:RTU h:DREQ g:DREP'
}

# 2c. an ibcm listener rejects (consumer reason 28, with private data); ucmatose reports it.
sc_reject() {
  host listen 25 listen --device "soft:$H" --port 7471 --rdma-cm --reject 28 --private-data 'not today' --timeout 20
  host_listening listen || fail "ibcm did not listen"
  guest 40 'timeout 30 ucmatose -s $H -C 0'
  guest_wait 40; host_wait listen
  expect_guest_rc 28
  expect_guest 'event: RDMA_CM_EVENT_REJECTED, error: 28'
  expect_host_rc listen 0
  expect_host listen "REQ_RECEIVED from $G "
  WIRE='g:REQ h:REJ'
}

# 3a. udaddy (client) resolves a service ID at an ibcm SIDR listener.
sc_udaddy_client() {
  host listen 25 listen --device "soft:$H" --sidr --port 7174 --rdma-cm --timeout 20
  host_listening listen || fail "ibcm did not listen"
  guest 40 'timeout 30 udaddy -s $H -C 0'
  guest_wait 40; host_wait listen
  expect_guest_rc 0
  expect_guest '^return status 0'
  expect_host_rc listen 0
  expect_host listen "SIDR_REQ_RECEIVED service=0x1111c06 rdma_cm=$G:[0-9]+->$H "
  expect_host listen '^1 SIDR request\(s\) handled, 0 failed'
  WIRE='g:SIDR_REQ h:SIDR_REP'
}

# 3b. ibcm's SIDR_REQ to `udaddy` (server): SIDR_REP status 0 with the QPN and rdma_cm's Q_Key.
sc_udaddy_server() {
  guest 40 'timeout 30 udaddy -b $G -C 0 & p=$!; listening && signal listening; wait $p'
  await listening || fail "udaddy did not listen"
  host connect 25 connect --device "soft:$H" --dest "$G" --sidr --rdma-cm --timeout 20
  host_wait connect; guest_wait 40
  expect_guest_rc 0
  expect_guest '^return status 0'
  expect_host_rc connect 0
  expect_host connect 'SIDR_REP_RECEIVED status=0 qpn=0x[0-9a-f]+ qkey=0x1234567'
  WIRE='h:SIDR_REQ g:SIDR_REP'
}

# An ibcm SIDR listener answering udaddy's SIDR_REQ with listen options $1;
# udaddy must fail with the event line $2 (a regex).
sidr_refused() {
  host listen 25 listen --device "soft:$H" --sidr --port 7174 --rdma-cm $1 --timeout 20
  host_listening listen || fail "ibcm did not listen"
  guest 40 'timeout 30 udaddy -s $H -C 0'
  guest_wait 40; host_wait listen
  [ "$GRC" != 0 ] || fail "udaddy succeeded"
  expect_guest "$2"
  expect_host_rc listen 0
  WIRE='g:SIDR_REQ h:SIDR_REP'
}

# 3c. an ibcm SIDR listener refuses (SIDR_REP status 2, "service rejected"): udaddy reports
# RDMA_CM_EVENT_UNREACHABLE with that status.
sc_sidr_reject() { sidr_refused "--reject 2" 'event: RDMA_CM_EVENT_UNREACHABLE, error: 2$'; }

# 3d. a SIDR_REP with a Q_Key other than rdma_cm's RDMA_UDP_QKEY: rdma_cm refuses it
# (cma_set_qkey: -EINVAL, reported as RDMA_CM_EVENT_ADDR_ERROR).
sc_sidr_qkey() { sidr_refused "--qkey 0x11" 'event: RDMA_CM_EVENT_ADDR_ERROR, error: -22$'; }

# 4a. rping -c to the host, where ibcm runs but nothing listens on port 7174: REJ 8.
sc_no_listener_host() {
  host listen 25 listen --device "soft:$H" --port 7175 --count 0 --timeout 20
  host_listening listen || fail "ibcm did not start"
  guest 40 'timeout 30 rping -c -a $H -v -C 1'
  guest_wait 40
  kill -TERM "${HPID[listen]}" # (timeout passes it on) ibcm prints its counters and exits 0
  host_wait listen
  [ "$GRC" != 0 ] || fail "rping -c succeeded"
  expect_guest 'RDMA_CM_EVENT_REJECTED, error 8'
  expect_host_rc listen 0
  expect_host listen '^rej_tx +reason8=1'
  WIRE='g:REQ h:REJ'
}

# 4b. ibcm's REQ to a guest port nobody listens on: the kernel's REJ 8.
sc_no_listener_guest() {
  guest 20 'rdma res show cm_id; signal ready'
  await ready || fail "guest not ready"
  host connect 25 connect --device "soft:$H" --dest "$G" --port 7175 --rdma-cm --expect-reject 8 --timeout 20
  host_wait connect; guest_wait 20
  expect_guest_rc 0
  expect_host_rc connect 0
  expect_host connect 'REJ_RECEIVED reason=8 \(invalid service ID\)'
  expect_host connect '^1 of 1 connection\(s\) rejected as expected'
  WIRE='h:REQ g:REJ'
}

# 4c. ibcm's REQ to an rping -s that is stopped (SIGSTOP): ibcm retransmits the REQ
# (response timeout 16: ~0.8 s), the kernel answers the duplicate with an MRA
# (rdma_cm's delayed MRA, service timeout 24); after SIGCONT rping accepts: REP, RTU.
sc_mra() {
  # (no `timeout` wrapper: $p must be rping itself; the agent bounds the snippet)
  guest 60 'rping -s -a $G -v -d -C 1 & p=$!; listening || exit 1
    kill -STOP $p; signal stopped; await cont 30; kill -CONT $p; wait $p'
  await stopped || fail "rping -s not stopped"
  host connect 40 connect --device "soft:$H" --dest "$G" --rdma-cm --response-timeout 16 --timeout 30
  ic_wait_grep 'MRA_RECEIVED' "$(host_log connect)" 20 "${HPID[connect]}" || fail "no MRA within 20 s"
  sleep 1 # the MRA keeps the REQ alive: no REQ retransmission now
  go cont
  host_wait connect; guest_wait 60
  expect_guest_rc 0
  expect_guest 'ESTABLISHED'
  expect_guest 'server DISCONNECT EVENT'
  expect_host_rc connect 0
  expect_host connect 'MRA_RECEIVED service_timeout=24'
  expect_order connect 'MRA_RECEIVED' 'REP_RECEIVED'
  expect_host connect '^1 of 1 connection\(s\) established and disconnected'
  expect_host connect '^tx_retries +REQ=[1-9]'
  WIRE='h:REQ (h:REQ )+g:MRA (h:REQ |g:MRA )*g:REP h:RTU h:DREQ g:DREP'
}

# --- run them --------------------------------------------------------------------------------
pass=0; failed=0
printf '%-18s %-6s %7s  %s\n' scenario result seconds notes > "$OUT/summary.txt"
for SC in $want; do
  FAILS=(); WIRE=; HPID=(); HRC=(); GRC=; GOUT=/dev/null
  rm -f "$SHARE"/ev.* "$SHARE"/go.*
  ip netns exec "$NS" tcpdump -i tap0 -n -U --immediate-mode -s 0 -Z root -w "$OUT/$SC.pcap" udp port 4791 \
    > "$OUT/$SC.tcpdump.log" 2>&1 &
  TCPDUMP=$!; PIDS+=("$TCPDUMP")
  ic_wait_grep 'listening on' "$OUT/$SC.tcpdump.log" 10 "$TCPDUMP" || fail "tcpdump did not start"
  t0=$(date +%s.%N)
  "sc_${SC//-/_}"
  secs=$(ic_since "$t0")
  sleep 0.3; kill -INT "$TCPDUMP" 2>/dev/null; wait "$TCPDUMP" 2>/dev/null
  if [ -n "$WIRE" ] && [ -s "$OUT/$SC.pcap" ]; then
    python3 "$IC_DIR/pcapcheck.py" --ibcm "$IBCM" --host "$H" --expect "$WIRE" "$OUT/$SC.pcap" \
      > "$OUT/$SC.check.txt" 2>&1 || fail "capture check: $(grep -m1 PROBLEM "$OUT/$SC.check.txt")"
  else
    fail "no capture"
  fi
  "$IBCM" decode "$OUT/$SC.pcap" > "$OUT/$SC.decode.txt" 2>&1
  tshark -r "$OUT/$SC.pcap" -n -V -Y 'infiniband.mad.mgmtclass == 0x07' > "$OUT/$SC.tshark.txt" 2>/dev/null
  if [ ${#FAILS[@]} = 0 ]; then
    res=PASS; pass=$((pass + 1)); note=$(sed -n 's/^wire: \([^(]*\).*/\1/p' "$OUT/$SC.check.txt")
  else
    res=FAIL; failed=$((failed + 1)); note=$(printf '%s; ' "${FAILS[@]}")
  fi
  printf '%-18s %-6s %7s  %s\n' "$SC" "$res" "$secs" "$note" | tee -a "$OUT/summary.txt"
  if [ $res = FAIL ]; then
    for f in "$OUT/$SC".*.log "$OUT/$SC.check.txt"; do
      [ -f "$f" ] || continue
      echo "---- $(basename "$f")"; sed 's/^/    /' "$f" | tail -40
    done
  fi
done

# --- shut the guest down ---------------------------------------------------------------------
: > "$SHARE/quit"
for _ in $(seq 100); do kill -0 "$QEMU" 2>/dev/null || break; sleep 0.1; done
kill "$QEMU" 2>/dev/null; wait "$QEMU" 2>/dev/null
cp "$SHARE/dmesg.txt" "$SHARE/agent.log" "$SHARE/guest.info" "$OUT/" 2>/dev/null
{
  echo "kernel: $(sed -n 's/^version=//p' "$SHARE/guest.info")"
  echo "times: fetch ${T_FETCH} s, guest ready ${T_READY} s, total $(ic_since "$T_START") s"
  echo "result: $pass passed, $failed failed"
} | tee -a "$OUT/summary.txt"
[ "$failed" = 0 ] && [ "$pass" -gt 0 ]
