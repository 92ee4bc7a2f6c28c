"""Rates from plain counters: a sample every 5 s into small ring buffers.

Nothing is counted for the management API: channels, connections and vhosts
keep their integers (``model/stats.py``) and this module *reads* them every
``INTERVAL`` seconds. Overview series (message_stats, churn, queue totals)
keep ``KEEP`` samples (10 minutes, LavinMQ's 120 x 5 s), enough for the UI's
``lengths_age``/``msg_rates_age`` charts. Per-object values (connections'
octets, channels' message_stats, queue lengths) keep only the last two
samples: enough for ``*_details.rate`` and a few tuples per object.

A rate is the difference of the last two samples over their interval, as
RabbitMQ's ``basic`` rates_mode. Objects gone since the last round are
forgotten at the next one.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

INTERVAL = 5.0  # seconds between samples (RabbitMQ's collect_statistics_interval)
KEEP = 120  # overview samples kept: 10 minutes


VHOST_RATE_FIELDS = ("messages", "messages_ready", "messages_unacknowledged", "recv_oct",
                     "send_oct")


def vhost_key(name: str) -> tuple[str, str]:
    """The sampler's key for a vhost: its queue totals, octets and message_stats, in
    ``VHOST_RATE_FIELDS`` + ``model.stats.FIELDS`` order."""
    return ("vh", name)


class Sampler:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.series: dict[str, deque[tuple[float, float]]] = {}
        # key -> (previous time, previous values, current time, current values)
        self.objects: dict[Hashable, tuple[float, Sequence[float], float, Sequence[float]]] = {}
        self._seen: set[Hashable] = set()

    # -- recording (the sampling task) ------------------------------------------------

    def record(self, key: str, value: float, now: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = deque(maxlen=KEEP)
        series.append((now, value))

    def record_object(self, key: Hashable, values: Sequence[float], now: float) -> None:
        last = self.objects.get(key)
        if last is None:
            self.objects[key] = (now, values, now, values)
        else:
            self.objects[key] = (last[2], last[3], now, values)
        self._seen.add(key)

    def end_round(self) -> None:
        """Forget objects not recorded in this round (closed, deleted)."""
        for key in [k for k in self.objects if k not in self._seen]:
            del self.objects[key]
        self._seen = set()

    # -- reading (request handlers) ---------------------------------------------------------

    def rate(self, key: str) -> float:
        series = self.series.get(key)
        if not series or len(series) < 2:
            return 0.0
        (t0, v0), (t1, v1) = series[-2], series[-1]
        return round((v1 - v0) / (t1 - t0), 1) if t1 > t0 else 0.0

    def object_rates(self, key: Hashable, width: int) -> list[float]:
        last = self.objects.get(key)
        if last is None or last[2] <= last[0]:
            return [0.0] * width
        t0, v0, t1, v1 = last
        return [round((b - a) / (t1 - t0), 1) for a, b in zip(v0, v1)]

    def details(self, key: str, age: int | None = None, incr: int | None = None) -> dict[str, Any]:
        """``X_details``: ``{"rate"}``, plus RabbitMQ's samples when a chart range is asked."""
        out: dict[str, Any] = {"rate": self.rate(key)}
        if age is None:
            return out
        series = self.series.get(key) or deque()
        now = self.clock()
        step = max(incr or INTERVAL, INTERVAL)
        picked: list[tuple[float, float]] = []
        last_t = None
        for t, v in reversed(series):  # newest first, as RabbitMQ
            if now - t > age:
                break
            if last_t is None or last_t - t >= step - 0.5:
                picked.append((t, v))
                last_t = t
        out["samples"] = [{"sample": v, "timestamp": int(t * 1000)} for t, v in picked]
        if len(picked) >= 2:
            (t1, v1), (t0, v0) = picked[0], picked[-1]
            out["avg_rate"] = round((v1 - v0) / (t1 - t0), 1) if t1 > t0 else 0.0
        else:
            out["avg_rate"] = 0.0
        out["avg"] = round(sum(v for _, v in picked) / len(picked), 1) if picked else 0.0
        return out
