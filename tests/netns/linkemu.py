#!/usr/bin/env python3
"""A userspace link emulator between two TUN devices (netem's job, for
kernels built without sch_netem).

Run inside the middle namespace of tests/netns/run.sh: every IP packet read
from one TUN device is written to the other after the configured
impairments, and the kernel routes it on (policy routing by input device).

  loss     drop with probability P
  dup      deliver a second copy with probability P
  delay    one-way delay in ms, plus uniform jitter of +-J ms
  reorder  with probability P a packet skips the delay (overtakes earlier
           ones), as netem's `reorder` does

SIGUSR1 toggles a link cut (100 % loss) as an alternative to `ip link set
down`. On SIGTERM it prints one JSON line of counters to --stats (or
stdout) and exits.
"""
import argparse
import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="TUN device (A side)")
    ap.add_argument("--b", required=True, help="TUN device (B side)")
    ap.add_argument("--loss", type=float, default=0.0)
    ap.add_argument("--dup", type=float, default=0.0)
    ap.add_argument("--delay", type=float, default=0.0, help="ms")
    ap.add_argument("--jitter", type=float, default=0.0, help="ms")
    ap.add_argument("--reorder", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stats", default=None)
    ap.add_argument("--ready", default=None, help="file written (our pid) once attached")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    fds = {open_tun(args.a): None, open_tun(args.b): None}
    fa, fb = list(fds)
    peer = {fa: fb, fb: fa}
    st = dict(packets=0, dropped=0, duplicated=0, reordered=0, delivered=0,
              cut_dropped=0, write_errors=0)
    cut = [False]
    stop = [False]
    heap = []  # (due, seq, fd, packet)
    seq = 0

    def on_usr1(*_):
        cut[0] = not cut[0]

    def on_term(*_):
        stop[0] = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write(f"{os.getpid()}\n")

    while not stop[0]:
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, fd, pkt = heapq.heappop(heap)
            try:
                os.write(fd, pkt)
                st["delivered"] += 1
            except OSError:
                st["write_errors"] += 1
        timeout = max(0.0, heap[0][0] - now) if heap else 0.5
        try:
            ready, _, _ = select.select([fa, fb], [], [], timeout)
        except InterruptedError:
            continue
        for fd in ready:
            for _ in range(64):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                st["packets"] += 1
                if cut[0]:
                    st["cut_dropped"] += 1
                    continue
                if rng.random() < args.loss:
                    st["dropped"] += 1
                    continue
                copies = 1
                if rng.random() < args.dup:
                    copies = 2
                    st["duplicated"] += 1
                for _ in range(copies):
                    if rng.random() < args.reorder:
                        d = 0.0
                        st["reordered"] += 1
                    else:
                        d = args.delay + rng.uniform(-args.jitter, args.jitter)
                    seq += 1
                    heapq.heappush(heap, (time.monotonic() + max(d, 0.0) / 1e3, seq, peer[fd], pkt))
    out = json.dumps(st)
    if args.stats:
        with open(args.stats, "w") as f:
            f.write(out + "\n")
    else:
        print(out)


if __name__ == "__main__":
    sys.exit(main())
