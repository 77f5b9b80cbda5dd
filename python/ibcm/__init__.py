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

# Event kinds at package level, for cm_id.wait(ibcm.REP_RECEIVED)
# (tests/test_enums.py checks that this is every EventType member).
REQ_ERROR = EventType.REQ_ERROR
REQ_RECEIVED = EventType.REQ_RECEIVED
REP_ERROR = EventType.REP_ERROR
REP_RECEIVED = EventType.REP_RECEIVED
RTU_RECEIVED = EventType.RTU_RECEIVED
USER_ESTABLISHED = EventType.USER_ESTABLISHED
DREQ_ERROR = EventType.DREQ_ERROR
DREQ_RECEIVED = EventType.DREQ_RECEIVED
DREP_RECEIVED = EventType.DREP_RECEIVED
TIMEWAIT_EXIT = EventType.TIMEWAIT_EXIT
MRA_RECEIVED = EventType.MRA_RECEIVED
REJ_RECEIVED = EventType.REJ_RECEIVED
LAP_ERROR = EventType.LAP_ERROR
LAP_RECEIVED = EventType.LAP_RECEIVED
APR_RECEIVED = EventType.APR_RECEIVED
SIDR_REQ_ERROR = EventType.SIDR_REQ_ERROR
SIDR_REQ_RECEIVED = EventType.SIDR_REQ_RECEIVED
SIDR_REP_RECEIVED = EventType.SIDR_REP_RECEIVED

__all__ = [
    "raw", "Device", "CmId", "CmError", "Rejected", "WaitTimeout", "LibraryNotFoundError", "Event",
    "ReqEvent", "RepEvent", "RejEvent", "MraEvent", "LapEvent", "AprEvent", "SidrReqEvent",
    "SidrRepEvent", "ErrorEvent", "PathRecord", "GidAttr", "Gid", "Ece", "AhAttr", "GlobalRoute",
    "QpAttrs", "QpCap", "CmState", "LapState", "EventType", "RejReason", "AprStatus", "SidrStatus",
    "QpType", "QpState", "QpAttrMask", "AccessFlags", "Mtu", "Rate", "IbEvent", "WcStatus",
    "GidType", "PathRecType", "AhAttrType", "MigState", "reject_msg", "gid_from_string", "to_gid",
    "in_callback", "REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED", "RTU_RECEIVED",
    "USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED", "TIMEWAIT_EXIT",
    "MRA_RECEIVED", "REJ_RECEIVED", "LAP_ERROR", "LAP_RECEIVED", "APR_RECEIVED", "SIDR_REQ_ERROR",
    "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED",
]
