#!/usr/bin/env python3
"""interop/rdmacm/check.py - the table and the verdicts of interop/rdmacm.sh.

  check.py prepare TABLE RUNDIR [NAME...]
      Writes RUNDIR/scenarios.run (the guest driver's input: NAME, TIMEOUT, READY, STOP,
      SERVER, CLIENT, TAB-separated) for the named scenarios (default: every one not excluded) and
      prints the sum of their timeouts.
  check.py check TABLE RUNDIR PCAP IBCM OUTDIR PAIRING
      Judges one pairing's run: cuts the capture of guest A's NIC at the guests' marks into
      OUTDIR/NAME.pcap, decodes each with `IBCM decode --summary` (NAME.decode.txt), checks the
      tools' exit statuses and output lines (NAME.srv.out/.err, NAME.cli.out/.err: each tool's
      stdout and stderr, written by the guest driver into two files and split into lines each
      on its own) and the capture, writes OUTDIR/results.json.
  check.py fail TABLE RUNDIR OUTDIR PAIRING REASON
      Every scenario of RUNDIR/scenarios.run fails with REASON (the pairing could not run).
  check.py retries TABLE EXPECT OUT PAIRING...
      Prints "PAIRING NAME..." for every pairing with expected cells that failed and whose
      scenario has a "retry" line in TABLE (a known race of the tool itself): interop/rdmacm.sh
      runs those once more, into OUT/retry/PAIRING.
  check.py summary EXPECT OUT PAIRING...
      Prints and writes OUT/summary.txt: scenario x pairing -> PASS / FAIL / excluded, and
      judges it against EXPECT (the pairings and scenarios expected to pass). A cell that
      failed and passed on its retry (OUT/retry/PAIRING) counts as passed and is shown as
      "PASS/2" with the first attempt's reasons. Exit status 1 when an expected one did not pass.

The table (interop/rdmacm/scenarios): one scenario per line,
  NAME | TIMEOUT | READY | SERVER | CLIENT | SERVER EXPECTS | CLIENT EXPECTS | CM | DATA [| FIELDS]
    READY    listen (a listener: the kernel's cm_id, or ibcm's log line), out:REGEX (the
             server printed REGEX), none
    EXPECTS  items joined by " && ": rc=N, rc!=0, rc=any (default rc=0); stop (server only: a
             server that serves until stopped, the driver stops it once the client returned);
             =N:REGEX (exactly N output lines match); REGEX (at least one line matches);
             !REGEX (no line matches); lines of the tool's stdout and stderr alike
    CM       none (no CM MAD) or N:REGEX: exactly N connections in the capture, and the
             message sequence of each (the first transmission of every MAD, e.g.
             "REQ REP RTU DREQ DREP") matches REGEX
    DATA     >=N or =N: RoCE packets to a QP other than QP1 (the tools' own traffic)
    FIELDS   (optional) items joined by " && ": ATTR.field=value: that field of every MAD
             of kind ATTR in the capture (`ibcm decode --json` keys), e.g.
             REQ.primary_traffic_class=32
  and lines "exclude NAME REASON" for a scenario that does not pass between two kernel CMs,
  "retry NAME REASON" for one with a known race in the tool itself (run once more when an
  expected cell of it fails; both attempts are reported).
Commands are bash snippets; they see $IP (own address), $PEER (the other guest) and $DEV
(rxe0). A pipe inside a command is written without spaces around its "|".
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import zlib

MARK = b"IBCM-RDMACM-MARK "
ROCE_PORT = 4791
SOFT_PORT = 4792  # ibcm's UDP side channel (soft:<ip>@<dev>), RoCEv2 framing


class Scenario:
    def __init__(self, fields, line_no):
        if len(fields) not in (9, 10):
            raise SystemExit(f"scenarios:{line_no}: 9 or 10 fields separated by ' | ' expected, got {len(fields)}")
        (self.name, timeout, self.ready, self.server, self.client, sx, cx, self.cm, self.data) = fields[:9]
        self.fields = split_expects(fields[9]) if len(fields) == 10 else []
        for f in self.fields:
            if not re.fullmatch(r"[A-Z_]+\.[a-z0-9_]+=\S+", f):
                raise SystemExit(f"scenarios:{line_no}: bad field expectation {f!r} (ATTR.field=value)")
        self.timeout = int(timeout)
        self.server_expects = split_expects(sx)
        self.client_expects = split_expects(cx)


def split_expects(text):
    return [e.strip() for e in text.split(" && ") if e.strip()]


def read_table(path):
    scenarios, excluded = read_table_all(path)[:2]
    return scenarios, excluded


def read_retries(path):
    """{NAME: REASON} of the table's "retry" lines."""
    return read_table_all(path)[2]


def read_table_all(path):
    scenarios, excluded, retry = [], {}, {}
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("exclude ") or line.startswith("retry "):
                kind, name, reason = line.split(" ", 2)
                (excluded if kind == "exclude" else retry)[name] = reason
                continue
            scenarios.append(Scenario([x.strip() for x in line.split(" | ")], no))
    names = [s.name for s in scenarios]
    for kind, d in (("exclude", excluded), ("retry", retry)):
        for n in d:
            if n not in names:
                raise SystemExit(f"{path}: {kind} {n}: no such scenario")
    return scenarios, excluded, retry


# --- pcap -----------------------------------------------------------------------------------
def read_pcap(path):
    """(header bytes, [(record header, frame)]) of a classic pcap file."""
    with open(path, "rb") as f:
        d = f.read()
    if len(d) < 24:
        return d, []
    magic = struct.unpack("<I", d[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise SystemExit(f"{path}: not a little-endian classic pcap (magic {magic:#x})")
    recs, off = [], 24
    while off + 16 <= len(d):
        incl = struct.unpack("<I", d[off + 8:off + 12])[0]
        recs.append((d[off:off + 16], d[off + 16:off + 16 + incl]))
        off += 16 + incl
    return d[:24], recs


def udp_of(frame):
    """(ip offset, ip header length, ip total length, sport, dport, payload offset) or None."""
    if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 15) * 4
    tot = struct.unpack(">H", frame[16:18])[0]
    u = 14 + ihl
    sport, dport = struct.unpack(">HH", frame[u:u + 4])
    return 14, ihl, tot, sport, dport, u + 8


def icrc(frame, ihl, tot):
    """RoCEv2 ICRC of an IPv4 frame: the variant fields masked with ones (FINDINGS, step 3)."""
    ip = bytearray(frame[14:14 + ihl])
    ip[1] = 0xFF
    ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    udp = bytearray(frame[14 + ihl:14 + ihl + 8])
    udp[6:8] = b"\xff\xff"
    rest = bytearray(frame[14 + ihl + 8:14 + tot - 4])
    rest[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + ip + udp + rest) & 0xFFFFFFFF)


def to_roce_port(frame):
    """(frame, ICRC was right) for a side-channel frame (UDP 4792, RoCEv2 framing): rewritten
    to UDP 4791 with its ICRC recomputed, so that `ibcm decode` (which reads port 4791)
    decodes it. None if the frame is not one. A wrong ICRC is not a failure on the side
    channel (its receiver cannot see the IP header and only counts mismatches), so the frame
    is rewritten anyway and the mismatch reported."""
    u = udp_of(frame)
    if not u or u[4] != SOFT_PORT or len(frame) < 14 + u[2] or u[2] < u[1] + 8 + 12 + 4:
        return None
    _, ihl, tot, _, _, _ = u
    ok = icrc(frame, ihl, tot) == frame[14 + tot - 4:14 + tot]
    f = bytearray(frame)
    f[14 + ihl + 2:14 + ihl + 4] = struct.pack(">H", ROCE_PORT)
    f[14 + ihl + 6:14 + ihl + 8] = b"\x00\x00"  # UDP checksum: none (as rxe sends it)
    f[14 + tot - 4:14 + tot] = icrc(bytes(f), ihl, tot)
    return bytes(f), ok


def cut(pcap):
    """{scenario: (pcap header, [records])} between the marks, with side-channel CM frames
    rewritten to port 4791; {scenario: RoCE packets to a QP other than QP1}; {scenario:
    side-channel frames whose ICRC was not what a Linux UDP sender's headers give}."""
    hdr, recs = read_pcap(pcap)
    slices, data, bad_icrc, cur = {}, {}, {}, None
    for rh, fr in recs:
        u = udp_of(fr)
        if u and u[4] == 9 and fr[u[5]:].startswith(MARK):
            words = fr[u[5] + len(MARK):].decode(errors="replace").split()
            if len(words) >= 2:
                cur = words[0] if words[1] == "begin" else None
                if cur:
                    slices.setdefault(cur, (hdr, []))
                    data.setdefault(cur, 0)
            continue
        if cur is None:
            continue
        if u and u[4] == SOFT_PORT:
            g = to_roce_port(fr)
            if g is not None:
                fr, ok = g
                rh = rh[:8] + struct.pack("<II", len(fr), len(fr))
                if not ok:
                    bad_icrc[cur] = bad_icrc.get(cur, 0) + 1
        slices[cur][1].append((rh, fr))
        u = udp_of(fr)
        if u and u[4] == ROCE_PORT and len(fr) >= u[5] + 12:
            dqp = int.from_bytes(fr[u[5] + 5:u[5] + 8], "big")
            if dqp != 1:
                data[cur] += 1
    return slices, data, bad_icrc


def write_pcap(path, hdr, recs):
    with open(path, "wb") as f:
        f.write(hdr)
        for rh, fr in recs:
            f.write(rh)
            f.write(fr)


# --- expectations ---------------------------------------------------------------------------
def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def rc_meaning(rc):
    """What an exit status from timeout(1) / bash means beyond its number."""
    if rc == "124":
        return " (timeout)"
    if rc.isdigit() and 128 < int(rc) < 128 + 65:
        try:
            return f" ({signal.Signals(int(rc) - 128).name})"
        except ValueError:
            return ""
    return ""


def output_lines(*texts):
    """The lines of a side's outputs, each text (its stdout, its stderr) split on its own: a
    line of one stream can never be cut by a line of the other."""
    return [line for t in texts for line in (t or "").splitlines()]


def check_output(who, expects, out, rc, err=None):
    """The first unmet expectation of one side (OUT its stdout, ERR its stderr: every
    expectation is matched against the lines of both), or None."""
    if rc is None:
        return f"{who}: no exit status (the guest driver did not run it)"
    want_rc = "rc=0"
    for e in expects:
        if e.startswith("rc"):
            want_rc = e
        elif e == "stop":
            want_rc = "rc=any"
    if rc == "not-run":
        return f"{who}: not run (the server exited or never became ready)"
    if want_rc != "rc=any":
        if rc == "killed":
            return f"{who}: still running after its peer finished, killed"
        if want_rc == "rc!=0":
            if rc == "0":
                return f"{who}: exit status 0, expected a failure"
        elif rc != want_rc[3:]:
            return f"{who}: exit status {rc}{rc_meaning(rc)}, expected {want_rc[3:]}"
    lines = output_lines(out, err)
    for e in expects:
        if e.startswith("rc") or e == "stop":
            continue
        m = re.match(r"=(\d+):(.*)", e)
        if m:
            n = sum(1 for line in lines if re.search(m.group(2), line))
            if n != int(m.group(1)):
                return f"{who}: {n} line(s) match /{m.group(2)}/, expected {m.group(1)}"
        elif e.startswith("!"):
            hit = [line for line in lines if re.search(e[1:], line)]
            if hit:
                return f"{who}: unexpected line: {hit[0].strip()}"
        elif not any(re.search(e, line) for line in lines):
            return f"{who}: no line matches /{e}/"
    return None


def check_cm(spec, summary):
    conns = summary.get("connections", []) if summary else []
    seqs = [" ".join(m["attr"] for m in c["messages"] if m.get("repeat") == "first") for c in conns]
    if spec == "none":
        n = summary.get("mads", 0) if summary else 0
        return None if n == 0 else f"capture: {n} CM MAD(s), expected none", seqs
    m = re.match(r"(\d+):(.*)", spec)
    if not m:
        raise SystemExit(f"bad CM expectation {spec!r}")
    if len(conns) != int(m.group(1)):
        return f"capture: {len(conns)} connection(s) ({'; '.join(sorted(set(seqs))) or 'no CM MAD'}), expected {m.group(1)}", seqs
    for s in seqs:
        if not re.fullmatch(m.group(2), s):
            return f"capture: message sequence '{s}', expected /{m.group(2)}/", seqs
    return None, seqs


def check_fields(specs, mads):
    """The first field expectation that a MAD of the capture does not meet, or None."""
    for spec in specs:
        lhs, want = spec.split("=", 1)
        attr, key = lhs.split(".", 1)
        got = [m for m in mads if m.get("attr") == attr]
        if not got:
            return f"capture: no {attr} for {spec}"
        for m in got:
            v = m.get(key)
            if str(v).lower() != want.lower():
                return f"capture: {attr} frame {m.get('frame')}: {key} = {v}, expected {want}"
    return None


def check_data(spec, n):
    m = re.match(r"(>=|=)(\d+)$", spec)
    if not m:
        raise SystemExit(f"bad DATA expectation {spec!r}")
    want = int(m.group(2))
    ok = n >= want if m.group(1) == ">=" else n == want
    return None if ok else f"capture: {n} data packet(s), expected {m.group(1)}{want}"


def first_line(out, pats=("error", "fail", "reject", "unreachable", "timed out", "panic", "abort"),
               err=None):
    """The first line of OUT (then of ERR) that looks like an error (for the report); ibcm's
    debug and info lines are not errors."""
    for line in output_lines(out, err):
        if re.match(r"ibcm\[\d+\] (debug|info):", line):
            continue
        low = line.lower()
        if any(p in low for p in pats):
            return line.strip()[:200]
    return None


def cmd_prepare(table, rundir, names):
    scenarios, excluded = read_table(table)
    known = {s.name: s for s in scenarios}
    for n in names:
        if n not in known:
            raise SystemExit(f"unknown scenario {n} (known: {' '.join(known)})")
    chosen = [known[n] for n in names] if names else [s for s in scenarios if s.name not in excluded]
    with open(os.path.join(rundir, "scenarios.run"), "w") as f:
        for s in chosen:
            stop = "1" if "stop" in s.server_expects else "0"
            f.write("\t".join([s.name, str(s.timeout), s.ready, stop, s.server, s.client]) + "\n")
    print(sum(s.timeout for s in chosen))


def cmd_check(table, rundir, pcap, ibcm, outdir, pairing):
    scenarios, excluded = read_table(table)
    ran = []
    with open(os.path.join(rundir, "scenarios.run")) as f:
        for line in f:
            if line.strip():
                ran.append(line.split("\t", 1)[0])
    os.makedirs(outdir, exist_ok=True)
    slices, data, bad_icrc = cut(pcap) if pcap and os.path.exists(pcap) else ({}, {}, {})
    results = {}
    for s in scenarios:
        if s.name not in ran:
            if s.name in excluded:
                results[s.name] = {"verdict": "excluded", "reason": excluded[s.name]}
            continue
        r = {"verdict": "PASS", "reasons": []}
        srv_out = read(os.path.join(rundir, f"{s.name}.srv.out"))
        cli_out = read(os.path.join(rundir, f"{s.name}.cli.out"))
        srv_err = read(os.path.join(rundir, f"{s.name}.srv.err"))
        cli_err = read(os.path.join(rundir, f"{s.name}.cli.err"))
        srv_rc = (read(os.path.join(rundir, f"{s.name}.srv.rc")) or "").strip() or None
        cli_rc = (read(os.path.join(rundir, f"{s.name}.cli.rc")) or "").strip() or None
        for name, text in (("srv.out", srv_out), ("cli.out", cli_out), ("srv.err", srv_err),
                           ("cli.err", cli_err)):
            with open(os.path.join(outdir, f"{s.name}.{name}"), "w") as f:
                f.write(text or "")
        for t in ("srv", "cli"):
            tm = read(os.path.join(rundir, f"{s.name}.{t}.rc.time"))
            r[f"{t}_seconds"] = float(tm) if tm and tm.strip() else None
        note = read(os.path.join(rundir, f"{s.name}.note"))
        r["notes"] = note.strip().splitlines() if note else []
        if bad_icrc.get(s.name):
            r["notes"].append(f"{bad_icrc[s.name]} side-channel frame(s) (UDP {SOFT_PORT}) with an ICRC "
                              "other than a Linux UDP sender's (rewritten to 4791 anyway)")
        for why in (check_output("server", s.server_expects, srv_out, srv_rc, srv_err),
                    check_output("client", s.client_expects, cli_out, cli_rc, cli_err)):
            if why:
                r["reasons"].append(why)
        summary = None
        if s.name in slices:
            p = os.path.join(outdir, f"{s.name}.pcap")
            write_pcap(p, *slices[s.name])
            txt = subprocess.run([ibcm, "decode", "--summary", p], capture_output=True, text=True)
            with open(os.path.join(outdir, f"{s.name}.decode.txt"), "w") as f:
                f.write(txt.stdout + txt.stderr)
            js = subprocess.run([ibcm, "decode", "--summary", "--json", p], capture_output=True, text=True)
            try:
                summary = json.loads(js.stdout)
            except json.JSONDecodeError:
                r["reasons"].append(f"capture: ibcm decode failed: {(js.stderr or js.stdout).strip()[:200]}")
            why, r["sequences"] = check_cm(s.cm, summary)
            if why:
                r["reasons"].append(why)
            if s.fields:
                js = subprocess.run([ibcm, "decode", "--json", p], capture_output=True, text=True)
                mads = [json.loads(line) for line in js.stdout.splitlines() if line.startswith("{")]
                why = check_fields(s.fields, mads)
                if why:
                    r["reasons"].append(why)
            r["data_packets"] = data.get(s.name, 0)
            why = check_data(s.data, r["data_packets"])
            if why:
                r["reasons"].append(why)
        else:
            r["reasons"].append("capture: no slice for this scenario (no marks from guest A)")
        for who, out, err in (("server", srv_out, srv_err), ("client", cli_out, cli_err)):
            fl = first_line(out, err=err)
            if fl:
                r[f"{who}_first_error"] = fl
        if r["reasons"]:
            r["verdict"] = "FAIL"
        results[s.name] = r
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"pairing": pairing, "results": results}, f, indent=1)
    for name, r in results.items():
        extra = "; ".join(r.get("reasons", [])) or r.get("reason", "")
        t = r.get("cli_seconds")
        print(f"  {pairing:16} {name:14} {r['verdict']:8} {'' if t is None else f'{t:6.2f} s'}  {extra}")


def cmd_fail(table, rundir, outdir, pairing, reason):
    scenarios, excluded = read_table(table)
    with open(os.path.join(rundir, "scenarios.run")) as f:
        ran = [line.split("\t", 1)[0] for line in f if line.strip()]
    results = {}
    for s in scenarios:
        if s.name in ran:
            results[s.name] = {"verdict": "FAIL", "reasons": [reason]}
        elif s.name in excluded:
            results[s.name] = {"verdict": "excluded", "reason": excluded[s.name]}
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"pairing": pairing, "results": results}, f, indent=1)
    print(f"  {pairing:16} every scenario FAIL: {reason}")


def read_expect(path):
    """{(pairing, scenario or '*')} from the expectations file."""
    want = set()
    text = read(path) or ""
    for line in text.splitlines():
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        if len(line) != 2:
            raise SystemExit(f"{path}: 'PAIRING SCENARIO' (or 'PAIRING *') expected: {' '.join(line)}")
        want.add(tuple(line))
    return want


def first_errors(r):
    """ " [server: LINE | client: LINE]": the tools' first error lines, if any."""
    e = [f"{w}: {r[w + '_first_error']}" for w in ("server", "client") if r.get(w + "_first_error")]
    return f" [{' | '.join(e)}]" if e else ""


def cmd_retries(table, expect, out, pairings):
    retry = read_retries(table)
    want = read_expect(expect)
    for p in pairings:
        doc = read(os.path.join(out, p, "results.json"))
        if not doc:
            continue
        again = [n for n, r in json.loads(doc)["results"].items()
                 if r["verdict"] == "FAIL" and n in retry and ((p, n) in want or (p, "*") in want)]
        if again:
            print(p, *again)


def cmd_summary(expect, out, pairings):
    want = read_expect(expect)
    res = {}
    for p in pairings:
        doc = read(os.path.join(out, p, "results.json"))
        res[p] = json.loads(doc)["results"] if doc else None
        again = read(os.path.join(out, "retry", p, "results.json"))
        if res[p] is not None and again:
            for n, r in json.loads(again)["results"].items():
                first = res[p].get(n)
                if first is None or first["verdict"] != "FAIL" or r["verdict"] == "excluded":
                    continue
                r = dict(r)
                r["first_attempt"] = first["reasons"]
                r["retried"] = True
                res[p][n] = r
    names = []
    for p in pairings:
        for n in (res[p] or {}):
            if n not in names:
                names.append(n)
    w = max([len(n) for n in names] + [8])
    lines = ["rdmacm matrix (A = server, B = client; PASS / FAIL / excl = excluded / - = not run)",
             f"{'scenario':{w}}  " + "  ".join(f"{p:>16}" for p in pairings)]
    bad, surprise, notes, retried = [], [], [], []
    for n in names:
        cells = []
        for p in pairings:
            r = (res[p] or {}).get(n)
            expected = (p, n) in want or (p, "*") in want
            if r is None:
                cell = "FAIL" if res[p] is None else "-"
                if res[p] is None and expected:
                    bad.append(f"{p} {n}: the pairing did not run")
            elif r["verdict"] == "excluded":
                cell = "excl"
                if (p, n) not in notes:
                    notes.append((p, n))
            else:
                t = r.get("cli_seconds")
                cell = r["verdict"] + ("/2" if r.get("retried") else "") + ("" if t is None else f" {t:.1f}s")
                if r.get("retried"):
                    retried.append(f"{p} {n}: first attempt: {'; '.join(r['first_attempt'])}; "
                                   f"second: {r['verdict']}")
                if r["verdict"] != "PASS" and expected:
                    bad.append(f"{p} {n}: {'; '.join(r['reasons'])}")
                if r["verdict"] == "PASS" and not expected:
                    surprise.append(f"{p} {n}")
            cells.append(f"{cell:>16}")
        lines.append(f"{n:{w}}  " + "  ".join(cells))
    seen = set()
    for p, n in notes:
        if n not in seen:
            seen.add(n)
            lines.append(f"excluded {n}: {res[p][n]['reason']}")
    for p in pairings:
        if res[p] is None:
            lines.append(f"{p}: no results (see {os.path.join(out, p + '.log')})")
            continue
        fails = {n: "; ".join(r["reasons"]) + first_errors(r)
                 for n, r in res[p].items() if r["verdict"] == "FAIL"}
        if len(fails) > 1 and len(set(fails.values())) == 1:
            lines.append(f"FAIL {p}, all {len(fails)} scenarios: {next(iter(fails.values()))}")
            continue
        for n, why in fails.items():
            lines.append(f"FAIL {p} {n}: {why}")
    for s in retried:
        lines.append(f"RETRIED {s}")
    for s in surprise:
        lines.append(f"!!! UNEXPECTED PASS: {s} -- add it to {expect} !!!")
    for b in bad:
        lines.append(f"EXPECTED TO PASS ({expect}), DID NOT: {b}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "prepare":
        cmd_prepare(argv[2], argv[3], argv[4:])
    elif len(argv) == 8 and argv[1] == "check":
        cmd_check(*argv[2:])
    elif len(argv) == 7 and argv[1] == "fail":
        cmd_fail(*argv[2:])
    elif len(argv) >= 5 and argv[1] == "retries":
        cmd_retries(argv[2], argv[3], argv[4], argv[5:])
    elif len(argv) >= 4 and argv[1] == "summary":
        return cmd_summary(argv[2], argv[3], argv[4:])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
