"""Exceptions.  Everything ibcm raises for a CM failure is a
:class:`CmError` (an :class:`OSError`, so ``e.errno`` / ``e.strerror`` work
as usual)."""

from __future__ import annotations

import errno as _errno
import os
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from .enums import RejReason
    from .events import Event


class CmError(OSError):
    """A CM call failed, or a wait saw a failure event.

    Attributes: ``errno`` (positive), ``errno_name`` (``"EINVAL"``),
    ``strerror``, ``call`` (the C function or operation), ``event`` (the
    event that caused it, if any), and for rejects ``reason`` (an
    :class:`ibcm.RejReason` or int), ``reason_text`` (``ibcm_reject_msg``)
    and ``ari`` (bytes).
    """

    errno: int
    strerror: str

    def __init__(self, err: int, call: Optional[str] = None, message: Optional[str] = None,
                 event: Optional[Event] = None, reason: Union[RejReason, int, None] = None,
                 reason_text: Optional[str] = None, ari: bytes = b"") -> None:
        err = abs(int(err))
        text = message or os.strerror(err)
        super().__init__(err, text)
        self.call = call
        self.event = event
        self.reason = reason
        self.reason_text = reason_text
        self.ari = ari

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno, f"E{self.errno}")

    def __str__(self) -> str:
        where = f"{self.call}: " if self.call else ""
        s = f"{where}[{self.errno_name}] {self.strerror}"
        if self.reason is not None:
            s += f" (reject reason {int(self.reason)}: {self.reason_text})"
        return s


class Rejected(CmError, ConnectionRefusedError):
    """The peer (or its CM) rejected: a REJ was received."""


class WaitTimeout(CmError, TimeoutError):
    """``wait()``/``next_request()``/``get_event()`` timed out (ETIMEDOUT)."""


def check(rc: int, call: str) -> int:
    """Raises CmError for a negative return code; returns rc otherwise."""
    if rc < 0:
        raise CmError(-rc, call)
    return rc
