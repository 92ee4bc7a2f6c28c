"""Server-sent events: one shared ring per source, read by each HTTP client at its pace.

A source (the tracer's ring, the log's ``LogFanout``) keeps its events once, in a ring
of bounded size, and counts every event it ever appended (its ``position``). Producing
an event is one append whatever the number of streams: no stream has a queue of its
own, and a stream that is never read costs nothing per event. Each stream keeps the
position it has read up to; when it reads, it gets what was appended since, and if the
ring let some of those go before it read them (it read slower than events came, or not
at all) it writes ``event: dropped`` with their number (``{"dropped": n}``) before the
rest. What one stream may hold is so bounded by the ring (shared) and by its socket's
write buffer: a stream whose client does not read waits on that buffer, untouched by
events, until the client reads or goes away.

Streams wait on their source's ``Bell``: a producer rings it (``ring`` is O(1): the
wake-up of every waiting stream is one callback, at most one per loop iteration). A
source hands events encoded (``encode``: ``event:`` and a ``data:`` line of JSON), and
may encode each once for all its streams. ``stream`` writes them in writes of about
``WRITE_BYTES``, with its socket's send buffer bounded (``SEND_BUFFER``),
a comment every ``KEEPALIVE_SECONDS`` so proxies and the client see the stream alive,
and ends when ``still_wanted()`` turns false (tracing stopped) or the client goes away.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, Protocol, TypeVar

from aiohttp import web

Event = dict[str, Any]
T = TypeVar("T")
KEEPALIVE_SECONDS = 15.0
# How often a quiet stream checks that it is still wanted.
CHECK_SECONDS = 1.0
# Bytes of events gathered into one write (a stream's own buffer, beside its socket's).
WRITE_BYTES = 16 * 1024
# Records a stream takes from its source at a time (what it expands into events at once).
READ_LIMIT = 1000
# The kernel's send buffer of a stream's socket, in bytes. Left to autotuning it grows to
# megabytes, which a client that never reads would make the broker fill with events
# (encoded for it) before its stream blocks; 64 KiB is ample for events to a reader.
SEND_BUFFER = 64 * 1024


def _bound_send_buffer(http: web.Request) -> None:
    sock = http.transport.get_extra_info("socket") if http.transport is not None else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        except OSError:  # not a TCP socket (tests over pipes): nothing to bound
            pass


class Bell:
    """Wakes every stream waiting on one source: ``ring`` schedules one callback, at
    most once per loop iteration, which resolves the one future they all wait on."""

    def __init__(self) -> None:
        self._waiting: asyncio.Future[None] | None = None
        self._scheduled = False

    async def wait(self, timeout: float) -> None:
        """Until the next ``ring`` or ``timeout`` seconds."""
        waiting = self._waiting
        if waiting is None or waiting.done():
            waiting = self._waiting = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(waiting), timeout)
        except TimeoutError:
            pass

    def ring(self) -> None:
        waiting = self._waiting
        if waiting is None or waiting.done() or self._scheduled:
            return
        self._scheduled = True
        waiting.get_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)


class Source(Protocol):
    """What a stream reads: events appended since a position, from a bounded ring."""

    bell: Bell

    @property
    def position(self) -> int:
        """How many events were ever appended (where a new stream starts reading)."""
        ...

    def read(self, position: int) -> tuple[Sequence[bytes], int, int]:
        """(the events appended since ``position`` and still held, encoded (``encode``);
        how many of those the ring let go; the position after them)."""
        ...


def encode(name: str, data: Event) -> bytes:
    """One server-sent event, ``data`` as JSON on one line."""
    return b"event: %s\ndata: %s\n\n" % (
        name.encode(), json.dumps(data, separators=(",", ":"), default=str).encode())


def ring_slice(ring: deque[T], appended: int, position: int,
               limit: int = READ_LIMIT) -> tuple[list[T], int, int]:
    """(at most ``limit`` items of ``ring`` after ``position``, the oldest first; how
    many after ``position`` the ring no longer holds; the position after both). ``ring``
    holds the last of ``appended`` items; only the items after ``position`` are walked."""
    new = appended - position
    if new <= 0:
        return [], 0, appended
    held = min(new, len(ring))
    items = list(islice(reversed(ring), held))
    items.reverse()
    del items[limit:]
    dropped = new - held
    return items, dropped, position + dropped + len(items)


async def stream(http: web.Request, source: Source,
                 still_wanted: Callable[[], bool]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(http)
    _bound_send_buffer(http)
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    position = source.position
    try:
        await response.write(b": stream open\n\n")
        while still_wanted():
            events, dropped, position = source.read(position)
            if dropped:
                await response.write(b'event: dropped\ndata: {"dropped": %d}\n\n' % dropped)
            if not events:
                if not dropped:
                    await source.bell.wait(CHECK_SECONDS)
                if loop.time() - quiet_since >= KEEPALIVE_SECONDS:
                    await response.write(b": keepalive\n\n")
                    quiet_since = loop.time()
                continue
            chunk = bytearray()
            for event in events:
                chunk += event
                if len(chunk) >= WRITE_BYTES:
                    await response.write(bytes(chunk))
                    chunk.clear()
            if chunk:
                await response.write(bytes(chunk))
            quiet_since = loop.time()
        await response.write(b"event: end\ndata: {}\n\n")
    except ConnectionResetError:  # the client went away; cancellation (shutdown) propagates
        return response
    return response
