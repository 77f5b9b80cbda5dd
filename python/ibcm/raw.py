"""ibcm.raw -- ctypes mirror of <rdma/ib_cm.h> and <ibcm.h>.

Every struct, union, enumerator and function of the C API under its C name
(plus the parts of <rdma/ib_sa.h>, <rdma/ib_verbs.h> and <rdma/rdma_cm.h>
that the CM API uses).  Layouts are the C compiler's (x86_64 / LP64);
``python/tests/test_abi.py`` compiles a C program against ``include/`` and
compares every size, offset, bitfield position, constant and function
prototype with this module, so the two cannot drift apart.

Conventions are the C ones: ``__be16/32/64`` members and arguments hold
network byte order (use :func:`cpu_to_be64` & co.), functions returning int
return 0 or ``-errno``, and functions returning a pointer return
``ERR_PTR(-errno)`` on failure, never NULL -- test with :func:`IS_ERR` and
decode with :func:`PTR_ERR`.

The library itself is loaded lazily, on the first access to a function
(see :mod:`ibcm._loader` for the search order), so the types here can be
used without it.  Handlers passed to :func:`ib_create_cm_id` are
``ib_cm_handler`` (``CFUNCTYPE``) objects: keep a reference to them for as
long as the library may call them, i.e. until ``ib_destroy_cm_id`` returned
for every id using them.
"""

from __future__ import annotations

import ctypes
import re
import sys
import threading
import typing
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple, Type, TypeVar
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    c_bool,
    c_char_p,
    c_int,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_ulong,
    c_void_p,
)

from . import _loader

if TYPE_CHECKING:
    from _ctypes import _CData, _CDataType

    #: A ctypes type: c_int, POINTER(ib_cm_id), a Structure subclass, ...
    CType = Type[_CDataType]
    #: What _address() and the error-pointer helpers take: a ctypes
    #: pointer or c_void_p, an address, or None (NULL).
    PointerLike = typing.Union[None, int, _CData]

if sys.byteorder != "little" or ctypes.sizeof(c_void_p) != 8:  # pragma: no cover
    raise ImportError("ibcm.raw mirrors the x86_64/LP64 little-endian layout only")

# Kernel scalar types.
u8, u16, u32, u64 = c_uint8, c_uint16, c_uint32, c_uint64
__be16, __be32, __be64 = c_uint16, c_uint32, c_uint64
be16, be32, be64 = __be16, __be32, __be64  # (class bodies mangle __names)
#: C enums are 4-byte unsigned ints (gcc: no negative enumerators).
c_enum = c_uint

# ---------------------------------------------------------------------------
# Byte order and error pointers (<rdma/ibcm_kernel_types.h>)
# ---------------------------------------------------------------------------


def _swap(value: int, nbytes: int) -> int:
    return int.from_bytes((value & ((1 << (8 * nbytes)) - 1)).to_bytes(nbytes, "big"), "little")


def cpu_to_be16(x: int) -> int:
    return _swap(x, 2)


def cpu_to_be32(x: int) -> int:
    return _swap(x, 4)


def cpu_to_be64(x: int) -> int:
    return _swap(x, 8)


be16_to_cpu, be32_to_cpu, be64_to_cpu = cpu_to_be16, cpu_to_be32, cpu_to_be64

MAX_ERRNO = 4095
_PTR_BITS = 8 * ctypes.sizeof(c_void_p)
_PTR_MASK = (1 << _PTR_BITS) - 1


def _address(ptr: PointerLike) -> int:
    """The address held by a ctypes pointer, c_void_p, int or None (0)."""
    if ptr is None:
        return 0
    if isinstance(ptr, int):
        return ptr & _PTR_MASK
    return ctypes.cast(ptr, c_void_p).value or 0


def IS_ERR_VALUE(x: PointerLike) -> bool:
    return _address(x) >= (-MAX_ERRNO & _PTR_MASK)


def IS_ERR(ptr: PointerLike) -> bool:
    """True when ``ptr`` encodes an errno value (NULL is not an error)."""
    return IS_ERR_VALUE(ptr)


def IS_ERR_OR_NULL(ptr: PointerLike) -> bool:
    return _address(ptr) == 0 or IS_ERR(ptr)


def PTR_ERR(ptr: PointerLike) -> int:
    """The (negative) value of a pointer as a C ``long``: ``-errno`` for an
    error pointer."""
    a = _address(ptr)
    return a - (1 << _PTR_BITS) if a >> (_PTR_BITS - 1) else a


def PTR_ERR_OR_ZERO(ptr: PointerLike) -> int:
    return PTR_ERR(ptr) if IS_ERR(ptr) else 0


def ERR_PTR(error: int, ptype: Optional[Type[ctypes._Pointer[Any]]] = None) -> Any:
    """A pointer holding the negative errno value ``error``: a ``c_void_p``,
    or a ``ptype`` (e.g. ``POINTER(ib_cm_id)``) when given."""
    p = c_void_p(error & _PTR_MASK)
    return p if ptype is None else ctypes.cast(p, ptype)


# ---------------------------------------------------------------------------
# Enumerations.  _enum() defines each enumerator as a module global and
# records it in ENUMS[<C enum tag>] (anonymous enums under a made-up tag
# starting with "_"); values follow C rules (implicit = previous + 1).
# ---------------------------------------------------------------------------

ENUMS: Dict[str, Dict[str, int]] = {}


def _enum(tag: str, spec: str) -> Dict[str, int]:
    members: Dict[str, int] = {}
    value = -1
    for tok in spec.split():
        if "=" in tok:
            name, expr = tok.split("=", 1)
            value = int(expr, 0)
        else:
            name, value = tok, value + 1
        members[name] = value
    ENUMS[tag] = members
    globals().update(members)
    return members


# <rdma/ib_cm.h>
_enum("ib_cm_state", """
    IB_CM_IDLE IB_CM_LISTEN IB_CM_REQ_SENT IB_CM_REQ_RCVD IB_CM_MRA_REQ_SENT
    IB_CM_MRA_REQ_RCVD IB_CM_REP_SENT IB_CM_REP_RCVD IB_CM_MRA_REP_SENT
    IB_CM_MRA_REP_RCVD IB_CM_ESTABLISHED IB_CM_DREQ_SENT IB_CM_DREQ_RCVD
    IB_CM_TIMEWAIT IB_CM_SIDR_REQ_SENT IB_CM_SIDR_REQ_RCVD""")
_enum("ib_cm_lap_state", """
    IB_CM_LAP_UNINIT IB_CM_LAP_IDLE IB_CM_LAP_SENT IB_CM_LAP_RCVD
    IB_CM_MRA_LAP_SENT IB_CM_MRA_LAP_RCVD""")
_enum("ib_cm_event_type", """
    IB_CM_REQ_ERROR IB_CM_REQ_RECEIVED IB_CM_REP_ERROR IB_CM_REP_RECEIVED
    IB_CM_RTU_RECEIVED IB_CM_USER_ESTABLISHED IB_CM_DREQ_ERROR
    IB_CM_DREQ_RECEIVED IB_CM_DREP_RECEIVED IB_CM_TIMEWAIT_EXIT
    IB_CM_MRA_RECEIVED IB_CM_REJ_RECEIVED IB_CM_LAP_ERROR IB_CM_LAP_RECEIVED
    IB_CM_APR_RECEIVED IB_CM_SIDR_REQ_ERROR IB_CM_SIDR_REQ_RECEIVED
    IB_CM_SIDR_REP_RECEIVED""")
_enum("ib_cm_data_size", """
    IB_CM_REQ_PRIVATE_DATA_SIZE=92 IB_CM_MRA_PRIVATE_DATA_SIZE=222
    IB_CM_REJ_PRIVATE_DATA_SIZE=148 IB_CM_REP_PRIVATE_DATA_SIZE=196
    IB_CM_RTU_PRIVATE_DATA_SIZE=224 IB_CM_DREQ_PRIVATE_DATA_SIZE=220
    IB_CM_DREP_PRIVATE_DATA_SIZE=224 IB_CM_REJ_ARI_LENGTH=72
    IB_CM_LAP_PRIVATE_DATA_SIZE=168 IB_CM_APR_PRIVATE_DATA_SIZE=148
    IB_CM_APR_INFO_LENGTH=72 IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE=216
    IB_CM_SIDR_REP_PRIVATE_DATA_SIZE=136 IB_CM_SIDR_REP_INFO_LENGTH=72""")
_enum("ib_cm_rej_reason", """
    IB_CM_REJ_NO_QP=1 IB_CM_REJ_NO_EEC IB_CM_REJ_NO_RESOURCES IB_CM_REJ_TIMEOUT
    IB_CM_REJ_UNSUPPORTED IB_CM_REJ_INVALID_COMM_ID
    IB_CM_REJ_INVALID_COMM_INSTANCE IB_CM_REJ_INVALID_SERVICE_ID
    IB_CM_REJ_INVALID_TRANSPORT_TYPE IB_CM_REJ_STALE_CONN
    IB_CM_REJ_RDC_NOT_EXIST IB_CM_REJ_INVALID_GID IB_CM_REJ_INVALID_LID
    IB_CM_REJ_INVALID_SL IB_CM_REJ_INVALID_TRAFFIC_CLASS
    IB_CM_REJ_INVALID_HOP_LIMIT IB_CM_REJ_INVALID_PACKET_RATE
    IB_CM_REJ_INVALID_ALT_GID IB_CM_REJ_INVALID_ALT_LID IB_CM_REJ_INVALID_ALT_SL
    IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS IB_CM_REJ_INVALID_ALT_HOP_LIMIT
    IB_CM_REJ_INVALID_ALT_PACKET_RATE IB_CM_REJ_PORT_CM_REDIRECT
    IB_CM_REJ_PORT_REDIRECT IB_CM_REJ_INVALID_MTU
    IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES IB_CM_REJ_CONSUMER_DEFINED
    IB_CM_REJ_INVALID_RNR_RETRY IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID
    IB_CM_REJ_INVALID_CLASS_VERSION IB_CM_REJ_INVALID_FLOW_LABEL
    IB_CM_REJ_INVALID_ALT_FLOW_LABEL IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED=35""")
_enum("ib_cm_apr_status", """
    IB_CM_APR_SUCCESS IB_CM_APR_INVALID_COMM_ID IB_CM_APR_UNSUPPORTED
    IB_CM_APR_REJECT IB_CM_APR_REDIRECT IB_CM_APR_IS_CURRENT
    IB_CM_APR_INVALID_QPN_EECN IB_CM_APR_INVALID_LID IB_CM_APR_INVALID_GID
    IB_CM_APR_INVALID_FLOW_LABEL IB_CM_APR_INVALID_TCLASS
    IB_CM_APR_INVALID_HOP_LIMIT IB_CM_APR_INVALID_PACKET_RATE
    IB_CM_APR_INVALID_SL""")
_enum("ib_cm_sidr_status", """
    IB_SIDR_SUCCESS IB_SIDR_UNSUPPORTED IB_SIDR_REJECT IB_SIDR_NO_QP
    IB_SIDR_REDIRECT IB_SIDR_UNSUPPORTED_VERSION""")

# <rdma/ib_sa.h> (IB_PATH_* come from <rdma/ib_user_sa.h> or its fallback)
_enum("_ib_path_flags", """
    IB_PATH_GMP=1 IB_PATH_PRIMARY=0x2 IB_PATH_ALTERNATE=0x4 IB_PATH_OUTBOUND=0x8
    IB_PATH_INBOUND=0x10 IB_PATH_INBOUND_REVERSE=0x20 IB_PATH_BIDIRECTIONAL=0x28""")
_enum("sa_path_rec_type", """
    SA_PATH_REC_TYPE_IB SA_PATH_REC_TYPE_ROCE_V1 SA_PATH_REC_TYPE_ROCE_V2
    SA_PATH_REC_TYPE_OPA""")
_enum("ib_sa_selector", "IB_SA_GT=0 IB_SA_LT=1 IB_SA_EQ=2 IB_SA_BEST=3")

# <rdma/rdma_cm.h>
_enum("rdma_ucm_port_space", """
    RDMA_PS_IPOIB=0x0002 RDMA_PS_IB=0x013F RDMA_PS_TCP=0x0106 RDMA_PS_UDP=0x0111""")

# <rdma/ib_verbs.h>
_enum("ib_gid_type", """
    IB_GID_TYPE_IB=0 IB_GID_TYPE_ROCE=1 IB_GID_TYPE_ROCE_UDP_ENCAP=2
    IB_GID_TYPE_SIZE""")
_enum("ib_event_type", """
    IB_EVENT_CQ_ERR IB_EVENT_QP_FATAL IB_EVENT_QP_REQ_ERR IB_EVENT_QP_ACCESS_ERR
    IB_EVENT_COMM_EST IB_EVENT_SQ_DRAINED IB_EVENT_PATH_MIG
    IB_EVENT_PATH_MIG_ERR IB_EVENT_DEVICE_FATAL IB_EVENT_PORT_ACTIVE
    IB_EVENT_PORT_ERR IB_EVENT_LID_CHANGE IB_EVENT_PKEY_CHANGE
    IB_EVENT_SM_CHANGE IB_EVENT_SRQ_ERR IB_EVENT_SRQ_LIMIT_REACHED
    IB_EVENT_QP_LAST_WQE_REACHED IB_EVENT_CLIENT_REREGISTER
    IB_EVENT_GID_CHANGE IB_EVENT_WQ_FATAL IB_EVENT_DEVICE_SPEED_CHANGE""")
_enum("ib_qp_type", """
    IB_QPT_SMI IB_QPT_GSI IB_QPT_RC IB_QPT_UC IB_QPT_UD IB_QPT_RAW_IPV6
    IB_QPT_RAW_ETHERTYPE IB_QPT_RAW_PACKET=8 IB_QPT_XRC_INI=9 IB_QPT_XRC_TGT
    IB_QPT_MAX IB_QPT_DRIVER=0xFF IB_QPT_RESERVED1=0x1000 IB_QPT_RESERVED2
    IB_QPT_RESERVED3 IB_QPT_RESERVED4 IB_QPT_RESERVED5 IB_QPT_RESERVED6
    IB_QPT_RESERVED7 IB_QPT_RESERVED8 IB_QPT_RESERVED9 IB_QPT_RESERVED10""")
_enum("ib_wc_status", """
    IB_WC_SUCCESS IB_WC_LOC_LEN_ERR IB_WC_LOC_QP_OP_ERR IB_WC_LOC_EEC_OP_ERR
    IB_WC_LOC_PROT_ERR IB_WC_WR_FLUSH_ERR IB_WC_MW_BIND_ERR IB_WC_BAD_RESP_ERR
    IB_WC_LOC_ACCESS_ERR IB_WC_REM_INV_REQ_ERR IB_WC_REM_ACCESS_ERR
    IB_WC_REM_OP_ERR IB_WC_RETRY_EXC_ERR IB_WC_RNR_RETRY_EXC_ERR
    IB_WC_LOC_RDD_VIOL_ERR IB_WC_REM_INV_RD_REQ_ERR IB_WC_REM_ABORT_ERR
    IB_WC_INV_EECN_ERR IB_WC_INV_EEC_STATE_ERR IB_WC_FATAL_ERR
    IB_WC_RESP_TIMEOUT_ERR IB_WC_GENERAL_ERR""")
_enum("ib_mtu", "IB_MTU_256=1 IB_MTU_512 IB_MTU_1024 IB_MTU_2048 IB_MTU_4096")
_enum("opa_mtu", "OPA_MTU_8192=6 OPA_MTU_10240")
_enum("ib_rate", """
    IB_RATE_PORT_CURRENT=0 IB_RATE_2_5_GBPS=2 IB_RATE_5_GBPS=5
    IB_RATE_10_GBPS=3 IB_RATE_20_GBPS=6 IB_RATE_30_GBPS=4 IB_RATE_40_GBPS=7
    IB_RATE_60_GBPS=8 IB_RATE_80_GBPS=9 IB_RATE_120_GBPS=10 IB_RATE_14_GBPS=11
    IB_RATE_56_GBPS=12 IB_RATE_112_GBPS=13 IB_RATE_168_GBPS=14
    IB_RATE_25_GBPS=15 IB_RATE_100_GBPS=16 IB_RATE_200_GBPS=17
    IB_RATE_300_GBPS=18 IB_RATE_28_GBPS=19 IB_RATE_50_GBPS=20
    IB_RATE_400_GBPS=21 IB_RATE_600_GBPS=22 IB_RATE_800_GBPS=23
    IB_RATE_1600_GBPS=25""")
_enum("ib_qp_state", """
    IB_QPS_RESET IB_QPS_INIT IB_QPS_RTR IB_QPS_RTS IB_QPS_SQD IB_QPS_SQE
    IB_QPS_ERR""")
_enum("ib_mig_state", "IB_MIG_MIGRATED IB_MIG_REARM IB_MIG_ARMED")
_enum("ib_qp_attr_mask", """
    IB_QP_STATE=0x1 IB_QP_CUR_STATE=0x2 IB_QP_EN_SQD_ASYNC_NOTIFY=0x4
    IB_QP_ACCESS_FLAGS=0x8 IB_QP_PKEY_INDEX=0x10 IB_QP_PORT=0x20
    IB_QP_QKEY=0x40 IB_QP_AV=0x80 IB_QP_PATH_MTU=0x100 IB_QP_TIMEOUT=0x200
    IB_QP_RETRY_CNT=0x400 IB_QP_RNR_RETRY=0x800 IB_QP_RQ_PSN=0x1000
    IB_QP_MAX_QP_RD_ATOMIC=0x2000 IB_QP_ALT_PATH=0x4000
    IB_QP_MIN_RNR_TIMER=0x8000 IB_QP_SQ_PSN=0x10000
    IB_QP_MAX_DEST_RD_ATOMIC=0x20000 IB_QP_PATH_MIG_STATE=0x40000
    IB_QP_CAP=0x80000 IB_QP_DEST_QPN=0x100000 IB_QP_RESERVED1=0x200000
    IB_QP_RESERVED2=0x400000 IB_QP_RESERVED3=0x800000
    IB_QP_RESERVED4=0x1000000 IB_QP_RATE_LIMIT=0x2000000
    IB_QP_ATTR_STANDARD_BITS=0x1FFFFF""")
_enum("ib_access_flags", """
    IB_ACCESS_LOCAL_WRITE=0x1 IB_ACCESS_REMOTE_WRITE=0x2
    IB_ACCESS_REMOTE_READ=0x4 IB_ACCESS_REMOTE_ATOMIC=0x8
    IB_ACCESS_MW_BIND=0x10 IB_ZERO_BASED=0x20 IB_ACCESS_ON_DEMAND=0x40
    IB_ACCESS_HUGETLB=0x80 IB_ACCESS_RELAXED_ORDERING=0x100000
    IB_ACCESS_FLUSH_GLOBAL=0x100 IB_ACCESS_FLUSH_PERSISTENT=0x200
    IB_ACCESS_OPTIONAL=0x3FF00000 IB_ACCESS_SUPPORTED=0x3FF003FF""")
_enum("rdma_ah_attr_type", """
    RDMA_AH_ATTR_TYPE_UNDEFINED RDMA_AH_ATTR_TYPE_IB RDMA_AH_ATTR_TYPE_ROCE
    RDMA_AH_ATTR_TYPE_OPA""")
_enum("ib_ah_flags", "IB_AH_GRH=1")

# <ibcm.h> counters
_enum("ibcm_attr_index", """
    IBCM_ATTR_CLASS_PORT_INFO=0 IBCM_ATTR_REQ IBCM_ATTR_MRA IBCM_ATTR_REJ
    IBCM_ATTR_REP IBCM_ATTR_RTU IBCM_ATTR_DREQ IBCM_ATTR_DREP
    IBCM_ATTR_SIDR_REQ IBCM_ATTR_SIDR_REP IBCM_ATTR_LAP IBCM_ATTR_APR
    IBCM_ATTR_COUNT""")
_enum("ibcm_drop_cause", """
    IBCM_DROP_MALFORMED=0 IBCM_DROP_UNKNOWN_ID IBCM_DROP_WRONG_STATE
    IBCM_DROP_DUPLICATE IBCM_DROP_UNSUPPORTED IBCM_DROP_OVERLOAD
    IBCM_DROP_IGNORED IBCM_DROP_MISMATCH IBCM_DROP_COUNT""")

# ---------------------------------------------------------------------------
# Macros (values exactly as the C expressions evaluate; __be constants are
# byte-swapped like cpu_to_be*() does on this little-endian host).
# ---------------------------------------------------------------------------

MACROS: Dict[str, int] = {
    "CM_REQ_ATTR_ID": cpu_to_be16(0x0010),
    "CM_MRA_ATTR_ID": cpu_to_be16(0x0011),
    "CM_REJ_ATTR_ID": cpu_to_be16(0x0012),
    "CM_REP_ATTR_ID": cpu_to_be16(0x0013),
    "CM_RTU_ATTR_ID": cpu_to_be16(0x0014),
    "CM_DREQ_ATTR_ID": cpu_to_be16(0x0015),
    "CM_DREP_ATTR_ID": cpu_to_be16(0x0016),
    "CM_SIDR_REQ_ATTR_ID": cpu_to_be16(0x0017),
    "CM_SIDR_REP_ATTR_ID": cpu_to_be16(0x0018),
    "CM_LAP_ATTR_ID": cpu_to_be16(0x0019),
    "CM_APR_ATTR_ID": cpu_to_be16(0x001A),
    "IB_SERVICE_ID_AGN_MASK": cpu_to_be64(0xFF00000000000000),
    "IB_CM_ASSIGN_SERVICE_ID": cpu_to_be64(0x0200000000000000),
    "IB_CMA_SERVICE_ID": cpu_to_be64(0x0000000001000000),
    "IB_CMA_SERVICE_ID_MASK": cpu_to_be64(0xFFFFFFFFFF000000),
    "IB_SDP_SERVICE_ID": cpu_to_be64(0x0000000000010000),
    "IB_SDP_SERVICE_ID_MASK": cpu_to_be64(0xFFFFFFFFFFFF0000),
    "ROCE_V2_UDP_DPORT": 4791,
    "ETH_ALEN": 6,
    "IB_LID_PERMISSIVE": cpu_to_be16(0xFFFF),
    "IB_MULTICAST_LID_BASE": cpu_to_be16(0xC000),
    "IB_MULTICAST_QPN": 0xFFFFFF,
    "IB_QPN_MASK": 0xFFFFFF,
    "MAX_ERRNO": MAX_ERRNO,
    "IBCM_REJ_REASON_SLOTS": 37,
}
globals().update(MACROS)

# ---------------------------------------------------------------------------
# Structures.  Types whose Python name starts with "_" are unnamed in C
# (the struct inside union ib_gid, anonymous unions); STRUCTS lists the
# named ones for the ABI test.
# ---------------------------------------------------------------------------

STRUCTS: List[Type[typing.Union[Structure, Union]]] = []

_T = TypeVar("_T", bound=Type[typing.Union[Structure, Union]])


def _named(cls: _T) -> _T:
    STRUCTS.append(cls)
    return cls


class ib_device(Structure):
    """Opaque: only pointers to it exist."""


class net_device(Structure):
    """Opaque: only pointers to it exist."""


class _ib_gid_global(Structure):
    _fields_ = [("subnet_prefix", be64), ("interface_id", be64)]


@_named
class ib_gid(Union):
    # "global" is a Python keyword: use getattr(gid, "global").
    _fields_ = [("raw", u8 * 16), ("global", _ib_gid_global)]


@_named
class ib_gid_attr(Structure):
    _fields_ = [
        ("ndev", POINTER(net_device)),
        ("device", POINTER(ib_device)),
        ("gid", ib_gid),
        ("gid_type", c_enum),
        ("index", u16),
        ("port_num", u32),
    ]


@_named
class rdma_ucm_ece(Structure):
    _fields_ = [("vendor_id", c_uint32), ("attr_mod", c_uint32)]


@_named
class sa_path_rec_ib(Structure):
    _fields_ = [("dlid", be16), ("slid", be16), ("raw_traffic", u8)]


@_named
class sa_path_rec_roce(Structure):
    _fields_ = [("route_resolved", c_bool), ("dmac", u8 * 6)]


@_named
class sa_path_rec_opa(Structure):
    _fields_ = [
        ("dlid", be32),
        ("slid", be32),
        ("raw_traffic", u8),
        ("l2_8B", u8),
        ("l2_10B", u8),
        ("l2_9B", u8),
        ("l2_16B", u8),
        ("qos_type", u8),
        ("qos_priority", u8),
    ]


class _sa_path_rec_addr(Union):
    _fields_ = [("ib", sa_path_rec_ib), ("roce", sa_path_rec_roce), ("opa", sa_path_rec_opa)]


@_named
class sa_path_rec(Structure):
    _anonymous_ = ("_addr",)
    _fields_ = [
        ("dgid", ib_gid),
        ("sgid", ib_gid),
        ("service_id", be64),
        ("flow_label", be32),
        ("hop_limit", u8),
        ("traffic_class", u8),
        ("reversible", u8),
        ("numb_path", u8),
        ("pkey", be16),
        ("qos_class", be16),
        ("sl", u8),
        ("mtu_selector", u8),
        ("mtu", u8),
        ("rate_selector", u8),
        ("rate", u8),
        ("packet_life_time_selector", u8),
        ("packet_life_time", u8),
        ("preference", u8),
        ("_addr", _sa_path_rec_addr),
        ("rec_type", c_enum),
        ("flags", u32),
    ]


@_named
class ib_global_route(Structure):
    _fields_ = [
        ("sgid_attr", POINTER(ib_gid_attr)),
        ("dgid", ib_gid),
        ("flow_label", u32),
        ("sgid_index", u8),
        ("hop_limit", u8),
        ("traffic_class", u8),
    ]


@_named
class ib_ah_attr(Structure):
    _fields_ = [("dlid", u16), ("src_path_bits", u8)]


@_named
class roce_ah_attr(Structure):
    _fields_ = [("dmac", u8 * 6)]


@_named
class opa_ah_attr(Structure):
    _fields_ = [("dlid", u32), ("src_path_bits", u8), ("make_grd", c_bool)]


class _rdma_ah_attr_addr(Union):
    _fields_ = [("ib", ib_ah_attr), ("roce", roce_ah_attr), ("opa", opa_ah_attr)]


@_named
class rdma_ah_attr(Structure):
    _anonymous_ = ("_addr",)
    _fields_ = [
        ("grh", ib_global_route),
        ("sl", u8),
        ("static_rate", u8),
        ("port_num", u32),
        ("ah_flags", u8),
        ("type", c_enum),
        ("_addr", _rdma_ah_attr_addr),
    ]


@_named
class ib_qp_cap(Structure):
    _fields_ = [
        ("max_send_wr", u32),
        ("max_recv_wr", u32),
        ("max_send_sge", u32),
        ("max_recv_sge", u32),
        ("max_inline_data", u32),
        ("max_rdma_ctxs", u32),
    ]


@_named
class ib_qp_attr(Structure):
    _fields_ = [
        ("qp_state", c_enum),
        ("cur_qp_state", c_enum),
        ("path_mtu", c_enum),
        ("path_mig_state", c_enum),
        ("qkey", u32),
        ("rq_psn", u32),
        ("sq_psn", u32),
        ("dest_qp_num", u32),
        ("qp_access_flags", c_int),
        ("cap", ib_qp_cap),
        ("ah_attr", rdma_ah_attr),
        ("alt_ah_attr", rdma_ah_attr),
        ("pkey_index", u16),
        ("alt_pkey_index", u16),
        ("en_sqd_async_notify", u8),
        ("sq_draining", u8),
        ("max_rd_atomic", u8),
        ("max_dest_rd_atomic", u8),
        ("min_rnr_timer", u8),
        ("port_num", u32),
        ("timeout", u8),
        ("retry_cnt", u8),
        ("rnr_retry", u8),
        ("alt_port_num", u32),
        ("alt_timeout", u8),
        ("rate_limit", u32),
        ("xmit_slave", POINTER(net_device)),
    ]


# --- <rdma/ib_cm.h> ---------------------------------------------------------


@_named
class ib_cm_id(Structure):
    """Fields are set below (the handler type refers back to this type)."""


# Bitfields.  gcc packs an `unsigned int x:5` that follows two u8 members
# into the same 32-bit unit as those u8s (bits 16..31 of it); ctypes (before
# 3.14) would instead start a fresh, 4-aligned unit.  Declaring the bitfields
# as 16-bit units gives ctypes no choice and yields exactly gcc's positions
# on little-endian targets (checked bit by bit in tests/test_abi.py):
#   REQ: bits 16..29 of the unit at offset 64 = the u16 at 66; the 3-bit
#        rnr_retry_count does not fit below bit 32, so gcc starts the next
#        unit at 68 -- as does a new u16 unit here.
#   REP: bits 16..27 of the unit at 20 = the u16 at 22.
@_named
class ib_cm_req_event_param(Structure):
    _fields_ = [
        ("listen_id", POINTER(ib_cm_id)),
        ("bth_pkey", u16),
        ("port", u8),
        ("primary_path", POINTER(sa_path_rec)),
        ("alternate_path", POINTER(sa_path_rec)),
        ("ppath_sgid_attr", POINTER(ib_gid_attr)),
        ("remote_ca_guid", be64),
        ("remote_qkey", u32),
        ("remote_qpn", u32),
        ("qp_type", c_enum),
        ("starting_psn", u32),
        ("responder_resources", u8),
        ("initiator_depth", u8),
        ("local_cm_response_timeout", c_uint16, 5),
        ("flow_control", c_uint16, 1),
        ("remote_cm_response_timeout", c_uint16, 5),
        ("retry_count", c_uint16, 3),
        ("rnr_retry_count", c_uint16, 3),
        ("srq", c_uint16, 1),
        ("ece", rdma_ucm_ece),
    ]


@_named
class ib_cm_rep_event_param(Structure):
    _fields_ = [
        ("remote_ca_guid", be64),
        ("remote_qkey", u32),
        ("remote_qpn", u32),
        ("starting_psn", u32),
        ("responder_resources", u8),
        ("initiator_depth", u8),
        ("target_ack_delay", c_uint16, 5),
        ("failover_accepted", c_uint16, 2),
        ("flow_control", c_uint16, 1),
        ("rnr_retry_count", c_uint16, 3),
        ("srq", c_uint16, 1),
        ("ece", rdma_ucm_ece),
    ]


@_named
class ib_cm_rej_event_param(Structure):
    _fields_ = [("reason", c_enum), ("ari", c_void_p), ("ari_length", u8)]


@_named
class ib_cm_mra_event_param(Structure):
    _fields_ = [("service_timeout", u8)]


@_named
class ib_cm_lap_event_param(Structure):
    _fields_ = [("alternate_path", POINTER(sa_path_rec))]


@_named
class ib_cm_apr_event_param(Structure):
    _fields_ = [("ap_status", c_enum), ("apr_info", c_void_p), ("info_len", u8)]


@_named
class ib_cm_sidr_req_event_param(Structure):
    _fields_ = [
        ("listen_id", POINTER(ib_cm_id)),
        ("service_id", be64),
        ("sgid_attr", POINTER(ib_gid_attr)),
        ("bth_pkey", u16),
        ("port", u8),
        ("pkey", u16),
    ]


@_named
class ib_cm_sidr_rep_event_param(Structure):
    _fields_ = [
        ("status", c_enum),
        ("qkey", u32),
        ("qpn", u32),
        ("info", c_void_p),
        ("sgid_attr", POINTER(ib_gid_attr)),
        ("info_len", u8),
    ]


class _ib_cm_event_param(Union):
    _fields_ = [
        ("req_rcvd", ib_cm_req_event_param),
        ("rep_rcvd", ib_cm_rep_event_param),
        ("rej_rcvd", ib_cm_rej_event_param),
        ("mra_rcvd", ib_cm_mra_event_param),
        ("lap_rcvd", ib_cm_lap_event_param),
        ("apr_rcvd", ib_cm_apr_event_param),
        ("sidr_req_rcvd", ib_cm_sidr_req_event_param),
        ("sidr_rep_rcvd", ib_cm_sidr_rep_event_param),
        ("send_status", c_enum),
    ]


@_named
class ib_cm_event(Structure):
    _fields_ = [("event", c_enum), ("param", _ib_cm_event_param), ("private_data", c_void_p)]


#: typedef int (*ib_cm_handler)(struct ib_cm_id *, const struct ib_cm_event *);
ib_cm_handler = CFUNCTYPE(c_int, POINTER(ib_cm_id), POINTER(ib_cm_event))

ib_cm_id._fields_ = [
    ("cm_handler", ib_cm_handler),
    ("context", c_void_p),
    ("device", POINTER(ib_device)),
    ("service_id", be64),
    ("state", c_enum),
    ("lap_state", c_enum),
    ("local_id", be32),
    ("remote_id", be32),
    ("remote_cm_qpn", u32),
]


@_named
class ib_cm_req_param(Structure):
    _fields_ = [
        ("primary_path", POINTER(sa_path_rec)),
        ("primary_path_inbound", POINTER(sa_path_rec)),
        ("primary_path_outbound", POINTER(sa_path_rec)),
        ("alternate_path", POINTER(sa_path_rec)),
        ("ppath_sgid_attr", POINTER(ib_gid_attr)),
        ("service_id", be64),
        ("qp_num", u32),
        ("qp_type", c_enum),
        ("starting_psn", u32),
        ("private_data", c_void_p),
        ("private_data_len", u8),
        ("responder_resources", u8),
        ("initiator_depth", u8),
        ("remote_cm_response_timeout", u8),
        ("flow_control", u8),
        ("local_cm_response_timeout", u8),
        ("retry_count", u8),
        ("rnr_retry_count", u8),
        ("max_cm_retries", u8),
        ("srq", u8),
        ("ece", rdma_ucm_ece),
    ]


@_named
class ib_cm_rep_param(Structure):
    _fields_ = [
        ("qp_num", u32),
        ("starting_psn", u32),
        ("private_data", c_void_p),
        ("private_data_len", u8),
        ("responder_resources", u8),
        ("initiator_depth", u8),
        ("failover_accepted", u8),
        ("flow_control", u8),
        ("rnr_retry_count", u8),
        ("srq", u8),
        ("ece", rdma_ucm_ece),
    ]


@_named
class ib_cm_sidr_req_param(Structure):
    _fields_ = [
        ("path", POINTER(sa_path_rec)),
        ("sgid_attr", POINTER(ib_gid_attr)),
        ("service_id", be64),
        ("timeout_ms", c_ulong),
        ("private_data", c_void_p),
        ("private_data_len", u8),
        ("max_cm_retries", u8),
    ]


@_named
class ib_cm_sidr_rep_param(Structure):
    _fields_ = [
        ("qp_num", u32),
        ("qkey", u32),
        ("status", c_enum),
        ("info", c_void_p),
        ("info_length", u8),
        ("private_data", c_void_p),
        ("private_data_len", u8),
        ("ece", rdma_ucm_ece),
    ]


# --- <ibcm.h> ----------------------------------------------------------------


_N_ATTR = ENUMS["ibcm_attr_index"]["IBCM_ATTR_COUNT"]
_N_REJ = MACROS["IBCM_REJ_REASON_SLOTS"]
_N_DROP = ENUMS["ibcm_drop_cause"]["IBCM_DROP_COUNT"]


@_named
class ibcm_counters(Structure):
    _fields_ = [
        ("tx", u64 * _N_ATTR),
        ("rx", u64 * _N_ATTR),
        ("rx_duplicates", u64 * _N_ATTR),
        ("tx_retries", u64 * _N_ATTR),
        ("timeouts", u64 * _N_ATTR),
        ("rej_tx", u64 * _N_REJ),
        ("rej_rx", u64 * _N_REJ),
        ("drops", u64 * _N_DROP),
        ("ids_created", u64),
        ("ids_destroyed", u64),
        ("events", u64),
        ("live_ids", u64),
        ("pending_timers", u64),
        ("rx_datagrams", u64),
        ("tx_datagrams", u64),
        ("rx_garbage", u64),
        ("rx_icrc_unverified", u64),
        ("tx_errors", u64),
        ("rx_errors", u64),
        ("tx_unroutable", u64),
        ("rx_clamped", u64),
        ("half_open_evicted", u64),
        ("rx_off_path", u64),
    ]


#: Struct/union C tag -> ctypes class, for the named C types.
C_TYPES: Dict[str, Type[typing.Union[Structure, Union]]] = {cls.__name__: cls for cls in STRUCTS}

# ---------------------------------------------------------------------------
# Functions.  Each is declared by its C prototype, copied from the headers;
# argtypes/restype are derived from it, and tests/test_abi.py has gcc check
# every prototype against the real declaration (__builtin_types_compatible_p).
# ---------------------------------------------------------------------------

PROTOTYPES = [
    # <rdma/ib_cm.h>
    "struct ib_cm_id *ib_create_cm_id(struct ib_device *device, ib_cm_handler cm_handler, void *context)",
    "void ib_destroy_cm_id(struct ib_cm_id *cm_id)",
    "int ib_cm_listen(struct ib_cm_id *cm_id, __be64 service_id)",
    "struct ib_cm_id *ib_cm_insert_listen(struct ib_device *device, ib_cm_handler cm_handler, __be64 service_id)",
    "int ib_send_cm_req(struct ib_cm_id *cm_id, struct ib_cm_req_param *param)",
    "int ib_send_cm_rep(struct ib_cm_id *cm_id, struct ib_cm_rep_param *param)",
    "int ib_send_cm_rtu(struct ib_cm_id *cm_id, const void *private_data, u8 private_data_len)",
    "int ib_send_cm_dreq(struct ib_cm_id *cm_id, const void *private_data, u8 private_data_len)",
    "int ib_send_cm_drep(struct ib_cm_id *cm_id, const void *private_data, u8 private_data_len)",
    "int ib_cm_notify(struct ib_cm_id *cm_id, enum ib_event_type event)",
    "int ib_send_cm_rej(struct ib_cm_id *cm_id, enum ib_cm_rej_reason reason, void *ari, u8 ari_length, const void *private_data, u8 private_data_len)",
    "int ib_prepare_cm_mra(struct ib_cm_id *cm_id)",
    "int ib_cm_init_qp_attr(struct ib_cm_id *cm_id, struct ib_qp_attr *qp_attr, int *qp_attr_mask)",
    "int ib_send_cm_sidr_req(struct ib_cm_id *cm_id, struct ib_cm_sidr_req_param *param)",
    "int ib_send_cm_sidr_rep(struct ib_cm_id *cm_id, struct ib_cm_sidr_rep_param *param)",
    "const char *ibcm_reject_msg(int reason)",
    # <ibcm.h>
    "struct ib_device *ibcm_open_device(const char *name)",
    "void ibcm_close_device(struct ib_device *device)",
    "int ibcm_query_gid(struct ib_device *device, u32 port_num, int index, union ib_gid *gid)",
    "int ibcm_init_path(struct ib_device *device, u32 port_num, const union ib_gid *dgid, struct sa_path_rec *rec)",
    "int ibcm_gid_from_string(const char *ip, union ib_gid *gid)",
    "int ibcm_get_counters(struct ib_device *device, struct ibcm_counters *counters, size_t size)",
    "int ibcm_pcap_start(const char *path, uint64_t max_bytes)",
    "int ibcm_pcap_stop(void)",
]

#: Scalar C type names -> ctypes.
SCALARS: Dict[str, Optional[CType]] = {
    "void": None,
    "int": c_int,
    "unsigned long": c_ulong,
    "size_t": ctypes.c_size_t,
    "u8": u8,
    "u16": u16,
    "u32": u32,
    "u64": u64,
    "uint64_t": ctypes.c_uint64,
    "__be16": __be16,
    "__be32": __be32,
    "__be64": __be64,
    "ib_cm_handler": ib_cm_handler,
}

_DECL = re.compile(r"^(?P<type>.*?[\s*])(?P<name>[A-Za-z_]\w*)$")


def ctype_of(ctype: str) -> Optional[CType]:
    """The ctypes type for a C type name as written in PROTOTYPES (None
    for ``void``)."""
    t = " ".join(ctype.replace("*", " * ").split())
    stars = t.count("*")
    base = " ".join(t.replace("*", " ").replace("const ", " ").split())
    if stars == 0:
        if base.startswith("enum "):
            if base[5:] not in ENUMS:
                raise ValueError(f"unknown enum in {ctype!r}")
            return c_enum
        if base not in SCALARS:
            raise ValueError(f"unknown C type {ctype!r}")
        return SCALARS[base]
    if stars != 1:
        raise ValueError(f"unsupported C type {ctype!r}")
    if base == "void":
        return c_void_p
    if base == "char":
        return c_char_p
    if base.startswith(("struct ", "union ")):
        tag = base.split(" ", 1)[1]
        cls = C_TYPES.get(tag) or {"ib_device": ib_device, "net_device": net_device}.get(tag)
        if cls is None:
            raise ValueError(f"unknown type in {ctype!r}")
        return POINTER(cls)
    scalar = SCALARS.get(base)
    if scalar is None:
        raise ValueError(f"unknown C type {ctype!r}")
    return POINTER(scalar)


def _decl(text: str) -> Tuple[str, str]:
    """(type, name) of a C declaration like ``struct ib_cm_id *cm_id``."""
    m = _DECL.match(text.strip())
    if m is None:
        raise ValueError(f"cannot parse C declaration {text!r}")
    return m.group("type").strip(), m.group("name")


def parse_prototype(proto: str) -> Tuple[str, Optional[CType], List[Tuple[str, str, Optional[CType]]]]:
    """(name, restype, [(param name, C type, ctypes type)]) of a prototype."""
    head, params = proto.rstrip(")").split("(", 1)
    ret, name = _decl(head)
    args = []
    if params.strip() == "void":
        params = ""
    for p in filter(None, (p.strip() for p in params.split(","))):
        ptype, pname = _decl(p)
        args.append((pname, ptype, ctype_of(ptype)))
    return name, ctype_of(ret), args


#: Function name -> (prototype, restype, argtypes).
FUNCTIONS: Dict[str, Tuple[str, Optional[CType], List[Optional[CType]]]] = {}
for _proto in PROTOTYPES:
    _name, _res, _args = parse_prototype(_proto)
    FUNCTIONS[_name] = (_proto, _res, [a[2] for a in _args])
del _proto, _name, _res, _args

_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None
#: Functions of the headers that the loaded library does not export.
MISSING: Set[str] = set()
_lib_lock = threading.Lock()


def load_library() -> ctypes.CDLL:
    """Loads libibcm (once), sets argtypes/restype of every function and
    exports them as globals of this module; returns the ctypes.CDLL."""
    global _lib, _lib_path
    with _lib_lock:
        if _lib is None:
            lib, path = _loader.load()
            for name, (_p, res, args) in FUNCTIONS.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    MISSING.add(name)  # an older library; see __getattr__
                    continue
                fn.argtypes = args
                fn.restype = res
                globals()[name] = fn
            _lib, _lib_path = lib, path
        return _lib


def library_path() -> str:
    """The path/name libibcm was loaded from (loads it if needed)."""
    load_library()
    assert _lib_path is not None
    return _lib_path


def __getattr__(name: str) -> Any:
    # Type checkers see every enumerator, macro and function of the C API
    # (defined at run time through globals()) as Any, through this hook.
    # PEP 562: the functions appear on first use.
    if name in FUNCTIONS:
        load_library()
        if name in MISSING:
            raise AttributeError(f"{_lib_path} does not export {name} (a library older than the headers?)")
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(FUNCTIONS))
