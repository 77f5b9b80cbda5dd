"""asyncio: Device.connect_async, CmId.wait_async / get_event_async /
events_async / next_request_async between two devices of one process.

Plain tests driving ``asyncio.run`` (no pytest plugin needed)."""

import asyncio
import errno
import time

import pytest

import ibcm
from conftest import FAST, pattern
from ibcm import CmState, EventType


def run(coro, timeout=20):
    """Runs ``coro`` on a fresh loop, failing the test instead of hanging."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


class LoopSteps:
    """Counts the event loop's iterations (to show a wait does not poll)."""

    def __init__(self, loop):
        self.count = 0
        inner = loop._run_once

        def counted():
            self.count += 1
            inner()

        loop._run_once = counted


def test_connect_accept_events_disconnect(dev_pair):
    srv, cli = dev_pair
    svc = 0x1A5C001

    async def server(listener):
        req = await listener.next_request_async(5)
        assert isinstance(req, ibcm.ReqEvent) and req.listen_id is listener
        assert req.private_data == pattern(92, 1)
        sconn = req.cm_id
        sconn.accept(pattern(196, 2))
        rtu = await sconn.wait_async(EventType.RTU_RECEIVED, 5)
        assert rtu.private_data == pattern(224, 3)
        seen = []
        async for ev in sconn.events_async(5):
            seen.append(ev.type)
            if ev.type == EventType.DREQ_RECEIVED:
                assert ev.private_data.rstrip(b"\0") == b"bye"
                sconn.drep(b"see you")
            elif ev.type == EventType.TIMEWAIT_EXIT:
                break
        assert seen == [EventType.DREQ_RECEIVED, EventType.TIMEWAIT_EXIT]
        sconn.destroy()
        # a destroyed, drained id ends the iteration at once
        assert [ev async for ev in sconn.events_async()] == []

    async def client():
        conn, rep = await cli.connect_async(srv.gid, svc, pattern(92, 1), timeout=5,
                                            rtu_private_data=pattern(224, 3), **FAST)
        assert isinstance(rep, ibcm.RepEvent) and rep.private_data == pattern(196, 2)
        assert conn.state == CmState.ESTABLISHED and rep.cm_id is conn
        conn.disconnect(b"bye")
        drep = await conn.wait_async("DREP_RECEIVED", 5)
        assert drep.private_data.rstrip(b"\0") == b"see you"
        await conn.wait_async(EventType.TIMEWAIT_EXIT, 5)
        assert conn.state == CmState.IDLE
        conn.destroy()

    async def main():
        listener = srv.listen(svc)
        await asyncio.gather(server(listener), client())
        listener.destroy()

    run(main())
    assert srv.ids == [] and cli.ids == []


def test_many_concurrent_connections_one_loop(dev_pair):
    """Ten clients and one accepting task share a loop; every event reaches
    the right awaiter."""
    srv, cli = dev_pair
    svc, n = 0x1A5C002, 10

    async def acceptor(listener):
        conns = []
        for _ in range(n):
            req = await listener.next_request_async(5)
            req.cm_id.accept(req.private_data[:4])
            conns.append(req.cm_id)
        await asyncio.gather(*(c.wait_async("RTU_RECEIVED", 5) for c in conns))
        return conns

    async def client(i):
        conn, rep = await cli.connect_async(srv.gid, svc, i.to_bytes(4, "big"), timeout=5, **FAST)
        assert rep.private_data[:4] == i.to_bytes(4, "big")
        return conn

    async def main():
        listener = srv.listen(svc)
        server_ids, *clients = await asyncio.gather(acceptor(listener), *(client(i) for i in range(n)))
        assert all(c.state == CmState.ESTABLISHED for c in clients + server_ids)
        assert sorted(c.remote_id for c in clients) == sorted(s.local_id for s in server_ids)

    run(main())


def test_wait_does_not_poll(dev_pair):
    """While nothing arrives the loop sleeps: a 0.4 s wait takes a handful
    of loop iterations, and an event from the library's thread wakes it."""
    srv, cli = dev_pair
    svc = 0x1A5C003

    async def main():
        steps = LoopSteps(asyncio.get_running_loop())
        listener = srv.listen(svc)
        t = time.monotonic()
        with pytest.raises(ibcm.WaitTimeout) as e:
            await listener.next_request_async(0.4)
        assert time.monotonic() - t >= 0.39
        assert e.value.errno == errno.ETIMEDOUT and e.value.call == "next_request_async"
        assert steps.count < 10, steps.count
        assert listener._waiters == []

        waiting = asyncio.ensure_future(listener.next_request_async(5))
        await asyncio.sleep(0.2)  # the waiter is parked; nothing happens meanwhile
        before = steps.count
        await asyncio.sleep(0.2)
        assert steps.count - before < 5, steps.count - before
        conn = cli.connect(srv.gid, svc, b"wake up", **FAST)
        t = time.monotonic()
        req = await waiting
        assert time.monotonic() - t < 1.0
        assert req.private_data.startswith(b"wake up")
        req.cm_id.reject()
        with pytest.raises(ibcm.Rejected):
            await conn.wait_async("REP_RECEIVED", 5)

    run(main())


def test_cancelled_waiter_loses_no_event(dev_pair):
    srv, cli = dev_pair
    svc = 0x1A5C004

    async def main():
        listener = srv.listen(svc)
        conn = cli.connect(srv.gid, svc, **FAST)
        # 1. cancelled while parked: the waiter is gone, nothing consumed
        task = asyncio.ensure_future(conn.wait_async("REP_RECEIVED"))
        await asyncio.sleep(0.05)
        assert len(conn._waiters) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert conn._waiters == []
        # 2. cancelled after the event was queued and its wake-up scheduled,
        # before the task ran again: the event stays queued
        task = asyncio.ensure_future(conn.wait_async("REP_RECEIVED"))
        await asyncio.sleep(0.05)
        req = await listener.next_request_async(5)
        req.cm_id.accept(b"still here")
        deadline = time.monotonic() + 5
        while not conn.pending():  # block the loop: the task cannot run
            assert time.monotonic() < deadline, "no REP"
            time.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [ev.type for ev in conn.pending()] == [EventType.REP_RECEIVED]
        rep = await conn.wait_async("REP_RECEIVED", 5)
        assert rep.private_data.startswith(b"still here")
        assert conn._waiters == [] and conn.pending() == []

    run(main())


def test_connect_async_cancelled_or_timed_out_leaves_nothing(dev_pair):
    """A connect_async whose task is cancelled (here by wait_for) destroys
    its id, which rejects the connection at the server; so does its own
    timeout.  A REJ raises Rejected, again leaving no id."""
    srv, cli = dev_pair
    svc = 0x1A5C005

    async def main():
        listener = srv.listen(svc)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(cli.connect_async(srv.gid, svc, b"slow", **FAST), 0.3)
        assert cli.ids == []
        req = await listener.next_request_async(5)
        rej = await req.cm_id.wait_async("REJ_RECEIVED", 5)
        assert rej.reason == ibcm.RejReason.TIMEOUT

        with pytest.raises(ibcm.WaitTimeout) as e:
            await cli.connect_async(srv.gid, svc, b"slower", timeout=0.2, **FAST)
        assert e.value.call == "wait_async"
        assert cli.ids == []
        req = await listener.next_request_async(5)
        await req.cm_id.wait_async("REJ_RECEIVED", 5)

        with pytest.raises(ibcm.Rejected) as e:
            await cli.connect_async(srv.gid, svc + 1, timeout=5, **FAST)  # no listener
        assert e.value.reason == ibcm.RejReason.INVALID_SERVICE_ID
        assert cli.ids == []

    run(main())


def test_close_device_wakes_pending_awaiters(addrs):
    a, b, nobody = addrs.take(3)
    svc = 0x1A5C006

    async def main():
        with ibcm.Device(a) as srv, ibcm.Device(b) as cli:
            listener = srv.listen(svc)
            accepting = asyncio.ensure_future(listener.next_request_async())
            # a REQ to an address without a device: never answered
            connecting = asyncio.ensure_future(cli.connect_async(nobody, svc, **FAST))
            idle = cli.create_id()
            iterating = asyncio.ensure_future(_collect(idle.events_async()))
            getting = asyncio.ensure_future(idle.get_event_async())
            await asyncio.sleep(0.05)
            assert not any(t.done() for t in (accepting, connecting, iterating, getting))
            srv.close()
            with pytest.raises(ibcm.CmError) as e:
                await accepting
            assert e.value.errno == errno.ENODEV and e.value.call == "next_request_async"
            assert "device was closed" in str(e.value)
            cli.close()
            for t in (connecting, getting):
                with pytest.raises(ibcm.CmError) as e:
                    await t
                assert e.value.errno == errno.ENODEV
            assert await iterating == []  # the iteration ends, like events()
            assert cli.ids == [] and srv.ids == []

    run(main())


def test_destroyed_id_wakes_awaiter_with_einval(dev_pair):
    _srv, cli = dev_pair

    async def main():
        idle = cli.create_id()
        waiting = asyncio.ensure_future(idle.wait_async("REP_RECEIVED"))
        await asyncio.sleep(0.05)
        idle.destroy()
        with pytest.raises(ibcm.CmError) as e:
            await waiting
        assert e.value.errno == errno.EINVAL
        with pytest.raises(ibcm.CmError):
            await idle.get_event_async()

    run(main())


def test_async_refused_for_handler_ids(dev_pair):
    _srv, cli = dev_pair

    async def main():
        c = cli.create_id(lambda cm_id, ev: None)
        with pytest.raises(RuntimeError, match="does not queue events"):
            await c.wait_async("REP_RECEIVED", 1)

    run(main())


async def _collect(agen):
    return [ev async for ev in agen]
