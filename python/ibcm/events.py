"""CM events as dataclasses.

A C ``struct ib_cm_event`` is valid only during its callback, so each is
decoded at once into one of these classes, with every pointer followed and
every byte area copied: ``private_data`` is ``bytes`` of the message's full
fixed private data size (``b""`` for events without a message), ARI / info
areas are ``bytes`` of their reported length, paths are
:class:`~ibcm.types.PathRecord`.  ``cm_id`` is the :class:`ibcm.CmId` the
event is for -- for REQ/SIDR_REQ a new id, whose listener is ``listen_id``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Union

from . import raw
from .enums import (
    ERROR_EVENTS,
    PRIVATE_DATA_SIZE,
    AprStatus,
    EventType,
    QpType,
    RejReason,
    SidrStatus,
    WcStatus,
    coerce,
)
from .types import Ece, GidAttr, PathRecord

if TYPE_CHECKING:
    from .cm import CmId


def reject_msg(reason: int) -> str:
    """``ibcm_reject_msg``: the text for a REJ reason."""
    text: bytes = raw.ibcm_reject_msg(int(reason))
    return text.decode()


def _short(b: bytes) -> str:
    t = b.rstrip(b"\0")
    s = repr(t[:32]) + ("..." if len(t) > 32 else "")
    return f"{s}+{len(b) - len(t)}x00" if len(b) != len(t) else s


@dataclass(repr=False, eq=False)
class Event:
    """An event without parameters (RTU, DREQ, DREP, TIMEWAIT_EXIT,
    USER_ESTABLISHED) and the base of all others."""

    #: An EventType; a plain int only for a value this package does not know.
    type: Union[EventType, int]
    cm_id: CmId
    private_data: bytes

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "type":
                parts.append(v.name if isinstance(v, EventType) else str(v))
            elif f.name in ("cm_id", "listen_id"):
                parts.append(f"{f.name}={v!r}")
            elif isinstance(v, bytes):
                parts.append(f"{f.name}={_short(v)}")
            else:
                parts.append(f"{f.name}={v!r}")
        return f"<{type(self).__name__} {' '.join(parts)}>"


@dataclass(repr=False, eq=False)
class ReqEvent(Event):
    """IB_CM_REQ_RECEIVED (``cm_id`` is the new id, owned by you)."""

    listen_id: Optional[CmId]
    service_id: int
    bth_pkey: int
    port: int
    primary_path: PathRecord
    alternate_path: Optional[PathRecord]
    sgid_attr: Optional[GidAttr]
    remote_ca_guid: int
    remote_qkey: int
    remote_qpn: int
    qp_type: Union[QpType, int]
    starting_psn: int
    responder_resources: int
    initiator_depth: int
    local_cm_response_timeout: int
    flow_control: int
    remote_cm_response_timeout: int
    retry_count: int
    rnr_retry_count: int
    srq: int
    ece: Ece


@dataclass(repr=False, eq=False)
class RepEvent(Event):
    """IB_CM_REP_RECEIVED."""

    remote_ca_guid: int
    remote_qkey: int
    remote_qpn: int
    starting_psn: int
    responder_resources: int
    initiator_depth: int
    target_ack_delay: int
    failover_accepted: int
    flow_control: int
    rnr_retry_count: int
    srq: int
    ece: Ece


@dataclass(repr=False, eq=False)
class RejEvent(Event):
    """IB_CM_REJ_RECEIVED."""

    reason: Union[RejReason, int]
    reason_text: str
    ari: bytes


@dataclass(repr=False, eq=False)
class MraEvent(Event):
    """IB_CM_MRA_RECEIVED."""

    service_timeout: int


@dataclass(repr=False, eq=False)
class LapEvent(Event):
    """IB_CM_LAP_RECEIVED."""

    alternate_path: Optional[PathRecord]


@dataclass(repr=False, eq=False)
class AprEvent(Event):
    """IB_CM_APR_RECEIVED."""

    ap_status: Union[AprStatus, int]
    apr_info: bytes


@dataclass(repr=False, eq=False)
class SidrReqEvent(Event):
    """IB_CM_SIDR_REQ_RECEIVED (``cm_id`` is the new id, owned by you)."""

    listen_id: Optional[CmId]
    service_id: int
    sgid_attr: Optional[GidAttr]
    bth_pkey: int
    port: int
    pkey: int


@dataclass(repr=False, eq=False)
class SidrRepEvent(Event):
    """IB_CM_SIDR_REP_RECEIVED."""

    status: Union[SidrStatus, int]
    qkey: int
    qpn: int
    info: bytes
    sgid_attr: Optional[GidAttr]


@dataclass(repr=False, eq=False)
class ErrorEvent(Event):
    """IB_CM_REQ_ERROR, REP_ERROR, DREQ_ERROR, LAP_ERROR, SIDR_REQ_ERROR:
    a message was not answered; ``send_status`` says why."""

    send_status: Union[WcStatus, int]


def _bytes(ptr: Optional[int], n: int) -> bytes:
    return ctypes.string_at(ptr, n) if ptr and n else b""


def decode(ev: raw.ib_cm_event, cm_id: CmId, c_id: raw.ib_cm_id,
           find_id: Callable[[int], Optional[CmId]]) -> Event:
    """Builds the Event for a ``raw.ib_cm_event``.

    ``cm_id``: the Python id object; ``c_id``: its ``raw.ib_cm_id``;
    ``find_id(address)``: the Python id object for a listener pointer.
    """
    t = coerce(EventType, ev.event)
    size = PRIVATE_DATA_SIZE.get(t, 0) if isinstance(t, EventType) else 0
    base: Dict[str, Any] = dict(type=t, cm_id=cm_id, private_data=_bytes(ev.private_data, size))
    p = ev.param
    if t == EventType.REQ_RECEIVED:
        r = p.req_rcvd
        return ReqEvent(
            **base,
            listen_id=find_id(raw._address(r.listen_id)),
            service_id=raw.be64_to_cpu(c_id.service_id),
            bth_pkey=r.bth_pkey,
            port=r.port,
            primary_path=PathRecord.from_c(r.primary_path.contents),  # never NULL in a REQ event
            alternate_path=PathRecord.from_ptr(r.alternate_path),
            sgid_attr=GidAttr.from_ptr(r.ppath_sgid_attr),
            remote_ca_guid=raw.be64_to_cpu(r.remote_ca_guid),
            remote_qkey=r.remote_qkey,
            remote_qpn=r.remote_qpn,
            qp_type=coerce(QpType, r.qp_type),
            starting_psn=r.starting_psn,
            responder_resources=r.responder_resources,
            initiator_depth=r.initiator_depth,
            local_cm_response_timeout=r.local_cm_response_timeout,
            flow_control=r.flow_control,
            remote_cm_response_timeout=r.remote_cm_response_timeout,
            retry_count=r.retry_count,
            rnr_retry_count=r.rnr_retry_count,
            srq=r.srq,
            ece=Ece.from_c(r.ece),
        )
    if t == EventType.REP_RECEIVED:
        r = p.rep_rcvd
        return RepEvent(
            **base,
            remote_ca_guid=raw.be64_to_cpu(r.remote_ca_guid),
            remote_qkey=r.remote_qkey,
            remote_qpn=r.remote_qpn,
            starting_psn=r.starting_psn,
            responder_resources=r.responder_resources,
            initiator_depth=r.initiator_depth,
            target_ack_delay=r.target_ack_delay,
            failover_accepted=r.failover_accepted,
            flow_control=r.flow_control,
            rnr_retry_count=r.rnr_retry_count,
            srq=r.srq,
            ece=Ece.from_c(r.ece),
        )
    if t == EventType.REJ_RECEIVED:
        r = p.rej_rcvd
        return RejEvent(**base, reason=coerce(RejReason, r.reason), reason_text=reject_msg(r.reason),
                        ari=_bytes(r.ari, r.ari_length))
    if t == EventType.MRA_RECEIVED:
        return MraEvent(**base, service_timeout=p.mra_rcvd.service_timeout)
    if t == EventType.LAP_RECEIVED:
        return LapEvent(**base, alternate_path=PathRecord.from_ptr(p.lap_rcvd.alternate_path))
    if t == EventType.APR_RECEIVED:
        r = p.apr_rcvd
        return AprEvent(**base, ap_status=coerce(AprStatus, r.ap_status), apr_info=_bytes(r.apr_info, r.info_len))
    if t == EventType.SIDR_REQ_RECEIVED:
        r = p.sidr_req_rcvd
        return SidrReqEvent(
            **base,
            listen_id=find_id(raw._address(r.listen_id)),
            service_id=raw.be64_to_cpu(r.service_id),
            sgid_attr=GidAttr.from_ptr(r.sgid_attr),
            bth_pkey=r.bth_pkey,
            port=r.port,
            pkey=r.pkey,
        )
    if t == EventType.SIDR_REP_RECEIVED:
        r = p.sidr_rep_rcvd
        return SidrRepEvent(**base, status=coerce(SidrStatus, r.status), qkey=r.qkey, qpn=r.qpn,
                            info=_bytes(r.info, r.info_len), sgid_attr=GidAttr.from_ptr(r.sgid_attr))
    if t in ERROR_EVENTS:
        return ErrorEvent(**base, send_status=coerce(WcStatus, p.send_status))
    return Event(**base)
