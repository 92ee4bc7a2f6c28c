"""Routes that look into a queue and act on its messages (beyond RabbitMQ's API).

``POST /api/queues/{vhost}/{name}/peek`` and ``…/search`` change nothing
(``queues/browse.py``); ``…/redrive``, ``…/move`` and ``DELETE …/messages``
act on a selection (``broker/queue_messages.py``). Every one needs ``read``
on the queue, as basic.get and queue.purge do in RabbitMQ; redrive and move
also need ``write`` on the exchange they publish to (checked by the model).
A refused permission answers as other AMQP refusals do here (401
``not_authorised``). As every write route's, their answer is sent once the
store has committed what they changed (``router.py``).

Message shape (RabbitMQ's get, with ``position`` instead of
``message_count``): ``position``, ``payload``, ``payload_encoding``,
``payload_bytes``, ``properties``, ``exchange``, ``routing_key``,
``redelivered``; unacked ones add ``consumer_tag``, ``channel`` and
``unacked_for_seconds``.

A stream (``queues/stream_browse.py``) is peeked and searched in its log: from
``offset`` (a stream offset, clamped to the log) or from ``timestamp`` (ms since
the epoch: the first chunk that arrived at or after it); each message's
``position`` is its offset, and it adds ``timestamp`` (its arrival, ms). Nothing
is consumed and no reader, credit or tracked offset changes; ``X-Scanned-Until``
is the offset a search continues from. Redrive, move and delete answer 400 on a
stream: it takes no message out of its log (as queue.purge is refused, 540).
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from leveret.broker import queue_messages
from leveret.broker.api import Queue, Stream, browse, stream_browse
from leveret.broker.permissions import READ, Access
from leveret.broker.queue_messages import Outcome, Selection
from leveret.management_ui import basic, read, rights, views
from leveret.management_ui.router import ApiError, Request, bad_request, json_response, not_found
from leveret.model.message import Message

STATES = ("ready", "unacked")
ENCODINGS = ("auto", "base64")


def _int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool):
        raise bad_request(f"{key} must be an integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"{key} must be an integer") from None
    if number < 0:
        raise bad_request(f"{key} must not be negative")
    return number


def _choice(body: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = str(body.get(key, choices[0]))
    if value not in choices:
        raise bad_request(f"invalid {key} '{value}'")
    return value


def _target(req: Request, right: str = READ) -> tuple[Any, Queue, Access]:
    """The vhost, the queue (404) and the user's access, ``right`` on the queue checked."""
    vhost = read.vhost_of(req)
    queue = vhost.queues.get(req.params["name"])
    if queue is None:
        raise not_found()
    access = rights.access_of(req, vhost.name)
    access.check(right, "queue", queue.name)
    return vhost, queue, access


def _acted_on(req: Request) -> tuple[Any, Queue, Access]:
    """``_target`` for a route that takes messages out: not a stream's."""
    vhost, queue, access = _target(req)
    if isinstance(queue, Stream):
        raise bad_request(f"{queue.what} is a stream: its messages stay in its log")
    return vhost, queue, access


def message_json(position: int, message: Message, redelivered: bool,
                 encoding: str) -> dict[str, Any]:
    body = message.body
    payload, payload_encoding = "", "string"
    if encoding == "auto":
        try:
            payload = body.decode("utf-8")
        except UnicodeDecodeError:
            payload_encoding = "base64"
    else:
        payload_encoding = "base64"
    if payload_encoding == "base64":
        payload = base64.b64encode(body).decode()
    return {"position": position, "payload": payload, "payload_encoding": payload_encoding,
            "payload_bytes": len(body), "properties": basic.properties_json(message, keep=False),
            "exchange": message.exchange, "routing_key": message.routing_key,
            "redelivered": redelivered}


async def peek(req: Request) -> web.Response:
    """Ready or unacked messages of a queue, in queue order, without changing anything."""
    _, queue, _ = _target(req)
    body = await req.body()
    offset, count = _int(body, "offset", 0), _int(body, "count", 10)
    state = _choice(body, "state", STATES)
    encoding = _choice(body, "encoding", ENCODINGS)
    if isinstance(queue, Stream) and state == "ready":
        found = stream_browse.peek(queue, offset, _timestamp(body), count)
        return json_response([_stream_json(s, encoding) for s in found])
    if state == "unacked":
        return json_response(_unacked(req, queue, encoding)[offset:offset + count])
    return json_response([message_json(b.position, b.message, b.redelivered, encoding)
                          for b in browse.peek(queue, offset, count)])


def _unacked(req: Request, queue: Queue, encoding: str) -> list[dict[str, Any]]:
    """Every unacked delivery from ``queue`` on any channel, oldest (lowest seq) first."""
    held = []
    for conn in req.state.broker.connections:
        for channel in list(conn.channels.values()):
            now = channel.connection.clock()
            for entry, tag in channel.unacked_in(queue):
                since = entry.delivered_at
                held.append((entry.seq, entry, tag, views.channel_name(channel), now - since))
    held.sort(key=lambda h: h[0])
    out = []
    for position, (_, entry, tag, channel_name, age) in enumerate(held):
        item = message_json(position, entry.message, entry.delivery_count > 1, encoding)
        item.update(consumer_tag=tag, channel=channel_name,
                    unacked_for_seconds=round(max(age, 0.0), 3))
        out.append(item)
    return out


async def search(req: Request) -> web.Response:
    """Ready messages matching message_id, correlation_id, a header or a body substring."""
    _, queue, _ = _target(req)
    body = await req.body()
    header = body.get("header")
    if header is not None and (not isinstance(header, dict) or len(header) != 1):
        raise bad_request("header must be an object with one name")
    contains = body.get("body_contains")
    criteria = browse.Criteria(
        message_id=_opt_text(body, "message_id"),
        correlation_id=_opt_text(body, "correlation_id"),
        header=next(iter(header.items())) if header else None,
        body_contains=str(contains).encode() if contains is not None else None)
    encoding = _choice(body, "encoding", ENCODINGS)
    if isinstance(queue, Stream):
        logged, after = stream_browse.search(queue, criteria, _int(body, "limit", 100),
                                             _int(body, "offset", 0), _timestamp(body))
        return json_response([_stream_json(s, encoding) for s in logged], headers={
            "X-Scanned-Until": str(after), "X-Queue-Length": str(queue.message_count)})
    found, until = browse.search(queue, criteria, _int(body, "limit", 100),
                                 _int(body, "offset", 0))
    # Where the bounded scan stopped: the next request continues from there ("offset").
    headers = {"X-Scanned-Until": str(until), "X-Queue-Length": str(queue.message_count)}
    return json_response([message_json(b.position, b.message, b.redelivered, encoding)
                          for b in found], headers=headers)


def _timestamp(body: dict[str, Any]) -> int | None:
    """A stream browse's ``timestamp`` (ms since the epoch), if given."""
    return _int(body, "timestamp", 0) if body.get("timestamp") is not None else None


def _stream_json(logged: stream_browse.Logged, encoding: str) -> dict[str, Any]:
    """A stream's message: at its offset, with its arrival time."""
    item = message_json(logged.offset, logged.message, False, encoding)
    item["timestamp"] = logged.timestamp
    return item


def _opt_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return None if value is None else str(value)


def _selection(body: dict[str, Any]) -> Selection:
    positions = body.get("positions")
    if positions is not None:
        if (not isinstance(positions, list) or not positions
                or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                           for p in positions)):
            raise bad_request("positions must be a non-empty list of non-negative integers")
        return Selection(positions=tuple(positions))
    if "count" not in body:
        raise bad_request("[{key_missing,count}]")
    return Selection(count=_int(body, "count", 0))


def _answer(outcome: Outcome, key: str = "moved") -> web.Response:
    return json_response({key: outcome.moved, "skipped": [
        {"position": p, "reason": r} for p, r in outcome.skipped]})


async def redrive(req: Request) -> web.Response:
    """Republish dead-lettered messages to the exchange and routing keys of their x-death."""
    vhost, queue, access = _acted_on(req)
    selection = _selection(await req.body())
    return _answer(queue_messages.redrive(vhost, queue, access, selection))


async def move(req: Request) -> web.Response:
    """Move ready messages from the head to another queue of the vhost."""
    vhost, queue, access = _acted_on(req)
    body = await req.body()
    if "destination" not in body:
        raise bad_request("[{key_missing,destination}]")
    destination = vhost.queues.get(str(body["destination"]))
    if destination is None:  # the path's queue exists: say which one is missing
        raise ApiError(404, "not_found",
                       f"no queue '{body['destination']}' in vhost '{vhost.name}'")
    if destination is queue:
        raise bad_request("destination is the queue itself")
    outcome = queue_messages.move(vhost, queue, destination, access, _selection(body))
    return _answer(outcome)


async def delete_messages(req: Request) -> web.Response:
    """Delete selected ready messages, or the first count (not dead-lettered)."""
    _, queue, _ = _acted_on(req)
    outcome = queue_messages.delete(queue, _selection(await req.body()))
    return _answer(outcome, "deleted")
