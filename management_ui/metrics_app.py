"""The Prometheus listener's routes: ``/metrics``, ``/metrics/per-object`` and
``/metrics/detailed`` (``prometheus.py``, ``prometheus_detailed.py``).

A scrape must not stop the broker, though anyone who reaches the port may ask for one
(unauthenticated, as rabbitmq_prometheus, unless ``prometheus_authentication``). So:

* it is rendered in slices (``prometheus_slices.py``) and streamed: what a slice wrote
  goes out as one chunk of a chunked response, and the loop runs between slices;
  memory holds the queue rows and a chunk, not the whole text (100,000 queues: about
  100 MB of text, once whole in a string and again encoded);
* one scrape per endpoint renders at a time (``_Scrapes``): later ones wait their turn,
  so four scrapes in parallel cost four scrapes' CPU one after the other, in the slices
  of one, with one's memory;
* a scraper that stops reading holds that turn for at most ``WRITE_TIMEOUT`` per chunk,
  then its connection is closed.

``prometheus_authentication`` on: HTTP Basic against the broker's users, who must be
tagged ``monitoring`` or ``administrator``; anyone else gets a 401 with
``WWW-Authenticate``, a user without the tag too (with the management API's
``Not monitor user``), so that a scraper may retry with other credentials. RabbitMQ
3.10's endpoint has no such setting (always open; later RabbitMQs have one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.management_ui import auth, prometheus, prometheus_detailed
from leveret.management_ui.prometheus import CONTENT_TYPE, Writer
from leveret.management_ui.prometheus_slices import Render
from leveret.management_ui.router import error_response

if TYPE_CHECKING:  # service imports this module
    from leveret.management_ui.service import State

log = logging.getLogger(__name__)

# Text written before it is sent as a chunk (lines, about 60 bytes each: ~256 KB).
FLUSH_LINES = 4096
# Seconds one chunk may wait for a scraper that does not read before it is dropped.
WRITE_TIMEOUT = 60.0
REALM = 'Basic realm="RabbitMQ Prometheus"'
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def stream(http: web.Request, w: Writer, render: Render) -> web.StreamResponse:
    """Run ``render`` slice by slice, sending what it wrote in chunks of about
    ``FLUSH_LINES`` lines."""
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
    await response.prepare(http)
    try:
        for _ in render:
            if len(w.lines) >= FLUSH_LINES:
                await asyncio.wait_for(response.write(w.take()), WRITE_TIMEOUT)
            else:
                await asyncio.sleep(0)
        await asyncio.wait_for(response.write(w.take()), WRITE_TIMEOUT)
        await response.write_eof()
    except TimeoutError:
        log.warning("Prometheus scrape of %s from %s dropped: not read for %g s",
                    http.path, http.remote, WRITE_TIMEOUT)
        if http.transport is not None:
            http.transport.close()
    except ConnectionResetError:  # the scraper went away
        pass
    return response


class _Scrapes:
    """One scrape per endpoint renders at a time; the others wait in order."""

    def __init__(self) -> None:
        self._turns: dict[str, asyncio.Lock] = {}

    def turn(self, endpoint: str) -> asyncio.Lock:
        lock = self._turns.get(endpoint)
        if lock is None:
            lock = self._turns[endpoint] = asyncio.Lock()
        return lock


def _refused(state: State, request: web.Request) -> web.Response | None:
    """None when the scrape may go on (authentication off, or a monitoring user)."""
    if not state.config.prometheus_authentication:
        return None
    header = request.headers.get("Authorization")
    peer = request.transport.get_extra_info("peername") if request.transport else None
    try:
        credentials = auth.parse_basic(header)
    except auth.MalformedCredentials:
        return web.Response(status=400)  # as the management API
    found = auth.authenticate(state.broker, *credentials) if credentials else None
    challenge = {"WWW-Authenticate": REALM}
    if found is None:
        state.auth_attempts(False)
        log.info("Prometheus scrape of %s from %s refused: %s", request.path, request.remote,
                 "login failed" if header else "no credentials")
        if header is None:
            return web.Response(status=401, headers=challenge)
        return error_response(401, auth.NOT_AUTHORIZED, auth.LOGIN_FAILED, challenge)
    state.auth_attempts(True)
    name, tags = found
    if name in state.config.loopback_users and not auth.is_loopback(peer):
        reason = auth.LOOPBACK_ONLY
    elif not auth.allowed(tags, auth.MONITORING):
        reason = auth.REFUSED_TEXT[auth.MONITORING]
    else:
        return None
    log.info("Prometheus scrape of %s by %r refused: %s", request.path, name, reason)
    return error_response(401, auth.NOT_AUTHORISED, reason, challenge)


def build_app(state: State) -> web.Application:
    scrapes = _Scrapes()

    def endpoint(path: str, render: Callable[[web.Request, Writer], Render],
                 prefix: str = "rabbitmq_") -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            refused = _refused(state, request)
            if refused is not None:
                return refused
            async with scrapes.turn(path):
                w = Writer(prefix)
                return await stream(request, w, render(request, w))
        return handle

    def detailed(request: web.Request, w: Writer) -> Render:
        families = set(request.query.getall("family", []))
        vhosts = set(request.query.getall("vhost", [])) or None
        return prometheus_detailed.render(w, state, families, vhosts)

    app = web.Application()
    app.router.add_get("/metrics", endpoint(
        "/metrics", lambda _, w: prometheus.render_metrics(w, state)))
    app.router.add_get("/metrics/per-object", endpoint(
        "/metrics/per-object", lambda _, w: prometheus.render_per_object(w, state)))
    app.router.add_get("/metrics/detailed", endpoint(
        "/metrics/detailed", detailed, prometheus_detailed.PREFIX))
    return app
