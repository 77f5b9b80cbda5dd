#!/usr/bin/env python3
"""Connect to listen.py with a message as the REQ's private data, print the
reply's private data, disconnect.

    python3 connect.py [SERVER [CLIENT_ADDRESS [MESSAGE [SERVICE_ID]]]]
                                        (default 127.0.0.2 127.0.0.3 hello 0x1000)
"""
import sys

import ibcm

server, local, message, service = (sys.argv[1:] + [None] * 4)[:4]
with ibcm.Device(local or "127.0.0.3") as dev:
    conn = dev.connect(server or "127.0.0.2", int(service or "0x1000", 0), (message or "hello").encode())
    rep = conn.wait(ibcm.REP_RECEIVED, timeout=10)  # raises ibcm.Rejected on a REJ
    conn.rtu()
    print("server says:", rep.private_data.rstrip(b"\0").decode(errors="replace"))
    conn.disconnect()
    conn.wait(ibcm.TIMEWAIT_EXIT, timeout=10)
