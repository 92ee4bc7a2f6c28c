"""Micro-benchmark: pamqp vs the hand-written fast path, µs per operation.

Run: python bench/codec_micro.py [--quick]

Each row times one operation on a typical message (256-byte body, a
content-type and delivery-mode, a generated consumer tag) and prints the best
of several repeats, so noise from other processes inflates nothing but the
spread.  The pamqp column is what the broker would do without the fast path:
build a pamqp object and marshal it, or unmarshal a payload into one.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable

from pamqp import base, commands, frame, header
from pamqp import body as pbody

from leveret.amqp import fastpath as fp
from leveret.model import properties as props_codec

Basic = commands.Basic

CHANNEL = 1
CTAG = "amq.ctag-Xb2kQ9w1TQy3rNFhZpL0aA"
EXCHANGE = "amq.topic"
ROUTING_KEY = "orders.eu.created"
TAG = 123_456
FRAME_MAX = 131_072
BODY = bytes(range(256))
PROPS = Basic.Properties(content_type="application/json", delivery_mode=2)
RAW_PROPS = props_codec.encode_properties(PROPS)

PUBLISH_PAYLOAD = frame.marshal(Basic.Publish(0, EXCHANGE, ROUTING_KEY, True, False), 1)[7:-1]
ACK_PAYLOAD = frame.marshal(Basic.Ack(TAG, True), 1)[7:-1]
NACK_PAYLOAD = frame.marshal(Basic.Nack(TAG, False, True), 1)[7:-1]
REJECT_PAYLOAD = frame.marshal(Basic.Reject(TAG, False), 1)[7:-1]
HEADER_PAYLOAD = frame.marshal(header.ContentHeader(0, len(BODY), PROPS), 1)[7:-1]


def _pamqp_decode(cls: type[base.Frame], payload: bytes) -> object:
    """What pamqp.frame does for a method payload, minus the frame envelope."""
    method = cls()
    method.unmarshal(payload[4:])
    return method


def _pamqp_decode_header(payload: bytes) -> object:
    content_header = header.ContentHeader()
    content_header.unmarshal(payload)
    return content_header


def _pamqp_content() -> list[bytes]:
    return [
        frame.marshal(header.ContentHeader(0, len(BODY), PROPS), CHANNEL),
        frame.marshal(pbody.ContentBody(BODY), CHANNEL),
    ]


def _pamqp_deliver_with_content() -> bytes:
    return b"".join(
        [frame.marshal(Basic.Deliver(CTAG, TAG, False, EXCHANGE, ROUTING_KEY), CHANNEL), *_pamqp_content()]
    )


def _fast_deliver_then_content() -> bytes:
    return b"".join(
        [fp.encode_deliver(CHANNEL, CTAG, TAG, False, EXCHANGE, ROUTING_KEY), *fp.encode_content(CHANNEL, RAW_PROPS, BODY, FRAME_MAX)]
    )


CASES: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
    (
        "decode_publish",
        lambda: _pamqp_decode(Basic.Publish, PUBLISH_PAYLOAD),
        lambda: fp.decode_publish(PUBLISH_PAYLOAD),
    ),
    (
        "decode_publish (memoryview)",
        lambda: _pamqp_decode(Basic.Publish, PUBLISH_PAYLOAD),
        lambda: fp.decode_publish(memoryview(PUBLISH_PAYLOAD)),
    ),
    (
        "decode_ack",
        lambda: _pamqp_decode(Basic.Ack, ACK_PAYLOAD),
        lambda: fp.decode_ack(ACK_PAYLOAD),
    ),
    (
        "decode_nack",
        lambda: _pamqp_decode(Basic.Nack, NACK_PAYLOAD),
        lambda: fp.decode_nack(NACK_PAYLOAD),
    ),
    (
        "decode_reject",
        lambda: _pamqp_decode(Basic.Reject, REJECT_PAYLOAD),
        lambda: fp.decode_reject(REJECT_PAYLOAD),
    ),
    (
        "decode_content_header",
        lambda: _pamqp_decode_header(HEADER_PAYLOAD),
        lambda: fp.decode_content_header(HEADER_PAYLOAD),
    ),
    (
        "encode_deliver",
        lambda: frame.marshal(Basic.Deliver(CTAG, TAG, False, EXCHANGE, ROUTING_KEY), CHANNEL),
        lambda: fp.encode_deliver(CHANNEL, CTAG, TAG, False, EXCHANGE, ROUTING_KEY),
    ),
    (
        "encode_get_ok",
        lambda: frame.marshal(Basic.GetOk(TAG, False, EXCHANGE, ROUTING_KEY, 42), CHANNEL),
        lambda: fp.encode_get_ok(CHANNEL, TAG, False, EXCHANGE, ROUTING_KEY, 42),
    ),
    (
        "encode_return",
        lambda: frame.marshal(Basic.Return(312, "NO_ROUTE", EXCHANGE, ROUTING_KEY), CHANNEL),
        lambda: fp.encode_return(CHANNEL, 312, "NO_ROUTE", EXCHANGE, ROUTING_KEY),
    ),
    (
        "encode_ack",
        lambda: frame.marshal(Basic.Ack(TAG, False), CHANNEL),
        lambda: fp.encode_ack(CHANNEL, TAG, False),
    ),
    (
        "encode_nack",
        lambda: frame.marshal(Basic.Nack(TAG, False, False), CHANNEL),
        lambda: fp.encode_nack(CHANNEL, TAG, False, False),
    ),
    (
        "encode_content (256 B)",
        _pamqp_content,
        lambda: fp.encode_content(CHANNEL, RAW_PROPS, BODY, FRAME_MAX),
    ),
    (
        "deliver+content: 2 calls, joined",
        _pamqp_deliver_with_content,
        _fast_deliver_then_content,
    ),
    (
        "encode_deliver_with_content",
        _pamqp_deliver_with_content,
        lambda: fp.encode_deliver_with_content(
            CHANNEL, CTAG, TAG, False, EXCHANGE, ROUTING_KEY, RAW_PROPS, BODY, FRAME_MAX
        ),
    ),
    (
        "decode_properties (pamqp both)",
        lambda: props_codec.decode_properties(RAW_PROPS),
        lambda: props_codec.decode_properties(RAW_PROPS),
    ),
]


def _best_us(func: Callable[[], object], repeat: int, min_time: float) -> float:
    timer = timeit.Timer(func)
    number, _ = timer.autorange()
    number = max(1, int(number * min_time / 0.2))
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    repeat, min_time = (3, 0.05) if quick else (7, 0.2)
    # Same bytes before timing anything: the table compares like with like.
    for name, slow, fast in CASES:
        if name.startswith(("encode", "deliver")):
            assert slow() == fast(), name
    print(f"{'operation':<34} {'pamqp µs':>10} {'fast µs':>10} {'speedup':>9}")
    for name, slow, fast in CASES:
        slow_us = _best_us(slow, repeat, min_time)
        fast_us = _best_us(fast, repeat, min_time)
        print(f"{name:<34} {slow_us:>10.3f} {fast_us:>10.3f} {slow_us / fast_us:>8.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
