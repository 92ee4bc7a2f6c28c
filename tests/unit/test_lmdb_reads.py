"""The LMDB store reads a paged tail back a column at a time (``persistence/lmdb_reads.py``):
whatever the run holds (records with different heads, names that are not UTF-8, entries
with expiries or delivered marks, every entry with its own expiry as a stream's carry its
chunk's time, messages shared with another queue, removed entries), it returns what the
in-memory store does."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.message import Message
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import QueueDef, StoredEntry

from .store_harness import recording

HEADS = [("", "q", b"\x10\x00\x02"), ("", "q", b"\x10\x00\x02"), ("ex", "rk", b""),
         ("x\udcff", "r\u00e9", b"\x90\x00\x0atext/plain\x02")]  # a lone surrogate, escaped

entries = st.lists(st.tuples(st.sampled_from(range(len(HEADS))),  # which head
                             st.binary(max_size=40),  # body
                             st.sampled_from([0, 0, 0, 1_900_000_000_000]),  # expires_at
                             st.booleans(),  # transient
                             st.booleans(),  # also in the other queue
                             st.booleans()),  # removed before the read
                   min_size=1, max_size=60)


def _seen(stored: list[StoredEntry]) -> list[tuple[object, ...]]:
    return [(e.seq, e.delivery_count, e.expires_at, e.message.exchange, e.message.routing_key,
             e.message.raw_properties, e.message.body) for e in stored]


@settings(max_examples=40, deadline=None)
@given(entries=entries, below=st.integers(0, 70), start=st.integers(0, 70),
       limit=st.integers(1, 80), every=st.sampled_from([1, 3, 1024]), stamped=st.booleans())
def test_read_queue_returns_what_the_memory_store_does(
        entries: list[tuple[int, bytes, int, bool, bool, bool]], below: int, start: int,
        limit: int, every: int, stamped: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lmdb_store = LmdbStore(Path(tmp) / "store", map_size=1 << 26)
        lmdb_store.pages.every = every  # a run read in chunks of a release's worth
        stores = [recording(lmdb_store), recording(MemoryStore())]
        try:
            read = []
            for store in stores:
                qid = store.put_queue(QueueDef("/", "q"))
                other = store.put_queue(QueueDef("/", "other"))
                for seq, (head, body, expires_at, transient, shared, _) in enumerate(entries):
                    message = Message(*HEADS[head], body)
                    if stamped:  # each its own (a stream's entries: their chunk's time)
                        expires_at = 1_900_000_000_000 + seq
                    store.enqueue(qid, seq, message, transient, expires_at)
                    if shared:
                        store.enqueue(other, seq, message)
                store.write_batch(store.take_batch())
                for seq, entry in enumerate(entries):
                    if entry[5]:
                        store.remove(qid, seq)
                store.mark_delivered_below(qid, below)
                store.write_batch(store.take_batch())
                read.append(_seen(store.read_queue(qid, start, limit)))
                read.append(_seen(store.read_queue(other, 0, 1 << 30)))
            assert read[0] == read[2]
            assert read[1] == read[3]
        finally:
            lmdb_store.close()
