"""`pip install ./python`, then the 10-line listener of
python/examples/listen.py, run from the installed package (not the source
tree), accepts connections from the `ibcm connect` command and prints their
private data."""

import subprocess
import sys
import time


from conftest import REPO
from test_cli_interop import _cli, _env


def test_pip_installed_listener_accepts_cli_connects(addrs, tmp_path):
    cli = _cli()
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "--target", str(site), str(REPO / "python")],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "ibcm" / "__init__.py").exists()

    server, client = addrs.take(2)
    env = _env()
    env["PYTHONPATH"] = str(site)  # the installed copy only
    script = REPO / "python" / "examples" / "listen.py"
    assert len(script.read_text().split("\n")) < 40
    lst = subprocess.Popen([sys.executable, str(script), server, "0x5151"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        first = lst.stdout.readline()
        assert first.startswith("listening"), first
        conn = subprocess.run([cli, "connect", "--dest", server, "--device", f"soft:{client}",
                               "--service-id", "0x5151", "--count", "2",
                               "--private-data", "hello from pip", "--timeout", "20"],
                              capture_output=True, text=True, timeout=60, env=_env())
        assert conn.returncode == 0, conn.stdout + conn.stderr
        assert conn.stdout.count("welcome") >= 2, conn.stdout
        time.sleep(0.2)
    finally:
        lst.terminate()
        out, _ = lst.communicate(timeout=10)
    assert out.count("hello from pip") == 2, out
    # It really ran from the installed package.
    probe = subprocess.run([sys.executable, "-c", "import ibcm; print(ibcm.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, env=env)
    assert probe.stdout.strip().startswith(str(site)), probe.stdout + probe.stderr
