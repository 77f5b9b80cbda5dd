"""Finding and loading libibcm.

Search order:

1. ``$IBCM_LIB``: a path to the library; when set, nothing else is tried.
2. ``libibcm.so*`` next to this package (``ibcm/libibcm.so``, ...), so a
   wheel or a source tree can carry its own copy.
3. The system search path: ``ctypes.util.find_library("ibcm")``, then
   ``libibcm.so.0`` and ``libibcm.so``.

A candidate only counts if it exports ``ibcm_open_device`` (so that an
unrelated ``libibcm`` -- the old rdma-core one has the same name -- is
skipped).  If nothing loads, :class:`LibraryNotFoundError` lists every
path tried and why it failed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]

PACKAGE_DIR = Path(__file__).resolve().parent

#: A symbol only ibcm's library exports.
_MARKER = "ibcm_open_device"


class LibraryNotFoundError(OSError):
    """libibcm could not be loaded; ``tried`` is a list of (path, reason)."""

    def __init__(self, tried: Iterable[Tuple[str, str]]) -> None:
        self.tried = list(tried)
        lines = "\n".join(f"  {path}: {why}" for path, why in self.tried)
        super().__init__(
            "cannot load libibcm (set IBCM_LIB to the library's path); tried:\n" + lines
        )


def _package_copies(directory: PathLike) -> List[str]:
    """libibcm.so* files in ``directory``, the unversioned name first."""

    def key(p: Path) -> Tuple[int, str]:
        # libibcm.so, libibcm.so.0, libibcm.so.0.1.0, ...
        return (len(p.name), p.name)

    return [str(p) for p in sorted(Path(directory).glob("libibcm.so*"), key=key) if p.is_file()]


def candidates(env: Optional[Mapping[str, str]] = None, package_dir: Optional[PathLike] = None) -> List[str]:
    """The paths/names to try, in order (see the module docstring)."""
    env = os.environ if env is None else env
    explicit = env.get("IBCM_LIB")
    if explicit:
        return [explicit]
    out = _package_copies(PACKAGE_DIR if package_dir is None else package_dir)
    found = ctypes.util.find_library("ibcm")
    if found:
        out.append(found)
    out += ["libibcm.so.0", "libibcm.so"]
    return list(dict.fromkeys(out))  # without duplicates, first occurrence kept


def load(env: Optional[Mapping[str, str]] = None,
         package_dir: Optional[PathLike] = None) -> Tuple[ctypes.CDLL, str]:
    """Loads the first usable candidate; returns (CDLL, path)."""
    tried = []
    for cand in candidates(env, package_dir):
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append((cand, str(e)))
            continue
        if not hasattr(lib, _MARKER):
            tried.append((cand, f"loaded, but it is not ibcm's library (no {_MARKER})"))
            continue
        return lib, cand
    raise LibraryNotFoundError(tried)
