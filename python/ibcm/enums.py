"""Python enums for the C enumerations.

Member names are the C names without their prefix:
``CmState.ESTABLISHED`` is ``IB_CM_ESTABLISHED``, ``EventType.REP_RECEIVED``
is ``IB_CM_REP_RECEIVED``, ``RejReason.CONSUMER_DEFINED`` is
``IB_CM_REJ_CONSUMER_DEFINED``, ``Mtu.MTU_1024`` is ``IB_MTU_1024``.

The classes are written out (so type checkers know every member);
``python/tests/test_enums.py`` checks each against :data:`ibcm.raw.ENUMS`,
which ``test_abi.py`` checks against the C headers.
"""

from __future__ import annotations

import enum
from typing import Dict, Type, TypeVar, Union

from . import raw

_E = TypeVar("_E", bound=enum.Enum)

#: Each enum's C names (``"IB_CM_REP_RECEIVED"``) -> member, for lookup().
_C_NAMES: Dict[type, Dict[str, enum.Enum]] = {}


def _c_names(cls: Type[_E], tag: str) -> Dict[str, enum.Enum]:
    return {cname: cls(value) for cname, value in raw.ENUMS[tag].items()}


class CmState(enum.IntEnum):
    """enum ib_cm_state (C names IB_CM_*)."""

    IDLE = 0
    LISTEN = 1
    REQ_SENT = 2
    REQ_RCVD = 3
    MRA_REQ_SENT = 4
    MRA_REQ_RCVD = 5
    REP_SENT = 6
    REP_RCVD = 7
    MRA_REP_SENT = 8
    MRA_REP_RCVD = 9
    ESTABLISHED = 10
    DREQ_SENT = 11
    DREQ_RCVD = 12
    TIMEWAIT = 13
    SIDR_REQ_SENT = 14
    SIDR_REQ_RCVD = 15


_C_NAMES[CmState] = _c_names(CmState, 'ib_cm_state')


class LapState(enum.IntEnum):
    """enum ib_cm_lap_state (C names IB_CM_*)."""

    LAP_UNINIT = 0
    LAP_IDLE = 1
    LAP_SENT = 2
    LAP_RCVD = 3
    MRA_LAP_SENT = 4
    MRA_LAP_RCVD = 5


_C_NAMES[LapState] = _c_names(LapState, 'ib_cm_lap_state')


class EventType(enum.IntEnum):
    """enum ib_cm_event_type (C names IB_CM_*)."""

    REQ_ERROR = 0
    REQ_RECEIVED = 1
    REP_ERROR = 2
    REP_RECEIVED = 3
    RTU_RECEIVED = 4
    USER_ESTABLISHED = 5
    DREQ_ERROR = 6
    DREQ_RECEIVED = 7
    DREP_RECEIVED = 8
    TIMEWAIT_EXIT = 9
    MRA_RECEIVED = 10
    REJ_RECEIVED = 11
    LAP_ERROR = 12
    LAP_RECEIVED = 13
    APR_RECEIVED = 14
    SIDR_REQ_ERROR = 15
    SIDR_REQ_RECEIVED = 16
    SIDR_REP_RECEIVED = 17


_C_NAMES[EventType] = _c_names(EventType, 'ib_cm_event_type')


class RejReason(enum.IntEnum):
    """enum ib_cm_rej_reason (C names IB_CM_REJ_*)."""

    NO_QP = 1
    NO_EEC = 2
    NO_RESOURCES = 3
    TIMEOUT = 4
    UNSUPPORTED = 5
    INVALID_COMM_ID = 6
    INVALID_COMM_INSTANCE = 7
    INVALID_SERVICE_ID = 8
    INVALID_TRANSPORT_TYPE = 9
    STALE_CONN = 10
    RDC_NOT_EXIST = 11
    INVALID_GID = 12
    INVALID_LID = 13
    INVALID_SL = 14
    INVALID_TRAFFIC_CLASS = 15
    INVALID_HOP_LIMIT = 16
    INVALID_PACKET_RATE = 17
    INVALID_ALT_GID = 18
    INVALID_ALT_LID = 19
    INVALID_ALT_SL = 20
    INVALID_ALT_TRAFFIC_CLASS = 21
    INVALID_ALT_HOP_LIMIT = 22
    INVALID_ALT_PACKET_RATE = 23
    PORT_CM_REDIRECT = 24
    PORT_REDIRECT = 25
    INVALID_MTU = 26
    INSUFFICIENT_RESP_RESOURCES = 27
    CONSUMER_DEFINED = 28
    INVALID_RNR_RETRY = 29
    DUPLICATE_LOCAL_COMM_ID = 30
    INVALID_CLASS_VERSION = 31
    INVALID_FLOW_LABEL = 32
    INVALID_ALT_FLOW_LABEL = 33
    VENDOR_OPTION_NOT_SUPPORTED = 35


_C_NAMES[RejReason] = _c_names(RejReason, 'ib_cm_rej_reason')


class AprStatus(enum.IntEnum):
    """enum ib_cm_apr_status (C names IB_CM_APR_*)."""

    SUCCESS = 0
    INVALID_COMM_ID = 1
    UNSUPPORTED = 2
    REJECT = 3
    REDIRECT = 4
    IS_CURRENT = 5
    INVALID_QPN_EECN = 6
    INVALID_LID = 7
    INVALID_GID = 8
    INVALID_FLOW_LABEL = 9
    INVALID_TCLASS = 10
    INVALID_HOP_LIMIT = 11
    INVALID_PACKET_RATE = 12
    INVALID_SL = 13


_C_NAMES[AprStatus] = _c_names(AprStatus, 'ib_cm_apr_status')


class SidrStatus(enum.IntEnum):
    """enum ib_cm_sidr_status (C names IB_SIDR_*)."""

    SUCCESS = 0
    UNSUPPORTED = 1
    REJECT = 2
    NO_QP = 3
    REDIRECT = 4
    UNSUPPORTED_VERSION = 5


_C_NAMES[SidrStatus] = _c_names(SidrStatus, 'ib_cm_sidr_status')


class PathRecType(enum.IntEnum):
    """enum sa_path_rec_type (C names SA_PATH_REC_TYPE_*)."""

    IB = 0
    ROCE_V1 = 1
    ROCE_V2 = 2
    OPA = 3


_C_NAMES[PathRecType] = _c_names(PathRecType, 'sa_path_rec_type')


class GidType(enum.IntEnum):
    """enum ib_gid_type (C names IB_GID_TYPE_*)."""

    IB = 0
    ROCE = 1
    ROCE_UDP_ENCAP = 2
    SIZE = 3


_C_NAMES[GidType] = _c_names(GidType, 'ib_gid_type')


class IbEvent(enum.IntEnum):
    """enum ib_event_type (C names IB_EVENT_*)."""

    CQ_ERR = 0
    QP_FATAL = 1
    QP_REQ_ERR = 2
    QP_ACCESS_ERR = 3
    COMM_EST = 4
    SQ_DRAINED = 5
    PATH_MIG = 6
    PATH_MIG_ERR = 7
    DEVICE_FATAL = 8
    PORT_ACTIVE = 9
    PORT_ERR = 10
    LID_CHANGE = 11
    PKEY_CHANGE = 12
    SM_CHANGE = 13
    SRQ_ERR = 14
    SRQ_LIMIT_REACHED = 15
    QP_LAST_WQE_REACHED = 16
    CLIENT_REREGISTER = 17
    GID_CHANGE = 18
    WQ_FATAL = 19
    DEVICE_SPEED_CHANGE = 20


_C_NAMES[IbEvent] = _c_names(IbEvent, 'ib_event_type')


class QpType(enum.IntEnum):
    """enum ib_qp_type (C names IB_QPT_*)."""

    SMI = 0
    GSI = 1
    RC = 2
    UC = 3
    UD = 4
    RAW_IPV6 = 5
    RAW_ETHERTYPE = 6
    RAW_PACKET = 8
    XRC_INI = 9
    XRC_TGT = 10
    MAX = 11
    DRIVER = 255
    RESERVED1 = 4096
    RESERVED2 = 4097
    RESERVED3 = 4098
    RESERVED4 = 4099
    RESERVED5 = 4100
    RESERVED6 = 4101
    RESERVED7 = 4102
    RESERVED8 = 4103
    RESERVED9 = 4104
    RESERVED10 = 4105


_C_NAMES[QpType] = _c_names(QpType, 'ib_qp_type')


class WcStatus(enum.IntEnum):
    """enum ib_wc_status (C names IB_WC_*)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


_C_NAMES[WcStatus] = _c_names(WcStatus, 'ib_wc_status')


class Mtu(enum.IntEnum):
    """enum ib_mtu (C names IB_*)."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5


_C_NAMES[Mtu] = _c_names(Mtu, 'ib_mtu')


class Rate(enum.IntEnum):
    """enum ib_rate (C names IB_*)."""

    RATE_PORT_CURRENT = 0
    RATE_2_5_GBPS = 2
    RATE_5_GBPS = 5
    RATE_10_GBPS = 3
    RATE_20_GBPS = 6
    RATE_30_GBPS = 4
    RATE_40_GBPS = 7
    RATE_60_GBPS = 8
    RATE_80_GBPS = 9
    RATE_120_GBPS = 10
    RATE_14_GBPS = 11
    RATE_56_GBPS = 12
    RATE_112_GBPS = 13
    RATE_168_GBPS = 14
    RATE_25_GBPS = 15
    RATE_100_GBPS = 16
    RATE_200_GBPS = 17
    RATE_300_GBPS = 18
    RATE_28_GBPS = 19
    RATE_50_GBPS = 20
    RATE_400_GBPS = 21
    RATE_600_GBPS = 22
    RATE_800_GBPS = 23
    RATE_1600_GBPS = 25


_C_NAMES[Rate] = _c_names(Rate, 'ib_rate')


class QpState(enum.IntEnum):
    """enum ib_qp_state (C names IB_QPS_*)."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


_C_NAMES[QpState] = _c_names(QpState, 'ib_qp_state')


class MigState(enum.IntEnum):
    """enum ib_mig_state (C names IB_MIG_*)."""

    MIGRATED = 0
    REARM = 1
    ARMED = 2


_C_NAMES[MigState] = _c_names(MigState, 'ib_mig_state')


class QpAttrMask(enum.IntFlag):
    """enum ib_qp_attr_mask (C names IB_QP_*)."""

    STATE = 0x1
    CUR_STATE = 0x2
    EN_SQD_ASYNC_NOTIFY = 0x4
    ACCESS_FLAGS = 0x8
    PKEY_INDEX = 0x10
    PORT = 0x20
    QKEY = 0x40
    AV = 0x80
    PATH_MTU = 0x100
    TIMEOUT = 0x200
    RETRY_CNT = 0x400
    RNR_RETRY = 0x800
    RQ_PSN = 0x1000
    MAX_QP_RD_ATOMIC = 0x2000
    ALT_PATH = 0x4000
    MIN_RNR_TIMER = 0x8000
    SQ_PSN = 0x10000
    MAX_DEST_RD_ATOMIC = 0x20000
    PATH_MIG_STATE = 0x40000
    CAP = 0x80000
    DEST_QPN = 0x100000
    RESERVED1 = 0x200000
    RESERVED2 = 0x400000
    RESERVED3 = 0x800000
    RESERVED4 = 0x1000000
    RATE_LIMIT = 0x2000000
    ATTR_STANDARD_BITS = 0x1FFFFF


_C_NAMES[QpAttrMask] = _c_names(QpAttrMask, 'ib_qp_attr_mask')


class AccessFlags(enum.IntFlag):
    """enum ib_access_flags (C names IB_ACCESS_*)."""

    LOCAL_WRITE = 0x1
    REMOTE_WRITE = 0x2
    REMOTE_READ = 0x4
    REMOTE_ATOMIC = 0x8
    MW_BIND = 0x10
    ZERO_BASED = 0x20
    ON_DEMAND = 0x40
    HUGETLB = 0x80
    RELAXED_ORDERING = 0x100000
    FLUSH_GLOBAL = 0x100
    FLUSH_PERSISTENT = 0x200
    OPTIONAL = 0x3FF00000
    SUPPORTED = 0x3FF003FF


_C_NAMES[AccessFlags] = _c_names(AccessFlags, 'ib_access_flags')


class AhAttrType(enum.IntEnum):
    """enum rdma_ah_attr_type (C names RDMA_AH_ATTR_TYPE_*)."""

    UNDEFINED = 0
    IB = 1
    ROCE = 2
    OPA = 3


_C_NAMES[AhAttrType] = _c_names(AhAttrType, 'rdma_ah_attr_type')


#: Private data size of each event's message (the C event's private_data
#: always points to this many bytes); events without a message carry none.
PRIVATE_DATA_SIZE: Dict[EventType, int] = {
    EventType.REQ_RECEIVED: raw.IB_CM_REQ_PRIVATE_DATA_SIZE,
    EventType.REP_RECEIVED: raw.IB_CM_REP_PRIVATE_DATA_SIZE,
    EventType.RTU_RECEIVED: raw.IB_CM_RTU_PRIVATE_DATA_SIZE,
    EventType.DREQ_RECEIVED: raw.IB_CM_DREQ_PRIVATE_DATA_SIZE,
    EventType.DREP_RECEIVED: raw.IB_CM_DREP_PRIVATE_DATA_SIZE,
    EventType.REJ_RECEIVED: raw.IB_CM_REJ_PRIVATE_DATA_SIZE,
    EventType.MRA_RECEIVED: raw.IB_CM_MRA_PRIVATE_DATA_SIZE,
    EventType.LAP_RECEIVED: raw.IB_CM_LAP_PRIVATE_DATA_SIZE,
    EventType.APR_RECEIVED: raw.IB_CM_APR_PRIVATE_DATA_SIZE,
    EventType.SIDR_REQ_RECEIVED: raw.IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE,
    EventType.SIDR_REP_RECEIVED: raw.IB_CM_SIDR_REP_PRIVATE_DATA_SIZE,
}

#: Events reporting a failed send (param.send_status is set).
ERROR_EVENTS = frozenset(
    {
        EventType.REQ_ERROR,
        EventType.REP_ERROR,
        EventType.DREQ_ERROR,
        EventType.LAP_ERROR,
        EventType.SIDR_REQ_ERROR,
    }
)


def coerce(cls: Type[_E], value: int) -> Union[_E, int]:
    """``cls(value)`` for known values, the plain int otherwise."""
    try:
        return cls(value)
    except ValueError:
        return int(value)


def lookup(cls: Type[_E], value: Union[_E, int, str]) -> _E:
    """An enum member from a member, an int, or a (case-insensitive) name
    with or without the C prefix (``"rep_received"``, ``"IB_CM_REP_RECEIVED"``)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.upper()
        if key in cls.__members__:
            return cls.__members__[key]
        by_c_name = _C_NAMES.get(cls, {})
        if key in by_c_name:
            member = by_c_name[key]
            assert isinstance(member, cls)
            return member
        raise ValueError(f"unknown {cls.__name__} {value!r}")
    return cls(value)
