"""Per-exchange ``message_stats`` (``publish_in``, ``publish_out``), summed once per
sampling round from what channels already count, so the hot path counts nothing more.

A channel counts what it publishes into each exchange, by name, and where it went
(``model/object_stats.ExchangeCounters``: ``publish``, and ``queues``, messages routed
to each queue). An exchange's ``publish_in`` is the sum of ``publish`` over the live
channels of its vhost, plus what channels closed since the tally began had counted;
``publish_out`` the same sum of the messages routed on to queues (RabbitMQ's exchange
``publish_out`` sums its per-queue publishes likewise).

Publishes over HTTP count as a channel that closed at once (``add``). Where Leveret
differs: a channel's counts are folded in at the round that first misses it, as last
seen, so publishes in the last seconds (< one round) of a closing channel are not
counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

Key = tuple[str, str]  # (vhost, exchange name)


class Counted(Protocol):
    publish: int
    queues: dict[Any, int]


class Named(Protocol):
    @property
    def name(self) -> str: ...


class ChannelLike(Protocol):
    @property
    def vhost(self) -> Named: ...

    @property
    def exchange_stats(self) -> dict[str, Any]: ...


class ExchangeTally:
    def __init__(self) -> None:
        # id(channel) -> (channel, vhost name, {exchange: [in, out]}) as seen last round
        self.seen: dict[int, tuple[Any, str, dict[str, list[int]]]] = {}
        self.gone: dict[Key, list[int]] = {}  # what closed channels had counted
        self.totals: dict[Key, list[int]] = {}  # the last round's sums

    def add(self, vhost: str, name: str, counted: Counted) -> None:
        """What a channel-less publish counted (HTTP: ``management_ui/basic.py``)."""
        if counted.publish:
            base = self.gone.setdefault((vhost, name), [0, 0])
            base[0] += counted.publish
            base[1] += sum(counted.queues.values())

    def tally(self, channels: Iterable[ChannelLike], exchanges: set[Key]) -> dict[Key, list[int]]:
        """One round: ``[publish_in, publish_out]`` of every exchange in ``exchanges`` a
        channel has published into."""
        now: dict[int, tuple[Any, str, dict[str, list[int]]]] = {}
        for ch in channels:
            stats = ch.exchange_stats
            if not stats:
                continue
            now[id(ch)] = (ch, ch.vhost.name, {name: [c.publish, sum(c.queues.values())]
                                               for name, c in list(stats.items())})
        for ident, (ch, vhost, counts) in self.seen.items():
            still = now.get(ident)
            if still is None or still[0] is not ch:
                for name, (pin, pout) in counts.items():
                    base = self.gone.setdefault((vhost, name), [0, 0])
                    base[0] += pin
                    base[1] += pout
        for key in [k for k in self.gone if k not in exchanges]:
            del self.gone[key]
        totals = {k: list(v) for k, v in self.gone.items()}
        for _, vhost, counts in now.values():
            for name, (pin, pout) in counts.items():
                key = (vhost, name)
                if key not in exchanges:
                    continue
                total = totals.setdefault(key, [0, 0])
                total[0] += pin
                total[1] += pout
        self.seen = now
        self.totals = totals
        return totals
