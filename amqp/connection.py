"""One AMQP connection as a sans-IO state machine.

Theory of operation
-------------------
``receive_data(bytes)`` is fed whatever the socket produced; frames to send
accumulate in ``out`` and the adapter is told once (``on_output``) that it
should flush at the end of the loop turn, so many deliveries share one
``writelines``. The adapter also owns the clock and calls ``heartbeat_tick``.
One call handles at most ``FRAMES_PER_TURN`` frames (a publish that came whole with
its content is one: ``frames.FRAME_PUBLISH``); ``input_pending`` then
asks the adapter to stop reading and call again (with ``b""``) on the next
loop turn, so that no client's burst stalls the others.

States follow the handshake: ``HEADER`` (waiting for ``AMQP\\0\\0\\9\\1``) →
``START`` (sent connection.start, waiting for start-ok) → ``TUNE`` →
``OPEN`` (waiting for connection.open) → ``RUNNING`` → ``CLOSING`` (we sent
connection.close and discard everything but close/close-ok) → ``CLOSED``.
The connection-class methods that move it are one table in ``handshake.py``,
``HANDSHAKE``: (state, method) → (handler, next state), readable against the
spec's grammar; ``connection.close`` and ``close-ok`` are accepted in every
state. Any frame a state does not expect is a connection error; errors are raised
by name anywhere below and turned into close methods in one place, ``fail`` in ``closing.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.amqp import channel_lifecycle, handshake
from leveret.amqp import closing as ending
from leveret.amqp.channel import Channel
from leveret.amqp.closing import OwnedQueues
from leveret.amqp.codec import (
    class_and_method,
    class_of,
    decode_method,
    encode_method,
    method_index,
)
from leveret.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_PUBLISH,
    NO_FRAME,
    FrameBuffer,
    erlang_binary,
)
from leveret.amqp.handshake import (
    CLOSED,
    CLOSING,
    HEADER,
    RUNNING,
    STATE_NAMES,
)
from leveret.amqp.publishing import flush_confirms
from leveret.model.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    INTERNAL_ERROR,
    UNEXPECTED_FRAME,
    ChannelError,
    ConnectionError_,
)

if TYPE_CHECKING:
    from leveret.broker.broker import Broker
    from leveret.broker.vhost import VirtualHost
    from leveret.config import Config

log = logging.getLogger(__name__)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


_CONNECTION_CLOSE = commands.Connection.Close.index
_CONNECTION_CLOSE_OK = commands.Connection.CloseOk.index
# Method indexes of classes above channel (20): basic, queue, exchange, tx, confirm...
_CHANNEL_HANDLES = 21 << 16


# Frames handled per ``receive_data`` call, a whole publish counting as one (it costs about
# what an ack that hands out a delivery does). A client that sends a burst (thousands of acks
# or publishes) is served in slices of a few ms, other clients in between: the adapter stops
# reading and calls again on the next loop turn (``input_pending``).
FRAMES_PER_TURN = 1000
_PUBLISH_FRAMES = (FRAME_METHOD, FRAME_HEADER, FRAME_BODY)
# The frame types receive_data compares with, under names connection.pxd makes C integers.
_METHOD, _HEARTBEAT, _PUBLISH, _NONE = FRAME_METHOD, FRAME_HEARTBEAT, FRAME_PUBLISH, NO_FRAME
# A generator's frame, None once it is exhausted (inspect.getgeneratorstate costs a Python
# call per receive_data; this is one C call).
_gi_frame = attrgetter("gi_frame")


class Connection:
    """One client connection: handshake, channels, output; how it ends is ``closing.py``."""

    def __init__(
        self,
        broker: Broker,
        config: Config,
        peer: tuple[str, int] | None = None,
        on_output: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.config = config
        self.peer = peer
        self.local: tuple[str, int] | None = None  # our address (set by the adapter)
        self.name = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.on_output = on_output or (lambda: None)
        self.clock = clock
        self.state = HEADER
        self.out: list[bytes] = []
        self._frames = FrameBuffer()
        self.input_pending = False  # frames left unhandled: call receive_data(b"") again
        self._header = bytearray()
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self._flush_channels: set[Channel] = set()
        self.exclusive_queues = OwnedQueues()
        self.vhost: VirtualHost | None = None
        self.user: str | None = None
        # Set by the TLS adapter: the user named by a verified client certificate (EXTERNAL).
        self.peer_cert_user: str | None = None
        # TLS session facts for the management API (node/tls.py ``session_info``), or None.
        self.tls_info: dict[str, Any] | None = None
        self.client_properties: dict[str, Any] = {}
        self.auth_mechanism = "PLAIN"  # the SASL mechanism of start-ok, once logged in
        self.frame_max = 131072
        self.channel_max = config.channel_max
        self.heartbeat = 0
        self.last_received = clock()
        self.last_sent = clock()
        self.want_close = False  # adapter: close the transport once ``out`` is flushed
        # CLOSING: the adapter drops the socket at ``close_deadline`` (``clock`` time) and
        # stops reading it once ``reading`` is False.
        self.reading = True
        self.close_deadline = 0.0
        self.peer_closes = False  # ... but first give the peer CLOSE_GRACE_SECONDS to do it
        self.blocked = False  # by a resource alarm: we stopped reading this socket
        self.has_published = False
        # Queues this connection waits on (flow control); the adapter stops reading meanwhile.
        self.flow_queues: set[Any] = set()
        self.on_flow_release: Callable[[], None] = lambda: None
        self.writable = True  # False while the socket's write buffer is full
        # Traffic counters (RabbitMQ's recv_oct/recv_cnt/send_oct/send_cnt) and start time.
        self.recv_oct = self.recv_cnt = self.send_oct = self.send_cnt = 0
        self.connected_at = time.time()
        broker.churn.connection_created += 1
        self.released = False  # ending.release_all ran (amqp/closing.py)
        # Deliveries written since ``out`` was last taken; over DELIVERY_BATCH_BYTES they wait
        # for the next loop turn (``batch_full``), so a prefetch-0 consumer of a long queue
        # costs one batch of output at a time, not the whole queue encoded at once.
        self.batch_bytes = 0
        self.batch_full = False

    def close(self, code: int = CONNECTION_FORCED,
              text: str = "broker forced connection closure with reason 'shutdown'") -> None:
        """Broker-initiated close (shutdown, management UI, ``leveret ctl``)."""
        ending.close(self, code, text)

    def end(self) -> None:
        """End now: release everything; the socket closes once ``out`` is flushed."""
        ending.closed(self)

    def connection_lost(self) -> None:
        """The adapter's transport is gone."""
        ending.connection_lost(self)

    def heartbeat_tick(self) -> bool:
        """The adapter's heartbeat timer; False once the peer is dead."""
        return ending.heartbeat_tick(self)

    def __repr__(self) -> str:
        return f"<Connection {self.name} user={self.user!r}>"

    @property
    def closing(self) -> bool:
        """connection.close was sent or received, or the socket is gone: no more output."""
        return self.state in (CLOSING, CLOSED)

    # -- output ---------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.out:
            self.on_output()
        self.out.append(data)

    def writelines(self, frames: list[bytes]) -> None:
        if not self.out:
            self.on_output()
        self.out.extend(frames)

    def data_to_send(self) -> list[bytes]:
        """Take everything queued for the wire (also runs end-of-batch work: confirms)."""
        if self._flush_channels:
            channels = self._flush_channels
            self._flush_channels = set()
            for ch in channels:
                flush_confirms(ch)
        out = self.out
        if out:
            self.out = []
            self.last_sent = self.clock()
            self.send_cnt += 1
            self.send_oct += sum(map(len, out))
        self.batch_bytes = 0
        if self.batch_full:
            self.batch_full = False
            if self.writable:
                for channel in list(self.channels.values()):
                    channel.resume_consumers()
        return out

    def want_flush(self, channel: Channel) -> None:
        """A channel has confirms to send at the end of this batch."""
        if not self._flush_channels and not self.out:
            self.on_output()
        self._flush_channels.add(channel)

    def set_writable(self, writable: bool) -> None:
        """Transport backpressure: no deliveries while the socket cannot take them."""
        self.writable = writable
        if writable:
            for channel in list(self.channels.values()):
                channel.resume_consumers()

    def block(self, reason: str) -> None:
        self.blocked = True
        if self.client_capability("connection.blocked") and self.state == RUNNING:
            self.write(encode_method(0, commands.Connection.Blocked(reason=reason)))

    def unblock(self) -> None:
        self.blocked = False
        self.last_received = self.clock()  # we were not reading: do not count it as silence
        if self.client_capability("connection.blocked") and self.state == RUNNING:
            self.write(encode_method(0, commands.Connection.Unblocked()))

    def flow_wait(self, queue: Any) -> None:
        """A queue we publish into is behind its consumers: pause until it catches up."""
        if queue not in self.flow_queues:
            self.flow_queues.add(queue)
            queue.flow_waiters.add(self)

    def flow_release(self, queue: Any) -> None:
        self.flow_queues.discard(queue)
        if not self.flow_queues:
            self.on_flow_release()

    def client_capability(self, name: str) -> bool:
        caps = self.client_properties.get("capabilities") or {}
        return bool(caps.get(name))

    # -- input ----------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if self.state == CLOSED or not self.reading:
            self.input_pending = False
            return
        self.recv_oct += len(data)
        self.recv_cnt += 1
        self.last_received = self.clock()
        try:
            if self.state == HEADER:
                self._header += data
                if len(self._header) < 8:
                    if not PROTOCOL_HEADER.startswith(bytes(self._header)):
                        self._bad_header()
                    return
                if self._header[:8] != PROTOCOL_HEADER:
                    self._bad_header()
                    return
                data = bytes(self._header[8:])
                self._header = bytearray()
                handshake.send_start(self)
            self.input_pending = False
            if self.state == CLOSING:
                self._receive_closing(data)
                return
            frames = self._frames
            frames.append(data)
            try:
                # At most FRAMES_PER_TURN frames (a C loop, compiled); the frame's type is
                # returned, its channel and payloads are left on the frame buffer.
                for _turn in range(FRAMES_PER_TURN):
                    ftype = frames.next_frame()
                    if ftype == _NONE:
                        break
                    # Per frame, so the frames after an error in the same chunk still reach
                    # the CLOSING state (a pipelined close-ok), exactly as when fed byte by byte.
                    try:
                        if ftype == _PUBLISH:
                            if self._on_publish(frames.channel, frames.payload,
                                                frames.header, frames.body):
                                return
                        elif ftype == _METHOD:
                            self._on_method(frames.channel, frames.payload)
                            if self.state == CLOSED:  # only a method closes: read no further
                                return
                        elif ftype == _HEARTBEAT:
                            if frames.channel:  # checked against RabbitMQ 3.10 (a raw frame)
                                raise ConnectionError_(
                                    UNEXPECTED_FRAME,
                                    f"type 8, all octets = {erlang_binary(frames.payload)}")
                        else:
                            self._on_content(ftype, frames.channel, frames.payload)
                    except ConnectionError_ as exc:
                        ending.fail(self, exc)
                        if self.state == CLOSED:
                            return
                else:  # stopped by the budget, not by the end of the data: the rest next turn
                    self.input_pending = True
            finally:
                frames.compact()
        except ConnectionError_ as exc:  # framing: the rest of the stream cannot be parsed
            ending.fail(self, exc)
            ending.stop_reading(self)
        except Exception as exc:  # a bug must not take the broker down
            # One line, not a traceback: a peer that can trigger this must not flood the log.
            where = exc.__traceback__
            while where is not None and where.tb_next is not None:
                where = where.tb_next
            at = (f" at {where.tb_frame.f_code.co_filename}:{where.tb_lineno}"
                  if where is not None else "")
            log.error("internal error on connection %s: %r%s", self.name, exc, at)
            log.debug("internal error on connection %s", self.name, exc_info=True)
            failure = ConnectionError_(INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
            ending.fail(self, failure)

    def _receive_closing(self, data: bytes) -> None:
        """After we sent connection.close: only channel-0 methods (close, close-ok) count."""
        feed = self._frames.feed_closing(data)
        for _ftype, channel, payload in islice(feed, FRAMES_PER_TURN):
            try:
                self._on_method(channel, payload)
                if self.state == CLOSED:
                    return
            except ConnectionError_ as exc:
                ending.fail(self, exc)
                if self.state == CLOSED:
                    return
        self.input_pending = _gi_frame(feed) is not None  # suspended, not exhausted

    def _bad_header(self) -> None:
        """Wrong protocol header: answer with ours and close, as the spec and RabbitMQ do."""
        log.warning("connection %s: bad protocol header, closing", self.name)
        self.write(PROTOCOL_HEADER)
        self.state = CLOSED
        self.want_close = True

    def _on_publish(self, number: int, method: bytes, header: bytes, body: bytes) -> bool:
        """A basic.publish with its header and body (``frames.FRAME_PUBLISH``): one call on
        an open channel, else each frame as the loop of ``receive_data`` would take it.
        Returns whether the connection is closed (read no further)."""
        channel = self.channels.get(number)
        if channel is not None:
            try:
                channel.handle_publish(method, header, body)
            except ChannelError as exc:
                self.fail_channel(channel, exc)
            return False
        for ftype, payload in zip(_PUBLISH_FRAMES, (method, header, body), strict=True):
            try:
                if ftype == FRAME_METHOD:
                    self._on_method(number, payload)
                else:
                    self._on_content(ftype, number, payload)
            except ConnectionError_ as exc:
                ending.fail(self, exc)
            if self.state == CLOSED:
                return True
        return False

    def _on_content(self, ftype: int, number: int, payload: bytes) -> None:
        channel = self.channels.get(number)  # only while RUNNING, as in _on_method
        if channel is None:
            if self.state == CLOSING or number in self.closing_channels:
                return
            if self.state != RUNNING:
                raise ConnectionError_(UNEXPECTED_FRAME,
                                       "content frame before the connection is open")
            raise ConnectionError_(CHANNEL_ERROR, f"expected 'channel.open' on channel {number}")
        try:
            if ftype == FRAME_HEADER:
                channel.handle_header(payload)
            elif ftype == FRAME_BODY:
                channel.handle_body(payload)
        except ChannelError as exc:
            self.fail_channel(channel, exc)

    def _on_method(self, number: int, payload: bytes) -> None:
        index = method_index(payload)
        channel = self.channels.get(number)
        if channel is not None and index >= _CHANNEL_HANDLES:
            # The hot path. Channels exist only while RUNNING (every way out of it empties
            # ``channels``), and a closing channel's number is no longer in it.
            try:
                channel.handle_method(payload, index)
            except ChannelError as exc:
                self.fail_channel(channel, exc)
            return
        state = self.state
        if state == CLOSING:
            if number == 0 and index in (_CONNECTION_CLOSE_OK, _CONNECTION_CLOSE):
                if index == _CONNECTION_CLOSE:
                    self.write(encode_method(0, commands.Connection.CloseOk()))
                self.end()
            return
        if number == 0:
            if class_of(index) != 10:
                raise ConnectionError_(CHANNEL_ERROR,
                                       f"unexpected method in connection state {STATE_NAMES[state]}",
                                       class_and_method(index))
            handshake.connection_method(self, decode_method(payload, index), index)
            return
        if state != RUNNING:
            raise ConnectionError_(COMMAND_INVALID, "channel method before connection.open-ok",
                                   class_and_method(index))
        channel_lifecycle.channel_method(self, number, channel, payload, index)

    def open_channel(self, number: int) -> None:
        self.channels[number] = Channel(self, number)
        self.broker.churn.channel_created += 1

    def close_channel(self, channel: Channel, exc: ChannelError) -> None:
        """Close ``channel`` with a soft error from outside frame handling (e.g. a failed commit)."""
        if self.channels.get(channel.number) is channel:
            self.fail_channel(channel, exc)

    def fail_channel(self, channel: Channel, exc: ChannelError) -> None:
        """A soft error: channel.close, then the number waits for close-ok (``CLOSING``)."""
        log.warning("channel %d on %s closed: %s", channel.number, self.name, exc.reply_text)
        self.channels.pop(channel.number, None)
        channel.release()
        self.closing_channels.add(channel.number)
        class_id, method_id = exc.method
        channel.output.send_method(commands.Channel.Close(  # after any reply held for a commit
            reply_code=int(exc.code), reply_text=exc.wire_text,
            class_id=class_id, method_id=method_id))
