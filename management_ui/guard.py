"""What an HTTP request must be before a handler sees it: same-origin, JSON, bounded.

Theory of operation
-------------------
The management API trusts Basic credentials, and a browser resends the ones it
cached for an origin with any request to it, whichever page started the request.
A page elsewhere can make such a request with an HTML form (``text/plain``,
urlencoded or multipart; no CORS preflight) but cannot set its ``Origin``
header, which browsers send with every cross-origin form and fetch. So two
middlewares refuse cross-site writes before routing and login:

* ``check_origin``: a POST, PUT, DELETE or PATCH whose ``Origin`` is neither
  the listener's own (scheme, Host) nor one of ``management_allowed_origins``
  is a 403. No ``Origin`` (rabbitmqadmin, curl, the console's same-origin
  GETs) passes. RabbitMQ 3.10 does not check ``Origin``.
* ``check_content_type``: a write with a body must say ``application/json``
  (any parameters, any case); ``/api/definitions`` also takes the UI's
  ``multipart/form-data`` upload. Anything else is a 415. RabbitMQ 3.10
  answers 415 on ``/api/definitions`` only (with an empty body) and takes any
  type elsewhere; Leveret refuses everywhere, with a JSON body.

Then bounds, as cowboy's under RabbitMQ's management listener:

* ``management_request_timeout`` (cowboy's ``request_timeout``, 5 s): a
  connection that has not sent a complete request's headers this long after
  it opened or after its previous response is closed. aiohttp's
  ``keepalive_timeout`` is that timer (armed at ``connection_made``, closing
  only while no request is being handled), so it also ends idle keep-alive
  connections; ``keepalive_timeout`` gives it to every listener.
* ``management_idle_timeout`` (cowboy's ``idle_timeout``, 60 s): while a
  request's body arrives, ``bound_body`` watches the bytes received; no new
  byte for a whole period and the handler is cancelled, the client gets a 408
  and the connection is closed (after one to two periods of silence). Like
  cowboy's, it bounds silence, not a body that trickles.
* A ``Content-Length`` over the app's ``client_max_size`` is refused before
  it is read, with RabbitMQ's 400 ``Exceeded HTTP request body size limit``;
  a chunked body that grows past it gets the same answer (``router.py``).

Each refusal is one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware
from yarl import URL

from leveret.config import Config
from leveret.management_ui.router import BODY_TOO_LARGE, error_response

log = logging.getLogger(__name__)

STATE_CHANGING = frozenset({"POST", "PUT", "DELETE", "PATCH"})
JSON = "application/json"
MULTIPART = "multipart/form-data"
# Routes that also take the UI's multipart upload (definitions.py).
MULTIPART_ROUTES = ("/api/definitions",)


def _origin_key(url: URL) -> tuple[str, str, int | None]:
    return (url.scheme.lower(), (url.host or "").lower(), url.port)


def own_origin(request: web.Request) -> tuple[str, str, int | None] | None:
    """The origin a page served by this listener has: its scheme and the request's Host."""
    try:
        return _origin_key(URL.build(scheme=request.scheme, authority=request.host))
    except ValueError:
        return None


def origin_allowed(request: web.Request, allowed: frozenset[tuple[str, str, int | None]]
                   ) -> bool:
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return True
    try:
        key = _origin_key(URL(origin.strip()))
    except ValueError:
        return False
    return bool(key[1]) and (key == own_origin(request) or key in allowed)


def content_type_accepted(request: web.Request) -> bool:
    """A write may omit Content-Type only without a body; when given it must be JSON
    (or the definitions upload's multipart)."""
    if hdrs.CONTENT_TYPE not in request.headers:
        return not request.body_exists
    kind = request.content_type.lower()  # aiohttp drops the parameters
    if kind == JSON:
        return True
    return kind == MULTIPART and request.rel_url.raw_path.rstrip("/").startswith(
        MULTIPART_ROUTES)


def middlewares(config: Config) -> list[Middleware]:
    """The management API's guard, outermost first."""
    allowed = frozenset(_origin_key(URL(o)) for o in config.management_allowed_origins)
    idle = float(config.management_idle_timeout)

    @web.middleware
    async def check_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in STATE_CHANGING and not origin_allowed(request, allowed):
            origin = request.headers.get(hdrs.ORIGIN, "")
            log.warning("HTTP %s %s refused: cross-origin request from %r", request.method,
                        request.rel_url.raw_path, origin)
            return error_response(403, "forbidden",
                                  f"cross-origin request refused: Origin {origin!r} is not "
                                  "this listener's")
        return await handler(request)

    @web.middleware
    async def check_content_type(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in STATE_CHANGING and not content_type_accepted(request):
            given = request.headers.get(hdrs.CONTENT_TYPE, "none")
            log.warning("HTTP %s %s refused: Content-Type %r", request.method,
                        request.rel_url.raw_path, given)
            return error_response(415, "Unsupported Media Type",
                                  f"Content-Type {given!r} is not accepted: send {JSON}")
        return await handler(request)

    @web.middleware
    async def check_body_size(request: web.Request, handler: Handler) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > request.client_max_size:
            log.warning("HTTP %s %s refused: a body of %d bytes (limit %d)", request.method,
                        request.rel_url.raw_path, length, request.client_max_size)
            response = error_response(400, "bad_request", BODY_TOO_LARGE)
            response.force_close()
            return response
        return await handler(request)

    @web.middleware
    async def bound_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.body_exists or request.content.is_eof():
            return await handler(request)
        return await _watch_body(request, handler, idle)

    return [check_origin, check_content_type, check_body_size, bound_body]


async def _watch_body(request: web.Request, handler: Handler, idle: float
                      ) -> web.StreamResponse:
    """Runs the handler while the body arrives; a body silent for a whole period of
    ``idle`` s ends it (so after between one and two periods of silence)."""
    seen = request.content.total_bytes
    task = asyncio.ensure_future(handler(request))
    try:
        while not request.content.is_eof():
            done, _ = await asyncio.wait({task}, timeout=idle)
            if done:
                break
            received = request.content.total_bytes
            if received == seen and not request.content.is_eof():
                task.cancel()
                log.warning("HTTP %s %s: no body byte for %g s after %d bytes; closing",
                            request.method, request.rel_url.raw_path, idle, received)
                response = error_response(408, "request_timeout",
                                          "the request body stopped arriving")
                response.force_close()
                await response.prepare(request)
                await response.write_eof()
                request.protocol.force_close()  # no lingering read of the rest
                return response
            seen = received
        return await task
    finally:
        if not task.done():
            task.cancel()


def keepalive_timeout(config: Config) -> float:
    """aiohttp's ``keepalive_timeout`` for every listener (management and Prometheus)."""
    return float(config.management_request_timeout)
