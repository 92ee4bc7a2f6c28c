"""Server-sent events: a bounded feed from the broker's loop to one HTTP client.

A ``Feed`` is what a producer (the tracer, the log handler) calls with each
event; it queues the event for the client's stream without blocking, up to
``FEED_LIMIT`` events, and counts the ones it had to drop when the client
reads slower than events come (the broker never waits for a browser).
``stream`` writes the queued events as ``data:`` lines (JSON), a comment
every ``KEEPALIVE_SECONDS`` so proxies and the client see the stream alive,
and ends when ``still_wanted()`` turns false (tracing stopped) or the client
goes away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

# Events waiting for one slow client before newer ones are dropped (and counted).
FEED_LIMIT = 10_000
KEEPALIVE_SECONDS = 15.0
# How often a quiet stream checks that it is still wanted.
CHECK_SECONDS = 1.0


class Feed:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(FEED_LIMIT)
        self.dropped = 0

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1


async def stream(http: web.Request, feed: Feed, still_wanted: Callable[[], bool],
                 event_name: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(http)
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    try:
        await response.write(b": stream open\n\n")
        while still_wanted():
            try:
                event = await asyncio.wait_for(feed.queue.get(), CHECK_SECONDS)
            except TimeoutError:
                if loop.time() - quiet_since >= KEEPALIVE_SECONDS:
                    await response.write(b": keepalive\n\n")
                    quiet_since = loop.time()
                continue
            data = json.dumps(event, separators=(",", ":"), default=str)
            await response.write(f"event: {event_name}\ndata: {data}\n\n".encode())
            quiet_since = loop.time()
        await response.write(b"event: end\ndata: {}\n\n")
    except ConnectionResetError:  # the client went away; cancellation (shutdown) propagates
        return response
    return response
