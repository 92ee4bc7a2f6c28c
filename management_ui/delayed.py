"""What a delayed exchange has scheduled, and acting on it (beyond RabbitMQ's API).

``GET /api/exchanges/{vhost}/{name}/delayed`` lists the scheduled messages by due time
(``?count=``, default 100, at most 10,000: read from the store, never held in memory;
``?after={id}``: the page after that message);
``DELETE …/delayed`` cancels them all; ``DELETE …/delayed/{id}`` cancels one and ``POST
…/delayed/{id}/release`` releases one now, routed as it would have been when due. Listing
needs ``read`` on the exchange (it shows message contents), the others ``configure`` (as
deleting it would). 404 for an exchange that does not delay, or an id that is not (or no
longer) scheduled. ``messages_delayed`` on the exchange itself is the count, O(1).

The listing also says whether the caller may act on it (``may_configure``), so the
console offers Cancel and Release only to those whose request would be allowed.

Message shape: the queue peek's (``messages.message_json``) plus ``id`` (opaque, stable
while scheduled), ``due`` (ms since the epoch) and ``due_in_ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from leveret.broker.delayed import DelayedExchange, Delays
from leveret.broker.permissions import CONFIGURE, READ
from leveret.management_ui import messages, read, rights
from leveret.management_ui.router import Request, bad_request, json_response, not_found
from leveret.model.errors import ChannelError

DEFAULT_COUNT = 100
MAX_COUNT = 10_000


def _target(req: Request) -> tuple[Any, DelayedExchange]:
    vhost = read.vhost_of(req)
    dx = vhost.delays.by_name.get(req.params["name"])
    if dx is None:
        raise not_found()
    return vhost, dx


def _key(req: Request) -> int:
    try:
        return int(req.params["id"])
    except ValueError:
        raise not_found() from None


async def listing(req: Request) -> web.Response:
    vhost, dx = _target(req)
    access = rights.access_of(req, vhost.name)
    access.check(READ, "exchange", dx.exchange.name)
    try:
        count = int(req.query.get("count", DEFAULT_COUNT))
    except ValueError:
        raise bad_request("count must be an integer") from None
    if not 0 <= count <= MAX_COUNT:
        raise bad_request(f"count must be between 0 and {MAX_COUNT}")
    try:
        after = int(req.query.get("after", -1))
    except ValueError:
        raise bad_request("after must be a message id") from None
    now = vhost.delays.clock()
    out = []
    for i, scheduled in enumerate(vhost.delays.listing(dx, count, after)):
        item = messages.message_json(i, scheduled.message, False, "auto")
        item.pop("redelivered")
        item.update(id=str(scheduled.key), due=scheduled.due_ms,
                    due_in_ms=scheduled.due_ms - now)
        out.append(item)
    try:
        access.check(CONFIGURE, "exchange", dx.exchange.name)
        may_configure = True
    except ChannelError:
        may_configure = False
    return json_response({"messages_delayed": dx.count, "may_configure": may_configure,
                          "messages": out})


def _act(req: Request, action: Callable[[Delays, DelayedExchange], bool]) -> web.Response:
    """An operator's action on the schedule: ``configure`` on the exchange first (as deleting
    it would need), then ``action``; 204, or 404 when it found nothing to act on."""
    vhost, dx = _target(req)
    rights.check_configure(req, vhost, "exchange", dx.exchange.name)
    if not action(vhost.delays, dx):
        raise not_found()
    return web.Response(status=204)


async def cancel_all(req: Request) -> web.Response:
    return _act(req, lambda delays, dx: delays.cancel_all(dx) >= 0)


async def cancel(req: Request) -> web.Response:
    return _act(req, lambda delays, dx: delays.cancel(dx, _key(req)))


async def release(req: Request) -> web.Response:
    return _act(req, lambda delays, dx: delays.release_now(dx, _key(req)))
