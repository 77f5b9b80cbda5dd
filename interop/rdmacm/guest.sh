# interop/rdmacm/guest.sh - the guest side of interop/rdmacm.sh, sourced by bash inside each
# lab guest (after lablib.sh). Guest A is the server of every scenario, guest B the client.
#
#   rdmacm_guest server|client
#
# Reads from the run directory ($LAB_DIR, shared by host and both guests):
#   scenarios.run   one scenario per line, fields separated by TAB:
#                   NAME TIMEOUT READY STOP SERVER-COMMAND CLIENT-COMMAND (check.py wrote
#                   it; STOP=1: the server serves until stopped, stop it once the client returned)
#   pairing.env     PRELOAD_A / PRELOAD_B (1: run the tool with the ibcm librdmacm preloaded),
#                   SERVICE (1: the preloaded tools use the host CM service, `ibcm daemon`
#                   started on demand from $LAB_DIR/ibcm; 0: in-process, IBCM_SERVICE=off),
#                   IBCM_ENV (extra environment for preloaded tools), READY_WAIT (seconds),
#                   MEM_SAMPLE (seconds, optional: scripts/bench-kernel.sh's memory sampler, below),
#                   SERVICE_UP (1, optional: `ibcm daemon` started before the first scenario)
#   lib/librdmacm.so.1, ibcm (SERVICE=1)
# Writes per scenario: NAME.srv.out / NAME.srv.err / NAME.srv.rc (A), NAME.cli.out /
# NAME.cli.err / NAME.cli.rc (B): a tool's stdout (.out) and its stderr, where the preloaded
# library's log lines go (.err), in two files, so that a line of one stream is never cut by a
# line of the other (two writers of one file: seen in CI, srq's "srq_lab: end 0" written into the
# middle of a library debug line); NAME.note (what the driver had to do: a readiness wait that ran out, a killed server).
# rc files hold the exit status, or "killed" when the driver had to stop the tool.
# Commands see IP (this guest), PEER (the other one), DEV (rxe0), and what lists this guest's
# CM ids: CM_IDS (a command: `rdma res show cm_id` for the kernel CM, `$LAB_DIR/ibcm ids` for
# ibcm through the service, `true` for in-process ibcm, which nothing outside shows),
# CM_PENDING (an ERE for an id holding a connection request: kernel `state CONNECT`, ibcm
# `REQ_RCVD|MRA_REQ_SENT`).
#
# Synchronisation (files in $LAB_DIR): A signals NAME.ready once the server is ready (NAME.dead
# if it exited before: the client is not run), B signals NAME.done after its client returned.
# A marks each scenario on the wire with a UDP datagram "IBCM-RDMACM-MARK NAME begin|end" to
# the peer's port 9, so the host can cut the capture of guest A's NIC into one capture per
# scenario (check.py).

rdmacm_mark() { # rdmacm_mark NAME begin|end
  echo "IBCM-RDMACM-MARK $1 $2" > "/dev/udp/$LAB_PEER_IP/9" 2>/dev/null || true
  sleep 0.2
}

# rdmacm_env: the environment prefix of this guest's tools (env(1) arguments)
rdmacm_env() {
  local pre
  if [ "$LAB_NAME" = A ]; then pre=$PRELOAD_A; else pre=$PRELOAD_B; fi
  if [ "$pre" = 1 ]; then
    if [ "${SERVICE:-0}" = 1 ]; then
      echo "LD_PRELOAD=$LAB_DIR/lib/librdmacm.so.1 IBCM_LOG=${IBCM_LOG_LEVEL:-debug} IBCM_SERVICE=auto IBCM_DAEMON=$LAB_DIR/ibcm $IBCM_ENV"
    else
      echo "LD_PRELOAD=$LAB_DIR/lib/librdmacm.so.1 IBCM_LOG=${IBCM_LOG_LEVEL:-debug} IBCM_SERVICE=off $IBCM_ENV"
    fi
  fi
}

# rdmacm_ids: the command that lists this guest's CM ids (see CM_IDS above)
rdmacm_ids() {
  if [ -z "$(rdmacm_env)" ]; then echo "rdma res show cm_id"
  elif [ "${SERVICE:-0}" = 1 ]; then echo "$LAB_DIR/ibcm ids"
  else echo true
  fi
}

# rdmacm_ready NAME READY OUT: wait until the server writing OUT (and OUT's .err) is ready; fails if it exited
# first (its .rc file exists). A readiness wait that runs out is noted; the client runs anyway.
rdmacm_ready() {
  local name=$1 ready=$2 out=$3 i=0 n=$((READY_WAIT * 10))
  case $ready in
    none) return 0 ;;
    listen)
      if [ -n "$(rdmacm_env)" ] && [ "${SERVICE:-0}" != 1 ]; then
        # ibcm: nothing in the kernel shows its listener; its log says so (or that it opened
        # its device: the tools listen right after binding, long before a client can start)
        until grep -qiE "$LISTEN_RE" "$out" "${out%.out}.err" 2>/dev/null; do
          [ ! -e "${out%.out}.rc" ] || { echo "server exited before it was ready: client not run" >> "$LAB_DIR/$name.note"; return 1; }
          i=$((i + 1))
          if [ $i -ge $n ]; then
            echo "no line matching /$LISTEN_RE/ in the server's log after ${READY_WAIT} s: went on" >> "$LAB_DIR/$name.note"
            return 0
          fi
          lab_nap 0.1
        done
        lab_nap 0.3
        [ ! -e "${out%.out}.rc" ] || { echo "server exited before it was ready: client not run" >> "$LAB_DIR/$name.note"; return 1; }
      else
        # the kernel's cm_ids, or the service's (`ibcm ids`)
        until $(rdmacm_ids) 2>/dev/null | grep -q LISTEN; do
          [ ! -e "${out%.out}.rc" ] || { echo "server exited before it was ready: client not run" >> "$LAB_DIR/$name.note"; return 1; }
          i=$((i + 1))
          if [ $i -ge $n ]; then
            echo "no cm_id in LISTEN ($(rdmacm_ids)) after ${READY_WAIT} s: went on" >> "$LAB_DIR/$name.note"
            return 0
          fi
          lab_nap 0.1
        done
      fi
      ;;
    out:*)
      until grep -qE -- "${ready#out:}" "$out" "${out%.out}.err" 2>/dev/null; do
        [ ! -e "${out%.out}.rc" ] || { echo "server exited before it was ready: client not run" >> "$LAB_DIR/$name.note"; return 1; }
        i=$((i + 1))
        if [ $i -ge $n ]; then
          echo "no line matching /${ready#out:}/ in the server's output after ${READY_WAIT} s: went on" >> "$LAB_DIR/$name.note"
          return 0
        fi
        lab_nap 0.1
      done
      ;;
  esac
  return 0
}

# rdmacm_run OUT RC TIMEOUT COMMAND: run COMMAND with this guest's environment, bounded, in a
# process group of its own (OUT.pgid) so that the driver can stop it with everything it started;
# stdout to OUT, stderr to OUT's .err (never one file: see above); stdout line-buffered
# (stdbuf) so that a tool that has to be stopped leaves its lines (stdbuf appends its own
# library to LD_PRELOAD, after ibcm's)
rdmacm_run() {
  local out=$1 rc=$2 t=$3 cmd=$4 t0 pending='state CONNECT'
  t0=$(lab_ts)
  [ -z "$(rdmacm_env)" ] || pending='REQ_RCVD|MRA_REQ_SENT'
  # shellcheck disable=SC2016,SC2046
  IP=$LAB_IP PEER=$LAB_PEER_IP DEV=rxe0 LAB_DIR=$LAB_DIR CM_IDS="$(rdmacm_ids)" CM_PENDING="$pending" setsid bash -c \
    'echo $$ > "$1"; t=$2; c=$3; shift 3; exec timeout -k 5 "$t" env "$@" stdbuf -oL -eL bash -c "$c"' \
    rdmacm "$out.pgid" "$t" "$cmd" $(rdmacm_env) < /dev/null > "$out" 2> "${out%.out}.err"
  echo $? > "$rc"
  awk -v a="$t0" -v b="$(lab_ts)" 'BEGIN{printf "%.2f\n", b-a}' > "$rc.time"
}

# rdmacm_stop OUT: stop the process group that rdmacm_run started for OUT
rdmacm_stop() {
  local g
  g=$(cat "$1.pgid" 2>/dev/null) || return 0
  kill -TERM -- "-$g" 2>/dev/null; sleep 1
  kill -KILL -- "-$g" 2>/dev/null
  return 0
}

# rdmacm_stat NAME: where this guest's tools go through the service, its counters once the
# scenario's tool has exited, to $LAB_DIR/NAME.$LAB_NAME.stat.json (`ibcm stat --json`: ids,
# retries, timeouts, rejects, drops; the service lingers 30 s after its last client, and one that
# does not answer in 20 s leaves the reason in the file's .err)
rdmacm_stat() {
  [ -n "$(rdmacm_env)" ] && [ "${SERVICE:-0}" = 1 ] || return 0
  timeout 20 "$LAB_DIR/ibcm" stat --json > "$LAB_DIR/$1.$LAB_NAME.stat.json" \
    2> "$LAB_DIR/$1.$LAB_NAME.stat.err" || true
}

# rdmacm_memwatch SECONDS: every SECONDS, one line to $LAB_DIR/$LAB_NAME.mem until the guest ends:
# epoch seconds, MemAvailable, MemFree, Slab, SUnreclaim (kB, /proc/meminfo), then NAME:PID:RSS-kB
# of every cmtime and ibcm process (where a 10,000-connection run's memory goes: the tool, the
# service, or the kernel's rxe objects in the slab)
rdmacm_memwatch() {
  local p c r k v rest line
  # bash builtins only (lab_nap to pause): a fork costs milliseconds on the guests'
  # emulated CPU, and the sampler must not load the run it watches
  while :; do
    printf -v line "%(%s)T" -1
    while read -r k v rest; do
      case $k in MemAvailable:|MemFree:|Slab:|SUnreclaim:) line+=" $k$v" ;; esac
    done < /proc/meminfo
    for p in /proc/[0-9]*; do
      read -r c 2>/dev/null < "$p/comm" || continue
      case $c in
        cmtime|ibcm)
          r=0
          while read -r k v rest; do [ "$k" != VmRSS: ] || { r=$v; break; }; done 2>/dev/null < "$p/status"
          line+=" $c:${p#/proc/}:$r" ;;
      esac
    done
    echo "$line" >> "$LAB_DIR/$LAB_NAME.mem"
    lab_nap "$1"
  done
}

rdmacm_guest() {
  local role=$1 name t ready stop scmd ccmd pid i g memw=
  # shellcheck disable=SC1091
  . "$LAB_DIR/pairing.env"
  if [ -n "${MEM_SAMPLE:-}" ]; then rdmacm_memwatch "$MEM_SAMPLE" & memw=$!; fi
  # SERVICE_UP=1 (scripts/bench-kernel.sh): the host CM service runs before the first scenario,
  # as a service started at boot would, so that no timed step pays for its start on demand
  if [ "${SERVICE_UP:-0}" = 1 ] && [ "${SERVICE:-0}" = 1 ] && [ -n "$(rdmacm_env)" ]; then
    "$LAB_DIR/ibcm" daemon 2> "$LAB_DIR/$LAB_NAME.daemon.err" || echo "the CM service did not start" >&2
  fi
  # the first mark must not go out before the peer's eth0 is up (ARP would drop it)
  if [ "$role" = server ]; then
    lab_wait up B 120 || echo "guest B never came up" >&2
    rdmacm_mark - arp  # resolves the peer before the first mark that counts
  else
    lab_signal up
  fi
  while IFS=$'\t' read -r name t ready stop scmd ccmd; do
    [ -n "$name" ] || continue
    if [ "$role" = server ]; then
      rdmacm_mark "$name" begin
      rdmacm_run "$LAB_DIR/$name.srv.out" "$LAB_DIR/$name.srv.rc" "$t" "$scmd" &
      pid=$!
      if rdmacm_ready "$name" "$ready" "$LAB_DIR/$name.srv.out"; then
        lab_signal "$name.ready"
      else
        lab_signal "$name.dead"
      fi
      lab_wait "$name.done" B $((t + 30)) || echo "the client did not finish" >> "$LAB_DIR/$name.note"
      # the server has its own timeout; give it 10 s after the client, 2 s after a failed
      # client (the cell fails anyway), none if STOP
      g=100
      [ "$(cat "$LAB_DIR/$name.cli.rc" 2>/dev/null)" = 0 ] || g=20
      [ "$stop" = 1 ] && g=0
      i=0
      while kill -0 "$pid" 2>/dev/null && [ $i -lt $g ]; do lab_nap 0.1; i=$((i + 1)); done
      if [ "$stop" = 1 ]; then
        rdmacm_stop "$LAB_DIR/$name.srv.out"
        wait "$pid" 2>/dev/null
      elif kill -0 "$pid" 2>/dev/null; then
        rdmacm_stop "$LAB_DIR/$name.srv.out"
        wait "$pid" 2>/dev/null
        echo killed > "$LAB_DIR/$name.srv.rc"
        echo "server still running $((g / 10)) s after the client: killed" >> "$LAB_DIR/$name.note"
      fi
      wait "$pid" 2>/dev/null
      # no listener of this scenario may be left for the next one
      i=0
      while [ "$(rdmacm_ids)" != true ] && $(rdmacm_ids) 2>/dev/null | grep -q LISTEN && [ $i -lt 50 ]; do
        lab_nap 0.1; i=$((i + 1))
      done
      rdmacm_stat "$name"
      rdmacm_mark "$name" end
    else
      i=0
      until [ -e "$LAB_DIR/A.$name.ready" ] || [ -e "$LAB_DIR/A.$name.dead" ] || [ $i -ge $(((t + 30) * 10)) ]; do
        lab_nap 0.1; i=$((i + 1))
      done
      if [ -e "$LAB_DIR/A.$name.ready" ]; then
        rdmacm_run "$LAB_DIR/$name.cli.out" "$LAB_DIR/$name.cli.rc" "$t" "$ccmd"
      else
        [ -e "$LAB_DIR/A.$name.dead" ] || echo "the server never became ready" >> "$LAB_DIR/$name.note"
        echo "not-run" > "$LAB_DIR/$name.cli.rc"
      fi
      rdmacm_stat "$name"
      lab_signal "$name.done"
    fi
  done < "$LAB_DIR/scenarios.run"
  [ -z "$memw" ] || kill "$memw" 2>/dev/null
  return 0
}
