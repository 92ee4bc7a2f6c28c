"""The one place that talks to pamqp.

Everything that is not on the hot path (connection negotiation, declares,
bindings, qos, tx, ...) is decoded and encoded here with pamqp. The hot
methods (Publish, Ack/Nack/Reject in; Deliver, GetOk, Return, confirms out)
go through ``fastpath``, which is checked byte for byte against pamqp.
"""

from __future__ import annotations

import struct

from pamqp import base, commands, frame
from pamqp import exceptions as pamqp_exceptions

from leveret.model.errors import FRAME_ERROR, NOT_IMPLEMENTED, SYNTAX_ERROR, ConnectionError_
from leveret.amqp.frames import erlang_binary
from leveret.model import field_table

# Method arguments and client properties keep their field types (model/field_table.py).
field_table.install()

_method_id = struct.Struct(">I")

Method = base.Frame


def class_and_method(index: int) -> tuple[int, int]:
    """``(class_id, method_id)`` of a method index, as error replies name the method."""
    return index >> 16, index & 0xFFFF


def class_of(index: int) -> int:
    """The AMQP class id of a method index (10 connection, 20 channel, 60 basic, ...)."""
    return index >> 16


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
    ids = class_and_method(index)
    cls = commands.INDEX_MAPPING.get(index)
    if cls is None:
        raise ConnectionError_(NOT_IMPLEMENTED, f"unknown method {ids[0]}.{ids[1]}", ids)
    method: Method = cls()
    try:
        field_table.unmarshal_method(method, payload[4:])
    except (struct.error, ValueError, TypeError, UnicodeDecodeError, IndexError, KeyError,
            pamqp_exceptions.PAMQPException) as exc:
        raise ConnectionError_(
            FRAME_ERROR, f"cannot decode {erlang_binary(payload[4:])}", ids
        ) from exc
    return method


def encode_method(channel: int, method: Method) -> bytes:
    """A complete method frame."""
    return frame.marshal(method, channel)
