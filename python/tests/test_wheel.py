"""`make wheel` builds a platform wheel with the library inside; installed
into a clean venv (nothing else: no IBCM_LIB, no source tree on the path)
it runs a listener and a connector."""

import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from conftest import REPO

SCRIPT = textwrap.dedent("""
    import sys
    import ibcm

    server, client = sys.argv[1], sys.argv[2]
    print("lib", ibcm.raw.library_path())
    print("pkg", ibcm.__file__)
    with ibcm.Device(server) as srv, ibcm.Device(client) as cli:
        listener = srv.listen(0x3EE1)
        conn = cli.connect(srv.gid, 0x3EE1, b"from the wheel", packet_life_time=8,
                           remote_cm_response_timeout=16, local_cm_response_timeout=16)
        req = listener.next_request(10)
        req.cm_id.accept(b"welcome")
        rep = conn.wait(ibcm.REP_RECEIVED, 10)
        conn.rtu()
        req.cm_id.wait(ibcm.RTU_RECEIVED, 10)
        print("req", req.private_data.rstrip(b"\\0").decode())
        print("rep", rep.private_data.rstrip(b"\\0").decode())
        conn.disconnect()
        req.cm_id.wait(ibcm.DREQ_RECEIVED, 10)
        req.cm_id.drep()
        conn.wait(ibcm.TIMEWAIT_EXIT, 10)
    print("done")
""")


def _clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("IBCM_LIB", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_wheel_installs_alone_in_a_clean_venv(addrs, tmp_path):
    r = subprocess.run(["make", "--no-print-directory", "wheel"], cwd=REPO, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = sorted((REPO / "build" / "wheel").glob("ibcm-*.whl"))
    assert len(wheels) == 1, wheels
    whl = wheels[0]
    # a platform wheel (the library is x86_64 Linux code), not py3-none-any
    assert whl.name.endswith("-py3-none-linux_x86_64.whl"), whl.name
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert {"ibcm/libibcm.so", "ibcm/py.typed", "ibcm/cm.py"} <= names
    assert "Root-Is-Purelib: false" in wheel_meta

    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "ensurepip" in r.stdout + r.stderr and os.environ.get("CI") != "true":
        pytest.skip("python3 -m venv cannot bootstrap pip here (Debian: install python3-venv; deps.sh does)")
    assert r.returncode == 0, r.stdout + r.stderr
    py = venv / "bin" / "python"
    env = _clean_env()
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(whl)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr

    server, client = addrs.take(2)
    script = tmp_path / "pair.py"
    script.write_text(SCRIPT)
    r = subprocess.run([str(py), str(script), server, client], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    site = str(venv / "lib")
    # the package and the library both came from the venv
    assert out["pkg"].startswith(site) and out["lib"].startswith(site), r.stdout
    assert out["lib"].endswith("/ibcm/libibcm.so")
    assert out["req"] == "from the wheel" and out["rep"] == "welcome"
    assert r.stdout.rstrip().endswith("done")
