"""Tests of interop/rdmacm/local.sh (the driver of the local-* scenarios: a tool's server and
client in one guest at once) without a guest: stand-in commands for the tools, a stand-in
$CM_IDS, and the verdict lines and exit statuses the scenarios' expectations read, judged
through check.py's own expectation matcher on the rows of interop/rdmacm/scenarios.

  python3 -m unittest discover -s interop/rdmacm -p 'test_*.py'      (make test-interop)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check  # noqa: E402

LOCAL = os.path.join(HERE, "local.sh")


class Local(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rdmacm-local-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_local(self, *args, cm_ids="echo LISTEN", timeout=30):
        env = dict(os.environ, LAB_DIR=self.dir, CM_IDS=cm_ids)
        p = subprocess.run(["bash", LOCAL, *args], capture_output=True, text=True, env=env,
                           timeout=timeout)
        return p.returncode, p.stdout

    def test_both_sides_prefixed_and_both_statuses(self):
        rc, out = self.run_local("pair", "t", "listen", "wait",
                                 "echo data transfers complete; sleep 0.5; echo return status 0",
                                 "echo data transfers complete; echo return status 0")
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertIn("S: return status 0", lines)
        self.assertIn("C: return status 0", lines)
        self.assertEqual(lines[-1], "rc client=0 server=0")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "t.fin")))

    def test_a_failing_client_fails(self):
        rc, out = self.run_local("pair", "t", "listen", "wait", "sleep 0.3", "echo no; exit 4")
        self.assertEqual(rc, 1)
        self.assertEqual(out.splitlines()[-1], "rc client=4 server=0")

    def test_a_failing_server_fails(self):
        rc, out = self.run_local("pair", "t", "listen", "wait", "sleep 0.5; exit 3", "true")
        self.assertEqual(rc, 1)
        self.assertEqual(out.splitlines()[-1], "rc client=0 server=3")

    def test_a_server_that_exits_before_it_listens_leaves_the_client_unrun(self):
        rc, out = self.run_local("pair", "t", "listen", "wait", "echo bye; exit 2",
                                 "echo client ran", cm_ids="false")
        self.assertEqual(rc, 1)
        self.assertNotIn("C: client ran", out)
        self.assertIn("the server exited before it was ready", out)
        self.assertEqual(out.splitlines()[-1], "rc client=not-run server=2")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "t.fin")))

    def test_out_readiness_waits_for_the_line(self):
        rc, out = self.run_local("pair", "t", "out:receiving", "wait",
                                 "sleep 0.5; echo receiving data; sleep 0.5",
                                 f"test -e {self.dir}/seen || touch {self.dir}/seen; echo sent",
                                 cm_ids="false")
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertLess(lines.index("S: receiving data"), lines.index("C: sent"))

    def test_stop_ends_a_server_that_serves_until_stopped(self):
        rc, out = self.run_local("pair", "t", "listen", "stop",
                                 "echo serving; exec sleep 60", "echo connect : 1", timeout=20)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.splitlines()[-1], "rc client=0 server=0")

    def test_a_library_line_cut_by_the_tools_line_leaves_both_whole(self):
        """CI's ibcm-ibcm-umad srq: the library wrote a debug line to stderr in pieces and the
        tool's "end 0" went to stdout between them; with one file for both streams the tool's
        line was glued to the library's half line and `^...end 0$` saw no such line."""
        cut = ("printf 'ibcm[1891] debug: rxe0: MAD from ::ffff:10.' >&2; sleep 0.2; "
               "echo '{w} end 0'; sleep 0.2; printf '77.0.1 dropped: DREP for no id\\n' >&2")
        rc, out = self.run_local("pair", "t", "listen", "wait", cut.format(w="server"),
                                 cut.format(w="client"))
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        for w in ("S", "C"):
            self.assertIn(f"{w}: {'server' if w == 'S' else 'client'} end 0", lines, out)
            self.assertIn(f"{w}: ibcm[1891] debug: rxe0: MAD from ::ffff:10.77.0.1 dropped: "
                          "DREP for no id", lines, out)
        self.assertIsNone(check.check_output("server", ["=1:^S: server end 0$",
                                                        "=1:^C: client end 0$"], out, "0"))

    def test_out_readiness_sees_stderr_too(self):
        rc, out = self.run_local("pair", "t", "out:receiving", "wait",
                                 "sleep 0.3; echo receiving data >&2; sleep 0.5", "echo sent",
                                 cm_ids="false")
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertLess(lines.index("S: receiving data"), lines.index("C: sent"))

    def test_wait_side(self):
        rc, out = self.run_local("wait", "t", "1")
        self.assertEqual(rc, 1)
        self.assertIn("did not finish t", out)
        open(os.path.join(self.dir, "t.fin"), "w").close()
        self.assertEqual(self.run_local("wait", "t", "1")[0], 0)

    def test_bad_usage(self):
        self.assertEqual(self.run_local("pair", "t", "listen", "later", "true", "true")[0], 2)
        self.assertEqual(self.run_local("nonsense")[0], 2)

    def test_the_table_rows_judge_the_driver_output(self):
        """Every local-* row of the table that uses local.sh: its server expectation passes on
        output shaped as the tool prints it, and fails when one side's status is not 0 or one
        side's success line is missing."""
        scenarios, _ = check.read_table(os.path.join(HERE, "scenarios"))
        rows = [s for s in scenarios if "local.sh pair" in s.server]
        self.assertGreaterEqual(len(rows), 8)
        samples = {
            "local-ucmatose": ["data transfers complete", "return status 0"],
            "local-udaddy": ["data transfers complete", "return status 0"],
            "local-mckey": ["data transfers complete", "return status 0"],
            "local-cmtime": {"C": ["connect           :    12.5", "disconnect        :     8.1"]},
            "local-rdma-server": {"S": ["rdma_server: end 0"], "C": ["rdma_client: end 0"]},
            "local-ib_write_bw": [" 65536      200          123.45             120.00"],
            "local-ib_send_bw": [" 65536      200          123.45             120.00"],
            "local-ib_read_lat": {"S": [" local address: LID 0000 QPN 0x0011",
                                        " remote address: LID 0000 QPN 0x0012"],
                                  "C": [" 2       200          10.00        20.00"]},
        }
        for s in rows:
            with self.subTest(s.name):
                self.assertIn(f" {s.name} ", s.server)
                self.assertIn(f"local.sh wait {s.name} ", s.client)
                self.assertLess(int(s.client.rsplit(" ", 1)[1]), s.timeout)
                sample = samples[s.name]
                if isinstance(sample, list):
                    sample = {"S": sample, "C": sample}
                body = [f"{w}: {line}" for w in ("S", "C") for line in sample.get(w, [])]
                good = "\n".join(body + ["rc client=0 server=0"])
                self.assertIsNone(check.check_output("server", s.server_expects, good, "0"))
                bad = "\n".join(body + ["rc client=1 server=0"])
                self.assertIsNotNone(check.check_output("server", s.server_expects, bad, "1"))
                bad = "\n".join(body + ["rc client=0 server=1"])
                self.assertIsNotNone(check.check_output("server", s.server_expects, bad, "0"))
                for w in ("S", "C"):
                    if not sample.get(w):
                        continue
                    half = "\n".join([b for b in body if not b.startswith(w + ":")]
                                     + ["rc client=0 server=0"])
                    self.assertIsNotNone(check.check_output("server", s.server_expects, half, "0"),
                                         f"passes without the {w} side's lines")


if __name__ == "__main__":
    unittest.main()
