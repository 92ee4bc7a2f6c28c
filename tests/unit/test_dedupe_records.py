"""A deduplication window's store records: runs of keys, evicted whole behind a floor
(``records.encode_dedupe_runs``, ``LmdbWriter.append_dedupe``), read back exactly as the
window holds them; and the window's FIFO of places when keys move a lot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lmdb
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker.dedupe import ExchangeDedupe
from leveret.model.dedupe import MAX_KEY_BYTES, DedupeSettings, HeaderReader, dedupe_key
from leveret.model.dedupe_window import Window
from leveret.model.message import Message
from leveret.persistence.batch import Recorder
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.records import (
    DEDUPE_RUN,
    DEDUPE_RUN_BYTES,
    DEDUPE_RUN_TIMED,
    U64,
    _joined_run,
    _laid_out_run,
    decode_dedupe_run,
    dedupe_scope,
    encode_dedupe_runs,
)
from leveret.queues.ttl import Timekeeping
from tests.unit.test_dedupe import raw_properties

SCOPE = dedupe_scope("/", "x")


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.binary(min_size=1, max_size=MAX_KEY_BYTES), max_size=300),
       timed=st.booleans(), first=st.integers(0, 2**40), data=st.data())
def test_runs_decode_to_the_keys_their_places_and_expiries(keys: list[bytes], timed: bool,
                                                           first: int,
                                                           data: st.DataObject) -> None:
    expires = [data.draw(st.integers(0, 2**44)) if timed else 0 for _ in keys]
    record_keys, values = encode_dedupe_runs(SCOPE, first, keys, expires)
    decoded = []
    for key, value in zip(record_keys, values, strict=True):
        assert key[:len(SCOPE)] == SCOPE
        run = decode_dedupe_run(U64.unpack_from(key, len(SCOPE))[0], value)
        assert U64.unpack_from(key, len(SCOPE))[0] == run[-1][1]  # keyed by its last place
        assert len(run) == 1 or len(value) <= DEDUPE_RUN_BYTES + MAX_KEY_BYTES
        decoded += run
    assert decoded == [(k, first + i, e) for i, (k, e) in enumerate(zip(keys, expires))]
    assert record_keys == sorted(record_keys)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.binary(max_size=MAX_KEY_BYTES), min_size=1, max_size=40),
       timed=st.booleans(), data=st.data())
def test_a_run_laid_out_byte_by_byte_is_the_joined_one(keys: list[bytes], timed: bool,
                                                       data: st.DataObject) -> None:
    """The compiled build's run layout (C loops) writes the pure build's bytes."""
    expires = [data.draw(st.integers(0, 2**64 - 1)) if timed else 0 for _ in keys]
    at = data.draw(st.integers(0, len(keys) - 1))
    end = data.draw(st.integers(at + 1, len(keys)))
    tag = DEDUPE_RUN_TIMED if timed else DEDUPE_RUN
    assert _laid_out_run(keys, expires, at, end, tag) == _joined_run(keys, expires, at, end, tag)


def test_a_record_of_one_key_as_written_before_runs_is_read() -> None:
    assert decode_dedupe_run(7, U64.pack(123) + b"skey") == [(b"skey", 7, 123)]


class _Log(Recorder):
    """The group commit as a window sees it: deferred, ``commit`` writing a batch."""

    deferred = True

    def __init__(self, store: LmdbStore | MemoryStore) -> None:
        super().__init__(store.state())
        self.store = store
        self.callbacks: list[Callable[[bool], None]] = []

    def after_commit(self, callback: Callable[[bool], None]) -> None:
        self.callbacks.append(callback)

    def commit(self) -> None:
        self.store.write_batch(self.take_batch())
        self.batch += 1
        for callback in self.callbacks:
            callback(True)
        self.callbacks.clear()


def _records(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=8, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return txn.stat(env.open_db(b"dedupe", txn=txn, create=False))["entries"]
    finally:
        env.close()


def test_evictions_take_whole_runs_and_the_floor_hides_the_rest(tmp_path: Path) -> None:
    """A 1,000-key window filled with 5,000 keys in batches of 250: the store holds the
    window's keys exactly (the run the floor cuts is filtered), as the memory store does,
    in a few records, and after a reopen."""
    stores = {"lmdb": LmdbStore(tmp_path / "s"), "memory": MemoryStore()}
    windows = {}
    for name, store in stores.items():
        log = _Log(store)
        window = ExchangeDedupe(DedupeSettings(1000, None, "h", True), "/", "x", log,
                                Timekeeping())
        for batch in range(20):
            for i in range(batch * 250, batch * 250 + 250):
                window.remember(b"s%06d" % i, None, 0)
            log.commit()
        assert not window.pending
        windows[name] = window
    expected = windows["lmdb"].window.items()
    assert [k for k, _, _ in expected] == [b"s%06d" % i for i in range(4000, 5000)]
    for store in stores.values():
        assert store.load_dedupe(SCOPE) == expected
    stores["lmdb"].close()
    # A record a run (a batch of 250 makes two), one for the floor: not one a key.
    assert _records(tmp_path / "s") < 1000 // 50
    reopened = LmdbStore(tmp_path / "s")
    assert reopened.load_dedupe(SCOPE) == expected
    reloaded = ExchangeDedupe(DedupeSettings(1000, None, "h", True), "/", "x",
                              _Log(reopened), Timekeeping())
    reloaded.load(reopened)
    assert reloaded.window.items() == expected and reloaded.window.floor == 4000
    reopened.close()


def test_a_window_whose_keys_keep_moving_stays_exact() -> None:
    """Keys added again (after they expired) and discarded leave places behind in the
    window's ring; eviction skips them and the ring is laid out again when they fill it."""
    window = Window(3)
    model: list[bytes] = []
    for step in range(2000):
        key = b"k%d" % (step % 5)
        if step % 7 == 3:
            assert window.discard(key) == (key in model)
            model = [k for k in model if k != key]
            continue
        window.add(key, step, 0)
        model = [*[k for k in model if k != key][-2:], key]
        assert [k for k, _, _ in window.items()] == model
    # Places left behind are laid out again as they fill the ring: it stays small.
    assert window._rmask + 1 <= 4 * max(len(window), 8)


def test_a_lone_key_header_at_the_digest_boundary() -> None:
    """The one-field fast path and the walk agree where a key becomes its digest."""
    for size in (MAX_KEY_BYTES - 2, MAX_KEY_BYTES - 1, MAX_KEY_BYTES):
        value = "k" * size
        for headers in ({"h": value}, {"h": value, "a": 1}, {"a": 1, "h": value}):
            message = Message("x", "", raw_properties(headers), b"")
            assert HeaderReader("h", "x-cache-ttl").read(message) == (dedupe_key(value), None)
