"""A channel's unacknowledged deliveries, by delivery tag (pure, no I/O).

Tags are handed out in increasing order, so the map keeps a deque of tags
in order next to the dict by tag: ``basic.ack(multiple=true)`` pops from the
left while tags are below the acked one, and a single ack pops from the dict
(the deque is compacted lazily, once it holds more than twice the live tags).
Both are O(1) per delivery settled. RabbitMQ's ``rabbit_channel`` keeps the
same kind of ordered queue of unacked messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

D = TypeVar("D")

# Below this many stale tags in the order deque, compaction is not worth it.
_COMPACT_SLACK = 64


class UnknownTag(LookupError):
    """An ack, nack or reject named a tag that is not outstanding (406 in RabbitMQ)."""


class UnackedMap(Generic[D]):
    __slots__ = ("_by_tag", "_order")

    def __init__(self) -> None:
        self._by_tag: dict[int, D] = {}
        self._order: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._by_tag)

    def __contains__(self, tag: int) -> bool:
        return tag in self._by_tag

    def add(self, tag: int, delivery: D) -> None:
        """Track a delivery; tags must be added in increasing order."""
        self._by_tag[tag] = delivery
        self._order.append(tag)

    def check(self, tag: int, multiple: bool) -> None:
        """Raise ``UnknownTag`` if ``take(tag, multiple)`` would (tx checks before queueing)."""
        if (not multiple or tag) and tag not in self._by_tag:
            raise UnknownTag(tag)

    def take(self, tag: int, multiple: bool) -> list[D]:
        """Remove and return the deliveries an ack/nack/reject of ``tag`` settles.

        ``multiple`` with tag 0 means every outstanding delivery, as in AMQP.
        """
        by_tag = self._by_tag
        if not multiple:
            delivery = by_tag.pop(tag, None)
            if delivery is None:
                raise UnknownTag(tag)
            if len(self._order) > 2 * len(by_tag) + _COMPACT_SLACK:
                self._order = deque(t for t in self._order if t in by_tag)
            return [delivery]
        if tag and tag not in by_tag:
            raise UnknownTag(tag)
        order = self._order
        out = []
        while order and (tag == 0 or order[0] <= tag):
            delivery = by_tag.pop(order.popleft(), None)
            if delivery is not None:
                out.append(delivery)
        return out

    def take_all(self) -> list[D]:
        """Every outstanding delivery (channel close, basic.recover), oldest first."""
        out = list(self._by_tag.values())
        self._by_tag.clear()
        self._order.clear()
        return out

    def values(self) -> Iterator[D]:
        return iter(self._by_tag.values())
