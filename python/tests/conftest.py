"""Shared fixtures for the ibcm Python tests.

Run from the repository root:

    IBCM_LIB=$PWD/target/release/libibcm.so python3 -m pytest -q python/tests

The tests use soft devices on 127.0.1.x - 127.0.3.x (other test suites use
127.0.0.x); every test gets fresh addresses from ``addrs``.
"""

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# In-process unless the run says otherwise (`make test-service` runs this
# suite through a private service with IBCM_SERVICE=required): the tests
# give each device its own address, and a plain run must not start a host
# CM service at the default socket. Set before the library is loaded.
os.environ.setdefault("IBCM_SERVICE", "off")

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent
REPO = PYTHON_DIR.parent
INCLUDE = Path(os.environ.get("IBCM_INCLUDE", REPO / "include"))

# Import the package from this tree (not an installed copy) unless asked.
if os.environ.get("IBCM_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

import ibcm  # noqa: E402


def _addresses():
    for third in (1, 2, 3):
        for fourth in range(1, 255):
            yield f"127.0.{third}.{fourth}"


_ADDR = _addresses()


class Addrs:
    """Hands out unused loopback addresses (127.0.1.x - 127.0.3.x)."""

    def take(self, n=1):
        got = list(itertools.islice(_ADDR, n))
        if len(got) < n:
            raise RuntimeError("out of test addresses")
        return got[0] if n == 1 else got


@pytest.fixture
def addrs():
    return Addrs()


@pytest.fixture
def dev_pair(addrs):
    """Two open devices (server, client) on fresh addresses."""
    a, b = addrs.take(2)
    with ibcm.Device(f"soft:{a}") as s, ibcm.Device(f"soft:{b}") as c:
        yield s, c


def library_path():
    """The file libibcm was loaded from (a full path, even when it was
    found by soname on the system search path)."""
    p = ibcm.raw.library_path()
    if "/" in p:
        return p
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/" in path and Path(path).name.startswith("libibcm.so"):
                return path
    return p


def gcc():
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    return cc


def compile_c(source, out, link_lib=False, extra=()):
    """Compiles C source text or a .c path to ``out`` against include/."""
    out = Path(out)
    if isinstance(source, str) and not source.endswith(".c"):
        src = out.with_suffix(".c")
        src.write_text(source)
    else:
        src = Path(source)
    cmd = [gcc(), "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{INCLUDE}", str(src), "-o", str(out)]
    if link_lib:
        # The library's soname is libibcm.so.0; give the linker and the
        # loader that name for whatever file IBCM_LIB points at.
        libdir = out.parent / "lib"
        libdir.mkdir(exist_ok=True)
        lib = Path(library_path()).resolve()
        for n in ("libibcm.so", "libibcm.so.0"):
            link = libdir / n
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(lib)
        cmd += [f"-L{libdir}", "-libcm", f"-Wl,-rpath,{libdir}", "-lpthread"]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"compile failed: {' '.join(cmd)}\n{r.stderr}")
    return out


@pytest.fixture(scope="session")
def peer_exe(tmp_path_factory):
    """tests/cm_peer.c built against include/ and the library under test."""
    return compile_c(HERE / "cm_peer.c", tmp_path_factory.mktemp("peer") / "cm_peer", link_lib=True)


@pytest.fixture
def c_peer(peer_exe, addrs):
    """A factory of C peers (cpeer.CPeer) on fresh addresses; all are shut
    down at the end of the test."""
    from cpeer import CPeer

    peers = []

    def make(ip=None):
        p = CPeer(peer_exe, ip or addrs.take())
        peers.append(p)
        return p

    yield make
    for p in peers:
        p.close()


#: Connection timing for tests: packet life time 2**8 * 4.096 us (~1 ms) and
#: CM response timeouts 2**16 * 4.096 us (~268 ms): a REQ/REP is resent
#: after ~270 ms, timewait lasts ~130 ms.
FAST = dict(packet_life_time=8, remote_cm_response_timeout=16, local_cm_response_timeout=16)


def pattern(n, seed):
    return bytes((seed * 31 + i * 7 + 1) & 0xFF for i in range(n))


def establish(server, client, service_id, req_pd=b"", rep_pd=b"", rtu_pd=b"", **kw):
    """Python <-> Python connection; returns (listener, client id, server id,
    ReqEvent, RepEvent, RTU event)."""
    listener = server.listen(service_id)
    conn = client.connect(server.gid, service_id, req_pd, **{**FAST, **kw})
    req = listener.next_request(5)
    req.cm_id.accept(rep_pd)
    rep = conn.wait(ibcm.REP_RECEIVED, 5)
    conn.rtu(rtu_pd)
    rtu = req.cm_id.wait(ibcm.RTU_RECEIVED, 5)
    return listener, conn, req.cm_id, req, rep, rtu
