"""A channel's output, held back behind replies that wait for a commit.

Theory of operation
-------------------
Replies that promise durability (a durable definition's "-ok", ``tx.commit-ok``)
are sent only after the group commit that records the change (``send_durable``).
While one waits, everything the channel would send after it (later replies,
returns, confirms, a close) queues behind it in ``_held``, so the wire order
is the order in which methods were handled; deliveries to the channel's
consumers wait too (``Channel.has_room`` is false) instead of piling up. If the
commit fails, the reply and what followed it are dropped and the channel
closes with 541 INTERNAL_ERROR, as for a failed ``tx.commit``.

``HeldOutput`` is the base of ``Channel``: the hot path tests ``_held is None``
on the channel itself, with no extra object in between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from leveret.amqp.codec import Method, encode_method
from leveret.model.errors import INTERNAL_ERROR, ChannelError

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel
    from leveret.amqp.connection import Connection
    from leveret.broker.vhost import VirtualHost
    from leveret.confirms.tracker import ConfirmTracker


class HeldReply:
    """A reply waiting for its commit, in the channel's output queue."""

    __slots__ = ("failure", "frame", "ready")

    def __init__(self, frame: bytes, failure: ChannelError) -> None:
        self.frame = frame
        self.ready = False
        self.failure = failure  # how the channel closes if the commit fails


class HeldOutput:
    """Writes that go out now, or queue behind a reply held for its commit."""

    connection: Connection
    number: int
    vhost: VirtualHost
    closing: bool
    confirms: ConfirmTracker | None
    # Output queued behind replies that wait for a commit (None: nothing waits).
    _held: list[bytes | HeldReply] | None

    def _resume_consumers(self) -> None:
        """Room may be back for every consumer of the channel (``Channel`` says how)."""
        raise NotImplementedError

    def send_method(self, method: Method) -> None:
        self._write(encode_method(self.number, method))

    def _write(self, frame: bytes) -> None:
        if self._held is None:
            self.connection.write(frame)
        else:
            self._held.append(frame)

    def _writelines(self, frames: list[bytes]) -> None:
        if self._held is None:
            self.connection.writelines(frames)
        else:
            self._held.extend(frames)

    def send_durable(self, method: Method, durable: bool, request: tuple[int, int]) -> None:
        """Send ``method`` (the reply to ``request``) once everything recorded so far is
        committed, if it concerns a durable object and anything is still uncommitted.

        If the commit fails the reply is not sent: the channel closes with 541
        INTERNAL_ERROR, as for a failed ``tx.commit``.
        """
        log = self.vhost.log
        if not (durable and log.deferred and log.busy):
            self.send_method(method)
            return
        name = method.name.lower()
        reply = HeldReply(encode_method(self.number, method), ChannelError(
            INTERNAL_ERROR, f"{name.removesuffix('ok').rstrip('-_')} failed: the message store "
            "could not write", request))
        if self._held is None:
            self._held = []
        self._held.append(reply)
        log.after_commit(lambda ok: self._committed(reply, ok))

    def _committed(self, reply: HeldReply, ok: bool) -> None:
        held = self._held
        if held is None or self.connection.closing:  # nothing goes out any more
            self._held = None
            return
        failure = None
        if ok:
            reply.ready = True
        else:
            del held[held.index(reply):]  # the reply and what followed it
            failure = None if self.closing else reply.failure
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
        self._held = None
        if failure is not None:
            self.connection.close_channel(cast("Channel", self), failure)
        elif not self.closing:
            if self.confirms is not None:
                self.connection.want_flush(cast("Channel", self))
            self._resume_consumers()

    def drop_output(self) -> None:
        """The connection is closing or gone: held replies will never be sent."""
        self._held = None
