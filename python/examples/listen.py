#!/usr/bin/env python3
"""Accept every connection to a service and print its private data.

    python3 listen.py [ADDRESS [SERVICE_ID]]     (default 127.0.0.2 0x1000)
"""
import sys
from typing import Optional

import ibcm


def finish(cm_id: ibcm.CmId, event: ibcm.Event) -> Optional[int]:  # an accepted connection's later events (library thread)
    if event.type == ibcm.DREQ_RECEIVED:
        cm_id.drep()
    elif event.type == ibcm.TIMEWAIT_EXIT:
        return 1  # done: the library destroys the id
    return None


with ibcm.Device(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.2") as dev:
    listener = dev.listen(int(sys.argv[2], 0) if len(sys.argv) > 2 else 0x1000)
    print("listening on", dev.gid.ipv4_mapped or dev.gid, flush=True)
    while True:
        req = listener.next_request()  # blocks, like socket.accept()
        print(req.private_data.rstrip(b"\0").decode(errors="replace"), flush=True)
        req.cm_id.set_handler(finish)
        req.cm_id.accept(b"welcome")
