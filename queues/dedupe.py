"""A queue that deduplicates while a message is in it (``x-message-deduplication: true``).

Theory of operation
-------------------
The RabbitMQ plugin's queue mode: a message whose key (``model/dedupe.py``) is carried by a
message still in the queue (ready or delivered and not yet settled) is a duplicate, and
the queue does not take it. The key is held from the enqueue until the entry leaves the
queue for good: acked (``Queue.settle``), rejected or nacked without requeue, expired,
dropped by a length limit or dead-lettered (all ``Queue.drop``), purged or deleted. A
requeue keeps it. Keys are counted, not just present, so a queue recovered with two
entries of one key (written before the mode was set) frees the key with the second.

The broker's publish operation offers each message through ``publish`` (``broker/
publishing.py``). Unlike the plugin, a duplicate is not refused (the plugin's ``basic.nack``
makes confirming publishers, the very ones that retry, see a failure): the publish is
confirmed with ``basic.ack`` and counted in ``duplicates``. A message the queue refuses
(``reject-publish``) holds no key.

A durable queue's keys survive a restart because its messages do: ``recover`` reads them
back from the stored entries, so the set is exactly the messages the store kept.

Where this is less exact than it could be: a purge clears every key, also those of
messages delivered and not yet acked (they stay in the queue, unprotected, until settled);
and entries lost to a failed store write keep their keys until the queue is next emptied
of them by a purge (their publishers were nacked and their retries are taken as duplicates).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from leveret.model.dedupe import HeaderReader, queue_deduplicates, queue_header
from leveret.model.message import Message

if TYPE_CHECKING:
    from leveret.persistence.store import StoredEntry

# Entries read per store call while rebuilding a recovered queue's keys.
RECOVER_CHUNK = 4096


class QueueDedupe:
    """The keys of the messages in one queue, with how many entries hold each."""

    __slots__ = ("_reader", "duplicates", "header", "keys")

    def __init__(self, header: str) -> None:
        self.header = header
        self._reader = HeaderReader(header)
        self.keys: dict[bytes, int] = {}
        self.duplicates = 0  # publishes not taken because their key was in the queue

    def key_of(self, message: Message) -> bytes | None:
        return self._reader.key(message)

    def duplicate(self, key: bytes) -> bool:
        """Whether an entry of the queue carries ``key`` (then the publish is counted as a
        duplicate and not offered to the queue: ``broker/publishing.py``)."""
        if key in self.keys:
            self.duplicates += 1
            return True
        return False

    def holds(self, key: bytes) -> bool:
        """A duplicate: some entry of the queue carries ``key``."""
        return key in self.keys

    def add(self, key: bytes) -> None:
        """An entry carrying ``key`` entered the queue."""
        keys = self.keys
        keys[key] = keys.get(key, 0) + 1

    def release(self, message: Message) -> None:
        """An entry carrying ``message`` left the queue for good."""
        key = self.key_of(message)
        if key is None:
            return
        keys = self.keys
        held = keys.get(key)
        if held is None:
            return
        if held <= 1:
            del keys[key]
        else:
            keys[key] = held - 1

    def clear(self) -> None:
        """The queue was purged or deleted."""
        self.keys.clear()

    def recover(self, read: Callable[[int, int, int], list[StoredEntry]], qid: int) -> None:
        """Rebuild the keys from a recovered queue's stored entries (``read`` is the store's
        ``read_queue``)."""
        seq = 0
        while True:
            entries = read(qid, seq, RECOVER_CHUNK)
            for entry in entries:
                key = self.key_of(entry.message)
                if key is not None:
                    self.add(key)
            if len(entries) < RECOVER_CHUNK:
                return
            seq = entries[-1].seq + 1


def for_queue(arguments: Mapping[str, Any]) -> QueueDedupe | None:
    """The queue's deduplication, None unless its arguments ask for it."""
    if not queue_deduplicates(arguments):
        return None
    return QueueDedupe(queue_header(arguments))
