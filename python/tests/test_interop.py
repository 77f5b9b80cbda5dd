"""Python against C: tests/cm_peer.c (a separate process using only the C
API, built by the test against include/ and the library under test) is the
other side of every connection."""

import errno
import os

import pytest

import ibcm
from conftest import FAST, pattern
from ibcm import CmState, EventType

# cm_peer's fixed REQ parameters (see cm_peer.c "connect")
PEER_REQ = dict(responder_resources=4, initiator_depth=4, rcrt=14, lcrt=14, retry=5, rnr=6)


@pytest.fixture
def dev(addrs):
    with ibcm.Device(addrs.take()) as d:
        yield d


def test_python_server_c_client(dev, c_peer):
    peer = c_peer()
    listener = dev.listen(0x5001)
    cid = peer.cmd("connect", dev.gid.ipv4_mapped, "5001", pattern(92, 1), 8, 15, "110", "123456")
    req = listener.next_request(5)
    assert req.private_data == pattern(92, 1) and req.service_id == 0x5001
    assert (req.remote_qpn, req.starting_psn) == (0x110, 0x123456)
    assert (req.responder_resources, req.initiator_depth) == (4, 4)
    assert (req.local_cm_response_timeout, req.remote_cm_response_timeout) == (14, 14)
    assert (req.retry_count, req.rnr_retry_count) == (5, 6)
    assert req.primary_path.dgid == ibcm.to_gid(peer.ip)
    # rebuilt from the REQ's local ACK timeout (which adds the sender's ACK
    # delay to the packet life time 8), as the kernel does
    assert req.primary_path.packet_life_time >= 8
    conn = req.cm_id
    conn.accept(pattern(196, 2), qp_num=0x220, starting_psn=0x5A5A5A, rnr_retry_count=3)
    rep = peer.event(cid, "REP_RECEIVED")
    assert rep["pdata"] == pattern(196, 2)
    assert (rep["qpn"], rep["psn"], rep["rnr"], rep["tad"]) == ("220", "5a5a5a", "3", "15")
    peer.cmd("rtu", cid, pattern(224, 3))
    assert conn.wait("RTU_RECEIVED", 5).private_data == pattern(224, 3)
    assert conn.state == CmState.ESTABLISHED
    assert conn.init_qp_attr("RTR").dest_qp_num == 0x110
    peer.cmd("dreq", cid, b"c says bye")
    assert conn.wait("DREQ_RECEIVED", 5).private_data.rstrip(b"\0") == b"c says bye"
    conn.drep(b"python agrees")
    assert peer.event(cid, "DREP_RECEIVED")["pdata"].rstrip(b"\0") == b"python agrees"
    peer.event(cid, "TIMEWAIT_EXIT")
    conn.wait("TIMEWAIT_EXIT", 5)


def test_python_rejects_c_with_ari(dev, c_peer):
    peer = c_peer()
    listener = dev.listen(0x5002)
    cid = peer.cmd("connect", dev.gid.ipv4_mapped, "5002", b"", 8, 15, "111", "1")
    req = listener.next_request(5)
    assert req.private_data == bytes(92)
    req.cm_id.reject(ibcm.RejReason.CONSUMER_DEFINED, ari=b"\x01\x02\x03", private_data=b"go away")
    rej = peer.event(cid, "REJ_RECEIVED")
    assert (rej["reason"], rej["ari"]) == ("28", b"\x01\x02\x03")
    assert rej["pdata"].rstrip(b"\0") == b"go away" and len(rej["pdata"]) == 148


def test_python_handler_raises_c_sees_rej_28(dev, c_peer):
    peer = c_peer()

    def handler(cm_id, event):
        raise RuntimeError("handler failure on purpose")

    dev.listen(0x5003, handler)
    cid = peer.cmd("connect", dev.gid.ipv4_mapped, "5003", b"", 8, 15, "112", "1")
    assert peer.event(cid, "REJ_RECEIVED")["reason"] == "28"
    assert len(dev.ids) == 1


def test_python_sidr_server_c_client(dev, c_peer):
    peer = c_peer()
    listener = dev.listen(0x5004)
    cid = peer.cmd("sidr", dev.gid.ipv4_mapped, "5004", pattern(216, 40))
    sreq = listener.next_request(5)
    assert isinstance(sreq, ibcm.SidrReqEvent) and sreq.private_data == pattern(216, 40)
    sreq.cm_id.sidr_reply(qp_num=0x777, qkey=0x1234567, info=pattern(20, 41), private_data=pattern(136, 42))
    rep = peer.event(cid, "SIDR_REP_RECEIVED")
    assert (rep["status"], rep["qpn"], rep["qkey"]) == ("0", "777", "1234567")
    assert rep["info"] == pattern(20, 41) and rep["pdata"] == pattern(136, 42)
    cid2 = peer.cmd("sidr", dev.gid.ipv4_mapped, "5999", b"")
    assert peer.event(cid2, "SIDR_REP_RECEIVED")["status"] == str(int(ibcm.SidrStatus.UNSUPPORTED))


def test_c_server_python_client(dev, c_peer):
    peer = c_peer()
    lid = peer.cmd("listen", "6001")
    conn = dev.connect(peer.ip, 0x6001, pattern(92, 5), qp_num=0x330, starting_psn=0xABCDE,
                       responder_resources=2, initiator_depth=3, retry_count=4, rnr_retry_count=5, **FAST)
    req = peer.event(None, "REQ_RECEIVED")
    assert req["listen"] == str(lid) and req["svc"] == "6001" and req["pdata"] == pattern(92, 5)
    assert (req["qpn"], req["psn"], req["rres"], req["idepth"]) == ("330", "abcde", "3", "2")
    assert (req["retry"], req["rnr"], req["rcrt"], req["lcrt"]) == ("4", "5", "16", "16")
    assert req["state"] == str(int(CmState.REQ_RCVD))
    sid = req["id"]
    peer.cmd("rep", sid, pattern(196, 6), "440", "55555")
    rep = conn.wait("REP_RECEIVED", 5)
    assert rep.private_data == pattern(196, 6) and (rep.remote_qpn, rep.starting_psn) == (0x440, 0x55555)
    assert rep.rnr_retry_count == 7 and (rep.responder_resources, rep.initiator_depth) == (4, 4)
    conn.rtu(pattern(224, 7))
    assert peer.event(sid, "RTU_RECEIVED")["pdata"] == pattern(224, 7)
    assert peer.cmd("state", sid) == int(CmState.ESTABLISHED)
    assert conn.init_qp_attr("RTS").sq_psn == 0x55555
    peer.cmd("dreq", sid, pattern(220, 8))
    assert conn.wait("DREQ_RECEIVED", 5).private_data == pattern(220, 8)
    conn.drep(pattern(224, 9))
    assert peer.event(sid, "DREP_RECEIVED")["pdata"] == pattern(224, 9)
    conn.wait("TIMEWAIT_EXIT", 5)
    peer.event(sid, "TIMEWAIT_EXIT")


def test_c_rejects_python_with_ari(dev, c_peer):
    peer = c_peer()
    peer.cmd("listen", "6002")
    conn = dev.connect(peer.ip, 0x6002, **FAST)
    req = peer.event(None, "REQ_RECEIVED")
    peer.cmd("rej", req["id"], 28, pattern(9, 33), pattern(148, 34))
    with pytest.raises(ibcm.Rejected) as e:
        conn.wait("REP_RECEIVED", 5)
    assert e.value.reason == 28 and e.value.ari == pattern(9, 33)
    assert e.value.event.private_data == pattern(148, 34)


def test_c_mra_then_rep(dev, c_peer):
    peer = c_peer()
    peer.cmd("listen", "6003")
    # REQ resent every ~70 ms, 16 times: plenty of time for the "mra" command
    conn = dev.connect(peer.ip, 0x6003, packet_life_time=8, remote_cm_response_timeout=14,
                       local_cm_response_timeout=14, max_cm_retries=15)
    req = peer.event(None, "REQ_RECEIVED")
    peer.cmd("mra", req["id"])  # the MRA answers our next retransmission
    mra = conn.wait("MRA_RECEIVED", 5)
    assert mra.service_timeout > 0
    assert conn.state in (CmState.MRA_REQ_RCVD,)
    peer.cmd("rep", req["id"], b"", "441", "1")
    conn.wait("REP_RECEIVED", 5)
    conn.rtu()
    peer.event(req["id"], "RTU_RECEIVED")


def test_c_comm_est_and_python_user_established(dev, c_peer):
    peer = c_peer()
    lid = peer.cmd("listen", "6004")
    assert lid == 1
    conn = dev.connect(peer.ip, 0x6004, **FAST)
    sid = peer.event(None, "REQ_RECEIVED")["id"]
    peer.cmd("rep", sid, b"", "442", "2")
    conn.wait("REP_RECEIVED", 5)
    peer.cmd("notify", sid, int(ibcm.IbEvent.COMM_EST))
    peer.event(sid, "USER_ESTABLISHED")
    assert peer.cmd("notify", sid, int(ibcm.IbEvent.COMM_EST), ok=False) == -errno.EISCONN
    conn.rtu()


def test_c_sidr_server_python_client(dev, c_peer):
    peer = c_peer()
    peer.cmd("listen", "6005")
    q = dev.sidr_request(peer.ip, 0x6005, b"which qp?")
    ev = peer.event(None, "SIDR_REQ_RECEIVED")
    assert ev["svc"] == "6005" and ev["pdata"].rstrip(b"\0") == b"which qp?"
    peer.cmd("sidrrep", ev["id"], 0, "999", "abc", b"inf", b"pd")
    rep = q.wait("SIDR_REP_RECEIVED", 5)
    assert (rep.status, rep.qpn, rep.qkey, rep.info) == (ibcm.SidrStatus.SUCCESS, 0x999, 0xABC, b"inf")
    assert rep.private_data.rstrip(b"\0") == b"pd"


# A peer process that vanishes looks like a vanished host only in-process:
# nobody answers for it any more, and its peers time out. Through the host
# CM service (IBCM_SERVICE=required, `make test-service`) the service
# destroys the ids of a process that dies, at once, as the kernel destroys
# those of a process whose /dev/infiniband/ucm file closes: its peers get
# what ib_destroy_cm_id sends (docs/SERVICE.md, cli/tests/service.rs),
# within a second of the kill.
THROUGH_SERVICE = os.environ.get("IBCM_SERVICE") == "required"


def test_rep_error_when_the_c_client_vanishes(dev, c_peer):
    peer = c_peer()
    listener = dev.listen(0x5005)
    peer.cmd("connect", dev.gid.ipv4_mapped, "5005", b"", 8, 2, "113", "1")
    req = listener.next_request(5)
    peer.kill()
    if THROUGH_SERVICE:
        # The client's id was in REQ_SENT: its destroy sends
        # REJ(IB_CM_REJ_TIMEOUT) with its own node GUID as the ARI, which
        # reaches the REQ's receiver in REQ_RCVD before any REP is sent.
        with pytest.raises(ibcm.Rejected) as r:
            req.cm_id.wait("RTU_RECEIVED", 1)
        assert r.value.reason == ibcm.RejReason.TIMEOUT
        assert r.value.ari == req.remote_ca_guid.to_bytes(8, "big")
        assert req.cm_id.state == CmState.IDLE
        return
    req.cm_id.accept()  # nobody will answer the REP
    with pytest.raises(ibcm.CmError) as e:
        req.cm_id.wait("RTU_RECEIVED", 5)
    assert e.value.event.type == EventType.REP_ERROR
    assert e.value.event.send_status == ibcm.WcStatus.RESP_TIMEOUT_ERR


def test_dreq_error_when_the_c_server_vanishes(dev, c_peer):
    peer = c_peer()
    peer.cmd("listen", "6006")
    conn = dev.connect(peer.ip, 0x6006, max_cm_retries=2, **FAST)
    sid = peer.event(None, "REQ_RECEIVED")["id"]
    peer.cmd("rep", sid, b"", "443", "3")
    conn.wait("REP_RECEIVED", 5)
    conn.rtu()
    peer.event(sid, "RTU_RECEIVED")
    peer.kill()
    if THROUGH_SERVICE:
        # The server's id was ESTABLISHED: its destroy sends one DREQ
        # without private data (never resent) and enters timewait; the
        # DREP answering it finds nobody, and is not needed.
        dreq = conn.wait("DREQ_RECEIVED", 1)
        assert dreq.private_data == bytes(len(dreq.private_data))
        assert conn.state == CmState.DREQ_RCVD
        conn.drep()
        assert conn.state == CmState.TIMEWAIT
        conn.wait("TIMEWAIT_EXIT", 5)
        return
    conn.disconnect()
    with pytest.raises(ibcm.CmError) as e:
        conn.wait("DREP_RECEIVED", 5)
    assert e.value.event.type == EventType.DREQ_ERROR
    conn.wait("TIMEWAIT_EXIT", 5)  # timewait follows anyway
