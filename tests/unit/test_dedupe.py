"""Deduplication's pure parts and its store records: the window against a naive model, the
typed keys, the declare-time arguments, the queue mode's key counts, and the window's
records in both stores (across a reopen) and on the replication wire."""

from __future__ import annotations

import asyncio
from array import array
from pathlib import Path

import pamqp.commands
import pamqp.frame
import pamqp.header
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker.dedupe import ExchangeDedupe
from leveret.model import dedupe_window
from leveret.model.dedupe import (
    DEFAULT_SIZE,
    MAX_KEY_BYTES,
    DedupeSettings,
    HeaderReader,
    dedupe_key,
    message_ttl,
    settings_for_exchange,
)
from leveret.model.dedupe_window import Window
from leveret.model.errors import ChannelError
from leveret.model.message import Message
from leveret.persistence.batch import Recorder
from leveret.persistence.batch_codec import decode_batch, encode_batch
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.records import dedupe_scope
from leveret.persistence.store import StoreError
from leveret.queues.dedupe import QueueDedupe
from leveret.queues.ttl import Timekeeping

# -- the window against a naive model -----------------------------------------------------

# Short keys, and long ones that fill a new window's 256-byte arena in a few adds: it wraps
# (a key that would is put at the next lap's start) and is laid out again, grown or not;
# the longest key a header gives (MAX_KEY_BYTES, its type byte included) is more than a
# new window's whole arena.
# Keys of one length differ in their last byte only (a match is confirmed on every byte).
LONGEST = MAX_KEY_BYTES
KEYS = st.sampled_from([b"a", b"b", b"xa", b"xb", b"g" * 90, b"g" * 89 + b"h", b"i" * 200,
                        b"j" * 255, b"k" * LONGEST, b"k" * (LONGEST - 1) + b"l"])
OPS = st.lists(st.tuples(st.sampled_from(["add", "seen", "discard", "tick"]), KEYS,
                         st.integers(0, 50)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 5), ops=OPS, tag_bits=st.sampled_from([1, 2, 64]))
def test_window_is_exact_fifo_with_ttl(size: int, ops: list[tuple[str, bytes, int]],
                                       tag_bits: int) -> None:
    """A list of (key, order, expires) in insertion order is the model: a re-added key
    moves to the end, the oldest go beyond ``size``, an expired key is not seen, and the
    floor is above every evicted key's place and at most the oldest held one's. Narrow
    tags make keys share them (and their table slots' probe runs): a shared tag is never
    taken for the key."""
    window = Window(size, tag_bits=tag_bits)
    model: list[tuple[bytes, int, int]] = []
    now = 1000
    order = 0
    evicted_orders: list[int] = []
    for op, key, n in ops:
        if op == "tick":
            now += n
        elif op == "add":
            expires = now + n if n else 0
            model = [e for e in model if e[0] != key] + [(key, order, expires)]
            evicted = max(0, len(model) - size)
            evicted_orders += [e[1] for e in model[:evicted]]
            model = model[evicted:]
            window.add(key, order, expires)
            order += 1
        elif op == "discard":
            assert window.discard(key) == any(e[0] == key for e in model)
            model = [e for e in model if e[0] != key]
        else:
            found = [e[2] for e in model if e[0] == key]
            assert window.seen(key, now) == bool(found and (found[0] == 0 or now < found[0]))
        assert window.items() == model
        assert len(window._arena) == window._amask + 1  # no key ran past the arena's end
        assert all(o < window.floor for o in evicted_orders)
        assert not model or window.floor <= model[0][1]
        if any(e[2] for e in model):
            assert window.timed  # it may not be told 0 for the time


def test_a_key_seen_absent_is_added_where_the_table_says_after_it_changed() -> None:
    """``add`` reuses the slot ``seen`` found empty only while the table is unchanged: with
    one-bit tags every key has the same home slot, so a discard in between moves the
    others back and the key's place moves with them."""
    window = Window(10, tag_bits=1)
    window.add(b"a", 0, 0)
    window.add(b"b", 1, 0)
    assert not window.seen(b"c", 0)  # found absent at the end of the run a, b
    assert window.discard(b"a")  # b moves back into a's slot
    window.add(b"c", 2, 0)
    assert window.seen(b"c", 0) and window.seen(b"b", 0) and not window.seen(b"a", 0)
    assert not window.seen(b"d", 0)
    window.add(b"d", 3, 0)  # right after: the slot found for it
    assert [key for key, _, _ in window.items()] == [b"b", b"c", b"d"]
    assert all(window.seen(key, 0) for key in (b"b", b"c", b"d"))


def test_arena_offsets_start_again_before_they_could_overflow() -> None:
    """Key offsets only grow between layouts; near 2**46 the next key lays the window out
    again (offsets from 0), and every key is still found, in order."""
    window = Window(3)
    for order, key in enumerate((b"a", b"bb", b"ccc")):
        window.add(key, order, 0)
    window._lay_out_again(window._rmask + 1, len(window._arena))  # offsets from 0 again
    base = 1 << 46  # as if that many bytes were written before them (a lap multiple)
    for at in range(window._tail, window._next):
        slot = at & window._rmask
        window._rkey[slot] += base << 16
    window._ahead = base + 6
    assert [k for k, _, _ in window.items()] == [b"a", b"bb", b"ccc"]
    window.add(b"dddd", 3, 0)
    assert window._ahead < 64
    assert [k for k, _, _ in window.items()] == [b"bb", b"ccc", b"dddd"]
    assert all(window.seen(key, 0) for key in (b"bb", b"ccc", b"dddd"))


def test_a_window_rebuilt_from_its_places_keeps_a_keys_later_place() -> None:
    window = Window(5, [(b"1", 0, 0), (b"2", 1, 0), (b"1", 2, 0), (b"3", 3, 0)])
    assert window.items() == [(b"2", 1, 0), (b"1", 2, 0), (b"3", 3, 0)]
    assert window.resize(1) == 2
    assert window.items() == [(b"3", 3, 0)]



@pytest.mark.parametrize(("size", "tag_bits"), [(7, 64), (150, 64), (150, 3)])
def test_a_window_stays_exact_past_many_evictions(size: int, tag_bits: int) -> None:
    """Thousands of evictions (the ring is laid out again as places left behind fill it,
    and grows with the larger window), with keys added again and discarded among them:
    still the newest ``size`` keys, oldest first, each at its own place, each found."""
    window = Window(size, tag_bits=tag_bits)
    model: list[tuple[bytes, int, int]] = []  # (key, place, expires), oldest first
    for step in range(30_000):
        key = b"s%d" % (step % 11 if step % 13 == 0 else step)
        if step % 17 == 0:
            window.discard(key)
            model = [e for e in model if e[0] != key]
            continue
        window.add(key, step, 0)
        model = [*[e for e in model if e[0] != key], (key, step, 0)][-size:]
        assert len(window._arena) == window._amask + 1  # keys wrap at the lap, never past
    assert window.items() == model  # each key with its own place, past many cuts
    assert window.floor <= model[0][1]
    assert all(window.seen(key, 0) for key, _, _ in model) and len(window) == size
    held = {key for key, _, _ in model}
    assert not any(window.seen(key, 0) for key in (b"s%d" % step for step in range(30_000))
                   if key not in held)


def test_large_arrays_are_their_own_mappings() -> None:
    """Below 2 MB an ``array``; from 2 MB (a table from 128k keys, a ring from 256k) an
    anonymous mapping advised to use huge pages, zeroed and writable as the array is."""
    small = dedupe_window._zeros(8)
    assert isinstance(small, array) and list(small) == [0] * 8
    large = dedupe_window._zeros(1 << 18)
    assert isinstance(large, memoryview) and len(large) == 1 << 18 and large.format == "q"
    large[(1 << 18) - 1] = -(1 << 62)
    assert large[0] == 0 and large[(1 << 18) - 1] == -(1 << 62)


def test_a_window_in_mapped_arrays_stays_exact() -> None:
    """A window large enough for mapped arrays (table, ring, and the expiries its first
    timed key lays out) keeps its FIFO order and its keys past evictions, a key added
    again and a discard, as a small one does."""
    size = 140_000
    window = Window(size)
    total = size + 30_000
    for order in range(total):
        window.add(b"k%d" % order, order, 0 if order < total - 10 else 10**15)
    window.add(b"k%d" % (total - 5_000), total, 0)  # added again: its later place
    assert window.discard(b"k%d" % (total - 100))
    assert window.timed and len(window) == size - 1
    expected = [(b"k%d" % order, order, 0 if order < total - 10 else 10**15)
                for order in range(total - size, total)
                if order not in (total - 5_000, total - 100)]
    expected.append((b"k%d" % (total - 5_000), total, 0))
    assert window.items() == expected
    assert window.seen(b"k%d" % (total - size), 1) and window.seen(b"k%d" % (total - 1), 1)
    assert not window.seen(b"k%d" % (total - size - 1), 1)  # evicted
    assert not window.seen(b"k%d" % (total - 100), 1)  # discarded
    assert not window.seen(b"k%d" % (total - 1), 10**15)  # expired
    assert window.floor == total - size


# -- reading one header from the raw properties ---------------------------------------------

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.binary(max_size=20) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3),
    max_leaves=8)
HEADERS = st.dictionaries(st.sampled_from(["a", "x-deduplication-header", "x-cache-ttl", "é"])
                          | st.text(min_size=1, max_size=10), VALUES, max_size=6)


def raw_properties(headers: dict[str, object] | None, **props: object) -> bytes:
    encoded = pamqp.frame.marshal(pamqp.header.ContentHeader(
        0, 0, pamqp.commands.Basic.Properties(headers=headers, **props)), 1)
    return encoded[7 + 12:-1]  # frame header, class/weight/body size; frame end


@settings(max_examples=300, deadline=None)
@given(headers=HEADERS | st.none(), type_=st.none() | st.text(max_size=5))
def test_header_reader_agrees_with_the_full_decode(headers: dict[str, object] | None,
                                                   type_: str | None) -> None:
    message = Message("x", "", raw_properties(headers, content_type=type_, delivery_mode=2),
                      b"")
    decoded = message.headers or {}
    expected = (dedupe_key(decoded.get("x-deduplication-header")), decoded.get("x-cache-ttl"))
    assert HeaderReader("x-deduplication-header", "x-cache-ttl").read(message) == expected
    assert HeaderReader("x-deduplication-header").read(message) == (expected[0], None)


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=30) | st.text(alphabet="abc\x7f", max_size=3),
       type_=st.none() | st.text(max_size=5))
def test_a_table_holding_the_key_alone_is_read_in_one_step(value: str,
                                                           type_: str | None) -> None:
    """``sole``: the key of a table whose one field is the key (ASCII or not, empty too),
    as the full decode types it; None for any other table, ``read`` reads those."""
    reader = HeaderReader("x-deduplication-header", "x-cache-ttl")
    alone = Message("x", "", raw_properties({"x-deduplication-header": value},
                                            content_type=type_), b"")
    assert reader.sole(alone) == dedupe_key(value) == reader.read(alone)[0]
    for other in ({"x-deduplication-header": value, "x-cache-ttl": 5}, {"a": value}, None):
        assert reader.sole(Message("x", "", raw_properties(other, content_type=type_),
                                   b"")) is None


def test_a_long_string_key_is_typed_by_its_wire_type() -> None:
    for value in ("k", "é" * 300):  # short, and long enough to be a digest
        message = Message("x", "", raw_properties({"h": value}), b"")
        assert HeaderReader("h").read(message)[0] == dedupe_key(value)
    assert HeaderReader("h").read(Message("x", "", raw_properties(None), b"")) == (None, None)
    assert HeaderReader("h").read(Message("x", "", b"", b"")) == (None, None)


# -- keys ----------------------------------------------------------------------------------

def test_keys_are_typed() -> None:
    keys = {dedupe_key(v) for v in ("1", 1, b"1", bytearray(b"1"), True, 1.0)}
    assert len(keys) == 5  # bytes and bytearray are both bytes on the wire
    assert dedupe_key(None) is None
    assert dedupe_key("k") == b"sk"
    long = dedupe_key("x" * 1000)
    assert long is not None and len(long) <= MAX_KEY_BYTES and long == dedupe_key("x" * 1000)
    assert long != dedupe_key("x" * 999 + "y")


def test_message_ttl_header_overrides_only_when_positive() -> None:
    assert message_ttl(100, 5000) == 100
    assert message_ttl("100", 5000) == 100
    assert message_ttl(-1, 5000) == 5000
    assert message_ttl(None, None) is None


# -- arguments -----------------------------------------------------------------------------

def test_plugin_exchange_arguments() -> None:
    s = settings_for_exchange("x-message-deduplication",
                              {"x-cache-size": "10", "x-cache-ttl": 500}, durable=True)
    assert s == DedupeSettings(10, 500, "x-deduplication-header", True)
    s = settings_for_exchange("x-message-deduplication",
                              {"x-cache-size": 10, "x-cache-persistence": "memory"}, True)
    assert s is not None and not s.persistent
    s = settings_for_exchange("x-message-deduplication",
                              {"x-cache-size": 10, "x-cache-persistence": "disk"}, False)
    assert s is not None and not s.persistent  # a transient exchange's window is not stored
    assert settings_for_exchange("direct", {"x-cache-size": 10}, True) is None


@pytest.mark.parametrize("arguments, text", [
    ({}, "'x-cache-size'"),
    ({"x-cache-size": True}, "'x-cache-size'"),
    ({"x-cache-size": -3}, "'x-cache-size'"),
    ({"x-cache-size": 3, "x-cache-ttl": 0}, "'x-cache-ttl'"),
    ({"x-cache-size": 3, "x-cache-ttl": "soon"}, "'x-cache-ttl'"),
    ({"x-cache-size": 3, "x-cache-persistence": 1}, "'x-cache-persistence'"),
])
def test_bad_plugin_arguments(arguments: dict[str, object], text: str) -> None:
    with pytest.raises(ChannelError) as err:
        settings_for_exchange("x-message-deduplication", arguments, True)
    assert err.value.code == 406 and text in str(err.value)


def test_lavinmq_argument_defaults() -> None:
    s = settings_for_exchange("topic", {"x-message-deduplication": True,
                                        "x-deduplication-header": "id"}, durable=False)
    assert s == DedupeSettings(DEFAULT_SIZE, None, "id", False)
    assert settings_for_exchange("topic", {"x-message-deduplication": False}, True) is None


# -- the queue mode ------------------------------------------------------------------------

def test_queue_keys_are_counted() -> None:
    dedupe = QueueDedupe("x-deduplication-header")
    m = Message("", "q", b"", b"")
    dedupe.add(b"sk")
    dedupe.add(b"sk")
    assert dedupe.holds(b"sk")
    dedupe.release(m)  # no header: nothing
    assert dedupe.keys == {b"sk": 2}
    dedupe.keys[b"sk"] = 1
    dedupe.clear()
    assert not dedupe.holds(b"sk")


# -- the window's records ------------------------------------------------------------------

class _Log(Recorder):
    deferred = False

    def after_commit(self, callback: object) -> None:
        raise AssertionError("not deferred: nothing waits for a commit")


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_a_durable_window_is_reloaded_in_fifo_order(kind: str, tmp_path: Path) -> None:
    def open_store() -> MemoryStore | LmdbStore:
        return MemoryStore() if kind == "memory" else LmdbStore(tmp_path / "s")

    store = open_store()
    log = _Log(store.state())
    settings_ = DedupeSettings(3, None, "h", True)
    window = ExchangeDedupe(settings_, "/", "x", log, Timekeeping())
    other = ExchangeDedupe(settings_, "/", "y", log, Timekeeping())
    for key in (b"sa", b"sb", b"sc", b"sd"):  # sa is evicted
        window.remember(key, None, 0)
    other.remember(b"sa", None, 0)
    store.write_batch(log.take_batch())
    if kind == "lmdb":
        store.close()
        store = open_store()
    reloaded = ExchangeDedupe(settings_, "/", "x", log, Timekeeping())
    reloaded.load(store)
    assert [k for k, _, _ in reloaded.window.items()] == [b"sb", b"sc", b"sd"]
    reloaded.remember(b"se", None, 0)  # evicts sb, on disk too
    other.drop()
    store.write_batch(log.take_batch())
    assert [k for k, _, _ in store.load_dedupe(dedupe_scope("/", "x"))] == [b"sc", b"sd",
                                                                             b"se"]
    assert store.load_dedupe(dedupe_scope("/", "y")) == []
    store.close()


def test_window_records_cross_the_wire() -> None:
    recorder = Recorder()
    scope = dedupe_scope("/", "x")
    recorder.append_dedupe(scope, 7, b"sk", 123, 5)
    recorder.append_dedupe(scope, 8, b"sl", 0, 6)
    recorder.append_dedupe(scope, 10, b"sm", 0, 6)  # a failed batch's places are skipped
    recorder.drop_dedupe(dedupe_scope("/", "y"))
    batch = recorder.take_batch()
    wire = encode_batch(batch)
    copy = decode_batch(wire)
    assert len(batch.ops) == 3
    assert copy.ops == batch.ops and encode_batch(copy) == wire


# -- a failed write takes its keys back ------------------------------------------------------

class _FailingStore(MemoryStore):
    """Fails the writes whose numbers (1-based) are in ``failing``."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__()
        self.failing = failing
        self.writes = 0

    def write_batch(self, batch: object) -> None:
        self.writes += 1
        if self.writes in self.failing:
            raise StoreError("disk full (simulated)")
        super().write_batch(batch)  # type: ignore[arg-type]


async def test_a_failed_write_takes_its_keys_out_of_the_window() -> None:
    """The batch holding a key's first copy fails (that copy is nacked): the key leaves the
    window, so the publisher's retry is admitted; keys of a batch that was written stay."""
    store = _FailingStore({2})
    log = GroupCommit(store, asyncio.get_running_loop())
    window = ExchangeDedupe(DedupeSettings(10, None, "h", True), "/", "x", log, Timekeeping())
    window.remember(b"skept", None, 0)
    await log.drain()  # write 1
    window.remember(b"slost", None, 0)
    assert window.pending and window.duplicate(b"slost", 0)
    await log.drain()  # write 2 fails
    assert log.failures == 1 and not window.pending
    assert not window.duplicate(b"slost", 0) and window.duplicate(b"skept", 0)
    assert [k for k, _, _ in store.load_dedupe(window.scope)] == [b"skept"]
    log.close()


def test_a_policy_moves_a_window_into_the_store_and_out() -> None:
    """``x-cache-persistence`` set by a policy: the keys so far are written, then dropped;
    a smaller ``x-cache-size`` evicts the oldest, on disk too."""
    store = MemoryStore()
    log = _Log(store.state())
    memory = DedupeSettings(3, None, "h", False)
    window = ExchangeDedupe(memory, "/", "x", log, Timekeeping())
    for key in (b"sa", b"sb"):
        window.remember(key, None, 0)
    store.write_batch(log.take_batch())
    assert store.load_dedupe(window.scope) == []
    window.reconfigure(DedupeSettings(3, None, "h", True))
    window.remember(b"sc", None, 0)
    store.write_batch(log.take_batch())
    assert [k for k, _, _ in store.load_dedupe(window.scope)] == [b"sa", b"sb", b"sc"]
    window.reconfigure(DedupeSettings(2, None, "h", True))
    window.remember(b"sd", None, 0)  # the floor goes out with the next key
    store.write_batch(log.take_batch())
    assert [k for k, _, _ in store.load_dedupe(window.scope)] == [b"sc", b"sd"]
    window.reconfigure(DedupeSettings(2, None, "h", False))
    store.write_batch(log.take_batch())
    assert store.load_dedupe(window.scope) == []
    assert window.duplicate(b"sd", 0) and not window.duplicate(b"sa", 0)
