#!/bin/bash
# interop guest agent: runs the host's commands one after the other.
# Runs in the guest, chrooted into the host's / (bash and rdma-core from the host).
# The share $IC_SHARE (= the host's run directory) carries:
#   host -> guest   cmd.N        bash snippet N (N = 1, 2, ...); `quit` ends the agent
#   guest -> host   out.N rc.N   its output (stdout+stderr) and exit status
#                   ev.NAME      events the snippet raises with `signal NAME`
# A snippet is bounded by the `# timeout=SEC` line it contains (default 40 s); it runs in its
# own session, killed as a whole when it ends, with the helpers below.
cd "$IC_SHARE" || exit 1
export IC_SHARE
# The scenarios run one process per device against the kernel CM, in-process;
# one that wants the host CM service sets IBCM_SERVICE itself.
export IBCM_SERVICE=off
# Addresses and names the host wants the snippets to see (G, H, ...).
[ -f env.sh ] && { set -a; . ./env.sh; set +a; }

# signal NAME: tell the host NAME happened
signal() { : > "$IC_SHARE/ev.$1"; }
# await NAME [SEC]: wait for the host's go.NAME
await() {
  local i=0 t=$((${2:-30} * 20))
  while [ ! -e "$IC_SHARE/go.$1" ]; do
    sleep 0.05; i=$((i+1))
    [ $i -lt $t ] || { echo "agent: timed out waiting for go.$1"; return 1; }
  done
}
# listening [SEC]: wait until the kernel has an rdma_cm listener (a cm_id in LISTEN)
listening() {
  local i=0 t=$((${1:-20} * 20))
  until rdma res show cm_id 2>/dev/null | grep -q LISTEN; do
    sleep 0.05; i=$((i+1))
    [ $i -lt $t ] || { echo "agent: no LISTEN cm_id"; return 1; }
  done
}
# stamp: guest uptime, for the logs
stamp() { cut -d' ' -f1 /proc/uptime; }
export -f signal await listening stamp

n=1
: > agent.up
while :; do
  if [ -e "cmd.$n" ]; then
    t=$(sed -n 's/^# timeout=\([0-9]*\).*/\1/p' "cmd.$n" | head -1)
    t=$(( ${t:-40} * 20 ))
    echo "agent: cmd.$n at $(stamp)"
    # Own session, so that whatever the snippet leaves behind can be killed as a group.
    setsid bash "cmd.$n" > "out.$n.tmp" 2>&1 < /dev/null &
    pid=$! i=0
    while kill -0 $pid 2>/dev/null; do
      sleep 0.05; i=$((i+1))
      if [ $i -ge $t ]; then echo "agent: cmd.$n timed out"; kill -KILL -- -$pid; fi
    done
    wait $pid; rc=$?
    kill -KILL -- -$pid 2>/dev/null
    mv "out.$n.tmp" "out.$n"
    echo $rc > "rc.$n.tmp"; mv "rc.$n.tmp" "rc.$n"
    echo "agent: cmd.$n rc=$rc at $(stamp)"
    n=$((n+1))
  elif [ -e quit ]; then
    break
  else
    sleep 0.05
  fi
done
echo "agent: quit at $(stamp)"
