"""The channel class of AMQP: each channel number's life as a transition table.

A channel number is ``ABSENT`` (never opened, or closed and forgotten), ``OPEN``, or
``CLOSING`` (the broker sent channel.close and waits for close-ok; as RabbitMQ, every other
method on that number is discarded meanwhile). ``LIFECYCLE`` is the table: (state, method)
→ handler, readable against the spec's grammar (``open`` then any number of methods then
``close``/``close-ok``). A method that has no entry takes its state's default, ``DEFAULT``:
on an ``ABSENT`` number it is 504 "expected 'channel.open'", on a ``CLOSING`` one it is
discarded, and on an ``OPEN`` one it goes to the channel (another method of class 20 is 503
"unexpected ..."; class 10 off channel 0 is 503 "unimplemented method").

The connection consults this table only off its hot path: a method of class 60 and above on
an open channel goes straight to that channel (``Connection._on_method``). Channels exist
only while the connection is ``RUNNING``; the handshake (channel 0) is ``handshake.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.amqp.codec import class_and_method, decode_method, encode_method
from leveret.model.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    ChannelError,
    ConnectionError_,
)

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.amqp.connection import Connection

ABSENT, OPEN, CLOSING = range(3)

_OPEN = commands.Channel.Open.index
_CLOSE = commands.Channel.Close.index
_CLOSE_OK = commands.Channel.CloseOk.index
_FLOW = commands.Channel.Flow.index

# channel.open-ok with an empty (deprecated) channel-id, byte for byte what RabbitMQ sends;
# pamqp insists on "0" there, and aio-pika's robust channels behave differently with it.
_CHANNEL_OPEN_OK = struct.Struct(">BHIHHIB")

Handler = Callable[["Connection", int, "Channel | None", bytes, int], None]


def channel_method(conn: Connection, number: int, channel: Channel | None, payload: bytes,
                   index: int) -> None:
    """Handle a method on channel ``number`` (not 0) of a running connection."""
    if channel is not None:
        state = OPEN
    elif number in conn.closing_channels:
        state = CLOSING
    else:
        state = ABSENT
    handler = LIFECYCLE.get((state, index)) or DEFAULT[state]
    handler(conn, number, channel, payload, index)


def open_channel(conn: Connection, number: int, channel: Channel | None, payload: bytes,
                 index: int) -> None:
    # channel_max bounds how many channels are open, not their numbers (as RabbitMQ).
    if conn.channel_max and len(conn.channels) >= conn.channel_max:
        raise ConnectionError_(
            NOT_ALLOWED, f"number of channels opened ({len(conn.channels)}) has reached "
            f"the negotiated channel_max ({conn.channel_max})")
    conn.broker.accounts.check_channel(conn.user)
    conn.open_channel(number)
    conn.write(_CHANNEL_OPEN_OK.pack(1, number, 8, 20, 11, 0, 0xCE))


def second_open(conn: Connection, number: int, channel: Channel | None, payload: bytes,
                index: int) -> None:
    raise ConnectionError_(CHANNEL_ERROR, "second 'channel.open' seen", (20, 10))


def peer_close(conn: Connection, number: int, channel: Channel | None, payload: bytes,
               index: int) -> None:
    assert channel is not None
    del conn.channels[number]
    channel.release()
    channel.output.send_method(commands.Channel.CloseOk())  # after any reply held for a commit


def flow(conn: Connection, number: int, channel: Channel | None, payload: bytes,
         index: int) -> None:
    assert channel is not None
    method = decode_method(payload, index)
    assert isinstance(method, commands.Channel.Flow)
    if not method.active:  # as RabbitMQ: a consumer cannot be paused this way
        raise ConnectionError_(NOT_IMPLEMENTED, "active=false", (20, 20))
    channel.output.send_method(commands.Channel.FlowOk(active=True))


def ignore(conn: Connection, number: int, channel: Channel | None, payload: bytes,
           index: int) -> None:
    """A close-ok for a close the broker did not start, or anything on a closing channel."""


def close_done(conn: Connection, number: int, channel: Channel | None, payload: bytes,
               index: int) -> None:
    conn.closing_channels.discard(number)


def close_crossed(conn: Connection, number: int, channel: Channel | None, payload: bytes,
                  index: int) -> None:
    """Both sides closed at once: answer the peer's close; ours still waits for close-ok."""
    conn.write(encode_method(number, commands.Channel.CloseOk()))


def expect_open(conn: Connection, number: int, channel: Channel | None, payload: bytes,
                index: int) -> None:
    raise ConnectionError_(CHANNEL_ERROR, "expected 'channel.open'", class_and_method(index))


def to_channel(conn: Connection, number: int, channel: Channel | None, payload: bytes,
               index: int) -> None:
    assert channel is not None
    class_id = index >> 16
    if class_id == 20:
        name = decode_method(payload, index).name.lower()
        raise ConnectionError_(COMMAND_INVALID, f"unexpected {name}", class_and_method(index))
    if class_id == 10:
        raise ConnectionError_(COMMAND_INVALID, "unimplemented method", class_and_method(index))
    try:
        channel.handle_method(payload, index)
    except ChannelError as exc:
        conn.fail_channel(channel, exc)


LIFECYCLE: dict[tuple[int, int], Handler] = {
    (ABSENT, _OPEN): open_channel,
    (OPEN, _OPEN): second_open,
    (OPEN, _CLOSE): peer_close,
    (OPEN, _FLOW): flow,
    (OPEN, _CLOSE_OK): ignore,
    (CLOSING, _CLOSE_OK): close_done,
    (CLOSING, _CLOSE): close_crossed,
}

DEFAULT: dict[int, Handler] = {ABSENT: expect_open, OPEN: to_channel, CLOSING: ignore}
