"""Unit tests of scripts/bench_kernel.py (the tables of scripts/bench-kernel.sh), without a guest:
cmtime's table as Debian 12's cmtime prints it, stamp.sh's timings, ratios to kernel-kernel."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import bench_kernel  # noqa: E402

CMTIME = """creating id
connecting
event: RDMA_CM_EVENT_REJECTED, error: 28
RDMA_CM_EVENT_ADDR_ERROR, error: -19
event: RDMA_CM_EVENT_REJECTED, error: 28
step              total ms     max ms     min us  us / conn
create id    :        2.00       0.10       9.00      20.00
resolve addr :      583.99     360.93     138.00     583.99
create qp    :        0.43       0.001000000000.00      86.20
connect      :    11466.49   10984.41  381119.00   11466.49
"""


def write_run(root, pairing, files):
    """Writes `files` (name: text) into `root`'s run directory of `pairing`; that directory."""
    run = os.path.join(root, "runs", pairing)
    os.makedirs(run)
    for k, v in files.items():
        with open(os.path.join(run, k), "w") as f:
            f.write(v)
    return run


def pairing_dir(root, name, cmtime_out, stamps):
    write_run(root, name, {
        "scenarios.run": "cmtime-100\t70\tlisten\t1\ts\tc\nrping-C1\t60\tlisten\t0\ts\tc\n",
        "cmtime-100.cli.out": cmtime_out, "cmtime-100.cli.rc": "0\n", "cmtime-100.srv.rc": "143\n",
        "rping-C1.cli.out": "ping data: rdma-ping-0\n", "rping-C1.cli.rc": "0\n", "rping-C1.srv.rc": "0\n",
        "rping-C1.ts": stamps, "host.before": " 12:00 up 1 day, load average: 1.00, 2.00, 3.00\nmodel name : x\n",
        "pair.log": "wall: 120.5 s (both guests)\n",
    })


def report(root, *pairings):
    """Runs bench_kernel.py over `root`'s runs of `pairings`; its Markdown and JSON reports."""
    sys.argv = ["bench_kernel.py", root, *pairings]
    with contextlib.redirect_stdout(io.StringIO()):
        bench_kernel.main()
    with open(os.path.join(root, "bench-kernel.md")) as f:
        md = f.read()
    with open(os.path.join(root, "bench-kernel.json")) as f:
        return md, json.load(f)


class Parse(unittest.TestCase):
    def test_cmtime_rows(self):
        st = bench_kernel.parse_cmtime(CMTIME)
        self.assertEqual(st["create id"]["us_per_conn"], 20.0)
        self.assertEqual(st["connect"]["total_ms"], 11466.49)
        self.assertEqual(st["resolve addr"]["min_us"], 138.0)
        # the fields of a step nobody finished run together: still read, marked
        self.assertEqual(st["create qp"], {"completed": False})
        self.assertEqual(len(st), 4)

    def test_no_table_before_the_header(self):
        self.assertEqual(bench_kernel.parse_cmtime("connect      :  1.00 2.00 3.00 4.00\n"), {})

    def test_stamps(self):
        text = "100.0 @start\n100.5 local address\n100.75 ping data: x\n101.0 ping data: y\n102.0 @exit 3\n"
        first, total, rc = bench_kernel.parse_stamps(text, bench_kernel.CONNECTED["rping-C1"])
        self.assertAlmostEqual(first, 0.75)
        self.assertAlmostEqual(total, 2.0)
        self.assertEqual(rc, "3")
        self.assertEqual(bench_kernel.parse_stamps("", None), (None, None, None))


class Tables(unittest.TestCase):
    def test_ratios_to_kernel(self):
        with tempfile.TemporaryDirectory() as root:
            pairing_dir(root, "kernel-kernel", CMTIME, "10.0 @start\n10.4 ping data: a\n10.5 @exit 0\n")
            half = CMTIME.replace("      20.00\n", "      10.00\n")
            pairing_dir(root, "kernel-ibcm", half, "20.0 @start\n20.1 ping data: a\n20.3 @exit 0\n")
            md, data = report(root, "kernel-kernel", "kernel-ibcm")
        self.assertIn("| create id | 20.0 | 10.0 (×0.50) |", md)
        self.assertIn("| create qp | none finished | none finished |", md)
        self.assertIn("| rping -C 1: connected | 0.40 | 0.10 (×0.25) |", md)
        self.assertIn("* kernel-ibcm: 1.00, 2.00, 3.00", md)
        sc = data["results"]["kernel-ibcm"]["scenarios"]["cmtime-100"]
        self.assertEqual(sc["steps"]["create id"]["us_per_conn"], 10.0)
        self.assertEqual(data["results"]["kernel-ibcm"]["wall_s"], 120.5)
        self.assertEqual(sc["failed"], {"REJECTED 28": 2, "ADDR_ERROR -19": 1})
        self.assertIn("| failed connections | 1 ADDR_ERROR -19, 2 REJECTED 28 |", md)


class GuestCpus(unittest.TestCase):
    def test_the_report_names_the_guests_vcpus(self):
        for env, want in ((None, "two single-vCPU TCG guests per pairing"),
                          ("2", "two TCG guests of 2 vCPUs each per pairing")):
            old = os.environ.pop("BENCH_GUEST_CPUS", None)
            if env is not None:
                os.environ["BENCH_GUEST_CPUS"] = env
            try:
                with tempfile.TemporaryDirectory() as root:
                    pairing_dir(root, "kernel-kernel", CMTIME, "10.0 @start\n10.5 @exit 0\n")
                    md, data = report(root, "kernel-kernel")
            finally:
                os.environ.pop("BENCH_GUEST_CPUS", None)
                if old is not None:
                    os.environ["BENCH_GUEST_CPUS"] = old
            self.assertIn(want, md)
            self.assertEqual(data["machine"]["guest_cpus"], int(env or 1))


class Parallel(unittest.TestCase):
    """cmtime-par-KxN: K clients of interop/bench/par.sh, one completion time over all of them."""

    def run_dir(self, root, pairing, kcm):
        files = {
            "scenarios.run": "cmtime-par-2x100\t80\tlisten\t1\ts\tc\n",
            "cmtime-par-2x100.cli.rc": "0\n", "cmtime-par-2x100.srv.rc": "143\n",
            # client 2 starts later and ends last: completion = 14.5 - 10.0
            "cmtime-par-2x100.1.ts": "10.0 @start\n11.0 step\n12.0 @exit 0\n",
            "cmtime-par-2x100.2.ts": "10.25 @start\n14.5 @exit 0\n",
            "cmtime-par-2x100.1.out": CMTIME,
            "cmtime-par-2x100.2.out": CMTIME.replace("11466.49   10984.41", "20000.00   10984.41"),
        }
        if kcm:
            files["cmtime-par-2x100.kcm"] = "before 5 1 100\nafter 12 4 300\n"
        return write_run(root, pairing, files)

    def test_parse_par(self):
        with tempfile.TemporaryDirectory() as root:
            run = self.run_dir(root, "kernel-kernel", True)
            c = bench_kernel.parse_par(run, "cmtime-par-2x100", 2, 100)
        self.assertAlmostEqual(c["completion_s"], 4.5)
        self.assertEqual(c["client_rcs"], ["0", "0"])
        self.assertEqual(c["failed"], {"REJECTED 28": 4, "ADDR_ERROR -19": 2})
        self.assertEqual(c["kernel_cm"], {"tx_retries": 7, "rx_duplicates": 3, "tx_req": 200})

    def test_missing_exit_means_no_completion(self):
        with tempfile.TemporaryDirectory() as root:
            run = self.run_dir(root, "kernel-kernel", False)
            os.remove(os.path.join(run, "cmtime-par-2x100.2.ts"))
            c = bench_kernel.parse_par(run, "cmtime-par-2x100", 2, 100)
        self.assertIsNone(c["completion_s"])
        self.assertEqual(c["client_rcs"], ["0", "none"])
        self.assertNotIn("kernel_cm", c)

    def test_table(self):
        with tempfile.TemporaryDirectory() as root:
            self.run_dir(root, "kernel-kernel", True)
            self.run_dir(root, "ibcm-ibcm-udp", False)
            md, _ = report(root, "kernel-kernel", "ibcm-ibcm-udp")
        self.assertIn("## Many connections at once: 2 `cmtime -c 100` clients", md)
        self.assertIn("| completion (first start → last exit), s | 4.50 | 4.50 |", md)
        self.assertIn("| connections/s (all clients) | 44 | 44 |", md)
        self.assertIn("| connect step: the slowest client's total ms (clients that finished it) "
                      "| 20000 (2 of 2) | 20000 (2 of 2) |", md)
        self.assertIn("| kernel CM (guest B): REQs sent / retries / duplicates received | 200 / 7 / 3 | — |", md)


class SameBoot(unittest.TestCase):
    def test_kernel_then_ibcm_in_one_boot(self):
        with tempfile.TemporaryDirectory() as root:
            write_run(root, "ibcm-ibcm-udp", {
                "scenarios.run": "kcm-cmtime-100\t70\tnone\t1\ts\tc\ncmtime-100\t70\tlisten\t1\ts\tc\n",
                "kcm-cmtime-100.cli.out": CMTIME, "kcm-cmtime-100.cli.rc": "0\n",
                "cmtime-100.cli.out": CMTIME.replace("      20.00\n", "       5.00\n"), "cmtime-100.cli.rc": "0\n",
            })
            md, _ = report(root, "ibcm-ibcm-udp")
        self.assertIn("## cmtime -c 100 in one boot of ibcm-ibcm-udp", md)
        self.assertIn("| create id | 20.0 | 5.0 (×0.25) |", md)
        self.assertIn("| connect | 11466.5 | 11466.5 (×1.00) |", md)
        self.assertIn("| create qp | none finished | none finished |", md)
        # the kernel run of the same boot is not a column of the per-pairing tables
        self.assertIn("| step | ibcm-ibcm-udp |", md)
        self.assertEqual(md.count("| create id |"), 2)


    def test_kernel_same_boot_column(self):
        with tempfile.TemporaryDirectory() as root:
            run = Parallel.run_dir(self, root, "ibcm-ibcm-udp", False)
            for f in os.listdir(run):
                if f.startswith("cmtime-par-2x100"):
                    with open(os.path.join(run, f)) as src, open(os.path.join(run, "kcm-" + f), "w") as dst:
                        dst.write(src.read().replace("14.5 @exit", "19.0 @exit"))
            with open(os.path.join(run, "scenarios.run"), "a") as f:
                f.write("kcm-cmtime-par-2x100\t80\tnone\t1\ts\tc\n")
            md, _ = report(root, "ibcm-ibcm-udp")
        self.assertIn("| | ibcm-ibcm-udp | ibcm-ibcm-udp: the kernel CM, same boot |", md)
        self.assertIn("| completion (first start → last exit), s | 4.50 | 9.00 |", md)
        self.assertEqual(md.count("## Many connections at once"), 1)


class Wire(unittest.TestCase):
    def test_rows(self):
        res = {
            "kernel-kernel": {"scenarios": {"cmtime-100": {"wire": {
                "mads": 500, "connections": 100, "established": 98, "rejected": 2, "timed_out": 0,
                "retransmissions": 3, "duplicates": 1, "connect_p50_ms": 12.34, "connect_p99_ms": 50.0}}}},
            "kernel-ibcm": {"scenarios": {"cmtime-100": {"wire": {"error": "not a capture"}}}},
            "ibcm-kernel": {"scenarios": {}},
        }
        rows = bench_kernel.wire_rows(list(res), res, "cmtime-100")
        self.assertIn("| on the wire: connections (established) | 100 (98) | decode failed: not a capture | — |", rows)
        self.assertIn("| on the wire: retransmissions / duplicates | 3 / 1 | decode failed: not a capture | — |", rows)
        self.assertIn("| on the wire: REQ→RTU p50 / p99 ms | 12.3 / 50.0 | decode failed: not a capture | — |", rows)
        self.assertEqual(bench_kernel.wire_rows(["ibcm-kernel"], res, "cmtime-100"), [])


class Libraries(unittest.TestCase):
    """BENCH_LIBS: two libraries alternating in one boot, each run with the host's load."""

    def test_alternating_runs(self):
        def cm(connect):  # cmtime -c 100's table with the connect step at `connect` us / conn
            return ("step              total ms     max ms     min us  us / conn\n"
                    f"connect      : {connect / 10:11.2f}{9.0:11.2f}{800.0:11.2f}{connect:11.2f}\n")

        with tempfile.TemporaryDirectory() as root:
            names = ["cmtime-100-old-1", "cmtime-100-new-1", "cmtime-100-old-2", "cmtime-100-new-2"]
            connects = [1000.0, 1500.0, 3000.0, 2500.0]
            files = {"scenarios.run": "".join(f"{n}\t70\tlisten\t1\ts\tc\n" for n in names),
                     # samples every 5 s from 1000; the runs start at 1002, 1012, 1022, 1032
                     "host.load": "".join(f"{1000 + 5 * i} {1 + i}.00 2.00 3.00\n" for i in range(10)),
                     "cmtime-100-new-2.cli.out": "RDMA_CM_EVENT_UNREACHABLE, error: -110\n" + cm(2500.0)}
            for i, (n, c) in enumerate(zip(names, connects)):
                files.setdefault(f"{n}.cli.out", cm(c))
                files[f"{n}.cli.rc"] = "0\n"
                files[f"{n}.ts"] = f"{1002 + 10 * i}.5 @start\n{1009 + 10 * i}.0 @exit 0\n"
            write_run(root, "kernel-ibcm", files)
            md, data = report(root, "kernel-ibcm")
        self.assertIn("## cmtime -c 100 in one boot of kernel-ibcm: libraries alternating", md)
        # the load at the start is the last sample before it, the max includes those up to the exit
        self.assertIn("| 1 | old | 1.00 (2.00) | 1000.0 (×0.50) | — | 0 | 0 |", md)
        self.assertIn("| 2 | new | 7.00 (8.00) | 2500.0 (×1.25) | — | 1 UNREACHABLE -110 | 0 |", md)
        # medians: old (1000, 3000) 2000, new (1500, 2500) 2000
        self.assertIn("| old | 2 (2) | 2000.0 (×1.00) | 1000.0 – 3000.0 |", md)
        self.assertIn("| new | 2 (2) | 2000.0 (×1.00) | 1500.0 – 2500.0 |", md)
        # the labelled runs make no column of the per-pairing cmtime table
        self.assertNotIn("## cmtime -c 100: ", md)
        self.assertNotIn("wire:", md)
        sc = data["results"]["kernel-ibcm"]["scenarios"]["cmtime-100-new-1"]
        self.assertEqual((sc["lib"], sc["round"], sc["host_load_start"]), ("new", 1, 3.0))

    def test_wire_column(self):
        scen = {"cmtime-100-old-1": {"n": 100, "lib": "old", "round": 1, "client_rc": "0", "failed": {},
                                     "steps": {"connect": {"completed": True, "us_per_conn": 10.0}},
                                     "wire": {"req_rep_p50_ms": 1.5, "rep_rtu_p50_ms": 80.25, "retransmissions": 7}},
                "cmtime-100-new-1": {"n": 100, "lib": "new", "round": 1, "client_rc": "0", "failed": {},
                                     "steps": {}, "wire": {"error": "truncated"}}}
        md = bench_kernel.lib_tables("kernel-ibcm", scen)
        self.assertIn("| 1 | old | — | 10.0 (×1.00) | — | 0 | 0 | 1.5 / 80.2, 7 |", md)
        self.assertIn("| 1 | new | — | — | — | 0 | 0 | — |", md)
        self.assertIn("| new | 1 (0) | — | — |", md)
        # kernel-kernel's connect (another boot of the same invocation): one more column
        ref = {"cmtime-100": {"steps": {"connect": {"completed": True, "us_per_conn": 8.0}}}}
        md = bench_kernel.lib_tables("kernel-ibcm", scen, ref)
        self.assertIn("| library | runs (connect completed) | connect median | min – max |"
                      " × kernel-kernel (8.0, its own boot) |", md)
        self.assertIn("| old | 1 (1) | 10.0 (×1.00) | 10.0 – 10.0 | 1.25 |", md)
        self.assertIn("| new | 1 (0) | — | — | — |", md)

    def test_kernel_label_is_the_base(self):
        """BENCH_LIBS with LABEL=kernel: every ratio is to the kernel's runs of the same boot, even
        when ibcm's label ran first; every step gets its median and spread per label."""
        def cm(connect, disconnect):
            return ("step              total ms     max ms     min us  us / conn\n"
                    f"create id    : {0.1:11.2f}{0.01:11.2f}{9.0:11.2f}{20.0:11.2f}\n"
                    f"connect      : {connect / 10:11.2f}{9.0:11.2f}{800.0:11.2f}{connect:11.2f}\n"
                    f"disconnect   : {disconnect / 10:11.2f}{9.0:11.2f}{800.0:11.2f}{disconnect:11.2f}\n")

        with tempfile.TemporaryDirectory() as root:
            runs = [("cmtime-100-ibcm-1", 900.0, 300.0), ("cmtime-100-kcm-1", 1000.0, 400.0),
                    ("cmtime-100-ibcm-2", 700.0, 500.0), ("cmtime-100-kcm-2", 1400.0, 600.0),
                    ("cmtime-100-ibcm-3", 800.0, 800.0), ("cmtime-100-kcm-3", 1200.0, 200.0)]
            files = {"scenarios.run": "".join(f"{n}\t70\tlisten\t1\ts\tc\n" for n, _, _ in runs),
                     "kernel.label": "kcm\n"}
            for n, c, d in runs:
                files[f"{n}.cli.out"], files[f"{n}.cli.rc"] = cm(c, d), "0\n"
            write_run(root, "kernel-ibcm", files)
            md, data = report(root, "kernel-ibcm")
        self.assertEqual(data["results"]["kernel-ibcm"]["kernel_label"], "kcm")
        # kcm's medians: connect 1200, disconnect 400
        self.assertIn("× = connect, disconnect over kcm's median", md)
        self.assertIn("| 1 | ibcm | — | 900.0 (×0.75) | 300.0 (×0.75) | 0 | 0 |", md)
        self.assertIn("| 2 | kcm | — | 1400.0 (×1.17) | 600.0 (×1.50) | 0 | 0 |", md)
        self.assertIn("| ibcm | 3 (3) | 800.0 (×0.67) | 700.0 – 900.0 |", md)
        self.assertIn("| kcm | 3 (3) | 1200.0 (×1.00) | 1000.0 – 1400.0 |", md)
        self.assertIn("| step: median (min – max), µs per connection | ibcm | kcm |", md)
        self.assertIn("| connect | 800.0 (×0.67) (700.0 – 900.0) | 1200.0 (1000.0 – 1400.0) |", md)
        self.assertIn("| disconnect | 500.0 (×1.25) (300.0 – 800.0) | 400.0 (200.0 – 600.0) |", md)
        self.assertIn("| create id | 20.0 (×1.00) (20.0 – 20.0) | 20.0 (20.0 – 20.0) |", md)

    def test_guest_memory(self):
        with tempfile.TemporaryDirectory() as root:
            pairing_dir(root, "ibcm-ibcm-umad", CMTIME, "")
            run = os.path.join(root, "runs", "ibcm-ibcm-umad")
            mem = {
                # the boot's first sample is the baseline; a torn line (the guest powered off
                # mid-write) is skipped
                "A.mem": "100 MemFree:400000 MemAvailable:409600 Slab:1000 SUnreclaim:500\n"
                         "110 MemFree:1 MemAvailable:307200 Slab:9 cmtime:207:51200 cmtime:208:1024\n"
                         "120 MemFree:1 MemAvailable:204800 cmtime:207:102400\n"
                         "200 MemFree:1 MemAvailable:1024 cmtime:207:300000\n130 MemFr\n",
                "B.mem": "100 MemAvailable:409600\n115 MemAvailable:389120 ibcm:99:20480 cmtime:300:10240\n",
                "cmtime-100.ts": "105.0 @start\n150.0 @exit 0\n",
            }
            for k, v in mem.items():
                with open(os.path.join(run, k), "w") as f:
                    f.write(v)
            sys.argv = ["bench_kernel.py", root, "ibcm-ibcm-umad"]
            with contextlib.redirect_stdout(io.StringIO()):
                bench_kernel.main()
            with open(os.path.join(root, "bench-kernel.md")) as f:
                md = f.read()
        # the sample at 200 s is after the client's exit: not its run's
        self.assertIn("| guest memory in use, MB (largest RSS) | A 200 (cmtime 100) / B 20 (cmtime 10, ibcm 20) |", md)
        # a client killed at its bound has no exit stamp: the driver's wall time of the run ends it
        with tempfile.TemporaryDirectory() as root:
            pairing_dir(root, "ibcm-ibcm-umad", CMTIME, "")
            run = os.path.join(root, "runs", "ibcm-ibcm-umad")
            for k, v in mem.items():
                with open(os.path.join(run, k), "w") as f:
                    f.write(v.replace("150.0 @exit 0\n", ""))
            with open(os.path.join(run, "cmtime-100.cli.rc.time"), "w") as f:
                f.write("10.00\n")
            sys.argv = ["bench_kernel.py", root, "ibcm-ibcm-umad"]
            with contextlib.redirect_stdout(io.StringIO()):
                bench_kernel.main()
            with open(os.path.join(root, "bench-kernel.md")) as f:
                md = f.read()
        self.assertIn("| guest memory in use, MB (largest RSS) | A 100 (cmtime 50) / B 20 (cmtime 10, ibcm 20) |", md)
        self.assertIsNone(bench_kernel.memory_during([(100.0, 4, {})], 101.0, 150.0))
        self.assertIsNone(bench_kernel.memory_during([], 101.0, 150.0))

    def test_load_without_samples(self):
        self.assertEqual(bench_kernel.load_during([], 5.0, 9.0), (None, None))
        self.assertEqual(bench_kernel.load_during([(10.0, 4.0)], 5.0, 9.0), (None, None))
        self.assertEqual(bench_kernel.load_during([(10.0, 4.0)], 5.0, 12.0), (None, 4.0))


if __name__ == "__main__":
    unittest.main()
