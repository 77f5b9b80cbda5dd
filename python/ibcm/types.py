"""Plain-Python values for the C structures: GIDs, path records, GID
attributes, address vectors and QP attributes.

Everything here is host byte order: service IDs, P_Keys, flow labels and
LIDs are plain ints; conversion to the C structs' ``__be`` members happens
in ``to_c()`` / ``from_c()``.  GIDs are :class:`ipaddress.IPv6Address`
(an IPv4 RoCE address is the IPv4-mapped ``::ffff:a.b.c.d``).
"""

from __future__ import annotations

import ctypes
import ipaddress
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple, Union

if TYPE_CHECKING:
    from ctypes import _Pointer

from . import raw
from .enums import AccessFlags, AhAttrType, GidType, MigState, Mtu, PathRecType, QpAttrMask, QpState, Rate, coerce
from .errors import CmError

Gid = ipaddress.IPv6Address

#: What to_gid() accepts.
GidLike = Union[Gid, ipaddress.IPv4Address, bytes, bytearray, str]


def gid_from_c(g: raw.ib_gid) -> Gid:
    """An ``union ib_gid`` as an IPv6Address."""
    return Gid(bytes(g.raw))


def to_gid(value: GidLike) -> Gid:
    """A GID from an IPv6Address, IPv4Address (mapped), 16 bytes, or text
    (an IPv4 or IPv6 address, parsed by ``ibcm_gid_from_string``)."""
    if isinstance(value, Gid):
        return value
    if isinstance(value, ipaddress.IPv4Address):
        return Gid(b"\0" * 10 + b"\xff\xff" + value.packed)
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 16:
            raise ValueError("a GID is 16 bytes")
        return Gid(bytes(value))
    if isinstance(value, str):
        return gid_from_string(value)
    raise TypeError(f"cannot make a GID from {value!r}")


def gid_from_string(text: str) -> Gid:
    """``ibcm_gid_from_string``: an IPv4/IPv6 address in text form as a GID."""
    g = raw.ib_gid()
    rc: int = raw.ibcm_gid_from_string(text.encode(), ctypes.byref(g))
    if rc < 0:
        raise CmError(-rc, "ibcm_gid_from_string", f"not an IP address: {text!r}")
    return gid_from_c(g)


def gid_to_c(value: GidLike) -> raw.ib_gid:
    g = raw.ib_gid()
    ctypes.memmove(g.raw, to_gid(value).packed, 16)
    return g


@dataclass(frozen=True)
class Ece:
    """struct rdma_ucm_ece (host order)."""

    vendor_id: int = 0
    attr_mod: int = 0

    @classmethod
    def from_c(cls, c: raw.rdma_ucm_ece) -> Ece:
        return cls(c.vendor_id, c.attr_mod)

    def to_c(self, c: raw.rdma_ucm_ece) -> None:
        c.vendor_id, c.attr_mod = self.vendor_id, self.attr_mod


@dataclass(frozen=True)
class GidAttr:
    """struct ib_gid_attr (the device/net_device pointers are left out)."""

    gid: Gid
    gid_type: Union[GidType, int]
    index: int
    port_num: int

    @classmethod
    def from_ptr(cls, p: Optional[_Pointer[raw.ib_gid_attr]]) -> Optional[GidAttr]:
        if not p:
            return None
        a = p.contents
        return cls(gid_from_c(a.gid), coerce(GidType, a.gid_type), a.index, a.port_num)


@dataclass
class PathRecord:
    """struct sa_path_rec in host order.

    ``dlid``/``slid``/``raw_traffic`` are the IB (or OPA) addressing,
    ``route_resolved``/``dmac`` the RoCE one; ``rec_type`` selects which is
    written back by :meth:`to_c`.
    """

    dgid: Gid
    sgid: Gid
    service_id: int = 0
    flow_label: int = 0
    hop_limit: int = 0
    traffic_class: int = 0
    reversible: int = 0
    numb_path: int = 0
    pkey: int = 0xFFFF
    qos_class: int = 0
    sl: int = 0
    mtu_selector: int = 0
    mtu: Union[Mtu, int] = Mtu.MTU_1024
    rate_selector: int = 0
    rate: Union[Rate, int] = Rate.RATE_PORT_CURRENT
    packet_life_time_selector: int = 0
    packet_life_time: int = 0
    preference: int = 0
    rec_type: Union[PathRecType, int] = PathRecType.ROCE_V2
    flags: int = 0
    dlid: int = 0
    slid: int = 0
    raw_traffic: int = 0
    route_resolved: bool = False
    dmac: bytes = b"\0" * 6

    @classmethod
    def from_c(cls, r: raw.sa_path_rec) -> PathRecord:
        p = cls(
            dgid=gid_from_c(r.dgid),
            sgid=gid_from_c(r.sgid),
            service_id=raw.be64_to_cpu(r.service_id),
            flow_label=raw.be32_to_cpu(r.flow_label),
            hop_limit=r.hop_limit,
            traffic_class=r.traffic_class,
            reversible=r.reversible,
            numb_path=r.numb_path,
            pkey=raw.be16_to_cpu(r.pkey),
            qos_class=raw.be16_to_cpu(r.qos_class),
            sl=r.sl,
            mtu_selector=r.mtu_selector,
            mtu=coerce(Mtu, r.mtu),
            rate_selector=r.rate_selector,
            rate=coerce(Rate, r.rate),
            packet_life_time_selector=r.packet_life_time_selector,
            packet_life_time=r.packet_life_time,
            preference=r.preference,
            rec_type=coerce(PathRecType, r.rec_type),
            flags=r.flags,
        )
        if p.rec_type == PathRecType.IB:
            p.dlid, p.slid, p.raw_traffic = raw.be16_to_cpu(r.ib.dlid), raw.be16_to_cpu(r.ib.slid), r.ib.raw_traffic
        elif p.rec_type == PathRecType.OPA:
            p.dlid, p.slid, p.raw_traffic = raw.be32_to_cpu(r.opa.dlid), raw.be32_to_cpu(r.opa.slid), r.opa.raw_traffic
        else:
            p.route_resolved, p.dmac = bool(r.roce.route_resolved), bytes(r.roce.dmac)
        return p

    @classmethod
    def from_ptr(cls, p: Optional[_Pointer[raw.sa_path_rec]]) -> Optional[PathRecord]:
        return cls.from_c(p.contents) if p else None

    def to_c(self) -> raw.sa_path_rec:
        """A new ``raw.sa_path_rec``."""
        r = raw.sa_path_rec()
        r.dgid, r.sgid = gid_to_c(self.dgid), gid_to_c(self.sgid)
        r.service_id = raw.cpu_to_be64(self.service_id)
        r.flow_label = raw.cpu_to_be32(self.flow_label)
        r.pkey, r.qos_class = raw.cpu_to_be16(self.pkey), raw.cpu_to_be16(self.qos_class)
        for name in ("hop_limit", "traffic_class", "reversible", "numb_path", "sl", "mtu_selector", "mtu",
                     "rate_selector", "rate", "packet_life_time_selector", "packet_life_time", "preference",
                     "rec_type", "flags"):
            setattr(r, name, int(getattr(self, name)))
        if self.rec_type == PathRecType.IB:
            r.ib.dlid, r.ib.slid, r.ib.raw_traffic = raw.cpu_to_be16(self.dlid), raw.cpu_to_be16(self.slid), self.raw_traffic
        elif self.rec_type == PathRecType.OPA:
            r.opa.dlid, r.opa.slid, r.opa.raw_traffic = raw.cpu_to_be32(self.dlid), raw.cpu_to_be32(self.slid), self.raw_traffic
        else:
            if len(self.dmac) != 6:
                raise ValueError("dmac is 6 bytes")
            r.roce.route_resolved = bool(self.route_resolved)
            ctypes.memmove(r.roce.dmac, bytes(self.dmac), 6)
        return r


@dataclass(frozen=True)
class GlobalRoute:
    """struct ib_global_route (flow_label host order)."""

    dgid: Gid
    flow_label: int
    sgid_index: int
    hop_limit: int
    traffic_class: int
    sgid_attr: Optional[GidAttr] = None

    @classmethod
    def from_c(cls, g: raw.ib_global_route) -> GlobalRoute:
        return cls(gid_from_c(g.dgid), g.flow_label, g.sgid_index, g.hop_limit, g.traffic_class,
                   GidAttr.from_ptr(g.sgid_attr))


@dataclass(frozen=True)
class AhAttr:
    """struct rdma_ah_attr; ``dlid``/``src_path_bits`` (IB, OPA),
    ``make_grd`` (OPA) or ``dmac`` (RoCE) as ``type`` says."""

    grh: GlobalRoute
    sl: int
    static_rate: Union[Rate, int]
    port_num: int
    ah_flags: int
    type: Union[AhAttrType, int]
    dlid: int = 0
    src_path_bits: int = 0
    make_grd: bool = False
    dmac: bytes = b""

    @property
    def has_grh(self) -> bool:
        return bool(self.ah_flags & raw.IB_AH_GRH)

    @classmethod
    def from_c(cls, a: raw.rdma_ah_attr) -> AhAttr:
        kw: Dict[str, Any] = {}
        t = coerce(AhAttrType, a.type)
        if t == AhAttrType.IB:
            kw = dict(dlid=a.ib.dlid, src_path_bits=a.ib.src_path_bits)
        elif t == AhAttrType.OPA:
            kw = dict(dlid=a.opa.dlid, src_path_bits=a.opa.src_path_bits, make_grd=bool(a.opa.make_grd))
        elif t == AhAttrType.ROCE:
            kw = dict(dmac=bytes(a.roce.dmac))
        return cls(GlobalRoute.from_c(a.grh), a.sl, coerce(Rate, a.static_rate), a.port_num, a.ah_flags, t, **kw)


@dataclass(frozen=True)
class QpCap:
    max_send_wr: int
    max_recv_wr: int
    max_send_sge: int
    max_recv_sge: int
    max_inline_data: int
    max_rdma_ctxs: int

    @classmethod
    def from_c(cls, c: raw.ib_qp_cap) -> QpCap:
        return cls(*(getattr(c, f.name) for f in fields(cls)))


#: Which struct ib_qp_attr members each IB_QP_* mask bit makes meaningful.
MASK_MEMBERS: Dict[QpAttrMask, Tuple[str, ...]] = {
    QpAttrMask.STATE: ("qp_state",),
    QpAttrMask.CUR_STATE: ("cur_qp_state",),
    QpAttrMask.EN_SQD_ASYNC_NOTIFY: ("en_sqd_async_notify",),
    QpAttrMask.ACCESS_FLAGS: ("qp_access_flags",),
    QpAttrMask.PKEY_INDEX: ("pkey_index",),
    QpAttrMask.PORT: ("port_num",),
    QpAttrMask.QKEY: ("qkey",),
    QpAttrMask.AV: ("ah_attr",),
    QpAttrMask.PATH_MTU: ("path_mtu",),
    QpAttrMask.TIMEOUT: ("timeout",),
    QpAttrMask.RETRY_CNT: ("retry_cnt",),
    QpAttrMask.RNR_RETRY: ("rnr_retry",),
    QpAttrMask.RQ_PSN: ("rq_psn",),
    QpAttrMask.MAX_QP_RD_ATOMIC: ("max_rd_atomic",),
    QpAttrMask.ALT_PATH: ("alt_ah_attr", "alt_pkey_index", "alt_port_num", "alt_timeout"),
    QpAttrMask.MIN_RNR_TIMER: ("min_rnr_timer",),
    QpAttrMask.SQ_PSN: ("sq_psn",),
    QpAttrMask.MAX_DEST_RD_ATOMIC: ("max_dest_rd_atomic",),
    QpAttrMask.PATH_MIG_STATE: ("path_mig_state",),
    QpAttrMask.CAP: ("cap",),
    QpAttrMask.DEST_QPN: ("dest_qp_num",),
    QpAttrMask.RATE_LIMIT: ("rate_limit",),
}


def _qp_value(attr: raw.ib_qp_attr, name: str) -> Any:
    v = getattr(attr, name)
    if name in ("qp_state", "cur_qp_state"):
        return coerce(QpState, v)
    if name == "path_mtu":
        return coerce(Mtu, v)
    if name == "path_mig_state":
        return coerce(MigState, v)
    if name == "qp_access_flags":
        return AccessFlags(v)
    if name in ("ah_attr", "alt_ah_attr"):
        return AhAttr.from_c(v)
    if name == "cap":
        return QpCap.from_c(v)
    return v


class QpAttrs(Dict[str, Any]):
    """The result of ``ib_cm_init_qp_attr``: a dict holding only the
    members selected by the returned mask (``mask``, a QpAttrMask), keyed
    by their struct ib_qp_attr names; also readable as attributes."""

    def __init__(self, mask: int, items: Mapping[str, Any]) -> None:
        super().__init__(items)
        self.mask = QpAttrMask(mask)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"QpAttrs(mask={self.mask!r}, {dict.__repr__(self)})"

    @classmethod
    def from_c(cls, attr: raw.ib_qp_attr, mask: int) -> QpAttrs:
        items: Dict[str, Any] = {}
        for bit, names in MASK_MEMBERS.items():
            if mask & bit:
                for n in names:
                    items[n] = _qp_value(attr, n)
        return cls(mask, items)


__all__ = [
    "Gid", "Ece", "GidAttr", "PathRecord", "GlobalRoute", "AhAttr", "QpCap", "QpAttrs",
    "to_gid", "gid_from_string", "MASK_MEMBERS",
]
