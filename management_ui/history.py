"""Per-object history: a bounded ring of samples for every queue, exchange, connection,
channel and vhost, so ``?lengths_age=600&lengths_incr=5`` (and ``msg_rates_*``,
``data_rates_*``) answer with RabbitMQ's ``X_details.samples`` and a chart draws its
history the moment a page opens, in the console or in any other API client.

Theory of operation
-------------------
The sampler records every live object once per round (every
``collect_statistics_interval`` seconds, 5 by default), in the same rounds, so the
round times are kept once (``History.times``) and an object keeps only its values:
one flat ``array('q')`` of ``KEEP x width`` 64-bit integers, written in place at ``(round % KEEP) * width``. A round allocates
nothing per object beyond the values tuple the sampler passes in, and an object's
memory is fixed at birth: ``KEEP * width * 8`` bytes plus about 150 bytes of
bookkeeping (a queue's 7 values: 3.5 KB). An object not recorded in a round
(closed, deleted) is dropped when the round ends.

Reading: ``rates`` is the last two rounds' difference over their interval (RabbitMQ's
``basic`` rates_mode); ``details`` adds, when a chart range is asked, RabbitMQ's
points: one every ``incr`` seconds on the clock's grid, newest first, back ``age``
seconds, each the value at the latest round at or before it (RabbitMQ 3.10.8 answers
``age=60&incr=1`` with 61 points, zeros before the queue existed, as here):
``{"rate", "samples": [{"sample", "timestamp"(ms)}], "avg_rate", "avg"}``.

Where Leveret differs: RabbitMQ's ``basic`` retention keeps 600 s per object; Leveret
keeps ``KEEP`` rounds (5 minutes, the console's chart range), so an older ``age`` is
answered with the 5 minutes there are. The broker-wide overview series keep 10
minutes (``sampler.KEEP``).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from typing import Any

KEEP = 60  # rounds kept per object: 5 minutes at 5 s
# Most sample points per field in one answer (age / incr): a bound on a request's work.
MAX_POINTS = 600


class Ring:
    """One object's values, ``width`` per round, ``KEEP`` rounds, circular."""

    __slots__ = ("born", "last", "values", "width")

    def __init__(self, width: int, born: int, keep: int) -> None:
        self.width = width
        self.born = born  # the first round recorded
        self.last = born  # the latest round recorded
        self.values = array("q", bytes(8 * width * keep))


class History:
    def __init__(self, keep: int = KEEP, interval: float = 5.0) -> None:
        self.keep = keep
        self.interval = interval  # seconds between rounds: samples are no closer
        self.round = 0  # the round being recorded; ``end_round`` moves to the next
        self.times = [0.0] * keep  # round -> its time, at round % keep
        self.rings: dict[Hashable, Ring] = {}

    # -- recording (the sampling task) --

    def record(self, key: Hashable, values: Sequence[int], now: float) -> None:
        rnd = self.round
        self.times[rnd % self.keep] = now
        ring = self.rings.get(key)
        width = len(values)
        if ring is None or ring.width != width:
            ring = self.rings[key] = Ring(width, rnd, self.keep)
        ring.last = rnd
        at = (rnd % self.keep) * width
        store = ring.values
        for v in values:
            store[at] = int(v)
            at += 1

    def end_round(self) -> None:
        """Drop the objects this round did not record; the next record starts a round."""
        rnd = self.round
        for key in [k for k, ring in self.rings.items() if ring.last != rnd]:
            del self.rings[key]
        self.round = rnd + 1

    # -- reading (request handlers) --

    def _latest(self, ring: Ring) -> int:
        """The newest complete round of this object (the one being recorded may be partial)."""
        return ring.last if ring.last < self.round else ring.last - 1

    def _value(self, ring: Ring, rnd: int, index: int) -> int:
        return ring.values[(rnd % self.keep) * ring.width + index]

    def rates(self, key: Hashable, width: int) -> list[float]:
        """Per second, between the object's last two rounds; zeros before it has two."""
        ring = self.rings.get(key)
        if ring is None:
            return [0.0] * width
        latest = self._latest(ring)
        if latest - 1 < ring.born:
            return [0.0] * width
        t1, t0 = self.times[latest % self.keep], self.times[(latest - 1) % self.keep]
        if t1 <= t0:
            return [0.0] * width
        return [round((self._value(ring, latest, i) - self._value(ring, latest - 1, i))
                      / (t1 - t0), 1) for i in range(min(width, ring.width))]

    def grid(self, key: Hashable, age: int, incr: int | None, now: float
             ) -> list[tuple[int, int | None]]:
        """RabbitMQ's sample points: every ``incr`` seconds on the clock's grid, from the
        newest back ``age`` seconds, newest first, each with the object's latest round at
        or before it (None: before the object's kept history)."""
        ring = self.rings.get(key)
        step = max(int(incr or self.interval), 1)
        points = min(age // step, MAX_POINTS)
        newest = int(now // step) * step
        rounds: list[int] = []
        if ring is not None:
            # Read between rounds (sampling is one synchronous call on the loop): the slot
            # of the round to come still holds the oldest one.
            oldest = max(ring.born, self.round - self.keep)
            rounds = list(range(self._latest(ring), oldest - 1, -1))
        out: list[tuple[int, int | None]] = []
        at = 0
        for k in range(points + 1):
            t = newest - k * step
            while at < len(rounds) and self.times[rounds[at] % self.keep] > t:
                at += 1
            out.append((t * 1000, rounds[at] if at < len(rounds) else None))
        return out

    def details(self, key: Hashable, names: Sequence[str], offset: int, age: int | None,
                incr: int | None, now: float) -> dict[str, dict[str, Any]]:
        """``{name: X_details}`` for the object's values ``offset..offset+len(names)``:
        the rate, plus samples, ``avg_rate`` and ``avg`` when ``age`` is given. Before
        its first round an object's values were 0 (it did not exist); before its kept
        history, as at the oldest kept round."""
        rates = self.rates(key, offset + len(names))[offset:]
        out: dict[str, dict[str, Any]] = {
            name: {"rate": rates[i] if i < len(rates) else 0.0}
            for i, name in enumerate(names)}
        if age is None:
            return out
        ring = self.rings.get(key)
        points = self.grid(key, age, incr, now)
        first: int | None = None
        if ring is not None and ring.born < self.round - self.keep:
            first = self.round - self.keep  # truncated: hold the oldest kept value
        for i, name in enumerate(names):
            d = out[name]
            index = offset + i
            if ring is None or index >= ring.width:
                values = [0] * len(points)
            else:
                values = [self._value(ring, r, index) if r is not None
                          else (self._value(ring, first, index) if first is not None else 0)
                          for _, r in points]
            d["samples"] = [{"sample": v, "timestamp": ts} for v, (ts, _) in zip(values, points)]
            span = (points[0][0] - points[-1][0]) / 1000
            d["avg_rate"] = round((values[0] - values[-1]) / span, 1) if span > 0 else 0.0
            d["avg"] = round(sum(values) / len(values), 1)
        return out

    def memory(self) -> int:
        """Bytes held by the rings' values (for the bench's per-object figure)."""
        return sum(ring.values.buffer_info()[1] * ring.values.itemsize
                   for ring in self.rings.values())
