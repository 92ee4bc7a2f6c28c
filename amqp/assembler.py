"""Content assembly: ``basic.publish`` → content header → body frames → one message.

The shape of RabbitMQ's ``rabbit_command_assembler``: a small state machine fed
one frame at a time, with no I/O and no knowledge of the broker. Its states:

==================  ==============================  =================================
state               frame                           next
==================  ==============================  =================================
``IDLE``            method (not publish)            ``IDLE`` (the channel dispatches it)
``IDLE``            method ``basic.publish``        ``HEADER`` (:meth:`start`)
``HEADER``          content header, size 0          ``IDLE``, content complete
``HEADER``          content header, size n > 0      ``BODY``
``BODY``            body, total < n                 ``BODY``
``BODY``            body, total == n                ``IDLE``, content complete
anything else                                       505 UNEXPECTED_FRAME / 501 FRAME_ERROR
==================  ==============================  =================================

The error texts are RabbitMQ's. A content larger than ``max_message_size`` is a
channel error (406) raised at the header, before any body is buffered. The
state lives in a few slots of one object reused for every message, because
this is the hot path: one publish is three frames.
"""

from __future__ import annotations

import struct
from typing import Final

from leveret.amqp import fastpath
from leveret.model.errors import (
    FRAME_ERROR,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    ChannelError,
    ConnectionError_,
)

IDLE: Final = 0
HEADER: Final = 1
BODY: Final = 2

_BASIC = 60
_PUBLISH_METHOD = (60, 40)
# A content header's class id, weight and body size; its raw properties follow.
_HEADER_HEAD = struct.Struct(">HHQ")
_HEADER_PREFIX = _HEADER_HEAD.size

# (exchange, routing_key, mandatory) of the publish whose content is being assembled.
Publish = tuple[str, str, bool]
# What a complete content yields: the publish, the raw properties and the body.
Content = tuple[Publish, bytes, bytes]


class ContentAssembler:
    __slots__ = ("_body_len", "_body_size", "_parts", "_props", "_publish", "state")

    def __init__(self) -> None:
        self.state = IDLE
        self._publish: Publish = ("", "", False)
        self._props = b""
        self._body_size = 0
        self._parts: list[bytes] = []
        self._body_len = 0

    def check_method(self) -> None:
        """A method frame arrived: only legal between contents."""
        if self.state != IDLE:
            part = "header" if self.state == HEADER else "body"
            raise ConnectionError_(
                UNEXPECTED_FRAME,
                f"expected content {part} for class 60, got non content {part} frame instead",
                _PUBLISH_METHOD,  # RabbitMQ names the publish whose content was interrupted
            )

    def start(self, publish: Publish) -> None:
        """``basic.publish`` was accepted: its content header comes next."""
        self._publish = publish
        self.state = HEADER

    def header(self, payload: bytes, max_size: int) -> Content | None:
        """A content header: the content if its body is empty, else None (bodies follow)."""
        if self.state != HEADER:
            raise ConnectionError_(
                UNEXPECTED_FRAME, "expected method frame, got non method frame instead")
        body_size, props = self._check_header(payload, max_size)
        if body_size == 0:
            self.state = IDLE
            return self._publish, props, b""
        self.state = BODY
        self._props = props
        self._body_size = body_size
        return None

    def whole(self, publish: Publish, header: bytes, body: bytes, max_size: int) -> Content:
        """A publish whose header and one body frame came with it (``frames.FRAME_PUBLISH``,
        which checked that the body is the announced size): the content, from ``IDLE`` to
        ``IDLE`` with the checks and errors of ``start``, ``header`` and ``body``.
        A well-formed basic content is read here without the general decoder's calls;
        anything else goes through them, for their errors."""
        if len(header) >= _HEADER_PREFIX + 2:  # the prefix and a property flag word
            class_id, _weight, body_size = _HEADER_HEAD.unpack_from(header)
            if class_id == _BASIC and body_size <= max_size:
                return publish, header[_HEADER_PREFIX:], body
        return publish, self._check_header(header, max_size)[1], body

    def _check_header(self, payload: bytes, max_size: int) -> tuple[int, bytes]:
        """A content header's body size and raw properties, once the header may come."""
        try:
            class_id, body_size, props = fastpath.decode_content_header(payload)
        except ValueError as exc:
            raise ConnectionError_(FRAME_ERROR, f"malformed content header: {exc}") from exc
        if class_id != _BASIC:
            raise ConnectionError_(UNEXPECTED_FRAME,
                                   f"content header for class {class_id} after basic.publish")
        if body_size > max_size:
            self.reset()
            raise ChannelError(
                PRECONDITION_FAILED,
                f"message size {body_size} is larger than configured max size {max_size}",
                _PUBLISH_METHOD,
            )
        return body_size, props

    def body(self, payload: bytes) -> Content | None:
        """A body frame: the content once the announced size is reached, else None."""
        if self.state != BODY:
            raise ConnectionError_(
                UNEXPECTED_FRAME,
                "expected content header for class 60, got non content header frame instead"
                if self.state == HEADER else "expected method frame, got non method frame instead",
            )
        size = self._body_len + len(payload)
        if size > self._body_size:
            raise ConnectionError_(
                FRAME_ERROR, f"content body exceeds the announced size {self._body_size}")
        if size < self._body_size:
            self._parts.append(payload)
            self._body_len = size
            return None
        if self._parts:
            self._parts.append(payload)
            payload = b"".join(self._parts)
            self._parts = []
            self._body_len = 0
        self.state = IDLE
        return self._publish, self._props, payload

    def reset(self) -> None:
        """Drop a content in progress (the channel closed or refused it)."""
        self.state = IDLE
        self._parts = []
        self._body_len = 0
