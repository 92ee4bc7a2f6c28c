"""Handlers for the non-hot AMQP methods, one module per AMQP class.

Each module exposes ``HANDLERS: {method index: handler(channel, method)}``;
they are merged here into the one table ``Channel`` dispatches through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leveret.amqp.handlers import basic, confirm, exchange, queue, tx

Handler = Callable[[Any, Any], None]

HANDLERS: dict[int, Handler] = {
    **exchange.HANDLERS,
    **queue.HANDLERS,
    **basic.HANDLERS,
    **tx.HANDLERS,
    **confirm.HANDLERS,
}
