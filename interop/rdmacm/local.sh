# interop/rdmacm/local.sh - the server and the client of one tool in one guest at once (the
# local-* scenarios of interop/rdmacm/scenarios; interop/rdmacm.sh copies it into the run
# directory). Run by bash inside a guest, with the scenario's environment (IP, DEV, LAB_DIR,
# CM_IDS, the preload of the pairing):
#
#   bash $LAB_DIR/local.sh pair NAME READY END SERVER CLIENT      (guest A)
#   bash $LAB_DIR/local.sh wait NAME SECONDS                      (guest B)
#
# pair: starts SERVER (a bash command whose last step is the tool, which bash then execs: ending
#   the server is a signal to its pid), waits until it is ready, runs CLIENT, then ends the
#   server and prints every line of the server prefixed "S: ", of the client "C: " (as they
#   come), and one last line "rc client=C server=S"; exit status 0 iff both are 0. Each side's
#   stdout and stderr (the preloaded library's log) go through pipes of their own, so that a
#   line of one is never cut by a line of the other (one shared file did that in CI).
#   READY  listen: $CM_IDS shows a listener (the kernel's cm_ids, or the service's `ibcm ids`,
#          each call bounded to 10 s); out:REGEX: a line of the server's output matches REGEX.
#          Up to 60 s: a guest's first preloaded tool starts the service, and under TCG with
#          the host at load 20 that tool was not listening after 30 s (seen)
#   END    wait: the server exits by itself after the client (up to 20 s, then it is killed:
#          server=killed); stop: a server that serves until stopped is stopped once the client
#          returned (SIGTERM; server=0 when it was still running, else its own exit status)
#   A server that exits before it is ready, or never gets ready, leaves the client unrun
#   (client=not-run). Touches $LAB_DIR/NAME.fin at the end, whatever happened.
# wait: guest B's side of such a scenario: waits up to SECONDS for guest A's NAME.fin; exit
#   status 0 iff it came.
set -u

local_wait() { # local_wait NAME SECONDS
  local end=$((SECONDS + $2))
  until [ -e "$LAB_DIR/$1.fin" ]; do
    [ $SECONDS -lt $end ] || { echo "guest A did not finish $1 within $2 s"; return 1; }
    sleep 0.2
  done
}

# local_ready READY SERVER-OUTPUT PID (the server's stdout in SERVER-OUTPUT, its stderr in .err): 0 once the server is ready, 1 if it exited or the wait
# ran out (with a line saying which)
local_ready() {
  local end=$((SECONDS + 60))
  while :; do
    case $1 in
      listen) timeout 10 $CM_IDS 2>/dev/null | grep -q LISTEN && return 0 ;;
      out:*) grep -qE -- "${1#out:}" "$2" "$2.err" 2>/dev/null && return 0 ;;
      *) echo "local.sh: unknown readiness $1"; return 1 ;;
    esac
    kill -0 "$3" 2>/dev/null || { echo "local.sh: the server exited before it was ready"; return 1; }
    [ $SECONDS -lt $end ] || { echo "local.sh: the server was not ready ($1) after 60 s"; return 1; }
    sleep 0.1
  done
}

local_pair() { # local_pair NAME READY END SERVER CLIENT
  local name=$1 ready=$2 end=$3 srv=$4 cli=$5 d so s c=not-run r i
  d=$(mktemp -d)
  so=$d/server.out
  # the server's lines go to SO / SO.err (for out:REGEX) and, prefixed, to stdout as they
  # come (sed -u: one write per whole line); through FIFOs so that $! is the server itself
  # (the guests have no /dev/fd for >(...)); stdout and stderr each through its own
  mkfifo "$d/server.fifo" "$d/server.err.fifo" "$d/client.err.fifo"
  tee "$so" < "$d/server.fifo" | sed -u 's/^/S: /' &
  tee "$so.err" < "$d/server.err.fifo" | sed -u 's/^/S: /' &
  bash -c "$srv" > "$d/server.fifo" 2> "$d/server.err.fifo" &
  s=$!
  if local_ready "$ready" "$so" "$s"; then
    sed -u 's/^/C: /' < "$d/client.err.fifo" &
    bash -c "$cli" 2> "$d/client.err.fifo" | sed -u 's/^/C: /'
    c=${PIPESTATUS[0]}
  fi
  if [ "$end" = stop ] && kill -0 "$s" 2>/dev/null; then
    kill -TERM "$s" 2>/dev/null
    wait "$s" 2>/dev/null
    r=0
  else
    i=$((SECONDS + 20))  # by the clock: under TCG a `sleep` (preloaded) takes long to start
    while kill -0 "$s" 2>/dev/null && [ $SECONDS -lt $i ]; do sleep 0.1; done
    if kill -0 "$s" 2>/dev/null; then
      kill -KILL "$s" 2>/dev/null
      wait "$s" 2>/dev/null
      r=killed
    else
      wait "$s"
      r=$?
    fi
  fi
  wait  # the server's prefixing pipe drains
  rm -rf "$d"
  echo "rc client=$c server=$r"
  touch "$LAB_DIR/$name.fin"
  [ "$c" = 0 ] && [ "$r" = 0 ]
}

case ${1:-} in
  pair) [ $# = 6 ] || { echo "usage: local.sh pair NAME READY END SERVER CLIENT" >&2; exit 2; }
    [ "$4" = wait ] || [ "$4" = stop ] || { echo "local.sh: END is wait or stop, not $4" >&2; exit 2; }
    shift; local_pair "$@" ;;
  wait) [ $# = 3 ] || { echo "usage: local.sh wait NAME SECONDS" >&2; exit 2; }
    shift; local_wait "$@" ;;
  *) echo "usage: local.sh pair NAME READY END SERVER CLIENT | local.sh wait NAME SECONDS" >&2; exit 2 ;;
esac
