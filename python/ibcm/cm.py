"""Devices and communication identifiers: the Pythonic layer over
:mod:`ibcm.raw`.

Threading and callbacks
-----------------------
The library calls handlers from its own event-loop thread.  All ids share
one module-level ``ib_cm_handler`` (``_trampoline``), alive for the life of
the process, which finds the Python :class:`CmId` for the C pointer in a
registry (address -> object); an id leaves the registry once it is
destroyed, so a reused address can never reach a stale object.

For each event the trampoline decodes the C event into an
:mod:`ibcm.events` dataclass (copying everything, since the C event dies
with the callback), calls the id's Python handler, if any, then appends the
event to the id's queue, if the id queues events (by default: ids without
a handler).  REQ/SIDR_REQ events create a new :class:`CmId` that inherits
the listener's handler, queueing and ``context`` (as in the kernel) and are
queued on the *listener* (see :meth:`CmId.next_request`).

Handler contract (the kernel's): ``handler(cm_id, event)`` runs on the
library's thread, one event at a time per id, and may call any method of
``cm_id`` except blocking ones.  Return ``None``/``0`` to keep the id; a
non-zero int asks the library to destroy the id after the handler returns
(for a REQ that rejects it with reason 28, consumer defined; ``-ENOMEM``
suppresses the REJ).  If the handler raises, the exception is logged on the
``ibcm`` logger and the id is destroyed the same way.

``cm_id.destroy()`` called from that id's own handler is *deferred*: the C
library refuses ``ib_destroy_cm_id`` there (it would wait for itself), so
the call only marks the id and the trampoline returns non-zero, letting the
library destroy it as soon as the handler returns.  Destroying a different
id from a handler is done at once.  ``wait()``/``events()``/
``next_request()`` and ``Device.close()`` raise if called from a handler
(they would wait for the very thread they block).

asyncio
-------
``Device.connect_async`` and ``CmId.wait_async`` / ``get_event_async`` /
``events_async`` / ``next_request_async`` read the same per-id queue as the
blocking calls.  An awaiter parks a future in ``CmId._waiters``; whenever
the trampoline queues an event on that id, or the id is destroyed, every
parked future is completed through ``loop.call_soon_threadsafe`` and its
awaiter rescans the queue.  Nothing polls or sleeps; an event leaves the
queue only in the step that returns it, so cancelling an awaiter never
loses one.  ``Device.close`` wakes pending awaiters with ``CmError``
(ENODEV); destroying the id wakes them with EINVAL.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import dataclasses
import errno
import ipaddress
import itertools
import logging
import os
import random
import threading
import time
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    Optional,
    Set,
    Tuple,
    Union,
    cast,
)

from . import raw
from .enums import (
    ERROR_EVENTS,
    CmState,
    EventType,
    IbEvent,
    LapState,
    QpState,
    QpType,
    RejReason,
    SidrStatus,
    WcStatus,
    coerce,
    lookup,
)
from .errors import CmError, Rejected, WaitTimeout, check
from .events import ErrorEvent, Event, RejEvent, RepEvent, ReqEvent, SidrReqEvent, decode
from .events import reject_msg as _reject_msg
from .types import Ece, Gid, GidLike, PathRecord, QpAttrs, gid_from_c, gid_to_c, to_gid

if TYPE_CHECKING:
    from ctypes import _Pointer

#: ``handler(cm_id, event)``: None/0 keeps the id, non-zero destroys it.
Handler = Callable[["CmId", Event], Optional[int]]
#: Private data, ARI and info arguments.
BytesLike = Union[bytes, bytearray, memoryview]
#: An event kind: an EventType, its value, or its name.
EventKind = Union[EventType, int, str]
#: Where to connect: a path record, or an address/GID for Device.path_to.
Dest = Union[PathRecord, GidLike]
#: An async waiter: the loop it waits on and its one-shot future.
_Waiter = Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]

log = logging.getLogger("ibcm")

_registry_lock = threading.RLock()
_ids: Dict[int, CmId] = {}  # C address -> CmId
_devices: Dict[int, Device] = {}  # C address -> Device
_tls = threading.local()

#: What the trampoline returns to have the library destroy an id.
_DESTROY = 1


def _callback_stack() -> List[CmId]:
    s: Optional[List[CmId]] = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def in_callback() -> bool:
    """True when the current thread runs an ibcm handler."""
    return bool(getattr(_tls, "stack", None))


def _area(data: Optional[BytesLike], call: str,
          what: str = "private data") -> Tuple[Optional[ctypes.Array[ctypes.c_char]], int]:
    """(buffer or None, length) for a bytes-like argument; lengths above
    255 cannot be expressed in the C API's u8 and are -EINVAL here."""
    if data is None:
        return None, 0
    if isinstance(data, (int, str)):
        raise TypeError(f"{what} must be bytes-like, not {type(data).__name__}")
    b = bytes(data)
    if len(b) > 255:
        raise CmError(errno.EINVAL, call, f"{what} too long ({len(b)} bytes)")
    if not b:
        return None, 0
    return ctypes.create_string_buffer(b, len(b)), len(b)


def _addr_of(buf: Optional[ctypes.Array[ctypes.c_char]]) -> Optional[int]:
    return ctypes.addressof(buf) if buf is not None else None


def _ece(value: Union[Ece, Tuple[int, int], None], c: raw.rdma_ucm_ece) -> None:
    if value is None:
        return
    if isinstance(value, tuple):
        value = Ece(*value)
    value.to_c(c)


def _retval(r: object, cm_id: CmId, event: Event) -> int:
    if r is None:
        return 0
    if isinstance(r, int):
        return max(-(2**31), min(int(r), 2**31 - 1))
    log.warning("handler for %r returned %r on %s; expected None or an int, treating it as 0",
                cm_id, r, event.type)
    return 0


def _deliver(id_ptr: _Pointer[raw.ib_cm_id], ev_ptr: _Pointer[raw.ib_cm_event]) -> int:
    try:
        return _dispatch(id_ptr, ev_ptr)
    except BaseException:  # never let anything unwind into the library
        log.exception("ibcm: internal error while delivering an event")
        return 0


#: The one C callback of every id (alive as long as the module).
_trampoline = raw.ib_cm_handler(_deliver)


def _dispatch(id_ptr: _Pointer[raw.ib_cm_id], ev_ptr: _Pointer[raw.ib_cm_event]) -> int:
    addr = raw._address(id_ptr)
    c_id = id_ptr.contents
    ev = ev_ptr.contents
    kind: int = ev.event
    queue_on: Optional[CmId] = None
    if kind in (raw.IB_CM_REQ_RECEIVED, raw.IB_CM_SIDR_REQ_RECEIVED):
        lp = ev.param.req_rcvd.listen_id if kind == raw.IB_CM_REQ_RECEIVED else ev.param.sidr_req_rcvd.listen_id
        with _registry_lock:
            listener = _ids.get(raw._address(lp))
            device = _devices.get(raw._address(c_id.device))
        if device is None:
            log.error("ibcm: event for a device not opened through ibcm.Device; rejecting")
            return _DESTROY
        if listener is None:
            log.warning("ibcm: %s for an unknown listener", EventType(kind).name)
        obj = CmId._adopt(device, id_ptr, listener)
        queue_on = listener if listener is not None and listener._queueing else None
        if queue_on is None and obj._queueing:
            queue_on = obj
    else:
        with _registry_lock:
            found = _ids.get(addr)
        if found is None:
            log.warning("ibcm: event %d for unknown cm_id %#x ignored", kind, addr)
            return 0
        obj = found
        queue_on = obj if obj._queueing else None
    ret = 0
    event: Optional[Event] = None
    stack = _callback_stack()
    stack.append(obj)
    try:
        event = decode(ev, obj, c_id, lambda a: _ids.get(a))
        if isinstance(event, ReqEvent):
            obj.request = event
        if obj.handler is not None:
            ret = _retval(obj.handler(obj, event), obj, event)
    except BaseException:  # nothing may unwind into the library
        if event is None:
            log.exception("ibcm: cannot decode event %d for %r; the id will be destroyed", kind, obj)
        else:
            log.exception("ibcm: handler of %r raised on %s; the id will be destroyed", obj, _kind_name(event.type))
        ret = _DESTROY
    finally:
        stack.pop()
    with obj._cond:
        if ret == 0 and obj._destroy_requested:
            ret = _DESTROY
        if ret != 0:
            if obj._destroying:
                # destroy() is running in another thread (waiting for this
                # callback); let it do the job.
                ret = 0
            else:
                obj._destroyed = True
                obj._notify_locked()
    if ret != 0:
        obj._unregister()
    is_request = kind in (raw.IB_CM_REQ_RECEIVED, raw.IB_CM_SIDR_REQ_RECEIVED)
    if queue_on is not None and event is not None and not (is_request and ret != 0):
        with queue_on._cond:
            queue_on._queue.append(event)
            queue_on._notify_locked()
    return ret


def _failure(event: Event, call: str) -> CmError:
    if isinstance(event, RejEvent):
        return Rejected(errno.ECONNREFUSED, call, f"rejected: {event.reason_text}", event,
                        event.reason, event.reason_text, event.ari)
    if isinstance(event, ErrorEvent):
        err = errno.ETIMEDOUT if event.send_status == WcStatus.RESP_TIMEOUT_ERR else errno.EIO
        status = getattr(event.send_status, "name", event.send_status)
        return CmError(err, call, f"{_kind_name(event.type)} ({status})", event)
    return CmError(errno.EIO, call, f"unexpected {_kind_name(event.type)}", event)


class CmId:
    """A communication identifier (``struct ib_cm_id``).

    Created by :meth:`Device.create_id`, :meth:`Device.listen`,
    :meth:`Device.connect`, :meth:`Device.sidr_request`, or by the library
    for incoming REQ/SIDR_REQ (``event.cm_id``).  Attributes: ``device``,
    ``handler``, ``context`` (any Python object; inherited by ids created
    from a listener), ``request`` (the ReqEvent that created this id, if
    any).  The C state is read live through the properties.
    """

    def __init__(self, device: Device, ptr: _Pointer[raw.ib_cm_id], handler: Optional[Handler] = None,
                 queue: Optional[bool] = None, context: Any = None) -> None:
        self.device = device
        self._ptr = ctypes.cast(ptr, ctypes.POINTER(raw.ib_cm_id))
        self._addr = raw._address(ptr)
        self.handler = handler
        self.context = context
        self.request: Optional[ReqEvent] = None
        self._queue: List[Event] = []
        self._queueing = bool(handler is None if queue is None else queue)
        self._cond = threading.Condition(threading.Lock())
        self._destroyed = False
        self._destroying = False
        self._destroy_requested = False
        self._listening = False
        self._waiters: List[_Waiter] = []  # async waiters, completed on any change
        with _registry_lock:
            _ids[self._addr] = self
            device._ids.add(self)

    @classmethod
    def _adopt(cls, device: Device, ptr: _Pointer[raw.ib_cm_id], listener: Optional[CmId]) -> CmId:
        if listener is None:
            return cls(device, ptr, None, True, None)
        return cls(device, ptr, listener.handler, listener._queueing, listener.context)

    def _unregister(self) -> None:
        with _registry_lock:
            if _ids.get(self._addr) is self:
                del _ids[self._addr]
            self.device._ids.discard(self)

    # ---------------------------------------------------------------- state

    def _c(self, call: str = "cm_id") -> _Pointer[raw.ib_cm_id]:
        """The live C struct; CmError(EINVAL) once destroyed."""
        if self._destroyed or self._destroying:
            raise CmError(errno.EINVAL, call, "the cm_id was destroyed")
        return self._ptr

    def _is_listener(self) -> bool:
        # Tracked here rather than read from the C state: see
        # tests/test_library_issues.py (the listener's public fields change
        # when a REQ arrives).
        return self._listening

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    @property
    def address(self) -> int:
        """The C ``struct ib_cm_id *`` value."""
        return self._addr

    @property
    def state(self) -> Union[CmState, int]:
        return coerce(CmState, self._c().contents.state)

    @property
    def lap_state(self) -> Union[LapState, int]:
        return coerce(LapState, self._c().contents.lap_state)

    @property
    def local_id(self) -> int:
        """Local communication ID (host order)."""
        return raw.be32_to_cpu(self._c().contents.local_id)

    @property
    def remote_id(self) -> int:
        """Remote communication ID (host order)."""
        return raw.be32_to_cpu(self._c().contents.remote_id)

    @property
    def service_id(self) -> int:
        """Service ID (host order)."""
        return raw.be64_to_cpu(self._c().contents.service_id)

    @property
    def remote_cm_qpn(self) -> int:
        qpn: int = self._c().contents.remote_cm_qpn
        return qpn

    def __repr__(self) -> str:
        if self._destroyed or self._destroying:
            return f"<CmId {self._addr:#x} destroyed>"
        c = self._ptr.contents
        try:
            st = CmState(c.state).name
        except ValueError:
            st = str(c.state)
        return (f"<CmId {self._addr:#x} {st} local_id={raw.be32_to_cpu(c.local_id):#x} "
                f"remote_id={raw.be32_to_cpu(c.remote_id):#x} service_id={raw.be64_to_cpu(c.service_id):#x}>")

    def set_handler(self, handler: Optional[Handler], *, queue: Optional[bool] = None) -> None:
        """Replaces the handler for the id's next events; ``queue`` (default:
        True exactly when ``handler`` is None) turns queueing on or off.
        Events already queued stay queued.  Typical use: hand an accepted
        connection to a handler (call it before accept() so no event slips
        into the queue)."""
        with self._cond:
            self.handler = handler
            self._queueing = bool(handler is None if queue is None else queue)

    # ------------------------------------------------------------ CM calls

    def listen(self, service_id: Optional[int] = None) -> CmId:
        """``ib_cm_listen``; None asks for an assigned service ID (read it
        back from ``service_id``)."""
        sid = raw.IB_CM_ASSIGN_SERVICE_ID if service_id is None else raw.cpu_to_be64(service_id)
        check(raw.ib_cm_listen(self._c("ib_cm_listen"), sid), "ib_cm_listen")
        self._listening = True
        return self

    def send_req(self, dest: Dest, service_id: int, private_data: Optional[BytesLike] = b"", *,
                 qp_num: Optional[int] = None, starting_psn: Optional[int] = None,
                 qp_type: Union[QpType, int, str] = QpType.RC, responder_resources: int = 1,
                 initiator_depth: int = 1, remote_cm_response_timeout: int = 20,
                 local_cm_response_timeout: int = 20, retry_count: int = 7, rnr_retry_count: int = 7,
                 max_cm_retries: int = 15, flow_control: bool = True, srq: bool = False,
                 alternate_path: Optional[PathRecord] = None, packet_life_time: Optional[int] = None,
                 ece: Union[Ece, Tuple[int, int], None] = None, port: int = 1) -> CmId:
        """``ib_send_cm_req``.  ``dest``: a PathRecord, or an address/GID
        (the path then comes from :meth:`Device.path_to`).  The timeouts are
        IBTA exponents (4.096 us * 2**n); ``packet_life_time`` overrides the
        path's.  ``qp_num``/``starting_psn`` default to a placeholder QPN
        unique on the device and a random PSN."""
        call = "ib_send_cm_req"
        p = self._c(call)
        path = dest if isinstance(dest, PathRecord) else self.device.path_to(dest, port)
        if packet_life_time is not None:
            path = dataclasses.replace(path, packet_life_time=packet_life_time)
        buf, n = _area(private_data, call)
        primary = path.to_c()
        alt = alternate_path.to_c() if alternate_path is not None else None
        prm = raw.ib_cm_req_param()
        prm.primary_path = ctypes.pointer(primary)
        if alt is not None:
            prm.alternate_path = ctypes.pointer(alt)
        prm.service_id = raw.cpu_to_be64(service_id)
        prm.qp_num = self.device._qpn() if qp_num is None else qp_num
        prm.qp_type = int(lookup(QpType, qp_type))
        prm.starting_psn = random.getrandbits(24) if starting_psn is None else starting_psn
        prm.private_data = _addr_of(buf)
        prm.private_data_len = n
        prm.responder_resources = responder_resources
        prm.initiator_depth = initiator_depth
        prm.remote_cm_response_timeout = remote_cm_response_timeout
        prm.local_cm_response_timeout = local_cm_response_timeout
        prm.flow_control = int(flow_control)
        prm.retry_count = retry_count
        prm.rnr_retry_count = rnr_retry_count
        prm.max_cm_retries = max_cm_retries
        prm.srq = int(srq)
        _ece(ece, prm.ece)
        check(raw.ib_send_cm_req(p, ctypes.byref(prm)), call)
        return self

    def accept(self, private_data: Optional[BytesLike] = b"", *, qp_num: Optional[int] = None,
               starting_psn: Optional[int] = None, responder_resources: Optional[int] = None,
               initiator_depth: Optional[int] = None, failover_accepted: int = 0, flow_control: bool = True,
               rnr_retry_count: int = 7, srq: bool = False, ece: Union[Ece, Tuple[int, int], None] = None) -> None:
        """``ib_send_cm_rep``: accept a received REQ.  Responder resources /
        initiator depth default to those of the REQ event (which the CM
        reports from the receiver's side); ``qp_num``/``starting_psn`` as
        in :meth:`send_req`."""
        call = "ib_send_cm_rep"
        p = self._c(call)
        req = self.request
        buf, n = _area(private_data, call)
        prm = raw.ib_cm_rep_param()
        prm.qp_num = self.device._qpn() if qp_num is None else qp_num
        prm.starting_psn = random.getrandbits(24) if starting_psn is None else starting_psn
        prm.private_data = _addr_of(buf)
        prm.private_data_len = n
        # The REQ event is already the receiver's view (the CM swapped the
        # sender's values), so these are usable as they are.
        if responder_resources is None:
            responder_resources = req.responder_resources if req is not None else 1
        if initiator_depth is None:
            initiator_depth = req.initiator_depth if req is not None else 1
        prm.responder_resources = responder_resources
        prm.initiator_depth = initiator_depth
        prm.failover_accepted = failover_accepted
        prm.flow_control = int(flow_control)
        prm.rnr_retry_count = rnr_retry_count
        prm.srq = int(srq)
        _ece(ece, prm.ece)
        check(raw.ib_send_cm_rep(p, ctypes.byref(prm)), call)

    def rtu(self, private_data: Optional[BytesLike] = b"") -> None:
        """``ib_send_cm_rtu``: complete the connection (active side)."""
        buf, n = _area(private_data, "ib_send_cm_rtu")
        check(raw.ib_send_cm_rtu(self._c("ib_send_cm_rtu"), buf, n), "ib_send_cm_rtu")

    def disconnect(self, private_data: Optional[BytesLike] = b"") -> None:
        """``ib_send_cm_dreq``."""
        buf, n = _area(private_data, "ib_send_cm_dreq")
        check(raw.ib_send_cm_dreq(self._c("ib_send_cm_dreq"), buf, n), "ib_send_cm_dreq")

    dreq = disconnect

    def drep(self, private_data: Optional[BytesLike] = b"") -> None:
        """``ib_send_cm_drep``: answer a DREQ."""
        buf, n = _area(private_data, "ib_send_cm_drep")
        check(raw.ib_send_cm_drep(self._c("ib_send_cm_drep"), buf, n), "ib_send_cm_drep")

    def reject(self, reason: Union[RejReason, int, str] = RejReason.CONSUMER_DEFINED,
               ari: Optional[BytesLike] = b"", private_data: Optional[BytesLike] = b"") -> None:
        """``ib_send_cm_rej``."""
        call = "ib_send_cm_rej"
        abuf, an = _area(ari, call, "ARI")
        pbuf, pn = _area(private_data, call)
        check(raw.ib_send_cm_rej(self._c(call), int(lookup(RejReason, reason)), abuf, an, pbuf, pn), call)

    def prepare_mra(self) -> None:
        """``ib_prepare_cm_mra``: this will take a while (an MRA answers the
        peer's next retransmission)."""
        check(raw.ib_prepare_cm_mra(self._c("ib_prepare_cm_mra")), "ib_prepare_cm_mra")

    def notify(self, event: Union[IbEvent, int, str] = IbEvent.COMM_EST) -> None:
        """``ib_cm_notify``: IbEvent.COMM_EST or IbEvent.PATH_MIG (or their
        names)."""
        check(raw.ib_cm_notify(self._c("ib_cm_notify"), int(lookup(IbEvent, event))), "ib_cm_notify")

    def init_qp_attr(self, state: Union[QpState, int, str]) -> QpAttrs:
        """``ib_cm_init_qp_attr`` for a target QP state (QpState.INIT/RTR/
        RTS or a name): a :class:`QpAttrs` dict of the masked attributes."""
        attr = raw.ib_qp_attr()
        attr.qp_state = int(lookup(QpState, state))
        mask = ctypes.c_int(0)
        check(raw.ib_cm_init_qp_attr(self._c("ib_cm_init_qp_attr"), ctypes.byref(attr), ctypes.byref(mask)),
              "ib_cm_init_qp_attr")
        return QpAttrs.from_c(attr, mask.value)

    def sidr_request(self, dest: Dest, service_id: int, private_data: Optional[BytesLike] = b"", *,
                     timeout_ms: int = 1000, max_cm_retries: int = 3, port: int = 1) -> CmId:
        """``ib_send_cm_sidr_req``: ask ``dest`` which UD QP serves
        ``service_id``; the answer is a SIDR_REP_RECEIVED (or
        SIDR_REQ_ERROR) event."""
        call = "ib_send_cm_sidr_req"
        p = self._c(call)
        path = dest if isinstance(dest, PathRecord) else self.device.path_to(dest, port)
        buf, n = _area(private_data, call)
        c_path = path.to_c()
        prm = raw.ib_cm_sidr_req_param()
        prm.path = ctypes.pointer(c_path)
        prm.service_id = raw.cpu_to_be64(service_id)
        prm.timeout_ms = timeout_ms
        prm.private_data = _addr_of(buf)
        prm.private_data_len = n
        prm.max_cm_retries = max_cm_retries
        check(raw.ib_send_cm_sidr_req(p, ctypes.byref(prm)), call)
        return self

    def sidr_reply(self, status: Union[SidrStatus, int, str] = SidrStatus.SUCCESS, *, qp_num: Optional[int] = None,
                   qkey: int = 0, info: Optional[BytesLike] = b"", private_data: Optional[BytesLike] = b"",
                   ece: Union[Ece, Tuple[int, int], None] = None) -> None:
        """``ib_send_cm_sidr_rep``: answer a SIDR_REQ."""
        call = "ib_send_cm_sidr_rep"
        p = self._c(call)
        ibuf, inn = _area(info, call, "info")
        pbuf, pn = _area(private_data, call)
        prm = raw.ib_cm_sidr_rep_param()
        prm.qp_num = self.device._qpn() if qp_num is None else qp_num
        prm.qkey = qkey
        prm.status = int(lookup(SidrStatus, status))
        prm.info = _addr_of(ibuf)
        prm.info_length = inn
        prm.private_data = _addr_of(pbuf)
        prm.private_data_len = pn
        _ece(ece, prm.ece)
        check(raw.ib_send_cm_sidr_rep(p, ctypes.byref(prm)), call)

    def destroy(self) -> None:
        """``ib_destroy_cm_id`` (sends whatever the state requires: REJ,
        DREQ, ...).  Blocks until no handler for this id runs.  From this
        id's own handler it is deferred until the handler returns (see the
        module docstring).  Destroying twice is a no-op."""
        if self in getattr(_tls, "stack", ()):
            with self._cond:
                self._destroy_requested = True
            return
        with self._cond:
            if self._destroyed or self._destroying:
                return
            self._destroying = True
        raw.ib_destroy_cm_id(self._ptr)
        with self._cond:
            self._destroyed = True
            self._notify_locked()
        self._unregister()

    # -------------------------------------------------------------- events

    def _notify_locked(self) -> None:
        """Wakes every waiter, blocking and async (``_cond`` held): the
        queue changed or the id was destroyed.  Async waiters are one-shot
        futures, completed on their own loop's thread."""
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_complete, fut)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def _gone(self, call: str, what: str) -> CmError:
        if self.device._closing:
            return CmError(errno.ENODEV, call, f"the device was closed (no {what} queued)")
        return CmError(errno.EINVAL, call, f"the cm_id was destroyed (no {what} queued)")

    def _scan_locked(self, match: Callable[[Event], bool], raise_on_error: bool, call: str,
                     what: str) -> Optional[Event]:
        """Removes and returns the first queued event ``match`` accepts
        (``_cond`` held); raises for a failure event queued before it, or
        when the id is destroyed and nothing matches; None otherwise."""
        for i, ev in enumerate(self._queue):
            if match(ev):
                del self._queue[i]
                return ev
            if raise_on_error and ev.type in _FAILURES:
                del self._queue[i]
                raise _failure(ev, call)
        if self._destroyed:
            raise self._gone(call, what)
        return None

    def _check_waitable(self, call: str) -> None:
        if not self._queueing and not self._queue:
            raise RuntimeError(f"{self!r} does not queue events (it has a handler; pass queue=True)")
        if in_callback():
            raise RuntimeError(f"{call}() cannot block inside an ibcm handler")

    def _take(self, match: Callable[[Event], bool], timeout: Optional[float], raise_on_error: bool, call: str,
              what: str) -> Event:
        self._check_waitable(call)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                ev = self._scan_locked(match, raise_on_error, call, what)
                if ev is not None:
                    return ev
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WaitTimeout(errno.ETIMEDOUT, call, f"no {what} within {timeout} s")
                self._cond.wait(remaining)

    async def _take_async(self, match: Callable[[Event], bool], timeout: Optional[float], raise_on_error: bool,
                          call: str, what: str) -> Event:
        """The asyncio twin of :meth:`_take`.  Nothing polls: the waiter is
        a future that the library thread completes through
        ``loop.call_soon_threadsafe`` when an event is queued or the id is
        destroyed (and ``loop.call_later`` for the timeout).  An event is
        removed from the queue only in the same step that returns it, so a
        cancelled waiter never takes one."""
        self._check_waitable(call)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with self._cond:
                ev = self._scan_locked(match, raise_on_error, call, what)
                if ev is not None:
                    return ev
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise WaitTimeout(errno.ETIMEDOUT, call, f"no {what} within {timeout} s")
                fut = loop.create_future()
                waiter = (loop, fut)
                self._waiters.append(waiter)
            timer = None if remaining is None else loop.call_later(remaining, _complete, fut)
            try:
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
                with self._cond:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def get_event(self, timeout: Optional[float] = None) -> Event:
        """The next queued event (waits up to ``timeout`` seconds, None =
        forever; WaitTimeout after that)."""
        return self._take(lambda ev: True, timeout, False, "get_event", "event")

    def wait(self, kind: Union[EventKind, Iterable[EventKind]], timeout: Optional[float] = None, *,
             raise_on_error: bool = True) -> Event:
        """Removes and returns the first queued event of type ``kind`` (an
        EventType, a name like ``"REP_RECEIVED"``, or a tuple of them),
        leaving other events queued.  With ``raise_on_error`` a REJ
        (:class:`Rejected`) or ``*_ERROR`` event (:class:`CmError`,
        ETIMEDOUT for a response timeout) queued before it is raised
        instead.  WaitTimeout when nothing matches within ``timeout``."""
        kinds = _kinds(kind)
        return self._take(lambda ev: ev.type in kinds, timeout, raise_on_error and not (kinds & _FAILURES),
                          "wait", _what(kinds))

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Iterates over events as they arrive; stops when none arrives
        within ``timeout`` seconds, or when the id is destroyed and its
        queue is empty."""
        while True:
            try:
                yield self.get_event(timeout)
            except WaitTimeout:
                return
            except CmError as e:
                if e.errno in (errno.EINVAL, errno.ENODEV) and self._destroyed:
                    return
                raise

    def next_request(self, timeout: Optional[float] = None) -> Union[ReqEvent, SidrReqEvent]:
        """Listener: the next REQ (or SIDR_REQ) event, like socket.accept();
        ``event.cm_id`` is the new id, to :meth:`accept`/:meth:`reject`."""
        return cast(Union[ReqEvent, SidrReqEvent], self._take(_is_request, timeout, False, "next_request",
                                                              "REQ/SIDR_REQ"))

    # ----------------------------------------------------------- asyncio

    async def get_event_async(self, timeout: Optional[float] = None) -> Event:
        """``await``-able :meth:`get_event`: the next queued event, without
        blocking the event loop."""
        return await self._take_async(lambda ev: True, timeout, False, "get_event_async", "event")

    async def wait_async(self, kind: Union[EventKind, Iterable[EventKind]], timeout: Optional[float] = None, *,
                         raise_on_error: bool = True) -> Event:
        """``await``-able :meth:`wait` (same arguments and exceptions)."""
        kinds = _kinds(kind)
        return await self._take_async(lambda ev: ev.type in kinds, timeout,
                                      raise_on_error and not (kinds & _FAILURES), "wait_async", _what(kinds))

    async def events_async(self, timeout: Optional[float] = None) -> AsyncIterator[Event]:
        """``async for ev in cm_id.events_async():`` -- :meth:`events` for
        asyncio: ends when no event arrives within ``timeout`` seconds, or
        when the id is destroyed (also by :meth:`Device.close`) and its
        queue is empty."""
        while True:
            try:
                ev = await self.get_event_async(timeout)
            except WaitTimeout:
                return
            except CmError as e:
                if e.errno in (errno.EINVAL, errno.ENODEV) and self._destroyed:
                    return
                raise
            yield ev

    async def next_request_async(self, timeout: Optional[float] = None) -> Union[ReqEvent, SidrReqEvent]:
        """``await``-able :meth:`next_request`, like ``loop.sock_accept``."""
        ev = await self._take_async(_is_request, timeout, False, "next_request_async", "REQ/SIDR_REQ")
        return cast(Union[ReqEvent, SidrReqEvent], ev)

    def pending(self) -> List[Event]:
        """A snapshot of the queued events."""
        with self._cond:
            return list(self._queue)

    def __enter__(self) -> CmId:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


_FAILURES = frozenset({EventType.REJ_RECEIVED}) | ERROR_EVENTS
_REQUESTS = frozenset({EventType.REQ_RECEIVED, EventType.SIDR_REQ_RECEIVED})


def _kinds(kind: Union[EventKind, Iterable[EventKind]]) -> FrozenSet[EventType]:
    """A frozenset of EventType from a kind or a collection of kinds."""
    kinds = kind if isinstance(kind, (tuple, list, set, frozenset)) else (kind,)
    return frozenset(lookup(EventType, k) for k in kinds)


def _what(kinds: FrozenSet[EventType]) -> str:
    return "/".join(sorted(k.name for k in kinds))


def _kind_name(kind: Union[EventType, int]) -> str:
    return kind.name if isinstance(kind, EventType) else str(kind)


def _is_request(ev: Event) -> bool:
    return ev.type in _REQUESTS


def _complete(fut: asyncio.Future[None]) -> None:
    """Completes an async waiter's future (on its loop's thread) unless it
    is already done or cancelled."""
    if not fut.done():
        fut.set_result(None)


def _device_name(name: Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address, None]) -> Optional[str]:
    if name is None:
        return None
    if isinstance(name, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return f"soft:{name}"
    if ":" in name and name.split(":", 1)[0] in ("soft", "loop"):
        return name
    try:
        return f"soft:{ipaddress.ip_address(name)}"
    except ValueError:
        return name


class Device:
    """An ibcm device (``ibcm_open_device``): ``Device("soft:127.0.0.2")``,
    ``Device("127.0.0.2")`` (same), ``Device()`` ($IBCM_DEVICE or
    soft:127.0.0.1).  A context manager; :meth:`close` destroys the ids
    still alive on it first."""

    def __init__(self, name: Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address, None] = None) -> None:
        self.name = _device_name(name)
        p = raw.ibcm_open_device(self.name.encode() if self.name is not None else None)
        if raw.IS_ERR(p):
            err = -raw.PTR_ERR(p)
            raise CmError(err, "ibcm_open_device", f"cannot open {self.name or '(default)'}: {os.strerror(err)}")
        self._ptr: _Pointer[raw.ib_device] = p
        self._addr = raw._address(p)
        self._ids: Set[CmId] = set()
        self._closed = False
        self._closing = False
        self._qpn_iter = itertools.count(random.randrange(0x1000, 0x800000))
        with _registry_lock:
            _devices[self._addr] = self

    def __repr__(self) -> str:
        return f"<Device {self.name or '(default)'}{' closed' if self._closed else ''}>"

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _c(self, call: str) -> _Pointer[raw.ib_device]:
        if self._closed:
            raise CmError(errno.ENODEV, call, "the device is closed")
        return self._ptr

    def _qpn(self) -> int:
        """A placeholder 24-bit QPN, unique on this device (2 .. 0xFFFFFF)."""
        return next(self._qpn_iter) % 0xFFFFFE + 2

    @property
    def ids(self) -> List[CmId]:
        """The live ids of this device."""
        with _registry_lock:
            return list(self._ids)

    def query_gid(self, port: int = 1, index: int = 0) -> Gid:
        """``ibcm_query_gid``."""
        g = raw.ib_gid()
        check(raw.ibcm_query_gid(self._c("ibcm_query_gid"), port, index, ctypes.byref(g)), "ibcm_query_gid")
        return gid_from_c(g)

    @property
    def gid(self) -> Gid:
        """Port 1, GID index 0: the device's address as a GID."""
        return self.query_gid(1, 0)

    def path_to(self, dest: GidLike, port: int = 1) -> PathRecord:
        """``ibcm_init_path``: a :class:`PathRecord` from ``port`` to
        ``dest`` (an IP address string, ipaddress object, GID or 16 bytes)."""
        dgid = gid_to_c(to_gid(dest))
        rec = raw.sa_path_rec()
        check(raw.ibcm_init_path(self._c("ibcm_init_path"), port, ctypes.byref(dgid), ctypes.byref(rec)),
              "ibcm_init_path")
        return PathRecord.from_c(rec)

    def counters(self) -> Dict[str, Any]:
        """``ibcm_get_counters``: a dict of the device's counters.  The
        per-attribute arrays are dicts keyed "req", "rep", ...; ``drops`` is
        keyed by cause ("malformed", "duplicate", ...); ``rej_tx``/``rej_rx``
        are lists indexed by reject reason (the last slot: larger ones)."""
        call = "ibcm_get_counters"
        try:
            fn = raw.ibcm_get_counters
        except AttributeError as e:
            raise CmError(errno.ENOSYS, call, str(e)) from None
        c = raw.ibcm_counters()
        check(fn(self._c(call), ctypes.byref(c), ctypes.sizeof(c)), call)

        def names(tag: str, prefix: str) -> List[str]:
            m = sorted(raw.ENUMS[tag].items(), key=lambda kv: kv[1])
            return [k[len(prefix):].lower() for k, _v in m if not k.endswith("_COUNT")]

        attrs, drops = names("ibcm_attr_index", "IBCM_ATTR_"), names("ibcm_drop_cause", "IBCM_DROP_")
        out: Dict[str, Any] = {}
        for name, *_t in c._fields_:
            v = getattr(c, name)
            if isinstance(v, ctypes.Array):
                if name == "drops":
                    v = dict(zip(drops, v))
                elif len(v) == raw.IBCM_ATTR_COUNT:
                    v = dict(zip(attrs, v))
                else:
                    v = list(v)
            out[name] = v
        return out

    def create_id(self, handler: Optional[Handler] = None, *, queue: Optional[bool] = None,
                  context: Any = None) -> CmId:
        """``ib_create_cm_id``: an idle :class:`CmId`.  ``queue`` (default:
        True exactly when there is no handler) makes its events available
        to wait()/events()/next_request()."""
        p = raw.ib_create_cm_id(self._c("ib_create_cm_id"), _trampoline, None)
        if raw.IS_ERR(p):
            raise CmError(-raw.PTR_ERR(p), "ib_create_cm_id")
        return CmId(self, p, handler, queue, context)

    def _new(self, handler: Optional[Handler], queue: Optional[bool], context: Any,
             action: Callable[[CmId], object]) -> CmId:
        cm_id = self.create_id(handler, queue=queue, context=context)
        try:
            action(cm_id)
        except BaseException:
            cm_id.destroy()
            raise
        return cm_id

    def listen(self, service_id: Optional[int] = None, handler: Optional[Handler] = None, *,
               queue: Optional[bool] = None, context: Any = None) -> CmId:
        """A listening :class:`CmId` for ``service_id`` (None: assigned).
        Incoming requests either go to ``handler(new_cm_id, event)`` or, by
        default, queue up for :meth:`CmId.next_request`."""
        return self._new(handler, queue, context, lambda c: c.listen(service_id))

    def connect(self, dest: Dest, service_id: int, private_data: Optional[BytesLike] = b"", *,
                handler: Optional[Handler] = None, queue: Optional[bool] = None, context: Any = None,
                **kw: Any) -> CmId:
        """A new :class:`CmId` that has sent a REQ to ``dest`` (address, GID
        or PathRecord); keyword arguments as :meth:`CmId.send_req`.  Then
        e.g. ``cm_id.wait("REP_RECEIVED"); cm_id.rtu()``."""
        return self._new(handler, queue, context, lambda c: c.send_req(dest, service_id, private_data, **kw))

    async def connect_async(self, dest: Dest, service_id: int, private_data: Optional[BytesLike] = b"", *,
                            timeout: Optional[float] = None, rtu: bool = True,
                            rtu_private_data: Optional[BytesLike] = b"", context: Any = None,
                            **kw: Any) -> Tuple[CmId, RepEvent]:
        """asyncio :meth:`connect`: sends a REQ, awaits the REP and (with
        ``rtu``, the default) answers it with an RTU carrying
        ``rtu_private_data``; returns ``(cm_id, rep_event)``.  Pass
        ``rtu=False`` to move a real QP to RTR/RTS first
        (``cm_id.init_qp_attr``) and call ``cm_id.rtu()`` yourself.

        A REJ raises :class:`Rejected`, a REQ nobody answered
        :class:`CmError` (ETIMEDOUT), ``timeout`` seconds without an answer
        :class:`WaitTimeout`; after any failure, and when the awaiting task
        is cancelled, the new id is destroyed (which sends the REJ the
        state calls for), so nothing is left behind.  The returned id queues
        its events: continue with :meth:`CmId.wait_async` /
        :meth:`CmId.events_async`."""
        cm_id = self.connect(dest, service_id, private_data, queue=True, context=context, **kw)
        try:
            rep = cast(RepEvent, await cm_id.wait_async(EventType.REP_RECEIVED, timeout))
            if rtu:
                cm_id.rtu(rtu_private_data)
        except BaseException:
            cm_id.destroy()
            raise
        return cm_id, rep

    def sidr_request(self, dest: Dest, service_id: int, private_data: Optional[BytesLike] = b"", *,
                     handler: Optional[Handler] = None, queue: Optional[bool] = None, context: Any = None,
                     **kw: Any) -> CmId:
        """A new :class:`CmId` that has sent a SIDR_REQ (see
        :meth:`CmId.sidr_request`)."""
        return self._new(handler, queue, context, lambda c: c.sidr_request(dest, service_id, private_data, **kw))

    def close(self) -> None:
        """Destroys the live ids (listeners first), then
        ``ibcm_close_device``.  Idempotent."""
        if self._closed:
            return
        if in_callback():
            raise CmError(errno.EDEADLK, "ibcm_close_device", "cannot close a device from an ibcm handler")
        self._closing = True  # waiters woken by the destroys below raise ENODEV
        while True:
            ids = self.ids
            if not ids:
                break
            ids.sort(key=lambda c: 0 if c._is_listener() else 1)
            for c in ids:
                c.destroy()
        self._closed = True
        with _registry_lock:
            _devices.pop(self._addr, None)
        raw.ibcm_close_device(self._ptr)


def reject_msg(reason: int) -> str:
    """``ibcm_reject_msg``."""
    return _reject_msg(reason)


@atexit.register
def _close_all() -> None:
    """At exit: close what is still open, so the library's threads never
    call into a finalizing interpreter."""
    with _registry_lock:
        devs = list(_devices.values())
    for d in devs:
        try:
            d.close()
        except Exception:  # pragma: no cover
            log.exception("ibcm: closing %r at exit", d)


__all__ = ["CmId", "Device", "in_callback", "reject_msg", "Gid", "Ece"]
