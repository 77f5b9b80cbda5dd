"""Which pairings of the rdmacm lab run through the host CM service (interop/rdmacm/pairings.sh),
which scenarios each runs by default (interop/rdmacm.sh's default_scenarios), and that
scripts/bench-kernel.sh keeps its pairings in-process (only ibcm-svc through the service; with
BENCH_SERVICE=1 as in the matrix)."""
import os
import re
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PAIRINGS = os.path.join(HERE, "pairings.sh")


def bash(script):
    return subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout


def function(path, name):
    """The text of shell function NAME (from `NAME() {` to the first `}` in column 0)."""
    text = open(path).read()
    m = re.search(r"^%s\(\) \{.*?^\}$" % re.escape(name), text, re.S | re.M)
    if not m:
        raise AssertionError(f"no function {name} in {path}")
    return m.group(0)


class Pairings(unittest.TestCase):
    def pairing(self, name):
        out = bash(f'. "{PAIRINGS}"; rdmacm_pairing {name}; '
                   'echo "$PAIR_PRELOAD_A $PAIR_PRELOAD_B $PAIR_SERVICE $PAIR_SERVICE_ONLY"')
        return out.split()

    def test_service_where_the_default_mode_is_proved(self):
        want = {
            "kernel-kernel": ["0", "0", "0", "0"],
            "kernel-ibcm": ["0", "1", "0", "0"],      # in-process ibcm client
            "ibcm-kernel": ["1", "0", "1", "0"],      # ibcm server through the service
            "ibcm-ibcm-umad": ["1", "1", "0", "0"],   # in-process pair
            "ibcm-ibcm-udp": ["1", "1", "1", "0"],
            "ibcm-svc": ["1", "1", "1", "1"],
            "ibcm-fwd": ["1", "1", "1", "1"],
        }
        for name, w in want.items():
            self.assertEqual(self.pairing(name), w, name)

    def test_default_scenarios(self):
        fn = function(os.path.join(ROOT, "interop", "rdmacm.sh"), "default_scenarios")
        table = os.path.join(HERE, "scenarios")

        def scen(p):
            return bash(f'. "{PAIRINGS}"; TABLE="{table}"\n{fn}\ndefault_scenarios {p}').split()

        for p in ("ibcm-kernel", "ibcm-ibcm-udp", "ibcm-svc", "ibcm-fwd"):
            s = scen(p)
            self.assertIn("svc-server-killed", s, p)
            self.assertNotIn("server-killed", s, p)
        for p in ("kernel-kernel", "kernel-ibcm", "ibcm-ibcm-umad"):
            s = scen(p)
            self.assertIn("server-killed", s, p)
            self.assertNotIn("svc-server-killed", s, p)
        self.assertIn("svc-cli", scen("ibcm-svc"))
        self.assertEqual(scen("ibcm-fwd"), scen("ibcm-svc"))
        self.assertNotIn("svc-cli", scen("ibcm-kernel"))
        self.assertNotIn("local-rping", scen("ibcm-ibcm-udp"))

    def test_bench_kernel_stays_in_process(self):
        """bench-kernel.sh's pairing step, run as the script runs it: in-process but in ibcm-svc,
        through the service as in the matrix with BENCH_SERVICE=1."""
        fn = function(os.path.join(ROOT, "scripts", "bench-kernel.sh"), "pairing")
        lines = [line.strip() for line in fn.splitlines()]
        i = lines.index('rdmacm_pairing "$p"')
        step = [l for l in lines[i + 1:i + 6] if "PAIR_SERVICE=" in l and not l.startswith("#")]
        self.assertEqual(len(step), 1, lines[i + 1:i + 6])

        def service(p, env):
            return bash(f'. "{PAIRINGS}"; {env} p={p}; rdmacm_pairing "$p"\n{step[0]}\n'
                        'echo "$PAIR_SERVICE"').strip()

        for p in ("kernel-ibcm", "ibcm-kernel", "ibcm-ibcm-umad", "ibcm-ibcm-udp"):
            self.assertEqual(service(p, "unset BENCH_SERVICE;"), "0", p)
        self.assertEqual(service("ibcm-svc", "unset BENCH_SERVICE;"), "1")
        self.assertEqual(service("ibcm-fwd", "unset BENCH_SERVICE;"), "1")
        for p in ("ibcm-kernel", "ibcm-ibcm-udp", "ibcm-svc"):
            self.assertEqual(service(p, "BENCH_SERVICE=1;"), "1", p)

    def test_forward_pairing_env(self):
        """ibcm-fwd's tools run the service in forward mode and ibcm-svc's in engine mode,
        before any RDMACM_IBCM_ENV; the other pairings carry only RDMACM_IBCM_ENV (the default
        mode, forward)."""
        def env(p, extra):
            out = bash(f'. "{PAIRINGS}"; rdmacm_pairing {p}; '
                       f'rdmacm_pairing_env "{extra}" debug re 10')
            line = [l for l in out.splitlines() if l.startswith("IBCM_ENV=")][0]
            return bash(f'{line}; echo "$IBCM_ENV"').strip()

        self.assertEqual(env("ibcm-fwd", ""), "IBCM_SERVICE_MODE=forward")
        self.assertEqual(env("ibcm-fwd", "A=1"), "IBCM_SERVICE_MODE=forward A=1")
        self.assertEqual(env("ibcm-svc", "A=1"), "IBCM_SERVICE_MODE=engine A=1")
        self.assertEqual(env("ibcm-svc", ""), "IBCM_SERVICE_MODE=engine")
        self.assertEqual(env("ibcm-kernel", "A=1"), "A=1")
        self.assertEqual(env("ibcm-kernel", ""), "")


if __name__ == "__main__":
    unittest.main()
