"""The leader's store: the node's own, whose ``write_batch`` also waits for the in-sync set.

The group commit calls ``write_batch`` on its writer thread: the batch is written locally,
then shipped by ``Leader.replicate`` on the event loop while this thread blocks, so the
batch's confirms and "-ok"s wait for the in-sync followers as they already wait for the
local commit (``leader.py`` has the rule). Everything else is the node's store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from leveret.cluster import wire
from leveret.cluster.leader import Leader
from leveret.persistence.batch import Batch
from leveret.persistence.batch_codec import encode_batch
from leveret.persistence.store import (
    Definitions,
    QueueStats,
    Store,
    StoredEntry,
    StoreSpace,
    StoreState,
)


class ReplicatedStore:
    """The leader's store: the node's own, whose writes also wait for the in-sync set."""

    def __init__(self, inner: Any, leader: Leader, loop: asyncio.AbstractEventLoop) -> None:
        self.inner: Store = inner
        self._raw = inner
        self.leader = leader
        self.loop = loop

    def write_batch(self, batch: Batch) -> None:
        if batch.live == 0:
            return
        frame = wire.batch_frame(self.leader.epoch, batch.seq, encode_batch(batch))
        self.inner.write_batch(batch)
        done = asyncio.run_coroutine_threadsafe(self.leader.replicate(batch.seq, frame),
                                                self.loop)
        done.result()  # StoreError: the batch's confirms become nacks

    @property
    def reclaiming(self) -> bool:
        return self.inner.reclaiming

    def reclaim(self) -> None:
        """Local: each node removes a deleted queue's entries itself (a follower while it
        applies batches, ``LmdbStore.write_batches``), so nothing is shipped."""
        self.inner.reclaim()

    def state(self) -> StoreState:
        return self.inner.state()

    def load_definitions(self) -> Definitions:
        return self.inner.load_definitions()

    def queue_stats(self, qid: int) -> QueueStats:
        return self.inner.queue_stats(qid)

    def read_queue(self, qid: int, from_seq: int, limit: int) -> list[StoredEntry]:
        return self.inner.read_queue(qid, from_seq, limit)

    def read_entries(self, qid: int, seqs: Sequence[int]) -> list[StoredEntry]:
        return self.inner.read_entries(qid, seqs)

    def read_stamps(self, qid: int, from_seq: int, limit: int) -> list[tuple[int, int, int]]:
        return self.inner.read_stamps(qid, from_seq, limit)

    def load_dedupe(self, scope: bytes) -> list[tuple[bytes, int, int]]:
        return self.inner.load_dedupe(scope)

    def close(self) -> None:
        self.inner.close()

    def space(self) -> StoreSpace:
        return self.inner.space()

    def file_bytes(self) -> int:
        return self.inner.file_bytes()

    def compact_copy(self) -> Any:
        return self.inner.compact_copy()

    def compact_swap(self, copy: Any) -> None:
        self.inner.compact_swap(copy)

    def release_memory(self) -> None:
        release = getattr(self._raw, "release_memory", None)
        if release is not None:
            release()

