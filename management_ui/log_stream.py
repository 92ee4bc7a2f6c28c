"""The broker's log, live, over server-sent events: ``GET /api/logs/stream`` (administrators).

A ``LogFanout`` is a ``logging.Handler`` on the ``leveret`` logger, attached
while the management plane runs (``attach``), so that a listener can be shown
the last lines at once (``?tail=N``) rather than a blank page until the next
record: its cost is one small JSON encoding per record the broker logs at its
configured level, and at most ``LOG_RING`` encoded events held. Each record
becomes ``{"timestamp", "level", "logger", "message"}`` (the traceback
appended to the message when there is one), appended once to a ring of
``LOG_RING`` events that every listener reads at its pace (``sse.py``); a slow
client is told how many it lost (of any level), the broker never waits.
Records are emitted on the loop thread by most of the broker; a record from
another thread (the group commit's writer) is handed to the loop with
``call_soon_threadsafe``.

``?level=warning`` (debug, info, warning, error) drops lower records for that
client. As RabbitMQ's log levels, not Python's names, so ``warning``.
``?tail=N`` (at most ``MAX_TAIL``) starts the stream with the last N records of
that level and up that the ring holds; without it, the stream starts now.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Protocol

from aiohttp import web

from leveret.management_ui import sse
from leveret.management_ui.router import Request, bad_request

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
ROOT_LOGGER = "leveret"
# Log events kept for the listeners, shared: what a listener may fall behind by.
LOG_RING = 10_000
MAX_TAIL = 1_000  # records a new listener may ask to be shown first


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
    """The fanout's ring as one listener's source (``sse.Source``): its level and up,
    starting ``tail`` records of that level back."""

    def __init__(self, fanout: LogFanout, lowest: int, tail: int = 0) -> None:
        self.fanout = fanout
        self.lowest = lowest
        self.bell = fanout.bell
        self.start = fanout.appended
        if tail:
            back = found = 0
            for level, _ in reversed(fanout.ring):
                back += 1
                if level >= lowest:
                    found += 1
                    if found == tail:
                        break
            self.start -= back

    @property
    def position(self) -> int:
        return self.start

    def read(self, position: int) -> tuple[list[bytes], int, int]:
        fanout = self.fanout
        items, dropped, position = sse.ring_slice(fanout.ring, fanout.appended, position)
        lowest = self.lowest
        return [event for level, event in items if level >= lowest], dropped, position


class Holder(Protocol):
    """Where the fanout is kept (the management plane's ``State``)."""

    log_fanout: LogFanout | None


def attach(state: Holder) -> LogFanout:
    """The state's handler, attached to the ``leveret`` logger (once)."""
    fanout: LogFanout | None = state.log_fanout
    if fanout is None:
        fanout = LogFanout(asyncio.get_running_loop())
        state.log_fanout = fanout
        logging.getLogger(ROOT_LOGGER).addHandler(fanout)
    return fanout


def detach(state: Holder) -> None:
    fanout: LogFanout | None = state.log_fanout
    if fanout is not None:
        logging.getLogger(ROOT_LOGGER).removeHandler(fanout)
        state.log_fanout = None


async def stream_logs(req: Request) -> web.StreamResponse:
    """Server-sent events: the broker's log records as they are written."""
    name = req.query.get("level", "debug")
    if name not in LEVELS:
        raise bad_request(f"invalid level '{name}'")
    raw = req.query.get("tail", "0")
    if not raw.isdigit() or int(raw) > MAX_TAIL:
        raise bad_request(f"tail must be a whole number from 0 to {MAX_TAIL}")
    fanout = attach(req.state)
    fanout.listeners += 1
    try:
        return await sse.stream(req.http, LevelView(fanout, LEVELS[name], int(raw)),
                                lambda: True)
    finally:
        fanout.listeners -= 1
