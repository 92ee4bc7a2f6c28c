"""The one place that talks to pamqp.

Everything that is not on the hot path (connection negotiation, declares,
bindings, qos, tx, ...) is decoded and encoded here with pamqp. The hot
methods (Publish, Ack/Nack/Reject in; Deliver, GetOk, Return, confirms out)
go through ``fastpath``, which is checked byte for byte against pamqp.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import base, commands, frame
from pamqp import exceptions as pamqp_exceptions

from leveret.amqp.errors import FRAME_ERROR, NOT_IMPLEMENTED, SYNTAX_ERROR, ConnectionError_
from leveret.amqp.field_table import unmarshal_method, unmarshal_properties
from leveret.amqp.frames import erlang_binary

_method_id = struct.Struct(">I")

Method = base.Frame


def method_index(payload: bytes) -> int:
    """The ``(class_id << 16) | method_id`` of a method frame payload."""
    if len(payload) < 4:
        raise ConnectionError_(SYNTAX_ERROR, "method frame too short")
    return int(_method_id.unpack_from(payload, 0)[0])


def decode_method(payload: bytes, index: int) -> Method:
    """Decode any method with pamqp.

    An unknown class or method is 540 NOT_IMPLEMENTED (RabbitMQ 3.10 crashes
    the connection without a close method there; we answer properly); a
    method whose arguments do not decode is 501 FRAME_ERROR "cannot decode",
    with RabbitMQ's rendering of the argument bytes.
    """
    ids = (index >> 16, index & 0xFFFF)
    cls = commands.INDEX_MAPPING.get(index)
    if cls is None:
        raise ConnectionError_(NOT_IMPLEMENTED, f"unknown method {ids[0]}.{ids[1]}", ids)
    method = cls()
    try:
        unmarshal_method(method, payload[4:])
    except (struct.error, ValueError, TypeError, UnicodeDecodeError, IndexError, KeyError,
            pamqp_exceptions.PAMQPException) as exc:
        raise ConnectionError_(
            FRAME_ERROR, f"cannot decode {erlang_binary(payload[4:])}", ids
        ) from exc
    return method


def encode_method(channel: int, method: Method) -> bytes:
    """A complete method frame."""
    return frame.marshal(method, channel)


def decode_properties(raw: bytes) -> commands.Basic.Properties:
    """Raw property flags + list (as the publisher sent them) to pamqp properties."""
    props = commands.Basic.Properties()
    flags, offset = _property_flags(raw)
    unmarshal_properties(props, flags, raw[offset:])
    return props


def encode_properties(props: commands.Basic.Properties) -> bytes:
    return props.marshal()


def _property_flags(raw: bytes) -> tuple[int, int]:
    flags, offset, word = 0, 0, 0
    while True:
        (part,) = struct.unpack_from(">H", raw, offset)
        offset += 2
        flags |= part << (word * 16)
        word += 1
        if not part & 1:
            return flags, offset


def describe(method: Any) -> str:
    """``'basic.publish'`` style name for log lines and error texts."""
    return str(getattr(method, "name", type(method).__name__)).lower()
