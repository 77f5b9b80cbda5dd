"""Library discovery: $IBCM_LIB, then libibcm.so* in the package, then the
system search path; a clear error naming every candidate otherwise."""

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON_DIR, library_path

from ibcm import _loader


def test_ibcm_lib_is_used_alone():
    assert _loader.candidates({"IBCM_LIB": "/x/libibcm.so"}) == ["/x/libibcm.so"]
    with pytest.raises(_loader.LibraryNotFoundError) as e:
        _loader.load({"IBCM_LIB": "/nonexistent/dir/libibcm.so"})
    assert "/nonexistent/dir/libibcm.so" in str(e.value)
    assert [p for p, _why in e.value.tried] == ["/nonexistent/dir/libibcm.so"]
    assert isinstance(e.value, OSError)


def test_package_copies_come_first(tmp_path, monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libibcm.so.9")
    for n in ("libibcm.so.0.1.0", "libibcm.so", "libibcm.so.0"):
        (tmp_path / n).write_bytes(b"")
    assert _loader.candidates({}, tmp_path) == [
        str(tmp_path / "libibcm.so"),
        str(tmp_path / "libibcm.so.0"),
        str(tmp_path / "libibcm.so.0.1.0"),
        "libibcm.so.9",
        "libibcm.so.0",
        "libibcm.so",
    ]


def test_skips_unloadable_and_foreign_libraries(tmp_path, monkeypatch):
    libm = ctypes.util.find_library("m")
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    (tmp_path / "libibcm.so").write_bytes(b"not an ELF file")
    if not libm:
        pytest.skip("no libm to stand in for a foreign libibcm")
    ctypes.CDLL(libm)  # a real shared object without ibcm's symbols
    (tmp_path / "libibcm.so.0").symlink_to(_resolve(libm))
    (tmp_path / "libibcm.so.0.1").symlink_to(Path(library_path()).resolve())
    lib, where = _loader.load({}, tmp_path)
    # the junk file and libm were tried and skipped, the real one loaded
    assert where == str(tmp_path / "libibcm.so.0.1") and hasattr(lib, "ibcm_open_device")


def _resolve(soname):
    with open("/proc/self/maps") as maps:
        for line in maps:
            p = line.split()[-1]
            if p.startswith("/") and Path(p).name.startswith(soname.split(".so")[0] + ".so"):
                return p
    pytest.skip(f"cannot locate {soname}")


def test_error_names_every_candidate(tmp_path):
    """In a fresh interpreter with nothing to find: the error lists the
    package directory copies, find_library's answer and the sonames."""
    code = (
        "import ctypes.util, sys\n"
        "ctypes.util.find_library = lambda n: None\n"
        f"sys.path.insert(0, {str(PYTHON_DIR)!r})\n"
        "from ibcm import _loader\n"
        f"open({str(tmp_path / 'libibcm.so')!r}, 'wb').write(b'junk')\n"
        "try:\n"
        f"    _loader.load({{}}, {str(tmp_path)!r})\n"
        "except _loader.LibraryNotFoundError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("IBCM_LIB", "LD_LIBRARY_PATH")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30).stdout
    if "cannot load libibcm" not in out:
        pytest.skip("a libibcm is installed on the system search path")
    for cand in (str(tmp_path / "libibcm.so"), "libibcm.so.0", "libibcm.so"):
        assert f"  {cand}: " in out
    assert "IBCM_LIB" in out


def test_raw_functions_load_lazily():
    code = (
        f"import sys; sys.path.insert(0, {str(PYTHON_DIR)!r})\n"
        "import ibcm.raw as r\n"
        "assert r._lib is None\n"
        "print(r.ibcm_reject_msg(8).decode(), r._lib is not None, r.library_path())\n"
    )
    env = dict(os.environ, IBCM_LIB=library_path())
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split()[:4] == ["invalid", "service", "ID", "True"], out.stderr
