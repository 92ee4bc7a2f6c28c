"""Trace streams that are never read (``management_ui/sse.py``): they cost the publish path
nothing, a normal reader still gets every event, and a stream that falls behind the
shared ring is told, in the stream, how many records it lost.

Raw sockets send the stream's request and then read nothing while traced messages are
published; one of them reads afterwards.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from typing import Any

import pika

from tests.integration.conftest import HttpApi

UNREAD = 100
MESSAGES = 5_000  # publish, route and enqueue records each: far more than CAPACITY
CAPACITY = 1_000
AUTH = base64.b64encode(b"guest:guest").decode()
REQUEST = (f"GET /api/traces/%2F/stream HTTP/1.1\r\nHost: test\r\nAuthorization: Basic {AUTH}"
           "\r\n\r\n").encode()


def _open_unread(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
    sock.connect(("127.0.0.1", port))
    sock.sendall(REQUEST)
    return sock


def _events(text: str) -> list[tuple[str, Any]]:
    """(event name, data) of each complete server-sent event in ``text``."""
    found = []
    for block in text.split("\n\n")[:-1]:
        name, data = "", None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name:
            found.append((name, data))
    return found


def _read_until(sock: socket.socket, wanted: str) -> str:
    """The stream's text (after the headers) up to and including an event naming ``wanted``."""
    got, marker = b"", f'"message_id":"{wanted}"'.encode()
    while marker not in got or b"\n\n" not in got[got.index(marker):]:  # whole: see _dechunk
        chunk = sock.recv(1 << 16)
        assert chunk, "the stream ended"
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return _dechunk(body)


def _dechunk(body: bytes) -> str:
    """The text of a chunked body (the broker writes whole events in each chunk)."""
    out = b""
    while True:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line, 16)
        if len(rest) < size + 2:
            out += rest[:size]
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out.decode(errors="replace")


def test_unread_streams_cost_nothing_and_learn_what_they_lost(make_broker: Any) -> None:
    broker = make_broker()
    api = HttpApi(broker.api_url + "/api")
    assert api.put("/traces/%2F", {"capacity": CAPACITY})[0] in (201, 204)
    unread = [_open_unread(broker.management_port) for _ in range(UNREAD)]
    reader = _open_unread(broker.management_port)  # the normal reader, reading as it goes
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    seen: list[str] = []

    def read_all() -> None:
        seen.append(_read_until(reader, "last"))

    try:
        while api.ok("/traces/%2F")["subscribers"] < UNREAD + 1:
            pass  # every stream has started reading the ring
        follower = threading.Thread(target=read_all)
        follower.start()
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare("traced")
        for i in range(MESSAGES):
            ch.basic_publish("", "traced", b"x", pika.BasicProperties(message_id=f"m{i}"))
        ch.basic_publish("", "traced", b"x", pika.BasicProperties(message_id="last"))
        conn.close()
        follower.join()
        followed = [data["message_id"] for name, data in _events(seen[0]) if name == "trace"
                    and data["event"] == "publish"]
        assert followed[-1] == "last"
        late = _events(_read_until(unread[0], "last"))
        dropped = [data["dropped"] for name, data in late if name == "dropped"]
        got = [data["message_id"] for name, data in late if name == "trace"
               and data["event"] == "publish"]
        # Every record (one per publish here) is either read or counted as dropped.
        assert dropped and got[-1] == "last" and len(got) + sum(dropped) == MESSAGES + 1
        assert api.ok("/traces/%2F")["subscribers"] == UNREAD + 1
    finally:
        for sock in [*unread, reader]:
            sock.close()
