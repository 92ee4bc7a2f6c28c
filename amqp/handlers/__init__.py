"""Handlers for the non-hot AMQP methods, one module per AMQP class.

Each module exposes ``HANDLERS: {method index: handler(channel, method)}``;
they are merged here into the one table ``Channel`` dispatches through.
"""

from __future__ import annotations

from collections.abc import Callable

from leveret.amqp.handlers import basic, confirm, exchange, queue, tx

# A handler takes the channel and the decoded method; typed loosely here because each
# module's handlers name their own method class.
Handler = Callable[..., None]

HANDLERS: dict[int, Handler] = {
    **exchange.HANDLERS,
    **queue.HANDLERS,
    **basic.HANDLERS,
    **tx.HANDLERS,
    **confirm.HANDLERS,
}
