"""Python <-> Python over the software fabric: every event kind the CM can
be made to produce, in blocking (queue) style and with handlers."""

import errno
import ipaddress
import logging
import threading
import time

import pytest

import ibcm
from conftest import FAST, establish, pattern
from ibcm import CmState, EventType, QpAttrMask, QpState


def test_connect_private_data_everywhere_client_disconnects(dev_pair):
    srv, cli = dev_pair
    svc = 0x1061001
    req_pd, rep_pd, rtu_pd = pattern(92, 1), pattern(196, 2), pattern(224, 3)
    listener, conn, sconn, req, rep, rtu = establish(srv, cli, svc, req_pd, rep_pd, rtu_pd,
                                                     qp_num=0x110, starting_psn=0x123456,
                                                     responder_resources=4, initiator_depth=3,
                                                     retry_count=5, rnr_retry_count=6)
    # REQ as the server saw it
    assert isinstance(req, ibcm.ReqEvent) and req.type == EventType.REQ_RECEIVED
    assert req.private_data == req_pd
    assert req.listen_id is listener and req.cm_id is sconn and sconn.request is req
    assert req.service_id == svc and sconn.service_id == svc
    assert (req.remote_qpn, req.starting_psn) == (0x110, 0x123456)
    # the receiver's view, as in the kernel: its responder resources are
    # the sender's initiator depth and vice versa
    assert (req.responder_resources, req.initiator_depth) == (3, 4)
    assert (req.retry_count, req.rnr_retry_count) == (5, 6)
    assert (req.remote_cm_response_timeout, req.local_cm_response_timeout) == (16, 16)
    assert req.qp_type == ibcm.QpType.RC and req.port == 1 and req.alternate_path is None
    assert req.primary_path.sgid == srv.gid and req.primary_path.dgid == cli.gid
    assert req.sgid_attr.port_num == 1 and req.sgid_attr.gid == srv.gid
    # REP as the client saw it (accept() defaulted resources from the REQ)
    assert isinstance(rep, ibcm.RepEvent) and rep.private_data == rep_pd
    assert (rep.responder_resources, rep.initiator_depth) == (4, 3)
    assert rep.rnr_retry_count == 7 and rep.target_ack_delay == 15
    assert rtu.private_data == rtu_pd and rtu.type == EventType.RTU_RECEIVED
    # live C state on both sides
    assert conn.state == sconn.state == CmState.ESTABLISHED
    assert conn.remote_id == sconn.local_id and sconn.remote_id == conn.local_id
    assert conn.remote_cm_qpn == 1
    # QP attributes for each transition
    init = sconn.init_qp_attr(QpState.INIT)
    assert init.mask == QpAttrMask.STATE | QpAttrMask.ACCESS_FLAGS | QpAttrMask.PKEY_INDEX | QpAttrMask.PORT
    assert set(init) == {"qp_state", "qp_access_flags", "pkey_index", "port_num"}
    assert init.qp_access_flags == (ibcm.AccessFlags.REMOTE_WRITE | ibcm.AccessFlags.REMOTE_READ
                                    | ibcm.AccessFlags.REMOTE_ATOMIC)
    # as in the kernel: a side's rq_psn is its own starting PSN, its
    # sq_psn the peer's
    rtr = conn.init_qp_attr("RTR")
    assert rtr.dest_qp_num == rep.remote_qpn and rtr.rq_psn == 0x123456
    assert rtr.path_mtu == ibcm.Mtu.MTU_1024 and rtr.ah_attr.has_grh
    assert rtr.ah_attr.type == ibcm.AhAttrType.ROCE and rtr.ah_attr.grh.dgid == srv.gid
    rts = conn.init_qp_attr(QpState.RTS)
    assert rts.mask & QpAttrMask.SQ_PSN and rts.sq_psn == rep.starting_psn
    assert (rts.retry_cnt, rts.rnr_retry) == (5, 7)
    srts = sconn.init_qp_attr("rts")
    assert srts.rnr_retry == 6 and srts.sq_psn == 0x123456
    with pytest.raises(ibcm.CmError) as e:
        conn.init_qp_attr(QpState.SQD)
    assert e.value.errno == errno.EINVAL
    # disconnect with private data
    conn.disconnect(pattern(220, 14))
    assert conn.state in (CmState.DREQ_SENT, CmState.TIMEWAIT)
    dreq = sconn.wait("DREQ_RECEIVED", 5)
    assert dreq.private_data == pattern(220, 14)
    sconn.drep(pattern(224, 15))
    assert sconn.state == CmState.TIMEWAIT
    assert conn.wait(EventType.DREP_RECEIVED, 5).private_data == pattern(224, 15)
    conn.wait(EventType.TIMEWAIT_EXIT, 5)
    sconn.wait(EventType.TIMEWAIT_EXIT, 5)
    assert conn.state == sconn.state == CmState.IDLE
    for c in (conn, sconn, listener):
        c.destroy()
    assert srv.ids == [] and cli.ids == []


def test_server_disconnects(dev_pair):
    srv, cli = dev_pair
    _l, conn, sconn, *_ = establish(srv, cli, 0x2002)
    sconn.disconnect(b"server bye")
    with pytest.raises(ibcm.CmError) as e:
        sconn.disconnect()
    assert e.value.errno == errno.EINVAL and e.value.errno_name == "EINVAL"
    dreq = conn.wait("DREQ_RECEIVED", 5)
    assert dreq.private_data.rstrip(b"\0") == b"server bye"
    conn.drep()
    assert sconn.wait("DREP_RECEIVED", 5).private_data == bytes(224)
    sconn.wait("TIMEWAIT_EXIT", 5)
    conn.wait("TIMEWAIT_EXIT", 5)


def test_reject_with_ari_raises_rejected(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x3003)
    conn = cli.connect(srv.gid, 0x3003, b"let me in", **FAST)
    req = listener.next_request(5)
    req.cm_id.reject(ibcm.RejReason.CONSUMER_DEFINED, ari=pattern(9, 33), private_data=pattern(148, 34))
    assert req.cm_id.state == CmState.IDLE
    with pytest.raises(ibcm.Rejected) as e:
        conn.wait("REP_RECEIVED", 5)
    err = e.value
    assert isinstance(err, ibcm.CmError) and isinstance(err, ConnectionRefusedError)
    assert err.errno == errno.ECONNREFUSED and err.reason == ibcm.RejReason.CONSUMER_DEFINED
    assert err.reason_text == "consumer defined" and "consumer defined" in str(err)
    assert err.ari == pattern(9, 33)
    assert isinstance(err.event, ibcm.RejEvent) and err.event.private_data == pattern(148, 34)
    assert conn.state == CmState.IDLE


def test_reject_event_when_waited_for(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x3004)
    conn = cli.connect(srv.gid, 0x3004, **FAST)
    listener.next_request(5).cm_id.reject("NO_RESOURCES")
    rej = conn.wait(("REP_RECEIVED", "REJ_RECEIVED"), 5)
    assert isinstance(rej, ibcm.RejEvent)
    assert rej.reason == ibcm.RejReason.NO_RESOURCES and rej.reason_text == "no resources" and rej.ari == b""


def test_unknown_service_rej_8(dev_pair):
    srv, cli = dev_pair
    conn = cli.connect(srv.gid, 0x9999, **FAST)
    with pytest.raises(ibcm.Rejected) as e:
        conn.wait("REP_RECEIVED", 5)
    assert e.value.reason == ibcm.RejReason.INVALID_SERVICE_ID
    assert e.value.reason_text == "invalid service ID"


def test_mra_from_a_slow_server(dev_pair):
    """The server's handler calls prepare_mra() and answers 300 ms later,
    well past the client's ~18 ms REQ timeout: the client sees an MRA
    (answering its retransmitted REQ) instead of giving up, then the REP."""
    srv, cli = dev_pair
    accepted = threading.Event()

    def slow(cm_id, event):
        if event.type == EventType.REQ_RECEIVED:
            cm_id.prepare_mra()
            assert cm_id.state == CmState.MRA_REQ_SENT

            def later():
                cm_id.accept(b"sorry for the wait")
                accepted.set()

            threading.Timer(0.3, later).start()

    srv.listen(0x4004, slow, queue=True)
    conn = cli.connect(srv.gid, 0x4004, packet_life_time=8, remote_cm_response_timeout=12,
                       local_cm_response_timeout=12, max_cm_retries=8)
    mra = conn.wait("MRA_RECEIVED", 5)
    assert isinstance(mra, ibcm.MraEvent) and mra.service_timeout >= 12
    assert mra.private_data == bytes(222)
    rep = conn.wait("REP_RECEIVED", 5)
    assert rep.private_data.startswith(b"sorry for the wait") and accepted.wait(5)
    conn.rtu()


def test_comm_est_gives_user_established(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x5005)
    conn = cli.connect(srv.gid, 0x5005, **FAST)
    req = listener.next_request(5)
    sconn = req.cm_id
    sconn.accept()
    conn.wait("REP_RECEIVED", 5)  # ... and hold the RTU back
    time.sleep(0.05)
    assert sconn.state == CmState.REP_SENT
    sconn.notify(ibcm.IbEvent.COMM_EST)
    assert sconn.state == CmState.ESTABLISHED
    ev = sconn.wait("USER_ESTABLISHED", 5)
    assert ev.type == EventType.USER_ESTABLISHED and ev.private_data == b""
    with pytest.raises(ibcm.CmError) as e:
        sconn.notify("COMM_EST")
    assert e.value.errno == errno.EISCONN
    with pytest.raises(ibcm.CmError) as e:
        sconn.notify(ibcm.IbEvent.QP_FATAL)
    assert e.value.errno == errno.EINVAL
    sconn.notify("PATH_MIG")
    conn.rtu()  # late; ignored by the server
    conn.disconnect()
    sconn.wait("DREQ_RECEIVED", 5)
    sconn.drep()
    conn.wait("TIMEWAIT_EXIT", 5)


def test_req_timeout_gives_req_error(addrs):
    a, nobody = addrs.take(2)
    with ibcm.Device(a) as cli:
        conn = cli.connect(nobody, 0x6006, packet_life_time=8, remote_cm_response_timeout=12,
                           local_cm_response_timeout=12, max_cm_retries=2)
        assert conn.state == CmState.REQ_SENT
        with pytest.raises(ibcm.CmError) as e:
            conn.wait("REP_RECEIVED", 5)
        assert e.value.errno == errno.ETIMEDOUT and not isinstance(e.value, ibcm.WaitTimeout)
        ev = e.value.event
        assert isinstance(ev, ibcm.ErrorEvent) and ev.type == EventType.REQ_ERROR
        assert ev.send_status == ibcm.WcStatus.RESP_TIMEOUT_ERR
        assert conn.state == CmState.IDLE


def test_sidr_success_and_unsupported(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x7007)
    q = cli.sidr_request(srv.gid, 0x7007, pattern(216, 40), timeout_ms=500)
    sreq = listener.next_request(5)
    assert isinstance(sreq, ibcm.SidrReqEvent) and sreq.type == EventType.SIDR_REQ_RECEIVED
    assert sreq.listen_id is listener and sreq.service_id == 0x7007
    assert sreq.private_data == pattern(216, 40) and sreq.cm_id.state == CmState.SIDR_REQ_RCVD
    assert sreq.sgid_attr.gid == srv.gid
    sreq.cm_id.sidr_reply(ibcm.SidrStatus.SUCCESS, qp_num=0x777, qkey=0x01234567, info=pattern(20, 41),
                          private_data=pattern(136, 42))
    assert sreq.cm_id.state == CmState.IDLE
    rep = q.wait("SIDR_REP_RECEIVED", 5)
    assert isinstance(rep, ibcm.SidrRepEvent)
    assert (rep.status, rep.qpn, rep.qkey) == (ibcm.SidrStatus.SUCCESS, 0x777, 0x01234567)
    assert rep.info == pattern(20, 41) and rep.private_data == pattern(136, 42)
    assert q.state == CmState.IDLE
    # again on the same id, for a service nobody listens to
    q.sidr_request(srv.gid, 0x7008, timeout_ms=500)
    rep = q.wait("SIDR_REP_RECEIVED", 5)
    assert rep.status == ibcm.SidrStatus.UNSUPPORTED


def test_sidr_timeout_gives_sidr_req_error(addrs):
    a, nobody = addrs.take(2)
    with ibcm.Device(a) as cli:
        q = cli.sidr_request(nobody, 0x7009, timeout_ms=40, max_cm_retries=1)
        with pytest.raises(ibcm.CmError) as e:
            q.wait("SIDR_REP_RECEIVED", 5)
        assert e.value.event.type == EventType.SIDR_REQ_ERROR
        assert e.value.errno == errno.ETIMEDOUT


def test_handler_mode_inherits_handler_and_context(dev_pair):
    srv, cli = dev_pair
    seen = []
    threads = set()

    def handler(cm_id, event):
        seen.append((cm_id.context, event.type))
        threads.add(threading.get_ident())
        assert ibcm.in_callback()
        if event.type == EventType.REQ_RECEIVED:
            assert event.listen_id.context == "ctx" and cm_id is not event.listen_id
            assert cm_id.handler is handler
            cm_id.accept(event.private_data[:8][::-1])
        elif event.type == EventType.DREQ_RECEIVED:
            cm_id.drep()

    listener = srv.listen(0x8008, handler, context="ctx")
    with pytest.raises(RuntimeError):
        listener.next_request(0.1)  # a handler and no queue
    conn = cli.connect(srv.gid, 0x8008, b"abcdefgh", **FAST)
    rep = conn.wait("REP_RECEIVED", 5)
    assert rep.private_data[:8] == b"hgfedcba"
    conn.rtu()
    conn.disconnect()
    conn.wait("DREP_RECEIVED", 5)
    conn.wait("TIMEWAIT_EXIT", 5)
    deadline = time.monotonic() + 5
    while (("ctx", EventType.TIMEWAIT_EXIT) not in seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [t for _c, t in seen] == [EventType.REQ_RECEIVED, EventType.RTU_RECEIVED,
                                     EventType.DREQ_RECEIVED, EventType.TIMEWAIT_EXIT]
    assert threading.get_ident() not in threads
    assert not ibcm.in_callback()


def test_events_iterator(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x9009)
    conn = cli.connect(srv.gid, 0x9009, **FAST)
    req = listener.next_request(5)
    req.cm_id.accept()
    got = []
    for ev in conn.events(timeout=2):
        got.append(ev.type)
        if ev.type == EventType.REP_RECEIVED:
            conn.rtu()
            req.cm_id.wait("RTU_RECEIVED", 5)
            req.cm_id.disconnect()
        elif ev.type == EventType.DREQ_RECEIVED:
            conn.drep()
        elif ev.type == EventType.TIMEWAIT_EXIT:
            break
    assert got == [EventType.REP_RECEIVED, EventType.DREQ_RECEIVED, EventType.TIMEWAIT_EXIT]
    assert list(conn.events(timeout=0.05)) == []
    conn.destroy()
    assert list(conn.events()) == []  # destroyed and drained: ends at once


def test_wait_timeout(dev_pair):
    srv, _cli = dev_pair
    listener = srv.listen(0xA00A)
    t = time.monotonic()
    with pytest.raises(ibcm.WaitTimeout) as e:
        listener.next_request(0.1)
    assert time.monotonic() - t >= 0.09
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, ibcm.CmError)
    assert e.value.errno == errno.ETIMEDOUT


def test_assigned_service_id_and_duplicate_listen(dev_pair):
    srv, _cli = dev_pair
    a = srv.listen()
    assert a.service_id >> 56 == 0x02 and a.state == CmState.LISTEN
    b = srv.listen(0xB00B)
    with pytest.raises(ibcm.CmError) as e:
        srv.listen(0xB00B)
    assert e.value.errno == errno.EBUSY
    with pytest.raises(ibcm.CmError) as e:
        srv.listen(0x0200000000000005)
    assert e.value.errno == errno.EINVAL
    assert set(srv.ids) == {a, b}  # failed listens left nothing behind


# ---------------------------------------------------------------- handlers


def test_handler_exception_destroys_id_and_peer_sees_rej_28(dev_pair, caplog):
    srv, cli = dev_pair

    def bad(cm_id, event):
        raise ValueError("no thanks")

    listener = srv.listen(0xC00C, bad, queue=True)
    with caplog.at_level(logging.ERROR, logger="ibcm"):
        conn = cli.connect(srv.gid, 0xC00C, **FAST)
        with pytest.raises(ibcm.Rejected) as e:
            conn.wait("REP_RECEIVED", 5)
    assert e.value.reason == ibcm.RejReason.CONSUMER_DEFINED
    assert any("no thanks" in (r.exc_text or "") or "ValueError" in (r.exc_text or "") for r in caplog.records)
    assert srv.ids == [listener]  # the new id is gone...
    assert listener.pending() == []  # ... and its REQ was not queued


def test_handler_nonzero_return_destroys_id(dev_pair):
    srv, cli = dev_pair
    made = []

    def refuse(cm_id, event):
        made.append(cm_id)
        return 1

    srv.listen(0xD00D, refuse)
    conn = cli.connect(srv.gid, 0xD00D, **FAST)
    with pytest.raises(ibcm.Rejected) as e:
        conn.wait("REP_RECEIVED", 5)
    assert e.value.reason == 28
    assert made and made[0].destroyed
    with pytest.raises(ibcm.CmError) as e:
        made[0].state
    assert e.value.errno == errno.EINVAL


def test_destroy_inside_own_handler_is_deferred(dev_pair):
    srv, cli = dev_pair
    made = []

    def handler(cm_id, event):
        cm_id.destroy()  # deferred: the library refuses it here
        made.append(cm_id.state)  # still alive until we return

    srv.listen(0xE00E, handler)
    conn = cli.connect(srv.gid, 0xE00E, **FAST)
    with pytest.raises(ibcm.Rejected) as e:
        conn.wait("REP_RECEIVED", 5)
    assert e.value.reason == ibcm.RejReason.CONSUMER_DEFINED
    assert made == [CmState.REQ_RCVD]
    assert len(srv.ids) == 1


def test_destroy_other_id_and_blocking_calls_inside_handler(dev_pair):
    """A handler may destroy a different id at once; wait() and close() in a
    handler raise instead of deadlocking."""
    srv, cli = dev_pair
    spare = srv.create_id()
    outcome = {}

    def handler(cm_id, event):
        spare.destroy()
        outcome["spare"] = spare.destroyed
        for name, fn in (("wait", lambda: cm_id.wait("RTU_RECEIVED", 1)), ("close", srv.close)):
            try:
                fn()
            except (RuntimeError, ibcm.CmError) as e:
                outcome[name] = type(e).__name__
        cm_id.reject()

    srv.listen(0xF00F, handler, queue=True)
    conn = cli.connect(srv.gid, 0xF00F, **FAST)
    with pytest.raises(ibcm.Rejected):
        conn.wait("REP_RECEIVED", 5)
    assert outcome == {"spare": True, "wait": "RuntimeError", "close": "CmError"}
    assert not srv.closed


def test_device_close_destroys_everything(addrs):
    a, b = addrs.take(2)
    srv = ibcm.Device(a)
    cli = ibcm.Device(b)
    try:
        listener, conn, sconn, *_ = establish(srv, cli, 0x10010)
        srv.close()  # DREQ for the connection, then the device goes
        assert srv.closed and listener.destroyed and sconn.destroyed
        conn.wait("DREQ_RECEIVED", 5)
        with pytest.raises(ibcm.CmError) as e:
            srv.create_id()
        assert e.value.errno == errno.ENODEV
        srv.close()  # idempotent
    finally:
        cli.close()
        srv.close()


def test_loop_fabric_and_bare_address_names(addrs):
    """loop:<ip> devices (the in-process fabric) work the same way; a bare
    IP address means soft:<ip>."""
    with ibcm.Device("loop:10.77.0.1") as s, ibcm.Device("loop:10.77.0.2") as c:
        _l, conn, sconn, req, rep, _rtu = establish(s, c, 0x11011, b"over loop", b"back")
        assert req.private_data.startswith(b"over loop") and rep.private_data.startswith(b"back")
        assert s.gid.ipv4_mapped == ipaddress.ip_address("10.77.0.1")
    ip = addrs.take()
    with ibcm.Device(ip) as d:
        assert d.name == f"soft:{ip}" and d.gid.ipv4_mapped == ipaddress.ip_address(ip)
        with pytest.raises(TypeError):
            d.create_id().rtu("text")  # bytes only


def test_device_counters(dev_pair):
    srv, cli = dev_pair
    establish(srv, cli, 0x12012, b"count me")
    cli.connect(srv.gid, 0x12013, **FAST).wait("REJ_RECEIVED", 5)  # no listener: REJ 8
    cs, cc = srv.counters(), cli.counters()
    assert cc["tx"]["req"] == 2 and cs["rx"]["req"] == 2
    assert cs["tx"]["rep"] == 1 and cc["rx"]["rep"] == 1 and cs["rx"]["rtu"] == 1
    assert cs["rej_tx"][ibcm.RejReason.INVALID_SERVICE_ID] == 1
    assert cc["rej_rx"][ibcm.RejReason.INVALID_SERVICE_ID] == 1
    assert set(cs["drops"]) >= {"malformed", "duplicate", "overload"}
    assert cc["ids_created"] == 2 and cs["live_ids"] == 2  # listener + connection
