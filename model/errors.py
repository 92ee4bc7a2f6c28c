"""AMQP reply codes and the two exceptions that carry them.

Handlers raise ``ChannelError`` (a soft error: the channel is closed) or
``ConnectionError_`` (a hard error: the whole connection is closed) by name;
one place each turns them into ``channel.close`` (``Connection.fail_channel``) or
``connection.close`` (``amqp/closing.py``
``fail``), with RabbitMQ's text format ``"<NAME> - <detail>"``.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    """Reply codes from the AMQP 0-9-1 spec (amqp-rabbitmq-0.9.1.json)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


REPLY_SUCCESS = ReplyCode.REPLY_SUCCESS
CONTENT_TOO_LARGE = ReplyCode.CONTENT_TOO_LARGE
NO_ROUTE = ReplyCode.NO_ROUTE
NO_CONSUMERS = ReplyCode.NO_CONSUMERS
ACCESS_REFUSED = ReplyCode.ACCESS_REFUSED
NOT_FOUND = ReplyCode.NOT_FOUND
RESOURCE_LOCKED = ReplyCode.RESOURCE_LOCKED
PRECONDITION_FAILED = ReplyCode.PRECONDITION_FAILED
CONNECTION_FORCED = ReplyCode.CONNECTION_FORCED
INVALID_PATH = ReplyCode.INVALID_PATH
FRAME_ERROR = ReplyCode.FRAME_ERROR
SYNTAX_ERROR = ReplyCode.SYNTAX_ERROR
COMMAND_INVALID = ReplyCode.COMMAND_INVALID
CHANNEL_ERROR = ReplyCode.CHANNEL_ERROR
UNEXPECTED_FRAME = ReplyCode.UNEXPECTED_FRAME
RESOURCE_ERROR = ReplyCode.RESOURCE_ERROR
NOT_ALLOWED = ReplyCode.NOT_ALLOWED
NOT_IMPLEMENTED = ReplyCode.NOT_IMPLEMENTED
INTERNAL_ERROR = ReplyCode.INTERNAL_ERROR


MAX_REPLY_TEXT = 255  # bytes in a short string


class AMQPError(Exception):
    """An error with a reply code; ``method`` is the (class_id, method_id) that caused it."""

    def __init__(self, code: ReplyCode, detail: str, method: tuple[int, int] = (0, 0)) -> None:
        super().__init__(f"{code.name} - {detail}")
        self.code = code
        self.detail = detail
        self.method = method

    @property
    def reply_text(self) -> str:
        """RabbitMQ's format: ``NOT_FOUND - no queue 'q' in vhost '/'``."""
        return f"{self.code.name} - {self.detail}"

    @property
    def wire_text(self) -> str:
        """The reply text as a close method carries it (a short string): RabbitMQ's
        ``rabbit_binary_generator`` keeps the first 252 bytes of a longer one and adds
        ``...``; a UTF-8 character cut in two is dropped."""
        text = self.reply_text
        raw = text.encode("utf-8")
        if len(raw) <= MAX_REPLY_TEXT:
            return text
        return raw[:MAX_REPLY_TEXT - 3].decode("utf-8", "ignore") + "..."


class ChannelError(AMQPError):
    """A soft error: the broker closes the channel."""


class ConnectionError_(AMQPError):  # noqa: N801 - the builtin name is taken
    """A hard error: the broker closes the connection."""


class ChannelCrash(ConnectionError_):
    """Input that crashes a RabbitMQ 3.10 channel process (malformed message properties):
    the connection closes with 541 and the bare text ``INTERNAL_ERROR``, no method ids.

    The detail is for the log, not the wire, as in RabbitMQ.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(ReplyCode.INTERNAL_ERROR, detail)

    @property
    def reply_text(self) -> str:
        return self.code.name

