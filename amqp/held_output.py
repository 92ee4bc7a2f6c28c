"""A channel's output, held back behind replies that wait for a commit.

Theory of operation
-------------------
Replies that promise durability (a durable definition's "-ok", ``tx.commit-ok``)
are sent only after the group commit that records the change (``send_durable``).
While one waits, everything the channel would send after it (later replies,
returns, confirms, a close) queues behind it in ``held``, so the wire order
is the order in which methods were handled; deliveries to the channel's
consumers wait too (``Channel.has_room`` is false) instead of piling up. If the
commit fails, the reply and what followed it are dropped and the channel
closes with 541 INTERNAL_ERROR, as for a failed ``tx.commit``.

``ChannelOutput`` is a part of ``Channel`` that refers to its connection, never to
its channel: the channel is an argument where the commit's outcome concerns it
(``send_durable``), so no channel is kept alive by a cycle through its output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.amqp.codec import Method, encode_method
from leveret.model.errors import INTERNAL_ERROR, ChannelError

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.amqp.connection import Connection


class HeldReply:
    """A reply waiting for its commit, in the channel's output queue."""

    __slots__ = ("failure", "frame", "ready")

    def __init__(self, frame: bytes, failure: ChannelError) -> None:
        self.frame = frame
        self.ready = False
        self.failure = failure  # how the channel closes if the commit fails


class ChannelOutput:
    """Writes that go out now, or queue behind a reply held for its commit."""

    __slots__ = ("connection", "held", "number")

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        # Output queued behind replies that wait for a commit (None: nothing waits).
        self.held: list[bytes | HeldReply] | None = None

    def send_method(self, method: Method) -> None:
        self.write(encode_method(self.number, method))

    def write(self, frame: bytes) -> None:
        if self.held is None:
            self.connection.write(frame)
        else:
            self.held.append(frame)

    def writelines(self, frames: list[bytes]) -> None:
        if self.held is None:
            self.connection.writelines(frames)
        else:
            self.held.extend(frames)

    def send_durable(self, channel: Channel, method: Method, durable: bool,
                     request: tuple[int, int]) -> None:
        """Send ``method`` (the reply to ``request`` on ``channel``) once everything
        recorded so far is committed, if it concerns a durable object and anything is
        still uncommitted.

        If the commit fails the reply is not sent: the channel closes with 541
        INTERNAL_ERROR, as for a failed ``tx.commit``.
        """
        log = channel.vhost.log
        if not (durable and log.deferred and log.busy):
            self.send_method(method)
            return
        name = method.name.lower()
        reply = HeldReply(encode_method(self.number, method), ChannelError(
            INTERNAL_ERROR, f"{name.removesuffix('ok').rstrip('-_')} failed: the message store "
            "could not write", request))
        if self.held is None:
            self.held = []
        self.held.append(reply)
        log.after_commit(lambda ok: self._committed(channel, reply, ok))

    def _committed(self, channel: Channel, reply: HeldReply, ok: bool) -> None:
        held = self.held
        if held is None or self.connection.closing:  # nothing goes out any more
            self.held = None
            return
        failure = None
        if ok:
            reply.ready = True
        else:
            del held[held.index(reply):]  # the reply and what followed it
            failure = None if channel.closing else reply.failure
        out: list[bytes] = []
        for item in held:
            if isinstance(item, HeldReply):
                if not item.ready:
                    break  # replies are committed in order: the rest waits for a later batch
                out.append(item.frame)
            else:
                out.append(item)
        del held[:len(out)]
        if out:
            self.connection.writelines(out)
        if held:
            return
        self.held = None
        if failure is not None:
            self.connection.close_channel(channel, failure)
        elif not channel.closing:
            if channel.confirms is not None:
                self.connection.want_flush(channel)
            channel.resume_consumers()

    def drop(self) -> None:
        """The connection is closing or gone: held replies will never be sent."""
        self.held = None
