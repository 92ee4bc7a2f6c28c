"""A channel's unacknowledged deliveries, by delivery tag (pure, no I/O).

Tags are handed out in increasing order and a dict keeps its insertion order, so the
one dict by tag is also the deliveries in tag order: a single ack pops its tag, and
``basic.ack(multiple=true)`` takes the tags from the front up to the acked one (the
holes earlier acks left there are skipped in C; a dict that grows compacts them, and so
does a multiple ack that finds the table far larger than what it holds). Both are O(1)
per delivery settled, amortised. RabbitMQ's ``rabbit_channel`` keeps the same kind
of ordered queue of unacked messages.

Compiled, the map is an extension type (``unacked.pxd``) that the channel calls as C:
``take_one`` settles the usual single ack with one dict pop, no list. Cython refuses a
``Generic`` base for an extension type, so the map holds the channel's ``Delivery``
records by name rather than a type parameter (its unit tests store plain values).
"""

from __future__ import annotations

from collections.abc import Iterator
from sys import getsizeof
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.amqp.channel import Delivery


# A dict keeps a popped entry's slot as a hole until it next grows, and a multiple ack's
# scan walks the holes at its front: after a consumer without a prefetch limit caught up on
# a million deliveries, each multiple ack walked a million holes (2.4 ms, where 4 us is
# usual: ``bench/unacked_micro.py``). A table this many bytes per outstanding delivery
# (a compact one holds ~37) is copied compact first, once per shrink; single acks,
# the usual ones, never look.
_SPARSE_BYTES = 1024
_SPARSE_SLACK = 64


class UnknownTag(LookupError):
    """An ack, nack or reject named a tag that is not outstanding (406 in RabbitMQ)."""


class UnackedMap:
    __slots__ = ("_by_tag",)

    def __init__(self) -> None:
        self._by_tag: dict[int, Delivery] = {}

    def __len__(self) -> int:
        return len(self._by_tag)

    def __contains__(self, tag: int) -> bool:
        return tag in self._by_tag

    def add(self, tag: int, delivery: Delivery) -> None:
        """Track a delivery; tags must be added in increasing order."""
        self._by_tag[tag] = delivery

    def check(self, tag: int, multiple: bool) -> None:
        """Raise ``UnknownTag`` if ``take(tag, multiple)`` would (tx checks before queueing)."""
        if (not multiple or tag) and tag not in self._by_tag:
            raise UnknownTag(tag)

    def take(self, tag: int, multiple: bool) -> list[Delivery]:
        """Remove and return the deliveries an ack/nack/reject of ``tag`` settles.

        ``multiple`` with tag 0 means every outstanding delivery, as in AMQP.
        """
        by_tag = self._by_tag
        if not multiple:
            delivery = by_tag.pop(tag, None)
            if delivery is None:
                raise UnknownTag(tag)
            return [delivery]
        if not tag:
            return self.take_all()
        if tag not in by_tag:
            raise UnknownTag(tag)
        if getsizeof(by_tag) > _SPARSE_BYTES * (len(by_tag) + _SPARSE_SLACK):
            by_tag = self._by_tag = dict(by_tag)  # compacted: the scan skips no holes
        settled = []
        for outstanding in by_tag:  # in tag order
            if outstanding > tag:
                break
            settled.append(outstanding)
        return [by_tag.pop(t) for t in settled]

    def take_one(self, tag: int) -> Delivery | None:
        """``take(tag, False)`` without a list: the delivery, or None if ``tag`` is not
        outstanding (the caller raises)."""
        return self._by_tag.pop(tag, None)

    def take_all(self) -> list[Delivery]:
        """Every outstanding delivery (channel close, basic.recover), oldest first."""
        out = list(self._by_tag.values())
        self._by_tag.clear()
        return out

    def values(self) -> Iterator[Delivery]:
        return iter(self._by_tag.values())
