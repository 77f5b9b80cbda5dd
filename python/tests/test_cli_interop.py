"""Python against the ibcm command-line tool's `listen` / `connect`, when
the binary has them ($IBCM_CLI, else target/release/ibcm, else `ibcm` on
PATH); skipped otherwise."""

import os
import shutil
import subprocess

import pytest

import ibcm
from conftest import FAST, REPO


def _cli():
    for cand in (os.environ.get("IBCM_CLI"), str(REPO / "target" / "release" / "ibcm"), shutil.which("ibcm")):
        if cand and os.access(cand, os.X_OK):
            r = subprocess.run([cand, "listen", "--help"], capture_output=True, text=True, timeout=10)
            if "--service-id" in r.stdout + r.stderr:  # (--help exits 2)
                return cand
    pytest.skip("no ibcm CLI with listen/connect")


def _env():
    env = dict(os.environ)
    env.pop("IBCM_LOG", None)
    return env


def test_python_listener_cli_client(addrs):
    cli = _cli()
    server, client = addrs.take(2)
    with ibcm.Device(server) as dev:
        listener = dev.listen(0x7A7A)
        proc = subprocess.Popen([cli, "connect", "--dest", server, "--device", f"soft:{client}",
                                 "--service-id", "0x7a7a", "--private-data", "from the cli", "--timeout", "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        try:
            req = listener.next_request(10)
            assert req.private_data.rstrip(b"\0") == b"from the cli"
            conn = req.cm_id
            conn.accept(b"from python")
            conn.wait("RTU_RECEIVED", 10)
            conn.wait("DREQ_RECEIVED", 10)
            conn.drep()
            conn.wait("TIMEWAIT_EXIT", 10)
            out, _ = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, out
    assert "REP_RECEIVED" in out and "from python" in out


def test_cli_listener_python_client(addrs):
    cli = _cli()
    server, client = addrs.take(2)
    proc = subprocess.Popen([cli, "listen", "--device", f"soft:{server}", "--service-id", "0x7b7b", "--count", "1",
                             "--private-data", "cli says hi", "--timeout", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        assert "listening" in proc.stdout.readline()
        with ibcm.Device(client) as dev:
            conn = dev.connect(server, 0x7B7B, b"python says hi", **FAST)
            rep = conn.wait("REP_RECEIVED", 10)
            assert rep.private_data.rstrip(b"\0") == b"cli says hi"
            conn.rtu()
            conn.disconnect()
            conn.wait("DREP_RECEIVED", 10)
            conn.wait("TIMEWAIT_EXIT", 10)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "python says hi" in out
