"""Tracing routes: start, stop, read a vhost's trace ring, and its SSE feed.

``PUT /api/traces/{vhost}`` ``{"capacity": n, "queue": "regex"}`` starts
tracing (or restarts it with an empty ring), ``DELETE`` stops it. ``GET``
with ``?message_id=`` returns that message's events in order; without it,
what the ring holds (``Tracer.describe``, ``{"enabled": false}`` when off)
and its last ``RECENT`` events. ``GET …/stream`` is the live feed
(``sse.py``), ``event: trace`` per event, until tracing stops.

Who may trace: ``monitoring`` (RabbitMQ's tag for seeing every vhost's
connections and channels) with access to the vhost; tracing shows who
publishes what where, not message bodies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from leveret.broker.api import TRACE_CAPACITY, Tracer, expand_trace
from leveret.management_ui import read, sse
from leveret.management_ui.router import Request, bad_request, json_response

# Events a status GET shows (the newest).
RECENT = 100


async def put_trace(req: Request) -> web.Response:
    """Start tracing the vhost into a capped ring (restarts it if on)."""
    vhost = read.vhost_of(req)
    body = await req.body()
    capacity = body.get("capacity", TRACE_CAPACITY)
    queue = body.get("queue")
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise bad_request("capacity must be an integer")
    if queue is not None and not isinstance(queue, str):
        raise bad_request("queue must be a regular expression")
    try:
        tracer = Tracer(capacity, queue or None)
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    old = vhost.tracer
    if old is not None:
        old.stop_clock()
    vhost.tracer = tracer
    tracer.start_clock(asyncio.get_running_loop(), lambda: vhost.tracer is tracer)
    created = old is None
    return web.Response(status=201 if created else 204)


async def delete_trace(req: Request) -> web.Response:
    """Stop tracing the vhost and forget its ring."""
    vhost = read.vhost_of(req)
    if vhost.tracer is not None:
        vhost.tracer.stop_clock()
    vhost.tracer = None
    return web.Response(status=204)


async def get_trace(req: Request) -> web.Response:
    """A message's events in order (?message_id=), or the ring's state."""
    vhost = read.vhost_of(req)
    tracer: Tracer | None = vhost.tracer
    wanted = req.query.get("message_id")
    if wanted is not None:
        return json_response(tracer.events_of(wanted) if tracer is not None else [])
    if tracer is None:
        return json_response({"enabled": False})
    status: dict[str, Any] = tracer.describe()
    status["recent"] = list(tracer.events())[-RECENT:]
    return json_response(status)


# Records whose events a TraceSource keeps encoded for its streams (the newest).
ENCODED_RECORDS = 4096


class TraceSource:
    """A tracer's ring as the streams' source (``sse.Source``): records kept since a
    position, read as ``trace`` events, each record's encoded once for all the streams.
    One per tracer while it has readers, woken by its tick."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.bell = sse.Bell()
        self._encoded: dict[int, bytes] = {}  # record number -> its events, encoded

    @property
    def position(self) -> int:
        return self.tracer.appended

    def read(self, position: int) -> tuple[list[bytes], int, int]:
        tracer = self.tracer
        records, dropped, position = sse.ring_slice(tracer.ring, tracer.appended, position)
        encoded = self._encoded
        ids: dict[bytes, str | None] = {}
        out = []
        for record in records:
            block = encoded.get(record[1])
            if block is None:
                block = encoded[record[1]] = b"".join(
                    sse.encode("trace", event) for event in expand_trace(record, ids, tracer.pattern))
                if len(encoded) > ENCODED_RECORDS:  # forget the older half
                    self._encoded = encoded = dict(list(encoded.items())[ENCODED_RECORDS // 2:])
            out.append(block)
        return out, dropped, position


async def stream_trace(req: Request) -> web.StreamResponse:
    """Server-sent events: each trace event as it is recorded, until tracing stops."""
    vhost = read.vhost_of(req)
    tracer: Tracer | None = vhost.tracer
    if tracer is None:
        raise bad_request(f"tracing is off in vhost '{vhost.name}'")
    source = tracer.live
    if not isinstance(source, TraceSource):
        source = tracer.live = TraceSource(tracer)
        tracer.on_records = source.bell.ring
    tracer.readers += 1
    try:
        return await sse.stream(req.http, source, lambda: vhost.tracer is tracer)
    finally:
        tracer.readers -= 1
        if not tracer.readers:
            tracer.on_records = tracer.live = None
