"""Python enums for the C enumerations, built from :data:`ibcm.raw.ENUMS`
(so their values are the C ones by construction).

Member names are the C names without their prefix:
``CmState.ESTABLISHED`` is ``IB_CM_ESTABLISHED``, ``EventType.REP_RECEIVED``
is ``IB_CM_REP_RECEIVED``, ``RejReason.CONSUMER_DEFINED`` is
``IB_CM_REJ_CONSUMER_DEFINED``, ``Mtu.MTU_1024`` is ``IB_MTU_1024``.
"""

import enum

from . import raw


def _make(name, tag, prefix, kind=enum.IntEnum, fallback="IB_"):
    members = {}
    for cname, value in raw.ENUMS[tag].items():
        if cname.startswith(prefix):
            short = cname[len(prefix):]
        else:
            short = cname[len(fallback):] if cname.startswith(fallback) else cname
        members[short] = value
    cls = kind(name, members, module=__name__)
    cls.__doc__ = f"enum {tag} (C names {prefix}*)."
    cls._c_names = {cname: cls(value) for cname, value in raw.ENUMS[tag].items()}
    return cls


CmState = _make("CmState", "ib_cm_state", "IB_CM_")
LapState = _make("LapState", "ib_cm_lap_state", "IB_CM_")
EventType = _make("EventType", "ib_cm_event_type", "IB_CM_")
RejReason = _make("RejReason", "ib_cm_rej_reason", "IB_CM_REJ_")
AprStatus = _make("AprStatus", "ib_cm_apr_status", "IB_CM_APR_")
SidrStatus = _make("SidrStatus", "ib_cm_sidr_status", "IB_SIDR_")
PathRecType = _make("PathRecType", "sa_path_rec_type", "SA_PATH_REC_TYPE_")
GidType = _make("GidType", "ib_gid_type", "IB_GID_TYPE_")
IbEvent = _make("IbEvent", "ib_event_type", "IB_EVENT_")
QpType = _make("QpType", "ib_qp_type", "IB_QPT_")
WcStatus = _make("WcStatus", "ib_wc_status", "IB_WC_")
Mtu = _make("Mtu", "ib_mtu", "IB_")
Rate = _make("Rate", "ib_rate", "IB_")
QpState = _make("QpState", "ib_qp_state", "IB_QPS_")
MigState = _make("MigState", "ib_mig_state", "IB_MIG_")
QpAttrMask = _make("QpAttrMask", "ib_qp_attr_mask", "IB_QP_", enum.IntFlag)
AccessFlags = _make("AccessFlags", "ib_access_flags", "IB_ACCESS_", enum.IntFlag)
AhAttrType = _make("AhAttrType", "rdma_ah_attr_type", "RDMA_AH_ATTR_TYPE_")

#: Private data size of each event's message (the C event's private_data
#: always points to this many bytes); events without a message carry none.
PRIVATE_DATA_SIZE = {
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


def coerce(cls, value):
    """``cls(value)`` for known values, the plain int otherwise."""
    try:
        return cls(value)
    except ValueError:
        return int(value)


def lookup(cls, value):
    """An enum member from a member, an int, or a (case-insensitive) name
    with or without the C prefix (``"rep_received"``, ``"IB_CM_REP_RECEIVED"``)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.upper()
        if key in cls.__members__:
            return cls.__members__[key]
        if key in getattr(cls, "_c_names", {}):
            return cls._c_names[key]
        raise ValueError(f"unknown {cls.__name__} {value!r}")
    return cls(value)
