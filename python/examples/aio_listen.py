#!/usr/bin/env python3
"""listen.py with asyncio: one task per connection, no thread of our own.

    python3 aio_listen.py [ADDRESS [SERVICE_ID]]     (default 127.0.0.2 0x1000)
"""
import asyncio
import sys
from typing import Set

import ibcm


async def serve(conn: ibcm.CmId) -> None:
    conn.accept(b"welcome")
    async for event in conn.events_async():  # RTU, then the client's DREQ
        if event.type == ibcm.DREQ_RECEIVED:
            conn.drep()
        elif event.type == ibcm.TIMEWAIT_EXIT:
            break
    conn.destroy()


async def main() -> None:
    with ibcm.Device(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.2") as dev:
        listener = dev.listen(int(sys.argv[2], 0) if len(sys.argv) > 2 else 0x1000)
        print("listening on", dev.gid.ipv4_mapped or dev.gid, flush=True)
        tasks: Set["asyncio.Task[None]"] = set()
        while True:
            req = await listener.next_request_async()  # like loop.sock_accept()
            print(req.private_data.rstrip(b"\0").decode(errors="replace"), flush=True)
            task = asyncio.ensure_future(serve(req.cm_id))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


asyncio.run(main())
