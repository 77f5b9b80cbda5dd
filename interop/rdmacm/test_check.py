"""Tests of interop/rdmacm/check.py without a guest: the capture cut at the guests' marks, the
side-channel rewrite (ICRC recomputed), the verdicts on a made-up run directory (with the real
`ibcm decode` on a real rping capture, tests/vectors/rping.pcap) and the expectations summary.

  python3 -m unittest discover -s interop/rdmacm -p 'test_*.py'      (make test-interop)
"""
import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check  # noqa: E402

VECTOR = os.path.join(ROOT, "tests", "vectors", "rping.pcap")
IBCM = os.path.join(ROOT, "target", "release", "ibcm")


def mark_frame(text):
    """An Ethernet/IPv4/UDP datagram 10.77.0.1 -> 10.77.0.2:9 carrying TEXT, as guest A sends."""
    payload = text.encode()
    udp = struct.pack(">HHHH", 40000, 9, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2]))
    return b"\x52\x54\x00\x77\x00\x02\x52\x54\x00\x77\x00\x01\x08\x00" + ip + udp


def record(frame):
    return (struct.pack("<IIII", 0, 0, len(frame), len(frame)), frame)


def to_soft(frame):
    """FRAME (RoCEv2 on 4791) as ibcm's UDP side channel sends it: port 4792, ICRC for that."""
    u = check.udp_of(frame)
    f = bytearray(frame)
    f[14 + u[1] + 2:14 + u[1] + 4] = struct.pack(">H", check.SOFT_PORT)
    f[14 + u[2] - 4:14 + u[2]] = check.icrc(bytes(f), u[1], u[2])
    return bytes(f)


def roce(frames):
    return [f for f in frames if (u := check.udp_of(f)) and u[4] == check.ROCE_PORT]


def qp(frame):
    u = check.udp_of(frame)
    return int.from_bytes(frame[u[5] + 5:u[5] + 8], "big")


class Capture(unittest.TestCase):
    def setUp(self):
        self.hdr, recs = check.read_pcap(VECTOR)
        self.frames = [fr for _, fr in recs]
        self.dir = tempfile.mkdtemp(prefix="rdmacm-check-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, frames):
        p = os.path.join(self.dir, "A.pcap")
        check.write_pcap(p, self.hdr, [record(f) for f in frames])
        return p

    def test_icrc_matches_the_kernel(self):
        rs = roce(self.frames)
        self.assertGreater(len(rs), 5)
        for f in rs:
            u = check.udp_of(f)
            self.assertEqual(check.icrc(f, u[1], u[2]), f[14 + u[2] - 4:14 + u[2]])

    def test_cut_at_marks_counts_data_and_rewrites_the_side_channel(self):
        cm = [f for f in roce(self.frames) if qp(f) == 1]
        data = [f for f in roce(self.frames) if qp(f) != 1]
        self.assertEqual(len(cm), 5)
        frames = ([mark_frame("IBCM-RDMACM-MARK x begin")] + cm[:1]
                  + [mark_frame("IBCM-RDMACM-MARK x end")] + cm[1:2]  # between scenarios: dropped
                  + [mark_frame("IBCM-RDMACM-MARK a begin")] + self.frames
                  + [mark_frame("IBCM-RDMACM-MARK a end"), mark_frame("IBCM-RDMACM-MARK b begin")]
                  + [to_soft(f) for f in cm] + [mark_frame("IBCM-RDMACM-MARK b end")])
        bad = bytearray(to_soft(cm[2]))
        bad[-1] ^= 1
        frames.insert(-1, bytes(bad))
        slices, counts, bad_icrc = check.cut(self.write(frames))
        self.assertEqual(bad_icrc, {"b": 1})
        self.assertEqual(sorted(slices), ["a", "b", "x"])
        self.assertEqual(len(slices["x"][1]), 1)
        self.assertEqual(len(slices["a"][1]), len(self.frames))
        self.assertEqual(counts, {"x": 0, "a": len(data), "b": 0})
        self.assertGreater(len(data), 0)
        # the side-channel frames come out as the kernel's own frames on 4791, also the one
        # whose ICRC was wrong (its ICRC is recomputed)
        got = [fr for _, fr in slices["b"][1]]
        self.assertEqual(len(got), len(cm) + 1)
        for g, f in zip(got, cm + [cm[2]]):
            self.assertEqual(check.udp_of(g)[4], check.ROCE_PORT)
            self.assertEqual(g[34 + 8:], f[34 + 8:])
        self.assertIsNone(check.to_roce_port(cm[0]))

    def run_dir(self, table_line, srv_out, cli_out, srv_rc="0", cli_rc="0"):
        table = os.path.join(self.dir, "scenarios")
        with open(table, "w") as f:
            f.write("# comment\n" + table_line + "\n")
        run = os.path.join(self.dir, "run")
        os.makedirs(run, exist_ok=True)
        with contextlib.redirect_stdout(io.StringIO()):
            check.cmd_prepare(table, run, [])
        for side, out, rc in (("srv", srv_out, srv_rc), ("cli", cli_out, cli_rc)):
            with open(os.path.join(run, f"s.{side}.out"), "w") as f:
                f.write(out)
            with open(os.path.join(run, f"s.{side}.rc"), "w") as f:
                f.write(rc + "\n")
        pcap = self.write([mark_frame("IBCM-RDMACM-MARK s begin")] + self.frames
                          + [mark_frame("IBCM-RDMACM-MARK s end")])
        out = os.path.join(self.dir, "out", "p")
        with contextlib.redirect_stdout(io.StringIO()):
            check.cmd_check(table, run, pcap, IBCM, out, "p")
        with open(os.path.join(out, "results.json")) as f:
            return json.load(f)["results"]["s"]

    @unittest.skipUnless(os.access(IBCM, os.X_OK), "needs target/release/ibcm (cargo build --release --bins)")
    def test_verdicts_with_ibcm_decode(self):
        line = ("s | 10 | listen | rping -s | rping -c | =3:server ping data | ping data && !error"
                " | 1:REQ REP RTU DREQ DREP | >=20")
        srv = "server ping data: 1\nserver ping data: 2\nserver ping data: 3\n"
        r = self.run_dir(line, srv, "ping data: 1\n")
        self.assertEqual(r["verdict"], "PASS", r)
        self.assertEqual(r["sequences"], ["REQ REP RTU DREQ DREP"])
        self.assertTrue(os.path.exists(os.path.join(self.dir, "out", "p", "s.decode.txt")))
        r = self.run_dir(line.replace("1:REQ REP RTU DREQ DREP", "1:REQ REJ"), srv, "ping data: 1\n")
        self.assertEqual(r["reasons"], ["capture: message sequence 'REQ REP RTU DREQ DREP', expected /REQ REJ/"])
        r = self.run_dir(line + " | REQ.primary_local_ack_timeout=19 && REP.srq=false", srv, "ping data: 1\n")
        self.assertEqual(r["verdict"], "PASS", r)
        r = self.run_dir(line + " | REQ.primary_local_ack_timeout=17", srv, "ping data: 1\n")
        self.assertRegex(r["reasons"][0], r"^capture: REQ frame \d+: primary_local_ack_timeout = 19, expected 17$")
        r = self.run_dir(line.replace("| >=20", "| =0"), srv, "ping data: 1\n")
        self.assertRegex(r["reasons"][0], r"^capture: \d+ data packet\(s\), expected =0$")
        r = self.run_dir(line, srv, "ping data: 1\nconnect error -1\n", cli_rc="255")
        self.assertEqual(r["verdict"], "FAIL")
        self.assertEqual(r["reasons"], ["client: exit status 255, expected 0"])
        self.assertEqual(r["client_first_error"], "connect error -1")


class Expectations(unittest.TestCase):
    def test_output_rules(self):
        out = "a 1\na 2\nreturn status 0\n"
        self.assertIsNone(check.check_output("server", ["=2:^a ", "return status 0"], out, "0"))
        self.assertEqual(check.check_output("server", ["=3:^a "], out, "0"),
                         "server: 2 line(s) match /^a /, expected 3")
        self.assertEqual(check.check_output("server", ["!status"], out, "0"),
                         "server: unexpected line: return status 0")
        self.assertEqual(check.check_output("client", ["rc!=0"], out, "0"),
                         "client: exit status 0, expected a failure")
        self.assertIsNone(check.check_output("client", ["rc!=0", "a 1"], out, "255"))
        self.assertEqual(check.check_output("client", [], out, "124"),
                         "client: exit status 124 (timeout), expected 0")
        self.assertEqual(check.check_output("server", [], out, "killed"),
                         "server: still running after its peer finished, killed")
        self.assertIsNone(check.check_output("server", ["stop"], out, "143"))
        self.assertEqual(check.check_output("client", [], out, "139"),
                         "client: exit status 139 (SIGSEGV), expected 0")
        self.assertEqual(check.first_line("ibcm[7] debug: x failed (-22)\nibcm[7] error: no device\n"),
                         "ibcm[7] error: no device")
        self.assertEqual(check.check_output("client", [], out, "not-run"),
                         "client: not run (the server exited or never became ready)")

    def test_field_rules(self):
        mads = [{"attr": "REQ", "frame": 3, "primary_traffic_class": 32, "srq": False},
                {"attr": "REP", "frame": 4}]
        self.assertIsNone(check.check_fields(["REQ.primary_traffic_class=32", "REQ.srq=false"], mads))
        self.assertEqual(check.check_fields(["REQ.primary_traffic_class=0"], mads),
                         "capture: REQ frame 3: primary_traffic_class = 32, expected 0")
        self.assertEqual(check.check_fields(["RTU.x=1"], mads), "capture: no RTU for RTU.x=1")

    def test_cm_rules(self):
        conn = {"messages": [{"attr": a, "repeat": "first"} for a in ("REQ", "REJ")]}
        conn["messages"].insert(1, {"attr": "REQ", "repeat": "retransmission"})
        self.assertEqual(check.check_cm("1:REQ REJ", {"mads": 3, "connections": [conn]}), (None, ["REQ REJ"]))
        self.assertEqual(check.check_cm("2:REQ REJ", {"mads": 3, "connections": [conn]})[0],
                         "capture: 1 connection(s) (REQ REJ), expected 2")
        self.assertEqual(check.check_cm("none", {"mads": 3, "connections": [conn]})[0],
                         "capture: 3 CM MAD(s), expected none")
        self.assertIsNone(check.check_cm("none", {"mads": 0, "connections": []})[0])

    def test_disconnect_specs_accept_crossing_dreqs(self):
        """Both sides may send DREQ at once (each then answers the other's with a DREP): the
        kernel pair did so for rdma_server/rdma_client in a CI run. Every scenario whose CM
        expectation names a DREQ must accept that, and still refuse a DREQ left unanswered."""
        def conn(seq):
            return {"mads": 9, "connections": [{"messages": [{"attr": a, "repeat": "first"}
                                                             for a in seq.split()]}]}
        specs = []
        with open(os.path.join(HERE, "scenarios")) as f:
            for line in f:
                cols = [c.strip() for c in line.split(" | ")]
                if len(cols) >= 8 and "DREQ" in cols[7] and cols[7].startswith("1:"):
                    specs.append((cols[0], cols[7]))
        self.assertIn("rdma-server", [n for n, _ in specs])
        for name, spec in specs:
            for seq in ("REQ REP RTU DREQ DREP", "REQ REP RTU DREQ DREQ DREP DREP"):
                if "(DREQ )?" in spec or seq.count("DREQ") == 1:
                    self.assertIsNone(check.check_cm(spec, conn(seq))[0], (name, seq))
            self.assertIsNotNone(check.check_cm(spec, conn("REQ REP RTU DREQ"))[0], name)

    def test_summary_against_the_expectations_file(self):
        d = tempfile.mkdtemp(prefix="rdmacm-summary-")
        try:
            def results(p, res):
                os.makedirs(os.path.join(d, p))
                with open(os.path.join(d, p, "results.json"), "w") as f:
                    json.dump({"pairing": p, "results": res}, f)
            ok = {"verdict": "PASS", "reasons": [], "cli_seconds": 1.0}
            results("kk", {"s1": ok, "s2": {"verdict": "excluded", "reason": "hangs between kernels"}})
            results("ki", {"s1": {"verdict": "FAIL", "reasons": ["client: exit status 1, expected 0"],
                                  "client_first_error": "connect error -1"}, "s2": ok})
            expect = os.path.join(d, "expect")
            with open(expect, "w") as f:
                f.write("# comment\nkk *\n")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(check.cmd_summary(expect, d, ["kk", "ki"]), 0)
            text = out.getvalue()
            self.assertIn("excluded s2: hangs between kernels", text)
            self.assertIn("!!! UNEXPECTED PASS: ki s2", text)
            self.assertIn("FAIL ki s1: client: exit status 1, expected 0 [client: connect error -1]", text)
            with open(expect, "a") as f:
                f.write("ki s1\n")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(check.cmd_summary(expect, d, ["kk", "ki"]), 1)
            self.assertIn("DID NOT: ki s1: client: exit status 1, expected 0\n", out.getvalue())
            with open(os.path.join(d, "summary.txt")) as f:
                self.assertEqual(f.read(), out.getvalue())
        finally:
            shutil.rmtree(d)


    def test_retry_of_a_racy_scenario(self):
        d = tempfile.mkdtemp(prefix="rdmacm-retry-")
        try:
            def results(sub, p, res):
                os.makedirs(os.path.join(d, sub, p))
                with open(os.path.join(d, sub, p, "results.json"), "w") as f:
                    json.dump({"pairing": p, "results": res}, f)
            ok = {"verdict": "PASS", "reasons": [], "cli_seconds": 1.0}
            bad = {"verdict": "FAIL", "reasons": ["capture: message sequence 'REQ REJ'"]}
            table = os.path.join(d, "table")
            with open(table, "w") as f:
                line = "NAME | 10 | listen | s | c | rc=0 | rc=0 | 1:REQ REJ | =0\n"
                f.write(line.replace("NAME", "racy") + line.replace("NAME", "plain"))
                f.write("retry racy the tool's own race\n")
            expect = os.path.join(d, "expect")
            with open(expect, "w") as f:
                f.write("ki *\n")
            results("", "ki", {"racy": bad, "plain": bad})
            with contextlib.redirect_stdout(io.StringIO()) as out:
                check.cmd_retries(table, expect, d, ["ki"])
            self.assertEqual(out.getvalue(), "ki racy\n")
            # no second attempt yet: both fail
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(check.cmd_summary(expect, d, ["ki"]), 1)
            # the second attempt passes: racy counts, plain still fails
            results("retry", "ki", {"racy": ok})
            with contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(check.cmd_summary(expect, d, ["ki"]), 1)
            text = out.getvalue()
            self.assertIn("PASS/2", text)
            self.assertIn("RETRIED ki racy: first attempt: capture: message sequence 'REQ REJ'", text)
            self.assertIn("DID NOT: ki plain", text)
            self.assertNotIn("DID NOT: ki racy", text)
            with open(expect, "w") as f:
                f.write("ki racy\n")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(check.cmd_summary(expect, d, ["ki"]), 0)
            # a retry that fails again still fails
            shutil.rmtree(os.path.join(d, "retry"))
            results("retry", "ki", {"racy": bad})
            with contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(check.cmd_summary(expect, d, ["ki"]), 1)
            self.assertIn("DID NOT: ki racy", out.getvalue())
        finally:
            shutil.rmtree(d)


class GuestOutput(unittest.TestCase):
    """guest.sh's rdmacm_run (the guest driver's way of running a tool) on this host, and
    check.py's verdict on what it wrote: CI's ibcm-ibcm-umad srq failed because the library
    wrote a debug line to stderr in two pieces and srq_lab's "srq_lab: end 0" (stdout) landed
    between them in the one file both streams went to."""
    SRQ_LAB = ("echo 'srq_lab: received 10 messages through the SRQ'; echo 'srq_lab: SRQ destroyed'; "
               "printf 'ibcm[1891] debug: rxe0: MAD from ::ffff:10.' >&2; sleep 0.2; "
               "echo 'srq_lab: end 0'; sleep 0.2; "
               "printf '77.0.1 dropped: unknown_id: DREP for no id\\n' >&2")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rdmacm-guest-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_a_library_line_cut_by_the_tools_line_does_not_hide_it(self):
        out = os.path.join(self.dir, "srq.cli.out")
        script = (f". {os.path.join(HERE, 'guest.sh')}; lab_ts() {{ date +%s.%N; }}; "
                  f"LAB_NAME=B PRELOAD_B=0 LAB_DIR={self.dir}; "
                  f'rdmacm_run {out} {self.dir}/srq.cli.rc 20 "$1"')
        subprocess.run(["bash", "-c", script, "x", self.SRQ_LAB], check=True, timeout=60)
        text, err = check.read(out), check.read(os.path.join(self.dir, "srq.cli.err"))
        with open(os.path.join(self.dir, "srq.cli.rc")) as f:
            rc = f.read().strip()
        self.assertEqual(rc, "0")
        srq = [s for s in check.read_table(os.path.join(HERE, "scenarios"))[0] if s.name == "srq"][0]
        self.assertIsNone(check.check_output("client", srq.client_expects, text, rc, err),
                          f"stdout {text!r}, stderr {err!r}")
        self.assertIn("ibcm[1891] debug: rxe0: MAD from ::ffff:10.77.0.1 dropped: unknown_id: "
                      "DREP for no id", check.output_lines(text, err))


if __name__ == "__main__":
    unittest.main()
