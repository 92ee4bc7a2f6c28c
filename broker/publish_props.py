"""Publish-time property work: sender-selected distribution and the reply-to rewrite.

Properties stay the publisher's bytes (docs/STYLE.md §3), so both features start
with a test on those bytes that costs no decoding: the headers flag plus a
substring search for a ``CC``/``BCC`` table key, and the reply-to flag plus
the exact shortstr ``amq.rabbitmq.reply-to``. Only a message that passes is
decoded, and only one that must change is re-encoded (once, for both).

Sender-selected distribution (RabbitMQ ``rabbit_basic``, docs/sender-selected.md):
the ``CC`` and ``BCC`` headers, arrays of longstr, are extra routing keys;
array elements of other types are ignored; a header of any other type is
406 ``invalid message: {unacceptable_type_in_header,"CC",longstr}`` (checked
against 3.10: a single string is *not* accepted). ``BCC`` is removed from
the headers (an empty table stays) before routing, so neither queues nor a
basic.return see it.

The validated user-id and ``expiration`` checks live here too, so that a
channel (``amqp/publishing.py``) and the management API's HTTP publish
(``management_ui/basic.py``) refuse the same messages with the same texts.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from leveret.broker.reply_to import PSEUDO_QUEUE
from leveret.model.errors import FRAME_ERROR, PRECONDITION_FAILED, ChannelError, ConnectionError_
from leveret.model.field_table import type_name
from leveret.model.message import FLAG_HEADERS, FLAG_REPLY_TO, Message, parse_expiration
from leveret.model.properties import decode_properties, encode_properties

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.broker.users import User

_u16 = struct.Struct(">H")
_CC_KEY = b"\x02CC"  # shortstr table keys, as they appear in the raw headers table
_BCC_KEY = b"\x03BCC"
_REPLY_TO = bytes([len(PSEUDO_QUEUE)]) + PSEUDO_QUEUE.encode()
ROUTING_HEADERS = ("CC", "BCC")


IMPERSONATOR = "impersonator"  # the tag that may publish any user_id


def check_user_id(user_id: str | None, user: str | None, users: Mapping[str, User]) -> None:
    """Validated user-id: a set ``user_id`` must name the authenticated user, else 406.

    As RabbitMQ (rabbit_channel ``check_user_id_header``), users tagged
    ``impersonator`` are exempt; an empty ``user_id`` is set, and checked.
    """
    if user_id is None or user_id == user:
        return
    record = users.get(user or "")
    if record is not None and IMPERSONATOR in record.tags:
        return
    raise ChannelError(
        PRECONDITION_FAILED,
        f"user_id property set to '{user_id}' but authenticated user was '{user}'", (60, 40))


def check_expiration(expiration: str | None) -> None:
    """An ``expiration`` must be a TTL in ms (rabbit_channel check_expiration_header)."""
    error = parse_expiration(expiration or "")
    if isinstance(error, str):
        raise ChannelError(PRECONDITION_FAILED, f"invalid expiration '{expiration}': {error}",
                           (60, 40))


def needs_work(raw: bytes) -> bool:
    """Might this message carry CC/BCC or ask for a direct reply? (No decoding.)

    ``find``, not ``in``: CPython's ``bytes in bytes`` first tries the operand as an
    integer and formats a TypeError it then discards, on every publish with headers."""
    if len(raw) < 2:
        return False
    flags = _u16.unpack_from(raw, 0)[0]
    if flags & FLAG_HEADERS and (raw.find(_CC_KEY) >= 0 or raw.find(_BCC_KEY) >= 0):
        return True
    return bool(flags & FLAG_REPLY_TO) and raw.find(_REPLY_TO) >= 0


def prepare(message: Message, reply_name: Callable[[], str]) -> tuple[Message, tuple[str, ...]]:
    """The message to route (rewritten if needed) and its CC/BCC routing keys.

    ``reply_name`` gives the publishing channel's direct reply-to name (or
    raises 406 when it has no reply consumer); called only when asked for.
    """
    try:
        props = decode_properties(message.raw_properties)
    except ValueError as exc:
        raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}", (60, 40)) from exc
    changed = False
    keys: tuple[str, ...] = ()
    headers = props.headers
    if headers:
        keys = routing_keys(headers)
        if "BCC" in headers:
            props.headers = {k: v for k, v in headers.items() if k != "BCC"}
            changed = True
    if props.reply_to == PSEUDO_QUEUE:
        props.reply_to = reply_name()
        changed = True
    if not changed:
        return message, keys
    rewritten = Message(message.exchange, message.routing_key, encode_properties(props),
                        message.body)
    return rewritten, keys


def routing_keys(headers: dict[str, Any]) -> tuple[str, ...]:
    """CC then BCC keys (longstr array elements only); 406 for a non-array header."""
    keys: list[str] = []
    for name in ROUTING_HEADERS:
        value = headers.get(name)
        if value is None and name not in headers:
            continue
        if not isinstance(value, list):
            raise ChannelError(
                PRECONDITION_FAILED,
                f'invalid message: {{unacceptable_type_in_header,"{name}",{_type(value)}}}',
                (60, 40))
        keys.extend(v for v in value if isinstance(v, str))
    return tuple(keys)


def _type(value: Any) -> str:
    if value is None:
        return "void"
    return type_name(value)
