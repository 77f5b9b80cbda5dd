"""python/examples/listen.py and connect.py, run as scripts."""

import os
import signal
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, library_path

EXAMPLES = PYTHON_DIR / "examples"


def _env():
    env = dict(os.environ, IBCM_LIB=library_path())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("listen_script", ["listen.py", "aio_listen.py"])
def test_listen_and_connect_examples(addrs, listen_script):
    server, client = addrs.take(2)
    env = _env()
    listener = subprocess.Popen([sys.executable, str(EXAMPLES / listen_script), server, "0x4321"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == f"listening on {server}"
        for msg in ("first hello", "second hello"):
            out = subprocess.run([sys.executable, str(EXAMPLES / "connect.py"), server, client, msg, "0x4321"],
                                 env=env, capture_output=True, text=True, timeout=20)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == "server says: welcome"
            assert listener.stdout.readline().strip() == msg
    finally:
        listener.send_signal(signal.SIGINT)  # KeyboardInterrupt: the with block closes the device
        try:
            _out, err = listener.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            listener.kill()
            raise
    assert "KeyboardInterrupt" in err


def test_connect_example_reports_a_reject(addrs):
    server, client = addrs.take(2)
    env = _env()
    code = ("import ibcm, sys\n"
            f"d = ibcm.Device({server!r})\n"
            "print('up', flush=True)\n"
            "sys.stdin.readline()\n")
    # a device with no listener: the server's CM answers REJ 8
    holder = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        out = subprocess.run([sys.executable, str(EXAMPLES / "connect.py"), server, client, "x", "0x4322"],
                             env=env, capture_output=True, text=True, timeout=20)
        assert out.returncode != 0 and "Rejected" in out.stderr and "invalid service ID" in out.stderr
    finally:
        holder.communicate("\n", timeout=10)
