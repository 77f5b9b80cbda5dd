"""Drives tests/cm_peer.c (a C program using only the C API) line by line."""

import queue
import subprocess
import threading
import time


class PeerError(AssertionError):
    pass


class CPeer:
    def __init__(self, exe, ip):
        self.ip = ip
        self.proc = subprocess.Popen(
            [str(exe), f"soft:{ip}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._replies = queue.Queue()
        self._events = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        first = self._reply(5)
        if first != "OK 0":
            raise PeerError(f"cm_peer on {ip} did not start: {first}")

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("EV "):
                with self._cond:
                    self._events.append(self._parse(line))
                    self._cond.notify_all()
            else:
                self._replies.put(line)
        with self._cond:
            self._cond.notify_all()

    @staticmethod
    def _parse(line):
        parts = line.split()
        ev = {"id": int(parts[1]), "type": parts[2]}
        for kv in parts[3:]:
            k, v = kv.split("=", 1)
            if k in ("pdata", "ari", "info"):
                ev[k] = b"" if v == "-" else bytes.fromhex(v)
            else:
                ev[k] = v
        return ev

    def _reply(self, timeout):
        try:
            return self._replies.get(timeout=timeout)
        except queue.Empty:
            raise PeerError(f"cm_peer on {self.ip}: no reply") from None

    def cmd(self, *args, ok=True):
        """Runs a command; returns its int result (raises unless OK when ok).
        bytes become hex ("-" when empty), ints decimal; pass hex numbers
        (service IDs, QPNs) as strings."""
        line = " ".join((a.hex() or "-") if isinstance(a, (bytes, bytearray)) else str(a) for a in args)
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        r = self._reply(5)
        kind, val = r.split()
        if ok and kind != "OK":
            raise PeerError(f"cm_peer {line!r}: {r}")
        return int(val)

    def event(self, id_, type_, timeout=5.0):
        """Removes and returns the first event of ``type_`` on id ``id_``
        (any id when None)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, ev in enumerate(self._events):
                    if ev["type"] == type_ and (id_ is None or ev["id"] == id_):
                        return self._events.pop(i)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self._reader.is_alive():
                    raise PeerError(f"cm_peer on {self.ip}: no {type_} on id {id_}; have {self._events}")
                self._cond.wait(left)

    def kill(self):
        """SIGKILL: the peer vanishes without a word on the fabric."""
        self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass
