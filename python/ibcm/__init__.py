"""ibcm -- Python bindings (ctypes) for libibcm, the userspace InfiniBand /
RoCE Communication Manager with the Linux kernel's <rdma/ib_cm.h> API.

Two layers:

* :mod:`ibcm.raw` -- every struct, enum constant and function of
  <rdma/ib_cm.h> and <ibcm.h> under its C name, for code that wants the C
  API as is.
* This package -- :class:`Device`, :class:`CmId`, events as dataclasses,
  :class:`CmError` exceptions, and blocking helpers for scripts::

      import ibcm
      with ibcm.Device("soft:127.0.0.2") as dev:
          listener = dev.listen(0x1000)
          while True:
              req = listener.next_request()          # a ReqEvent
              print(req.private_data.rstrip(b"\\0"))
              req.cm_id.accept(b"welcome")

Service IDs, communication IDs, P_Keys and the like are host-order ints;
private data is ``bytes``.  The library is found through ``$IBCM_LIB``,
then ``libibcm.so*`` inside this package, then the system search path.
"""

from . import raw
from ._loader import LibraryNotFoundError
from .cm import CmId, Device, in_callback, reject_msg
from .enums import (
    AccessFlags,
    AhAttrType,
    AprStatus,
    CmState,
    EventType,
    GidType,
    IbEvent,
    LapState,
    MigState,
    Mtu,
    PathRecType,
    QpAttrMask,
    QpState,
    QpType,
    Rate,
    RejReason,
    SidrStatus,
    WcStatus,
)
from .errors import CmError, Rejected, WaitTimeout
from .events import (
    AprEvent,
    ErrorEvent,
    Event,
    LapEvent,
    MraEvent,
    RejEvent,
    RepEvent,
    ReqEvent,
    SidrRepEvent,
    SidrReqEvent,
)
from .types import AhAttr, Ece, Gid, GidAttr, GlobalRoute, PathRecord, QpAttrs, QpCap, gid_from_string, to_gid

__version__ = "0.1.0"

# Event kinds at package level, for cm_id.wait(ibcm.REP_RECEIVED).
globals().update({name: member for name, member in EventType.__members__.items()})

__all__ = [
    "raw", "Device", "CmId", "CmError", "Rejected", "WaitTimeout", "LibraryNotFoundError",
    "Event", "ReqEvent", "RepEvent", "RejEvent", "MraEvent", "LapEvent", "AprEvent", "SidrReqEvent",
    "SidrRepEvent", "ErrorEvent", "PathRecord", "GidAttr", "Gid", "Ece", "AhAttr", "GlobalRoute", "QpAttrs",
    "QpCap", "CmState", "LapState", "EventType", "RejReason", "AprStatus", "SidrStatus", "QpType", "QpState",
    "QpAttrMask", "AccessFlags", "Mtu", "Rate", "IbEvent", "WcStatus", "GidType", "PathRecType",
    "AhAttrType", "MigState", "reject_msg", "gid_from_string", "to_gid", "in_callback",
] + list(EventType.__members__)
