"""setuptools hook for the wheel tag (the metadata is in pyproject.toml).

The Python code is pure, but a wheel that carries the library
(``ibcm/libibcm.so*``, copied there by ``make wheel``) only works on the
platform the library was built for: such a wheel is tagged
``py3-none-<platform>`` (e.g. ``py3-none-linux_x86_64``), so pip refuses it
elsewhere.  Without a bundled library the wheel stays ``py3-none-any``.
"""

from pathlib import Path

from setuptools import setup
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the command lives in `wheel`
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
BUNDLED = any(p.is_file() for p in (HERE / "ibcm").glob("libibcm.so*"))


class LibraryDistribution(Distribution):
    """A bundled library is platform-specific content, as an extension
    module would be: the package goes to platlib (Root-Is-Purelib: false)."""

    def has_ext_modules(self):
        return BUNDLED


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if BUNDLED:
            # any Python 3 (ctypes, no extension module), this platform only
            return "py3", "none", plat
        return python, abi, plat


setup(distclass=LibraryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
