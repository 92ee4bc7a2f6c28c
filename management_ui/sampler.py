"""Rates from plain counters: a sample every 5 s into small ring buffers.

Nothing is counted for the management API: channels, connections and vhosts
keep their integers (``model/stats.py``) and this module *reads* them every
``INTERVAL`` seconds. Overview series (message_stats, churn, queue totals)
keep ``KEEP`` samples (10 minutes, LavinMQ's 120 x 5 s), enough for the UI's
``lengths_age``/``msg_rates_age`` charts. Per-object values (queues' lengths
and counters, connections' octets, channels' message_stats, vhosts' totals) go
into ``history.History``: a fixed ring per object for ``*_details.rate`` and,
when a chart range is asked, its samples.

A rate is the difference of the last two samples over their interval, as
RabbitMQ's ``basic`` rates_mode. Objects gone since the last round are
forgotten at the next one.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from leveret.management_ui.history import MAX_POINTS, History

INTERVAL = 5.0  # seconds between samples (RabbitMQ's collect_statistics_interval)
KEEP = 120  # overview samples kept: 10 minutes


VHOST_RATE_FIELDS = ("messages", "messages_ready", "messages_unacknowledged", "recv_oct",
                     "send_oct")


def vhost_key(name: str) -> tuple[str, str]:
    """The sampler's key for a vhost: its queue totals, octets and message_stats, in
    ``VHOST_RATE_FIELDS`` + ``model.stats.FIELDS`` order."""
    return ("vh", name)


class Sampler:
    def __init__(self, clock: Callable[[], float] = time.time,
                 interval: float = INTERVAL) -> None:
        self.clock = clock
        self.interval = interval  # config.collect_statistics_interval
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.history = History(interval=interval)

    # -- recording (the sampling task) ------------------------------------------------

    def record(self, key: str, value: float, now: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = deque(maxlen=KEEP)
        series.append((now, value))

    def record_object(self, key: Hashable, values: Sequence[int], now: float) -> None:
        self.history.record(key, values, now)

    def end_round(self) -> None:
        """Forget objects not recorded in this round (closed, deleted)."""
        self.history.end_round()

    # -- reading (request handlers) ---------------------------------------------------------

    def rate(self, key: str) -> float:
        series = self.series.get(key)
        if not series or len(series) < 2:
            return 0.0
        (t0, v0), (t1, v1) = series[-2], series[-1]
        return round((v1 - v0) / (t1 - t0), 1) if t1 > t0 else 0.0

    def object_rates(self, key: Hashable, width: int) -> list[float]:
        return self.history.rates(key, width)

    def object_details(self, key: Hashable, names: Sequence[str], offset: int = 0,
                       age: int | None = None, incr: int | None = None
                       ) -> dict[str, dict[str, Any]]:
        """``{name: X_details}`` of one object's values from ``offset`` (``history.py``)."""
        return self.history.details(key, names, offset, age, incr, self.clock())

    def details(self, key: str, age: int | None = None, incr: int | None = None) -> dict[str, Any]:
        """``X_details``: ``{"rate"}``, plus RabbitMQ's samples when a chart range is asked:
        a point every ``incr`` seconds on the clock's grid, newest first (as ``history.py``
        answers for single objects)."""
        out: dict[str, Any] = {"rate": self.rate(key)}
        if age is None:
            return out
        series = list(self.series.get(key) or ())
        step = max(int(incr or self.interval), 1)
        newest = int(self.clock() // step) * step
        before = series[0][1] if len(series) == KEEP else 0  # truncated: hold the oldest
        at = len(series) - 1
        values: list[float] = []
        stamps: list[int] = []
        for k in range(min(age // step, MAX_POINTS) + 1):
            t = newest - k * step
            while at >= 0 and series[at][0] > t:
                at -= 1
            values.append(series[at][1] if at >= 0 else before)
            stamps.append(t * 1000)
        out["samples"] = [{"sample": v, "timestamp": ts} for v, ts in zip(values, stamps)]
        span = (stamps[0] - stamps[-1]) / 1000
        out["avg_rate"] = round((values[0] - values[-1]) / span, 1) if span > 0 else 0.0
        out["avg"] = round(sum(values) / len(values), 1)
        return out
