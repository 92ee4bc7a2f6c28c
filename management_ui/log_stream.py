"""The broker's log, live, over server-sent events: ``GET /api/logs/stream`` (administrators).

A ``LogFanout`` is a ``logging.Handler`` on the ``leveret`` logger, attached
only while at least one client listens (no cost otherwise). Each record
becomes ``{"timestamp", "level", "logger", "message"}`` (the traceback
appended to the message when there is one), appended once to a ring of
``LOG_RING`` events that every listener reads at its pace (``sse.py``); a slow
client is told how many it lost (of any level), the broker never waits.
Records are emitted on the loop thread by most of the broker; a record from
another thread (the group commit's writer) is handed to the loop with
``call_soon_threadsafe``.

``?level=warning`` (debug, info, warning, error) drops lower records for that
client. As RabbitMQ's log levels, not Python's names, so ``warning``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Any

from aiohttp import web

from leveret.management_ui import sse
from leveret.management_ui.router import Request, bad_request

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
ROOT_LOGGER = "leveret"
# Log events kept for the listeners, shared: what a listener may fall behind by.
LOG_RING = 10_000


class LogFanout(logging.Handler):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.DEBUG)
        self.loop = loop
        self.loop_thread = threading.get_ident()
        # (level, the event encoded once for every listener)
        self.ring: deque[tuple[int, bytes]] = deque(maxlen=LOG_RING)
        self.appended = 0
        self.bell = sse.Bell()
        self.listeners = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            event = {"timestamp": round(record.created, 3),
                     "level": record.levelname.lower(), "logger": record.name,
                     "message": message}
            if threading.get_ident() == self.loop_thread:
                self._fan_out(event, record.levelno)
            else:
                self.loop.call_soon_threadsafe(self._fan_out, event, record.levelno)
        except Exception:  # a log handler must never raise into the broker
            self.handleError(record)

    def _fan_out(self, event: sse.Event, level: int) -> None:
        self.ring.append((level, sse.encode("log", event)))
        self.appended += 1
        self.bell.ring()


class LevelView:
    """The fanout's ring as one listener's source (``sse.Source``): its level and up."""

    def __init__(self, fanout: LogFanout, lowest: int) -> None:
        self.fanout = fanout
        self.lowest = lowest
        self.bell = fanout.bell

    @property
    def position(self) -> int:
        return self.fanout.appended

    def read(self, position: int) -> tuple[list[bytes], int, int]:
        fanout = self.fanout
        items, dropped, position = sse.ring_slice(fanout.ring, fanout.appended, position)
        lowest = self.lowest
        return [event for level, event in items if level >= lowest], dropped, position


def _fanout(state: Any) -> LogFanout:
    """The state's handler, attached to the ``leveret`` logger on first use."""
    fanout: LogFanout | None = state.log_fanout
    if fanout is None:
        fanout = LogFanout(asyncio.get_running_loop())
        state.log_fanout = fanout
    return fanout


async def stream_logs(req: Request) -> web.StreamResponse:
    """Server-sent events: the broker's log records as they are written."""
    name = req.query.get("level", "debug")
    if name not in LEVELS:
        raise bad_request(f"invalid level '{name}'")
    fanout = _fanout(req.state)
    logger = logging.getLogger(ROOT_LOGGER)
    if not fanout.listeners:
        logger.addHandler(fanout)
    fanout.listeners += 1
    try:
        return await sse.stream(req.http, LevelView(fanout, LEVELS[name]), lambda: True)
    finally:
        fanout.listeners -= 1
        if not fanout.listeners:
            logger.removeHandler(fanout)
