"""Regression tests for library behaviour found while writing the bindings."""

from conftest import FAST
from ibcm import CmState


def test_listener_public_fields_survive_a_req(dev_pair):
    srv, cli = dev_pair
    listener = srv.listen(0x1D1D)
    before = (listener.state, listener.local_id, listener.remote_id)
    cli.connect(srv.gid, 0x1D1D, **FAST)
    req = listener.next_request(5)
    assert req.cm_id.state == CmState.REQ_RCVD
    assert (listener.state, listener.local_id, listener.remote_id) == before == (CmState.LISTEN, before[1], 0)
