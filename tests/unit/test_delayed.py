"""Delayed exchanges without a server: the plugin's rules (``exchanges/delayed.py``) and the
schedule (``broker/delayed.py``) over the memory and LMDB stores, with a fake clock."""

from __future__ import annotations

import decimal
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from leveret.broker import delayed as schedule
from leveret.broker.broker import Broker
from leveret.broker.publishing import ACCEPTED, UNROUTED, basic_publish
from leveret.broker.vhost import VirtualHost
from leveret.config import Config
from leveret.exchanges import delayed
from leveret.exchanges.exchange import ROUTING_TYPES
from leveret.model.errors import ChannelError, ConnectionError_
from leveret.model.message import Message
from leveret.model.properties import encode_properties
from leveret.persistence.lmdb_store import LmdbStore

T0 = 1_800_000_000_000  # ms since the epoch


# -- the plugin's rules ------------------------------------------------------------------

@pytest.mark.parametrize(("value", "delay"), [
    (1500, 1500), ("1500", 1500), (b"1500", 1500), (1500.7, 1500), (decimal.Decimal("1500.2"), 1500),
    (2**32, 2**32), (0, 0), (-5, -5), ("soon", 0), (True, 0), (None, 0), ([1], 0),
    (float("nan"), 0),
])
def test_x_delay_is_read_as_the_plugin_reads_it(value: object, delay: int) -> None:
    assert delayed.delay_of({"x-delay": value}) == delay


def test_no_headers_or_no_x_delay_is_no_delay() -> None:
    assert delayed.delay_of(None) == delayed.delay_of({}) == delayed.delay_of({"a": 1}) == 0


def test_declaration_errors_are_the_plugins() -> None:
    with pytest.raises(ChannelError) as missing:
        delayed.validate("x-delayed-message", {}, ROUTING_TYPES)
    assert (missing.value.code, missing.value.detail) == (
        406, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
    with pytest.raises(ChannelError) as itself:
        delayed.validate("x-delayed-message", {"x-delayed-type": "x-delayed-message"},
                         ROUTING_TYPES)
    assert itself.value.detail == (
        "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
    with pytest.raises(ConnectionError_) as unknown:
        delayed.validate("x-delayed-message", {"x-delayed-type": "nope"}, ROUTING_TYPES)
    assert (unknown.value.code, unknown.value.detail) == (503, "unknown exchange type 'nope'")
    delayed.validate("x-delayed-message", {"x-delayed-type": b"topic"}, ROUTING_TYPES)
    delayed.validate("direct", {}, ROUTING_TYPES)


def test_either_style_delays() -> None:
    assert delayed.is_delayed("x-delayed-message", {"x-delayed-type": "direct"})
    assert delayed.is_delayed("topic", {"x-delayed-exchange": True})
    assert not delayed.is_delayed("topic", {"x-delayed-exchange": "true"})
    assert not delayed.is_delayed("topic", {})


@given(st.lists(st.tuples(st.integers(0, delayed.MAX_DUE_MS), st.integers(0, 2**40)),
                min_size=2, max_size=30))
def test_keys_sort_by_due_time(items: list[tuple[int, int]]) -> None:
    keys = [delayed.due_key(due, counter) for due, counter in items]
    assert all(0 <= k < 2**64 for k in keys)
    assert [delayed.due_of(k) for k in sorted(keys)] == sorted(due for due, _ in items)


def test_a_due_time_past_the_key_range_is_clamped_not_wrapped() -> None:
    assert delayed.due_of(delayed.due_key(2**60, 7)) == delayed.MAX_DUE_MS


# -- the schedule ----------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _broker(store: LmdbStore | None = None) -> tuple[Broker, VirtualHost, Clock]:
    broker = Broker(Config(), store)
    broker.recover()
    vhost = broker.vhosts["/"]
    clock = Clock()
    vhost.delays.clock = clock
    return broker, vhost, clock


def _message(body: bytes, delay: object = None, exchange: str = "dx", key: str = "k") -> Message:
    headers = {"x-delay": delay} if delay is not None else None
    props = commands.Basic.Properties(headers=headers, delivery_mode=2)
    return Message(exchange, key, encode_properties(props), body)


def _topology(vhost: VirtualHost, durable: bool = True) -> None:
    vhost.declare_exchange("dx", "x-delayed-message", durable, False, False,
                           {"x-delayed-type": "direct"})
    queue, _ = vhost.declare_queue("q", durable=True, exclusive=False, auto_delete=False,
                                   arguments={})
    vhost.bind(vhost.exchanges["dx"], queue, "k", {})


def _publish(vhost: VirtualHost, message: Message, mandatory: bool = False) -> object:
    return basic_publish(vhost, message, (), mandatory, None, None)


def test_delayed_messages_wait_and_come_out_in_due_order() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    dx = vhost.delays.by_name["dx"]
    for delay in (3000, 1000, 2000):
        _publish(vhost, _message(str(delay).encode(), delay))
    _publish(vhost, _message(b"now", 0))
    queue = vhost.queues["q"]
    assert queue.message_count == 1 and dx.count == 3
    assert vhost.delays.release_due(dx) == (0, T0 + 1000)
    clock.now = T0 + 2000
    assert vhost.delays.release_due(dx) == (2, T0 + 3000)
    assert queue.message_count == 3 and dx.count == 1
    clock.now = T0 + 3000
    assert vhost.delays.release_due(dx) == (1, None)
    assert dx.count == 0


def test_a_released_message_carries_minus_its_delay() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    _publish(vhost, _message(b"m", "1500"))
    clock.now = T0 + 1500
    vhost.delays.release_due(vhost.delays.by_name["dx"])
    stored = vhost.log.read_queue(vhost.queues["q"].qid, 0, 10)
    assert stored[0].message.headers == {"x-delay": -1500}


def test_mandatory_is_judged_at_publish_time() -> None:
    _, vhost, _ = _broker()
    _topology(vhost)
    # (HELD with an event loop: its confirm waits for the commit; here writes are synchronous)
    assert _publish(vhost, _message(b"m", 100), mandatory=True) is ACCEPTED
    assert _publish(vhost, _message(b"m", 100, key="nobody"), mandatory=True) is UNROUTED
    assert vhost.delays.by_name["dx"].count == 1


def test_release_uses_the_bindings_as_they_are_then() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    _publish(vhost, _message(b"m", 100, key="later"))
    other, _ = vhost.declare_queue("other", durable=True, exclusive=False, auto_delete=False,
                                   arguments={})
    vhost.bind(vhost.exchanges["dx"], other, "later", {})
    clock.now = T0 + 100
    vhost.delays.release_due(vhost.delays.by_name["dx"])
    assert other.message_count == 1


def test_a_released_message_goes_to_its_cc_keys_too() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    cc_queue, _ = vhost.declare_queue("cc", durable=True, exclusive=False, auto_delete=False,
                                      arguments={})
    vhost.bind(vhost.exchanges["dx"], cc_queue, "k-cc", {})
    props = commands.Basic.Properties(headers={"x-delay": 100, "CC": ["k-cc"]}, delivery_mode=2)
    _publish(vhost, Message("dx", "k", encode_properties(props), b"m"))
    assert cc_queue.message_count == 0
    clock.now = T0 + 100
    vhost.delays.release_due(vhost.delays.by_name["dx"])
    assert vhost.queues["q"].message_count == 1 and cc_queue.message_count == 1


def test_a_backlog_is_released_in_batches() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    dx = vhost.delays.by_name["dx"]
    for i in range(25):
        _publish(vhost, _message(b"%d" % i, 10 + i))
    clock.now = T0 + 1000
    assert vhost.delays.release_due(dx, limit=10) == (10, T0 + 20)
    assert vhost.delays.release_due(dx, limit=10) == (10, T0 + 30)
    assert vhost.delays.release_due(dx, limit=10) == (5, None)
    assert vhost.queues["q"].message_count == 25


def test_cancel_release_now_and_delete() -> None:
    _, vhost, clock = _broker()
    _topology(vhost)
    dx = vhost.delays.by_name["dx"]
    for i in range(4):
        _publish(vhost, _message(b"%d" % i, 1000 * (i + 1)))
    listed = vhost.delays.listing(dx, 10)
    assert [s.message.body for s in listed] == [b"0", b"1", b"2", b"3"]
    assert [s.due_ms for s in listed] == [T0 + 1000, T0 + 2000, T0 + 3000, T0 + 4000]
    assert vhost.delays.cancel(dx, listed[0].key)
    assert not vhost.delays.cancel(dx, listed[0].key)
    assert vhost.delays.release_now(dx, listed[3].key)
    assert vhost.queues["q"].message_count == 1 and dx.count == 2
    assert [s.message.body for s in vhost.delays.listing(dx, 10)] == [b"1", b"2"]
    vhost.delete_exchange(vhost.exchanges["dx"])
    assert "dx" not in vhost.delays.by_name
    assert vhost.log.queue_stats(dx.qid).count == 0
    clock.now = T0 + 10_000
    assert vhost.queues["q"].message_count == 1


def test_the_schedule_survives_a_restart_without_reading_it(tmp_path: Path) -> None:
    broker, vhost, _ = _broker(LmdbStore(tmp_path / "s"))
    _topology(vhost)
    for i in range(5):
        _publish(vhost, _message(b"%d" % i, 1000 + i))
    broker.log.close()
    broker.store.close()
    store = LmdbStore(tmp_path / "s")
    reads: list[int] = []
    read_queue = store.read_queue
    store.read_queue = lambda *a: reads.append(1) or read_queue(*a)  # type: ignore[method-assign]
    broker, vhost, clock = _broker(store)
    assert reads == []  # recovery read one counter per exchange, no message
    dx = vhost.delays.by_name["dx"]
    assert dx.count == 5 and "amq.delayed-dx" not in vhost.queues
    clock.now = T0 + 1002
    assert vhost.delays.release_due(dx) == (3, T0 + 1003)
    broker.log.close()
    broker.store.close()
    broker, vhost, clock = _broker(LmdbStore(tmp_path / "s"))
    assert vhost.delays.by_name["dx"].count == 2
    assert vhost.queues["q"].message_count == 3
    broker.store.close()


def test_a_transient_exchanges_schedule_does_not_outlive_it(tmp_path: Path) -> None:
    broker, vhost, _ = _broker(LmdbStore(tmp_path / "s"))
    _topology(vhost, durable=False)
    _publish(vhost, _message(b"m", 1000))
    broker.log.close()
    broker.store.close()
    broker, vhost, _ = _broker(LmdbStore(tmp_path / "s"))
    assert "dx" not in vhost.delays.by_name
    assert broker.store.load_definitions().queues == [
        d for d in broker.store.load_definitions().queues if not schedule.is_store(d)]
    broker.store.close()


# -- x-delay read from the raw property list --------------------------------------------

_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.text(max_size=12), st.binary(max_size=8),
    st.booleans(), st.floats(allow_nan=False), st.none(),
    st.sampled_from(["1500", " 42 ", "-3", "9" * 30]),
    st.lists(st.integers(0, 5), max_size=3), st.dictionaries(st.text(max_size=3),
                                                             st.integers(0, 9), max_size=2))


@given(st.dictionaries(st.text(min_size=1, max_size=10), _VALUES, max_size=5), _VALUES,
       st.booleans(), st.booleans())
def test_the_raw_walk_reads_what_decoding_reads(others: dict[str, object], value: object,
                                                with_delay: bool, content_type: bool) -> None:
    headers = dict(others)
    if with_delay:
        headers["x-delay"] = value
    props = commands.Basic.Properties(content_type="text/plain" if content_type else None,
                                      headers=headers or None, delivery_mode=2)
    raw = encode_properties(props)
    walked = delayed.raw_delay(raw)
    from leveret.model.properties import decode_properties
    expected = delayed.delay_of(decode_properties(raw).headers)
    assert walked is None or walked == expected
    found = delayed.find_delay(raw)
    assert found is None or found[0] == expected


def test_the_raw_walk_reads_the_usual_types() -> None:
    for value, delay in ((1500, 1500), (2**40, 2**40), ("700", 700), (-5, -5), (True, 0)):
        raw = encode_properties(commands.Basic.Properties(headers={"a": "x-delay",
                                                                   "x-delay": value}))
        assert delayed.raw_delay(raw) == delay
    assert delayed.raw_delay(encode_properties(commands.Basic.Properties())) == 0
    assert delayed.raw_delay(b"") == 0


_INTEGER_TYPES = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
                  "l": ">q", "L": ">q"}


@given(st.sampled_from(sorted(_INTEGER_TYPES)), st.data())
def test_the_raw_walk_reads_every_integer_type_to_its_limits(kind: str, data: st.DataObject
                                                             ) -> None:
    """Each integer type byte a client may send, at its limits: the walk's own integer
    reads (C in the compiled build) against struct's."""
    fmt = _INTEGER_TYPES[kind]
    bits = struct.calcsize(fmt) * 8
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if fmt[1].islower() else (
        0, 2**bits - 1)
    value = data.draw(st.one_of(st.sampled_from([low, high, low + 1, high - 1, 0, 1]),
                                st.integers(low, high)))
    other = b"\x01aS\x00\x00\x00\x01z"
    field = b"\x07x-delay" + kind.encode() + struct.pack(fmt, value)
    table = other + field if data.draw(st.booleans()) else field + other
    raw = b"\x20\x00" + struct.pack(">I", len(table)) + table
    assert delayed.raw_delay(raw) == value
    assert delayed.find_delay(raw) == (value, delayed.raw_released(raw, value) if value > 0
                                       else None)


@given(st.binary(max_size=40), st.integers(0, 60), st.binary(min_size=1, max_size=3))
def test_the_raw_walk_answers_or_defers_on_a_damaged_list(tail: bytes, cut: int, junk: bytes
                                                          ) -> None:
    """A list cut short, or with bytes overwritten, anywhere: the walk answers (a delay,
    or None for "decode it") without raising, and where decoding succeeds it agrees with
    it. (That no read passes the end is ``_find``'s bounds checks; no assertion sees it.)"""
    from leveret.model.properties import decode_properties
    good = encode_properties(commands.Basic.Properties(
        content_type="t", headers={"a": tail, "x-delay": 1500, "z": [1, "x"]}))
    for raw in (good[:cut], good[:cut] + junk + good[cut + len(junk):], b"\x20\x00" + tail):
        walked = delayed.raw_delay(raw)
        found = delayed.find_delay(raw)
        try:
            expected = delayed.delay_of(decode_properties(raw).headers)
        except ValueError:
            continue
        assert walked is None or walked == expected
        assert found is None or found[0] == expected


@given(st.dictionaries(st.text(min_size=1, max_size=10), _VALUES, max_size=4),
       st.one_of(st.integers(1, 2**62), st.sampled_from(["1500", "70"])), st.booleans())
def test_the_raw_rewrite_is_what_re_encoding_gives(others: dict[str, object], value: object,
                                                    content_type: bool) -> None:
    from leveret.model.properties import decode_properties
    props = commands.Basic.Properties(content_type="text/plain" if content_type else None,
                                      headers={**others, "x-delay": value}, delivery_mode=2,
                                      correlation_id="c")
    raw = encode_properties(props)
    delay = delayed.delay_of({"x-delay": value})
    rewritten = delayed.raw_released(raw, delay)
    found = delayed.find_delay(raw)
    assert found is None or found == (delay, rewritten)
    if rewritten is None:
        return
    decoded = decode_properties(rewritten)
    assert decoded.headers == {**decode_properties(raw).headers, "x-delay": -delay}
    assert (decoded.content_type, decoded.delivery_mode, decoded.correlation_id) == (
        props.content_type, 2, "c")
