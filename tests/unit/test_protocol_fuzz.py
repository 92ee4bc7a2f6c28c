"""Fuzzing the protocol core: hostile bytes never break the Connection.

After a valid handshake the connection is fed (a) random bytes and (b) a
valid frame sequence with random mutations (flipped bytes, truncation,
insertions, wrong sizes, channel numbers and method ids, dropped, duplicated
and reordered frames), cut into random chunks. Whatever happens:

* ``receive_data`` never raises;
* every ``data_to_send()`` batch is a sequence of well-formed frames that
  pamqp can unmarshal (relayed publisher properties included: malformed ones
  close the connection instead, see the last test);
* fed whole or byte by byte, the server writes the same bytes;
* a ``connection.close`` carries a hard-error reply code, a
  ``channel.close`` a soft one, and after ``connection.close`` the server
  only ever says ``connection.close-ok``;
* the catch-all ``internal error`` (log.exception) never fires: an
  exception escaping a handler is a bug, even on garbage input.
"""

from __future__ import annotations

import itertools
import logging
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from leveret.amqp.connection import CLOSED, CLOSING
from leveret.tests.unit.wire import HARD_ERROR_CODES, Client, content_frames, parse_frames

Basic = commands.Basic
SOFT_ERROR_CODES = frozenset({311, 312, 313, 403, 404, 405, 406})

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _m(channel: int, cmd: Any) -> list[bytes]:
    return [Client.method(channel, cmd)]


def _publish(channel: int, body: bytes, frame_max: int = 4096, **kw: Any) -> list[bytes]:
    props = kw.pop("properties", None)
    frames = _m(channel, Basic.Publish(**kw))
    content = content_frames(channel, body, frame_max, props)
    # split the joined content back into its frames
    pos = 0
    while pos < len(content):
        size = int.from_bytes(content[pos + 3 : pos + 7], "big")
        frames.append(content[pos : pos + 8 + size])
        pos += 8 + size
    return frames


def valid_script() -> list[bytes]:
    """A busy but valid session, one entry per frame (frame_max 4096)."""
    props = Basic.Properties(content_type="text/plain", headers={"a": 1, "b": "x"},
                             delivery_mode=2, priority=3, timestamp=None, message_id="id")
    frames: list[bytes] = []
    frames += _m(1, commands.Channel.Open())
    frames += _m(2, commands.Channel.Open())
    frames += _m(1, commands.Queue.Declare(queue="q", arguments={"x-max-priority": 5}))
    frames += _m(1, commands.Exchange.Declare(exchange="t", exchange_type="topic"))
    frames += _m(1, commands.Exchange.Declare(exchange="h", exchange_type="headers"))
    frames += _m(1, commands.Queue.Bind(queue="q", exchange="t", routing_key="a.*"))
    frames += _m(1, commands.Queue.Bind(queue="q", exchange="h", arguments={"x-match": "any",
                                                                            "a": 1}))
    frames += _m(1, commands.Confirm.Select())
    frames += _m(2, Basic.Qos(prefetch_count=2))
    frames += _m(2, Basic.Consume(queue="q", consumer_tag="c2"))
    frames += _publish(1, b"hello", routing_key="q")
    frames += _publish(1, b"x" * 5000, exchange="t", routing_key="a.b", properties=props)
    frames += _publish(1, b"hh", exchange="h", routing_key="", properties=props)
    frames += _publish(1, b"", exchange="amq.headers", routing_key="", properties=props)
    frames += _publish(1, b"r", routing_key="nowhere", mandatory=True, properties=props)
    frames += _m(2, Basic.Ack(delivery_tag=1))
    frames += _m(2, Basic.Nack(delivery_tag=2, requeue=True))
    frames += _m(2, Basic.Reject(delivery_tag=3, requeue=False))
    frames += _m(1, Basic.Get(queue="q"))
    frames += _m(1, Basic.Ack(delivery_tag=0, multiple=True))
    frames += [b"\x08\x00\x00\x00\x00\x00\x00\xce"]
    frames += _m(2, commands.Tx.Select())
    frames += _publish(2, b"tx", routing_key="q")
    frames += _m(2, commands.Tx.Commit())
    frames += _m(2, Basic.Cancel(consumer_tag="c2"))
    frames += _m(1, commands.Queue.Purge(queue="q"))
    frames += _m(1, commands.Queue.Unbind(queue="q", exchange="t", routing_key="a.*"))
    frames += _m(1, commands.Exchange.Delete(exchange="t"))
    frames += _m(1, commands.Queue.Delete(queue="q"))
    frames += _m(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                           method_id=0))
    frames += _m(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0,
                                              method_id=0))
    return frames


SCRIPT = valid_script()


class Checker:
    """Feeds a connection and checks every batch it writes."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.clear()
        self.caplog = caplog
        self.client = Client()
        self.client.handshake(frame_max=4096)
        self.closed_with: int | None = None
        self.fed = bytearray()

    def feed(self, data: bytes) -> None:
        conn = self.client.conn
        conn.receive_data(data)  # must never raise
        out = b"".join(conn.data_to_send())
        self.fed += data  # even when silent: a later batch may relay these bytes
        if not out:
            return
        for channel, obj in parse_frames(out):  # AssertionError if pamqp cannot read it
            if self.closed_with is not None:
                assert isinstance(obj, commands.Connection.CloseOk), obj
            if isinstance(obj, commands.Connection.Close):
                assert channel == 0
                assert obj.reply_code in HARD_ERROR_CODES, obj.reply_text
                self.closed_with = obj.reply_code
            elif isinstance(obj, commands.Channel.Close):
                assert obj.reply_code in SOFT_ERROR_CODES, obj.reply_text

    def finish(self) -> None:
        internal = [r for r in self.caplog.records
                    if r.levelno >= logging.ERROR or "internal error" in r.getMessage()]
        assert not internal, [(r.getMessage(), r.exc_text) for r in internal]
        if self.closed_with is not None:
            assert self.client.conn.state in (CLOSING, CLOSED)
        # The connection still tears down cleanly.
        self.client.conn.connection_lost()
        assert self.client.conn.state == CLOSED


def feed_in_chunks(checker: Checker, data: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        checker.feed(data[a:b])


def test_valid_script_is_valid(caplog: pytest.LogCaptureFixture) -> None:
    checker = Checker(caplog)
    for f in SCRIPT:
        checker.feed(f)
    checker.finish()
    assert checker.closed_with is None
    assert checker.client.conn.state == CLOSED
    assert checker.client.conn.want_close


@FUZZ
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=6))
def test_random_bytes_after_handshake(caplog: pytest.LogCaptureFixture, data: bytes,
                                      cuts: list[int]) -> None:
    checker = Checker(caplog)
    feed_in_chunks(checker, data, cuts)
    checker.finish()


@FUZZ
@given(prefix=st.integers(0, len(SCRIPT)), data=st.binary(min_size=1, max_size=300))
def test_random_bytes_mid_session(caplog: pytest.LogCaptureFixture, prefix: int,
                                  data: bytes) -> None:
    checker = Checker(caplog)
    checker.feed(b"".join(SCRIPT[:prefix]))
    checker.feed(data)
    checker.finish()


# -- structured mutations ------------------------------------------------------------


def _set(frame: bytearray, at: int, value: bytes) -> bytearray:
    if at + len(value) <= len(frame):
        frame[at : at + len(value)] = value
    return frame


MUTATIONS = ["flip", "truncate", "insert", "size", "channel", "method", "class", "drop",
             "duplicate", "swap", "type", "body_size", "props"]


@st.composite
def mutated_scripts(draw: st.DrawFn) -> list[bytes]:
    """The valid script, one entry per frame, with one to four mutations."""
    frames = [bytearray(f) for f in SCRIPT]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(MUTATIONS))
        i = draw(st.integers(0, len(frames) - 1))
        f = frames[i]
        ftype = f[0] if f else -1
        if kind == "flip":
            at = draw(st.integers(7, max(7, len(f) - 2)))
            if at < len(f) - 1:
                f[at] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            frames[i] = f[: draw(st.integers(0, max(0, len(f) - 1)))]
        elif kind == "insert":
            at = draw(st.integers(0, len(f)))
            frames[i] = f[:at] + draw(st.binary(min_size=1, max_size=12)) + f[at:]
        elif kind == "size":
            _set(f, 3, draw(st.integers(0, 2**32 - 1)).to_bytes(4, "big"))
        elif kind == "channel":
            _set(f, 1, draw(st.sampled_from([0, 1, 2, 3, 2047, 2048, 65535])).to_bytes(2, "big"))
        elif kind == "method" and ftype == 1:
            _set(f, 9, draw(st.integers(0, 130)).to_bytes(2, "big"))
        elif kind == "class" and ftype == 1:
            _set(f, 7, draw(st.sampled_from([0, 10, 20, 40, 50, 60, 85, 90, 99])).to_bytes(2, "big"))
        elif kind == "drop":
            del frames[i]
            if not frames:
                frames.append(bytearray(b"\x08\x00\x00\x00\x00\x00\x00\xce"))
        elif kind == "duplicate":
            frames.insert(i, bytearray(f))
        elif kind == "swap":
            j = draw(st.integers(0, len(frames) - 1))
            frames[i], frames[j] = frames[j], frames[i]
        elif kind == "type" and f:
            f[0] = draw(st.sampled_from([1, 2, 3, 8]))
        elif kind == "props" and ftype == 2 and len(f) >= 22:
            # a byte of the property flags or list of a content header
            at = draw(st.integers(19, len(f) - 2))
            f[at] ^= draw(st.integers(1, 255))
        elif kind == "body_size" and ftype == 2 and len(f) >= 20:
            _set(f, 11, draw(st.integers(0, 2**64 - 1)).to_bytes(8, "big"))
    return [bytes(f) for f in frames]


@FUZZ
@given(script=mutated_scripts(), cuts=st.lists(st.integers(0, 20000), max_size=5))
def test_mutated_frame_sequences(caplog: pytest.LogCaptureFixture,
                                 script: list[bytes], cuts: list[int]) -> None:
    checker = Checker(caplog)
    feed_in_chunks(checker, b"".join(script), cuts)
    checker.finish()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(script=mutated_scripts())
def test_mutated_sequences_whole_and_bytewise_agree(caplog: pytest.LogCaptureFixture,
                                                    script: list[bytes]) -> None:
    data = b"".join(script)
    outputs = []
    for bytewise in (False, True):
        caplog.clear()
        client = Client(byte_by_byte=bytewise)
        # Fixed consumer tags and queue names keep the two runs byte-identical.
        client.handshake(frame_max=4096)
        client.feed(data)
        outputs.append(bytes(client.drain_raw()))
    if b"amq.gen-" in outputs[0] or b"amq.ctag-" in outputs[0]:
        return  # a mutation made the server generate a random name
    assert outputs[0] == outputs[1]


def test_malformed_properties_close_the_connection_and_are_not_relayed() -> None:
    """As RabbitMQ 3.10 (tests/integration/test_differential_properties.py): 541 with the
    bare text INTERNAL_ERROR, no method ids; the consumer gets nothing."""
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.call(1, commands.Queue.Declare(queue="q"))
    client.call(1, Basic.Consume(queue="q", consumer_tag="c"))
    # content-type flag set, short string of length 2, then a table with an unknown type
    props = b"\xa0\x00" + b"\x02ab" + b"\x00\x00\x00\x09\x01aZ"
    payload = struct.pack(">HHQ", 60, 0, 1) + props
    data = (client.method(1, Basic.Publish(routing_key="q"))
            + struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce"
            + b"\x03\x00\x01\x00\x00\x00\x01x\xce")
    frames = client.send(data)  # parse_frames: every frame pamqp can read
    assert [type(f) for _, f in frames] == [commands.Connection.Close]
    close = frames[0][1]
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        541, "INTERNAL_ERROR", 0, 0)
    assert client.conn.state == CLOSING
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


def test_well_formed_properties_are_relayed_byte_for_byte() -> None:
    """Checked once per distinct property list a channel sees; relayed unchanged."""
    client = Client()
    client.handshake()
    client.open_channel(1)
    client.call(1, commands.Queue.Declare(queue="q"))
    client.call(1, Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    props = b"\x30\x00" + struct.pack(">I", 7) + b"\x01aI\x00\x00\x00\x01" + b"\x02"
    payload = struct.pack(">HHQ", 60, 0, 1) + props
    one = (client.method(1, Basic.Publish(routing_key="q"))
           + struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce"
           + b"\x03\x00\x01\x00\x00\x00\x01x\xce")
    client.feed(one + one)
    out = client.drain_raw()
    assert out.count(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce") == 2
    assert client.conn.channels[1].valid_properties == {props: False}  # no CC/BCC work
