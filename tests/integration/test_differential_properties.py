"""Malformed message properties: Leveret must answer like RabbitMQ 3.10.

Each case publishes one message whose content header carries hand-built
property bytes, then fetches it back with ``basic.get``. RabbitMQ 3.10.8 decodes
the properties of every publish; on a malformed list its channel process
crashes and the connection is closed with 541 and the bare text
``INTERNAL_ERROR`` (no method ids). Recorded on 127.0.0.1:5672; the same table
runs against Leveret. Well-formed lists, unusual ones included, are relayed.
Where Leveret deliberately differs, ``leveret=`` pins what it does and why.

Re-record against RabbitMQ: ``python tests/integration/test_differential_properties.py``.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

pytest.importorskip("pika")
from pamqp import body as pamqp_body
from pamqp import commands as spec

from leveret.tests.integration import test_differential_errors as _errors
from leveret.tests.integration.test_differential_errors import (
    HEADER,
    RABBITMQ,
    Case,
    Target,
    frame_bytes,
    matches,
    observe,
)

# The fixture: the Leveret under test and, when it answers on 127.0.0.1:5672, RabbitMQ.
target = _errors.target

QUEUE = "diff.q.props"
CRASH = ("connection", 541, "INTERNAL_ERROR", 0, 0)
RELAYED = ("ok", "relayed")


def _headers(entries: bytes) -> bytes:
    """A property list with only ``headers`` set, holding ``entries`` as its table."""
    return b"\x20\x00" + struct.pack(">I", len(entries)) + entries


def _publish_props(props: bytes) -> Any:
    def run(t: Target) -> str:
        c = t.raw()
        ch = c.channel()
        c.call(ch, spec.Queue.Declare(queue=QUEUE, auto_delete=True))
        c.send(ch, spec.Basic.Publish(exchange="", routing_key=QUEUE))
        c.send_bytes(frame_bytes(HEADER, ch, struct.pack(">HHQ", 60, 0, 1) + props))
        c.send(ch, pamqp_body.ContentBody(b"x"))
        c.sync(ch)
        c.send(ch, spec.Basic.Get(queue=QUEUE, no_ack=True))
        c.wait(ch, ["Basic.GetOk"])
        # The relayed header, byte for byte: the publisher's properties, unchanged.
        while len(c.buf) < 7 or len(c.buf) < 8 + struct.unpack(">I", c.buf[3:7])[0]:
            c._fill()
        size = struct.unpack(">I", c.buf[3:7])[0]
        relayed = c.buf[7 + 12:7 + size]  # after the frame head (7) and class, weight, size
        return "relayed" if relayed == props else f"changed: {relayed!r}"
    return run


CASES = [
    # Malformed: RabbitMQ's channel crashes, the connection closes with 541.
    Case("shortstr_past_end_then_bad_table",
         _publish_props(b"\xa0\x00\x02ab\x00\x00\x00\x09\x01aZ"), CRASH),
    Case("delivery_mode_missing", _publish_props(b"\x10\x00"), CRASH),
    Case("content_type_past_end", _publish_props(b"\x80\x00\x05ab"), CRASH),
    Case("timestamp_truncated", _publish_props(b"\x00\x40\x00\x00\x00\x01"), CRASH),
    Case("expiration_truncated", _publish_props(b"\x01\x00\x05123"), CRASH),
    Case("bytes_after_the_list", _publish_props(b"\x10\x00\x02\x00\x00"), CRASH),
    Case("bytes_without_flags", _publish_props(b"\x00\x00\x01"), CRASH),
    Case("second_flag_word", _publish_props(b"\x00\x01\x00\x00"), CRASH),
    Case("headers_unknown_type", _publish_props(_headers(b"\x01aZ")), CRASH),
    Case("headers_type_U", _publish_props(_headers(b"\x01aU\x00\x01")), CRASH),
    Case("headers_length_past_end",
         _publish_props(b"\x20\x00" + struct.pack(">I", 100) + b"\x01aSxx"), CRASH),
    Case("headers_value_truncated", _publish_props(_headers(b"\x01aI\x00\x00")), CRASH),
    Case("headers_key_past_end", _publish_props(_headers(b"\x05ab")), CRASH),
    Case("headers_longstr_past_table",
         _publish_props(_headers(b"\x01aS\x00\x00\x00\x09ab")), CRASH),
    Case("headers_nested_table_bad",
         _publish_props(_headers(b"\x01aF" + struct.pack(">I", 3) + b"\x01bZ")), CRASH),
    Case("headers_array_bad", _publish_props(_headers(b"\x01aA\x00\x00\x00\x01Z")), CRASH),
    # Well-formed, if unusual: relayed unchanged.
    Case("no_properties", _publish_props(b"\x00\x00"), RELAYED),
    Case("delivery_mode_2", _publish_props(b"\x10\x00\x02"), RELAYED),
    Case("headers_signed_int", _publish_props(_headers(b"\x01aI\x00\x00\x00\x01")), RELAYED),
    Case("headers_rarer_types", _publish_props(_headers(
        b"\x01au\x00\x01" b"\x01bi\x00\x00\x00\x01" b"\x01cL" + b"\x00" * 8
        + b"\x01dB\x01" b"\x01ex\x00\x00\x00\x01z" b"\x01fV" b"\x01gD\x01\x00\x00\x00\x01"
        b"\x01ht\x02")), RELAYED),
    Case("headers_empty_and_repeated_keys", _publish_props(_headers(
        b"\x00I\x00\x00\x00\x01" b"\x01aI\x00\x00\x00\x01" b"\x01aI\x00\x00\x00\x02")), RELAYED),
    Case("shortstr_not_utf8", _publish_props(b"\x80\x00\x02\xff\xfe"), RELAYED),
    Case("unused_flag_bit_1", _publish_props(b"\x00\x02"), RELAYED),
    # Deliberate differences. RabbitMQ ignores the continuation bit (bit 0) of the one flag
    # word; clients that honour it (pamqp, so aio-pika) could not read the relayed header,
    # so Leveret refuses it. A table key that is not UTF-8 is refused as everywhere Leveret
    # decodes tables (RabbitMQ relays it).
    Case("continuation_bit_alone", _publish_props(b"\x00\x01"), RELAYED, leveret=CRASH),
    Case("headers_key_not_utf8", _publish_props(_headers(b"\x01\xffI\x00\x00\x00\x01")),
         RELAYED, leveret=CRASH),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_properties_match_rabbitmq(target: Target, case: Case) -> None:
    target.cleanup(queues=(QUEUE,))
    observed = observe(case.run, target)
    expected = case.leveret if target.name == "leveret" and case.leveret else case.expected
    assert matches(expected, observed), (
        f"{case.id} on {target.name}:\n  expected {expected!r}\n  observed {observed!r}")


if __name__ == "__main__":
    record = Target("record", *RABBITMQ)
    for case in CASES:
        record.cleanup(queues=(QUEUE,))
        obs = observe(case.run, record)
        print(f"{'  ' if matches(case.expected, obs) else '!!'} {case.id}: {obs!r}")
