"""Bad arguments, wrong states, destroyed ids and NULL-ish pointers: the
Pythonic layer raises CmError with the library's errno; the raw layer
returns it."""

import ctypes
import errno
import os
import time

import pytest

import ibcm
from conftest import FAST, establish
from ibcm import raw


def expect(err, fn, *args, **kw):
    with pytest.raises(ibcm.CmError) as e:
        fn(*args, **kw)
    assert e.value.errno == err, e.value
    return e.value


def test_private_data_too_long(dev_pair):
    srv, cli = dev_pair
    idle = cli.create_id()
    # one byte over each limit: refused by the library
    e = expect(errno.EINVAL, idle.send_req, srv.gid, 0x1, bytes(93), **FAST)
    assert e.call == "ib_send_cm_req" and "EINVAL" in str(e)
    expect(errno.EINVAL, idle.sidr_request, srv.gid, 0x1, bytes(217))
    # more than a u8 can say: refused before reaching C
    expect(errno.EINVAL, idle.send_req, srv.gid, 0x1, bytes(256), **FAST)
    assert idle.state == ibcm.CmState.IDLE

    listener = srv.listen(0x11)
    conn = cli.connect(srv.gid, 0x11, bytes(92), **FAST)  # exactly the limit
    req = listener.next_request(5)
    sconn = req.cm_id
    expect(errno.EINVAL, sconn.accept, bytes(197))
    expect(errno.EINVAL, sconn.reject, ari=bytes(73))
    expect(errno.EINVAL, sconn.reject, private_data=bytes(149))
    sconn.accept(bytes(196))
    conn.wait("REP_RECEIVED", 5)
    expect(errno.EINVAL, conn.rtu, bytes(225))
    conn.rtu(bytes(224))
    sconn.wait("RTU_RECEIVED", 5)
    expect(errno.EINVAL, conn.disconnect, bytes(221))
    conn.disconnect(bytes(220))
    sconn.wait("DREQ_RECEIVED", 5)
    expect(errno.EINVAL, sconn.drep, bytes(225))
    sconn.drep(bytes(224))


def test_sidr_reply_limits(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x12)
    cli.sidr_request(srv.gid, 0x12)
    s = listener.next_request(5).cm_id
    expect(errno.EINVAL, s.sidr_reply, info=bytes(73))
    expect(errno.EINVAL, s.sidr_reply, private_data=bytes(137))
    s.sidr_reply(info=bytes(72), private_data=bytes(136))


def test_wrong_state(dev_pair):
    srv, cli = dev_pair
    idle = cli.create_id()
    for call in (idle.rtu, idle.disconnect, idle.drep, idle.accept, idle.prepare_mra, idle.sidr_reply):
        expect(errno.EINVAL, call)
    expect(errno.EINVAL, idle.init_qp_attr, "RTR")
    expect(errno.EINVAL, idle.notify, "COMM_EST")
    listener = srv.listen(0x13)
    expect(errno.EINVAL, listener.send_req, cli.gid, 0x13, **FAST)
    expect(errno.EINVAL, listener.listen, 0x14)
    _l, conn, sconn, *_ = establish(srv, cli, 0x15)
    expect(errno.EINVAL, conn.rtu)  # again
    expect(errno.EINVAL, sconn.accept)
    expect(errno.EINVAL, conn.send_req, srv.gid, 0x15, **FAST)


def test_destroyed_id(dev_pair):
    srv, cli = dev_pair
    c = cli.create_id()
    c.destroy()
    c.destroy()  # no-op
    assert c.destroyed and "destroyed" in repr(c) and cli.ids == []
    for call in (c.rtu, c.disconnect, c.drep, c.accept, c.reject, c.prepare_mra, c.notify, c.sidr_reply):
        e = expect(errno.EINVAL, call)
        assert "destroyed" in e.strerror
    expect(errno.EINVAL, c.send_req, srv.gid, 1)
    expect(errno.EINVAL, c.listen, 1)
    expect(errno.EINVAL, c.init_qp_attr, "INIT")
    for prop in ("state", "local_id", "remote_id", "service_id", "lap_state"):
        expect(errno.EINVAL, getattr, c, prop)
    with pytest.raises(ibcm.CmError):
        c.wait("REP_RECEIVED", 1)


def test_closed_device(addrs):
    d = ibcm.Device(addrs.take())
    d.close()
    expect(errno.ENODEV, d.create_id)
    expect(errno.ENODEV, d.query_gid)
    expect(errno.ENODEV, d.path_to, "127.0.0.1")


def test_device_errors(addrs):
    ip = addrs.take()
    e = expect(errno.EINVAL, ibcm.Device, "soft:not-an-ip")
    assert e.call == "ibcm_open_device"
    expect(errno.EINVAL, ibcm.Device, "bogus:1.2.3.4")
    with ibcm.Device(ip) as d:
        if os.environ.get("IBCM_SERVICE") == "required":
            # The host CM service shares a device between its openers.
            with ibcm.Device(ip):
                pass
        else:
            expect(errno.EADDRINUSE, ibcm.Device, f"soft:{ip}")
        expect(errno.EINVAL, d.query_gid, 2, 0)
        expect(errno.EINVAL, d.query_gid, 1, 1)
        expect(errno.EINVAL, d.path_to, "127.0.0.1", port=2)
    expect(errno.EINVAL, ibcm.gid_from_string, "not an ip")
    with pytest.raises(ValueError):
        ibcm.to_gid(b"short")


def test_bad_enum_arguments(dev_pair):
    _srv, cli = dev_pair
    c = cli.create_id()
    with pytest.raises(ValueError):
        c.init_qp_attr("NO_SUCH_STATE")
    with pytest.raises(ValueError):
        c.notify("NOT_AN_EVENT")
    with pytest.raises(ValueError):
        c.wait("NOT_AN_EVENT", 0)


def test_wait_needs_a_queue(dev_pair):
    _srv, cli = dev_pair
    c = cli.create_id(lambda cm_id, ev: None)
    with pytest.raises(RuntimeError):
        c.wait("REP_RECEIVED", 0.01)
    q = cli.create_id(lambda cm_id, ev: None, queue=True)
    with pytest.raises(ibcm.WaitTimeout):
        q.wait("REP_RECEIVED", 0.01)


# ------------------------------------------------------------- raw layer


def test_raw_null_and_foreign_pointers(addrs):
    assert raw.ib_cm_listen(None, 0) == -errno.EINVAL
    assert raw.ib_send_cm_rtu(None, None, 0) == -errno.EINVAL
    assert raw.ib_send_cm_req(None, None) == -errno.EINVAL
    assert raw.ib_prepare_cm_mra(None) == -errno.EINVAL
    assert raw.ib_cm_notify(None, raw.IB_EVENT_COMM_EST) == -errno.EINVAL
    mask = ctypes.c_int()
    assert raw.ib_cm_init_qp_attr(None, ctypes.byref(raw.ib_qp_attr()), ctypes.byref(mask)) == -errno.EINVAL
    p = raw.ib_create_cm_id(None, raw.ib_cm_handler(lambda i, e: 0), None)
    assert raw.IS_ERR(p) and raw.PTR_ERR(p) == -errno.EINVAL
    fake = raw.ib_device()
    p = raw.ib_create_cm_id(ctypes.pointer(fake), raw.ib_cm_handler(lambda i, e: 0), None)
    assert raw.PTR_ERR(p) == -errno.EINVAL
    fake_id = raw.ib_cm_id()
    assert raw.ib_send_cm_dreq(ctypes.pointer(fake_id), None, 0) == -errno.EINVAL
    assert raw.ib_send_cm_rtu(raw.ERR_PTR(-errno.ENOMEM, ctypes.POINTER(raw.ib_cm_id)), None, 0) == -errno.EINVAL
    d = raw.ibcm_open_device(b"soft:not-an-ip")
    assert raw.IS_ERR(d) and raw.PTR_ERR(d) == -errno.EINVAL
    assert raw.ibcm_gid_from_string(b"nope", ctypes.byref(raw.ib_gid())) == -errno.EINVAL
    assert raw.ibcm_reject_msg(raw.IB_CM_REJ_STALE_CONN) == b"stale conn"
    assert raw.ibcm_reject_msg(34) == raw.ibcm_reject_msg(-1) == b"unrecognized reason"
    assert ibcm.reject_msg(ibcm.RejReason.INVALID_SERVICE_ID) == "invalid service ID"


def test_raw_destroyed_id_and_destroy_in_own_callback(addrs):
    """With the raw API: a freed id gives -EINVAL; ib_destroy_cm_id from
    the id's own callback is refused (the id survives it)."""
    a, b = addrs.take(2)
    sdev = raw.ibcm_open_device(f"soft:{a}".encode())
    cdev = raw.ibcm_open_device(f"soft:{b}".encode())
    assert not raw.IS_ERR(sdev) and not raw.IS_ERR(cdev)
    seen = []

    @raw.ib_cm_handler
    def handler(cm_id, event):
        if event.contents.event == raw.IB_CM_REQ_RECEIVED:
            raw.ib_destroy_cm_id(cm_id)  # refused
            seen.append(cm_id.contents.state)
            return 1  # the supported way
        return 0

    listener = raw.ib_create_cm_id(sdev, handler, None)
    assert raw.ib_cm_listen(listener, raw.cpu_to_be64(0x77)) == 0
    client = raw.ib_create_cm_id(cdev, handler, None)
    dgid = raw.ib_gid()
    assert raw.ibcm_gid_from_string(a.encode(), ctypes.byref(dgid)) == 0
    path = raw.sa_path_rec()
    assert raw.ibcm_init_path(cdev, 1, ctypes.byref(dgid), ctypes.byref(path)) == 0
    req = raw.ib_cm_req_param()
    req.primary_path = ctypes.pointer(path)
    req.service_id = raw.cpu_to_be64(0x77)
    req.qp_num, req.qp_type, req.max_cm_retries = 0x100, raw.IB_QPT_RC, 3
    req.remote_cm_response_timeout = req.local_cm_response_timeout = 16
    assert raw.ib_send_cm_req(client, ctypes.byref(req)) == 0
    deadline = time.monotonic() + 5
    while client.contents.state != raw.IB_CM_IDLE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [raw.IB_CM_REQ_RCVD]  # still alive after the refused destroy
    assert client.contents.state == raw.IB_CM_IDLE  # REJ received
    raw.ib_destroy_cm_id(client)
    assert raw.ib_send_cm_rtu(client, None, 0) == -errno.EINVAL  # freed
    raw.ib_destroy_cm_id(listener)
    raw.ibcm_close_device(cdev)
    raw.ibcm_close_device(sdev)
